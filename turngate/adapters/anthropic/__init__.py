"""Anthropic Messages (`POST /v1/messages`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.anthropic import foreign, request, response
from turngate.adapters.anthropic.errors import render_anthropic_error
from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.errors import TurngateError
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import BLOCK_KINDS, ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn

CAPABILITIES = Capabilities(
    api="anthropic",
    roles=frozenset({"system", "user", "assistant", "tool"}),
    # No audio input and no refusal content block (a refusal is a stop reason).
    block_kinds=BLOCK_KINDS - {"audio", "refusal"},
    result_window="next_turn_leading",
    merges_runs=True,
    call_id_pattern=r"^[a-zA-Z0-9_-]+$",
    call_ids_unique=True,
    history_holds_tools=True,
    extra_rules=(
        "anthropic_first_message_user",
        "anthropic_system_message",
        "anthropic_empty_content",
        "anthropic_prefill_unsupported",
        "anthropic_server_tool_result",
        "anthropic_server_tool_id",
        "anthropic_thinking_first",
        "anthropic_thinking_signature",
        "anthropic_thinking_disabled",
        "anthropic_thinking_order",
        "anthropic_thinking_final",
        "anthropic_thinking_forced_tool",
        "anthropic_thinking_mode",
        "anthropic_thinking_budget",
        "anthropic_sampling",
        "anthropic_max_tokens",
        "anthropic_tool_choice",
        "anthropic_cache_breakpoints",
        "anthropic_cache_ttl_order",
        "anthropic_tool_names_unique",
        "anthropic_tool_name_pattern",
        "anthropic_tool_schema",
        "anthropic_tool_shape",
        "anthropic_images",
        "anthropic_citations",
    ),
    # Anthropic-defined client tools, called with tool_use and run by the application;
    # its server tools (web_search_*, web_fetch_*, code_execution_*, tool_search_*) are not.
    client_tool_types=("bash_", "text_editor_", "computer_", "memory_", "browser_toolset_"),
    # A toolset (one ``tools[]`` entry, no name) declares a family whose members the model
    # calls by their own names, with ``toolset_name`` on the tool_use.
    predefined_calls_by=("browser_toolset_", "computer_toolset_"),
)


class AnthropicAdapter:
    api: ApiName = "anthropic"
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
        return render_anthropic_error(error)

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        return response.parse_response(body)


ADAPTER = AnthropicAdapter()
