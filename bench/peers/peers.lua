-- The peers benchmark, one run of one library in one process (bench/report/run.lua repeats it for vmpool,
-- Lua Lanes and effil on each runtime, interleaved with the micro benchmark, and the report divides
-- each peer's figure by vmpool's from the same repetition). The same four figures for each:
--
--   idle         RSS per idle worker: VmRSS with 1 + N workers up and waiting minus VmRSS with 1,
--                divided by N (measured first, in a fresh process; the first worker pays for the
--                library's own start-up)
--   round_trip   one blocking call of helloLua to one worker (vmpool: core = 1, pool:invoke)
--   stream       1000 calls in flight over CPUs workers, a new call sent as each result arrives
--                (vmpool: core = CPUs, a ring of 1000 pool:submit futures)
--   spawn        no pool: a new worker (Lua state + OS thread, running init and the script) per call
--                (vmpool: core = 0, max_noncore = huge, idle_timeout = 0, as the workload's no-pool row)
--
-- Usage: lua bench/peers/peers.lua --lib=vmpool|lanes|effil [--cpus=2] [--scale=1] [--idle=32]; prints one
-- `return {...}` line (with `absent` and no figures when the library cannot be loaded).
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local baselines = require "baselines"
local vmpool = require "vmpool"

local o = B.options(arg or {})
local lib = o.lib or "vmpool"
local cpus = tonumber(o.cpus) or 2
local scale = tonumber(o.scale) or 1
local IDLE = tonumber(o.idle) or 32
local IN_FLIGHT = 1000
local clock = vmpool.clock
local CHUNK = B.CHUNK

local function count(n) return math.max(1, math.floor(n * scale)) end

local result = {
  lib = lib,
  runtime = vmpool.runtime,
  lua = jit and jit.version or _VERSION, -- luacheck: ignore 113
  cpus = cpus,
  figures = {},
}

-- what each library provides: pool(workers) with call/stream/close, and spawn() -> call(n)
local provider
if lib == "vmpool" then
  provider = {
    pool = function(workers)
      local pool = vmpool.new { core = workers, init = B.INIT }
      pool:compile(CHUNK, B.SCRIPT)
      local p = {}
      function p.call(n) return pool:invoke(CHUNK, "helloLua", n) end
      function p.stream(in_flight, calls)
        local ring, sent = {}, 0
        while sent < in_flight and sent < calls do
          sent = sent + 1
          ring[sent] = pool:submit(CHUNK, "helloLua", sent)
        end
        for got = 1, calls do
          local slot = (got - 1) % in_flight + 1
          local _, m = ring[slot]:wait()
          if m ~= 100000 then error("vmpool: unexpected result " .. tostring(m)) end
          ring[slot] = nil
          if sent < calls then
            sent = sent + 1
            ring[slot] = pool:submit(CHUNK, "helloLua", sent)
          end
        end
      end
      function p.close() pool:close() end
      return p
    end,
    spawn = function()
      local pool = vmpool.new { core = 0, max_noncore = math.huge, idle_timeout = 0, init = B.INIT }
      pool:compile(CHUNK, B.SCRIPT)
      return function(n) return pool:invoke(CHUNK, "helloLua", n) end, function() pool:close() end
    end,
  }
else
  local mod, why = baselines.available(lib)
  if not mod then
    result.absent = why
    print(B.result_line(result))
    return
  end
  result.version = lib == "lanes" and mod.ABOUT and mod.ABOUT.version or mod.version
  provider = {
    pool = function(workers) return assert(baselines.pool(lib, workers)) end,
    spawn = function() return assert(baselines.spawn(lib)), function() end end,
  }
end

--- Runs fn(n) once to warm up, then times fn(n): microseconds per call.
local function timed(name, n, fn, warm)
  fn(warm or math.max(1, math.floor(n / 10)))
  local t0 = clock()
  fn(n)
  result.figures[name] = { us = (clock() - t0) * 1e6 / n, ops = n }
end

local function rss_kb()
  collectgarbage("collect")
  return B.status_field("VmRSS")
end

-- idle workers first: nothing else has run in this process yet
do
  local first = provider.pool(1)
  local before = rss_kb()
  local many = provider.pool(IDLE)
  local after = rss_kb()
  result.figures.idle = { kb_per_worker = (after - before) / IDLE, workers = IDLE }
  many.close()
  first.close()
end

do
  local p = provider.pool(1)
  timed("round_trip", count(20000), function(n)
    for i = 1, n do
      local a, b = p.call(i)
      if a ~= i or b ~= 100000 then error(lib .. ": wrong result " .. tostring(a)) end
    end
  end)
  p.close()
end

do
  local p = provider.pool(cpus)
  timed("stream", count(20) * IN_FLIGHT, function(n) p.stream(IN_FLIGHT, n) end, IN_FLIGHT)
  p.close()
end

do
  local call, close = provider.spawn()
  timed("spawn", count(400), function(n)
    for i = 1, n do
      local a = call(i)
      if a ~= i then error(lib .. ": wrong result of a new worker " .. tostring(a)) end
    end
  end, 10)
  close()
end

result.rss_kb = B.status_field("VmHWM")
print(B.result_line(result))
