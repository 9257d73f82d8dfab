"""The calls a chained request must answer: those of the provider-held reply it names.

A request chained to a reply the provider keeps (a Responses ``previous_response_id``, an
Anthropic Message Threads continue) shows none of that reply, yet every client-side call the
reply made still needs its result, in this request: the provider refuses it otherwise
("No tool output found for function call …", openai-agents-python #1061). Pure: the proxy
knows a reply's calls when it committed it (proxy/replies.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turngate.graph.model import MessageSequence, ToolResultBlock
from turngate.graph.turn import AssistantTurn
from turngate.graph.validator import MISSING_RESULT, Violation


@dataclass(frozen=True)
class OpenCall:
    """A client-side call of a reply, waiting for its result."""

    call_id: str
    name: str


def open_calls(turn: AssistantTurn) -> tuple[OpenCall, ...]:
    return tuple(OpenCall(call.call_id, call.name) for call in turn.tool_calls)


def unanswered(seq: MessageSequence, reply: str, calls: Sequence[OpenCall]) -> list[Violation]:
    """A ``missing_result`` violation for each of ``calls`` (the reply ``seq`` is chained
    to) that no result in ``seq`` answers."""
    if not calls:
        return []
    answered = {block.call_id for _, block in seq.blocks() if isinstance(block, ToolResultBlock)}
    return [
        Violation(
            rule=MISSING_RESULT,
            message=(
                f"tool call '{call.call_id}' ({call.name}) of '{reply}', the reply this request "
                "continues, has no result in it: the provider holds the call and refuses to "
                "go on without its result"
            ),
            call_id=call.call_id,
        )
        for call in calls
        if call.call_id not in answered
    ]
