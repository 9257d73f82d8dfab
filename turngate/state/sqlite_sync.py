"""How durably a write to the SQLite state file is committed.

Each write asks for its level before its transaction (``synchronous``): FULL waits for the
disk (an fsync of the WAL at COMMIT), NORMAL does not; sqlite.py says which writes need
which. Either way WAL keeps every committed write through a crash of the process: the
levels differ only on a power cut or a kernel crash, which may undo NORMAL writes.

A store opened with ``sync=normal`` (``sqlite:///path?sync=normal``) caps every write at
NORMAL: for a file that does not outlive its machine anyway (an emptyDir in the pod), a
crash of the process still loses nothing, and no write waits for the disk.
"""

from __future__ import annotations

import sqlite3
from typing import Literal

Level = Literal["FULL", "NORMAL"]
Sync = Literal["full", "normal"]
SYNCS: tuple[Sync, ...] = ("full", "normal")


def sync_of(value: str) -> Sync:
    """``value`` as a ``sync`` level; a ValueError naming the levels for anything else."""
    for sync in SYNCS:
        if value == sync:
            return sync
    raise ValueError(f"sync={value!r}: use {' or '.join(SYNCS)}")


class StateConnection(sqlite3.Connection):
    """The store's connection (``sqlite3.connect(factory=...)``), carrying its cap and the
    level it last set."""

    fsync = True
    level: Level | None = None


def synchronous(db: sqlite3.Connection, level: Level) -> None:
    """Set ``level`` (capped by the store's ``sync``) for the connection's next commits.

    Set before BEGIN, and only when it changes: most writes ask for the level the one
    before them set. SQLite refuses a change inside a transaction, where a group commit
    (sqlite_worker.py) has set the strictest level of its writes."""
    if db.in_transaction:
        return
    if level == "FULL" and not getattr(db, "fsync", True):
        level = "NORMAL"
    if isinstance(db, StateConnection):
        if db.level == level:
            return
        db.execute(f"PRAGMA synchronous = {level}")
        db.level = level
        return
    db.execute(f"PRAGMA synchronous = {level}")
