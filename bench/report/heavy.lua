-- Section 5 of the report: heavy work (issue 14), from the report's heavy-work suite (bench/report/run.lua),
-- which runs three scripts that save every round (--out): bench/ngx/heavy.lua (heavy requests in
-- OpenResty while a light /ping is probed, four variants), bench/suites/speedup.lua (what offloading gains
-- over serial host calls, by call size, on 1 and 2 CPUs) and bench/suites/map.lua (pool:map's trivial
-- items/s next to co_invoke, and how heavy items scale from 1 state to 2). Medians, ratios paired by
-- round and every verdict are computed here; `goal_rows` gives the targets table the same verdicts.
local B = require "benchlib"
local svg = require "svg"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"
local TARGETS = require "report.goals"
local trivial = require "report.ngx_trivial"

local w, table_md, write_file, unavailable = D.w, D.table_md, D.write_file, D.unavailable
local num, t, mmm, x2, paired, verdict = F.num, F.t, F.mmm, F.x2, F.paired, F.verdict

local function quick_note(res)
  if res.quick then
    w("*Quick mode (`BENCH_QUICK=1`): one short round, which checks that the script works; its figures and " ..
      "verdicts mean nothing.*")
    w("")
  end
end

--- OpenResty: bench/ngx/heavy.lua -------------------------------------------------------------------

local VARIANTS = {
  { id = "inline1", label = "inline, 1 worker" },
  { id = "vmpool", label = "vmpool (`co_invoke`), 1 worker" },
  { id = "rwt", label = "`ngx.run_worker_thread`, 1 worker" },
  { id = "inline2", label = "inline, 2 workers" },
}

--- the goals of the heavy scenario: { what, goal, measured, verdict } ("not measured" without runs)
local function ngx_goals(h)
  local runs = h and h.runs or {}
  local v, rwt, i2 = runs.vmpool, runs.rwt, runs.inline2
  local p99 = v and B.summary(v.p99)
  local p99_ratio = paired(v and v.p99, rwt and rwt.p99)
  local rps_rwt = paired(v and v.rps, rwt and rwt.rps)
  local rps_i2 = paired(v and v.rps, i2 and i2.rps)
  return {
    { "OpenResty: /ping p99 under heavy load, vmpool", "≤ " .. TARGETS.ngx_ping_p99_ms .. " ms",
      p99 and (mmm(p99) .. " ms") or "not measured", verdict(p99, TARGETS.ngx_ping_p99_ms) },
    { "OpenResty: /ping p99, vmpool ÷ run_worker_thread", "≤ " .. x2(TARGETS.ngx_ping_p99_vs_rwt),
      p99_ratio and mmm(p99_ratio, x2) or "not measured", verdict(p99_ratio, TARGETS.ngx_ping_p99_vs_rwt) },
    { "OpenResty: heavy req/s, vmpool ÷ run_worker_thread", "≥ " .. x2(TARGETS.ngx_rps_vs_rwt),
      rps_rwt and mmm(rps_rwt, x2) or "not measured", verdict(rps_rwt, TARGETS.ngx_rps_vs_rwt, true) },
    { "OpenResty: heavy req/s, vmpool ÷ inline with 2 workers", "≥ " .. x2(TARGETS.ngx_rps_vs_inline2),
      rps_i2 and mmm(rps_i2, x2) or "not measured", verdict(rps_i2, TARGETS.ngx_rps_vs_inline2, true) },
  }
end

