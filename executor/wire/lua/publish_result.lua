-- publish_result: store a call's result once and wake whoever waits for its turn.
--
-- KEYS[1] result key   toolpool:result:<call_id>     STRING, set only if absent
-- KEYS[2] done list    toolpool:turn:<turn_id>:done  LIST, the wake-up is pushed on success
-- ARGV[1] result JSON
-- ARGV[2] wake-up      what a waiting collector pops: the result JSON itself when it is
--                      small (no read after the wake-up), else the call id
-- ARGV[3] ttl seconds  for both keys
--
-- Returns 1 STORED (this was the call's first result), 0 ALREADY_STORED (another writer,
-- e.g. a worker-lost or timeout result, came first; nothing changed).
local ttl = tonumber(ARGV[3])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ttl) then
  redis.call('RPUSH', KEYS[2], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ttl)
  return 1
else
  return 0
end
