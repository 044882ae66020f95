-- GCRA: a hash, t = time of the last update, d = (TAT - t) * limit; a
-- request is admitted while the TAT it sets is within `burst` emission
-- intervals (each `window` scaled) of now.
-- @state d_ t_s_
-- @check
local cap = window_ * burst_
t_s_ = now_s
d_ = 0
local stored = redis.call('HMGET', key_, 't', 'd')
if stored[1] then
  d_ = max(tonumber(stored[2]) - (now - tonumber(stored[1])) * limit_, 0)
end
local next_d = d_ + need_ * window_
ok_ = next_d <= cap
room_ = max(floor((cap - d_) / window_), 0)
left_ = floor((cap - d_ - take_ * window_) / window_)
retry_ = 0
if not ok_ then
  retry_ = ceil((next_d - cap) / limit_)
end
reset0_ = ceil(d_ / limit_)
reset1_ = ceil((d_ + take_ * window_) / limit_)
-- @commit
local d = d_ + take_ * window_
redis.call('HSET', key_, 't', t_s_, 'd', d)
-- Once the TAT has passed the state is the same as none; the expiry only
-- collects it, a window late.
redis.call('PEXPIRE', key_, ceil(d / limit_) + window_)
mark_ = 0
-- @refund
local stored = redis.call('HMGET', key_, 't', 'd')
if stored[1] then
  redis.call('HSET', key_, 'd', max(tonumber(stored[2]) - take_ * window_, 0))
end
