-- lock-core's fenced write: the caller's Lua body, run only while a hold
-- is still the lock's holder (protocol/fenced.rs puts the body in below).
-- KEYS[1]: the lock hash; ARGV[1]: the hold's field in it.
-- KEYS[2..] and ARGV[2..]: the caller's keys and arguments, which the
-- body sees as its own KEYS and ARGV (numbered from 1).
-- Answers: the body's answer; or the error `LOCKCORE_FENCED ...` when the
-- hold's field is not in the lock hash (the lock expired, was released or
-- taken over): then nothing is written.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return redis.error_reply('LOCKCORE_FENCED the hold is no longer the holder of ' .. KEYS[1])
end
local keys, argv = {}, {}
for i = 2, #KEYS do keys[i - 1] = KEYS[i] end
for i = 2, #ARGV do argv[i - 1] = ARGV[i] end
local function body(KEYS, ARGV)
--BODY--
end
return body(keys, argv)
