"""Writes queued together are committed together, and each still gets its own outcome.

The SQLite store commits the claims, transitions and canonical commits waiting on its
worker in one transaction (sqlite_worker.py). These tests queue many at once and check
what a caller sees: one winner per slot, a refused write leaves nothing behind, a write
that breaks the group does not take the others with it, and a result comes back only once
its write is committed at the level it needs.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.state.stores import draft
from turngate.errors import StoreUnavailable
from turngate.state.machine import DispatchState, Transition
from turngate.state.sqlite import SQLiteStore
from turngate.state.sqlite_schema import transaction
from turngate.state.store import ClaimConflict

S, T = DispatchState, Transition
FULL, NORMAL = 2, 1


async def opened(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    await store.open()
    return store


async def queued_together(store: SQLiteStore, *writes: Awaitable[Any]) -> list[Any]:
    """Run ``writes`` with the worker held until all are queued, so they meet in its queue."""
    release = threading.Event()
    held = store._submit(lambda db: release.wait(10))
    tasks = [asyncio.ensure_future(w) for w in writes]
    await asyncio.sleep(0.05)  # every task has submitted its write
    release.set()
    await asyncio.wrap_future(held)
    return await asyncio.gather(*tasks, return_exceptions=True)


async def written(store: SQLiteStore, write: Callable[[sqlite3.Connection], Any]) -> Any:
    """A write of the test's own, submitted when awaited (after the worker is held)."""
    return await asyncio.wrap_future(store._write("FULL", write))


async def statements(store: SQLiteStore) -> list[str]:
    """Every statement the worker runs from now on (read it after the writes)."""
    seen: list[str] = []
    await store._run(lambda db: db.set_trace_callback(seen.append))
    return seen


async def test_claims_queued_together_share_one_transaction_and_one_winner_per_slot(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path / "state.db")
    try:
        seen = await statements(store)
        drafts = [draft(f"conv-{n % 5}") for n in range(40)]
        outcomes = await queued_together(store, *(store.claim(d, now=1.0) for d in drafts))
        winners = [o for o in outcomes if not isinstance(o, BaseException)]
        assert {w.manifest.conversation_id for w in winners} == {f"conv-{n}" for n in range(5)}
        assert len(winners) == 5
        assert all(isinstance(o, ClaimConflict) for o in outcomes if o not in winners)
        assert sum(s.startswith("BEGIN") for s in seen) < len(drafts)
        for winner in winners:
            stored = await store.get(winner.operation_id)
            assert stored is not None
            assert stored.state is S.DISPATCHING
        for loser in (d for d, o in zip(drafts, outcomes, strict=True) if o not in winners):
            assert await store.get(loser.operation_id) is None
    finally:
        await store.close()


