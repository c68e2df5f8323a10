-- Release one hold of a lock, at most once per request id.
-- KEYS[1] lock hash, KEYS[2] unlock channel, KEYS[3] unlock latch for this request,
-- KEYS[4] the clients waiting (sorted set), KEYS[5] the client whose turn it is
-- ARGV[1] owner id, ARGV[2] lease in ms (at least this long while holds remain),
-- ARGV[3] unlock message, ARGV[4] latch lifetime in ms, ARGV[5] the releasing
-- client's id, ARGV[6] how long in ms the next client's turn is kept for it,
-- ARGV[7] '1' to release every count of the hold at once (client shutdown),
-- ARGV[8] '1' when this request was sent before (a retry): only then can its
-- latch exist, so a first send skips reading it
-- ARGV[9] the publish command: 'publish', or 'spublish' (sharded pub/sub)
-- When the lock is freed and other clients wait, the turn goes to the one
-- that has waited longest (not the releasing client): for ARGV[6] ms only it
-- may take the lock, and it leaves the waiting set (if it does not come,
-- it lost its place).
-- Returns 1 + n when the lock was freed and its unlock message reached n
-- subscribed clients (waiters), 0 when holds remain, nil when the owner did
-- not hold it. A retried request returns its first result; after the last
-- count, no latch is needed (nor written): the owner id belongs to one hold
-- only, so a retry finds it gone and answers nil, which the client reads as
-- "freed by the first attempt". When PUBLISH is refused (ACL), the lock is
-- freed all the same and the error text comes back as a string.
if ARGV[8] ~= '0' then
  local first = redis.call('get', KEYS[3])
  if first then
    return tonumber(first)
  end
end
local count = redis.call('hget', KEYS[1], ARGV[1])
if not count then
  return nil
end
if ARGV[7] ~= '1' and tonumber(count) > 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
  local result = 0
  -- the remaining holds keep at least their lease; never shorten it
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  redis.call('set', KEYS[3], result, 'px', ARGV[4])
  return result
end
redis.call('del', KEYS[1])
-- The lock is free now, whatever PUBLISH says: a refused PUBLISH (ACL) is
-- answered as its error text, not as a failed release.
local told = redis.pcall(ARGV[9], KEYS[2], ARGV[3])
if type(told) == 'table' and told.err then
  return told.err
end
if told > 0 then
  -- Someone listens: the turn goes to the client that waited longest (the
  -- script is atomic, so the woken clients see it when they ask).
  local waiting = redis.call('zrange', KEYS[4], 0, 1)
  local next_client = waiting[1]
  if next_client == ARGV[5] then
    next_client = waiting[2]
  end
  if next_client then
    redis.call('set', KEYS[5], next_client, 'px', ARGV[6])
    redis.call('zrem', KEYS[4], next_client)
  end
end
return 1 + told
