"""The stream commit boundary in the proxy: upstream bytes through ``StreamRelay`` to the client.

    upstream chunk --relay.feed--> client bytes: text previews at once, tool calls whole, marks
    handle seen    --BIND-------> the handle bound to the manifest (refused: superseded)
    block commit   --still live?-> relayed | superseded: the API's error event, abort
    terminator     --COMMIT CAS--> the held terminator written, the body ended cleanly
    failure        -------------> the API's error event, transport.abort(); FAILED or UNKNOWN
    upstream drop  -------------> resume by handle (Responses background) | retry once (no
                                  byte came) | failure

The client's response headers go out with the first bytes there are to write, so a retry
before that answers with the new attempt's ``Turngate-*`` headers. After a failure the
chunked body is never terminated: every SDK sees a broken stream, never a normal end. The
rules (which failure is FAILED, which UNKNOWN, when a retry is safe) are in docs/streams.md.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from turngate.adapters import get_adapter
from turngate.adapters.openai_responses.tools import is_namespace
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import MARK_STYLES, MarkStyle
from turngate.errors import BadRequestBody, StateConflict
from turngate.graph.assembler import MISSING_STOP, STREAM_TRUNCATED
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import ApiName, MessageSequence, ToolCallBlock
from turngate.graph.schema_check import ToolSchemas
from turngate.graph.turn import AssistantTurn
from turngate.proxy.upstream import (
    RELAYING,
    IdleWatch,
    abort,
    inbound_headers,
    outbound_headers,
    silence,
)
from turngate.state.machine import Transition

log = logging.getLogger("turngate.proxy")

MARKS_HEADER = "Turngate-Stream-Marks"
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
# Failures that say the stream stopped, not that the turn is wrong: the outcome is unknown.
_CUT_SHORT = frozenset({STREAM_TRUNCATED, MISSING_STOP, "sse_truncated"})
MAX_RESUMES = 3
# Bytes of a large upstream read decoded and written before the rest of the read.
PIECE = 16 * 1024
# While the relay holds what the provider streams (a tool call's arguments) and has written
# nothing for this long, an empty line goes to the client: every SSE reader skips it
# (between frames it dispatches nothing), and an SDK's read timeout does not fire on a
# provider that is streaming all along; under ``buffer`` too (held text counts), its headers
# then going out first. Never in a shadowed stream (the provider's bytes as they come).
KEEPALIVE_AFTER = 5.0
KEEPALIVE = b"\n"
_HANDLE = re.compile(r"[A-Za-z0-9_-]{1,200}")
RETRIED = "retried: the upstream closed the stream before its first byte"
RESENT = "retried: the upstream closed the connection before answering"
CLIENT_LEFT = "client disconnected"
NO_BYTE = "the upstream closed the stream before its first byte"
# What a committed stream's upstream gets to end its body after the terminator, so that its
# connection goes back to the pool (a new one costs the provider's TLS handshake).
DRAIN_SECONDS = 0.25
DRAIN_BYTES = 64 * 1024


class AttemptSuperseded(StateConflict):
    """The store no longer holds this attempt as the live one (taken over, settled)."""

    rule = "attempt_superseded"


class ClientGone(Exception):
    """The client closed its connection while turngate was writing to it."""


def stream_marks(headers: CIMultiDictProxy[str], api: ApiName) -> MarkStyle | None:
    """The marks a client asked for (``Turngate-Stream-Marks``); None: the API's default."""
    value = headers.get(MARKS_HEADER)
    if value is None or value.strip() == "":
        return None
    chosen = value.strip().lower()
    for style in MARK_STYLES:
        if style == chosen:
            return style
    raise BadRequestBody(
        f"turngate: {MARKS_HEADER} must be one of {', '.join(MARK_STYLES)}, not {value!r}",
        rule="invalid_stream_marks",
    )


