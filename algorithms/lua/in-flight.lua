-- In-flight: a sorted set of leases, one member per request in flight,
-- scored by the time in ms its lease ends; a lease scored s holds its slot
-- while now < s. The limit is the most in flight at once, the window the
-- lease. A request's lease is added when it is admitted and removed when
-- it ends (a ZREM of its member, which a second time removes nothing), or
-- when its lease runs out, whoever held it having gone without a word.
-- Expired leases are pruned when one is added.
-- @state until_ ttl_ edge_
-- @check
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
-- @commit
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
-- @refund
if take_ == 1 then
  redis.call('ZREM', key_, member_)
else
  for i = 1, take_ do
    redis.call('ZREM', key_, member_ .. ':' .. i)
  end
end
