"""What turngate remembers of the replies it committed, for the requests chained to them.

A chained request (a Responses ``previous_response_id``, an Anthropic Message Threads
continue naming its ``previous_message_id``) shows nothing of the reply it follows: the
provider holds it. Two things of that reply still decide whether the request may go:

- **its open calls** (graph/chained.py): each needs its result in the request, or the
  provider refuses it; turngate refuses it first (``missing_result``), nothing sent.
- **the reasoning its items came with** (Responses): an item the provider stored right after
  a reasoning item must go back with it when the next request sends it by id, or the
  provider refuses the request; turngate refuses it first (``responses_reasoning_missing``).
- **the thinking its turns were signed with** (Anthropic): the latest assistant message's
  thinking blocks go back as the answer gave them, or the provider refuses the request;
  turngate refuses it first (``anthropic_thinking_modified``), from each relayed block's
  text print kept under its signature.
- **a thread's toolset**: a continue carries neither ``system`` nor ``tools`` (the server
  keeps those the thread was created with, and the SDK refuses a continue that would change
  them), so its answer's calls are checked against the toolset the request that produced
  the reply was checked with, with what the continue defines inline.

Both are kept in process memory, bounded, the most recently used kept: a sidecar sees its
agent's whole loop. Each is remembered for the credential the reply was answered to (its
keyed hash, as replays are scoped): another caller naming the same reply id learns nothing
of it. A reply this process did not commit (another replica's, one from before a restart,
an evicted one) has, under a conversation id, its calls (and its items' reasoning) read from
the answer the store kept for replay, and its thread's toolset from the one the store keeps
per conversation (``keep_thread`` / ``load_thread``); otherwise the request is checked
without them: sent as it is, its answer's calls to tools it does not show checked as one
JSON object each.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Generic, TypeVar

from turngate.adapters.anthropic.request import thread_anchor
from turngate.errors import SequenceRejected, TurngateError
from turngate.graph.chained import OpenCall, open_calls, unanswered
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.rules.anthropic_thinking import (
    NOT_RELAYED,
    Print,
    modified_thinking,
    returned_thinking,
    signed_thinking,
)
from turngate.graph.rules.openai_responses import (
    missing_reasoning,
    reasoning_bindings,
    returned_items,
)
from turngate.graph.schema_check import OpenToolset, ToolSchemas
from turngate.graph.turn import AssistantTurn
from turngate.proxy.continuation import kept_answer
from turngate.state.store import StateStore

# Replies remembered by each memory; an entry costs a key and a small tuple (empty for a
# reply without calls) or a reference to a toolset every reply of its thread shares.
REMEMBERED = 4096
# The log that keeps, per conversation, the toolset its latest Anthropic thread was created
# with (one entry).
THREAD_LOG = "thread-tools:"
# The APIs whose replies a later request can be chained to.
CHAINED_APIS = frozenset({"openai_responses", "anthropic"})

log = logging.getLogger("turngate.proxy")

T = TypeVar("T")


class ReplyMemory(Generic[T]):
    """Reply id -> what is remembered of it; the least recently used goes first."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self._size = size
        self._by_reply: OrderedDict[str, T] = OrderedDict()

    def get(self, reply: str) -> T | None:
        found = self._by_reply.get(reply)
        if found is not None:
            self._by_reply.move_to_end(reply)
        return found

    def put(self, reply: str, value: T) -> None:
        self._by_reply[reply] = value
        self._by_reply.move_to_end(reply)
        while len(self._by_reply) > self._size:
            self._by_reply.popitem(last=False)


def chained_from(seq: MessageSequence) -> str | None:
    """The provider-held reply a request continues, if any: a Responses
    ``previous_response_id``, or the reply an Anthropic thread's continue follows."""
    if seq.api == "anthropic":
        return thread_anchor(seq.envelope)
    if seq.api != "openai_responses":
        return None
    previous = seq.envelope.get("previous_response_id")
    return previous if isinstance(previous, str) and previous else None


