"""The BIND transition, on every store: a streaming attempt binds the provider's response
handle as soon as it is seen, without leaving STREAMING, and an attempt that is no longer
streaming (taken over, settled) is refused, so it learns early that it cannot commit."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.state.stores import BACKENDS, Backend, draft
from turngate.errors import IllegalTransition, StateConflict
from turngate.state.machine import DispatchState, Transition
from turngate.state.store import StateStore

S, T = DispatchState, Transition


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    backend: Backend = request.param
    opened = backend.make(tmp_path)
    await opened.open()
    yield opened
    await opened.close()


async def streaming(store: StateStore) -> str:
    op = (await store.claim(draft("conv-bind"), now=1.0)).operation_id
    await store.transition(op, T.SEND, now=2.0)
    await store.transition(op, T.STREAM, now=3.0)
    return op


async def test_bind_keeps_streaming_and_records_when(store: StateStore) -> None:
    op = await streaming(store)
    bound = await store.transition(op, T.BIND, now=4.0, handle="msg_1", detail="handle seen")
    assert bound.state is S.STREAMING
    assert bound.handle == "msg_1"
    assert (bound.history[-1].transition, bound.history[-1].at) == (T.BIND, 4.0)
    assert await store.get(op) == bound
    committed = await store.transition(op, T.COMMIT, now=5.0, handle="msg_1")
    assert (committed.state, committed.handle) == (S.COMMITTED, "msg_1")


async def test_a_second_handle_is_a_conflict(store: StateStore) -> None:
    op = await streaming(store)
    await store.transition(op, T.BIND, now=4.0, handle="resp_a")
    with pytest.raises(StateConflict) as raised:
        await store.transition(op, T.BIND, now=5.0, handle="resp_b")
    assert raised.value.rule == "handle_conflict"
    record = await store.get(op)
    assert record is not None
    assert record.handle == "resp_a"


@pytest.mark.parametrize("moved", [T.LOSE, T.FAIL])
async def test_an_attempt_no_longer_streaming_cannot_bind(
    store: StateStore, moved: Transition
) -> None:
    op = await streaming(store)
    await store.transition(op, moved, now=4.0)
    with pytest.raises(IllegalTransition):
        await store.transition(op, T.BIND, now=5.0, handle="chatcmpl-late")
    record = await store.get(op)
    assert record is not None
    assert record.handle is None


async def test_bind_blocks_the_slot_like_streaming(store: StateStore) -> None:
    op = await streaming(store)
    await store.transition(op, T.BIND, now=4.0, handle="msg_2")
    with pytest.raises(StateConflict):
        await store.claim(draft("conv-bind"), now=5.0)
    record = await store.get(op)
    assert record is not None
    assert record.state is S.STREAMING
