"""An image's width and height, read from its header inside base64 text without decoding the
rest: a rule that checks every image of every request (an agent's screenshots are sent again
on each turn) reads a few hundred bytes of each, not megabytes."""

from __future__ import annotations

import binascii
from base64 import b64decode

import imagesize


class _Base64Bytes:
    """The decoded bytes of base64 ``text``, read and seeked as a file, decoded a window at a
    time: a byte offset maps to a character offset (every 3 bytes are 4 characters)."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._size = len(text) // 4 * 3
        self._position = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._position, self._size)[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        start = self._position
        end = self._size if size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        first, last = start // 3, (end + 2) // 3
        window = b64decode(self._text[first * 4 : last * 4], validate=True)
        chunk = window[start - first * 3 : end - first * 3]
        self._position = start + len(chunk)
        return chunk


def image_dimensions(data: str) -> tuple[int, int] | None:
    """(width, height) of the image base64 ``data`` holds, or None when its header does not
    say (a format imagesize does not read, bytes that are not base64)."""
    try:
        width, height = imagesize.get(_Base64Bytes(data), exif_rotation=False)
    except (binascii.Error, ValueError):
        return None
    if width <= 0 or height <= 0:
        return None
    return int(width), int(height)
