"""Conversations in the proxy: the history check before the claim, and turngate's endpoints.

    Turngate-Conversation-Id: c   -> revision r = assistant turns in the history
    history turn k == canonical turn k of c, for every k < r   else 400 history_mismatch
    the claim takes (c, r, the conversation's cancel generation)

An Anthropic request may end with assistant messages that Claude continues: its canonical
turn is that run and the answer together (``answer_prefix``). A run that is no committed turn
(a prefill such as ``{``) is not a turn of the history: the request answers the revision of
the turns before it. A run that is a committed turn (a paused turn sent back to go on) is
counted as the turn it is, and the answer's turn continues it (state/conversations.py,
"Continued turns"): the next history holds the two as one run, which matches the
continuation.

A Gemini request carrying a ``continuationToken`` goes on with the answer that carried it
(proxy/continuation.py): it answers the revision after that hop, and its turn continues
the hops before it.

A Gemini request naming a ``cachedContent``, or a compacted history, shows the
conversation's last turns only (the cache holds the start, and is made again further on as
the conversation grows; a compaction stands for what came before it): they must be
consecutive committed turns, the latest ones or those before the latest (a retry), and the
request answers the revision after them (``cached_revision``).

A chained request (Responses ``previous_response_id``, an Anthropic Message Threads
``continue`` naming its ``previous_message_id``) carries only what follows the response it
names; the turns before are the provider's. A thread's continue that carries nothing
resumes the (paused) reply it names: its answer continues that turn, whose blocks come
from its kept answer (proxy/continuation.py). Its revision counts from that
response: r = (revision of the committed turn whose response id it names) + 1 + the assistant
turns it carries. A response id that is no committed turn of c (a stream that broke after
its id was seen, another conversation's answer) is refused as ``history_mismatch``, as its
preview text would be. A conversation turngate has no turns of yet starts at the chained
request, numbered from 0. A request naming a Responses ``conversation`` object is refused
under a conversation id: it says neither which response it follows nor whether it repeats
one.

    GET  /turngate/v1/conversations/{id}          revision, cancel generation, turns, operations
    POST /turngate/v1/conversations/{id}/cancel   move the cancel generation on

The first enforced request of a conversation adopts its history (state/conversations.py).
Shadowed requests only observe: they neither adopt, check nor commit canonical turns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from turngate.errors import LocalError
from turngate.graph.codec import digest_bytes
from turngate.graph.history import (
    HistoryTurn,
    compacted,
    continued_run,
    history_turns,
    only_compactions,
    turn_digest,
)
from turngate.graph.model import AnyBlock, MessageSequence
from turngate.proxy.continuation import (
    continuation_token,
    continued_hops,
    resumed_run,
    resumes_held_turn,
)
from turngate.proxy.errors import plain_error
from turngate.proxy.replay import ReplayUnavailable
from turngate.proxy.replies import chained_from
from turngate.state.conversations import Conversation
from turngate.state.machine import DispatchState
from turngate.state.store import OperationRecord, StateStore

log = logging.getLogger("turngate.proxy")

# How many operations GET /turngate/v1/conversations/{id} lists.
OPERATIONS_SHOWN = 200


class HistoryMismatch(LocalError):
    """An assistant turn of the history is not the turn turngate committed for it."""

    rule = "history_mismatch"


# How many of a conversation's latest turns a chained request's response id is looked for
# in: continuing an older one would answer a revision already answered (409) anyway.
ANCHOR_SEARCH = 32


@dataclass(frozen=True)
class CheckedHistory:
    """What the history check found: the conversation, the revision the request answers,
    and whether its answer goes on with a committed turn (the one the request ends with, or
    the Gemini hops its continuationToken goes on from: ``prefix``, their blocks)."""

    conversation: Conversation
    revision: int
    continues: bool = False
    prefix: tuple[AnyBlock, ...] | None = None
    # A chained request's: the operation that committed the reply it names, if turngate's.
    anchor: str | None = None
    # The operation that committed the last answer the request's history shows, if
    # turngate's (the answer whose items a request most often sends back by id).
    latest: str | None = None


async def checked_conversation(
    store: StateStore,
    conversation_id: str,
    seq: MessageSequence,
    *,
    now: float,
    sent: bytes | None = None,
) -> CheckedHistory:
    """The revision the request answers, once the request's history is its canonical turns
    (or adopted) and that revision can still be answered (``refuse_unreplayable``).
    ``sent``: the bytes the request would send (a request beside a cache may be a retry only
    they tell apart)."""
    refuse_provider_conversation(seq, conversation_id)
    turns = history_turns(seq)
    # A run Claude continues is not a turn to adopt, nor one to check as the others (one of
    # nothing but a compaction, paused after it, is not among ``turns`` at all).
    run = continued_run(seq)
    answered = turns[:-1] if run is not None and not only_compactions(run) else turns
    previous = chained_from(seq)
    cached = shows_latest_only(seq)
    base = 0
    known = await store.conversation(conversation_id) if previous or cached else None
    if known is not None and known.turns:
        conversation = known
        if previous is not None:
            base = await anchored_revision(store, known, previous)
        else:
            retried = await retried_revision(store, known, answered, sent)
            base = cached_revision(known, answered) if retried is None else retried
    else:
        conversation = await store.open_conversation(
            conversation_id, [t.digest for t in answered], now=now
        )
    mismatch = first_mismatch(conversation, answered, base)
    if mismatch is not None:
        raise HistoryMismatch(mismatch)
    shown = conversation.shown_revisions(base)
    revision = shown[len(answered) - 1] + 1 if answered else base
    continues = False
    prefix = None
    if run is not None:
        paused = sent_back_turn(conversation, revision, turn_digest(run))
        if paused is not None:
            revision, continues = paused + 1, True
    token = continuation_token(seq)
    if token is not None:
        revision, prefix = await continued_hops(store, conversation, revision, seq, token, now=now)
        continues = True
    elif previous is not None and base > 0 and resumes_held_turn(seq):
        prefix = await resumed_run(store, conversation, base - 1, seq.api, now=now)
        continues = True
    await refuse_unreplayable(store, conversation, revision)
    anchor = None
    if previous is not None and base > 0:
        anchor = conversation.turns[base - 1].operation_id
    latest = conversation.turns[shown[len(answered) - 1]].operation_id if answered else None
    return CheckedHistory(conversation, revision, continues, prefix, anchor, latest)


def sent_back_turn(conversation: Conversation, revision: int, digest: str) -> int | None:
    """The committed turn a request's last run is, if any: the turn of ``revision`` or one
    that goes on with it (a turn paused again, sent back with the parts before it)."""
    for k in conversation.chain_from(revision):
        if conversation.turns[k].digest == digest:
            return k
    return None


def answer_prefix(seq: MessageSequence) -> tuple[AnyBlock, ...]:
    """What the canonical turn starts with before the answer: the assistant run a request
    ends with, which Claude continues (a prefill, or a paused turn sent back)."""
    return continued_run(seq) or ()


def shows_latest_only(seq: MessageSequence) -> bool:
    """The request may leave out the conversation's start: Gemini's ``cachedContent`` holds
    it, model turns included (ADK caches the conversation so far, and again further on
    every few calls), or a compaction stands for it (OpenAI's guide lets a client drop
    every item before the latest compaction; ``responses.compact`` returns none of them)."""
    return (seq.api == "gemini" and seq.history == "partial") or compacted(seq)


def cached_revision(known: Conversation, turns: list[HistoryTurn]) -> int:
    """The revision of the first turn a request beside a cache (or a compaction) shows: its
    turns are the conversation's latest committed ones, or those before the latest (a
    retry); the latest ``ANCHOR_SEARCH`` places are looked at, nearest first."""
    latest = max(known.revision - len(turns), 0)
    for base in range(latest, max(latest - ANCHOR_SEARCH, -1), -1):
        if first_mismatch(known, turns, base) is None:
            return base
    mismatch = first_mismatch(known, turns, latest)
    assert mismatch is not None
    raise HistoryMismatch(
        f"{mismatch}. The request names a cachedContent or holds a compaction: the turns it "
        f"shows must be the latest committed ones (the latest {ANCHOR_SEARCH} places looked "
        "at)"
    )


async def retried_revision(
    store: StateStore, known: Conversation, turns: list[HistoryTurn], sent: bytes | None
) -> int | None:
    """The revision of the first turn a request beside a cache (or a compaction) shows when
    it is a retry of the request that committed the latest turn (the same bytes): after a
    new cache a request may show no turn at all, and its retry would otherwise answer the
    next revision."""
    latest = known.turns[-1]
    if sent is None or latest.operation_id is None:
        return None
    record = await store.get(latest.operation_id)
    if record is None or record.manifest.request_digest != digest_bytes(sent):
        return None
    base = latest.revision - len(turns)
    return base if base >= 0 and first_mismatch(known, turns, base) is None else None


def refuse_provider_conversation(seq: MessageSequence, conversation_id: str) -> None:
    """A Responses ``conversation`` object grows with every response, and a request names it,
    not the response it follows: which revision it answers (and whether it is a retry of
    the last) cannot be told, so the conversation's turns cannot be kept."""
    if seq.api == "openai_responses" and seq.envelope.get("conversation") not in (None, ""):
        raise HistoryMismatch(
            f"turngate: conversation '{conversation_id}' cannot follow a request that names a "
            "Responses `conversation`: the provider keeps that history and the request does "
            "not say which response it follows. Chain with previous_response_id, send the "
            "history in `input`, or leave out Turngate-Conversation-Id"
        )


