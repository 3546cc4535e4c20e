-- acquire: take the lock for a token, or queue it (or refresh its place in the queue).
--
-- KEYS[1..9] and ARGV[1..3]: see _prelude.lua (holders, holder_info, queue, writers,
--   deadlines, waiter_info, stats, seq, fence; policy, wake_prefix, wake_ttl_ms).
--   Also touches wake_prefix .. token (deleted on grant) and, when pruning frees the lock,
--   other waiters' wake lists.
-- ARGV[4] token          the caller's lease token
-- ARGV[5] mode           "shared" | "exclusive"
-- ARGV[6] lease_ms       lease length on grant (and on an idempotent re-acquire)
-- ARGV[7] waiter_ttl_ms  how long a queued waiter stays without re-checking
-- ARGV[8] may_enqueue    "1": queue when the lock is not free; "0": only try
-- ARGV[9] owner          JSON object describing the caller (worker, host, pid, call_id, tool)
--
-- Returns {code, value, now_ms, epoch}:
--    1 GRANTED        value = the grant's seq (0 for shared); the token holds the lock now; its
--                     fence is epoch * 2^24 + seq
--    2 ALREADY_HELD   value = the grant's seq; the token held it in this mode and this epoch (a
--                     retried acquire whose reply was lost); its lease is renewed
--    0 QUEUED         value = 1-based queue position; the waiter's deadline is refreshed
--    3 WOULD_WAIT     value = 0; may_enqueue was "0" and the lock is not free; nothing changed
--   -1 MODE_CONFLICT  value = 0; the token holds or waits for the lock in the other mode
--    4 STALE          value = 0; the token holds a grant of an older epoch (from before a
--                     failover): it is not renewed, and its holder must treat it as lost

local token, mode = ARGV[4], ARGV[5]
local lease_ms, waiter_ttl_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local may_enqueue, owner = ARGV[8] == '1', ARGV[9]
if mode ~= 'shared' and mode ~= 'exclusive' then
  return redis.error_reply('toolpool lock: unknown mode ' .. tostring(mode))
end

local now = server_time()
settle_epoch(now)
local changed = prune(now)

local function decide()
  if redis.call('ZSCORE', K_HOLDERS, token) then
    local info = cjson.decode(redis.call('HGET', K_HOLDER_INFO, token))
    if info.mode ~= mode then
      return {-1, 0, now, EPOCH}
    end
    if not of_this_epoch(info) then
      return {4, 0, now, EPOCH}
    end
    redis.call('ZADD', K_HOLDERS, 'XX', now + lease_ms, token)
    return {2, tonumber(info.seq) or 0, now, EPOCH}
  end

  -- ZSCORE answers false (not nil) for a missing member; may_enter wants nil.
  local ticket = redis.call('ZSCORE', K_QUEUE, token) or nil
  if ticket then
    ticket = tonumber(ticket)
    local queued_exclusive = redis.call('ZSCORE', K_WRITERS, token) ~= false
    if queued_exclusive ~= (mode == 'exclusive') then
      return {-1, 0, now, EPOCH}
    end
  end

  if may_enter(token, mode, ticket) then
    if ticket then
      forget_waiter(token)
    end
    redis.call('ZADD', K_HOLDERS, now + lease_ms, token)
    -- Never backwards: the seq rises within an epoch, and a new epoch starts above the last
    -- (see epoch_of_primary in the prelude).
    local seq = 0
    if mode == 'exclusive' then
      local _
      _, seq = next_fence()
    end
    redis.call('HSET', K_HOLDER_INFO, token,
      '{"mode":"' .. mode .. '","epoch":' .. int(EPOCH) .. ',"seq":' .. int(seq)
        .. ',"lease_ms":' .. int(lease_ms) .. ',"acquired_at_ms":' .. int(now)
        .. ',"owner":' .. owner .. '}')
    count('grants_' .. mode)
    return {1, seq, now, EPOCH}
  end

  if not ticket then
    if not may_enqueue then
      return {3, 0, now, EPOCH}
    end
    ticket = redis.call('INCR', K_SEQ)
    redis.call('ZADD', K_QUEUE, ticket, token)
    if mode == 'exclusive' then
      redis.call('ZADD', K_WRITERS, ticket, token)
    end
    redis.call('HSET', K_WAITER_INFO, token,
      '{"mode":"' .. mode .. '","enqueued_at_ms":' .. int(now) .. ',"owner":' .. owner .. '}')
  end
  redis.call('ZADD', K_DEADLINES, now + waiter_ttl_ms, token)
  -- The waiter re-checked and must wait on: a later hand-off may signal it again.
  redis.call('HDEL', K_WAITER_INFO, token .. ':woken')
  return {0, redis.call('ZRANK', K_QUEUE, token) + 1, now, EPOCH}
end

local reply = decide()
-- After the caller's own outcome, so a grant to the caller is never also signalled to it.
if changed then
  signal()
end
return reply
