-- Acquire a lock as a new hold, or re-enter an existing hold (Redisson's
-- RLock layout: a hash whose field is the owner id and value the count).
-- KEYS[1] lock hash, KEYS[2] last fencing token, KEYS[3] this request's latch
-- ARGV[1] lease in ms, ARGV[2] the hold's owner id, ARGV[3] mode,
-- ARGV[4] lifetime in ms of the token key, ARGV[5] lifetime in ms of the latch
--
-- mode 'new': ARGV[2] is an owner id never used before. Its latch exists
--   only when the attempt was cancelled (see cancel.lua): then nothing is
--   applied. Returns {1, token} acquired, {0, pttl} held by another owner,
--   {-2, 0} cancelled.
-- mode 're': re-enter the hold ARGV[2] if it still exists (never creates
--   it). The latch records that this request was applied, so that cancel.lua
--   can undo it. Returns {2, 0} re-entered, {-1, 0} the hold is gone,
--   {-2, 0} cancelled.
--
-- Fencing tokens are a hybrid logical clock: max(last + 1, server time in
-- microseconds). The last token is kept for ARGV[4] ms only; after that
-- the clock alone keeps tokens growing, also across a restart that lost
-- every key.
local mode = ARGV[3]
if redis.call('exists', KEYS[3]) == 1 then
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
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local now = redis.call('time')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  -- one call in the usual case: store the clock, get the last token back
  local last = tonumber(redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4], 'get'))
  if last ~= nil and last >= token then
    token = last + 1
    redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4])
  end
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
