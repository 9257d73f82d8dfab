"""The capped logs of the store contract (``append_log``/``read_log``), on every store.

A log per kind keeps its newest ``keep`` entries: shadow diffs, quarantined blocks, a
conversation's stored graph. Same behaviour on memory, SQLite and a real Redis server.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.state.redis_server import contract_store, redis_url
from tests.state.stores import BACKENDS, SHARED_BACKENDS, Backend
from turngate.errors import StoreUnavailable
from turngate.state.sqlite import SQLiteStore
from turngate.state.sqlite_schema import SCHEMA_VERSION
from turngate.state.store import StateStore

HERE = Path(__file__).parent


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    chosen: Backend = request.param
    return chosen


@pytest.fixture
async def store(backend: Backend, tmp_path: Path) -> AsyncIterator[StateStore]:
    opened = backend.make(tmp_path)
    await opened.open()
    yield opened
    await opened.close()


def entry(n: int) -> dict[str, Any]:
    return {"n": n, "text": f"é ✓ {n}", "nested": {"list": [n, None, True, 1.5]}}


async def test_entries_come_back_newest_first_as_appended(store: StateStore) -> None:
    for n in range(3):
        await store.append_log("shadow", entry(n), now=float(n), keep=10)
    assert await store.read_log("shadow", limit=10) == [entry(2), entry(1), entry(0)]
    assert await store.read_log("shadow", limit=2) == [entry(2), entry(1)]
    assert await store.read_log("shadow", limit=0) == []


async def test_a_log_keeps_only_its_newest_entries(store: StateStore) -> None:
    for n in range(7):
        await store.append_log("shadow", entry(n), now=float(n), keep=3)
    assert await store.read_log("shadow", limit=100) == [entry(6), entry(5), entry(4)]
    # A smaller cap on a later append trims what is already there.
    await store.append_log("shadow", entry(7), now=7.0, keep=1)
    assert await store.read_log("shadow", limit=100) == [entry(7)]


async def test_kinds_are_separate_logs(store: StateStore) -> None:
    await store.append_log("shadow", entry(1), now=1.0, keep=1)
    await store.append_log("quarantine", entry(2), now=2.0, keep=1)
    await store.append_log("graph:conv-1", entry(3), now=3.0, keep=1)
    assert await store.read_log("shadow", limit=5) == [entry(1)]
    assert await store.read_log("quarantine", limit=5) == [entry(2)]
    assert await store.read_log("graph:conv-1", limit=5) == [entry(3)]
    assert await store.read_log("graph:conv-2", limit=5) == []


async def test_an_entry_is_a_copy_not_the_callers_object(store: StateStore) -> None:
    mine = entry(1)
    await store.append_log("shadow", mine, now=1.0, keep=5)
    mine["n"] = 99
    assert await store.read_log("shadow", limit=1) == [entry(1)]


async def test_concurrent_appends_keep_exactly_the_cap(store: StateStore) -> None:
    await asyncio.gather(
        *(store.append_log("shadow", entry(n), now=float(n), keep=20) for n in range(60))
    )
    kept = await store.read_log("shadow", limit=100)
    assert len(kept) == 20
    assert len({e["n"] for e in kept}) == 20


async def test_bad_arguments_are_refused_alike(store: StateStore) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        await store.append_log("shadow", entry(1), now=1.0, keep=0)
    with pytest.raises(ValueError, match="needs a kind"):
        await store.append_log("", entry(1), now=1.0, keep=1)
    with pytest.raises(ValueError, match="cannot read -1"):
        await store.read_log("shadow", limit=-1)
    with pytest.raises(TypeError):
        await store.append_log("shadow", {"not json": object()}, now=1.0, keep=1)
    assert await store.read_log("shadow", limit=5) == []


async def test_a_closed_store_refuses_logs(backend: Backend, tmp_path: Path) -> None:
    closed = backend.make(tmp_path)
    with pytest.raises(StoreUnavailable):
        await closed.append_log("shadow", entry(1), now=1.0, keep=1)
    with pytest.raises(StoreUnavailable):
        await closed.read_log("shadow", limit=1)


@pytest.mark.parametrize("backend", SHARED_BACKENDS, ids=lambda b: b.name)
async def test_two_clients_share_one_log(backend: Backend, tmp_path: Path) -> None:
    first, second = backend.make(tmp_path), backend.make(tmp_path)
    await first.open()
    await second.open()
    try:
        await asyncio.gather(
            *(first.append_log("shadow", entry(n), now=1.0, keep=10) for n in range(8)),
            *(second.append_log("shadow", entry(n), now=1.0, keep=10) for n in range(8, 16)),
        )
        seen_by_first = await first.read_log("shadow", limit=100)
        assert seen_by_first == await second.read_log("shadow", limit=100)
        assert len(seen_by_first) == 10
    finally:
        await first.close()
        await second.close()


async def test_a_version_1_file_gains_empty_logs(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript((HERE / "sqlite_v1.sql").read_text(encoding="utf-8"))
    db.execute("PRAGMA user_version = 1")
    db.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        assert await store.read_log("shadow", limit=10) == []
        await store.append_log("shadow", entry(1), now=1.0, keep=10)
        assert await store.read_log("shadow", limit=10) == [entry(1)]
        assert (await store.get("op-saved-2")) is not None
    finally:
        await store.close()


async def test_a_saved_version_2_file_keeps_its_logs(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript((HERE / "sqlite_v2.sql").read_text(encoding="utf-8"))
    db.execute("PRAGMA user_version = 2")
    db.close()
    assert SCHEMA_VERSION >= 2
    store = SQLiteStore(path)
    await store.open()
    try:
        assert await store.read_log("shadow", limit=10) == [
            {"api": "anthropic", "note": "newest"},
            {"api": "openai_chat", "note": "é ✓"},
        ]
        # Ids keep growing past the saved ones, so the newest stays first.
        await store.append_log("shadow", {"api": "gemini"}, now=20.0, keep=2)
        assert [e["api"] for e in await store.read_log("shadow", limit=10)] == [
            "gemini",
            "anthropic",
        ]
        assert await store.read_log("quarantine", limit=10) == [{"handle": "msg_late"}]
    finally:
        await store.close()


async def test_a_redis_log_expires_with_the_operation_ttl(tmp_path: Path) -> None:
    store = contract_store(tmp_path)
    assert store.operation_ttl == 3600.0
    await store.open()
    client = Redis.from_url(redis_url())
    try:
        await store.append_log("shadow", entry(1), now=1.0, keep=5)
        ttl_ms = await client.pttl(store._log_key("shadow"))
        assert 3_500_000 < ttl_ms <= 3_600_000
    finally:
        await client.aclose()
        await store.close()
