"""Reading a chat request body: content type, size limit, UTF-8, JSON, nesting depth.

Every failure is a ``BadRequestBody`` with a clear message and a rule code; the route's
adapter renders it in the API's own envelope, so the SDK raises its normal exception.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import jiter
import orjson
from aiohttp import web

from turngate.errors import BadRequestBody

# Deeper JSON is refused before any recursive code (adapters, digests, schemas) sees it.
MAX_JSON_DEPTH = 64
# Seconds a client has to send the whole body (a body trickled byte by byte is cut off);
# the app sets it from ``Settings.body_timeout``.
BODY_TIMEOUT = web.AppKey("body_timeout", float)
# Objects and arrays in one body. Building the graph costs ~13 us per message, so a body of
# 1M tiny messages (32 MB) would hold the event loop for ~20 s; real conversations, even
# tool-heavy ones of thousands of turns, stay far below.
MAX_JSON_CONTAINERS = 100_000
DEFAULT_BODY_TIMEOUT = 60.0


async def read_body(request: web.Request, limit: int, *, only_json: bool = True) -> bytes:
    """The whole body, at most ``limit`` bytes; a JSON one unless ``only_json`` is False."""
    if only_json:
        _check_content_type(request.headers.get("Content-Type"))
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(limit)
    timeout = request.config_dict.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)
    try:
        if request.content.is_eof():
            # The whole body came with the headers (the usual case): no wait to bound, so
            # no timer to set and cancel.
            return await request.read()
        async with asyncio.timeout(timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise _too_large(limit) from exc
    except TimeoutError as exc:
        raise BadRequestBody(
            f"turngate: the request body was not received within {timeout:g} seconds",
            rule="request_timeout",
            status=408,
        ) from exc


def _check_content_type(value: str | None) -> None:
    # A missing type is taken as JSON; a declared non-JSON type is refused.
    if value is None:
        return
    media = value.split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    raise BadRequestBody(
        f"turngate: the request body must be application/json, not {media or 'empty'!r}",
        rule="unsupported_media_type",
        status=415,
    )


def _too_large(limit: int) -> BadRequestBody:
    return BadRequestBody(
        f"turngate: the request body is larger than the limit of {limit} bytes "
        "(--max-body-bytes, TURNGATE_MAX_BODY_BYTES)",
        rule="request_too_large",
        status=413,
    )


def decode_json(raw: bytes) -> dict[str, Any]:
    """The request body's JSON object, or a ``BadRequestBody`` naming what is wrong.

    One parse, by jiter, which also refuses a key repeated in one object. Its value is
    orjson's (what the adapters, digests and renders were built on) except for integers
    beyond 64 bits and numbers that overflow a double, which orjson reads as floats and
    refuses; a body jiter refuses, or one holding such a number, takes the careful path:
    orjson's parse, whose errors name line and column, then jiter's for the repeated key.
    """
    try:
        value = jiter.from_json(
            raw, catch_duplicate_keys=True, allow_inf_nan=False, cache_mode="keys"
        )
    except ValueError:
        return _decode_carefully(raw)
    if type(value) is not dict:
        raise _not_an_object()
    shape = _shape(value, MAX_JSON_DEPTH)
    if shape == "wide_number":
        return _decode_carefully(raw)
    if shape == "too_deep":
        raise _too_deep(raw, value)
    return value


def _decode_carefully(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _not_json(raw, exc) from exc
    if not isinstance(value, dict):
        raise _not_an_object()
    if _shape(value, MAX_JSON_DEPTH) == "too_deep":
        raise _too_deep(raw, value)
    duplicate = duplicate_key(raw)
    if duplicate is not None:
        raise BadRequestBody(
            f"turngate: the request body repeats the JSON key {duplicate[:64]!r} in one object",
            rule="duplicate_json_key",
        )
    return value


def _not_an_object() -> BadRequestBody:
    return BadRequestBody("turngate: the request body must be a JSON object", rule="invalid_json")


def _too_deep(raw: bytes, value: dict[str, Any]) -> BadRequestBody:
    # A body both too deep and too large is refused as too large, whichever the walk met
    # first (the walk stops at the depth limit, before counting every container).
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_CONTAINERS:
        _check_containers(value)
    return BadRequestBody(
        f"turngate: the request body nests JSON deeper than {MAX_JSON_DEPTH} levels",
        rule="json_too_deep",
    )


# Integers orjson reads as integers; beyond them it reads floats.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_INFINITIES = (float("inf"), float("-inf"))


def _shape(value: dict[str, Any], depth_limit: int) -> Literal["ok", "too_deep", "wide_number"]:
    """``too_deep`` when containers nest deeper than ``depth_limit`` (the top object is
    depth 1), ``wide_number`` for an integer beyond 64 bits or an infinite float (only
    jiter reads them so). Raises ``request_too_large`` past ``MAX_JSON_CONTAINERS``
    objects and arrays.

    One level at a time, so no (node, depth) pair is built per container: on the hot path
    for every body, this walk is the one pass over the parsed tree.
    """
    containers, depth = 0, 1
    level: list[Any] = [value]
    while level:
        containers += len(level)
        if containers > MAX_JSON_CONTAINERS:
            raise _too_many_containers()
        below: list[Any] = []
        push = below.append
        for node in level:
            for child in node.values() if type(node) is dict else node:
                kind = type(child)
                if kind is dict or kind is list:
                    push(child)
                elif kind is int:
                    if not _INT_MIN <= child <= _INT_MAX:
                        return "wide_number"
                elif kind is float and child in _INFINITIES:
                    return "wide_number"
        if below:
            if depth >= depth_limit:
                return "too_deep"
            depth += 1
        level = below
    return "ok"


def duplicate_key(raw: bytes) -> str | None:
    """A key repeated in one object of ``raw``, or None.

    orjson keeps the last of repeated keys, but the client's own bytes are what is sent, and
    a provider that keeps the first would read a body turngate never validated. jiter
    (pydantic's JSON parser) checks every object exactly; only a body it refuses (a repeated
    key, or anything else it reads otherwise than orjson) takes the standard library's
    parse, which names the key.
    """
    try:
        jiter.from_json(raw, catch_duplicate_keys=True, cache_mode="keys")
    except ValueError:
        return _first_repeated_key(raw)
    return None


def _first_repeated_key(raw: bytes) -> str | None:
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return found[0] if found else None


def _too_many_containers() -> BadRequestBody:
    return BadRequestBody(
        f"turngate: the request body holds more than {MAX_JSON_CONTAINERS} JSON objects and arrays",
        rule="request_too_large",
        status=413,
    )


def _check_containers(value: dict[str, Any]) -> None:
    containers = 0
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        containers += 1
        if containers > MAX_JSON_CONTAINERS:
            raise _too_many_containers()
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                push(child)


def _not_json(raw: bytes, exc: orjson.JSONDecodeError) -> BadRequestBody:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return BadRequestBody(
            f"turngate: the request body is not valid UTF-8 (byte {bad.start})",
            rule="invalid_utf8",
        )
    if not raw.strip():
        return BadRequestBody("turngate: the request body is empty", rule="invalid_json")
    if "depth limit" in str(exc) or "recursion" in str(exc).lower():
        return BadRequestBody(
            f"turngate: the request body nests JSON deeper than {MAX_JSON_DEPTH} levels",
            rule="json_too_deep",
        )
    return BadRequestBody(
        f"turngate: the request body is not valid JSON (line {exc.lineno}, column {exc.colno})",
        rule="invalid_json",
    )


def json_depth_exceeds(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """True when containers nest more than ``limit`` deep (the top object is depth 1)."""
    # On the hot path for every body: exact type checks and bound methods halve the time.
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        for child in node.values() if type(node) is dict else node:
            kind = type(child)
            if kind is dict or kind is list:
                if depth >= limit:
                    return True
                push((child, depth + 1))
    return False
