-- claim_hold: keep a worker's claim on a call it is about to run (at its lock grant) or runs
-- (its heartbeat), unless the call is answered or another delivery of it holds the claim.
-- A failover can drop a claim and put the call's job back on its queue; then two deliveries
-- may each think they hold the call. Only the one this script answers HELD at its grant runs.
--
-- KEYS[1]  running key   toolpool:running:<call_id>      STRING worker name, expires (PX)
-- KEYS[2]  result key    toolpool:result:<call_id>       STRING the call's ToolResult (read)
-- KEYS[3]  cancel key    toolpool:turn:<turn_id>:cancel  STRING present once cancelled (read)
-- ARGV[1]  worker        the name of the worker asking
-- ARGV[2]  liveness ms   how long the claim lives unless renewed
--
-- Returns {code, cancelled, value}; cancelled is 1 once the turn is cancelled, else 0.
--   code 1 HELD      the claim is this worker's: renewed, or taken again where it had lapsed
--                    (value "")
--   code 0 TAKEN     another worker holds the claim; nothing changed (value: its name)
--   code 2 ANSWERED  the call has its result already; nothing changed (value: the result)
local cancelled = redis.call('EXISTS', KEYS[3])
local stored = redis.call('GET', KEYS[2])
if stored then
  return {2, cancelled, stored}
end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {0, cancelled, holder}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return {1, cancelled, ''}
