"""Server-Sent Events, sans-I/O: bytes in, frames out; and the bytes turngate writes back.

``SSEDecoder`` follows the WHATWG event-stream rules in the h11 style: ``feed(data)``
returns the frames completed by ``data`` (possibly none: more bytes are needed) and
``close()`` ends the input. Lines end in ``\\n``, ``\\r\\n`` or ``\\r``; a line starting with
``:`` is a comment; ``data:`` lines join with ``\\n``; one space after the colon is dropped;
a UTF-8 BOM at the very start is skipped. A frame is dispatched on its blank line and only
when it holds a ``data`` field; the bytes of a comment-only block stay in front of the next
frame's ``raw``, so the ``raw`` of all frames, joined, is the input itself.

A ``\\r`` at the end of the buffered bytes is not taken as a line end until the next byte
(or ``close()``) shows whether a ``\\n`` follows: so a CRLF split across two reads gives the
same frames, byte for byte, as one read. Buffers are bounded: a line longer than
``max_line`` or a frame larger than ``max_frame`` raises ``SSEFrameTooLarge`` instead of
growing without end, and a line trickling in is searched once, not once per read.

Input without ``\\r`` (what most providers send) is cut at blank lines in bulk with
``find``, and a block's fields are read once the block is whole; the first ``\\r`` hands the
rest to the line-by-line scanner. Both give the same frames at any split.

``StreamEncoder`` is what the four API encoders share (marks, previews relayed as their raw
frames, the failure path); ``StreamRelay`` (relay.py) chains SSE decoding, the API's stream
decoder, the ``StreamAssembler`` and the API's encoder.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal, assert_never

import orjson

from turngate.errors import TurngateError, UpstreamProtocolError
from turngate.graph.assembler import (
    MAX_NESTING,
    Commit,
    Complete,
    Failed,
    Output,
    Preview,
    Quarantine,
    Retract,
    nests_deeper,
)
from turngate.graph.events import (
    BlockStart,
    Native,
    ResponseStart,
    StreamEvent,
    UsageEvent,
    event_class,
)

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"[\r\n]")
_CR = 13
_LF = 10
# A reconnection time in milliseconds; a longer run of digits is ignored like any invalid
# value (int() refuses more than 4300 digits, and nobody waits 10**18 ms).
_MAX_RETRY_DIGITS = 18

# A generated image is one event, its bytes base64 in a single data line: 4.7 MB for a 1K
# Gemini image seen in the field, 10.4 MB for a 4K one, and Responses' image_generation
# repeats its final image in response.completed. The bound is against a runaway stream:
# the decoder holds about three times it while refusing one (tests/hardening).
DEFAULT_MAX_LINE = 32 * 1024 * 1024
DEFAULT_MAX_FRAME = 32 * 1024 * 1024


class SSEError(UpstreamProtocolError):
    """The upstream's event stream breaks the SSE framing rules."""

    rule = "sse_malformed"


class SSEFrameTooLarge(SSEError):
    rule = "sse_frame_too_large"


class SSETruncated(SSEError):
    """The input ended inside a frame (no blank line after its last field)."""

    rule = "sse_truncated"


@event_class
class SSEFrame:
    """One dispatched event. ``data`` is the joined ``data`` lines; ``raw`` its exact bytes."""

    data: bytes
    event: str | None = None
    id: str | None = None
    retry: int | None = None
    raw: bytes = b""
    # True only for the frame ``close()`` hands back when the input stopped inside it.
    truncated: bool = False


