"""The Redis store's conversations: canonical turns, cancel generations, stored responses.

A mixin of ``RedisStore`` (redis.py), which supplies the client, the key helpers and the
operation record codec. Every write is one Lua script, a CAS on what Python read:

- ``open_conversation``: create the conversation (adopting the history) unless it exists;
- ``cancel_conversation``: bump the cancel generation if the conversation's version is still
  the one read, then CANCEL its cancellable operations one CAS each (``transition``). The
  generation moves first, so none of those attempts can commit a turn even before its own
  CANCEL lands;
- ``commit_turn``: move the operation (state and history length as read, as ``MOVE`` does),
  write the conversation if its version is still the one read, keep the response. Stale
  either way: read both again and retry.

Keys, under the store's prefix:

    conv:{sha256 of key}      hash: version, data (Conversation JSON)     operation_ttl
    convops:{sha256 of key}   list: the conversation's operation ids       operation_ttl
    response:{operation id}   string: StoredResponse JSON                  until it expires
    key:{scope}               string: KeyHold JSON (a client key)          until it expires
    responses, response_sizes, response_bytes: the replay index (redis_replay.py)
    unknown                   hash: operation id -> 1 for each UNKNOWN one (MOVE keeps it)
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from turngate.errors import IllegalTransition, StoreUnavailable
from turngate.graph.codec import canonical_json
from turngate.state.conversations import (
    CANCELLABLE,
    CANCELLED_DETAIL,
    Conversation,
    StoredResponse,
    TurnConflict,
    adopted,
    cancelled,
    commit_transition,
    with_turn,
)
from turngate.state.machine import Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.redis_records import as_text
from turngate.state.redis_replay import INDEX_RESPONSE, ReplayIndex
from turngate.state.store import PRUNE_BATCH, OperationRecord, moved_record, sent_first

# KEYS: conv. ARGV: data, ttl ms (0: none). The existing data, or the new one once written.
OPEN_CONVERSATION = """
local data = redis.call('HGET', KEYS[1], 'data')
if data then return data end
redis.call('HSET', KEYS[1], 'version', 1, 'data', ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return ARGV[1]
"""

# KEYS: conv. ARGV: expected version ('0': absent), data, ttl ms.
WRITE_CONVERSATION = """
local version = redis.call('HGET', KEYS[1], 'version') or '0'
if version ~= ARGV[1] then return 'stale' end
redis.call('HSET', KEYS[1], 'version', tonumber(version) + 1, 'data', ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 'written'
"""

# KEYS: op, slot, inflight, unknown, conv, response, then the replay index's sorted set,
# sizes and sum (redis_replay.py). ARGV: operation id, expected state, expected seq, state,
# seq, record, ttl ms, expected conversation version, conversation data ('' for none),
# response ('' for none), response ttl ms, response expiry ms.
COMMIT_TURN = (
    """
local current = redis.call('HMGET', KEYS[1], 'state', 'seq')
if not current[1] then return 'missing' end
if current[1] ~= ARGV[2] or current[2] ~= ARGV[3] then return 'stale' end
if ARGV[9] ~= '' then
  local version = redis.call('HGET', KEYS[5], 'version') or '0'
  if version ~= ARGV[8] then return 'stale' end
end
local live = redis.call('HGET', KEYS[2], 'live')
if live and live ~= ARGV[1] then return 'slot-taken' end
redis.call('HSET', KEYS[2], 'live', ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'seq', ARGV[5], 'record', ARGV[6])
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[5], 'version', tonumber(ARGV[8]) + 1, 'data', ARGV[9])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[5], ttl) end
end
if ARGV[10] ~= '' then
  redis.call('SET', KEYS[6], ARGV[10], 'PX', ARGV[11])
"""
    + INDEX_RESPONSE.format(z=7, s=8, t=9, op=1, data=10, score=12)
    + """
