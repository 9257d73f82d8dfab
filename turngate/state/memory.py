"""A state store in process memory: for tests and ``--state memory://``. Lost on exit.

One ``asyncio.Lock`` guards the dicts and no ``await`` happens while it is held, so each
operation is atomic for every coroutine of the process and cannot be cancelled half-way.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import Any

import orjson

from turngate.errors import StoreUnavailable
from turngate.graph.codec import right_sized
from turngate.state.conversations import (
    CANCELLABLE,
    CANCELLED_DETAIL,
    ClientKey,
    Conversation,
    KeyHold,
    StoredResponse,
    adopted,
    cancelled,
    commit_transition,
    with_turn,
)
from turngate.state.machine import IN_FLIGHT, DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.store import (
    BLOCKING,
    DEFAULT_OPERATION_TTL,
    DEFAULT_REPLAY_MAX_BYTES,
    LOST_AT_START,
    OperationRecord,
    check_client_key,
    check_log_args,
    claim_conflict,
    claim_slot,
    claimed_record,
    first_to_drop,
    moved_record,
    sent_first,
)


class MemoryStore:
    def __init__(
        self,
        *,
        operation_ttl: float | None = DEFAULT_OPERATION_TTL,
        replay_max_bytes: int | None = DEFAULT_REPLAY_MAX_BYTES,
    ) -> None:
        # Seconds an operation is kept after its claim (None: for ever), as the other stores.
        self.operation_ttl = operation_ttl
        # Bytes of answer bodies kept for replay (None: no limit), as the SQLite store.
        self.replay_max_bytes = replay_max_bytes
        self._lock = asyncio.Lock()
        self._open = False
        self._records: dict[str, OperationRecord] = {}
        # (conversation key, revision, cancel generation) -> operation ids, oldest first.
        self._attempts: dict[tuple[str, int, int], list[str]] = {}
        # kind -> (at, entry as JSON), newest last; kept as bytes, as the other stores do.
        self._logs: dict[str, deque[tuple[float, bytes]]] = {}
        self._conversations: dict[str, Conversation] = {}
        # conversation key -> its operation ids, oldest first.
        self._by_conversation: dict[str, list[str]] = {}
        self._responses: dict[str, StoredResponse] = {}
        self._keys: dict[str, KeyHold] = {}

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def ping(self) -> bool:
        return self._open

    async def claim(
        self, draft: DispatchManifest, *, now: float, client_key: ClientKey | None = None
    ) -> OperationRecord:
        async with self._lock:
            self._require_open()
            if client_key is not None:
                hold = self._keys.get(client_key.scope)
                holder = None if hold is None else self._records.get(hold.operation_id)
                check_client_key(client_key, hold, holder, now=now)
            same_id = self._records.get(draft.operation_id)
            if same_id is not None:
                raise claim_conflict(draft, same_id)
            slot = claim_slot(draft)
            earlier = [self._records[i] for i in self._attempts.get(slot, [])]
            for record in earlier:
                if record.state in BLOCKING:
                    raise claim_conflict(draft, record)
            attempt = max((r.manifest.attempt for r in earlier), default=0) + 1
            claimed = claimed_record(draft, attempt, now=now)
            self._records[claimed.operation_id] = claimed
            self._attempts.setdefault(slot, []).append(claimed.operation_id)
            if draft.conversation_id is not None:
                ops = self._by_conversation.setdefault(draft.conversation_id, [])
                ops.append(claimed.operation_id)
            if client_key is not None:
                self._keys[client_key.scope] = KeyHold(
                    claimed.operation_id, client_key.body_digest, client_key.expires_at
                )
            return claimed

    async def live_attempt(
        self, key: str, revision: int, cancel_generation: int
    ) -> OperationRecord | None:
        async with self._lock:
            self._require_open()
            attempts = self._attempts.get((key, revision, cancel_generation), [])
            for operation_id in reversed(attempts):
                record = self._records[operation_id]
                if record.state in BLOCKING:
                    return record
            return None

    async def transition(
        self,
        operation_id: str,
        transition: Transition,
        *,
        now: float,
        handle: str | None = None,
        detail: str | None = None,
        sent: bool = False,
    ) -> OperationRecord:
        async with self._lock:
            self._require_open()
            record = self._records.get(operation_id)
            if record is None:
                raise KeyError(operation_id)
            record = sent_first(record, sent, now=now)
            moved = moved_record(record, transition, now=now, handle=handle, detail=detail)
            self._records[operation_id] = moved
            return moved

    async def get(self, operation_id: str) -> OperationRecord | None:
        async with self._lock:
            self._require_open()
            return self._records.get(operation_id)

    async def recover(self, *, now: float) -> list[OperationRecord]:
        async with self._lock:
            self._require_open()
            moved = []
            for operation_id in sorted(self._records):
                record = self._records[operation_id]
                if record.state in IN_FLIGHT:
                    lost = moved_record(record, Transition.LOSE, now=now, detail=LOST_AT_START)
                    self._records[operation_id] = lost
                    moved.append(lost)
            return moved

    async def append_log(self, kind: str, entry: dict[str, Any], *, now: float, keep: int) -> None:
        check_log_args(kind, keep=keep)
        data = right_sized(orjson.dumps(entry))
        async with self._lock:
            self._require_open()
            log = self._logs.setdefault(kind, deque())
            log.append((now, data))
            while len(log) > keep:
                log.popleft()

    async def read_log(self, kind: str, *, limit: int) -> list[dict[str, Any]]:
        check_log_args(kind, limit=limit)
        async with self._lock:
            self._require_open()
            log = self._logs.get(kind, deque())
            newest = [data for _at, data in itertools.islice(reversed(log), limit)]
        return [orjson.loads(data) for data in newest]

    async def open_conversation(self, key: str, history: list[str], *, now: float) -> Conversation:
        async with self._lock:
            self._require_open()
            found = self._conversations.get(key)
            if found is None:
                found = self._conversations[key] = adopted(key, history, now=now)
            return found

    async def conversation(self, key: str) -> Conversation | None:
        async with self._lock:
            self._require_open()
            return self._conversations.get(key)

    async def cancel_conversation(self, key: str, *, now: float) -> Conversation:
        async with self._lock:
            self._require_open()
            moved = cancelled(self._conversations.get(key), key, now=now)
            self._conversations[key] = moved
            detail = CANCELLED_DETAIL.format(generation=moved.cancel_generation)
            for operation_id in self._by_conversation.get(key, []):
                record = self._records[operation_id]
                if record.state in CANCELLABLE:
                    self._records[operation_id] = moved_record(
                        record, Transition.CANCEL, now=now, detail=detail
                    )
            return moved

    async def conversation_operations(self, key: str, *, limit: int) -> list[OperationRecord]:
        async with self._lock:
            self._require_open()
            claimed = self._by_conversation.get(key, [])
            return [self._records[i] for i in claimed[max(len(claimed) - limit, 0) :]]

    async def commit_turn(
        self,
        operation_id: str,
        *,
        digest: str,
        now: float,
        handle: str | None = None,
        response: StoredResponse | None = None,
        sent: bool = False,
        continues: bool = False,
    ) -> OperationRecord:
        async with self._lock:
            self._require_open()
            record = self._records.get(operation_id)
            if record is None:
                raise KeyError(operation_id)
            record = sent_first(record, sent, now=now)
            moved = moved_record(record, commit_transition(record), now=now, handle=handle)
            key = record.manifest.conversation_id
            conversation = None if key is None else self._conversations.get(key)
            turned = with_turn(conversation, record, digest, now=now, continues=continues)
            self._records[operation_id] = moved
            if turned is not None:
                self._conversations[turned.key] = turned
            if response is not None:
                self._responses[operation_id] = response
            return moved

    async def save_response(
        self, operation_id: str, response: StoredResponse, *, now: float
    ) -> None:
        async with self._lock:
            self._require_open()
            self._responses[operation_id] = response

    async def load_response(self, operation_id: str, *, now: float) -> StoredResponse | None:
        async with self._lock:
            self._require_open()
            found = self._responses.get(operation_id)
            if found is not None and found.expires_at <= now:
                del self._responses[operation_id]
                return None
            return found

    async def unknown_operations(self, *, limit: int) -> list[OperationRecord]:
        async with self._lock:
            self._require_open()
            unknown = [r for r in self._records.values() if r.state is DispatchState.UNKNOWN]
            return unknown[:limit]

    async def prune(self, *, now: float) -> int:
        async with self._lock:
            self._require_open()
            responses = [op for op, r in self._responses.items() if r.expires_at <= now]
            keys = [scope for scope, hold in self._keys.items() if hold.expires_at <= now]
            for op in responses:
                del self._responses[op]
            for scope in keys:
                del self._keys[scope]
            pruned = len(responses) + len(keys)
            if self.operation_ttl is not None:
                pruned += self._forget_before(now - self.operation_ttl)
            if self.replay_max_bytes is not None:
                pruned += self._cap_responses(self.replay_max_bytes)
            return pruned

    def _cap_responses(self, max_bytes: int) -> int:
        """Drop the answers that expire first while the bodies kept hold more than
        ``max_bytes``; how many went."""
        excess = sum(len(r.body) for r in self._responses.values()) - max_bytes
        if excess <= 0:
            return 0
        by_expiry = sorted(self._responses.items(), key=lambda item: item[1].expires_at)
        gone = first_to_drop(((op, len(r.body)) for op, r in by_expiry), excess)
        for operation_id in gone:
            del self._responses[operation_id]
        return len(gone)

    def _forget_before(self, before: float) -> int:
        """What sqlite_retention.py deletes from the file: operations claimed before
        ``before`` and no longer in flight, conversations unchanged since with no operation
        left, and older log entries. Records keep their claim order (a transition replaces a
        value in place), so the scan stops at the first young one."""
        old: list[OperationRecord] = []
        for record in self._records.values():
            if record.history[0].at >= before:
                break
            if record.state not in IN_FLIGHT:
                old.append(record)
        for record in old:
            operation_id = record.operation_id
            del self._records[operation_id]
            self._responses.pop(operation_id, None)
            slot = claim_slot(record.manifest)
            self._attempts[slot].remove(operation_id)
            if not self._attempts[slot]:
                del self._attempts[slot]
            key = record.manifest.conversation_id
            if key is not None:
                ops = self._by_conversation[key]
                ops.remove(operation_id)
                if not ops:
                    del self._by_conversation[key]
        idle = [
            key
            for key, conversation in self._conversations.items()
            if conversation.updated_at < before and key not in self._by_conversation
        ]
        for key in idle:
            del self._conversations[key]
        entries = 0
        for kind in list(self._logs):
            log = self._logs[kind]
            while log and log[0][0] < before:
                log.popleft()
                entries += 1
            if not log:
                del self._logs[kind]
        return len(old) + len(idle) + entries

    def _require_open(self) -> None:
        if not self._open:
            raise StoreUnavailable("the memory state store is not open")
