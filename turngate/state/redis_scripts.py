"""The Lua scripts of the Redis store's operations (redis.py): each runs atomically for every
client of every process. Keys and arguments are listed above each script."""

# KEYS: op, slot, inflight, abandoned, client key, conversation's operations. ARGV: operation
# id, expected attempts, state, seq, owner, record, ttl ms (0: none), client key hold ('' for
# none), its ttl ms, the holder it may replace ('' for none), now, in a conversation (1/0).
CLAIM = """
if ARGV[8] ~= '' then
  local held = redis.call('GET', KEYS[5])
  if held then
    local hold = cjson.decode(held)
    if hold['expiresAt'] > tonumber(ARGV[11]) then
      if hold['bodyDigest'] ~= cjson.decode(ARGV[8])['bodyDigest'] then
        return {'key-reused', hold['operationId']}
      end
      if hold['operationId'] ~= ARGV[10] then return {'key-held', hold['operationId']} end
    end
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists'} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {'abandoned'} end
local live = redis.call('HGET', KEYS[2], 'live')
if live then return {'live', live} end
local attempts = redis.call('HGET', KEYS[2], 'attempts') or '0'
if attempts ~= ARGV[2] then return {'stale', attempts} end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'seq', ARGV[4], 'owner', ARGV[5],
           'record', ARGV[6])
redis.call('HSET', KEYS[2], 'attempts', tonumber(attempts) + 1, 'live', ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
if ARGV[8] ~= '' then redis.call('SET', KEYS[5], ARGV[8], 'PX', ARGV[9]) end
if ARGV[12] == '1' then
  redis.call('RPUSH', KEYS[6], ARGV[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[6], ttl) end
end
return {'won'}
"""

# KEYS: op, slot, inflight, unknown. ARGV: operation id, expected state, expected seq, state,
# seq, record, blocks (1/0), in flight (1/0), ttl ms (0: none), unknown (1/0).
MOVE = """
local current = redis.call('HMGET', KEYS[1], 'state', 'seq', 'owner')
if not current[1] then return 'missing' end
if current[1] ~= ARGV[2] or current[2] ~= ARGV[3] then return 'stale' end
local live = redis.call('HGET', KEYS[2], 'live')
if ARGV[7] == '1' then
  if live and live ~= ARGV[1] then return 'slot-taken' end
  redis.call('HSET', KEYS[2], 'live', ARGV[1])
elseif live == ARGV[1] then
  redis.call('HDEL', KEYS[2], 'live')
end
if ARGV[8] == '1' then
  redis.call('HSET', KEYS[3], ARGV[1], current[3])
else
  redis.call('HDEL', KEYS[3], ARGV[1])
end
if ARGV[10] == '1' then
  redis.call('HSET', KEYS[4], ARGV[1], '1')
else
  redis.call('HDEL', KEYS[4], ARGV[1])
end
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'seq', ARGV[5], 'record', ARGV[6])
local ttl = tonumber(ARGV[9])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 'moved'
"""

# KEYS: op, abandoned. ARGV: ttl ms. A claim that has not landed yet never will.
ABANDON = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 'exists' end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 'barred'
"""
