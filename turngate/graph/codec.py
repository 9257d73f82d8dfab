"""Canonical JSON and digests: sorted keys, no whitespace, UTF-8, sha256."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

_CANONICAL = orjson.OPT_SORT_KEYS


def canonical_json(value: Any) -> bytes:
    return orjson.dumps(value, option=_CANONICAL)


def right_sized(data: bytes) -> bytes:
    """``data`` in an allocation of its own length, for bytes kept long after they were made.

    orjson (3.12 and later) returns bytes whose buffer it does not trim: 4 KB or more behind
    an 18-byte result, 130 KB behind a 20 KB one. A copy of ``data`` (about 60 ns) frees
    that; a cache of ``orjson.dumps`` results otherwise holds several times what it counts.
    """
    return b"".join((data, b""))


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``, as ``sha256:<hex>``."""
    return digest_bytes(canonical_json(value))


def json_type(value: object) -> str:
    """JSON's name for the type of a parsed ``value``: object, array, string, number, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "string"


def json_object(arguments: str) -> dict[str, Any] | None:
    """``arguments`` parsed when it is exactly one JSON object (``""`` is not)."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def arguments_value(arguments: str) -> dict[str, Any] | None:
    """A function call's arguments as an object: ``""`` is none (``{}``), otherwise
    ``json_object``.

    OpenAI writes ``""`` for a call to a tool whose parameters are none or all optional
    (openai-python PR #3502, simonw/llm PR #1170). A call cut off before its first argument
    byte is not one: a stream cut there never closes the call, so no answer delivers it (the
    assembler commits a call only at the provider's close of it).
    """
    return {} if arguments == "" else json_object(arguments)


def arguments_complete(arguments: str) -> bool:
    """True when ``arguments`` is exactly one JSON object, or empty (``arguments_value``)."""
    return arguments_value(arguments) is not None
