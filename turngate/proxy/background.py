"""OpenAI Responses background responses, retrieved.

Under a conversation id:

    POST /v1/responses {"background": true}  -> queued: the handle is bound, the attempt
                                                 stays SENT (no turn yet; attempt.py)
    GET  /v1/responses/{handle}              -> relayed; once the response is over, its
    POST /v1/responses/{handle}/cancel          attempt is settled here:
        completed / incomplete         the turn is checked as any answer's and committed
                                       (kept for replay), as a non-streamed answer's is;
                                       calls that cannot be committed: FAIL, and the client
                                       gets the refusal instead, at this retrieval and
                                       every later one
        failed / cancelled             FAIL (SETTLE when UNKNOWN): the revision is free
        queued / in_progress           relayed, nothing recorded

The attempt is the one holding the conversation named by ``Turngate-Conversation-Id``
(which the SDK sends on every call made with the client's default headers): its next
revision, bound to that handle.

A retrieval that names no conversation has no attempt waiting for it (its create was
committed when accepted), but the calls it carries reach the application all the same: a
response that is over with its turn has them checked as any answer's when the route's
policy enforces, and one that cannot be committed is refused, at every retrieval. Streamed
retrievals (``?stream=true``) are retrieved_stream.py's.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
from aiohttp import web

from turngate.adapters import get_adapter
from turngate.adapters.base import RouteInfo
from turngate.adapters.openai_responses.response import RUNNING
from turngate.errors import (
    IllegalTransition,
    StateConflict,
    TurngateError,
    UpstreamProtocolError,
)
from turngate.graph.model import MessageSequence
from turngate.graph.schema_check import OpenToolset, ToolSchemas
from turngate.graph.turn import AssistantTurn
from turngate.proxy.credentials import credential_hash
from turngate.proxy.dispatch import CONVERSATION_HEADER
from turngate.proxy.errors import error_response
from turngate.proxy.recovery import quarantine
from turngate.proxy.replay import record_commit
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.tool_calls import INVALID_TOOL_CALL
from turngate.proxy.turn_check import call_schemas, check_turn
from turngate.proxy.upstream import exchange
from turngate.state.conversations import StoredResponse
from turngate.state.machine import DispatchState, Transition
from turngate.state.store import OperationRecord

log = logging.getLogger("turngate.proxy")

_RETRIEVAL = re.compile(r"/v1/responses/([A-Za-z0-9_-]+)(/cancel)?")
# The detail of an attempt FAILED because its retrieved turn was refused.
REFUSED = "the retrieved turn is refused: {rule}"
# How many of the conversation's latest operations a refused retrieval is looked for in.
RECENT = 8
# A response over with its turn: an incomplete one's output is the turn, as it is for a
# non-streamed answer (attempt.py commits it; the client goes on from it).
WITH_TURN = frozenset({"completed", "incomplete"})


def retrieved_handle(request: web.Request, route: RouteMatch) -> str | None:
    """The response a GET retrieves (or a POST cancels), when this module looks at it."""
    path = route.openai_path
    if path is None:
        return None
    if request.query.get("stream") == "true":
        return None
    found = _RETRIEVAL.fullmatch(path)
    if found is None or request.method != ("POST" if found.group(2) else "GET"):
        return None
    return found.group(1)


async def retrieve(
    request: web.Request, route: RouteMatch, services: Services, handle: str
) -> web.StreamResponse:
    """Relay the retrieval; settle the conversation's attempt bound to ``handle`` once the
    response is over."""
    # A cancel carries no body (or an empty JSON one); aiohttp bounds what it reads.
    sent = await request.read() if request.body_exists else b""
    answer = await exchange(request, route, services.session, sent)
    data = answer.body if isinstance(answer.body, bytes) else b""
    if answer.status == 200:
        conversation = request.headers.get(CONVERSATION_HEADER)
        if conversation:
            refused = await settle(services, conversation, handle, data)
        else:
            credential = credential_hash(services.credential_secret, request.headers, request.query)
            refused = checked_retrieval(services, handle, data, credential)
        if refused is not None:
            # Retrieving it again gets the same answer: an SDK's own retry would only be
            # refused again.
            return error_response("openai_responses", refused, {"x-should-retry": "false"})
    return answer


async def settle(
    services: Services, conversation_id: str, handle: str, data: bytes
) -> TurngateError | None:
    """Record what became of the attempt bound to ``handle``; the error the client gets
    instead of the body when its turn cannot be committed."""
    body = _response(data)
    if body is None or body.get("id") != handle or body.get("status") in RUNNING:
        return None
    record = await bound_attempt(services, conversation_id, handle)
    if record is None:
        if body.get("status") in WITH_TURN:
            return await refused_before(services, conversation_id, handle)
        return None
    if body.get("status") not in WITH_TURN:
        await ended(services, record, f"the provider says the response is {body.get('status')}")
        return None
    try:
        turn = _retrieved_turn(services, body)
    except TurngateError as exc:
        await quarantine(services, record, {"reason": exc.rule, "handle": handle})
        await ended(services, record, REFUSED.format(rule=exc.rule))
        return exc
    expires_at = services.clock() + services.settings.replay_ttl
    kept = StoredResponse(200, "application/json", data, False, expires_at)
    try:
        committed = await record_commit(
            services, record.manifest, turn, enforced=True, response=kept
        )
    except (IllegalTransition, StateConflict) as exc:
        log.warning("retrieved answer of %s not committed: %s", record.operation_id, exc)
        return None
    services.telemetry.resolved(committed)
    return None


async def bound_attempt(
    services: Services, conversation_id: str, handle: str
) -> OperationRecord | None:
    """The attempt holding the conversation's next revision, if it is still open and bound
    to ``handle``."""
    conversation = await services.store.conversation(conversation_id)
    if conversation is None:
        return None
    record = await services.store.live_attempt(
        conversation_id, conversation.revision, conversation.cancel_generation
    )
    if record is None or record.handle != handle or record.state is DispatchState.COMMITTED:
        return None
    return record


async def refused_before(
    services: Services, conversation_id: str, handle: str
) -> TurngateError | None:
    """A completed response whose turn an earlier retrieval refused stays refused: its
    calls never reach the application, however often it is retrieved."""
    recent = await services.store.conversation_operations(conversation_id, limit=RECENT)
    for record in reversed(recent):
        if record.handle != handle or record.state is not DispatchState.FAILED:
            continue
        detail = record.history[-1].detail or ""
        if detail.startswith(REFUSED.format(rule="")):
            rule = detail.removeprefix(REFUSED.format(rule=""))
            return UpstreamProtocolError(
                f"turngate: the turn of response '{handle}' was refused when it was first "
                f"retrieved ({rule}); it is not delivered",
                rule=rule or INVALID_TOOL_CALL,
                status=502,
            )
        return None
    return None


def checked_retrieval(
    services: Services, handle: str, data: bytes, credential: str | None
) -> TurngateError | None:
    """The refusal a retrieval that names no conversation gets instead of the response: its
    turn's first call that cannot be committed. Nothing is recorded (no attempt waits for
    it), so a later retrieval is checked, and refused, again."""
    body = _response(data)
    if body is None or body.get("id") != handle or body.get("status") not in WITH_TURN:
        return None
    model = body.get("model")
    policy = services.policy_for("openai_responses", model if isinstance(model, str) else None)
    if policy.mode != "enforce":
        # Only calls are checked here, and a request with tools is shadowed in every other
        # mode (policies.modes).
        return None
    try:
        turn = _retrieved_turn(services.for_route(policy), body)
    except TurngateError as exc:
        log.warning("retrieved response %s refused: %s", handle, exc.rule)
        return exc
    # Delivered whole: a request chained to it must answer its calls (replies.py).
    services.replies.committed("openai_responses", turn, credential)
    return None


def _response(data: bytes) -> dict[str, Any] | None:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


def _retrieved_turn(services: Services, body: dict[str, Any]) -> AssistantTurn:
    """A retrieved response's turn, its calls checked against the tools it echoes (a
    ``TurngateError`` for the first that cannot be committed)."""
    adapter = get_adapter("openai_responses")
    turn = adapter.parse_response(body)
    if turn.tool_calls:
        check_turn(turn, echoed_schemas(services, body), adapter.capabilities)
    return turn


def _echoed_tools(body: dict[str, Any]) -> MessageSequence | None:
    """The tools the response says it was given (a retrieved response echoes them) as a
    request's; None when they do not read as one."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return None
    try:
        return get_adapter("openai_responses").parse_request(
            {"model": body.get("model") or "", "input": [], "tools": tools}, RouteInfo()
        )
    except TurngateError:
        return None


def echoed_schemas(services: Services, body: dict[str, Any]) -> ToolSchemas | None:
    """What a retrieved response's calls are checked against; None checks them for
    completeness only. The echo holds the request's tools, not those its history loaded (a
    client-run tool search's output): a call to a tool the echo does not name is checked as
    one JSON object."""
    tools = _echoed_tools(body)
    if tools is None:
        return None
    return OpenToolset(call_schemas(tools, services.schemas))


async def ended(services: Services, record: OperationRecord, why: str) -> None:
    """The attempt is over without a turn: FAILED (SETTLED from UNKNOWN)."""
    transition = Transition.SETTLE if record.state is DispatchState.UNKNOWN else Transition.FAIL
    try:
        moved = await services.store.transition(
            record.operation_id, transition, now=services.clock(), detail=why
        )
    except (IllegalTransition, StateConflict):
        return  # moved meanwhile: a cancel, another retrieval
    services.telemetry.resolved(moved)
    log.warning("%s of %s: %s", transition, record.operation_id, why)
