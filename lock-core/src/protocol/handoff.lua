-- End a hold (its last count, as the client knows it) by giving the lock
-- straight to the next owner (a waiter of the same client) instead of
-- freeing it. At most once per request id.
-- KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3] latch of this request,
-- KEYS[4] the next owner's latch (exists when the hand-off was cancelled),
-- KEYS[5] the unlock channel
-- ARGV[1] owner id, ARGV[2] latch lifetime in ms, ARGV[3] next owner id (a
-- new hold's id), ARGV[4] next owner's lease in ms, ARGV[5] lifetime in ms
-- of the token key, ARGV[6] unlock message, ARGV[7] the publish command
-- ('publish' or 'spublish')
-- The hold ends whatever count Redis has (see release.lua).
-- Returns {3, token} when the lock went to the next owner (with a new
-- fencing token, drawn as in acquire.lua), {-1, 0} when the owner did not
-- hold it, {4, 0} when the lock was freed instead (the hand-off had been
-- cancelled). A retry returns the first result while the latch lives; after
-- that the owner id, which belongs to one hold only, is gone: a copy
-- however late changes nothing.
local first = redis.call('get', KEYS[3])
if first then
  local kind, value = string.match(first, '^(%-?%d+):(%d+)$')
  return {tonumber(kind), tonumber(value)}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return {-1, 0}
end
local kind = 0
local value = 0
if redis.call('exists', KEYS[4]) == 1 then
  -- The hand-off to this next owner was cancelled (the releaser did not
  -- learn its outcome, see cancel.lua): free the lock instead.
  redis.call('del', KEYS[1])
  redis.pcall(ARGV[7], KEYS[5], ARGV[6])
  kind = 4
else
  -- The token first: a failure there must not leave a half-made hold.
  local now = redis.call('time')
  value = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('set', KEYS[2], string.format('%.0f', value), 'px', ARGV[5], 'get'))
  if last ~= nil and last >= value then
    value = last + 1
    redis.call('set', KEYS[2], string.format('%.0f', value), 'px', ARGV[5])
  end
  redis.call('del', KEYS[1])
  redis.call('hincrby', KEYS[1], ARGV[3], 1)
  redis.call('pexpire', KEYS[1], ARGV[4])
  kind = 3
end
redis.call('set', KEYS[3], kind .. ':' .. string.format('%.0f', value), 'px', ARGV[2])
return {kind, value}
