-- Extend the leases of many locks at once (the watchdog renews in batches).
-- Per lock: renewed only while the owner still holds it.
-- KEYS[i] lock hash i; ARGV[1] lease in ms, ARGV[i + 1] owner id of lock i
-- Returns one character per lock, as one string: '1' renewed, '0' the owner
-- no longer holds it (a string: one reply value to build and parse, not
-- one per lock).
local lease = tonumber(ARGV[1])
local result = {}
for i, key in ipairs(KEYS) do
  if redis.call('hexists', key, ARGV[i + 1]) == 1 then
    -- extend only: a longer fixed lease of a re-entrant hold is kept
    if redis.call('pttl', key) < lease then
      redis.call('pexpire', key, lease)
    end
    result[i] = '1'
  else
    result[i] = '0'
  end
end
return table.concat(result)
