"""Committing an answer with its canonical turn, keeping it, and replaying it to a retry.

    enforced answer --commit_turn--> COMMITTED + canonical turn + stored response (one write)
    retry of the same request (same caller)   --> the stored response, no upstream call

What is kept: a non-streamed answer as the upstream's body, byte for byte, in the commit's
own store write; a streamed one as the bytes turngate relayed to the client (marks and
all), recorded by ``RecordedStream`` and kept right after the stream ended, so a retry
arriving in between gets 409 with ``Retry-After``. A replay is served as it was first
served: a stream as a stream, a body as a body; ``Turngate-Replay: 1`` tells it apart.
Kept for ``--replay-ttl`` (default 24 h). A stream longer than ``MAX_RECORDED`` is not
kept: its retries get 409. Only an answer a retry can reach is kept (``Attempt.keep_answer``
in attempt.py): a request with a conversation id or an Idempotency-Key; one with neither is
its own operation, and nothing of its answer is written or recorded.

Client keys: ``Idempotency-Key`` (any printable value up to 255 characters) is scoped by the
caller's credential hash, so one API key never reaches another's answer, and bound to the
digest of the method, path and body it first came with (``idempotency_key_reused`` for
another body).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

import orjson
from aiohttp import web

from turngate.errors import (
    BadRequestBody,
    IllegalTransition,
    StateConflict,
    TurngateError,
)
from turngate.graph.codec import digest_bytes, digest_of
from turngate.graph.history import turn_digest
from turngate.graph.model import AnyBlock, ApiName
from turngate.graph.turn import AssistantTurn
from turngate.proxy.replay_stream import responses_events
from turngate.proxy.services import Services
from turngate.proxy.stream import AttemptSuperseded, StreamEnd, StreamOwner, StreamSession
from turngate.state.conversations import ClientKey, StoredResponse, TurnConflict
from turngate.state.machine import Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.store import OperationRecord

log = logging.getLogger("turngate.proxy")

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAY_HEADER = "Turngate-Replay"
MAX_KEY_LENGTH = 255
MAX_RECORDED = 16 * 1024 * 1024


class ReplayUnavailable(StateConflict):
    """The revision is committed, but its answer cannot be replayed (expired, not kept)."""

    rule = "dispatch_conflict"


def client_key(
    request: web.Request, raw: bytes, credential: str | None, *, ttl: float, now: float
) -> ClientKey | None:
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None or value == "":
        return None
    if len(value) > MAX_KEY_LENGTH or not value.isprintable():
        raise BadRequestBody(
            f"turngate: {IDEMPOTENCY_HEADER} must be at most {MAX_KEY_LENGTH} printable characters",
            rule="invalid_idempotency_key",
        )
    scope = digest_of(["idempotency-key", credential or "", value])
    body = digest_bytes(b"\x00".join((request.method.encode(), request.path.encode(), raw)))
    return ClientKey(scope, body, now + ttl)


def same_request(existing: DispatchManifest, draft: DispatchManifest) -> bool:
    """Whether a retry may be answered with ``existing``'s answer: same caller (credential
    hash), same route and the same bytes to send."""
    return (
        existing.credential_hash == draft.credential_hash
        and existing.route == draft.route
        and existing.request_digest == draft.request_digest
    )


# --- the canonical commit -----------------------------------------------------------------


async def record_commit(
    services: Services,
    manifest: DispatchManifest,
    turn: AssistantTurn,
    *,
    enforced: bool,
    response: StoredResponse | None = None,
    sent: bool = False,
    continues: bool = False,
) -> OperationRecord:
    """COMMIT: with the canonical turn (and ``response``) when enforced. A shadowed request
    only observes: a plain transition, no turn, nothing kept for replay. ``sent``: SEND is
    written in the same write, first (an enforced answer back before SEND was written).
    ``continues``: the turn goes on with the one before it (a paused turn sent back)."""
    now = services.clock()
    write = functools.partial(
        _commit,
        services,
        manifest,
        turn,
        enforced=enforced,
        response=response,
        now=now,
        sent=sent,
        continues=continues,
    )
    try:
        return await write()
    except (IllegalTransition, TurnConflict):
        # The canonical CAS lost: the attempt no longer holds its slot, or its revision has
        # a turn already (counted here, not in the retried write below, which a commit that
        # had landed would also see refused).
        if enforced:
            services.telemetry.cas_conflict(manifest.api, "commit")
        raise
    except asyncio.CancelledError:
        # Its handler was cancelled (the client gone), maybe before the store took the write:
        # record it anyway, then stay cancelled. A commit that had landed is refused.
        services.in_background(quietly(write()))
        raise


async def quietly(write: Awaitable[object]) -> None:
    """A store write retried after its caller was cancelled; refused if it had landed."""
    try:
        await write
    except Exception as exc:
        log.debug("retried write not needed or not done: %s", type(exc).__name__)


async def _commit(
    services: Services,
    manifest: DispatchManifest,
    turn: AssistantTurn,
    *,
    enforced: bool,
    response: StoredResponse | None,
    now: float,
    sent: bool = False,
    continues: bool = False,
) -> OperationRecord:
    # The provider holds the reply's calls, whatever this write becomes: a request chained to
    # it must answer them (replies.py). Shadowed too, so that the report names such requests.
    services.replies.committed(manifest.api, turn, manifest.credential_hash)
    if not enforced:
        assert not sent, "a shadowed commit is a plain transition: SEND goes on its own"
        return await services.store.transition(
            manifest.operation_id, Transition.COMMIT, now=now, handle=turn.handle
        )
    return await services.store.commit_turn(
        manifest.operation_id,
        digest=turn_digest(turn.blocks),
        now=now,
        handle=turn.handle,
        response=response,
        sent=sent,
        continues=continues,
    )


class Committer(Protocol):
    """The attempt whose answer is committed (attempt.py)."""

    services: Services
    manifest: DispatchManifest
    enforced: bool
    open: bool
    # The answer goes on with the committed turn the request ends with (a paused turn).
    continues: bool

    @property
    def turn_prefix(self) -> tuple[AnyBlock, ...]:
        """What the canonical turn starts with before the answer: the assistant run an
        Anthropic request ends with (a prefill, or a paused turn sent back)."""
        ...

    @property
    def keep_answer(self) -> bool: ...

    async def quarantine(self, entry: dict[str, Any]) -> None: ...


def continued(owner: Committer, turn: AssistantTurn) -> AssistantTurn:
    """The turn as the conversation keeps it: after the run it continues, if any."""
    prefix = owner.turn_prefix
    return dataclasses.replace(turn, blocks=prefix + turn.blocks) if prefix else turn


async def commit_streamed(owner: Committer, turn: AssistantTurn) -> None:
    """The commit a stream ends with (stream.py asks its attempt); raises when refused."""
    record = await record_commit(
        owner.services,
        owner.manifest,
        continued(owner, turn),
        enforced=owner.enforced,
        continues=owner.continues,
    )
    _observed(owner, record)


async def commit_answer(
    owner: Committer,
    turn: AssistantTurn,
    status: int,
    content_type: str,
    data: bytes,
    *,
    sent: bool = False,
) -> TurngateError | None:
    """Commit a non-streamed answer, kept for replay in the same write when the attempt keeps
    its answer (``keep_answer``). Returns the error the client gets instead when the store
    refuses the turn (the attempt was cancelled or taken over): the answer is then
    quarantined, never delivered. A store that fails answers None: the client's answer
    never waits on a broken store (the operation stays in flight and the next start makes
    it UNKNOWN)."""
    owner.open = False
    services, manifest = owner.services, owner.manifest
    kept = None
    if owner.keep_answer:
        expires_at = services.clock() + services.settings.replay_ttl
        kept = StoredResponse(status, content_type, data, False, expires_at)
    try:
        record = await record_commit(
            services,
            manifest,
            continued(owner, turn),
            enforced=owner.enforced,
            response=kept,
            sent=sent,
            continues=owner.continues,
        )
    except (IllegalTransition, StateConflict) as exc:
        log.warning("answer of %s not committed: %s", manifest.operation_id, exc)
        await owner.quarantine(
            {
                "reason": str(exc),
                "handle": turn.handle,
                "turnDigest": turn_digest(turn.blocks),
                "blocks": [block.kind for block in turn.blocks],
            }
        )
        return AttemptSuperseded(
            "turngate: this attempt is no longer the live one for its conversation revision; "
            "its answer is not committed"
        )
    except Exception as exc:
        log.error("commit of %s not recorded: %s", manifest.operation_id, type(exc).__name__)
        return None
    _observed(owner, record, sent=sent)
    return None


def _observed(owner: Committer, record: OperationRecord, *, sent: bool = False) -> None:
    """Tell the attempt's telemetry observer (when it has one) about the commit, and the SEND
    written with it."""
    observer = getattr(owner, "observer", None)
    if observer is not None:
        observer.recorded(record, sent=sent)


# --- streams --------------------------------------------------------------------------------


class RecordedStream(StreamSession):
    """A stream session that records what it writes to the client, to keep it for replay."""

    keeps_copy = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded: bytearray | None = bytearray()
        # The operation whose commit ended the stream cleanly.
        self.committed_by: str | None = None

    def _record(self, data: bytes) -> None:
        recorded = self.recorded
        if recorded is not None:
            if len(recorded) + len(data) > MAX_RECORDED:
                self.recorded = None
            else:
                recorded += data

    async def relay_attempt(
        self, owner: StreamOwner, upstream: Any, head: bytes = b""
    ) -> StreamEnd:
        end = await super().relay_attempt(owner, upstream, head)
        if end is StreamEnd.COMMITTED and not self.plan.observe_only:
            self.committed_by = owner.headers["Turngate-Operation-Id"]
        return end

    def kept(self, *, expires_at: float) -> StoredResponse | None:
        response = self.response
        if self.committed_by is None or self.recorded is None or response is None:
            return None
        content_type = response.headers.get("Content-Type", "text/event-stream")
        return StoredResponse(response.status, content_type, bytes(self.recorded), True, expires_at)


async def keep_streamed(services: Services, stream: StreamSession | None) -> None:
    """After a streamed answer committed and ended: keep what the client got, for replay."""
    if not isinstance(stream, RecordedStream) or stream.committed_by is None:
        return
    now = services.clock()
    kept = stream.kept(expires_at=now + services.settings.replay_ttl)
    if kept is None:
        log.warning("stream of %s too long to keep for replay", stream.committed_by)
        return
    try:
        await services.store.save_response(stream.committed_by, kept, now=now)
    except Exception as exc:
        log.error("answer of %s not kept for replay: %s", stream.committed_by, type(exc).__name__)


# --- replay -------------------------------------------------------------------------------


def replay_response(
    api: ApiName, record: OperationRecord, stored: StoredResponse, *, stream: bool
) -> web.Response:
    """The committed answer again, as the retry asked for it (a stream or a body)."""
    body, content_type = stored.body, stored.content_type
    if stored.streamed != stream:
        if stream and api == "openai_responses":
            body, content_type = responses_events(orjson.loads(stored.body)), "text/event-stream"
        else:
            raise ReplayUnavailable(
                f"turngate: operation '{record.operation_id}' committed this revision, but its "
                f"answer was kept {'streamed' if stored.streamed else 'whole'} and cannot be "
                "replayed in the form asked for"
            )
    headers = {
        "Content-Type": content_type,
        **operation_headers(record.manifest),
        REPLAY_HEADER: "1",
    }
    return web.Response(status=stored.status, body=body, headers=headers)


def operation_headers(manifest: DispatchManifest) -> dict[str, str]:
    """The headers naming the operation an answer belongs to."""
    return {
        "Turngate-Operation-Id": manifest.operation_id,
        "Turngate-Manifest-Digest": manifest.digest,
        "Turngate-Attempt": str(manifest.attempt),
    }
