end
-- Group commit: the script above, as the function `one` of its own KEYS
-- and ARGV, run once per element of this call, in order, as one script
-- (atomic, as consecutive calls with nothing between them would be).
-- KEYS: every element's keys, one element after the other.
-- ARGV[1] the number of elements n; ARGV[2i] and ARGV[2i+1] element i's
-- number of keys and of arguments; then every element's arguments.
-- Returns one entry per element: {1, reply} (just {1} for a nil reply),
-- or {0, error text} when the element raised an error, which ends that
-- element only (what it wrote before the error stays, as it would alone).
local n = tonumber(ARGV[1])
local key_at, arg_at = 0, 1 + 2 * n
local out = {}
for i = 1, n do
  local nkeys, nargs = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local keys, args = {}, {}
  for j = 1, nkeys do
    keys[j] = KEYS[key_at + j]
  end
  for j = 1, nargs do
    args[j] = ARGV[arg_at + j]
  end
  key_at, arg_at = key_at + nkeys, arg_at + nargs
  local ok, reply = pcall(one, keys, args)
  if ok then
    out[i] = {1, reply}
  else
    if type(reply) == 'table' and reply.err then
      reply = reply.err
    end
    -- its first line: an error reply's text is one line (a traceback some
    -- Lua runtimes add when turning the error into text is left out)
    out[i] = {0, string.match(tostring(reply), '^[^\n]*')}
  end
end
return out
