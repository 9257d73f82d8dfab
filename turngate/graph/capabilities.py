"""What one wire API can carry and how it places tool results: data, not branches.

Each adapter publishes one ``Capabilities``; the validator and the renderers read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from turngate.graph.model import ApiName, Role

ResultWindow = Literal[
    # OpenAI Chat: one `tool` message per call, directly after the assistant message.
    "tool_messages",
    # Anthropic: all results in the next (user) turn, before any other block.
    "next_turn_leading",
    # Gemini: all responses in the very next content.
    "next_turn",
    # OpenAI Responses: an output item anywhere after its call.
    "anywhere_after",
]


@dataclass(frozen=True)
class Capabilities:
    api: ApiName
    roles: frozenset[Role]
    block_kinds: frozenset[str]
    result_window: ResultWindow
    # Consecutive messages of one role form one turn (the provider merges them).
    merges_runs: bool = False
    max_call_id_length: int | None = None
    call_id_pattern: str | None = None
    # Names of API-specific rules (graph/rules) the validator also runs.
    extra_rules: tuple[str, ...] = ()
    # API-specific rules on the request's settings (its envelope), not its messages: they
    # run on an outlined request too, without building its blocks.
    request_rules: tuple[str, ...] = ()
    # Request fields naming an object the provider keeps that may declare tools (a Gemini
    # cache, a stored Responses prompt): with one set, a call to a tool the request does not
    # show is checked as one JSON object, not refused as undeclared.
    tools_held_by: tuple[str, ...] = ()
