-- pool:map's two goals (issue 14): trivial items per second against the best per-call path
-- measured in the same run (co_invoke with many calls in flight under vmpool.run), and how close
-- heavy items come to perfect scaling over the states (the same map on a pool of 1 state and
-- of 2). Rounds interleave the variants; each figure is the median of the rounds with [min-max].
-- Each round also measures the machine's ceiling for that scaling: the heavy items' loop in plain
-- processes of the same runtime, half the items in one process alone, then in two at once
-- (alone time ÷ together time: 1 when the machine gives two busy processes a CPU each).
-- Run with the rock on the path, e.g.:
--   LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/suites/map.lua'
-- Settings: BENCH_REPS (rounds, default 5), BENCH_QUICK=1 (one short round: checks that the
-- script works, as CI runs it; its figures mean nothing), MAP_ITEMS (trivial items, 2,000,000),
-- MAP_HEAVY (heavy items, 400), MAP_WORK (loop iterations per heavy item, about 1 ms: 100,000).
-- --out=FILE also writes every round's figures, the settings and the load average to FILE as a Lua
-- literal (`return {...}`, what bench/report/run.lua's report suite reads).
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local OUT = B.options(arg or {}).out

local QUICK = os.getenv("BENCH_QUICK") == "1"
local REPS = tonumber(os.getenv("BENCH_REPS")) or (QUICK and 1 or 5)
local ITEMS = tonumber(os.getenv("MAP_ITEMS")) or (QUICK and 20000 or 2000000)
local HEAVY = tonumber(os.getenv("MAP_HEAVY")) or (QUICK and 16 or 400)
local WORK = tonumber(os.getenv("MAP_WORK")) or (QUICK and 1000 or 100000)
local IN_FLIGHT = QUICK and 100 or 4000
local CO_CALLS = math.min(ITEMS, QUICK and 2000 or 400000) -- calls per co_invoke measurement

-- heavy(n) returns the seconds it ran, so that the map's time can be split into the states' busy
-- time and their idle time
local CHUNK = [[
local clock = require("vmpool").clock
function id(x) return x end
function heavy(n)
  local t0, x = clock(), 0
  for i = 1, n do x = (x + i * 7) % 1000003 end
  return clock() - t0 + x * 0 -- x used: the loop is work no compiler may drop
end
]]

local function median(xs)
  local s = {}
  for i = 1, #xs do s[i] = xs[i] end
  table.sort(s)
  local n = #s
  local m = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return m, s[1], s[n]
end

local function summary(xs, fmt)
  local m, lo, hi = median(xs)
  return string.format(fmt .. " [" .. fmt .. "-" .. fmt .. "]", m, lo, hi)
end

local function loadavg()
  local f = io.open("/proc/loadavg")
  if not f then return "unknown" end
  local l = f:read("*l")
  f:close()
  return l:match("^(%S+ %S+ %S+)")
end

local function new_pool(core)
  local pool = vmpool.new { core = core }
  pool:compile("m", CHUNK)
  return pool
end

-- trivial items per second through pool:map
local function map_rate(pool, list)
  local t0 = vmpool.clock()
  local r = pool:map("m", "id", list)
  local dt = vmpool.clock() - t0
  assert(r[#list] == list[#list])
  return #list / dt
end

-- calls per second through co_invoke with IN_FLIGHT coroutines under vmpool.run
local function co_invoke_rate(pool, calls)
  local per = math.ceil(calls / IN_FLIGHT)
  local t0 = vmpool.clock()
  vmpool.run(function()
    for c = 1, IN_FLIGHT do
      vmpool.spawn(function()
        for i = 1, per do pool:co_invoke("m", "id", c + i) end
      end)
    end
  end)
  return per * IN_FLIGHT / (vmpool.clock() - t0)
end

-- The ceiling's child: the heavy loop over half the items, timed inside the process (so that
-- process start-up does not count); prints its seconds.
local INTERP = arg and arg[-1]
local CEILING_CHILD = [[
local clock = require("vmpool").clock
%s
local t0 = clock()
for _ = 1, %d do heavy(%d) end
io.write(string.format("%%.6f", clock() - t0))
]]

local function shell_quote(text)
  return "'" .. text:gsub("'", "'\\''") .. "'"
end

-- the longest of `procs` processes' loop times, started together; nil if a child failed
local function ceiling_time(procs)
  local source = string.format(CEILING_CHILD, CHUNK, math.max(1, math.floor(HEAVY / 2)), WORK)
  local cmd = INTERP .. " -e " .. shell_quote(source)
  local running = {}
  for i = 1, procs do running[i] = io.popen(cmd) end
  local longest = 0
  for i = 1, procs do
    local seconds = tonumber(running[i]:read("*a"))
    running[i]:close()
    if not seconds then return nil end
    longest = math.max(longest, seconds)
  end
  return longest
end

-- seconds one map of the heavy items takes, the CPUs the process used meanwhile (process CPU
-- time / wall time), and the seconds the items ran, summed
local function heavy_time(pool, list)
  local t0, c0 = vmpool.clock(), os.clock()
  local ran = pool:map("m", "heavy", list)
  local dt = vmpool.clock() - t0
  local busy = 0
  for i = 1, #ran do busy = busy + ran[i] end
  return dt, (os.clock() - c0) / dt, busy
end

local probe = vmpool.new()
local cpus = probe:stats().core -- the default core: the CPUs this process may use
probe:close()
local load_before = loadavg()
print(string.format("bench/suites/map.lua on %s, %d CPUs, load average before: %s%s", vmpool.runtime, cpus,
  load_before, QUICK and " (BENCH_QUICK=1: a check that the script runs, not a measurement)" or ""))

local list = {}
for i = 1, ITEMS do list[i] = i end
local heavy = {}
for i = 1, HEAVY do heavy[i] = WORK end

local pool = new_pool(cpus)
local one, two = new_pool(1), new_pool(2)
-- warm up: chunks loaded in every state, caches filled
map_rate(pool, list)
co_invoke_rate(pool, IN_FLIGHT)
heavy_time(one, heavy)
heavy_time(two, heavy)

local mapped, invoked, ratio, t1s, t2s, eff, cpu2 = {}, {}, {}, {}, {}, {}, {}
local c1s, c2s, ceiling, relative = {}, {}, {}, {}
local busy1, busy2, busy_share, slowdown = {}, {}, {}, {}
for r = 1, REPS do
  mapped[r] = map_rate(pool, list)
  invoked[r] = co_invoke_rate(pool, CO_CALLS)
  ratio[r] = mapped[r] / invoked[r]
  -- alternate which pool goes first, so that a drift in the machine's load hits both alike
  local _
  if r % 2 == 1 then
    t1s[r], _, busy1[r] = heavy_time(one, heavy)
    t2s[r], cpu2[r], busy2[r] = heavy_time(two, heavy)
  else
    t2s[r], cpu2[r], busy2[r] = heavy_time(two, heavy)
    t1s[r], _, busy1[r] = heavy_time(one, heavy)
  end
  eff[r] = t1s[r] / t2s[r] / 2
  -- eff = (share of the 2-state map's time its states ran items) x (1-state item time / 2-state
  -- item time) x (the same share for the 1-state map, about 1)
  busy_share[r] = busy2[r] / (2 * t2s[r])
  slowdown[r] = busy2[r] / busy1[r]
  c1s[r], c2s[r] = ceiling_time(1), ceiling_time(2)
  if c1s[r] and c2s[r] then
    ceiling[#ceiling + 1] = c1s[r] / c2s[r]
    relative[#relative + 1] = eff[r] / ceiling[#ceiling]
  end
end

print(string.format("trivial items, pool:map on %d states: %s items/s", cpus, summary(mapped, "%.0f")))
print(string.format("the same function through co_invoke, %d in flight: %s calls/s", IN_FLIGHT,
  summary(invoked, "%.0f")))
print(string.format("map / co_invoke, per round: %s (goal: 2,000,000 items/s on 2 CPUs)", summary(ratio, "%.2f")))
print(string.format("heavy items (%d of heavy(%d)): 1 state %s s, 2 states %s s", HEAVY, WORK,
  summary(t1s, "%.3f"), summary(t2s, "%.3f")))
print(string.format("scaling efficiency (1-state time / 2-state time / 2), per round: %s (goal: >= 0.95)",
  summary(eff, "%.3f")))
print(string.format("CPUs the process got during the 2-state maps: %s (process CPU time / wall time)",
  summary(cpu2, "%.2f")))
print(string.format("share of the 2-state map's time its states ran items: %s", summary(busy_share, "%.3f")))
print(string.format("an item's time with 2 states running / with 1: %s", summary(slowdown, "%.3f")))
if #ceiling > 0 then
  print(string.format("the machine's ceiling (the same loop in 1 process, then 2 at once: time alone / together): "
    .. "%s", summary(ceiling, "%.3f")))
  print(string.format("scaling efficiency / ceiling, per round: %s", summary(relative, "%.3f")))
else
  print("the machine's ceiling: not measured (a child process of " .. tostring(INTERP) .. " could not load vmpool)")
end
local load_after = loadavg()
print("load average after: " .. load_after)
pool:close()
one:close()
two:close()

if OUT then
  -- the raw figures of every round: whoever reads the file computes the ratios and medians
  local f = assert(io.open(OUT, "w"))
  f:write("return ", B.literal {
    runtime = vmpool.runtime, cpus = cpus, quick = QUICK, rounds = REPS, items = ITEMS, heavy_items = HEAVY,
    heavy_work = WORK, in_flight = IN_FLIGHT, co_invoke_calls = CO_CALLS,
    map_items_per_s = mapped, co_invoke_calls_per_s = invoked, heavy_1state_s = t1s, heavy_2states_s = t2s,
    cpus_during_2states = cpu2, heavy_1state_busy_s = busy1, heavy_2states_busy_s = busy2,
    ceiling_alone_s = c1s, ceiling_together_s = c2s,
    loadavg_before = load_before, loadavg_after = load_after,
  }, "\n")
  f:close()
end
