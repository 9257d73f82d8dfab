"""A Chat text chunk read through the one before it: only the text differs.

A provider writes every text chunk of a stream from the same envelope: id, model,
fingerprint, one choice whose delta is only ``content``, and on OpenAI a random
``obfuscation`` string. ``ChunkTemplate`` keeps the bytes around those strings (the
holes) from a chunk the decoder parsed in full; a later chunk that has the same bytes
around holes that are each one valid JSON string body is that chunk with other strings, so
only its text is decoded (a short ``orjson`` call instead of the whole object).

Why that is exact: a hole is cut where the probe parse of the template showed the content
string (and the obfuscation string) to be, whole (``template_of`` checks it). A JSON string
body cannot hold an unescaped quote, so ``"`` + body + ``"`` parses only when the body ends
the string exactly where the hole ends; a cut inside an escaped quote leaves an odd run of
backslashes and fails. Anything else in the chunk changed misses the template and the
decoder reads the chunk in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

_CONTENT = b'"content":"'
_OBFUSCATION = b'"obfuscation":"'
# What the probe writes into the holes: strings no provider's envelope holds.
_PROBE_TEXT, _PROBE_OBFUSCATION = "\x01turngate\x01", "\x02turngate\x02"


@dataclass(frozen=True, slots=True)
class ChunkTemplate:
    """The bytes of a text chunk before its content string (``prefix``), between it and
    the obfuscation string (``middle``; None when the chunk has none) and after the last
    string (``suffix``)."""

    prefix: bytes
    middle: bytes | None
    suffix: bytes

    def text_of(self, data: bytes) -> str | None:
        """The content of ``data`` when it is this template with other strings in its
        holes; None for anything else."""
        prefix, suffix = self.prefix, self.suffix
        if not (data.startswith(prefix) and data.endswith(suffix)):
            return None
        # Each hole is parsed with the quotes around it: the prefix and the middle end
        # with ``"`` and the middle and the suffix begin with one.
        start, end = len(prefix) - 1, len(data) - len(suffix) + 1
        middle = self.middle
        try:
            if middle is None:
                text = orjson.loads(data[start:end])
            else:
                # The middle ends with the quote that opens the obfuscation string, the last
                # quote of the chunk's holes unless that string holds an escaped one.
                at = data.rfind(b'"', start + 1, end - 1) - len(middle) + 1
                if at <= start or not data.startswith(middle, at):
                    at = data.find(middle, start + 1, end - 1)
                    if at < 0:
                        return None
                # OpenAI's obfuscation strings are letters and digits: a valid string body
                # as they stand. Anything else is parsed.
                if not data[at + len(middle) : end - 1].isalnum():
                    orjson.loads(data[at + len(middle) - 1 : end])
                text = orjson.loads(data[start : at + 1])
        except orjson.JSONDecodeError:
            return None
        # ``"`` + body + ``"`` that parses is a string: the hole was one string body.
        return text if type(text) is str else None

    def framed(self) -> ChunkTemplate | None:
        """This template for a whole SSE frame of the chunk as one ``data:`` line (``data: ``
        before it, the blank line after it); None when a fixed part holds a line break: the
        chunk came in a frame of several data lines, and a frame matching the template
        would not be one line. A frame that fits a framed template is one frame of one line
        with no CR: its holes parse as JSON strings, which hold no raw line breaks."""
        fixed = self.prefix + (self.middle or b"") + self.suffix
        if fixed.find(b"\n") >= 0 or fixed.find(b"\r") >= 0:
            return None
        return ChunkTemplate(b"data: " + self.prefix, self.middle, self.suffix + b"\n\n")

    def filled(self, text: str, obfuscation: str) -> bytes:
        """The template with ``text`` (and ``obfuscation``) in its holes."""
        body = orjson.dumps(text)[1:-1]
        if self.middle is None:
            return self.prefix + body + self.suffix
        return self.prefix + body + self.middle + orjson.dumps(obfuscation)[1:-1] + self.suffix


def template_of(data: bytes, chunk: dict[str, Any], text: str) -> ChunkTemplate | None:
    """The template of ``data``, a text chunk parsed as ``chunk`` whose only delta is the
    content ``text``; None when its holes cannot be cut (other spacing, other escapes) or
    the probe does not put the strings back where they were."""
    start, end = _hole(data, _CONTENT, text, 0)
    if start < 0:
        return None
    obfuscation = chunk.get("obfuscation")
    if type(obfuscation) is str:
        second, last = _hole(data, _OBFUSCATION, obfuscation, end)
        if second < 0:
            return None
        template = ChunkTemplate(data[:start], data[end:second], data[last:])
    else:
        template = ChunkTemplate(data[:start], None, data[end:])
    try:
        probed = orjson.loads(template.filled(_PROBE_TEXT, _PROBE_OBFUSCATION))
    except orjson.JSONDecodeError:
        return None
    choice = chunk["choices"][0]
    expected = {**chunk, "choices": [{**choice, "delta": {"content": _PROBE_TEXT}}]}
    if type(obfuscation) is str:
        expected["obfuscation"] = _PROBE_OBFUSCATION
    return template if probed == expected else None


def _hole(data: bytes, key: bytes, value: str, after: int) -> tuple[int, int]:
    """Where ``value``'s string body sits after the first ``key`` from ``after``, written
    as orjson writes it; (-1, -1) when it is not there."""
    at = data.find(key, after)
    if at < 0:
        return -1, -1
    start = at + len(key)
    body = orjson.dumps(value)[1:-1]
    end = start + len(body)
    if data[start:end] != body or data[end : end + 1] != b'"':
        return -1, -1
    return start, end
