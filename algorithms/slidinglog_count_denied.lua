#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- A broken sliding-window log, kept to be raced: it logs every request,
-- denied ones included, before it counts. A client that keeps retrying keeps
-- its own log full and is never admitted again, however long the window.
--
-- KEYS and ARGV as in slidinglog.lua. Returns {allowed, remaining, retry_after_ms}.
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

redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
-- The mistake: the request is logged whether or not it will be admitted.
redis.call('ZADD', key, now, ARGV[4])
redis.call('PEXPIRE', key, window)
local count = redis.call('ZCARD', key)
if count <= limit then
  return {1, limit - count, 0}
end
-- The next request is admitted once the log holds fewer than limit members.
local due = redis.call('ZRANGE', key, count - limit, count - limit, 'WITHSCORES')
local retry = tonumber(due[2]) + window - now
if retry < 1 then
  retry = 1
end
return {0, 0, retry}
