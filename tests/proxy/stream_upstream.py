"""A fault-injecting fake provider for the stream tests: scripted replies, one per request.

    upstream = ScriptedUpstream()
    upstream.script(Script(body, cut=812, end="fin"))     # the next request gets this
    upstream.default = Script(body)                        # every request after the scripts
    upstream.resume_from = body                            # GET /v1/responses/{id}?stream=…

A body is written one SSE frame per write, like a real stream. ``cut`` keeps only the first
``cut`` bytes. ``end`` says how the connection ends after the bytes:

- ``clean``: the chunked body is terminated (a normal end, even if the stream is cut short);
- ``fin``: the connection is closed with every byte flushed but the chunked body never
  terminated: the peer reads all the bytes, then a broken body (a dropped connection);
- ``rst``: the connection is aborted (TCP reset) once the bytes left the process; the peer
  may or may not read the last of them, as with a real reset.

``gate_at`` + ``gate`` pause the body after ``gate_at`` bytes until the event is set (a
stalled or late stream). ``resume_from`` answers the Responses resume GET with the events
of that recording after ``starting_after`` (``replay`` earlier events again, as a server
that resumes from a checkpoint would: turngate must de-duplicate them). ``retrievals``, when
it holds scripts, answers those GETs first, one script each.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from dataclasses import dataclass
from typing import Literal

import orjson
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.adapters import stream_faults as faults
from tests.proxy.fake_upstream import Received

End = Literal["clean", "fin", "rst"]
_RESUME = re.compile(r"/v1/responses/([^/]+)")


@dataclass(frozen=True)
class Script:
    body: bytes = b""
    status: int = 200
    content_type: str = "text/event-stream"
    cut: int | None = None
    end: End = "clean"
    gate_at: int | None = None
    gate: asyncio.Event | None = None
    # A non-SSE body (JSON) is written in one piece with a Content-Length.
    sse: bool = True
    # Seconds between the last frame and the end of the chunked body (a separate packet).
    linger: float = 0.0


class ScriptedUpstream:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.scripts: deque[Script] = deque()
        self.default = Script()
        self.resume_from: bytes | None = None
        self.replay = 0
        self.resume_status = 200
        self.retrievals: deque[Script] = deque()
        # Set for each connection whose body was cut off, once its last byte was handed on.
        self.finished = 0
        # The client port of each request: the same port again is a reused connection.
        self.ports: list[int] = []

    def script(self, *scripts: Script) -> None:
        self.scripts.extend(scripts)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.ports.append(peer[1] if peer else 0)
        self.received.append(
            Received(
                request.method,
                request.raw_path,
                CIMultiDictProxy(CIMultiDict(request.headers)),
                body,
            )
        )
        found = _RESUME.fullmatch(request.path)
        if request.method == "GET" and found and request.query.get("stream") == "true":
            script = (
                self.retrievals.popleft()
                if self.retrievals
                else self._resume_script(int(request.query.get("starting_after", "-1")))
            )
        else:
            script = self.scripts.popleft() if self.scripts else self.default
        return await self._write(request, script)

    def _resume_script(self, after: int) -> Script:
        assert self.resume_from is not None, "no recording to resume from"
        if self.resume_status != 200:
            return Script(b'{"error": {"message": "gone"}}', status=self.resume_status, sse=False)
        frames = faults.split_frames(self.resume_from)
        numbered = [f for f in frames if isinstance(f.data, dict) and "sequence_number" in f.data]
        start = next(
            (k for k, f in enumerate(numbered) if f.data["sequence_number"] > after), len(numbered)
        )
        start = max(0, start - self.replay)
        return Script(b"".join(f.raw for f in numbered[start:]))

    async def _write(self, request: web.Request, script: Script) -> web.StreamResponse:
        response = web.StreamResponse(status=script.status)
        response.content_type = script.content_type if script.sse else "application/json"
        if not script.sse:
            response.content_length = len(script.body)
        await response.prepare(request)
        payload = script.body if script.cut is None else script.body[: script.cut]
        gate_at = script.gate_at if script.gate is not None else None
        written = 0
        for piece in pieces(payload) if script.sse else [payload]:
            rest = piece
            if gate_at is not None and script.gate and written <= gate_at < written + len(piece):
                await response.write(piece[: gate_at - written])
                await script.gate.wait()
                rest = piece[gate_at - written :]
            await response.write(rest)
            written += len(piece)
        transport = request.transport
        assert transport is not None
        if script.end == "clean":
            if script.linger:
                await asyncio.sleep(script.linger)
            await response.write_eof()
            return response
        while transport.get_write_buffer_size():
            await asyncio.sleep(0.001)
        self.finished += 1
        if script.end == "fin":
            transport.close()
        else:
            await asyncio.sleep(0.005)
            transport.abort()
        return response


def pieces(body: bytes) -> list[bytes]:
    """One write per SSE frame; trailing bytes (a cut frame) in a last write."""
    return [frame.raw for frame in faults.split_frames(body)]


def json_error(message: str, status: int) -> Script:
    return Script(orjson.dumps({"error": {"message": message}}), status=status, sse=False)
