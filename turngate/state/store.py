"""The contract every state store keeps (memory, SQLite, Redis): same CAS semantics.

A store holds operations: a manifest, its current DispatchState and the history of
changes. ``claim`` is the compare-and-swap the whole dispatch path rests on: for one
(conversation, revision, cancelGeneration) at most one attempt is live at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from turngate.errors import StateConflict
from turngate.state.machine import DispatchState, Transition
from turngate.state.manifest import DispatchManifest


@dataclass(frozen=True)
class StateChange:
    state: DispatchState
    transition: Transition | None
    at: float
    detail: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "state": str(self.state),
            "transition": None if self.transition is None else str(self.transition),
            "at": self.at,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class OperationRecord:
    manifest: DispatchManifest
    state: DispatchState
    history: tuple[StateChange, ...]
    # The provider's response handle (chatcmpl-…, msg_…, resp_…), bound once seen.
    handle: str | None = None

    @property
    def operation_id(self) -> str:
        return self.manifest.operation_id

    def to_json(self) -> dict[str, object]:
        return {
            "operationId": self.operation_id,
            "state": str(self.state),
            "handle": self.handle,
            "manifest": self.manifest.to_json(),
            "manifestDigest": self.manifest.digest,
            "history": [c.to_json() for c in self.history],
        }


class ClaimConflict(StateConflict):
    """Another attempt for the same conversation revision is live or committed."""

    rule = "dispatch_conflict"

    def __init__(self, message: str, existing: OperationRecord):
        super().__init__(message)
        self.existing = existing


class StateStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> bool:
        """True when the store can take writes (``/readyz``)."""
        ...

    async def claim(self, draft: DispatchManifest, *, now: float) -> OperationRecord:
        """The dispatch CAS.

        For ``draft``'s (conversation key, revision, cancel generation): when no earlier
        attempt is in flight, UNKNOWN or COMMITTED, allocate the next attempt generation,
        persist the manifest (with its stamped idempotency key) and record PREPARED then
        DISPATCHING, atomically. Otherwise raise ``ClaimConflict`` carrying that attempt.
        Of many concurrent claims for one key exactly one wins.
        """
        ...

    async def transition(
        self,
        operation_id: str,
        transition: Transition,
        *,
        now: float,
        handle: str | None = None,
        detail: str | None = None,
    ) -> OperationRecord:
        """Apply ``transition`` to the operation's current state, atomically.

        Raises ``IllegalTransition`` when the machine forbids it from the current state
        (so two racing writers cannot both move one operation), ``KeyError`` when the
        operation does not exist. ``handle`` binds the provider's response handle.
        """
        ...

    async def get(self, operation_id: str) -> OperationRecord | None: ...

    async def recover(self, *, now: float) -> list[OperationRecord]:
        """At start: every operation left DISPATCHING, SENT or STREAMING becomes UNKNOWN."""
        ...


def open_store(url: str) -> StateStore:
    """A store for ``--state``: ``sqlite:///path``, ``memory://`` or ``redis://…``."""
    if url.startswith("memory:"):
        from turngate.state.memory import MemoryStore

        return MemoryStore()
    if url.startswith("sqlite:"):
        from turngate.state.sqlite import SQLiteStore

        path = url.removeprefix("sqlite://")
        return SQLiteStore(path.removeprefix("/") if path.startswith("/./") else path)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from turngate.state.redis import RedisStore  # type: ignore[import-not-found]

        store: StateStore = RedisStore(url)
        return store
    raise ValueError(f"unknown state URL {url!r}: use sqlite:///PATH, memory:// or redis://HOST")
