"""The Lua scripts of the Redis store's counters and sessions (router/store/redis.py): each runs
atomically on the server. The call log's, samples' and response chains' scripts live with them
(router/store/calls.py, samples.py, responses.py)."""

# KEYS: marker, previous marker, c:all, c:buckets, then one c:<bucket> per bucket.
# ARGV: marker ttl, oldest bucket kept, bucket lifetime (s), drop previous marker (0/1),
#       then per bucket: start, field count, field, n, field, n, ...
APPLY_BATCH = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local oldest, retention = tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] == '1' then redis.call('DEL', KEYS[2]) end
local a, k = 5, 5
while a <= #ARGV do
  local start, nf = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local keep = start >= oldest
  for i = a + 2, a + 2 * nf, 2 do
    redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1])
    if keep then redis.call('HINCRBY', KEYS[k], ARGV[i], ARGV[i + 1]) end
  end
  if keep then
    redis.call('EXPIREAT', KEYS[k], start + retention)
    redis.call('ZADD', KEYS[4], start, ARGV[a])
  end
  a, k = a + 2 + 2 * nf, k + 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[2])
redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])
return 1
"""
# KEYS: s:<session>. Returns the tier and uses up one call, or nil.
STICKY_TAKE = """
local v = redis.call('HMGET', KEYS[1], 'tier', 'left')
if not v[1] then return false end
local left = tonumber(v[2]) or 0
if left <= 1 then redis.call('DEL', KEYS[1]) else redis.call('HINCRBY', KEYS[1], 'left', -1) end
if left < 1 then return false end
return v[1]
"""
# KEYS: r:<session>, rl:<session>. ARGV: max kept, ttl ms, then call_id, json, call_id, json, ...
ROUTED_PUT = """
local max = tonumber(ARGV[1])
for i = 3, #ARGV, 2 do
  if redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) == 0 then redis.call('LREM', KEYS[2], 0, ARGV[i]) end
  redis.call('RPUSH', KEYS[2], ARGV[i])
end
local extra = redis.call('LLEN', KEYS[2]) - max
if extra > 0 then
  local old = redis.call('LRANGE', KEYS[2], 0, extra - 1)
  redis.call('LTRIM', KEYS[2], extra, -1)
  for i = 1, #old, 1000 do redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old))) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""
