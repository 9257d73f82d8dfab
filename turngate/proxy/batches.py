"""A batch's chat requests, each checked as a chat request is, before the batch is sent.

    read body -> each entry (adapters/batches.py): route policy -> parse -> trust labels
      + validate -> enforce: refused?   shadow: logged and counted
      -> any refused: 400 naming every refused entry, nothing sent   -> else: relay the bytes

A provider runs a batch's requests hours later and reports each one it refuses only in the
results; an agent platform learns then that a sequence it built was invalid. turngate
refuses the batch at once instead, naming each refused request (its place in the batch and
the name the client gave it) and its rule. The batch is relayed as the client's own bytes
and its answer unchanged: a batch is no conversation turn, so it has no manifest, and its
results are relayed as they come (their tool calls are not checked).
"""

from __future__ import annotations

import logging

from aiohttp import web

from turngate.adapters.base import RouteInfo
from turngate.adapters.batches import BatchEntry, batch_entries
from turngate.errors import BatchRefusal, BatchRejected, SequenceRejected, TurngateError
from turngate.graph.model import ApiName
from turngate.policies import trust
from turngate.policies.modes import decide
from turngate.proxy.body import decode_json, read_body
from turngate.proxy.dispatch import refuse_invalid
from turngate.proxy.errors import error_response
from turngate.proxy.observe import DispatchObserver, observe_dispatch
from turngate.proxy.policy import pinned_adapter, requested_model
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.upstream import relay

log = logging.getLogger("turngate.proxy")


async def checked_batch(
    request: web.Request, route: RouteMatch, services: Services, api: ApiName
) -> web.StreamResponse:
    with observe_dispatch(request, api) as observer:
        try:
            return await _checked(request, route, services, api, observer)
        finally:
            observer.log()


async def _checked(
    request: web.Request,
    route: RouteMatch,
    services: Services,
    api: ApiName,
    observer: DispatchObserver,
) -> web.StreamResponse:
    refused: list[BatchRefusal] = []
    shadowed: list[BatchRefusal] = []
    total = 0
    try:
        raw = await read_body(request, services.settings.max_body_bytes)
        body = decode_json(raw)
        for entry in batch_entries(api, route.info, body):
            total += 1
            error, enforced = judged(services, api, entry)
            if error is not None:
                refusal = BatchRefusal(entry.location, entry.name, error)
                (refused if enforced else shadowed).append(refusal)
        if refused:
            raise BatchRejected(refused, total)
    except TurngateError as exc:
        if refused:
            observer.judged_batch([rules_of(refusal.error) for refusal in refused], enforced=True)
        log.info("refused the batch %s %s: %s", request.method, request.path, exc.rule)
        observer.refused(exc.rule)
        return error_response(api, exc)
    if shadowed:
        observer.judged_batch([rules_of(refusal.error) for refusal in shadowed], enforced=False)
        log.warning(
            "shadow: would refuse %d of the batch's %d requests (%s)",
            len(shadowed),
            total,
            ", ".join(dict.fromkeys(refusal.error.rule for refusal in shadowed)),
        )
    return await relay(request, route, services.session, read=raw)


def judged(
    services: Services, api: ApiName, entry: BatchEntry
) -> tuple[TurngateError | None, bool]:
    """What refuses ``entry`` (None when nothing does), and whether its route policy enforces
    that refusal. A request that cannot be parsed is refused whatever the mode, as a chat
    request is."""
    info: RouteInfo = entry.info
    policy = services.policy_for(api, requested_model(entry.body, info))
    adapter = pinned_adapter(services, api, policy).adapter()
    try:
        seq, verdict = trust.check(
            adapter.parse_request(dict(entry.body), info),
            adapter.capabilities,
            policy.trust,
            policy.role_forgery,
        )
    except TurngateError as exc:
        return exc, True
    try:
        refuse_invalid(verdict)
    except TurngateError as exc:
        return exc, decide(policy.mode, seq).enforced
    return None, True


def rules_of(error: TurngateError) -> list[str]:
    """Every rule ``error`` names: a validator refusal's one per violation."""
    if isinstance(error, SequenceRejected):
        return [violation.rule for violation in error.violations]
    return [error.rule]
