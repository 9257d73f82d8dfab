"""A batch's chat requests, each checked as a chat request is, before the batch is sent.

    read body -> each entry (adapters/batches.py; adapters/openai_batch.py for an upload to
      OpenAI's Batch API; a Gemini batch input file: proxy/gemini_uploads.py)
      -> route policy -> parse -> trust labels + validate
      -> enforce: refused?   shadow: logged and counted
      -> any refused: 400 naming every refused entry, nothing sent   -> else: relay the bytes
      (and keep each request's tools by what the answer created, for its results:
      proxy/batch_results.py)

A provider runs a batch's requests hours later and reports each one it refuses only in the
results; an agent platform learns then that a sequence it built was invalid. turngate
refuses the batch at once instead, naming each refused request (its place in the batch and
the name the client gave it) and its rule. The batch is relayed as the client's own bytes
and its answer unchanged: a batch is no conversation turn, so it has no manifest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from turngate.adapters.batches import BatchEntry, batch_entries
from turngate.adapters.openai_batch import batch_file, batch_lines, first_field
from turngate.errors import (
    BatchRefusal,
    BatchRejected,
    SequenceRejected,
    TurngateError,
)
from turngate.graph.model import ApiName
from turngate.graph.schema_check import ToolSchemas
from turngate.policies import trust
from turngate.policies.modes import decide
from turngate.proxy.batch_tools import Expected, remember
from turngate.proxy.body import BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT, decode_json, read_body
from turngate.proxy.dispatch import InternalError, refuse_invalid
from turngate.proxy.errors import error_response
from turngate.proxy.observe import DispatchObserver, observe_dispatch, quiet_telemetry
from turngate.proxy.policy import pinned_adapter, requested_model
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.turn_check import call_schemas
from turngate.proxy.upstream import answer_object, exchange, relay, stalled
from turngate.telemetry.prometheus import TELEMETRY

log = logging.getLogger("turngate.proxy")
# How much of an upload is read, at most, to find its first form field.
PEEK = 64 * 1024
# Requests checked between two yields to the event loop (a few milliseconds of work).
YIELD_EVERY = 32
TOO_LARGE = "request_too_large"
NOTHING_SENT = "turngate: internal error checking the batch; nothing was sent"


async def checked_batch(
    request: web.Request, route: RouteMatch, services: Services, api: ApiName
) -> web.StreamResponse:
    if route.provider == "openai":
        return await checked_upload(request, route, services)
    declared = request.content_length
    if declared is None or declared > services.settings.max_body_bytes:
        unchecked(request, api, f"{declared} bytes, over --max-body-bytes or not declared")
        return await relay(request, route, services.session)
    with observe_dispatch(request, api) as observer:
        try:
            try:
                raw = await read_body(request, services.settings.max_body_bytes)
            except TurngateError as exc:
                observer.refused(exc.rule)
                return error_response(api, exc)
            try:
                body = decode_json(raw)
            except TurngateError as exc:
                if exc.rule != TOO_LARGE:
                    observer.refused(exc.rule)
                    return error_response(api, exc)
                # Too many JSON containers to parse safely as one chat request; a batch of
                # many small requests is no attack, and the provider takes it.
                unchecked(request, api, "more JSON objects and arrays than one request may hold")
                return await relay(request, route, services.session, read=raw)
            entries = list(batch_entries(api, route.info, body))
            return await judged_batch(request, route, services, observer, raw=raw, entries=entries)
        finally:
            observer.log()


async def checked_upload(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse:
    """A file upload: checked when it is a Batch API input file, else streamed up as it
    comes (only its first form field is read first: the openai SDK sends ``purpose`` there)."""
    content_type = request.headers.get("Content-Type", "")
    head = await head_read(request, lambda read: first_field(content_type, read) is not None)
    first = first_field(content_type, head)
    purpose = first.content.strip() if first is not None and first.name == "purpose" else None
    if purpose not in (None, b"batch"):
        return await relay(request, route, services.session, head=head)
    limit = services.settings.max_body_bytes
    declared = request.content_length
    if declared is None or declared > limit:
        why = f"{declared} bytes, over --max-body-bytes or not declared"
        if purpose == b"batch":
            unchecked(request, "openai_chat", why)
        else:
            log.warning("an upload (%s) is relayed without looking for batch requests in it", why)
        return await relay(request, route, services.session, head=head)
    # The declared length fits the limit, so the rest does too.
    raw = head + await read_body(request, limit, only_json=False)
    data = batch_file(content_type, raw)
    if data is None:
        return await relay(request, route, services.session, read=raw)
    return await judged_batch_file(request, route, services, raw=raw, data=data)


async def judged_batch_file(
    request: web.Request, route: RouteMatch, services: Services, *, raw: bytes, data: bytes
) -> web.StreamResponse:
    """Each line of an OpenAI Batch API input file (``data``) checked; ``raw``, the
    request that carries it, relayed when none is refused."""
    with observe_dispatch(request, "openai_chat") as observer:
        try:
            entries = list(batch_lines(data))
            return await judged_batch(request, route, services, observer, raw=raw, entries=entries)
        finally:
            observer.log()


async def head_read(request: web.Request, enough: Callable[[bytes], bool]) -> bytes:
    """The start of the body, until ``enough`` of it is read, or ``PEEK`` bytes, or all of
    it; a client that stalls meanwhile gets the relay's 408."""
    head = b""
    idle = request.config_dict.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)
    while len(head) < PEEK and not enough(head):
        try:
            async with asyncio.timeout(idle):
                chunk = await request.content.readany()
        except TimeoutError as exc:
            raise stalled(idle) from exc
        if not chunk:
            break
        head += chunk
    return head


