"""Crash recovery: when an UNKNOWN attempt is over, and what came of it.

An attempt is UNKNOWN when its outcome cannot be known: its process died (``recover`` at
start, or a Redis replica's lease ran out: ``take_over_expired``), or its stream broke after
bytes had left. It keeps blocking its conversation revision, so no second generation
starts, until one of these says it is over:

- the provider (OpenAI Responses, whose handles can be queried): a retry of the same
  request by the same caller queries ``GET /v1/responses/{handle}`` with that caller's own
  credentials (turngate keeps none). ``completed``: RECOVER, the turn becomes canonical and
  the retry gets it replayed. ``failed``/``cancelled``/``incomplete``: SETTLE. Still
  ``queued``/``in_progress``: 409, try later. The handle must be the one bound to the
  attempt's manifest, and the provider's answer must carry it; otherwise the answer is
  quarantined and refused (``handle_not_bound``);
- its deadline (``--unknown-deadline``, default 600 s after the manifest was created):
  SETTLE. Checked by the background task below and by a retry that meets the attempt;
- an operator: ``POST /turngate/v1/conversations/{id}/cancel`` (CANCEL).

The background task (``recovery_loop``) also takes over the in-flight attempts of Redis
replicas whose lease ran out, and prunes expired replay data. It holds no credentials, so
it never queries a handle: only a retry does.

Telemetry (``services.telemetry``, observe.OperationTelemetry): every move out of UNKNOWN
made here (SETTLE, RECOVER), or found made by another writer (here, or by the task's look at
what the gauges still count), is ``resolved``; an attempt taken over is ``lost``; each
handle query is a recovery attempt, each RECOVER a success.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from turngate.adapters.base import Adapter
from turngate.errors import IllegalTransition, StateConflict, TurngateError
from turngate.graph.model import MessageSequence
from turngate.proxy.replay import record_commit, replay_response
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.turn_check import call_schemas, check_turn
from turngate.proxy.upstream import outbound_headers
from turngate.state.conversations import StoredResponse
from turngate.state.machine import DispatchState, Transition
from turngate.state.store import OperationRecord, StateStore

log = logging.getLogger("turngate.proxy")

QUARANTINE_LOG = "quarantine"
QUARANTINE_KEEP = 1000
DEADLINE_PASSED = "deadline passed: the attempt is over ({seconds:g} s after it started)"
_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_OVER = frozenset({"failed", "cancelled", "incomplete"})


class HandleNotBound(StateConflict):
    """A provider handle presented for an operation it is not bound to."""

    rule = "handle_not_bound"


class Resolution(StrEnum):
    # The attempt is over: claim the revision again.
    OVER = "over"
    # Still running, or nothing could be learnt: the revision stays blocked.
    PENDING = "pending"


def deadline_of(record: OperationRecord, services: Services) -> float:
    return record.manifest.created_at + services.settings.unknown_deadline


async def settle_if_over(services: Services, record: OperationRecord, *, now: float) -> bool:
    """SETTLE an UNKNOWN attempt past its deadline; True when it is over now (by this call
    or by another writer that moved it first)."""
    if record.state is not DispatchState.UNKNOWN or now < deadline_of(record, services):
        return False
    # Moved meanwhile (recovered, settled, cancelled): a new claim finds out how.
    await _settle(
        services, record, DEADLINE_PASSED.format(seconds=services.settings.unknown_deadline), now
    )
    return True


def resumable(record: OperationRecord) -> bool:
    return record.manifest.api == "openai_responses" and record.handle is not None


async def resolve_by_handle(
    services: Services,
    request: web.Request,
    route: RouteMatch,
    *,
    adapter: Adapter,
    seq: MessageSequence,
    record: OperationRecord,
) -> web.StreamResponse | Resolution:
    """Ask the provider what became of ``record``'s response, with the retry's credentials."""
    handle = record.handle
    assert handle is not None
    services.telemetry.recovery_attempt(record.manifest.api)
    answer = await query_response(services, request, route, handle)
    if answer is None:
        return Resolution.PENDING
    data, body = answer
    if body.get("id") != handle:
        await quarantine(
            services,
            record,
            {"reason": "the provider answered for another handle", "handle": body.get("id")},
        )
        raise HandleNotBound(
            f"turngate: handle '{handle}' of operation '{record.operation_id}' was answered "
            "with another response id; nothing of it is committed"
        )
    status = body.get("status")
    now = services.clock()
    if status in _OVER:
        await _settle(services, record, f"the provider says the response is {status}", now)
        return Resolution.OVER
    if status != "completed":
        return Resolution.PENDING
    try:
        turn = adapter.parse_response(body)
        check_turn(turn, call_schemas(seq, services.schemas), adapter.capabilities)
    except TurngateError as exc:
        await _settle(services, record, f"the recovered turn is refused: {exc.rule}", now)
        return Resolution.OVER
    kept = StoredResponse(200, "application/json", data, False, now + services.settings.replay_ttl)
    try:
        recovered = await record_commit(
            services, record.manifest, turn, enforced=True, response=kept
        )
    except (IllegalTransition, StateConflict) as exc:
        log.warning("recovery of %s refused: %s", record.operation_id, exc)
        await _moved_meanwhile(services, record)
        return Resolution.OVER  # someone else resolved it first: claim again to learn how
    log.warning("recovered %s from its handle", record.operation_id)
    services.telemetry.resolved(recovered)
    services.telemetry.recovery_success(record.manifest.api)
    return replay_response(record.manifest.api, recovered, kept, stream=record.manifest.stream)


async def query_response(
    services: Services, request: web.Request, route: RouteMatch, handle: str
) -> tuple[bytes, dict[str, Any]] | None:
    base = str(route.prefix.upstream).rstrip("/")
    url = URL(f"{base}/v1/responses/{quote(handle, safe='')}", encoded=True)
    headers = outbound_headers(request.headers, keep_length=False)
    headers.popall("Content-Type", None)
    try:
        async with services.session.get(
            url,
            headers=headers,
            allow_redirects=False,
            proxy=route.prefix.proxy,
        ) as found:
            data = await found.read()
            status = found.status
    except _TRANSPORT_ERRORS as exc:
        log.warning("query of handle %s failed: %s", handle, type(exc).__name__)
        return None
    if status != 200:
        log.warning("query of handle %s answered %d", handle, status)
        return None
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return (data, body) if isinstance(body, dict) else None


async def _settle(services: Services, record: OperationRecord, why: str, now: float) -> None:
    try:
        settled = await services.store.transition(
            record.operation_id, Transition.SETTLE, now=now, detail=why
        )
    except IllegalTransition:
        await _moved_meanwhile(services, record)
        return
    services.telemetry.resolved(settled)
    log.warning("settled %s: %s", record.operation_id, why)


async def _moved_meanwhile(services: Services, record: OperationRecord) -> None:
    """Another writer (a retry, a cancel, another replica) moved ``record`` first: the
    telemetry forgets it once the store no longer holds it UNKNOWN."""
    try:
        current = await services.store.get(record.operation_id)
    except Exception as exc:
        log.warning("state of %s unreadable: %s", record.operation_id, type(exc).__name__)
        return
    if current is not None:
        services.telemetry.resolved(current)


async def quarantine(services: Services, record: OperationRecord, entry: dict[str, Any]) -> None:
    logged = {
        "operationId": record.operation_id,
        "attempt": record.manifest.attempt,
        "api": record.manifest.api,
        **entry,
    }
    try:
        await services.store.append_log(
            QUARANTINE_LOG, logged, now=services.clock(), keep=QUARANTINE_KEEP
        )
    except Exception as exc:
        log.error("quarantine entry for %s not kept: %s", record.operation_id, exc)


# --- the background task --------------------------------------------------------------------

UNKNOWN_LISTED = 1000


async def unknown_at_start(
    store: StateStore, recovered: list[OperationRecord]
) -> list[OperationRecord]:
    """What the UNKNOWN gauges start with: the attempts the start-up recovery just moved
    and, unless replicas share the store (Redis, where each reports what it lost or took
    over itself), those a previous run left UNKNOWN."""
    if getattr(store, "take_over_expired", None) is not None:
        return recovered
    return await store.unknown_operations(limit=UNKNOWN_LISTED)


def recovery_interval(services: Services) -> float:
    """Often enough to settle within a tenth of the deadline; at most every 5 s."""
    return min(max(services.settings.unknown_deadline / 10, 0.05), 5.0)


async def recover_once(services: Services) -> int:
    """One round: take over expired Redis owners, settle what passed its deadline, prune,
    and let the UNKNOWN gauges forget what was resolved elsewhere. Returns how many
    attempts it settled."""
    store = services.store
    take_over: Callable[..., Awaitable[list[OperationRecord]]] | None = getattr(
        store, "take_over_expired", None
    )
    if take_over is not None:
        taken = await take_over(now=services.clock())
        if taken:
            log.warning("%d operations of stopped replicas are now UNKNOWN", len(taken))
        for lost in taken:
            services.telemetry.lost(lost)
    settled = 0
    listed = await store.unknown_operations(limit=UNKNOWN_LISTED)
    for record in listed:
        settled += await settle_if_over(services, record, now=services.clock())
    await store.prune(now=services.clock())
    await forget_resolved_elsewhere(services, {r.operation_id for r in listed})
    return settled


async def forget_resolved_elsewhere(services: Services, listed: set[str]) -> None:
    """The operations the UNKNOWN gauges count that the store no longer holds UNKNOWN: a
    retry served by another replica settled or recovered them, or they expired. Resolved
    now, so no gauge keeps an attempt that is over."""
    telemetry = services.telemetry
    for operation_id in telemetry.watched():
        if operation_id in listed:
            continue
        current = await services.store.get(operation_id)
        if current is None:
            telemetry.forget(operation_id)
        else:
            telemetry.resolved(current)  # nothing while it is still UNKNOWN


async def recovery_loop(services: Services) -> None:
    interval = recovery_interval(services)
    failing = False
    while True:
        await asyncio.sleep(interval)
        try:
            await recover_once(services)
        except Exception as exc:
            if not failing:
                log.warning("recovery round failed: %s: %s", type(exc).__name__, exc)
            failing = True
        else:
            failing = False
