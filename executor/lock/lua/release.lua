-- release: end a token's hold on the lock, and signal the waiters that can go now.
--
-- KEYS[1..9] and ARGV[1..3]: see _prelude.lua. Touches the released token's entries in
--   holders/holder_info (or, for "force", its queue entries and wake list) and the wake lists
--   of the waiters it signals.
-- ARGV[4] token
-- ARGV[5] reason   "release": the holder is done (counted in stats.releases)
--                  "force":   an operator ends it (stats.forced_releases); also removes a waiter
--                  "lost":    the holder saw its lease lost; stats.lost_leases is counted even
--                             when the lease is already gone, and a grant still there is dropped
-- ARGV[6] lost_prefix   "<tag>:lost:"; for "lost", lost_prefix .. token marks the loss as
--                       counted, so a report retried after a timed-out reply counts once. Like
--                       the wake keys, derived here, inside the scope's hash tag.
-- ARGV[7] lost_mark_ms  how long that mark lasts (longer than the holder retries its report)
--
-- Returns:
--   1 RELEASED        the token held the lock (lease unexpired) and no longer does
--   0 NOT_HELD        the token held nothing: expired, released or never granted; no change
--   2 WAITER_REMOVED  ("force" only) the token was queued, and has left the queue

local token, reason = ARGV[4], ARGV[5]
if reason ~= 'release' and reason ~= 'force' and reason ~= 'lost' then
  return redis.error_reply('toolpool lock: unknown release reason ' .. tostring(reason))
end

local now = server_time()
local changed = prune(now)
local result = 0

if forget_holder(token) then
  result = 1
  changed = true
  if reason == 'release' then
    count('releases')
  elseif reason == 'force' then
    count('forced_releases')
  end
elseif reason == 'force' and redis.call('ZSCORE', K_QUEUE, token) then
  forget_waiter(token)
  result = 2
  changed = true
  count('forced_releases')
end
if reason == 'lost' and redis.call('SET', ARGV[6] .. token, '1', 'PX', ARGV[7], 'NX') then
  count('lost_leases')
end

if changed then
  signal()
end
return result
