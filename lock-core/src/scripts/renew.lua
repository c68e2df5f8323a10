-- Extend the lease of a lock that the owner still holds.
-- KEYS[1] lock hash; ARGV[1] lease in ms, ARGV[2] owner id
-- Returns 1 when renewed, 0 when the owner no longer holds the lock.
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  -- extend only: a longer fixed lease of a re-entrant hold is kept
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return 1
end
return 0
