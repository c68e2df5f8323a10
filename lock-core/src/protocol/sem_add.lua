-- Add permits to a semaphore's counter: Semaphore::add_permits (n may be
-- negative; never below zero), or a look at the expirable kind's counter
-- (n = 0: expired permits come back first).
-- KEYS[1] the counter, KEYS[2] the expirable kind's sorted set of permit
-- ids, KEYS[3] the channel, KEYS[4] the request's latch (applied once: a
-- retry after a lost reply finds it)
-- ARGV[1] n, ARGV[2] '1' the expirable kind (reclaim expired ids first),
-- ARGV[3] the request latch's life (ms), ARGV[4] the publish command
-- Returns {1, available after} applied, {0, available} applied before (a
-- retry), {-1, available} refused: the counter would go below zero.
local n = tonumber(ARGV[1])
local function available()
  return tonumber(redis.call('get', KEYS[1]) or '0')
end
if n ~= 0 and redis.call('exists', KEYS[4]) == 1 then
  return {0, available()}
end
if ARGV[2] == '1' then
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local expired = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 100)
  if #expired > 0 then
    for _, id in ipairs(expired) do
      redis.call('zrem', KEYS[2], id)
    end
    local v = redis.call('incrby', KEYS[1], #expired)
    if v > 0 then
      redis.pcall(ARGV[4], KEYS[3], v)
    end
  end
end
local v = available()
if not v then
  return redis.error_reply('ERR the semaphore counter ' .. KEYS[1] .. ' is not an integer')
end
if n == 0 then
  return {1, v}
end
if v + n < 0 then
  return {-1, v}
end
v = redis.call('incrby', KEYS[1], n)
redis.call('set', KEYS[4], '1', 'px', ARGV[3])
if n > 0 and v > 0 then
  redis.pcall(ARGV[4], KEYS[3], v)
end
return {1, v}
