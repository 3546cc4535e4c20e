-- Record one background process of a session, only if the session still exists: a keeper
-- that ends after its session was deleted must not leave a key behind.
-- KEYS[1] the session's hash, KEYS[2] its processes hash; ARGV[1] process id, ARGV[2] JSON.
-- Returns 1 if recorded, 0 if there is no such session.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
