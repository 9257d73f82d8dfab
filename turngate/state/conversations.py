"""What a store keeps per conversation besides its operations: canonical turns, the cancel
generation, stored responses for replay and client idempotency keys. Pure data and the rules
every store applies alike (memory.py, sqlite.py, redis.py call these inside their CAS).

    Conversation          key, cancel generation, canonical turns (index k = revision k)
    CanonicalTurn         the turn committed for one revision: digest, generation, operation,
                          and whether it goes on with the turn before it (``continues``)
    StoredResponse        a committed answer kept for replay, until ``expires_at``
    ClientKey / KeyHold   a client's Idempotency-Key (scoped by credential) -> its operation

Canonical turns. The first request of a conversation that reaches the claim *adopts* the
assistant turns of its history as turns 0..r-1 (``operation_id`` None): nothing committed
contradicts them, and an application moving onto turngate mid-conversation (or with
few-shot examples) keeps working. From then on each history must hold exactly the turns
committed. ``with_turn`` is the canonical CAS: an attempt's turn becomes turn r only if its
cancel generation is the conversation's current one and revision r has no turn of that
generation yet. A turn of an older generation at r (before a cancel) is replaced, and the
turns after it, which answered a history that no longer holds, are dropped.

Continued turns. An Anthropic turn may be paused (``stop_reason: pause_turn``) and sent back,
last, for Claude to go on (or resumed in its thread), and a Gemini turn may be continued by
token (``finishReason: CONTINUATION``, proxy/continuation.py): the answer continues that
same turn, and the application's next history holds the two as one assistant run. The
continuation is committed for the next revision as usual, with ``continues`` set and the
digest of the whole run (the paused turn and the continuation): a history shows such a
chain as one turn, the last of it (``shown_revisions``).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turngate.errors import StateConflict
from turngate.state.machine import DispatchState, Transition

if TYPE_CHECKING:  # store.py imports this module
    from turngate.state.store import OperationRecord


class TurnConflict(StateConflict):
    """The canonical CAS refused a turn: another is canonical, or the generation moved on."""

    rule = "canonical_conflict"


class KeyReused(StateConflict):
    """A client Idempotency-Key seen before with another body."""

    rule = "idempotency_key_reused"

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class CanonicalTurn:
    revision: int
    cancel_generation: int
    digest: str
    # None when adopted from the history of the conversation's first request.
    operation_id: str | None
    at: float
    # It goes on with the turn before it (a paused turn sent back): a history holds the two
    # as one run, and ``digest`` is of the whole run.
    continues: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "cancelGeneration": self.cancel_generation,
            "digest": self.digest,
            "operationId": self.operation_id,
            "at": self.at,
            "continues": self.continues,
        }

    @classmethod
    def from_json(cls, data: Any) -> CanonicalTurn:
        return cls(
            revision=int(data["revision"]),
            cancel_generation=int(data["cancelGeneration"]),
            digest=str(data["digest"]),
            operation_id=None if data["operationId"] is None else str(data["operationId"]),
            at=float(data["at"]),
            # Absent from what turngate kept before continued turns existed.
            continues=bool(data.get("continues", False)),
        )


@dataclass(frozen=True)
class Conversation:
    key: str
    cancel_generation: int
    turns: tuple[CanonicalTurn, ...]
    updated_at: float

    @property
    def revision(self) -> int:
        """The revision the next turn answers: how many canonical turns there are."""
        return len(self.turns)

    @property
    def digests(self) -> list[str]:
        return [turn.digest for turn in self.turns]

    def shown_revisions(self, base: int = 0) -> list[int]:
        """The revisions from ``base`` on that a history holds as its turns, in order: every
        turn but one that a later turn continues (the chain shows as its last turn)."""
        turns = self.turns
        return [
            k for k in range(base, len(turns)) if k + 1 == len(turns) or not turns[k + 1].continues
        ]

    def chain_from(self, revision: int) -> list[int]:
        """``revision`` and the turns that go on with it, one after another: what a run of
        assistant messages ending a request may be (a paused turn sent back once more)."""
        chain = []
        for k in range(revision, len(self.turns)):
            if k > revision and not self.turns[k].continues:
                break
            chain.append(k)
        return chain

    def to_json(self) -> dict[str, Any]:
        return {
            "conversationId": self.key,
            "revision": self.revision,
            "cancelGeneration": self.cancel_generation,
            "turns": [turn.to_json() for turn in self.turns],
            "updatedAt": self.updated_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> Conversation:
        return cls(
            key=str(data["conversationId"]),
            cancel_generation=int(data["cancelGeneration"]),
            turns=tuple(CanonicalTurn.from_json(t) for t in data["turns"]),
            updated_at=float(data["updatedAt"]),
        )


def adopted(key: str, history: Sequence[str], *, now: float) -> Conversation:
    """A new conversation whose canonical turns are the history of its first request."""
    turns = tuple(CanonicalTurn(k, 0, digest, None, now) for k, digest in enumerate(history))
    return Conversation(key, 0, turns, now)


def cancelled(conversation: Conversation | None, key: str, *, now: float) -> Conversation:
    """The conversation with its cancel generation moved on; its turns stay canonical."""
    if conversation is None:
        return Conversation(key, 1, (), now)
    generation = conversation.cancel_generation + 1
    return dataclasses.replace(conversation, cancel_generation=generation, updated_at=now)


# An attempt in one of these states belongs to the generation a cancel stops.
CANCELLABLE: frozenset[DispatchState] = frozenset(
    {DispatchState.DISPATCHING, DispatchState.SENT, DispatchState.STREAMING, DispatchState.UNKNOWN}
)
CANCELLED_DETAIL = "the conversation was cancelled (cancel generation {generation})"


def commit_transition(record: OperationRecord) -> Transition:
    """COMMIT for a live attempt; RECOVER for an UNKNOWN one whose turn came back later."""
    return Transition.RECOVER if record.state is DispatchState.UNKNOWN else Transition.COMMIT


def with_turn(
    conversation: Conversation | None,
    record: OperationRecord,
    digest: str,
    *,
    now: float,
    continues: bool = False,
) -> Conversation | None:
    """The canonical CAS: ``conversation`` with ``record``'s turn as canonical, or TurnConflict.
    ``continues``: the turn goes on with the one before it (``CanonicalTurn.continues``).

    None for an operation without a conversation (nothing to keep but its state).
    """
    manifest = record.manifest
    key = manifest.conversation_id
    if key is None:
        return None
    current = conversation or Conversation(key, 0, (), now)
    revision, generation = manifest.conversation_revision, manifest.cancel_generation
    if generation != current.cancel_generation:
        raise TurnConflict(
            f"turngate: conversation '{key}' was cancelled (cancel generation "
            f"{current.cancel_generation}); the turn of operation '{record.operation_id}' "
            f"(generation {generation}) is not canonical"
        )
    if revision > current.revision:
        raise TurnConflict(
            f"turngate: conversation '{key}' has {current.revision} canonical turns; a turn "
            f"for revision {revision} answers a history it never committed"
        )
    if revision < current.revision and current.turns[revision].cancel_generation == generation:
        raise TurnConflict(
            f"turngate: conversation '{key}' revision {revision} already has its canonical "
            f"turn (operation '{current.turns[revision].operation_id}')"
        )
    turn = CanonicalTurn(
        revision, generation, digest, record.operation_id, now, continues and revision > 0
    )
    return dataclasses.replace(current, turns=(*current.turns[:revision], turn), updated_at=now)


@dataclass(frozen=True)
class StoredResponse:
    """A committed answer as the client received it, kept for replay until ``expires_at``.

    ``streamed``: ``body`` is the SSE stream turngate relayed (marks and all); otherwise the
    upstream's JSON body, byte for byte.
    """

    status: int
    content_type: str
    body: bytes
    streamed: bool
    expires_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "contentType": self.content_type,
            "body": base64.b64encode(self.body).decode(),
            "streamed": self.streamed,
            "expiresAt": self.expires_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> StoredResponse:
        return cls(
            status=int(data["status"]),
            content_type=str(data["contentType"]),
            body=base64.b64decode(data["body"]),
            streamed=bool(data["streamed"]),
            expires_at=float(data["expiresAt"]),
        )


@dataclass(frozen=True)
class ClientKey:
    """A client's Idempotency-Key as the claim takes it: scope (credential hash and key,
    hashed), the digest of the request it names, and until when it is remembered."""

    scope: str
    body_digest: str
    expires_at: float


@dataclass(frozen=True)
class KeyHold:
    """What a store remembers of a client key: the operation it names, and its body."""

    operation_id: str
    body_digest: str
    expires_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "operationId": self.operation_id,
            "bodyDigest": self.body_digest,
            "expiresAt": self.expires_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> KeyHold:
        return cls(str(data["operationId"]), str(data["bodyDigest"]), float(data["expiresAt"]))


def key_reused(key: ClientKey, hold: KeyHold) -> KeyReused:
    return KeyReused(
        "turngate: this Idempotency-Key was used before with a different request body "
        f"(operation '{hold.operation_id}'); use a new key for a new request",
        hold.operation_id,
    )
