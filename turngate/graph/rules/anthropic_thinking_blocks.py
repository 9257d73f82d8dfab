"""Anthropic: where thinking blocks may stand in a conversation.

    anthropic_thinking_first       thinking enabled: an open tool loop's assistant turn starts with
                                   thinking or redacted_thinking
    anthropic_thinking_signature   thinking on: a thinking block before a tool_use has a signature
    anthropic_thinking_disabled    thinking off: the open tool loop (or a prefill) holds no thinking
    anthropic_thinking_order       an assistant message holding thinking starts with thinking
    anthropic_thinking_final       an assistant message the conversation moved on from does not
                                   end with thinking (a reasoning-only turn)

A "tool loop" is what Anthropic calls one assistant turn: the assistant messages after the
last user message that carries no tool_result, with the result messages between them.
"""

from __future__ import annotations

from itertools import pairwise

from turngate.graph.model import (
    Message,
    MessageSequence,
    ReasoningBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.rules import rule
from turngate.graph.rules.anthropic import conversation_of, entries_of, thinking_type
from turngate.graph.validator import Violation, violation

THINKING_FIRST = "anthropic_thinking_first"
THINKING_SIGNATURE = "anthropic_thinking_signature"
THINKING_DISABLED = "anthropic_thinking_disabled"
THINKING_ORDER = "anthropic_thinking_order"
THINKING_FINAL = "anthropic_thinking_final"


def _open_loop(seq: MessageSequence) -> list[Message]:
    """The messages after the last user message that carries no tool_result: the assistant
    turn the request goes on with, and its results."""
    conversation = [m for m in conversation_of(seq) if m.role in ("user", "assistant")]
    start = 0
    for position, message in enumerate(conversation):
        if message.role == "user" and not any(
            isinstance(b, ToolResultBlock) for b in message.blocks
        ):
            start = position + 1
    return conversation[start:]


@rule(THINKING_FIRST)
def thinking_first(seq: MessageSequence) -> list[Violation]:
    """With ``thinking: enabled`` the API refuses an open tool loop whose assistant turn does
    not start with thinking ("a final assistant message must start with a thinking block").
    Adaptive thinking may skip thinking, so it is not checked."""
    if thinking_type(seq) != "enabled":
        return []
    loop = _open_loop(seq)
    if not loop or loop[-1].role != "user":
        return []
    if not any(isinstance(b, ToolCallBlock) for m in loop for b in m.blocks):
        return []
    opening: list[Message] = []
    for message in loop:
        if message.role != "assistant":
            break
        opening.append(message)
    first = next(((m, b) for m in opening for b in m.blocks), None)
    if first is not None and isinstance(first[1], ReasoningBlock):
        return []
    message, block = first if first is not None else (loop[0], None)
    found = block.kind if block is not None else "nothing"
    return [
        violation(
            THINKING_FIRST,
            "thinking is enabled and the tool loop is still open, so its assistant turn must "
            f"start with a thinking or redacted_thinking block (found {found})",
            message,
            block,
        )
    ]


@rule(THINKING_SIGNATURE)
def thinking_signature(seq: MessageSequence) -> list[Violation]:
    if thinking_type(seq) not in ("enabled", "adaptive"):
        return []
    out: list[Violation] = []
    for message in seq.messages:
        if message.role != "assistant":
            continue
        for position, block in enumerate(message.blocks):
            if not isinstance(block, ReasoningBlock) or block.redacted or block.signature:
                continue
            call = next(
                (b for b in message.blocks[position + 1 :] if isinstance(b, ToolCallBlock)), None
            )
            if call is not None:
                out.append(
                    violation(
                        THINKING_SIGNATURE,
                        f"thinking block '{block.id}' precedes tool call '{call.call_id}' but "
                        "has no signature; it must be sent back exactly as received",
                        message,
                        block,
                        call_id=call.call_id,
                    )
                )
    return out


@rule(THINKING_DISABLED)
def thinking_disabled(seq: MessageSequence) -> list[Violation]:
    """Thinking off (``thinking`` absent or disabled): the assistant turn the request goes on
    with holds no thinking block; earlier, finished turns may keep theirs."""
    if thinking_type(seq) not in (None, "disabled"):
        return []
    found = next(
        (
            (m, b)
            for m in _open_loop(seq)
            if m.role == "assistant"
            for b in m.blocks
            if isinstance(b, ReasoningBlock)
        ),
        None,
    )
    if found is None:
        return []
    message, block = found
    return [
        violation(
            THINKING_DISABLED,
            f"thinking is off and the assistant turn the request goes on with holds a {block.kind} "
            'block; Anthropic: "When thinking is disabled, an `assistant` message in the final '
            'position cannot contain `thinking`." (enable thinking, or drop the block)',
            message,
            block,
        )
    ]


@rule(THINKING_ORDER)
def thinking_order(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for entry in entries_of(seq):
        if entry[0].role != "assistant":
            continue
        blocks = [(m, b) for m in entry for b in m.blocks]
        if not any(isinstance(b, ReasoningBlock) for _m, b in blocks):
            continue
        message, first = blocks[0]
        if isinstance(first, ReasoningBlock):
            continue
        out.append(
            violation(
                THINKING_ORDER,
                f"assistant message holds thinking but starts with {first.kind}; Anthropic: "
                '"If an assistant message contains any thinking blocks, the first block must '
                'be thinking or redacted_thinking." (send its blocks back in their order)',
                message,
                first,
            )
        )
    return out


@rule(THINKING_FINAL)
def thinking_final(seq: MessageSequence) -> list[Violation]:
    """A reasoning-only turn kept in the history (thinking, then no text or call) is refused
    on every later request: "messages.17: The final block in an assistant message cannot be
    `thinking`." (forgecode #3071, hermes-agent PR #16921). The request's last message, a
    prefill, is left to the thinking-off rule and to Anthropic."""
    out: list[Violation] = []
    entries = entries_of(seq)
    for entry, following in pairwise(entries):
        # Another assistant message right after it is merged into the same turn.
        if entry[0].role != "assistant" or following[0].role == "assistant":
            continue
        message = entry[-1]
        last = message.blocks[-1] if message.blocks else None
        if not isinstance(last, ReasoningBlock):
            continue
        native = "redacted_thinking" if last.redacted else "thinking"
        out.append(
            violation(
                THINKING_FINAL,
                f"assistant message ends with {native}, with no text or tool call after it; "
                'Anthropic: "The final block in an assistant message cannot be `thinking`." '
                "(drop the reasoning-only turn, or keep the answer that followed its thinking)",
                message,
                last,
            )
        )
    return out
