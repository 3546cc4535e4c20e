-- toolpool reader/writer lock: the prelude that toolpool puts in front of every lock script's
-- body (executor/lock/scripts.py joins them once, at load). It is not a script of its own.
--
-- KEYS, the same for every lock script, all inside the scope's hash tag {<prefix>:lock:<scope>}
-- (names built by executor/keys.py, LockKeys.script_keys()):
--   KEYS[1] holders      ZSET   token -> lease expiry, ms on the Redis server clock
--   KEYS[2] holder_info  HASH   token -> JSON {"mode","epoch","seq","lease_ms","acquired_at_ms",
--                               "owner"}; an exclusive grant's fence is epoch * 2^24 + seq
--   KEYS[3] queue        ZSET   token -> ticket: every waiter, in FIFO order
--   KEYS[4] writers      ZSET   token -> ticket: the exclusive waiters only
--   KEYS[5] deadlines    ZSET   token -> waiter liveness deadline, ms
--   KEYS[6] waiter_info  HASH   token -> JSON {"mode","enqueued_at_ms","owner"}; and
--                               token .. ":woken" -> 1 while a signal awaits its re-check
--   KEYS[7] stats        HASH   counter -> count
--   KEYS[8] seq          STRING last ticket handed out
--   KEYS[9] epoch        HASH   replid -> the primary that ran the last script (INFO's
--                               master_replid); epoch -> its epoch; seq -> the last exclusive
--                               grant's number in that epoch
-- ARGV, the same first three for every lock script (a script's own arguments start at ARGV[4]):
--   ARGV[1] policy       "fair" (FIFO with reader batching) | "read_preferring" (readers
--                        first, writers may starve; kept only to show the difference in tests and benchmarks)
--   ARGV[2] wake_prefix  "<tag>:wake:"; a waiter's wake list is wake_prefix .. token. These keys
--                        are derived here rather than passed as KEYS (they are per waiter); they
--                        carry the scope's hash tag, so they live in the same slot as KEYS.
--   ARGV[3] wake_ttl_ms  PEXPIRE of a wake list, so a signal for a waiter that died goes away
--
-- Every script: reads the server clock (and, if it grants or trusts a grant, the primary's
-- epoch), prunes expired holders and waiters (counting them), does its one change, and if
-- anything was freed signals the waiters that can now go.
-- Time comes from redis.call('TIME'), allowed before writes by effects replication (Redis >= 5).
-- Numbers are formatted with %.0f when built into strings: Lua's tostring prints 1.7e+15.

local K_HOLDERS, K_HOLDER_INFO, K_QUEUE, K_WRITERS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_DEADLINES, K_WAITER_INFO, K_STATS = KEYS[5], KEYS[6], KEYS[7]
local K_SEQ, K_EPOCH = KEYS[8], KEYS[9]
local POLICY = ARGV[1]
local WAKE_PREFIX = ARGV[2]
local WAKE_TTL_MS = tonumber(ARGV[3])

if POLICY ~= 'fair' and POLICY ~= 'read_preferring' then
  return redis.error_reply('toolpool lock: unknown policy ' .. tostring(POLICY))
end

local function int(n)
  return string.format('%.0f', n)
end

-- A new epoch is at least the hundredths of a second since this base (2023-11-14), so that a
-- fence, epoch * 2^24 + seq, stays below 2^63 until 2197. The Python side composes and splits
-- fences: Lua's numbers are doubles.
local EPOCH_BASE_MS = 1700000000000
local SEQ_LIMIT = 16777215

-- Milliseconds and microseconds since the epoch, on the one clock every client shares.
local function server_time()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(us / 1000), us
end

local function count(name, by)
  redis.call('HINCRBY', K_STATS, name, by or 1)
end

local function forget_waiter(token)
  redis.call('ZREM', K_QUEUE, token)
  redis.call('ZREM', K_WRITERS, token)
  redis.call('ZREM', K_DEADLINES, token)
  redis.call('HDEL', K_WAITER_INFO, token, token .. ':woken')
  redis.call('DEL', WAKE_PREFIX .. token)
end

local function forget_holder(token)
  redis.call('HDEL', K_HOLDER_INFO, token)
  return redis.call('ZREM', K_HOLDERS, token) == 1
end

-- The epoch of the primary this script runs on. It rises when another server than the one
-- that ran the last script is primary now (a promoted replica, or a restart that lost the
-- data: a new master_replid), to above the epoch replicated from before and at least the
-- hundredths of a second since EPOCH_BASE_MS, so a fence granted here is above every fence granted before,
-- whatever the two servers' clocks say. Holders of an older epoch are not trusted: their lease
-- is cut to lease_ms from now (they may still be running that long, counting their last
-- acknowledged renewal) and renew.lua and check_fence.lua answer them LOST. Returns the epoch
-- and whether it rose here.
local EPOCH, EPOCH_ROSE
local function epoch_of_primary(now)
  local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
  local known = redis.call('HMGET', K_EPOCH, 'replid', 'epoch')
  local epoch = tonumber(known[2]) or 0
  if known[1] == replid then
    return epoch, false
  end
  epoch = math.max(epoch + 1, math.floor((now - EPOCH_BASE_MS) / 10))
  redis.call('HSET', K_EPOCH, 'replid', replid, 'epoch', int(epoch), 'seq', '0')
  for _, token in ipairs(redis.call('ZRANGE', K_HOLDERS, 0, -1)) do
    local raw = redis.call('HGET', K_HOLDER_INFO, token)
    local lease = raw and tonumber(cjson.decode(raw).lease_ms)
    if lease then
      redis.call('ZADD', K_HOLDERS, now + lease, token)
    end
  end
  redis.call('HINCRBY', K_STATS, 'epochs', 1)
  return epoch, true
end

-- Whether a holder's info was granted in the current epoch.
local function of_this_epoch(info)
  return tonumber(info.epoch) == EPOCH
end

-- The next exclusive grant's {epoch, seq}; a seq past 24 bits starts a new epoch (no
-- exclusive grant is made while anyone holds, so no holder is cut by it).
local function next_fence()
  local seq = tonumber(redis.call('HINCRBY', K_EPOCH, 'seq', 1))
  if seq > SEQ_LIMIT then
    EPOCH = EPOCH + 1
    seq = 1
    redis.call('HSET', K_EPOCH, 'epoch', int(EPOCH), 'seq', '1')
  end
  return EPOCH, seq
