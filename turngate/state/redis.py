"""The shared state store: Redis, for replicas that share conversations (``--state redis://…``).

Same contract and CAS semantics as SQLite (store.py). Every write is one Lua script, and
Redis runs a script atomically for every client of every process:

- ``claim``: one script checks that no record has the operation id, that the slot has no
  live (blocking) attempt and that its attempt counter is still the one the caller built
  its record for; only then does it store the record, bump the counter and mark the attempt
  live. A changed counter means another attempt came and went meanwhile: build again, retry.
- ``transition``: read the record, apply the pure ``moved_record``, and write the result only
  if the state and the history length are still the ones read (a CAS). Otherwise read again:
  the machine then refuses the move from the new state, or allows it.

Keys, all under ``key_prefix`` ("turngate:"):

    op:{operation id}    hash: state, seq (history length), owner, record (canonical JSON)
    slot:{sha256 of [conversation key, revision, cancel generation]}
                         hash: attempts (highest so far), live (the attempt that blocks a claim)
    inflight             hash: operation id -> owner, for each DISPATCHING/SENT/STREAMING one
    lease:{owner}        the owner's heartbeat, expires ``lease_ttl`` after the last beat
    abandoned:{id}       a claim whose caller is gone: a late arrival of it must lose
    log:{kind}           list: a capped log, newest first (LPUSH + LTRIM), {"at", "entry"}

Replicas and ``recover``: each open store is an *owner*, a random id per ``open`` (or a
stable ``owner`` you configure), and renews its lease every ``lease_ttl / 3``. A claim
records its owner. ``recover`` moves to UNKNOWN the in-flight operations whose owner is
this store or whose owner's lease has expired (a crashed or partitioned replica), and leaves
alone those of owners whose lease is alive: another live replica is streaming them. If a
replica stalls past its lease it may be taken over while it still streams; its next
transition then finds UNKNOWN and the machine refuses it, so no second canonical turn can
come of it, only a failed stream. With a random owner, a process that restarts within
``lease_ttl`` of a crash finds its previous operations still leased: they keep blocking
their slots (a retry gets 409, never a second generation) until ``take_over_expired``
(safe to call periodically: it never touches this store's own) runs after the lease ran
out. A stable ``owner`` (say the pod name) takes them over at once, but two live stores
must never share one. ``close`` deletes the lease, handing over at once.

Expiry: records and slots expire ``operation_ttl`` (7 days) after their last write, the
slot never before its records. That is how long a revision keeps its one canonical turn
and an UNKNOWN attempt keeps blocking its slot, so it must exceed every provider's
deadline for a request and the time a client may still retry a revision. ``None`` keeps
them forever, as SQLite does. No replay data (stored responses) exists in the contract yet.
A capped log expires ``operation_ttl`` after its newest entry.

Failing closed: no retries (a retried script may run twice), short timeouts, and a pool
of ``max_connections`` that a burst waits on rather than fails; every Redis error becomes
``StoreUnavailable`` (503), chained. What Redis acknowledged survives a
Redis restart only with ``appendonly yes`` (and a host crash only with ``appendfsync
always``), and survives memory pressure only with ``maxmemory-policy noeviction``; ``open``
logs a warning when the server says otherwise. See docs/operations-redis.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from turngate.errors import IllegalTransition, StateConflict, StoreUnavailable
from turngate.graph.codec import canonical_json
from turngate.state.conversations import ClientKey, KeyHold, key_reused
from turngate.state.machine import IN_FLIGHT, DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.redis_records import (
    as_text,
    decode_record,
    encode_record,
    key_args,
    new_owner,
    pool_options,
    redacted,
    warn_unless_durable,
)
from turngate.state.redis_replay import ReplayIndex
from turngate.state.redis_scripts import ABANDON, CLAIM, MOVE
from turngate.state.redis_turns import RedisConversations
from turngate.state.store import (
    BLOCKING,
    DEFAULT_REPLAY_MAX_BYTES,
    LOST_AT_START,
    OperationRecord,
    check_client_key,
    check_log_args,
    claim_conflict,
    claim_slot,
    claimed_record,
    moved_record,
    sent_first,
)

log = logging.getLogger("turngate.state")

DAY = 24 * 3600.0
LEASE_RAN_OUT = "in flight when its owner's lease ran out: that replica stopped or lost Redis"
ABANDONED_CLAIM = "claim abandoned: its caller gave up (cancelled, or no answer) before sending"
# How long a late copy of an abandoned claim is refused; a script the client gave up on
# reaches the server within a network round trip, this is a wide margin.
ABANDONED_TTL = 3600.0
# turngate's own options in a ``--state`` URL (``from_url``).
_URL_OPTIONS = frozenset({"owner", "lease_ttl", "key_prefix"})


class RedisStore(RedisConversations):
    # Registered on the client at ``open`` (EVALSHA, loading the script again on NOSCRIPT).
    _claim_script: AsyncScript
    _move_script: AsyncScript
    _bar_script: AsyncScript

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "turngate:",
        operation_ttl: float | None = 7 * DAY,
        replay_max_bytes: int | None = DEFAULT_REPLAY_MAX_BYTES,
        lease_ttl: float = 15.0,
        owner: str | None = None,
        connect_timeout: float = 0.5,
        command_timeout: float = 2.0,
        max_connections: int = 64,
    ) -> None:
        if lease_ttl <= 0 or (operation_ttl is not None and operation_ttl < lease_ttl):
            raise ValueError("lease_ttl must be positive and operation_ttl no shorter")
        self.url = url
        self.where = redacted(url)
        self.key_prefix = key_prefix
        self.operation_ttl = operation_ttl
        # Bytes of answers kept for replay across every replica (None: no limit).
        self.replay_max_bytes = replay_max_bytes
        self._replay = ReplayIndex(key_prefix, self._response_key)
        self.lease_ttl = lease_ttl
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.max_connections = max_connections
        self._configured_owner = owner
        self.owner = owner or ""
        self._client: Redis | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        # Claims whose caller is gone (operation id -> its ``now``), to fail or bar.
        self._abandoned: dict[str, float] = {}
        self._settling: asyncio.Task[None] | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        operation_ttl: float | None = 7 * DAY,
        replay_max_bytes: int | None = DEFAULT_REPLAY_MAX_BYTES,
    ) -> RedisStore:
        """A store for ``--state redis://…``. turngate's own options ride in the query and
        are taken out before redis-py sees the URL: ``owner`` (a stable owner id, e.g. the
        pod name), ``lease_ttl`` (seconds), ``key_prefix``."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _URL_OPTIONS}
        rest = urlencode([(k, v) for k, v in query if k not in _URL_OPTIONS])
        options: dict[str, Any] = {
            "operation_ttl": operation_ttl,
            "replay_max_bytes": replay_max_bytes,
        }
        if "owner" in ours:
            options["owner"] = ours["owner"]
        if "key_prefix" in ours:
            options["key_prefix"] = ours["key_prefix"]
        if "lease_ttl" in ours:
            try:
                options["lease_ttl"] = float(ours["lease_ttl"])
            except ValueError:
                raise ValueError(f"lease_ttl={ours['lease_ttl']!r} is not a number") from None
        return cls(parts._replace(query=rest).geturl(), **options)

    # --- lifecycle ---

    async def open(self) -> None:
        if self._client is not None:
            return
        # Blocking: a burst of calls beyond ``max_connections`` waits for a free connection
        # (up to ``command_timeout``) instead of failing at once with "Too many connections".
        pool = BlockingConnectionPool.from_url(
            self.url,
            max_connections=self.max_connections,
            timeout=self.command_timeout,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),
            socket_connect_timeout=self.connect_timeout,
            socket_timeout=self.command_timeout,
            **pool_options(),
        )
        client = Redis.from_pool(pool)
        owner = self._configured_owner or new_owner()
        try:
            with self._unavailable("open"):
                await self._renew_lease(client, owner)
                await warn_unless_durable(client, self.where)
        except BaseException:
            await client.aclose()
            raise
        self._client, self.owner = client, owner
        self._claim_script = client.register_script(CLAIM)
        self._move_script = client.register_script(MOVE)
        self._bar_script = client.register_script(ABANDON)
        self._register_conversation_scripts(client)
        self._heartbeat = asyncio.create_task(self._beat(), name=f"turngate-lease-{owner}")

    async def close(self) -> None:
        client = self._client
        if client is None:
            return
        heartbeat, self._heartbeat = self._heartbeat, None
        settling, self._settling = self._settling, None
        for task in (heartbeat, settling):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            await self._settle_abandoned(client)
            await client.delete(self._lease_key(self.owner))
        except (RedisError, OSError, StoreUnavailable):
            pass  # unreachable: the lease runs out by itself, and recover() takes over
        finally:
            self._client = None
            await client.aclose()

    async def ping(self) -> bool:
        client = self._client
        if client is None:
            return False
        try:
            # A write, so a read-only replica or a full server answers False.
            with self._unavailable("ping"):
                await self._renew_lease(client, self.owner)
        except StoreUnavailable:
            return False
        return True

    # --- the contract ---

    async def claim(
        self, draft: DispatchManifest, *, now: float, client_key: ClientKey | None = None
    ) -> OperationRecord:
        client = self._require()
        try:
            return await self._claim_once(client, draft, now, client_key)
        except (asyncio.CancelledError, StoreUnavailable):
            # The script may have run with nobody left to send the bytes: fail it, or bar it
            # if it has not landed yet, so that it does not block the slot.
            self._abandon(draft.operation_id, now)
            raise

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
        client = self._require()
        while True:
            record = await self._load(client, operation_id)
            if record is None:
                raise KeyError(operation_id)
            moved = moved_record(
                sent_first(record, sent, now=now),
                transition,
                now=now,
                handle=handle,
                detail=detail,
            )
            with self._unavailable("transition"):
                reply = await self._move_script(
                    keys=[
                        self._op_key(operation_id),
                        self._slot_key(record.manifest),
                        self._inflight_key(),
                        self._unknown_key(),
                    ],
                    args=[
                        operation_id,
                        str(record.state),
                        len(record.history),
                        str(moved.state),
                        len(moved.history),
                        encode_record(moved),
                        int(moved.state in BLOCKING),
                        int(moved.state in IN_FLIGHT),
                        self._ttl_ms(),
                        int(moved.state is DispatchState.UNKNOWN),
                    ],
                )
            if reply == "moved":
                return moved
            if reply == "stale":
                continue  # another writer moved it: read again
            if reply == "missing":
                raise KeyError(operation_id)
            if reply == "slot-taken":
                raise IllegalTransition(
                    f"operation '{operation_id}' cannot become {moved.state}: another "
                    "attempt for its slot is live"
                )
            raise StoreUnavailable(f"Redis at {self.where}: unexpected reply {reply!r}")

    async def get(self, operation_id: str) -> OperationRecord | None:
        return await self._load(self._require(), operation_id)

    async def live_attempt(
        self, key: str, revision: int, cancel_generation: int
    ) -> OperationRecord | None:
        client = self._require()
        with self._unavailable("read"):
            live = await client.hget(self._slot_key_of((key, revision, cancel_generation)), "live")
        if live is None:
            return None
        record = await self._load(client, as_text(live))
        return record if record is not None and record.state in BLOCKING else None

    async def recover(self, *, now: float) -> list[OperationRecord]:
        """At start: in-flight operations of this owner or of expired owners → UNKNOWN.

        This owner's own are a previous process's under the same ``owner`` (or calls made
        before ``recover``); those of another owner whose lease is alive are left alone.
        """
        return await self._take_over(now, own_too=True)

    async def take_over_expired(self, *, now: float) -> list[OperationRecord]:
        """Any time (every ``lease_ttl``, say): in-flight operations of expired owners → UNKNOWN.

        Never touches this store's own operations, so it is safe while they stream.
        """
        return await self._take_over(now, own_too=False)

    async def _take_over(self, now: float, *, own_too: bool) -> list[OperationRecord]:
        client = self._require()
        with self._unavailable("recover"):
            listed = await client.hgetall(self._inflight_key())
            owners = {as_text(op): as_text(owner) for op, owner in listed.items()}
            others = sorted(set(owners.values()) - {self.owner})
            alive = [await client.exists(self._lease_key(o)) for o in others]
        gone = {o for o, lease in zip(others, alive, strict=True) if not lease}
        moved = []
        for operation_id, owner in sorted(owners.items()):
            if owner == self.owner and own_too:
                detail = LOST_AT_START
            elif owner in gone:
                detail = f"{LEASE_RAN_OUT} (owner {owner})"
            else:
                continue
            try:
                lost = await self.transition(operation_id, Transition.LOSE, now=now, detail=detail)
            except KeyError:  # its record expired: nothing left to take over
                with self._unavailable("recover"):
                    await client.hdel(self._inflight_key(), operation_id)
                continue
            except IllegalTransition:
                continue  # it left flight since the listing
            moved.append(lost)
        return moved

    # --- capped logs ---

    async def append_log(self, kind: str, entry: dict[str, Any], *, now: float, keep: int) -> None:
        check_log_args(kind, keep=keep)
        client, key = self._require(), self._log_key(kind)
        data = orjson.dumps({"at": now, "entry": entry})
        with self._unavailable("log append"):
            async with client.pipeline(transaction=True) as pipe:
                pipe.lpush(key, data)
                pipe.ltrim(key, 0, keep - 1)
                if self.operation_ttl is not None:
                    pipe.pexpire(key, self._ttl_ms())
                await pipe.execute()

    async def read_log(self, kind: str, *, limit: int) -> list[dict[str, Any]]:
        check_log_args(kind, limit=limit)
        if limit == 0:
            return []
        client = self._require()
        with self._unavailable("log read"):
            items = await client.lrange(self._log_key(kind), 0, limit - 1)
        try:
            return [orjson.loads(item)["entry"] for item in items]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise StoreUnavailable(f"a {kind!r} log entry in Redis cannot be read") from exc

    # --- the claim ---

    async def _claim_once(
        self, client: Redis, draft: DispatchManifest, now: float, client_key: ClientKey | None
    ) -> OperationRecord:
        conversation = draft.conversation_id
        keys = [
            self._op_key(draft.operation_id),
            self._slot_key(draft),
            self._inflight_key(),
            self._abandoned_key(draft.operation_id),
            self._client_key_key(client_key.scope if client_key else ""),
            self._conversation_ops_key(conversation or draft.operation_id),
        ]
        attempts, missing_live, replaceable = 0, None, ""
        while True:
            claimed = claimed_record(draft, attempts + 1, now=now)
            with self._unavailable("claim"):
                reply = await self._claim_script(
                    keys=keys,
                    args=[
                        draft.operation_id,
                        attempts,
                        str(claimed.state),
                        len(claimed.history),
                        self.owner,
                        encode_record(claimed),
                        self._ttl_ms(),
                        *key_args(client_key, claimed.operation_id, now),
                        replaceable,
                        now,
                        int(conversation is not None),
                    ],
                )
            match reply:
                case ["won"]:
                    return claimed
                case ["key-reused", holder]:
                    hold = KeyHold(holder, "", 0.0)
                    assert client_key is not None
                    raise key_reused(client_key, hold)
                case ["key-held", holder]:
                    assert client_key is not None
                    found = await self._load(client, holder)
                    check_client_key(
                        client_key,
                        KeyHold(holder, client_key.body_digest, client_key.expires_at),
                        found,
                        now=now,
                    )
                    replaceable = holder  # its attempt ended without a turn: take the key
                case ["stale", counted]:
                    attempts = int(counted)
                case ["exists"]:
                    existing = await self._load(client, draft.operation_id)
                    if existing is not None:
                        raise claim_conflict(draft, existing)
                case ["live", live_id]:
                    existing = await self._load(client, live_id)
                    if existing is not None and existing.state in BLOCKING:
                        raise claim_conflict(draft, existing)
                    if existing is None and live_id == missing_live:
                        raise StoreUnavailable(
                            f"Redis at {self.where}: the slot of conversation "
                            f"'{draft.conversation_key}' names live attempt '{live_id}', "
                            "whose record is gone (deleted by hand?)"
                        )
                    missing_live = live_id if existing is None else None
                case ["abandoned"]:
                    raise StateConflict(
                        f"operation '{draft.operation_id}' was abandoned by an earlier claim",
                        rule="dispatch_conflict",
                    )
                case _:
                    raise StoreUnavailable(f"Redis at {self.where}: unexpected reply {reply!r}")

    def _abandon(self, operation_id: str, now: float) -> None:
        self._abandoned[operation_id] = now
        client = self._client
        if client is not None and (self._settling is None or self._settling.done()):
            self._settling = asyncio.create_task(self._try_settle(client))

    async def _try_settle(self, client: Redis) -> None:
        with contextlib.suppress(StoreUnavailable):  # kept: the next heartbeat tries again
            while self._abandoned:  # including claims abandoned while this one runs
                await self._settle_abandoned(client)

    async def _settle_abandoned(self, client: Redis) -> None:
        for operation_id, at in list(self._abandoned.items()):
            with self._unavailable("settling an abandoned claim"):
                barred = await self._bar_script(
                    keys=[self._op_key(operation_id), self._abandoned_key(operation_id)],
                    args=[int(ABANDONED_TTL * 1000)],
                )
            if barred == "exists":
                with contextlib.suppress(IllegalTransition, KeyError):  # moved on meanwhile
                    await self.transition(
                        operation_id, Transition.FAIL, now=at, detail=ABANDONED_CLAIM
                    )
            self._abandoned.pop(operation_id, None)

    # --- the lease ---

    async def _beat(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            client = self._client
            if client is None:
                return
            try:
                with self._unavailable("lease renewal"):
                    await self._renew_lease(client, self.owner)
                await self._settle_abandoned(client)
            except StoreUnavailable as exc:
                if not failing:
                    log.warning("state store unreachable: %s", exc)
                failing = True
            except Exception:
                # A bug must not stop the heartbeat: the lease would lapse while we stream.
                log.exception("state store heartbeat: unexpected error")
            else:
                if failing:
                    log.warning("state store reachable again at %s", self.where)
                failing = False

    async def _renew_lease(self, client: Redis, owner: str) -> None:
        holder = orjson.dumps({"host": socket.gethostname(), "pid": os.getpid()}).decode()
        await client.set(self._lease_key(owner), holder, px=int(self.lease_ttl * 1000))

    # --- keys, records, errors ---

    def _require(self) -> Redis:
        if self._client is None:
            raise StoreUnavailable(f"the Redis state store at {self.where} is not open")
        return self._client

    @contextlib.contextmanager
    def _unavailable(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(
                f"Redis state store at {self.where}: {doing} failed: {type(exc).__name__}: {exc}"
            ) from exc

    async def _load(self, client: Redis, operation_id: str) -> OperationRecord | None:
        with self._unavailable("read"):
            text = await client.hget(self._op_key(operation_id), "record")
        return None if text is None else decode_record(as_text(text), operation_id)

    def _ttl_ms(self) -> int:
        return 0 if self.operation_ttl is None else int(self.operation_ttl * 1000)

    def _encode_record(self, record: OperationRecord) -> str:
        return encode_record(record)

    def _op_key(self, operation_id: str) -> str:
        return f"{self.key_prefix}op:{operation_id}"

    def _slot_key(self, manifest: DispatchManifest) -> str:
        return self._slot_key_of(claim_slot(manifest))

    def _slot_key_of(self, slot: tuple[str, int, int]) -> str:
        digest = hashlib.sha256(canonical_json(list(slot))).hexdigest()
        return f"{self.key_prefix}slot:{digest}"

    def _inflight_key(self) -> str:
        return f"{self.key_prefix}inflight"

    def _unknown_key(self) -> str:
        return f"{self.key_prefix}unknown"

    def _lease_key(self, owner: str) -> str:
        return f"{self.key_prefix}lease:{owner}"

    def _abandoned_key(self, operation_id: str) -> str:
        return f"{self.key_prefix}abandoned:{operation_id}"

    def _log_key(self, kind: str) -> str:
        return f"{self.key_prefix}log:{kind}"
