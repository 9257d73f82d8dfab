"""What only the SQLite store has: the file, its schema versions, its errors, its locking."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.state.stores import draft
from turngate.errors import StoreUnavailable
from turngate.graph.codec import digest_bytes
from turngate.state.machine import DispatchState, Transition
from turngate.state.memory import MemoryStore
from turngate.state.sqlite import ABANDONED_CLAIM, SQLiteStore
from turngate.state.sqlite_schema import MIGRATIONS, SCHEMA_VERSION, Migration, migrate
from turngate.state.store import BLOCKING, ClaimConflict, open_store

S, T = DispatchState, Transition
HERE = Path(__file__).parent


async def opened(path: Path, **options: float) -> SQLiteStore:
    store = SQLiteStore(path, **options)
    await store.open()
    return store


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def load_saved(version: int, path: Path) -> None:
    db = raw(path)
    try:
        db.executescript((HERE / f"sqlite_v{version}.sql").read_text(encoding="utf-8"))
        db.execute(f"PRAGMA user_version = {version}")
    finally:
        db.close()


async def test_file_is_wal_fully_synced_and_at_the_latest_schema(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = await opened(path)
    try:
        on_worker = await store._run(lambda db: db.execute("PRAGMA synchronous").fetchone())
        assert on_worker == (2,)  # FULL
    finally:
        await store.close()
    db = raw(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        db.close()


def test_migrations_are_numbered_one_by_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert len(MIGRATIONS) == SCHEMA_VERSION


@pytest.mark.parametrize(
    "query",
    [
        # The claim's slot, a conversation's cancel, its operations, recovery's lookups.
        "SELECT operation_id, state, attempt FROM operations WHERE conversation_key = 'k'"
        " AND conversation_revision = 1 AND cancel_generation = 0 ORDER BY attempt",
        "SELECT operation_id FROM operations WHERE conversation_key = 'k'"
        " AND state IN ('SENT', 'UNKNOWN') ORDER BY attempt",
        "SELECT operation_id FROM operations WHERE conversation_key = 'k'"
        " ORDER BY conversation_revision, cancel_generation, attempt LIMIT 5",
        "SELECT operation_id FROM operations WHERE state = 'UNKNOWN' LIMIT 5",
    ],
)
def test_the_stores_lookups_search_an_index(tmp_path: Path, query: str) -> None:
    db = raw(tmp_path / "state.db")
    try:
        migrate(db)
        plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + query)]
    finally:
        db.close()
    assert plan[0].startswith("SEARCH operations USING "), plan


@pytest.mark.parametrize("migration", MIGRATIONS, ids=lambda m: f"v{m.version}")
async def test_a_saved_file_of_every_version_opens_and_works(
    tmp_path: Path, migration: Migration
) -> None:
    path = tmp_path / "old.db"
    load_saved(migration.version, path)
    store = await opened(path)
    try:
        committed = await store.get("op-saved-2")
        assert committed is not None
        assert (committed.state, committed.handle) == (S.COMMITTED, "msg_saved")
        assert committed.manifest.attempt == 2
        assert [c.state for c in committed.history] == [
            S.PREPARED,
            S.DISPATCHING,
            S.SENT,
            S.STREAMING,
            S.COMMITTED,
        ]
        assert committed.history[3].detail == "é ✓"
        assert (await store.get("op-saved-1")).state is S.FAILED  # type: ignore[union-attr]
        # The saved file was left with an attempt in flight: recovery and the CAS still work.
        assert [r.operation_id for r in await store.recover(now=9.0)] == ["op-saved-3"]
        with pytest.raises(ClaimConflict) as raised:  # revision 1 has its committed turn
            await store.claim(draft("conv-saved", revision=1), now=10.0)
        assert raised.value.existing == committed
        retry = await store.claim(draft("conv-saved", revision=2), now=10.0)
        assert retry.manifest.attempt == 1
    finally:
        await store.close()
    db = raw(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        db.close()


async def test_migrate_applies_pending_steps_in_order_and_all_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    load_saved(1, path)
    add_note = Migration(2, "a note per operation", ("ALTER TABLE operations ADD note TEXT",))
    broken = Migration(3, "broken", ("CREATE TABLE later (x)", "SELECT * FROM nowhere"))
    db = raw(path)
    try:
        with pytest.raises(sqlite3.OperationalError):
            migrate(db, (*MIGRATIONS[:1], add_note, broken))
        assert db.execute("PRAGMA user_version").fetchone() == (1,)  # v2 rolled back too
        assert "note" not in {row[1] for row in db.execute("PRAGMA table_info(operations)")}

        assert migrate(db, (*MIGRATIONS[:1], add_note)) == 2
        assert db.execute("PRAGMA user_version").fetchone() == (2,)
        assert "note" in {row[1] for row in db.execute("PRAGMA table_info(operations)")}
        assert db.execute("SELECT count(*) FROM operations").fetchone() == (3,)
    finally:
        db.close()


async def test_a_newer_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    await (await opened(path)).close()
    db = raw(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreUnavailable, match="newer than this turngate"):
        await opened(path)


async def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "var" / "lib" / "turngate" / "state.db"
    store = await opened(path)
    await store.claim(draft(), now=1.0)
    await store.close()
    assert path.is_file()


@pytest.mark.parametrize("kind", ["directory", "not a database", "parent is a file"])
async def test_a_file_that_cannot_be_opened_says_so(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state.db"
    if kind == "directory":
        path.mkdir()
    elif kind == "not a database":
        path.write_bytes(b"this is a text file, not SQLite\n" * 100)
    else:
        (tmp_path / "blocker").write_text("x")
        path = tmp_path / "blocker" / "state.db"
    store = SQLiteStore(path)
    with pytest.raises(StoreUnavailable) as raised:
        await store.open()
    assert str(path) in str(raised.value)
    assert str(raised.value).startswith("cannot open the state file")
    assert raised.value.status == 503
    assert await store.ping() is False


async def test_manifest_is_stored_as_its_canonical_json(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = await opened(path)
    record = await store.claim(draft("conv-ü"), now=1.0)
    await store.close()
    db = raw(path)
    try:
        (text,) = db.execute(
            "SELECT manifest FROM operations WHERE operation_id = ?", (record.operation_id,)
        ).fetchone()
    finally:
        db.close()
    # Anyone holding the file can check the digest from the stored bytes alone.
    assert digest_bytes(text.encode()) == record.manifest.digest


@pytest.mark.parametrize("state", [s for s in DispatchState if s is not S.PREPARED], ids=str)
async def test_the_file_itself_allows_one_live_attempt_per_slot(
    tmp_path: Path, state: DispatchState
) -> None:
    path = tmp_path / "state.db"
    await (await opened(path)).close()
    db = raw(path)
    insert = "INSERT INTO operations VALUES (?, 'conv', 0, 0, ?, ?, NULL, '{}')"
    try:
        db.execute(insert, ("op-a", 1, str(state)))
        if state in BLOCKING:
            with pytest.raises(sqlite3.IntegrityError):
                db.execute(insert, ("op-b", 2, str(state)))
        else:
            db.execute(insert, ("op-b", 2, str(state)))
        with pytest.raises(sqlite3.IntegrityError):  # one row per attempt number, always
            db.execute(insert, ("op-c", 1, "FAILED"))
    finally:
        db.close()


async def test_a_cancelled_claim_never_blocks_its_slot(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = await opened(path)
    blocker = raw(path)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # the claim below waits for this lock
        running_draft, queued_draft = draft("conv-x"), draft("conv-y")
        running = asyncio.create_task(store.claim(running_draft, now=1.0))
        await asyncio.sleep(0.2)
        queued = asyncio.create_task(store.claim(queued_draft, now=1.0))
        await asyncio.sleep(0.05)
        running.cancel()
        queued.cancel()
        blocker.execute("ROLLBACK")
        for task in (running, queued):
            with pytest.raises(asyncio.CancelledError):
                await task

        async def settled() -> DispatchState | None:
            record = await store.get(running_draft.operation_id)
            while record is not None and record.state is S.DISPATCHING:
                record = await store.get(running_draft.operation_id)
            return None if record is None else record.state

        # The running claim won after its caller left: it is failed, never left blocking.
        assert await asyncio.wait_for(settled(), 5) is S.FAILED
        abandoned = await store.get(running_draft.operation_id)
        assert abandoned.history[-1].detail == ABANDONED_CLAIM  # type: ignore[union-attr]
        # The queued one never ran.
        assert await store.get(queued_draft.operation_id) is None
        again = await store.claim(draft("conv-x"), now=2.0)
        assert again.manifest.attempt == 2
    finally:
        blocker.close()
        await store.close()


async def test_concurrent_first_opens_of_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    stores = [SQLiteStore(path) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        claimed = await stores[0].claim(draft(), now=1.0)
        for other in stores[1:]:
            assert await other.get(claimed.operation_id) == claimed
    finally:
        await asyncio.gather(*(s.close() for s in stores))


def test_open_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    relative = open_store("sqlite:///./turngate.db")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == Path("turngate.db")
    absolute = open_store(f"sqlite://{tmp_path}/state.db")
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == tmp_path / "state.db"
    with pytest.raises(ValueError, match="unknown state URL"):
        open_store("postgres://db")
    assert absolute.sync == "full"
    unsynced = open_store(f"sqlite://{tmp_path}/state.db?sync=normal")
    assert isinstance(unsynced, SQLiteStore)
    assert (unsynced.path, unsynced.sync) == (tmp_path / "state.db", "normal")
    for wrong in ("?sync=off", "?sync=", "?fsync=0", "?sync=normal&mode=ro"):
        with pytest.raises(ValueError, match=r"sync=full or normal"):
            open_store(f"sqlite://{tmp_path}/state.db{wrong}")