end

-- Settle EPOCH (and EPOCH_ROSE) for this script: run first by the scripts that grant or
-- trust a grant (acquire, renew, check_fence). The others (release, cancel, status) skip it:
-- reading INFO costs more than the rest of a script, and a bump they miss happens at the
-- next of those three, before any grant is made or trusted.
local function settle_epoch(now)
  EPOCH, EPOCH_ROSE = epoch_of_primary(now)
end

-- Drop holders whose lease ended and waiters that stopped re-checking; true if any went.
local function prune(now)
  local expired = redis.call('ZRANGEBYSCORE', K_HOLDERS, '-inf', now)
  for _, token in ipairs(expired) do
    forget_holder(token)
  end
  local dead = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', now)
  for _, token in ipairs(dead) do
    forget_waiter(token)
  end
  if #expired > 0 then
    count('expired_holders', #expired)
  end
  if #dead > 0 then
    count('expired_waiters', #dead)
  end
  return #expired > 0 or #dead > 0
end

-- How many hold the lock, and whether it is held exclusively. An exclusive holder holds
-- alone, so only a single holder needs its info read.
local function holders_state()
  local n = redis.call('ZCARD', K_HOLDERS)
  if n ~= 1 then
    return n, false
  end
  local token = redis.call('ZRANGE', K_HOLDERS, 0, 0)[1]
  local info = redis.call('HGET', K_HOLDER_INFO, token)
  if not info then
    -- Holder without info cannot happen (both are written together); assume the strongest.
    return 1, true
  end
  return 1, cjson.decode(info).mode == 'exclusive'
end

local function first_writer()
  local w = redis.call('ZRANGE', K_WRITERS, 0, 0, 'WITHSCORES')
  if #w == 0 then
    return nil, nil
  end
  return w[1], tonumber(w[2])
end

-- Whether `token` (queued with `ticket`, or nil when not queued) may take the lock in `mode`.
-- signal() below must wake exactly the waiters for which this is true.
local function may_enter(token, mode, ticket)
  local n, exclusive = holders_state()
  if exclusive then
    return false
  end
  local writer, writer_ticket = first_writer()
  if mode == 'exclusive' then
    if n > 0 then
      return false
    elseif POLICY == 'fair' then
      local head = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
      return head == nil or head == token
    else
      return writer == nil or writer == token
    end
  elseif POLICY == 'fair' then
    -- A reader waits only for writers queued ahead of it.
    return writer == nil or (ticket ~= nil and ticket < writer_ticket)
  else
    return true
  end
end

-- Signal a waiter once per hand-off: not again while a signal is in its list, nor after it
-- took the signal and before it re-checks (acquire clears the mark when the waiter stays
-- queued; forgetting the waiter clears it too). Tokens cannot contain ':', so the mark's
-- field never collides with a token's.
local function wake(token)
  local key = WAKE_PREFIX .. token
  local mark = token .. ':woken'
  if redis.call('HEXISTS', K_WAITER_INFO, mark) == 1 or redis.call('LLEN', key) > 0 then
    return 0
  end
  redis.call('RPUSH', key, '1')
  redis.call('PEXPIRE', key, WAKE_TTL_MS)
  redis.call('HSET', K_WAITER_INFO, mark, '1')
  count('wakeups')
  return 1
end

-- Signal only the waiters that can go now: the head writer, or the readers before the first
-- queued writer (read_preferring: every queued reader, and the first writer if nobody holds).
local function signal()
  local n, exclusive = holders_state()
  if exclusive then
    return 0
  end
  local writer, writer_ticket = first_writer()
  local readers
  if POLICY == 'fair' then
    local upto = '+inf'
    if writer then
      upto = '(' .. int(writer_ticket)
    end
    readers = redis.call('ZRANGEBYSCORE', K_QUEUE, '-inf', upto)
  else
    readers = {}
    for _, token in ipairs(redis.call('ZRANGE', K_QUEUE, 0, -1)) do
      if not redis.call('ZSCORE', K_WRITERS, token) then
        readers[#readers + 1] = token
      end
    end
  end
  local woken = 0
  for _, token in ipairs(readers) do
    woken = woken + wake(token)
  end
  if writer and n == 0 and (POLICY ~= 'fair' or #readers == 0) then
    woken = woken + wake(writer)
  end
  return woken
end

-- ---- end of prelude; the script's body follows ----