@dataclass(frozen=True)
class StreamPlan:
    """How one streamed request is relayed, and which recoveries are safe for it."""

    marks: MarkStyle | None
    # Shadow mode: the client gets the upstream's bytes unchanged; the relay only decides
    # the operation's outcome.
    observe_only: bool
    # The route policy's ``stream_text: buffer``: nothing reaches the client before the
    # block it belongs to is committed (no previews).
    buffer: bool
    # A retry from the manifest bytes cannot run anything twice (see ``plan``).
    retry_safe: bool
    # An OpenAI Responses background stream: resumable from its handle.
    resumable: bool


def provider_runs_tools(seq: MessageSequence) -> bool:
    """Whether the provider may run a tool of this request itself (web search, code, MCP):
    sent twice, it may run it twice. A Responses namespace only groups the client's own, and
    a provider-defined tool the application runs (Anthropic's ``bash``, ``Capabilities.
    client_tool_types``) is the client's too; Anthropic's ``mcp_servers`` lets the provider
    call those servers' tools."""
    if "mcp_servers" in seq.envelope:
        return True
    hosted = [
        tool
        for tool in seq.tools
        if tool.tool_type == "hosted" and not is_namespace(tool.attrs.get("$native"))
    ]
    if not hosted:
        return False
    capabilities = get_adapter(seq.api).capabilities
    return not all(capabilities.runs_on_client(tool) for tool in hosted)


def plan(
    headers: CIMultiDictProxy[str], seq: MessageSequence, *, enforced: bool, buffer: bool
) -> StreamPlan:
    """A retry is safe only when nothing the provider might do before its first byte can
    matter twice: no provider-run (hosted) tools, no background response (it keeps running
    after a drop), no provider-side conversation it would be appended to."""
    background = seq.envelope.get("background") is True
    return StreamPlan(
        marks=stream_marks(headers, seq.api),
        observe_only=not enforced,
        buffer=buffer and enforced,
        retry_safe=retry_safe(seq, enforced=enforced),
        resumable=enforced and background and seq.api == "openai_responses",
    )


def retry_safe(seq: MessageSequence, *, enforced: bool) -> bool:
    """Whether nothing the provider might do unseen can matter twice: then the same bytes
    may go out again after the upstream closed before its first byte, and an attempt
    turngate ended itself (its client left) is over (docs/streams.md)."""
    envelope = seq.envelope
    return (
        enforced
        and not provider_runs_tools(seq)
        and envelope.get("background") is not True
        and "conversation" not in envelope
    )


class StreamOwner(Protocol):
    """The attempt a stream belongs to: its headers and its state transitions."""

    headers: dict[str, str]
    # False once an outcome (commit, fail, lose) has been recorded.
    open: bool

    async def move(
        self, transition: Transition, *, handle: str | None = None, detail: str | None = None
    ) -> None: ...

    async def bind(self, handle: str) -> bool: ...

    async def commit(self, turn: AssistantTurn) -> bool: ...

    async def still_live(self) -> bool: ...

    async def quarantine(self, entry: dict[str, Any]) -> None: ...

    async def abandon(self, detail: str) -> None: ...


class Stop(StrEnum):
    """Why one upstream connection stopped being read."""

    COMPLETE = "complete"
    FAILED = "failed"
    EOF = "eof"
    DROPPED = "dropped"
    SUPERSEDED = "superseded"


class StreamEnd(StrEnum):
    """How a streamed attempt ended."""

    COMMITTED = "committed"
    FAILED = "failed"
    LOST = "lost"
    RETRY = "retry"
    SUPERSEDED = "superseded"
    CLIENT_GONE = "client_gone"


