-- What the execution limits cost and how precise the time limit is (the figures quoted in the
-- README's Guarantees section). Run with the rock on the path, e.g.:
--   LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/probes/limits.lua'
-- or on every runtime:
--   for L in lua5.1 lua5.4 luajit; do LUA=$L sh -c ". scripts/luaenv.sh && $L bench/probes/limits.lua"; done
-- Prints medians of BENCH_REPS (5) runs with [min-max].
local vmpool = require "vmpool"

-- BENCH_QUICK=1: one short repetition, to check that the script works (not to measure)
local QUICK = os.getenv("BENCH_QUICK") == "1"
local REPS = tonumber(os.getenv("BENCH_REPS")) or (QUICK and 1 or 5)
local LOOP = QUICK and 300000 or 30000000

local CHUNK = [[
return {
  loop = function(n) local x = 0 for i = 1, n do x = x + i % 7 end return x end,
  forever = function() while true do end end,
}
]]

local function median(xs)
  table.sort(xs)
  local n = #xs
  local m = n % 2 == 1 and xs[(n + 1) / 2] or (xs[n / 2] + xs[n / 2 + 1]) / 2
  return m, xs[1], xs[n]
end

local function summary(xs, scale, unit)
  local m, lo, hi = median(xs)
  return string.format("%.3g %s [%.3g-%.3g]", m * scale, unit, lo * scale, hi * scale)
end

-- seconds one call of loop(LOOP) takes in a pool with these options
local function loop_time(opts)
  local pool = vmpool.new(opts)
  pool:compile("l", CHUNK)
  pool:invoke("l", "loop", 1000) -- load the chunk
  local times = {}
  for r = 1, REPS do
    local t0 = vmpool.clock()
    pool:invoke("l", "loop", LOOP)
    times[r] = vmpool.clock() - t0
  end
  pool:close()
  return times
end

print(string.format("vmpool %s on %s, %d reps", vmpool._VERSION, vmpool.runtime, REPS))

local rows = {
  { "no time_limit (no hook)", { core = 1 } },
  { "time_limit = math.huge (hook, no deadline)", { core = 1, time_limit = math.huge } },
}
if jit then
  table.insert(rows, 2, { "no time_limit, jit = false", { core = 1, jit = false } })
end
local base
for _, row in ipairs(rows) do
  local times = loop_time(row[2])
  local m = median(times)
  base = base or m
  print(string.format("loop(%d): %-44s %s  (%.2fx)", LOOP, row[1], summary(times, 1e3, "ms"), m / base))
end

-- precision: how long after its deadline a runaway call fails (replacement state included)
local LIMIT = 0.05
local pool = vmpool.new { core = 1, time_limit = LIMIT }
pool:compile("l", CHUNK)
local late = {}
for r = 1, REPS * 4 do
  local t0 = vmpool.clock()
  local ok, err = pcall(pool.invoke, pool, "l", "forever")
  assert(not ok and err:match("^vmpool: time limit exceeded"), err)
  late[r] = vmpool.clock() - t0 - LIMIT
end
pool:close()
print(string.format("time_limit = %gs: error after the deadline by %s", LIMIT, summary(late, 1e3, "ms")))
