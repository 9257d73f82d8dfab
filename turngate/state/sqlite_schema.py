"""The SQLite state file's schema: the numbered migrations, the transaction every write
runs in, and the switch to WAL.

Stored data carries a schema version (``PRAGMA user_version``), upgraded on open by the
numbered ``MIGRATIONS`` chain, all steps in one transaction.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from turngate.errors import StoreUnavailable
from turngate.state import sqlite_turns as turns


@dataclass(frozen=True)
class Migration:
    version: int
    purpose: str
    statements: tuple[str, ...]


# Frozen history: never edit a step once released, append the next one. State names are
# literals here (not derived from BLOCKING) so that a file's schema depends only on its
# version; a change to BLOCKING needs a new step that rebuilds the index.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "operations with their stamped manifest, the history of each, one live attempt per slot",
        (
            """CREATE TABLE operations (
                operation_id TEXT PRIMARY KEY,
                conversation_key TEXT NOT NULL,
                conversation_revision INTEGER NOT NULL,
                cancel_generation INTEGER NOT NULL,
                attempt INTEGER NOT NULL,
                state TEXT NOT NULL,
                handle TEXT,
                manifest TEXT NOT NULL,
                UNIQUE (conversation_key, conversation_revision, cancel_generation, attempt)
            )""",
            # The claim CAS, enforced by the file itself as well as by the code.
            """CREATE UNIQUE INDEX operations_one_live
                ON operations (conversation_key, conversation_revision, cancel_generation)
                WHERE state IN ('DISPATCHING', 'SENT', 'STREAMING', 'UNKNOWN', 'COMMITTED')""",
            "CREATE INDEX operations_by_state ON operations (state)",
            """CREATE TABLE history (
                operation_id TEXT NOT NULL REFERENCES operations (operation_id),
                seq INTEGER NOT NULL,
                state TEXT NOT NULL,
                transition TEXT,
                at REAL NOT NULL,
                detail TEXT,
                PRIMARY KEY (operation_id, seq)
            ) WITHOUT ROWID""",
        ),
    ),
    Migration(
        2,
        "capped logs per kind (shadow diffs, quarantined blocks), newest with the highest id",
        (
            # A rowid table: entries run to tens of KB, too large for WITHOUT ROWID pages.
            """CREATE TABLE logs (
                id INTEGER PRIMARY KEY,
                kind TEXT NOT NULL,
                at REAL NOT NULL,
                entry TEXT NOT NULL
            )""",
            "CREATE INDEX logs_by_kind ON logs (kind, id)",
        ),
    ),
    Migration(
        3,
        "conversations: canonical turns and cancel generations, stored responses, client keys",
        turns.STATEMENTS,
    ),
    Migration(
        4,
        "no operations_by_conversation: the UNIQUE index on (conversation_key, revision, "
        "cancel generation, attempt) serves its lookups, and each claim wrote both",
        ("DROP INDEX operations_by_conversation",),
    ),
    Migration(
        5,
        "conversations by their last change: what outlived operation_ttl is found without a "
        "scan of the table (sqlite_retention.py)",
        ("CREATE INDEX conversations_by_update ON conversations (updated_at)",),
    ),
    Migration(
        6,
        "canonical turns that go on with the turn before them (an Anthropic paused turn)",
        ("ALTER TABLE canonical_turns ADD COLUMN continues INTEGER NOT NULL DEFAULT 0",),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def migrate(db: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Bring the file to the latest schema version, in one transaction; returns it."""
    latest = migrations[-1].version
    if _schema_version(db, latest) == latest:
        return latest  # the usual open: no need to wait for the write lock
    with transaction(db, "IMMEDIATE"):
        # Read again under the lock: another process may have upgraded it meanwhile.
        version = _schema_version(db, latest)
        for migration in migrations[version:]:
            for statement in migration.statements:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {int(migration.version)}")
    return latest


def _schema_version(db: sqlite3.Connection, latest: int) -> int:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > latest:
        raise StoreUnavailable(
            f"the state file has schema version {version}, newer than this turngate's "
            f"{latest}: upgrade turngate or use another file"
        )
    return int(version)


@contextmanager
def transaction(db: sqlite3.Connection, mode: Literal["DEFERRED", "IMMEDIATE"]) -> Iterator[None]:
    if db.in_transaction:
        # A write committed in a group (sqlite_worker.py): its own savepoint, so raising
        # undoes this write only.
        db.execute("SAVEPOINT one_write")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK TO one_write")
            db.execute("RELEASE one_write")
            raise
        db.execute("RELEASE one_write")
        return
    db.execute(f"BEGIN {mode}")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def enter_wal(db: sqlite3.Connection, patience: float) -> str:
    """Switch to WAL, waiting out another connection doing the same on a new file.

    Changing the journal mode takes an exclusive lock and SQLite may answer "database is
    locked" at once, without calling the busy handler, while a second process opens the
    same new file; so retry until ``patience`` seconds have passed.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(mode)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
