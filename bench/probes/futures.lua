-- Futures with 1,000 in flight (issue 14, item 6): calls/s through pool:submit / fut:wait, in two
-- patterns, next to co_invoke from 1,000 coroutines under vmpool.run in the same rounds.
--
--   ring     1,000 futures; wait for the oldest, submit a new one in its place
--   batches  submit 1,000, then wait for each, again
--   run      pool:co_invoke from 1,000 coroutines under vmpool.run (the baseline)
--
-- Each round measures the three once, in a rotating order; medians of the rounds with [min-max],
-- and the process's CPU time per call (os.clock: every thread). Default pool, echo calls.
--
-- Usage (the rock on the path): LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/probes/futures.lua'
--   [--rounds=5] [--calls=300000]; --quick or BENCH_QUICK=1 checks that it works.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local o = B.options(arg or {})
o.quick = o.quick or os.getenv("BENCH_QUICK") == "1"
local ROUNDS = tonumber(o.rounds) or (o.quick and 1 or 5)
local CALLS = tonumber(o.calls) or (o.quick and 10000 or 300000)
local IN_FLIGHT = 1000

local pool = vmpool.new {}
pool:compile("c", "function echo(...) return ... end")

local patterns = {
  ring = function(n)
    local ring = {}
    for i = 1, IN_FLIGHT do ring[i] = pool:submit("c", "echo", i) end
    for i = IN_FLIGHT + 1, n + IN_FLIGHT do
      local k = (i - 1) % IN_FLIGHT + 1
      if ring[k]:wait() ~= i - IN_FLIGHT then error("ring: wrong result") end
      if i <= n then ring[k] = pool:submit("c", "echo", i) end
    end
  end,
  batches = function(n)
    local futs = {}
    for done = 0, n - 1, IN_FLIGHT do
      for i = 1, IN_FLIGHT do futs[i] = pool:submit("c", "echo", done + i) end
      for i = 1, IN_FLIGHT do
        if futs[i]:wait() ~= done + i then error("batches: wrong result") end
      end
    end
  end,
  run = function(n)
    local per = math.floor(n / IN_FLIGHT)
    vmpool.run(function()
      for _ = 1, IN_FLIGHT do
        vmpool.spawn(function()
          for j = 1, per do
            if pool:co_invoke("c", "echo", j) ~= j then error("run: wrong result") end
          end
        end)
      end
    end)
  end,
}
local ORDER = { "ring", "batches", "run" }

local rates, cpus = {}, {}
for _, name in ipairs(ORDER) do rates[name], cpus[name] = {}, {} end
local n = math.floor(CALLS / IN_FLIGHT) * IN_FLIGHT
for round = 1, ROUNDS do
  for k = 0, #ORDER - 1 do
    local name = ORDER[(round - 1 + k) % #ORDER + 1]
    collectgarbage()
    local t, c = vmpool.clock(), os.clock()
    patterns[name](n)
    rates[name][round] = n / (vmpool.clock() - t)
    cpus[name][round] = (os.clock() - c) * 1e6 / n
  end
end
pool:close()

local load = io.open("/proc/loadavg")
print(("Futures, %s, %d in flight, %d echo calls per figure and round, %d rounds, load average %s"):format(
  vmpool.runtime, IN_FLIGHT, n, ROUNDS, load and load:read("*l"):match("^(%S+ %S+ %S+)") or "?"))
if load then load:close() end
print("")
print("| pattern | calls/s median [min-max] | x run (median of per-round ratios) | CPU µs per call |")
print("|---|--:|--:|--:|")
for _, name in ipairs(ORDER) do
  local r, c = B.summary(rates[name]), B.summary(cpus[name])
  local ratios = {}
  for i = 1, ROUNDS do ratios[i] = rates[name][i] / rates.run[i] end
  print(("| %s | %.0f [%.0f-%.0f] | %.2f | %.2f |"):format(name, r.median, r.min, r.max, B.median(ratios), c.median))
end
print("")
print("goal (issue 14): >= 500,000 calls/s through futures on Lua 5.4, 2 CPUs")
