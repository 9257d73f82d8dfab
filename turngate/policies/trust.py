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
from operator import attrgetter
from typing import Literal, TypeVar, assert_never, get_args

from turngate.adapters.base import default_trust
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
from turngate.graph.validator import ForgeryPolicy, Verdict, Violation, validate
from turngate.policies.config import TrustPolicy

TrustSource = Literal[
    "system", "developer", "user", "assistant", "tool_result", "snippet", "compression"
]
_SOURCES: tuple[TrustSource, ...] = get_args(TrustSource)
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
    labels: dict[TrustSource, Trust] = {source: getattr(policy, source) for source in _SOURCES}
    if seq.outline is not None and all(labels[s] == t for s, t in _OUTLINE_LABELS):
        # An outlined sequence holds only these sources, each with this label already.
        return seq
    # A block's source depends on its class and role only: worked out once per pair, since
    # on the hot path most requests change no label and this is the whole cost.
    label_of: dict[tuple[type[AnyBlock], str], Trust] = {}
    messages: list[Message] | None = None
    for index, message in enumerate(seq.messages):
        blocks: list[AnyBlock] | None = None
        for position, block in enumerate(message.blocks):
            kind = (type(block), block.role)
            label = label_of.get(kind)
            if label is None:
                label = label_of[kind] = labels[source_of(block)]
            if block.trust == label and (
                type(block) is not ToolResultBlock or _parts_labelled(block, label)
            ):
                continue
            if blocks is None:
                blocks = list(message.blocks)
            blocks[position] = _relabelled(block, label)
        if blocks is not None:
            if messages is None:
                messages = list(seq.messages)
            messages[index] = dataclasses.replace(message, blocks=tuple(blocks))
    return seq if messages is None else dataclasses.replace(seq, messages=tuple(messages))


_TRUST = attrgetter("trust")
# The label every block of an outlined sequence carries, by source: its role's default
# (graph/outline.py), tool output labelled as its tool role's.
_OUTLINE_LABELS: tuple[tuple[TrustSource, Trust], ...] = (
    *((role, default_trust(role)) for role in ("system", "developer", "user", "assistant")),
    ("tool_result", default_trust("tool")),
)


def _parts_labelled(result: ToolResultBlock, label: Trust) -> bool:
    # The parts of a result are the tool's output: they carry the result's label.
    return all(map(label.__eq__, map(_TRUST, result.content)))


def _relabelled(block: AnyBlock, label: Trust) -> AnyBlock:
    if isinstance(block, ToolResultBlock):
        parts = tuple(_with_trust(part, label) for part in block.content)
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

    The value lists each finding as ``rule;block=<id>;location=<where>``, comma-separated,
    e.g. ``role_forgery;block=m3.b0;location=messages[3]``: enough to find the block, no text
    from it.
    """
    if forgery != "flag" or not verdict.findings:
        return {}
    items = [_finding(f) for f in verdict.findings if f.block_id]
    return {FINDINGS_HEADER: ", ".join(items)} if items else {}


def _finding(finding: Violation) -> str:
    where = f";location={finding.location}" if finding.location else ""
    return f"{finding.rule};block={finding.block_id}{where}"
