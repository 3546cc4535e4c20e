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
-- Returns {code, value, now_ms}:
--    1 GRANTED        value = fence (0 for shared); the token holds the lock now
--    2 ALREADY_HELD   value = fence; the token held it in this mode (a retried acquire whose
--                     reply was lost); its lease is renewed
--    0 QUEUED         value = 1-based queue position; the waiter's deadline is refreshed
--    3 WOULD_WAIT     value = 0; may_enqueue was "0" and the lock is not free; nothing changed
--   -1 MODE_CONFLICT  value = 0; the token holds or waits for the lock in the other mode

local token, mode = ARGV[4], ARGV[5]
local lease_ms, waiter_ttl_ms = tonumber(ARGV[6]), tonumber(ARGV[7])
local may_enqueue, owner = ARGV[8] == '1', ARGV[9]
if mode ~= 'shared' and mode ~= 'exclusive' then
  return redis.error_reply('toolpool lock: unknown mode ' .. tostring(mode))
end

local now, now_us = server_time()
local changed = prune(now)

local function decide()
  if redis.call('ZSCORE', K_HOLDERS, token) then
    local info = cjson.decode(redis.call('HGET', K_HOLDER_INFO, token))
    if info.mode ~= mode then
      return {-1, 0, now}
    end
    redis.call('ZADD', K_HOLDERS, 'XX', now + lease_ms, token)
    return {2, info.fence, now}
  end

  -- ZSCORE answers false (not nil) for a missing member; may_enter wants nil.
  local ticket = redis.call('ZSCORE', K_QUEUE, token) or nil
  if ticket then
    ticket = tonumber(ticket)
    local queued_exclusive = redis.call('ZSCORE', K_WRITERS, token) ~= false
    if queued_exclusive ~= (mode == 'exclusive') then
      return {-1, 0, now}
    end
  end

  if may_enter(token, mode, ticket) then
    if ticket then
      forget_waiter(token)
    end
    redis.call('ZADD', K_HOLDERS, now + lease_ms, token)
    local fence = 0
    if mode == 'exclusive' then
      -- Never backwards, even after a restart without persistence: the counter is floored by
      -- the server clock in microseconds, which only moves forward (as long as the host
      -- clock is not stepped back) and which grants cannot outrun (each takes over 1 us).
      local last = tonumber(redis.call('GET', K_FENCE) or '0')
      fence = math.max(last + 1, now_us)
      redis.call('SET', K_FENCE, int(fence))
    end
    redis.call('HSET', K_HOLDER_INFO, token,
      '{"mode":"' .. mode .. '","fence":' .. int(fence) .. ',"acquired_at_ms":' .. int(now)
        .. ',"owner":' .. owner .. '}')
    count('grants_' .. mode)
    return {1, fence, now}
  end

  if not ticket then
    if not may_enqueue then
      return {3, 0, now}
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
  return {0, redis.call('ZRANK', K_QUEUE, token) + 1, now}
end

local reply = decide()
-- After the caller's own outcome, so a grant to the caller is never also signalled to it.
if changed then
  signal()
end
return reply
