-- A sliding-window log whose member is the request's millisecond timestamp:
-- requests in the same millisecond share one member, so a concurrent burst
-- is counted as a handful of requests. Raced with
--   --script-args "{limit} {window_ms} {now_ms} {now_ms}"
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return {1}
end
return {0}