local function ngx_section(charts)
  w("### 5.1 Heavy requests in OpenResty, with a light probe")
  w("")
  local h = R.ngx_heavy
  if unavailable(h, "bench/ngx/run.sh bench/ngx/heavy.lua") then return end
  w(string.format("`bench/ngx/heavy.lua`: a handler doing %s rounds of a pure-Lua string hash per heavy request " ..
    "(about 1 ms), loaded with `wrk -t1 -c%d -d%ds`, while a light `/ping` is probed at %d requests/s on one " ..
    "keep-alive connection; four variants of the same work: inline with 1 nginx worker, offloaded to vmpool " ..
    "(`vmpool.ngx`, `co_invoke`, core = %d) or to `ngx.run_worker_thread` (thread_pool threads = %d) with 1 " ..
    "worker, and inline with 2 workers. %d round%s, each running every variant once in a rotating order; median " ..
    "[min–max] over the rounds; ratios are the median [min–max] of the per-round ratios. %d CPUs. Unloaded /ping " ..
    "p99: %s ms. Load average (1, 5, 15 min) %s before, %s after.",
    num(h.work, 0), h.connections, h.duration_s, h.rate, h.core, h.threads, h.rounds, h.rounds == 1 and "" or "s",
    h.cpus or 0, t(h.idle_ping_p99_ms), h.loadavg_before or "?", h.loadavg_after or "?"))
  w("")
  w("Command: `", h.command or "bench/ngx/run.sh bench/ngx/heavy.lua", "`")
  w("")
  quick_note(h)
  local rows, rps_groups, ping_groups = {}, {}, {}
  for _, v in ipairs(VARIANTS) do
    local r = h.runs[v.id]
    if r then
      local rps, p50, p99 = B.summary(r.rps), B.summary(r.p50), B.summary(r.p99)
      local errors = {}
      for _, e in ipairs(r.errors or {}) do if e then errors[#errors + 1] = e end end
      rows[#rows + 1] = { v.label, mmm(rps, function(n) return num(n, 0) end), mmm(p50), mmm(p99),
        mmm(B.summary(r.load), function(n) return num(n, 2) end), #errors > 0 and table.concat(errors, "; ") or "–" }
      rps_groups[#rps_groups + 1] = { label = v.label:gsub("`", ""),
        values = { rps and { v = rps.median, lo = rps.min, hi = rps.max, text = num(rps.median, 0) } } }
      ping_groups[#ping_groups + 1] = { label = v.label:gsub("`", ""), values = {
        p50 and { v = p50.median, lo = p50.min, hi = p50.max },
        p99 and { v = p99.median, lo = p99.min, hi = p99.max } } }
    end
  end
  table_md({ "variant", "heavy req/s", "/ping p50 ms", "/ping p99 ms", "load avg (1 min)", "wrk errors" }, rows)
  if charts and #rows > 0 then
    write_file("bench/charts/heavy-ngx-rps.svg", svg.bars {
      title = "OpenResty, heavy requests: requests per second",
      subtitle = "median of the rounds, min-max whiskers; higher is better",
      unit = "heavy req/s", log = false, groups = rps_groups,
    })
    write_file("bench/charts/heavy-ngx-ping.svg", svg.bars {
      title = "OpenResty, light /ping under heavy load: latency",
      subtitle = "median of the rounds, min-max whiskers; lower is better",
      unit = "ms", log = true, series = { "p50", "p99" }, groups = ping_groups,
      marks = { { v = TARGETS.ngx_ping_p99_ms, label = "p99 goal" } },
    })
    w("![heavy req/s](charts/heavy-ngx-rps.svg) ![/ping latency under heavy load](charts/heavy-ngx-ping.svg)")
    w("")
  end
  table_md({ "goal (issue 14)", "target", "measured (median [min–max])", "" }, ngx_goals(h))
end

--- parallel speedup: bench/suites/speedup.lua ----------------------------------------------------------------

local WAYS = { { id = "co_invoke", label = "co_invoke" }, { id = "map", label = "pool:map" } }

--- speedup of `way` over serial host calls at call size `us` in run `r`: per-round ratios
local function speedup(r, us, way)
  local s = r.us_per_call[us]
  return s and paired(s.serial, s[way])
end

local function speedup_section(charts)
  w("### 5.2 Does offloading pay? Parallel speedup by call size")
  w("")
  local sp = R.speedup
  if unavailable(sp, "LUA=lua5.4 sh -c '. scripts/luaenv.sh && taskset -c 0,1 lua5.4 bench/suites/speedup.lua'") then
    return
  end
  for _, e in ipairs(sp.errors or {}) do
    w("**Failed:** ", e)
    w("")
  end
  local runs = sp.runs or {}
  if #runs == 0 then return end
  local first = runs[1]
  w(string.format("`bench/suites/speedup.lua`: the same calls of about 1, 10, 100 and 1,000 µs of Lua work (a loop " ..
    "calibrated in the host) run one after another in the host (*serial*), through `pool:co_invoke` with up to " ..
    "1,000 coroutines in flight under `vmpool.run`, and through one `pool:map`, on a pool of one state per CPU " ..
    "the process may use (`max_noncore = 0`), under `taskset` for 1 and 2 CPUs; %s. Each round measures the three " ..
    "ways once per size in a rotating order, each for about %s s of serial work; speedup = serial time ÷ the " ..
    "way's time, per round, median [min–max] over %d round%s. Above 1× offloading pays.",
    first.runtime or "?", num(first.budget_s, 2), first.rounds, first.rounds == 1 and "" or "s"))
  w("")
  for _, r in ipairs(runs) do
    w(string.format("- %d CPU%s: `%s` (load average %s before, %s after)", r.cpus, r.cpus > 1 and "s" or "",
      r.command or "?", r.loadavg_before or "?", r.loadavg_after or "?"))
  end
  w("")
  quick_note(first)
  local rows, groups, pays = {}, {}, {}
  for _, r in ipairs(runs) do
    for _, us in ipairs(r.sizes_us) do
      local row = { "~" .. num(us, 0) .. " µs", tostring(r.cpus), mmm(B.summary(r.us_per_call[us].serial)) }
      local vals = {}
      for i, way in ipairs(WAYS) do
        local s = speedup(r, us, way.id)
        row[#row + 1] = mmm(s, x2)
        vals[i] = s and { v = s.median, lo = s.min, hi = s.max, text = x2(s.median) }
      end
      rows[#rows + 1] = row
      groups[#groups + 1] = { label = string.format("~%d µs, %d CPU%s", us, r.cpus, r.cpus > 1 and "s" or ""),
        values = vals }
    end
    for _, way in ipairs(WAYS) do
      local from
      for _, us in ipairs(r.sizes_us) do
        local s = speedup(r, us, way.id)
        if s and s.median > 1 and not from then from = us end
      end
      pays[#pays + 1] = string.format("%s on %d CPU%s: %s", way.label, r.cpus, r.cpus > 1 and "s" or "",
        from and string.format("from calls of ~%s µs", num(from, 0)) or "at none of the sizes measured")
    end
  end
  table_md({ "call size", "CPUs", "serial µs per call", "co_invoke speedup", "pool:map speedup" }, rows)
  if charts then
    write_file("bench/charts/speedup.svg", svg.bars {
      title = "Offloading: speedup over serial calls in the host",
      subtitle = "serial time / offloaded time, median of the rounds, min-max whiskers; above 1 offloading pays",
      unit = "speedup", log = true, series = { "co_invoke", "pool:map" }, groups = groups,
      marks = { { v = 1, label = "break-even" } },
    })
    w("![speedup by call size](charts/speedup.svg)")
    w("")
  end
  w("**Break-even** (the smallest call size measured whose median speedup is above 1×): ",
    table.concat(pays, "; "), ".")
  w("")
end

--- pool:map: bench/suites/map.lua -----------------------------------------------------------------------------

--- summaries of map.lua's figures; nil when it did not run
local function map_figures(m)
  if not m or m.skipped or m.failed then return nil end
  local eff, ceiling, relative, busy_share, slowdown = {}, {}, {}, {}, {}
  for i = 1, math.min(#m.heavy_1state_s, #m.heavy_2states_s) do
    eff[i] = m.heavy_1state_s[i] / m.heavy_2states_s[i] / 2
    local busy1, busy2 = (m.heavy_1state_busy_s or {})[i], (m.heavy_2states_busy_s or {})[i]
    if busy1 and busy2 then
      busy_share[#busy_share + 1] = busy2 / (2 * m.heavy_2states_s[i])
      slowdown[#slowdown + 1] = busy2 / busy1
    end
    local alone, together = (m.ceiling_alone_s or {})[i], (m.ceiling_together_s or {})[i]
    if alone and together then
      ceiling[#ceiling + 1] = alone / together
      relative[#relative + 1] = eff[i] / ceiling[#ceiling]
    end
  end
  return {
    ceiling = #ceiling > 0 and B.summary(ceiling) or nil,
    busy_share = #busy_share > 0 and B.summary(busy_share) or nil,
    slowdown = #slowdown > 0 and B.summary(slowdown) or nil,
    relative = #relative > 0 and B.summary(relative) or nil,
    map = B.summary(m.map_items_per_s), co = B.summary(m.co_invoke_calls_per_s),
    ratio = paired(m.map_items_per_s, m.co_invoke_calls_per_s),
    t1 = B.summary(m.heavy_1state_s), t2 = B.summary(m.heavy_2states_s), eff = B.summary(eff),
    cpu2 = B.summary(m.cpus_during_2states),
  }
end

local function map_goals(m)
  local f = map_figures(m)
  local where = f and not (m.cpus == 2 and m.runtime == "Lua 5.4") and
    string.format(" (measured on %s, %d CPUs: the goal is for Lua 5.4 on 2)", m.runtime, m.cpus) or ""
  return {
    { "pool:map, trivial items/s, Lua 5.4, 2 CPUs", "≥ " .. num(TARGETS.map_items_per_s, 0),
      f and (mmm(f.map, function(n) return num(n, 0) end) .. where) or "not measured",
      where == "" and verdict(f and f.map, TARGETS.map_items_per_s, true) or "–" },
    { "pool:map, heavy items: scaling efficiency from 1 state to 2", "≥ " .. num(TARGETS.map_efficiency, 2),
      f and mmm(f.eff, function(n) return num(n, 3) end) or "not measured",
      verdict(f and f.eff, TARGETS.map_efficiency, true) },
  }
end

local function map_section(charts)
  w("### 5.3 `pool:map`: trivial items per second, and heavy items over 2 states")
  w("")
  local m = R.map
  if unavailable(m, "LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/suites/map.lua'") then return end
  local f = map_figures(m)
  w(string.format("`bench/suites/map.lua`, %s, %d CPUs: %s trivial items (`function id(x) return x end`) " ..
    "through one " ..
    "`pool:map` on the default pool (one state per CPU), against the same function through `co_invoke` with %s " ..
    "coroutines in flight under `vmpool.run` (%s calls) in the same round; then %d heavy items (%s loop " ..
    "iterations each) through `pool:map` on a pool of 1 state and on a pool of 2, in alternating order. " ..
    "Scaling efficiency = 1-state time ÷ 2-state time ÷ 2, per round. Each heavy item returns the seconds " ..
    "it ran, which splits the efficiency in two: the share of the 2-state map's time its states ran items " ..
    "(how well the batches fill both states), and an item's time with 2 states running ÷ with 1 (how much " ..
    "slower the machine runs one item while another runs). The machine's ceiling, in the same " ..
    "round: the same loop over half the heavy items in one plain process of the runtime, then in two at once " ..
    "(time alone ÷ time together: 1 when the machine gives two busy processes a whole CPU each). Median " ..
    "[min–max] over %d round%s. Load " ..
    "average %s before, %s after.",
    m.runtime or "?", m.cpus or 0, num(m.items, 0), num(m.in_flight, 0), num(m.co_invoke_calls, 0),
    m.heavy_items, num(m.heavy_work, 0), m.rounds, m.rounds == 1 and "" or "s", m.loadavg_before or "?",
    m.loadavg_after or "?"))
  w("")
  w("Command: `", m.command or "bench/suites/map.lua", "`")
  w("")
  quick_note(m)
  local n0 = function(n) return num(n, 0) end
  table_md({ "figure", "median [min–max]" }, {
    { "pool:map, trivial items/s", mmm(f.map, n0) },
    { "co_invoke, calls/s", mmm(f.co, n0) },
    { "pool:map ÷ co_invoke, per round", mmm(f.ratio, x2) },
    { "heavy items, 1 state, ms", mmm(f.t1, function(n) return t(n * 1000) end) },
    { "heavy items, 2 states, ms", mmm(f.t2, function(n) return t(n * 1000) end) },
    { "scaling efficiency", mmm(f.eff, function(n) return num(n, 3) end) },
    { "CPUs the process got during the 2-state maps", mmm(f.cpu2, function(n) return num(n, 2) end) },
    { "share of the 2-state map's time its states ran items", f.busy_share and mmm(f.busy_share, function(n)
      return num(n, 3) end) or "not measured" },
    { "an item's time, 2 states running ÷ 1", f.slowdown and mmm(f.slowdown, function(n)
      return num(n, 3) end) or "not measured" },
    { "the machine's ceiling: 2 processes' loops at once", f.ceiling and mmm(f.ceiling, function(n)
      return num(n, 3) end) or "not measured" },
    { "scaling efficiency ÷ ceiling, per round", f.relative and mmm(f.relative, function(n)
      return num(n, 3) end) or "not measured" },
  })
  if not f.ceiling and f.cpu2 and f.cpu2.median < 1.9 then
    w(string.format("During the 2-state maps the process got %s CPUs (median), not 2: the machine was busy, so " ..
      "the efficiency shows the machine's load as much as `pool:map`'s scaling.", num(f.cpu2.median, 2)))
    w("")
  end
  if charts and f.map and f.co then
    write_file("bench/charts/map.svg", svg.bars {
      title = "Trivial calls per second: one pool:map against co_invoke",
      subtitle = "median of the rounds, min-max whiskers; higher is better",
      unit = "items (calls) per second", log = false,
      groups = {
        { label = "pool:map",
          values = { { v = f.map.median, lo = f.map.min, hi = f.map.max, text = n0(f.map.median) } } },
        { label = "co_invoke, " .. num(m.in_flight, 0) .. " in flight",
          values = { { v = f.co.median, lo = f.co.min, hi = f.co.max, text = n0(f.co.median) } } },
      },
      marks = { { v = TARGETS.map_items_per_s, label = "goal" } },
    })
    w("![pool:map against co_invoke](charts/map.svg)")
    w("")
  end
  table_md({ "goal (issue 14)", "target", "measured (median [min–max])", "" }, map_goals(m))
end

--- The rows of the targets table: { what, goal, measured, verdict } for every goal of this section
--- ("not measured" when its script did not run; the section says why).
local function goal_rows()
  local rows = {}
  for _, r in ipairs(ngx_goals(R.ngx_heavy)) do rows[#rows + 1] = r end
  for _, r in ipairs(map_goals(R.map)) do rows[#rows + 1] = r end
  for _, r in ipairs(trivial.goal_rows()) do rows[#rows + 1] = r end
  return rows
end

--- The analysis of this section's gaps (section 6 writes it): each missed goal with what the
--- same run shows about its cause, computed from the saved rounds.
local function analysis()
  local h = R.ngx_heavy
  local runs = h and not h.skipped and not h.failed and h.runs
  if runs and runs.vmpool and runs.rwt then
    local v99, r99 = B.summary(runs.vmpool.p99), B.summary(runs.rwt.p99)
    local v50, r50 = B.summary(runs.vmpool.p50), B.summary(runs.rwt.p50)
    local rps = paired(runs.vmpool.rps, runs.rwt.rps)
    local met = v99.median <= TARGETS.ngx_ping_p99_ms and r99.median > 0
      and v99.median / r99.median <= TARGETS.ngx_ping_p99_vs_rwt
    w(string.format("**Heavy work in OpenResty.** /ping's median under heavy load is %s ms with vmpool and %s ms " ..
      "with `ngx.run_worker_thread`; its p99 %s ms against %s ms%s. Until 531b4f4 vmpool's tail was 2-4 ms: a pool " ..
      "thread that finished a call rang the event loop's doorbell while it held the completion queue's lock, " ..
      "the ring woke the loop, the loop preempted the ringing thread and then blocked on that lock (perf: the " ..
      "worker's main thread was in futex() in 7.9%% of samples, against 0.005%% with run_worker_thread). The " ..
      "ring now comes after the lock is released (bench/results/2026-12-01-sched-and-shared.md). Pool threads " ..
      "inside nginx run 10 steps nicer than the worker; the idle scheduling class (`sched = \"idle\"`) measured " ..
      "no better for the tail once the lock was fixed, and cost about 3%% of heavy req/s, so it is an option, " ..
      "not the default. Heavy req/s is %s run_worker_thread's: both are bound by the same two CPUs doing the " ..
      "hashing, so the 5%% the goal asks for would have to come from the loop's own cost per request, which " ..
      "is small next to 1 ms of work.",
      t(v50.median), t(r50.median), t(v99.median), t(r99.median),
      met and " (both goals met)" or (" (ranges " .. mmm(v99) .. " against " .. mmm(r99) .. " ms)"),
      rps and x2(rps.median) or "–"))
    w("")
  end
  local f = map_figures(R.map)
  if f and f.eff and f.busy_share and f.slowdown then
    local full = f.busy_share.median >= TARGETS.map_efficiency
    local met = f.eff.median >= TARGETS.map_efficiency
    w(string.format("**pool:map on heavy items.** The scaling efficiency from 1 state to 2 is %s (goal 0.95). " ..
      "Its states ran items %s of the 2-state map's time, and an item took %s× as long while the other state " ..
      "ran one as it took alone. %s%s",
      mmm(f.eff, function(n) return num(n, 3) end), mmm(f.busy_share, function(n) return num(n, 3) end),
      mmm(f.slowdown, function(n) return num(n, 3) end),
      met and "The batches keep both states busy (two plain processes of the same loop at once, for " ..
        "comparison: " or
      full and "The batches keep both states busy; the shortfall is the machine running two items slower " ..
        "than one (two plain processes of the same loop at once: " or
        "The states idled for part of the map: the batches do not keep both busy (two plain processes of " ..
        "the same loop at once, for comparison: ",
      f.ceiling and (mmm(f.ceiling, function(n) return num(n, 3) end) .. " of their speed alone).") or
        "not measured)."))
    w("")
  elseif f and f.eff and f.ceiling and f.relative then
    w(string.format("**pool:map on heavy items.** The scaling efficiency from 1 state to 2 is %s (goal 0.95). " ..
      "Two plain processes running the same loop at once got %s of what each gets alone, in the same rounds: " ..
      "that is what this machine gave two busy CPUs. Against it, the map's efficiency is %s per round. %s",
      mmm(f.eff, function(n) return num(n, 3) end), mmm(f.ceiling, function(n) return num(n, 3) end),
      mmm(f.relative, function(n) return num(n, 3) end),
      f.relative.median >= TARGETS.map_efficiency and
        "The shortfall is the machine's, not the distribution of the batches: against what the machine gave " ..
        "two processes, the map's efficiency is at the goal." or
        "Part of the shortfall is the map's own: its batches do not keep both states busy all the time."))
    w("")
  elseif f and f.eff and f.cpu2 then
    local per_cpu = f.eff.median * 2 / f.cpu2.median
    w(string.format("**pool:map on heavy items.** The scaling efficiency from 1 state to 2 is %s (goal 0.95), " ..
      "but the process got %s CPUs during the 2-state maps, not 2: per CPU received, the efficiency is %s. " ..
      "The shortfall is CPU time the process did not get (other processes or the kernel took it), not the " ..
      "distribution of the " ..
      "batches; rerun on an idle machine to judge the goal.",
      num(f.eff.median, 3), num(f.cpu2.median, 2), num(per_cpu, 2)))
    w("")
  end
  trivial.analysis()
end

--- Writes the section; `charts` also writes charts/heavy-ngx-*.svg, speedup.svg and map.svg.
local function section(charts)
  ngx_section(charts)
  speedup_section(charts)
  map_section(charts)
  trivial.section()
end

return { section = section, goal_rows = goal_rows, analysis = analysis }
