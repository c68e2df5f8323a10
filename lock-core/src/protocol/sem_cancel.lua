-- Give back the permits of one acquisition and mark the request over: the
-- cancellation of an acquire whose reply was lost (or came too late), and
-- the release of a plain permit guard. Applied at most once: the plain
-- kind's grant is deleted by whoever gives it back, each id is removed
-- once; and the latch refuses a late copy of the acquire.
-- KEYS[1] the counter, KEYS[2] the expirable kind's sorted set of permit
-- ids, KEYS[3] the channel, KEYS[4] the line, KEYS[5] the line's alive
-- times, KEYS[6] the request's latch, KEYS[7] the plain kind's grants
-- ARGV[1] '1' the expirable kind, ARGV[2] the acquisition's member of the
-- line ('' none), ARGV[3] how long the latch refuses a late copy (ms),
-- ARGV[4] the publish command, ARGV[5] the request id, ARGV[6..] the
-- permit ids (expirable kind)
-- Returns the number of permits given back.
redis.call('set', KEYS[6], 'cancelled', 'px', ARGV[3])
if ARGV[2] ~= '' then
  redis.call('zrem', KEYS[4], ARGV[2])
  redis.call('zrem', KEYS[5], ARGV[2])
end
local back = 0
if ARGV[1] == '1' then
  for i = 6, #ARGV do
    back = back + redis.call('zrem', KEYS[2], ARGV[i])
  end
else
  local granted = redis.call('hget', KEYS[7], ARGV[5])
  if granted then
    redis.call('hdel', KEYS[7], ARGV[5])
    back = tonumber(granted)
  end
end
if back > 0 then
  local v = redis.call('incrby', KEYS[1], back)
  if v > 0 then
    redis.pcall(ARGV[4], KEYS[3], v)
  end
end
return back
