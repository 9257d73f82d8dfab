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
from turngate.state.machine import IN_FLIGHT, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.store import (
    BLOCKING,
    LOST_AT_START,
    OperationRecord,
    check_log_args,
    claim_conflict,
    claim_slot,
    claimed_record,
    moved_record,
)


class MemoryStore:
    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._open = False
        self._records: dict[str, OperationRecord] = {}
        # (conversation key, revision, cancel generation) -> operation ids, oldest first.
        self._attempts: dict[tuple[str, int, int], list[str]] = {}
        # kind -> (at, entry as JSON), newest last; kept as bytes, as the other stores do.
        self._logs: dict[str, deque[tuple[float, bytes]]] = {}

    async def open(self) -> None:
        self._open = True

    async def close(self) -> None:
        self._open = False

    async def ping(self) -> bool:
        return self._open

    async def claim(self, draft: DispatchManifest, *, now: float) -> OperationRecord:
        async with self._lock:
            self._require_open()
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
            return claimed

    async def transition(
        self,
        operation_id: str,
        transition: Transition,
        *,
        now: float,
        handle: str | None = None,
        detail: str | None = None,
    ) -> OperationRecord:
        async with self._lock:
            self._require_open()
            record = self._records.get(operation_id)
            if record is None:
                raise KeyError(operation_id)
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
        data = orjson.dumps(entry)
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

    def _require_open(self) -> None:
        if not self._open:
            raise StoreUnavailable("the memory state store is not open")
