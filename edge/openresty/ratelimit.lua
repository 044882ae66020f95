-- ratelab's rate limiter for OpenResty (or nginx with the lua module): the
-- same sliding-window log, the same keys, headers and 429 as `ratelab edge`.
--
--   init_by_lua_block   { require("ratelimit").configure({ ... }) }
--   access_by_lua_block { require("ratelimit").access() }
--
-- configure() takes:
--   script_path   the sliding-log script: ratelab's algorithms/slidinglog.lua,
--                 read once, never copied
--   redis_host, redis_port, redis_password (optional)
--   timeout_ms    bound on one decision (connect, send, read); 200
--   pool_size     connections kept alive per worker; 100
--   limit, window_ms, policy_name ("default")
--   clock         "redis" (the script reads TIME: every node sharing the
--                 Redis agrees, whatever its host's clock; the default) or
--                 "caller" (this nginx's clock, in ms, passed to the script)
--   key_by        "ip" (ngx.var.remote_addr: use the realip module for
--                 proxies) or "header:NAME" (safe only behind what
--                 authenticates it)
--   on_error      "open" (let through) or "closed" (503)
--   headers       "draft", "legacy" or "both"
--   deny_cache    a lua_shared_dict name to answer denied consumers from
--                 memory until their retry-after has passed; none when nil
local M = {}

local ok, redis = pcall(require, "resty.redis")
if not ok then
  redis = require "nginx.redis" -- Debian's lua-nginx-redis
end

local cfg
local script, sha

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

function M.configure(opts)
  local f = assert(io.open(opts.script_path, "rb"), "cannot read " .. tostring(opts.script_path))
  script = f:read("*a")
  f:close()
  sha = hex(ngx.sha1_bin(script))
  cfg = {
    host = opts.redis_host or "127.0.0.1",
    port = tonumber(opts.redis_port) or 6379,
    password = opts.redis_password,
    timeout = tonumber(opts.timeout_ms) or 200,
    pool_size = tonumber(opts.pool_size) or 100,
    limit = assert(tonumber(opts.limit), "limit"),
    window = assert(tonumber(opts.window_ms), "window_ms"),
    policy = opts.policy_name or "default",
    on_error = opts.on_error or "open",
    headers = opts.headers or "both",
    deny = opts.deny_cache and ngx.shared[opts.deny_cache],
    algorithm = opts.algorithm or "sliding-log",
    clock = opts.clock or "redis",
  }
  assert(cfg.clock == "redis" or cfg.clock == "caller", "clock: want redis or caller")
  local kb = opts.key_by or "ip"
  if kb:sub(1, 7) == "header:" then
    cfg.header = kb:sub(8)
  end
end

-- identity hashes who a request is from into a bounded key part, as the Go
-- gateway does: kind, colon, the first 16 bytes of SHA-1 in hex.
local function identity()
  if cfg.header then
    local v = ngx.req.get_headers()[cfg.header]
    if type(v) == "table" then
      v = v[1]
    end
    if v and v ~= "" then
      return "h:" .. hex(ngx.sha1_bin(v):sub(1, 16)), v
    end
  end
  local ip = ngx.var.remote_addr
  return "ip:" .. hex(ngx.sha1_bin(ip):sub(1, 16)), ip
end

local function ceil_seconds(ms)
  if ms <= 0 then
    return 0
  end
  return math.ceil(ms / 1000)
end

local function set_headers(remaining, reset)
  local window = ceil_seconds(cfg.window)
  if cfg.headers ~= "legacy" then
    ngx.header["RateLimit-Policy"] = string.format('"%s";q=%d;w=%d', cfg.policy, cfg.limit, window)
    ngx.header["RateLimit"] = string.format('"%s";r=%d;t=%d', cfg.policy, remaining, reset)
  end
  if cfg.headers ~= "draft" then
    ngx.header["RateLimit-Limit"] = cfg.limit
    ngx.header["RateLimit-Remaining"] = remaining
    ngx.header["RateLimit-Reset"] = reset
  end
end

local function problem(status, title, detail, retry_ms)
  ngx.status = status
  ngx.header["Content-Type"] = "application/problem+json"
  ngx.header["Cache-Control"] = "no-store"
  ngx.say(string.format('{"detail":"%s","retry_after_ms":%d,"status":%d,"title":"%s","type":"about:blank"}',
    detail, retry_ms, status, title))
  return ngx.exit(status)
end

local function too_many(retry_ms)
  set_headers(0, ceil_seconds(retry_ms))
  ngx.header["Retry-After"] = ceil_seconds(retry_ms)
  return problem(429, "Too Many Requests",
    string.format("rate limit of %d per %dms exceeded", cfg.limit, cfg.window), retry_ms)
end

-- decide runs the script: EVALSHA, and EVAL only on NOSCRIPT; a call that
-- failed otherwise (a timeout) is never sent again, so nothing counts twice.
-- One budget bounds the whole decision, as the Go gateway's context does:
-- each step gets what is left of it.
local function budget(red, deadline)
  ngx.update_time()
  local left = math.floor((deadline - ngx.now()) * 1000)
  if left < 1 then
    return false
  end
  if rawget(redis, "set_timeouts") then
    red:set_timeouts(left, left, left)
  else
    red:set_timeout(left) -- lua-resty-redis before 0.28
  end
  return true
end

-- now_arg is the script's time argument: "" to read Redis's TIME, or this
-- nginx's time in whole milliseconds (ngx.now() keeps milliseconds).
local function now_arg()
  if cfg.clock ~= "caller" then
    return ""
  end
  ngx.update_time()
  return string.format("%d", math.floor(ngx.now() * 1000 + 0.5))
end

local function decide(key, member)
  ngx.update_time()
  local deadline = ngx.now() + cfg.timeout / 1000
  local red = redis:new()
  budget(red, deadline)
  local okc, err = red:connect(cfg.host, cfg.port)
  if not okc then
    return nil, "connect: " .. tostring(err)
  end
  if not budget(red, deadline) then
    red:close()
    return nil, "timeout"
  end
  if cfg.password and red:get_reused_times() == 0 then
    local oka, aerr = red:auth(cfg.password)
    if not oka then
      red:close()
      return nil, "auth: " .. tostring(aerr)
    end
  end
  local res
  local now = now_arg()
  res, err = red:evalsha(sha, 1, key, cfg.limit, cfg.window, now, member)
  if not res and err and err:find("NOSCRIPT", 1, true) then
    if not budget(red, deadline) then
      red:close()
      return nil, "timeout"
    end
    res, err = red:eval(script, 1, key, cfg.limit, cfg.window, now, member)
  end
  if not res then
    red:close() -- a broken or timed-out connection is not kept
    return nil, err
  end
  red:set_keepalive(10000, cfg.pool_size) -- never close on the hot path
  if type(res) ~= "table" or not tonumber(res[1]) or not tonumber(res[2]) or not tonumber(res[3]) then
    return nil, "bad reply from the script"
  end
  return res
end

-- warn logs a Redis failure at most once a second per worker, so an outage
-- does not flood the error log.
local last_warn = 0
local function warn(err)
  local now = ngx.now()
  if now - last_warn >= 1 then
    last_warn = now
    ngx.log(ngx.WARN, "ratelab: redis: ", err)
  end
end

function M.access()
  local id = identity()
  local key = "rl:{" .. id .. "}:" .. cfg.algorithm
  if cfg.deny then
    local until_ms = cfg.deny:get(key)
    ngx.update_time()
    local now_ms = ngx.now() * 1000
    if until_ms and until_ms > now_ms then
      return too_many(math.max(math.ceil(until_ms - now_ms), 1))
    end
  end
  -- The script measures the retry-after from when it runs, which is after
  -- this: a denial cached from here never outlasts Redis's.
  ngx.update_time()
  local t0_ms = ngx.now() * 1000
  -- Unique per request: nginx's request id, and this worker's pid.
  local member = ngx.var.request_id .. "-" .. ngx.worker.pid()
  local res, err = decide(key, member)
  if not res then
    warn(err)
    if cfg.on_error == "closed" then
      ngx.header["Retry-After"] = 1
      return problem(503, "Service Unavailable", "the rate limiter cannot reach its store", 1000)
    end
    return -- fail open
  end
  local allowed, remaining, retry_ms = tonumber(res[1]), tonumber(res[2]), tonumber(res[3])
  if allowed == 1 then
    set_headers(remaining, ceil_seconds(cfg.window))
    return
  end
  if cfg.deny and retry_ms > 0 then
    cfg.deny:set(key, t0_ms + retry_ms, retry_ms / 1000)
  end
  return too_many(retry_ms)
end

-- builtin is a content handler that answers 200 and counts what it
-- received per consumer in the shared dict ratelab_forwarded, as the Go
-- gateway's built-in upstream does.
function M.builtin()
  local _, label = identity()
  label = label:gsub("[%c{}]", "_")
  if #label > 64 then
    -- Cut at 64 bytes, then drop a character the cut left incomplete, as
    -- the Go gateway's labels do.
    label = label:sub(1, 64)
    for i = #label, math.max(#label - 3, 1), -1 do
      local b = label:byte(i)
      if b >= 0xC0 then
        local need = b >= 0xF0 and 4 or b >= 0xE0 and 3 or 2
        if #label - i + 1 < need then
          label = label:sub(1, i - 1)
        end
        break
      elseif b < 0x80 then
        break
      end
    end
  end
  local dict = ngx.shared.ratelab_forwarded
  dict:incr("c:" .. label, 1, 0)
  dict:incr("total", 1, 0)
  ngx.header["Content-Type"] = "text/plain"
  ngx.say("ok")
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

-- forwarded writes the built-in upstream's counts as JSON:
-- {"total": n, "consumers": {"label": n}}.
function M.forwarded()
  local dict = ngx.shared.ratelab_forwarded
  local parts = {}
  for _, k in ipairs(dict:get_keys(0)) do
    if k:sub(1, 2) == "c:" then
      parts[#parts + 1] = json_string(k:sub(3)) .. ":" .. tostring(dict:get(k))
    end
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.say('{"total":', dict:get("total") or 0, ',"consumers":{', table.concat(parts, ","), "}}")
end

return M
