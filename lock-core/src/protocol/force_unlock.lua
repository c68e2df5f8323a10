-- Delete a lock whoever holds it and wake its waiters.
-- KEYS[1] lock hash, KEYS[2] unlock channel; ARGV[1] unlock message,
-- ARGV[2] the publish command ('publish' or 'spublish')
-- Returns 1 when a lock was deleted, 0 when there was none; the error text
-- of a refused PUBLISH (the lock was deleted) as a string.
if redis.call('del', KEYS[1]) == 1 then
  -- deleted, whatever PUBLISH says (a refusal comes back as its text)
  local told = redis.pcall(ARGV[2], KEYS[2], ARGV[1])
  if type(told) == 'table' and told.err then
    return told.err
  end
  return 1
end
return 0
