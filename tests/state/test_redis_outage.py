"""Redis going away under a live store, on servers these tests start and kill themselves.

A SIGKILLed Redis: every call fails closed at once with 503; restarted with its
append-only file, it still has every operation the store was told was written, and the
same store carries on. Claims whose caller gave up while Redis did not answer never keep
their slot blocked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import redis.asyncio
import redis.exceptions

from tests.state.redis_server import RedisServer
from tests.state.stores import draft
from turngate.errors import StateConflict, StoreUnavailable
from turngate.state.machine import DispatchState, Transition
from turngate.state.redis import ABANDONED_CLAIM, RedisStore
from turngate.state.store import ClaimConflict

S, T = DispatchState, Transition
DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
FAIL_FAST = 0.5


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    started: list[RedisServer] = []

    def start(*options: str, name: str = "redis") -> RedisServer:
        server = RedisServer(tmp_path / name, *options).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
async def stores() -> AsyncIterator[Callable[..., Awaitable[RedisStore]]]:
    made: list[RedisStore] = []

    async def open_on(server: RedisServer, **options: float | str) -> RedisStore:
        store = RedisStore(server.url, **options)  # type: ignore[arg-type]
        made.append(store)
        await store.open()
        return store

    yield open_on
    for store in made:
        await store.close()


async def test_an_outage_fails_closed_and_loses_nothing_committed(
    servers: Callable[..., RedisServer],
    stores: Callable[..., Awaitable[RedisStore]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = servers(*DURABLE)
    with caplog.at_level(logging.WARNING, logger="turngate.state"):
        store = await stores(server)
    assert caplog.records == []  # durable settings: nothing to warn about

    op = (await store.claim(draft("conv-kept"), now=1.0)).operation_id
    await store.transition(op, T.SEND, now=2.0)
    await store.transition(op, T.STREAM, now=3.0, handle="msg_kept")
    committed = await store.transition(op, T.COMMIT, now=4.0)
    flying = (await store.claim(draft("conv-flying"), now=5.0)).operation_id
    sent = await store.transition(flying, T.SEND, now=6.0)

    await asyncio.to_thread(server.kill)  # the loop runs on, as it does in a live proxy

    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.claim(draft("conv-during"), now=7.0),
        lambda: store.get(op),
        lambda: store.transition(flying, T.STREAM, now=7.0),
        lambda: store.recover(now=7.0),
    ]
    for call in calls:
        started = time.perf_counter()
        with pytest.raises(StoreUnavailable) as raised:
            await call()
        assert time.perf_counter() - started < FAIL_FAST
        assert raised.value.status == 503
        assert isinstance(raised.value.__cause__, redis.exceptions.ConnectionError | OSError)
    assert await store.ping() is False

    await asyncio.to_thread(server.start)  # same port and folder: it replays its AOF

    assert await store.get(op) == committed  # the same store, reconnected
    assert await store.get(flying) == sent
    assert await store.ping() is True
    with pytest.raises(ClaimConflict) as raised_conflict:  # still one canonical turn
        await store.claim(draft("conv-kept"), now=8.0)
    assert raised_conflict.value.existing == committed
    # The claim made during the outage never landed, and its slot is free.
    during = await store.claim(draft("conv-during"), now=9.0)
    assert during.manifest.attempt == 1

    # Another replica starting now leaves the in-flight attempt to its live owner...
    other = await stores(server)
    assert await other.recover(now=10.0) == []
    # ...and takes it over once that owner is gone.
    await store.close()
    lost = await other.take_over_expired(now=11.0)
    assert sorted(r.operation_id for r in lost) == sorted([flying, during.operation_id])
    assert {r.state for r in lost} == {S.UNKNOWN}


async def test_without_an_append_only_file_a_restart_loses_operations_and_open_warns(
    servers: Callable[..., RedisServer],
    stores: Callable[..., Awaitable[RedisStore]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = servers()  # the recipe's test server: --save '' --appendonly no
    with caplog.at_level(logging.WARNING, logger="turngate.state"):
        store = await stores(server)
    assert any("appendonly yes" in r.getMessage() for r in caplog.records)

    op = (await store.claim(draft("conv-volatile"), now=1.0)).operation_id
    # No call in between: the store's pooled connection is to the dead server.
    await asyncio.to_thread(server.kill)
    await asyncio.to_thread(server.start)

    # Why docs/operations-redis.md asks for appendonly yes: this attempt may have been
    # sent, and the store no longer knows it.
    assert await store.get(op) is None


async def test_a_read_only_redis_is_not_ready_and_refuses_dispatch(
    servers: Callable[..., RedisServer],
    stores: Callable[..., Awaitable[RedisStore]],
) -> None:
    primary, demoted = servers(name="primary"), servers(name="demoted")
    store = await stores(demoted)
    admin = redis.asyncio.Redis.from_url(demoted.url, decode_responses=True)
    try:
        # A failover that left the store pointed at a replica.
        await admin.execute_command("REPLICAOF", "127.0.0.1", str(primary.port))
        assert await store.ping() is False
        with pytest.raises(StoreUnavailable) as raised:
            await store.claim(draft("conv-replica"), now=1.0)
        assert "READONLY" in str(raised.value) or "read only" in str(raised.value)

        await admin.execute_command("REPLICAOF", "NO", "ONE")
        assert await store.ping() is True
        assert (await store.claim(draft("conv-replica"), now=2.0)).manifest.attempt == 1
    finally:
        await admin.aclose()


async def settled(
    store: RedisStore, admin: redis.asyncio.Redis, operation_id: str, timeout: float = 5.0
) -> object:
    """The abandoned claim once the store has dealt with it: its record, or 'barred'. A read
    that times out (a loaded machine, the test's server starved of CPU) is asked again until
    the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = await store.get(operation_id)
        except StoreUnavailable:
            await asyncio.sleep(0.05)
            continue
        if record is not None and record.state is not S.DISPATCHING:
            return record
        if record is None and await admin.exists(f"{store.key_prefix}abandoned:{operation_id}"):
            return "barred"
        await asyncio.sleep(0.05)
    raise AssertionError(f"{operation_id} still DISPATCHING or pending after {timeout} s")


async def test_a_claim_redis_answered_too_late_is_failed_not_left_blocking(
    servers: Callable[..., RedisServer],
    stores: Callable[..., Awaitable[RedisStore]],
) -> None:
    server = servers("--enable-debug-command", "yes")
    store = await stores(server, lease_ttl=0.6, command_timeout=0.1)
    await store.claim(draft("conv-warm"), now=1.0)  # scripts loaded: no NOSCRIPT below
    admin = redis.asyncio.Redis.from_url(server.url)
    try:
        stall = asyncio.create_task(admin.execute_command("DEBUG", "SLEEP", "0.4"))
        await asyncio.sleep(0.05)
        late = draft("conv-late")
        with pytest.raises(StoreUnavailable) as raised:  # the caller sends nothing
            await store.claim(late, now=2.0)
        assert isinstance(raised.value.__cause__, redis.exceptions.TimeoutError)
        await stall
        # Redis ran the script once it woke up; the store fails that attempt by itself.
        failed = await settled(store, admin, late.operation_id)
    finally:
        await admin.aclose()

    assert getattr(failed, "state", None) is S.FAILED
    assert failed.history[-1].detail == ABANDONED_CLAIM  # type: ignore[attr-defined]
    assert (await store.claim(draft("conv-late"), now=3.0)).manifest.attempt == 2


async def test_a_cancelled_claim_that_never_landed_is_barred(
    servers: Callable[..., RedisServer],
    stores: Callable[..., Awaitable[RedisStore]],
) -> None:
    server = servers()
    store = await stores(server)
    await store.claim(draft("conv-warm"), now=1.0)
    admin = redis.asyncio.Redis.from_url(server.url)
    try:
        await admin.execute_command("CLIENT", "PAUSE", "300", "WRITE")
        gone = draft("conv-gone")
        claiming = asyncio.create_task(store.claim(gone, now=2.0))
        await asyncio.sleep(0.05)
        claiming.cancel()  # the client hung up while the script waited
        with pytest.raises(asyncio.CancelledError):
            await claiming
        assert await settled(store, admin, gone.operation_id) == "barred"
    finally:
        await admin.aclose()

    # A late copy of that claim loses, whenever it arrives; the slot stays free.
    with pytest.raises(StateConflict) as raised:
        await store.claim(gone, now=3.0)
    assert raised.value.rule == "dispatch_conflict"
    assert (await store.claim(draft("conv-gone"), now=4.0)).manifest.attempt == 1


async def test_an_evicting_redis_is_named_at_open(
    servers: Callable[..., RedisServer],
    stores: Callable[..., Awaitable[RedisStore]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = servers(*DURABLE, "--maxmemory-policy", "volatile-lru")
    with caplog.at_level(logging.WARNING, logger="turngate.state"):
        store = await stores(server)
    assert [r.getMessage() for r in caplog.records] == [
        f"state store {server.url}: maxmemory-policy 'volatile-lru' may evict operations and "
        "slots, and an evicted slot admits a second attempt. Set maxmemory-policy noeviction."
    ]
    assert await store.ping() is True  # a warning, not a refusal
