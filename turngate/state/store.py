"""The contract every state store keeps (memory, SQLite, Redis): same CAS semantics.

A store holds operations: a manifest, its current DispatchState and the history of
changes. ``claim`` is the compare-and-swap the whole dispatch path rests on: for one
(conversation, revision, cancelGeneration) at most one attempt is live at a time.

It also keeps capped logs (``append_log``/``read_log``): shadow diffs, quarantined blocks,
a conversation's stored graph; each keeps its newest entries only.

Per conversation (conversations.py): its canonical turns and cancel generation
(``open_conversation``, ``conversation``, ``cancel_conversation``), the canonical CAS
(``commit_turn``: the operation's COMMIT or RECOVER and the turn, atomically), stored
responses for replay (``save_response``/``load_response``, expired on read and by
``prune``) and client idempotency keys (taken by ``claim``, atomically with the slot).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl

from turngate.errors import StateConflict
from turngate.state.conversations import (
    ClientKey,
    Conversation,
    KeyHold,
    StoredResponse,
    key_reused,
)
from turngate.state.machine import IN_FLIGHT, DispatchState, Transition, advance
from turngate.state.manifest import DispatchManifest
from turngate.state.sqlite_sync import SYNCS, Sync, sync_of

# An attempt in one of these states blocks a new claim for its (conversation, revision,
# cancel generation): bytes may be in flight, the outcome is not known, or the turn is
# canonical. After FAILED or CANCELLED the next claim allocates the next attempt.
BLOCKING: frozenset[DispatchState] = IN_FLIGHT | {DispatchState.UNKNOWN, DispatchState.COMMITTED}
# How long an operation is kept after its claim (``--operation-ttl``), unless still in flight.
DEFAULT_OPERATION_TTL = 7 * 24 * 3600.0
# Rows one prune step deletes at most, in one transaction: a claim waits behind one step at
# most (about 12 ms for 200 operations on the test machine).
PRUNE_BATCH = 200
# Bytes of answers kept for replay (``--replay-max-bytes``), every replica's on Redis.
DEFAULT_REPLAY_MAX_BYTES = 256 * 1024 * 1024
# The history detail of the LOSE that ``recover`` records.
LOST_AT_START = "in flight when the previous turngate process stopped"


@dataclass(frozen=True)
class StateChange:
    state: DispatchState
    transition: Transition | None
    at: float
    detail: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "state": str(self.state),
            "transition": None if self.transition is None else str(self.transition),
            "at": self.at,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class OperationRecord:
    manifest: DispatchManifest
    state: DispatchState
    history: tuple[StateChange, ...]
    # The provider's response handle (chatcmpl-…, msg_…, resp_…), bound once seen.
    handle: str | None = None

    @property
    def operation_id(self) -> str:
        return self.manifest.operation_id

    def to_json(self) -> dict[str, object]:
        return {
            "operationId": self.operation_id,
            "state": str(self.state),
            "handle": self.handle,
            "manifest": self.manifest.to_json(),
            "manifestDigest": self.manifest.digest,
            "history": [c.to_json() for c in self.history],
        }


class ClaimConflict(StateConflict):
    """Another attempt for the same conversation revision is live or committed."""

    rule = "dispatch_conflict"

    def __init__(self, message: str, existing: OperationRecord):
        super().__init__(message)
        self.existing = existing


def claim_slot(manifest: DispatchManifest) -> tuple[str, int, int]:
    """What ``claim`` is exclusive over: (conversation key, revision, cancel generation)."""
    return (manifest.conversation_key, manifest.conversation_revision, manifest.cancel_generation)


def claimed_record(draft: DispatchManifest, attempt: int, *, now: float) -> OperationRecord:
    """The record a winning claim stores: the stamped manifest, PREPARED then DISPATCHING."""
    state = advance(DispatchState.PREPARED, Transition.CLAIM)
    return OperationRecord(
        manifest=draft.with_attempt(attempt),
        state=state,
        history=(
            StateChange(DispatchState.PREPARED, None, now),
            StateChange(state, Transition.CLAIM, now),
        ),
    )


def claim_conflict(draft: DispatchManifest, existing: OperationRecord) -> ClaimConflict:
    if existing.operation_id == draft.operation_id:
        return ClaimConflict(f"operation '{draft.operation_id}' already exists", existing)
    key, revision, generation = claim_slot(draft)
    return ClaimConflict(
        f"conversation '{key}' revision {revision} (cancel generation {generation}) already "
        f"has attempt {existing.manifest.attempt} in {existing.state} "
        f"(operation '{existing.operation_id}')",
        existing,
    )


def check_client_key(
    key: ClientKey, hold: KeyHold | None, holder: OperationRecord | None, *, now: float
) -> None:
    """Whether a claim may take ``key``: raises ``KeyReused`` (another body) or
    ``ClaimConflict`` (its operation blocks, so the caller replays it or waits); returns
    when the key is free, expired, or names an attempt that ended without a turn."""
    if hold is None or hold.expires_at <= now:
        return
    if hold.body_digest != key.body_digest:
        raise key_reused(key, hold)
    if holder is not None and holder.state in BLOCKING:
        raise ClaimConflict(
            f"turngate: Idempotency-Key names operation '{holder.operation_id}', "
            f"which is {holder.state}",
            holder,
        )


def moved_record(
    record: OperationRecord,
    transition: Transition,
    *,
    now: float,
    handle: str | None = None,
    detail: str | None = None,
) -> OperationRecord:
    """``record`` after ``transition``, or IllegalTransition (or StateConflict on a handle)."""
    state = advance(record.state, transition)
    return dataclasses.replace(
        record,
        state=state,
        handle=bound_handle(record, handle),
        history=(*record.history, StateChange(state, transition, now, detail)),
    )


def sent_first(record: OperationRecord, sent: bool, *, now: float) -> OperationRecord:
    """``record`` after SEND when ``sent`` and it is still DISPATCHING (the ``sent`` of
    ``transition`` and ``commit_turn``); otherwise ``record`` as it is, for the next
    transition to judge."""
    if sent and record.state is DispatchState.DISPATCHING:
        return moved_record(record, Transition.SEND, now=now)
    return record


def bound_handle(record: OperationRecord, handle: str | None) -> str | None:
    """A handle is bound once: the same one again is fine, a different one is a conflict."""
    if handle is None or handle == record.handle:
        return record.handle
    if record.handle is not None:
        raise StateConflict(
            f"operation '{record.operation_id}' is bound to handle '{record.handle}', "
            f"not '{handle}'",
            rule="handle_conflict",
        )
    return handle


class StateStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool:
        """True when the store can take writes (``/readyz``)."""
        ...

    async def claim(
        self, draft: DispatchManifest, *, now: float, client_key: ClientKey | None = None
    ) -> OperationRecord:
        """The dispatch CAS.

        For ``draft``'s (conversation key, revision, cancel generation): when no earlier
        attempt is in flight, UNKNOWN or COMMITTED, allocate the next attempt generation,
        persist the manifest (with its stamped idempotency key) and record PREPARED then
        DISPATCHING, atomically. Otherwise raise ``ClaimConflict`` carrying that attempt.
        Of many concurrent claims for one key exactly one wins.

        With ``client_key``, in the same step: ``check_client_key`` against what the key
        holds, and the key is taken for the new operation until its ``expires_at``.
        """
        ...

    async def transition(
        self,
        operation_id: str,
        transition: Transition,
        *,
        now: float,
        handle: str | None = None,
        detail: str | None = None,
        sent: bool = False,
    ) -> OperationRecord:
        """Apply ``transition`` to the operation's current state, atomically.

        Raises ``IllegalTransition`` when the machine forbids it from the current state
        (so two racing writers cannot both move one operation), ``KeyError`` when the
        operation does not exist. ``handle`` binds the provider's response handle.
        ``sent``: an operation still DISPATCHING moves SEND first, in the same write
        (``sent_first``; a stream's STREAM carries the SEND not yet written).
        """
        ...

    async def get(self, operation_id: str) -> OperationRecord | None: ...

    async def live_attempt(
        self, key: str, revision: int, cancel_generation: int
    ) -> OperationRecord | None:
        """The attempt holding the slot (conversation key, revision, cancel generation): the
        one a claim of it would meet (``BLOCKING``), or None."""
        ...

    async def recover(self, *, now: float) -> list[OperationRecord]:
        """At start: every operation left DISPATCHING, SENT or STREAMING becomes UNKNOWN."""
        ...

    async def append_log(self, kind: str, entry: dict[str, Any], *, now: float, keep: int) -> None:
        """Add ``entry`` (JSON-able) to the capped log ``kind``, atomically.

        The log keeps the newest ``keep`` entries (at least 1); older ones are dropped. Logs
        of different kinds are independent (``shadow``: shadow diffs; ``quarantine``: late
        blocks; ``graph:{conversation}``: a conversation's stored graph, kept 1).
        """
        ...

    async def read_log(self, kind: str, *, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` entries of the log ``kind``, newest first; [] for an unknown kind."""
        ...

    # --- conversations (conversations.py) ---

    async def open_conversation(self, key: str, history: list[str], *, now: float) -> Conversation:
        """The conversation ``key``; created first, adopting ``history`` (the digests of
        its assistant turns) as its canonical turns, if it does not exist. Atomic."""
        ...

    async def conversation(self, key: str) -> Conversation | None: ...

    async def cancel_conversation(self, key: str, *, now: float) -> Conversation:
        """Move the cancel generation on, then CANCEL the conversation's attempts that are
        in flight or UNKNOWN: their turns can never become canonical."""
        ...

    async def conversation_operations(self, key: str, *, limit: int) -> list[OperationRecord]:
        """The conversation's latest ``limit`` operations, in the order they were claimed
        (the newest last): what a long conversation's inspection and cancel need."""
        ...

    async def commit_turn(
        self,
        operation_id: str,
        *,
        digest: str,
        now: float,
        handle: str | None = None,
        response: StoredResponse | None = None,
        sent: bool = False,
        continues: bool = False,
    ) -> OperationRecord:
        """The canonical CAS, atomically: COMMIT (RECOVER when UNKNOWN) the operation, make
        its turn (``digest``) canonical for its revision (``with_turn``) and keep
        ``response`` for replay. ``IllegalTransition`` when the attempt no longer holds its
        slot (taken over, settled, cancelled), ``TurnConflict`` when the conversation
        refuses the turn, ``KeyError`` for an unknown operation; nothing is written then.
        ``sent``: an operation still DISPATCHING moves SEND first, in the same write (its
        answer came back before SEND was written on its own; ``sent_first``). ``continues``:
        the turn goes on with the turn before it (``CanonicalTurn.continues``)."""
        ...

    async def save_response(
        self, operation_id: str, response: StoredResponse, *, now: float
    ) -> None:
        """Keep (or replace) the response replayed for ``operation_id``."""
        ...

    async def load_response(self, operation_id: str, *, now: float) -> StoredResponse | None:
        """The stored response, or None when there is none or it expired."""
        ...

    async def unknown_operations(self, *, limit: int) -> list[OperationRecord]:
        """Up to ``limit`` UNKNOWN operations, for the recovery task."""
        ...

    async def prune(self, *, now: float) -> int:
        """Drop expired responses and client keys, and what outlived ``operation_ttl``:
        operations claimed that long ago and no longer in flight (with their history), the
        conversations left without operations and unchanged that long, and log entries that
        old (Redis expires these keys itself). Then the answers kept for replay that expire
        first go while they hold more than ``replay_max_bytes``. How many went."""
        ...


def first_to_drop(answers: Iterable[tuple[str, int]], excess: int) -> list[str]:
    """The operation ids of ``answers`` (id and size, soonest to expire first) whose answers
    go so that ``excess`` bytes are freed: ``--replay-max-bytes`` in every store. Reads
    ``answers`` no further than it needs (a cursor, a batch)."""
    gone: list[str] = []
    for operation_id, size in answers:
        if excess <= 0:
            break
        gone.append(operation_id)
        excess -= size
    return gone


def check_log_args(kind: str, *, keep: int | None = None, limit: int | None = None) -> None:
    """The arguments every store refuses alike."""
    if not kind:
        raise ValueError("a log needs a kind")
    if keep is not None and keep < 1:
        raise ValueError(f"a log keeps at least 1 entry, not {keep}")
    if limit is not None and limit < 0:
        raise ValueError(f"cannot read {limit} entries")


def open_store(
    url: str,
    *,
    operation_ttl: float | None = DEFAULT_OPERATION_TTL,
    replay_max_bytes: int | None = DEFAULT_REPLAY_MAX_BYTES,
) -> StateStore:
    """A store for ``--state``: ``sqlite:///path``, ``memory://`` or ``redis://…``; each keeps
    an operation ``operation_ttl`` seconds (None: forever) and at most ``replay_max_bytes`` of
    answers for replay (None: no limit)."""
    kind, sqlite = check_state_url(url)
    if kind == "memory":
        from turngate.state.memory import MemoryStore

        return MemoryStore(operation_ttl=operation_ttl, replay_max_bytes=replay_max_bytes)
    if sqlite is not None:
        from turngate.state.sqlite import SQLiteStore

        path, sync = sqlite
        return SQLiteStore(
            path, sync=sync, operation_ttl=operation_ttl, replay_max_bytes=replay_max_bytes
        )
    from turngate.state.redis import RedisStore

    store: StateStore = RedisStore.from_url(
        url, operation_ttl=operation_ttl, replay_max_bytes=replay_max_bytes
    )
    return store


def check_state_url(
    url: str,
) -> tuple[Literal["memory", "sqlite", "redis"], tuple[str, Sync] | None]:
    """The kind of store ``url`` names, and for SQLite its path and ``sync``; a ValueError
    that says what is wrong for anything else (checked at start, before serving)."""
    if url.startswith("memory:"):
        return "memory", None
    if url.startswith("sqlite:"):
        path, _, query = url.removeprefix("sqlite://").partition("?")
        options = dict(parse_qsl(query, keep_blank_values=True))
        path = path.removeprefix("/") if path.startswith("/./") else path
        if options.keys() <= {"sync"}:
            with suppress(ValueError):
                return "sqlite", (path, sync_of(options.get("sync", "full")))
        raise ValueError(
            f"unknown state URL {url!r}: the SQLite file takes one option, "
            f"sync={' or '.join(SYNCS)} (sqlite:///PATH?sync=normal)"
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        return "redis", None
    raise ValueError(f"unknown state URL {url!r}: use sqlite:///PATH, memory:// or redis://HOST")
