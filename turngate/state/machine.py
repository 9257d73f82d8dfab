"""The dispatch state machine: states, named transitions, and the table that allows them.

Pure: no I/O, no clock. ``advance(state, transition)`` returns the next state or raises
``IllegalTransition``. docs/state-machine.md is generated from ``TRANSITIONS``
(``python -m turngate.state.diagram``), so the picture cannot drift from the code.
"""

from __future__ import annotations

from enum import StrEnum

from turngate.errors import IllegalTransition


class DispatchState(StrEnum):
    PREPARED = "PREPARED"
    DISPATCHING = "DISPATCHING"
    SENT = "SENT"
    STREAMING = "STREAMING"
    COMMITTED = "COMMITTED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    CANCELLED = "CANCELLED"


class Transition(StrEnum):
    # CAS won: the manifest and idempotency key are stored; no byte has left yet.
    CLAIM = "claim"
    # The request bytes were handed to the upstream connection.
    SEND = "send"
    # Response headers arrived and the body is a stream.
    STREAM = "stream"
    # The provider's response handle was seen before the turn is complete (mid-stream, or an
    # OpenAI Responses background response still running) and is bound to the manifest; the
    # state stays. A taken-over attempt (no longer in that state) is refused here, so it
    # learns early that its answer can never commit.
    BIND = "bind"
    # A complete, validated turn arrived and is now canonical.
    COMMIT = "commit"
    # The upstream answered with an error, or the turn failed validation, before any commit.
    FAIL = "fail"
    # The outcome cannot be known: a drop mid-flight, a crash, a timeout after sending.
    LOSE = "lose"
    # An UNKNOWN attempt turned out to be over without a canonical turn (deadline, provider).
    SETTLE = "settle"
    # A resumed or queried handle gave back the complete turn.
    RECOVER = "recover"
    # The conversation's cancel generation moved on: whatever this attempt still streams or
    # learns later can never become canonical.
    CANCEL = "cancel"


S, T = DispatchState, Transition

TRANSITIONS: dict[tuple[DispatchState, Transition], DispatchState] = {
    (S.PREPARED, T.CLAIM): S.DISPATCHING,
    (S.PREPARED, T.FAIL): S.FAILED,
    (S.PREPARED, T.CANCEL): S.CANCELLED,
    (S.DISPATCHING, T.SEND): S.SENT,
    (S.DISPATCHING, T.FAIL): S.FAILED,
    (S.DISPATCHING, T.LOSE): S.UNKNOWN,
    (S.DISPATCHING, T.CANCEL): S.CANCELLED,
    (S.SENT, T.STREAM): S.STREAMING,
    (S.SENT, T.BIND): S.SENT,
    (S.SENT, T.COMMIT): S.COMMITTED,
    (S.SENT, T.FAIL): S.FAILED,
    (S.SENT, T.LOSE): S.UNKNOWN,
    (S.SENT, T.CANCEL): S.CANCELLED,
    (S.STREAMING, T.BIND): S.STREAMING,
    (S.STREAMING, T.COMMIT): S.COMMITTED,
    (S.STREAMING, T.FAIL): S.FAILED,
    (S.STREAMING, T.LOSE): S.UNKNOWN,
    (S.STREAMING, T.CANCEL): S.CANCELLED,
    (S.UNKNOWN, T.RECOVER): S.COMMITTED,
    (S.UNKNOWN, T.SETTLE): S.FAILED,
    (S.UNKNOWN, T.CANCEL): S.CANCELLED,
}

TERMINAL: frozenset[DispatchState] = frozenset({S.COMMITTED, S.FAILED, S.CANCELLED})
# States in which bytes may be in flight: a crash here leaves the outcome unknown.
IN_FLIGHT: frozenset[DispatchState] = frozenset({S.DISPATCHING, S.SENT, S.STREAMING})


def advance(state: DispatchState, transition: Transition) -> DispatchState:
    try:
        return TRANSITIONS[(state, transition)]
    except KeyError:
        raise IllegalTransition(
            f"transition '{transition}' is not allowed from {state}",
        ) from None


def allowed(state: DispatchState) -> list[Transition]:
    return [t for (s, t) in TRANSITIONS if s == state]
