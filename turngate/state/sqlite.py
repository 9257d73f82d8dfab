"""The embedded state store: one SQLite file, shared safely by coroutines and by processes.

Every call runs on one worker thread that owns the connection, so the event loop never
waits on the disk and this process's writes are serialized. Every write is a
``BEGIN IMMEDIATE`` transaction: it takes the file's write lock *before* reading, so the
claim CAS also holds against other processes using the same file (they wait up to the
busy timeout for the lock). Claims, transitions and canonical commits queued together are
committed together, each in its own savepoint, with one fsync (sqlite_worker.py).

Journal: WAL, so readers never block the writer and a killed process loses nothing it
committed. Durability is chosen per write (``_NO_FSYNC``). The claim, every transition
that settles or loses an operation, and every other write, is fsynced before it returns
(``synchronous=FULL``): an undone claim is an attempt whose bytes may have left while the
file says it never existed, so the next start would send the same attempt again instead
of finding it UNKNOWN; an undone commit would refuse the client's next request, whose
history holds the turn. SEND, STREAM and BIND are written with ``synchronous=NORMAL``: a
power cut (a process crash loses nothing either way) may undo them, which leaves the
operation DISPATCHING, SENT or STREAMING, in flight all the same, so the next start still
moves it to UNKNOWN.
The next FULL commit on the file makes them durable too (one WAL, fsynced whole).
A store opened with ``sync="normal"`` (``sqlite:///PATH?sync=normal``) writes everything
at NORMAL: nothing waits for the disk, and a process crash still loses nothing
(sqlite_sync.py).
docs/performance.md has the measurements.

The schema, its migrations and the transaction every write runs in: sqlite_schema.py.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import orjson

from turngate.errors import StoreUnavailable
from turngate.state import sqlite_retention as retention
from turngate.state import sqlite_turns as turns
from turngate.state.conversations import ClientKey, Conversation, StoredResponse
from turngate.state.machine import IN_FLIGHT, DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.sqlite_schema import enter_wal, migrate, transaction
from turngate.state.sqlite_sync import Level, StateConnection, Sync, sync_of, synchronous
from turngate.state.sqlite_worker import Worker
from turngate.state.store import (
    BLOCKING,
    DEFAULT_OPERATION_TTL,
    DEFAULT_REPLAY_MAX_BYTES,
    LOST_AT_START,
    PRUNE_BATCH,
    OperationRecord,
    StateChange,
    check_log_args,
    claim_conflict,
    claim_slot,
    claimed_record,
    moved_record,
    sent_first,
)

P = ParamSpec("P")
R = TypeVar("R")

ABANDONED_CLAIM = "claim abandoned: its caller was cancelled before anything was sent"


class SQLiteStore:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        sync: Sync = "full",
        operation_ttl: float | None = DEFAULT_OPERATION_TTL,
        replay_max_bytes: int | None = DEFAULT_REPLAY_MAX_BYTES,
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        # Seconds an operation is kept after its claim (None: for ever), and bytes of answers
        # kept for replay (None: no limit); sqlite_retention.py.
        self.operation_ttl = operation_ttl
        self.replay_max_bytes = replay_max_bytes
        # "normal": no write waits for the disk (sqlite_sync.py).
        self.sync = sync_of(sync)
        self._worker: Worker | None = None
        # Created, used and closed on the worker thread only.
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        if self._worker is not None:
            return
        worker = Worker("turngate-sqlite", alone=self._on_worker, connection=self._connection)
        try:
            await asyncio.wrap_future(worker.submit(self._connect))
        except BaseException:
            worker.stop()
            raise
        self._worker = worker

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        # Jobs queued before this one (FIFO, one thread) still run on the open connection.
        await asyncio.wrap_future(worker.submit(self._disconnect))
        worker.stop()

    async def ping(self) -> bool:
        try:
            return await self._run(_can_write)
        except StoreUnavailable:
            return False

    async def claim(
        self, draft: DispatchManifest, *, now: float, client_key: ClientKey | None = None
    ) -> OperationRecord:
        job = self._write("FULL", _claim, draft, now, client_key)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            # A running job cannot be stopped and may still win. Its caller is gone, so
            # no byte will ever be sent for it: fail it rather than block the slot.
            job.add_done_callback(lambda done: self._fail_abandoned(done, now))
            raise

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
        level: Level = "NORMAL" if transition in _NO_FSYNC else "FULL"
        job = self._write(
            level,
            _transition,
            operation_id,
            transition,
            now,
            handle=handle,
            detail=detail,
            sent=sent,
        )
        return await asyncio.wrap_future(job)

    async def get(self, operation_id: str) -> OperationRecord | None:
        return await self._run(_get, operation_id)

    async def live_attempt(
        self, key: str, revision: int, cancel_generation: int
    ) -> OperationRecord | None:
        return await self._run(_live_attempt, (key, revision, cancel_generation))

    async def recover(self, *, now: float) -> list[OperationRecord]:
        return await self._run(_recover, now)

    async def append_log(self, kind: str, entry: dict[str, Any], *, now: float, keep: int) -> None:
        check_log_args(kind, keep=keep)
        await self._run(_append_log, kind, orjson.dumps(entry).decode(), now, keep)

    async def read_log(self, kind: str, *, limit: int) -> list[dict[str, Any]]:
        check_log_args(kind, limit=limit)
        return await self._run(_read_log, kind, limit)

    # --- conversations (sqlite_turns.py) ---

    async def open_conversation(self, key: str, history: list[str], *, now: float) -> Conversation:
        return await self._run(turns.open_conversation, _ACCESS, key, history=history, now=now)

    async def conversation(self, key: str) -> Conversation | None:
        return await self._run(turns.get_conversation, _ACCESS, key)

    async def cancel_conversation(self, key: str, *, now: float) -> Conversation:
        return await self._run(turns.cancel_conversation, _ACCESS, key, now=now)

    async def conversation_operations(self, key: str, *, limit: int) -> list[OperationRecord]:
        return await self._run(turns.conversation_operations, _ACCESS, key, limit=limit)

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
        job = self._write(
            "FULL",
            turns.commit_turn,
            _ACCESS,
            operation_id,
            digest=digest,
            now=now,
            handle=handle,
            response=response,
            sent=sent,
            continues=continues,
        )
        return await asyncio.wrap_future(job)

    async def save_response(
        self, operation_id: str, response: StoredResponse, *, now: float
    ) -> None:
        await self._run(turns.save_response, _ACCESS, operation_id, response)

    async def load_response(self, operation_id: str, *, now: float) -> StoredResponse | None:
        return await self._run(turns.load_response, _ACCESS, operation_id, now=now)

    async def unknown_operations(self, *, limit: int) -> list[OperationRecord]:
        return await self._run(turns.unknown_operations, _ACCESS, limit=limit)

    async def prune(self, *, now: float) -> int:
        pruned = await self._run(turns.prune, _ACCESS, now=now)
        if self.operation_ttl is not None:
            pruned += await self._forget_before(now - self.operation_ttl)
        if self.replay_max_bytes is not None:
            pruned += await self._run(
                retention.cap_responses, _ACCESS, max_bytes=self.replay_max_bytes
            )
        return pruned

    async def _forget_before(self, before: float) -> int:
        """Operations, then conversations, then log entries older than ``before``, a step
        (one transaction) at a time: a claim waits behind one step at most."""
        pruned = 0
        after: int | None = 0
        while after is not None:
            deleted, after = await self._run(
                retention.prune_operations, _ACCESS, before=before, after=after, limit=PRUNE_BATCH
            )
            pruned += deleted
        since: float | None = float("-inf")
        while since is not None:
            deleted, since = await self._run(
                retention.prune_conversations,
                _ACCESS,
                before=before,
                after=since,
                limit=PRUNE_BATCH,
            )
            pruned += deleted
        while deleted := await self._run(
            retention.prune_logs, _ACCESS, before=before, limit=PRUNE_BATCH
        ):
            pruned += deleted
        return pruned

    async def _run(
        self,
        call: Callable[Concatenate[sqlite3.Connection, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        return await asyncio.wrap_future(self._submit(call, *args, **kwargs))

    def _submit(
        self,
        call: Callable[Concatenate[sqlite3.Connection, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Future[R]:
        worker = self._worker
        if worker is None:
            raise StoreUnavailable(f"the state store {self.path} is not open")

        def job() -> R:
            return self._on_worker(call, *args, **kwargs)

        return worker.submit(job)

    def _write(
        self,
        level: Level,
        call: Callable[Concatenate[sqlite3.Connection, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> Future[R]:
        """A write that may be committed with others queued beside it (sqlite_worker.py);
        ``level`` is the ``synchronous`` level ``call`` sets for itself."""
        worker = self._worker
        if worker is None:
            raise StoreUnavailable(f"the state store {self.path} is not open")
        return worker.submit_write(level, call, *args, **kwargs)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreUnavailable(f"the state store {self.path} is not open")
        return self._db

    def _on_worker(
        self,
        call: Callable[Concatenate[sqlite3.Connection, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        if self._db is None:
            raise StoreUnavailable(f"the state store {self.path} is not open")
        try:
            return call(self._db, *args, **kwargs)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"state file {self.path}: {exc}") from exc

    def _fail_abandoned(self, claim_job: Future[OperationRecord], now: float) -> None:
        if claim_job.cancelled() or claim_job.exception() is not None:
            return
        operation_id = claim_job.result().operation_id
        try:
            self._submit(_transition, operation_id, Transition.FAIL, now, detail=ABANDONED_CLAIM)
        except (StoreUnavailable, RuntimeError):
            return  # closed meanwhile: the next start's recover() makes it UNKNOWN

    def _connect(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                factory=StateConnection,
            )
            db.fsync = self.sync == "full"
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot open the state file {self.path}: {exc}") from exc
        try:
            mode = enter_wal(db, self.busy_timeout)
            if mode != "wal":
                raise StoreUnavailable(
                    f"cannot open the state file {self.path}: its journal stays {mode!r}, "
                    "WAL is required (is it on a network file system?)"
                )
            synchronous(db, "FULL")
            db.execute("PRAGMA foreign_keys = ON")
            migrate(db)
        except sqlite3.Error as exc:
            db.close()
            raise StoreUnavailable(f"cannot open the state file {self.path}: {exc}") from exc
        except BaseException:
            db.close()
            raise
        self._db = db

    def _disconnect(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()


def _can_write(db: sqlite3.Connection) -> bool:
    db.execute("BEGIN IMMEDIATE")
    db.execute("ROLLBACK")
    return True


def _claim(
    db: sqlite3.Connection, draft: DispatchManifest, now: float, client_key: ClientKey | None
) -> OperationRecord:
    synchronous(db, "FULL")
    with transaction(db, "IMMEDIATE"):
        if client_key is not None:
            turns.take_client_key(db, client_key, _load, now=now, operation_id=None)
        same_id = _load(db, draft.operation_id)
        if same_id is not None:
            raise claim_conflict(draft, same_id)
        rows: list[tuple[str, str, int]] = []
        if draft.conversation_id is not None:
            # Without a conversation the slot is keyed by the operation's own id, just
            # found free.
            rows = db.execute(
                "SELECT operation_id, state, attempt FROM operations WHERE conversation_key = ?"
                " AND conversation_revision = ? AND cancel_generation = ? ORDER BY attempt",
                claim_slot(draft),
            ).fetchall()
        for operation_id, state, _attempt in rows:
            if _state(state) in BLOCKING:
                raise claim_conflict(draft, _require(db, operation_id))
        attempt = max((a for _, _, a in rows), default=0) + 1
        claimed = claimed_record(draft, attempt, now=now)
        _insert(db, claimed)
        if client_key is not None:
            turns.take_client_key(db, client_key, _load, now=now, operation_id=claimed.operation_id)
    return claimed


# Transitions whose loss in a power cut leaves the operation in flight, as it was before
# them: recover() finds it UNKNOWN either way, so they need not wait for the disk. (An
# undone BIND also forgets the handle: a Responses attempt is then settled at its deadline
# instead of being looked up by its handle.)
_NO_FSYNC = frozenset({Transition.SEND, Transition.STREAM, Transition.BIND})


def _transition(
    db: sqlite3.Connection,
    operation_id: str,
    transition: Transition,
    now: float,
    *,
    handle: str | None = None,
    detail: str | None = None,
    sent: bool = False,
) -> OperationRecord:
    synchronous(db, "NORMAL" if transition in _NO_FSYNC else "FULL")
    with transaction(db, "IMMEDIATE"):
        loaded = _load(db, operation_id)
        if loaded is None:
            raise KeyError(operation_id)
        record = sent_first(loaded, sent, now=now)
        moved = moved_record(record, transition, now=now, handle=handle, detail=detail)
        _save_move(db, loaded, moved)
    return moved


def _get(db: sqlite3.Connection, operation_id: str) -> OperationRecord | None:
    with transaction(db, "DEFERRED"):
        return _load(db, operation_id)


def _live_attempt(db: sqlite3.Connection, slot: tuple[str, int, int]) -> OperationRecord | None:
    with transaction(db, "DEFERRED"):
        rows = db.execute(
            "SELECT operation_id, state FROM operations WHERE conversation_key = ?"
            " AND conversation_revision = ? AND cancel_generation = ? ORDER BY attempt DESC",
            slot,
        ).fetchall()
        for operation_id, state in rows:
            if _state(state) in BLOCKING:
                return _require(db, operation_id)
    return None


def _recover(db: sqlite3.Connection, now: float) -> list[OperationRecord]:
    in_flight = sorted(IN_FLIGHT)
    marks = ", ".join("?" * len(in_flight))
    moved = []
    synchronous(db, "FULL")
    with transaction(db, "IMMEDIATE"):
        rows = db.execute(
            f"SELECT operation_id FROM operations WHERE state IN ({marks}) ORDER BY operation_id",
            in_flight,
        ).fetchall()
        for (operation_id,) in rows:
            record = _require(db, operation_id)
            lost = moved_record(record, Transition.LOSE, now=now, detail=LOST_AT_START)
            _save_move(db, record, lost)
            moved.append(lost)
    return moved


def _append_log(db: sqlite3.Connection, kind: str, entry: str, now: float, keep: int) -> None:
    synchronous(db, "FULL")
    with transaction(db, "IMMEDIATE"):
        db.execute("INSERT INTO logs (kind, at, entry) VALUES (?, ?, ?)", (kind, now, entry))
        # The newest row has the highest id (it is never dropped, so ids only grow).
        db.execute(
            "DELETE FROM logs WHERE kind = ? AND id <="
            " (SELECT id FROM logs WHERE kind = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (kind, kind, keep),
        )


def _read_log(db: sqlite3.Connection, kind: str, limit: int) -> list[dict[str, Any]]:
    with transaction(db, "DEFERRED"):
        rows = db.execute(
            "SELECT id, entry FROM logs WHERE kind = ? ORDER BY id DESC LIMIT ?", (kind, limit)
        ).fetchall()
    try:
        return [orjson.loads(entry) for _id, entry in rows]
    except orjson.JSONDecodeError as exc:
        raise StoreUnavailable(f"a {kind!r} log entry in the state file cannot be read") from exc


def _insert(db: sqlite3.Connection, record: OperationRecord) -> None:
    manifest = record.manifest
    db.execute(
        "INSERT INTO operations (operation_id, conversation_key, conversation_revision,"
        " cancel_generation, attempt, state, handle, manifest) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *(manifest.operation_id, *claim_slot(manifest), manifest.attempt),
            str(record.state),
            record.handle,
            manifest.canonical.decode(),
        ),
    )
    _insert_changes(db, record.operation_id, 0, record.history)


def _save_move(db: sqlite3.Connection, before: OperationRecord, after: OperationRecord) -> None:
    """``after`` over ``before`` as read: its state and handle, and every step of history it
    added (one, or a SEND that rode along and the transition after it)."""
    updated = db.execute(
        "UPDATE operations SET state = ?, handle = ? WHERE operation_id = ? AND state = ?",
        (str(after.state), after.handle, after.operation_id, str(before.state)),
    ).rowcount
    # Cannot fail while this transaction holds the write lock; a guard, not a code path.
    assert updated == 1, f"operation {after.operation_id} moved under the write lock"
    start = len(before.history)
    _insert_changes(db, after.operation_id, start, after.history[start:])


def _insert_changes(
    db: sqlite3.Connection, operation_id: str, start: int, changes: Sequence[StateChange]
) -> None:
    """``changes`` as history rows ``start``, ``start + 1``, ...: one statement for all."""
    if not changes:
        return
    values: list[str | int | float | None] = []
    for seq, change in enumerate(changes, start):
        transition = None if change.transition is None else str(change.transition)
        values += (operation_id, seq, str(change.state), transition, change.at, change.detail)
    db.execute(_history_insert(len(changes)), values)


@functools.cache
def _history_insert(rows: int) -> str:
    return (
        "INSERT INTO history (operation_id, seq, state, transition, at, detail) VALUES "
        + ", ".join(["(?, ?, ?, ?, ?, ?)"] * rows)
    )


def _require(db: sqlite3.Connection, operation_id: str) -> OperationRecord:
    record = _load(db, operation_id)
    assert record is not None, f"operation {operation_id} vanished inside a transaction"
    return record


def _load(db: sqlite3.Connection, operation_id: str) -> OperationRecord | None:
    # One statement: the operation's row repeated beside each step of its history.
    rows = db.execute(
        "SELECT o.state, o.handle, o.manifest, h.state, h.transition, h.at, h.detail"
        " FROM operations AS o LEFT JOIN history AS h ON h.operation_id = o.operation_id"
        " WHERE o.operation_id = ? ORDER BY h.seq",
        (operation_id,),
    ).fetchall()
    if not rows:
        return None
    state, handle, manifest = rows[0][:3]
    try:
        return OperationRecord(
            manifest=DispatchManifest.from_json(orjson.loads(manifest)),
            state=_state(state),
            history=tuple(
                StateChange(_state(s), None if t is None else Transition(t), at, detail)
                for _, _, _, s, t, at, detail in rows
                if s is not None
            ),
            handle=handle,
        )
    except ValueError as exc:  # orjson, pydantic and enum errors are all ValueErrors
        raise StoreUnavailable(
            f"operation {operation_id} in the state file cannot be read: {exc}"
        ) from exc


_ACCESS = turns.Access(transaction=transaction, load=_load, save=_save_move)


def _state(name: str) -> DispatchState:
    try:
        return DispatchState(name)
    except ValueError as exc:
        raise StoreUnavailable(f"the state file holds an unknown state {name!r}") from exc
