-- An election's leader record, written by the leader beside its hold
-- (lock-core's own key; Redisson ignores it). Fenced: written only while
-- the hold is still the lock's holder.
-- KEYS[1]: the lock hash; KEYS[2]: the record `lockcore_leader:{<lock>}`;
-- KEYS[3]: the election's channel `lockcore_leader__channel:{<lock>}`.
-- ARGV[1]: the hold's field in the lock hash; ARGV[2]: the leader's value;
-- ARGV[3]: its term (the hold's fencing token); ARGV[4]: the record's TTL
-- in ms; ARGV[5]: PUBLISH or SPUBLISH.
-- Answers: 1 written (the term published when the record was another
-- hold's); 0 the hold is not the lock's holder (nothing written).
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return 0
end
local fresh = redis.call('hget', KEYS[2], 'owner') ~= ARGV[1]
redis.call('hset', KEYS[2], 'owner', ARGV[1])
redis.call('hset', KEYS[2], 'value', ARGV[2])
redis.call('hset', KEYS[2], 'term', ARGV[3])
redis.call('pexpire', KEYS[2], ARGV[4])
if fresh then
    redis.call(ARGV[5], KEYS[3], ARGV[3])
end
return 1
