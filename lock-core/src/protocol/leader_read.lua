-- Who leads an election now, read in one step.
-- KEYS[1]: the lock hash; KEYS[2]: the record `lockcore_leader:{<lock>}`.
-- Answers: {0} nobody holds the lock;
-- {1, pttl, value, term} the lock's holder wrote the record;
-- {2, pttl} the lock is held by a holder without a record (a Redisson
-- client, or a leader between its grant and its record).
-- pttl is the lock's (-1: no TTL).
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
    return {0}
end
local owner = redis.call('hget', KEYS[2], 'owner')
if owner and redis.call('hexists', KEYS[1], owner) == 1 then
    return {1, pttl, redis.call('hget', KEYS[2], 'value'), redis.call('hget', KEYS[2], 'term')}
end
return {2, pttl}
