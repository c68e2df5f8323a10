-- Acquire or re-enter a lock (Redisson RLock layout).
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] lease in ms, ARGV[2] owner id "<client-uuid>:<n>"
-- Returns {1, token} for a fresh acquisition, {2, token} for a re-entry,
-- {0, pttl} when another owner holds the lock.
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[2])}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- a re-entry never shortens the lease an outer hold relies on
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  local token = tonumber(redis.call('get', KEYS[2]))
  if token == nil then
    token = redis.call('incr', KEYS[2])
  end
  return {2, token}
end
return {0, redis.call('pttl', KEYS[1])}
