#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- Every algorithm of ratelab in one script: the nginx module runs it, and
-- the Decider for refunds and for requests of more limits than its
-- scripts built per shape hold. Built from algorithms/lua (this driver and
-- one file per algorithm) by go generate ./algorithms: edit there.
--
-- One decision over several limits, each with its own algorithm: every
-- limit is checked first, reading only; then, only if every limit that is
-- not in shadow admits, every limit that admitted is consumed. A request
-- denied by any limit changes nothing in any of them. Each algorithm is a
-- check and a commit: check reads the limit's state and says whether it
-- admits, what would remain and when it admits again; commit writes what
-- check decided. The same script gives back what a decision consumed (mode
-- "refund"), when a Cluster's second call denied what the first admitted:
-- each limit gets back its cost, as long as the state it was written into
-- still counts.
--
-- KEYS     each limit's keys in turn: two for sliding-counter (even and odd
--          windows), one for the others
-- ARGV[1]  "decide" or "refund"
-- ARGV[2]  now in milliseconds from the caller, or "" to read Redis's TIME
-- ARGV[3]  the number of limits
-- then 8 per limit:
--          algorithm, limit, window in ms, cost (0 checks without
--          consuming), shadow (1 counts but never denies), for sliding-log
--          and in-flight the base of this request's members ("" otherwise),
--          for a refund
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
--
-- Joined requests: KEYS and ARGV may hold several requests' keys and
-- arguments one after the other (ratelab's batcher joins the calls waiting
-- together into one); the reply is then the array of their replies, in
-- turn, each what it would be alone, or the error that request alone met.
-- Each is decided as if called on its own, in order, in one atomic run;
-- Redis's TIME is read once for all.
--
-- A decision's cost is Redis's time, and Redis's Lua makes some things
-- dear: each redis.call, a number passed to one (formatted with %.17g:
-- where a string from ARGV or from a reply holds the same value, it is
-- passed as it came), and each function and table a run makes (only the
-- algorithms a run names get theirs).
local floor, ceil, max, min, tonumber, tostring = math.floor, math.ceil, math.max, math.min, tonumber, tostring

-- Redis's time in ms, and as text, read at most once per run.
local clock, clock_s
local function redis_time()
  if not clock then
    -- Redis before 5 replicates scripts verbatim and refuses writes after TIME.
    if redis.replicate_commands then
      redis.replicate_commands()
    end
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
    clock_s = tostring(clock)
  end
  return clock, clock_s
end

-- Where each request's arguments and keys start, the algorithms the run
-- names, and whether it refunds.
local starts, keyed, used, refunds = {}, {}, {}, false
do
  local a, k = 1, 1
  while a <= #ARGV do
    starts[#starts + 1], keyed[#keyed + 1] = a, k
    if ARGV[a] == 'refund' then
      refunds = true
    end
    local n = tonumber(ARGV[a + 2]) or 0
    for i = 1, n do
      local alg = ARGV[a + 3 + (i - 1) * 8]
      used[alg] = true
      k = k + 1
      if alg == 'sliding-counter' then
        k = k + 1
      end
    end
    a = a + 3 + 8 * n
  end
end

-- Each check(key_, key2_, now, now_s, asked, limit_, window_, burst_,
-- need_, take_) returns ok (admits need), room (remaining now), left
-- (remaining once take is consumed), retry (ms, read when denied), reset0
-- and reset1 (ms until whole, without and with the consumption), then the
-- state its commit(key_, key2_, limit_, window_, burst_, take_, take_s_,
-- window_s_, member_, state...) takes; commit writes and returns the mark.
-- refund(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
-- gives back take. asked is the time the caller asked at: retry-after and
-- reset are told from it, when the state moved now later.
local check, commit, refund = {}, {}, {}

-- @algorithms

-- What a request's limits were given and what their checks said, by limit;
-- kept for its commits, and reused by the next request of the run.
local K1, K2, LIMIT, WINDOW, TAKE, BURST = {}, {}, {}, {}, {}, {}
local OK, ROOM, LEFT, RETRY, RESET0, RESET1, S1, S2, S3 = {}, {}, {}, {}, {}, {}, {}, {}, {}

-- request decides the request whose arguments start at ARGV[a] and keys at
-- KEYS[k], and returns its reply.
local function request(a, k)
  local mode = ARGV[a]
  local now, now_s = tonumber(ARGV[a + 1]), ARGV[a + 1]
  if not now then
    now, now_s = redis_time()
  end
  local n = tonumber(ARGV[a + 2])
  local allowed = true
  for i = 1, n do
    local at = a + 3 + (i - 1) * 8
    local alg = ARGV[at]
    local f = check[alg]
    if not f then
      return redis.error_reply('ERR unknown algorithm ' .. tostring(alg))
    end
    local limit, window, take, burst = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 7])
    local k1, k2 = KEYS[k], nil
    if alg == 'sliding-counter' then
      k2 = KEYS[k + 1]
      k = k + 2
    else
      k = k + 1
    end
    if mode == 'refund' then
      refund[alg](k1, k2, limit, window, burst, take, ARGV[at + 5], tonumber(ARGV[at + 6]))
    end
    -- A check of cost 0 admits while one request would be.
    local ok, room, left, retry, reset0, reset1, s1, s2, s3 = f(k1, k2, now, now_s, now, limit, window, burst, max(take, 1), take)
    if not ok and ARGV[at + 4] ~= '1' then
      allowed = false
    end
    K1[i], K2[i], LIMIT[i], WINDOW[i], TAKE[i], BURST[i] = k1, k2, limit, window, take, burst
    OK[i], ROOM[i], LEFT[i], RETRY[i], RESET0[i], RESET1[i], S1[i], S2[i], S3[i] = ok, room, left, retry, reset0, reset1, s1, s2, s3
  end
  local reply = {0}
  if allowed then
    reply[1] = 1
  end
  for i = 1, n do
    local at = a + 3 + (i - 1) * 8
    local ok, mark, remaining, retry, reset = 0, 0, ROOM[i], 0, RESET0[i]
    if OK[i] then
      ok = 1
      if mode == 'decide' and allowed and TAKE[i] > 0 then
        mark = commit[ARGV[at]](K1[i], K2[i], LIMIT[i], WINDOW[i], BURST[i], TAKE[i], ARGV[at + 3], ARGV[at + 2], ARGV[at + 5], S1[i], S2[i], S3[i])
        remaining, reset = LEFT[i], RESET1[i]
      end
    else
      retry = RETRY[i]
    end
    local r = 5 * i - 3
    reply[r], reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = ok, remaining, retry, max(reset, 0), mark
  end
  return reply
end

if #starts == 1 then
  return request(1, 1)
end

-- Joined: each request decided in turn, its error its own.
local replies = {}
for j = 1, #starts do
  local ok, reply = pcall(request, starts[j], keyed[j])
  if not ok then
    if type(reply) == 'table' and reply.err then
      reply = redis.error_reply(reply.err)
    else
      reply = redis.error_reply(tostring(reply))
    end
  end
  replies[j] = reply
end
return replies
