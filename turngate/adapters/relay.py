"""``StreamRelay``: the pure object the proxy drives for a streamed answer.

It chains SSE decoding (sse.py), the API's stream decoder, the ``StreamAssembler`` and the
API's encoder: upstream bytes in, client bytes out, no I/O. ``stream_codec`` finds an API's
decoder and encoder classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

from turngate.adapters.sse import (
    DEFAULT_MAX_FRAME,
    DEFAULT_MAX_LINE,
    MarkStyle,
    SSEDecoder,
    SSEFrame,
    StreamEncoder,
)
from turngate.adapters.template import FrameTemplate, HeldArgs, QuickDelta, TextPart
from turngate.errors import TurngateError
from turngate.graph.assembler import (
    AssemblerState,
    Commit,
    Complete,
    Failed,
    Output,
    Preview,
    Quarantine,
    Retract,
    StreamAssembler,
    StreamFailed,
)
from turngate.graph.capabilities import Capabilities
from turngate.graph.events import (
    ArgsDelta,
    BlockStart,
    BlockStop,
    ResponseStart,
    StreamEvent,
    TextDelta,
)
from turngate.graph.model import AnyBlock, ApiName
from turngate.graph.schema_check import ToolSchemas
from turngate.graph.turn import AssistantTurn

T = TypeVar("T")


class StreamDecoder(Protocol):
    """One API's stream decoder: frames in, canonical events out (state per connection)."""

    api: ApiName
    eof_terminates: bool

    def decode(self, frame: SSEFrame) -> list[StreamEvent]: ...

    def build_block(
        self, start: BlockStart, stop: BlockStop, block_id: str, order: int
    ) -> AnyBlock | None: ...


class TemplateStreamDecoder(StreamDecoder, Protocol):
    """A decoder that reads a whole frame of more text (or more arguments) through the
    template of the block's frame before it (adapters/template.py)."""

    def quick_frame(self, frame: bytes) -> QuickDelta | None:
        """A whole frame (a read at a frame boundary, ``SSEDecoder.at_boundary``, or a
        frame the SSE decoder cut) that fits the template of the block's delta frame
        before it, as the (block index, text or fragment, sequence number, arguments or
        not) of the ``TextDelta`` or ``ArgsDelta`` that decoding it gives, its decoder state
        taken as that decoding would. None: nothing taken."""
        ...


class TextRunDecoder(TemplateStreamDecoder, Protocol):
    """A template decoder whose frames of more text differ in their text (and their
    sequence number, where the provider numbers them) alone: the relay reads a run of them
    with the template only and hands their pieces over together (``StreamRelay._end_run``)."""

    def text_run(self) -> tuple[int, FrameTemplate] | None:
        """The open text block's index and the whole-frame template ``quick_frame`` reads
        its next frame with; None when the open block is not text or has no template."""
        ...

    def took_text(self, index: int, pieces: list[str]) -> int | None:
        """Take ``pieces`` as ``quick_frame`` takes one frame's text each, in order; the
        first one's sequence number, or None when the frames carry their own (Responses'
        ``sequence_number``, read through the template's count)."""
        ...


class BlockStreamDecoder(StreamDecoder, Protocol):
    """A decoder whose text chunks are each a whole text block (Gemini parts), read through
    the template of a text chunk before."""

    def quick_block(self, frame: bytes) -> TextPart | None:
        """A whole frame (as ``quick_frame`` takes it) that fits the template, as its text
        block's index, its text and the chunk's usage (as sent, and counted), its decoder
        state taken as decoding it would. None: nothing taken."""
        ...

    def quick_args(self, frame: bytes) -> HeldArgs | None:
        """A whole frame taken as more arguments of the call the decoder holds, and the one
        event decoding it would give (its usage), if any; None: nothing taken. Raises
        ``TurngateError`` as decoding would."""
        ...

    def text_start(self, index: int) -> BlockStart:
        """The start decoding gives for the text block at ``index`` that ``quick_block``
        took."""
        ...

    def events(self, part: TextPart, frame: bytes) -> list[StreamEvent]:
        """The events decoding the frame ``quick_block`` took gives."""
        ...


