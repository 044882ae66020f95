#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- Sliding-window counter: the count of the current fixed window plus the
-- previous window's count weighted by how much of it the sliding window still
-- covers. An estimate (it assumes the previous window's requests were evenly
-- spread) in two small keys, whatever the limit.
--
-- KEYS[1], KEYS[2]  the client's two counters (hashes: w = window number,
--                   n = admitted), used for even and odd windows; one hash slot
-- ARGV[1]  limit: requests admitted per window
-- ARGV[2]  window in milliseconds
-- ARGV[3]  now in milliseconds from the caller, or "" to read Redis's TIME
--
-- Returns {allowed (1 or 0), remaining, retry_after_ms}.
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
local a = redis.call('HMGET', KEYS[1], 'w', 'n')
local b = redis.call('HMGET', KEYS[2], 'w', 'n')
local newest = math.max(tonumber(a[1]) or -1, tonumber(b[1]) or -1)
if newest > w then
  -- A caller whose clock is behind counts in the newest window seen, at its
  -- start; time never goes back to windows whose counts were overwritten.
  w = newest
  now = w * window
end
local cur_key = KEYS[1 + w % 2]
local prev_key = KEYS[1 + (w + 1) % 2]
local function count(v, want)
  if tonumber(v[1]) == want then
    return tonumber(v[2])
  end
  return 0
end
local stored = {a, b}
local cur = count(stored[1 + w % 2], w)
local prev = count(stored[1 + (w + 1) % 2], w - 1)
local elapsed = now - w * window

-- Admit when prev * (window - elapsed) / window + cur + 1 <= limit, in integers.
local room = (limit - cur - 1) * window
if cur + 1 <= limit and prev * (window - elapsed) <= room then
  redis.call('HSET', cur_key, 'w', w, 'n', cur + 1)
  -- The count is read until the end of the next window.
  redis.call('PEXPIRE', cur_key, (w + 2) * window - now)
  local used = cur + 1 + math.ceil(prev * (window - elapsed) / window)
  return {1, math.max(limit - used, 0), 0}
end

-- Denied: the first moment at which the estimate leaves room, if the client waits.
local retry
if cur < limit then
  -- Later in this window, as the previous window's weight falls (at the
  -- latest, the next window starts with this one's count, which is below
  -- the limit).
  retry = w * window + window - math.floor(room / prev) - now
else
  -- In the next window, where this window's count weighs as the previous one.
  retry = (w + 1) * window + window - math.floor((limit - 1) * window / cur) - now
end
retry = retry + now - asked
if retry < 1 then
  retry = 1
end
return {0, 0, retry}