class StreamSession:
    """The client's side of one streamed request, across the attempts that serve it."""

    # Whether ``_record`` sees every write (a subclass that keeps a copy for replay).
    keeps_copy = False

    def __init__(
        self,
        request: web.Request,
        *,
        api: ApiName,
        plan: StreamPlan,
        tools: ToolSchemas | None,
        capabilities: Capabilities | None,
        http: aiohttp.ClientSession,
        upstream_base: URL,
    ) -> None:
        self.request = request
        self.plan = plan
        self.relay = StreamRelay(api, tools=tools, capabilities=capabilities, marks=plan.marks)
        self.response: web.StreamResponse | None = None
        self.retries = 0
        self.resumes = 0
        self.withheld_commits = 0
        self._http = http
        self._upstream_base = upstream_base
        self._status = 200
        self._reason: str | None = None
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._bound: str | None = None
        self._commits = 0
        self._quarantined = 0
        # Client bytes held under ``buffer`` until the next commit.
        self._pending = b""
        # Writes to the client through ``_write`` (what the keepalive counts silence from).
        self.writes = 0
        # Previews go out as the relay gives them (neither shadow mode nor ``buffer``).
        self._previews = not (plan.observe_only or plan.buffer)
        # Why the last upstream read broke (told to the client with the truncation).
        self._broken: str | None = None

    # --- one attempt ----------------------------------------------------------------------

    async def relay_attempt(
        self, owner: StreamOwner, upstream: aiohttp.ClientResponse, head: bytes = b""
    ) -> StreamEnd:
        """Relay ``upstream``'s body; ``head``: its first bytes, already read by the caller."""
        self._status, self._reason = upstream.status, upstream.reason
        self._headers = inbound_headers(upstream.headers)
        self._headers.update(owner.headers)
        self._bound = None
        try:
            stop, received = await self._pumped(owner, upstream, head)
            ended = stop
            while stop in (Stop.DROPPED, Stop.EOF) and self._may_resume():
                resumed = await self._reconnect(owner)
                if resumed is None:
                    break
                async with resumed:
                    stop, more = await self._pumped(owner, resumed)
                received += more
            end = await self._end(owner, stop, received)
            if end is StreamEnd.COMMITTED and ended is Stop.COMPLETE:
                await _finish_body(upstream)
        except ClientGone:
            abort(self.request)
            await owner.abandon(CLIENT_LEFT)
            return StreamEnd.CLIENT_GONE
        late = self.relay.quarantine[self._quarantined :]
        if late:
            # Never relayed (an earlier generation's events, events after the terminator):
            # kept here, with the assembler's reasons.
            self._quarantined += len(late)
            reasons = "; ".join(dict.fromkeys(q.reason for q in late))
            await owner.quarantine({"reason": reasons, "events": len(late)})
        return end

    def delivered_a_tool_call(self) -> bool:
        """Whether a tool call went out as committed: the client may be running it."""
        return any(isinstance(b, ToolCallBlock) for b in self.relay.assembler.committed)

    async def restart(self, generation: int) -> None:
        """A retry takes over: events of the old generation are quarantined from now on."""
        self.retries += 1
        await self._write(self.relay.restart(generation))

    async def _pumped(
        self, owner: StreamOwner, upstream: aiohttp.ClientResponse, head: bytes = b""
    ) -> tuple[Stop, int]:
        """``_pump`` as a task of its own: the wait for each chunk suspends and resumes the
        pump's frames only, not the dozen of the handler's that await the stream (the
        middlewares, the dispatch, the attempt); about a tenth of the relay's CPU per paced
        chunk (docs/performance.md). Cancelling the handler cancels the task it awaits."""
        return await asyncio.ensure_future(self._pump(owner, upstream, head))

    async def _pump(
        self, owner: StreamOwner, upstream: aiohttp.ClientResponse, head: bytes = b""
    ) -> tuple[Stop, int]:
        received = len(head)
        self._broken = None
        if head:
            stop = await self._step(owner, head)
            if stop is not None:
                return stop, received
        relay, previews = self.relay, self._previews
        watch = IdleWatch.take_over(upstream)
        clock = asyncio.get_running_loop().time
        # Since when the client got nothing of what arrived (None: the last read wrote).
        held_since: float | None = None
        try:
            async for chunk in upstream.content.iter_any():
                if watch is not None:
                    watch.waiting_since = RELAYING
                size = len(chunk)
                received += size
                if size > PIECE:
                    # A large read (a burst the upstream wrote at once) goes out in two
                    # writes: the client's first bytes do not wait for the last frame of the
                    # read to decode, and the rest costs one write, not one per piece.
                    stop = await self._step(owner, chunk[:PIECE])
                    if stop is None:
                        stop = await self._step(owner, chunk[PIECE:])
                else:
                    out = relay.feed(chunk)
                    if relay.quick and previews:
                        # More text of previewed blocks or more held arguments, nothing
                        # else (no failure, end or handle, nothing held released): written,
                        # without the step's checks (and, once the response is under way,
                        # without ``_write``'s coroutine: this is nearly every chunk).
                        response = self.response
                        if out and response is not None and not self.keeps_copy:
                            try:
                                await response.write(out)
                            except ConnectionResetError as exc:
                                raise ClientGone from exc
                        elif out:
                            await self._write(out)
                        stop = None
                        wrote = bool(out)
                    else:
                        writes = self.writes
                        stop = await self._settle(owner, chunk, out)
                        # Under ``buffer`` the relay's output waits for its commit.
                        wrote = self.writes != writes
                    if wrote:
                        held_since = None
                    elif stop is None:
                        now = clock()
                        if held_since is None:
                            held_since = now
                        elif now - held_since >= KEEPALIVE_AFTER:
                            await self._keep_alive()
                            held_since = now
                    del out
                if stop is not None:
                    return stop, received
                # Not kept while the next read waits: a held stream costs its state only.
                del chunk
                if watch is not None:
                    watch.waiting_since = watch.clock()
        except TRANSPORT_ERRORS as exc:
            received = _arrived(upstream, received)
            self._broken = broken_because(exc, None if watch is None else watch.timeout)
            log.info("upstream stream broke (%s) after %d bytes", self._broken, received)
        else:
            return Stop.EOF, _arrived(upstream, received)
        finally:
            if watch is not None:
                watch.stop()
        # What came before the drop is relayed all the same: a background stream's handle in
        # it is what a resume needs.
        left = _buffered(upstream)
        if left:
            stop = await self._step(owner, left)
            if stop is not None:
                return stop, received
        return Stop.DROPPED, received

    async def _step(self, owner: StreamOwner, data: bytes) -> Stop | None:
        """Relay one piece of the upstream's bytes; a ``Stop`` when reading ends here."""
        return await self._settle(owner, data, self.relay.feed(data))

    async def _settle(self, owner: StreamOwner, data: bytes, out: bytes) -> Stop | None:
        """What follows the relay's ``feed`` of ``data``: the store's checks, the write."""
        relay, mirror = self.relay, self.plan.observe_only
        committed = relay.commits != self._commits
        if committed:
            self._commits = relay.commits
            if not (mirror or relay.failed or await owner.still_live()):
                self.withheld_commits += 1
                return Stop.SUPERSEDED
        if mirror:
            await self._write(data)
        elif not self.plan.buffer:
            await self._write(out)
        elif not relay.failed:
            self._pending += out
            if committed or relay.complete:
                await self._flush()
        handle = relay.handle
        if handle is not None and handle != self._bound:
            self._bound = handle
            if not await owner.bind(handle) and not mirror:
                return Stop.SUPERSEDED
        if mirror:
            return None
        if relay.failed:
            if self.plan.buffer:
                await self._write_failure_only()
            return Stop.FAILED
        if relay.complete:
            return Stop.COMPLETE
        return None

    async def _end(self, owner: StreamOwner, stop: Stop, received: int) -> StreamEnd:
        relay = self.relay
        if stop is Stop.SUPERSEDED:
            return await self._superseded(owner, "its state moved on while it streamed")
        nothing = received == 0 and not relay.relayed and self.plan.retry_safe
        if stop in (Stop.DROPPED, Stop.EOF) and nothing and self.retries == 0:
            await owner.move(Transition.FAIL, detail=RETRIED)
            return StreamEnd.RETRY
        tail, outcome = relay.finish(self._broken if stop is Stop.DROPPED else None)
        if isinstance(outcome, AssistantTurn):
            if not await owner.commit(outcome):
                return await self._superseded(owner, "its commit was refused by the state store")
            if self.plan.observe_only and stop is Stop.DROPPED:
                await self._abort()
                return StreamEnd.COMMITTED
            await self._flush()
            await self._write(b"" if self.plan.observe_only else tail)
            await self._end_body()
            return StreamEnd.COMMITTED
        if not self.plan.observe_only:
            await self._write(tail)
            await self._abort()
        elif stop is Stop.DROPPED:
            await self._abort()
        else:
            # Shadow: the client got the upstream's own stream, end and all.
            await self._end_body()
        cut = stop is Stop.DROPPED or outcome.rule in _CUT_SHORT
        if cut and not nothing and not self.over_when_ended():
            await owner.move(Transition.LOSE, detail=outcome.rule)
            return StreamEnd.LOST
        detail = NO_BYTE if nothing else outcome.rule
        await owner.move(Transition.FAIL, detail=detail)
        return StreamEnd.FAILED

    def over_when_ended(self) -> bool:
        """Whether an attempt that ends without its answer (cut short upstream, or closed by
        turngate) is over, nothing of it to wait for: the provider can have done nothing
        unseen that matters (``retry_safe``: no tool it runs, no background response, no
        provider conversation) and no tool call reached the client (which may be running
        it). Its answer was never committed, so it can never be canonical."""
        return self.plan.retry_safe and not self.delivered_a_tool_call()

    async def _superseded(self, owner: StreamOwner, why: str) -> StreamEnd:
        """The store no longer holds this attempt as live: what it still streams is late. The
        block it just completed (or its terminator) is not relayed but logged in quarantine;
        the client gets the retractions and the API's error event."""
        log.warning("stream attempt superseded: %s; nothing more of it is relayed", why)
        relay = self.relay
        await owner.quarantine(
            {"reason": why, "handle": relay.handle, "withheldBlocks": self.withheld_commits}
        )
        error = AttemptSuperseded(
            f"turngate: this attempt is no longer the live one for its conversation revision "
            f"({why}); nothing more of it is committed"
        )
        if not self.plan.observe_only:
            await self._write(relay.fail(error))
        await self._abort()
        return StreamEnd.SUPERSEDED

    # --- resume (OpenAI Responses background streams) -------------------------------------

    def _may_resume(self) -> bool:
        relay = self.relay
        return (
            self.plan.resumable
            and self.resumes < MAX_RESUMES
            and relay.cursor is not None
            and relay.handle is not None
            and _HANDLE.fullmatch(relay.handle) is not None
            and not relay.failed
            and not relay.complete
        )

    async def _reconnect(self, owner: StreamOwner) -> aiohttp.ClientResponse | None:
        """GET the same response from the sequence number after the last one processed."""
        relay = self.relay
        assert relay.handle is not None
        assert relay.cursor is not None
        self.resumes += 1
        relay.resume()
        base = str(self._upstream_base).rstrip("/")
        url = URL(
            f"{base}/v1/responses/{quote(relay.handle)}?stream=true&starting_after={relay.cursor}",
            encoded=True,
        )
        headers = outbound_headers(self.request.headers, keep_length=False)
        headers.popall("Content-Type", None)
        headers["Accept"] = "text/event-stream"
        try:
            resumed = await self._http.get(url, headers=headers, allow_redirects=False)
        except TRANSPORT_ERRORS as exc:
            log.warning("resume of %s failed: %s", relay.handle, type(exc).__name__)
            return None
        if resumed.status != 200:
            log.warning("resume of %s answered %d", relay.handle, resumed.status)
            resumed.release()
            return None
        log.info("resumed %s after sequence number %d", relay.handle, relay.cursor)
        return resumed

    # --- the client's side ----------------------------------------------------------------

    async def _flush(self) -> None:
        pending, self._pending = self._pending, b""
        await self._write(pending)

    async def _write_failure_only(self) -> None:
        """Under ``buffer`` the previews the failing chunk held were never shown: only the
        API's error event (and the retractions) go out."""
        self._pending = b""
        _, outcome = self.relay.finish()
        if isinstance(outcome, AssistantTurn):
            return
        await self._write(self.relay.encoder.encode_failure(outcome))

    async def _write(self, data: bytes) -> None:
        if not data:
            return
        self.writes += 1
        if self.keeps_copy:
            self._record(data)
        await self._send(data)

    async def _keep_alive(self) -> None:
        """``KEEPALIVE``, not recorded for replay: it says nothing. Never in a shadowed
        stream, which relays the provider's own bytes as they come, frames cut anywhere."""
        if not self.plan.observe_only:
            await self._send(KEEPALIVE)

    async def _send(self, data: bytes) -> None:
        # ``is None``: a StreamResponse's truth is a Python method call.
        response = self.response
        if response is None:
            response = await self._prepare()
        try:
            await response.write(data)
        except ConnectionResetError as exc:
            raise ClientGone from exc

    def _record(self, data: bytes) -> None:
        """Called with every non-empty write to the client, before it, when ``keeps_copy``:
        a subclass keeps them."""

    async def _prepare(self) -> web.StreamResponse:
        response = web.StreamResponse(status=self._status, reason=self._reason)
        response.headers.extend(self._headers)
        try:
            await response.prepare(self.request)
        except ConnectionResetError as exc:
            raise ClientGone from exc
        self.response = response
        return response

    async def _abort(self) -> None:
        """Break the connection once what was written has left the process: the error event
        reaches the client, and the body is never terminated."""
        transport = self.request.transport
        waited = 0.0
        while transport is not None and transport.get_write_buffer_size() and waited < 1.0:
            await asyncio.sleep(0.005)
            waited += 0.005
        abort(self.request)

    async def _end_body(self) -> None:
        response = self.response
        if response is None:
            response = await self._prepare()
        try:
            await response.write_eof()
        except ConnectionResetError as exc:
            raise ClientGone from exc


