"""What a store forgets once ``operation_ttl`` has passed, so a long-running sidecar's state
does not grow for ever (the chart's SQLite file lives on an emptyDir with a size limit).

Memory and SQLite delete in ``prune`` by the clock they are given; Redis expires its keys
itself (tests/state/test_redis.py holds its TTLs), so only its setting is checked here.
"""

from __future__ import annotations

import argparse
import sqlite3
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.state.redis_server import key_prefix, redis_url
from tests.state.stores import claim_into, draft
from turngate.graph.codec import canonical_json
from turngate.settings import Settings, SettingsError, settings_from_args
from turngate.state.conversations import StoredResponse
from turngate.state.machine import DispatchState, Transition
from turngate.state.memory import MemoryStore
from turngate.state.redis import RedisStore
from turngate.state.sqlite import SQLiteStore
from turngate.state.store import (
    DEFAULT_OPERATION_TTL,
    DEFAULT_REPLAY_MAX_BYTES,
    PRUNE_BATCH,
    StateStore,
    open_store,
)

S, T = DispatchState, Transition
TTL = 100.0


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    opened: StateStore
    if request.param == "memory":
        opened = MemoryStore(operation_ttl=TTL)
    else:
        opened = SQLiteStore(tmp_path / "state.db", operation_ttl=TTL)
    await opened.open()
    yield opened
    await opened.close()


async def committed_turn(store: StateStore, conversation: str, *, now: float) -> str:
    """A conversation's first turn, committed: its history adopted, its slot taken."""
    await store.open_conversation(conversation, [], now=now)
    record = await store.claim(draft(conversation), now=now)
    await store.transition(record.operation_id, T.SEND, now=now)
    await store.commit_turn(record.operation_id, digest="sha256:" + "9" * 64, now=now + 1)
    return record.operation_id


async def test_what_outlived_the_ttl_goes_and_the_rest_stays(store: StateStore) -> None:
    done = await claim_into(store, S.COMMITTED, conversation_id=None, now=1.0)
    failed = await claim_into(store, S.FAILED, conversation_id=None, now=1.0)
    in_flight = await claim_into(store, S.STREAMING, conversation_id=None, now=1.0)
    old_turn = await committed_turn(store, "conv-old", now=1.0)
    await committed_turn(store, "conv-live", now=1.0)
    live_again = await store.claim(draft("conv-live", revision=1), now=150.0)
    young = await claim_into(store, S.COMMITTED, conversation_id=None, now=150.0)
    await store.append_log("shadow", {"n": "old"}, now=1.0, keep=10)
    await store.append_log("shadow", {"n": "young"}, now=150.0, keep=10)

    # done, failed, old_turn, conv-live's first operation, conv-old, one log entry
    assert await store.prune(now=200.0) == 6

    for gone in (done, failed, old_turn):
        assert await store.get(gone) is None
    for kept in (in_flight, live_again.operation_id, young):
        assert await store.get(kept) is not None
    assert await store.conversation("conv-old") is None
    live = await store.conversation("conv-live")
    assert live is not None
    assert len(live.turns) == 1  # its canonical turn stays
    assert await store.read_log("shadow", limit=10) == [{"n": "young"}]
    # The old revision's slot went with its operation, as a Redis key expires.
    assert (await store.claim(draft("conv-old"), now=201.0)).manifest.attempt == 1
    assert await store.prune(now=200.0) == 0


async def test_an_operation_in_flight_is_kept_until_it_settles(store: StateStore) -> None:
    op = await claim_into(store, S.SENT, conversation_id=None, now=1.0)
    assert await store.prune(now=10_000.0) == 0
    await store.transition(op, T.LOSE, now=10_001.0)
    assert await store.prune(now=10_002.0) == 1
    assert await store.get(op) is None


async def test_a_store_without_a_ttl_keeps_everything(tmp_path: Path) -> None:
    forever: list[StateStore] = [
        MemoryStore(operation_ttl=None),
        SQLiteStore(tmp_path / "s.db", operation_ttl=None),
    ]
    for kept in forever:
        await kept.open()
        try:
            op = await claim_into(kept, S.COMMITTED, conversation_id=None, now=1.0)
            assert await kept.prune(now=1e12) == 0
            assert await kept.get(op) is not None
        finally:
            await kept.close()


