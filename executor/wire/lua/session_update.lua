-- Set fields of a session's record, only if it still exists: a session deleted meanwhile
-- must not come back as a record with a few fields.
-- KEYS[1] the session's hash; ARGV: field, value, field, value, ...
-- Returns 1 if updated, 0 if there is no such session.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
