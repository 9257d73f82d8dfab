"""Anthropic: the thinking of the latest assistant message goes back as the answer gave it.

Anthropic refuses a request whose latest assistant message holds a thinking block changed
since the answer: "`thinking` or `redacted_thinking` blocks in the latest assistant message
cannot be modified. These blocks must remain as they were in the original response." A
client that trims, merges or re-joins streamed thinking meets it on the turn right after a
tool call, and again on every retry (claude-code #19539 / #63203 / #63404, llxprt-code
#1653, atomic #1318).

A block's signature names the answer's block. The proxy remembers, for each answer it
relayed, every signed thinking block's text as a length and a digest, under a digest of the
signature (proxy/replies.py); ``modified_thinking`` compares the request's blocks with that
memory. It is not a registered rule: like ``responses_reasoning_missing`` it needs the
memory, so the proxy runs it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator

from turngate.graph.model import AnyBlock, Message, MessageSequence, ReasoningBlock
from turngate.graph.validator import Violation, violation

THINKING_MODIFIED = "anthropic_thinking_modified"
_ANTHROPIC = (
    "`thinking` or `redacted_thinking` blocks in the latest assistant message cannot be "
    "modified. These blocks must remain as they were in the original response."
)

# What is remembered of a relayed block's text: its length and digest.
Print = tuple[int, str]
# Remembered for a signature sought in a shared store and not found there: not judged, and
# not sought again.
NOT_RELAYED: Print = (-1, "")


def signature_key(signature: str) -> str:
    return hashlib.sha256(signature.encode()).hexdigest()[:32]


def _print(text: str) -> Print:
    return len(text), hashlib.sha256(text.encode()).hexdigest()


def signed_thinking(blocks: Iterable[AnyBlock]) -> Iterator[tuple[str, Print]]:
    """(signature key, text print) of each signed thinking block of an answer."""
    for block in blocks:
        if isinstance(block, ReasoningBlock) and block.signature and not block.redacted:
            yield signature_key(block.signature), _print(block.text)


def _latest_assistant(seq: MessageSequence) -> Message | None:
    if seq.api != "anthropic":
        return None
    return next((m for m in reversed(seq.messages) if m.role == "assistant"), None)


def returned_thinking(seq: MessageSequence) -> list[tuple[str, Print]]:
    """(signature key, text print) of each signed thinking block ``seq``'s latest assistant
    message sends back: the blocks Anthropic holds to what it answered."""
    latest = _latest_assistant(seq)
    return [] if latest is None else list(signed_thinking(latest.blocks))


def modified_thinking(
    seq: MessageSequence, relayed: Callable[[str], Print | None]
) -> list[Violation]:
    """The thinking blocks of ``seq``'s latest assistant message whose signature is one of a
    block ``relayed`` remembers, with other text."""
    latest = _latest_assistant(seq)
    if latest is None:
        return []
    out: list[Violation] = []
    for key, (length, digest) in signed_thinking(latest.blocks):
        kept = relayed(key)
        if kept is None or kept in (NOT_RELAYED, (length, digest)):
            continue
        block = next(
            b
            for b in latest.blocks
            if isinstance(b, ReasoningBlock) and b.signature and signature_key(b.signature) == key
        )
        how = (
            f"{length:,} characters sent, {kept[0]:,} relayed"
            if length != kept[0]
            else f"the same {length:,} characters, changed"
        )
        out.append(
            violation(
                THINKING_MODIFIED,
                f"thinking block '{block.id}' carries the signature of a block turngate relayed, "
                f'but not its text ({how}); Anthropic: "{_ANTHROPIC}" (send the block back as '
                "the answer gave it)",
                latest,
                block,
            )
        )
    return out
