-- Fixed window: one hash per client, w = window number, n = admitted in it.
-- A caller whose clock is behind counts in the newest window seen, at its
-- start; time never goes back to an older window with a fresh count.
-- @state t_ w_ n_
-- @check
t_ = now
w_ = floor(t_ / window_)
local stored = redis.call('HMGET', key_, 'w', 'n')
local sw = tonumber(stored[1])
if sw and sw > w_ then
  w_ = sw
  t_ = w_ * window_
end
local ends = (w_ + 1) * window_
n_ = 0
if sw == w_ then
  n_ = tonumber(stored[2])
end
ok_ = n_ + need_ <= limit_
room_ = max(limit_ - n_, 0)
left_ = limit_ - n_ - take_
retry_ = ends - asked
reset0_, reset1_ = 0, 0
if n_ > 0 then
  reset0_ = ends - asked
end
if n_ + take_ > 0 then
  reset1_ = ends - asked
end
-- @commit
if n_ == 0 then
  redis.call('HSET', key_, 'w', w_, 'n', take_s_)
  -- The stored window number decides; the expiry only collects the key,
  -- a window late, so that a caller whose clock runs ahead of Redis's
  -- never loses a live count.
  redis.call('PEXPIRE', key_, (w_ + 1) * window_ - t_ + window_)
else
  redis.call('HINCRBY', key_, 'n', take_s_)
end
mark_ = w_
-- @refund
local stored = redis.call('HMGET', key_, 'w', 'n')
if tonumber(stored[1]) == mark_ then
  redis.call('HSET', key_, 'n', max(tonumber(stored[2]) - take_, 0))
end