async def _finish_body(upstream: aiohttp.ClientResponse) -> None:
    """Read what is left of the upstream's body after its terminator (the end of the chunked
    body, usually already here), so releasing the response keeps the connection."""
    content, left = upstream.content, DRAIN_BYTES
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            while left > 0 and not content.at_eof():
                chunk = await content.readany()
                if not chunk:
                    return
                left -= len(chunk)
    except TRANSPORT_ERRORS:
        return


def broken_because(exc: BaseException, read_timeout: float | None) -> str:
    """Why an upstream read broke, in the words the client's error event gets. A timeout is
    the idle watch's or, when it fired before the watch took over, aiohttp's own."""
    if isinstance(exc, asyncio.TimeoutError):
        return silence(read_timeout)
    return f"the provider's connection broke ({type(exc).__name__})"


def _buffered(upstream: aiohttp.ClientResponse) -> bytes:
    """What aiohttp holds of the body once the connection dropped: ``readany`` raises the
    drop before handing it out, though the provider sent it (all of a short stream, when
    the process was too busy to read before the drop came). Read past the exception with
    aiohttp's own private reader; nothing where it is not there."""
    content = upstream.content
    try:
        return content._read_nowait(-1) if content._buffer else b""
    except Exception:
        return b""


def _arrived(upstream: aiohttp.ClientResponse, read: int) -> int:
    """Bytes the upstream sent, read or not.

    aiohttp raises a dropped connection before handing out what it had already buffered;
    those bytes were never relayed, but they came, so the attempt is not retry-safe.
    """
    total = getattr(upstream.content, "total_bytes", 0)
    return max(read, total if isinstance(total, int) else 0)
