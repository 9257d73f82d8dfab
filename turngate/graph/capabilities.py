"""What one wire API can carry and how it places tool results: data, not branches.

Each adapter publishes one ``Capabilities``; the validator and the renderers read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from turngate.graph.model import ApiName, Role, ToolDef

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
    # A call id may not be used again by a later turn (Anthropic's tool_use ids): the
    # validator refuses it (duplicate_call_id), and a foreign graph rendered here gets fresh
    # ids where its source allowed it (a Gemini history's synthesized ids, a backend's call_0).
    call_ids_unique: bool = False
    # Names of API-specific rules (graph/rules) the validator also runs.
    extra_rules: tuple[str, ...] = ()
    # The extra rules refuse only shapes the adapter never outlines, so a request of plain
    # messages (graph/outline.py) is settled without building its blocks.
    outline_clears_extra_rules: bool = False
    # API-specific rules on the request's settings (its envelope), not its messages: they
    # run on an outlined request too, without building its blocks.
    request_rules: tuple[str, ...] = ()
    # Request fields naming an object the provider keeps that may declare tools (a Gemini
    # cache, a stored Responses prompt): with one set, a call to a tool the request does not
    # show is checked as one JSON object, not refused as undeclared.
    tools_held_by: tuple[str, ...] = ()
    # The part of the history the provider holds (``MessageSequence.history`` "partial")
    # holds the toolset too: an Anthropic thread keeps the tools it was created with, and a
    # continue sends none. Its calls to tools the request does not show are checked so too.
    history_holds_tools: bool = False
    # Prefixes of the kind (``hosted_kind``) of a hosted tool that the application runs,
    # though the provider defines it (Anthropic's ``bash_20250124``, Gemini's
    # ``computerUse``): its calls are the client's, as a function's, checked as one JSON
    # object against no schema turngate holds.
    client_tool_types: tuple[str, ...] = ()
    # Prefixes of the kind of a hosted tool whose calls carry names of the provider's
    # choosing, declared nowhere in the request (Gemini ``computerUse``: ``click_at``,
    # ``type_text_at``...; an Anthropic toolset's members: ``navigate``...).
    predefined_calls_by: tuple[str, ...] = ()

    def runs_on_client(self, tool: ToolDef) -> bool:
        """Whether ``tool`` is a provider-defined tool that the application executes."""
        kind = hosted_kind(tool)
        return kind is not None and kind.startswith(self.client_tool_types)

    def brings_predefined_calls(self, tool: ToolDef) -> bool:
        kind = hosted_kind(tool)
        return kind is not None and kind.startswith(self.predefined_calls_by)


def hosted_kind(tool: ToolDef) -> str | None:
    """A hosted tool's kind: its native ``type`` (OpenAI, Anthropic), else its name (Gemini
    names a tool object by its one key, ``{"computerUse": {...}}``)."""
    if tool.tool_type != "hosted":
        return None
    native = tool.attrs.get("$native")
    kind = native.get("type") if isinstance(native, dict) else None
    return kind if isinstance(kind, str) else tool.name
