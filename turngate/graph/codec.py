"""Canonical JSON and digests: sorted keys, no whitespace, UTF-8, sha256."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

_CANONICAL = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    return orjson.dumps(value, option=_CANONICAL)


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``, as ``sha256:<hex>``."""
    return digest_bytes(canonical_json(value))


def arguments_complete(arguments: str) -> bool:
    """True when ``arguments`` is exactly one JSON object.

    An empty string is incomplete: a call cut off before its first argument byte must not
    run as ``{}``.
    """
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict)
