"""kill -9 of a real `turngate serve` mid-stream, then a restart: the attempt is UNKNOWN, a
retry does not start a new generation before the old one is over (409 until its deadline
settles it), and no second canonical turn ever appears. Then the same with Redis restarted
mid-stream as well, and with Redis restarted under a live turngate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tests.adapters import stream_faults as faults
from tests.fixtures_dir import COUNTS, FIXTURES_PRESENT
from tests.proxy.serve_process import ServeProcess, eventually
from tests.proxy.stream_support import ROUTES, recorded_request
from tests.proxy.stream_upstream import Script, ScriptedUpstream
from tests.proxy.test_stream_recovery import tool_stream
from tests.state.redis_server import RedisServer, free_port

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

API = "anthropic"
CONVERSATION = "conv-killed"
# From the manifest's creation: long enough that a loaded 2-core machine still asks its
# retry before the deadline. With Redis, the restarts of Redis and turngate and the lease
# takeover come first (a 6 s deadline was passed once under load), so it gets more.
DEADLINE = "6"
REDIS_DEADLINE = "15"


@dataclass
class Rig:
    upstream: ScriptedUpstream
    upstream_url: str
    gate: asyncio.Event
    path: Path
    tmp: Path

    def serve(self, state: str, *flags: str, deadline: str = DEADLINE) -> ServeProcess:
        log = self.tmp / "serve.log"
        return ServeProcess(
            free_port(), state, self.upstream_url, log, "--unknown-deadline", deadline, *flags
        )


@pytest.fixture
async def rig(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Rig]:
    upstream = ScriptedUpstream()
    server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
    gate = asyncio.Event()
    path = tool_stream(API)
    data = path.read_bytes()
    # The first attempt stalls after its first frames; any later one streams in full.
    upstream.script(Script(data, gate_at=faults.frame_ends(data)[1], gate=gate))
    upstream.default = Script(data)
    yield Rig(upstream, f"http://127.0.0.1:{server.port}", gate, path, tmp_path)
    gate.set()


async def post(url: str) -> tuple[int, dict[str, str], bytes]:
    body = recorded_request(tool_stream(API))
    headers = {"Turngate-Conversation-Id": CONVERSATION, "x-api-key": "k"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + ROUTES[API], json=body, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


def states(process: ServeProcess) -> Callable[[], Any]:
    async def read() -> list[str]:
        status, found = await process.get(f"/turngate/v1/conversations/{CONVERSATION}")
        return [op["state"] for op in found["operations"]] if status == 200 else []

    return read


async def stalled_then_killed(rig: Rig, turngate: ServeProcess) -> asyncio.Task[Any]:
    """A stream in flight on ``turngate``, stalled by the upstream; returns its client."""
    client = asyncio.create_task(post(turngate.url))
    await eventually(lambda: _equal(states(turngate), ["STREAMING"]))
    return client


async def _equal(read: Callable[[], Any], expected: list[str]) -> bool:
    found: list[str] = await read()
    return found == expected


async def after_restart(rig: Rig, turngate: ServeProcess, client: asyncio.Task[Any]) -> None:
    """What must hold once a restarted turngate serves the conversation again."""
    with pytest.raises(aiohttp.ClientError):
        await client  # the killed process's client saw its stream break
    await eventually(lambda: _equal(states(turngate), ["UNKNOWN"]))
    status, headers, _body = await post(turngate.url)
    assert (status, headers["Turngate-Rejection"]) == (409, "dispatch_conflict")
    assert int(headers["Retry-After"]) >= 1
    assert [r.method for r in rig.upstream.received] == ["POST"]  # no new generation yet

    # The background task settles it once its deadline has passed; then a new attempt runs.
    await eventually(lambda: _equal(states(turngate), ["FAILED"]))
    status, headers, _body = await post(turngate.url)
    assert (status, headers.get("Turngate-Replay")) == (200, None)
    assert headers["Turngate-Attempt"] == "2"
    rig.gate.set()  # the old stream now ends, to a process that is gone
    status, again, _body = await post(turngate.url)
    assert (status, again["Turngate-Replay"]) == (200, "1")
    shown = await turngate.conversation(CONVERSATION)
    assert shown["turns"][-1]["operationId"] == headers["Turngate-Operation-Id"]
    assert [op["state"] for op in shown["operations"]] == ["FAILED", "COMMITTED"]
    assert len(rig.upstream.received) == 2


async def test_kill_9_mid_stream_on_sqlite(rig: Rig) -> None:
    state = f"sqlite://{rig.tmp / 'state.db'}"
    turngate = await rig.serve(state).start()
    try:
        client = await stalled_then_killed(rig, turngate)
        turngate.kill()
        await turngate.start()
        await after_restart(rig, turngate, client)
    finally:
        turngate.kill()
    COUNTS["recovery: kill -9 mid-stream, one canonical turn (SQLite)"] += 1


@pytest.fixture
def redis_server(tmp_path: Path) -> Any:
    server = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    yield server.start()
    server.stop()


async def test_kill_9_mid_stream_with_redis_restarted(rig: Rig, redis_server: RedisServer) -> None:
    # A short lease: the killed process's attempts are taken over within a second or two.
    state = f"{redis_server.url}?lease_ttl=1"
    turngate = await rig.serve(state, deadline=REDIS_DEADLINE).start()
    try:
        client = await stalled_then_killed(rig, turngate)
        redis_server.kill()  # Redis goes down mid-stream, and comes back from its AOF
        redis_server.start()
        turngate.kill()
        await turngate.start()
        await after_restart(rig, turngate, client)
    finally:
        turngate.kill()
    COUNTS["recovery: kill -9 mid-stream, one canonical turn (Redis restarted)"] += 1


async def test_a_redis_restart_under_a_live_stream_loses_nothing(
    rig: Rig, redis_server: RedisServer
) -> None:
    turngate = await rig.serve(f"{redis_server.url}?lease_ttl=5").start()
    try:
        client = await stalled_then_killed(rig, turngate)
        redis_server.kill()
        redis_server.start()
        rig.gate.set()
        status, headers, body = await client
        assert status == 200
        assert b"message_stop" in body  # committed after Redis came back: a normal end
        status, again, replayed = await post(turngate.url)
        assert (status, again["Turngate-Replay"], replayed) == (200, "1", body)
        shown = await turngate.conversation(CONVERSATION)
        assert shown["turns"][-1]["operationId"] == headers["Turngate-Operation-Id"]
        assert [op["state"] for op in shown["operations"]] == ["COMMITTED"]
        assert len(rig.upstream.received) == 1
    finally:
        turngate.kill()
