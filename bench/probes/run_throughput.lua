-- Calls/s through vmpool.run alone: N coroutines in flight, each making a number of echo calls
-- with pool:co_invoke, on the default pool. This is the loop of bench/probes/adapters.lua's throughput
-- part without the adapters, for measuring a change of vmpool.run's own path (an A/B against
-- another build's rock, or under `strace -f -c -e trace=futex` with --reps=1 to count system calls).
--
-- Each repetition is one vmpool.run; the figure is the median of the repetitions with [min-max].
--
-- Usage (the rock on the path): LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/probes/run_throughput.lua'
--   [--coroutines=1000] [--calls=200] [--reps=5]; --quick or BENCH_QUICK=1 checks that it works.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local o = B.options(arg or {})
o.quick = o.quick or os.getenv("BENCH_QUICK") == "1"
local COROUTINES = tonumber(o.coroutines) or (o.quick and 100 or 1000)
local CALLS = tonumber(o.calls) or (o.quick and 20 or 200)
local REPS = tonumber(o.reps) or (o.quick and 1 or 5)

local pool = vmpool.new {}
pool:compile("c", "function echo(...) return ... end")

local function once()
  local done = 0
  vmpool.run(function()
    for _ = 1, COROUTINES do
      vmpool.spawn(function()
        for j = 1, CALLS do
          if pool:co_invoke("c", "echo", j) ~= j then error("run_throughput: wrong result") end
        end
        done = done + 1
      end)
    end
  end)
  if done ~= COROUTINES then error("run_throughput: " .. done .. " of " .. COROUTINES .. " coroutines finished") end
end

local rates = {}
for rep = 1, REPS do
  collectgarbage()
  local t = vmpool.clock()
  once()
  rates[rep] = COROUTINES * CALLS / (vmpool.clock() - t)
end
pool:close()

local s = B.summary(rates)
local load = io.open("/proc/loadavg")
print(("vmpool.run, %s, %d coroutines x %d echo calls, %d repetitions, load average %s"):format(
  vmpool.runtime, COROUTINES, CALLS, REPS, load and load:read("*l"):match("^(%S+ %S+ %S+)") or "?"))
if load then load:close() end
print(("calls/s: %.0f [%.0f-%.0f]"):format(s.median, s.min, s.max))
