-- Release one count of a hold. The request names the count the client
-- believes the hold has, so that it is applied exactly once without any
-- latch: however late a copy of it arrives, it cannot end a hold whose
-- guards still exist.
-- KEYS[1] lock hash, KEYS[2] unlock channel, KEYS[3] the clients waiting
-- (sorted set), KEYS[4] the client whose turn it is
-- ARGV[1] owner id, ARGV[2] lease in ms (at least this long while holds
-- remain), ARGV[3] unlock message, ARGV[4] the releasing client's id,
-- ARGV[5] how long in ms the next client's turn is kept for it,
-- ARGV[6] the count the hold has before this release, as the client knows
-- it: '1' the last count (the hold ends, whatever count Redis has: a re-entry
-- applied twice must not keep the lock); n > 1 one of several counts,
-- taken off only when Redis has exactly n (another count: this request, or
-- a copy of it, was applied already, so nothing changes), never the end of
-- the hold,
-- ARGV[7] the publish command: 'publish', or 'spublish' (sharded pub/sub)
-- When the lock is freed and other clients wait, the turn goes to the one
-- that has waited longest (not the releasing client): for ARGV[5] ms only it
-- may take the lock, and it leaves the waiting set (if it does not come,
-- it lost its place).
-- Returns 1 + n when the lock was freed and its unlock message reached n
-- subscribed clients (waiters), 0 when holds remain, nil when the owner does
-- not hold it (the owner id belongs to one hold only: a retry of a last
-- release that was applied finds it gone, which the client reads as
-- "freed by the first attempt"). When PUBLISH is refused (ACL), the lock is
-- freed all the same and the error text comes back as a string.
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return nil
end
local expected = tonumber(ARGV[6])
if expected > 1 then
  if tonumber(count) == expected then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
  end
  -- the remaining holds keep at least their lease; never shorten it
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return 0
end
redis.call('del', KEYS[1])
-- The lock is free now, whatever PUBLISH says: a refused PUBLISH (ACL) is
-- answered as its error text, not as a failed release.
local told = redis.pcall(ARGV[7], KEYS[2], ARGV[3])
if type(told) == 'table' and told.err then
  return told.err
end
if told > 0 then
  -- Someone listens: the turn goes to the client that waited longest (the
  -- script is atomic, so the woken clients see it when they ask).
  local waiting = redis.call('zrange', KEYS[3], 0, 1)
  local next_client = waiting[1]
  if next_client == ARGV[4] then
    next_client = waiting[2]
  end
  if next_client then
    redis.call('set', KEYS[4], next_client, 'px', ARGV[5])
    redis.call('zrem', KEYS[3], next_client)
  end
end
return 1 + told