async def anchored_revision(store: StateStore, known: Conversation, previous: str) -> int:
    """The revision after the committed turn whose response id is ``previous``."""
    for turn in reversed(known.turns[-ANCHOR_SEARCH:]):
        if turn.operation_id is None:
            continue
        record = await store.get(turn.operation_id)
        if record is not None and record.handle == previous:
            return turn.revision + 1
    raise HistoryMismatch(
        f"turngate: previous_response_id '{previous}' is not an answer committed for "
        f"conversation '{known.key}' (its {known.revision} turns' responses; the latest "
        f"{ANCHOR_SEARCH} looked at). A response whose stream broke was never committed: "
        "continue from the last committed one"
    )


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


def first_mismatch(
    conversation: Conversation, turns: list[HistoryTurn], base: int = 0
) -> str | None:
    """Why the history is not the conversation's canonical turns from revision ``base`` on
    (a chained request's first turn answers revision ``base``), or None. A chain of turns
    that go on with each other is one turn of a history: its last
    (``Conversation.shown_revisions``)."""
    canonical = conversation.turns
    shown = conversation.shown_revisions(base)
    for turn in turns:
        where = (
            f"assistant turn {base + turn.index} ({turn.location}, message {turn.message_index})"
        )
        if turn.index >= len(shown):
            return (
                f"turngate: {where} of conversation '{conversation.key}' was never committed: "
                f"the conversation has {len(canonical)} canonical turns. An answer that was "
                "streamed but not committed (preview text) is not history; a Responses "
                "background response is committed when it is retrieved through turngate "
                "with this header"
            )
        index = shown[turn.index]
        if turn.digest != canonical[index].digest:
            committed = canonical[index].operation_id or "the conversation's first request"
            return (
                f"turngate: {where} of conversation '{conversation.key}' differs from the turn "
                f"committed for revision {index} (operation '{committed}'): send the "
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
