"""Reading a chat request body: content type, size limit, UTF-8, JSON, nesting depth.

Every failure is a ``BadRequestBody`` with a clear message and a rule code; the route's
adapter renders it in the API's own envelope, so the SDK raises its normal exception.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

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


async def read_body(request: web.Request, limit: int) -> bytes:
    _check_content_type(request.headers.get("Content-Type"))
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(limit)
    timeout = request.config_dict.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)
    try:
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
        f"turngate: the request body is larger than the limit of {limit} bytes",
        rule="request_too_large",
        status=413,
    )


def decode_json(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _not_json(raw, exc) from exc
    if not isinstance(value, dict):
        raise BadRequestBody(
            "turngate: the request body must be a JSON object", rule="invalid_json"
        )
    # Braces in the bytes bound the containers from above (strings may hold some too): only a
    # body that could exceed the cap pays for a walk, which stops at the cap.
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_CONTAINERS:
        _check_containers(value)
    if json_depth_exceeds(value, MAX_JSON_DEPTH):
        raise BadRequestBody(
            f"turngate: the request body nests JSON deeper than {MAX_JSON_DEPTH} levels",
            rule="json_too_deep",
        )
    duplicate = duplicate_key(raw, json_keys(value))
    if duplicate is not None:
        raise BadRequestBody(
            f"turngate: the request body repeats the JSON key {duplicate[:64]!r} in one object",
            rule="duplicate_json_key",
        )
    return value


# A quote, optional space, a colon: every key's end, plus escaped quotes inside strings.
_SPACED_KEY_END = re.compile(rb'"[ \t\r\n]+:')
_QUOTE_SPACE = (b'" ', b'"\t', b'"\n', b'"\r')


def duplicate_key(raw: bytes, parsed_keys: int) -> str | None:
    """A key repeated in one object of ``raw`` (which parsed to ``parsed_keys`` keys), or None.

    orjson keeps the last of repeated keys, but the client's own bytes are what is sent, and
    a provider that keeps the first would read a body turngate never validated. Fast path:
    the key ends counted in the bytes (an escaped ``\\":`` inside a string can only add to
    the count) equal the keys parsed (repeats can only lower it), so equality means no
    repeat. A key ending in an escaped backslash would be missed by the count: such bodies,
    and any mismatch, take the exact check with the standard library.
    """
    if b'\\\\"' not in raw and _key_ends(raw) == parsed_keys:
        return None
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


def _key_ends(raw: bytes) -> int:
    count = raw.count(b'":') - raw.count(b'\\":')
    if any(pattern in raw for pattern in _QUOTE_SPACE):
        count += len(_SPACED_KEY_END.findall(raw))
    return count


def _check_containers(value: dict[str, Any]) -> None:
    containers = 0
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        containers += 1
        if containers > MAX_JSON_CONTAINERS:
            raise BadRequestBody(
                f"turngate: the request body holds more than {MAX_JSON_CONTAINERS} JSON objects"
                " and arrays",
                rule="request_too_large",
                status=413,
            )
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                push(child)


def json_keys(value: dict[str, Any]) -> int:
    """The keys of every object in ``value``."""
    count = 0
    stack: list[Any] = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if type(node) is dict:
            count += len(node)
            for child in node.values():
                if type(child) is dict or type(child) is list:
                    push(child)
        else:
            for child in node:
                if type(child) is dict or type(child) is list:
                    push(child)
    return count


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
