-- Sliding-window counter: two hashes (even and odd windows), w = window
-- number, n = admitted; the previous window's count weighs by how much of
-- it the sliding window still covers. A caller whose clock is behind
-- counts in the newest window seen, at its start.
-- @state t_ w_ cur_
-- @check
t_ = now
w_ = floor(t_ / window_)
local a = redis.call('HMGET', key_, 'w', 'n')
local b = redis.call('HMGET', key2_, 'w', 'n')
local aw, bw = tonumber(a[1]), tonumber(b[1])
local newest = max(aw or -1, bw or -1)
if newest > w_ then
  w_ = newest
  t_ = w_ * window_
end
local cw, cn, pw, pn = aw, a[2], bw, b[2]
if w_ % 2 == 1 then
  cw, cn, pw, pn = bw, b[2], aw, a[2]
end
local prev = 0
cur_ = 0
if cw == w_ then
  cur_ = tonumber(cn)
end
if pw == w_ - 1 then
  prev = tonumber(pn)
end
local elapsed = t_ - w_ * window_
local weighed = ceil(prev * (window_ - elapsed) / window_)
-- Admit when prev * (window - elapsed) / window + cur + need <= limit, in integers.
local room = (limit_ - cur_ - need_) * window_
ok_ = cur_ + need_ <= limit_ and prev * (window_ - elapsed) <= room
room_ = max(limit_ - cur_ - weighed, 0)
left_ = max(limit_ - cur_ - take_ - weighed, 0)
retry_ = 0
if not ok_ then
  if cur_ + need_ <= limit_ then
    -- Later in this window, as the previous window's weight falls.
    retry_ = w_ * window_ + window_ - floor(room / prev) - t_
  else
    -- In the next window, where this window's count weighs as the previous one.
    retry_ = (w_ + 1) * window_ + window_ - floor((limit_ - need_) * window_ / cur_) - t_
  end
  retry_ = max(retry_ + t_ - asked, 1)
end
-- This window's count weighs until the end of the next one.
reset0_, reset1_ = 0, 0
if cur_ > 0 then
  reset0_ = (w_ + 2) * window_ - asked
elseif prev > 0 then
  reset0_ = (w_ + 1) * window_ - asked
end
if cur_ + take_ > 0 then
  reset1_ = (w_ + 2) * window_ - asked
elseif prev > 0 then
  reset1_ = (w_ + 1) * window_ - asked
end
-- @commit
local key = key_
if w_ % 2 == 1 then
  key = key2_
end
redis.call('HSET', key, 'w', w_, 'n', cur_ + take_)
-- The count is read until the end of the next window.
redis.call('PEXPIRE', key, (w_ + 2) * window_ - t_)
mark_ = w_
-- @refund
local key = key_
if mark_ % 2 == 1 then
  key = key2_
end
local stored = redis.call('HMGET', key, 'w', 'n')
if tonumber(stored[1]) == mark_ then
  redis.call('HSET', key, 'n', max(tonumber(stored[2]) - take_, 0))
end