end
return 'moved'
"""
)


class RedisConversations:
    """Conversation methods of ``RedisStore``; the stubs below are RedisStore's own."""

    key_prefix: str
    operation_ttl: float | None
    replay_max_bytes: int | None
    _replay: ReplayIndex
    _open_conversation_script: AsyncScript
    _write_conversation_script: AsyncScript
    _commit_turn_script: AsyncScript

    def _register_conversation_scripts(self, client: Redis) -> None:
        self._open_conversation_script = client.register_script(OPEN_CONVERSATION)
        self._write_conversation_script = client.register_script(WRITE_CONVERSATION)
        self._commit_turn_script = client.register_script(COMMIT_TURN)
        self._replay.register(client)

    # --- the contract ---

    async def open_conversation(self, key: str, history: list[str], *, now: float) -> Conversation:
        self._require()
        found = await self.conversation(key)
        if found is not None:
            return found
        fresh = _conversation_data(adopted(key, history, now=now))
        with self._unavailable("conversation open"):
            data = await self._open_conversation_script(
                keys=[self._conversation_key(key)], args=[fresh, self._ttl_ms()]
            )
        return _decode_conversation(data, key)

    async def conversation(self, key: str) -> Conversation | None:
        _version, conversation = await self._read_conversation(key)
        return conversation

    async def cancel_conversation(self, key: str, *, now: float) -> Conversation:
        while True:
            version, conversation = await self._read_conversation(key)
            moved = cancelled(conversation, key, now=now)
            with self._unavailable("cancel"):
                reply = await self._write_conversation_script(
                    keys=[self._conversation_key(key)],
                    args=[version, _conversation_data(moved), self._ttl_ms()],
                )
            if reply == "written":
                break
        detail = CANCELLED_DETAIL.format(generation=moved.cancel_generation)
        for record in await self.conversation_operations(key, limit=10_000):
            if record.state not in CANCELLABLE:
                continue
            with contextlib.suppress(IllegalTransition, KeyError):  # it ended meanwhile
                await self.transition(
                    record.operation_id, Transition.CANCEL, now=now, detail=detail
                )
        return moved

    async def conversation_operations(self, key: str, *, limit: int) -> list[OperationRecord]:
        client = self._require()
        if limit <= 0:
            return []
        with self._unavailable("read"):
            ids = await client.lrange(self._conversation_ops_key(key), -limit, -1)
        found = [await self._load(client, as_text(op)) for op in ids]
        return [r for r in found if r is not None]

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
        client = self._require()
        while True:
            loaded = await self._load(client, operation_id)
            if loaded is None:
                raise KeyError(operation_id)
            # SEND, when it rides along, is in the same script: the CAS is on ``loaded``.
            record = sent_first(loaded, sent, now=now)
            moved = moved_record(record, commit_transition(record), now=now, handle=handle)
            key = record.manifest.conversation_id
            version, conversation = (0, None) if key is None else await self._read_conversation(key)
            try:
                turned = with_turn(conversation, record, digest, now=now, continues=continues)
            except TurnConflict:
                # Read apart, the two may straddle a racing commit of this same operation.
                if await self._load(client, operation_id) != loaded:
                    continue
                raise
            with self._unavailable("commit"):
                reply = await self._commit_turn_script(
                    keys=[
                        self._op_key(operation_id),
                        self._slot_key(record.manifest),
                        self._inflight_key(),
                        self._unknown_key(),
                        self._conversation_key(key or operation_id),
                        self._response_key(operation_id),
                        *self._replay.keys,
                    ],
                    args=[
                        operation_id,
                        str(loaded.state),
                        len(loaded.history),
                        str(moved.state),
                        len(moved.history),
                        self._encode_record(moved),
                        self._ttl_ms(),
                        version,
                        "" if turned is None else _conversation_data(turned),
                        *_response_args(response, now),
                        _expires_ms(response),
                    ],
                )
            if reply == "moved":
                return moved
            if reply == "stale":
                continue
            if reply == "missing":
                raise KeyError(operation_id)
            if reply == "slot-taken":
                raise IllegalTransition(
                    f"operation '{operation_id}' cannot commit: another attempt for its slot "
                    "is live"
                )
            raise StoreUnavailable(f"Redis: unexpected reply {reply!r} to a commit")

    async def save_response(
        self, operation_id: str, response: StoredResponse, *, now: float
    ) -> None:
        self._require()
        data, ttl = _response_args(response, now)
        with self._unavailable("response write"):
            await self._replay.keep(operation_id, data, ttl, _expires_ms(response))

    async def load_response(self, operation_id: str, *, now: float) -> StoredResponse | None:
        client = self._require()
        with self._unavailable("response read"):
            data = await client.get(self._response_key(operation_id))
        if data is None:
            return None
        try:
            response = StoredResponse.from_json(orjson.loads(data))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreUnavailable(f"the response of {operation_id} cannot be read") from exc
        return response if response.expires_at > now else None

    async def unknown_operations(self, *, limit: int) -> list[OperationRecord]:
        client = self._require()
        with self._unavailable("read"):
            ids = [as_text(op) for op in await client.hkeys(self._unknown_key())]
        found = []
        for operation_id in sorted(ids)[: max(0, limit)]:
            record = await self._load(client, operation_id)
            if record is None:  # expired: nothing left to settle
                with self._unavailable("read"):
                    await client.hdel(self._unknown_key(), operation_id)
                continue
            found.append(record)
        return found

    async def prune(self, *, now: float) -> int:
        """Answers kept for replay over ``replay_max_bytes`` (redis_replay.py); the rest,
        responses and client keys included, carry their own TTL."""
        client = self._require()
        with self._unavailable("prune"):
            return await self._replay.prune(
                client,
                now_ms=int(now * 1000),
                max_bytes=self.replay_max_bytes,
                batch=PRUNE_BATCH,
            )

    # --- helpers ---

    async def _read_conversation(self, key: str) -> tuple[int, Conversation | None]:
        client = self._require()
        with self._unavailable("conversation read"):
            version, data = await client.hmget(self._conversation_key(key), ["version", "data"])
        if data is None:
            return 0, None
        return int(version or 0), _decode_conversation(data, key)

    def _conversation_key(self, key: str) -> str:
        return f"{self.key_prefix}conv:{_hashed(key)}"

    def _conversation_ops_key(self, key: str) -> str:
        return f"{self.key_prefix}convops:{_hashed(key)}"

    def _response_key(self, operation_id: str) -> str:
        return f"{self.key_prefix}response:{operation_id}"

    def _client_key_key(self, scope: str) -> str:
        return f"{self.key_prefix}key:{scope}"

    # --- RedisStore's own (redis.py) ---

    def _require(self) -> Redis:
        raise NotImplementedError

    @contextlib.contextmanager
    def _unavailable(self, doing: str) -> Iterator[None]:
        raise NotImplementedError
        yield

    async def _load(self, client: Redis, operation_id: str) -> OperationRecord | None:
        raise NotImplementedError

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
        raise NotImplementedError

    def _ttl_ms(self) -> int:
        raise NotImplementedError

    def _encode_record(self, record: OperationRecord) -> str:
        raise NotImplementedError

    def _op_key(self, operation_id: str) -> str:
        raise NotImplementedError

    def _slot_key(self, manifest: DispatchManifest) -> str:
        raise NotImplementedError

    def _inflight_key(self) -> str:
        raise NotImplementedError

    def _unknown_key(self) -> str:
        raise NotImplementedError


def _hashed(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _conversation_data(conversation: Conversation) -> str:
    return canonical_json(conversation.to_json()).decode()


def _decode_conversation(data: Any, key: str) -> Conversation:
    try:
        return Conversation.from_json(orjson.loads(data))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreUnavailable(f"conversation {key!r} in Redis cannot be read: {exc}") from exc


def _expires_ms(response: StoredResponse | None) -> int:
    return 0 if response is None else int(response.expires_at * 1000)


def _response_args(response: StoredResponse | None, now: float) -> tuple[str, int]:
    if response is None:
        return "", 0
    ttl = max(1, int((response.expires_at - now) * 1000))
    return canonical_json(response.to_json()).decode(), ttl
