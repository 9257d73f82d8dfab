"""Google Gemini ``generateContent`` / ``streamGenerateContent`` (v1beta, v1; Vertex bodies)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.adapters.gemini import request, response
from turngate.adapters.gemini.errors import render_gemini_error
from turngate.adapters.gemini.foreign import to_gemini_graph
from turngate.errors import TurngateError
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn

CAPABILITIES = Capabilities(
    api="gemini",
    roles=frozenset({"system", "user", "assistant"}),
    block_kinds=frozenset(
        {"text", "image", "audio", "file", "reasoning", "tool_call", "tool_result", "server_tool"}
    ),
    result_window="next_turn",
    merges_runs=False,
    extra_rules=(
        "gemini_call_turn_position",
        "gemini_response_turn_position",
        "gemini_response_count",
        "gemini_thought_signature",
        "gemini_empty_parts",
        "gemini_empty_contents",
        "gemini_response_object",
    ),
    request_rules=(
        "gemini_stream_candidates",
        "gemini_tool_name_pattern",
        "gemini_function_count",
        "gemini_function_names_unique",
        "gemini_tool_schemas",
        "gemini_schema_fields",
        "gemini_thinking_config",
        "gemini_tool_combination",
        "gemini_penalty",
        "gemini_tool_shape",
        "gemini_function_config",
        "gemini_max_output",
        "gemini_misplaced_fields",
    ),
    tools_held_by=("cachedContent", "cached_content"),
    # Computer use: the application runs the UI actions the model calls by its own names.
    client_tool_types=("computerUse", "computer_use"),
    predefined_calls_by=("computerUse", "computer_use"),
)


class GeminiAdapter:
    api: ApiName = "gemini"
    version = "1"
    capabilities = CAPABILITIES

    def parse_request(
        self, body: Mapping[str, Any], route: RouteInfo | None = None
    ) -> MessageSequence:
        return request.parse_request(body, route)

    def render_request(self, seq: MessageSequence) -> dict[str, Any]:
        if seq.api != self.api:
            seq = to_gemini_graph(seq, CAPABILITIES)
        return request.render_request(seq)

    def fit(self, seq: MessageSequence) -> MessageSequence:
        """``seq`` as the Gemini graph ``render_request`` sends, with its normalizations."""
        return seq if seq.api == self.api else to_gemini_graph(seq, CAPABILITIES)

    def render_error(self, error: TurngateError) -> ErrorResponse:
        return render_gemini_error(error)

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        return response.parse_response(body)


ADAPTER = GeminiAdapter()
