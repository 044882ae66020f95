#!lua
-- The line above declares the script to Redis 7 (a script that may write,
-- with no flags): a server over its maxmemory refuses it before it runs,
-- so a full Redis never takes half a decision. Older servers and the
-- embedded one cannot read it; ratelab runs the script without it there.
-- In-flight leases, atomically: one sorted-set member per request in
-- flight, its lease id, scored by the time its lease expires in
-- milliseconds on Redis's clock. A holder that never releases (it died, its
-- release was lost) holds its slot until its lease expires, no longer.
--
-- KEYS[1]  the client's leases (a sorted set)
-- ARGV[1]  limit: leases held at once; 0 only counts the live leases
-- ARGV[2]  the lease's time to live in milliseconds
-- ARGV[3]  this request's lease id, unique per request
--
-- Returns {admitted (1 or 0), held, retry_after_ms}: held counts the live
-- leases after the call, this one's included when admitted; a denial's
-- retry-after is the time until the earliest lease expires (a release may
-- free a slot sooner).
--
-- Releasing is ZREM KEYS[1] <lease id>, one command, not this script: it
-- removes that lease only, so a release sent twice frees one slot, and the
-- release of a lease that expired frees none.
--
-- The time is always Redis's TIME, never the caller's: every caller then
-- reads one clock, so that a lease expires when each of them thinks it does.
-- lease_count and lease_take are the two steps, apart, so that a script
-- that decides several limits at once can count every one of them first
-- and take a slot of each only when all admit.

local function now_ms()
  -- Redis before 5 replicates scripts verbatim and refuses writes after TIME.
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- lease_count drops the expired leases of key and counts the live ones:
-- a lease scored s is live while now < s.
local function lease_count(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- lease_take adds lease id to key, live until now + ttl, and keeps the
-- key until its last lease expires.
local function lease_take(key, now, ttl, id)
  redis.call('ZADD', key, now + ttl, id)
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local id = ARGV[3]
local now = now_ms()
local held = lease_count(key, now)
if limit < 1 then
  return {0, held, 0}
end

-- The same lease asked for again (a call resent after its reply was lost)
-- is the slot it holds, renewed: it is not counted twice.
if redis.call('ZSCORE', key, id) then
  lease_take(key, now, ttl, id)
  return {1, held, 0}
end
if held < limit then
  lease_take(key, now, ttl, id)
  return {1, held + 1, 0}
end

local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local retry = tonumber(first[2]) - now
if retry < 1 then
  retry = 1
end
return {0, held, retry}
