-- Acquire a lock as a new hold, or re-enter an existing hold (Redisson's
-- RLock layout: a hash whose field is the owner id and value the count).
-- KEYS[1] lock hash, KEYS[2] last fencing token, KEYS[3] this request's latch,
-- KEYS[4] the clients waiting (sorted set, by when they began to wait),
-- KEYS[5] the client whose turn it is
-- ARGV[1] lease in ms, ARGV[2] the hold's owner id, ARGV[3] mode,
-- ARGV[4] lifetime in ms of the token key and of the waiters' set,
-- ARGV[5] lifetime in ms of the latch, ARGV[6] the caller's client id,
-- ARGV[7] '0' a single attempt; '1' the client's waiting head, which takes
-- its client's place among the waiting clients when the lock is held; '2'
-- a waiting head whose client has that place already (it leaves the line
-- when it gets the lock)
--
-- mode 'new': ARGV[2] is an owner id never used before. Its latch exists
--   only when the attempt was cancelled (see cancel.lua): then nothing is
--   applied. A free lock whose turn belongs to another client (for a moment
--   after a release, see release.lua) is not taken. A lock that ARGV[2]
--   holds already was taken by an earlier copy of this same request (it ran
--   twice): answered as acquired again, nothing added. Returns {1, token}
--   acquired, {0, pttl} held by another owner (or reserved: pttl of the
--   turn), {-2, 0} cancelled.
-- mode 're': re-enter the hold ARGV[2] if it still exists (never creates
--   it). The latch records that this request was applied, so that cancel.lua
--   can undo it. Returns {2, 0} re-entered, {-1, 0} the hold is gone,
--   {-2, 0} cancelled.
--
-- Fencing tokens are a hybrid logical clock: max(last + 1, server time in
-- microseconds). The last token is kept for ARGV[4] ms only; after that
-- the clock alone keeps tokens growing, also across a restart that lost
-- every key.
local function wait_in_line()
  if ARGV[7] ~= '0' then
    local now = redis.call('time')
    redis.call('zadd', KEYS[4], 'NX', tonumber(now[1]) * 1000000 + tonumber(now[2]), ARGV[6])
    redis.call('pexpire', KEYS[4], ARGV[4])
  end
end
-- The next fencing token: the server clock, or one above the last.
local function next_token()
  local now = redis.call('time')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  -- one call in the usual case: store the clock, get the last token back
  local last = tonumber(redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4], 'get'))
  if last ~= nil and last >= token then
    token = last + 1
    redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4])
  end
  return token
end
local mode = ARGV[3]
-- One call in the usual case (a new hold of a free lock: no latch, no
-- lock, no turn): the token and the hold follow at once.
local fast = mode == 'new' and redis.call('exists', KEYS[3], KEYS[1], KEYS[5]) == 0
if not fast and redis.call('exists', KEYS[3]) == 1 then
  return {-2, 0}
end
if mode == 're' then
  if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return {-1, 0}
  end
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- a re-entry never shortens the lease the hold relies on
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  redis.call('set', KEYS[3], '1', 'px', ARGV[5])
  return {2, 0}
end
if fast or redis.call('exists', KEYS[1]) == 0 then
  local turn = nil
  if not fast then
    turn = redis.call('get', KEYS[5])
  end
  if turn then
    if turn ~= ARGV[6] then
      wait_in_line()
      return {0, redis.call('pttl', KEYS[5])}
    end
    redis.call('del', KEYS[5])
  end
  if ARGV[7] == '2' then
    redis.call('zrem', KEYS[4], ARGV[6])
  end
  -- The token first: a failure there (a key of another type) must not
  -- leave a hold behind.
  local token = next_token()
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token}
end
-- (pcall: a lock key of another type is "held, no expiry", as below)
if redis.pcall('hexists', KEYS[1], ARGV[2]) == 1 then
  -- A second copy of this very attempt (the command ran twice: a retry
  -- under the client, as a cluster client's after a time-out): the first
  -- copy made the hold, so answer as it did, with a token above the last
  -- (the count stays 1, the lease is renewed).
  local token = next_token()
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token}
end
wait_in_line()
return {0, redis.call('pttl', KEYS[1])}
