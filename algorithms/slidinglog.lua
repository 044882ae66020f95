#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- Sliding-window log, atomically: one sorted-set member per admitted request,
-- scored by its time in milliseconds.
--
-- KEYS[1]  the client's log (a sorted set)
-- ARGV[1]  limit: requests admitted per window
-- ARGV[2]  window in milliseconds
-- ARGV[3]  now in milliseconds from the caller, or "" to read Redis's TIME
-- ARGV[4]  this request's member, unique per request
--
-- Returns {allowed (1 or 0), remaining, retry_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if not now then
  -- Redis before 5 replicates scripts verbatim and refuses writes after TIME.
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local asked = now -- the retry-after is told from the caller's own time

-- A caller whose clock is behind the newest logged request is taken to
-- arrive with it: a stale time must not count against a window that a later
-- request already pruned.
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest[2] and tonumber(newest[2]) > now then
  now = tonumber(newest[2])
end

-- A request at time s counts while now - window < s <= now.
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return {1, limit - count - 1, 0}
end

-- Denied: a slot frees when the member that would have to leave for the
-- count to drop below the limit falls out of the window.
local due = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
local retry = tonumber(due[2]) + window - asked
if retry < 1 then
  retry = 1
end
return {0, 0, retry}
