"""What a request gets when its claim conflicts: the committed answer, a 409, or a new claim.

    the revision's attempt is        same request, same caller          otherwise
    COMMITTED                        the stored answer replayed          409 dispatch_conflict,
                                                                         never worth a retry
    DISPATCHING / SENT / STREAMING   waits for its outcome (JOIN_WAIT),   409, Retry-After: 1
                                     then as that; still running: 409,
                                     Retry-After: 1
    UNKNOWN                          asked of its handle (Responses);     409, Retry-After: the
                                     past its deadline: settled, claim    time to its deadline
                                     again

Each 409 says whether a retry may help (``retry_advice``): the official SDKs retry a 409 on
their own unless told not to.

"Same request" is the same credential hash, route and request digest (replay.py), so a
client's retry and an ``Idempotency-Key`` seen before both land here; another caller never
gets the answer. Each case lives in replay.py and recovery.py; this module only chooses.
"""

from __future__ import annotations

import asyncio
import math

from aiohttp import web

from turngate.adapters.base import Adapter
from turngate.graph.model import MessageSequence
from turngate.proxy.recovery import (
    Resolution,
    deadline_of,
    resolve_by_handle,
    resumable,
    settle_if_over,
)
from turngate.proxy.replay import ReplayUnavailable, replay_response, same_request
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.state.machine import DispatchState
from turngate.state.manifest import DispatchManifest
from turngate.state.store import ClaimConflict, OperationRecord

# A committed stream is kept right after its end reached the client: a retry this soon may
# find no answer yet, and is told to come back.
_KEEPING = 10.0
_MAX_RETRY_AFTER = 600
# The longest Retry-After the openai and anthropic SDKs wait for.
_SDK_MAX_WAIT = 60
# How long the same request waits for its first attempt's outcome, and how often it looks.
JOIN_WAIT = 30.0
JOIN_POLL = 0.2
_IN_FLIGHT = frozenset(
    {
        DispatchState.PREPARED,
        DispatchState.DISPATCHING,
        DispatchState.SENT,
        DispatchState.STREAMING,
    }
)


class Blocked(ClaimConflict):
    """The conflict stands; ``retry_after`` seconds is when asking again may help."""

    def __init__(self, conflict: ClaimConflict, retry_after: int):
        super().__init__(conflict.message, conflict.existing)
        self.retry_after = retry_after


def retry_advice(conflict: ClaimConflict) -> dict[str, str]:
    """``Retry-After`` while waiting may help, and ``x-should-retry``, which the openai and
    anthropic SDKs obey before their own rule (retry every 409, twice by default): a retry of
    a revision another request committed can only be refused again, and one sooner than a
    wait of over a minute (which the SDKs do not honour; they back off about a second)
    would be too."""
    if isinstance(conflict, Blocked):
        wait = conflict.retry_after
    elif conflict.existing.state in _IN_FLIGHT:
        wait = 1
    else:
        return {"x-should-retry": "false"}
    return {"Retry-After": str(wait), "x-should-retry": str(wait <= _SDK_MAX_WAIT).lower()}


async def answer_conflict(
    conflict: ClaimConflict,
    *,
    request: web.Request,
    route: RouteMatch,
    services: Services,
    draft: DispatchManifest,
    adapter: Adapter,
    seq: MessageSequence,
) -> web.StreamResponse | None:
    """The answer to a conflicting claim, or None when the attempt in the way turned out to
    be over (settled just now): the caller claims again. Raises what stands in the way."""
    existing = conflict.existing
    now = services.clock()
    mine = same_request(existing.manifest, draft)
    if existing.state is DispatchState.COMMITTED:
        if not mine:
            raise conflict
        stored = await services.store.load_response(existing.operation_id, now=now)
        if stored is None:
            ended = existing.history[-1].at
            unavailable = ReplayUnavailable(
                f"turngate: operation '{existing.operation_id}' committed this revision; its "
                "answer is not (or no longer) kept for replay",
            )
            if now - ended < _KEEPING:
                raise Blocked(ClaimConflict(unavailable.message, existing), 1)
            raise unavailable
        return replay_response(existing.manifest.api, existing, stored, stream=draft.stream)
    if mine and existing.state in _IN_FLIGHT:
        outcome = await joined(services, request, existing)
        if outcome is None:
            raise conflict  # still running: come back (Retry-After: 1)
        if outcome.state is DispatchState.FAILED:
            return None  # over with no answer: the retry is sent
        again = ClaimConflict(conflict.message, outcome)  # committed, unknown or cancelled
        return await answer_conflict(
            again,
            request=request,
            route=route,
            services=services,
            draft=draft,
            adapter=adapter,
            seq=seq,
        )
    if existing.state is DispatchState.UNKNOWN:
        if mine and resumable(existing):
            resolved = await resolve_by_handle(
                services, request, route, adapter=adapter, seq=seq, record=existing
            )
            if isinstance(resolved, web.StreamResponse):
                return resolved
            if resolved is Resolution.OVER:
                return None
        if await settle_if_over(services, existing, now=now):
            return None
        wait = math.ceil(deadline_of(existing, services) - now)
        raise Blocked(conflict, max(1, min(wait, _MAX_RETRY_AFTER)))
    raise conflict


async def joined(
    services: Services, request: web.Request, record: OperationRecord
) -> OperationRecord | None:
    """The same request again while its first attempt runs (an SDK's retry after its own
    timeout, most often): wait for that attempt's outcome, up to ``JOIN_WAIT`` seconds,
    rather than answer 409 twice a second apart, which the SDK would give up on while the
    first attempt is still at work. None: still running (or the client left)."""
    deadline = asyncio.get_running_loop().time() + JOIN_WAIT
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(JOIN_POLL)
        transport = request.transport
        if transport is None or transport.is_closing():
            return None
        found = await services.store.get(record.operation_id)
        if found is None or found.state not in _IN_FLIGHT:
            return found
    return None
