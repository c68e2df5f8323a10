-- Confirm a fresh hold with a write of its own, so that a WAIT on the same
-- connection right after it counts the replicas that have everything up to
-- and including the acquisition (replication is one ordered stream).
-- KEYS[1] lock hash; ARGV[1] owner id
-- Returns 1 when the owner holds the lock (and writes an unchanged count:
-- HINCRBY by 0 is still a write that replicates), 0 when it does not.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 0)
  return 1
end
return 0
