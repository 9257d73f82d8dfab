"""One claimed dispatch attempt: send the bytes, then commit, fail or lose the operation.

    DISPATCHING --send--> SENT --stream--> STREAMING --bind--> STREAMING --commit--> COMMITTED
         |                 |--commit--> COMMITTED      (non-streaming, tool calls valid)
         |                 |--fail----> FAILED          (upstream error status, invalid turn)
         |--fail--> FAILED (never connected)     any in-flight state --lose--> UNKNOWN

The bytes count as sent once aiohttp has handed the whole body to the socket. SEND is
written ``SEND_GRACE`` later, so a slow upstream shows SENT while it thinks; a
non-streamed answer quicker than that has its SEND written in the same store write as its
COMMIT (one write, one fsync, one trip to the store's thread instead of two), and a stream
whose headers come sooner has it written with its STREAM. Either way the operation is in
flight from its claim (DISPATCHING and SENT both become UNKNOWN after a crash), and every
other outcome writes SEND first. A transport failure before the bytes were out is FAILED
when the connection was never made, UNKNOWN otherwise, except that a connection the
upstream closed before its status line (a kept-alive connection it had closed as idle) is
FAILED and the request sent again, once, when that is safe (``may_send_again``). The store
is written in order: each transition waits for the one before it.

A streamed answer goes through ``StreamSession`` (stream.py): COMMITTED only once the
relay holds a canonical turn, and the client sees the end only after that. A stream the
upstream closed before its first byte is retried once, as the next attempt of the same
conversation revision from the same bytes (``next_attempt``). A non-streamed answer is
decoded once, parsed whole, and its tool calls pass the same check the stream assembler
applies before it commits a call (turn_check.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from turngate.adapters.base import Adapter
from turngate.adapters.openai_responses.response import RUNNING
from turngate.errors import (
    IllegalTransition,
    StateConflict,
    StoreUnavailable,
    TurngateError,
    UpstreamProtocolError,
)
from turngate.graph.model import AnyBlock, MessageSequence
from turngate.graph.schema_check import ToolSchemas
from turngate.graph.turn import AssistantTurn
from turngate.proxy.conversation import answer_prefix
from turngate.proxy.errors import error_response
from turngate.proxy.observe import DispatchObserver, quiet_observer
from turngate.proxy.replay import (
    RecordedStream,
    commit_answer,
    commit_streamed,
    operation_headers,
    quietly,
)
from turngate.proxy.replies import threaded
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.stream import (
    RESENT,
    StreamEnd,
    StreamSession,
    plan,
    provider_runs_tools,
    retry_safe,
)
from turngate.proxy.turn_check import call_schemas, check_turn
from turngate.proxy.upstream import (
    WatchedBody,
    inbound_headers,
    outbound_headers,
    unavailable,
)
from turngate.state.conversations import ClientKey
from turngate.state.machine import DispatchState, Transition
from turngate.state.manifest import new_operation_id
from turngate.state.store import ClaimConflict, OperationRecord

log = logging.getLogger("turngate.proxy")

_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
# A reset or an end of the connection before the status line (not a timeout: a slow
# provider is still at work).
_CLOSED_BEFORE_ANSWER = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
_OUTCOMES = frozenset({Transition.COMMIT, Transition.FAIL, Transition.LOSE})
QUARANTINE_LOG = "quarantine"
QUARANTINE_KEEP = 1000
# Seconds after the bytes are out before SEND is written on its own; an answer back sooner
# carries SEND in its outcome's write.
SEND_GRACE = 0.05


class Retry:
    """An attempt's answer when the next attempt must take over (see ``next_attempt``)."""


