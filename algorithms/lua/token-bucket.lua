-- Token bucket: a hash, u = units held (a token is `window` units, refilled
-- at `limit` units per ms, at most `burst` tokens), t = time of the last
-- update. A caller whose clock is behind the last update refills nothing,
-- and never moves the update time back (which would refill it twice).
-- @state t_s_ units_ full_
-- @check
local t = now
t_s_ = now_s
full_ = burst_ * window_
local stored = redis.call('HMGET', key_, 'u', 't')
units_ = full_
if stored[1] then
  local last = tonumber(stored[2])
  units_ = tonumber(stored[1])
  if t > last then
    units_ = min(full_, units_ + (t - last) * limit_)
  else
    t, t_s_ = last, stored[2]
  end
end
ok_ = units_ >= need_ * window_
room_ = floor(units_ / window_)
left_ = floor((units_ - take_ * window_) / window_)
retry_ = 0
if not ok_ then
  retry_ = ceil((need_ * window_ - units_) / limit_) + t - asked
end
reset0_ = ceil((full_ - units_) / limit_) + t - asked
reset1_ = ceil((full_ - units_ + take_ * window_) / limit_) + t - asked
-- @commit
local units = units_ - take_ * window_
redis.call('HSET', key_, 'u', units, 't', t_s_)
-- Once full again the bucket is the same as no bucket; the expiry only
-- collects it, a window late.
redis.call('PEXPIRE', key_, ceil((full_ - units) / limit_) + window_)
mark_ = 0
-- @refund
local stored = redis.call('HMGET', key_, 'u', 't')
if stored[1] then
  redis.call('HSET', key_, 'u', min(tonumber(stored[1]) + take_ * window_, burst_ * window_))
end
