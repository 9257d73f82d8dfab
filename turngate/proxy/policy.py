"""The policy steps of the dispatch path (docs/policies.md), one request at a time.

    model -> route policy -> pinned adapter version -> parse -> trust labels + validate
          -> rollout mode: enforce -> pause? refuse? render, admit the final bytes (asking
                                      the provider's count_tokens when the policy allows)
                           shadow  -> the client's bytes go up; record what enforcing would do

Two capped logs of the state store hold what outlives the request: ``shadow`` (one
ShadowRecord per shadowed request, ``shadow_records`` kept) and ``graph:{conversation}``
(the conversation's graph, kept only while it holds a block kind some registered adapter
version does not know, so that a conversation rolled back to that version pauses).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from turngate.adapters.base import Adapter, RouteInfo
from turngate.errors import (
    ContextLengthExceeded,
    ConversationPaused,
    SequenceRejected,
    StoreUnavailable,
    TurngateError,
)
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.serialize import to_json
from turngate.graph.validator import Verdict
from turngate.policies.admission import Admission, admit, output_budget, refusal_for
from turngate.policies.config import Policy
from turngate.policies.diff import ShadowRecord, failed_render_record, shadow_record
from turngate.policies.pins import AdapterVersion, ensure_known, kinds_in, load_for
from turngate.policies.tokens import encoding_loaded, load_encodings
from turngate.proxy.count_tokens import provider_count
from turngate.proxy.errors import AdapterMissing
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.state.store import StateStore

log = logging.getLogger("turngate.proxy")

SHADOW_LOG = "shadow"
_GRAPH_LOG = "graph:"


def graph_log(conversation: str) -> str:
    """The log that keeps a conversation's stored graph (one entry)."""
    return _GRAPH_LOG + conversation


def requested_model(body: Mapping[str, Any], info: RouteInfo) -> str | None:
    """The model a request names, before parsing: the route policy depends on it."""
    if info.model is not None:
        return info.model
    model = body.get("model")
    return model if isinstance(model, str) else None


def pinned_adapter(services: Services, api: ApiName, policy: Policy) -> AdapterVersion:
    try:
        version = services.adapters.pinned(api, policy)
        version.adapter()
    except (LookupError, ImportError, AttributeError):
        # Not in this build, or a package still without its ADAPTER.
        raise AdapterMissing(f"turngate: the {api} adapter is not in this build") from None
    return version


async def stored_graph(store: StateStore, conversation: str | None) -> dict[str, Any] | None:
    """The graph stored for ``conversation`` (MessageSequence.v1 JSON), if any."""
    if conversation is None:
        return None
    try:
        entries = await store.read_log(graph_log(conversation), limit=1)
    except TurngateError:
        raise
    except Exception as exc:
        # Fail closed, as the claim does: without it a rollback could not pause.
        log.error("state store read failed: %s", type(exc).__name__)
        raise StoreUnavailable("turngate: the state store is unavailable") from exc
    return entries[0] if entries else None


def check_known(
    seq: MessageSequence, version: AdapterVersion, stored: Mapping[str, Any] | None
) -> None:
    """Pause (409 ``conversation_paused``) when the pinned version meets a kind it does not
    know, in this request's graph or in the conversation's stored one."""
    ensure_known(seq, version)
    if stored is not None and stored.get("adapter") != version.id:
        load_for(version, stored)


