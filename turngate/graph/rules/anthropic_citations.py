"""Anthropic: citations on the documents a request carries (rule ``anthropic_citations``).

Two constraints Anthropic documents for citations (build-with-claude/citations), each a
400 for the whole request:

- "citations must be enabled on all or none of the documents within a request": a RAG agent
  whose documents cite, and a tool that later returns a document without ``citations``,
  leave every following turn of the conversation refused;
- "Citations cannot be used together with structured outputs": a document or search result
  with citations enabled beside ``output_config.format`` (or the older ``output_format``).

Documents are the ``document`` blocks of user messages and of tool results; search results
count for the second constraint only. A document or search result held in a server tool's
result is Anthropic's own and not judged.
"""

from __future__ import annotations

from collections.abc import Iterator

from turngate.graph.model import (
    AnyBlock,
    FileBlock,
    Message,
    MessageSequence,
    SnippetBlock,
    ToolResultBlock,
    UnknownBlock,
)
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

CITATIONS = "anthropic_citations"
_MIXED = "citations must be enabled on all or none of the documents within a request"
_WITH_FORMAT = "Citations cannot be used together with structured outputs"


def _kind(block: AnyBlock) -> str | None:
    """``document`` or ``search_result`` for the blocks that take ``citations``."""
    if isinstance(block, FileBlock):
        return "document"
    if isinstance(block, SnippetBlock):
        # A search result's later snippets continue its first, which holds its fields.
        return None if block.attrs.get("$continues") else "search_result"
    if isinstance(block, UnknownBlock):
        native = block.native_type
        if native.startswith("document(") or native == "search_result":
            return native.split("(", 1)[0]
    return None


def _cited(seq: MessageSequence) -> Iterator[tuple[Message, AnyBlock, str, bool]]:
    """Each document and search result a client sent, with whether it enables citations."""
    for message in seq.messages:
        if message.role not in ("user", "tool"):
            continue
        for block in message.blocks:
            inner = block.content if isinstance(block, ToolResultBlock) else (block,)
            for part in inner:
                kind = _kind(part)
                if kind is not None:
                    citations = part.attrs.get("citations")
                    enabled = isinstance(citations, dict) and citations.get("enabled") is True
                    yield message, part, kind, enabled


@rule(CITATIONS)
def citations(seq: MessageSequence) -> list[Violation]:
    found = list(_cited(seq))
    if not found:
        return []
    out: list[Violation] = []
    documents = [(m, b, on) for m, b, kind, on in found if kind == "document"]
    cite = [(m, b) for m, b, on in documents if on]
    plain = [(m, b) for m, b, on in documents if not on]
    if cite and plain:
        message, block = plain[0]
        out.append(
            violation(
                CITATIONS,
                f"{len(cite)} document(s) enable citations and {len(plain)} do not (the "
                f'first of those here); Anthropic documents: "{_MIXED}" (set "citations": '
                '{"enabled": true} on every document, or on none)',
                message,
                block,
            )
        )
    formatted = _output_format(seq)
    citing = next(((m, b, kind) for m, b, kind, on in found if on), None)
    if formatted is not None and citing is not None:
        message, block, kind = citing
        out.append(
            violation(
                CITATIONS,
                f"a {kind} enables citations and the request asks for structured output "
                f'({formatted}); Anthropic documents: "{_WITH_FORMAT}" (turn citations off, '
                "or leave the output format out)",
                message,
                block,
            )
        )
    return out


def _output_format(seq: MessageSequence) -> str | None:
    """Where the request asks for structured output, if it does."""
    output_config = seq.envelope.get("output_config")
    if isinstance(output_config, dict) and output_config.get("format") is not None:
        return "output_config.format"
    return "output_format" if seq.envelope.get("output_format") is not None else None
