-- Section 4 of the report: instructions per call from callgrind (bench/suites/cg.lua under valgrind): the
-- table per runtime, the hand-off's share, the chart, and the per-function profiles of the
-- symbolized hosts (where the instructions go, by function, by object, by kind of work).
local svg = require "svg"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"
local TARGETS = require "report.goals"

local w, table_md, write_file = D.w, D.table_md, D.write_file
local num, pct = F.num, F.pct
local RUNTIME_LABEL, CG_KIND_LABEL, cg_fig = R.RUNTIME_LABEL, R.CG_KIND_LABEL, R.cg_fig

--- how the counts are taken, and the table of them; returns the runtimes measured
local function counts_table(cg)
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
  for _, lua in ipairs { "lua5.1", "lua5.4", "lua5.5", "luajit" } do
    if cg.per_call[lua] then rts[#rts + 1] = lua end
  end
  for _, kind in ipairs { "direct", "invoke", "echo10", "co_invoke", "chan_pingpong", "chan_to_host", "chan_stream" } do
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
  return rts
end

--- what the blocking invoke's hand-off costs beyond the script itself
local function hand_off()
  local inv, dir = cg_fig("lua5.4", "invoke"), cg_fig("lua5.4", "direct")
  if inv and dir then
    w(string.format("Of the %s instructions of a blocking invoke on Lua 5.4, about %s are the script itself " ..
      "(what the direct call costs in the host); the hand-off costs the other %s (host %s, pool %s beyond the " ..
      "script). The %s target leaves %s for the hand-off; the hand-off's own target is %s.", num(inv.total, 0),
      num(dir.total, 0), num(inv.total - dir.total, 0), num(inv.host, 0), num(inv.pool - dir.total, 0),
      num(TARGETS.invoke_ir, 0), num(TARGETS.invoke_ir - dir.total, 0), num(TARGETS.handoff_ir, 0)))
    w("")
  end
end

--- charts/callgrind.svg
local function chart(rts)
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
    subtitle = string.format("targets: invoke <= %s, 10-field table echo <= %s (Lua 5.4)", num(TARGETS.invoke_ir, 0),
      num(TARGETS.echo10_ir, 0)),
    unit = "instructions per call", log = true, series = series, groups = groups, label_width = 300,
    marks = { { v = TARGETS.invoke_ir, label = num(TARGETS.invoke_ir, 0) },
      { v = TARGETS.echo10_ir, label = num(TARGETS.echo10_ir, 0) } },
  })
  w("![instructions per call](charts/callgrind.svg)")
  w("")
end

--- the 25 costliest functions per side of one call of `kind` on `lua`
local function profile_functions(lua, kind, p)
  local stock = cg_fig(lua, kind)
  w(string.format("**Where the instructions of one %s go, %s** (self cost per call by function, " ..
    "the 25 largest per side; Lua's internal functions are named because this profile runs on a host " ..
    "linked with Debian's static Lua library, `bench/report/lua-host.c`: %s instructions per call, against %s " ..
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
end

--- the same profile summed by object and by kind of work, and the formatting finding
local function by_object(p)
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

--- the profiles of Lua 5.4 (every kind) and Lua 5.1 (the blocking invoke)
local function profiles(cg)
  for _, lua in ipairs { "lua5.4", "lua5.1" } do
    local prof = cg.profiles and cg.profiles[lua]
    if prof then
      -- all kinds for Lua 5.4; the blocking invoke only for the others
      for _, kind in ipairs(lua == "lua5.4" and { "invoke", "echo10", "co_invoke" } or { "invoke" }) do
        local p = prof[kind]
        if p then
          profile_functions(lua, kind, p)
          if p.host.objects and p.pool.objects then by_object(p) end
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

--- Writes the section; `charts` also writes charts/callgrind.svg.
local function section(charts)
  local cg = R.cg
  if not cg then
    w("*Callgrind has not been run (`bench/callgrind`).*")
    w("")
    return
  end
  local rts = counts_table(cg)
  hand_off()
  if charts then chart(rts) end
  profiles(cg)
end

return { section = section }
