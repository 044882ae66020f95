#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- Fixed window: one counter per client per window of the clock, windows
-- aligned to multiples of the window length since the epoch. Race-free (one
-- script), but a client can spend a full limit at the end of one window and
-- another at the start of the next: up to twice the limit in one window's span.
--
-- KEYS[1]  the client's counter (a hash: w = window number, n = admitted in it)
-- ARGV[1]  limit: requests admitted per window
-- ARGV[2]  window in milliseconds
-- ARGV[3]  now in milliseconds from the caller, or "" to read Redis's TIME
--
-- Returns {allowed (1 or 0), remaining, retry_after_ms}.
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if not now then
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local asked = now -- the retry-after is told from the caller's own time

local w = math.floor(now / window)
local stored = redis.call('HMGET', key, 'w', 'n')
local sw = tonumber(stored[1])
if sw and sw > w then
  -- A caller whose clock is behind counts in the newest window seen, at its
  -- start; time never goes back to an older window with a fresh count.
  w = sw
  now = w * window
end
local ends = (w + 1) * window
local n = 0
if sw == w then
  n = tonumber(stored[2])
end
if n < limit then
  -- INCR, and set the expiry on the window's first hit. The stored window
  -- number decides; the expiry only collects the key, a window late, so that
  -- a caller whose clock runs ahead of Redis's never loses a live count.
  redis.call('HSET', key, 'w', w, 'n', n + 1)
  if n == 0 then
    redis.call('PEXPIRE', key, ends - now + window)
  end
  return {1, limit - n - 1, 0}
end
return {0, 0, ends - asked}
