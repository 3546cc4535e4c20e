-- status: one consistent snapshot of a scope's lock, after pruning.
--
-- KEYS[1..9] and ARGV[1..3]: see _prelude.lua. Reads every KEYS entry; writes only what
--   pruning changes.
-- (no further ARGV)
--
-- Returns {now_ms, {epoch, seq}, holders, waiters, stats}:
--   epoch, seq  the current epoch and its last exclusive grant's seq (0 when none yet): the
--               last fence handed out is epoch * 2^24 + seq
--   holders     flat list {token, lease_expiry_ms, info_json, ...}, earliest expiry first
--   waiters     flat list {token, deadline_ms, info_json, ...}, in queue (FIFO) order
--   stats       flat list {counter, value, ...} (HGETALL of stats)

local now = server_time()
local changed = prune(now)
if changed then
  signal()
end

local holders = {}
local listed = redis.call('ZRANGE', K_HOLDERS, 0, -1, 'WITHSCORES')
for i = 1, #listed, 2 do
  local token = listed[i]
  holders[#holders + 1] = token
  holders[#holders + 1] = listed[i + 1]
  holders[#holders + 1] = redis.call('HGET', K_HOLDER_INFO, token) or '{}'
end

local waiters = {}
for _, token in ipairs(redis.call('ZRANGE', K_QUEUE, 0, -1)) do
  waiters[#waiters + 1] = token
  waiters[#waiters + 1] = redis.call('ZSCORE', K_DEADLINES, token) or '0'
  waiters[#waiters + 1] = redis.call('HGET', K_WAITER_INFO, token) or '{}'
end

local last = redis.call('HMGET', K_EPOCH, 'epoch', 'seq')
return {now, {last[1] or '0', last[2] or '0'}, holders, waiters,
  redis.call('HGETALL', K_STATS)}
