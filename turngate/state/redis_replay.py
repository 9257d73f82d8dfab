"""The Redis store's index of answers kept for replay, so their bytes stay under
``--replay-max-bytes`` across every replica sharing the store.

A streamed answer is kept as relayed (up to 195 KB among the recorded streams) for
``--replay-ttl``, and turngate asks for ``maxmemory-policy noeviction``: without a bound, a
day of them fills Redis, which then refuses every write (turngate answers 503). Each kept
answer is also entered, in the same script that keeps it, in:

    responses        sorted set: operation id, scored by its expiry (ms)
    response_sizes   hash: operation id -> bytes of its stored JSON
    response_bytes   string: the sum of those sizes

``prune`` (every replica's recovery round) first forgets the entries of answers that expired
(Redis dropped the answer itself; its bytes come off the sum), then, while the sum is over
the limit, drops the answers that expire first. Dropping is one script per step, idempotent,
so replicas pruning at once never count an answer twice.
"""

from __future__ import annotations

from collections.abc import Callable

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from turngate.state.redis_records import as_text
from turngate.state.store import first_to_drop

# Inside a script that has just SET the answer: KEYS[z], KEYS[s], KEYS[t] are the sorted set,
# the sizes and the sum; ARGV[op], ARGV[data], ARGV[score] the id, the JSON and the expiry.
INDEX_RESPONSE = """
local old = redis.call('HGET', KEYS[{s}], ARGV[{op}])
if old then redis.call('DECRBY', KEYS[{t}], old) end
redis.call('HSET', KEYS[{s}], ARGV[{op}], string.len(ARGV[{data}]))
redis.call('INCRBY', KEYS[{t}], string.len(ARGV[{data}]))
redis.call('ZADD', KEYS[{z}], ARGV[{score}], ARGV[{op}])
"""

# KEYS: response, sorted set, sizes, sum. ARGV: operation id, data, ttl ms, expiry ms.
KEEP_RESPONSE = "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n" + INDEX_RESPONSE.format(
    z=2, s=3, t=4, op=1, data=2, score=4
)

# KEYS: sorted set, sizes, sum, then each operation's response key. ARGV: the operation ids.
# Returns how many answers were still there to delete.
DROP_RESPONSES = """
local deleted = 0
for i, op in ipairs(ARGV) do
  local size = redis.call('HGET', KEYS[2], op)
  if size then redis.call('DECRBY', KEYS[3], size) end
  redis.call('HDEL', KEYS[2], op)
  redis.call('ZREM', KEYS[1], op)
  deleted = deleted + redis.call('DEL', KEYS[3 + i])
end
return deleted
"""


class ReplayIndex:
    """The index's keys and its two steps, for one store's client and key prefix."""

    def __init__(self, prefix: str, response_key: Callable[[str], str]) -> None:
        self.keys = [f"{prefix}responses", f"{prefix}response_sizes", f"{prefix}response_bytes"]
        self._response_key = response_key
        self._keep: AsyncScript | None = None
        self._drop: AsyncScript | None = None

    def register(self, client: Redis) -> None:
        self._keep = client.register_script(KEEP_RESPONSE)
        self._drop = client.register_script(DROP_RESPONSES)

    async def keep(self, operation_id: str, data: str, ttl_ms: int, expires_ms: int) -> None:
        assert self._keep is not None, "register first"
        key = self._response_key(operation_id)
        await self._keep(keys=[key, *self.keys], args=[operation_id, data, ttl_ms, expires_ms])

    async def prune(self, client: Redis, *, now_ms: int, max_bytes: int | None, batch: int) -> int:
        """Forget what expired by ``now_ms``, then drop the answers that expire first while
        the sum is over ``max_bytes``; how many answers this deleted."""
        deleted = 0
        while expired := [
            as_text(op)
            for op in await client.zrangebyscore(self.keys[0], "-inf", now_ms, start=0, num=batch)
        ]:
            deleted += await self._drop_all(expired)
        if max_bytes is None:
            return deleted
        while (excess := int(await client.get(self.keys[2]) or 0) - max_bytes) > 0:
            oldest = [as_text(op) for op in await client.zrange(self.keys[0], 0, batch - 1)]
            if not oldest:
                break
            sizes = [int(size or 0) for size in await client.hmget(self.keys[1], oldest)]
            deleted += await self._drop_all(first_to_drop(zip(oldest, sizes, strict=True), excess))
        return deleted

    async def _drop_all(self, operation_ids: list[str]) -> int:
        assert self._drop is not None, "register first"
        keys = [*self.keys, *(self._response_key(op) for op in operation_ids)]
        return int(await self._drop(keys=keys, args=operation_ids))
