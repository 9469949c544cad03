-- Section 5.4 of the report: the trivial endpoint in OpenResty (issue 14), from the heavy-work
-- suite's runs of bench/ngx/run.lua (req/s of /vmpool, /run_worker_thread and /inline in
-- interleaved rounds, one worker) and bench/ngx/instructions.lua (the event loop's instructions
-- per request under callgrind). `goal_rows` gives the targets table the same verdicts; `analysis`
-- the gap, computed from the same runs.
local B = require "benchlib"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"
local TARGETS = require "report.goals"

local w, table_md, unavailable = D.w, D.table_md, D.unavailable
local num, mmm, x2, paired, verdict = F.num, F.mmm, F.x2, F.paired, F.verdict

local function usable(res)
  return res and not res.skipped and not res.failed and res.runs
end

--- the endpoint's event-loop instructions per request, or nil
local function loop_ir(name)
  local runs = usable(R.ngx_instructions)
  return runs and runs[name] and runs[name].loop
end

local function goals()
  local runs = usable(R.ngx_trivial) or {}
  local v, rwt = runs.vmpool, runs.run_worker_thread
  local ratio = paired(v and v.rps, rwt and rwt.rps)
  local ir = loop_ir("vmpool")
  return {
    { "OpenResty: trivial endpoint req/s, vmpool ÷ run_worker_thread", "≥ " .. x2(TARGETS.ngx_trivial_vs_rwt),
      ratio and mmm(ratio, x2) or "not measured", verdict(ratio, TARGETS.ngx_trivial_vs_rwt, true) },
    { "OpenResty: event-loop instructions per trivial /vmpool request", "≤ " .. num(TARGETS.ngx_loop_ir, 0),
      ir and num(ir, 0) or "not measured", verdict(ir and { median = ir }, TARGETS.ngx_loop_ir) },
  }
end

local ENDPOINTS = {
  { id = "vmpool", label = "/vmpool (`co_invoke`)" },
  { id = "run_worker_thread", label = "/run_worker_thread" },
  { id = "inline", label = "/inline (the work on the event loop)" },
}

local function section()
  w("### 5.4 The trivial endpoint in OpenResty, and the event loop's instructions per request")
  w("")
  local t = R.ngx_trivial
  if not unavailable(t, "bench/ngx/run.sh bench/ngx/run.lua") then
    w(string.format("`%s` (%s): one nginx worker, the seed's `helloLua(7)` per request on each endpoint, wrk " ..
      "-t1 -c%d -d%ds, %d rounds with the endpoints in rotating order; vmpool core = %d, thread_pool threads = %d. " ..
      "Load average after: %s.", t.command or "bench/ngx/run.sh bench/ngx/run.lua", tostring(t.date),
      t.connections or 0, t.duration_s or 0, t.rounds or 0, t.core or 0, t.threads or 0, tostring(t.loadavg_after)))
    w("")
    local rows = {}
    for _, e in ipairs(ENDPOINTS) do
      local r = t.runs[e.id]
      if r then
        local rps, p99 = B.summary(r.rps), B.summary(r.p99)
        local base = t.runs.run_worker_thread
        local ratio = paired(r.rps, base and base.rps)
        rows[#rows + 1] = { e.label, mmm(rps, function(n) return num(n, 0) end),
          mmm(p99, function(n) return num(n, 2) end), ratio and mmm(ratio, x2) or "–" }
      end
    end
    table_md({ "endpoint", "req/s", "p99 ms", "÷ run_worker_thread (per round)" }, rows)
  end
  local c = R.ngx_instructions
  if not unavailable(c, "bench/ngx/run.sh bench/ngx/instructions.lua") then
    w(string.format("`%s` (%s): nginx as one process (`master_process off`) under callgrind, wrk -t1 -c%d -d%ds " ..
      "after a warm-up; instructions per request = each thread's count ÷ wrk's requests (bench/ngx/README.md).",
      c.command or "bench/ngx/run.sh bench/ngx/instructions.lua", tostring(c.date), c.connections or 0,
      c.duration_s or 0))
    w("")
    local rows = {}
    for _, e in ipairs(ENDPOINTS) do
      local r = c.runs[e.id]
      if r then rows[#rows + 1] = { e.label, num(r.requests, 0), num(r.loop, 0), num(r.others, 0) } end
    end
    table_md({ "endpoint", "requests", "event-loop instructions per request", "other threads' per request" }, rows)
  end
  table_md({ "goal (issue 14)", "target", "measured", "" }, goals())
end

--- The gap, from the same runs: with one worker the event loop is the bottleneck of a trivial
--- request, so its instructions bound the req/s ratio.
local function analysis()
  local v, rwt, inline = loop_ir("vmpool"), loop_ir("run_worker_thread"), loop_ir("inline")
  if not (v and rwt) then return end
  local need = rwt / TARGETS.ngx_trivial_vs_rwt
  local runs = usable(R.ngx_trivial)
  local measured = runs and runs.vmpool and runs.run_worker_thread
    and paired(runs.vmpool.rps, runs.run_worker_thread.rps)
  w(string.format("**The trivial endpoint in OpenResty.** The event loop spends %s instructions per /vmpool " ..
    "request, %s per /run_worker_thread request%s. With one worker the loop is the bottleneck of a trivial " ..
    "request: by instructions alone, /vmpool would reach %s of run_worker_thread's req/s%s. " ..
    "The goal of %s would need the loop at %s instructions per request%s. What the loop runs for vmpool " ..
    "beyond nginx and ngx_lua is mostly the vararg part of the call's path (the handler's chunk, " ..
    "`Pool:co_invoke` and the adapter's entry), which LuaJIT runs in its interpreter because no trace starts " ..
    "at a vararg function; its semaphore wait and phase check are compiled already (a native replacement " ..
    "measured 1.5%%: bench/results/2026-12-02-native-wait-and-tokens.md).",
    num(v, 0), num(rwt, 0), inline and (" and " .. num(inline, 0) .. " per /inline request, which runs the " ..
      "work itself") or "", x2(rwt / v),
    measured and ("; it measured " .. x2(measured.median) .. ", since run_worker_thread's loop also loses the CPU " ..
      "to its thread pool about once per request (context switches, which callgrind does not count: " ..
      "bench/ngx/README.md)") or "",
    x2(TARGETS.ngx_trivial_vs_rwt), num(need, 0),
    inline and need < inline and (", less than /inline's: offloading would have to cost the loop less than " ..
      "doing the work") or ""))
  w("")
end

return { section = section, goal_rows = goals, analysis = analysis }
