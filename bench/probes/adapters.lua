-- The event-loop adapters (vmpool.luv, vmpool.cqueues) against vmpool.run, in one process of the
-- runtime that runs this file (bench/README.md has the command):
--
--   wake-ups   1,000 calls in flight on 100 states (each sleeps CALL_SECONDS in its state): how
--              often a waiting coroutine was resumed per completed call (goal <= 1.1), how many of
--              those found their call unfinished, and how often the loop itself woke (the poll
--              callback / the dispatcher) per completed call. Counts, from the adapters' stats();
--              for comparison the README's hand-written cqueues awaiter
--              (`while not fut:ready() do cqueues.poll(fut) end`), whose waiters all poll the
--              pool's one descriptor.
--   cpu        the main thread's CPU time while every coroutine waits (100 calls on 100 states,
--              from the last submission to the first completion), as a share of one CPU (goal
--              <= 2%): getrusage(RUSAGE_THREAD) through LuaJIT's ffi, else /proc/thread-self/stat
--              (10 ms ticks).
--   throughput calls/s of echo calls with 1,000 coroutines in flight, through each adapter and
--              through vmpool.run, repetitions interleaved (the order rotates); the ratio to
--              vmpool.run is the median of the per-repetition ratios (goal >= 0.7x); and the
--              process's CPU time per call (os.clock, every thread). Timed: run it on a quiet
--              machine.
--
-- Usage: lua bench/probes/adapters.lua [--short] [--part=wakeups|cpu|throughput] [--reps=N]
-- --short is what CI runs once (scripts/test.sh): fewer, shorter calls, one repetition; it fails
-- (exit 1) only on the wake-up counts, which machine noise does not move.
package.path = "bench/lib/?.lua;" .. package.path
local benchlib = require "benchlib"
local vmpool = require "vmpool"

local opts = benchlib.options(arg or {})
local SHORT = opts.short == true
local PARTS = opts.part and { [opts.part] = true } or { wakeups = true, cpu = true, throughput = true }
local REPS = tonumber(opts.reps) or (SHORT and 1 or 5)

local IN_FLIGHT, STATES = 1000, 100
local CALL_SECONDS = SHORT and 0.02 or 0.2 -- each call of the wake-up count
local WAIT_SECONDS = SHORT and 0.3 or 2 -- each call of the CPU measurement
local THROUGHPUT_CALLS = SHORT and 5000 or 200000

local has_luv, uv = pcall(require, "luv")
local has_cqueues, cqueues = pcall(require, "cqueues")
local vluv = has_luv and require "vmpool.luv"
local vcq = has_cqueues and require "vmpool.cqueues"

local CHUNK = [[
local socket = require "socket"
function sleep(s, x) socket.sleep(s) return x end
function echo(...) return ... end
]]

--- the main thread's CPU seconds (user + system) ------------------------------------------------

local thread_cpu
do
  local ok, ffi = pcall(require, "ffi")
  if ok then
    ffi.cdef [[
      struct vmpool_timeval { long tv_sec; long tv_usec; };
      struct vmpool_rusage { struct vmpool_timeval ru_utime, ru_stime; long ru_rest[14]; };
      int getrusage(int who, struct vmpool_rusage *usage);
    ]]
    local ru = ffi.new("struct vmpool_rusage")
    local RUSAGE_THREAD = 1
    thread_cpu = function()
      assert(ffi.C.getrusage(RUSAGE_THREAD, ru) == 0)
      return tonumber(ru.ru_utime.tv_sec) + tonumber(ru.ru_stime.tv_sec)
        + (tonumber(ru.ru_utime.tv_usec) + tonumber(ru.ru_stime.tv_usec)) * 1e-6
    end
  else
    local p = io.popen("getconf CLK_TCK 2>/dev/null")
    local clk_tck = p and tonumber(p:read("*l")) or 100
    if p then p:close() end
    thread_cpu = function()
      local s = assert(benchlib.read_file("/proc/thread-self/stat"))
      local fields = {}
      for w in s:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
      return (tonumber(fields[12]) + tonumber(fields[13])) / clk_tck -- utime, stime
    end
  end
end
local CPU_SOURCE = pcall(require, "ffi") and "getrusage(RUSAGE_THREAD)" or "/proc/thread-self/stat (10 ms ticks)"

--- the schedulers: each runs `n` coroutines of body(i) to the end --------------------------------

local schedulers = {
  { name = "vmpool.run", run = function(n, body)
    vmpool.run(function()
      for i = 1, n do vmpool.spawn(body, i) end
    end)
  end },
}
if has_luv then
  schedulers[#schedulers + 1] = { name = "vmpool.luv", stats = vluv.stats, run = function(n, body)
    for i = 1, n do vluv.spawn(body, i) end
    uv.run()
  end }
end
if has_cqueues then
  schedulers[#schedulers + 1] = { name = "vmpool.cqueues", stats = vcq.stats, run = function(n, body)
    local cq = cqueues.new()
    for i = 1, n do cq:wrap(body, i) end
    assert(cq:loop())
  end }
end

local function delta(before, after)
  local d = {}
  for k, v in pairs(after) do d[k] = v - (before[k] or 0) end
  return d
end

local function ratio(a, b)
  return b > 0 and a / b or 0
end

local failures = {}

--- wake-ups per completed call -----------------------------------------------------------------

