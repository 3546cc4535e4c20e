-- publish_result: store a call's result once, wake whoever waits for its turn, and, for the
-- call that stores its batch's last result, put the turn's next batch on the queue and ring
-- the queue's doorbell.
--
-- KEYS[1]    result key     toolpool:result:<call_id>       STRING, set only if absent
-- KEYS[2]    done list      toolpool:turn:<turn_id>:done    LIST, the wake-up is pushed on success
-- With a next batch (a call of any batch but the turn's last):
-- KEYS[3]    barrier        toolpool:turn:<turn_id>:barrier HASH, batch -> calls without a result
-- KEYS[4]    queue list     RQ's list of the turn's queue   LIST, the next batch's jobs pushed
-- KEYS[5]    deferred       RQ's deferred registry of it    ZSET, the next batch's jobs removed
-- KEYS[6]    doorbell       toolpool:doorbell:<queue>       LIST, a token per job pushed, kept
--                           to the last ARGV[6], expiring after ARGV[7] s (executor/_rq/doorbell.py)
-- KEYS[7..]  job hashes     RQ's hash of each next job      HASH, status and enqueued_at set,
--                           and its expiry taken off (a queued RQ job has none)
-- ARGV[1]    result JSON
-- ARGV[2]    wake-up        what a waiting collector pops: the result JSON itself when it is
--                           small (no read after the wake-up), else the call id
-- ARGV[3]    ttl seconds    for both keys
-- With a next batch:
-- ARGV[4]    batch          the barrier's field: this call's batch
-- ARGV[5]    enqueued_at    RQ's timestamp for the jobs put on the queue
-- ARGV[6]    tokens kept    the most tokens the doorbell keeps
-- ARGV[7]    expiry         seconds the doorbell lives after this ring
-- ARGV[8..]  job ids        of the next batch, in the order of KEYS[7..]
--
-- Returns 1 STORED (this was the call's first result), 2 STORED_AND_RELEASED (and it was its
-- batch's last: the next batch is on the queue), 0 ALREADY_STORED (another writer, e.g. a
-- worker-lost or timeout result, came first; nothing changed, nothing counted).
local ttl = tonumber(ARGV[3])
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ttl) then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ttl)
if #KEYS < 3 then
  return 1
end
-- Each call's first result counts once: only a SET that succeeded gets here. A barrier that
-- expired (a turn older than its plan) counts nothing: HINCRBY would make a key with no expiry.
if redis.call('EXISTS', KEYS[3]) == 0 or redis.call('HINCRBY', KEYS[3], ARGV[4], -1) ~= 0 then
  return 1
end
local pushed = 0
for i = 7, #KEYS do
  local job = ARGV[i + 1]
  -- A job whose hash is gone (expired with a turn older than the results) is not pushed:
  -- a worker would find nothing to run.
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('HSET', KEYS[i], 'status', 'queued', 'enqueued_at', ARGV[5])
    redis.call('PERSIST', KEYS[i])
    redis.call('RPUSH', KEYS[4], job)
    pushed = pushed + 1
  end
  redis.call('ZREM', KEYS[5], job)
end
-- The ring: a token per job put on the queue wakes a worker waiting on several queues.
if pushed > 0 then
  local tokens = {}
  for t = 1, math.min(pushed, tonumber(ARGV[6])) do
    tokens[t] = '1'
  end
  redis.call('RPUSH', KEYS[6], unpack(tokens))
  redis.call('LTRIM', KEYS[6], -tonumber(ARGV[6]), -1)
  redis.call('EXPIRE', KEYS[6], ARGV[7])
end
return 2
