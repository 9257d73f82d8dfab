"""The SQLite store's conversation tables (migration 3): canonical turns, cancel generations,
stored responses and client keys. Worker-thread functions, as in sqlite.py: each write is one
``BEGIN IMMEDIATE`` transaction, fsynced (``synchronous=FULL``) before it returns, since a
lost commit would refuse the client's next history and a lost cancel would let a stopped
generation commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal

from turngate.state.conversations import (
    CANCELLABLE,
    CANCELLED_DETAIL,
    CanonicalTurn,
    ClientKey,
    Conversation,
    KeyHold,
    StoredResponse,
    adopted,
    cancelled,
    commit_transition,
    with_turn,
)
from turngate.state.machine import DispatchState, Transition
from turngate.state.sqlite_sync import synchronous
from turngate.state.store import OperationRecord, check_client_key, moved_record, sent_first

Mode = Literal["DEFERRED", "IMMEDIATE"]
Transaction = Callable[[sqlite3.Connection, Mode], AbstractContextManager[None]]
Loader = Callable[[sqlite3.Connection, str], OperationRecord | None]
Saver = Callable[[sqlite3.Connection, OperationRecord, OperationRecord], None]


@dataclass(frozen=True)
class Access:
    """What sqlite.py lends these functions: its transaction, and how it reads and moves an
    operation (so both modules write operations alike)."""

    transaction: Transaction
    load: Loader
    save: Saver


STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE conversations (
        conversation_key TEXT PRIMARY KEY,
        cancel_generation INTEGER NOT NULL,
        updated_at REAL NOT NULL
    ) WITHOUT ROWID""",
    # One canonical turn per revision: the current one (an older generation's is replaced).
    """CREATE TABLE canonical_turns (
        conversation_key TEXT NOT NULL REFERENCES conversations (conversation_key),
        revision INTEGER NOT NULL,
        cancel_generation INTEGER NOT NULL,
        digest TEXT NOT NULL,
        operation_id TEXT,
        at REAL NOT NULL,
        PRIMARY KEY (conversation_key, revision)
    ) WITHOUT ROWID""",
    """CREATE TABLE responses (
        operation_id TEXT PRIMARY KEY,
        status INTEGER NOT NULL,
        content_type TEXT NOT NULL,
        streamed INTEGER NOT NULL,
        body BLOB NOT NULL,
        expires_at REAL NOT NULL
    )""",
    "CREATE INDEX responses_by_expiry ON responses (expires_at)",
    """CREATE TABLE client_keys (
        scope TEXT PRIMARY KEY,
        operation_id TEXT NOT NULL,
        body_digest TEXT NOT NULL,
        expires_at REAL NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX client_keys_by_expiry ON client_keys (expires_at)",
    "CREATE INDEX operations_by_conversation ON operations (conversation_key, attempt)",
)


def take_client_key(
    db: sqlite3.Connection, key: ClientKey, load: Loader, *, now: float, operation_id: str | None
) -> None:
    """Inside the claim's transaction: check the key, or (``operation_id`` given) take it."""
    if operation_id is not None:
        db.execute(
            "INSERT OR REPLACE INTO client_keys (scope, operation_id, body_digest, expires_at)"
            " VALUES (?, ?, ?, ?)",
            (key.scope, operation_id, key.body_digest, key.expires_at),
        )
        return
    row = db.execute(
        "SELECT operation_id, body_digest, expires_at FROM client_keys WHERE scope = ?",
        (key.scope,),
    ).fetchone()
    hold = None if row is None else KeyHold(*row)
    holder = None if hold is None else load(db, hold.operation_id)
    check_client_key(key, hold, holder, now=now)


def read_conversation(db: sqlite3.Connection, key: str) -> Conversation | None:
    row = db.execute(
        "SELECT cancel_generation, updated_at FROM conversations WHERE conversation_key = ?",
        (key,),
    ).fetchone()
    if row is None:
        return None
    return Conversation(key, row[0], tuple(_kept_turns(db, key)), row[1])


def _kept_turns(db: sqlite3.Connection, key: str) -> list[CanonicalTurn]:
    rows = db.execute(
        "SELECT revision, cancel_generation, digest, operation_id, at, continues"
        " FROM canonical_turns WHERE conversation_key = ? ORDER BY revision",
        (key,),
    ).fetchall()
    return [CanonicalTurn(r, g, d, o, at, bool(c)) for r, g, d, o, at, c in rows]


def write_conversation(db: sqlite3.Connection, conversation: Conversation) -> None:
    """Replace what is kept of the conversation with ``conversation``."""
    key = conversation.key
    db.execute(
        "INSERT INTO conversations (conversation_key, cancel_generation, updated_at)"
        " VALUES (?, ?, ?) ON CONFLICT (conversation_key) DO UPDATE SET"
        " cancel_generation = excluded.cancel_generation, updated_at = excluded.updated_at",
        (key, conversation.cancel_generation, conversation.updated_at),
    )
    first = _first_changed(db, conversation)
    db.execute(
        "DELETE FROM canonical_turns WHERE conversation_key = ? AND revision >= ?", (key, first)
    )
    db.executemany(
        "INSERT INTO canonical_turns (conversation_key, revision, cancel_generation, digest,"
        " operation_id, at, continues) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (key, t.revision, t.cancel_generation, t.digest, t.operation_id, t.at, t.continues)
            for t in conversation.turns[first:]
        ],
    )


