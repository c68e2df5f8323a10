-- An acquisition stops waiting: it leaves the line, and when permits are
-- there, the others are told (one that did not fit behind it may now).
-- KEYS[1] the counter, KEYS[2] the line, KEYS[3] the line's alive times,
-- KEYS[4] the channel
-- ARGV[1] the acquisition's member of the line, ARGV[2] the publish command
-- Returns 1 when it was in the line, else 0.
local was = redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if was == 1 then
  local v = tonumber(redis.call('get', KEYS[1]) or '0')
  if v and v > 0 then
    redis.pcall(ARGV[2], KEYS[4], v)
  end
end
return was
