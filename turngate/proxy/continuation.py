"""Turns continued from what the provider holds, under a conversation id.

Two requests go on with an answer they do not carry, so the blocks the continued turn
starts with come from that answer as it was kept for replay (state/conversations.py,
"Continued turns": the continuation is committed for the next revision with ``continues``
and the digest of the whole run, which the next full history shows as one turn).

Gemini, by token. An answer may stop with ``finishReason: CONTINUATION`` and a
``continuationToken``: the turn is not over. google-genai (automatic continuation, on by
default) sends the same request again with the token (``continuationToken``, top level)
and joins the hops' parts into one candidate, which the application keeps as one model
turn:

    request R            -> hop 1 (CONTINUATION, token t1)   committed for revision r
    R + t1               -> hop 2 (STOP)                     revision r+1, ``continues``
    next history         -> one model turn: hop 1's parts, then hop 2's

The request of a later hop shows the same history as the first, so without this it would
answer revision r again (a 409). The token says which committed hop it goes on from: the
hop of the chain from revision r whose kept answer carried it, answered for the same
contents. A retry of a hop carries the token of the hop before it, so it meets that
revision's committed answer and is replayed. A token no kept answer carried (one from a
stream that broke, which was never committed) is refused before anything is sent.

Anthropic, in a thread. A Message Threads ``continue`` names the reply it follows
(``previous_message_id``) and carries only what follows it; to resume a paused turn
(``stop_reason: pause_turn``) it carries nothing at all, and Claude goes on with the reply
the server holds: the answer continues that turn (``resumed_run``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson

from turngate.adapters import get_adapter
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import SSEDecoder
from turngate.errors import LocalError, TurngateError
from turngate.graph.model import AnyBlock, ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.state.conversations import Conversation, StoredResponse
from turngate.state.store import StateStore

TOKEN_FIELDS = ("continuationToken", "continuation_token")
# A streamed answer is kept for replay just after its stream ended; the request that goes
# on from it can come first.
KEPT_WAIT = 2.0
KEPT_POLL = 0.01


class UnknownContinuation(LocalError):
    """A request goes on from an answer turngate did not commit, or no longer keeps."""

    rule = "history_mismatch"


def continuation_token(seq: MessageSequence) -> str | None:
    """The token a Gemini request goes on with, if any."""
    return _token_in(seq.envelope) if seq.api == "gemini" else None


def resumes_held_turn(seq: MessageSequence) -> bool:
    """An Anthropic thread's continue that carries no message: Claude goes on with the reply
    it follows (a paused turn), which only the server holds."""
    return seq.api == "anthropic" and seq.history == "partial" and not _shown(seq)


def _shown(seq: MessageSequence) -> bool:
    return any(m.role not in ("system", "developer") for m in seq.messages)


async def continued_hops(
    store: StateStore,
    conversation: Conversation,
    revision: int,
    seq: MessageSequence,
    token: str,
    *,
    now: float,
) -> tuple[int, tuple[AnyBlock, ...]]:
    """The revision a Gemini request carrying ``token`` answers, and the blocks of the hops
    its answer goes on with (from ``revision``, the one its history would answer, on). The
    request must be the hop's own again: the same contents (``sequence_digest``)."""
    blocks: list[AnyBlock] = []
    for k in conversation.chain_from(revision):
        turn = conversation.turns[k]
        if turn.cancel_generation != conversation.cancel_generation:
            break
        answer, carried = await _kept_answer(store, conversation, k, "gemini", now=now)
        blocks.extend(answer.blocks)
        if carried == token:
            await _refuse_other_contents(store, conversation, k, seq)
            return k + 1, tuple(blocks)
    raise UnknownContinuation(
        f"turngate: the continuationToken is not one a committed answer of conversation "
        f"'{conversation.key}' carried (revision {revision} on). An answer whose stream broke "
        "was never committed: send the request again without the token"
    )


async def resumed_run(
    store: StateStore, conversation: Conversation, last: int, api: ApiName, *, now: float
) -> tuple[AnyBlock, ...]:
    """The blocks of the turn a request resumes: the committed turn ``last`` and those it
    goes on with, from their kept answers."""
    first = last
    while first > 0 and conversation.turns[first].continues:
        first -= 1
    blocks: list[AnyBlock] = []
    for k in range(first, last + 1):
        answer, _ = await _kept_answer(store, conversation, k, api, now=now)
        blocks.extend(answer.blocks)
    return tuple(blocks)


async def _refuse_other_contents(
    store: StateStore, conversation: Conversation, revision: int, seq: MessageSequence
) -> None:
    operation_id = conversation.turns[revision].operation_id
    record = None if operation_id is None else await store.get(operation_id)
    if record is None or record.manifest.sequence_digest != seq.sequence_digest:
        raise UnknownContinuation(
            f"turngate: the continuationToken goes on from the answer committed for "
            f"conversation '{conversation.key}' revision {revision}, which answered other "
            "contents: a continuation sends the same contents again, with the token"
        )


async def _kept_answer(
    store: StateStore, conversation: Conversation, revision: int, api: ApiName, *, now: float
) -> tuple[AssistantTurn, str | None]:
    operation_id = conversation.turns[revision].operation_id
    kept = None if operation_id is None else await _load(store, operation_id, now=now)
    try:
        if kept is not None:
            return kept_answer(api, kept)
    except (TurngateError, ValueError):
        pass
    raise UnknownContinuation(
        f"turngate: the request goes on from the answer committed for conversation "
        f"'{conversation.key}' revision {revision}, which is not (or no longer) kept for "
        "replay: send the whole history"
    )


async def _load(store: StateStore, operation_id: str, *, now: float) -> StoredResponse | None:
    waited = 0.0
    while True:
        kept = await store.load_response(operation_id, now=now)
        if kept is not None or waited >= KEPT_WAIT:
            return kept
        await asyncio.sleep(KEPT_POLL)
        waited += KEPT_POLL


def kept_answer(api: ApiName, kept: StoredResponse) -> tuple[AssistantTurn, str | None]:
    """A kept answer's turn and (Gemini) the last continuation token it carried."""
    if not kept.streamed:
        body = orjson.loads(kept.body)
        if not isinstance(body, dict):
            raise ValueError("a kept answer is not a JSON object")
        return get_adapter(api).parse_response(body), _token_of(body)
    relay = StreamRelay(api)
    relay.feed(kept.body)
    _, outcome = relay.finish()
    if not isinstance(outcome, AssistantTurn):
        raise ValueError("a kept stream does not read as a turn")
    token = None
    if api == "gemini":
        decoder = SSEDecoder()
        for frame in [*decoder.feed(kept.body), *decoder.close()]:
            try:
                chunk = orjson.loads(frame.data)
            except orjson.JSONDecodeError:
                continue
            token = _token_of(chunk) or token
    return outcome, token


def _token_of(chunk: Any) -> str | None:
    candidates = chunk.get("candidates") if isinstance(chunk, dict) else None
    if not isinstance(candidates, list) or not candidates:
        return None
    candidate = candidates[0]
    return _token_in(candidate) if isinstance(candidate, dict) else None


def _token_in(fields: Mapping[str, Any]) -> str | None:
    """The token under either spelling (the REST API's camelCase, or snake_case)."""
    for field in TOKEN_FIELDS:
        token = fields.get(field)
        if isinstance(token, str) and token:
            return token
    return None
