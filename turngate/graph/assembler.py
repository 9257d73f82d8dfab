"""The stream commit boundary: canonical events in, relay decisions out. Pure, no clock.

``StreamAssembler.feed(event)`` returns what may reach the client now:

- ``Preview``: text, reasoning and frames with no content of their own, relayed at once and
  revocable;
- ``Commit``: a block that is complete and valid. Tool-call arguments are buffered privately
  and a call is committed only when its stop arrived, the JSON parses as one object, it
  satisfies the tool's declared JSON Schema, and its call id is valid and unique in the turn;
- ``Retract``: a previewed block that will never be canonical;
- ``Quarantine``: an event of a generation that is no longer active (never relayed);
- ``Complete``: the terminator arrived and every block is committed: the turn is canonical;
- ``Failed``: the turn will never be canonical; the client gets the API's error event.

``finish()`` at connection end returns the canonical ``AssistantTurn`` or the
``StreamFailed`` error. Deltas are de-duplicated by (response handle, generation, block
index, delta sequence): a delta at or below its block's highest sequence so far is dropped.
The assembler's states and the signals that move it are the ``TRANSITIONS`` table; a signal
the table does not allow in a state fails the turn (``stream_protocol``). The table, the
outputs and the failure rules are in ``stream_outputs`` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard, assert_never

from turngate.errors import TurngateError
from turngate.graph.capabilities import Capabilities
from turngate.graph.codec import json_object
from turngate.graph.events import (
    HELD_KINDS,
    ArgsDelta,
    BlockStart,
    BlockStop,
    CitationDelta,
    DeltaEvent,
    Native,
    OpaqueDelta,
    ReasoningDelta,
    ResponseStart,
    SignatureDelta,
    StreamDone,
    StreamError,
    StreamEvent,
    TextDelta,
    TurnEnd,
    UsageEvent,
)
from turngate.graph.model import (
    AnyBlock,
    ApiName,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    UnknownBlock,
    new_text_block,
)
from turngate.graph.schema_check import CallChecker, ToolSchemas
from turngate.graph.stream_outputs import (
    ARGUMENTS_MISMATCH,
    ARGUMENTS_TOO_DEEP,
    MAX_NESTING,
    MISSING_STOP,
    STREAM_MISMATCH,
    STREAM_PROTOCOL,
    STREAM_TRUNCATED,
    TERMINAL,
    TRANSITIONS,
    UNKNOWN_KIND,
    UPSTREAM_ERROR,
    A,
    AssemblerState,
    BlockBuilder,
    Commit,
    Complete,
    Failed,
    G,
    Output,
    Preview,
    Quarantine,
    Retract,
    Signal,
    StreamFailed,
    json_nests_deeper,
    nests_deeper,
)
from turngate.graph.turn import AssistantTurn, Usage
from turngate.graph.validator import INCOMPLETE_ARGUMENTS

# Re-exported: the assembler's vocabulary lives in ``stream_outputs``.
__all__ = [
    "ARGUMENTS_MISMATCH",
    "ARGUMENTS_TOO_DEEP",
    "MAX_NESTING",
    "MISSING_STOP",
    "STREAM_MISMATCH",
    "STREAM_PROTOCOL",
    "STREAM_TRUNCATED",
    "TERMINAL",
    "TRANSITIONS",
    "UNKNOWN_KIND",
    "UPSTREAM_ERROR",
    "AssemblerState",
    "BlockBuilder",
    "Commit",
    "Complete",
    "Failed",
    "Output",
    "Preview",
    "Quarantine",
    "Retract",
    "Signal",
    "StreamAssembler",
    "StreamFailed",
    "json_nests_deeper",
    "nests_deeper",
]


# Deltas of a block joined into one string, per run of this many.
_JOIN_EVERY = 64


@dataclass(slots=True)
class _Block:
    block_id: str
    start: BlockStart
    parts: list[str] = field(default_factory=list)
    # ``parts[:joined]`` are runs of deltas already joined.
    joined: int = 0
    signature: list[str] = field(default_factory=list)
    citations: list[Any] = field(default_factory=list)
    held: list[StreamEvent] = field(default_factory=list)
    stopped: bool = False
    committed: bool = False
    previewed: bool = False
    block: AnyBlock | None = None


class _Refused(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


class StreamAssembler:
    def __init__(
        self,
        *,
        api: ApiName,
        tools: ToolSchemas | None = None,
        generation: int = 1,
        eof_terminates: bool = False,
        capabilities: Capabilities | None = None,
        builder: BlockBuilder | None = None,
    ) -> None:
        """``tools``: tool name -> parameters schema; None skips schema checks (not the JSON
        check). ``eof_terminates``: the API has no terminator event, the connection close
        after the stop reason ends the turn (Gemini). ``builder``: the API's own way to
        build committed blocks from final native objects."""
        self.api = api
        self.builder = builder
        self.tools = tools
        self.generation = generation
        self.eof_terminates = eof_terminates
        self._capabilities = capabilities
        self.duplicates = 0
        self.quarantined = 0
        self.ignored = 0
        self._reset()

    def _reset(self) -> None:
        self.state = A.AWAITING_START
        self.handle: str | None = None
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.usage: Usage | None = None
        # The last report merged and what it gave (``_take_usage``).
        self._usage_taken: Usage | None = None
        self._usage_merged: Usage | None = None
        self.relayed = False
        self._blocks: dict[int, _Block] = {}
        # Text blocks ``whole_text`` took, by index, kept as their text until read.
        self._whole: dict[int, str] = {}
        self._start_of: Callable[[int], BlockStart] | None = None
        self._calls = CallChecker(self.tools, self._capabilities)
        self._hwm: dict[int, int] = {}
        self._turn: AssistantTurn | None = None
        self._error: StreamFailed | None = None

    # --- public -------------------------------------------------------------------------

    def feed(self, event: StreamEvent, *, generation: int | None = None) -> list[Output]:
        if generation is not None and generation != self.generation:
            self.quarantined += 1
            reason = f"generation {generation} is not the active generation {self.generation}"
            return [Quarantine(event, generation, reason)]
        if self.state is A.COMPLETE:
            self.quarantined += 1
            return [Quarantine(event, self.generation, "event after the stream's terminator")]
        if self.state is A.FAILED:
            self.ignored += 1
            return []
        if event.seq is not None and self._duplicate(event, event.seq):
            self.duplicates += 1
            return []
        try:
            outputs = self._dispatch(event)
        except _Refused as refused:
            return self._fail(StreamFailed(refused.message, rule=refused.rule))
        if not self.relayed:
            self.relayed = any(isinstance(o, Preview | Commit) for o in outputs)
        return outputs

    def preview_text(self, event: TextDelta) -> bool:
        """``feed`` for the delta of nearly every text chunk, without building outputs: more
        text of a text or refusal block already previewed, new by its sequence, while
        streaming. True: taken, and to be relayed as its block's next ``Preview`` (never
        the first). False: nothing was done; ``feed`` decides."""
        seq = event.seq
        return seq is not None and self.preview_more(event.index, event.text, seq)

    def preview_more(self, index: int, text: str, seq: int) -> bool:
        """``preview_text`` of a delta given by its fields (no event built)."""
        block = self._blocks.get(index)
        if self.state is not A.STREAMING or block is None or block.stopped or not block.previewed:
            return False
        kind = block.start.kind
        if kind not in ("text", "refusal"):
            return False
        return self._keep(block, index, text, seq)

    def preview_run(self, index: int, texts: list[str], seqs: Sequence[int]) -> bool:
        """``preview_more`` of each of ``texts`` in turn, with its number in ``seqs``; False
        when one was not taken (those before it were)."""
        for text, seq in zip(texts, seqs, strict=True):
            if not self.preview_more(index, text, seq):
                return False
        return True

    def hold_args(self, index: int, fragment: str, seq: int, raw: bytes | None) -> bool:
        """``feed`` of ``ArgsDelta(index, fragment, seq, raw)`` for more arguments of a call
        (or a server tool's input) already started and not stopped, new by its sequence,
        while streaming: held, as ``feed`` holds it, and nothing to relay. False: nothing
        was done; ``feed`` decides."""
        block = self._blocks.get(index)
        if self.state is not A.STREAMING or block is None or block.stopped:
            return False
        if block.start.kind not in ("tool_call", "server_tool"):
            return False
        if not self._keep(block, index, fragment, seq):
            return False
        block.held.append(ArgsDelta(index, fragment, seq, raw))
        return True

    def _keep(self, block: _Block, index: int, piece: str, seq: int) -> bool:
        """Keep ``piece`` as the next of ``block``'s deltas when it is new by its sequence
        (de-duplicated as ``feed`` does). False: a duplicate, nothing kept."""
        high = self._hwm.get(index)
        if high is not None and seq <= high:
            return False
        self._hwm[index] = seq
        parts = block.parts
        parts.append(piece)
        if len(parts) >= block.joined + _JOIN_EVERY:
            parts[block.joined :] = ["".join(parts[block.joined :])]
            block.joined += 1
        return True

    def takes_usage_again(self, usage: Usage) -> bool:
        """Whether ``feed`` of a ``UsageEvent`` of ``usage`` would change nothing here: the
        same report as the last taken (Gemini repeats one on every chunk), while streaming,
        after something was relayed. Its one output, a ``Preview``, is then the encoder's
        to write or not."""
        return (
            self.state is A.STREAMING
            and self.relayed
            and usage is self._usage_taken
            and self.usage is self._usage_merged
        )

    def whole_text(
        self, index: int, text: str, usage: Usage | None, start_of: Callable[[int], BlockStart]
    ) -> bool:
        """``feed`` of a text block that starts, streams ``text`` (sequence 0) and stops in
        one frame, then of that frame's usage (a Gemini text part), without building the
        outputs: True when taken, what ``feed`` takes as a first ``Preview`` of the start
        (``start_of(index)``), a ``Preview`` of the text and a ``Commit`` that holds nothing.
        The block is kept as its text until it is read: a stream of many such blocks then
        keeps no objects per block for the garbage collector to walk, only strings. It is
        built as ``_generic`` builds a text block with no attributes of its own (its start
        has none): only for an API whose builder builds a part of nothing but text the same
        way. False: nothing was done; ``feed`` decides."""
        if (
            self.state is not A.STREAMING
            or index in self._blocks
            or index in self._whole
            or index in self._hwm
        ):
            return False
        self._whole[index] = text
        self._start_of = start_of
        self._hwm[index] = 0
        if usage is not None:
            self._take_usage(usage)
        self.relayed = True
        return True

    def _built(self, index: int) -> _Block | None:
        """The block at ``index``, built now if ``whole_text`` kept it as its text."""
        block = self._blocks.get(index)
        if block is None and index in self._whole:
            start_of = self._start_of
            assert start_of is not None, "set with the first block whole_text took"
            text, start = self._whole.pop(index), start_of(index)
            assert start.kind == "text", "whole_text takes text blocks"
            assert not start.attrs, "whole_text takes blocks with no attributes of their own"
            block = _Block(
                self._block_id(index), start, [text], previewed=True, stopped=True, committed=True
            )
            block.block = self._whole_block(index, text)
            self._blocks[index] = block
        return block

    def _whole_block(self, index: int, text: str) -> TextBlock:
        """The committed block of a text ``whole_text`` kept: as ``_generic`` builds a text
        block with no attributes."""
        return new_text_block(
            id=self._block_id(index), role="assistant", order=index, trust="untrusted", text=text
        )

    def _block_id(self, index: int) -> str:
        return f"g{self.generation}.b{index}"

    def fail(self, error: TurngateError) -> list[Output]:
        """Fail the turn from outside (a decoder error, a policy decision)."""
        if self.state in TERMINAL:
            return []
        if not isinstance(error, StreamFailed):
            wrapped = StreamFailed(error.message, rule=error.rule)
            wrapped.__cause__ = error
            error = wrapped
        return self._fail(error)

    def finish(self, cause: str | None = None) -> AssistantTurn | StreamFailed:
        """The connection ended: the canonical turn, or why there is none. ``cause``: why the
        connection ended (a read timeout, a broken connection), added to a truncation's
        message so the client learns what happened upstream."""
        if self._turn is not None:
            return self._turn
        if self._error is not None:
            return self._error
        if self.state is A.ENDING and self.eof_terminates:
            self._advance(G.DONE)
            try:
                return self._complete().turn
            except _Refused as refused:
                self._fail(StreamFailed(refused.message, rule=refused.rule))
                assert self._error is not None
                return self._error
        if self.state is A.ENDING:
            message = "stream ended after its stop reason but without its terminator"
        elif self.state is A.STREAMING:
            open_blocks = [i for i, b in self._blocks.items() if not b.stopped]
            message = f"stream ended mid-turn (open blocks: {open_blocks or 'none'})"
        else:
            message = "stream ended before the response started"
        if cause is not None:
            message = f"{message}: {cause}"
        self._fail(StreamFailed(message, rule=STREAM_TRUNCATED))
        assert self._error is not None
        return self._error

    def activate(self, generation: int) -> list[Output]:
        """Start over for a new attempt generation; events of the old one are quarantined."""
        retracts = self._retracts("superseded by a new attempt generation")
        self.generation = generation
        self._reset()
        return list(retracts)

    @property
    def committed(self) -> list[AnyBlock]:
        built = {i: b.block for i, b in self._blocks.items() if b.block is not None}
        for index, text in self._whole.items():
            built[index] = self._whole_block(index, text)
        return [built[i] for i in sorted(built)]

    def _turn_blocks(self) -> tuple[AnyBlock, ...]:
        """``committed`` for the canonical turn, each run of adjacent plain text blocks (no
        attributes of their own: what ``whole_text`` takes) made one block of their joined
        text, with the id and order of the run's first. A turn is kept and compared by its
        digest, which joins adjacent text (graph/history.py), so the one block says what
        the run does; a Gemini stream of 500 text chunks then builds one block at its end,
        not 500. ``committed`` keeps a block per index: a failure retracts each previewed
        block by its own id."""
        whole = self._whole
        pieces: dict[int, str | AnyBlock] = {
            i: b.block for i, b in self._blocks.items() if b.block is not None
        }
        pieces.update(whole)
        blocks: list[AnyBlock] = []
        run: list[tuple[int, str | TextBlock]] = []
        for index in sorted(pieces):
            piece = pieces[index]
            if isinstance(piece, str) or _plain_text(piece):
                run.append((index, piece))
                continue
            self._close_run(run, blocks)
            run = []
            blocks.append(piece)
        self._close_run(run, blocks)
        return tuple(blocks)

    def _close_run(self, run: list[tuple[int, str | TextBlock]], blocks: list[AnyBlock]) -> None:
        if not run:
            return
        first, piece = run[0]
        if len(run) == 1 and not isinstance(piece, str):
            blocks.append(piece)
            return
        texts = [p if isinstance(p, str) else p.text for _i, p in run]
        blocks.append(self._whole_block(first, "".join(texts)))

    # --- dispatch -----------------------------------------------------------------------

    def _dispatch(self, event: StreamEvent) -> list[Output]:
        match event:
            # Deltas first: nearly every event is one.
            case TextDelta() | ArgsDelta() | ReasoningDelta():
                self._advance(G.BLOCK)
                return self._delta(event)
            case ResponseStart():
                return self._start(event)
            case BlockStart():
                self._advance(G.BLOCK)
                return self._block_start(event)
            case SignatureDelta() | CitationDelta() | OpaqueDelta():
                self._advance(G.BLOCK)
                return self._delta(event)
            case BlockStop():
                self._advance(G.BLOCK)
                return self._block_stop(event)
            case UsageEvent():
                self._advance(G.META)
                self._take_usage(event.usage)
                return [Preview(event)]
            case Native():
                self._advance(G.META)
                block = self._blocks.get(event.index) if event.index is not None else None
                if block is not None and block.start.kind in HELD_KINDS and not block.stopped:
                    block.held.append(event)
                    return []
                return [Preview(event)]
            case TurnEnd():
                self._advance(G.TURN_END)
                open_blocks = [i for i, b in self._blocks.items() if not b.stopped]
                if open_blocks:
                    raise _Refused(
                        MISSING_STOP,
                        f"the turn ended ({event.stop_reason}) while blocks {open_blocks} "
                        "never received their stop",
                    )
                self.stop_reason = event.stop_reason
                return [Preview(event)]
            case StreamDone():
                self._advance(G.DONE)
                return [self._complete(event)]
            case StreamError():
                return self._fail(
                    StreamFailed(
                        f"upstream error: {event.message}",
                        rule=UPSTREAM_ERROR,
                        native=event.native,
                        raw=event.raw,
                    )
                )
            case _:
                assert_never(event)

    def _take_usage(self, usage: Usage) -> None:
        """Merge a usage report into the turn's. Taking the same report again changes
        nothing (Gemini repeats one on every chunk): only a new one is merged."""
        if usage is self._usage_taken and self.usage is self._usage_merged:
            return
        self.usage = self._usage_merged = _merge_usage(self.usage, usage)
        self._usage_taken = usage

    def _advance(self, signal: Signal) -> None:
        if self.state is A.STREAMING and (signal is G.BLOCK or signal is G.META):
            # The table's answer for nearly every event, without hashing two enums.
            return
        following = TRANSITIONS.get((self.state, signal))
        if following is None:
            raise _Refused(STREAM_PROTOCOL, f"'{signal}' is not allowed while {self.state}")
        self.state = following

    def _duplicate(self, event: StreamEvent, seq: int) -> bool:
        index = getattr(event, "index", None)
        scope = -1 if index is None else index
        high = self._hwm.get(scope)
        if high is not None and seq <= high:
            return True
        self._hwm[scope] = seq
        return False

    def _start(self, event: ResponseStart) -> list[Output]:
        if self.state is not A.AWAITING_START:
            raise _Refused(STREAM_PROTOCOL, "a second response started in the same attempt")
        self._advance(G.START)
        self.handle = event.handle
        self.model = event.model
        return [Preview(event)]

    def _block_start(self, event: BlockStart) -> list[Output]:
        if event.index in self._blocks or event.index in self._whole:
            raise _Refused(STREAM_PROTOCOL, f"block {event.index} started twice")
        block = _Block(block_id=self._block_id(event.index), start=event)
        self._blocks[event.index] = block
        if event.kind in HELD_KINDS:
            block.held.append(event)
            return []
        block.previewed = True
        return [Preview(event, block.block_id, first=True)]

    def _open(self, index: int) -> _Block:
        block = self._built(index)
        if block is None:
            raise _Refused(STREAM_PROTOCOL, f"block {index} got an event before its start")
        if block.stopped:
            raise _Refused(STREAM_PROTOCOL, f"block {index} got an event after its stop")
        return block

    def _delta(self, event: DeltaEvent) -> list[Output]:
        block = self._open(event.index)
        kind = block.start.kind
        parts = block.parts
        match event:
            case TextDelta() if kind in ("text", "refusal"):
                parts.append(event.text)
            case CitationDelta() if kind == "text":
                block.citations.append(event.citation)
            case ArgsDelta() if kind in ("tool_call", "server_tool"):
                parts.append(event.fragment)
            case ReasoningDelta() if kind == "reasoning":
                parts.append(event.text)
            case SignatureDelta() if kind == "reasoning":
                block.signature.append(event.signature)
            case OpaqueDelta() if kind == "unknown":
                pass
            case OpaqueDelta():
                raise _Refused(
                    UNKNOWN_KIND, f"block {event.index} ({kind}) got a delta of an unknown kind"
                )
            case _:
                raise _Refused(
                    STREAM_PROTOCOL,
                    f"block {event.index} ({kind}) got a {type(event).__name__}",
                )
        if len(parts) >= block.joined + _JOIN_EVERY:
            # Deltas are a few characters each: every run of them is kept as one string, not
            # as hundreds of small ones per block (each run is copied once).
            parts[block.joined :] = ["".join(parts[block.joined :])]
            block.joined += 1
        if kind in HELD_KINDS:
            block.held.append(event)
            return []
        first = not block.previewed
        block.previewed = True
        return [Preview(event, block.block_id, first=first)]

    def _block_stop(self, event: BlockStop) -> list[Output]:
        block = self._open(event.index)
        block.stopped = True
        built = self._build(block, event)
        block.block = built
        block.committed = True
        held = tuple(block.held)
        if held:
            held += (event,)
        block.held = []
        return [Commit(block.block_id, event.index, built, block.start, event, held)]

    def _complete(self, event: StreamDone | None = None) -> Complete:
        uncommitted = [i for i, b in self._blocks.items() if not b.committed]
        if uncommitted:
            raise _Refused(MISSING_STOP, f"blocks {uncommitted} were never committed")
        assert self.stop_reason is not None
        self._turn = AssistantTurn(
            handle=self.handle,
            model=self.model,
            blocks=self._turn_blocks(),
            stop_reason=self.stop_reason,
            usage=self.usage,
        )
        return Complete(self._turn, event)

    def _fail(self, error: StreamFailed) -> list[Output]:
        error.retracted = self._retracts(error.rule)
        self.state = A.FAILED
        self._error = error
        return [Failed(error)]

    def _retracts(self, reason: str) -> tuple[Retract, ...]:
        retracts = {
            i: Retract(b.block_id, b.start.index, reason)
            for i, b in self._blocks.items()
            if b.previewed or b.committed
        }
        for index in self._whole:
            retracts[index] = Retract(self._block_id(index), index, reason)
        return tuple(retracts[i] for i in sorted(retracts))

    # --- building and checking blocks ---------------------------------------------------

    def _build(self, block: _Block, stop: BlockStop) -> AnyBlock:
        start = block.start
        if start.kind in ("tool_call", "server_tool"):
            for arguments in ("".join(block.parts), stop.arguments or ""):
                if json_nests_deeper(arguments, MAX_NESTING):
                    raise _Refused(
                        ARGUMENTS_TOO_DEEP,
                        f"block {start.index}: arguments nest deeper than {MAX_NESTING} levels",
                    )
        built = None
        if self.builder is not None:
            try:
                built = self.builder(start, stop, block.block_id, start.index)
            except TurngateError as exc:
                # The API's parser refused the block's final object: the turn fails here,
                # like any other block that breaks the rules, not out of ``feed``.
                raise _Refused(exc.rule, f"block {start.index}: {exc.message}") from exc
            if built is not None:
                self._check_streamed(block, stop, built)
        if built is None:
            built = self._generic(block, stop)
        if isinstance(built, ToolCallBlock):
            problem = self._calls.problem(built)
            if problem is not None:
                raise _Refused(*problem)
        elif start.kind == "tool_call":
            raise _Refused(
                STREAM_PROTOCOL, f"block {start.index} is a tool call the API could not read"
            )
        return built

    def _check_streamed(self, block: _Block, stop: BlockStop, built: AnyBlock) -> None:
        """What was streamed must be what the provider's final object says: a duplicate or a
        lost delta shows here even where the API has no sequence numbers."""
        streamed = "".join(block.parts)
        if not streamed:
            return
        if block.start.kind == "tool_call":
            final = stop.arguments
        elif isinstance(built, TextBlock | RefusalBlock):
            final = built.text
        else:
            return
        if final is not None and streamed != final:
            raise _Refused(
                ARGUMENTS_MISMATCH if block.start.kind == "tool_call" else STREAM_MISMATCH,
                f"block {stop.index}: what was streamed differs from the block's final content",
            )

    def _generic(self, block: _Block, stop: BlockStop) -> AnyBlock:
        start = block.start
        attrs = {**start.attrs, **stop.attrs} if stop.attrs else dict(start.attrs)
        common: dict[str, Any] = {
            "id": block.block_id,
            "role": "assistant",
            "order": start.index,
            "trust": "untrusted",
        }
        kind = start.kind
        if kind == "text":
            if block.citations:
                attrs["citations"] = list(block.citations)
            return TextBlock(text="".join(block.parts), attrs=attrs, **common)
        if kind == "refusal":
            return RefusalBlock(text="".join(block.parts), attrs=attrs, **common)
        if kind == "reasoning":
            return ReasoningBlock(
                provider=self.api,
                text="".join(block.parts),
                signature="".join(block.signature) or None,
                payload=stop.payload if stop.payload is not None else start.payload,
                redacted=start.redacted,
                attrs=attrs,
                **common,
            )
        if kind == "tool_call":
            arguments = self._arguments(block, stop)
            return ToolCallBlock(
                call_id=start.call_id or "",
                name=start.name or "",
                arguments=arguments,
                argument_state="complete",
                tool_type=start.tool_type,
                attrs=attrs,
                **common,
            )
        if kind == "server_tool":
            arguments = self._arguments(block, stop)
            if arguments.strip():
                value = json_object(arguments)
                if value is None:
                    raise _Refused(
                        INCOMPLETE_ARGUMENTS, f"block {start.index}: input is not an object"
                    )
                attrs["input"] = value
            return ServerToolBlock(
                provider=self.api,
                name=start.name or start.native_type or "",
                phase=start.phase,
                call_id=start.call_id,
                attrs=attrs,
                **common,
            )
        if kind == "unknown":
            return UnknownBlock(native_type=start.native_type or "unknown", attrs=attrs, **common)
        assert_never(kind)

    def _arguments(self, block: _Block, stop: BlockStop) -> str:
        streamed = "".join(block.parts)
        if stop.arguments is None:
            return streamed
        if streamed and streamed != stop.arguments:
            raise _Refused(
                ARGUMENTS_MISMATCH,
                f"block {stop.index}: the streamed arguments differ from the final ones",
            )
        return stop.arguments


def _merge_usage(old: Usage | None, new: Usage) -> Usage:
    if old is None:
        return new
    return Usage(
        input_tokens=new.input_tokens if new.input_tokens is not None else old.input_tokens,
        output_tokens=new.output_tokens if new.output_tokens is not None else old.output_tokens,
        total_tokens=new.total_tokens if new.total_tokens is not None else old.total_tokens,
    )


def _plain_text(block: AnyBlock) -> TypeGuard[TextBlock]:
    """A text block as ``_whole_block`` builds it: joined with its neighbours in a turn."""
    return type(block) is TextBlock and not block.attrs and block.trust == "untrusted"
