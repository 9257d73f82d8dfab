"""Gemini turns continued by token, under a conversation id.

A Gemini answer may stop with ``finishReason: CONTINUATION`` and a ``continuationToken``:
the turn is not over. google-genai (automatic continuation, on by default) sends the same
request again with the token (``continuationToken``, top level) and joins the hops' parts
into one candidate, which the application keeps as one model turn:

    request R            -> hop 1 (CONTINUATION, token t1)   committed for revision r
    R + t1               -> hop 2 (STOP)                     revision r+1, ``continues``
    next history         -> one model turn: hop 1's parts, then hop 2's

The request of a later hop shows the same history as the first, so without this it would
answer revision r again (a 409). The token says which committed hop it goes on from: the
hop of the chain from revision r whose kept answer carried it. The answer is committed for
the revision after that hop with ``continues`` and the digest of the whole run, as a paused
Anthropic turn's continuation is (state/conversations.py, "Continued turns"); the hops
before it come from their answers kept for replay, since the request does not hold them.
A retry of a hop carries the token of the hop before it, so it meets that revision's
committed answer and is replayed. A token no kept answer carried (one from a stream that
broke, which was never committed) is refused before anything is sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from turngate.adapters import get_adapter
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import SSEDecoder
from turngate.errors import LocalError, TurngateError
from turngate.graph.model import AnyBlock, MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.state.conversations import Conversation, StoredResponse
from turngate.state.store import StateStore

TOKEN_FIELDS = ("continuationToken", "continuation_token")
# A streamed hop is kept for replay just after its stream ended; the next hop's request
# can come first.
KEPT_WAIT = 2.0
KEPT_POLL = 0.01


class UnknownContinuation(LocalError):
    """A request's continuationToken is no token a committed answer carried."""

    rule = "history_mismatch"


def continuation_token(seq: MessageSequence) -> str | None:
    """The token a Gemini request goes on with, if any."""
    if seq.api != "gemini":
        return None
    for field in TOKEN_FIELDS:
        token = seq.envelope.get(field)
        if isinstance(token, str) and token:
            return token
    return None


async def continued_hops(
    store: StateStore,
    conversation: Conversation,
    revision: int,
    seq: MessageSequence,
    token: str,
    *,
    now: float,
) -> tuple[int, tuple[AnyBlock, ...]]:
    """The revision a request carrying ``token`` answers, and the blocks of the hops its
    answer goes on with (from ``revision``, the one its history would answer, on). The
    request must be the hop's own again: the same contents (``sequence_digest``)."""
    blocks: list[AnyBlock] = []
    for k in conversation.chain_from(revision):
        turn = conversation.turns[k]
        if turn.cancel_generation != conversation.cancel_generation:
            break
        hop = await _kept_hop(store, turn.operation_id, now=now)
        if hop is None:
            raise UnknownContinuation(
                f"turngate: the continuationToken goes on from conversation "
                f"'{conversation.key}' revision {k}, whose answer is not (or no longer) kept: "
                "send the request again without it"
            )
        answer, carried = hop
        blocks.extend(answer.blocks)
        if carried == token:
            await _refuse_other_contents(store, conversation, k, seq)
            return k + 1, tuple(blocks)
    raise UnknownContinuation(
        f"turngate: the continuationToken is not one a committed answer of conversation "
        f"'{conversation.key}' carried (revision {revision} on). An answer whose stream broke "
        "was never committed: send the request again without the token"
    )


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


async def _kept_hop(
    store: StateStore, operation_id: str | None, *, now: float
) -> tuple[AssistantTurn, str | None] | None:
    if operation_id is None:
        return None
    waited = 0.0
    while True:
        kept = await store.load_response(operation_id, now=now)
        if kept is not None or waited >= KEPT_WAIT:
            break
        await asyncio.sleep(KEPT_POLL)
        waited += KEPT_POLL
    if kept is None:
        return None
    try:
        return kept_hop(kept)
    except (TurngateError, ValueError):
        return None


def kept_hop(kept: StoredResponse) -> tuple[AssistantTurn, str | None]:
    """A kept Gemini answer's turn and the last continuation token it carried."""
    if not kept.streamed:
        body = orjson.loads(kept.body)
        if not isinstance(body, dict):
            raise ValueError("a kept answer is not a JSON object")
        return get_adapter("gemini").parse_response(body), _token_of(body)
    relay = StreamRelay("gemini")
    relay.feed(kept.body)
    _, outcome = relay.finish()
    if not isinstance(outcome, AssistantTurn):
        raise ValueError("a kept stream does not read as a turn")
    token = None
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
    if not isinstance(candidate, dict):
        return None
    for field in TOKEN_FIELDS:
        token = candidate.get(field)
        if isinstance(token, str) and token:
            return token
    return None
