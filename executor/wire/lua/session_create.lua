-- Create a session's record, once: a name already taken is refused.
-- KEYS[1] the session's hash, KEYS[2] the index of session names
-- ARGV: name, host, queue, now (s), idle_ttl (s), template
-- Returns 1 when created, 0 when the name exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1],
  'name', ARGV[1], 'host', ARGV[2], 'queue', ARGV[3], 'state', 'creating',
  'created_at', ARGV[4], 'last_used', ARGV[4], 'calls', 0, 'idle_ttl', ARGV[5],
  'template', ARGV[6], 'cwd', '.', 'env', '{}')
redis.call('SADD', KEYS[2], ARGV[1])
return 1
