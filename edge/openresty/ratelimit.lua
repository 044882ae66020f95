-- ratelab's rate limiter for OpenResty (or nginx with the lua module): the
-- rules `ratelab edge` serves, matched and keyed as the Go gateway does and
-- decided by algorithms/decide.lua (built from the same source as the
-- scripts the Go gateway runs, and deciding as they do), with the same
-- headers, 429 and 503.
--
--   init_by_lua_block   { require("ratelimit").configure({ ... }) }
--   access_by_lua_block { require("ratelimit").access() }
--
-- configure() takes:
--   rules_path    the rules: the Lua table edge.RenderRules writes, read
--                 once (nginx's reload starts workers that read it again);
--                 access() needs it
--   decide_path   ratelab's algorithms/decide.lua, read once; with rules_path
--   redis_host, redis_port, redis_password (optional)
--   timeout_ms    bound on one decision (connect, send, read); 200
--   pool_size     connections kept alive per worker; 100
--   clock         "redis" (the script reads TIME: every node sharing the
--                 Redis agrees, whatever its host's clock; the default) or
--                 "caller" (this nginx's clock, in ms, passed to the script)
--   key_by        "ip" (ngx.var.remote_addr) or "header:NAME": whom
--                 builtin() counts a request for (the rules say whom it is
--                 limited as)
--   on_error      "open" (let through) or "closed" (503)
--   breaker_failures  open the circuit after this many Redis failures in a
--                 row: decisions then skip Redis while a timer asks it every
--                 100 ms until it answers; 0 (the default): never
--   headers       "draft", "legacy" or "both"
--   deny_cache    a lua_shared_dict name to answer denied consumers from
--                 memory until their retry-after has passed; none when nil
--   health        a lua_shared_dict name where each worker notes when its
--                 Redis calls start and stop failing, for healthz(); without
--                 it, healthz() speaks for the worker that answers alone
--   show_rules    with rules_path, healthz() names the rules' version, file
--                 and load time (rules read from a file, as the Go gateway)
--
-- init_worker_by_lua_block { require("ratelimit").init_worker() } clears a
-- new worker's note, and a location with
-- content_by_lua_block { require("ratelimit").healthz() } answers as the Go
-- gateway's /healthz does.
local M = {}

local ok, redis = pcall(require, "resty.redis")
if not ok then
  redis = require "nginx.redis" -- Debian's lua-nginx-redis
end

local cfg
-- script is decide.lua; it runs without its first line (Redis 7's "#!lua"
-- shebang) from the first time the server could not compile it (Redis
-- before 7), per worker.
local script
local rules, rules_loaded

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- script_of reads a script for run: its text, and its text without the
-- Redis 7 shebang for older servers, with their SHA-1s.
local function script_of(path)
  local f = assert(io.open(path, "rb"), "cannot read " .. tostring(path))
  local src = f:read("*a")
  f:close()
  local p = src:gsub("^#![^\n]*\n", "", 1)
  return { src = src, sha = hex(ngx.sha1_bin(src)), plain = p, plain_sha = hex(ngx.sha1_bin(p)), legacy = false }
end

function M.configure(opts)
  if opts.rules_path then
    script = script_of(assert(opts.decide_path, "decide_path: with rules_path"))
    rules = dofile(opts.rules_path)
    rules_loaded = ngx.now()
  end
  cfg = {
    host = opts.redis_host or "127.0.0.1",
    port = tonumber(opts.redis_port) or 6379,
    password = opts.redis_password,
    timeout = tonumber(opts.timeout_ms) or 200,
    pool_size = tonumber(opts.pool_size) or 100,
    on_error = opts.on_error or "open",
    headers = opts.headers or "both",
    deny = opts.deny_cache and ngx.shared[opts.deny_cache],
    clock = opts.clock or "redis",
    breaker = tonumber(opts.breaker_failures) or 0,
    health = opts.health and ngx.shared[opts.health],
    show_rules = opts.show_rules,
    upstream_delay = tonumber(opts.upstream_delay_ms) or 0,
  }
  assert(cfg.clock == "redis" or cfg.clock == "caller", "clock: want redis or caller")
  local kb = opts.key_by or "ip"
  if kb:sub(1, 7) == "header:" then
    cfg.header = kb:sub(8)
  end
end

-- consumer is whom builtin() counts a request for, as the Go gateway's
-- built-in upstream: the key_by header's value, else the client's address.
local function consumer()
  if cfg.header then
    local v = ngx.req.get_headers()[cfg.header]
    if type(v) == "table" then
      v = v[1]
    end
    if v and v ~= "" then
      return v
    end
  end
  return ngx.var.remote_addr
end

local function ceil_seconds(ms)
  if ms <= 0 then
    return 0
  end
  return math.ceil(ms / 1000)
end

-- problem answers status with an RFC 9457 problem+json body: of the type
-- about:blank, or of the draft's quota-exceeded with its violated-policies
-- (the IDs of the limits that refused, as RateLimit-Policy names them:
-- printable ASCII with no quote or backslash) when violated is given.
local quota_exceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

local function problem(status, title, detail, retry_ms, violated)
  ngx.status = status
  ngx.header["Content-Type"] = "application/problem+json"
  ngx.header["Cache-Control"] = "no-store"
  if violated then
    local quoted = {}
    for i, id in ipairs(violated) do
      quoted[i] = '"' .. id .. '"'
    end
    ngx.say(string.format('{"detail":"%s","retry_after_ms":%d,"status":%d,"title":"%s","type":"%s","violated-policies":[%s]}',
      detail, retry_ms, status, title, quota_exceeded, table.concat(quoted, ",")))
  else
    ngx.say(string.format('{"detail":"%s","retry_after_ms":%d,"status":%d,"title":"%s","type":"about:blank"}',
      detail, retry_ms, status, title))
  end
  return ngx.exit(status)
end

-- budget gives red what is left of the decision's time until deadline;
-- false when nothing is.
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

-- run runs script s with nkeys keys, then the arguments, all in argv:
-- EVALSHA, and EVAL only on NOSCRIPT; a call that failed otherwise (a
-- timeout) is never sent again, so nothing counts twice. One budget bounds
-- the whole decision, as the Go gateway's context does.
local function run(s, nkeys, argv)
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
  local src, src_sha = s.src, s.sha
  if s.legacy then
    src, src_sha = s.plain, s.plain_sha
  end
  res, err = red:evalsha(src_sha, nkeys, unpack(argv))
  if not res and err and err:find("NOSCRIPT", 1, true) then
    if not budget(red, deadline) then
      red:close()
      return nil, "timeout"
    end
    res, err = red:eval(src, nkeys, unpack(argv))
    if not res and err and not s.legacy and err:find("Error compiling script", 1, true) then
      -- Nothing ran: the server cannot read the shebang.
      s.legacy = true
      if not budget(red, deadline) then
        red:close()
        return nil, "timeout"
      end
      res, err = red:eval(s.plain, nkeys, unpack(argv))
    end
  end
  if not res then
    red:close() -- a broken or timed-out connection is not kept
    return nil, err
  end
  red:set_keepalive(10000, cfg.pool_size) -- never close on the hot path
  return res
end

-- capacity is the most a limit admits at one instant: its burst (token
-- bucket, GCRA) when the rules give one, else its limit.
local function capacity(l)
  if (l.burst or 0) > 0 then
    return l.burst
  end
  return l.limit
end

-- decide_checks decides checks (hits: a limit and its counter's key) in
-- one call of decide.lua, all or nothing; member is the base of a
-- sliding log's members. The reply is checked before anything reads it.
local function decide_checks(checks, member)
  local keys, args = {}, { "decide", now_arg(), #checks }
  for _, h in ipairs(checks) do
    local l = h.limit
    if l.algorithm == "sliding-counter" then
      keys[#keys + 1] = h.key .. ":0"
      keys[#keys + 1] = h.key .. ":1"
    else
      keys[#keys + 1] = h.key
    end
    local m = ""
    if l.algorithm == "sliding-log" or l.algorithm == "in-flight" then
      m = member
    end
    local shadow = 0
    if l.shadow then
      shadow = 1
    end
    for _, a in ipairs({ l.algorithm, l.limit, l.window_ms, l.cost, shadow, m, "0", capacity(l) }) do
      args[#args + 1] = a
    end
  end
  local argv = keys
  local nkeys = #keys
  for _, a in ipairs(args) do
    argv[#argv + 1] = a
  end
  local res, err = run(script, nkeys, argv)
  if res and (type(res) ~= "table" or #res ~= 1 + 5 * #checks) then
    return nil, "bad reply from the script"
  end
  return res, err
end

-- kind names what a failed decision ran into, as the Go gateway does.
local function kind(err)
  err = tostring(err)
  if err:find("timeout", 1, true) then
    return "timeout"
  elseif err:sub(1, 3) == "OOM" then
    return "oom"
  elseif err:find("connect", 1, true) or err:find("closed", 1, true) or err:find("reset", 1, true)
      or err:find("refused", 1, true) or err:find("broken pipe", 1, true) then
    return "unreachable"
  end
  return "other"
end

local causes = {
  timeout = "the rate limiter's store did not answer in time",
  oom = "the rate limiter's store is full: Redis refused the decision (OOM, maxmemory reached)",
  unreachable = "the rate limiter cannot reach its store",
  other = "the rate limiter's store answered with an error",
}

-- warn logs a Redis failure of a kind at most once per 10 seconds per kind
-- and worker, with the count of those it did not log, so an outage does not
-- flood the error log.
local logged, quiet = {}, {}
local function warn(k, err)
  local now = ngx.now()
  if logged[k] and now - logged[k] < 10 then
    quiet[k] = (quiet[k] or 0) + 1
    return
  end
  local more = ""
  if (quiet[k] or 0) > 0 then
    more = string.format(" (and %d more in the last %ds)", quiet[k], math.floor(now - logged[k] + 0.5))
  end
  logged[k], quiet[k] = now, 0
  ngx.log(ngx.WARN, "ratelab: redis ", k, ": ", causes[k], ": ", err, more)
end

-- The circuit breaker, per worker: after cfg.breaker failures in a row the
-- circuit opens, decisions skip Redis, and a timer asks Redis every 100 ms
-- (a decision for a consumer of its own) until it answers.
local failures, open, last_kind = 0, false, "other"
local probes = 0

-- Each worker's health note, in cfg.health under its worker id (which a
-- worker started again, or after a reload, takes over): since when its
-- Redis calls fail, of what kind, and whether its circuit is open. It is
-- written when they start or go on failing, and cleared when Redis answers
-- again: never on a request that found Redis answering as before, nor on
-- a failure that changes nothing the note says.
local failing_since, noted

local function note_failing()
  failing_since = failing_since or ngx.now()
  local now = last_kind .. tostring(open)
  if cfg.health and noted ~= now and not ngx.worker.exiting() then
    local id = ngx.worker.id() or 0
    cfg.health:set("since:" .. id, failing_since)
    cfg.health:set("kind:" .. id, last_kind)
    cfg.health:set("open:" .. id, open)
    noted = now
  end
end

local function note_answering()
  failing_since, noted = nil, nil
  if cfg.health then
    local id = ngx.worker.id() or 0
    cfg.health:delete("since:" .. id)
    cfg.health:delete("kind:" .. id)
    cfg.health:delete("open:" .. id)
  end
end

local function answered()
  if failures > 0 or open then
    ngx.log(ngx.WARN, "ratelab: redis answers again")
    logged, quiet = {}, {}
    note_answering()
  end
  failures, open = 0, false
end

-- probe_check is what an open circuit asks Redis with, as the Go
-- gateway's: a shadow limit of its own key, which never denies anything.
local probe_check = { key = "rl:{ratelab-probe}:sliding-log",
  limit = { algorithm = "sliding-log", limit = 1, window_ms = 1000, cost = 1, shadow = true } }

local probe
probe = function(premature)
  if premature then
    return -- the worker is exiting
  end
  probes = probes + 1
  local res, err = decide_checks({ probe_check }, "probe-" .. ngx.worker.pid() .. "-" .. probes)
  if res then
    answered()
    return
  end
  last_kind = kind(err)
  warn(last_kind, err)
  note_failing()
  local ok, terr = ngx.timer.at(0.1, probe)
  if not ok then
    ngx.log(ngx.ERR, "ratelab: cannot schedule the Redis probe: ", terr)
    open = false -- decide in the requests again rather than never
  end
end

local function failed(err)
  last_kind = kind(err)
  warn(last_kind, err)
  failures = failures + 1
  if cfg.breaker > 0 and failures >= cfg.breaker and not open then
    open = true
    ngx.log(ngx.WARN, "ratelab: circuit open after ", failures, failures == 1 and " failure" or " failures",
        " in a row: decisions skip Redis, which is asked every 100 ms")
    local ok, terr = ngx.timer.at(0.1, probe)
    if not ok then
      ngx.log(ngx.ERR, "ratelab: cannot schedule the Redis probe: ", terr)
      open = false
    end
  end
  note_failing()
end

-- The rules ratelab rendered (edge.RenderRules) are walked as the Go
-- gateway's rules.Set.Match walks them, every limit met is decided in one
-- call of decide.lua, and the headers say what the Go gateway's say.

-- host_only is a host without its port, in lower case.
local function host_only(h)
  if h:sub(1, 1) == "[" then
    local i = h:find("]", 1, true)
    if i then
      h = h:sub(1, i)
    end
  else
    local i = h:find(":", 1, true)
    if i and not h:find(":", i + 1, true) then
      h = h:sub(1, i - 1)
    end
  end
  return h:lower()
end

-- value is the request's value of an attribute; nil when it has none (an
-- empty value is none).
local function value(st, kind, name)
  local v
  if kind == "remote_address" then
    v = ngx.var.remote_addr
  elseif kind == "method" then
    v = ngx.req.get_method()
  elseif kind == "path" then
    v = ngx.var.uri
  elseif kind == "host" then
    v = host_only(ngx.var.http_host or "")
  elseif kind == "header" then
    v = st.headers[name]
  elseif kind == "query" then
    if not st.args then
      st.args = ngx.req.get_uri_args(100)
    end
    v = st.args[name]
  end
  if type(v) == "table" then
    v = v[1]
  end
  if type(v) ~= "string" or v == "" then
    return nil
  end
  return v
end

local function field(s)
  return #s .. ":" .. s
end

local walk

-- visit enters node d with the entry key = v at depth (from 0), adds the
-- hits of its limits with their counter keys, and walks on under it. A
-- prefix that shares its counter (share_threshold) enters its pattern as
-- written instead of the request's value.
local function visit(st, d, key, v, depth, tag_at, tagged)
  local n = depth + 1
  if d.shared then
    v = d.value
  end
  st.entries[n] = { key, v }
  if not tagged and d.per_value then
    tag_at, tagged = n, true
  end
  if #d.limits > 0 then
    local sum, tag
    for _, l in ipairs(d.limits) do
      local hit = { limit = l }
      if not l.unlimited then
        if not sum then
          local parts = { field(rules.domain) }
          for i = 1, n do
            parts[#parts + 1] = field(st.entries[i][1])
            parts[#parts + 1] = field(st.entries[i][2])
          end
          sum = hex(ngx.sha1_bin(table.concat(parts)):sub(1, 16))
          if tagged then
            tag = hex(ngx.sha1_bin(st.entries[tag_at][2]):sub(1, 8))
          else
            tag = rules.domain_tag
          end
        end
        hit.key = "rl:{" .. tag .. "}:" .. sum .. ":" .. l.id .. ":" .. l.algorithm
      end
      st.hits[#st.hits + 1] = hit
    end
  end
  if #d.children > 0 and n < 16 then
    walk(st, d.children, n, tag_at, tagged)
  end
end

walk = function(st, level, depth, tag_at, tagged)
  for _, g in ipairs(level) do
    if g.kind == "generic_key" then
      for _, d in ipairs(g.all) do
        visit(st, d, g.key, d.value, depth, tag_at, tagged)
      end
    else
      local v = value(st, g.kind, g.name)
      if not v then
        local d = g.key_only
        if d and d.fallback then
          local fv = value(st, d.fallback.kind, d.fallback.name)
          if fv then
            visit(st, d, d.fallback.key, fv, depth, tag_at, tagged)
          end
        end
      else
        local d = g.exact[v]
        if not d then
          for _, p in ipairs(g.prefixes) do
            if v:sub(1, #p.prefix) == p.prefix then
              d = p
              break
            end
          end
        end
        d = d or g.key_only
        if d then
          visit(st, d, g.key, v, depth, tag_at, tagged)
        end
      end
    end
  end
end

-- match returns the hits of the request, without those another hit replaces.
local function match()
  local st = { headers = ngx.req.get_headers(100), entries = {}, hits = {} }
  walk(st, rules.root, 0, 0, false)
  local replaced = {}
  for _, h in ipairs(st.hits) do
    for _, r in ipairs(h.limit.replaces) do
      replaced[r] = true
    end
  end
  if next(replaced) == nil then
    return st.hits
  end
  local kept = {}
  for _, h in ipairs(st.hits) do
    if h.limit.name == "" or not replaced[h.limit.name] then
      kept[#kept + 1] = h
    end
  end
  return kept
end

-- tightest is the state RateLimit and the legacy fields describe, and
-- whether a limit denied: of those that denied, the one that admits again
-- last; else the one closest to exhaustion (the Go gateway's tightest).
local function reset_of(s)
  if not s.ok then
    return ceil_seconds(s.retry)
  elseif s.reset > 0 then
    return ceil_seconds(s.reset)
  end
  return ceil_seconds(s.limit.window_ms)
end

local function tightest(states)
  local best, denied
  for _, s in ipairs(states) do
    if not best then
      best, denied = s, not s.ok
    elseif not s.ok and not denied then
      best, denied = s, true
    elseif not s.ok then
      if s.retry > best.retry then
        best = s
      end
    elseif not denied then
      local l, r = s.remaining * capacity(best.limit), best.remaining * capacity(s.limit)
      if l < r or l == r and (s.remaining < best.remaining or s.remaining == best.remaining and reset_of(s) > reset_of(best)) then
        best = s
      end
    end
  end
  return best, denied
end

-- set_headers writes the draft-10 and legacy fields for states and
-- returns the retry-after in ms of a denial (0 when admitted).
local function set_headers(states)
  if #states == 0 then
    return 0
  end
  local t, denied = tightest(states)
  local reset = reset_of(t)
  local remaining = math.max(t.remaining, 0)
  if cfg.headers ~= "legacy" then
    local parts = {}
    for _, s in ipairs(states) do
      local p = string.format('"%s";q=%d;w=%d', s.limit.id, s.limit.limit, ceil_seconds(s.limit.window_ms))
      if s.limit.algorithm == "in-flight" then
        -- The draft's quota unit: q requests at once, in no window.
        p = string.format('"%s";q=%d;qu="concurrent-requests"', s.limit.id, s.limit.limit)
      elseif (s.limit.burst or 0) > 0 then
        p = p .. ";ratelab-burst=" .. s.limit.burst
      end
      parts[#parts + 1] = p
    end
    ngx.header["RateLimit-Policy"] = table.concat(parts, ", ")
    ngx.header["RateLimit"] = string.format('"%s";r=%d;t=%d', t.limit.id, remaining, reset)
  end
  if cfg.headers ~= "draft" then
    ngx.header["RateLimit-Limit"] = t.limit.limit
    ngx.header["RateLimit-Remaining"] = remaining
    ngx.header["RateLimit-Reset"] = reset
  end
  if denied then
    return t.retry
  end
  return 0
end

-- too_many answers 429, naming the limits that denied.
local function too_many(retry_ms, states)
  local names, violated = {}, {}
  for _, s in ipairs(states) do
    if not s.ok then
      local burst = ""
      if (s.limit.burst or 0) > 0 then
        burst = ", burst " .. s.limit.burst
      end
      if s.limit.algorithm == "in-flight" then
        names[#names + 1] = string.format('\\"%s\\" (%d in flight)', s.limit.id, s.limit.limit)
      else
        names[#names + 1] = string.format('\\"%s\\" (%d per %dms%s)', s.limit.id, s.limit.limit, s.limit.window_ms, burst)
      end
      violated[#violated + 1] = s.limit.id
    end
  end
  ngx.header["Retry-After"] = ceil_seconds(retry_ms)
  return problem(429, "Request cannot be satisfied as assigned quota has been exceeded",
    "rate limit exceeded: " .. table.concat(names, ", "), retry_ms, violated)
end

-- deny_key names a limit in the deny cache: its counter and its policy, as
-- the Go gateway's, so that rules reloaded with another limit never meet
-- the old one's refusals (the shared dict outlives a reload).
local function deny_key(h)
  local k = h.key .. "|" .. h.limit.limit .. "/" .. h.limit.window_ms
  if (h.limit.burst or 0) > 0 then
    k = k .. "/" .. h.limit.burst
  end
  return k
end

-- access decides the request: a 429 or a 503 ends it; anything else goes
-- on to the content.
function M.access()
  if not rules then
    error("ratelab: access() needs rules: configure() with rules_path and decide_path")
  end
  local hits = match()
  local checks = {}
  for _, h in ipairs(hits) do
    if not h.limit.unlimited then
      checks[#checks + 1] = h
    end
  end
  if #checks == 0 then
    return
  end
  if cfg.deny then
    ngx.update_time()
    local now_ms = ngx.now() * 1000
    local states, cached = {}, false
    for _, h in ipairs(checks) do
      if not h.limit.shadow then
        local s = { limit = h.limit, ok = true, remaining = 0, retry = 0, reset = 0 }
        local until_ms = cfg.deny:get(deny_key(h))
        if until_ms and until_ms > now_ms then
          s.ok, s.retry, cached = false, math.max(math.ceil(until_ms - now_ms), 1), true
        end
        states[#states + 1] = s
      end
    end
    if cached then
      return too_many(set_headers(states), states)
    end
  end
  -- The script measures the retry-after from when it runs, which is after
  -- this: a denial cached from here never outlasts Redis's.
  ngx.update_time()
  local t0_ms = ngx.now() * 1000
  local res, err
  local member = ngx.var.request_id .. "-" .. ngx.worker.pid()
  if not open then
    res, err = decide_checks(checks, member)
    if res then
      answered()
    else
      failed(err)
    end
  end
  if not res then
    if cfg.on_error == "closed" then
      ngx.header["Retry-After"] = 1
      return problem(503, "Service Unavailable", causes[last_kind], 1000)
    end
    return -- fail open
  end
  local states, blocked = {}, false
  for i, h in ipairs(checks) do
    local b = 1 + (i - 1) * 5
    local s = { limit = h.limit, ok = tonumber(res[b + 1]) == 1, remaining = tonumber(res[b + 2]),
      retry = tonumber(res[b + 3]), reset = tonumber(res[b + 4]) }
    if not s.ok and not h.limit.shadow then
      blocked = true
      if cfg.deny and s.retry > 0 then
        cfg.deny:set(deny_key(h), t0_ms + s.retry, s.retry / 1000)
      end
    end
    if not h.limit.shadow then
      states[#states + 1] = s
    end
  end
  local retry = set_headers(states)
  if blocked then
    return too_many(retry, states)
  end
  -- The in-flight slots the request took, released in the log phase.
  local leases
  for i, h in ipairs(checks) do
    if h.limit.algorithm == "in-flight" and h.limit.cost > 0 and tonumber(res[1 + (i - 1) * 5 + 1]) == 1 then
      leases = leases or {}
      leases[#leases + 1] = h.key
    end
  end
  if leases then
    ngx.ctx.ratelab_leases, ngx.ctx.ratelab_member = leases, member
  end
end

-- release gives back the in-flight slots of a request that ended: a ZREM
-- of its lease in each, which frees nothing a second time. A release that
-- fails is logged and left to the lease, which frees the slot when it
-- runs out.
local function release(premature, keys, member)
  if premature then
    return -- nginx is exiting: the leases run out
  end
  local red = redis:new()
  red:set_timeout(cfg.timeout)
  local okc, err = red:connect(cfg.host, cfg.port)
  if not okc then
    ngx.log(ngx.WARN, "ratelab: release of an in-flight slot failed, left to its lease: connect: ", err)
    return
  end
  if cfg.password and red:get_reused_times() == 0 then
    local oka, aerr = red:auth(cfg.password)
    if not oka then
      red:close()
      ngx.log(ngx.WARN, "ratelab: release of an in-flight slot failed, left to its lease: auth: ", aerr)
      return
    end
  end
  for _, key in ipairs(keys) do
    local ok, zerr = red:zrem(key, member)
    if not ok then
      red:close()
      ngx.log(ngx.WARN, "ratelab: release of an in-flight slot failed, left to its lease: ", zerr)
      return
    end
  end
  red:set_keepalive(10000, cfg.pool_size)
end

-- log releases the in-flight slots the request took, once it has ended
-- (its response sent, or its client gone): the log phase runs once per
-- request and cannot use cosockets, so a timer does.
function M.log()
  local leases = ngx.ctx.ratelab_leases
  if not leases then
    return
  end
  ngx.ctx.ratelab_leases = nil
  local ok, err = ngx.timer.at(0, release, leases, ngx.ctx.ratelab_member)
  if not ok then
    ngx.log(ngx.WARN, "ratelab: release of an in-flight slot failed, left to its lease: timer: ", err)
  end
end

-- builtin is a content handler that answers 200 and counts what it
-- received per consumer in the shared dict ratelab_forwarded, as the Go
-- gateway's built-in upstream does.
function M.builtin()
  local label = consumer():gsub("[%c{}]", "_")
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
  if (cfg.upstream_delay or 0) > 0 then
    -- Held as a slow upstream holds it; a client that goes away ends the
    -- hold (lua_check_client_abort).
    ngx.on_abort(function() ngx.exit(499) end)
    ngx.sleep(cfg.upstream_delay / 1000)
  end
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

-- init_worker clears the health note a worker of the same id left.
function M.init_worker()
  if cfg and cfg.health then
    note_answering()
  end
end

-- duration writes seconds as Go's time.Duration does, to the millisecond:
-- 250ms, 1.5s, 2m3.25s.
local function duration(secs)
  local ms = math.floor(secs * 1000 + 0.5)
  if ms < 1000 then
    return ms == 0 and "0s" or ms .. "ms"
  end
  local s = (string.format("%.3f", (ms % 60000) / 1000):gsub("0+$", ""):gsub("%.$", "")) .. "s"
  local h, m = math.floor(ms / 3600000), math.floor(ms / 60000) % 60
  if h > 0 then
    return h .. "h" .. m .. "m" .. s
  elseif m > 0 then
    return m .. "m" .. s
  end
  return s
end

-- rfc3339 writes an epoch time in seconds as Go's time.RFC3339Nano does in
-- UTC, to the millisecond.
local function rfc3339(t)
  local ms = math.floor(t * 1000 + 0.5)
  local frac = string.format("%03d", ms % 1000):gsub("0+$", "")
  if frac ~= "" then
    frac = "." .. frac
  end
  return os.date("!%Y-%m-%dT%H:%M:%S", math.floor(ms / 1000)) .. frac .. "Z"
end

-- healthz answers as the Go gateway's /healthz: "ok" while Redis answers;
-- while it fails, still 200, with since when (the earliest of the workers
-- failing), why, the fail mode and whether a circuit is open; with
-- show_rules, a second line naming the rules' version, file and when nginx
-- loaded them.
function M.healthz()
  ngx.header["Content-Type"] = "text/plain; charset=utf-8"
  local since, k, opened, failing, workers = failing_since, last_kind, open, failing_since and 1 or 0, 1
  if cfg.health then
    since, failing, opened, workers = nil, 0, false, ngx.worker.count()
    for id = 0, workers - 1 do
      local s = cfg.health:get("since:" .. id)
      if s then
        failing = failing + 1
        if not since or s < since then
          since, k = s, cfg.health:get("kind:" .. id) or "other"
        end
        opened = opened or cfg.health:get("open:" .. id) == true
      end
    end
  end
  if not since then
    ngx.say("ok")
  else
    local circuit = "circuit closed"
    if opened then
      circuit = "circuit open, Redis asked every 100ms"
    end
    local where = ""
    if failing < workers then
      where = string.format(" in %d of %d workers", failing, workers)
    end
    ngx.say(string.format("degraded: redis failing for %s (%s: %s)%s; failing %s; %s",
        duration(ngx.now() - since), k, causes[k] or causes.other, where, cfg.on_error, circuit))
  end
  if rules and cfg.show_rules then
    ngx.say("rules: version ", rules.version, ", ", rules.file, ", loaded ", rfc3339(rules_loaded))
  end
end

return M
