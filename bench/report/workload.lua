-- Section 3 of the report: the workload (bench/suites/workload.lua): the seed's script from P coroutines
-- under every strategy of lib/strategies.lua, one table and two charts per CPU count, then idle
-- release and the baselines that were missing.
local svg = require "svg"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"
local TARGETS = require "report.goals"

local w, table_md, write_file = D.w, D.table_md, D.write_file
local num, t, mmm, ratio, x, mb = F.num, F.t, F.mmm, F.ratio, F.x, F.mb
local RUNTIME_LABEL, wl_summary, wl_strategies = R.RUNTIME_LABEL, R.wl_summary, R.wl_strategies

--- what the table's columns are and how they were measured
local function introduction(wl)
  local st = wl.settings
  w(string.format("The seed's script (`helloLua(n)` calling `goSayHello`, defined by `init`; precompiled), " ..
    "called from P coroutines in flight (`vmpool.run` + `pool:co_invoke`); every coroutine makes %d calls " ..
    "(more when P × %d < %s: every run makes at least %s calls; *no pool* makes %d × P), on %s, " ..
    "under `taskset` for the CPU count. Median of %d runs [min–max]; runs " ..
    "of all rows are interleaved. µs/op = wall time of all calls ÷ calls (pool creation excluded; it is " ..
    "the *start-up* column). × direct = ratio of the medians to the direct-call row with the same P and " ..
    "CPUs. CPU = CPU time of the whole process during the calls ÷ wall time (100%% = one CPU); peak = " ..
    "the highest 0.2 s window sampled from /proc every 0.1 s (– for runs shorter than that). " ..
    "Peak RSS = VmHWM (start-up included). Native and " ..
    "host-Lua bytes per call come from one extra run with the count-alloc build.",
    st.calls_per_p, st.calls_per_p, num(st.min_calls or 0, 0), num(st.min_calls or 0, 0), st.nopool_per_p,
    RUNTIME_LABEL[wl.lua] or wl.lua, st.reps))
  w("")
end

