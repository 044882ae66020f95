-- Sliding-window log: a sorted set, one member per admitted unit of cost,
-- scored by its time in ms; a member stamped s counts while
-- now - window < s. A caller whose clock is behind the newest logged
-- request is taken to arrive with it: a stale time must not count against
-- a window that a later request already pruned. Members are only added
-- when admitted, and pruned when one is.
-- @state edge_ t_s_
-- @check
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
-- @commit
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
-- @refund
if take_ == 1 then
  redis.call('ZREM', key_, member_)
else
  for i = 1, take_ do
    redis.call('ZREM', key_, member_ .. ':' .. i)
  end
end
