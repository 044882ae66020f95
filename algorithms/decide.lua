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

-- Fixed window: one hash per client, w = window number, n = admitted in it.
-- A caller whose clock is behind counts in the newest window seen, at its
-- start; time never goes back to an older window with a fresh count.
if used['fixed-window'] then
  check['fixed-window'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)
    local ok_, room_, left_, retry_, reset0_, reset1_
    local t_, w_, n_
    t_ = now
    w_ = floor(t_ / window_)
    local stored = redis.call('HMGET', key_, 'w', 'n')
    local sw = tonumber(stored[1])
    if sw and sw > w_ then
      w_ = sw
      t_ = w_ * window_
    end
    local ends = (w_ + 1) * window_
    n_ = 0
    if sw == w_ then
      n_ = tonumber(stored[2])
    end
    ok_ = n_ + need_ <= limit_
    room_ = max(limit_ - n_, 0)
    left_ = limit_ - n_ - take_
    retry_ = ends - asked
    reset0_, reset1_ = 0, 0
    if n_ > 0 then
      reset0_ = ends - asked
    end
    if n_ + take_ > 0 then
      reset1_ = ends - asked
    end
    return ok_, room_, left_, retry_, reset0_, reset1_, t_, w_, n_
  end
  commit['fixed-window'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, t_, w_, n_)
    local mark_
    if n_ == 0 then
      redis.call('HSET', key_, 'w', w_, 'n', take_s_)
      -- The stored window number decides; the expiry only collects the key,
      -- a window late, so that a caller whose clock runs ahead of Redis's
      -- never loses a live count.
      redis.call('PEXPIRE', key_, (w_ + 1) * window_ - t_ + window_)
    else
      redis.call('HINCRBY', key_, 'n', take_s_)
    end
    mark_ = w_
    return mark_
  end
  if refunds then
    refund['fixed-window'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
      local stored = redis.call('HMGET', key_, 'w', 'n')
      if tonumber(stored[1]) == mark_ then
        redis.call('HSET', key_, 'n', max(tonumber(stored[2]) - take_, 0))
      end
    end
  end
end

-- Sliding-window log: a sorted set, one member per admitted unit of cost,
-- scored by its time in ms; a member stamped s counts while
-- now - window < s. A caller whose clock is behind the newest logged
-- request is taken to arrive with it: a stale time must not count against
-- a window that a later request already pruned. Members are only added
-- when admitted, and pruned when one is.
if used['sliding-log'] then
  check['sliding-log'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)
    local ok_, room_, left_, retry_, reset0_, reset1_
    local edge_, t_s_
    local t = now
    t_s_ = now_s
    local newest = redis.call('ZRANGE', key_, -1, -1, 'WITHSCORES')
    local top = tonumber(newest[2])
    if top and top > t then
      t, t_s_ = top, newest[2]
    end
    edge_ = tostring(t - window_)
    local live = '(' .. edge_
    local count = redis.call('ZCOUNT', key_, live, '+inf')
    ok_ = count + need_ <= limit_
    room_ = max(limit_ - count, 0)
    left_ = limit_ - count - take_
    retry_ = 0
    if not ok_ then
      -- A slot frees when the member that must leave, for need to fit, falls
      -- out of the window.
      local due = redis.call('ZRANGEBYSCORE', key_, live, '+inf', 'WITHSCORES', 'LIMIT', count - limit_ + need_ - 1, 1)
      retry_ = max(tonumber(due[2]) + window_ - asked, 1)
    end
    reset0_ = 0
    if count > 0 then
      reset0_ = max(top + window_ - asked, 1)
    end
    reset1_ = reset0_
    if take_ > 0 then
      reset1_ = t + window_ - asked
    end
    return ok_, room_, left_, retry_, reset0_, reset1_, edge_, t_s_
  end
  commit['sliding-log'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, edge_, t_s_)
    local mark_
    redis.call('ZREMRANGEBYSCORE', key_, '-inf', edge_)
    if take_ == 1 then
      redis.call('ZADD', key_, t_s_, member_)
    else
      for i = 1, take_ do
        redis.call('ZADD', key_, t_s_, member_ .. ':' .. i)
      end
    end
    redis.call('PEXPIRE', key_, window_s_)
    mark_ = 0
    return mark_
  end
  if refunds then
    refund['sliding-log'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
      if take_ == 1 then
        redis.call('ZREM', key_, member_)
      else
        for i = 1, take_ do
          redis.call('ZREM', key_, member_ .. ':' .. i)
        end
      end
    end
  end
end

-- Sliding-window counter: two hashes (even and odd windows), w = window
-- number, n = admitted; the previous window's count weighs by how much of
-- it the sliding window still covers. A caller whose clock is behind
-- counts in the newest window seen, at its start.
if used['sliding-counter'] then
  check['sliding-counter'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)
    local ok_, room_, left_, retry_, reset0_, reset1_
    local t_, w_, cur_
    t_ = now
    w_ = floor(t_ / window_)
    local a = redis.call('HMGET', key_, 'w', 'n')
    local b = redis.call('HMGET', key2_, 'w', 'n')
    local aw, bw = tonumber(a[1]), tonumber(b[1])
    local newest = max(aw or -1, bw or -1)
    if newest > w_ then
      w_ = newest
      t_ = w_ * window_
    end
    local cw, cn, pw, pn = aw, a[2], bw, b[2]
    if w_ % 2 == 1 then
      cw, cn, pw, pn = bw, b[2], aw, a[2]
    end
    local prev = 0
    cur_ = 0
    if cw == w_ then
      cur_ = tonumber(cn)
    end
    if pw == w_ - 1 then
      prev = tonumber(pn)
    end
    local elapsed = t_ - w_ * window_
    local weighed = ceil(prev * (window_ - elapsed) / window_)
    -- Admit when prev * (window - elapsed) / window + cur + need <= limit, in integers.
    local room = (limit_ - cur_ - need_) * window_
    ok_ = cur_ + need_ <= limit_ and prev * (window_ - elapsed) <= room
    room_ = max(limit_ - cur_ - weighed, 0)
    left_ = max(limit_ - cur_ - take_ - weighed, 0)
    retry_ = 0
    if not ok_ then
      if cur_ + need_ <= limit_ then
        -- Later in this window, as the previous window's weight falls.
        retry_ = w_ * window_ + window_ - floor(room / prev) - t_
      else
        -- In the next window, where this window's count weighs as the previous one.
        retry_ = (w_ + 1) * window_ + window_ - floor((limit_ - need_) * window_ / cur_) - t_
      end
      retry_ = max(retry_ + t_ - asked, 1)
    end
    -- This window's count weighs until the end of the next one.
    reset0_, reset1_ = 0, 0
    if cur_ > 0 then
      reset0_ = (w_ + 2) * window_ - asked
    elseif prev > 0 then
      reset0_ = (w_ + 1) * window_ - asked
    end
    if cur_ + take_ > 0 then
      reset1_ = (w_ + 2) * window_ - asked
    elseif prev > 0 then
      reset1_ = (w_ + 1) * window_ - asked
    end
    return ok_, room_, left_, retry_, reset0_, reset1_, t_, w_, cur_
  end
  commit['sliding-counter'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, t_, w_, cur_)
    local mark_
    local key = key_
    if w_ % 2 == 1 then
      key = key2_
    end
    redis.call('HSET', key, 'w', w_, 'n', cur_ + take_)
    -- The count is read until the end of the next window.
    redis.call('PEXPIRE', key, (w_ + 2) * window_ - t_)
    mark_ = w_
    return mark_
  end
  if refunds then
    refund['sliding-counter'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
      local key = key_
      if mark_ % 2 == 1 then
        key = key2_
      end
      local stored = redis.call('HMGET', key, 'w', 'n')
      if tonumber(stored[1]) == mark_ then
        redis.call('HSET', key, 'n', max(tonumber(stored[2]) - take_, 0))
      end
    end
  end
end

-- Token bucket: a hash, u = units held (a token is `window` units, refilled
-- at `limit` units per ms, at most `burst` tokens), t = time of the last
-- update. A caller whose clock is behind the last update refills nothing,
-- and never moves the update time back (which would refill it twice).
if used['token-bucket'] then
  check['token-bucket'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)
    local ok_, room_, left_, retry_, reset0_, reset1_
    local t_s_, units_, full_
    local t = now
    t_s_ = now_s
    full_ = burst_ * window_
    local stored = redis.call('HMGET', key_, 'u', 't')
    units_ = full_
    if stored[1] then
      local last = tonumber(stored[2])
      units_ = tonumber(stored[1])
      if t > last then
        units_ = min(full_, units_ + (t - last) * limit_)
      else
        t, t_s_ = last, stored[2]
      end
    end
    ok_ = units_ >= need_ * window_
    room_ = floor(units_ / window_)
    left_ = floor((units_ - take_ * window_) / window_)
    retry_ = 0
    if not ok_ then
      retry_ = ceil((need_ * window_ - units_) / limit_) + t - asked
    end
    reset0_ = ceil((full_ - units_) / limit_) + t - asked
    reset1_ = ceil((full_ - units_ + take_ * window_) / limit_) + t - asked
    return ok_, room_, left_, retry_, reset0_, reset1_, t_s_, units_, full_
  end
  commit['token-bucket'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, t_s_, units_, full_)
    local mark_
    local units = units_ - take_ * window_
    redis.call('HSET', key_, 'u', units, 't', t_s_)
    -- Once full again the bucket is the same as no bucket; the expiry only
    -- collects it, a window late.
    redis.call('PEXPIRE', key_, ceil((full_ - units) / limit_) + window_)
    mark_ = 0
    return mark_
  end
  if refunds then
    refund['token-bucket'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
      local stored = redis.call('HMGET', key_, 'u', 't')
      if stored[1] then
        redis.call('HSET', key_, 'u', min(tonumber(stored[1]) + take_ * window_, burst_ * window_))
      end
    end
  end
end

-- GCRA: a hash, t = time of the last update, d = (TAT - t) * limit; a
-- request is admitted while the TAT it sets is within `burst` emission
-- intervals (each `window` scaled) of now.
if used['gcra'] then
  check['gcra'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)
    local ok_, room_, left_, retry_, reset0_, reset1_
    local d_, t_s_
    local cap = window_ * burst_
    t_s_ = now_s
    d_ = 0
    local stored = redis.call('HMGET', key_, 't', 'd')
    if stored[1] then
      d_ = max(tonumber(stored[2]) - (now - tonumber(stored[1])) * limit_, 0)
    end
    local next_d = d_ + need_ * window_
    ok_ = next_d <= cap
    room_ = max(floor((cap - d_) / window_), 0)
    left_ = floor((cap - d_ - take_ * window_) / window_)
    retry_ = 0
    if not ok_ then
      retry_ = ceil((next_d - cap) / limit_)
    end
    reset0_ = ceil(d_ / limit_)
    reset1_ = ceil((d_ + take_ * window_) / limit_)
    return ok_, room_, left_, retry_, reset0_, reset1_, d_, t_s_
  end
  commit['gcra'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, d_, t_s_)
    local mark_
    local d = d_ + take_ * window_
    redis.call('HSET', key_, 't', t_s_, 'd', d)
    -- Once the TAT has passed the state is the same as none; the expiry only
    -- collects it, a window late.
    redis.call('PEXPIRE', key_, ceil(d / limit_) + window_)
    mark_ = 0
    return mark_
  end
  if refunds then
    refund['gcra'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
      local stored = redis.call('HMGET', key_, 't', 'd')
      if stored[1] then
        redis.call('HSET', key_, 'd', max(tonumber(stored[2]) - take_ * window_, 0))
      end
    end
  end
end

-- In-flight: a sorted set of leases, one member per request in flight,
-- scored by the time in ms its lease ends; a lease scored s holds its slot
-- while now < s. The limit is the most in flight at once, the window the
-- lease. A request's lease is added when it is admitted and removed when
-- it ends (a ZREM of its member, which a second time removes nothing), or
-- when its lease runs out, whoever held it having gone without a word.
-- Expired leases are pruned when one is added.
if used['in-flight'] then
  check['in-flight'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)
    local ok_, room_, left_, retry_, reset0_, reset1_
    local until_, ttl_, edge_
    edge_ = now_s
    local live = '(' .. now_s
    local count = redis.call('ZCOUNT', key_, live, '+inf')
    ok_ = count + need_ <= limit_
    room_ = max(limit_ - count, 0)
    left_ = limit_ - count - take_
    -- A slot frees when a request in flight ends, which no one can foresee:
    -- retry at once, a lease's end being only the latest it frees.
    retry_ = 1
    until_ = now + window_
    local last = 0
    if count > 0 then
      last = tonumber(redis.call('ZRANGE', key_, -1, -1, 'WITHSCORES')[2])
    end
    reset0_ = 0
    if last > now then
      reset0_ = max(last - asked, 1)
    end
    reset1_ = reset0_
    if take_ > 0 then
      reset1_ = max(until_, last) - asked
    end
    ttl_ = max(until_, last) - now
    return ok_, room_, left_, retry_, reset0_, reset1_, until_, ttl_, edge_
  end
  commit['in-flight'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, until_, ttl_, edge_)
    local mark_
    redis.call('ZREMRANGEBYSCORE', key_, '-inf', edge_)
    if take_ == 1 then
      redis.call('ZADD', key_, until_, member_)
    else
      for i = 1, take_ do
        redis.call('ZADD', key_, until_, member_ .. ':' .. i)
      end
    end
    redis.call('PEXPIRE', key_, ttl_)
    mark_ = 0
    return mark_
  end
  if refunds then
    refund['in-flight'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)
      if take_ == 1 then
        redis.call('ZREM', key_, member_)
      else
        for i = 1, take_ do
          redis.call('ZREM', key_, member_ .. ':' .. i)
        end
      end
    end
  end
end

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