--- the table for `cpus` CPUs and, with `charts`, its µs and RSS charts
local function cpu_table(wl, strategies, cpus, charts)
  local st = wl.settings
  w(string.format("#### %d CPU%s", cpus, cpus > 1 and "s" or ""))
  w("")
  local rows = {}
  for _, s in ipairs(strategies) do
    for _, p in ipairs(st.ps) do
      local r = wl_summary(s.id, p, cpus)
      local d = wl_summary("direct", p, cpus)
      if r then
        local c = r.count or {}
        rows[#rows + 1] = {
          s.label, tostring(p), mmm(r.us), num(r.cps and r.cps.median, 0),
          s.id == "direct" and "1×" or x(ratio(r.us.median, d and d.us.median)),
          string.format("%s / %s", num(r.cpu and r.cpu.median, 0), num(r.peak_cpu and r.peak_cpu.median, 0)),
          num(mb(r.rss.median), 1),
          s.kind == "vmpool" and string.format("%s / %s", num(r.created.median, 0), num(r.closed.median, 0)) or "–",
          -- the counting allocator sees vmpool's allocations only, not a peer's
          (s.kind == "lanes" or s.kind == "effil") and "–" or num(c.native_bytes, 0), num(c.host_lua_bytes, 0),
          r.startup and t(r.startup.median * 1000) or "–",
        }
      end
    end
  end
  table_md({ "strategy", "P", "µs/op", "calls/s", "× direct", "CPU % avg / peak", "peak RSS MB",
    "states created / closed", "native B/op", "host Lua B/op", "start-up ms" }, rows)
  if charts then
    local groups = {}
    for _, s in ipairs(strategies) do
      local vals = {}
      for i, p in ipairs(st.ps) do
        local r = wl_summary(s.id, p, cpus)
        if r then vals[i] = { v = r.us.median, lo = r.us.min, hi = r.us.max } end
      end
      groups[#groups + 1] = { label = s.short or s.label, values = vals }
    end
    local series = {}
    for i, p in ipairs(st.ps) do series[i] = "P = " .. p end
    local name = string.format("workload-us-%dcpu.svg", cpus)
    write_file("bench/charts/" .. name, svg.bars {
      title = string.format("Workload, %d CPU%s: microseconds per call", cpus, cpus > 1 and "s" or ""),
      subtitle = "median of the runs, min-max whiskers; lower is better",
      unit = "µs per call", log = true, series = series, groups = groups,
    })
    local rgroups = {}
    for _, s in ipairs(strategies) do
      local vals = {}
      for i, p in ipairs(st.ps) do
        local r = wl_summary(s.id, p, cpus)
        if r then vals[i] = { v = r.rss.median / 1024, lo = r.rss.min / 1024, hi = r.rss.max / 1024 } end
      end
      rgroups[#rgroups + 1] = { label = s.short or s.label, values = vals }
    end
    local rname = string.format("workload-rss-%dcpu.svg", cpus)
    write_file("bench/charts/" .. rname, svg.bars {
      title = string.format("Workload, %d CPU%s: peak RSS of the process", cpus, cpus > 1 and "s" or ""),
      subtitle = "VmHWM, MB; median of the runs, min-max whiskers",
      unit = "MB", log = false, series = series, groups = rgroups,
      marks = { { v = TARGETS.rss_mb, label = "80 MB" } },
    })
    w(string.format("![µs per call, %d CPUs](charts/%s) ![peak RSS, %d CPUs](charts/%s)", cpus, name, cpus, rname))
    w("")
  end
end

--- what the idle check closed after the calls of the unbounded pool (counting runs)
local function idle_release(wl)
  local st = wl.settings
  local idle = {}
  for _, cpus in ipairs(st.cpus) do
    for _, p in ipairs(st.ps) do
      local key = string.format("unbounded:%d:%d", p, cpus)
      local c = wl.counts[key]
      if c and c.idle_closed then
        idle[#idle + 1] = { tostring(cpus), tostring(p), num(c.created, 0), num(c.idle_closed, 0),
          num(c.idle_noncore_left, 0), num(mb(c.rss_end_kb), 1), num(mb(c.idle_rss_kb), 1) }
      end
    end
  end
  if #idle > 0 then
    w("**Idle release** (unbounded pool, `idle_timeout = 1`; counting run: after the calls the host sleeps " ..
      "2.5 s while the idle check closes the non-core states):")
    w("")
    table_md({ "CPUs", "P", "states created", "closed by the idle check", "non-core left", "RSS after the calls, MB",
      "RSS after idle release, MB" }, idle)
    w("Idle release closes the states (their threads exit and their Lua memory is freed), but the process's RSS " ..
      "barely drops: freed memory most likely stays with the C allocator (glibc keeps per-thread arenas) for reuse. " ..
      "What idle release bounds is the number of states and threads, and the memory they would keep growing.")
    w("")
  end
end

--- why the rows of Lua Lanes and effil are missing, when they are
local function absent_baselines(wl)
  local bl = {}
  for mod, why in pairs(wl.baselines or {}) do
    if why ~= "present" then bl[#bl + 1] = string.format("%s: %s", mod, why) end
  end
  table.sort(bl)
  if #bl > 0 then
    w("Rows missing because the library was not found for ", wl.lua, ": ", table.concat(bl, "; "),
      ". Section 2 says how to build Lua Lanes and effil and point the report at them (VMPOOL_PEERS).")
    w("")
  end
end

--- Writes the section; `charts` also writes charts/workload-*.svg.
local function section(charts)
  local wl = R.wl
  if not wl then
    w("*The workload matrix has not been run (`bench/run.sh workload`).*")
    w("")
    return
  end
  introduction(wl)
  local strategies = wl_strategies()
  for _, cpus in ipairs(wl.settings.cpus) do cpu_table(wl, strategies, cpus, charts) end
  idle_release(wl)
  absent_baselines(wl)
end

return { section = section }
