-- Move a session from one of some states to another; nothing if it is in none of them.
-- KEYS[1] the session's hash
-- ARGV[1] the states it may be in, comma-separated; ARGV[2] the new state; ARGV[3], if
-- given, the last use it must still have (an expiry must not end a session used meanwhile)
-- Returns the state it was in when moved, or false.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return false
end
if ARGV[3] and redis.call('HGET', KEYS[1], 'last_used') ~= ARGV[3] then
  return false
end
for allowed in string.gmatch(ARGV[1], '[^,]+') do
  if allowed == state then
    redis.call('HSET', KEYS[1], 'state', ARGV[2])
    return state
  end
end
return false
