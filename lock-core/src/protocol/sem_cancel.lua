-- Undo a semaphore acquisition whose reply was lost (or came too late),
-- and make sure a late copy of it is never applied.
-- KEYS[1] the counter, KEYS[2] the expirable kind's sorted set of permit
-- ids, KEYS[3] the channel, KEYS[4] the line, KEYS[5] the line's alive
-- times, KEYS[6] the request's latch
-- ARGV[1] n, ARGV[2] '1' the expirable kind, ARGV[3] the acquisition's
-- member of the line ('' none), ARGV[4] how long the latch refuses a late
-- copy (ms), ARGV[5] the publish command, ARGV[6..] the permit ids
-- Returns the number of permits given back.
local latch = redis.call('get', KEYS[6])
redis.call('set', KEYS[6], 'cancelled', 'px', ARGV[4])
if ARGV[3] ~= '' then
  redis.call('zrem', KEYS[4], ARGV[3])
  redis.call('zrem', KEYS[5], ARGV[3])
end
if not latch or latch == 'cancelled' then
  return 0
end
local back = 0
if ARGV[2] == '1' then
  for i = 6, #ARGV do
    back = back + redis.call('zrem', KEYS[2], ARGV[i])
  end
else
  back = tonumber(ARGV[1])
end
if back > 0 then
  local v = redis.call('incrby', KEYS[1], back)
  redis.pcall(ARGV[5], KEYS[3], v)
end
return back
