"""The dispatch path of a parsed route, one named step after another.

    read body -> route policy -> parse (pinned adapter) -> trust labels + validate
      -> enforce: pause | refuse | render -> admit -> manifest -> claim -> (attempt.py)
      -> shadow:  record what enforcing would do    -> manifest -> claim    send -> commit

The route policy (turngate.policies, proxy/policy.py) decides per request: the rollout mode
(a shadowed request is never refused and goes up as the client's own bytes; its shadow
record is kept in the store), trust labels and the role-forgery action (``flag`` puts the
findings in a ``Turngate-Findings`` header), the adapter version, context admission of the
final bytes, and what the attempt reads from ``services.policy`` (stream text, tool
arguments).

Every step up to the claim either returns its product or raises a ``TurngateError``;
``dispatch`` renders that error in the route's API envelope and nothing is sent. The
claim is the store's CAS: from there on every outcome is a state transition (attempt.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from turngate.adapters.base import Adapter, RouteInfo
from turngate.errors import (
    BadRequestBody,
    SequenceRejected,
    SequenceWaiting,
    StoreUnavailable,
    TurngateError,
)
from turngate.graph.codec import digest_bytes
from turngate.graph.model import AnyBlock, ApiName, MessageSequence
from turngate.graph.validator import Verdict
from turngate.policies import trust
from turngate.policies.config import Policy
from turngate.policies.diff import ShadowRecord
from turngate.policies.modes import decide
from turngate.policies.pins import AdapterVersion
from turngate.proxy.attempt import Attempt, Outbound
from turngate.proxy.body import decode_json, read_body
from turngate.proxy.conflicts import answer_conflict, retry_advice
from turngate.proxy.conversation import checked_conversation
from turngate.proxy.credentials import credential_hash
from turngate.proxy.errors import error_response
from turngate.proxy.observe import DispatchObserver, observe_dispatch, observer_of
from turngate.proxy.policy import (
    SHADOW_LOG,
    ShadowInput,
    admit_or_ask,
    check_known,
    graph_log,
    graph_to_store,
    keep_in_log,
    load_vocabulary,
    pinned_adapter,
    requested_model,
    shadow_outcome,
    stored_graph,
)
from turngate.proxy.replay import ReplayUnavailable, client_key, keep_streamed
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.state.conversations import ClientKey
from turngate.state.manifest import DispatchManifest, new_operation_id
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
    # The route policy the request is served under (the attempt reads it on its services).
    policy: Policy
    version: AdapterVersion
    # Response headers the policy adds (``Turngate-Findings``).
    headers: dict[str, str] = field(default_factory=dict)
    # What enforcing would have done, for a shadowed request; kept in the store after the claim.
    shadow: ShadowRecord | None = None
    # The conversation's graph to keep (policy.graph_to_store), after the claim.
    graph: dict[str, Any] | None = None
    # The client's Idempotency-Key, taken by the claim (enforced requests only).
    client_key: ClientKey | None = None
    # The answer goes on with a committed turn (a paused turn, Gemini hops continued by
    # token); ``prefix``: that turn's blocks when the request does not hold them.
    continues: bool = False
    prefix: tuple[AnyBlock, ...] | None = None


async def dispatch(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse:
    api = route.api
    assert api is not None, "dispatch is for parsed routes"
    # One span, one log line per dispatch (observe.py); the line once the answer is out.
    with observe_dispatch(request, api) as observer:
        try:
            return await _dispatch(request, route, api, services, observer)
        finally:
            observer.log()


async def _dispatch(
    request: web.Request,
    route: RouteMatch,
    api: ApiName,
    services: Services,
    observer: DispatchObserver,
) -> web.StreamResponse:
    try:
        prepared = await prepare(request, route, api, services)
        claimed = await claim_or_answer(request, route, services, prepared)
    except ClaimConflict as exc:
        observer.conflict(exc.rule)
        return error_response(api, exc, retry_advice(exc))
    except ReplayUnavailable as exc:
        # The claim lost to the revision's canonical turn: a CAS conflict, not a refusal.
        observer.conflict(exc.rule)
        return error_response(api, exc)
    except TurngateError as exc:
        log.info("refused %s %s: %s", request.method, request.path, exc.rule)
        observer.refused(exc.rule)
        return error_response(api, exc)
    except Exception:
        # A bug before anything was sent: the API's own 500, so the SDK raises as usual.
        log.exception("internal error preparing %s %s", request.method, request.path)
        observer.refused(InternalError.rule)
        return error_response(api, InternalError("turngate: internal error; nothing was sent"))
    if isinstance(claimed, web.StreamResponse):
        return claimed  # the committed answer, replayed: nothing is sent
    attempt = Attempt(
        request=request,
        route=route,
        services=services.for_route(prepared.policy),
        adapter=prepared.adapter,
        seq=prepared.seq,
        record=claimed,
        enforced=prepared.enforced,
        observer=observer,
        client_key=prepared.client_key,
        continues=prepared.continues,
        prefix=prepared.prefix,
    )
    attempt.headers.update(prepared.headers)
    try:
        answer = await attempt.run(prepared.outbound)
        await keep_streamed(services, attempt.stream)
        return answer
    finally:
        # After the answer: a shadow record is not worth an fsync of the client's latency.
        if prepared.shadow is not None or prepared.graph is not None:
            services.in_background(keep_after_claim(services, prepared))


async def prepare(
    request: web.Request, route: RouteMatch, api: ApiName, services: Services
) -> Prepared:
    raw = await read_body(request, services.settings.max_body_bytes)
    body = decode_json(raw)
    model = requested_model(body, route.info)
    policy = services.policy_for(api, model)
    version = pinned_adapter(services, api, policy)
    adapter = version.adapter()
    seq, verdict = trust.check(
        parse(adapter, body, route.info),
        adapter.capabilities,
        policy.trust,
        policy.role_forgery,
    )
    conversation = conversation_id(request)
    observer = observer_of(request)
    observer.prepared(
        model=model,
        mode=policy.mode,
        stream=route.info.stream if route.info.stream is not None else seq.stream,
        conversation=conversation,
    )
    stored = await stored_graph(services.store, conversation)
    await load_vocabulary(services, policy, seq.model or model)
    operation_id = new_operation_id()
    credential = credential_hash(services.credential_secret, request.headers, request.query)
    shadow: ShadowRecord | None = None
    generation = 0
    revision = seq.conversation_revision
    continues = False
    prefix = None
    if decide(policy.mode, seq).enforced:
        observer.validated(verdict.status, verdict.rules, enforced=True)
        check_known(seq, version, stored)
        refuse_unframed_stream(request, route)
        refuse_invalid(verdict)
        judged = services.replies.refuse_unanswered(seq, credential)
        services.replies.refuse_unbound_items(seq, credential)
        outbound, final_body = render(adapter, seq, body, raw)
        await admit_or_ask(
            request, route, services, policy=policy, seq=seq, final_body=final_body, model=model
        )
        if conversation is not None:
            # Last before the claim: only a request that passed everything adopts a history.
            checked = await checked_conversation(
                services.store, conversation, seq, now=services.clock(), sent=outbound.body
            )
            revision, continues, prefix = checked.revision, checked.continues, checked.prefix
            if not judged:
                judged = await services.replies.refuse_unanswered_kept(
                    services.store, seq, checked.anchor, credential, now=services.clock()
                )
            await services.replies.refuse_unbound_items_kept(
                services.store, seq, checked.latest, credential, now=services.clock()
            )
            await services.replies.load_thread(services.store, conversation, seq, credential)
            generation = checked.conversation.cancel_generation
        if not judged:
            observer.unjudged_chain()
    else:
        shadowed = ShadowInput(raw, body, seq, verdict, model, operation_id, credential)
        shadow = shadow_outcome(
            services, shadowed, policy=policy, adapter=adapter, version=version, stored=stored
        )
        # The verdict's rules one per violation (orphans count one by one), then the rest.
        extra = [rule for rule in shadow.rules if rule not in verdict.rules]
        observer.validated(verdict.status, [*verdict.rules, *extra], enforced=False)
        if shadow.rules:
            log.warning("shadow: would refuse (%s)", ", ".join(shadow.rules))
        outbound = Outbound(raw, original=True)
    draft = manifest(
        request=request,
        route=route,
        services=services,
        seq=seq,
        outbound=outbound,
        policy=policy,
        version=version,
        operation_id=operation_id,
        conversation=conversation,
        cancel_generation=generation,
        revision=revision,
        credential=credential,
    )
    key = None
    if shadow is None:
        ttl, now = services.settings.replay_ttl, services.clock()
        key = client_key(request, raw, draft.credential_hash, ttl=ttl, now=now)
    return Prepared(
        adapter=adapter,
        seq=seq,
        outbound=outbound,
        draft=draft,
        enforced=shadow is None,
        policy=policy,
        version=version,
        headers=trust.finding_headers(verdict, policy.role_forgery),
        shadow=shadow,
        graph=graph_to_store(services, seq, conversation, stored),
        client_key=key,
        continues=continues,
        prefix=prefix,
    )


def parse(adapter: Adapter, body: dict[str, Any], info: RouteInfo) -> MessageSequence:
    return adapter.parse_request(body, info)


def refuse_invalid(verdict: Verdict) -> None:
    if verdict.ready:
        return
    if verdict.status == "WAITING":
        raise SequenceWaiting(verdict.violations)
    # The rejection is named after a real violation, not a result still to come.
    ordered = sorted(verdict.violations, key=lambda v: v.waiting)
    raise SequenceRejected(ordered)


def render(
    adapter: Adapter, seq: MessageSequence, body: dict[str, Any], raw: bytes
) -> tuple[Outbound, dict[str, Any]]:
    """The bytes to send, and their JSON value: the client's own bytes whenever the graph
    renders the same JSON value."""
    rendered = adapter.render_request(seq)
    if rendered == body:
        return Outbound(raw, original=True), body
    return Outbound(orjson.dumps(rendered), original=False), rendered


def manifest(
    *,
    request: web.Request,
    route: RouteMatch,
    services: Services,
    seq: MessageSequence,
    outbound: Outbound,
    policy: Policy,
    version: AdapterVersion,
    operation_id: str,
    conversation: str | None,
    cancel_generation: int = 0,
    revision: int,
    credential: str | None,
) -> DispatchManifest:
    stream = route.info.stream if route.info.stream is not None else seq.stream
    return DispatchManifest(
        operation_id=operation_id,
        conversation_id=conversation,
        conversation_revision=revision,
        cancel_generation=cancel_generation,
        api=version.api,
        provider=route.provider,
        adapter=seq.adapter,
        model=seq.model or route.info.model,
        # The path only: a query string may carry a key.
        route=request.path,
        stream=stream,
        sequence_digest=seq.sequence_digest,
        toolset_digest=seq.toolset_digest,
        policy_digest=policy.digest,
        request_digest=digest_bytes(outbound.body),
        credential_hash=credential,
        created_at=services.clock(),
    )


def refuse_unframed_stream(request: web.Request, route: RouteMatch) -> None:
    """Gemini's ``streamGenerateContent`` without ``?alt=sse`` answers one JSON array written
    as it grows: turngate relays streams as server-sent events only (google-genai always
    asks for them), and relayed, the client would get a broken body for a paid answer."""
    if route.api == "gemini" and route.info.stream and request.query.get("alt") != "sse":
        raise BadRequestBody(
            "turngate: a Gemini stream is relayed as server-sent events only: call "
            ":streamGenerateContent with ?alt=sse (google-genai does)",
            rule="invalid_request",
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


async def keep_after_claim(services: Services, prepared: Prepared) -> None:
    """The shadow record and the conversation's graph, once the request is claimed."""
    now = services.clock()
    if prepared.shadow is not None:
        keep = services.policies.shadow_records
        record = prepared.shadow.to_json()
        await keep_in_log(services.store, SHADOW_LOG, record, now=now, keep=keep)
    conversation = prepared.draft.conversation_id
    if prepared.graph is not None and conversation is not None:
        await keep_in_log(services.store, graph_log(conversation), prepared.graph, now=now, keep=1)


