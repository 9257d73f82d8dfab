"""OpenAI Responses (`POST /v1/responses`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.adapters.openai_errors import render_openai_error
from turngate.adapters.openai_responses import foreign, request, response
from turngate.errors import TurngateError
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import BLOCK_KINDS, ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn

CAPABILITIES = Capabilities(
    api="openai_responses",
    roles=frozenset({"system", "developer", "user", "assistant", "tool"}),
    # Reasoning, hosted-tool and compaction items are carried only when bound to this API
    # (normalize.fit_to checks the provider); retrieved snippets have no Responses form.
    block_kinds=BLOCK_KINDS - {"snippet"},
    # An output item may come anywhere after its call (parallel calls, reasoning and
    # messages in between); consecutive assistant-side items form one turn.
    result_window="anywhere_after",
    merges_runs=True,
    # Observed: "Invalid 'input[2].call_id': string too long. Expected a string with
    # maximum length 64".
    max_call_id_length=64,
    extra_rules=(
        "openai_string_too_long",
        "responses_reasoning_unbound",
        "responses_output_type_mismatch",
        "responses_duplicate_item",
        "responses_item_id_prefix",
        "responses_item_not_stored",
        "responses_part_type",
    ),
    request_rules=(
        "responses_tool_name_pattern",
        "responses_tool_schemas",
        "responses_tool_choice",
        "responses_tool_shape",
        "openai_reasoning_settings",
        "openai_reasoning_effort",
        "openai_max_tokens",
        "responses_chat_parameter",
        "responses_history_source",
        "openai_json_mode",
        "openai_format_name",
        "openai_format_shape",
    ),
    # A stored prompt (``prompt: {id, version}``) carries its own model, instructions and
    # tools, as the Assistants it replaces did.
    tools_held_by=("prompt",),
    # Tools OpenAI defines and the application runs (computer_call, local_shell_call,
    # apply_patch_call items). ``shell`` is left out: it may run in OpenAI's container.
    client_tool_types=("computer", "local_shell", "apply_patch"),
)


class OpenAIResponsesAdapter:
    api: ApiName = "openai_responses"
    version = "1"
    capabilities = CAPABILITIES

    def parse_request(
        self, body: Mapping[str, Any], route: RouteInfo | None = None
    ) -> MessageSequence:
        return request.parse_request(body, route)

    def render_request(self, seq: MessageSequence) -> dict[str, Any]:
        if seq.api != self.api:
            return foreign.render_foreign(seq, CAPABILITIES)
        return request.render_request(seq)

    def render_error(self, error: TurngateError) -> ErrorResponse:
        return render_openai_error(error)

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        return response.parse_response(body)


ADAPTER = OpenAIResponsesAdapter()
