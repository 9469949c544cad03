-- The handlers of nginx.conf: one vmpool per nginx worker process, called with pool:co_invoke,
-- which yields the request while a pool state runs the call, so the worker keeps serving others.
-- luacheck: globals ngx
local vmpool = require "vmpool"

local app = {}

-- The chunk the pool's states run (compiled once in the worker, loaded once per state).
local CHILD = [[
local M = {}
function M.hello(name)
  return "hello, " .. name
end
function M.fib(n)
  if n < 2 then return n end
  return M.fib(n - 1) + M.fib(n - 2)
end
function M.fail(why)
  error(why)
end
return M
]]

local function pool()
  return vmpool.ngx.pool("app")
end

-- Metrics for Prometheus. Each worker process has its own pools, so each publishes its exposition
-- (vmpool.metrics, every series labelled worker="N") into the lua_shared_dict vmpool_metrics,
-- at start and then every METRICS_INTERVAL seconds; GET /metrics serves every worker's, merged into
-- one exposition (each family's # HELP and # TYPE once, then the samples of every worker), which
-- is what Prometheus expects of one target. An entry lives 5 intervals: a worker that is gone
-- (reload, crash) drops out; its successor, with the same id, takes its place.
app.METRICS_INTERVAL = 1

local function publish()
  local dict = ngx.shared.vmpool_metrics
  if not dict then
    return nil, "no lua_shared_dict vmpool_metrics in nginx.conf"
  end
  local id = ngx.worker.id()
  local text = vmpool.metrics { labels = { worker = id } }
  return dict:set("worker:" .. id, text, app.METRICS_INTERVAL * 5)
end

-- Expositions merged: families in the order first seen, each with its samples from every text.
local function merge(texts)
  local order, families = {}, {}
  for _, text in ipairs(texts) do
    local family
    for line in text:gmatch("[^\n]+") do
      local kind, name = line:match("^# (%u+) (%S+)")
      if kind then
        family = families[name]
        if not family then
          family = { samples = {} }
          families[name] = family
          order[#order + 1] = name
        end
        family[kind] = family[kind] or line
      elseif family then
        family.samples[#family.samples + 1] = line
      end
    end
  end
  local out = {}
  for _, name in ipairs(order) do
    local f = families[name]
    out[#out + 1] = f.HELP
    out[#out + 1] = f.TYPE
    for _, sample in ipairs(f.samples) do
      out[#out + 1] = sample
    end
  end
  out[#out + 1] = ""
  return table.concat(out, "\n")
end

function app.init_worker()
  local p = vmpool.ngx.pool("app", function()
    -- name: the label pool="app" in /metrics
    local new = vmpool.new { name = "app", core = 2, max_noncore = 2 }
    new:compile("app", CHILD)
    return new
  end)
  -- init_worker_by_lua cannot yield, so co_invoke blocks here (briefly): a chunk that fails shows
  -- in error.log at start-up rather than on the first request
  app.warmup = p:co_invoke("app", "hello", "init_worker")
  -- start the light thread that wakes waiting requests now, not on the first request
  vmpool.ngx.init_worker()
  local ok, err = publish()
  if not ok then
    ngx.log(ngx.ERR, "vmpool metrics: cannot publish this worker's: ", err)
  end
  ngx.timer.every(app.METRICS_INTERVAL, function(premature)
    if not premature then
      local done, why = publish()
      if not done then
        ngx.log(ngx.ERR, "vmpool metrics: cannot publish this worker's: ", why)
      end
    end
  end)
end

function app.exit_worker()
  vmpool.ngx.exit_worker() -- closes the pools made by vmpool.ngx.pool
end

-- GET /hello?name=you
function app.hello()
  ngx.say(pool():co_invoke("app", "hello", ngx.var.arg_name or "world"))
end

-- GET /fib?n=30: CPU-bound work, off the event loop
function app.fib()
  local n = tonumber(ngx.var.arg_n) or 25
  if n < 0 or n > 35 then
    ngx.status = 400
    ngx.say("n must be in 0..35")
    return
  end
  ngx.say(pool():co_invoke("app", "fib", n))
end

-- GET /fanout?n=4: several calls at once (pool:submit gives futures), then the results in order
-- (vmpool.ngx.wait yields the request like co_invoke)
function app.fanout()
  local n = tonumber(ngx.var.arg_n) or 4
  if n < 1 or n > 16 then
    ngx.status = 400
    ngx.say("n must be in 1..16")
    return
  end
  local p, futures = pool(), {}
  for i = 1, n do
    futures[i] = p:submit("app", "fib", 20 + i)
  end
  for i = 1, n do
    ngx.say(vmpool.ngx.wait(futures[i]))
  end
end

-- GET /fail: a call's error comes back as a plain string starting with "vmpool:"
function app.fail()
  local ok, err = pcall(pool().co_invoke, pool(), "app", "fail", "something went wrong")
  ngx.status = ok and 200 or 500
  ngx.say(err)
end

-- GET /stats: the pool's counters and the adapter's (this worker only)
function app.stats()
  local s = pool():stats()
  local a = vmpool.ngx.stats()
  for _, k in ipairs { "core", "noncore", "busy", "waiting", "invokes", "succeeded", "errors" } do
    ngx.say("pool.", k, " ", s[k])
  end
  for _, k in ipairs { "pid", "light_thread", "waiting", "waits", "wakeups", "completions", "dropped", "timeouts" } do
    ngx.say("ngx.", k, " ", tostring(a[k]))
  end
end

-- GET /metrics: every worker's metrics in the Prometheus text format (this worker's as of now)
function app.metrics()
  publish()
  local dict = ngx.shared.vmpool_metrics
  local keys = dict:get_keys(0)
  table.sort(keys)
  local texts = {}
  for _, key in ipairs(keys) do
    texts[#texts + 1] = dict:get(key)
  end
  ngx.header.content_type = "text/plain; version=0.0.4; charset=utf-8"
  ngx.print(merge(texts))
end

return app
