"""The pieces of uploads kept until their file can be read whole (proxy/gemini_uploads.py)."""

from __future__ import annotations

from collections import OrderedDict

# Uploads kept at once, however small (an OpenAI upload is kept from its start, empty).
MAX_UPLOADS = 1024


class KeptUploads:
    """The bytes received so far of each upload in pieces being kept, by a key of the
    upload (and part); the least recently used dropped when they would hold more than
    ``limit`` bytes, or be more than ``MAX_UPLOADS``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: OrderedDict[str, bytearray] = OrderedDict()
        self._size = 0

    def holds(self, key: str) -> bool:
        return key in self._kept

    def received(self, key: str) -> int:
        kept = self._kept.get(key)
        return 0 if kept is None else len(kept)

    def add(self, key: str, data: bytes) -> list[str]:
        """Keep ``data`` as the next bytes of the upload ``key``; the uploads dropped to make
        room (the least recently used first)."""
        kept = self._kept.setdefault(key, bytearray())
        kept += data
        self._size += len(data)
        self._kept.move_to_end(key)
        dropped: list[str] = []
        while self._size > self.limit or len(self._kept) > MAX_UPLOADS:
            oldest = next(iter(self._kept))
            self.drop(oldest)
            dropped.append(oldest)
        return dropped

    def cut(self, key: str, size: int) -> None:
        """Keep only the first ``size`` bytes of ``key``."""
        kept = self._kept.get(key)
        if kept is not None and size < len(kept):
            self._size -= len(kept) - size
            del kept[size:]

    def take(self, key: str) -> bytes:
        """The bytes kept of ``key``, no longer kept."""
        kept = self._kept.pop(key, bytearray())
        self._size -= len(kept)
        return bytes(kept)

    def drop_all(self, key: str) -> None:
        """Drop ``key`` and every key below it (``key/...``: its parts)."""
        below = key + "/"
        for kept in [k for k in self._kept if k == key or k.startswith(below)]:
            self.drop(kept)

    def drop(self, key: str) -> bool:
        kept = self._kept.pop(key, None)
        if kept is None:
            return False
        self._size -= len(kept)
        return True
