"""Trust labels from the route policy, and the role-forgery action.

Every block gets a label from where it came from: system and developer text are trusted;
user text, assistant output, tool results, retrieved snippets and compression artifacts are
untrusted unless the policy says otherwise. Relabelling returns a new MessageSequence and
never moves a block: its role, position and digest stay as they were (trust is not part of a
block's digest).

Role-forgery text (``assistant:``, ``Human:``, chat-template tokens) inside an untrusted
block is a finding of the validator; the policy's ``role_forgery`` action decides whether it
is ignored (``allow``), reported in a response header (``flag``) or refused (``refuse``).
"""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeVar, assert_never

from turngate.graph.capabilities import Capabilities
from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    CompressionBlock,
    FileBlock,
    ImageBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    Trust,
    UnknownBlock,
)
from turngate.graph.validator import ForgeryPolicy, Verdict, validate
from turngate.policies.config import TrustPolicy

TrustSource = Literal[
    "system", "developer", "user", "assistant", "tool_result", "snippet", "compression"
]
FINDINGS_HEADER = "Turngate-Findings"
_B = TypeVar("_B", bound=AnyBlock)


def source_of(block: AnyBlock) -> TrustSource:
    """Where a block's content came from, as the trust policy names it."""
    if isinstance(block, ToolResultBlock):
        return "tool_result"
    if isinstance(block, SnippetBlock):
        return "snippet"
    if isinstance(block, CompressionBlock):
        return "compression"
    if isinstance(
        block,
        TextBlock
        | ImageBlock
        | AudioBlock
        | FileBlock
        | ReasoningBlock
        | RefusalBlock
        | ToolCallBlock
        | ServerToolBlock
        | UnknownBlock,
    ):
        role = block.role
        # A tool-role block that is not the result itself is still tool output.
        return "tool_result" if role == "tool" else role
    assert_never(block)


def relabel(seq: MessageSequence, policy: TrustPolicy) -> MessageSequence:
    """``seq`` with every block labelled by ``policy``; ``seq`` itself when nothing changes."""
    messages = tuple(_relabel_message(m, policy) for m in seq.messages)
    if all(new is old for new, old in zip(messages, seq.messages, strict=True)):
        return seq
    return dataclasses.replace(seq, messages=messages)


def _relabel_message(message: Message, policy: TrustPolicy) -> Message:
    blocks = tuple(_relabel_block(b, policy) for b in message.blocks)
    if all(new is old for new, old in zip(blocks, message.blocks, strict=True)):
        return message
    return dataclasses.replace(message, blocks=blocks)


def _relabel_block(block: AnyBlock, policy: TrustPolicy) -> AnyBlock:
    label: Trust = getattr(policy, source_of(block))
    if isinstance(block, ToolResultBlock):
        # The parts of a result are the tool's output: they carry the result's label.
        parts = tuple(_with_trust(part, label) for part in block.content)
        if label == block.trust and all(p is o for p, o in zip(parts, block.content, strict=True)):
            return block
        return dataclasses.replace(block, trust=label, content=parts)
    return _with_trust(block, label)


def _with_trust(block: _B, label: Trust) -> _B:
    if block.trust == label:
        return block
    return dataclasses.replace(block, trust=label)


def check(
    seq: MessageSequence, caps: Capabilities, policy: TrustPolicy, forgery: ForgeryPolicy
) -> tuple[MessageSequence, Verdict]:
    """Relabel ``seq`` by the trust policy and validate it with the role-forgery action."""
    labelled = relabel(seq, policy)
    return labelled, validate(labelled, caps, role_forgery=forgery)


def finding_headers(verdict: Verdict, forgery: ForgeryPolicy) -> dict[str, str]:
    """Response headers that report findings under ``flag`` (empty otherwise).

    The value lists each finding as ``rule;block=<id>``, comma-separated, e.g.
    ``role_forgery;block=m3.b0``: enough to find the block, no text from it.
    """
    if forgery != "flag" or not verdict.findings:
        return {}
    items = [f"{f.rule};block={f.block_id}" for f in verdict.findings if f.block_id]
    return {FINDINGS_HEADER: ", ".join(items)} if items else {}
