"""A fake provider: replays recorded fixture bodies, records every request, injects faults.

    upstream = FakeUpstream()
    upstream.reply(Reply.fixture("openai-chat/pai-nonstream-2-tool-calls.json"))
    upstream.reply(Reply(status=500, body=b"..."), path="/v1/messages")   # per path
    ... upstream.received  -> [Received(method, path_qs, headers, body)]

Faults: ``status`` (any code), ``delay`` (seconds before the headers), ``pace`` (seconds
between two events of a stream), ``drop_after``
(bytes of body written, then, ``linger`` seconds later, the connection is aborted), ``hang``
(read the request, never answer). ``.sse`` bodies are written one event at a time, like a
real stream.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.fixtures_dir import FIXTURES_DIR


@dataclass(frozen=True)
class Reply:
    body: bytes = b"{}"
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop_after: int | None = None
    hang: bool = False
    # Between the last byte before a drop and the abort. aiohttp's client discards what it
    # has buffered but not yet handed out once the connection errors, so without this pause
    # the bytes written before the cut can be lost and the reader sees no body at all.
    linger: float = 0.25
    # Seconds between two events of a streamed body (a model generating at its pace).
    pace: float = 0.0

    @classmethod
    def fixture(cls, relative: str, **kwargs: Any) -> Reply:
        path = FIXTURES_DIR / relative
        content_type = "text/event-stream" if path.suffix == ".sse" else "application/json"
        return cls(body=path.read_bytes(), content_type=content_type, **kwargs)

    @classmethod
    def json(cls, value: Any, **kwargs: Any) -> Reply:
        return cls(body=orjson.dumps(value), **kwargs)

    @property
    def streamed(self) -> bool:
        return self.content_type == "text/event-stream"


@dataclass(frozen=True)
class Received:
    method: str
    path_qs: str
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class FakeUpstream:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self._default = Reply()
        self._by_path: dict[str, Reply] = {}
        # Answers for the next requests, in order, before the default (``replies``).
        self._queued: list[Reply] = []
        # Set once a request has been read in full (a test waits for it before a crash).
        self.got_request = asyncio.Event()

    def reply(self, reply: Reply, path: str | None = None) -> None:
        if path is None:
            self._default = reply
        else:
            self._by_path[path] = reply

    def replies(self, *replies: Reply) -> None:
        """The next requests, one each, in order, get ``replies`` (an agent loop's answers);
        then the default again."""
        self._queued.extend(replies)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(
            Received(
                request.method,
                request.raw_path,
                CIMultiDictProxy(CIMultiDict(request.headers)),
                body,
            )
        )
        self.got_request.set()
        if self._queued:
            reply = self._queued.pop(0)
        else:
            reply = self._by_path.get(request.path, self._default)
        if reply.hang:
            await asyncio.Event().wait()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        response = web.StreamResponse(status=reply.status, headers=reply.headers)
        response.content_type = reply.content_type
        if not reply.streamed:
            response.content_length = len(reply.body)
        await response.prepare(request)
        payload = reply.body if reply.drop_after is None else reply.body[: reply.drop_after]
        for index, piece in enumerate(_pieces(payload, reply.streamed)):
            if reply.pace and index:
                await asyncio.sleep(reply.pace)
            await response.write(piece)
        if reply.drop_after is not None:
            assert request.transport is not None
            await asyncio.sleep(reply.linger)
            request.transport.abort()
            return response
        await response.write_eof()
        return response


def _pieces(body: bytes, streamed: bool) -> list[bytes]:
    if not streamed:
        return [body]
    separator = b"\r\n\r\n" if b"\r\n\r\n" in body else b"\n\n"
    events = body.split(separator)
    out = [event + separator for event in events[:-1]]
    if events[-1]:
        out.append(events[-1])
    return out


def fixture_path(relative: str) -> Path:
    return FIXTURES_DIR / relative
