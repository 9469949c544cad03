-- Writes bench/REPORT.md and bench/charts/*.svg from the results in bench/out/ (run by
-- bench/run.sh after the suites; `bench/run.sh render` reruns it alone). Every number, and every
-- comparison the prose makes, is computed here from those results: rerunning the suites on another
-- machine rewrites the analysis to match its numbers.
--
-- lua5.4 bench/report.lua                   the whole report
-- lua5.4 bench/report.lua --section=micro   the micro benchmark only, on stdout (make bench)
package.path = "bench/lib/?.lua;" .. package.path
local B = require "benchlib"
local S = require "strategies"
local svg = require "svg"

local OUT = "bench/out"
local o = B.options(arg)

-- the whole report reads the results of `bench/run.sh report` (report-*.dat); `--section=micro`
-- (make bench) those of `bench/run.sh micro` (micro.dat)
local PREFIX = o.section == "micro" and "" or "report-"
local function load_saved(name, prefix)
  local text = B.read_file(OUT .. "/" .. (prefix or PREFIX) .. name .. ".dat")
  if not text then return nil end
  return assert(B.load_result(text))
end

local TARGETS = {
  invoke_us = 3, invoke_vs_channel = 1.5, calls_per_s = 400000, native_bytes = 256,
  rss_mb = 80, invoke_ir = 4000, echo10_ir = 15000,
}

--- formatting -----------------------------------------------------------------------------------

local function num(v, digits)
  if type(v) ~= "number" then return "–" end
  digits = digits or 2
  if math.abs(v) < 0.5 * 10 ^ -digits then v = 0 end -- no "-0"
  local s = string.format("%." .. digits .. "f", v)
  -- thousands separators for the integer part
  local int, frac = s:match("^(-?%d+)(.*)$")
  int = int:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^(-?),", "%1")
  return int .. frac
end

--- significant-figure formatting for times
local function t(v)
  if type(v) ~= "number" then return "–" end
  if v >= 100 then return num(v, 0) end
  if v >= 10 then return num(v, 1) end
  if v >= 1 then return num(v, 2) end
  return string.format("%.3f", v)
end

local function mmm(s, f)
  f = f or t
  if not s then return "–" end
  return string.format("%s [%s–%s]", f(s.median), f(s.min), f(s.max))
end

local function ratio(a, b)
  if type(a) ~= "number" or type(b) ~= "number" or b == 0 then return nil end
  return a / b
end

local function x(r)
  if not r then return "–" end
  if r >= 10 then return string.format("%.0f×", r) end
  if r < 0.1 then return string.format("%.2g×", r) end
  return string.format("%.1f×", r)
end

local function pct(r) return string.format("%.0f%%", r * 100) end

local function mb(kb) return type(kb) == "number" and kb / 1024 or nil end

local lines = {}
local function w(...)
  local s = table.concat({ ... })
  lines[#lines + 1] = s
end

local function table_md(header, rows)
  w("| " .. table.concat(header, " | ") .. " |")
  local sep = {}
  for i = 1, #header do sep[i] = i == 1 and "---" or "--:" end
  w("|" .. table.concat(sep, "|") .. "|")
  for _, r in ipairs(rows) do w("| " .. table.concat(r, " | ") .. " |") end
  w("")
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

--- micro ----------------------------------------------------------------------------------------

local micro = load_saved("micro")
local RUNTIME_LABEL = { ["lua5.1"] = "Lua 5.1", ["lua5.4"] = "Lua 5.4", ["luajit"] = "LuaJIT" }

--- summary of figure `name`'s microseconds over the runs of `key` ("lua5.4:2")
local function micro_fig(key, name)
  local runs = micro and micro.runs[key]
  if not runs then return nil end
  local xs = {}
  for _, r in ipairs(runs) do
    local f = r.figures and r.figures[name]
    if f then xs[#xs + 1] = f.us end
  end
  return B.summary(xs)
end

--- summary of a ping-pong field over its runs ("pingpong:2", "mpsc_us")
local function pingpong(cpus, field)
  local runs = micro and micro.runs["pingpong:" .. cpus]
  if not runs then return nil end
  local xs = {}
  for _, r in ipairs(runs) do xs[#xs + 1] = r[field] end
  return B.summary(xs)
end

--- median of per-repetition ratios a/b of two figures measured in the same repetition
local function paired_ratio(key_a, name_a, key_b, name_b, field_b)
  local ra, rb = micro and micro.runs[key_a], micro and micro.runs[key_b]
  if not ra or not rb then return nil end
  local xs = {}
  for i = 1, math.min(#ra, #rb) do
    local a = ra[i].figures and ra[i].figures[name_a] and ra[i].figures[name_a].us
    local b
    if field_b then b = rb[i][field_b] else b = rb[i].figures and rb[i].figures[name_b] and rb[i].figures[name_b].us end
    if a and b and b > 0 then xs[#xs + 1] = a / b end
  end
  return B.summary(xs)
end

local function micro_runtimes()
  local rts = {}
  for _, lua in ipairs(micro and micro.settings.runtimes or {}) do
    if micro.runs[lua .. ":2"] and #micro.runs[lua .. ":2"] > 0 then rts[#rts + 1] = lua end
  end
  return rts
end

local MICRO_FIGS = {
  { "direct", "direct call in the host: helloLua(i)" },
  { "invoke", "blocking `pool:invoke` round trip (core = 1)" },
  { "echo10_direct", "direct call in the host: echo(10-field table)" },
  { "echo10", "`pool:invoke` echo of a 10-field table" },
  { "submit", "`pool:submit`, 1000 futures in flight (default pool)" },
  { "co_invoke", "`pool:co_invoke`, 1000 coroutines in flight (default pool)" },
  { "lanes_invoke", "Lua Lanes round trip (1 lane, linda)" },
  { "lanes_stream", "Lua Lanes, 1000 in flight (CPUs lanes)" },
  { "effil_invoke", "effil round trip (1 thread, channel)" },
  { "effil_stream", "effil, 1000 in flight (CPUs threads)" },
}
local FLOOR_OF = { invoke = "direct", echo10 = "echo10_direct", submit = "direct", co_invoke = "direct",
  lanes_invoke = "direct", lanes_stream = "direct", effil_invoke = "direct", effil_stream = "direct" }

local function section_micro(charts)
  if not micro then
    w("*The micro benchmark has not been run (`bench/run.sh micro`).*")
    w("")
    return
  end
  local rts = micro_runtimes()
  local cols = {}
  for _, lua in ipairs(rts) do cols[#cols + 1] = { key = lua .. ":2", label = RUNTIME_LABEL[lua] .. ", 2 CPUs" } end
  if micro.runs["lua5.4:1"] and #micro.runs["lua5.4:1"] > 0 then
    cols[#cols + 1] = { key = "lua5.4:1", label = "Lua 5.4, 1 CPU" }
  end
  local st = micro.settings
  w(string.format("Median of %d runs [min–max] in microseconds per call; each run is a separate process, " ..
    "and the runs of all columns and of the Rust ping-pong are interleaved (order rotated every repetition). " ..
    "× = the median of the per-repetition ratios to the direct call of the same column. " ..
    "Calls per run: %s direct, %s round trips, %s in flight calls.", st.reps,
    num(2000000 * st.micro_scale, 0), num(20000 * st.micro_scale, 0), num(20000 * st.micro_scale, 0)))
  w("")
  local header = { "figure" }
  for _, c in ipairs(cols) do header[#header + 1] = c.label end
  local rows = {}
  for _, f in ipairs(MICRO_FIGS) do
    local row = { f[2] }
    local any = false
    for _, c in ipairs(cols) do
      local s = micro_fig(c.key, f[1])
      local cell = mmm(s)
      if s then
        any = true
        local floor = FLOOR_OF[f[1]]
        if floor then
          local r = paired_ratio(c.key, f[1], c.key, floor)
          if r then cell = cell .. " (" .. x(r.median) .. ")" end
        end
      end
      row[#row + 1] = cell
    end
    if any then rows[#rows + 1] = row end
  end
  table_md(header, rows)
  if micro.runs["luajit:2"] then
    w("LuaJIT compiles the direct-call loop down to almost nothing, so its direct figures are near zero and its " ..
      "× ratios say little; compare its pool figures with the other runtimes' instead.")
    w("")
  end
  local inv1, inv2 = micro_fig("lua5.4:1", "invoke"), micro_fig("lua5.4:2", "invoke")
  if inv1 and inv2 then
    if inv2.median > inv1.median then
      local spin, poll, park = pingpong(2, "spin_us"), pingpong(2, "mpsc_polling_us"), pingpong(2, "mpsc_us")
      w(string.format("The round trip on one CPU (%s µs, Lua 5.4) is faster than on two (%s µs) in this run. On one " ..
        "CPU vmpool never spins (`src/spin.rs`): each round trip is two wake-ups and two context switches. On two " ..
        "CPUs a waiting thread first spins (up to 50 µs for the caller, 20 µs for an idle worker, adapted to the " ..
        "waits it sees), the fast path when the reply comes quickly (the prototypes measured 1.0–1.3 µs on this " ..
        "kind of machine). The Rust rows of the same repetitions show what the machine allowed: a spinning " ..
        "ping-pong took %s µs, polling channels %s µs, channels that park after a short spin %s µs.",
        t(inv1.median), t(inv2.median), spin and t(spin.median) or "–", poll and t(poll.median) or "–",
        park and t(park.median) or "–"))
    else
      w(string.format("The round trip on two CPUs (%s µs, Lua 5.4) is faster than on one CPU, where vmpool never " ..
        "spins and each round trip costs two wake-ups and two context switches (%s µs).", t(inv2.median),
        t(inv1.median)))
    end
    -- fast and slow runs: the per-run percentiles of the per-call latency, all runtimes on 2 CPUs
    local fast, slow, mixed, n = {}, {}, 0, 0
    for _, lua in ipairs(rts) do
      for _, r in ipairs(micro.runs[lua .. ":2"] or {}) do
        local l = r.figures and r.figures.invoke_latency
        if l then
          n = n + 1
          if l.p90 < 3 then
            fast[#fast + 1] = l.p50
          elseif l.p10 > 10 then
            slow[#slow + 1] = l
          else
            mixed = mixed + 1
          end
        end
      end
    end
    if #slow > 0 and (#fast > 0 or mixed > 0) then
      local s50, s90 = {}, {}
      for i, l in ipairs(slow) do s50[i], s90[i] = l.p50, l.p90 end
      local f = B.summary(fast)
      local a50, a90 = B.summary(s50), B.summary(s90)
      w(string.format("The per-call latencies below show how. Of the %d runs on two CPUs (all runtimes), %d were " ..
        "entirely fast (p90 under 3 µs%s), %d entirely slow (p10 over 10 µs; p50 %s–%s µs, p90 %s–%s µs) and %d " ..
        "switched from one mode to the other partway. So the round trip does not have a few slow calls: it runs " ..
        "in a fast or a slow mode, and the slow mode's figures are nearly the same in every slow run and on every " ..
        "runtime, which suggests a fixed mechanism (a timer, sleep or scheduling granularity) rather than random " ..
        "interference. A finding for whoever tunes the spin-then-park policy (`src/spin.rs`, `src/mailbox.rs`); " ..
        "the fast runs show what a quiet machine gives.",
        n, #fast, f and string.format("; p50 %s–%s µs", t(f.min), t(f.max)) or "", #slow, t(a50.min), t(a50.max),
        t(a90.min), t(a90.max), mixed))
    end
    w("")
  end

  -- baselines present?
  local absent = {}
  for _, lua in ipairs(rts) do
    local r = micro.runs[lua .. ":2"][1]
    for _, kind in ipairs { "lanes", "effil" } do
      local b = r.baselines and r.baselines[kind]
      if b and (b.absent or b.failed) then
        absent[#absent + 1] = string.format("%s on %s: %s", kind == "lanes" and "Lua Lanes" or "effil",
          RUNTIME_LABEL[lua],
          b.absent and ("not installed (`" .. b.absent:gsub(":$", "") .. "`)") or ("failed: " .. b.failed))
      end
    end
  end
  if #absent > 0 then
    w("Baselines from other libraries: ", table.concat(absent, "; "), ". Neither library is packaged by " ..
      "Debian; install them with LuaRocks for the runtime (`luarocks --lua-version=5.4 install lanes`, " ..
      "`... install effil`) and rerun: `bench/lib/baselines.lua` measures them as their documentation " ..
      "recommends for a pool (lanes fed through a linda, effil threads fed through a channel). " ..
      "FACTS.md has prototype figures for both (Lanes 19–30 µs, effil 11–21 µs per round trip).")
    w("")
  end

  w(string.format("**The floor: a bare Rust ping-pong between two threads** (`bench/pingpong.rs`, %s round " ..
    "trips per run, same interleaved runs):", num(st.pingpong_n, 0)))
  w("")
  local prow = {}
  for _, pp in ipairs {
    { "mpsc_us", "`std::sync::mpsc` channels, blocking `recv` (parks when empty)" },
    { "mpsc_polling_us", "the same channels, both sides polling `try_recv` (no sleeping)" },
    { "condvar_us", "`Mutex` + `Condvar` (always sleeps and wakes)" },
    { "spin_us", "one atomic both threads spin on (hardware floor)" },
  } do
    prow[#prow + 1] = { pp[2], mmm(pingpong(2, pp[1])), mmm(pingpong(1, pp[1])) }
  end
  table_md({ "Rust round trip, µs", "2 CPUs", "1 CPU" }, prow)

  local rrows = {}
  for _, c in ipairs(cols) do
    local cpus = c.key:match(":(%d)$")
    local vs_mpsc = paired_ratio(c.key, "invoke", "pingpong:" .. cpus, nil, "mpsc_us")
    local vs_poll = paired_ratio(c.key, "invoke", "pingpong:" .. cpus, nil, "mpsc_polling_us")
    local vs_spin = paired_ratio(c.key, "invoke", "pingpong:" .. cpus, nil, "spin_us")
    rrows[#rrows + 1] = { c.label, mmm(micro_fig(c.key, "invoke")),
      vs_mpsc and mmm(vs_mpsc, x) or "–", vs_poll and mmm(vs_poll, x) or "–", vs_spin and mmm(vs_spin, x) or "–" }
  end
  w("`pool:invoke` round trip against the Rust floor (median of per-repetition ratios [min–max]):")
  w("")
  table_md({ "runtime", "invoke µs", "÷ mpsc (blocking)", "÷ mpsc (polling)", "÷ spin" }, rrows)

  -- latency distribution of the round trip
  local lrows = {}
  for _, c in ipairs(cols) do
    local runs = micro.runs[c.key] or {}
    local cells = { c.label }
    local any = false
    for _, k in ipairs { "p10", "p50", "p90", "p99", "max" } do
      local xs = {}
      for _, r in ipairs(runs) do
        local l = r.figures and r.figures.invoke_latency
        if l then xs[#xs + 1] = l[k] end
      end
      local sm = B.summary(xs)
      if sm then any = true end
      cells[#cells + 1] = mmm(sm)
    end
    if any then lrows[#lrows + 1] = cells end
  end
  if #lrows > 0 then
    w("Per-call latency of the same blocking round trip, each call timed with `vmpool.clock()` (µs; median over " ..
      "the runs of each percentile [min–max]): the mean above hides whether a few calls are slow or all are.")
    w("")
    table_md({ "runtime", "p10", "p50", "p90", "p99", "max" }, lrows)
  end

  -- allocations
  w("**Allocations per call** (count-alloc build, one run per runtime on 2 CPUs and one of Lua 5.4 on 1 CPU; " ..
    "the host's garbage collector is " ..
    "stopped during each measured loop, so *host Lua* is everything the loop allocated in the host state; " ..
    "*native* is every allocation of the library's Rust code and of the child states, split by the thread " ..
    "that made it):")
  w("")
  local arows = {}
  local count_cols = {}
  for _, lua in ipairs(rts) do count_cols[#count_cols + 1] = { key = lua .. ":2", label = RUNTIME_LABEL[lua] } end
  count_cols[#count_cols + 1] = { key = "lua5.4:1", label = "Lua 5.4, 1 CPU" }
  for _, f in ipairs(MICRO_FIGS) do
    for _, cc in ipairs(count_cols) do
      local run = micro.counts[cc.key]
      local c = run and run.figures[f[1]]
      if c and c.native_bytes and f[1] ~= "direct" and f[1] ~= "echo10_direct" then
        arows[#arows + 1] = { f[2] .. ", " .. cc.label, num(c.native_bytes, 0), num(c.native_allocs, 1),
          num(c.native_host_bytes, 0), num(c.native_pool_bytes, 0), num(c.host_lua_bytes, 0) }
      end
    end
  end
  table_md({ "figure", "native bytes/call", "native allocations/call", "of which host thread, bytes",
    "pool threads, bytes", "host Lua bytes/call" }, arows)
  local c1 = micro.counts["lua5.4:1"] and micro.counts["lua5.4:1"].figures.invoke
  local c2 = micro.counts["lua5.4:2"] and micro.counts["lua5.4:2"].figures.invoke
  if c1 and c2 and c1.native_allocs and c1.native_allocs > 0.5 and c1.native_allocs > 5 * c2.native_allocs then
    w(string.format("On one CPU the blocking invoke allocates %s bytes (%s allocations) per call, on two almost " ..
      "nothing (%s bytes). A call's record is reused only if the worker has already dropped its reference when the " ..
      "caller recycles it, and the worker wakes the caller before it drops it (`src/worker.rs`: " ..
      "`call.finish(outcome)`, then `drop(call)`): on one CPU the woken caller usually runs first and builds a new " ..
      "record. Callgrind runs on one CPU, so its invoke profile includes this (malloc and `Vec` growth on the " ..
      "host side). The `submit` and `co_invoke` paths allocate about 5 times per call on any CPU count: the " ..
      "records that futures hold are not reused.",
      num(c1.native_bytes, 0), num(c1.native_allocs, 1), num(c2.native_bytes, 0)))
    w("")
  end

  if charts then
    local groups = {}
    for _, f in ipairs { { "invoke", "invoke round trip" }, { "echo10", "echo of a 10-field table" },
      { "submit", "submit, 1000 in flight" }, { "co_invoke", "co_invoke, 1000 in flight" },
      { "direct", "direct call in the host" } } do
      local vals = {}
      for i, c in ipairs(cols) do
        local s = micro_fig(c.key, f[1])
        if s then vals[i] = { v = s.median, lo = s.min, hi = s.max } end
      end
      groups[#groups + 1] = { label = f[2], values = vals }
    end
    local series = {}
    for i, c in ipairs(cols) do series[i] = c.label end
    local floor = pingpong(2, "mpsc_us")
    local function bar(s) return s and { v = s.median, lo = s.min, hi = s.max } end
    groups[#groups + 1] = { label = "Rust mpsc ping-pong", values = { bar(floor) } }
    local poll = pingpong(2, "mpsc_polling_us")
    groups[#groups + 1] = { label = "Rust mpsc polling ping-pong", values = { bar(poll) } }
    write_file("bench/charts/micro.svg", svg.bars {
      title = "Micro benchmark: microseconds per call (median, min-max whiskers)",
      subtitle = "lower is better; Rust rows measured on 2 CPUs in the same runs",
      unit = "µs per call", log = true, series = series, groups = groups,
      marks = { { v = TARGETS.invoke_us, label = "target 3 µs" } },
    })
    w("![micro benchmark](charts/micro.svg)")
    w("")
  end
end

--- workload -------------------------------------------------------------------------------------

local wl = load_saved("workload")

local function wl_summary(id, p, cpus)
  if not wl then return nil end
  local key = string.format("%s:%d:%d", id, p, cpus)
  local runs = wl.runs[key]
  if not runs or #runs == 0 then return nil end
  local function col(f)
    local xs = {}
    for _, r in ipairs(runs) do xs[#xs + 1] = f(r) end
    return B.summary(xs)
  end
  local s = {
    n = #runs,
    us = col(function(r) return r.us_per_op end),
    cps = col(function(r) return r.calls_per_s end),
    cpu = col(function(r) return r.cpu_pct end),
    peak_cpu = col(function(r)
      local v = r.sampled and r.sampled.peak_cpu_pct
      return v and v >= 0 and v or nil
    end),
    rss = col(function(r) return r.rss_peak_kb end),
    created = col(function(r) return r.created end),
    closed = col(function(r) return r.closed end),
    startup = col(function(r) return r.startup_s end),
    calls = runs[1].calls,
    count = wl.counts[key],
  }
  return s
end

local function wl_strategies()
  local list = {}
  for _, s in ipairs(S.list) do
    if wl then
      for _, c in ipairs(wl.configs) do
        if c.strategy == s.id then
          list[#list + 1] = s
          break
        end
      end
    end
  end
  return list
end

local function section_workload(charts)
  if not wl then
    w("*The workload matrix has not been run (`bench/run.sh workload`).*")
    w("")
    return
  end
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
  local strategies = wl_strategies()
  for _, cpus in ipairs(st.cpus) do
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
            num(c.native_bytes, 0), num(c.host_lua_bytes, 0),
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
  -- idle release
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
  local bl = {}
  for mod, why in pairs(wl.baselines or {}) do
    if why ~= "present" then bl[#bl + 1] = string.format("%s: %s", mod, why) end
  end
  table.sort(bl)
  if #bl > 0 then
    w("Rows for Lua Lanes and effil are missing because they are not installed for ", wl.lua, " (",
      table.concat(bl, "; "), ").")
    w("")
  end
end

--- callgrind ------------------------------------------------------------------------------------

local cg = load_saved("callgrind")

local CG_KIND_LABEL = {
  direct = "direct call in the host (helloLua)",
  invoke = "blocking `pool:invoke` (helloLua)",
  echo10 = "`pool:invoke` echo of a 10-field table",
  co_invoke = "`pool:co_invoke`, 100 coroutines",
}

local function cg_fig(lua, kind)
  return cg and cg.per_call[lua] and cg.per_call[lua][kind]
end

local function section_callgrind(charts)
  if not cg then
    w("*Callgrind has not been run (`bench/callgrind`).*")
    w("")
    return
  end
  w(string.format("Instructions per call, user space, all threads: callgrind's total for %s calls minus its " ..
    "total for %s calls, ÷ %s, so start-up, warm-up and shutdown cancel. Run on one CPU (`taskset -c 0`): " ..
    "vmpool then never spins, so these are the instructions of the work, not of waiting (with two CPUs a " ..
    "waiting thread spins for up to tens of µs, which adds instructions that depend on timing). *Host* = " ..
    "the host's Lua thread; *pool* = the worker threads and the idle check. Lua 5.4 is measured twice (last " ..
    "column) to show how reproducible the counts are: within about 1%% for the blocking calls (string hash " ..
    "seeds and addresses differ between processes), a few %% for co_invoke (how many calls the scheduler " ..
    "collects per wake-up depends on timing). That is far below wall-clock noise on a shared machine.",
    num(cg.n2, 0), num(cg.n1, 0), num(cg.n2 - cg.n1, 0)))
  w("")
  local rows = {}
  local rts = {}
  for _, lua in ipairs { "lua5.1", "lua5.4", "luajit" } do
    if cg.per_call[lua] then rts[#rts + 1] = lua end
  end
  for _, kind in ipairs { "direct", "invoke", "echo10", "co_invoke" } do
    for _, lua in ipairs(rts) do
      local f = cg_fig(lua, kind)
      if f then
        local again = "–"
        if f.repeats and #f.repeats > 1 then
          local parts = {}
          for i = 2, #f.repeats do parts[#parts + 1] = num(f.repeats[i], 0) end
          again = table.concat(parts, ", ")
        end
        rows[#rows + 1] = { CG_KIND_LABEL[kind], RUNTIME_LABEL[lua], num(f.host, 0), num(f.pool, 0), num(f.total, 0),
          again }
      end
    end
  end
  table_md({ "call", "runtime", "host", "pool", "total instructions per call", "total, measured again" },
    rows)
  local inv, dir = cg_fig("lua5.4", "invoke"), cg_fig("lua5.4", "direct")
  if inv and dir then
    w(string.format("Of the %s instructions of a blocking invoke on Lua 5.4, about %s are the script itself " ..
      "(what the direct call costs in the host); the hand-off costs the other %s (host %s, pool %s beyond the " ..
      "script). The 4,000 target leaves %s for the hand-off.", num(inv.total, 0), num(dir.total, 0),
      num(inv.total - dir.total, 0), num(inv.host, 0), num(inv.pool - dir.total, 0),
      num(TARGETS.invoke_ir - dir.total, 0)))
    w("")
  end
  if charts then
    local groups = {}
    for _, kind in ipairs { "invoke", "echo10", "co_invoke", "direct" } do
      local vals = {}
      for i, lua in ipairs(rts) do
        local f = cg_fig(lua, kind)
        if f then vals[i] = { v = f.total, text = num(f.total, 0) } end
      end
      groups[#groups + 1] = { label = (CG_KIND_LABEL[kind]:gsub("`", "")), values = vals }
    end
    local series = {}
    for i, lua in ipairs(rts) do series[i] = RUNTIME_LABEL[lua] end
    write_file("bench/charts/callgrind.svg", svg.bars {
      title = "Instructions per call (callgrind, host + workers, one CPU)",
      subtitle = "targets: invoke <= 4,000, 10-field table echo <= 15,000 (Lua 5.4)",
      unit = "instructions per call", log = true, series = series, groups = groups, label_width = 300,
      marks = { { v = TARGETS.invoke_ir, label = "4,000" }, { v = TARGETS.echo10_ir, label = "15,000" } },
    })
    w("![instructions per call](charts/callgrind.svg)")
    w("")
  end
  for _, lua in ipairs { "lua5.4", "lua5.1" } do
    local prof = cg.profiles and cg.profiles[lua]
    if prof then
      -- all kinds for Lua 5.4; the blocking invoke only for the others
      for _, kind in ipairs(lua == "lua5.4" and { "invoke", "echo10", "co_invoke" } or { "invoke" }) do
        local p = prof[kind]
        if p then
          local stock = cg_fig(lua, kind)
          w(string.format("**Where the instructions of one %s go, %s** (self cost per call by function, " ..
            "the 25 largest per side; Lua's internal functions are named because this profile runs on a host " ..
            "linked with Debian's static Lua library, `bench/lua-host.c`: %s instructions per call, against %s " ..
            "with the stock interpreter):", CG_KIND_LABEL[kind], RUNTIME_LABEL[lua], num(p.total, 0),
            stock and num(stock.total, 0) or "–"))
          w("")
          local prow = {}
          for i = 1, math.max(#p.host.top, #p.pool.top) do
            local h, q = p.host.top[i], p.pool.top[i]
            prow[#prow + 1] = {
              h and ("`" .. h.fn .. "`") or "", h and num(h.ir, 0) or "",
              q and ("`" .. q.fn .. "`") or "", q and num(q.ir, 0) or "",
            }
          end
          prow[#prow + 1] = { "**host total**", "**" .. num(p.host.total, 0) .. "**", "**pool total**",
            "**" .. num(p.pool.total, 0) .. "**" }
          table_md({ "host thread: function [object]", "Ir/call", "pool threads: function [object]", "Ir/call" }, prow)
          if p.host.objects and p.pool.objects then
            local function split(side)
              local keys = {}
              for k in pairs(side.objects) do keys[#keys + 1] = k end
              table.sort(keys, function(a2, b2) return side.objects[a2] > side.objects[b2] end)
              local parts = {}
              for _, k in ipairs(keys) do
                if side.objects[k] >= 1 then
                  parts[#parts + 1] = string.format("%s %s (%s)", k, num(side.objects[k], 0),
                    pct(side.objects[k] / side.total))
                end
              end
              local kparts = {}
              local kk = {}
              for k in pairs(side.kinds or {}) do kk[#kk + 1] = k end
              table.sort(kk, function(a2, b2) return side.kinds[a2] > side.kinds[b2] end)
              for _, k in ipairs(kk) do
                if side.kinds[k] >= 1 then
                  kparts[#kparts + 1] = string.format("%s %s (%s)", k, num(side.kinds[k], 0),
                    pct(side.kinds[k] / side.total))
                end
              end
              return table.concat(parts, ", "), table.concat(kparts, ", ")
            end
            local ho, hk = split(p.host)
            local po, pk = split(p.pool)
            w(string.format("By object, per call: host %s; pool %s. Across objects: host %s; pool %s.",
              ho, po, hk ~= "" and hk or "–", pk ~= "" and pk or "–"))
            w("")
            local fmt_kind = "string formatting (Rust)"
            local hf = p.host.kinds and p.host.kinds[fmt_kind] or 0
            local pf = p.pool.kinds and p.pool.kinds[fmt_kind] or 0
            if hf + pf > 0.05 * p.total then
              w(string.format("%s of the %s instructions (%s) are Rust string formatting. The encoder builds a " ..
                "text label for every table key it encodes (`let key = key_label(st, -2)` in `src/value.rs`, with " ..
                "`format!` and `String::from_utf8_lossy`), for an error message that is needed only when a value " ..
                "is refused; it runs on both sides, for the arguments and for the results.",
                num(hf + pf, 0), num(p.total, 0), pct((hf + pf) / p.total)))
              w("")
            end
          end
        end
      end
      local d = prof.direct
      if d then
        w(string.format("For scale: the same script called directly in the host costs %s instructions per call on %s.",
          num(d.total, 0), RUNTIME_LABEL[lua]))
        w("")
      end
    end
  end
end

--- summaries used by the targets and the analysis -----------------------------------------------

local function best_of(ids, p, cpus)
  local best
  for _, id in ipairs(ids) do
    local r = wl_summary(id, p, cpus)
    if r and (not best or r.us.median < best.r.us.median) then best = { id = id, r = r } end
  end
  return best
end

local POOLED = { "unbounded", "c1000_unl", "c2000_unl", "c1000_blk", "c2000_blk", "c1000_m2000_blk", "default",
  "c2xcpu_blk", "c4xcpu_blk" }

local function label(id) return S.by_id[id] and S.by_id[id].label or id end

local function section_targets()
  local rows = {}
  local function row(what, target, measured, met, how)
    local mark = type(met) == "string" and met or (met == nil and "–" or (met and "**met**" or "**not met**"))
    rows[#rows + 1] = { what, target, measured, mark, how or "" }
  end
  -- round trip
  local inv = micro_fig("lua5.4:2", "invoke")
  local parts, all_met = {}, inv ~= nil
  for _, lua in ipairs(micro_runtimes()) do
    local s = micro_fig(lua .. ":2", "invoke")
    if s then
      parts[#parts + 1] = RUNTIME_LABEL[lua] .. " " .. mmm(s)
      if s.median > TARGETS.invoke_us then all_met = false end
    end
  end
  local fast50 = {}
  for _, lua in ipairs(micro_runtimes()) do
    for _, r in ipairs(micro.runs[lua .. ":2"] or {}) do
      local l = r.figures and r.figures.invoke_latency
      if l and l.p90 < 3 then fast50[#fast50 + 1] = l.p50 end
    end
  end
  local fs = B.summary(fast50)
  row("blocking `pool:invoke` round trip, median, 2 CPUs", "≤ 3 µs",
    (#parts > 0 and table.concat(parts, "; ") .. " µs" or "not measured") ..
      (fs and string.format(" (median call in the %d runs that stayed fast: %s–%s µs; see 1)", fs.n, t(fs.min),
        t(fs.max)) or ""), inv and all_met, "micro")
  local r = paired_ratio("lua5.4:2", "invoke", "pingpong:2", nil, "mpsc_us")
  local rp = paired_ratio("lua5.4:2", "invoke", "pingpong:2", nil, "mpsc_polling_us")
  row("round trip ÷ Rust channel ping-pong (Lua 5.4, same runs)", "≤ 1.5×",
    r and string.format("%s vs blocking mpsc; %s vs polling mpsc", mmm(r, x), rp and mmm(rp, x) or "–")
      or "not measured",
    r and string.format("%s vs blocking, %s vs polling",
      r.median <= TARGETS.invoke_vs_channel and "**met**" or "**not met**",
      rp and (rp.median <= TARGETS.invoke_vs_channel and "**met**" or "**not met**") or "–"), "micro")
  -- throughput
  if wl then
    local best = best_of(POOLED, 4000, 2)
    local d = wl_summary("default", 4000, 2)
    row("calls/s with 4000 coroutines in flight, 2 CPUs", "≥ 400,000",
      best and string.format("best %s (%s); default %s", num(best.r.cps.median, 0), label(best.id),
        d and num(d.cps.median, 0) or "–") or "not measured",
      best and best.r.cps.median >= TARGETS.calls_per_s, "workload")
    local c1000 = wl_summary("c1000_blk", 4000, 2)
    local others = {}
    for _, id in ipairs { "c1000_unl", "c1000_m2000_blk" } do
      local q = wl_summary(id, 4000, 2)
      if q then others[#others + 1] = string.format("%s %s MB", label(id), num(mb(q.rss.median), 1)) end
    end
    row("peak RSS, core = 1000 (+ blocking), Lua 5.4, P = 4000, 2 CPUs", "≤ 80 MB",
      c1000 and (mmm({ median = mb(c1000.rss.median), min = mb(c1000.rss.min), max = mb(c1000.rss.max) },
        function(v) return num(v, 1) end) .. " MB" .. (#others > 0 and ("; " .. table.concat(others, "; ")) or ""))
        or "not measured",
      c1000 and mb(c1000.rss.median) <= TARGETS.rss_mb, "workload")
  end
  if micro then
    local parts2, worst = {}, nil
    local keys = {}
    for _, lua in ipairs(micro_runtimes()) do keys[#keys + 1] = { lua .. ":2", RUNTIME_LABEL[lua] } end
    keys[#keys + 1] = { "lua5.4:1", "Lua 5.4 on 1 CPU" }
    for _, k in ipairs(keys) do
      local c = micro.counts[k[1]] and micro.counts[k[1]].figures.invoke
      if c and c.native_bytes then
        parts2[#parts2 + 1] = string.format("%s %s", k[2], num(c.native_bytes, 1))
        worst = math.max(worst or 0, c.native_bytes)
      end
    end
    row("native bytes allocated per trivial invoke", "≤ 256",
      #parts2 > 0 and table.concat(parts2, "; ") or "not measured", worst and worst <= TARGETS.native_bytes,
      "micro, count-alloc")
  end
  if cg then
    local f = cg_fig("lua5.4", "invoke")
    row("instructions per blocking invoke, host + workers, Lua 5.4", "≤ 4,000",
      f and string.format("%s (host %s + pool %s)", num(f.total, 0), num(f.host, 0), num(f.pool, 0)) or "not measured",
      f and f.total <= TARGETS.invoke_ir, "callgrind")
    local e = cg_fig("lua5.4", "echo10")
    row("instructions per 10-field table echo, Lua 5.4", "≤ 15,000",
      e and string.format("%s (host %s + pool %s)", num(e.total, 0), num(e.host, 0), num(e.pool, 0)) or "not measured",
      e and e.total <= TARGETS.echo10_ir, "callgrind")
  end
  table_md({ "target", "goal", "measured (median [min–max])", "", "section" }, rows)
  w("The blocking channel floor parks its threads (a round trip is two futex wake-ups, about 9 µs here); the " ..
    "polling floor is the one comparable with a design that spins first, like vmpool's. Wall-clock rows are from " ..
    "a shared machine: see the load average above and the run-to-run ranges.")
  w("")
end

--- analysis -------------------------------------------------------------------------------------

local SEED = {
  -- strategy, CPUs, P, ms/op, memory/op, peak CPU, peak memory
  { "no pool", 2, 1000, 0.18455, "159.5KB", "190%", "476.9M" },
  { "no pool", 2, 2000, 0.168622, "159.5KB", "191%", "935.8M" },
  { "no pool", 2, 4000, 0.175112, "159.6KB", "190%", "1.82G" },
  { "pool, unbounded size", 2, 1000, 0.065165, "6.53KB", "44%", "291M" },
  { "pool, unbounded size", 2, 2000, 0.073247, "6.50KB", "50%", "560M" },
  { "pool, unbounded size", 2, 4000, 0.077863, "6.47KB", "52%", "1.08G" },
  { "core 1000 + unlimited non-core", 2, 4000, 0.046725, "7.4KB", "90%", "883M" },
  { "core 2000 + unlimited non-core", 2, 4000, 0.045968, "6.8KB", "66%", "962M" },
  { "core 1000 + blocking", 2, 4000, 0.048416, "6.52KB", "70%", "326M" },
  { "core 2000 + blocking", 2, 4000, 0.04729, "6.52KB", "72%", "652M" },
  { "core 1000 + blocking", 4, 4000, 0.046915, "6.52KB", "100%", "348M" },
  { "core 2000 + blocking", 4, 4000, 0.047518, "6.52KB", "102%", "649M" },
  { "core 1000 + max non-core 2000 + blocking", 2, 4000, 0.048806, "7.2KB", "84%", "682M" },
}

--- "5% faster" / "1.8× slower" for the time summary a relative to b, flagged when the min–max
--- ranges of the runs overlap (then the difference is not shown by these runs)
local function cmp(a, b)
  if not a or not b then return "–" end
  local r = a.median / b.median
  local word
  if r <= 1 then
    word = (1 / r >= 1.1) and (x(1 / r) .. " faster") or (pct(1 - r) .. " faster")
  else
    word = (r >= 1.1) and (x(r) .. " slower") or (pct(r - 1) .. " slower")
  end
  if a.min <= b.max and b.min <= a.max then word = word .. " (within the run-to-run spread)" end
  return word
end

--- true when summary a is clearly below b: medians 5% apart and the ranges of the runs disjoint
local function clearly_below(a, b)
  return a and b and a.median < 0.95 * b.median and a.max < b.min
end

local function section_analysis()
  if not wl then
    w("*No workload results: run `bench/run.sh workload` (or `make report`).*")
    w("")
    return
  end
  local cpus = wl.settings.cpus[#wl.settings.cpus]
  for _, c in ipairs(wl.settings.cpus) do if c == 2 then cpus = 2 end end
  local P = wl.settings.ps[#wl.settings.ps]
  local function U(id, p, c) local r = wl_summary(id, p or P, c or cpus) return r and r.us end
  local function us(id, p, c) local s = U(id, p, c) return s and s.median end
  local function rss(id, p, c) local r = wl_summary(id, p or P, c or cpus) return r and mb(r.rss.median) end
  local function cpu(id, p, c) local r = wl_summary(id, p or P, c or cpus) return r and r.cpu and r.cpu.median end
  local function created(id, p, c)
    local r = wl_summary(id, p or P, c or cpus)
    return r and r.created and r.created.median
  end

  w(string.format("All figures below are medians from the tables above: %s, P = %d coroutines in flight, %d CPUs " ..
    "unless stated. A difference is called clear only when the medians are at least 5%% apart and the min–max " ..
    "ranges of the runs do not overlap. The seed report's conclusions for gopher-lua (quoted in section 5) are " ..
    "checked one by one; where vmpool's numbers disagree, this says so.", RUNTIME_LABEL[wl.lua] or wl.lua, P, cpus))
  w("")

  -- 1. pool vs no pool
  local best = best_of(POOLED, P, cpus)
  local np = U("nopool")
  w("**Pool vs no pool.** *Seed: creating a VM per call costs much more CPU (190% vs 44–90%) and time " ..
    "(0.18 ms vs 0.046–0.078 ms per call, 2.2–3.8×), and pooling uses less memory.*")
  if best and np then
    local ratio_np = np.median / best.r.us.median
    local nc = wl.counts[string.format("nopool:%d:%d", P, cpus)]
    w(string.format("vmpool: a new state per call costs %s µs per call against %s µs for the best pool (%s): " ..
      "pooling is %s faster, %s the seed's 2.2–3.8×. Without a pool every call pays for a new Lua state with its " ..
      "standard libraries, the `init` code and an OS thread%s; with a pool it pays only the hand-off.",
      t(np.median), t(best.r.us.median), label(best.id), x(ratio_np),
      ratio_np > 3.8 and "a much larger gap than" or (ratio_np >= 2.2 and "in the range of" or "a smaller gap than"),
      nc and nc.native_bytes and string.format(" (%s KB of native allocations per call)",
        num(nc.native_bytes / 1024, 0)) or ""))
    local np_rss, best_rss = rss("nopool"), mb(best.r.rss.median)
    w(string.format("CPU: %s%% without a pool vs %s%% for the best pool. Peak RSS: %s MB without a pool vs %s MB " ..
      "for the best pool and %s MB for the default one.",
      num(cpu("nopool"), 0), num(best.r.cpu and best.r.cpu.median, 0), num(np_rss, 1), num(best_rss, 1),
      num(rss("default"), 1)))
    local small = math.min(best_rss or math.huge, rss("default") or math.huge)
    if np_rss and np_rss <= small * 1.1 then
      w("Unlike the seed, *no pool* does **not** use more memory here: each state is closed right after " ..
        "its call (`idle_timeout = 0`) and calls are slow enough that few overlap, so few states are alive at any " ..
        "moment. Its cost is time and CPU, not memory. (Peak RSS includes the garbage of the calls made so far, " ..
        "and the no-pool runs make 10× fewer calls per coroutine, so its figure is, if anything, flattered.)")
    else
      w("As in the seed, no pool also uses more memory.")
    end
  end
  w("")

  -- 2. parallelism
  w("**Effect of parallelism.** *Seed: with an unbounded pool, memory doubles with each doubling of P (291 MB → " ..
    "560 MB → 1.08 GB) and the time per call rises with P.*")
  local ps = wl.settings.ps
  local p_lo, p_hi = ps[1], ps[#ps]
  local u_lo, u_hi = U("unbounded", p_lo), U("unbounded", p_hi)
  local r_lo, r_hi = rss("unbounded", p_lo), rss("unbounded", p_hi)
  local c_lo, c_hi = created("unbounded", p_lo), created("unbounded", p_hi)
  if u_lo and u_hi then
    w(string.format("vmpool, unbounded pool, P = %d → %d: %s → %s µs per call, peak RSS %s → %s MB, states created " ..
      "%s → %s.", p_lo, p_hi, t(u_lo.median), t(u_hi.median), num(r_lo, 1), num(r_hi, 1), num(c_lo, 0), num(c_hi, 0)))
    if c_hi and c_hi < p_hi / 4 then
      local ci = cg and cg.per_call[wl.lua] and cg.per_call[wl.lua].invoke
      w(string.format("This **disagrees** with the seed: the number of states does not follow P. " ..
        "A coroutine holds a " ..
        "state only from `submit` until its call finishes, and the host's single thread submits the calls one at a " ..
        "time%s; so only a few states are ever busy at once (%s created for %d coroutines). What memory does grow " ..
        "with P is the coroutines and their calls in flight: the direct-call row, with the same coroutines and no " ..
        "pool, goes from %s to %s MB, and the pooled rows gain alike (default pool: %s → %s MB, ≈ %s KB per " ..
        "additional coroutine with a call in flight, the host's not yet collected garbage included).",
        ci and string.format(", and a submission costs the host about as much as the call costs its worker " ..
          "(callgrind: %s vs %s instructions per blocking invoke)", num(ci.host, 0), num(ci.pool, 0)) or "",
        num(c_hi, 0), p_hi, num(rss("direct", p_lo), 1), num(rss("direct", p_hi), 1),
        num(rss("default", p_lo), 1), num(rss("default", p_hi), 1),
        num(rss("default", p_hi) and rss("default", p_lo) and
          (rss("default", p_hi) - rss("default", p_lo)) * 1024 / (p_hi - p_lo), 1)))
    else
      w("As in the seed, the pool grows with P.")
    end
    if clearly_below(u_lo, u_hi) then
      w(string.format("Time per call rises with P (P = %d against P = %d: %s), as in the seed.",
        p_hi, p_lo, cmp(u_hi, u_lo)))
    elseif clearly_below(u_hi, u_lo) then
      w(string.format("Time per call falls with P (P = %d against P = %d: %s), unlike the seed.",
        p_hi, p_lo, cmp(u_hi, u_lo)))
    else
      w(string.format("Time per call shows no clear trend with P, unlike the seed's steady rise: P = %d against " ..
        "P = %d, %s.", p_hi, p_lo, cmp(u_hi, u_lo)))
    end
  end
  w("")

  -- 3. core count vs memory
  w("**Core count vs memory.** *Seed: at the same parallelism, fewer core states means more time per call but less " ..
    "memory (core 1000 + blocking: 326 MB, 0.0484 ms; core 2000: 652 MB, 0.0473 ms).*")
  local rows = {}
  for _, id in ipairs { "default", "c2xcpu_blk", "c4xcpu_blk", "c1000_blk", "c2000_blk" } do
    if us(id) then
      rows[#rows + 1] = string.format("%s: %s µs, %s MB", label(id), t(us(id)), num(rss(id), 1))
    end
  end
  w("vmpool, blocking pools by core count: ", table.concat(rows, "; "), ".")
  local m1, m2 = rss("c1000_blk"), rss("c2000_blk")
  local t1, t2 = U("c1000_blk"), U("c2000_blk")
  if m1 and m2 and t1 and t2 then
    local per_state = (m2 - m1) * 1024 / 1000
    w(string.format("Memory grows with the core count as in the seed, by %s KB per resident state (its Lua state " ..
      "and worker thread; from core 1000 to core 2000), against ≈ %s KB per VM in the seed (326 MB / 1000).",
      num(per_state, 0), num(326 * 1024 / 1000, 0)))
    if clearly_below(t2, t1) then
      w(string.format("Time per call improves with more states, as in the seed (core 2000 against core 1000: %s).",
        cmp(t2, t1)))
    else
      w(string.format("Time per call does **not** clearly improve with more states, unlike the seed: " ..
        "core 2000 against core 1000, %s.", cmp(t2, t1)))
    end
  end
  if m1 and rss("default") then
    w(string.format("Of core 1000's %s MB at P = %d, %s MB is what the default pool needs at the same P (the host, " ..
      "its coroutines and calls in flight, garbage) and %s MB the 998 extra states (%s KB each); " ..
      "with P = %d the same pool peaks at %s MB.", num(m1, 1), P, num(rss("default"), 1), num(m1 - rss("default"), 1),
      num((m1 - rss("default")) * 1024 / 998, 0), ps[1], num(rss("c1000_blk", ps[1]), 1)))
  end
  local dflt = U("default")
  if dflt and t1 then
    w(string.format("The default (core = CPUs) needs %s MB instead of %s MB; its time per call against core 1000: %s.",
      num(rss("default"), 1), num(m1, 1), cmp(dflt, t1)))
  end
  w("")

  -- 4. blocking vs non-blocking
  w("**Blocking vs non-blocking.** *Seed: with 2000 core states and 4000 in flight, blocking used less memory " ..
    "(652 MB vs 962 MB) but took longer per call (0.0473 vs 0.0460 ms).*")
  local b2, n2 = U("c2000_blk"), U("c2000_unl")
  local b1, n1 = U("c1000_blk"), U("c1000_unl")
  if b2 and n2 and b1 and n1 then
    w(string.format("vmpool, core 2000: blocking %s µs / %s MB, unlimited non-core %s µs / %s MB " ..
      "(%s states created); " ..
      "core 1000: blocking %s µs / %s MB, unlimited non-core %s µs / %s MB (%s states created).",
      t(b2.median), num(rss("c2000_blk"), 1), t(n2.median), num(rss("c2000_unl"), 1), num(created("c2000_unl"), 0),
      t(b1.median), num(rss("c1000_blk"), 1), t(n1.median), num(rss("c1000_unl"), 1), num(created("c1000_unl"), 0)))
    local extra = (created("c2000_unl") or 0) > 2000 or (created("c1000_unl") or 0) > 1000
    if not extra then
      w(string.format("Here the non-blocking pools never create a non-core state: with 1000 or more resident " ..
        "states every call finds an idle one, so both policies run the same pool and differ only by the noise of " ..
        "the runs. Blocking against non-blocking: core 2000 %s; core 1000 %s. Unlike the seed, blocking costs no " ..
        "memory here; in the seed the non-blocking pools did grow (883 MB and 962 MB against 326 MB and 652 MB).",
        cmp(b2, n2), cmp(b1, n1)))
    elseif clearly_below(n2, b2) then
      w(string.format("Blocking is %s than non-blocking, as in the seed.", cmp(b2, n2)))
    else
      w(string.format("Blocking is %s than non-blocking: no clear cost to blocking, unlike the seed.", cmp(b2, n2)))
    end
    local cm = rss("c1000_m2000_blk")
    if cm then
      w(string.format("Core 1000 + max non-core 2000 + blocking: %s µs, %s MB (%s states created).",
        t(us("c1000_m2000_blk")), num(cm, 1), num(created("c1000_m2000_blk"), 0)))
    end
  end
  w("")

  -- 5. CPUs
  local has1 = false
  for _, c in ipairs(wl.settings.cpus) do if c == 1 then has1 = true end end
  if has1 and cpus ~= 1 then
    local b1c, b2c = best_of(POOLED, P, 1), best_of(POOLED, P, cpus)
    if b1c and b2c then
      w(string.format("**CPUs.** *Seed: going from 2 to 4 CPUs did not speed up core + blocking pools " ..
        "(0.0484 → 0.0469 ms).* vmpool: best pool on 1 CPU %s µs (%s), on %d CPUs %s µs (%s): %d CPUs are %s.",
        t(b1c.r.us.median), label(b1c.id), cpus, t(b2c.r.us.median), label(b2c.id), cpus,
        cmp(b2c.r.us, b1c.r.us)))
      local cpu2 = b2c.r.cpu and b2c.r.cpu.median
      if clearly_below(b2c.r.us, b1c.r.us) then
        w("The second CPU runs the workers next to the host thread, which submits and collects every call.")
      elseif clearly_below(b1c.r.us, b2c.r.us) then
        w(string.format("The second CPU does not help: the host's single Lua thread submits and collects every call " ..
          "and bounds the throughput (the process uses %s%% CPU on %d CPUs). A likely reason it is even slower: on " ..
          "one CPU vmpool never spins, and host and workers can take turns in batches (the host submits the call of " ..
          "every ready coroutine before it sleeps); on two they run side by side and pay a cross-CPU hand-off per " ..
          "call (a spin or a futex wake-up; compare the micro benchmark's 1-CPU column). On a shared machine the " ..
          "second CPU is also the one other work competes for.", num(cpu2, 0), cpus))
      else
        w(string.format("As in the seed, more CPUs do not clearly help: the host's single Lua thread submits and " ..
          "collects every call and bounds the throughput (the process uses %s%% CPU on %d CPUs%s).", num(cpu2, 0),
          cpus, cpu2 and cpu2 < 130 and ", about one CPU's worth" or ", part of it spinning while it waits"))
      end
      w("")
    end
  end

  -- 6. optimum
  local sweep = {}
  for _, id in ipairs { "default", "c2xcpu_blk", "c4xcpu_blk", "c1000_blk", "c2000_blk" } do
    if us(id) then sweep[#sweep + 1] = id end
  end
  local opt = best_of(sweep, P, cpus)
  if opt then
    local parts = {}
    for _, id in ipairs(sweep) do
      if id ~= opt.id then parts[#parts + 1] = string.format("%s, %s", label(id), cmp(U(id), opt.r.us)) end
    end
    local clear, unclear = {}, {}
    for _, id in ipairs(sweep) do
      if id ~= opt.id then
        if clearly_below(opt.r.us, U(id)) then clear[#clear + 1] = label(id) else unclear[#unclear + 1] = label(id) end
      end
    end
    w(string.format("**Where the optimum is.** Among blocking pools at P = %d on %d CPUs the fastest median is %s " ..
      "(%s µs per call, %s MB). Against it: %s. %s", P, cpus, label(opt.id), t(opt.r.us.median),
      num(mb(opt.r.rss.median), 1), table.concat(parts, "; "),
      #unclear == 0 and "All the others are clearly slower." or
        string.format("Clearly slower: %s; not separated from it by these runs: %s.",
          #clear > 0 and table.concat(clear, ", ") or "none", table.concat(unclear, ", "))))
    local d = U("default")
    local better = {}
    for _, id in ipairs(sweep) do
      if id ~= "default" and clearly_below(U(id), d) then better[#better + 1] = label(id) end
    end
    if #better == 0 then
      w("No pool of this sweep is clearly faster than the default (core = CPUs), while memory grows with " ..
        "every resident state. Why more states are not expected to help: the calls are short and CPU-bound. " ..
        "At most CPUs calls can run at once, so states beyond that only wait; each costs memory, a thread, " ..
        "and scheduling, while the host thread spends the same time submitting calls and resuming coroutines " ..
        "whatever the pool size. More states pay off only when calls wait on something other than the CPU " ..
        "inside the child (I/O, locks, sleeps); then the useful pool size is the number of such calls in flight.")
    else
      w(string.format("Clearly faster than the default (core = CPUs) in this run: %s. The calls are short and " ..
        "CPU-bound, so at most CPUs of them can run at once; more states help only by keeping work queued at the " ..
        "workers while the host thread is busy. Weigh that against the memory of each state (above).",
        table.concat(better, ", ")))
    end
    w("")
  end
  w("**Recommendation** (for vmpool; the seed's advice for gopher-lua was core + bounded non-core + blocking, with " ..
    "idle release):")
  w("")
  w("- `core`: the number of CPUs (the default) for CPU-bound calls; raise it to the number of calls that typically " ..
    "wait on I/O *inside the child* at the same time, if any. Each resident state costs the memory measured above.")
  w("- `blocking = true` (the default) with `max_noncore = 0` or a small number: a queued call costs a few hundred " ..
    "bytes and, for short calls, little time; the pool's memory stays bounded whatever the traffic (the seed's " ..
    "OOM concern). Add `acquire_timeout` / `max_waiting` to fail fast under overload instead of queueing without end.")
  w("- `max_noncore`: a burst allowance for calls that block inside the child; keep it bounded (`math.huge` lets a " ..
    "burst of slow calls create one state each).")
  w("- `idle_timeout`: keep the default 60 s (or less) so that non-core states created by a burst are closed again " ..
    "(the idle-release table shows them all closed). `idle_timeout = 0` is the *no pool* row: never use it for " ..
    "frequent calls.")
  w("")
end

local function section_seed()
  w("Copied from the seed report (gopher-lua 虚拟机池, `go test -bench` with `SetParallelism`, 10 s × 5 runs). " ..
    "**Another machine, another language and another VM: not comparable figure by figure with the tables above;** " ..
    "only the directions of its conclusions are compared in the analysis.")
  w("")
  local rows = {}
  for _, r in ipairs(SEED) do
    rows[#rows + 1] = { r[1], tostring(r[2]), tostring(r[3]), string.format("%.6g", r[4]),
      string.format("%.1f", r[4] * 1000), r[5], r[6], r[7] }
  end
  table_md({ "gopher-lua pool strategy", "CPUs", "parallelism", "ms/op", "= µs/op", "memory/op", "peak CPU",
    "peak memory" }, rows)
end

--- the document ---------------------------------------------------------------------------------

local function short_version(v)
  if not v then return "?" end
  return (v:gsub("%s+%-?%-?%s*Copyright.*$", ""))
end

local function header(m)
  w("# vmpool performance report")
  w("")
  w("Generated by `", m.command or "bench/run.sh report", "` on ", m.date or "?", " from commit `",
    m.commit or "?", "`", m.dirty and " (with uncommitted changes)" or "", " (branch ", m.branch or "?", ").")
  w("")
  w(string.format("Machine: %s, %d CPUs%s%s, %.1f GB memory; %s, Linux %s. Runtimes: %s; %s; %s. %s; %s.",
    m.cpu_model or "?", m.cpus or 0, m.threads_per_core and m.threads_per_core > 1 and " (SMT)" or "",
    m.hypervisor and (" (virtual machine, " .. m.hypervisor .. ")") or "", m.mem_gb or 0, m.os or "?", m.kernel or "?",
    short_version(m.lua and m.lua["lua5.1"]), short_version(m.lua and m.lua["lua5.4"]),
    short_version(m.lua and m.lua["luajit"]),
    m.rustc or "?", m.valgrind or "?"))
  w("")
  local st = m.settings or {}
  w(string.format("Run: %s mode, %d repetitions of every timed figure%s, %s in all. Load average (1, 5, 15 min) " ..
    "%s at the start, %s at the end%s.",
    st.quick and "**quick** (`BENCH_QUICK=1`: shorter runs, P = 1000 and 4000 only)" or "full",
    st.reps or 0, (st.nice or 0) ~= 0 and string.format(", measuring processes under `nice -n %d`", st.nice) or "",
    m.seconds and string.format("%.1f min", m.seconds / 60) or "?",
    m.loadavg_start or "?", m.loadavg_end or "?",
    ((tonumber((m.loadavg_start or ""):match("^%S+")) or 0) > 1.0 and
      ": **the machine was not idle when the run started, so wall-clock figures may be noisier than on a " ..
      "quiet machine** (see the min–max ranges); instruction counts are not affected" or
      " (the run's own threads raise the load while it runs)")))
  w("")
end

os.execute("mkdir -p bench/charts")
if o.section == "micro" then
  section_micro(false)
  local text = table.concat(lines, "\n") .. "\n"
  io.write(text)
  write_file(OUT .. "/micro.md", text)
  return
end

local m = load_saved("machine") or {}
header(m)
w("## Targets")
w("")
section_targets()
w("## 1. Micro benchmark")
w("")
section_micro(true)
w("## 2. Workload: strategies × parallelism × CPUs")
w("")
section_workload(true)
w("## 3. Instructions per call (callgrind)")
w("")
section_callgrind(true)
w("## 4. Analysis")
w("")
section_analysis()
w("## 5. The seed report's figures (gopher-lua, for reference only)")
w("")
section_seed()
w("## 6. Method and reruns")
w("")
w("See `bench/README.md`: what each suite measures, how runs are interleaved, and how to rerun one part " ..
  "(`bench/run.sh micro|workload|callgrind`, `bench/compare A B`). Raw results of this report: `bench/out/*.dat` " ..
  "(not committed; every single run is kept there).")
write_file("bench/REPORT.md", table.concat(lines, "\n") .. "\n")
print("bench: wrote bench/REPORT.md and bench/charts/*.svg")
