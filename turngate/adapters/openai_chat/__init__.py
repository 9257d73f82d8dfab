"""OpenAI Chat Completions (`POST /v1/chat/completions`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.adapters.openai_chat import foreign, request, response
from turngate.adapters.openai_errors import render_openai_error
from turngate.errors import TurngateError
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import BLOCK_KINDS, ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn

CAPABILITIES = Capabilities(
    api="openai_chat",
    roles=frozenset({"system", "developer", "user", "assistant", "tool"}),
    block_kinds=BLOCK_KINDS - {"reasoning", "snippet", "compression", "server_tool"},
    result_window="tool_messages",
    merges_runs=False,
    # OpenAI: "Invalid 'messages[4].tool_calls[0].id': string too long. Expected a string with
    # maximum length 64". It was 40 until early 2026; 40 would refuse ids OpenAI now takes
    # (a Responses `fc_` id of 53 characters carried into Chat).
    max_call_id_length=64,
    extra_rules=(
        "openai_string_too_long",
        "chat_empty_array",
        "chat_content_required",
        "chat_empty_call_name",
        "chat_call_type",
        "chat_image_outside_user",
        "chat_name_pattern",
        "chat_array_too_long",
    ),
    outline_clears_extra_rules=True,
    request_rules=(
        "chat_legacy_functions",
        "chat_stream_choices",
        "chat_tool_name_pattern",
        "chat_tools_too_many",
        "chat_tool_schemas",
        "chat_tool_choice",
        "chat_tool_shape",
        "openai_reasoning_settings",
        "openai_reasoning_effort",
        "openai_max_tokens",
        "chat_stream_options",
        "openai_json_mode",
        "openai_format_name",
        "openai_format_shape",
    ),
)


class OpenAIChatAdapter:
    api: ApiName = "openai_chat"
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


ADAPTER = OpenAIChatAdapter()