# Claims of one request: the first, and one more for each attempt found over in the way.
_CLAIMS = 3


async def claim_or_answer(
    request: web.Request, route: RouteMatch, services: Services, prepared: Prepared
) -> OperationRecord | web.StreamResponse:
    """The claim. When it conflicts, an enforced request may get the committed answer
    replayed, or claim again once the attempt in the way is known to be over (conflicts.py);
    otherwise the conflict stands."""
    draft, key = prepared.draft, prepared.client_key
    for remaining in range(_CLAIMS - 1, -1, -1):
        try:
            return await claim(services.store, draft, now=services.clock(), client_key=key)
        except ClaimConflict as conflict:
            if not prepared.enforced or remaining == 0:
                raise
            answer = await answer_conflict(
                conflict,
                request=request,
                route=route,
                services=services,
                draft=draft,
                adapter=prepared.adapter,
                seq=prepared.seq,
            )
            if answer is not None:
                return answer
    raise AssertionError("unreachable: the last claim returns or raises")


async def claim(
    store: StateStore,
    draft: DispatchManifest,
    *,
    now: float,
    client_key: ClientKey | None = None,
) -> OperationRecord:
    try:
        return await store.claim(draft, now=now, client_key=client_key)
    except TurngateError:
        raise
    except Exception as exc:
        # Fail closed: without a claim nothing may be sent.
        log.error("state store claim failed: %s", type(exc).__name__)
        raise StoreUnavailable("turngate: the state store is unavailable") from exc
