#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- GCRA, the generic cell rate algorithm: one theoretical arrival time (TAT)
-- per client. Emission interval T = window / limit, as in
-- go-redis/redis_rate: a request is admitted when TAT + T - burst * T <= now,
-- so that burst requests are admitted at one instant.
--
-- Times are kept relative to the last update and scaled by the limit, so
-- they stay integers (T scaled is exactly `window`) whatever the clock.
--
-- KEYS[1]  the client's state (a hash: t = time of last update in ms,
--          d = (TAT - t) * limit)
-- ARGV[1]  limit: requests per window
-- ARGV[2]  window in milliseconds
-- ARGV[3]  now in milliseconds from the caller, or "" to read Redis's TIME
-- ARGV[4]  burst: the most admitted at one instant (the limit when absent)
--
-- Returns {allowed (1 or 0), remaining, retry_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cap = tonumber(ARGV[4]) or limit
if not now then
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local burst = window * cap   -- burst * T, scaled
local d = 0                  -- (max(TAT, now) - now) * limit
local stored = redis.call('HMGET', key, 't', 'd')
if stored[1] then
  d = math.max(tonumber(stored[2]) - (now - tonumber(stored[1])) * limit, 0)
end
local next_d = d + window    -- the new TAT, scaled, relative to now

if next_d <= burst then
  redis.call('HSET', key, 't', now, 'd', next_d)
  -- Once the TAT has passed the state is the same as none; the expiry only
  -- collects it, a window late.
  redis.call('PEXPIRE', key, math.ceil(next_d / limit) + window)
  return {1, math.floor((burst - next_d) / window), 0}
end
return {0, 0, math.ceil((next_d - burst) / limit)}
