"""A stream's handler cancelled mid-stream (a shutdown past its drain timeout, a handler
timeout): the relay reads the upstream in a task of its own (``StreamSession._pumped``),
and cancelling the handler must cancel that task too. Nothing goes on reading the upstream,
the client's body is cut rather than ended, and the operation is never COMMITTED: FAILED,
as turngate closed the upstream with no tool call delivered (UNKNOWN otherwise, see
tests/proxy/test_stream_recovery.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.fixtures_dir import FIXTURES_PRESENT
from tests.hardening.test_hostile_upstreams import (  # noqa: F401 (the fixture)
    PATHS,
    hostile,
)
from tests.proxy.helpers import operation, states

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

PING_EVERY = 0.05


def pinging(served: list[int]) -> Any:
    """An upstream that keeps writing comment lines, counting them in ``served``."""

    async def fault(response: web.StreamResponse) -> None:
        served.append(0)
        for _ in range(400):
            await asyncio.sleep(PING_EVERY)
            await response.write(b": ping\n\n")
            served[0] += 1

    return fault


async def wait_for_task(name: str) -> asyncio.Task[Any]:
    for _ in range(200):
        for task in asyncio.all_tasks():
            coro: Any = task.get_coro()
            if getattr(coro, "__qualname__", "").endswith(name):
                return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"no task runs {name}")


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The names of the coroutines ``task`` is suspended in, outermost first."""
    names: list[str] = []
    coro: Any = task.get_coro()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_name)
        coro = coro.cr_await
    return names


@pytest.mark.parametrize("api", ["openai_chat", "anthropic"])
async def test_cancelling_a_streams_handler_stops_its_upstream_reads(
    hostile: Any,  # noqa: F811
    api: str,
) -> None:
    served: list[int] = []
    stack, body = await hostile(api, pinging(served))
    broken = False
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.post(stack.url + PATHS[api], json=body) as resp,
    ):
        await resp.content.readany()
        pump = await wait_for_task("StreamSession._pump")
        await asyncio.sleep(5 * PING_EVERY)
        assert served[0] >= 2, "the upstream was not relayed before the cancel"
        handler = next(t for t in asyncio.all_tasks() if "relay_attempt" in awaiting(t))
        handler.cancel()
        try:
            async for _chunk in resp.content.iter_any():
                pass
        except aiohttp.ClientPayloadError:
            broken = True
        operation_id = resp.headers["Turngate-Operation-Id"]
    assert pump.cancelled()
    assert broken, "a cancelled stream must not end cleanly"
    pings_at_cancel = served[0]
    await asyncio.sleep(6 * PING_EVERY)
    # The upstream's writes stop soon after: nothing reads its connection any more.
    assert served[0] <= pings_at_cancel + 2
    record = await operation(stack, operation_id)
    assert record["state"] == "FAILED", states(record)
    assert record["history"][-1]["detail"] == "cancelled: turngate closed the upstream"
    assert "COMMITTED" not in states(record)
