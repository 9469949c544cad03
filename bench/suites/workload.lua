-- One run of the workload: the seed's script called `--calls` times from `--p` coroutines in flight
-- (vmpool.run + pool:co_invoke), with the pool sized by strategy `--strategy` (lib/strategies.lua).
-- bench/report/run.lua starts it under `taskset` for the CPU count and repeats it; this process measures
-- one run and prints one `return {...}` line:
--
--   seconds, us_per_op   wall time of the calls (pool creation excluded, reported as startup_s)
--   cpu_pct              CPU used by the whole process (all threads) during the calls, in % of one
--                        CPU: (user + system seconds) / wall seconds
--   rss_peak_kb          VmHWM at the end: the process's peak resident memory, start-up included
--   created, closed      states created / closed during the run (pool:stats())
--   with a count-alloc build: native_bytes / native_allocs per call and host_lua_bytes per call
--   (the host's GC is stopped during the calls, so the growth of collectgarbage("count") is
--   what they allocated); for a strategy with idle release, what idle release freed after it
--
-- Usage: lua bench/suites/workload.lua --strategy=ID --p=1000 --calls=20000 --cpus=2
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local S = require "strategies"
local baselines = require "baselines"
local vmpool = require "vmpool"

local o = B.options(arg or {})
local strategy = assert(S.by_id[o.strategy], "unknown --strategy")
local P = assert(tonumber(o.p), "--p")
local cpus = assert(tonumber(o.cpus), "--cpus")
local per = math.max(1, math.floor(assert(tonumber(o.calls), "--calls") / P))
local calls = per * P
local clock = vmpool.clock
local CHUNK = B.CHUNK

local result = {
  strategy = strategy.id,
  runtime = vmpool.runtime,
  p = P,
  cpus = cpus,
  calls = calls,
  rss_start_kb = B.status_field("VmRSS"),
}

-- what runs the calls: a function called from each coroutine with its call numbers
local pool, invoke, close
local t_start = clock()
if strategy.kind == "direct" then
  local hello = B.host_functions()
  invoke = hello
  close = function() end
elseif strategy.kind == "vmpool" then
  local opts = strategy.opts(cpus)
  opts.init = B.INIT
  pool = vmpool.new(opts)
  pool:compile(CHUNK, B.SCRIPT)
  invoke = function(i) return pool:co_invoke(CHUNK, "helloLua", i) end
  close = function() pool:close() end
else
  local bp, why = baselines.pool(strategy.kind, cpus)
  if not bp then
    result.absent = why
    print(B.result_line(result))
    return
  end
  close = bp.close
  -- a whole stream instead of coroutines: these libraries have no coroutine integration
  invoke = nil
  pool = bp
end
result.startup_s = clock() - t_start

-- counting runs only: native and host allocations
local alloc_counts
if o.count then
  local probe = vmpool.new { core = 1 }
  alloc_counts = probe._alloc_counts
  probe:close()
  if not alloc_counts then error("--count needs a count-alloc build of vmpool") end
end

local a0, mem0
if alloc_counts then
  collectgarbage("collect")
  collectgarbage("stop")
  a0 = alloc_counts()
  mem0 = collectgarbage("count")
end
local cpu0 = B.cpu_seconds()
local t0 = clock()
if invoke then
  vmpool.run(function()
    for c = 1, P do
      vmpool.spawn(function()
        local base = (c - 1) * per
        for i = base + 1, base + per do
          local n, m = invoke(i)
          if n ~= i or m ~= 100000 then error("wrong result " .. tostring(n) .. ", " .. tostring(m)) end
        end
      end)
    end
  end)
else
  pool.stream(P, calls)
end
local t1 = clock()
local cpu1 = B.cpu_seconds()
if alloc_counts then
  local mem1 = collectgarbage("count")
  local a1 = alloc_counts()
  collectgarbage("restart")
  result.host_lua_bytes = (mem1 - mem0) * 1024 / calls
  result.native_bytes = (a1.bytes - a0.bytes) / calls
  result.native_allocs = (a1.allocs - a0.allocs) / calls
  result.native_live_kb = a1.live / 1024
end

result.seconds = t1 - t0
result.us_per_op = (t1 - t0) * 1e6 / calls
result.calls_per_s = calls / (t1 - t0)
result.cpu_pct = cpu0 and cpu1 and (cpu1 - cpu0) / (t1 - t0) * 100 or nil
result.rss_end_kb = B.status_field("VmRSS")
result.rss_peak_kb = B.status_field("VmHWM")
result.threads_end = B.status_field("Threads")
if strategy.kind == "vmpool" then
  local s = pool:stats()
  result.created, result.closed = s.created, s.closed
  result.core, result.noncore = s.core, s.noncore
  if o.count and strategy.idle_release then
    -- idle release: wait past idle_timeout (the host sleeps; the idle check runs on its thread)
    os.execute(string.format("sleep %.1f", strategy.idle_release * 2 + 0.5))
    local s2 = pool:stats()
    result.idle_closed = s2.closed - s.closed
    result.idle_noncore_left = s2.noncore
    result.idle_rss_kb = B.status_field("VmRSS")
  end
end
close()
print(B.result_line(result))
