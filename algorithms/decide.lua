#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- One decision over several limits, each with its own algorithm: every
-- limit is checked first, reading only; then, only if every limit that is
-- not in shadow admits, every limit that admitted is consumed. A request
-- denied by any limit changes nothing in any of them.
--
-- Each algorithm is a check and a commit: check reads the limit's state and
-- says whether it admits, what would remain and when it admits again; commit
-- writes what check decided. They keep the state of this package's
-- single-limit scripts (fixedwindow.lua, slidinglog.lua, slidingcounter.lua,
-- tokenbucket.lua, gcra.lua) and decide as they do, for any cost.
--
-- The same script gives back what a decision consumed (mode "refund"), when
-- a Cluster's second call denied what the first admitted: each limit gets
-- back its cost, as long as the state it was written into still counts.
--
-- KEYS     each limit's keys in turn: two for sliding-counter (even and odd
--          windows), one for the others
-- ARGV[1]  "decide" or "refund"
-- ARGV[2]  now in milliseconds from the caller, or "" to read Redis's TIME
-- ARGV[3]  the number of limits
-- then 8 per limit:
--          algorithm, limit, window in ms, cost (0 checks without
--          consuming), shadow (1 counts but never denies), for sliding-log
--          the base of this request's members ("" otherwise), for a refund
--          the mark the decision returned ("0" otherwise), and the burst:
--          for token-bucket and gcra the most admitted at one instant (the
--          bucket's capacity, refilled at limit per window), the limit
--          otherwise
--
-- Returns {allowed, then per limit: allowed, remaining, retry_after_ms,
-- reset_ms, mark}: remaining after this request (when it was consumed) or
-- now (when not); reset_ms the time until the limit is whole again; mark
-- the window number written (fixed-window, sliding-counter), for a refund.
-- A refund returns the same shape, each limit checked again once refunded.
local mode = ARGV[1]
local now = tonumber(ARGV[2])
if not now then
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local asked = now -- retry-after and reset are told from the caller's own time

local function clamp1(ms)
  if ms < 1 then
    return 1
  end
  return ms
end

-- Each check sets on c: ok (admits need), room (remaining now), left
-- (remaining once take is consumed), retry (ms, when denied), reset0 and
-- reset1 (ms until whole, without and with the consumption), and what
-- commit needs.
local check, commit = {}, {}

-- A script's functions are made afresh on every call, which costs Redis
-- time and garbage: only the algorithms this call names get theirs.
local used = {}
for i = 1, tonumber(ARGV[3]) do
  used[ARGV[3 + (i - 1) * 8 + 1]] = true
end

-- Fixed window: one hash per client, w = window number, n = admitted in it.
if used['fixed-window'] then
  check['fixed-window'] = function(c)
    local t = now
    local w = math.floor(t / c.window)
    local stored = redis.call('HMGET', c.keys[1], 'w', 'n')
    local sw = tonumber(stored[1])
    if sw and sw > w then
      w = sw
      t = w * c.window
    end
    local ends = (w + 1) * c.window
    local n = 0
    if sw == w then
      n = tonumber(stored[2])
    end
    c.ok = n + c.need <= c.limit
    c.room = math.max(c.limit - n, 0)
    c.left = c.limit - n - c.take
    c.retry = ends - asked
    c.reset0, c.reset1 = 0, 0
    if n > 0 then
      c.reset0 = ends - asked
    end
    if n + c.take > 0 then
      c.reset1 = ends - asked
    end
    c.t, c.w, c.n, c.ends = t, w, n, ends
  end
  commit['fixed-window'] = function(c)
    redis.call('HSET', c.keys[1], 'w', c.w, 'n', c.n + c.take)
    if c.n == 0 then
      redis.call('PEXPIRE', c.keys[1], c.ends - c.t + c.window)
    end
    c.mark = c.w
  end
end

-- Sliding-window log: a sorted set, one member per admitted unit of cost,
-- scored by its time in ms; a member stamped s counts while now - window < s.
if used['sliding-log'] then
  check['sliding-log'] = function(c)
    local key, t = c.keys[1], now
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if newest[2] and tonumber(newest[2]) > t then
      t = tonumber(newest[2])
    end
    local live = '(' .. (t - c.window)
    local count = redis.call('ZCOUNT', key, live, '+inf')
    c.ok = count + c.need <= c.limit
    c.room = math.max(c.limit - count, 0)
    c.left = c.limit - count - c.take
    c.retry = 0
    if not c.ok then
      -- A slot frees when the member that must leave, for need to fit, falls
      -- out of the window.
      local due = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', count - c.limit + c.need - 1, 1)
      c.retry = clamp1(tonumber(due[2]) + c.window - asked)
    end
    c.reset0, c.reset1 = 0, 0
    if count > 0 then
      c.reset0 = clamp1(tonumber(newest[2]) + c.window - asked)
    end
    if c.take > 0 then
      c.reset1 = t + c.window - asked
    else
      c.reset1 = c.reset0
    end
    c.t = t
  end
  commit['sliding-log'] = function(c)
    local key = c.keys[1]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', c.t - c.window)
    if c.take == 1 then
      redis.call('ZADD', key, c.t, c.member)
    else
      for i = 1, c.take do
        redis.call('ZADD', key, c.t, c.member .. ':' .. i)
      end
    end
    redis.call('PEXPIRE', key, c.window)
    c.mark = 0
  end
end

-- Sliding-window counter: two hashes (even and odd windows), w = window
-- number, n = admitted; the previous window's count weighs by how much of
-- it the sliding window still covers.
if used['sliding-counter'] then
  check['sliding-counter'] = function(c)
    local t, window, limit = now, c.window, c.limit
    local w = math.floor(t / window)
    local a = redis.call('HMGET', c.keys[1], 'w', 'n')
    local b = redis.call('HMGET', c.keys[2], 'w', 'n')
    local newest = math.max(tonumber(a[1]) or -1, tonumber(b[1]) or -1)
    if newest > w then
      w = newest
      t = w * window
    end
    local function count(v, want)
      if tonumber(v[1]) == want then
        return tonumber(v[2])
      end
      return 0
    end
    local stored = {a, b}
    local cur = count(stored[1 + w % 2], w)
    local prev = count(stored[1 + (w + 1) % 2], w - 1)
    local elapsed = t - w * window
    local weighed = math.ceil(prev * (window - elapsed) / window)
    -- Admit when prev * (window - elapsed) / window + cur + need <= limit, in integers.
    local room = (limit - cur - c.need) * window
    c.ok = cur + c.need <= limit and prev * (window - elapsed) <= room
    c.room = math.max(limit - cur - weighed, 0)
    c.left = math.max(limit - cur - c.take - weighed, 0)
    c.retry = 0
    if not c.ok then
      local retry
      if cur + c.need <= limit then
        -- Later in this window, as the previous window's weight falls.
        retry = w * window + window - math.floor(room / prev) - t
      else
        -- In the next window, where this window's count weighs as the previous one.
        retry = (w + 1) * window + window - math.floor((limit - c.need) * window / cur) - t
      end
      c.retry = clamp1(retry + t - asked)
    end
    -- This window's count weighs until the end of the next one.
    local function reset(n)
      if n > 0 then
        return (w + 2) * window - asked
      elseif prev > 0 then
        return (w + 1) * window - asked
      end
      return 0
    end
    c.reset0, c.reset1 = reset(cur), reset(cur + c.take)
    c.t, c.w, c.cur = t, w, cur
  end
  commit['sliding-counter'] = function(c)
    local key = c.keys[1 + c.w % 2]
    redis.call('HSET', key, 'w', c.w, 'n', c.cur + c.take)
    redis.call('PEXPIRE', key, (c.w + 2) * c.window - c.t)
    c.mark = c.w
  end
end

-- Token bucket: a hash, u = units held (a token is `window` units, refilled
-- at `limit` units per ms, at most `burst` tokens), t = time of the last
-- update.
if used['token-bucket'] then
  check['token-bucket'] = function(c)
    local t, window, limit = now, c.window, c.limit
    local full = c.burst * window
    local stored = redis.call('HMGET', c.keys[1], 'u', 't')
    local units = full
    if stored[1] then
      local last = tonumber(stored[2])
      units = tonumber(stored[1])
      if t > last then
        units = math.min(full, units + (t - last) * limit)
      else
        t = last
      end
    end
    c.ok = units >= c.need * window
    c.room = math.floor(units / window)
    c.left = math.floor((units - c.take * window) / window)
    c.retry = 0
    if not c.ok then
      c.retry = math.ceil((c.need * window - units) / limit) + t - asked
    end
    c.reset0 = math.ceil((full - units) / limit) + t - asked
    c.reset1 = math.ceil((full - units + c.take * window) / limit) + t - asked
    c.t, c.units, c.full = t, units, full
  end
  commit['token-bucket'] = function(c)
    local units = c.units - c.take * c.window
    redis.call('HSET', c.keys[1], 'u', units, 't', c.t)
    redis.call('PEXPIRE', c.keys[1], math.ceil((c.full - units) / c.limit) + c.window)
    c.mark = 0
  end
end

-- GCRA: a hash, t = time of the last update, d = (TAT - t) * limit; a
-- request is admitted while the TAT it sets is within `burst` emission
-- intervals (each `window` scaled) of now.
if used['gcra'] then
  check['gcra'] = function(c)
    local window, limit = c.window, c.limit
    local burst = window * c.burst
    local d = 0
    local stored = redis.call('HMGET', c.keys[1], 't', 'd')
    if stored[1] then
      d = math.max(tonumber(stored[2]) - (now - tonumber(stored[1])) * limit, 0)
    end
    local next_d = d + c.need * window
    c.ok = next_d <= burst
    c.room = math.max(math.floor((burst - d) / window), 0)
    c.left = math.floor((burst - d - c.take * window) / window)
    c.retry = 0
    if not c.ok then
      c.retry = math.ceil((next_d - burst) / limit)
    end
    c.reset0 = math.ceil(d / limit)
    c.reset1 = math.ceil((d + c.take * window) / limit)
    c.d = d
  end
  commit['gcra'] = function(c)
    local d = c.d + c.take * c.window
    redis.call('HSET', c.keys[1], 't', now, 'd', d)
    redis.call('PEXPIRE', c.keys[1], math.ceil(d / c.limit) + c.window)
    c.mark = 0
  end
end

-- Each refund gives back what commit wrote, if the state still counts it.
local refund = {}
if mode == 'refund' then
  refund['fixed-window'] = function(c)
    local stored = redis.call('HMGET', c.keys[1], 'w', 'n')
    if tonumber(stored[1]) == c.mark then
      redis.call('HSET', c.keys[1], 'n', math.max(tonumber(stored[2]) - c.take, 0))
    end
  end
  refund['sliding-log'] = function(c)
    if c.take == 1 then
      redis.call('ZREM', c.keys[1], c.member)
    else
      for i = 1, c.take do
        redis.call('ZREM', c.keys[1], c.member .. ':' .. i)
      end
    end
  end
  refund['sliding-counter'] = function(c)
    local key = c.keys[1 + c.mark % 2]
    local stored = redis.call('HMGET', key, 'w', 'n')
    if tonumber(stored[1]) == c.mark then
      redis.call('HSET', key, 'n', math.max(tonumber(stored[2]) - c.take, 0))
    end
  end
  refund['token-bucket'] = function(c)
    local stored = redis.call('HMGET', c.keys[1], 'u', 't')
    if stored[1] then
      local full = c.burst * c.window
      redis.call('HSET', c.keys[1], 'u', math.min(tonumber(stored[1]) + c.take * c.window, full))
    end
  end
  refund['gcra'] = function(c)
    local stored = redis.call('HMGET', c.keys[1], 't', 'd')
    if stored[1] then
      redis.call('HSET', c.keys[1], 'd', math.max(tonumber(stored[2]) - c.take * c.window, 0))
    end
  end
end

local n = tonumber(ARGV[3])
local checks = {}
local allowed = true
local k = 1
for i = 1, n do
  local a = 3 + (i - 1) * 8
  local c = {
    alg = ARGV[a + 1],
    limit = tonumber(ARGV[a + 2]),
    window = tonumber(ARGV[a + 3]),
    take = tonumber(ARGV[a + 4]),
    shadow = ARGV[a + 5] == '1',
    member = ARGV[a + 6],
    mark = tonumber(ARGV[a + 7]),
    burst = tonumber(ARGV[a + 8]),
  }
  if not check[c.alg] then
    return redis.error_reply('ERR unknown algorithm ' .. tostring(c.alg))
  end
  -- A check of cost 0 admits while one request would be.
  c.need = math.max(c.take, 1)
  if c.alg == 'sliding-counter' then
    c.keys = {KEYS[k], KEYS[k + 1]}
    k = k + 2
  else
    c.keys = {KEYS[k]}
    k = k + 1
  end
  if mode == 'refund' then
    refund[c.alg](c)
  end
  check[c.alg](c)
  if not c.ok and not c.shadow then
    allowed = false
  end
  checks[i] = c
end

local reply = {0}
if allowed then
  reply[1] = 1
end
for i, c in ipairs(checks) do
  local consumed = mode == 'decide' and allowed and c.ok and c.take > 0
  c.mark = 0
  if consumed then
    commit[c.alg](c)
  end
  local ok, remaining, retry, reset = 0, c.room, 0, c.reset0
  if c.ok then
    ok = 1
  else
    retry = c.retry
  end
  if consumed then
    remaining, reset = c.left, c.reset1
  end
  local r = #reply
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4], reply[r + 5] = ok, remaining, retry, math.max(reset, 0), c.mark
end
return reply
