"""Late blocks through the REAL proxy, with in-memory telemetry: a stream of a generation that
is no longer active is quarantined, and ``stream.late_blocks_quarantined`` counts exactly
the blocks its quarantine log entry says were withheld.

    attempt 1 (Anthropic, a tool call)   streams one frame, then the upstream stalls
    the conversation is cancelled        attempt 1 CANCELLED: its generation is over
    attempt 2 of the same revision       streams and commits
    attempt 1's stream comes on, late    its first complete block is withheld: never
                                         relayed, logged in quarantine (withheldBlocks 1),
                                         its client gets the API's error event
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.adapters import stream_faults as faults
from tests.adapters.test_stream_encoders import _is_native_error as is_native_error
from tests.adapters.test_stream_encoders import client_calls, relay
from tests.fixtures_dir import FIXTURES_PRESENT
from tests.proxy.stream_support import ROUTES, recorded_request
from tests.proxy.stream_upstream import Script, ScriptedUpstream
from tests.proxy.test_stream_recovery import tool_stream
from tests.telemetry.helpers import CREDENTIAL_SECRET, Captured, captured, labels, nonzero, points
from turngate.proxy.app import SERVICES, create_app
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures are absent")

API = "anthropic"
CONVERSATION = "conv-late"
HEADERS = {
    "Content-Type": "application/json",
    "Turngate-Conversation-Id": CONVERSATION,
    "x-api-key": "k",
    "anthropic-version": "2023-06-01",
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    # The proxy aborted the connection (never a clean end of the body).
    broken: bool


@dataclass
class Proxy:
    url: str
    upstream: ScriptedUpstream
    capture: Captured
    app: web.Application

    async def post(self, payload: dict[str, Any]) -> Answer:
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + ROUTES[API], data=orjson.dumps(payload), headers=HEADERS) as r,
        ):
            received = bytearray()
            try:
                async for chunk in r.content.iter_any():
                    received += chunk
            except aiohttp.ClientPayloadError:
                return Answer(r.status, bytes(received), True)
            return Answer(r.status, bytes(received), False)

    async def conversation(self, action: str = "") -> dict[str, Any]:
        url = f"{self.url}/turngate/v1/conversations/{CONVERSATION}{action}"
        method = "POST" if action else "GET"
        async with aiohttp.ClientSession() as session, session.request(method, url) as resp:
            assert resp.status == 200, await resp.text()
            found: dict[str, Any] = orjson.loads(await resp.read())
            return found

    async def operations(self) -> list[dict[str, Any]]:
        """The conversation's operations; none before the first request reached the upstream."""
        if not self.upstream.received:
            return []
        found: list[dict[str, Any]] = (await self.conversation())["operations"]
        return found


@pytest.fixture
async def proxy(aiohttp_server: Any) -> Proxy:
    upstream = ScriptedUpstream()
    upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
    base = f"http://127.0.0.1:{upstream_server.port}"
    capture = captured(secrets=[CREDENTIAL_SECRET])
    settings = Settings(
        state="memory://", upstream_openai=base, upstream_anthropic=base, upstream_gemini=base
    )
    app = create_app(
        settings,
        credential_secret=CREDENTIAL_SECRET,
        timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
        telemetry=capture.telemetry,
    )
    server: TestServer = await aiohttp_server(app, access_log=None)
    return Proxy(f"http://127.0.0.1:{server.port}", upstream, capture, app)


async def test_a_cancelled_generations_late_block_is_quarantined_and_counted(
    proxy: Proxy,
) -> None:
    path = tool_stream(API)
    data = path.read_bytes()
    gate = asyncio.Event()
    first_frame = faults.frame_ends(data)[0]
    proxy.upstream.script(Script(data, gate_at=first_frame, gate=gate), Script(data))
    late_client = asyncio.create_task(proxy.post(recorded_request(path)))
    try:
        while [op["state"] for op in await proxy.operations()] != ["STREAMING"]:
            await asyncio.sleep(0.01)
        cancelled = await proxy.conversation("/cancel")
        assert [op["state"] for op in cancelled["operations"]] == ["CANCELLED"]
        fresh = await proxy.post(recorded_request(path))
        assert (fresh.status, fresh.broken) == (200, False)
    finally:
        gate.set()
    run = await late_client
    assert run.broken
    assert is_native_error(API, run.body)
    assert b"event: message_stop" not in run.body
    # Only what the client had before the cancel: nothing of the late block.
    before, _ = relay(API, data[:first_frame])
    assert client_calls(API, run.body).calls == client_calls(API, before).calls

    first, second = await proxy.operations()
    assert (first["state"], second["state"]) == ("CANCELLED", "COMMITTED")
    # The late attempt's block went to the quarantine log, never to its client.
    (entry,) = await proxy.app[SERVICES].store.read_log("quarantine", limit=10)
    assert (entry["operationId"], entry["withheldBlocks"]) == (first["operationId"], 1)
    metrics = points(proxy.capture.reader)
    late = nonzero(metrics["turngate.stream.late_blocks_quarantined"])
    assert late == {labels(api=API): 1}
    assert nonzero(metrics["turngate.tool_calls.partial_dispatches"]) == {}
