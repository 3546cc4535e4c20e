-- A call enters its session: the session must be ready and live on this worker's host.
-- KEYS[1] the session's hash
-- ARGV: host, now (s)
-- Returns {'ok', cwd, env}, {'missing'}, {'state', state} or {'host', host}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing'}
end
local found = redis.call('HMGET', KEYS[1], 'state', 'host', 'cwd', 'env')
if found[1] ~= 'ready' then
  return {'state', found[1] or ''}
end
if found[2] ~= ARGV[1] then
  return {'host', found[2] or ''}
end
redis.call('HINCRBY', KEYS[1], 'calls', 1)
redis.call('HSET', KEYS[1], 'last_used', ARGV[2])
return {'ok', found[3] or '.', found[4] or '{}'}
