-- Release one count of a hold of a fair lock (Redisson's RFairLock), with
-- release.lua's count rule (the request names the count the client knows,
-- so a late copy never ends a hold whose guards still exist). When the
-- lock is freed, the queue's first live waiter is told on its own channel
-- `<KEYS[2]>:<owner>` (dead heads leave first, as in fair_acquire.lua).
-- KEYS[1] lock hash, KEYS[2] the lock's channel, KEYS[3] the queue,
-- KEYS[4] the deadlines, KEYS[5] the liveness marks of lock-core's waiters
-- (see fair_acquire.lua)
-- ARGV[1] owner id, ARGV[2] lease in ms (at least this long while holds
-- remain), ARGV[3] unlock message, ARGV[4] the caller's clock in ms since
-- the epoch, ARGV[5] the count the hold has before this release ('1' the
-- last: the hold ends whatever count Redis has), ARGV[6] the publish
-- command ('publish' or 'spublish')
-- Returns 1 + n when the lock was freed and n clients heard the next
-- waiter's message (0 when nobody waits), 0 when holds remain, nil when
-- the owner does not hold it; the error text of a refused PUBLISH (the
-- lock is freed all the same) as a string.
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return nil
end
local expected = tonumber(ARGV[5])
if expected > 1 then
  if tonumber(count) == expected then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
  end
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return 0
end
redis.call('del', KEYS[1])
local now = tonumber(ARGV[4])
local clock = redis.call('time')
local server_now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
while true do
  local head = redis.call('lindex', KEYS[3], 0)
  if not head then
    return 1
  end
  local alive = tonumber(redis.call('zscore', KEYS[5], head))
  local deadline = tonumber(redis.call('zscore', KEYS[4], head))
  if (alive ~= nil and alive > server_now) or (alive == nil and deadline ~= nil and deadline > now) then
    local told = redis.pcall(ARGV[6], KEYS[2] .. ':' .. head, ARGV[3])
    if type(told) == 'table' and told.err then
      return told.err
    end
    return 1 + told
  end
  redis.call('zrem', KEYS[4], head)
  redis.call('zrem', KEYS[5], head)
  redis.call('lpop', KEYS[3])
end