RETRY = Retry()


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
        stream: StreamSession | None = None,
        observer: DispatchObserver | None = None,
        client_key: ClientKey | None = None,
        continues: bool = False,
        prefix: tuple[AnyBlock, ...] | None = None,
    ) -> None:
        self.request = request
        self.route = route
        self.services = services
        self.adapter = adapter
        self.seq = seq
        self.manifest = record.manifest
        self.enforced = enforced
        # The client's Idempotency-Key: a retry's claim takes it over, so that it names the
        # attempt that answers.
        self.client_key = client_key
        # The answer goes on with a committed turn (a paused turn, Gemini hops continued by
        # token); ``prefix``: its blocks, when the request does not end with them.
        self.continues = continues
        self.prefix = prefix
        # The client's side of a streamed request, shared by the attempts that serve it.
        self.stream = stream
        # The bytes are out (handed to the socket); SEND's write, once started; its timer.
        self._out = False
        self._sent: asyncio.Task[None] | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        # True once SEND went with the outcome's write (fold_send).
        self._send_folded = False
        # False once a terminal outcome (commit, fail, lose) has been recorded.
        self.open = True
        # True once LOSE was: the provider may have acted on the bytes (UNKNOWN).
        self.lost = False
        # True on the attempt a retry claimed (next_attempt): a request is sent again once.
        self.resent = False
        self.headers = operation_headers(self.manifest)
        # The dispatch's span, metrics and log line fields (observe.py).
        self.observer = observer if observer is not None else quiet_observer(request)
        self.observer.claimed(record)

    @property
    def keep_answer(self) -> bool:
        """Whether the answer is kept for replay. Only a retry that claims the same slot (the
        same conversation revision) or the same Idempotency-Key can be answered with a kept
        answer; a request with neither is its own operation (SPEC §4), so its answer, which
        no retry could ever reach, is neither written to the store nor copied as it streams."""
        return self.enforced and (
            self.manifest.conversation_id is not None or self.client_key is not None
        )

    async def run(self, outbound: Outbound) -> web.StreamResponse:
        if self.manifest.stream and self.stream is None:
            try:
                self.stream = self.open_stream()
            except TurngateError as exc:
                await self.move(Transition.FAIL, detail=exc.rule)
                return self.error(exc)
        attempt = self
        while True:
            answer = await attempt.run_once(outbound)
            if not isinstance(answer, Retry):
                if attempt.stream is not None:
                    self.observer.stream_ended(attempt.stream)
                return answer
            following = await attempt.next_attempt()
            if not isinstance(following, Attempt):
                return following
            attempt = following

    async def run_once(self, outbound: Outbound) -> web.StreamResponse | Retry:
        try:
            with self.observer.upstream(self.request.method, self.route.upstream_url):
                return await self._run(outbound)
        except asyncio.CancelledError:
            await asyncio.shield(self.abandon("cancelled"))
            raise
        except Exception:
            await self._settle("internal_error")
            raise

    async def _run(self, outbound: Outbound) -> web.StreamResponse | Retry:
        try:
            upstream = await self.send(outbound)
        except _TRANSPORT_ERRORS as exc:
            if self.may_send_again(exc):
                await self.move(Transition.FAIL, detail=RESENT)
                return RETRY
            return await self.send_failed(exc)
        async with upstream:
            self.mark_sent()
            if not 200 <= upstream.status < 300:
                return await self.relay_error(upstream)
            if self.stream is not None:
                return await self.relay_stream(self.stream, upstream)
            return await self.commit_body(upstream)

    def open_stream(self) -> StreamSession:
        buffer = self.services.policy.stream_text == "buffer"
        stream_plan = plan(self.request.headers, self.seq, enforced=self.enforced, buffer=buffer)
        session = RecordedStream if self.keep_answer else StreamSession
        return session(
            self.request,
            api=self.adapter.api,
            plan=stream_plan,
            tools=self.toolset,
            capabilities=self.adapter.capabilities,
            http=self.services.session,
            upstream_base=self.route.prefix.upstream,
        )

    @functools.cached_property
    def turn_prefix(self) -> tuple[AnyBlock, ...]:
        return answer_prefix(self.seq) if self.prefix is None else self.prefix

    @functools.cached_property
    def toolset(self) -> ToolSchemas | None:
        """What the answer's calls are checked against: the request's tools, or an Anthropic
        thread's whole toolset (replies.py). A shadowed request is only observed: its calls
        are checked for completeness, not against schemas, as its non-streamed answers are
        not checked at all."""
        if not self.enforced:
            return None
        shown = call_schemas(self.seq, self.services.schemas)
        return self.services.replies.toolset(self.seq, shown, self.manifest.credential_hash)

    async def committed(self, turn: AssistantTurn) -> None:
        """The answer is the revision's canonical turn."""
        self.observer.committed(turn)
        # Worked out only for a thread: an answer without calls never needs the toolset.
        if self.enforced and threaded(self.seq) and self.toolset is not None:
            services, credential = self.services, self.manifest.credential_hash
            services.replies.checked_with(self.seq, turn.handle, self.toolset, credential)
            conversation = self.manifest.conversation_id
            if conversation is not None:
                await services.replies.keep_thread(
                    services.store,
                    conversation,
                    self.seq,
                    self.toolset,
                    credential,
                    now=services.clock(),
                )

    async def next_attempt(self) -> Attempt | web.StreamResponse:
        """Claim the next attempt of the same revision, to send the same bytes again.

        This attempt is FAILED already: its upstream closed before sending a byte.
        """
        now = self.services.clock()
        draft = dataclasses.replace(
            self.manifest,
            operation_id=new_operation_id(),
            attempt=0,
            idempotency_key="",
            created_at=now,
        )
        try:
            record = await self.services.store.claim(draft, now=now, client_key=self.client_key)
        except TurngateError as exc:
            log.warning("no retry for %s: %s", self.manifest.operation_id, exc.rule)
            if isinstance(exc, ClaimConflict):
                self.observer.conflict(exc.rule, stage="retry")
            return self.error(exc)
        except Exception as exc:
            log.error("no retry for %s: the store failed (%s)", draft.operation_id, exc)
            return self.error(StoreUnavailable("turngate: the state store is unavailable"))
        log.warning(
            "retrying %s as %s (attempt %d): the upstream closed before its first byte",
            self.manifest.operation_id,
            record.operation_id,
            record.manifest.attempt,
        )
        following = Attempt(
            request=self.request,
            route=self.route,
            services=self.services,
            adapter=self.adapter,
            seq=self.seq,
            record=record,
            enforced=self.enforced,
            stream=self.stream,
            observer=self.observer,
            client_key=self.client_key,
            continues=self.continues,
            prefix=self.prefix,
        )
        following.resent = True
        if self.stream is not None:
            # A conversation-less request is its own slot: its retry is attempt 1 of a new one.
            generation = max(record.manifest.attempt, self.stream.relay.generation + 1)
            await self.stream.restart(generation)
        return following

    async def _settle(self, detail: str) -> None:
        """After a bug: the outcome is unknown unless already recorded."""
        if self.open:
            await self.move(Transition.LOSE, detail=detail)

    async def abandon(self, detail: str) -> None:
        """turngate stops the attempt itself (its client left, or the process stops) and
        closes the upstream connection: a stream's generation ends with it, and whatever a
        whole answer would have held can reach no one. When the provider cannot have done
        anything unseen that would matter twice (``retry_safe``) and no tool call reached the
        client, the attempt is over: FAILED, so the revision is free for the client's next
        request at once, not after ``--unknown-deadline``. Otherwise UNKNOWN."""
        if not self.open:
            return
        if self.over_when_ended():
            await self.move(Transition.FAIL, detail=f"{detail}: turngate closed the upstream")
        else:
            await self.move(Transition.LOSE, detail=detail)

    # -- send ----------------------------------------------------------------------------

    async def send(self, outbound: Outbound) -> aiohttp.ClientResponse:
        headers = outbound_headers(self.request.headers, keep_length=False)
        headers["Idempotency-Key"] = self.manifest.idempotency_key
        headers.setdefault("Content-Type", "application/json")
        self.observer.propagate(headers)
        body = WatchedBody(outbound.body, self._written, content_type=headers["Content-Type"])
        self.observer.sending()
        upstream = await self.services.session.request(
            self.request.method,
            self.route.upstream_url,
            headers=headers,
            data=body,
            allow_redirects=False,
            proxy=self.route.prefix.proxy,
        )
        self.observer.answered(upstream.status)
        return upstream

    def _written(self) -> None:
        if self._out:
            return
        self._out = True
        self._send_timer = asyncio.get_running_loop().call_later(SEND_GRACE, self._send_now)

    def mark_sent(self) -> None:
        # An upstream may answer before the body is through; it was sent all the same.
        self._written()

    def _send_now(self) -> asyncio.Task[None] | None:
        """Start SEND's own write unless it is under way, done or folded; the write."""
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        if self._out and self._sent is None and not self._send_folded:
            self._sent = asyncio.get_running_loop().create_task(self.move(Transition.SEND))
        return self._sent

    async def recorded_send(self) -> None:
        """SEND written, when the bytes are out: before any other transition of the attempt."""
        sent = self._send_now()
        if sent is not None:
            await sent

    def fold_send(self) -> bool:
        """True when the outcome's write is to carry SEND: the bytes are out and SEND has not
        been written on its own (nor started)."""
        if not self._out or self._sent is not None or self._send_folded:
            return False
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        self._send_folded = True
        return True

    def may_send_again(self, exc: BaseException) -> bool:
        """The upstream closed the connection before a byte of its answer, as a server does
        with a kept-alive connection it has just closed as idle (a gateway that keeps them
        5 s, aiohttp 15 s): the request is sent again, once, on another connection, when the
        provider cannot have done anything unseen that would matter twice (``retry_safe``)."""
        if not isinstance(exc, _CLOSED_BEFORE_ANSWER) or isinstance(
            exc, aiohttp.ClientConnectorError
        ):
            return False
        return self.retry_safe and not self.resent

    @property
    def retry_safe(self) -> bool:
        """Whether nothing the provider might do unseen matters twice (stream.retry_safe),
        as the stream's plan has it already."""
        if self.stream is not None:
            return self.stream.plan.retry_safe
        return retry_safe(self.seq, enforced=self.enforced)

    def over_when_ended(self) -> bool:
        """``StreamSession.over_when_ended``; a whole answer never reaches the client before
        it is checked, so for it ``retry_safe`` alone."""
        if self.stream is not None:
            return self.stream.over_when_ended()
        return self.retry_safe

    async def send_failed(self, exc: BaseException) -> web.StreamResponse:
        error = unavailable(exc)
        self.observer.transport_failed(error.rule)
        if self._out:
            await self.move(Transition.LOSE, detail=error.rule)
        elif isinstance(
            exc,
            aiohttp.ClientConnectorError
            | aiohttp.ConnectionTimeoutError
            # An egress proxy that refused the tunnel: nothing reached the provider.
            | aiohttp.ClientHttpProxyError,
        ):
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
            outcome = Transition.FAIL if self.over_when_ended() else Transition.LOSE
            await self.move(outcome, detail=error.rule)
            return self.error(error)
        try:
            turn, body = self.checked_turn(data)
        except TurngateError as exc:
            await self.move(Transition.FAIL, detail=exc.rule)
            log.warning("upstream answer refused for %s: %s", self.manifest.operation_id, exc.rule)
            return self.error(exc)
        if self.still_running(turn, body):
            return await self.hold_running(upstream, data, turn)
        content_type = upstream.headers.get("Content-Type", "application/json")
        # A shadowed commit is a plain transition: its SEND goes first, on its own.
        sent = self.enforced and self.fold_send()
        if not sent:
            await self.recorded_send()
        refused = await commit_answer(self, turn, upstream.status, content_type, data, sent=sent)
        if refused is not None:
            return self.error(refused)
        await self.committed(turn)
        return self.response(upstream, data)

    def still_running(self, turn: AssistantTurn, body: dict[str, Any]) -> bool:
        """An OpenAI Responses background response, answered while it is queued or running,
        under a conversation id: its turn is still to come (background.py). A body that
        says no status at all (a compatible server's) is an answer, as before."""
        return (
            self.enforced
            and self.manifest.conversation_id is not None
            and self.adapter.api == "openai_responses"
            and turn.stop_reason is None
            and turn.handle is not None
            and body.get("status") in RUNNING
        )

    async def hold_running(
        self, upstream: aiohttp.ClientResponse, data: bytes, turn: AssistantTurn
    ) -> web.StreamResponse:
        """The attempt stays SENT, bound to the response's handle: the client's retrieval of
        the response settles it (background.py)."""
        await self.move(Transition.BIND, handle=turn.handle, sent=self.fold_send())
        return self.response(upstream, data)

    def checked_turn(self, data: bytes) -> tuple[AssistantTurn, dict[str, Any]]:
        """The answer's turn, its calls checked, and the JSON object it was read from."""
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError("turngate: the upstream answered with non-JSON") from None
        if not isinstance(body, dict):
            raise UpstreamProtocolError("turngate: the upstream answer is not a JSON object")
        turn = self.adapter.parse_response(body)
        if self.enforced and turn.tool_calls:
            # The toolset's schemas only for an answer with calls to check.
            check_turn(turn, self.toolset, self.adapter.capabilities)
        return turn, body

    async def relay_stream(
        self, stream: StreamSession, upstream: aiohttp.ClientResponse
    ) -> web.StreamResponse | Retry:
        await self.move(Transition.STREAM, sent=self.fold_send())
        end = await stream.relay_attempt(self, upstream)
        if end is StreamEnd.RETRY:
            return RETRY
        assert stream.response is not None, f"a stream that ended {end} wrote nothing"
        return stream.response

    # -- what the stream asks of its attempt ---------------------------------------------

    async def bind(self, handle: str) -> bool:
        """Bind the response handle; False when the store says this attempt is not live."""
        try:
            await self._transition(Transition.BIND, handle=handle)
        except asyncio.CancelledError:
            # The client left while the handle was being bound (a cancelled SQLite job that
            # had not started never runs). Bind it all the same before the attempt is
            # abandoned: the response runs on upstream, and a retrieval of it must find
            # this attempt to commit its turn. A bind that had landed binds again alike.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._transition(Transition.BIND, handle=handle))
            raise
        except (IllegalTransition, StateConflict) as exc:
            log.warning("handle of %s not bound: %s", self.manifest.operation_id, exc)
            return False
        except Exception as exc:
            # The commit at the end decides; a store that is down then fails it.
            log.error("handle of %s not bound: %s", self.manifest.operation_id, type(exc))
        return True

    async def commit(self, turn: AssistantTurn) -> bool:
        """Record COMMIT; False when the store refused or failed (the client then sees the
        stream fail, never its end)."""
        self.open = False
        try:
            await commit_streamed(self, turn)
        except Exception as exc:
            log.error("commit of %s not recorded: %s", self.manifest.operation_id, exc)
            return False
        await self.committed(turn)
        return True

    async def still_live(self) -> bool:
        """Whether the store still holds this attempt as the streaming one (fail closed)."""
        try:
            record = await self.services.store.get(self.manifest.operation_id)
        except Exception as exc:
            log.error("state of %s unreadable: %s", self.manifest.operation_id, type(exc))
            return False
        return record is not None and record.state is DispatchState.STREAMING

    async def quarantine(self, entry: dict[str, Any]) -> None:
        """Keep what a superseded attempt still streamed in the store's quarantine log."""
        logged = {
            "operationId": self.manifest.operation_id,
            "attempt": self.manifest.attempt,
            "api": self.manifest.api,
            **entry,
        }
        try:
            await self.services.store.append_log(
                QUARANTINE_LOG, logged, now=self.services.clock(), keep=QUARANTINE_KEEP
            )
        except Exception as exc:
            log.error("quarantine entry for %s not kept: %s", self.manifest.operation_id, exc)

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
        headers = self.headers
        if self.lost and provider_runs_tools(self.seq):
            # The provider may have run its own tools for this attempt: the SDK's retry of
            # a 502 or 504, a new request to turngate, would have them run again.
            headers = {**headers, "x-should-retry": "false"}
        return error_response(self.manifest.api, error, headers)

    async def move(
        self,
        transition: Transition,
        *,
        handle: str | None = None,
        detail: str | None = None,
        sent: bool = False,
    ) -> None:
        """Record a transition (``sent``: with the SEND ``fold_send`` gave it, in the same
        write). The client's answer never waits on a broken store."""
        if transition in _OUTCOMES:
            self.open = False
            self.lost = transition is Transition.LOSE
        if transition is not Transition.SEND:
            await self.recorded_send()
        try:
            await self._transition(transition, handle=handle, detail=detail, sent=sent)
        except asyncio.CancelledError:
            # Its handler was cancelled (the client gone), maybe before the store took the
            # write (a cancelled SQLite job that had not started never runs): record it
            # anyway, then stay cancelled. A write that had landed is refused as illegal.
            again = self._transition(transition, handle=handle, detail=detail, sent=sent)
            self.services.in_background(quietly(again))
            raise
        except Exception as exc:
            log.error(
                "state %s for %s not recorded: %s",
                transition,
                self.manifest.operation_id,
                type(exc).__name__,
            )

    async def _transition(
        self,
        transition: Transition,
        *,
        handle: str | None = None,
        detail: str | None = None,
        sent: bool = False,
    ) -> None:
        record = await self.services.store.transition(
            self.manifest.operation_id,
            transition,
            now=self.services.clock(),
            handle=handle,
            detail=detail,
            sent=sent,
        )
        self.observer.recorded(record, sent=sent)
