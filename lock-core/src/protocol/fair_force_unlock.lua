-- Delete a fair lock whoever holds it and tell the queue's head (Redisson's
-- RFairLock.forceUnlock; dead heads leave first, as in fair_acquire.lua).
-- KEYS[1] lock hash, KEYS[2] the lock's channel, KEYS[3] the queue,
-- KEYS[4] the deadlines, KEYS[5] the liveness marks of lock-core's waiters
-- (see fair_acquire.lua)
-- ARGV[1] unlock message, ARGV[2] the publish command, ARGV[3] the
-- caller's clock in ms since the epoch
-- Returns 1 when a lock was deleted, 0 when there was none; the error text
-- of a refused PUBLISH (the lock was deleted) as a string.
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
local now = tonumber(ARGV[3])
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
    local told = redis.pcall(ARGV[2], KEYS[2] .. ':' .. head, ARGV[1])
    if type(told) == 'table' and told.err then
      return told.err
    end
    return 1
  end
  redis.call('zrem', KEYS[4], head)
  redis.call('zrem', KEYS[5], head)
  redis.call('lpop', KEYS[3])
end