class DataStreamDecoder(TemplateStreamDecoder, Protocol):
    """A decoder of a data-only stream (Chat): a frame is read from its ``data`` and bytes
    alone, and more text in the envelope of the chunk before is read from its text."""

    def quick_text(self, data: bytes) -> QuickDelta | None: ...

    def decode_data(self, data: bytes, whole: bytes) -> list[StreamEvent]: ...

    def parse_data(self, data: bytes, whole: bytes) -> list[StreamEvent]: ...


_STREAM_MODULES: dict[str, tuple[str, str, str]] = {
    "openai_chat": (
        "turngate.adapters.openai_chat.stream",
        "ChatStreamDecoder",
        "ChatStreamEncoder",
    ),
    "openai_responses": (
        "turngate.adapters.openai_responses.stream",
        "ResponsesStreamDecoder",
        "ResponsesStreamEncoder",
    ),
    "anthropic": (
        "turngate.adapters.anthropic.stream",
        "AnthropicStreamDecoder",
        "AnthropicStreamEncoder",
    ),
    "gemini": ("turngate.adapters.gemini.stream", "GeminiStreamDecoder", "GeminiStreamEncoder"),
}


def stream_codec(api: str) -> tuple[Callable[[], StreamDecoder], Callable[..., StreamEncoder]]:
    """The decoder and encoder classes of ``api``'s streams."""
    module_name, decoder, encoder = _STREAM_MODULES[api]
    module = importlib.import_module(module_name)
    return getattr(module, decoder), getattr(module, encoder)


