-- The report's first table: every performance goal (report/goals.lua), what this run measured for
-- it, and whether it was met; each row names the section its figure comes from (the heavy-work
-- goals' rows come from report/heavy.lua, which computes them for its own section too).
local B = require "benchlib"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"
local TARGETS = require "report.goals"
local heavy = require "report.heavy"

local w, table_md = D.w, D.table_md
local num, t, mmm, x, mb = F.num, F.t, F.mmm, F.x, F.mb
local RUNTIME_LABEL, POOLED, label = R.RUNTIME_LABEL, R.POOLED, R.label
local micro_fig, paired_ratio, micro_runtimes = R.micro_fig, R.paired_ratio, R.micro_runtimes
local wl_summary, best_of, cg_fig = R.wl_summary, R.best_of, R.cg_fig

--- the round trip, absolute and against the Rust channel floor (micro)
local function round_trip_rows(row, micro)
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
end

--- calls/s of one micro figure on Lua 5.4 and 2 CPUs (1e6 / its µs per call, per run)
local function calls_per_s(micro, figure)
  local xs = {}
  for _, r in ipairs(micro.runs["lua5.4:2"] or {}) do
    local f = r.figures and r.figures[figure]
    if f and f.us > 0 then xs[#xs + 1] = 1e6 / f.us end
  end
  return B.summary(xs)
end

--- the futures path: calls/s with 1,000 futures in flight, in batches (submit 1,000, wait for each,
--- after a warm-up) and as a sliding window in a process of its own (fresh pool, whole process)
local function futures_row(row, micro)
  local s = calls_per_s(micro, "submit")
  row("calls/s with 1,000 futures in flight (`submit`/`wait`), Lua 5.4, 2 CPUs", "≥ " .. num(TARGETS.futures_per_s, 0),
    s and mmm(s, function(n) return num(n, 0) end) or "not measured",
    s and s.median >= TARGETS.futures_per_s, "micro")
  local win = calls_per_s(micro, "window")
  row("calls/s, futures as a sliding window (1,000 in flight, fresh `core = 2` pool, whole process), Lua 5.4, 2 CPUs",
    "≥ " .. num(TARGETS.window_per_s, 0), win and mmm(win, function(n) return num(n, 0) end) or "not measured",
    win and win.median >= TARGETS.window_per_s, "micro")
end

--- calls/s with 4000 in flight and the RSS of core = 1000 (workload)
local function workload_rows(row)
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

--- native bytes per trivial invoke (micro, count-alloc runs)
local function native_bytes_row(row, micro)
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

--- instructions per blocking invoke and per 10-field echo (callgrind)
local function instruction_rows(row)
  local f = cg_fig("lua5.4", "invoke")
  -- Lua 5.1 and LuaJIT beside Lua 5.4's figure (issue 33)
  local function others(fig)
    local parts = {}
    for _, lua in ipairs { "lua5.1", "luajit" } do
      local v = fig(lua)
      if v then parts[#parts + 1] = string.format("%s %s", lua == "luajit" and "LuaJIT" or "Lua 5.1", num(v, 0)) end
    end
    return #parts > 0 and "; " .. table.concat(parts, ", ") or ""
  end
  row("instructions per blocking invoke, host + workers, Lua 5.4", "≤ " .. num(TARGETS.invoke_ir, 0),
    f and string.format("%s (host %s + pool %s)%s", num(f.total, 0), num(f.host, 0), num(f.pool, 0),
      others(function(lua) local g = cg_fig(lua, "invoke") return g and g.total end)) or "not measured",
    f and f.total <= TARGETS.invoke_ir, "callgrind")
  local d = cg_fig("lua5.4", "direct")
  local function hand_off(lua)
    local i, di = cg_fig(lua, "invoke"), cg_fig(lua, "direct")
    return i and di and i.total - di.total
  end
  row("instructions of a blocking invoke's hand-off (the invoke minus the direct call of the same function), Lua 5.4",
    "≤ " .. num(TARGETS.handoff_ir, 0),
    f and d and num(f.total - d.total, 0) .. others(hand_off) or "not measured",
    f and d and f.total - d.total <= TARGETS.handoff_ir, "callgrind")
  local e = cg_fig("lua5.4", "echo10")
  row("instructions per 10-field table echo, Lua 5.4", "≤ 15,000",
    e and string.format("%s (host %s + pool %s); the goal is below what the four table passes alone cost "
      .. "through Lua's C API (`bench/probes/echo_floor.sh`, bench/results/2026-12-07-echo-floor.md)",
      num(e.total, 0), num(e.host, 0), num(e.pool, 0)) or "not measured",
    e and e.total <= TARGETS.echo10_ir, "callgrind")
end

local function section()
  local micro, wl, cg = R.micro, R.wl, R.cg
  local rows = {}
  local function row(what, target, measured, met, how)
    local mark = type(met) == "string" and met or (met == nil and "–" or (met and "**met**" or "**not met**"))
    rows[#rows + 1] = { what, target, measured, mark, how or "" }
  end
  round_trip_rows(row, micro)
  if micro then futures_row(row, micro) end
  if wl then workload_rows(row) end
  if micro then native_bytes_row(row, micro) end
  if cg then instruction_rows(row) end
  for _, r in ipairs(heavy.goal_rows()) do row(r[1], r[2], r[3], r[4], "heavy work (5)") end
  table_md({ "target", "goal", "measured (median [min–max])", "", "section" }, rows)
  w("The blocking channel floor parks its threads (a round trip is two futex wake-ups, about 9 µs here); the " ..
    "polling floor is the one comparable with a design that spins first, like vmpool's. Wall-clock rows are from " ..
    "a shared machine: see the load average above and the run-to-run ranges.")
  w("")
end

return { section = section }
