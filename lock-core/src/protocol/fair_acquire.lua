-- Acquire a fair lock (Redisson's RFairLock), or re-enter a hold of it.
-- The lock is Redisson's RLock hash; beside it, the LIST KEYS[4] of waiting
-- owners in arrival order and the ZSET KEYS[5] of their deadlines, in
-- milliseconds of the clients' clocks. A waiter's deadline is its
-- predecessor's (or the holder's remaining time, for the first) plus the
-- wait allowance; every grant moves those still waiting one place up, so
-- it takes one allowance off each deadline (Redisson's protocol: every
-- client must use the same allowance). A head whose deadline passed is
-- taken as dead and leaves the queue. lock-core's own waiters also keep a
-- short liveness mark in KEYS[6] (Redisson's clients neither read nor
-- write it), in ms of the server's clock: a head of ours is dead when its
-- mark lapses, however far its deadline is, and alive while the mark
-- lasts (a killed process's waiter leaves the queue within the lapse, not
-- after minutes). A waiter granted or leaving after its deadline moves
-- nobody up: Redisson's clients would have dropped it without that.
-- KEYS[1] lock hash, KEYS[2] last fencing token, KEYS[3] this owner's latch
-- (exists when its waiting was cancelled, see fair_cancel.lua), KEYS[4] the
-- queue, KEYS[5] the deadlines, KEYS[6] the liveness marks of lock-core's
-- waiters (a ZSET: owner -> alive until, in ms of the server's clock),
-- KEYS[7] the lock's channel (a waiter's own channel is `<KEYS[7]>:<owner>`)
-- ARGV[1] lease in ms, ARGV[2] the owner id (one per waiter: its place in
-- the queue), ARGV[3] mode, ARGV[4] lifetime in ms of the token key,
-- ARGV[5] lifetime in ms of a re-entry's latch, ARGV[6] the wait allowance
-- in ms, ARGV[7] the caller's clock in ms since the epoch, ARGV[8] how
-- long in ms a waiter's liveness mark lasts (it is renewed at every
-- attempt), ARGV[9] the unlock message, ARGV[10] the publish command
-- ('publish' or 'spublish')
--
-- When the lock is free but another waiter is the queue's head (it may not
-- know: its predecessor was just pruned as dead here, or its message was
-- lost), the head is told on its own channel, so a free lock that other
-- waiters ask for does not wait for a head that sleeps until its next
-- re-check (or, for Redisson's waiters, until their whole wait runs out).
--
-- mode 'once': one attempt that never joins the queue (Redisson's tryLock
--   without a wait). mode 'wait': a waiter; when the lock is held (or free
--   but another waiter's turn) it joins the queue at its end, or keeps its
--   place. Both return {1, token} acquired (also when this owner holds it
--   already: a repeated copy of the request answers as the first did), {0,
--   ms} not now: 'wait' the holder's remaining time for the queue's head,
--   else the time until its predecessor's deadline (Redisson's answer;
--   negative when that has passed), 'once' the holder's remaining time
--   (-2: free but reserved for the queue's head), {-2, 0} this owner was
--   cancelled.
-- mode 're': one more count of the hold ARGV[2] (never creates it), as in
--   acquire.lua: {2, 0} re-entered, {-1, 0} the hold is gone, {-2, 0}
--   cancelled.
local mode = ARGV[3]
if redis.call('exists', KEYS[3]) == 1 then
  return {-2, 0}
end
if mode == 're' then
  if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return {-1, 0}
  end
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  redis.call('set', KEYS[3], '1', 'px', ARGV[5])
  return {2, 0}
end
local function next_token()
  local now = redis.call('time')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4], 'get'))
  if last ~= nil and last >= token then
    token = last + 1
    redis.call('set', KEYS[2], string.format('%.0f', token), 'px', ARGV[4])
  end
  return token
end
local allowance = tonumber(ARGV[6])
local now = tonumber(ARGV[7])
local clock = redis.call('time')
local server_now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
-- Dead heads leave: a lapsed liveness mark, or without one a deadline
-- passed (or none, which no client writes).
local function dead(owner)
  local alive = tonumber(redis.call('zscore', KEYS[6], owner))
  if alive ~= nil then
    return alive <= server_now
  end
  local deadline = tonumber(redis.call('zscore', KEYS[5], owner))
  return deadline == nil or deadline <= now
end
while true do
  local head = redis.call('lindex', KEYS[4], 0)
  if (not head) or not dead(head) then
    break
  end
  redis.call('zrem', KEYS[5], head)
  redis.call('zrem', KEYS[6], head)
  redis.call('lpop', KEYS[4])
end
-- (pcall: a lock key of another type is "held")
if redis.pcall('hexists', KEYS[1], ARGV[2]) == 1 then
  local token = next_token()
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token}
end
if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[4], 0)
  if (not head) or head == ARGV[2] then
    -- The token first: a failure there must not leave a hold behind.
    local token = next_token()
    if head then
      redis.call('lpop', KEYS[4])
    end
    local mine = tonumber(redis.call('zscore', KEYS[5], ARGV[2]))
    redis.call('zrem', KEYS[5], ARGV[2])
    redis.call('zrem', KEYS[6], ARGV[2])
    if mine == nil or mine > now then
      local rest = redis.call('zrange', KEYS[5], 0, -1)
      for i = 1, #rest do
        redis.call('zincrby', KEYS[5], -allowance, rest[i])
      end
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, token}
  end
  -- (pcall: a refused publish must not fail the attempt; the head asks
  -- again by its own bound)
  redis.pcall(ARGV[10], KEYS[7] .. ':' .. head, ARGV[9])
end
if mode ~= 'wait' then
  return {0, redis.call('pttl', KEYS[1])}
end
local lapse = tonumber(ARGV[8])
redis.call('zadd', KEYS[6], server_now + lapse, ARGV[2])
redis.call('pexpire', KEYS[6], lapse * 2)
local mine = tonumber(redis.call('zscore', KEYS[5], ARGV[2]))
if mine ~= nil then
  if redis.call('lindex', KEYS[4], 0) == ARGV[2] then
    return {0, redis.call('pttl', KEYS[1])}
  end
  return {0, mine - allowance - now}
end
local last = redis.call('lindex', KEYS[4], -1)
local ttl = nil
if last and last ~= ARGV[2] then
  local behind = tonumber(redis.call('zscore', KEYS[5], last))
  if behind ~= nil then
    ttl = behind - now
  end
end
if ttl == nil then
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[5], ttl + allowance + now, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[4], ARGV[2])
end
return {0, ttl}
