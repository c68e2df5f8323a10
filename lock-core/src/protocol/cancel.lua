-- Cancel an acquire or re-entry whose outcome is unknown (its reply was
-- lost or came too late): undo it if it was applied, and make sure a late
-- copy of the request is never applied (acquire.lua refuses a request whose
-- latch exists).
-- KEYS[1] lock hash, KEYS[2] unlock channel, KEYS[3] the request's latch
-- ARGV[1] the hold's owner id, ARGV[2] mode ('new' or 're', as in
-- acquire.lua), ARGV[3] unlock message, ARGV[4] latch lifetime in ms,
-- ARGV[5] the publish command ('publish' or 'spublish')
-- Returns 1 when an applied request was undone (a re-entry's count taken off,
-- the hold kept at count 1 at least), 0 otherwise.
local first = redis.call('get', KEYS[3])
redis.call('set', KEYS[3], 'x', 'px', ARGV[4])
local applied
if ARGV[2] == 'new' then
  -- a new owner id appears in the hash only through its own acquisition
  applied = (not first) and redis.call('hexists', KEYS[1], ARGV[1]) == 1
else
  applied = first == '1' and redis.call('hexists', KEYS[1], ARGV[1]) == 1
end
if not applied then
  return 0
end
if ARGV[2] == 'new' then
  redis.call('hdel', KEYS[1], ARGV[1])
elseif tonumber(redis.call('hget', KEYS[1], ARGV[1])) > 1 then
  -- One count off; never the hold itself: its other guards rely on it, and
  -- only its last release ends it. (Redis' count can be one short of the
  -- client's: a late copy of a release applies when a re-entry has made
  -- the count it names again.)
  redis.call('hincrby', KEYS[1], ARGV[1], -1)
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.pcall(ARGV[5], KEYS[2], ARGV[3]) -- a refusal changes nothing here
end
return 1
