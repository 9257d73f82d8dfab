"""Streamed retrievals of OpenAI Responses background responses.

    GET /v1/responses/{handle}?stream=true[&starting_after=N]

is how a client resumes a background stream it lost (openai's documented recovery,
``responses.retrieve(id, stream=True, starting_after=N)``) or follows a background response
as it runs (``responses.stream(response_id=id)``). It crosses the same commit boundary as
the stream that created the response:

- turngate asks the upstream for the whole stream (``starting_after`` dropped) and reads it
  through ``StreamRelay``: text previewed, calls held until whole and checked against the
  tools the response echoes in its first event, the end written only once the turn is
  settled. A dropped upstream is resumed from its handle, as a background stream is.
- The client gets only the frames after its ``starting_after``: what the provider would
  have sent it.
- Under ``Turngate-Conversation-Id`` the attempt bound to the handle (UNKNOWN once its own
  stream's client left, STREAMING while that stream still runs) is committed with the turn
  before the end is written; a turn that cannot be committed FAILS it and is refused at
  every later retrieval (background.py); a response that failed upstream frees the
  revision. A retrieval cut short, or left by its client, changes nothing: the response
  runs on and the next retrieval settles it.

Under a route policy that does not enforce, the retrieval is relayed as the client asked it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from turngate.adapters import get_adapter
from turngate.adapters.sse import SSEDecoder, SSEError
from turngate.errors import IllegalTransition, StateConflict, TurngateError
from turngate.graph.model import ApiName
from turngate.graph.stream_outputs import UPSTREAM_ERROR
from turngate.graph.turn import AssistantTurn
from turngate.proxy.background import (
    REFUSED,
    bound_attempt,
    echoed_schemas,
    ended,
    refused_before,
)
from turngate.proxy.credentials import credential_hash
from turngate.proxy.dispatch import CONVERSATION_HEADER
from turngate.proxy.errors import error_response
from turngate.proxy.recovery import quarantine
from turngate.proxy.replay import operation_headers, record_commit
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.stream import KEEPALIVE, ClientGone, StreamPlan, StreamSession, stream_marks
from turngate.proxy.upstream import inbound_headers, outbound_headers, relay
from turngate.state.machine import DispatchState, Transition
from turngate.state.store import OperationRecord

log = logging.getLogger("turngate.proxy")

API: ApiName = "openai_responses"
_STREAMED = re.compile(r"/v1/responses/([A-Za-z0-9_-]+)")
_AFTER = re.compile(r"[0-9]{1,18}")
# The first event (``response.created``, the response with its tools) is read before the
# relay is built; one larger than this is relayed with its calls checked as JSON objects.
HEAD_LIMIT = 4 * 1024 * 1024
_FRAME_END = re.compile(rb"\r?\n\r?\n")
_SEQUENCE = re.compile(rb'"sequence_number":\s*([0-9]+)')
# A mark turngate writes: a comment line, or an event of its own (``Turngate-Stream-Marks``).
_MARKS = (b":", b"event: turngate.")
# States in which a retrieval may still deliver the bound attempt's blocks.
_LIVE = frozenset(
    {DispatchState.SENT, DispatchState.STREAMING, DispatchState.UNKNOWN, DispatchState.COMMITTED}
)


def streamed_handle(request: web.Request, route: RouteMatch) -> str | None:
    """The response a streamed retrieval reads, when this module relays it."""
    path = route.openai_path
    if path is None or request.method != "GET":
        return None
    query = request.query
    if query.get("stream") != "true":
        return None
    after = query.getall("starting_after", [])
    if len(after) > 1 or (after and _AFTER.fullmatch(after[0]) is None):
        return None  # the provider's own 400 says what is wrong with it
    found = _STREAMED.fullmatch(path)
    return None if found is None else found.group(1)


async def retrieve_stream(
    request: web.Request, route: RouteMatch, services: Services, handle: str
) -> web.StreamResponse:
    try:
        marks = stream_marks(request.headers, API)
    except TurngateError as exc:
        return error_response(API, exc)
    record = None
    conversation = request.headers.get(CONVERSATION_HEADER)
    if conversation:
        record = await bound_attempt(services, conversation, handle)
        if record is None:
            refused = await refused_before(services, conversation, handle)
            if refused is not None:
                return error_response(API, refused, {"x-should-retry": "false"})
    after = request.query.get("starting_after")
    async with services.session.get(
        _whole_stream(route.upstream_url),
        headers=outbound_headers(request.headers, keep_length=False),
        allow_redirects=False,
        proxy=route.prefix.proxy,
    ) as upstream:
        if upstream.status != 200:
            data = await upstream.read()
            headers = inbound_headers(upstream.headers)
            return web.Response(
                status=upstream.status, reason=upstream.reason, body=data, headers=headers
            )
        head, echo = await _first_event(upstream)
        model = echo.get("model") if echo is not None else None
        policy = services.policy_for(API, model if isinstance(model, str) else None)
        if policy.mode != "enforce":
            upstream.close()
            return await relay(request, route, services.session)
        checked = services.for_route(policy)
        session = RetrievedStream(
            request,
            api=API,
            plan=StreamPlan(
                marks=marks,
                observe_only=False,
                buffer=policy.stream_text == "buffer",
                retry_safe=False,
                resumable=True,
            ),
            tools=None if echo is None else echoed_schemas(checked, echo),
            capabilities=get_adapter(API).capabilities,
            http=services.session,
            upstream_base=route.prefix.upstream,
            after=None if after is None else int(after),
        )
        credential = credential_hash(services.credential_secret, request.headers, request.query)
        owner = RetrievalOwner(services, record, credential)
        await session.relay_attempt(owner, upstream, head)
    return await session.written()


def _whole_stream(url: URL) -> URL:
    """The same retrieval from the stream's first event: the relay checks the whole turn."""
    return url.without_query_params("starting_after")


