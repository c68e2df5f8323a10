-- Acquire several locks of one Cluster slot at once, all or nothing, each
-- as a new hold in Redisson's RLock layout (a hash whose field is the owner
-- id and value the count, PEXPIRE as the lease): the multi-lock's grant.
-- Per lock i (0-based), four keys: KEYS[4i+1] lock hash, KEYS[4i+2] last
-- fencing token, KEYS[4i+3] the latch of this request for that lock (named
-- after the hold's owner id, as acquire.lua's), KEYS[4i+4] the client whose
-- turn it is (see release.lua).
-- ARGV[1] lease in ms, ARGV[2] lifetime in ms of the token keys,
-- ARGV[3] the caller's client id, ARGV[4+i] the owner id of the hold of
-- lock i (never used before).
--
-- Returns {1, token_1, ..., token_n}: every lock taken, each with its
--   fencing token (drawn as acquire.lua draws it);
-- {0, pttl, i}: nothing taken; lock i (1-based) is held by another owner
--   (or is another client's turn) for pttl ms, the shortest wait among the
--   locks found held (-1: no expiry, the longest);
-- {-2, 0, 0}: the request was cancelled (one of its latches exists, see
--   cancel.lua, which undoes each lock's hold on its own): nothing taken.
--
-- A second copy of this very request (a retry under the client) finds its
-- holds: all of them answer as taken again (new tokens, leases renewed);
-- only some (the others expired meanwhile) are removed, nothing is taken.
local n = #KEYS / 4
local function key(i, k) return KEYS[4 * i + k] end
local function owner(i) return ARGV[4 + i] end
-- The next fencing token of the lock whose token key is `token_key`.
local function next_token(token_key)
  local now = redis.call('time')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local last = tonumber(redis.call('set', token_key, string.format('%.0f', token), 'px', ARGV[2], 'get'))
  if last ~= nil and last >= token then
    token = last + 1
    redis.call('set', token_key, string.format('%.0f', token), 'px', ARGV[2])
  end
  return token
end
for i = 0, n - 1 do
  if redis.call('exists', key(i, 3)) == 1 then
    return {-2, 0, 0}
  end
end
-- (pcall: a lock key of another type is "held, no expiry", below)
local mine = 0
for i = 0, n - 1 do
  if redis.pcall('hexists', key(i, 1), owner(i)) == 1 then
    mine = mine + 1
  end
end
if mine == n then
  local out = {1}
  for i = 0, n - 1 do
    out[i + 2] = next_token(key(i, 2))
    redis.call('pexpire', key(i, 1), ARGV[1])
  end
  return out
elseif mine > 0 then
  for i = 0, n - 1 do
    redis.pcall('hdel', key(i, 1), owner(i))
  end
  return {0, 0, 1}
end
local best, at = nil, 0
for i = 0, n - 1 do
  local pttl = nil
  if redis.call('exists', key(i, 1)) == 1 then
    pttl = redis.call('pttl', key(i, 1))
  else
    local turn = redis.call('get', key(i, 4))
    if turn and turn ~= ARGV[3] then
      pttl = redis.call('pttl', key(i, 4))
    end
  end
  if pttl ~= nil and (best == nil or (pttl >= 0 and (best < 0 or pttl < best))) then
    best, at = pttl, i + 1
  end
end
if best ~= nil then
  return {0, best, at}
end
-- The tokens first: a failure there (a key of another type) must not leave
-- a hold behind.
local out = {1}
for i = 0, n - 1 do
  out[i + 2] = next_token(key(i, 2))
end
for i = 0, n - 1 do
  if redis.call('get', key(i, 4)) == ARGV[3] then
    redis.call('del', key(i, 4))
  end
  redis.call('hincrby', key(i, 1), owner(i), 1)
  redis.call('pexpire', key(i, 1), ARGV[1])
end
return out
