"""One claimed dispatch attempt: send the bytes, then commit, fail or lose the operation.

    DISPATCHING --send--> SENT --stream--> STREAMING --commit--> COMMITTED
         |                 |--commit--> COMMITTED      (non-streaming, tool calls valid)
         |                 |--fail----> FAILED          (upstream error status, invalid turn)
         |--fail--> FAILED (never connected)     any in-flight state --lose--> UNKNOWN

SEND is recorded as soon as aiohttp has handed the whole body to the socket, not when
the answer starts, so a slow upstream shows SENT while it thinks. A transport failure
before that is FAILED when the connection was never made, UNKNOWN otherwise. The store
is written in order: each transition waits for the one before it.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from turngate.adapters.base import Adapter
from turngate.errors import TurngateError, UpstreamProtocolError
from turngate.graph.model import MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.proxy.errors import error_response
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.tool_calls import check_tool_calls
from turngate.proxy.upstream import (
    WatchedBody,
    abort,
    inbound_headers,
    outbound_headers,
    unavailable,
)
from turngate.state.machine import Transition
from turngate.state.store import OperationRecord

log = logging.getLogger("turngate.proxy")

_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_OUTCOMES = frozenset({Transition.COMMIT, Transition.FAIL, Transition.LOSE})


class Outbound:
    """The bytes one attempt sends; ``original`` when they are the client's own."""

    __slots__ = ("body", "original")

    def __init__(self, body: bytes, *, original: bool) -> None:
        self.body = body
        self.original = original