def graph_to_store(
    services: Services,
    seq: MessageSequence,
    conversation: str | None,
    stored: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """The graph to keep for the conversation: while it holds a kind some registered version
    of its adapter does not know, or to replace one kept before. Otherwise nothing: writing
    every graph would cost a serialization and a store write per request."""
    if conversation is None:
        return None
    if stored is None and kinds_in(seq) <= services.adapters.common_kinds(seq.api):
        return None
    graph: dict[str, Any] = to_json(seq)
    return graph


def admit_final(
    services: Services,
    policy: Policy,
    seq: MessageSequence,
    final_body: Mapping[str, Any],
    model: str | None,
) -> Admission:
    """Context admission of the body that will be sent (raises ContextLengthExceeded)."""
    return admit(
        final_body,
        api=seq.api,
        model=seq.model or model,
        max_output_tokens=seq.max_output_tokens,
        config=services.policies,
        policy=policy,
        cache=services.tokens,
    )


async def load_vocabulary(services: Services, policy: Policy, model: str | None) -> None:
    """The vocabulary admission will count ``model`` with, loaded off the event loop when this
    is the first request that needs it (cl100k, for the older GPT models: 0.1 s)."""
    entry = services.policies.model_entry(model)
    if policy.admission.enabled and entry is not None and not encoding_loaded(entry.encoding):
        await asyncio.to_thread(load_encodings, (entry.encoding,))


async def admit_or_ask(
    request: web.Request,
    route: RouteMatch,
    services: Services,
    *,
    policy: Policy,
    seq: MessageSequence,
    final_body: Mapping[str, Any],
    model: str | None,
) -> None:
    """Admission of the final bytes; when an estimate would refuse them and the policy allows
    the extra call, the provider's own count decides (proxy/count_tokens.py)."""
    try:
        admit_final(services, policy, seq, final_body, model)
    except ContextLengthExceeded as estimate:
        if not (estimate.estimated and policy.admission.count_tokens_endpoint):
            raise
        named = seq.model or model
        entry = services.policies.model_entry(named)
        exact = await provider_count(
            request, route, services.session, api=seq.api, body=final_body, model=named
        )
        if exact is None or entry is None:
            raise
        output = output_budget(policy, seq.max_output_tokens)
        refusal = refusal_for(seq.api, entry, exact, output, estimated=False)
        if refusal is not None:
            raise refusal from None


@dataclasses.dataclass(frozen=True)
class ShadowInput:
    """A shadowed request: what was sent, and what turngate made of it."""

    raw: bytes
    body: dict[str, Any]
    seq: MessageSequence
    verdict: Verdict
    model: str | None
    operation_id: str
    # The keyed hash of the caller's credentials (credentials.py).
    credential: str | None = None


def shadow_outcome(
    services: Services,
    shadowed: ShadowInput,
    *,
    policy: Policy,
    adapter: Adapter,
    version: AdapterVersion,
    stored: Mapping[str, Any] | None,
) -> ShadowRecord:
    """What enforcing would have done with a request that goes up unchanged: the diff of what
    turngate would send, and every rule it would have refused the request under."""
    seq = shadowed.seq
    model = seq.model or shadowed.model
    later_rules: list[str] = []
    try:
        check_known(seq, version, stored)
    except ConversationPaused as exc:
        later_rules.append(exc.rule)
    # What turngate remembers of the replies it committed (replies.py).
    for remembered in (services.replies.refuse_unanswered, services.replies.refuse_unbound_items):
        try:
            remembered(seq, shadowed.credential)
        except SequenceRejected as exc:
            later_rules.append(exc.rule)
    try:
        rendered = adapter.render_request(seq)
    except TurngateError as exc:
        record = failed_render_record(
            api=seq.api,
            model=model,
            raw=shadowed.raw,
            rule=exc.rule,
            verdict=shadowed.verdict,
            operation_id=shadowed.operation_id,
            now=services.clock(),
        )
    else:
        record = shadow_record(
            api=seq.api,
            model=model,
            raw=shadowed.raw,
            body=shadowed.body,
            rendered=rendered,
            verdict=shadowed.verdict,
            policy=policy.shadow,
            operation_id=shadowed.operation_id,
            now=services.clock(),
        )
        final = shadowed.body if record.bytes.equal else rendered
        try:
            admit_final(services, policy, seq, final, shadowed.model)
        except ContextLengthExceeded as exc:
            later_rules.append(exc.rule)
    if not later_rules:
        return record
    return dataclasses.replace(record, rules=tuple(dict.fromkeys((*record.rules, *later_rules))))


async def keep_in_log(
    store: StateStore, kind: str, entry: dict[str, Any], *, now: float, keep: int
) -> None:
    """Append to a log; a failure is logged, never the request's: it has been claimed."""
    try:
        await store.append_log(kind, entry, now=now, keep=keep)
    except Exception as exc:
        log.warning("state store: %s log entry not kept: %s", kind.split(":", maxsplit=1)[0], exc)