local function wakeups(pool)
  print(("## Wake-ups: %d calls in flight on %d states, %g s each (%s)"):format(IN_FLIGHT, STATES, CALL_SECONDS,
    vmpool.runtime))
  print("")
  print("| scheduler | coroutine wake-ups per call | of which found the call unfinished | loop wake-ups per call |")
  print("|---|--:|--:|--:|")
  for _, s in ipairs(schedulers) do
    if s.stats then
      local before = s.stats()
      local wrong = 0
      s.run(IN_FLIGHT, function(i)
        if pool:co_invoke("c", "sleep", CALL_SECONDS, i) ~= i then wrong = wrong + 1 end
      end)
      local d = delta(before, s.stats())
      local per_call = ratio(d.resumes, d.completions)
      print(("| %s | %.3f | %.3f | %.3f |"):format(s.name, per_call, ratio(d.early, d.completions),
        ratio(d.wakeups, d.completions)))
      if wrong > 0 or d.completions ~= IN_FLIGHT then
        failures[#failures + 1] = s.name .. ": " .. wrong .. " wrong results, " .. d.completions .. " completions"
      end
      if per_call > 1.1 or d.empty > 0 then
        failures[#failures + 1] = ("%s: %.3f coroutine wake-ups per call (goal <= 1.1), %d empty loop wake-ups")
          :format(s.name, per_call, d.empty)
      end
    end
  end
  if has_cqueues and not SHORT then
    -- the README's awaiter before vmpool.cqueues: every waiter polls the pool's one descriptor
    local polls, done = 0, 0
    local cq = cqueues.new()
    for i = 1, IN_FLIGHT do
      cq:wrap(function()
        local fut = pool:submit("c", "sleep", CALL_SECONDS, i)
        while not fut:ready() do
          cqueues.poll(fut)
          polls = polls + 1
        end
        assert(fut:wait() == i)
        done = done + 1
      end)
    end
    assert(cq:loop())
    print(("| cqueues.poll(fut) awaiter (before) | %.3f | %.3f | – |"):format(ratio(polls, done),
      ratio(polls - done, done)))
  end
  print("")
end

--- main-thread CPU while every coroutine waits ----------------------------------------------------

local function cpu(pool)
  print(("## Main-thread CPU while every coroutine waits: %d calls on %d states, %g s each (%s, %s)"):format(
    STATES, STATES, WAIT_SECONDS, vmpool.runtime, CPU_SOURCE))
  print("")
  print("| scheduler | waited (s) | main-thread CPU (s) | share of one CPU |")
  print("|---|--:|--:|--:|")
  for _, s in ipairs(schedulers) do
    local t0, c0, t1, c1
    local submitted = 0
    s.run(STATES, function(i)
      submitted = submitted + 1
      if submitted == STATES then t0, c0 = vmpool.clock(), thread_cpu() end
      pool:co_invoke("c", "sleep", WAIT_SECONDS, i)
      if not t1 then t1, c1 = vmpool.clock(), thread_cpu() end
    end)
    -- the last submission happened before the first completion: the window is pure waiting
    local waited, used = t1 - t0, c1 - c0
    print(("| %s | %.3f | %.3f | %.2f%% |"):format(s.name, waited, used, 100 * ratio(used, waited)))
  end
  print("")
end

--- calls per second with 1,000 coroutines in flight ------------------------------------------------

local function throughput()
  local pool = vmpool.new {}
  pool:compile("c", CHUNK)
  local per = math.floor(THROUGHPUT_CALLS / IN_FLIGHT)
  local rates, cpus = {}, {}
  for _, s in ipairs(schedulers) do rates[s.name], cpus[s.name] = {}, {} end
  for rep = 1, REPS do
    for k = 0, #schedulers - 1 do
      local s = schedulers[(rep - 1 + k) % #schedulers + 1]
      local t, c = vmpool.clock(), os.clock() -- os.clock: CPU time of the whole process
      s.run(IN_FLIGHT, function(i)
        for j = 1, per do
          if pool:co_invoke("c", "echo", j) ~= j then error("wrong result in coroutine " .. i) end
        end
      end)
      rates[s.name][rep] = per * IN_FLIGHT / (vmpool.clock() - t)
      cpus[s.name][rep] = (os.clock() - c) * 1e6 / (per * IN_FLIGHT)
    end
  end
  print(("## Calls/s, %d coroutines in flight, %d echo calls per run, default pool, %d repetition(s) (%s)"):format(
    IN_FLIGHT, per * IN_FLIGHT, REPS, vmpool.runtime))
  print("")
  print("| scheduler | calls/s median [min-max] | x vmpool.run (median of per-repetition ratios) "
    .. "| process CPU µs per call median [min-max] |")
  print("|---|--:|--:|--:|")
  for _, s in ipairs(schedulers) do
    local r, c = benchlib.summary(rates[s.name]), benchlib.summary(cpus[s.name])
    local ratios = {}
    for rep = 1, REPS do ratios[rep] = rates[s.name][rep] / rates["vmpool.run"][rep] end
    print(("| %s | %.0f [%.0f-%.0f] | %.2f | %.2f [%.2f-%.2f] |"):format(s.name, r.median, r.min, r.max,
      benchlib.median(ratios), c.median, c.min, c.max))
  end
  print("")
  pool:close()
end

if not (has_luv and has_cqueues) then
  print("(luv: " .. tostring(has_luv) .. ", cqueues: " .. tostring(has_cqueues) .. "; missing loops are skipped)")
end
local pool = vmpool.new { core = STATES }
pool:compile("c", CHUNK)
if PARTS.wakeups then wakeups(pool) end
if PARTS.cpu then cpu(pool) end
pool:close()
if PARTS.throughput then throughput() end

if #failures > 0 then
  io.stderr:write("bench/probes/adapters.lua: " .. table.concat(failures, "; ") .. "\n")
  os.exit(1)
end
