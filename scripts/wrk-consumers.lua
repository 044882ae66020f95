-- wrk script: each request comes from one of 1,000 consumers, named in the
-- X-Consumer-Id header, so that the limiter decides for many keys.
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/", { ["X-Consumer-Id"] = "c" .. math.random(1000) })
end
