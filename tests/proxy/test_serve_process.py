"""A real `turngate serve` process on a SQLite file: SIGKILL mid-dispatch, SIGTERM drain.

The fake upstream runs in the test's loop; turngate runs as a subprocess in front of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.graph.chat_builders import body, user
from tests.proxy.fake_upstream import FakeUpstream, Reply
from tests.proxy.helpers import CHAT_ANSWER, JSON
from tests.proxy.stack import OPENAI_KEY

CHAT = "/openai/v1/chat/completions"
REPO = Path(__file__).resolve().parents[2]


class Turngate:
    """One `turngate serve` subprocess; ``start`` again after a kill reuses the same file."""

    def __init__(self, port: int, state: Path, upstream: str, options: str = "") -> None:
        self.port = port
        self.state = state
        # Appended to the state URL, e.g. "?sync=normal".
        self.options = options
        self.upstream = upstream
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}"
        self.log = state.with_suffix(".log")

    async def start(self) -> None:
        command = [
            sys.executable,
            "-m",
            "turngate.cli",
            "serve",
            "--port",
            str(self.port),
            "--state",
            f"sqlite://{self.state}{self.options}",
            "--upstream-openai",
            self.upstream,
            "--log-level",
            "debug",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(self.url + "/readyz") as resp,
                ):
                    if resp.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            assert self.process.poll() is None, self.output()
            await asyncio.sleep(0.05)
        raise AssertionError("turngate did not become ready")

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    async def wait(self) -> int:
        assert self.process is not None
        return await asyncio.to_thread(self.process.wait, 30)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
async def upstream(aiohttp_server: Any) -> tuple[FakeUpstream, str]:
    fake = FakeUpstream()
    server: TestServer = await aiohttp_server(fake.app())
    return fake, f"http://127.0.0.1:{server.port}"


@pytest.fixture
async def turngate(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, unused_tcp_port: int
) -> AsyncIterator[Turngate]:
    process = Turngate(unused_tcp_port, tmp_path / "state.db", upstream[1])
    yield process
    process.stop()


@pytest.fixture
async def deaf_upstream() -> AsyncIterator[str]:
    """Accepts connections and never reads a byte: a large body cannot be written out."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for writer in held:
        writer.close()
    server.close()


