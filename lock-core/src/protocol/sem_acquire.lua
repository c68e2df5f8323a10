-- Take n permits of a semaphore (Redisson's RSemaphore counter, or the
-- counter and permit ids of RPermitExpirableSemaphore).
-- KEYS[1] the counter (available permits), KEYS[2] the expirable kind's
-- sorted set of permit ids by expiry (ms since the epoch), KEYS[3] the
-- channel, KEYS[4] lock-core's line of waiting acquisitions (sorted set:
-- member '<n>:<waiter>', score the time it began to wait), KEYS[5] when
-- each of them stops counting as alive (same members), KEYS[6] the
-- request's latch (lock-core's own: set once the request is over —
-- refused, cancelled, or its permits given back — so that a late copy is
-- refused), KEYS[7] the plain kind's grants (hash: request id -> n; lock-core's
-- own: a give-back applies only by deleting its grant)
-- ARGV[1] n, ARGV[2] lease in ms (0: the plain kind, no ids), ARGV[3] the
-- acquisition's member of the line ('' when it never waits), ARGV[4] how
-- long it counts as alive in the line without asking again (ms), ARGV[5]
-- '1' to join the line when refused, ARGV[6] the latch's life (ms),
-- ARGV[7] the publish command, ARGV[8] the request id, ARGV[9..] the n
-- permit ids (expirable kind: 16 bytes each, as Redisson stores them)
-- Returns {1, available after} granted (also to a repeated copy of a
-- granted request, which changes nothing), {0, available, ms until the
-- nearest permit expires or -1} refused, {-2, 0} the request is over (a
-- late copy).
-- Turns: permits go to the line's acquisitions in their order; one that
-- does not fit blocks everyone behind it (a client asking for n is never
-- starved by clients asking for 1). Redisson's clients do not know the
-- line and take what is there.
if redis.call('exists', KEYS[6]) == 1 then
  return {-2, 0}
end
local function available()
  local v = redis.call('get', KEYS[1])
  if not v then
    return 0
  end
  local n = tonumber(v)
  if not n then
    return redis.error_reply('ERR the semaphore counter ' .. KEYS[1] .. ' is not an integer')
  end
  return n
end
local n = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
if lease > 0 then
  if redis.call('zscore', KEYS[2], ARGV[9]) then
    return {1, available()}
  end
elseif redis.call('hexists', KEYS[7], ARGV[8]) == 1 then
  return {1, available()}
end
local member = ARGV[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if lease > 0 then
  -- expired permits come back first (bounded: the rest next time)
  local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, math.max(n, 16))
  if #expired > 0 then
    for _, id in ipairs(expired) do
      redis.call('zrem', KEYS[2], id)
    end
    local v = redis.call('incrby', KEYS[1], #expired)
    if v > 0 then
      redis.pcall(ARGV[7], KEYS[3], v)
    end
  end
end
-- acquisitions that stopped asking leave the line
local dead = redis.call('zrangebyscore', KEYS[5], '-inf', now, 'limit', 0, 16)
for _, m in ipairs(dead) do
  redis.call('zrem', KEYS[4], m)
  redis.call('zrem', KEYS[5], m)
end
local avail = available()
if type(avail) == 'table' then
  return avail
end
local function fits()
  if avail < n then
    return false
  end
  local waiting = redis.call('zrange', KEYS[4], 0, 63)
  local ahead = 0
  for _, m in ipairs(waiting) do
    if m == member then
      return true
    end
    ahead = ahead + tonumber(string.match(m, '^(%d+):') or '0')
    if ahead + n > avail then
      return false
    end
  end
  return #waiting < 64
end
if fits() then
  redis.call('decrby', KEYS[1], n)
  if lease > 0 then
    local expiry = now + lease
    for i = 9, 8 + n do
      redis.call('zadd', KEYS[2], expiry, ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
      redis.call('pexpire', KEYS[2], ttl)
    end
  else
    redis.call('hset', KEYS[7], ARGV[8], n)
  end
  if member ~= '' then
    redis.call('zrem', KEYS[4], member)
    redis.call('zrem', KEYS[5], member)
  end
  return {1, avail - n}
end
-- this request is over: a late copy of it must not be granted
redis.call('set', KEYS[6], 'refused', 'px', ARGV[6])
if member ~= '' and ARGV[5] == '1' then
  local alive = tonumber(ARGV[4])
  redis.call('zadd', KEYS[4], 'nx', now, member)
  redis.call('zadd', KEYS[5], now + alive, member)
  redis.call('pexpire', KEYS[4], alive)
  redis.call('pexpire', KEYS[5], alive)
end
local wait = -1
if lease > 0 then
  local nearest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
  if nearest[2] then
    wait = math.max(tonumber(nearest[2]) - now, 0)
  end
end
return {0, avail, wait}
