"""The upstream idle timeout (``--upstream-read-timeout``) on a relayed stream: bytes that keep
coming, each within the timeout, keep the stream open past it; a stall after them cuts it
with the API's error event, one timeout after the last byte. The same holds for a route
turngate relays without parsing: the client's body is cut, never ended cleanly."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.adapters.test_stream_encoders import _is_native_error as is_native_error
from tests.fixtures_dir import FIXTURES_PRESENT
from tests.hardening.conftest import UPSTREAM_IDLE
from tests.hardening.test_hostile_upstreams import (  # noqa: F401 (the fixture)
    PATHS,
    SLACK,
    hostile,
    read_cut,
)
from tests.proxy.helpers import operation

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

PINGS = 5
PING_EVERY = 0.6 * UPSTREAM_IDLE


async def slow_then_stall(response: web.StreamResponse) -> None:
    for _ in range(PINGS):
        await asyncio.sleep(PING_EVERY)
        await response.write(b": ping\n\n")
    await asyncio.sleep(30)


@pytest.mark.parametrize("api", ["openai_chat", "anthropic"])
async def test_a_stream_idle_only_after_its_last_byte_is_cut_one_timeout_later(
    hostile: Any,  # noqa: F811
    api: str,
) -> None:
    stack, body = await hostile(api, slow_then_stall)
    status, out, operation_id, elapsed = await read_cut(stack.url + PATHS[api], body)
    assert status == 200
    assert is_native_error(api, out), out[-400:]
    last_byte = PINGS * PING_EVERY
    assert last_byte + UPSTREAM_IDLE <= elapsed < last_byte + UPSTREAM_IDLE + SLACK
    record = await operation(stack, operation_id)
    assert record["state"] in ("FAILED", "UNKNOWN"), record["state"]


async def test_an_unparsed_stream_idle_after_its_last_byte_is_cut_one_timeout_later(
    hostile: Any,  # noqa: F811
) -> None:
    """A route relayed as it is (here a thread run's event stream) keeps the same timeout."""
    stack, _ = await hostile("openai_chat", slow_then_stall)
    started = time.monotonic()
    out = bytearray()
    broken = False
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
        session.post(stack.url + "/openai/v1/threads/runs", json={"stream": True}) as resp,
    ):
        try:
            async for chunk in resp.content.iter_any():
                out.extend(chunk)
        except aiohttp.ClientPayloadError:
            broken = True
    elapsed = time.monotonic() - started
    assert resp.status == 200
    assert broken, "a stalled relayed body must not end cleanly"
    assert out.count(b": ping") == PINGS
    last_byte = PINGS * PING_EVERY
    assert last_byte + UPSTREAM_IDLE <= elapsed < last_byte + UPSTREAM_IDLE + SLACK
