"""What the SQLite file forgets once ``operation_ttl`` has passed (worker-thread functions, as in
sqlite.py): operations claimed that long ago and no longer in flight, with their history and
stored answer; conversations unchanged that long with no operation left, with their canonical
turns; log entries that old. Without it the file grows by about 1.5 KB per request for ever,
and the chart's emptyDir (a size limit) would get the pod evicted.

Rows are deleted oldest first, in steps of at most ``limit``, each its own transaction, so a
claim never waits long behind a prune. Operations and log entries are taken in insertion
order: a rowid, or a log's id, only grows, so everything claimed (or written) before the first
young row met is old, and the scan stops there. Conversations are taken by their last change
(an index).

Answers kept for replay expire by their own TTL (``--replay-ttl``, sqlite_turns.prune); a
streamed one is kept as relayed (0.5-195 KB for the recorded streams), so ``cap_responses``
also bounds their bytes (``--replay-max-bytes``): the ones that expire first go first.
"""

from __future__ import annotations

import sqlite3

from turngate.state.machine import IN_FLIGHT
from turngate.state.sqlite_sync import synchronous
from turngate.state.sqlite_turns import Access
from turngate.state.store import first_to_drop

_IN_FLIGHT = frozenset(str(state) for state in IN_FLIGHT)


def prune_operations(
    db: sqlite3.Connection, access: Access, *, before: float, after: int, limit: int
) -> tuple[int, int | None]:
    """Delete up to ``limit`` operations past rowid ``after`` claimed before ``before`` that
    are no longer in flight. Returns how many went and the rowid to go on from, or None when
    the scan met a young operation or the end."""
    # A lost prune costs nothing: it runs again in the next round.
    synchronous(db, "NORMAL")
    with access.transaction(db, "IMMEDIATE"):
        rows = db.execute(
            "SELECT o.rowid, o.operation_id, o.state, h.at"
            " FROM operations o JOIN history h ON h.operation_id = o.operation_id AND h.seq = 0"
            " WHERE o.rowid > ? ORDER BY o.rowid LIMIT ?",
            (after, limit),
        )
        old: list[tuple[str]] = []
        last, seen, young = after, 0, False
        for rowid, operation_id, state, claimed_at in rows:  # read only up to a young one
            if claimed_at >= before:
                young = True
                break
            last, seen = rowid, seen + 1
            if state not in _IN_FLIGHT:
                old.append((operation_id,))
        rows.close()
        if old:
            db.executemany("DELETE FROM history WHERE operation_id = ?", old)
            db.executemany("DELETE FROM responses WHERE operation_id = ?", old)
            db.executemany("DELETE FROM operations WHERE operation_id = ?", old)
    return len(old), None if young or seen < limit else last


def prune_conversations(
    db: sqlite3.Connection, access: Access, *, before: float, after: float, limit: int
) -> tuple[int, float | None]:
    """Delete, with their canonical turns, the conversations unchanged since ``before`` that
    have no operation left, taking up to ``limit`` of them changed after ``after``, oldest
    first. Returns how many went and the time to go on from (None: no more to look at)."""
    synchronous(db, "NORMAL")
    with access.transaction(db, "IMMEDIATE"):
        rows = db.execute(
            "SELECT conversation_key, updated_at FROM conversations"
            " WHERE updated_at > ? AND updated_at < ? ORDER BY updated_at LIMIT ?",
            (after, before, limit),
        ).fetchall()
        gone = [
            (key,)
            for key, _ in rows
            if db.execute(
                "SELECT 1 FROM operations WHERE conversation_key = ? LIMIT 1", (key,)
            ).fetchone()
            is None
        ]
        db.executemany("DELETE FROM canonical_turns WHERE conversation_key = ?", gone)
        db.executemany("DELETE FROM conversations WHERE conversation_key = ?", gone)
    return len(gone), rows[-1][1] if len(rows) == limit else None


def prune_logs(db: sqlite3.Connection, access: Access, *, before: float, limit: int) -> int:
    """Delete up to ``limit`` of the oldest log entries written before ``before``."""
    synchronous(db, "NORMAL")
    with access.transaction(db, "IMMEDIATE"):
        rows = db.execute("SELECT id, at FROM logs ORDER BY id LIMIT ?", (limit,)).fetchall()
        last = None
        for entry_id, at in rows:
            if at >= before:
                break
            last = entry_id
        if last is None:
            return 0
        return int(db.execute("DELETE FROM logs WHERE id <= ?", (last,)).rowcount)


def cap_responses(db: sqlite3.Connection, access: Access, *, max_bytes: int) -> int:
    """Delete the answers kept for replay that expire first while their bodies hold more
    than ``max_bytes``; how many went. A retry of one gets what a retry after its expiry
    gets (409: no longer kept)."""
    synchronous(db, "NORMAL")
    with access.transaction(db, "IMMEDIATE"):
        (total,) = db.execute("SELECT COALESCE(SUM(length(body)), 0) FROM responses").fetchone()
        excess = int(total) - max_bytes
        if excess <= 0:
            return 0
        oldest = db.execute("SELECT operation_id, length(body) FROM responses ORDER BY expires_at")
        gone = first_to_drop(oldest, excess)
        oldest.close()
        db.executemany("DELETE FROM responses WHERE operation_id = ?", [(op,) for op in gone])
    return len(gone)
