"""A kept-alive upstream connection that the upstream closed as idle just as turngate sent a
request on it: the request never reached the provider, yet its bytes were out. Such a
connection closed before the status line is sent again, once, on a new connection, when
the provider cannot have done anything unseen that would matter twice; the client gets the
answer, the provider one request. Otherwise the attempt stays UNKNOWN, as before.

Measured against an aiohttp upstream that closes connections idle for 0.3 s, with requests
0.295-0.305 s apart: 19 of 150 answered 502 (the attempt UNKNOWN, a conversation's
revision blocked until its deadline) before; 150 of 150 answered after, the upstream
receiving 150. The upstream here closes a kept connection on its next request, every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT
from tests.proxy.helpers import CHAT_ANSWER
from tests.proxy.stack import OPENAI_KEY
from tests.proxy.stream_support import RecordingStore
from turngate.proxy.app import create_app
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings
from turngate.state.machine import DispatchState
from turngate.state.memory import MemoryStore

HI = [{"role": "user", "content": "Hi"}]
RESPONSES_ANSWER = {
    "id": "resp_idle",
    "object": "response",
    "status": "completed",
    "model": "gpt-4o",
    "output": [
        {
            "type": "message",
            "id": "msg_idle",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        }
    ],
}
CONVERSATION = {"Turngate-Conversation-Id": "conv-idle"}


@dataclasses.dataclass
class ClosingUpstream:
    """Answers the first request of each connection; a later request on the same connection
    finds it closed, unread. ``answers=False``: no request is ever answered."""

    answers: bool = True
    body: bytes = CHAT_ANSWER.body
    stream: bytes | None = None
    answered: int = 0
    closed_unread: int = 0
    port: int = 0

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if not self.answers:
                self.closed_unread += 1
                writer.transport.abort()
                return
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            body, kind = (self.body, b"application/json")
            if self.stream is not None:
                body, kind = (self.stream, b"text/event-stream")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            self.answered += 1
            # The connection is kept; the next request on it finds it closed.
            await reader.readuntil(b"\r\n\r\n")
            self.closed_unread += 1
            writer.transport.abort()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
async def turngate(aiohttp_server: Any) -> AsyncIterator[Any]:
    servers: list[asyncio.Server] = []

    async def make(upstream: ClosingUpstream) -> tuple[str, Any]:
        servers.append(await upstream.start())
        base = f"http://127.0.0.1:{upstream.port}"
        store = RecordingStore(MemoryStore())
        app = create_app(
            Settings(upstream_openai=base),
            store=store,
            credential_secret="s",
            timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
        )
        server = await aiohttp_server(app)
        return f"http://127.0.0.1:{server.port}/openai/v1", store

    yield make
    for server in servers:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


def sdk(base: str, headers: dict[str, str] | None = CONVERSATION) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=base, max_retries=0, default_headers=headers
    )


async def test_a_request_on_a_connection_closed_as_idle_is_sent_again(turngate: Any) -> None:
    upstream = ClosingUpstream()
    base, store = await turngate(upstream)
    async with sdk(base) as client:
        await client.chat.completions.create(model="gpt-4o", messages=HI)
        history = [
            *HI,
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "And?"},
        ]
        answer = await client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=history
        )
    assert answer.parse().choices[0].message.content == "hello"
    assert answer.headers["Turngate-Attempt"] == "2"
    assert (upstream.answered, upstream.closed_unread) == (2, 1)
    records = await store.records()
    assert [r.state for r in records] == [
        DispatchState.COMMITTED,
        DispatchState.FAILED,
        DispatchState.COMMITTED,
    ]
    assert "closed the connection before answering" in (records[1].history[-1].detail or "")


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
async def test_a_stream_is_sent_again_the_same_way(turngate: Any) -> None:
    recorded = FIXTURES_DIR / "openai-chat" / "pai-text-only.sse"
    upstream = ClosingUpstream(stream=recorded.read_bytes())
    base, _store = await turngate(upstream)
    async with sdk(base, headers=None) as client:
        for question in ("Hi", "Hi again"):
            chunks = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": question}], stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
            assert text
    assert (upstream.answered, upstream.closed_unread) == (2, 1)


async def test_with_a_provider_run_tool_the_attempt_stays_unknown(turngate: Any) -> None:
    upstream = ClosingUpstream(body=orjson.dumps(RESPONSES_ANSWER))
    base, store = await turngate(upstream)
    web_search = [{"type": "web_search"}]
    async with sdk(base, headers=None) as client:
        await client.responses.create(model="gpt-4o", input="News?", tools=web_search)  # type: ignore[arg-type]
        with pytest.raises(openai.InternalServerError) as raised:
            await client.responses.create(model="gpt-4o", input="More?", tools=web_search)  # type: ignore[arg-type]
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert (upstream.answered, upstream.closed_unread) == (1, 1)
    states = [r.state for r in await store.records()]
    assert states[-1] is DispatchState.UNKNOWN


async def test_it_is_sent_again_once(turngate: Any) -> None:
    upstream = ClosingUpstream(answers=False)
    base, store = await turngate(upstream)
    async with sdk(base) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="gpt-4o", messages=HI)
    assert (upstream.answered, upstream.closed_unread) == (0, 2)
    states = [r.state for r in await store.records()]
    assert states == [DispatchState.FAILED, DispatchState.UNKNOWN]