async def test_a_write_that_breaks_the_group_fails_alone(tmp_path: Path) -> None:
    store = await opened(tmp_path / "state.db")
    try:

        def broken(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO no_such_table VALUES (1)")

        drafts = [draft(f"conv-{n}") for n in range(6)]
        first = written(store, broken)
        outcomes = await queued_together(store, first, *(store.claim(d, now=1.0) for d in drafts))
        assert isinstance(outcomes[0], StoreUnavailable)
        assert [o.state for o in outcomes[1:]] == [S.DISPATCHING] * len(drafts)  # type: ignore[union-attr]
        for d in drafts:
            assert await store.get(d.operation_id) is not None
    finally:
        await store.close()


async def test_a_group_with_a_claim_is_fully_synced_even_when_it_holds_sends(
    tmp_path: Path,
) -> None:
    store = await opened(tmp_path / "state.db")
    try:
        sent = [await store.claim(draft(f"sent-{n}"), now=1.0) for n in range(4)]
        # A SEND alone leaves the connection at NORMAL: the group has to raise it.
        await store.transition(sent[0].operation_id, T.SEND, now=2.0)
        seen = await statements(store)
        moves = [store.transition(r.operation_id, T.SEND, now=2.0) for r in sent[1:]]
        claims = [store.claim(draft(f"new-{n}"), now=2.0) for n in range(4)]
        for outcome in await queued_together(store, *moves, *claims):
            assert not isinstance(outcome, BaseException)
        grouped = [s for s in seen if s.startswith(("BEGIN", "PRAGMA synchronous"))]
        # Each group sets the strictest level its writes need before it begins.
        levels = [s for s in grouped if s.startswith("PRAGMA")]
        assert levels
        assert levels[-1] == "PRAGMA synchronous = FULL"
        row = await store._run(lambda db: db.execute("PRAGMA synchronous").fetchone())
        assert row == (FULL,)
        for record in sent:
            stored = await store.get(record.operation_id)
            assert stored is not None
            assert stored.state is S.SENT
    finally:
        await store.close()


async def test_sends_alone_still_skip_the_fsync(tmp_path: Path) -> None:
    store = await opened(tmp_path / "state.db")
    try:
        sent = [await store.claim(draft(f"sent-{n}"), now=1.0) for n in range(4)]
        moves = [store.transition(r.operation_id, T.SEND, now=2.0) for r in sent]
        assert not any(isinstance(o, BaseException) for o in await queued_together(store, *moves))
        row = await store._run(lambda db: db.execute("PRAGMA synchronous").fetchone())
        assert row == (NORMAL,)
    finally:
        await store.close()


@pytest.mark.parametrize("first", ["commit", "illegal"])
async def test_an_illegal_move_in_a_group_leaves_the_others_committed(
    tmp_path: Path, first: str
) -> None:
    store = await opened(tmp_path / "state.db")
    try:
        records = [await store.claim(draft(f"conv-{n}"), now=1.0) for n in range(4)]
        for record in records:
            await store.transition(record.operation_id, T.SEND, now=2.0)
        illegal = store.transition(records[0].operation_id, T.CLAIM, now=3.0)
        commits = [
            store.commit_turn(r.operation_id, digest=f"sha256:{n}", now=3.0)
            for n, r in enumerate(records[1:])
        ]
        ordered = [illegal, *commits] if first == "illegal" else [*commits, illegal]
        outcomes = await queued_together(store, *ordered)
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(refused) == 1
        assert not isinstance(refused[0], StoreUnavailable)
        first_record = await store.get(records[0].operation_id)
        assert first_record is not None
        assert first_record.state is S.SENT
        assert len(first_record.history) == 3  # PREPARED, DISPATCHING, SENT: nothing more
        for record in records[1:]:
            stored = await store.get(record.operation_id)
            assert stored is not None
            assert stored.state is S.COMMITTED
    finally:
        await store.close()


async def test_a_write_that_raises_in_a_group_leaves_none_of_its_rows(tmp_path: Path) -> None:
    store = await opened(tmp_path / "state.db")
    try:

        def half_done(db: sqlite3.Connection) -> None:
            with transaction(db, "IMMEDIATE"):
                db.execute("INSERT INTO logs (kind, at, entry) VALUES ('half', 1, '{}')")
                raise ValueError("refused after its first row")

        first = written(store, half_done)
        drafts = [draft(f"conv-{n}") for n in range(3)]
        outcomes = await queued_together(store, first, *(store.claim(d, now=1.0) for d in drafts))
        assert isinstance(outcomes[0], ValueError)
        assert all(not isinstance(o, BaseException) for o in outcomes[1:])
        assert await store.read_log("half", limit=10) == []
        for d in drafts:
            assert await store.get(d.operation_id) is not None
    finally:
        await store.close()


async def test_a_level_is_set_only_when_it_changes(tmp_path: Path) -> None:
    store = await opened(tmp_path / "state.db")
    try:
        seen = await statements(store)
        claimed = [await store.claim(draft(f"op-{n}"), now=1.0) for n in range(3)]
        await store.transition(claimed[0].operation_id, T.SEND, now=2.0)
        await store.transition(claimed[1].operation_id, T.SEND, now=2.0)
        await store.transition(claimed[0].operation_id, T.COMMIT, now=3.0)
        levels = [s for s in seen if s.startswith("PRAGMA synchronous")]
        # The claims follow the FULL set at open; then NORMAL once for both SENDs, FULL again.
        assert levels == ["PRAGMA synchronous = NORMAL", "PRAGMA synchronous = FULL"]
        row = await store._run(lambda db: db.execute("PRAGMA synchronous").fetchone())
        assert row == (FULL,)
    finally:
        await store.close()
