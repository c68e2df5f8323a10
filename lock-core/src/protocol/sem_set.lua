-- Set a semaphore's permits (or a count-down latch's count) when it has
-- none yet (Redisson's trySetPermits / trySetCount).
-- KEYS[1] the counter, KEYS[2] the channel
-- ARGV[1] the value, ARGV[2] the message published when set (the value
-- for a semaphore, '1' for a latch), ARGV[3] the publish command
-- Returns 1 when set, 0 when the counter existed.
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.pcall(ARGV[3], KEYS[2], ARGV[2])
return 1
