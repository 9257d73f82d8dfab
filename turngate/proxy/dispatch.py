"""The dispatch path of a parsed route, one named step after another.

    read body -> parse -> validate -> refuse | render -> manifest -> claim -> (attempt.py)
                                                                    send -> commit

The rollout mode (turngate.policies.modes) decides per request whether it is enforced or
only shadowed: a shadowed request is never refused for its sequence and goes up as the
client's own bytes.

Every step up to the claim either returns its product or raises a ``TurngateError``;
``dispatch`` renders that error in the route's API envelope and nothing is sent. The
claim is the store's CAS: from there on every outcome is a state transition (attempt.py).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from turngate.adapters import get_adapter
from turngate.adapters.base import Adapter, RouteInfo
from turngate.errors import (
    BadRequestBody,
    SequenceRejected,
    SequenceWaiting,
    StoreUnavailable,
    TurngateError,
)
from turngate.graph.codec import digest_bytes
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.validator import validate
from turngate.policies.modes import decide
from turngate.proxy.attempt import Attempt, Outbound
from turngate.proxy.body import decode_json, read_body
from turngate.proxy.credentials import credential_hash
from turngate.proxy.errors import AdapterMissing, error_response
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.state.manifest import DispatchManifest
from turngate.state.store import ClaimConflict, OperationRecord, StateStore

log = logging.getLogger("turngate.proxy")


class InternalError(TurngateError):
    rule = "internal_error"
    status = 500


CONVERSATION_HEADER = "Turngate-Conversation-Id"
_MAX_CONVERSATION_ID = 200


@dataclass(frozen=True)
class Prepared:
    """Everything the attempt needs, fixed before the claim."""

    adapter: Adapter
    seq: MessageSequence
    outbound: Outbound
    draft: DispatchManifest
    # False when the rollout mode only shadows this request: nothing of it is refused.
    enforced: bool


async def dispatch(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse:
    api = route.api
    assert api is not None, "dispatch is for parsed routes"
    try:
        prepared = await prepare(request, route, api, services)
        record = await claim(services.store, prepared.draft, now=services.clock())
    except ClaimConflict as exc:
        return error_response(api, exc, {"Retry-After": "1"})
    except TurngateError as exc:
        log.info("refused %s %s: %s", request.method, request.path, exc.rule)
        return error_response(api, exc)
    except Exception:
        # A bug before anything was sent: the API's own 500, so the SDK raises as usual.
        log.exception("internal error preparing %s %s", request.method, request.path)
        return error_response(api, InternalError("turngate: internal error; nothing was sent"))
    attempt = Attempt(
        request=request,
        route=route,
        services=services,
        adapter=prepared.adapter,
        seq=prepared.seq,
        record=record,
        enforced=prepared.enforced,
    )
    return await attempt.run(prepared.outbound)


async def prepare(
    request: web.Request, route: RouteMatch, api: ApiName, services: Services
) -> Prepared:
    adapter = adapter_for(api)
    raw = await read_body(request, services.settings.max_body_bytes)
    body = decode_json(raw)
    seq = parse(adapter, body, route.info)
    shadow = not decide(services.settings.mode, seq).enforced
    refuse_invalid(seq, adapter, shadow=shadow)
    outbound = render(adapter, seq, body, raw, shadow=shadow)
    draft = manifest(
        request=request,
        route=route,
        services=services,
        adapter=adapter,
        seq=seq,
        outbound=outbound,
    )
    return Prepared(adapter, seq, outbound, draft, enforced=not shadow)


def adapter_for(api: ApiName) -> Adapter:
    try:
        return get_adapter(api)
    except (ImportError, AttributeError):
        # Not in this build, or a package still without its ADAPTER.
        raise AdapterMissing(f"turngate: the {api} adapter is not in this build") from None


def parse(adapter: Adapter, body: dict[str, Any], info: RouteInfo) -> MessageSequence:
    return adapter.parse_request(body, info)


def refuse_invalid(seq: MessageSequence, adapter: Adapter, *, shadow: bool) -> None:
    verdict = validate(seq, adapter.capabilities)
    if verdict.ready:
        return
    if shadow:
        log.warning("shadow: would refuse (%s)", ", ".join(verdict.rules))
        return
    if verdict.status == "WAITING":
        raise SequenceWaiting(verdict.violations)
    # The rejection is named after a real violation, not a result still to come.
    ordered = sorted(verdict.violations, key=lambda v: v.waiting)
    raise SequenceRejected(ordered)


def render(
    adapter: Adapter, seq: MessageSequence, body: dict[str, Any], raw: bytes, *, shadow: bool
) -> Outbound:
    """The bytes to send: the client's own whenever the graph renders the same JSON value."""
    if shadow:
        return Outbound(raw, original=True)
    rendered = adapter.render_request(seq)
    if rendered == body:
        return Outbound(raw, original=True)
    return Outbound(orjson.dumps(rendered), original=False)


def manifest(
    *,
    request: web.Request,
    route: RouteMatch,
    services: Services,
    adapter: Adapter,
    seq: MessageSequence,
    outbound: Outbound,
) -> DispatchManifest:
    stream = route.info.stream if route.info.stream is not None else seq.stream
    return DispatchManifest(
        operation_id="op_" + uuid.uuid4().hex,
        conversation_id=conversation_id(request),
        conversation_revision=seq.conversation_revision,
        api=adapter.api,
        provider=route.provider,
        adapter=seq.adapter,
        model=seq.model or route.info.model,
        # The path only: a query string may carry a key.
        route=request.path,
        stream=stream,
        sequence_digest=seq.sequence_digest,
        toolset_digest=seq.toolset_digest,
        policy_digest=services.policy_digest,
        request_digest=digest_bytes(outbound.body),
        credential_hash=credential_hash(services.credential_secret, request.headers, request.query),
        created_at=services.clock(),
    )


def conversation_id(request: web.Request) -> str | None:
    value = request.headers.get(CONVERSATION_HEADER)
    if value is None or value == "":
        return None
    if len(value) > _MAX_CONVERSATION_ID or not value.isprintable():
        raise BadRequestBody(
            f"turngate: {CONVERSATION_HEADER} must be at most {_MAX_CONVERSATION_ID} "
            "printable characters",
            rule="invalid_conversation_id",
        )
    return value


async def claim(store: StateStore, draft: DispatchManifest, *, now: float) -> OperationRecord:
    try:
        return await store.claim(draft, now=now)
    except TurngateError:
        raise
    except Exception as exc:
        # Fail closed: without a claim nothing may be sent.
        log.error("state store claim failed: %s", type(exc).__name__)
        raise StoreUnavailable("turngate: the state store is unavailable") from exc
