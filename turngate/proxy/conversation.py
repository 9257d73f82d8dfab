"""Conversations in the proxy: the history check before the claim, and turngate's endpoints.

    Turngate-Conversation-Id: c   -> revision r = assistant turns in the history
    history turn k == canonical turn k of c, for every k < r   else 400 history_mismatch
    the claim takes (c, r, the conversation's cancel generation)

    GET  /turngate/v1/conversations/{id}          revision, cancel generation, turns, operations
    POST /turngate/v1/conversations/{id}/cancel   move the cancel generation on

The first enforced request of a conversation adopts its history (state/conversations.py).
Shadowed requests only observe: they neither adopt, check nor commit canonical turns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from turngate.errors import LocalError
from turngate.graph.history import HistoryTurn, history_turns
from turngate.graph.model import MessageSequence
from turngate.proxy.errors import plain_error
from turngate.proxy.replay import ReplayUnavailable
from turngate.state.conversations import Conversation
from turngate.state.machine import DispatchState
from turngate.state.store import OperationRecord, StateStore

log = logging.getLogger("turngate.proxy")

# How many operations GET /turngate/v1/conversations/{id} lists.
OPERATIONS_SHOWN = 200


class HistoryMismatch(LocalError):
    """An assistant turn of the history is not the turn turngate committed for it."""

    rule = "history_mismatch"


async def checked_conversation(
    store: StateStore, conversation_id: str, seq: MessageSequence, *, now: float
) -> Conversation:
    """The conversation, once the request's history is its canonical turns (or adopted) and
    the revision it asks for can still be answered (``refuse_unreplayable``)."""
    turns = history_turns(seq)
    conversation = await store.open_conversation(
        conversation_id, [t.digest for t in turns], now=now
    )
    mismatch = first_mismatch(conversation, turns)
    if mismatch is not None:
        raise HistoryMismatch(mismatch)
    await refuse_unreplayable(store, conversation, seq.conversation_revision)
    return conversation


async def refuse_unreplayable(store: StateStore, known: Conversation, revision: int) -> None:
    """A revision already answered in this generation whose operation is gone (a turn adopted
    from a history, or one older than --operation-ttl) can never be committed again nor
    replayed: refused before it is sent. With its operation still there, the claim meets it
    and replays its answer or says why not."""
    if revision >= known.revision:
        return
    turn = known.turns[revision]
    if turn.cancel_generation != known.cancel_generation:
        return  # a cancelled generation's turn: this one may answer the revision again
    if turn.operation_id is not None and await store.get(turn.operation_id) is not None:
        return
    answered = (
        f"by operation '{turn.operation_id}'"
        if turn.operation_id is not None
        else "in the history its first request brought"
    )
    raise ReplayUnavailable(
        f"turngate: conversation '{known.key}' revision {revision} was answered {answered}; "
        "its answer is not (or no longer) kept for replay"
    )


def first_mismatch(conversation: Conversation, turns: list[HistoryTurn]) -> str | None:
    """Why the history is not the conversation's canonical turns, or None."""
    canonical = conversation.turns
    for turn in turns:
        where = f"assistant turn {turn.index} ({turn.location}, message {turn.message_index})"
        if turn.index >= len(canonical):
            return (
                f"turngate: {where} of conversation '{conversation.key}' was never committed: "
                f"the conversation has {len(canonical)} canonical turns. An answer that was "
                "streamed but not committed (preview text) is not history"
            )
        if turn.digest != canonical[turn.index].digest:
            committed = canonical[turn.index].operation_id or "the conversation's first request"
            return (
                f"turngate: {where} of conversation '{conversation.key}' differs from the turn "
                f"committed for revision {turn.index} (operation '{committed}'): send the "
                "committed turn back unchanged"
            )
    return None


# --- endpoints ----------------------------------------------------------------------------


def conversation_json(
    conversation: Conversation, operations: list[dict[str, Any]]
) -> dict[str, Any]:
    return {**conversation.to_json(), "operations": operations}


async def cancel(
    request: web.Request,
    store: StateStore,
    *,
    now: float,
    resolved: Callable[[OperationRecord], None] | None = None,
) -> web.Response:
    """Move the cancel generation on; ``resolved`` hears of each CANCELLED operation (the
    telemetry forgets those it knew as UNKNOWN)."""
    key = request.match_info["conversation_id"]
    conversation = await store.cancel_conversation(key, now=now)
    log.warning("conversation cancelled (cancel generation %d)", conversation.cancel_generation)
    records = await store.conversation_operations(conversation.key, limit=OPERATIONS_SHOWN)
    if resolved is not None:
        for record in records:
            if record.state is DispatchState.CANCELLED:
                resolved(record)
    return _answer(conversation, records)


async def show(request: web.Request, store: StateStore) -> web.Response:
    key = request.match_info["conversation_id"]
    conversation = await store.conversation(key)
    if conversation is None:
        return plain_error(404, f"turngate: no conversation {key!r}", "conversation_not_found")
    records = await store.conversation_operations(conversation.key, limit=OPERATIONS_SHOWN)
    return _answer(conversation, records)


def _answer(conversation: Conversation, records: list[OperationRecord]) -> web.Response:
    operations = [
        {
            "operationId": r.operation_id,
            "revision": r.manifest.conversation_revision,
            "cancelGeneration": r.manifest.cancel_generation,
            "attempt": r.manifest.attempt,
            "state": str(r.state),
            "handle": r.handle,
            "createdAt": r.manifest.created_at,
        }
        for r in records
    ]
    body = orjson.dumps(conversation_json(conversation, operations))
    return web.Response(body=body, content_type="application/json")
