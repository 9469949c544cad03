-- Section 1 of the report: the micro benchmark (bench/suites/micro.lua, one process per run): the figures
-- per runtime with their ratio to the direct call, the round trip's fast and slow modes, the Rust
-- ping-pong floor, per-call latency percentiles, allocations per call and the chart. Lua Lanes and
-- effil, run in the same repetitions, have their own section (report/peers.lua).
local B = require "benchlib"
local svg = require "svg"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"
local TARGETS = require "report.goals"

local w, table_md, write_file = D.w, D.table_md, D.write_file
local num, t, mmm, x = F.num, F.t, F.mmm, F.x
local RUNTIME_LABEL = R.RUNTIME_LABEL
local micro_fig, pingpong, paired_ratio, micro_runtimes = R.micro_fig, R.pingpong, R.paired_ratio, R.micro_runtimes

local MICRO_FIGS = {
  { "direct", "direct call in the host: helloLua(i)" },
  { "invoke", "blocking `pool:invoke` round trip (core = 1)" },
  { "echo10_direct", "direct call in the host: echo(10-field table)" },
  { "echo10", "`pool:invoke` echo of a 10-field table" },
  { "submit", "`pool:submit`, 1000 futures in flight (default pool)" },
  { "co_invoke", "`pool:co_invoke`, 1000 coroutines in flight (default pool)" },
  { "window", "`pool:submit` as a sliding window, 1000 in flight, fresh core = 2 pool, whole process" },
}
local FLOOR_OF = { invoke = "direct", echo10 = "echo10_direct", submit = "direct", co_invoke = "direct",
  window = "direct" }


--- the runtimes with runs on 2 CPUs, and the table's columns (those, then Lua 5.4 on 1 CPU)
local function columns(micro)
  local rts = micro_runtimes()
  local cols = {}
  for _, lua in ipairs(rts) do cols[#cols + 1] = { key = lua .. ":2", label = RUNTIME_LABEL[lua] .. ", 2 CPUs" } end
  if micro.runs["lua5.4:1"] and #micro.runs["lua5.4:1"] > 0 then
    cols[#cols + 1] = { key = "lua5.4:1", label = "Lua 5.4, 1 CPU" }
  end
  return rts, cols
end

--- the main table: every figure per column, with its ratio to the direct call
local function figures(micro, cols)
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
end

--- the round trip on one CPU against two, and its fast and slow modes over the runs
local function round_trip_modes(micro, rts)
  local inv1, inv2 = micro_fig("lua5.4:1", "invoke"), micro_fig("lua5.4:2", "invoke")
  if inv1 and inv2 then
    if inv2.median > inv1.median then
      local spin, poll, park = pingpong(2, "spin_us"), pingpong(2, "mpsc_polling_us"), pingpong(2, "mpsc_us")
      w(string.format("The round trip on one CPU (%s µs, Lua 5.4) is faster than on two (%s µs) in this run. On one " ..
        "CPU vmpool never spins (`src/spin.rs`): each round trip is two wake-ups and two context switches. On two " ..
        "CPUs a waiting thread first spins (up to 50 µs for the caller, 100 µs for an idle worker, adapted to the " ..
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
end

--- the Rust ping-pong floor, and the round trip divided by it
local function rust_floor(micro, cols)
  local st = micro.settings
  w(string.format("**The floor: a bare Rust ping-pong between two threads** (`bench/suites/pingpong.rs`, %s round " ..
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
end

--- percentiles of the round trip, each call timed
local function latency(micro, cols)
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
end

--- allocations per call, from the count-alloc runs
local function allocations(micro, rts)
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
end

--- charts/micro.svg
local function chart(cols)
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

--- The analysis of the futures goal (section 6 writes it): calls/s with 1,000 futures in flight
--- against co_invoke's in the same runs, and what a future allocates that a co_invoke does not.
local function analysis()
  local micro = R.micro
  local sub, co = micro_fig("lua5.4:2", "submit"), micro_fig("lua5.4:2", "co_invoke")
  if not (sub and co) then return end
  local ratio = paired_ratio("lua5.4:2", "submit", "lua5.4:2", "co_invoke")
  local cps = 1e6 / sub.median
  local counts = micro.counts and micro.counts["lua5.4:2"]
  local cs, cc = counts and counts.figures.submit, counts and counts.figures.co_invoke
  w(string.format("**Futures, 1,000 in flight.** `pool:submit` and `fut:wait` made %s calls/s (goal %s, %s) " ..
    "against %s for `co_invoke` from 1,000 coroutines under `vmpool.run` in the same runs (Lua 5.4, 2 CPUs; a " ..
    "future takes %s the time of a co_invoke, per run). Both are bound by the host's single thread, which " ..
    "submits and collects every call. A future is an object of its own: the host makes a userdata for it and " ..
    "its collector finalizes it%s, while a co_invoke under `vmpool.run` hands a token to the driver and " ..
    "makes nothing. Both figures are measured after 30,000 warm-up calls: until then the pool is still " ..
    "creating its spare call records, and futures measured after 1,000 warm-up calls made 0.57-0.77M " ..
    "calls/s against 1.06-1.14M after 30,000 (bench/results/2026-12-04-futures-warm-up.md).",
    num(cps, 0), num(TARGETS.futures_per_s, 0), cps >= TARGETS.futures_per_s and "met" or "not met",
    num(1e6 / co.median, 0), ratio and x(ratio.median) or "–",
    cs and cc and cs.native_allocs and cc.native_allocs and string.format(" (count-alloc run: %s native " ..
      "allocations and %s host Lua bytes per future, against %s and %s per co_invoke)",
      num(cs.native_allocs, 1), num(cs.host_lua_bytes, 0), num(cc.native_allocs, 1), num(cc.host_lua_bytes, 0))
      or ""))
  w("")
end

--- Writes the section; `charts` also writes charts/micro.svg (the whole report, not `make bench`).
local function section(charts)
  local micro = R.micro
  if not micro then
    w("*The micro benchmark has not been run (`bench/run.sh micro`).*")
    w("")
    return
  end
  local rts, cols = columns(micro)
  figures(micro, cols)
  round_trip_modes(micro, rts)
  rust_floor(micro, cols)
  latency(micro, cols)
  allocations(micro, rts)
  if charts then chart(cols) end
end

return { section = section, analysis = analysis }
