-- Acquire a side of a read-write lock as a new hold, or re-enter a hold
-- (Redisson's RReadWriteLock layout: one hash at the lock's name, field
-- 'mode' = 'read' | 'write'; a reader's field is its owner id, the
-- writer's '<owner>:write', each valued by its count; every read count n of
-- an owner has a key '<prefix>:<owner>:rwlock_timeout:<n>' whose TTL is
-- that acquisition's lease).
-- KEYS[1] lock hash, KEYS[2] last fencing token, KEYS[3] this request's latch,
-- KEYS[4] the clients waiting to write (sorted set, by when they began),
-- KEYS[5] the client whose turn it is, KEYS[6] the client whose writer waits
-- ARGV[1] lease in ms, ARGV[2] the hold's owner id, ARGV[3] mode,
-- ARGV[4] lifetime in ms of the token key and of the waiters' set,
-- ARGV[5] lifetime in ms of the latch, ARGV[6] the caller's client id,
-- ARGV[7] line: '0' a single attempt; '1' the client's waiting head (a
-- writer takes its client's place among the waiting clients when the lock
-- is held); '2' a waiting head whose client has that place already,
-- ARGV[8] the prefix of the readers' timeout keys ('{<lock>}', or the lock
-- key when it holds a '{'), ARGV[9] for a new read, the owner id of the
-- caller's own write hold ('' none): the read is a downgrade,
-- ARGV[10] how long in ms a waiting writer's mark lives
--
-- mode 'read' / 'write': a new hold under an owner id never used before
--   (its latch exists only when the attempt was cancelled: nothing is
--   applied). A read is granted when nobody writes and no writer of
--   lock-core waits (its mark) or has its turn, or as a downgrade of the
--   caller's own write hold. A write is granted when the hash does not
--   exist and the turn, if any, is the caller's. A copy of a request that
--   ran already is answered as acquired again, nothing added. Returns
--   {1, token} acquired, {0, ms} not now (ms: how long before asking again
--   at the latest, -1 no expiry), {-2, 0} cancelled.
-- mode 'read-re' / 'write-re': one more count of the hold ARGV[2] if it
--   still exists (never creates it); the latch records that the request
--   was applied, for rw_cancel.lua. Returns {2, 0} re-entered, {-1, 0}
--   the hold is gone, {-2, 0} cancelled.
--
-- A hash without 'mode' belongs to a plain lock of the same name: held.
-- Fencing tokens as in acquire.lua: max(last + 1, server time in µs).
local lease = tonumber(ARGV[1])
local mode = ARGV[3]
local function timeout_key(owner, n)
  return ARGV[8] .. ':' .. owner .. ':rwlock_timeout:' .. n
end
local function keep_at_least(ms)
  if redis.call('pttl', KEYS[1]) < ms then
    redis.call('pexpire', KEYS[1], ms)
  end
end
local function next_token()
  local now = redis.call('time')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4], 'get'))
  if last ~= nil and last >= token then
    token = last + 1
    redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4])
  end
  return token
end
local function add_read(owner)
  local n = redis.call('hincrby', KEYS[1], owner, 1)
  redis.call('set', timeout_key(owner, n), '1', 'px', lease)
  keep_at_least(lease)
end
if redis.call('exists', KEYS[3]) == 1 then
  return {-2, 0}
end
local write_field = ARGV[2] .. ':write'
if mode == 'read-re' or mode == 'write-re' then
  if mode == 'read-re' then
    if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
      return {-1, 0}
    end
    add_read(ARGV[2])
  else
    if redis.pcall('hexists', KEYS[1], write_field) ~= 1 then
      return {-1, 0}
    end
    redis.call('hincrby', KEYS[1], write_field, 1)
    keep_at_least(lease)
  end
  redis.call('set', KEYS[3], '1', 'px', ARGV[5])
  return {2, 0}
end
local held = redis.pcall('hget', KEYS[1], 'mode')
if type(held) == 'table' then
  -- a key of another type: held, as long as it lives
  return {0, redis.call('pttl', KEYS[1])}
end
local exists = held or redis.call('exists', KEYS[1]) == 1
-- A second copy of this very request (it ran twice): answered as the first
-- was, with a token above the last; nothing added.
local own_field = ARGV[2]
if mode == 'write' then
  own_field = write_field
end
if exists and redis.call('hexists', KEYS[1], own_field) == 1 then
  keep_at_least(lease)
  return {1, next_token()}
end
if mode == 'read' then
  local granted
  if held == 'write' then
    granted = ARGV[9] ~= '' and redis.call('hexists', KEYS[1], ARGV[9] .. ':write') == 1
  elseif held == 'read' or not exists then
    granted = redis.call('exists', KEYS[5], KEYS[6]) == 0
  end
  if not granted then
    if held == 'write' or (exists and not held) then
      return {0, redis.call('pttl', KEYS[1])}
    end
    -- a writer waits or has its turn: ask again when it lapses at the latest
    return {0, math.max(redis.call('pttl', KEYS[5]), redis.call('pttl', KEYS[6]), 1)}
  end
  local token = next_token()
  if not held then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  add_read(ARGV[2])
  return {1, token}
end
-- mode 'write'
local function wait_in_line()
  if ARGV[7] ~= '0' then
    local now = redis.call('time')
    redis.call('zadd', KEYS[4], 'NX', tonumber(now[1]) * 1000000 + tonumber(now[2]), ARGV[6])
    redis.call('pexpire', KEYS[4], ARGV[4])
    -- new readers of lock-core wait behind this writer while the mark lives
    redis.call('set', KEYS[6], ARGV[6], 'px', ARGV[10])
  end
end
-- how long a waiting writer may wait before it asks again: never past its
-- mark (it renews the mark by asking)
local function ask_again(ms)
  local mark = math.floor(tonumber(ARGV[10]) / 2)
  if ARGV[7] == '0' then
    return ms
  end
  if ms < 0 or ms > mark then
    return mark
  end
  return ms
end
if not exists then
  local turn = redis.call('get', KEYS[5])
  if turn and turn ~= ARGV[6] then
    wait_in_line()
    return {0, ask_again(redis.call('pttl', KEYS[5]))}
  end
  if turn then
    redis.call('del', KEYS[5])
  end
  if ARGV[7] == '2' then
    redis.call('zrem', KEYS[4], ARGV[6])
  end
  local token = next_token()
  redis.call('hset', KEYS[1], 'mode', 'write', write_field, 1)
  redis.call('pexpire', KEYS[1], lease)
  if redis.call('get', KEYS[6]) == ARGV[6] then
    redis.call('del', KEYS[6])
  end
  return {1, token}
end
wait_in_line()
return {0, ask_again(redis.call('pttl', KEYS[1]))}
