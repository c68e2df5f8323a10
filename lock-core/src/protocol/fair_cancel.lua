-- A waiter of a fair lock gives up, or an acquire or re-entry whose
-- outcome is unknown (its reply was lost) is cancelled: the owner leaves
-- the queue (those behind it move one place up: one wait allowance off
-- their deadlines, as Redisson's failed-acquire clean-up does), a grant it
-- got is undone, a late copy of its request is never applied (the latch),
-- and when the lock is free the queue's new head is told.
-- KEYS[1] lock hash, KEYS[2] the lock's channel, KEYS[3] the owner's latch,
-- KEYS[4] the queue, KEYS[5] the deadlines, KEYS[6] the liveness marks of
-- lock-core's waiters (see fair_acquire.lua)
-- ARGV[1] owner id, ARGV[2] mode ('new' or 're', as in fair_acquire.lua),
-- ARGV[3] unlock message, ARGV[4] latch lifetime in ms, ARGV[5] the publish
-- command, ARGV[6] the wait allowance in ms, ARGV[7] the caller's clock in
-- ms since the epoch
-- A waiter leaving after its deadline moves nobody up (Redisson's clients
-- would have dropped it without that); dead heads leave before the new
-- head is told (as in fair_acquire.lua).
-- Returns 1 when an applied request was undone, 0 otherwise.
local first = redis.call('get', KEYS[3])
redis.call('set', KEYS[3], 'x', 'px', ARGV[4])
local undone = 0
if ARGV[2] == 'new' then
  local queue = redis.call('lrange', KEYS[4], 0, -1)
  local found = false
  local mine = tonumber(redis.call('zscore', KEYS[5], ARGV[1]))
  local moves_up = mine == nil or mine > tonumber(ARGV[7])
  for i = 1, #queue do
    if found and moves_up then
      redis.call('zincrby', KEYS[5], -tonumber(ARGV[6]), queue[i])
    elseif queue[i] == ARGV[1] then
      found = true
    end
  end
  if found then
    redis.call('lrem', KEYS[4], 0, ARGV[1])
  end
  redis.call('zrem', KEYS[5], ARGV[1])
  redis.call('zrem', KEYS[6], ARGV[1])
  if (not first) and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('hdel', KEYS[1], ARGV[1])
    undone = 1
  end
elseif first == '1' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  if tonumber(redis.call('hget', KEYS[1], ARGV[1])) > 1 then
    redis.call('hincrby', KEYS[1], ARGV[1], -1)
  end
  undone = 1
end
if redis.call('exists', KEYS[1]) == 0 then
  local now = tonumber(ARGV[7])
  local clock = redis.call('time')
  local server_now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  while true do
    local head = redis.call('lindex', KEYS[4], 0)
    if not head then
      break
    end
    local alive = tonumber(redis.call('zscore', KEYS[6], head))
    local deadline = tonumber(redis.call('zscore', KEYS[5], head))
    if (alive ~= nil and alive > server_now) or (alive == nil and deadline ~= nil and deadline > now) then
      redis.pcall(ARGV[5], KEYS[2] .. ':' .. head, ARGV[3])
      break
    end
    redis.call('zrem', KEYS[5], head)
    redis.call('zrem', KEYS[6], head)
    redis.call('lpop', KEYS[4])
  end
end
return undone