def stored_operations(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    db = sqlite3.connect(path, timeout=5)
    try:
        rows = db.execute("SELECT operation_id, state, manifest FROM operations").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()
    return [(op, state, orjson.loads(manifest)) for op, state, manifest in rows]


async def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    for _ in range(int(timeout / 0.02)):
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def send_chat(url: str, payload: bytes) -> tuple[int, bytes]:
    headers = {**JSON, "Authorization": f"Bearer {OPENAI_KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + CHAT, data=io.BytesIO(payload), headers=headers) as resp,
    ):
        return resp.status, await resp.read()


async def operation_of(url: str, operation_id: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/turngate/v1/operations/{operation_id}") as resp,
    ):
        assert resp.status == 200
        record: dict[str, Any] = orjson.loads(await resp.read())
        return record


async def test_sigkill_after_send_leaves_sent_and_restart_makes_it_unknown(
    turngate: Turngate, upstream: tuple[FakeUpstream, str]
):
    fake, _url = upstream
    fake.reply(Reply(hang=True))
    await turngate.start()
    request = asyncio.ensure_future(send_chat(turngate.url, orjson.dumps(body(user("hi")))))
    await asyncio.wait_for(fake.got_request.wait(), 10)
    key = fake.received[0].headers["Idempotency-Key"]
    ((operation_id, _state, _m),) = await wait_for(
        lambda: [
            row
            for row in stored_operations(turngate.state)
            if row[2]["idempotencyKey"] == key and row[1] == "SENT"
        ]
    )
    turngate.signal(signal.SIGKILL)
    assert await turngate.wait() == -signal.SIGKILL
    with pytest.raises(aiohttp.ClientError):
        await request

    await turngate.start()
    record = await operation_of(turngate.url, operation_id)
    assert record["state"] == "UNKNOWN"
    assert [c["state"] for c in record["history"]] == [
        "PREPARED",
        "DISPATCHING",
        "SENT",
        "UNKNOWN",
    ]
    assert record["manifest"]["idempotencyKey"] == key


async def test_with_sync_normal_a_sigkill_loses_nothing_committed(
    tmp_path: Path, unused_tcp_port: int, upstream: tuple[FakeUpstream, str]
):
    """``sqlite:///…?sync=normal`` fsyncs nothing; a crash of the process still keeps every
    committed write: the answered operation stays COMMITTED, the one in flight is UNKNOWN."""
    fake, url = upstream
    turngate = Turngate(unused_tcp_port, tmp_path / "state.db", url, options="?sync=normal")
    try:
        fake.reply(CHAT_ANSWER)
        await turngate.start()
        status, _ = await send_chat(turngate.url, orjson.dumps(body(user("first"))))
        assert status == 200
        ((answered, state, _m),) = stored_operations(turngate.state)
        assert state == "COMMITTED"
        fake.reply(Reply(hang=True))
        request = asyncio.ensure_future(send_chat(turngate.url, orjson.dumps(body(user("hi")))))
        ((in_flight, _s, _m),) = await wait_for(
            lambda: [r for r in stored_operations(turngate.state) if r[1] == "SENT"]
        )
        turngate.signal(signal.SIGKILL)
        assert await turngate.wait() == -signal.SIGKILL
        with pytest.raises(aiohttp.ClientError):
            await request

        await turngate.start()
        assert (await operation_of(turngate.url, answered))["state"] == "COMMITTED"
        assert (await operation_of(turngate.url, in_flight))["state"] == "UNKNOWN"
    finally:
        turngate.stop()


async def test_sigkill_between_claim_and_send_leaves_dispatching_then_unknown(
    tmp_path: Path, unused_tcp_port: int, deaf_upstream: str
):
    turngate = Turngate(unused_tcp_port, tmp_path / "state.db", deaf_upstream)
    try:
        await turngate.start()
        # Larger than every socket buffer between here and a peer that never reads (in
        # strings within OpenAI's 10 MiB each); for a model with no window in the model table,
        # which context admission leaves alone.
        texts = [user("x" * 8_000_000) for _ in range(3)]
        big = orjson.dumps({**body(*texts), "model": "unlisted-model"})
        request = asyncio.ensure_future(send_chat(turngate.url, big))
        ((operation_id, _state, _m),) = await wait_for(
            lambda: [r for r in stored_operations(turngate.state) if r[1] == "DISPATCHING"]
        )
        await asyncio.sleep(0.3)
        assert stored_operations(turngate.state)[0][1] == "DISPATCHING"
        turngate.signal(signal.SIGKILL)
        await turngate.wait()
        with pytest.raises(aiohttp.ClientError):
            await request

        await turngate.start()
        record = await operation_of(turngate.url, operation_id)
        assert [c["state"] for c in record["history"]] == ["PREPARED", "DISPATCHING", "UNKNOWN"]
    finally:
        turngate.stop()


async def test_sigterm_drains_the_request_in_flight_and_exits_zero(
    turngate: Turngate, upstream: tuple[FakeUpstream, str]
):
    fake, _url = upstream
    fake.reply(dataclasses.replace(CHAT_ANSWER, delay=1.0))
    await turngate.start()
    request = asyncio.ensure_future(send_chat(turngate.url, orjson.dumps(body(user("hi")))))
    await asyncio.wait_for(fake.got_request.wait(), 10)
    turngate.signal(signal.SIGTERM)
    status, answer = await request
    assert status == 200
    assert orjson.loads(answer)["choices"][0]["message"]["content"] == "hello"
    assert await turngate.wait() == 0
    log = turngate.output()
    assert "turngate stopped" in log
    assert OPENAI_KEY not in log
    ((_op, state, _m),) = stored_operations(turngate.state)
    assert state == "COMMITTED"


WORD_EVERY = 0.05


def _chunk(delta: dict[str, Any]) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    envelope = {"id": "chatcmpl-words", "object": "chat.completion.chunk", "created": 1}
    return b"data: " + orjson.dumps({**envelope, "model": "gpt-4o", "choices": [choice]}) + b"\n\n"


async def test_a_client_that_leaves_mid_text_stops_the_relay(
    aiohttp_server: Any, tmp_path: Path, unused_tcp_port: int
) -> None:
    # Previewed text goes out on the relay's quick path (no step checks per chunk).
    # `turngate serve` does not cancel a handler whose client left (aiohttp's test server
    # does): the write that finds the client gone must end the stream.
    served = [0]

    async def words(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_chunk({"role": "assistant", "content": ""}))
        for _ in range(400):
            await asyncio.sleep(WORD_EVERY)
            await response.write(_chunk({"content": " word"}))
            served[0] += 1
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", words)
    server: TestServer = await aiohttp_server(app)
    process = Turngate(unused_tcp_port, tmp_path / "state.db", f"http://127.0.0.1:{server.port}")
    await process.start()
    try:
        request = body(user("count"))
        request["stream"] = True
        async with aiohttp.ClientSession() as session:
            resp = await session.post(process.url + CHAT, json=request, headers=JSON)
            operation_id = resp.headers["Turngate-Operation-Id"]
            seen = 0
            while seen < 5:
                seen += (await resp.content.readany()).count(b" word")
            resp.close()  # the client leaves: its connection is closed
        await asyncio.sleep(4 * WORD_EVERY)
        after_leaving = served[0]
        await asyncio.sleep(6 * WORD_EVERY)
        # Nothing reads the upstream any more: its writes stop.
        assert served[0] <= after_leaving + 2
        record = await operation_of(process.url, operation_id)
        # turngate closed the upstream, which ends the generation; no tool call had gone out.
        assert record["state"] == "FAILED"
        assert (
            record["history"][-1]["detail"] == "client disconnected: turngate closed the upstream"
        )
        # ... and is not taken for the upstream's connection breaking.
        assert "upstream stream broke" not in process.output()
    finally:
        process.stop()
