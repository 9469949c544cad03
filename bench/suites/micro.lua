-- The micro benchmark, one measurement of each figure in one process (bench/report/run.lua repeats the
-- process, interleaved with the other runtimes and the Rust ping-pong, and takes medians):
--
--   direct       helloLua(i) called in the host: the floor
--   invoke       pool:invoke(chunk, "helloLua", i), one caller, core = 1: the blocking round trip
--                (mean over the loop; invoke_latency: percentiles of the same call timed one by one)
--   echo10       pool:invoke of echo(t) with a 10-field table (t goes in, a copy comes back)
--   submit       pool:submit, 1000 futures in flight (submit 1000, then wait each), default pool
--   co_invoke    pool:co_invoke from 1000 coroutines under vmpool.run, default pool
--   window       futures as a sliding window (1000 in flight, wait for the oldest, submit one), a
--                fresh core = 2 pool in a process of its own (bench/suites/window.lua), the whole
--                process timed: start-up, the pool's first calls and its close included
--
-- Lua Lanes and effil are measured by bench/peers/peers.lua, in the same interleaved repetitions.
--
-- With a count-alloc build of the module (pool._alloc_counts exists) each figure also records the
-- native bytes and allocations per call, and the host Lua heap growth per call with the host's GC
-- stopped during the measured loop (so the growth is what the loop allocated).
--
-- Usage: lua bench/suites/micro.lua [--scale=1] [--warm=30000] ; prints one `return {...}` line.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local o = B.options(arg or {})
local scale = tonumber(o.scale) or 1
local clock = vmpool.clock
local CHUNK = B.CHUNK
local IN_FLIGHT = 1000

local function count(n) return math.max(1, math.floor(n * scale)) end

local result = {
  runtime = vmpool.runtime,
  lua = jit and jit.version or _VERSION, -- luacheck: ignore 113
  vmpool = vmpool._VERSION,
  cpus = tonumber(o.cpus),
  figures = {},
}

local function new_pool(opts)
  opts.init = B.INIT
  local p = vmpool.new(opts)
  p:compile(CHUNK, B.SCRIPT)
  return p
end

local pool1 = new_pool { core = 1 }
local pool_default = new_pool {}
local alloc_counts = pool1._alloc_counts
result.counting = alloc_counts ~= nil

--- Runs fn(n) once to warm up, then measures fn(n): microseconds per op (and allocations).
local function measure(name, n, fn, warm)
  fn(warm or math.max(1, math.floor(n / 10)))
  local f = {}
  local a0, mem0
  if alloc_counts then
    collectgarbage("collect")
    collectgarbage("stop")
    a0 = alloc_counts()
    mem0 = collectgarbage("count")
  end
  local t0 = clock()
  fn(n)
  local dt = clock() - t0
  if alloc_counts then
    local mem1 = collectgarbage("count")
    local a1 = alloc_counts()
    collectgarbage("restart")
    f.host_lua_bytes = (mem1 - mem0) * 1024 / n
    f.native_bytes = (a1.bytes - a0.bytes) / n
    f.native_allocs = (a1.allocs - a0.allocs) / n
    f.native_host_bytes = (a1.host_bytes - a0.host_bytes) / n
    f.native_pool_bytes = (a1.pool_bytes - a0.pool_bytes) / n
    f.native_host_allocs = (a1.host_allocs - a0.host_allocs) / n
    f.native_pool_allocs = (a1.pool_allocs - a0.pool_allocs) / n
  end
  f.us = dt * 1e6 / n
  f.ops = n
  result.figures[name] = f
end

local hello, echo = B.host_functions()

measure("direct", count(2000000), function(n)
  local sum = 0
  for i = 1, n do
    local a, b = hello(i)
    sum = sum + a + b
  end
  if sum == 0 then error("unreachable") end
end)

measure("invoke", count(20000), function(n)
  for i = 1, n do
    local a, b = pool1:invoke(CHUNK, "helloLua", i)
    if a ~= i or b ~= 100000 then error("invoke: wrong result " .. tostring(a)) end
  end
end)

-- the same round trip, each call timed: the distribution behind the mean above
do
  local n = count(20000)
  local lat = {}
  for i = 1, n do
    local t0 = clock()
    pool1:invoke(CHUNK, "helloLua", i)
    lat[i] = (clock() - t0) * 1e6
  end
  table.sort(lat)
  local function q(f) return lat[math.max(1, math.floor(n * f))] end
  result.figures.invoke_latency = { p10 = q(0.1), p50 = q(0.5), p90 = q(0.9), p99 = q(0.99), max = lat[n], ops = n }
end

local t10 = B.table10()
measure("echo10_direct", count(2000000), function(n)
  for _ = 1, n do
    local r = echo(t10)
    if r ~= t10 then error("unreachable") end
  end
end)
measure("echo10", count(20000), function(n)
  for _ = 1, n do
    local r = pool1:invoke(CHUNK, "echo", t10)
    if r.j ~= 10 then error("echo10: wrong result") end
  end
end)

-- The two figures with 1,000 calls in flight are warmed up with 30,000 calls (--warm=N: N), not
-- the others' tenth: the pool keeps up to 32,768 spare call records, and until a run has made
-- about 20,000 calls it is still creating them (the host's collector finalizes dead futures in
-- batches of ~20,000; bench/results/2026-12-01-futures-host-path.md). A shorter warm-up measured
-- that transient, not the steady state: futures made 0.57-0.77M calls/s after 1,000 calls against
-- 1.06-1.14M after 30,000, three runs each on Lua 5.4 (bench/results/2026-12-04-futures-warm-up.md).
local WARM_IN_FLIGHT = tonumber(o.warm) or count(30) * IN_FLIGHT

measure("submit", count(20) * IN_FLIGHT, function(n)
  local futs = {}
  local done = 0
  while done < n do
    local batch = math.min(IN_FLIGHT, n - done)
    for i = 1, batch do futs[i] = pool_default:submit(CHUNK, "helloLua", done + i) end
    for i = 1, batch do
      local a = futs[i]:wait()
      if a ~= done + i then error("submit: wrong result " .. tostring(a)) end
      futs[i] = nil
    end
    done = done + batch
  end
end, WARM_IN_FLIGHT)

measure("co_invoke", count(20) * IN_FLIGHT, function(n)
  local per = math.floor(n / IN_FLIGHT)
  if per < 1 then per = 1 end
  vmpool.run(function()
    for c = 1, math.min(IN_FLIGHT, n) do
      vmpool.spawn(function()
        for i = 1, per do
          local a = pool_default:co_invoke(CHUNK, "helloLua", i)
          if a ~= i then error("co_invoke: wrong result " .. tostring(a)) end
        end
      end, c)
    end
  end)
end, WARM_IN_FLIGHT)

-- Not with a count-alloc build: the figure is another process's.
if not alloc_counts and arg and arg[-1] then
  local n = count(300) * IN_FLIGHT
  local cmd = ("%s %s/window.lua --n=%d"):format(arg[-1], dir, n)
  local t0 = clock()
  local out = io.popen(cmd)
  local checked = tonumber(out:read("*a"))
  out:close()
  local us = (clock() - t0) * 1e6 / n
  if checked ~= n then error("window: the child process failed: " .. cmd) end
  result.figures.window = { us = us }
end

pool1:close()
pool_default:close()

result.rss_kb = B.status_field("VmHWM")
print(B.result_line(result))
