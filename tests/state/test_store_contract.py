"""The StateStore contract, run against every store in ``BACKENDS`` with no other change.

The claim is the CAS the dispatch path rests on: for one (conversation, revision, cancel
generation) at most one attempt is live, and of many concurrent claims exactly one wins.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from tests.fixtures_dir import COUNTS
from tests.state.stores import (
    BACKENDS,
    SHARED_BACKENDS,
    Backend,
    claim_into,
    draft,
    paths_from_dispatching,
)
from turngate.errors import IllegalTransition, StateConflict, StoreUnavailable
from turngate.state.machine import TRANSITIONS, DispatchState, Transition
from turngate.state.manifest import idempotency_key
from turngate.state.store import ClaimConflict, OperationRecord, StateStore

S, T = DispatchState, Transition
REPO = Path(__file__).resolve().parents[2]
REACHABLE = paths_from_dispatching()
# SPEC §4 and the store contract: these attempts block the next claim for their slot.
BLOCKS_NEXT_CLAIM = {S.DISPATCHING, S.SENT, S.STREAMING, S.UNKNOWN, S.COMMITTED}
RACERS = 50


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


def split(
    results: list[OperationRecord | BaseException],
) -> tuple[list[OperationRecord], list[BaseException]]:
    won = [r for r in results if isinstance(r, OperationRecord)]
    lost = [r for r in results if not isinstance(r, OperationRecord)]
    return won, lost


async def test_claim_records_prepared_then_dispatching(store: StateStore) -> None:
    manifest = draft("conv-a", revision=3, cancel_generation=1)
    record = await store.claim(manifest, now=100.0)

    assert record.state is S.DISPATCHING
    assert record.manifest.attempt == 1
    assert record.manifest.idempotency_key == idempotency_key("conv-a", 3, 1, 1)
    assert record.manifest == manifest.with_attempt(1)
    assert [(c.state, c.transition, c.at) for c in record.history] == [
        (S.PREPARED, None, 100.0),
        (S.DISPATCHING, T.CLAIM, 100.0),
    ]
    assert record.handle is None
    assert await store.get(record.operation_id) == record


async def test_a_dispatch_walks_to_committed_with_its_history(store: StateStore) -> None:
    claimed = await store.claim(draft(), now=1.0)
    op = claimed.operation_id
    await store.transition(op, T.SEND, now=2.0)
    await store.transition(
        op, T.STREAM, now=3.0, handle="chatcmpl-9", detail="200 text/event-stream"
    )
    done = await store.transition(op, T.COMMIT, now=4.5, handle="chatcmpl-9")

    assert done == await store.get(op)
    assert done.state is S.COMMITTED
    assert done.handle == "chatcmpl-9"
    assert done.manifest == claimed.manifest
    assert done.manifest.digest == claimed.manifest.digest
    assert [(c.state, c.transition, c.at, c.detail) for c in done.history] == [
        (S.PREPARED, None, 1.0, None),
        (S.DISPATCHING, T.CLAIM, 1.0, None),
        (S.SENT, T.SEND, 2.0, None),
        (S.STREAMING, T.STREAM, 3.0, "200 text/event-stream"),
        (S.COMMITTED, T.COMMIT, 4.5, None),
    ]
    shown = orjson.loads(orjson.dumps(done.to_json()))  # GET /turngate/v1/operations/{id}
    assert shown["state"] == "COMMITTED"
    assert shown["manifest"]["idempotencyKey"] == claimed.manifest.idempotency_key


@pytest.mark.parametrize("state", list(REACHABLE), ids=str)
@pytest.mark.parametrize("transition", list(Transition), ids=str)
async def test_each_transition_from_each_stored_state(
    store: StateStore, state: DispatchState, transition: Transition
) -> None:
    op = await claim_into(store, state)
    before = await store.get(op)
    assert before is not None
    assert before.state is state

    target = TRANSITIONS.get((state, transition))
    if target is None:
        with pytest.raises(IllegalTransition):
            await store.transition(op, transition, now=99.0)
        assert await store.get(op) == before
    else:
        after = await store.transition(op, transition, now=99.0, detail="why")
        assert after.state is target
        assert after.history == (*before.history, after.history[-1])
        assert (after.history[-1].transition, after.history[-1].detail) == (transition, "why")
        assert await store.get(op) == after


async def test_unknown_operation(store: StateStore) -> None:
    assert await store.get("op-nobody") is None
    with pytest.raises(KeyError):
        await store.transition("op-nobody", T.SEND, now=1.0)


async def test_concurrent_claims_for_one_slot_exactly_one_wins(store: StateStore) -> None:
    drafts = [draft("conv-race", revision=2) for _ in range(RACERS)]
    results = await asyncio.gather(
        *(store.claim(d, now=5.0) for d in drafts), return_exceptions=True
    )
    won, lost = split(results)

    assert len(won) == 1
    assert len(lost) == RACERS - 1
    assert all(isinstance(e, ClaimConflict) for e in lost)
    assert {e.existing.operation_id for e in lost if isinstance(e, ClaimConflict)} == {
        won[0].operation_id
    }
    assert all(e.rule == "dispatch_conflict" and e.status == 409 for e in lost)
    assert won[0].manifest.attempt == 1
    for d in drafts:  # a losing claim stores nothing
        assert (await store.get(d.operation_id) is None) == (d.operation_id != won[0].operation_id)
    COUNTS["state: concurrent claims raced (one winner each)"] += RACERS


async def test_concurrent_transitions_on_one_operation_exactly_one_succeeds(
    store: StateStore,
) -> None:
    op = (await store.claim(draft(), now=1.0)).operation_id
    results = await asyncio.gather(
        *(store.transition(op, T.SEND, now=2.0) for _ in range(RACERS)), return_exceptions=True
    )
    won, lost = split(results)

    assert len(won) == 1
    assert all(isinstance(e, IllegalTransition) for e in lost)
    assert len(lost) == RACERS - 1
    final = await store.get(op)
    assert final is not None
    assert [c.state for c in final.history].count(S.SENT) == 1


async def test_racing_different_moves_leaves_one_consistent_outcome(store: StateStore) -> None:
    op = (await store.claim(draft(), now=1.0)).operation_id
    moves = [T.FAIL, T.LOSE] * (RACERS // 2)
    results = await asyncio.gather(
        *(store.transition(op, m, now=2.0) for m in moves), return_exceptions=True
    )
    won, lost = split(results)

    assert len(won) == 1
    assert all(isinstance(e, IllegalTransition) for e in lost)
    final = await store.get(op)
    assert final == won[0]
    assert len(final.history) == 3


async def test_claim_after_failed_or_cancelled_gets_the_next_attempt(store: StateStore) -> None:
    first = await store.claim(draft("conv-b"), now=1.0)
    await store.transition(first.operation_id, T.FAIL, now=2.0)

    second = await store.claim(draft("conv-b"), now=3.0)
    assert second.manifest.attempt == 2
    assert second.manifest.idempotency_key != first.manifest.idempotency_key
    assert second.manifest.idempotency_key == idempotency_key("conv-b", 0, 0, 2)

    await store.transition(second.operation_id, T.LOSE, now=4.0)
    await store.transition(second.operation_id, T.CANCEL, now=5.0)
    third = await store.claim(draft("conv-b"), now=6.0)
    assert third.manifest.attempt == 3
    assert len({r.manifest.idempotency_key for r in (first, second, third)}) == 3
    # The earlier attempts are kept as they were.
    assert (await store.get(first.operation_id)).state is S.FAILED  # type: ignore[union-attr]


@pytest.mark.parametrize("state", list(REACHABLE), ids=str)
async def test_which_attempts_block_the_next_claim(store: StateStore, state: DispatchState) -> None:
    op = await claim_into(store, state, conversation_id="conv-c")
    existing = await store.get(op)

    if state in BLOCKS_NEXT_CLAIM:
        with pytest.raises(ClaimConflict) as raised:
            await store.claim(draft("conv-c"), now=50.0)
        assert raised.value.existing == existing
        assert op in str(raised.value)
        assert str(state) in str(raised.value)
    else:
        assert (await store.claim(draft("conv-c"), now=50.0)).manifest.attempt == 2


@pytest.mark.parametrize("state", list(REACHABLE), ids=str)
async def test_the_live_attempt_of_a_slot_is_the_one_a_claim_would_meet(
    store: StateStore, state: DispatchState
) -> None:
    assert await store.live_attempt("conv-l", 0, 0) is None
    op = await claim_into(store, state, conversation_id="conv-l")
    live = await store.live_attempt("conv-l", 0, 0)
    if state in BLOCKS_NEXT_CLAIM:
        assert live == await store.get(op)
    else:
        assert live is None
    # Another revision or cancel generation is another slot.
    assert await store.live_attempt("conv-l", 1, 0) is None
    assert await store.live_attempt("conv-l", 0, 1) is None


async def test_other_revisions_and_cancel_generations_are_other_slots(store: StateStore) -> None:
    await store.claim(draft("conv-d", revision=0), now=1.0)
    assert (await store.claim(draft("conv-d", revision=1), now=1.0)).manifest.attempt == 1
    assert (
        await store.claim(draft("conv-d", revision=0, cancel_generation=1), now=1.0)
    ).manifest.attempt == 1
    assert (await store.claim(draft("conv-e", revision=0), now=1.0)).manifest.attempt == 1
    with pytest.raises(ClaimConflict):
        await store.claim(draft("conv-d", revision=1), now=1.0)


async def test_conversationless_drafts_never_conflict(store: StateStore) -> None:
    drafts = [draft(None) for _ in range(20)]
    records = await asyncio.gather(*(store.claim(d, now=1.0) for d in drafts))

    assert all(r.manifest.attempt == 1 for r in records)
    assert len({r.manifest.idempotency_key for r in records}) == len(drafts)
    assert [r.operation_id for r in records] == [d.operation_id for d in drafts]


async def test_an_operation_id_is_claimed_once(store: StateStore) -> None:
    first = await store.claim(draft("conv-f", operation_id="op-dup"), now=1.0)
    failed = await store.transition(first.operation_id, T.FAIL, now=2.0)

    for again in (draft("conv-f", operation_id="op-dup"), draft("conv-g", operation_id="op-dup")):
        with pytest.raises(ClaimConflict) as raised:
            await store.claim(again, now=3.0)
        assert raised.value.existing == failed
    assert await store.get("op-dup") == failed


async def test_recover_moves_only_in_flight_states(store: StateStore) -> None:
    ops = {
        state: await claim_into(store, state, conversation_id=f"conv-{state}")
        for state in REACHABLE
    }
    before = {state: await store.get(op) for state, op in ops.items()}

    moved = await store.recover(now=500.0)

    in_flight = {S.DISPATCHING, S.SENT, S.STREAMING}
    assert sorted(r.operation_id for r in moved) == sorted(ops[s] for s in in_flight)
    for state, op in ops.items():
        after = await store.get(op)
        assert after is not None
        if state in in_flight:
            assert after.state is S.UNKNOWN
            assert after.history[:-1] == before[state].history  # type: ignore[union-attr]
            assert (after.history[-1].transition, after.history[-1].at) == (T.LOSE, 500.0)
            assert after in moved
        else:
            assert after == before[state]
    assert await store.recover(now=501.0) == []


async def test_a_handle_is_bound_once(store: StateStore) -> None:
    op = (await store.claim(draft(), now=1.0)).operation_id
    await store.transition(op, T.SEND, now=2.0)
    streaming = await store.transition(op, T.STREAM, now=3.0, handle="msg_01")

    with pytest.raises(StateConflict) as raised:
        await store.transition(op, T.COMMIT, now=4.0, handle="msg_02")
    assert raised.value.rule == "handle_conflict"
    assert await store.get(op) == streaming

    committed = await store.transition(op, T.COMMIT, now=4.0)
    assert committed.handle == "msg_01"


async def test_ping_and_calls_follow_open_and_close(backend: Backend, tmp_path: Path) -> None:
    store = backend.make(tmp_path)
    assert await store.ping() is False
    with pytest.raises(StoreUnavailable):
        await store.claim(draft(), now=1.0)

    await store.open()
    assert await store.ping() is True
    kept = await store.claim(draft(), now=1.0)
    await store.close()

    assert await store.ping() is False
    with pytest.raises(StoreUnavailable) as raised:
        await store.get(kept.operation_id)
    assert raised.value.status == 503
    await store.close()  # twice is harmless

    await store.open()
    assert await store.get(kept.operation_id) == kept
    await store.close()


# --- two clients of the same data (stores that share it across instances and processes) ---


@pytest.mark.parametrize("backend", SHARED_BACKENDS, ids=lambda b: b.name)
async def test_two_clients_race_for_one_slot(backend: Backend, tmp_path: Path) -> None:
    left, right = backend.make(tmp_path), backend.make(tmp_path)
    await asyncio.gather(left.open(), right.open())
    try:
        drafts = [draft("conv-shared") for _ in range(RACERS)]
        results = await asyncio.gather(
            *((left if i % 2 else right).claim(d, now=1.0) for i, d in enumerate(drafts)),
            return_exceptions=True,
        )
        won, lost = split(results)
        assert len(won) == 1
        assert all(isinstance(e, ClaimConflict) for e in lost)
        assert await left.get(won[0].operation_id) == await right.get(won[0].operation_id)

        op = won[0].operation_id
        results = await asyncio.gather(
            *((left if i % 2 else right).transition(op, T.SEND, now=2.0) for i in range(RACERS)),
            return_exceptions=True,
        )
        won, lost = split(results)
        assert len(won) == 1
        assert all(isinstance(e, IllegalTransition) for e in lost)
    finally:
        await asyncio.gather(left.close(), right.close())


CHILDREN = 2
PER_PROCESS = 20


@pytest.mark.parametrize("backend", SHARED_BACKENDS, ids=lambda b: b.name)
async def test_other_processes_race_for_one_slot(backend: Backend, tmp_path: Path) -> None:
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.state.race_child",
            backend.name,
            str(tmp_path),
            "conv-processes",
            str(PER_PROCESS),
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(CHILDREN)
    ]
    store = backend.make(tmp_path)
    await store.open()
    try:
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 30)
            assert line == b"ready\n"
        # Everyone fires at one wall-clock instant, so the claims really overlap.
        start_at = time.time() + 0.3
        for child in children:
            assert child.stdin is not None
            child.stdin.write(f"{start_at}\n".encode())
            await child.stdin.drain()
        await asyncio.sleep(start_at - time.time())
        mine = await asyncio.gather(
            *(store.claim(draft("conv-processes"), now=1.0) for _ in range(PER_PROCESS)),
            return_exceptions=True,
        )
        outputs = [await asyncio.wait_for(c.communicate(), 60) for c in children]
    finally:
        await store.close()

    reports = [json.loads(out) for out, _ in outputs]
    assert all(c.returncode == 0 for c in children)
    my_won, my_lost = split(mine)
    assert all(isinstance(e, ClaimConflict) for e in my_lost)
    winners = [r.operation_id for r in my_won] + [op for rep in reports for op in rep["won"]]
    assert len(winners) == 1
    conflicts = sum(rep["conflicts"] for rep in reports) + len(my_lost)
    assert conflicts == (CHILDREN + 1) * PER_PROCESS - 1
    seen_as_existing = {e.existing.operation_id for e in my_lost if isinstance(e, ClaimConflict)}
    for rep in reports:
        seen_as_existing |= set(rep["existing"])
    assert seen_as_existing == set(winners)
    COUNTS["state: claims raced across processes (one winner)"] += (CHILDREN + 1) * PER_PROCESS
