"""The one shared upstream ClientSession, header filtering, and the unchanged relay.

Outbound: hop-by-hop headers and Host go, auth headers (Authorization, x-api-key,
x-goog-api-key, anthropic-*, OpenAI-*) pass untouched, turngate's own ``Turngate-*``
request headers stay here. Redirects are never followed (they could name another host).
Inbound: hop-by-hop, length and encoding headers go (the body is re-framed, and aiohttp
has already decompressed it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import payload, web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict, CIMultiDictProxy

from turngate.errors import BadRequestBody, TurngateError, UpstreamUnavailable
from turngate.proxy.addresses import (
    ADDRESSED_BODY_LIMIT,
    back_through,
    names_results,
    results_back_through,
)
from turngate.proxy.body import BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT
from turngate.proxy.routes import RouteMatch

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Set by aiohttp for the bytes actually sent, or by the upstream's own choice.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "idempotency-key"}
_RESPONSE_DROP = HOP_BY_HOP | {"content-length", "content-encoding"}


@dataclass(frozen=True)
class UpstreamTimeouts:
    connect: float = 10.0
    # Between two reads of a response; a non-streaming LLM answer can take minutes.
    read: float = 600.0


def new_session(timeouts: UpstreamTimeouts) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.connect,
            sock_connect=timeouts.connect,
            sock_read=timeouts.read,
        ),
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
        auto_decompress=True,
        # Never take cookies from one caller's response into another caller's request.
        cookie_jar=aiohttp.DummyCookieJar(),
        # Each upstream's proxy is chosen once at start (egress.py): aiohttp's own reading
        # of the environment costs two thread hops a request and takes netrc credentials.
        trust_env=False,
    )


def _connection_tokens(headers: CIMultiDictProxy[str]) -> set[str]:
    return {t.strip().lower() for v in headers.getall("Connection", ()) for t in v.split(",")}


def outbound_headers(headers: CIMultiDictProxy[str], *, keep_length: bool) -> CIMultiDict[str]:
    named = _connection_tokens(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lower = name.lower()
        if lower in named or lower.startswith("turngate-"):
            continue
        if lower in _REQUEST_DROP and not (keep_length and lower == "content-length"):
            continue
        out.add(name, value)
    return out


def inbound_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    named = _connection_tokens(headers)
    return CIMultiDict(
        (k, v)
        for k, v in headers.items()
        if k.lower() not in _RESPONSE_DROP and k.lower() not in named
    )


def unavailable(exc: BaseException) -> TurngateError:
    """A transport failure as the error the client sees (no URL: it may carry ``?key=``)."""
    if isinstance(exc, asyncio.TimeoutError):
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            why = "the upstream could not be connected to in time (the connect timeout)"
        else:
            why = silence(None)
        return UpstreamUnavailable(f"turngate: {why}", rule="upstream_timeout", status=504)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return UpstreamUnavailable(
            f"turngate: the egress proxy refused the connection ({exc.status} {exc.message})"
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamUnavailable(
            f"turngate: cannot connect to the upstream ({type(exc.os_error).__name__})"
        )
    return UpstreamUnavailable(f"turngate: the upstream connection failed ({type(exc).__name__})")


class WatchedBody(payload.Payload):
    """Request bytes that call ``on_written`` (if any) once aiohttp has handed them all to the
    socket.

    A ``Payload`` of its own rather than a ``BytesPayload``: the latter warns on every body
    over 1 MiB, and large chat bodies are normal here.
    """

    _value: bytes
    _autoclose = True

    def __init__(
        self,
        value: bytes,
        on_written: Callable[[], None] | None = None,
        *,
        content_type: str,
    ) -> None:
        super().__init__(value, content_type=content_type)
        self._size = len(value)
        self._on_written = on_written

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self._value.decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self._value

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        value = self._value if content_length is None else self._value[:content_length]
        await writer.write(value)
        if self._on_written is not None:
            self._on_written()


async def relay(
    request: web.Request,
    route: RouteMatch,
    session: aiohttp.ClientSession,
    *,
    read: bytes | None = None,
    head: bytes = b"",
) -> web.StreamResponse:
    """An unparsed route: stream the request up and the response down, unchanged.
    ``read``: the request's body, when turngate has read it whole already; ``head``: the
    part of it read already, the rest still to stream."""
    headers = outbound_headers(request.headers, keep_length=True)
    idle = request.config_dict.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)
    streamed = request.body_exists and read is None
    body = _IdleBody(request.content, idle, head) if streamed else None
    whole = None
    if read is not None:
        # A payload of its own: aiohttp warns of every plain bytes body over 1 MiB.
        kind = request.headers.get("Content-Type", "application/octet-stream")
        whole = WatchedBody(read, content_type=kind)
    try:
        async with session.request(
            request.method,
            route.upstream_url,
            headers=headers,
            data=whole if body is None else body.chunks(),
            allow_redirects=False,
            proxy=route.prefix.proxy,
        ) as upstream:
            return await _relay_response(request, upstream, route)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        if body is not None and body.stalled:
            raise body.timeout_error() from exc
        raise


async def exchange(
    request: web.Request, route: RouteMatch, session: aiohttp.ClientSession, raw: bytes
) -> web.Response:
    """``raw`` sent up as the client's request, and the answer read whole (a small JSON
    object: an upload, a part, a batch), its addresses pointed back through turngate as a
    relayed answer's are."""
    async with session.request(
        request.method,
        route.upstream_url,
        headers=outbound_headers(request.headers, keep_length=False),
        data=raw or None,
        allow_redirects=False,
        proxy=route.prefix.proxy,
    ) as upstream:
        body = await upstream.read()
        status, reason = upstream.status, upstream.reason
        headers = inbound_headers(upstream.headers)
    body = _pointed_back(request, route, headers, body)
    return web.Response(status=status, reason=reason, body=body, headers=headers)