async def judged_batch(
    request: web.Request,
    route: RouteMatch,
    services: Services,
    observer: DispatchObserver,
    *,
    raw: bytes,
    entries: list[BatchEntry],
) -> web.StreamResponse:
    refused: list[BatchRefusal] = []
    shadowed: list[BatchRefusal] = []
    toolsets: dict[str, Expected] = {}
    for index, entry in enumerate(entries):
        if index % YIELD_EVERY == YIELD_EVERY - 1:
            # A large batch takes a while to check: other requests go on meanwhile.
            await asyncio.sleep(0)
        try:
            error, enforced, tools = judged(services, entry)
        except Exception:
            # A bug, not the client's doing: the API's own 500, and nothing sent.
            log.exception("internal error checking %s of a batch", entry.location)
            observer.refused(InternalError.rule)
            return error_response(observer.api, InternalError(NOTHING_SENT))
        if error is not None:
            refusal = BatchRefusal(entry.location, entry.name, error)
            (refused if enforced else shadowed).append(refusal)
        elif tools is not None:
            # A Gemini request may have no key: its answer is found by its place.
            toolsets[entry.name or f"#{index}"] = (entry.api, tools)
    if refused:
        observer.judged_batch([rules_of(refusal.error) for refusal in refused], enforced=True)
        rejected = BatchRejected(refused, len(entries))
        log.info("refused the batch %s %s: %s", request.method, request.path, rejected.rule)
        observer.refused(rejected.rule)
        return error_response(observer.api, rejected)
    if shadowed:
        observer.judged_batch([rules_of(refusal.error) for refusal in shadowed], enforced=False)
        log.warning(
            "shadow: would refuse %d of the batch's %d requests (%s)",
            len(shadowed),
            len(entries),
            ", ".join(dict.fromkeys(refusal.error.rule for refusal in shadowed)),
        )
    if not toolsets:
        return await relay(request, route, services.session, read=raw)
    # What the answer creates (a message batch, a batch's input file) keys its requests'
    # tools, for its results (proxy/batch_results.py).
    response = await exchange(request, route, services.session, raw)
    created = _created(answer_object(response))
    if created is not None:
        now = services.clock()
        await remember(services.batch_toolsets, services.store, created, toolsets, now=now)
    return response


def _created(answer: dict[str, Any]) -> str | None:
    """The id of what an answer created: the file of an upload (OpenAI's Uploads API
    completion, a Gemini upload), else itself (a Gemini batch by its ``name``)."""
    made = answer["file"] if isinstance(answer.get("file"), dict) else answer
    key = made.get("id", made.get("name"))
    return key if isinstance(key, str) else None


def unchecked(request: web.Request, api: ApiName, why: str) -> None:
    log.warning("a batch is relayed without checking its requests: %s", why)
    telemetry = request.app.get(TELEMETRY) or quiet_telemetry()
    telemetry.metrics.batch_unchecked(api)


def judged(
    services: Services, entry: BatchEntry
) -> tuple[TurngateError | None, bool, ToolSchemas | None]:
    """What refuses ``entry`` (None when nothing does), whether its route policy enforces
    that refusal, and what its answer's calls are to be checked against (None: not
    checked, as a shadowed request's answer is not). A request that cannot be parsed is
    refused whatever the mode, as a chat request is."""
    api, info = entry.api, entry.info
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
        return exc, True, None
    enforced = decide(policy.mode, seq).enforced
    try:
        refuse_invalid(verdict)
    except TurngateError as exc:
        return exc, enforced, None
    return None, True, call_schemas(seq, services.schemas) if enforced else None


def rules_of(error: TurngateError) -> list[str]:
    """Every rule ``error`` names: a validator refusal's one per violation."""
    if isinstance(error, SequenceRejected):
        return [violation.rule for violation in error.violations]
    return [error.rule]
