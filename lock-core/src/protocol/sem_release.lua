-- Give back permits of the expirable kind by id (a permit guard's
-- release, a shutdown's).
-- KEYS[1] the counter, KEYS[2] the sorted set of permit ids by expiry,
-- KEYS[3] the channel
-- ARGV[1] the publish command, ARGV[2..] the permit ids (16 bytes each)
-- Expired ids come back first (as in every script of the kind), so an id
-- past its expiry is not released here: it was reclaimed. Each id is
-- removed once, so a retry after a lost reply finds it gone.
-- Returns {ids released, available after}.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, math.max(#ARGV, 16))
local back = #expired
for _, id in ipairs(expired) do
  redis.call('zrem', KEYS[2], id)
end
local released = 0
for i = 2, #ARGV do
  released = released + redis.call('zrem', KEYS[2], ARGV[i])
end
back = back + released
local v
if back > 0 then
  v = redis.call('incrby', KEYS[1], back)
  if v > 0 then
    redis.pcall(ARGV[1], KEYS[3], v)
  end
else
  v = tonumber(redis.call('get', KEYS[1]) or '0')
end
return {released, v}
