"""A stream frame read through the one before it: only the values in its holes differ.

A provider writes every text frame of a stream from the same envelope: ids, model, indexes,
and a few values that change from frame to frame (the text; OpenAI's random
``obfuscation`` string; a Responses ``sequence_number``). ``FrameTemplate`` keeps the bytes
around those values (the holes) from a frame the decoder parsed in full; a later frame with
the same bytes around holes that each hold one valid value of their kind is that frame with
other values, so only its text (and counts) are read: a short ``orjson`` call instead of the
whole object.

Why that is exact: ``cut`` makes a hole only where a probe parse shows the value at its
path to be, whole; the probe writes other values into every hole and the parse must give
the same object with those values at those paths. A JSON value token replaced by another of
the same kind leaves every other token, and so the object, as it was. A text or token hole
is parsed with the quotes around it: a string body holds no unescaped quote, so ``"`` +
body + ``"`` parses only when the body ends the string exactly where the hole ends (a cut
inside an escaped quote leaves an odd run of backslashes and fails). A count hole is the
digits of a non-negative integer as JSON writes it. Anything else changed misses the
template and the decoder reads the frame in full.

``framed`` extends a template over the frame's SSE lines (``event:``, ``data:``, the blank
line): a read that fits it is one whole frame, because no hole can hold a line break (JSON
strings hold no raw control characters; counts are digits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from turngate.graph.events import UsageEvent
from turngate.graph.turn import Usage

# text: any string, read; token: a string only checked (letters and digits as they stand);
# count: a non-negative integer; pad: spaces before the frame's closing brace (Anthropic
# pads its frames to lengths that hide the text's).
HoleKind = Literal["text", "token", "count", "pad"]
Path = tuple[str | int, ...]

# What the probe writes into the holes: values no provider's envelope holds.
_PROBES: dict[HoleKind, str | int] = {
    "text": "\x01turngate\x01",
    "token": "\x02turngate\x02",
    "count": 987654321,
    "pad": "   ",
}
# More digits than any sequence number; orjson reads a longer integer as a float.
_MAX_DIGITS = 18
# What may stand before the data of a frame a template covers: one ``event`` line at most.
_HEAD = re.compile(rb"(?:event:[^\r\n]*(?:\r\n|\r|\n))?data: ?\Z")
# The shapes ``read`` reads without the general loop (``cut`` gives these very tuples).
_TEXT: tuple[HoleKind, ...] = ("text",)
_TEXT_TOKEN: tuple[HoleKind, ...] = ("text", "token")
_TEXT_PAD: tuple[HoleKind, ...] = ("text", "pad")
_COUNT_TEXT_TOKEN: tuple[HoleKind, ...] = ("count", "text", "token")
_SHAPES = (_TEXT, _TEXT_TOKEN, _TEXT_PAD, _COUNT_TEXT_TOKEN)
_TAILS = frozenset({b"\n\n", b"\r\n\r\n", b"\r\n\n", b"\n\r\n"})


@dataclass(frozen=True, slots=True)
class Hole:
    """Where a changing value sits: after ``key`` (its JSON key and colon, as the provider
    writes them) and at ``path`` in the parsed frame."""

    key: bytes
    path: Path
    kind: HoleKind


# The spaces before the last byte of a frame's data, its object's closing brace.
PAD = Hole(b"", (), "pad")

# A delta a decoder read through its template: (block index, its text or argument
# fragment, its sequence number, whether it is arguments).
QuickDelta = tuple[int, str, int, bool]
# A text block whole in one frame, read through its template (Gemini parts): its index,
# its text, the frame's usage (as sent, and counted).
TextPart = tuple[int, str, dict[str, Any] | None, Usage | None]
# More arguments of a call a decoder holds, read through its template (Gemini's streamed
# ``partialArgs``): the usage event decoding the chunk gives, if any.
HeldArgs = tuple[UsageEvent | None]


@dataclass(frozen=True, slots=True)
class FrameTemplate:
    """The fixed bytes of a frame (``pieces``) around its holes (``holes`` and their
    ``kinds``, in byte order): one text hole, any others."""

    pieces: tuple[bytes, ...]
    kinds: tuple[HoleKind, ...]
    holes: tuple[Hole, ...]

    def read(self, data: bytes) -> tuple[str, tuple[int, ...]] | None:
        """The text and the counts (in byte order) of ``data`` when it is this template
        with other values in its holes; None for anything else."""
        pieces = self.pieces
        first, last = pieces[0], pieces[-1]
        if not (data.startswith(first) and data.endswith(last)):
            return None
        at, stop = len(first), len(data) - len(last)
        if stop < at:
            return None
        try:
            if self.kinds is _TEXT:
                text = orjson.loads(data[at - 1 : stop + 1])
                return (text, ()) if type(text) is str else None
            if self.kinds is _TEXT_TOKEN:
                return self._text_token(data, at, stop)
            if self.kinds is _TEXT_PAD:
                return self._text_pad(data, at, stop)
            if self.kinds is _COUNT_TEXT_TOKEN:
                return self._count_text_token(data, at, stop)
            return self._holes(data, at, stop)
        except orjson.JSONDecodeError:
            return None

    def _text_token(
        self, data: bytes, at: int, stop: int, middle: bytes | None = None
    ) -> tuple[str, tuple[int, ...]] | None:
        """``read`` of a text hole and then a token (Chat's content, then obfuscation), the
        two apart by ``middle`` (the template's only middle piece by default)."""
        middle = self.pieces[1] if middle is None else middle
        # The middle ends with the quote that opens the token, the last quote before the
        # end unless the token holds an escaped one.
        split = data.rfind(b'"', at, stop) - len(middle) + 1
        if split < at or not data.startswith(middle, split):
            split = data.find(middle, at, stop)
            if split < 0:
                return None
        if not _token(data, split + len(middle), stop):
            return None
        text = orjson.loads(data[at - 1 : split + 1])
        return (text, ()) if type(text) is str else None

    def _text_pad(self, data: bytes, at: int, stop: int) -> tuple[str, tuple[int, ...]] | None:
        """``read`` of a text hole and then padding (Anthropic's text deltas)."""
        middle = self.pieces[1]
        # The middle ends in a brace: the padding is every space and tab after it.
        end = len(data[:stop].rstrip(b" \t")) - len(middle)
        if end < at or not data.startswith(middle, end):
            return None
        text = orjson.loads(data[at - 1 : end + 1])
        return (text, ()) if type(text) is str else None

    def _count_text_token(
        self, data: bytes, at: int, stop: int
    ) -> tuple[str, tuple[int, ...]] | None:
        """``read`` of a count, a text hole and a token (a Responses text delta: its
        sequence number, its text, its obfuscation)."""
        after = self.pieces[1]
        end = data.find(after, at, stop)
        count = _count(data, at, end) if end >= 0 else -1
        if count < 0:
            return None
        read = self._text_token(data, end + len(after), stop, self.pieces[2])
        return None if read is None else (read[0], (count,))

    def _holes(self, data: bytes, at: int, stop: int) -> tuple[str, tuple[int, ...]] | None:
        """``read`` of any holes, in order: each ends where the next fixed piece is found."""
        pieces, kinds = self.pieces, self.kinds
        final = len(kinds) - 1
        text: str | None = None
        counts: list[int] = []
        for n, kind in enumerate(kinds):
            if n == final:
                end = following = stop
            else:
                after = pieces[n + 1]
                end = data.find(after, at, stop)
                if end < 0:
                    return None
                following = end + len(after)
            if kind == "text":
                value = orjson.loads(data[at - 1 : end + 1])
                if type(value) is not str:
                    return None
                text = value
            elif kind == "token":
                if not _token(data, at, end):
                    return None
            elif kind == "pad":
                if data[at:end].strip(b" \t"):
                    return None
            else:
                count = _count(data, at, end)
                if count < 0:
                    return None
                counts.append(count)
            at = following
        return None if text is None else (text, tuple(counts))

    def filled(self, values: list[str | int]) -> bytes:
        """The template with ``values`` in its holes, in order."""
        out = [self.pieces[0]]
        for kind, value, piece in zip(self.kinds, values, self.pieces[1:], strict=True):
            if kind == "pad":
                out.append(str(value).encode())
            else:
                body = orjson.dumps(value)
                out.append(body if type(value) is int else body[1:-1])
            out.append(piece)
        return b"".join(out)

    def framed(self, raw: bytes, data: bytes) -> FrameTemplate | None:
        """This template (cut from ``data``) over the whole frame ``raw`` it came in: its
        ``event`` line, ``data:`` and blank line become fixed bytes. None when the frame is
        not one ``data`` line (after one ``event`` line at most) ending in a blank line:
        a read fitting a template of more lines need not be one frame."""
        around = frame_around(raw, data)
        if around is None:
            return None
        head, tail = around
        pieces = self.pieces
        return FrameTemplate(
            (head + pieces[0], *pieces[1:-1], pieces[-1] + tail), self.kinds, self.holes
        )


def frame_around(raw: bytes, data: bytes) -> tuple[bytes, bytes] | None:
    """The bytes of the SSE frame ``raw`` before and after its data ``data``: its ``event``
    line and ``data:``, then its line end and blank line. None when the frame is not one
    ``data`` line (after one ``event`` line at most) ending in a blank line."""
    if data.find(b"\n") >= 0 or data.find(b"\r") >= 0:
        return None
    for tail in _TAILS:
        if raw.endswith(data + tail):
            head = raw[: len(raw) - len(data) - len(tail)]
            return None if _HEAD.match(head) is None else (head, tail)
    return None


def _count(data: bytes, at: int, end: int) -> int:
    """``data[at:end]`` as a JSON non-negative integer; -1 when it is not one."""
    digits = data[at:end]
    if not digits.isdigit() or len(digits) > _MAX_DIGITS:
        return -1
    if digits[0] == 48 and len(digits) > 1:  # a leading zero is not JSON
        return -1
    return int(digits)


def _token(data: bytes, at: int, end: int) -> bool:
    """Whether ``data[at:end]`` is a JSON string body. OpenAI's obfuscation strings are
    letters and digits, valid as they stand; anything else is parsed."""
    return data[at:end].isalnum() or type(orjson.loads(data[at - 1 : end + 1])) is str


def read_with(template: FrameTemplate | None, frame: bytes) -> tuple[str, tuple[int, ...]] | None:
    """``template.read(frame)``; None without a template."""
    return None if template is None else template.read(frame)


def cut(data: bytes, parsed: dict[str, Any], holes: tuple[Hole, ...]) -> FrameTemplate | None:
    """The template of ``data`` (parsed as ``parsed``) with ``holes``; None when a hole's
    value is not where its key is, as orjson writes it, or the probe does not put the values
    back where they were."""
    spans: list[tuple[int, int, Hole]] = []
    for hole in holes:
        span = _span(data, hole, value_at(parsed, hole.path))
        if span is None:
            return None
        spans.append((*span, hole))
    spans.sort(key=lambda span: span[0])
    if sum(1 for hole in holes if hole.kind == "text") != 1:
        return None
    pieces: list[bytes] = []
    kinds: list[HoleKind] = []
    at = 0
    for start, end, hole in spans:
        if start <= at and kinds:
            return None  # holes that touch or overlap
        pieces.append(data[at:start])
        kinds.append(hole.kind)
        at = end
    pieces.append(data[at:])
    shape = tuple(kinds)
    shape = next((known for known in _SHAPES if known == shape), shape)
    template = FrameTemplate(tuple(pieces), shape, tuple(hole for _s, _e, hole in spans))
    try:
        probed = orjson.loads(template.filled([_PROBES[kind] for kind in kinds]))
    except orjson.JSONDecodeError:
        return None
    expected: Any = parsed
    for hole in holes:
        if hole.kind != "pad":
            expected = replaced_at(expected, hole.path, _PROBES[hole.kind])
    return template if probed == expected else None


def _span(data: bytes, hole: Hole, value: Any) -> tuple[int, int] | None:
    if hole.kind == "pad":
        end = len(data) - 1
        if data[end:] != b"}":
            return None
        start = end
        while data[start - 1 : start] in (b" ", b"\t"):
            start -= 1
        return start, end
    start = value_start(data, hole.key)
    if start < 0:
        return None
    if hole.kind == "count":
        if type(value) is not int or value < 0:
            return None
        digits = str(value).encode()
        end = start + len(digits)
        if data[start:end] != digits or data[end : end + 1].isdigit():
            return None
        return start, end
    if type(value) is not str:
        return None
    body = orjson.dumps(value)
    if data[start : start + len(body)] != body:
        return None
    return start + 1, start + len(body) - 1


def value_start(data: bytes, key: bytes) -> int:
    """The offset of the value after the first ``key`` (a quoted key and its colon) in
    ``data``, past the spaces before it; -1 when ``key`` is not there."""
    at = data.find(key)
    if at < 0:
        return -1
    start = at + len(key)
    while data[start : start + 1] == b" ":
        start += 1
    return start


def value_at(value: Any, path: Path) -> Any:
    """The value at ``path`` in ``value``; None where the path leads nowhere."""
    for step in path:
        if isinstance(step, int):
            if type(value) is not list or step >= len(value):
                return None
        elif type(value) is not dict or step not in value:
            return None
        value = value[step]
    return value


def replaced_at(value: Any, path: Path, new: Any) -> Any:
    """``value`` with ``new`` at ``path``, copying only the containers on the way."""
    if not path:
        return new
    step, rest = path[0], path[1:]
    if isinstance(step, int):
        items = list(value)
        items[step] = replaced_at(items[step], rest, new)
        return items
    return {**value, step: replaced_at(value[step], rest, new)}
