-- lock-core's fenced write: the caller's Lua body, run only while a hold
-- is still the lock's holder (protocol/fenced.rs puts the body in below).
-- KEYS[1]: the lock hash; KEYS[2]: this call's request latch (in the
-- lock's slot). ARGV[1]: the hold's field in the lock hash; ARGV[2]: the
-- latch's lifetime in ms, '0' for none (a client that never sends a
-- command twice).
-- KEYS[3..] and ARGV[3..]: the caller's keys and arguments, which the
-- body sees as its own KEYS and ARGV (numbered from 1).
-- Answers: the body's answer; the error `LOCKCORE_FENCED_REPEAT ...` when
-- the latch exists (a copy of this call, re-sent after a lost reply, ran
-- already: nothing is written again); the error `LOCKCORE_FENCED ...`
-- when the hold's field is not in the lock hash (the lock expired, was
-- released or taken over): then nothing is written.
if ARGV[2] ~= '0' and redis.call('exists', KEYS[2]) == 1 then
    return redis.error_reply('LOCKCORE_FENCED_REPEAT this fenced write ran already (an earlier copy of the same call, whose reply was lost); not applied again')
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return redis.error_reply('LOCKCORE_FENCED the hold is no longer the holder of ' .. KEYS[1])
end
if ARGV[2] ~= '0' then
    redis.call('set', KEYS[2], '1', 'px', ARGV[2])
end
local keys, argv = {}, {}
for i = 3, #KEYS do keys[i - 2] = KEYS[i] end
for i = 3, #ARGV do argv[i - 2] = ARGV[i] end
local function body(KEYS, ARGV)
--BODY--
end
return body(keys, argv)
