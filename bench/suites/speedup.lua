-- Does offloading pay? (issue 14, item 4.) For calls of about 1, 10, 100 and 1,000 µs of Lua work,
-- the speedup of pool:co_invoke (1,000 coroutines in flight under vmpool.run) and of pool:map over
-- running the same calls one after another in the host, with a pool of one state per CPU the
-- process may use. Run it under `taskset -c 0` and `taskset -c 0,1` to get the 1- and 2-CPU rows;
-- the break-even call size is the smallest size whose speedup is above 1.
--
-- Each round measures serial, co_invoke and map once per size, in a rotating order; medians of
-- the rounds with [min-max]. The call count per size keeps each measurement near 0.2 s.
-- Usage (the rock on the path):
--   LUA=lua5.4 sh -c '. scripts/luaenv.sh && taskset -c 0,1 lua5.4 bench/suites/speedup.lua'
--   [--rounds=5]; --quick or BENCH_QUICK=1 checks that it works; --out=FILE also writes every
--   round's figures, the settings and the load average to FILE as a Lua literal (`return {...}`,
--   what bench/report/run.lua's report suite reads).
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local o = B.options(arg or {})
local quick = o.quick or os.getenv("BENCH_QUICK") == "1"
local rounds = tonumber(o.rounds) or (quick and 1 or 5)
local budget = quick and 0.01 or 0.2 -- seconds of serial work per size and round
local clock = vmpool.clock
local SIZES_US = { 1, 10, 100, 1000 }

local WORK = [[
function spin(n) local x = 0 for i = 1, n do x = x + i % 7 end return x end
return { spin = spin }
]]
local work = assert((loadstring or load)(WORK))()

-- iterations of spin per microsecond in the host
local function calibrate()
  local n = 1000
  while true do
    local t0 = clock()
    work.spin(n)
    local dt = clock() - t0
    if dt > 0.05 then return n / (dt * 1e6) end
    n = n * 2
  end
end
local per_us = calibrate()

-- the CPUs this process may use (nproc honours taskset)
local ncpu = tonumber(io.popen("nproc"):read("*l")) or 1

local function loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("*l"):match("^(%S+ %S+ %S+)") or "?"
  if f then f:close() end
  return l
end
local load_before = loadavg()

local pool = vmpool.new { core = ncpu, max_noncore = 0 }
pool:compile("w", WORK)

local function serial(n, calls)
  local t0 = clock()
  for _ = 1, calls do work.spin(n) end
  return clock() - t0
end

local function co(n, calls)
  local t0 = clock()
  vmpool.run(function()
    local live = math.min(calls, 1000)
    local next_call = live
    for _ = 1, live do
      vmpool.spawn(function()
        pool:co_invoke("w", "spin", n)
        while next_call < calls do
          next_call = next_call + 1
          pool:co_invoke("w", "spin", n)
        end
      end)
    end
  end)
  return clock() - t0
end

local function map(n, calls)
  local list = {}
  for i = 1, calls do list[i] = n end
  local t0 = clock()
  pool:map("w", "spin", list)
  return clock() - t0
end

local ways = { serial = serial, co_invoke = co, map = map }
local order = { "serial", "co_invoke", "map" }
local samples, iterations, calls_of = {}, {}, {}
for _, us in ipairs(SIZES_US) do
  samples[us] = { serial = {}, co_invoke = {}, map = {} }
end
for round = 1, rounds do
  for _, us in ipairs(SIZES_US) do
    local n = math.max(1, math.floor(us * per_us + 0.5))
    local calls = math.max(20, math.floor(budget * 1e6 / us))
    iterations[us], calls_of[us] = n, calls
    for i = 0, #order - 1 do
      local way = order[(round - 1 + i) % #order + 1]
      local s = samples[us][way]
      s[#s + 1] = ways[way](n, calls) / calls * 1e6 -- µs per call
    end
  end
end
pool:close()

local load = loadavg()
print(("Offloading speedup, %s, %d CPUs for the process, pool of %d states, %d rounds, load average %s")
  :format(vmpool.runtime, ncpu, ncpu, rounds, load))
print("")
print("| call size | serial µs/call | co_invoke speedup | map speedup |")
print("|---|--:|--:|--:|")
local even = { co_invoke = nil, map = nil }
for _, us in ipairs(SIZES_US) do
  local s = samples[us]
  local base = B.summary(s.serial)
  local row = { ("| ~%d µs | %.2f [%.2f-%.2f]"):format(us, base.median, base.min, base.max) }
  for _, way in ipairs { "co_invoke", "map" } do
    local ratios = {}
    for i = 1, #s[way] do ratios[i] = s.serial[i] / s[way][i] end
    local r = B.summary(ratios)
    row[#row + 1] = ("%.2fx [%.2f-%.2f]"):format(r.median, r.min, r.max)
    if r.median > 1 and not even[way] then even[way] = us end
  end
  print(table.concat(row, " | ") .. " |")
end
print("")
for _, way in ipairs { "co_invoke", "map" } do
  local from = even[way] and ("~" .. even[way] .. " µs") or "(none measured)"
  print(("%s pays (speedup > 1) from calls of %s"):format(way, from))
end

if o.out then
  -- every round's µs per call of each way, so that whoever reads the file computes the ratios
  local f = assert(io.open(o.out, "w"))
  f:write("return ", B.literal {
    runtime = vmpool.runtime, cpus = ncpu, core = ncpu, rounds = rounds, quick = quick, budget_s = budget,
    sizes_us = SIZES_US, spin_per_us = per_us, iterations = iterations, calls = calls_of,
    us_per_call = samples, loadavg_before = load_before, loadavg_after = loadavg(),
  }, "\n")
  f:close()
end
