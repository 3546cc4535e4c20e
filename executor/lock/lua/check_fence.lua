-- check_fence: is this token, with this fence, still the exclusive holder with a live lease?
-- A fenced commit calls it right before it makes a write visible.
--
-- KEYS[1..9] and ARGV[1..3]: see _prelude.lua. Reads holders and holder_info; writes only
--   what pruning changes.
-- ARGV[4] token
-- ARGV[5] epoch   the fence the grant returned, as its two halves: epoch * 2^24 + seq (a
-- ARGV[6] seq     fence is past a double's 53 exact bits, so Lua never sees it whole)
--
-- Returns:
--   1 VALID    the token holds the lock exclusively, with this fence, in the current epoch,
--              and its lease is unexpired
--   0 INVALID  anything else

local token, epoch, seq = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local now = server_time()
settle_epoch(now)
local changed = prune(now)
local result = 0

-- After prune, a token still in holders has an unexpired lease.
local raw = redis.call('HGET', K_HOLDER_INFO, token)
if raw and redis.call('ZSCORE', K_HOLDERS, token) then
  local info = cjson.decode(raw)
  local same = tonumber(info.epoch) == epoch and tonumber(info.seq) == seq
  if info.mode == 'exclusive' and same and of_this_epoch(info) then
    result = 1
  end
end

if changed then
  signal()
end
return result
