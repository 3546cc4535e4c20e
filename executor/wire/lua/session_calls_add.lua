-- List calls as a session's, only while the session is ready: calls sent to a session deleted
-- meanwhile must not bring back its calls set (the workers answer them unknown_session).
-- KEYS[1] the session's hash, KEYS[2] its calls set
-- ARGV[1] the submit time; ARGV[2..] the call ids
-- Returns 1 if listed, 0 if the session is not ready.
if redis.call('HGET', KEYS[1], 'state') ~= 'ready' then
  return 0
end
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[i])
end
return 1