class Attempt:
    def __init__(
        self,
        *,
        request: web.Request,
        route: RouteMatch,
        services: Services,
        adapter: Adapter,
        seq: MessageSequence,
        record: OperationRecord,
        enforced: bool,
    ) -> None:
        self.request = request
        self.route = route
        self.services = services
        self.adapter = adapter
        self.seq = seq
        self.manifest = record.manifest
        self.enforced = enforced
        self._sent: asyncio.Task[None] | None = None
        # False once a terminal outcome (commit, fail, lose) has been recorded.
        self.open = True
        self.headers = {
            "Turngate-Operation-Id": self.manifest.operation_id,
            "Turngate-Manifest-Digest": self.manifest.digest,
            "Turngate-Attempt": str(self.manifest.attempt),
        }

    async def run(self, outbound: Outbound) -> web.StreamResponse:
        try:
            return await self._run(outbound)
        except asyncio.CancelledError:
            await asyncio.shield(self._settle("cancelled"))
            raise
        except Exception:
            await self._settle("internal_error")
            raise

    async def _run(self, outbound: Outbound) -> web.StreamResponse:
        try:
            upstream = await self.send(outbound)
        except _TRANSPORT_ERRORS as exc:
            return await self.send_failed(exc)
        async with upstream:
            await self.mark_sent()
            if not 200 <= upstream.status < 300:
                return await self.relay_error(upstream)
            if self.manifest.stream:
                return await self.relay_stream(upstream)
            return await self.commit_body(upstream)

    async def _settle(self, detail: str) -> None:
        """After a cancellation or a bug: the outcome is unknown unless already recorded."""
        if self._sent is not None:
            await self._sent
        if self.open:
            await self.move(Transition.LOSE, detail=detail)

    # -- send ----------------------------------------------------------------------------

    async def send(self, outbound: Outbound) -> aiohttp.ClientResponse:
        headers = outbound_headers(self.request.headers, keep_length=False)
        headers["Idempotency-Key"] = self.manifest.idempotency_key
        headers.setdefault("Content-Type", "application/json")
        body = WatchedBody(outbound.body, self._written, content_type=headers["Content-Type"])
        return await self.services.session.request(
            self.request.method,
            self.route.upstream_url,
            headers=headers,
            data=body,
            allow_redirects=False,
        )

    def _written(self) -> None:
        if self._sent is None:
            self._sent = asyncio.get_running_loop().create_task(self.move(Transition.SEND))

    async def mark_sent(self) -> None:
        # An upstream may answer before the body is through; it was sent all the same.
        self._written()
        assert self._sent is not None
        await self._sent

    async def send_failed(self, exc: BaseException) -> web.StreamResponse:
        error = unavailable(exc)
        if self._sent is not None:
            await self._sent
            await self.move(Transition.LOSE, detail=error.rule)
        elif isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError):
            await self.move(Transition.FAIL, detail=error.rule)
        else:
            await self.move(Transition.LOSE, detail=error.rule)
        log.warning("upstream failed for %s: %s", self.manifest.operation_id, error.rule)
        return self.error(error)

    # -- outcomes ------------------------------------------------------------------------

    async def relay_error(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        """The provider's own error: FAILED, and its status and body passed on unchanged."""
        try:
            data = await upstream.read()
        except _TRANSPORT_ERRORS as exc:
            await self.move(Transition.FAIL, detail=f"upstream status {upstream.status}")
            return self.error(unavailable(exc))
        await self.move(Transition.FAIL, detail=f"upstream status {upstream.status}")
        return self.response(upstream, data)

    async def commit_body(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        try:
            data = await upstream.read()
        except _TRANSPORT_ERRORS as exc:
            error = unavailable(exc)
            await self.move(Transition.LOSE, detail=error.rule)
            return self.error(error)
        try:
            turn = self.checked_turn(data)
        except TurngateError as exc:
            await self.move(Transition.FAIL, detail=exc.rule)
            log.warning("upstream answer refused for %s: %s", self.manifest.operation_id, exc.rule)
            return self.error(exc)
        await self.move(Transition.COMMIT, handle=turn.handle)
        return self.response(upstream, data)

    def checked_turn(self, data: bytes) -> AssistantTurn:
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError("turngate: the upstream answered with non-JSON") from None
        if not isinstance(body, dict):
            raise UpstreamProtocolError("turngate: the upstream answer is not a JSON object")
        turn = self.adapter.parse_response(body)
        if self.enforced:
            check_tool_calls(turn, self.seq, self.services.schemas)
        return turn

    async def relay_stream(self, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        """Stream relay; the commit boundary per block is the streams issue."""
        await self.move(Transition.STREAM)
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.extend(self._headers(upstream))
        await response.prepare(self.request)
        try:
            async for chunk in upstream.content.iter_any():
                try:
                    await response.write(chunk)
                except ConnectionResetError:
                    await self.move(Transition.LOSE, detail="client disconnected")
                    return response
        except _TRANSPORT_ERRORS as exc:
            await self.move(Transition.LOSE, detail=unavailable(exc).rule)
            # Never end a broken stream cleanly: the client's SDK must see it break.
            abort(self.request)
            return response
        # Recorded before the client sees the end, so the end always means committed.
        await self.move(Transition.COMMIT)
        await response.write_eof()
        return response

    # -- helpers -------------------------------------------------------------------------

    def _headers(self, upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
        headers = inbound_headers(upstream.headers)
        headers.update(self.headers)
        return headers

    def response(self, upstream: aiohttp.ClientResponse, data: bytes) -> web.Response:
        return web.Response(
            status=upstream.status,
            reason=upstream.reason,
            body=data,
            headers=self._headers(upstream),
        )

    def error(self, error: TurngateError) -> web.Response:
        return error_response(self.manifest.api, error, self.headers)

    async def move(
        self, transition: Transition, *, handle: str | None = None, detail: str | None = None
    ) -> None:
        """Record a transition. The client's answer never waits on a broken store."""
        if transition in _OUTCOMES:
            self.open = False
        try:
            await self.services.store.transition(
                self.manifest.operation_id,
                transition,
                now=self.services.clock(),
                handle=handle,
                detail=detail,
            )
        except Exception as exc:
            log.error(
                "state %s for %s not recorded: %s",
                transition,
                self.manifest.operation_id,
                type(exc).__name__,
            )