def _pointed_back(
    request: web.Request, route: RouteMatch, headers: CIMultiDict[str], body: bytes
) -> bytes:
    """An answer's provider addresses (in ``headers``, and in ``body``) pointed back through
    turngate, as the client reached it (proxy/addresses.py); the body as it then reads."""
    origin = f"{request.scheme}://{request.host}"
    back_through(headers, route.prefix, origin)
    if body and names_results(route):
        return results_back_through(body, route.prefix, origin)
    return body


def answer_object(response: web.Response) -> dict[str, Any]:
    """The JSON object an ``exchange`` answered with when it succeeded; else empty."""
    body = response.body
    if response.status != 200 or not isinstance(body, bytes):
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class _IdleBody:
    """A relayed request body, streamed up as it arrives, cut off when the client sends
    nothing for ``idle`` seconds (as nginx's client_body_timeout: between two reads, since
    a relayed upload may be large and slow, yet must not hold the upstream open forever)."""

    def __init__(self, content: aiohttp.StreamReader, idle: float, head: bytes = b"") -> None:
        self.content = content
        self.idle = idle
        self.head = head
        self.stalled = False

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.head:
            yield self.head
        while True:
            try:
                async with asyncio.timeout(self.idle):
                    chunk = await self.content.readany()
            except TimeoutError:
                self.stalled = True
                raise
            if not chunk:
                return
            yield chunk

    def timeout_error(self) -> BadRequestBody:
        return stalled(self.idle)


def stalled(idle: float) -> BadRequestBody:
    """A relayed body the client sent nothing of for ``idle`` seconds."""
    return BadRequestBody(
        f"turngate: the request body stalled for {idle:g} seconds",
        rule="request_timeout",
        status=408,
    )


# ``IdleWatch.waiting_since`` while a chunk is being relayed.
RELAYING = float("inf")


class IdleWatch:
    """The upstream's idle timeout (``--upstream-read-timeout``) for a body being relayed.

    aiohttp re-arms its ``sock_read`` timer on every socket read: a timer created and one
    cancelled per chunk. This watch takes it over with one timer per timeout period: the relay
    notes when it starts waiting for the next chunk (the wait for the client to take a write
    is not the upstream's idleness), and the timer, when it fires, checks that note.
    """

    def __init__(
        self, upstream: aiohttp.ClientResponse, timeout: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.loop = loop
        # The loop's clock, read after every chunk: asyncio's own loop reads
        # ``time.monotonic``, called here without the method's Python frame.
        plain = getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time
        self.clock: Callable[[], float] = time.monotonic if plain else loop.time
        self.waiting_since = loop.time()
        self._upstream = upstream
        self._timeout = timeout
        self._timer = loop.call_at(self.waiting_since + timeout, self._check)

    @classmethod
    def take_over(cls, upstream: aiohttp.ClientResponse) -> IdleWatch | None:
        connection = upstream.connection
        protocol = connection.protocol if connection is not None else None
        timeout = getattr(protocol, "read_timeout", None)
        if protocol is None or not isinstance(timeout, (int, float)) or timeout <= 0:
            return None
        # aiohttp drops its own timer at the next socket read.
        protocol.read_timeout = None
        return cls(upstream, float(timeout), asyncio.get_running_loop())

    def _check(self) -> None:
        if self.waiting_since == RELAYING:
            # Writing to the client: the upstream waits on us, not we on it.
            self._timer = self.loop.call_later(self._timeout, self._check)
            return
        due = self.waiting_since + self._timeout
        if self.loop.time() < due:
            self._timer = self.loop.call_at(due, self._check)
            return
        self._upstream.content.set_exception(aiohttp.ServerTimeoutError(silence(self._timeout)))
        self._upstream.close()

    @property
    def timeout(self) -> float:
        return self._timeout

    def stop(self) -> None:
        self._timer.cancel()


def silence(timeout: float | None) -> str:
    """What a read timeout of ``timeout`` seconds (None: not known here) means, in the words
    a client is told."""
    if timeout is None:
        return "the provider sent nothing within the read timeout (--upstream-read-timeout)"
    return f"the provider sent nothing for {timeout:g} s (--upstream-read-timeout)"


async def _relay_response(
    request: web.Request, upstream: aiohttp.ClientResponse, route: RouteMatch
) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    headers = inbound_headers(upstream.headers)
    head, whole = b"", False
    if names_results(route):
        head, whole = await _head_of(upstream, ADDRESSED_BODY_LIMIT)
    # A body read only in part is relayed as it is.
    pointed = _pointed_back(request, route, headers, head if whole else b"")
    if whole:
        head = pointed
        response.content_length = len(head)
    response.headers.extend(headers)
    await response.prepare(request)
    watch = IdleWatch.take_over(upstream)
    try:
        if head:
            await response.write(head)
        async for chunk in upstream.content.iter_any():
            if watch is not None:
                watch.waiting_since = RELAYING
            await response.write(chunk)
            if watch is not None:
                watch.waiting_since = watch.clock()
    except (TimeoutError, aiohttp.ClientError):
        # Cut the client off instead of ending the body cleanly: a truncated body must
        # not look complete.
        abort(request)
        return response
    finally:
        if watch is not None:
            watch.stop()
    await response.write_eof()
    return response


async def _head_of(upstream: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """The answer's body up to ``limit`` bytes, and whether that is all of it."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in upstream.content.iter_any():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks), False
    return b"".join(chunks), True


def abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()
