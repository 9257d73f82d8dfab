"""The assistant turns of a history, each reduced to the digest a canonical turn is kept by.

With ``Turngate-Conversation-Id`` the k-th assistant turn of a request's history must be the
k-th turn turngate committed for that conversation. Both sides are compared by
``turn_digest``, which keeps what the turn says and drops what a client may legitimately
change when it sends the turn back:

- call ids: Gemini returns none (the client or its SDK may add some), and a client may
  rename them consistently; calls are compared by position, name and arguments;
- how text is split into parts: adjacent text blocks are joined, empty ones dropped (a
  stream's chunks, kept as separate parts, say the same as one string);
- how arguments are spelled: they are compared as parsed JSON (an object re-serialised by
  the SDK, Gemini's ``args`` object against OpenAI's string);
- reasoning: opaque, provider-bound and often not sent back at all (OpenAI Chat never
  returns it; a Responses client without ``encrypted_content`` drops it). The provider
  checks its own signatures; an edited reasoning block is its refusal to make;
- compactions (``CompressionBlock.compaction``): as opaque and provider-bound, and one
  stands for the turns before it rather than saying anything itself. A run of assistant
  messages that holds nothing but compactions (what ``responses.compact`` returns) is no
  turn at all;
- native extras (``attrs``), roles, block ids and order.

Text, refusals, tool calls, media and provider-run tool blocks are compared exactly, so a
turn that holds only part of a previewed answer, or an edited one, never matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import orjson

from turngate.graph.codec import canonical_json, digest_of
from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    CompressionBlock,
    FileBlock,
    ImageBlock,
    MessageSequence,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UnknownBlock,
)
from turngate.graph.outline import SequenceOutline


@dataclass(frozen=True)
class HistoryTurn:
    """One assistant turn of a request: a maximal run of assistant messages."""

    # 0-based: the revision whose answer this turn is.
    index: int
    # ``Message.index`` and ``Message.location`` of its first message, for refusals.
    message_index: int
    location: str
    digest: str


def history_turns(seq: MessageSequence) -> list[HistoryTurn]:
    """The assistant turns of ``seq`` in order: as many as ``seq.conversation_revision``, less
    the runs that hold nothing but compactions (``only_compactions``)."""
    if seq.outline is not None:
        return _outline_turns(seq.outline)
    turns: list[HistoryTurn] = []
    run: list[AnyBlock] = []
    first = None
    for message in (*seq.messages, None):
        if message is not None and message.role == "assistant":
            if first is None:
                first = message
            run.extend(message.blocks)
            continue
        if first is not None and not only_compactions(run):
            turns.append(HistoryTurn(len(turns), first.index, first.location, turn_digest(run)))
        run, first = [], None
    return turns


def only_compactions(blocks: Sequence[AnyBlock]) -> bool:
    """Blocks that are all compactions (and some): a run that stands for earlier turns."""
    return bool(blocks) and all(is_compaction(b) for b in blocks)


def compacted(seq: MessageSequence) -> bool:
    """A history holding a compaction: what came before it may have been left out."""
    return any(
        is_compaction(b)
        for message in seq.messages
        if message.role == "assistant"
        for b in message.blocks
    )


def is_compaction(block: AnyBlock) -> bool:
    """The provider's compaction of what came before it (not a note in an item's place)."""
    return isinstance(block, CompressionBlock) and block.compaction


def continued_run(seq: MessageSequence) -> tuple[AnyBlock, ...] | None:
    """The blocks of the assistant message(s) an Anthropic request ends with (possibly
    none: an empty prefill): Claude continues them (a prefill such as ``{``), so the
    answer's turn is they and what follows. None for the other APIs (they answer a
    history, never continue it) and for a request that ends with anything else."""
    if seq.api != "anthropic" or not seq.messages or seq.messages[-1].role != "assistant":
        return None
    run: list[AnyBlock] = []
    for message in reversed(seq.messages):
        if message.role != "assistant":
            break
        run[:0] = message.blocks
    return tuple(run)


def _outline_turns(outline: SequenceOutline) -> list[HistoryTurn]:
    """``history_turns`` read from an outline: its assistant messages hold text and calls."""
    turns: list[HistoryTurn] = []
    run: list[str | list[Any]] = []
    first: int | None = None
    for index, message in enumerate((*outline.messages, None)):
        if message is not None and message[0] == "assistant":
            _role, text, calls, _result = message
            if first is None:
                first = index
            if text is not None:
                run.append(text)
            run.extend(
                ["tool_call", "function", name, _canonical(arguments)]
                for _id, name, arguments, _c in calls
            )
            continue
        if first is not None:
            turns.append(HistoryTurn(len(turns), first, f"messages[{first}]", _digest(run)))
            run, first = [], None
    return turns


def turn_digest(blocks: Sequence[AnyBlock]) -> str:
    """The digest a canonical turn is kept and compared by (see the module docstring)."""
    return _digest([b.text if isinstance(b, TextBlock) else _content(b) for b in blocks])


def _digest(pieces: Sequence[str | list[Any] | None]) -> str:
    """Adjacent text joined (empty text dropped), then every other item in order."""
    items: list[Any] = []
    text: list[str] = []
    for piece in pieces:
        if isinstance(piece, str):
            text.append(piece)
            continue
        if text:
            _add_text(items, text)
            text = []
        if piece is not None:
            items.append(piece)
    _add_text(items, text)
    return digest_of(items)


def _add_text(items: list[Any], text: list[str]) -> None:
    joined = "".join(text)
    if joined:
        items.append(["text", joined])


def _content(block: AnyBlock) -> list[Any] | None:
    match block:
        case ReasoningBlock():
            return None
        case CompressionBlock() if block.compaction:
            return None
        case ToolCallBlock():
            return ["tool_call", block.tool_type, block.name, _arguments(block)]
        case RefusalBlock():
            return ["refusal", block.text]
        case ServerToolBlock():
            return ["server_tool", block.provider, block.name, block.phase]
        case (
            TextBlock()
            | ImageBlock()
            | AudioBlock()
            | FileBlock()
            | SnippetBlock()
            | CompressionBlock()
            | ToolResultBlock()
            | UnknownBlock()
        ):
            content = block.semantic()
            content.pop("attrs", None)
            content.pop("role", None)
            return [block.kind, content]
        case _:
            assert_never(block)


def _arguments(call: ToolCallBlock) -> str:
    """Arguments as canonical JSON when they parse, else exactly as given."""
    if call.tool_type != "function":
        return call.arguments
    return _canonical(call.arguments)


def _canonical(arguments: str) -> str:
    try:
        return canonical_json(orjson.loads(arguments)).decode()
    except orjson.JSONDecodeError:
        return arguments
