-- A client's last waiting writer of a read-write lock stops waiting: the
-- client leaves the line of waiting clients, its writer's mark goes (new
-- readers of lock-core wait behind a mark) and the lock's waiters are told
-- (readers kept out by the mark ask again at once).
-- KEYS[1] the clients waiting (sorted set), KEYS[2] the waiting writer's
-- mark, KEYS[3] the read-write lock's channel
-- ARGV[1] the client's id, ARGV[2] the message, ARGV[3] the publish
-- command ('publish' or 'spublish')
-- Returns 1 when the client left the line, 0 when it had no place in it.
-- The mark goes only when it is this client's (another client's writer
-- may have set it since).
local left = redis.call('zrem', KEYS[1], ARGV[1])
if redis.call('get', KEYS[2]) == ARGV[1] then
  redis.call('del', KEYS[2])
  redis.pcall(ARGV[3], KEYS[3], ARGV[2]) -- a refusal changes nothing here
end
return left
