-- Release one count of a hold of a read-write lock, naming the count the
-- client believes the hold has (as release.lua: however late a copy of it
-- arrives, it cannot end a hold whose guards still exist).
-- KEYS[1] lock hash, KEYS[2] channel, KEYS[3] the clients waiting to write
-- (sorted set), KEYS[4] the client whose turn it is
-- ARGV[1] owner id, ARGV[2] lease in ms (at least this long while this
-- hold's counts remain), ARGV[3] side: 'read' or 'write', ARGV[4] the
-- releasing client's id, ARGV[5] how long in ms the next client's turn is
-- kept for it, ARGV[6] the count the hold has before this release, as the
-- client knows it ('1' the last: the hold ends whatever count Redis has;
-- n > 1 taken off only when Redis has exactly n), ARGV[7] the publish
-- command ('publish' or 'spublish'), ARGV[8] the prefix of the readers'
-- timeout keys
-- Messages (Redisson's): '0' when a read release frees the lock, '1' when a
-- write release does; '0' too when a writer's release leaves its own
-- downgraded reads (readers waiting behind the writer may come in).
-- When the lock is freed and clients wait to write, the turn goes to the
-- one that has waited longest (after a write, not the releasing client, as
-- release.lua; after a read, whichever it is).
-- Releasing one of several read counts keeps the longer lease of its
-- timeout key on the key of the count below.
-- Returns 1 + n when the lock was freed and its message reached n
-- subscribed clients, 0 when counts of the hold remain, -1 when the hold
-- ended but others still hold the lock, nil when the owner does not hold
-- it. When PUBLISH is refused (ACL), the lock is freed all the same and
-- the error text comes back as a string.
local read = ARGV[3] == 'read'
local field = ARGV[1]
if not read then
  field = field .. ':write'
end
local function timeout_key(owner, n)
  return ARGV[8] .. ':' .. owner .. ':rwlock_timeout:' .. n
end
local count = redis.call('hget', KEYS[1], field)
if not count then
  return nil
end
count = tonumber(count)
local expected = tonumber(ARGV[6])
-- A read count's timeout key goes with it; the count below keeps its
-- lease when longer (the hold's deadline may rest on the newest re-entry's
-- lease, and a read release elsewhere sets the hash's TTL from the keys).
local function drop_newest_key(n)
  local newest = timeout_key(ARGV[1], n)
  local left = redis.call('pttl', newest)
  if n > 1 and left > redis.call('pttl', timeout_key(ARGV[1], n - 1)) then
    redis.call('pexpire', timeout_key(ARGV[1], n - 1), left)
  end
  redis.call('del', newest)
end
if expected > 1 then
  if count == expected then
    redis.call('hincrby', KEYS[1], field, -1)
    if read then
      drop_newest_key(count)
    end
  end
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  return 0
end
-- The last count: the hold ends, whatever count Redis has.
redis.call('hdel', KEYS[1], field)
if read then
  -- its every timeout key (one more than the count: a count one short)
  for i = count + 1, 1, -1 do
    redis.call('del', timeout_key(ARGV[1], i))
  end
end
local function publish(message)
  local told = redis.pcall(ARGV[7], KEYS[2], message)
  if type(told) == 'table' and told.err then
    return told
  end
  return told
end
if redis.call('hlen', KEYS[1]) > 1 then
  -- Others hold it still. The hash lives as long as its longest reader
  -- (every reader's timeout keys, all owners, Redisson's rule); a writer's
  -- hold keeps at least what it had.
  local mode = redis.call('hget', KEYS[1], 'mode')
  if not read then
    -- the writer leaves its own downgraded reads: the lock is read-held
    redis.call('hset', KEYS[1], 'mode', 'read')
    mode = 'read'
  end
  local longest = -3
  for _, key in ipairs(redis.call('hkeys', KEYS[1])) do
    local n = tonumber(redis.call('hget', KEYS[1], key))
    if n then
      for i = n, 1, -1 do
        longest = math.max(longest, redis.call('pttl', timeout_key(key, i)))
      end
    end
  end
  if mode == 'write' then
    if redis.call('pttl', KEYS[1]) < longest then
      redis.call('pexpire', KEYS[1], longest)
    end
    return -1
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    if not read then
      local told = publish('0')
      if type(told) == 'table' then
        return told.err
      end
    end
    return -1
  end
end
-- Nobody holds it any more.
redis.call('del', KEYS[1])
local message = '0'
if not read then
  message = '1'
end
local told = publish(message)
if type(told) == 'table' then
  return told.err
end
if told > 0 then
  local waiting = redis.call('zrange', KEYS[3], 0, 1)
  local next_client = waiting[1]
  -- a writer's release passes its own client over (the others' turn); a
  -- reader's does not: its client's writer may have waited longest
  if next_client == ARGV[4] and not read then
    next_client = waiting[2]
  end
  if next_client then
    redis.call('set', KEYS[4], next_client, 'px', ARGV[5])
    redis.call('zrem', KEYS[3], next_client)
  end
end
return 1 + told