class SSEDecoder:
    def __init__(
        self, *, max_line: int = DEFAULT_MAX_LINE, max_frame: int = DEFAULT_MAX_FRAME
    ) -> None:
        self.max_line = max_line
        self.max_frame = max_frame
        self._buf = bytearray()
        # Next unread byte; the current frame's raw bytes start at offset 0 of ``_buf``.
        self._pos = 0
        self._seen = 0
        self._started = False
        self._closed = False
        # No ``\r`` came yet: frames end in ``\n\n`` and ``_scan_blocks`` cuts whole blocks
        # with bytes operations. The first ``\r`` hands the rest to the line scanner.
        self._plain = True
        self._data: list[bytes] = []
        self._has_data = False
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        self.last_event_id: str | None = None
        # Set by ``close()`` when the input ended inside a line or a frame.
        self.truncated = False

    def feed(self, data: bytes) -> list[SSEFrame]:
        if self._closed:
            raise SSEError("SSE input fed after close()", rule="sse_closed")
        payload = self.single(data)
        if payload is not None:
            return [SSEFrame(payload, None, None, None, data)]
        if self._plain and data.find(b"\r") >= 0:
            self._to_lines()
        buf = self._buf
        if self._started and self._plain and not buf:
            # The common read: the last one ended on a frame boundary. Cut this one where it
            # is and keep only what is left of an unfinished frame.
            frames, taken, pos, seen = self._scan_blocks(data, 0, 0)
            if taken < len(data):
                buf += memoryview(data)[taken:]
        else:
            buf += data
            if not self._started:
                if len(buf) < len(_BOM) and _BOM.startswith(buf):
                    return []
                if buf.startswith(_BOM):
                    del buf[: len(_BOM)]
                self._started = True
            if not self._plain:
                return self._scan(final=False)
            frames, taken, pos, seen = self._scan_blocks(buf, self._pos, self._seen)
            if taken:
                del buf[:taken]
        self._pos, self._seen = pos - taken, seen - taken
        if not self._plain:
            # A long unfinished block was handed to the line scanner: its lines are checked
            # against ``max_line`` now.
            frames += self._scan(final=False)
        return frames

    def at_boundary(self, size: int) -> bool:
        """Whether a read of ``size`` bytes that is exactly one whole frame ending in
        ``\n`` (one ``data:`` line, maybe after an ``event:`` line: what a caller may know
        another way, see ``FrameTemplate.framed``) would be returned by ``feed`` as that one
        frame, with no state changed."""
        return self._between_frames() and size - 2 <= self.max_line and size <= self.max_frame

    def _between_frames(self) -> bool:
        # Past the input's start, not closed, nothing of a frame held: the next byte read
        # starts a frame. Both scanners empty the buffer only when a frame was just
        # dispatched, and dispatching clears a frame's fields; a ``\r`` that may begin a
        # CRLF stays in the buffer until the next byte.
        return self._started and not self._buf and not self._closed

    def single(self, data: bytes) -> bytes | None:
        """The ``data`` of ``data`` when it is exactly one frame of one ``data:`` line read
        at a frame boundary (an LLM's paced chunk), its lines ended by ``\n`` or, all of
        them, by ``\r\n`` (Gemini's): ``feed`` would return that one frame and change no
        state (a decoder still reading plain ``\n`` input stays so: nothing is left over).
        None: anything else, for ``feed``."""
        if not (self.at_boundary(len(data)) and data.startswith(b"data: ")):
            return None
        last = len(data) - 2
        # ``find``, not ``in``: bytes' ``in`` tries its operand as an int first and raises
        # and clears a TypeError on every call.
        cr = data.find(b"\r")
        if cr < 0:
            return data[6:last] if data.find(b"\n") == last and data[-1] == _LF else None
        end = len(data) - 4
        if cr == end and data.endswith(b"\r\n\r\n") and data.find(b"\n") == end + 1:
            return data[6:end]
        return None

    def data_lines(self, data: bytes) -> list[bytes] | None:
        """The frames of ``data`` without their blank lines (``data: …`` each), when it is
        two or more whole frames of one ``data:`` line each, read at a frame boundary (paced
        chunks that queued up while the proxy was busy): ``feed`` would return those frames
        and change no state. None: anything else, for ``feed``."""
        if not self._between_frames() or data.find(b"\r") >= 0:
            return None
        lines = data.split(b"\n\n")
        if len(lines) < 3 or lines.pop():
            return None
        max_line, max_frame = self.max_line, self.max_frame - 2
        for line in lines:
            if (
                not line.startswith(b"data: ")
                or line.find(b"\n") >= 0
                or len(line) > max_line
                or len(line) > max_frame
            ):
                return None
        return lines

    def close(self, *, strict: bool = False) -> list[SSEFrame]:
        """End of input. Returns the frame cut short, flagged ``truncated``, if there was one.

        With ``strict`` a cut-short frame raises ``SSETruncated`` instead.
        """
        if self._closed:
            return []
        # The lines of an unfinished block are read one by one from here.
        self._to_lines()
        frames = self._scan(final=True)
        self._closed = True
        buf = self._buf
        if self._pos < len(buf):
            self._line(bytes(buf[self._pos :]))
        cut = self._has_data or self._event is not None or self._id is not None
        if cut or self._retry is not None:
            self.truncated = True
            if strict:
                raise SSETruncated(f"event stream ended inside a frame ({len(buf)} bytes pending)")
            if self._has_data:
                frames.append(self._frame(bytes(buf), truncated=True))
        buf.clear()
        self._pos = self._seen = 0
        return frames

    def _to_lines(self) -> None:
        """From now on every line goes through ``_scan``. ``_scan_blocks`` stops only on
        block boundaries, so the frame state is clean at ``_pos``; only ``_seen`` (there:
        where to look for the next blank line) means something else to ``_scan``."""
        if self._plain:
            self._plain = False
            self._seen = self._pos

    def _scan_blocks(
        self, text: bytes | bytearray, pos: int, seen: int
    ) -> tuple[list[SSEFrame], int, int, int]:
        """Frames of ``\\n``-only input, cut at blank lines with ``find``; a block's fields
        are read once the block is whole. ``pos``: the first unread line (a block start);
        ``seen``: where the search for a blank line resumes (none starts before it).

        Returns the frames, the bytes they took (from 0), and the new ``pos`` and ``seen``.
        """
        end = len(text)
        frame_end = 0
        frames: list[SSEFrame] = []
        max_line = self.max_line
        find = text.find
        while pos < end:
            if text[pos] == _LF:
                # A blank line at a block start: it ends a comment-only block, or nothing.
                after = pos + 1
            else:
                if seen > pos:
                    # This block was searched before, up to ``seen``.
                    at = find(b"\n\n", seen)
                else:
                    at = find(b"\n", pos)
                    if at >= 0 and at + 1 < end and text[at + 1] != _LF:
                        at = find(b"\n\n", at)
                    elif at + 1 == end:
                        at = -1
                if at < 0:
                    break
                after = at + 2
                if at - pos > max_line:
                    self._check_lines(bytes(text[pos:at]))
                head = pos
                if text.startswith(b"event: ", pos):
                    line_end = text.find(b"\n", pos, at)
                    head = at if line_end < 0 else line_end + 1
                if text.startswith(b"data: ", head) and text.find(b"\n", head, at) < 0:
                    # One ``data`` line, the frame of nearly every stream, maybe after one
                    # ``event`` line (typed streams: Anthropic, Responses). The fields of a
                    # block start out empty, so that is the whole frame.
                    if after - frame_end > self.max_frame:
                        raise SSEFrameTooLarge(f"SSE frame larger than {self.max_frame} bytes")
                    raw = bytes(text[frame_end:after])
                    event = None
                    if head != pos:
                        event = raw[pos + 7 - frame_end : head - 1 - frame_end].decode(
                            "utf-8", "replace"
                        )
                    frames.append(
                        SSEFrame(raw[head + 6 - frame_end : at - frame_end], event, raw=raw)
                    )
                    pos = seen = frame_end = after
                    continue
                for line in bytes(text[pos:at]).split(b"\n"):
                    self._line(line)
            if self._has_data:
                if after - frame_end > self.max_frame:
                    raise SSEFrameTooLarge(f"SSE frame larger than {self.max_frame} bytes")
                frames.append(self._frame(bytes(text[frame_end:after])))
                frame_end = after
            else:
                self._event = None
                self._id = None
                self._retry = None
            pos = seen = after
        if end - frame_end > self.max_frame:
            raise SSEFrameTooLarge(f"SSE frame larger than {self.max_frame} bytes")
        if end - pos > max_line:
            # A long unfinished block: the line scanner reads it line by line from here, so
            # an over-long line is refused before the whole block has come.
            self._plain = False
            return frames, frame_end, pos, pos
        # The last byte may be the first ``\n`` of a blank line.
        return frames, frame_end, pos, max(pos, end - 1)

    def _check_lines(self, block: bytes) -> None:
        if any(len(line) > self.max_line for line in block.split(b"\n")):
            raise SSEFrameTooLarge(f"SSE line longer than {self.max_line} bytes")

    def _scan(self, *, final: bool) -> list[SSEFrame]:
        buf = self._buf
        end = len(buf)
        pos = self._pos
        # Bytes of the unfinished line already searched: a line trickling in is not rescanned.
        seen = max(pos, self._seen)
        frame_end = 0
        frames: list[SSEFrame] = []
        # The next \r and the next \n at or after ``seen`` (-1: none in the buffer), each
        # looked for again only once passed: bytes.find is memchr, many times the pattern's
        # speed over a megabyte-long line, and a stream without one of the two is not
        # searched to its end at every line.
        next_cr = buf.find(b"\r", seen)
        next_lf = buf.find(b"\n", seen)
        while True:
            if 0 <= next_cr < seen:
                next_cr = buf.find(b"\r", seen)
            if 0 <= next_lf < seen:
                next_lf = buf.find(b"\n", seen)
            if next_cr < 0 and next_lf < 0:
                seen = end
                break
            at = next_lf if next_cr < 0 or 0 <= next_lf < next_cr else next_cr
            if buf[at] == _CR:
                if at + 1 < end:
                    after = at + 2 if buf[at + 1] == _LF else at + 1
                elif final:
                    after = at + 1
                else:
                    seen = at
                    break
            else:
                after = at + 1
            if at - pos > self.max_line:
                raise SSEFrameTooLarge(f"SSE line longer than {self.max_line} bytes")
            if at == pos:
                if self._has_data:
                    if after - frame_end > self.max_frame:
                        raise SSEFrameTooLarge(f"SSE frame larger than {self.max_frame} bytes")
                    frames.append(self._frame(bytes(buf[frame_end:after])))
                    frame_end = after
                else:
                    self._event = None
                    self._id = None
                    self._retry = None
            else:
                self._line(bytes(buf[pos:at]))
            pos = seen = after
        if end - pos > self.max_line:
            raise SSEFrameTooLarge(f"SSE line longer than {self.max_line} bytes")
        if end - frame_end > self.max_frame:
            raise SSEFrameTooLarge(f"SSE frame larger than {self.max_frame} bytes")
        if frame_end:
            del buf[:frame_end]
        self._pos = pos - frame_end
        self._seen = seen - frame_end
        return frames

    def _line(self, line: bytes) -> None:
        if line[:1] == b":":
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            # One slice: a data line may be megabytes (a generated image).
            start = colon + 2 if line[colon + 1 : colon + 2] == b" " else colon + 1
            name, value = line[:colon], line[start:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id = value.decode("utf-8", "replace")
                self.last_event_id = self._id
        elif name == b"retry" and value.isdigit() and len(value) <= _MAX_RETRY_DIGITS:
            self._retry = int(value)
        # Any other field name is ignored, as the SSE rules require.

    def _frame(self, raw: bytes, *, truncated: bool = False) -> SSEFrame:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        frame = SSEFrame(
            data=data,
            event=self._event,
            id=self._id,
            retry=self._retry,
            raw=raw,
            truncated=truncated,
        )
        self._data = []
        self._has_data = False
        self._event = None
        self._id = None
        self._retry = None
        return frame


def encode_frame(
    event: str | None,
    data: bytes,
    *,
    id: str | None = None,
    retry: int | None = None,
    line_end: bytes = b"\n",
) -> bytes:
    """One SSE frame: optional ``event``/``id``/``retry`` lines, ``data`` lines, a blank line."""
    out = bytearray()
    if event is not None:
        _check_field(event)
        out += b"event: " + event.encode() + line_end
    if id is not None:
        _check_field(id)
        out += b"id: " + id.encode() + line_end
    if retry is not None:
        out += b"retry: " + str(retry).encode() + line_end
    if b"\n" in data or b"\r" in data:
        for line in _LINE_END.split(data.replace(b"\r\n", b"\n")):
            out += b"data: " + line + line_end
    else:
        # One line, as JSON data always is: found by two memchr scans (a generated image's
        # event is megabytes; the pattern's split reads it at a tenth of that speed).
        out += b"data: " + data + line_end
    out += line_end
    return bytes(out)


def encode_comment(text: str, *, line_end: bytes = b"\n") -> bytes:
    """A comment block (``: text``) that SSE clients skip; a blank line closes it."""
    lines = _LINE_END.split(text.replace("\r\n", "\n").encode())
    return b"".join(b": " + line + line_end for line in lines) + line_end


def _check_field(value: str) -> None:
    if "\n" in value or "\r" in value:
        raise ValueError(f"an SSE field value cannot hold a line break: {value!r}")


# --- relaying a stream to the client: what the four API encoders share ---------------------

MarkStyle = Literal["comments", "events", "none"]
MARK_STYLES: tuple[MarkStyle, ...] = ("comments", "events", "none")


class StreamEncoder:
    """Turns the assembler's outputs into the bytes the client receives, in the API's own form.

    Previews go out as their raw frames when the event has them; a committed tool call goes
    out whole; commit boundaries are marked as SSE comments (``: turngate commit <id>``), as
    explicit ``turngate.*`` events, or not at all. After ``Failed`` the relay must abort the
    connection: the API's normal terminator is never written after a failure.
    """

    line_end = b"\n"
    default_marks: MarkStyle = "comments"

    def __init__(self, marks: MarkStyle | None = None) -> None:
        self.marks: MarkStyle = marks if marks is not None else self.default_marks
        # Block index -> kind, as the block's first preview or its commit showed it.
        self.kinds: dict[int, str] = {}

    def encode(self, output: Output) -> bytes:
        match output:
            case Preview():
                event = output.event
                if isinstance(event, BlockStart):
                    self.kinds[event.index] = event.kind
                elif isinstance(event, ResponseStart):
                    self.started(event)
                out = b""
                if output.first and output.block_id is not None and self.marks == "events":
                    index = getattr(event, "index", None)
                    out = self.mark("preview", output.block_id, index=index)
                raw = event.raw
                return out + (self.render(event) if raw is None else raw)
            case Commit():
                self.kinds[output.index] = output.start.kind
                body = self.commit_held(output) if output.held else self._relay(output.stop)
                return body + self.mark(
                    "commit", output.block_id, index=output.index, kind=output.start.kind
                )
            case Retract():
                return self.mark(
                    "retract", output.block_id, index=output.index, reason=output.reason
                )
            case Quarantine():
                return b""
            case Complete():
                return b"" if output.event is None else self._relay(output.event)
            case Failed():
                return self.encode_failure(output.error)
            case _:
                assert_never(output)

    def writes_nothing(self, event: UsageEvent) -> bool:
        """Whether ``encode`` of a ``Preview`` of ``event`` (not its block's first) would
        write nothing and change nothing. False when not known."""
        return False

    def encode_failure(self, error: TurngateError) -> bytes:
        """Retraction marks for what was previewed, then the API's own error event."""
        retracted = getattr(error, "retracted", ())
        marks = b"".join(
            self.mark("retract", r.block_id, index=r.index, reason=r.reason) for r in retracted
        )
        return marks + self.error_frame(error)

    def mark(self, what: str, block_id: str, **detail: object) -> bytes:
        if self.marks == "none":
            return b""
        if self.marks == "comments":
            extra = detail.get("reason")
            text = f"turngate {what} {block_id}" + (f" {extra}" if extra else "")
            return encode_comment(text, line_end=self.line_end)
        payload = {"block": block_id, **{k: v for k, v in detail.items() if v is not None}}
        return encode_frame(f"turngate.{what}", orjson.dumps(payload), line_end=self.line_end)

    def kind_of(self, index: int) -> str | None:
        return self.kinds.get(index)

    def _relay(self, event: StreamEvent) -> bytes:
        return self.render(event) if event.raw is None else event.raw

    # --- what each API supplies ---------------------------------------------------------

    def started(self, event: ResponseStart) -> None:
        """A response started: keep what later rendered frames need (ids, model)."""

    def render(self, event: StreamEvent) -> bytes:
        """The event in the API's own frames, for events that have no raw frame of their own."""
        raise UpstreamProtocolError(f"cannot render a {type(event).__name__} for this API")

    def commit_held(self, commit: Commit) -> bytes:
        """A held block (tool call, server tool, unknown kind), relayed whole."""
        raise UpstreamProtocolError(f"cannot relay a committed {commit.start.kind} for this API")

    def error_frame(self, error: TurngateError) -> bytes:
        raise NotImplementedError


# --- helpers the API stream decoders share --------------------------------------------------


def frame_json(data: bytes) -> dict[str, Any]:
    """A frame's data as one JSON object, or ``UpstreamProtocolError``.

    Nesting is bounded by ``MAX_NESTING``: orjson reads 1024 levels but writes only 254, and
    the encoders write parts of frames back (and compare them) when they relay them.
    """
    value = frame_object(data)
    check_nesting(data, value)
    return value


def frame_object(data: bytes) -> dict[str, Any]:
    """``frame_json`` without the nesting bound, for a decoder that checks it itself."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UpstreamProtocolError(
            f"stream frame data is not JSON: {data[:80]!r}", rule="stream_malformed"
        ) from exc
    if type(value) is not dict:
        raise UpstreamProtocolError(
            f"stream frame data is a JSON {type(value).__name__}, not an object",
            rule="stream_malformed",
        )
    return value


def check_nesting(data: bytes, value: dict[str, Any]) -> None:
    """``UpstreamProtocolError`` when ``value`` (parsed from ``data``) nests deeper than
    ``MAX_NESTING``."""
    # Counting brackets is a fast bound: only a frame with that many can nest that deep.
    if data.count(b"{") + data.count(b"[") > MAX_NESTING and nests_deeper(value, MAX_NESTING):
        raise UpstreamProtocolError(
            f"stream frame data nests JSON deeper than {MAX_NESTING} levels",
            rule="stream_malformed",
        )


def own_frame(events: list[StreamEvent], raw: bytes, pure: bool) -> list[StreamEvent]:
    """Give a frame's bytes to its last event when the frame can be relayed as it came.

    The decoder built the events with ``raw=b""`` (pure frame) or ``raw=None`` (the frame
    holds something that must wait, so every event is rendered on its own). A frame that
    gave no event at all becomes one ``Native`` event, so no byte is ever dropped silently.
    """
    if not events:
        return [Native("frame", raw=raw if pure else None)]
    if pure:
        events[-1] = replace(events[-1], raw=raw)
    return events