async def _first_event(upstream: aiohttp.ClientResponse) -> tuple[bytes, dict[str, Any] | None]:
    """The bytes read up to the end of the first frame, and the response it carries (its
    ``model`` and ``tools``), if it does."""
    head = bytearray()
    decoder = SSEDecoder()
    while len(head) <= HEAD_LIMIT:
        chunk = await upstream.content.readany()
        if not chunk:
            break
        head += chunk
        try:
            frames = decoder.feed(chunk)
        except SSEError:
            break  # the relay reports it, reading the same bytes
        if frames:
            return bytes(head), _response_of(frames[0].data)
    return bytes(head), None


def _response_of(data: bytes) -> dict[str, Any] | None:
    try:
        event = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    response = event.get("response") if isinstance(event, dict) else None
    return response if isinstance(response, dict) else None


class RetrievedStream(StreamSession):
    """A stream session whose client asked for the frames after ``after`` only."""

    def __init__(self, *args: Any, after: int | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._after = after
        # While frames at or before ``after`` may come, every write goes through ``_send``
        # (the pump's quick path writes without it).
        self.keeps_copy = after is not None

    async def written(self) -> web.StreamResponse:
        """The response the client got; its headers alone when nothing was after ``after``."""
        if self.response is None:
            try:
                await self._end_body()
            except ClientGone:
                return web.Response()  # no one to write it to
        assert self.response is not None
        return self.response

    async def _send(self, data: bytes) -> None:
        if self._after is not None and data != KEEPALIVE:
            data, passed = after_cursor(data, self._after)
            if passed:
                self._after = None
                self.keeps_copy = False
            if not data:
                return
        await super()._send(data)


def after_cursor(data: bytes, after: int) -> tuple[bytes, bool]:
    """``data`` (whole frames) without the frames a client resuming after ``after`` saw
    already: those numbered at or before it, and marks about them; and whether a frame
    numbered after it came (from there on, everything goes out as it is: numbers only
    grow). A frame without a number that is no mark (an error event of turngate's) always
    goes out."""
    kept: list[bytes] = []
    start = 0
    for end in _FRAME_END.finditer(data):
        frame = data[start : end.end()]
        start = end.end()
        number = _SEQUENCE.search(frame)
        if number is not None and int(number.group(1)) > after:
            kept.append(frame + data[start:])
            return b"".join(kept), True
        if number is None and not frame.startswith(_MARKS):
            kept.append(frame)
    kept.append(data[start:])
    return b"".join(kept), False


class RetrievalOwner:
    """What a streamed retrieval records: on the attempt bound to its handle, if any."""

    def __init__(
        self, services: Services, record: OperationRecord | None, credential: str | None
    ) -> None:
        self.services = services
        self.record = record
        # The keyed hash of the caller's credentials: what it is delivered under.
        self.credential = credential
        self.open = True
        self.headers = {} if record is None else operation_headers(record.manifest)

    async def move(
        self, transition: Transition, *, handle: str | None = None, detail: str | None = None
    ) -> None:
        """Only a turn that ended is recorded: refused (its calls never reach anyone), or
        failed upstream. A cut retrieval (LOSE) leaves the response running."""
        self.open = False
        record = self.record
        if record is None or transition is not Transition.FAIL:
            return
        # The client got the error event and may be gone, its handler cancelled with it:
        # the record is written all the same.
        await asyncio.shield(self.services.in_background(self._ended(record, detail)))

    async def _ended(self, record: OperationRecord, rule: str | None) -> None:
        if rule == UPSTREAM_ERROR:
            await ended(self.services, record, "the provider's stream reported an error")
            return
        await quarantine(self.services, record, {"reason": rule, "handle": record.handle})
        await ended(self.services, record, REFUSED.format(rule=rule))

    async def bind(self, handle: str) -> bool:
        return self.record is None or handle == self.record.handle

    async def commit(self, turn: AssistantTurn) -> bool:
        self.open = False
        record = self.record
        if record is None:
            # Delivered whole: a request chained to it must answer its calls (replies.py).
            self.services.replies.committed(API, turn, self.credential)
            return True
        try:
            committed = await record_commit(self.services, record.manifest, turn, enforced=True)
        except (IllegalTransition, StateConflict) as exc:
            # Committed meanwhile (the stream that created it, another retrieval): the same
            # response, so the same turn; anything else moved it on.
            log.info("retrieved turn of %s not committed: %s", record.operation_id, exc)
            return await self._state() is DispatchState.COMMITTED
        except Exception as exc:
            log.error("retrieved turn of %s not committed: %s", record.operation_id, exc)
            return False
        self.services.telemetry.resolved(committed)
        return True

    async def still_live(self) -> bool:
        return self.record is None or await self._state() in _LIVE

    async def quarantine(self, entry: dict[str, Any]) -> None:
        if self.record is not None:
            await quarantine(self.services, self.record, entry)

    async def abandon(self, detail: str) -> None:
        """The client left its retrieval: the response runs on upstream, the attempt waits."""
        self.open = False

    async def _state(self) -> DispatchState | None:
        assert self.record is not None
        try:
            found = await self.services.store.get(self.record.operation_id)
        except Exception as exc:
            log.error("state of %s unreadable: %s", self.record.operation_id, type(exc))
            return None
        return None if found is None else found.state