class Replies:
    """The app's memory of committed replies: their open calls and their threads' tools,
    each under the credential (``credential``: its keyed hash) the reply was answered to."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.calls: ReplyMemory[tuple[OpenCall, ...]] = ReplyMemory(size)
        self.toolsets: ReplyMemory[dict[str, Any]] = ReplyMemory(size)
        # Output item id -> the reasoning item right before it, "" for none (Responses).
        self.reasoning: ReplyMemory[str] = ReplyMemory(size)
        # A signed thinking block's signature key -> its text's print (Anthropic).
        self.thinking: ReplyMemory[Print] = ReplyMemory(size)

    def committed(self, api: str, turn: AssistantTurn, credential: str | None) -> None:
        """``turn`` is a committed answer: a request chained to it must answer its calls,
        and one that sends its items back, their reasoning."""
        if api == "openai_responses":
            bound = reasoning_bindings(turn.blocks)
            for block in turn.blocks:
                if isinstance(item := block.attrs.get("id"), str):
                    self.reasoning.put(_key(credential, item), bound.get(item, ""))
        elif api == "anthropic":
            for signature, text in signed_thinking(turn.blocks):
                self.thinking.put(_key(credential, signature), text)
        if turn.handle is None or api not in CHAINED_APIS:
            return
        # A reply without calls too: the next request chained to it then needs no lookup.
        self.calls.put(_key(credential, turn.handle), open_calls(turn))

    def refuse_unanswered(self, seq: MessageSequence, credential: str | None) -> bool:
        """Raise ``SequenceRejected`` (``missing_result``) when ``seq`` is chained to a
        remembered reply whose calls it does not all answer. False: ``seq`` is chained to a
        reply this memory does not hold, and could not be judged."""
        reply = chained_from(seq)
        if reply is None:
            return True
        calls = self.calls.get(_key(credential, reply))
        if calls is None:
            return False
        violations = unanswered(seq, reply, calls)
        if violations:
            raise SequenceRejected(violations)
        return True

    def refuse_unbound_items(self, seq: MessageSequence, credential: str | None) -> None:
        """Raise ``SequenceRejected`` when ``seq`` sends back a remembered answer's reasoning
        other than it came: an item without the reasoning item it came with
        (``responses_reasoning_missing``), or signed thinking with other text
        (``anthropic_thinking_modified``)."""
        if seq.api == "openai_responses":
            violations = missing_reasoning(
                seq, lambda item: self.reasoning.get(_key(credential, item))
            )
        elif seq.api == "anthropic":
            violations = modified_thinking(
                seq, lambda signature: self.thinking.get(_key(credential, signature))
            )
        else:
            return
        if violations:
            raise SequenceRejected(violations)

    async def refuse_unbound_items_kept(
        self,
        store: StateStore,
        seq: MessageSequence,
        anchor: str | None,
        credential: str | None,
        *,
        now: float,
    ) -> None:
        """``refuse_unbound_items`` for items this process did not relay, of the answer a
        shared store kept under the conversation (the last the request's history shows,
        committed by operation ``anchor`` for the same credential: another replica's, or
        this process's before a restart). An item of no answer found either way is left to
        the provider, and not looked up again."""
        returned = self._returned(seq)
        if anchor is None or returned is None:
            return
        memory, keys, unseen = returned
        unknown = [key for item in keys if memory.get(key := _key(credential, item)) is None]
        if not unknown:
            return
        turn = await self._kept_turn(store, seq.api, anchor, credential, now=now)
        if turn is not None:
            self.committed(seq.api, turn, credential)
        for key in unknown:
            if memory.get(key) is None:
                memory.put(key, unseen)
        self.refuse_unbound_items(seq, credential)

    def _returned(self, seq: MessageSequence) -> tuple[ReplyMemory[Any], list[str], Any] | None:
        """The memory that judges what ``seq`` sends back of an answer, the keys it is
        looked up by, and what is remembered for one no answer holds."""
        if seq.api == "openai_responses":
            items = [item_id for _item, item_id in returned_items(seq) if item_id]
            return self.reasoning, items, ""
        if seq.api == "anthropic":
            signatures = [signature for signature, _print in returned_thinking(seq)]
            return self.thinking, signatures, NOT_RELAYED
        return None

    async def refuse_unanswered_kept(
        self,
        store: StateStore,
        seq: MessageSequence,
        anchor: str | None,
        credential: str | None,
        *,
        now: float,
    ) -> bool:
        """``refuse_unanswered`` for a reply this process does not remember but a shared
        store kept for replay (under a conversation id, committed by operation ``anchor``
        for the same credential: another replica, or this process before a restart). False
        when the reply is not found there either."""
        reply = chained_from(seq)
        if reply is None or self.calls.get(_key(credential, reply)) is not None:
            return True
        if anchor is None:
            return False
        turn = await self._kept_turn(store, seq.api, anchor, credential, now=now)
        if turn is None or turn.handle != reply:
            return False
        self.committed(seq.api, turn, credential)
        return self.refuse_unanswered(seq, credential)

    @staticmethod
    async def _kept_turn(
        store: StateStore, api: ApiName, anchor: str, credential: str | None, *, now: float
    ) -> AssistantTurn | None:
        """The answer the store kept for replay of operation ``anchor``, if it was answered
        to ``credential``."""
        record = await store.get(anchor)
        if record is None or record.manifest.credential_hash != credential:
            return None
        kept = await store.load_response(anchor, now=now)
        if kept is None:
            return None
        try:
            turn, _ = kept_answer(api, kept)
        except (TurngateError, ValueError):
            return None
        return turn

    def toolset(
        self, seq: MessageSequence, shown: ToolSchemas, credential: str | None
    ) -> ToolSchemas:
        """What the answer to ``seq`` is checked against: ``shown`` (the request's own
        toolset), or for a thread continue from a remembered reply the thread's whole one
        (open when it was read from the store: ``load_thread``)."""
        reply = chained_from(seq) if seq.api == "anthropic" else None
        known = None if reply is None else self.toolsets.get(_key(credential, reply))
        if known is None:
            return shown
        merged = {**known, **shown}
        return OpenToolset(merged) if isinstance(known, OpenToolset) else merged

    async def keep_thread(
        self,
        store: StateStore,
        conversation: str,
        seq: MessageSequence,
        toolset: ToolSchemas,
        credential: str | None,
        *,
        now: float,
    ) -> None:
        """A thread created under ``conversation`` declared ``toolset``: kept in the store
        too, for a continue another replica (or this process after a restart) serves."""
        created = seq.envelope.get("thread")
        if not isinstance(created, dict) or created.get("type") != "create":
            return
        if isinstance(toolset, OpenToolset) or not isinstance(toolset, dict):
            return
        entry = {"credential": credential or "", "tools": dict(toolset)}
        try:
            await store.append_log(THREAD_LOG + conversation, entry, now=now, keep=1)
        except Exception as exc:
            log.warning("state store: the thread's tools not kept: %s", type(exc).__name__)

    async def load_thread(
        self, store: StateStore, conversation: str, seq: MessageSequence, credential: str | None
    ) -> None:
        """For a thread continue under ``conversation`` from a reply this process does not
        remember: the toolset the conversation's latest thread was created with, read from
        the store. Open (a call to a tool it does not name is checked as a JSON object): the
        reply may be of an earlier thread of the conversation, with other tools."""
        reply = chained_from(seq) if seq.api == "anthropic" else None
        if reply is None or self.toolsets.get(_key(credential, reply)) is not None:
            return
        try:
            entries = await store.read_log(THREAD_LOG + conversation, limit=1)
        except Exception as exc:
            log.warning("state store: the thread's tools not read: %s", type(exc).__name__)
            return
        if not entries or entries[0].get("credential") != (credential or ""):
            return
        tools = entries[0].get("tools")
        if isinstance(tools, dict):
            self.toolsets.put(_key(credential, reply), OpenToolset(tools))

    def checked_with(
        self,
        seq: MessageSequence,
        reply: str | None,
        toolset: ToolSchemas,
        credential: str | None,
    ) -> None:
        """``reply``, the committed answer to the threaded request ``seq``, was checked
        against ``toolset``: a continue from it will be too. An open toolset is not the
        thread's whole one, and is not remembered."""
        if reply is None or not threaded(seq) or isinstance(toolset, OpenToolset):
            return
        if isinstance(toolset, dict):
            self.toolsets.put(_key(credential, reply), toolset)


def _key(credential: str | None, reply: str) -> str:
    return f"{credential or ''}\x00{reply}"


def threaded(seq: MessageSequence) -> bool:
    """Whether ``seq`` creates or continues an Anthropic Message Thread."""
    return seq.api == "anthropic" and isinstance(seq.envelope.get("thread"), dict)
