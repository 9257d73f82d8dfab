"""The conversation half of the StateStore contract, on every store in ``BACKENDS``: canonical
turns (one per conversation, revision and cancel generation, and only from the attempt that
holds the slot in the active generation), cancel, stored responses and client keys."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fixtures_dir import COUNTS
from tests.state.stores import BACKENDS, SHARED_BACKENDS, Backend, claim_into, draft
from turngate.errors import IllegalTransition, StateConflict
from turngate.state.conversations import (
    ClientKey,
    KeyReused,
    StoredResponse,
    TurnConflict,
)
from turngate.state.machine import DispatchState, Transition
from turngate.state.redis import RedisStore
from turngate.state.sqlite import SQLiteStore
from turngate.state.store import ClaimConflict, OperationRecord, StateStore, open_store

S, T = DispatchState, Transition
RACERS = 30


def digest(n: int) -> str:
    return "sha256:" + f"{n:x}" * 64


def answer(text: str, *, expires_at: float = 1e12, streamed: bool = False) -> StoredResponse:
    return StoredResponse(200, "application/json", text.encode(), streamed, expires_at)


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    backend: Backend = request.param
    opened = backend.make(tmp_path)
    await opened.open()
    yield opened
    await opened.close()


async def sent(
    store: StateStore, conversation: str | None, *, revision: int = 0, gen: int = 0
) -> str:
    """A claimed attempt that has sent its bytes, ready to commit."""
    record = await store.claim(
        draft(conversation, revision=revision, cancel_generation=gen), now=1.0
    )
    await store.transition(record.operation_id, T.SEND, now=2.0)
    return record.operation_id


async def test_the_first_request_adopts_its_history_and_later_ones_read_it(
    store: StateStore,
) -> None:
    assert await store.conversation("conv-new") is None
    opened = await store.open_conversation("conv-new", [digest(1), digest(2)], now=5.0)
    assert (opened.revision, opened.cancel_generation, opened.digests) == (
        2,
        0,
        [digest(1), digest(2)],
    )
    assert [t.operation_id for t in opened.turns] == [None, None]  # adopted, not committed
    # An existing conversation is never re-adopted: the next history is checked against it.
    again = await store.open_conversation("conv-new", [digest(9)], now=6.0)
    assert again == opened == await store.conversation("conv-new")


async def test_a_commit_makes_the_turn_canonical_with_its_response(store: StateStore) -> None:
    await store.open_conversation("conv-a", [], now=0.5)
    op = await sent(store, "conv-a")
    await store.transition(op, T.STREAM, now=3.0)
    done = await store.commit_turn(
        op, digest=digest(1), now=4.0, handle="msg_1", response=answer("first")
    )
    assert (done.state, done.handle, done.history[-1].transition) == (
        S.COMMITTED,
        "msg_1",
        T.COMMIT,
    )
    assert await store.get(op) == done
    conversation = await store.conversation("conv-a")
    assert conversation is not None
    assert conversation.digests == [digest(1)]
    assert (conversation.turns[0].operation_id, conversation.turns[0].at) == (op, 4.0)
    assert await store.load_response(op, now=5.0) == answer("first")
    # The next revision extends the conversation.
    second = await sent(store, "conv-a", revision=1)
    await store.commit_turn(second, digest=digest(2), now=6.0)
    conversation = await store.conversation("conv-a")
    assert conversation is not None
    assert conversation.digests == [digest(1), digest(2)]
    assert await store.load_response(second, now=6.0) is None  # none was given


async def test_a_commit_that_carries_send_writes_both_in_order(store: StateStore) -> None:
    # An answer back before SEND was written on its own: SEND and COMMIT in one write.
    claimed = await store.claim(draft("conv-s"), now=1.0)
    op = claimed.operation_id
    done = await store.commit_turn(op, digest=digest(1), now=2.0, response=answer("a"), sent=True)
    assert [(c.state, c.transition, c.at) for c in done.history] == [
        (S.PREPARED, None, 1.0),
        (S.DISPATCHING, T.CLAIM, 1.0),
        (S.SENT, T.SEND, 2.0),
        (S.COMMITTED, T.COMMIT, 2.0),
    ]
    assert await store.get(op) == done
    conversation = await store.conversation("conv-s")
    assert conversation is not None
    assert conversation.digests == [digest(1)]
    assert await store.load_response(op, now=3.0) == answer("a")
    # SEND already written on its own: the commit writes COMMIT alone.
    second = await sent(store, "conv-s", revision=1)
    again = await store.commit_turn(second, digest=digest(2), now=3.0, sent=True)
    assert [c.transition for c in again.history] == [None, T.CLAIM, T.SEND, T.COMMIT]
    # A refused commit writes neither: the attempt was cancelled before its answer came.
    third = (await store.claim(draft("conv-s", revision=2), now=4.0)).operation_id
    await store.cancel_conversation("conv-s", now=5.0)
    with pytest.raises(IllegalTransition):
        await store.commit_turn(third, digest=digest(3), now=6.0, sent=True)
    record = await store.get(third)
    assert record is not None
    assert [c.state for c in record.history] == [S.PREPARED, S.DISPATCHING, S.CANCELLED]


async def test_a_stream_that_carries_send_writes_both_in_order(store: StateStore) -> None:
    # Stream headers back before SEND was written on its own: SEND and STREAM in one write.
    op = (await store.claim(draft("conv-t"), now=1.0)).operation_id
    streaming = await store.transition(op, T.STREAM, now=2.0, sent=True)
    assert [(c.state, c.transition, c.at) for c in streaming.history] == [
        (S.PREPARED, None, 1.0),
        (S.DISPATCHING, T.CLAIM, 1.0),
        (S.SENT, T.SEND, 2.0),
        (S.STREAMING, T.STREAM, 2.0),
    ]
    assert await store.get(op) == streaming
    # Once SEND is written, ``sent`` adds nothing; an illegal move writes neither.
    second = await sent(store, "conv-t", revision=1)
    again = await store.transition(second, T.STREAM, now=3.0, sent=True)
    assert [c.transition for c in again.history] == [None, T.CLAIM, T.SEND, T.STREAM]
    third = (await store.claim(draft("conv-t", revision=2), now=4.0)).operation_id
    await store.cancel_conversation("conv-t", now=5.0)
    with pytest.raises(IllegalTransition):
        await store.transition(third, T.STREAM, now=6.0, sent=True)
    record = await store.get(third)
    assert record is not None
    assert [c.state for c in record.history] == [S.PREPARED, S.DISPATCHING, S.CANCELLED]


async def test_a_conversation_less_commit_keeps_only_the_operation(store: StateStore) -> None:
    op = await sent(store, None)
    done = await store.commit_turn(op, digest=digest(3), now=3.0, response=answer("x"))
    assert done.state is S.COMMITTED
    assert await store.conversation(op) is None
    assert (await store.load_response(op, now=4.0)) == answer("x")


async def test_a_turn_for_a_revision_never_reached_is_refused(store: StateStore) -> None:
    op = await sent(store, "conv-gap", revision=2)
    with pytest.raises(TurnConflict) as raised:
        await store.commit_turn(op, digest=digest(1), now=3.0, response=answer("no"))
    assert (raised.value.rule, raised.value.status) == ("canonical_conflict", 409)
    record = await store.get(op)
    assert record is not None
    assert record.state is S.SENT  # nothing written
    assert await store.load_response(op, now=4.0) is None


async def test_an_attempt_that_no_longer_holds_its_slot_cannot_commit(store: StateStore) -> None:
    for ended in (T.FAIL, T.LOSE):
        op = await sent(store, f"conv-{ended}")
        await store.transition(op, ended, now=3.0)
        if ended is T.LOSE:
            await store.transition(op, T.SETTLE, now=4.0)
        with pytest.raises(IllegalTransition):
            await store.commit_turn(op, digest=digest(1), now=5.0)
        assert await store.conversation(f"conv-{ended}") is None


async def test_an_unknown_attempt_whose_turn_came_back_is_recovered(store: StateStore) -> None:
    op = await claim_into(store, S.UNKNOWN, conversation_id="conv-r")
    done = await store.commit_turn(op, digest=digest(4), now=50.0, response=answer("late"))
    assert (done.state, done.history[-1].transition) == (S.COMMITTED, T.RECOVER)
    conversation = await store.conversation("conv-r")
    assert conversation is not None
    assert conversation.digests == [digest(4)]
    assert await store.unknown_operations(limit=10) == []


async def test_cancel_moves_the_generation_on_and_stops_its_attempts(store: StateStore) -> None:
    committed = await sent(store, "conv-c")
    await store.commit_turn(committed, digest=digest(1), now=3.0)
    streaming = await sent(store, "conv-c", revision=1)
    await store.transition(streaming, T.STREAM, now=4.0)
    unknown = await claim_into(store, S.UNKNOWN, conversation_id="conv-c", revision=7)
    other = await sent(store, "conv-other")

    moved = await store.cancel_conversation("conv-c", now=10.0)
    assert (moved.cancel_generation, moved.digests) == (1, [digest(1)])
    states = {
        r.operation_id: r.state for r in await store.conversation_operations("conv-c", limit=10)
    }
    assert states == {committed: S.COMMITTED, streaming: S.CANCELLED, unknown: S.CANCELLED}
    other_record = await store.get(other)
    assert other_record is not None
    assert other_record.state is S.SENT  # another conversation is left alone
    # The cancelled attempt can no longer commit, and its slot no longer blocks.
    with pytest.raises(IllegalTransition):
        await store.commit_turn(streaming, digest=digest(2), now=11.0)
    fresh = await store.claim(draft("conv-c", revision=1, cancel_generation=1), now=12.0)
    assert fresh.manifest.attempt == 1
    assert (await store.cancel_conversation("conv-c", now=13.0)).cancel_generation == 2


async def test_the_canonical_cas_matches_the_active_generation(store: StateStore) -> None:
    await store.open_conversation("conv-g", [], now=0.0)
    await store.cancel_conversation("conv-g", now=1.0)
    # Claimed under generation 0 (a request prepared before the cancel): never canonical.
    stale = await sent(store, "conv-g", gen=0)
    with pytest.raises(TurnConflict, match="cancelled"):
        await store.commit_turn(stale, digest=digest(1), now=3.0)
    current = await sent(store, "conv-g", gen=1)
    await store.commit_turn(current, digest=digest(2), now=4.0)
    conversation = await store.conversation("conv-g")
    assert conversation is not None
    assert [(t.cancel_generation, t.digest) for t in conversation.turns] == [(1, digest(2))]


async def test_after_a_cancel_a_revision_is_answered_again_and_later_turns_drop(
    store: StateStore,
) -> None:
    for revision in (0, 1, 2):
        op = await sent(store, "conv-x", revision=revision)
        await store.commit_turn(op, digest=digest(revision + 1), now=3.0 + revision)
    await store.cancel_conversation("conv-x", now=10.0)
    again = await sent(store, "conv-x", revision=1, gen=1)
    await store.commit_turn(again, digest=digest(9), now=11.0)
    conversation = await store.conversation("conv-x")
    assert conversation is not None
    assert conversation.digests == [digest(1), digest(9)]
    assert [t.cancel_generation for t in conversation.turns] == [0, 1]
    # One canonical turn per (conversation, revision, generation): a second one is refused.
    with pytest.raises(StateConflict):
        await store.claim(draft("conv-x", revision=1, cancel_generation=1), now=12.0)


async def test_a_turn_that_goes_on_with_the_one_before_is_kept_so(store: StateStore) -> None:
    # A paused turn (revision 0) and its continuation (revision 1): a history shows the two as
    # one turn, the continuation's, which holds the whole run.
    for revision in (0, 1):
        op = await sent(store, "conv-paused", revision=revision)
        await store.commit_turn(op, digest=digest(revision + 1), now=3.0, continues=revision == 1)
    conversation = await store.conversation("conv-paused")
    assert conversation is not None
    assert [t.continues for t in conversation.turns] == [False, True]
    assert conversation.shown_revisions() == [1]
    assert conversation.chain_from(0) == [0, 1]
    # The next turn starts a run of its own.
    op = await sent(store, "conv-paused", revision=2)
    await store.commit_turn(op, digest=digest(3), now=4.0)
    conversation = await store.conversation("conv-paused")
    assert conversation is not None
    assert conversation.shown_revisions() == [1, 2]
    assert conversation.to_json()["turns"][1]["continues"] is True


async def test_a_conversation_lists_its_latest_operations_in_claim_order(
    store: StateStore,
) -> None:
    claimed = []
    for revision in range(5):
        op = await sent(store, "conv-long", revision=revision)
        await store.commit_turn(op, digest=digest(revision + 1), now=3.0 + revision)
        claimed.append(op)
    await store.cancel_conversation("conv-long", now=10.0)
    # After the cancel, a lower revision of the new generation is the newest claim.
    claimed.append(await sent(store, "conv-long", revision=2, gen=1))
    listed = await store.conversation_operations("conv-long", limit=3)
    assert [r.operation_id for r in listed] == claimed[-3:]
    everything = await store.conversation_operations("conv-long", limit=100)
    assert [r.operation_id for r in everything] == claimed
    assert await store.conversation_operations("conv-long", limit=0) == []


async def test_racing_commits_of_one_attempt_leave_one_turn(store: StateStore) -> None:
    op = await sent(store, "conv-race")
    results = await asyncio.gather(
        *(store.commit_turn(op, digest=digest(k % 15 + 1), now=3.0) for k in range(RACERS)),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, OperationRecord)]
    assert len(won) == 1
    assert all(isinstance(r, IllegalTransition) for r in results if r not in won)
    conversation = await store.conversation("conv-race")
    assert conversation is not None
    assert len(conversation.turns) == 1
    COUNTS["state: racing canonical commits (one turn each)"] += RACERS


@pytest.mark.parametrize("backend", SHARED_BACKENDS, ids=lambda b: b.name)
async def test_two_clients_of_one_store_commit_one_turn(backend: Backend, tmp_path: Path) -> None:
    first, second = backend.make(tmp_path), backend.make(tmp_path)
    await first.open()
    await second.open()
    try:
        op = await sent(first, "conv-two")
        results = await asyncio.gather(
            first.commit_turn(op, digest=digest(1), now=3.0),
            second.commit_turn(op, digest=digest(2), now=3.0),
            return_exceptions=True,
        )
        assert sum(isinstance(r, OperationRecord) for r in results) == 1
        seen = [await s.conversation("conv-two") for s in (first, second)]
        assert seen[0] == seen[1]
        assert seen[0] is not None
        assert len(seen[0].turns) == 1
    finally:
        await first.close()
        await second.close()


# --- client idempotency keys --------------------------------------------------------------


def key(body: str = "body-1", *, expires_at: float = 1000.0) -> ClientKey:
    return ClientKey("scope-1", "sha256:" + body, expires_at)


async def test_a_client_key_names_its_first_operation(store: StateStore) -> None:
    first = await store.claim(draft(None), now=1.0, client_key=key())
    with pytest.raises(ClaimConflict) as same:
        await store.claim(draft(None), now=2.0, client_key=key())
    assert same.value.existing.operation_id == first.operation_id
    with pytest.raises(KeyReused) as other:
        await store.claim(draft(None), now=2.0, client_key=key("body-2"))
    assert (other.value.rule, other.value.status, other.value.holder) == (
        "idempotency_key_reused",
        409,
        first.operation_id,
    )
    # Another scope (another credential) is another key.
    elsewhere = await store.claim(
        draft(None), now=2.0, client_key=ClientKey("scope-2", "sha256:body-1", 1000.0)
    )
    assert elsewhere.operation_id != first.operation_id


async def test_a_key_whose_attempt_failed_names_the_next_one(store: StateStore) -> None:
    first = await store.claim(draft(None), now=1.0, client_key=key())
    await store.transition(first.operation_id, T.FAIL, now=2.0)
    second = await store.claim(draft(None), now=3.0, client_key=key())
    with pytest.raises(ClaimConflict) as raised:
        await store.claim(draft(None), now=4.0, client_key=key())
    assert raised.value.existing.operation_id == second.operation_id
    with pytest.raises(KeyReused):  # the body is still bound to the key
        await store.claim(draft(None), now=4.0, client_key=key("body-2"))


async def test_an_expired_key_is_free_again(store: StateStore) -> None:
    await store.claim(draft(None), now=1.0, client_key=key(expires_at=10.0))
    fresh = await store.claim(draft(None), now=11.0, client_key=key("body-2", expires_at=30.0))
    with pytest.raises(ClaimConflict) as raised:
        await store.claim(draft(None), now=12.0, client_key=key("body-2", expires_at=30.0))
    assert raised.value.existing.operation_id == fresh.operation_id


async def test_a_refused_claim_takes_no_key(store: StateStore) -> None:
    held = await store.claim(draft("conv-k"), now=1.0)
    with pytest.raises(ClaimConflict) as raised:
        await store.claim(draft("conv-k"), now=2.0, client_key=key())
    assert raised.value.existing.operation_id == held.operation_id
    free = await store.claim(draft(None), now=3.0, client_key=key("body-2"))
    assert free.state is S.DISPATCHING


async def test_concurrent_claims_with_one_key_exactly_one_wins(store: StateStore) -> None:
    results = await asyncio.gather(
        *(store.claim(draft(None), now=1.0, client_key=key()) for _ in range(RACERS)),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, OperationRecord)]
    assert len(won) == 1
    lost = [r for r in results if not isinstance(r, OperationRecord)]
    assert all(
        isinstance(e, ClaimConflict) and e.existing.operation_id == won[0].operation_id
        for e in lost
    )
    COUNTS["state: concurrent claims with one Idempotency-Key (one winner each)"] += RACERS


# --- stored responses ---------------------------------------------------------------------


async def test_a_stored_response_expires(store: StateStore) -> None:
    op = await sent(store, None)
    await store.commit_turn(op, digest=digest(1), now=3.0, response=answer("a", expires_at=100.0))
    assert await store.load_response(op, now=99.0) == answer("a", expires_at=100.0)
    assert await store.load_response(op, now=100.0) is None
    streamed = answer("data: x\n\n", expires_at=200.0, streamed=True)
    await store.save_response(op, streamed, now=150.0)
    assert await store.load_response(op, now=150.0) == streamed
    assert await store.prune(now=300.0) >= 0
    assert await store.load_response(op, now=150.0) in (None, streamed)
    assert await store.load_response(op, now=300.0) is None


async def test_prune_drops_what_expired_and_keeps_the_rest(store: StateStore) -> None:
    old, young = await sent(store, None), await sent(store, None)
    await store.save_response(old, answer("old", expires_at=10.0), now=1.0)
    await store.save_response(young, answer("young", expires_at=1000.0), now=1.0)
    await store.claim(draft(None), now=1.0, client_key=key(expires_at=10.0))
    pruned = await store.prune(now=20.0)
    # Every store drops the answer expired by now; Redis drops the key itself (its own TTL).
    assert pruned == (1 if isinstance(store, RedisStore) else 2)
    assert await store.load_response(young, now=20.0) == answer("young", expires_at=1000.0)
    assert await store.load_response(old, now=20.0) is None
    # The key went with it: the same key with another body is a new request now.
    assert (
        await store.claim(draft(None), now=21.0, client_key=key("other"))
    ).state is S.DISPATCHING


async def test_unknown_operations_are_listed_for_recovery(store: StateStore) -> None:
    unknown = await claim_into(store, S.UNKNOWN, conversation_id="conv-u")
    await claim_into(store, S.STREAMING, conversation_id="conv-v")
    listed = await store.unknown_operations(limit=10)
    assert [r.operation_id for r in listed] == [unknown]
    await store.transition(unknown, T.SETTLE, now=50.0, detail="deadline")
    assert await store.unknown_operations(limit=10) == []


async def test_a_saved_version_3_file_keeps_its_conversations(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.executescript((Path(__file__).parent / "sqlite_v3.sql").read_text(encoding="utf-8"))
        db.execute("PRAGMA user_version = 3")
    finally:
        db.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        conversation = await store.conversation("conv-saved")
        assert conversation is not None
        assert [t.operation_id for t in conversation.turns] == [None, "op-saved-2"]
        response = await store.load_response("op-saved-2", now=7.0)
        assert response is not None
        assert (response.streamed, response.body.decode()) == (True, "data: é ✓\n\n")
        with pytest.raises(KeyReused):
            await store.claim(
                draft(None), now=7.0, client_key=ClientKey("scope-saved", "sha256:other", 99.0)
            )
    finally:
        await store.close()


def test_the_state_url_carries_the_owner_and_lease_of_a_redis_store() -> None:
    store = open_store(
        "redis://:pw@127.0.0.1:6379/2?owner=pod-a&lease_ttl=2.5&health_check_interval=3"
    )
    assert isinstance(store, RedisStore)
    assert (store.owner, store.lease_ttl) == ("pod-a", 2.5)
    # What redis-py reads stays in the URL; turngate's own options do not reach it.
    assert store.url == "redis://:pw@127.0.0.1:6379/2?health_check_interval=3"
    with pytest.raises(ValueError, match="lease_ttl"):
        open_store("redis://127.0.0.1/0?lease_ttl=soon")