class StreamRelay:
    """Upstream bytes in, client bytes out: SSE decoding, the API's decoder, the assembler
    and the API's encoder in one pure object. The proxy writes what ``feed`` returns; once
    ``failed`` is true it writes what it was given and aborts the connection (never a clean
    end); at the upstream's end it writes what ``finish`` returns and ends cleanly only if
    the outcome is an ``AssistantTurn``.

    The API's terminator (``[DONE]``, ``message_stop``, ``response.completed``) is held back
    from ``feed`` and written by ``finish`` with a canonical turn, so the proxy can record
    the commit before the client sees the end; ``fail`` drops it when that record fails.

    Each attempt generation reads through its own decoders; bytes of a generation that is no
    longer active are decoded and quarantined, never relayed.
    """

    def __init__(
        self,
        api: ApiName,
        *,
        tools: ToolSchemas | None = None,
        generation: int = 1,
        capabilities: Capabilities | None = None,
        marks: MarkStyle | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        self.api = api
        self._decoder_class, encoder_class = stream_codec(api)
        # Every lane's decoder is of this one class: read one-line frames without the list,
        # and frames of more text through their template.
        self._data_only = hasattr(self._decoder_class, "decode_data")
        self._templates = hasattr(self._decoder_class, "quick_frame")
        self._block_templates = hasattr(self._decoder_class, "quick_block")
        self._any_templates = self._templates or self._block_templates
        self._text_runs = hasattr(self._decoder_class, "text_run")
        # More text of the open block read through its template, not yet handed over.
        self._run: _TextRun | None = None
        self._limits = (max_line, max_frame)
        self._lanes: dict[int, tuple[SSEDecoder, StreamDecoder]] = {}
        self.generation = generation
        lane = self._go_live(self._lane(generation))
        self.assembler = StreamAssembler(
            api=api,
            tools=tools,
            generation=generation,
            eof_terminates=lane[1].eof_terminates,
            capabilities=capabilities,
            builder=lane[1].build_block,
        )
        self.encoder = encoder_class(marks)
        self.quarantine: list[Quarantine] = []
        # Blocks committed so far (each one relayed whole when it was).
        self.commits = 0
        # The highest provider sequence number processed (Responses ``sequence_number``):
        # where a resumed connection starts (``starting_after``). None: the API numbers nothing.
        self.cursor: int | None = None
        self._numbered = False
        self._held = b""
        self._failure_written = False
        # The last ``feed`` was only frames of more previewed text, of a text block whole
        # whose commit writes nothing (no marks), relayed as they came, or of more arguments
        # of a call being held: no failure, end or handle came with it, and nothing held
        # was released.
        self.quick = False

    @property
    def failed(self) -> bool:
        return self.assembler.state is AssemblerState.FAILED

    @property
    def relayed(self) -> bool:
        """Whether any content reached the client (a retry is only allowed before that)."""
        return self.assembler.relayed

    @property
    def complete(self) -> bool:
        """The terminator arrived and every block is committed: ``finish`` gives the turn."""
        return self.assembler.state is AssemblerState.COMPLETE

    @property
    def handle(self) -> str | None:
        """The provider's response handle, once the response started."""
        return self.assembler.handle

    def feed(self, data: bytes, *, generation: int | None = None) -> bytes:
        if generation is None or generation == self.generation:
            lane = self._live
            sse = lane[0]
            # The paced chunk of a stream: the template read on the whole frame answers for
            # the SSE framing too.
            whole = self._any_templates and sse.at_boundary(len(data))
            run = self._run
            if run is not None:
                if whole:
                    read = run.template.read(data)
                    if read is not None and read[0] and self._numbered_in(run, read[1]):
                        run.pieces.append(read[0])
                        self.quick = True
                        return data
                # Anything but more of the run's text: the run is handed over first.
                self._end_run()
            if whole:
                out = self._through_template(data, generation)
                if out is not None:
                    if self.quick and self._live_runs is not None:
                        self._begin_run()
                    return out
            decoder = self._live_data
            if decoder is not None:
                payload = sse.single(data)
                if payload is not None:
                    return self._one_frame(decoder, payload, data, generation)
                lines = sse.data_lines(data)
                if lines is not None:
                    return self._data_lines(lines, data, decoder.decode_data, generation)
        else:
            self._end_run()
            lane = self._lane(generation)
        try:
            frames = lane[0].feed(data)
        except TurngateError as exc:
            self.quick = False
            return self._write(self._fail(exc, generation))
        return self._frames(lane, frames, generation)

    def finish(self, cause: str | None = None) -> tuple[bytes, AssistantTurn | StreamFailed]:
        """The bytes that end the client's stream, and the turn or why there is none
        (``cause``: why the upstream's connection ended, when it broke)."""
        self._end_run()
        lane = self._lane(self.generation)
        try:
            frames = lane[0].close()
        except TurngateError as exc:
            # The bytes left over break the framing (a line over the limit): a failure to
            # report like any other, never an exception out of ``finish``.
            out = self._write(self._fail(exc, None))
        else:
            out = self._frames(lane, frames, None)
        outcome = self.assembler.finish(cause)
        if isinstance(outcome, StreamFailed):
            if not self._failure_written:
                self._failure_written = True
                out += self.encoder.encode_failure(outcome)
        else:
            out += self._held
        self._held = b""
        return out, outcome

    def fail(self, error: TurngateError) -> bytes:
        """Fail the active generation from outside (the state store refused the attempt): the
        bytes to write before aborting. A turn already complete loses its held terminator;
        its blocks are retracted."""
        self._end_run()
        if self._failure_written:
            return b""
        if not self.complete:
            return self._write(self.assembler.fail(error))
        self._held = b""
        self._failure_written = True
        failed = StreamFailed(error.message, rule=error.rule)
        failed.__cause__ = error
        failed.retracted = tuple(
            Retract(b.id, b.order, error.rule) for b in self.assembler.committed
        )
        return self.encoder.encode_failure(failed)

    def resume(self) -> None:
        """The upstream connection dropped and the same generation is resumed from its handle
        (Responses ``starting_after=N``): the cut frame is dropped, the decoders keep their
        state, and events the new connection replays are de-duplicated by sequence number."""
        self._end_run()
        max_line, max_frame = self._limits
        _, decoder = self._lane(self.generation)
        lane = (SSEDecoder(max_line=max_line, max_frame=max_frame), decoder)
        self._lanes[self.generation] = self._go_live(lane)

    def restart(self, generation: int) -> bytes:
        """A new attempt generation (a retry from the manifest bytes) takes over."""
        self._end_run()
        self.generation = generation
        lane = self._go_live(self._lane(generation))
        self.assembler.builder = lane[1].build_block
        self._failure_written = False
        self._held = b""
        self.cursor = None
        self._numbered = False
        return self._write(self.assembler.activate(generation))

    def _go_live(self, lane: tuple[SSEDecoder, StreamDecoder]) -> tuple[SSEDecoder, StreamDecoder]:
        """Make ``lane`` the active generation's. Its decoder is also kept as a data-only
        and as a template decoder when it is one, for ``feed``'s quick paths (no cast per
        chunk)."""
        self._live = lane
        self._live_data = cast(DataStreamDecoder, lane[1]) if self._data_only else None
        decoder = cast(TemplateStreamDecoder, lane[1]) if self._templates else None
        self._live_template = decoder
        blocks = cast(BlockStreamDecoder, lane[1]) if self._block_templates else None
        self._live_blocks = blocks
        self._live_runs = cast(TextRunDecoder, lane[1]) if self._text_runs else None
        return lane

    def _lane(self, generation: int) -> tuple[SSEDecoder, StreamDecoder]:
        lane = self._lanes.get(generation)
        if lane is None:
            max_line, max_frame = self._limits
            lane = (SSEDecoder(max_line=max_line, max_frame=max_frame), self._decoder_class())
            self._lanes[generation] = lane
        return lane

    def _frames(
        self, lane: tuple[SSEDecoder, StreamDecoder], frames: list[SSEFrame], generation: int | None
    ) -> bytes:
        """The client bytes of one read's frames, joined for one write."""
        out: list[bytes] = []
        take = None
        if lane is self._live and self._any_templates:
            # Frames that queued up in one read: each read through its template as a paced
            # one is.

            def take(frame: SSEFrame) -> bytes | None:
                return None if frame.truncated else self._through_template(frame.raw, generation)

        self.quick = self._decoded(frames, lane[1].decode, generation, out, take)
        return out[0] if len(out) == 1 else b"".join(out)

    def _begin_run(self) -> None:
        """After a frame of more text of a previewed block was read through its template:
        the frames of more text that follow it at frame boundaries are read with that
        template alone (``feed``), until a frame that is anything else."""
        decoder = self._live_runs
        found = None if decoder is None else decoder.text_run()
        if found is not None:
            index, template = found
            self._run = _TextRun(template, index, [], [])

    def _numbered_in(self, run: _TextRun, counts: tuple[int, ...]) -> bool:
        """Whether a frame of ``run`` with these template counts goes in it: no count (the
        decoder numbers it), or a sequence number past the resume cursor, which then moves
        to it as ``_count`` moves it. False: a replay or a frame out of order, for the
        frame-by-frame path to decide."""
        if not counts:
            return True
        if not self._numbered:
            return False
        seq, cursor = counts[0], self.cursor
        if cursor is not None and seq <= cursor:
            return False
        run.seqs.append(seq)
        self.cursor = seq
        return True

    def _end_run(self) -> None:
        """Hand the run's pieces to the decoder and the assembler as reading each frame on
        its own would have (``quick_frame``, then ``preview_more``), before anything else
        reads or changes either. In one go: between paced chunks the decoder's, the
        assembler's and this relay's state go cold, and each frame read through all three
        cost several times what the same calls cost here, together."""
        run, self._run = self._run, None
        if run is None or not run.pieces:
            return
        decoder = self._live_runs
        assert decoder is not None, "a run is begun only with a decoder that has them"
        first = decoder.took_text(run.index, run.pieces)
        seqs = run.seqs if first is None else range(first, first + len(run.pieces))
        taken = self.assembler.preview_run(run.index, run.pieces, seqs)
        # Its block was previewed and streaming at its first frame, and nothing but the
        # run's own frames came since.
        assert taken, "a run of more text was not taken by the assembler"

    def _through_template(self, frame: bytes, generation: int | None) -> bytes | None:
        """The client bytes of a whole frame of the active generation that fits its
        decoder's template (``quick`` set); None: it does not, nothing taken."""
        templates, blocks = self._live_template, self._live_blocks
        if templates is not None:
            taken = templates.quick_frame(frame)
            return None if taken is None else self._more_text(taken, frame, generation)
        if blocks is not None:
            part = blocks.quick_block(frame)
            if part is not None:
                return self._whole_text(blocks, part, frame, generation)
            if self.assembler.state is AssemblerState.STREAMING:
                return self._more_args(blocks, frame, generation)
        return None

    def _more_args(
        self, decoder: BlockStreamDecoder, frame: bytes, generation: int | None
    ) -> bytes | None:
        """A frame the decoder took as more arguments of the call it holds (``quick_args``):
        only its usage event goes through the assembler and the encoder (which write the
        usage when it changed). None: not taken."""
        try:
            held = decoder.quick_args(frame)
        except TurngateError as exc:
            self.quick = False
            return self._write(self._fail(exc, generation))
        if held is None:
            return None
        out: list[bytes] = []
        usage = held[0]
        # Nearly every chunk repeats the usage of the one before: nothing to take or write.
        if usage is not None and not (
            self.assembler.takes_usage_again(usage.usage) and self.encoder.writes_nothing(usage)
        ):
            self._feed_events([usage], generation, out)
        self.quick = not out
        return b"".join(out)

    def _one_frame(
        self, decoder: DataStreamDecoder, payload: bytes, data: bytes, generation: int | None
    ) -> bytes:
        """One frame of one ``data`` line, the paced chunk of a data-only stream: decoded
        without the frame list; more text in the envelope of the chunk before goes to the
        assembler without an event when it is more of a previewed block."""
        taken = decoder.quick_text(payload)
        if taken is not None:
            return self._more_text(taken, data, generation)
        try:
            events = decoder.parse_data(payload, data)
        except TurngateError as exc:
            self.quick = False
            return self._write(self._fail(exc, generation))
        out: list[bytes] = []
        self.quick = self._events(events, generation, out)
        return out[0] if len(out) == 1 else b"".join(out)

    def _more_text(self, taken: QuickDelta, data: bytes, generation: int | None) -> bytes:
        """A frame the decoder took as more text (``quick_text``, ``quick_frame``): relayed
        as it came when it is more of a previewed block; or as more arguments: held, nothing
        written, when they are more of a held call; through the assembler as the
        ``TextDelta`` or ``ArgsDelta`` else."""
        index, piece, seq, args = taken
        assembler = self.assembler
        if (
            assembler.hold_args(index, piece, seq, data)
            if args
            else assembler.preview_more(index, piece, seq)
        ):
            if self._numbered:
                self._count(None, seq)
            self.quick = True
            return b"" if args else data
        self.quick = False
        out: list[bytes] = []
        event = ArgsDelta(index, piece, seq, data) if args else TextDelta(index, piece, seq, data)
        self._feed_events([event], generation, out)
        return out[0] if len(out) == 1 else b"".join(out)

    def _whole_text(
        self,
        decoder: BlockStreamDecoder,
        part: TextPart,
        data: bytes,
        generation: int | None,
    ) -> bytes:
        """A frame the decoder took as a text block whole (``quick_block``): committed
        without its events when the previews and the commit write nothing but the frame (no
        marks), its events through the assembler's ``feed`` else."""
        index, text, _native, usage = part
        taken = self.encoder.marks == "none" and self.assembler.whole_text(
            index, text, usage, decoder.text_start
        )
        if taken:
            self.encoder.kinds[index] = "text"
            self.commits += 1
            self.quick = True
            return data
        self.quick = False
        out: list[bytes] = []
        self._feed_events(decoder.events(part, data), generation, out)
        return b"".join(out)

    def _data_lines(
        self,
        lines: list[bytes],
        data: bytes,
        decode_data: Callable[[bytes, bytes], list[StreamEvent]],
        generation: int | None,
    ) -> bytes:
        """``_frames`` of a read of several one-line ``data`` frames (``SSEDecoder.data_lines``),
        decoded without the frame list; a read that was only more previewed text is relayed
        as it came, in one piece."""

        def decode(line: bytes) -> list[StreamEvent]:
            return decode_data(line[6:], line + b"\n\n")

        out: list[bytes] = []
        self.quick = self._decoded(lines, decode, generation, out)
        # Every frame relayed as it came (a held one gives no piece): the read itself.
        return data if self.quick and len(out) == len(lines) else b"".join(out)

    def _decoded(
        self,
        items: list[T],
        decode: Callable[[T], list[StreamEvent]],
        generation: int | None,
        out: list[bytes],
        take: Callable[[T], bytes | None] | None = None,
    ) -> bool:
        """Append the client bytes of each item's events to ``out``, up to a decoder failure
        (its error event last); an item ``take`` takes (a template's quick read, its
        ``quick`` set) gives its bytes instead. True: every item was only more previewed text
        or more held arguments (``quick``)."""
        quick = True
        for item in items:
            if take is not None:
                taken = take(item)
                if taken is not None:
                    out.append(taken)
                    quick = self.quick and quick
                    continue
            try:
                decoded = decode(item)
            except TurngateError as exc:
                out.append(self._write(self._fail(exc, generation)))
                return False
            quick = self._events(decoded, generation, out) and quick
        return quick

    def _events(self, events: list[StreamEvent], generation: int | None, out: list[bytes]) -> bool:
        """Append the client bytes of one frame's events to ``out``. True (``quick``): the
        frame was only more text of a block already previewed, relayed as it came (its one
        piece appended), or more arguments of a call being held (nothing appended)."""
        active = generation is None or generation == self.generation
        if active and len(events) == 1:
            event = events[0]
            if self._previewed(event):
                assert event.raw is not None
                assert event.seq is not None
                if self._numbered:
                    self._count(event, event.seq)
                out.append(event.raw)
                return True
            if self._held_args(event):
                assert event.seq is not None
                if self._numbered:
                    self._count(event, event.seq)
                return True
        self._feed_events(events, generation, out)
        return False

    def _feed_events(
        self, events: list[StreamEvent], generation: int | None, out: list[bytes]
    ) -> None:
        """Append the client bytes of ``events``, each through the assembler's ``feed`` and
        the encoder."""
        active = generation is None or generation == self.generation
        feed, write = self.assembler.feed, self._write
        for event in events:
            outputs = feed(event, generation=generation)
            if outputs:
                out.append(write(outputs))
            seq = event.seq
            if active and seq is not None and (self._numbered or type(event) is ResponseStart):
                self._count(event, seq)

    def _previewed(self, event: StreamEvent) -> bool:
        """An event of the active generation taken as more text of a block already previewed
        (``StreamAssembler.preview_text``), to relay as its frame's bytes: what ``feed`` and
        the encoder make of it (a ``Preview`` that is not its block's first, written raw)."""
        return (
            type(event) is TextDelta
            and event.raw is not None
            and self.assembler.preview_text(event)
        )

    def _held_args(self, event: StreamEvent) -> bool:
        """An event of the active generation taken as more arguments of a call being held
        (``StreamAssembler.hold_args``): what ``feed`` makes of it, with nothing to write."""
        return (
            type(event) is ArgsDelta
            and event.seq is not None
            and self.assembler.hold_args(event.index, event.fragment, event.seq, event.raw)
        )

    def _count(self, event: StreamEvent | None, seq: int) -> None:
        """Move the resume cursor to ``seq`` (``event``: the event numbered so, if built)."""
        if type(event) is ResponseStart:
            # Only an API that numbers its first event numbers them all (Responses).
            self._numbered = True
        if self._numbered and (self.cursor is None or seq > self.cursor):
            self.cursor = seq

    def _fail(self, error: TurngateError, generation: int | None) -> list[Output]:
        if generation is not None and generation != self.generation:
            return []
        return self.assembler.fail(error)

    def _write(self, outputs: list[Output]) -> bytes:
        if not outputs:
            return b""
        if len(outputs) == 1 and type(outputs[0]) is Preview:
            return self.encoder.encode(outputs[0])
        out = bytearray()
        for output in outputs:
            if isinstance(output, Quarantine):
                self.quarantine.append(output)
            elif isinstance(output, Failed):
                self._failure_written = True
            elif isinstance(output, Commit):
                self.commits += 1
            elif isinstance(output, Complete):
                self._held += self.encoder.encode(output)
                continue
            out += self.encoder.encode(output)
        return bytes(out)


@dataclass(slots=True)
class _TextRun:
    """Frames of more text of one previewed block (``index``), read through ``template``
    and relayed as they came; ``pieces``: their texts, not yet handed to the decoder and
    the assembler; ``seqs``: their sequence numbers where the frames carry them."""

    template: FrameTemplate
    index: int
    pieces: list[str]
    seqs: list[int]
