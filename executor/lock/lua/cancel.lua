-- cancel: a waiter gives up (its timeout passed, or it was interrupted) and leaves the queue;
-- whoever it was blocking is signalled.
--
-- KEYS[1..9] and ARGV[1..3]: see _prelude.lua. Touches the token's entries in queue, writers,
--   deadlines, waiter_info and its wake list (or holders/holder_info), and the wake lists of
--   the waiters it signals.
-- ARGV[4] token
--
-- Returns:
--   1 LEFT_QUEUE     the token was queued and is not any more (stats.cancels)
--   2 DROPPED_GRANT  the token held the lock: an acquire was granted but its reply never
--                    reached the caller; the grant is released (stats.cancels)
--   0 ABSENT         the token was neither queued nor holding (already pruned); no change

local token = ARGV[4]
local now = server_time()
local changed = prune(now)
local result = 0

if redis.call('ZSCORE', K_QUEUE, token) then
  forget_waiter(token)
  result = 1
elseif forget_holder(token) then
  result = 2
end
if result ~= 0 then
  changed = true
  count('cancels')
end

if changed then
  signal()
end
return result
