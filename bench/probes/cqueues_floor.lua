-- What a cqueues controller costs per wake-up, before vmpool does anything: the floor under
-- vmpool.cqueues's calls path. 1,000 coroutines of one controller each wait on a condition of
-- their own (as vmpool.cqueues's waiters do) and one coroutine signals them in rounds (as its
-- dispatcher does), against a plain coroutine.resume/yield of 1,000 coroutines from a Lua loop
-- (what vmpool.run's driver does). No pool, no threads.
--
-- Usage: lua bench/probes/cqueues_floor.lua [--rounds=N]   (any runtime with lua-cqueues; BENCH_QUICK=1,
-- as scripts/bench-smoke.sh runs it, makes 5 rounds)
--        lua bench/probes/cqueues_floor.lua --only=controller|plain --rounds=N   runs that path once and
-- prints nothing: for callgrind, whose counts at two values of N, subtracted and divided by
-- 1,000 x their difference, are the instructions per wake-up
-- (bench/results/2026-12-03-cqueues-instructions.md)
package.path = "bench/lib/?.lua;" .. package.path
local benchlib = require "benchlib"
local cqueues = require "cqueues"
local condition = require "cqueues.condition"

local opts = benchlib.options(arg or {})
local ROUNDS = tonumber(opts.rounds) or (os.getenv("BENCH_QUICK") == "1" and 5 or 200)
local N = 1000
local POLL = cqueues._POLL
local yield = coroutine.yield
local clock = os.clock

local function through_controller()
  local cq = cqueues.new()
  local conds, waiting, queue, queued, done = {}, {}, {}, 0, 0
  for i = 1, N do conds[i] = condition.new() end
  for i = 1, N do
    cq:wrap(function()
      local c = conds[i]
      for _ = 1, ROUNDS do
        queued = queued + 1
        queue[queued] = i
        waiting[i] = c
        if POLL then yield(POLL, c) else c:wait() end
      end
      done = done + 1
    end)
  end
  local signal = conds[1].signal
  cq:wrap(function()
    while done < N do
      cqueues.sleep(0)
      local q, n = queue, queued
      queue, queued = {}, 0
      for k = 1, n do
        local i = q[k]
        local c = waiting[i]
        waiting[i] = false
        signal(c)
      end
    end
  end)
  local t = clock()
  assert(cq:loop())
  return (clock() - t) / (N * ROUNDS)
end

local function plain()
  local cos = {}
  for i = 1, N do
    cos[i] = coroutine.create(function() for _ = 1, ROUNDS + 1 do yield() end end)
  end
  local resume = coroutine.resume
  local t = clock()
  for _ = 1, ROUNDS do
    for i = 1, N do resume(cos[i]) end
  end
  return (clock() - t) / (N * ROUNDS)
end

if opts.only then
  local path = ({ controller = through_controller, plain = plain })[opts.only]
  assert(path, "--only=controller or --only=plain")
  path()
  return
end

local a, b = {}, {}
for r = 1, 5 do -- interleaved, the order alternating
  if r % 2 == 1 then
    a[r], b[r] = through_controller(), plain()
  else
    b[r], a[r] = plain(), through_controller()
  end
end
local ratios = {}
for r = 1, 5 do ratios[r] = a[r] / b[r] end
local function us(list)
  local s = benchlib.summary(list)
  return string.format("%.3f [%.3f-%.3f]", s.median * 1e6, s.min * 1e6, s.max * 1e6)
end
print(string.format("## A wake-up through a cqueues controller, %d coroutines, %d rounds, 5 repetitions (%s)",
  N, ROUNDS, jit and jit.version or _VERSION))
print("| path | µs per wake-up median [min-max] |")
print("|---|--:|")
print("| condition signalled, resumed by the controller | " .. us(a) .. " |")
print("| coroutine.resume / yield from a Lua loop | " .. us(b) .. " |")
print(string.format("ratio (median of per-repetition ratios): %.2fx", benchlib.summary(ratios).median))
