-- renew: extend a holder's lease. Never revives one: an expired lease was pruned first, and a
-- token that is not a holder stays not a holder.
--
-- KEYS[1..9] and ARGV[1..3]: see _prelude.lua. Writes only the token's score in holders (and
--   stats, and what pruning frees).
-- ARGV[4] token
-- ARGV[5] lease_ms   new lease length from now (server clock)
--
-- Returns {code, now_ms}:
--   1 RENEWED  the lease now ends lease_ms from now
--   0 LOST     the token holds nothing (expired, released or force-released), or holds a
--              grant of an older epoch (made before a failover; not renewed). Not counted
--              here: a renewal sent before a partition may run long after its sender gave
--              up; the holder reports its loss with release.lua ("lost"), which counts once.

local token, lease_ms = ARGV[4], tonumber(ARGV[5])
local now = server_time()
settle_epoch(now)
local changed = prune(now)
local result = 0

local raw = redis.call('HGET', K_HOLDER_INFO, token)
if raw and redis.call('ZSCORE', K_HOLDERS, token) and of_this_epoch(cjson.decode(raw)) then
  redis.call('ZADD', K_HOLDERS, 'XX', now + lease_ms, token)
  result = 1
end

if changed then
  signal()
end
return {result, now}
