#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- Token bucket: capacity = burst tokens, refilled at limit tokens per
-- window, one token per request. Tokens are kept in integer units of
-- 1/window of a token (a token is `window` units, refill is `limit` units
-- per millisecond), so no decision depends on floating-point rounding.
--
-- KEYS[1]  the client's bucket (a hash: u = units held, t = time of last update in ms)
-- ARGV[1]  limit: the tokens added per window
-- ARGV[2]  window in milliseconds
-- ARGV[3]  now in milliseconds from the caller, or "" to read Redis's TIME
-- ARGV[4]  burst: the capacity, the most admitted at one instant (the
--          limit when absent)
--
-- Returns {allowed (1 or 0), remaining, retry_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local burst = tonumber(ARGV[4]) or limit
if not now then
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local asked = now -- the retry-after is told from the caller's own time

local full = burst * window
local stored = redis.call('HMGET', key, 'u', 't')
local units = full
if stored[1] then
  local last = tonumber(stored[2])
  units = tonumber(stored[1])
  if now > last then
    units = math.min(full, units + (now - last) * limit)
  else
    -- A caller whose clock is behind the last update refills nothing, and
    -- never moves the update time back (which would refill it twice).
    now = last
  end
end

if units >= window then
  units = units - window
  redis.call('HSET', key, 'u', units, 't', now)
  -- Once full again the bucket is the same as no bucket; the expiry only
  -- collects it, a window late, so a caller's clock ahead of Redis's never
  -- loses a live bucket.
  redis.call('PEXPIRE', key, math.ceil((full - units) / limit) + window)
  return {1, math.floor(units / window), 0}
end
return {0, 0, math.ceil((window - units) / limit) + now - asked}
