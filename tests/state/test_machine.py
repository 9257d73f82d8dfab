"""The dispatch state machine, pair by pair: the table allows, everything else raises."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from turngate.errors import IllegalTransition
from turngate.state.machine import (
    IN_FLIGHT,
    TERMINAL,
    TRANSITIONS,
    DispatchState,
    Transition,
    advance,
    allowed,
)

S, T = DispatchState, Transition
PAIRS = list(itertools.product(DispatchState, Transition))
ALLOWED = [pair for pair in PAIRS if pair in TRANSITIONS]
FORBIDDEN = [pair for pair in PAIRS if pair not in TRANSITIONS]


def pair_id(pair: tuple[DispatchState, Transition]) -> str:
    return f"{pair[0]}-{pair[1]}"


def reachable(start: DispatchState) -> set[DispatchState]:
    seen, queue = {start}, deque([start])
    while queue:
        state = queue.popleft()
        for transition in allowed(state):
            target = advance(state, transition)
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def test_every_pair_is_either_allowed_or_forbidden() -> None:
    assert len(ALLOWED) + len(FORBIDDEN) == len(DispatchState) * len(Transition)
    assert len(ALLOWED) == len(TRANSITIONS)


@pytest.mark.parametrize(("state", "transition"), ALLOWED, ids=map(pair_id, ALLOWED))
def test_allowed_pair_gives_its_target(state: DispatchState, transition: Transition) -> None:
    assert advance(state, transition) is TRANSITIONS[(state, transition)]
    assert transition in allowed(state)


@pytest.mark.parametrize(("state", "transition"), FORBIDDEN, ids=map(pair_id, FORBIDDEN))
def test_forbidden_pair_raises(state: DispatchState, transition: Transition) -> None:
    with pytest.raises(IllegalTransition) as raised:
        advance(state, transition)
    assert raised.value.rule == "illegal_transition"
    assert raised.value.status == 500
    assert str(state) in str(raised.value)
    assert f"'{transition}'" in str(raised.value)
    assert transition not in allowed(state)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_terminal_state_allows_nothing(state: DispatchState) -> None:
    assert allowed(state) == []
    for transition in Transition:
        with pytest.raises(IllegalTransition):
            advance(state, transition)


def test_spec_paths() -> None:
    """SPEC §4: claim, then only SENT → STREAMING → COMMITTED, or UNKNOWN."""
    state = S.PREPARED
    for transition in (T.CLAIM, T.SEND, T.STREAM, T.COMMIT):
        state = advance(state, transition)
    assert state is S.COMMITTED
    assert advance(advance(S.DISPATCHING, T.SEND), T.COMMIT) is S.COMMITTED  # not streamed


@pytest.mark.parametrize("state", sorted(IN_FLIGHT))
def test_in_flight_state_can_be_lost(state: DispatchState) -> None:
    # recover() at start depends on it.
    assert advance(state, T.LOSE) is S.UNKNOWN


def test_unknown_is_resolved_only_by_recover_settle_or_cancel() -> None:
    assert set(allowed(S.UNKNOWN)) == {T.RECOVER, T.SETTLE, T.CANCEL}
    assert reachable(S.UNKNOWN) - {S.UNKNOWN} <= TERMINAL


def test_every_state_is_reachable_from_prepared() -> None:
    assert reachable(S.PREPARED) == set(DispatchState)


@pytest.mark.parametrize("state", sorted(set(DispatchState) - TERMINAL))
def test_no_dead_end(state: DispatchState) -> None:
    assert reachable(state) & TERMINAL


@pytest.mark.parametrize("state", sorted(set(DispatchState) - {S.PREPARED}))
def test_nothing_returns_to_prepared_or_dispatching(state: DispatchState) -> None:
    # Bytes may have left once DISPATCHING is passed: no path may lead back to "nothing sent".
    assert S.PREPARED not in reachable(state)
    if state is not S.DISPATCHING:
        assert S.DISPATCHING not in reachable(state)
