-- take: move the first job of the first non-empty queue into that queue's intermediate list,
-- and bring each queue's doorbell in line with its queue.
--
-- For each queue i of the worker's, in the order it serves them (n queues, 3n keys):
-- KEYS[3i-2]  queue list         RQ's rq:queue:<name>                LIST, the job taken off its head
-- KEYS[3i-1]  intermediate list  RQ's rq:queue:<name>:intermediate   LIST, the job pushed on its tail
-- KEYS[3i]    doorbell           toolpool:doorbell:<name>            LIST, tokens dropped or one pushed
-- ARGV[1]     expiry seconds     of a doorbell this script rings
-- ARGV[2]     job key prefix     RQ's rq:job: (the taken job's hash is read by its id, which
--                                only this script knows: a standalone Redis, not a cluster)
--
-- Returns {i, job id, the job's hash as HGETALL lists it (empty if gone)} for the job taken
-- off queue i, or nil when every queue is empty.
-- After it, a doorbell holds no more tokens than its queue has jobs (the others were left by
-- jobs that a worker took without waiting for a token) and at least one while its queue has
-- any, so that a worker waiting on that doorbell wakes for the jobs this one leaves.
local taken, job = 0, false
local queue = 0
for i = 1, #KEYS, 3 do
  queue = queue + 1
  job = redis.call('LMOVE', KEYS[i], KEYS[i + 1], 'LEFT', 'RIGHT')
  if job then
    taken = queue
    break
  end
end
for i = 1, #KEYS, 3 do
  local jobs = redis.call('LLEN', KEYS[i])
  local tokens = redis.call('LLEN', KEYS[i + 2])
  if jobs == 0 then
    if tokens > 0 then
      redis.call('DEL', KEYS[i + 2])
    end
  elseif tokens > jobs then
    redis.call('LTRIM', KEYS[i + 2], 0, jobs - 1)
  elseif tokens == 0 then
    redis.call('RPUSH', KEYS[i + 2], '1')
    redis.call('EXPIRE', KEYS[i + 2], ARGV[1])
  end
end
if taken == 0 then
  return false
end
return {taken, job, redis.call('HGETALL', ARGV[2] .. job)}