def _first_changed(db: sqlite3.Connection, conversation: Conversation) -> int:
    """The first revision whose kept turn differs from ``conversation``'s (turns only ever
    change at their end: one appended or replaced, those after it dropped)."""
    kept = _kept_turns(db, conversation.key)
    for k, turn in enumerate(kept):
        if k >= len(conversation.turns) or turn != conversation.turns[k]:
            return k
    return len(kept)


def open_conversation(
    db: sqlite3.Connection, access: Access, key: str, *, history: list[str], now: float
) -> Conversation:
    found = get_conversation(db, access, key)
    if found is not None:
        return found  # the usual case: no write lock needed
    synchronous(db, "FULL")
    with access.transaction(db, "IMMEDIATE"):
        found = read_conversation(db, key)
        if found is None:
            found = adopted(key, history, now=now)
            write_conversation(db, found)
    return found


def get_conversation(db: sqlite3.Connection, access: Access, key: str) -> Conversation | None:
    with access.transaction(db, "DEFERRED"):
        return read_conversation(db, key)


def cancel_conversation(
    db: sqlite3.Connection, access: Access, key: str, *, now: float
) -> Conversation:
    synchronous(db, "FULL")
    with access.transaction(db, "IMMEDIATE"):
        moved = cancelled(read_conversation(db, key), key, now=now)
        write_conversation(db, moved)
        detail = CANCELLED_DETAIL.format(generation=moved.cancel_generation)
        states = sorted(CANCELLABLE)
        rows = db.execute(
            "SELECT operation_id FROM operations WHERE conversation_key = ? AND state IN"
            f" ({', '.join('?' * len(states))}) ORDER BY attempt",
            (key, *states),
        ).fetchall()
        for (operation_id,) in rows:
            record = access.load(db, operation_id)
            assert record is not None
            cancel = moved_record(record, Transition.CANCEL, now=now, detail=detail)
            access.save(db, record, cancel)
    return moved


def conversation_operations(
    db: sqlite3.Connection, access: Access, key: str, *, limit: int
) -> list[OperationRecord]:
    with access.transaction(db, "DEFERRED"):
        # rowid: the order of the claims that inserted them.
        rows = db.execute(
            "SELECT operation_id FROM operations WHERE conversation_key = ?"
            " ORDER BY rowid DESC LIMIT ?",
            (key, limit),
        ).fetchall()
        return [r for (op,) in reversed(rows) if (r := access.load(db, op)) is not None]


def commit_turn(
    db: sqlite3.Connection,
    access: Access,
    operation_id: str,
    *,
    digest: str,
    now: float,
    handle: str | None,
    response: StoredResponse | None,
    sent: bool = False,
    continues: bool = False,
) -> OperationRecord:
    synchronous(db, "FULL")
    with access.transaction(db, "IMMEDIATE"):
        loaded = access.load(db, operation_id)
        if loaded is None:
            raise KeyError(operation_id)
        record = sent_first(loaded, sent, now=now)
        moved = moved_record(record, commit_transition(record), now=now, handle=handle)
        key = record.manifest.conversation_id
        conversation = None if key is None else read_conversation(db, key)
        turned = with_turn(conversation, record, digest, now=now, continues=continues)
        access.save(db, loaded, moved)
        if turned is not None:
            write_conversation(db, turned)
        if response is not None:
            _put_response(db, operation_id, response)
    return moved


def _put_response(db: sqlite3.Connection, operation_id: str, response: StoredResponse) -> None:
    db.execute(
        "INSERT OR REPLACE INTO responses (operation_id, status, content_type, streamed, body,"
        " expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        (
            operation_id,
            response.status,
            response.content_type,
            int(response.streamed),
            response.body,
            response.expires_at,
        ),
    )


def save_response(
    db: sqlite3.Connection, access: Access, operation_id: str, response: StoredResponse
) -> None:
    synchronous(db, "FULL")
    with access.transaction(db, "IMMEDIATE"):
        _put_response(db, operation_id, response)


def load_response(
    db: sqlite3.Connection, access: Access, operation_id: str, *, now: float
) -> StoredResponse | None:
    with access.transaction(db, "DEFERRED"):
        row = db.execute(
            "SELECT status, content_type, body, streamed, expires_at FROM responses"
            " WHERE operation_id = ? AND expires_at > ?",
            (operation_id, now),
        ).fetchone()
    if row is None:
        return None  # an expired row stays until prune(): a read takes no write lock
    status, content_type, body, streamed, expires_at = row
    return StoredResponse(status, content_type, bytes(body), bool(streamed), expires_at)


def unknown_operations(
    db: sqlite3.Connection, access: Access, *, limit: int
) -> list[OperationRecord]:
    with access.transaction(db, "DEFERRED"):
        rows = db.execute(
            "SELECT operation_id FROM operations WHERE state = ? LIMIT ?",
            (str(DispatchState.UNKNOWN), limit),
        ).fetchall()
        return [r for (op,) in rows if (r := access.load(db, op)) is not None]


def prune(db: sqlite3.Connection, access: Access, *, now: float) -> int:
    synchronous(db, "FULL")
    with access.transaction(db, "IMMEDIATE"):
        responses = db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,)).rowcount
        keys = db.execute("DELETE FROM client_keys WHERE expires_at <= ?", (now,)).rowcount
    return int(responses) + int(keys)