async def test_the_sqlite_file_stops_growing_under_steady_traffic(tmp_path: Path) -> None:
    """Four windows of requests, each one TTL long and pruned as the recovery loop does: the
    operations kept are those of the last window, the file reuses the pages they freed, and
    the WAL stays within what a checkpoint leaves."""
    path = tmp_path / "state.db"
    store = SQLiteStore(path, sync="normal", operation_ttl=TTL)
    await store.open()
    per_window = 3 * PRUNE_BATCH + 7  # several prune steps, the last one short
    pages, kept, wal = [], [], []
    try:
        for window in range(4):
            start = window * TTL
            for n in range(per_window):
                await claim_into(store, S.COMMITTED, conversation_id=None, now=start + n / 100)
            await store.prune(now=start + TTL - 1)
            wal.append(Path(f"{path}-wal").stat().st_size)
            db = sqlite3.connect(path)
            try:
                kept.append(db.execute("SELECT count(*) FROM operations").fetchone()[0])
                assert db.execute("SELECT count(*) FROM history").fetchone()[0] == 4 * kept[-1]
                pages.append(db.execute("PRAGMA page_count").fetchone()[0])
                page_size = db.execute("PRAGMA page_size").fetchone()[0]
            finally:
                db.close()
    finally:
        await store.close()
    assert kept == [per_window] * 4
    assert pages[3] <= pages[1] * 1.05, pages
    # SQLite checkpoints the WAL at 1000 pages; a file that kept growing would pass that.
    assert max(wal) < 2 * 1000 * page_size, wal


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
async def test_answers_kept_for_replay_stay_under_their_byte_limit(
    kind: str, tmp_path: Path
) -> None:
    """Past the limit the answers that expire first go, as if they had expired: a streamed
    answer is kept as relayed (up to 195 KB among the recorded streams), and a day of them
    would outgrow the chart's emptyDir, or fill a Redis that refuses writes when full."""
    body = b"data: x\n\n".ljust(300, b" ")

    def answer(expires: float) -> StoredResponse:
        return StoredResponse(200, "text/event-stream", body, True, expires)

    capped: StateStore
    if kind == "memory":
        capped = MemoryStore(replay_max_bytes=1000)
    elif kind == "sqlite":
        capped = SQLiteStore(tmp_path / "state.db", replay_max_bytes=1000)
    else:
        # Redis counts the JSON it stores (the body in base64): room for three of them.
        stored = len(canonical_json(answer(50.0).to_json()))
        capped = RedisStore(
            redis_url(), key_prefix=key_prefix(tmp_path), replay_max_bytes=3 * stored + 10
        )
    await capped.open()
    try:
        # The first kept by its commit (a non-streamed answer), the rest after it (streamed).
        first = await claim_into(capped, S.SENT, conversation_id=None, now=1.0)
        await capped.commit_turn(first, digest="sha256:" + "9" * 64, now=1.0, response=answer(50))
        ops = [first]
        for expires in (10.0, 40.0, 20.0, 30.0):
            op = await claim_into(capped, S.COMMITTED, conversation_id=None, now=1.0)
            await capped.save_response(op, answer(expires), now=1.0)
            ops.append(op)
        assert await capped.prune(now=2.0) == 2  # the two expiring first go
        kept = [await capped.load_response(op, now=2.0) is not None for op in ops]
        assert kept == [True, False, True, False, True]
        assert await capped.prune(now=2.0) == 0
    finally:
        await capped.close()


def settings(**env: str) -> Settings:
    return settings_from_args(argparse.Namespace(), env)


def test_the_ttl_is_a_setting_and_must_outlast_replays_and_unknown_attempts() -> None:
    assert settings().operation_ttl == DEFAULT_OPERATION_TTL
    assert settings(TURNGATE_OPERATION_TTL="90000").operation_ttl == 90_000
    with pytest.raises(SettingsError, match=r"operation_ttl .* must be at least replay_ttl"):
        settings(TURNGATE_OPERATION_TTL="3600")  # the replay TTL is a day
    with pytest.raises(SettingsError, match="unknown_deadline"):
        settings(TURNGATE_OPERATION_TTL="90000", TURNGATE_UNKNOWN_DEADLINE="100000")


def test_the_replay_limit_is_a_setting() -> None:
    assert settings().replay_max_bytes == DEFAULT_REPLAY_MAX_BYTES
    assert settings(TURNGATE_REPLAY_MAX_BYTES="0").replay_max_bytes == 0  # no limit
    with pytest.raises(SettingsError, match="replay_max_bytes"):
        settings(TURNGATE_REPLAY_MAX_BYTES="-1")


@pytest.mark.parametrize("url", ["memory://", "sqlite:///./x.db", "redis://127.0.0.1:1/0"])
def test_every_store_takes_the_ttl_from_the_setting(url: str) -> None:
    assert open_store(url, operation_ttl=1234.0).operation_ttl == 1234.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["memory://", "sqlite:///./x.db", "redis://127.0.0.1:1/0"])
def test_every_store_takes_the_replay_limit_from_the_setting(url: str) -> None:
    assert open_store(url, replay_max_bytes=None).replay_max_bytes is None  # type: ignore[attr-defined]
    assert open_store(url, replay_max_bytes=99).replay_max_bytes == 99  # type: ignore[attr-defined]


async def test_a_memory_store_holds_about_two_kilobytes_per_operation() -> None:
    """The proxy reads each manifest's digest, which keeps its canonical JSON with it: orjson's
    unshrunk buffer made that 8 KB per operation (10.8 KB of RSS per request on memory://)."""
    store = MemoryStore()
    await store.open()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(1_000):
            op = await claim_into(store, S.COMMITTED, conversation_id=None, now=1.0)
            record = await store.get(op)
            assert record is not None
            assert record.manifest.digest.startswith("sha256:")
        per_operation = (tracemalloc.get_traced_memory()[0] - before) / 1_000
    finally:
        tracemalloc.stop()
        await store.close()
    assert per_operation < 3_000, per_operation
