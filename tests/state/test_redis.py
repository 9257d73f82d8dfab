"""What only the Redis store has: separate clients, replicas and their leases, stored records.

The contract itself runs on Redis in test_store_contract.py; this file covers what it
cannot: many clients with their own connections, a replica that crashed or lives on, the
stored form, and failing closed when Redis cannot be reached.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions

from tests.fixtures_dir import COUNTS
from tests.state.redis_server import free_port, key_prefix, redis_url
from tests.state.stores import draft
from turngate.errors import StoreUnavailable
from turngate.graph.codec import canonical_json
from turngate.state.machine import DispatchState, Transition
from turngate.state.redis import DAY, LEASE_RAN_OUT, RedisStore
from turngate.state.redis_records import durability_warnings
from turngate.state.store import LOST_AT_START, ClaimConflict, OperationRecord, open_store

S, T = DispatchState, Transition
REPO = Path(__file__).resolve().parents[2]
RACERS = 50
FAIL_FAST = 0.5  # seconds: far below the 4.6 s of redis-py's default retry

MakeStore = Callable[..., RedisStore]


@pytest.fixture
def prefix(tmp_path: Path) -> str:
    return key_prefix(tmp_path)


@pytest.fixture
async def make_store(prefix: str) -> AsyncIterator[MakeStore]:
    """Stores over this test's keys on the session's server; all closed at the end."""
    made: list[RedisStore] = []

    def make(**options: Any) -> RedisStore:
        store = RedisStore(redis_url(), key_prefix=prefix, **options)
        made.append(store)
        return store

    yield make
    await asyncio.gather(*(store.close() for store in made))


@pytest.fixture
async def raw() -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url(), decode_responses=True)
    yield client
    await client.aclose()


async def opened(store: RedisStore) -> RedisStore:
    await store.open()
    return store


async def test_fifty_clients_with_their_own_connections_race_for_one_slot(
    make_store: MakeStore,
) -> None:
    # A generous connect timeout, as below: under test is the race, not how fast a loaded
    # two-core machine accepts fifty connections at once (the default 0.5 s was missed in CI).
    stores = [make_store(connect_timeout=5.0) for _ in range(RACERS)]
    await asyncio.gather(*(store.open() for store in stores))
    drafts = [draft("conv-clients", revision=1) for _ in stores]

    results = await asyncio.gather(
        *(store.claim(d, now=1.0) for store, d in zip(stores, drafts, strict=True)),
        return_exceptions=True,
    )

    won = [r for r in results if isinstance(r, OperationRecord)]
    lost = [r for r in results if not isinstance(r, OperationRecord)]
    assert len(won) == 1
    assert len(lost) == RACERS - 1
    assert all(isinstance(e, ClaimConflict) for e in lost)
    assert {e.existing.operation_id for e in lost if isinstance(e, ClaimConflict)} == {
        won[0].operation_id
    }
    assert len({store.owner for store in stores}) == RACERS
    seen = await asyncio.gather(*(store.get(won[0].operation_id) for store in stores))
    assert seen == [won[0]] * RACERS
    COUNTS["state: redis claims raced from separate clients (one winner)"] += RACERS


async def test_a_burst_beyond_the_pool_waits_for_a_connection(make_store: MakeStore) -> None:
    # A generous connect timeout: what is under test is the wait for the pool, not how fast
    # a loaded two-core machine accepts four connections (the default 0.5 s once missed).
    store = await opened(make_store(max_connections=4, connect_timeout=5.0))
    records = await asyncio.gather(
        *(store.claim(draft(f"conv-burst-{i}"), now=1.0) for i in range(RACERS))
    )
    assert [r.state for r in records] == [S.DISPATCHING] * RACERS


async def test_records_are_canonical_json_and_expire_with_their_slot(
    make_store: MakeStore, raw: redis.asyncio.Redis, prefix: str
) -> None:
    store = await opened(make_store(operation_ttl=600.0, lease_ttl=5.0))
    record = await store.claim(draft("conv-json"), now=1.0)
    sent = await store.transition(record.operation_id, T.SEND, now=2.0, detail="é ✓")

    op_key = f"{prefix}op:{record.operation_id}"
    stored = await raw.hgetall(op_key)
    assert stored["record"] == canonical_json({"v": 1, **sent.to_json()}).decode()
    assert (stored["state"], stored["seq"], stored["owner"]) == ("SENT", "3", store.owner)
    (slot_key,) = [key async for key in raw.scan_iter(match=f"{prefix}slot:*")]
    assert await raw.hgetall(slot_key) == {"attempts": "1", "live": record.operation_id}
    for key in (op_key, slot_key):
        assert 590_000 < await raw.pttl(key) <= 600_000
    assert 0 < await raw.pttl(f"{prefix}lease:{store.owner}") <= 5_000
    assert await raw.hgetall(f"{prefix}inflight") == {record.operation_id: store.owner}

    await store.transition(record.operation_id, T.COMMIT, now=3.0)
    assert await raw.hgetall(f"{prefix}inflight") == {}
    assert await raw.hgetall(slot_key) == {"attempts": "1", "live": record.operation_id}

    keep = await opened(make_store(operation_ttl=None))
    kept = await keep.claim(draft("conv-forever"), now=1.0)
    assert await raw.pttl(f"{prefix}op:{kept.operation_id}") == -1
    assert RedisStore("redis://x").operation_ttl == 7 * DAY


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (lambda r: r.replace('"model":"gpt-test"', '"model":"gpt-other"'), "does not match"),
        (lambda r: r.replace('"v":1', '"v":2'), "record version 2"),
        (lambda r: r.replace('"state":"DISPATCHING"', '"state":"LIMBO"'), "LIMBO"),
        (lambda r: r[:-1], "cannot be read"),
    ],
    ids=["manifest-changed", "newer-version", "unknown-state", "truncated"],
)
async def test_a_record_that_does_not_read_back_fails_closed(
    make_store: MakeStore,
    raw: redis.asyncio.Redis,
    prefix: str,
    tamper: Callable[[str], str],
    said: str,
) -> None:
    store = await opened(make_store())
    op = (await store.claim(draft("conv-tampered"), now=1.0)).operation_id
    key = f"{prefix}op:{op}"
    await raw.hset(key, "record", tamper(await raw.hget(key, "record")))

    for call in (store.get(op), store.transition(op, T.SEND, now=2.0)):
        with pytest.raises(StoreUnavailable) as raised:
            await call
        assert said in str(raised.value)
        assert raised.value.status == 503
    with pytest.raises(StoreUnavailable):  # the slot's live attempt cannot be read either
        await store.claim(draft("conv-tampered"), now=3.0)


async def test_recover_leaves_a_live_replica_alone_and_takes_over_a_closed_one(
    make_store: MakeStore,
) -> None:
    left, right = await opened(make_store()), await opened(make_store())
    theirs = await left.claim(draft("conv-left"), now=1.0)
    await left.transition(theirs.operation_id, T.SEND, now=2.0)
    mine = await right.claim(draft("conv-right"), now=3.0)

    assert await right.take_over_expired(now=9.0) == []  # never its own, nor the live
    recovered = await right.recover(now=10.0)
    assert [r.operation_id for r in recovered] == [mine.operation_id]
    assert recovered[0].history[-1].detail == LOST_AT_START
    assert (await right.get(theirs.operation_id)).state is S.SENT  # type: ignore[union-attr]
    # The live owner goes on as if nothing happened.
    await left.transition(theirs.operation_id, T.STREAM, now=11.0, handle="msg_live")

    await left.close()  # hands over at once: its lease is gone
    (lost,) = await right.take_over_expired(now=20.0)
    assert lost.operation_id == theirs.operation_id
    assert lost.state is S.UNKNOWN
    assert lost.history[-1].transition is T.LOSE
    assert lost.history[-1].detail == f"{LEASE_RAN_OUT} (owner {left.owner})"
    assert await right.recover(now=21.0) == []


CLAIM_AND_HANG = """
import asyncio, sys
from tests.state.stores import draft
from turngate.state.machine import Transition
from turngate.state.redis import RedisStore

