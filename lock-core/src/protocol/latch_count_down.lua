-- Count a count-down latch down by one (Redisson's countDown), at most
-- once per request.
-- KEYS[1] the count, KEYS[2] the channel, KEYS[3] the request's latch
-- (lock-core's own: a retry after a lost reply finds it)
-- ARGV[1] the request latch's life (ms), ARGV[2] the publish command
-- Returns {1, count after} counted down, {0, count} applied before.
-- At zero or below the key goes, and exactly at zero the waiters are told
-- ('0', Redisson's zero-count message).
if not redis.call('set', KEYS[3], '1', 'nx', 'px', ARGV[1]) then
  return {0, tonumber(redis.call('get', KEYS[1]) or '0')}
end
local v = redis.call('decr', KEYS[1])
if v <= 0 then
  redis.call('del', KEYS[1])
end
if v == 0 then
  redis.pcall(ARGV[2], KEYS[2], '0')
end
return {1, math.max(v, 0)}
