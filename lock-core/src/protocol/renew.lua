-- Extend the leases of many locks at once (the watchdog renews in batches).
-- Per lock: renewed only while the owner still holds it.
-- KEYS[i] lock hash i; ARGV[1] lease in ms, ARGV[i + 1] the hold's field in
-- lock i: an owner id (a writer of a read-write lock: '<owner>:write'), or
-- for a reader of a read-write lock '<owner>' NUL '<prefix>': then the
-- reader's own timeout keys '<prefix>:<owner>:rwlock_timeout:<n>' are
-- renewed too (never another owner's: Redisson renews every reader's);
-- or for permits of an expirable semaphore (KEYS[i] its sorted set of
-- permit ids, 16 bytes each) NUL followed by the ids in hex, 32 digits
-- each: each id still in the set and not expired gets the expiry
-- now + lease (never earlier than it had); renewed only when every id was.
-- Returns one character per lock, as one string: '1' renewed, '0' the owner
-- no longer holds it (a string: one reply value to build and parse, not
-- one per lock).
local lease = tonumber(ARGV[1])
local result = {}
local now = nil
local function renew_permits(key, ids)
  if not now then
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local renewed = '1'
  for hex in string.gmatch(ids, '%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x') do
    local id = string.gsub(hex, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
    local expiry = tonumber(redis.call('zscore', key, id) or '0')
    if expiry > now then
      if expiry < now + lease then
        redis.call('zadd', key, 'xx', now + lease, id)
      end
    else
      renewed = '0'
    end
  end
  return renewed
end
local function renew_hold(key, field)
  local prefix = nil
  local nul = string.find(field, '\0', 1, true)
  if nul then
    prefix = string.sub(field, nul + 1)
    field = string.sub(field, 1, nul - 1)
  end
  local count = redis.call('hget', key, field)
  if count then
    if prefix then
      for n = tonumber(count), 1, -1 do
        local timeout = prefix .. ':' .. field .. ':rwlock_timeout:' .. n
        if redis.call('pttl', timeout) < lease then
          redis.call('pexpire', timeout, lease)
        end
      end
    end
    -- extend only: a longer fixed lease of a re-entrant hold is kept
    if redis.call('pttl', key) < lease then
      redis.call('pexpire', key, lease)
    end
    return '1'
  else
    return '0'
  end
end
for i, key in ipairs(KEYS) do
  local field = ARGV[i + 1]
  if string.byte(field, 1) == 0 then
    result[i] = renew_permits(key, string.sub(field, 2))
  else
    result[i] = renew_hold(key, field)
  end
end
return table.concat(result)