async def main(url, prefix, owner):
    store = RedisStore(url, key_prefix=prefix, lease_ttl=1.0, owner=owner or None)
    await store.open()
    record = await store.claim(draft("conv-crash", revision=2), now=10.0)
    await store.transition(record.operation_id, Transition.SEND, now=11.0)
    print("claimed", record.operation_id, flush=True)
    await asyncio.sleep(3600)  # the heartbeat keeps the lease alive until the kill

asyncio.run(main(*sys.argv[1:]))
"""


def replica_that_claimed(prefix: str, owner: str = "") -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_HANG, redis_url(), prefix, owner],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    said = child.stdout.readline().split()
    assert said[:1] == ["claimed"], f"child said {said!r}, exit code {child.poll()}"
    return child, said[1]


def kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert child.stdout is not None
    child.stdout.close()


async def test_a_killed_replica_is_taken_over_once_its_lease_runs_out(
    make_store: MakeStore,
) -> None:
    child, op = replica_that_claimed(make_store().key_prefix)
    try:
        survivor = await opened(make_store())
        assert await survivor.recover(now=20.0) == []  # alive: it is sending right now
    finally:
        kill(child)
    killed_at = time.monotonic()
    assert await survivor.recover(now=21.0) == []  # its lease still runs

    recovered: list[OperationRecord] = []
    while not recovered and time.monotonic() - killed_at < 5.0:
        await asyncio.sleep(0.1)
        recovered = await survivor.take_over_expired(now=22.0)
    waited = time.monotonic() - killed_at

    assert [r.operation_id for r in recovered] == [op]
    assert recovered[0].state is S.UNKNOWN
    assert [c.state for c in recovered[0].history] == [S.PREPARED, S.DISPATCHING, S.SENT, S.UNKNOWN]
    # The child's lease_ttl is 1 s; a loaded 2-core machine stretched the polling to 2.7 s.
    assert 0.5 < waited < 4.5
    # UNKNOWN still blocks the slot: no new generation before the old one is known over.
    with pytest.raises(ClaimConflict) as raised:
        await survivor.claim(draft("conv-crash", revision=2), now=23.0)
    assert raised.value.existing == recovered[0]


async def test_a_replica_restarted_under_its_stable_owner_takes_over_at_once(
    make_store: MakeStore,
) -> None:
    child, op = replica_that_claimed(make_store().key_prefix, owner="pod-a")
    kill(child)
    bystander = await opened(make_store())
    assert await bystander.recover(now=20.0) == []  # pod-a's lease has not run out

    restarted = await opened(make_store(owner="pod-a"))
    (lost,) = await restarted.recover(now=21.0)
    assert (lost.operation_id, lost.state) == (op, S.UNKNOWN)


async def test_an_unreachable_redis_fails_closed_at_once() -> None:
    store = RedisStore(f"redis://:s3cret@127.0.0.1:{free_port()}/0")
    started = time.perf_counter()
    with pytest.raises(StoreUnavailable) as raised:
        await store.open()
    assert time.perf_counter() - started < FAIL_FAST
    assert raised.value.status == 503
    assert raised.value.rule == "state_store_unavailable"
    assert isinstance(raised.value.__cause__, redis.exceptions.ConnectionError)
    assert "s3cret" not in str(raised.value)
    assert "127.0.0.1" in str(raised.value)

    assert await store.ping() is False
    with pytest.raises(StoreUnavailable):
        await store.claim(draft(), now=1.0)


async def test_a_redis_that_accepts_but_never_answers_times_out() -> None:
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up
        writer.close()

    silent = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    store = RedisStore(f"redis://127.0.0.1:{port}/0", command_timeout=0.2)
    try:
        started = time.perf_counter()
        with pytest.raises(StoreUnavailable) as raised:
            await store.open()
        assert 0.2 <= time.perf_counter() - started < FAIL_FAST
        assert isinstance(raised.value.__cause__, redis.exceptions.TimeoutError)
    finally:
        silent.close()
        await silent.wait_closed()


async def test_open_store_takes_a_redis_url() -> None:
    store = open_store(redis_url())
    assert isinstance(store, RedisStore)
    assert store.key_prefix == "turngate:"
    await store.open()
    try:
        assert await store.ping() is True
    finally:
        await store.close()
    assert await store.ping() is False


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"}, []),
        ({"appendonly": "yes", "appendfsync": "everysec"}, ["crash of the Redis host"]),
        ({"appendonly": "no", "appendfsync": "always"}, ["no append-only file"]),
        ({}, ["no append-only file"]),
        (
            {"appendonly": "no", "maxmemory-policy": "volatile-lru"},
            ["no append-only file", "'volatile-lru' may evict"],
        ),
    ],
    ids=["durable", "everysec", "no-aof", "unknown", "no-aof-and-eviction"],
)
def test_durability_warnings(config: dict[str, str], said: list[str]) -> None:
    warnings = durability_warnings(config)
    assert len(warnings) == len(said)
    for warning, words in zip(warnings, said, strict=True):
        assert words in warning
