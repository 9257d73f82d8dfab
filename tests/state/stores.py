"""The stores the contract suite runs against, and drafts to claim with.

To put another store under the whole contract suite, add one ``Backend`` to ``BACKENDS``.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.state.redis_server import contract_store
from turngate.state.machine import TRANSITIONS, DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.memory import MemoryStore
from turngate.state.sqlite import SQLiteStore
from turngate.state.store import StateStore


@dataclass(frozen=True)
class Backend:
    name: str
    # A store over the data kept under ``where`` (a fresh tmp folder per test).
    make: Callable[[Path], StateStore]
    # Two stores made with the same ``where`` are two clients of the same data (so they
    # can race each other, also from another process).
    shared: bool


BACKENDS = [
    Backend("memory", lambda where: MemoryStore(), shared=False),
    Backend("sqlite", lambda where: SQLiteStore(where / "state.db"), shared=True),
    Backend("redis", contract_store, shared=True),
]
SHARED_BACKENDS = [b for b in BACKENDS if b.shared]


def backend_named(name: str) -> Backend:
    return next(b for b in BACKENDS if b.name == name)


def draft(
    conversation_id: str | None = "conv-1",
    *,
    revision: int = 0,
    cancel_generation: int = 0,
    operation_id: str | None = None,
) -> DispatchManifest:
    """A draft manifest as the proxy builds it before the claim (attempt 0, no key)."""
    return DispatchManifest(
        operation_id=operation_id or f"op-{uuid.uuid4().hex[:16]}",
        conversation_id=conversation_id,
        conversation_revision=revision,
        cancel_generation=cancel_generation,
        api="openai_chat",
        provider="openai",
        adapter="openai_chat@1",
        model="gpt-test",
        route="/openai/v1/chat/completions",
        stream=True,
        sequence_digest="sha256:" + "1" * 64,
        toolset_digest="sha256:" + "2" * 64,
        policy_digest="sha256:" + "3" * 64,
        request_digest="sha256:" + "4" * 64,
        credential_hash="hmac:cred",
        created_at=1_700_000_000.0,
    )


def paths_from_dispatching() -> dict[DispatchState, list[Transition]]:
    """The shortest transitions that take a fresh claim to each state it can reach."""
    paths: dict[DispatchState, list[Transition]] = {DispatchState.DISPATCHING: []}
    queue = deque([DispatchState.DISPATCHING])
    while queue:
        state = queue.popleft()
        for (source, transition), target in TRANSITIONS.items():
            if source == state and target not in paths:
                paths[target] = [*paths[state], transition]
                queue.append(target)
    return paths


async def claim_into(
    store: StateStore,
    state: DispatchState,
    *,
    conversation_id: str | None = "conv-1",
    revision: int = 0,
    now: float = 10.0,
) -> str:
    """Claim a fresh draft and walk it to ``state``; returns its operation id."""
    record = await store.claim(draft(conversation_id, revision=revision), now=now)
    for step, transition in enumerate(paths_from_dispatching()[state], start=1):
        await store.transition(record.operation_id, transition, now=now + step)
    return record.operation_id
