-- Cancel an acquisition or re-entry of a read-write lock whose outcome is
-- unknown (as cancel.lua): undo it if it was applied, and make sure a late
-- copy of the request is never applied (rw_acquire.lua refuses a request
-- whose latch exists).
-- KEYS[1] lock hash, KEYS[2] channel, KEYS[3] the request's latch
-- ARGV[1] the hold's owner id, ARGV[2] 'new' or 're', ARGV[3] side: 'read'
-- or 'write', ARGV[4] latch lifetime in ms, ARGV[5] the publish command,
-- ARGV[6] the prefix of the readers' timeout keys
-- Returns 1 when an applied request was undone (a re-entry's count taken
-- off, never the hold's last), 0 otherwise.
local read = ARGV[3] == 'read'
local field = ARGV[1]
if not read then
  field = field .. ':write'
end
local function timeout_key(n)
  return ARGV[6] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. n
end
local first = redis.call('get', KEYS[3])
redis.call('set', KEYS[3], 'x', 'px', ARGV[4])
local applied
if ARGV[2] == 'new' then
  applied = (not first) and redis.pcall('hexists', KEYS[1], field) == 1
else
  applied = first == '1' and redis.pcall('hexists', KEYS[1], field) == 1
end
if not applied then
  return 0
end
local count = tonumber(redis.call('hget', KEYS[1], field))
if ARGV[2] == 'new' then
  redis.call('hdel', KEYS[1], field)
  if read then
    for i = count + 1, 1, -1 do
      redis.call('del', timeout_key(i))
    end
  end
elseif count > 1 then
  redis.call('hincrby', KEYS[1], field, -1)
  if read then
    -- the newest key goes; the count below keeps the longer lease of the two
    local left = redis.call('pttl', timeout_key(count))
    if left > redis.call('pttl', timeout_key(count - 1)) then
      redis.call('pexpire', timeout_key(count - 1), left)
    end
    redis.call('del', timeout_key(count))
  end
end
if redis.call('hlen', KEYS[1]) <= 1 then
  -- only 'mode' left: nobody holds it
  redis.call('del', KEYS[1])
  local message = '0'
  if not read then
    message = '1'
  end
  redis.pcall(ARGV[5], KEYS[2], message)
elseif not read and ARGV[2] == 'new' then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
