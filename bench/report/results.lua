-- The results the report is written from (bench/out/*.dat) and the summaries every section reads
-- from them: medians [min–max] of a figure over its runs, ratios paired by repetition, workload
-- rows, instruction counts. `load(prefix)` reads one run's files; until then every accessor
-- answers nil, which the sections print as "not run".
local B = require "benchlib"
local S = require "strategies"

local M = {}

local OUT = "bench/out"
local micro, wl, cg

local function load_saved(name, prefix)
  local text = B.read_file(OUT .. "/" .. prefix .. name .. ".dat")
  if not text then return nil end
  return assert(B.load_result(text))
end

--- Reads the results saved with file name prefix `prefix` ("report-" for `bench/run.sh report`,
--- "" for the suites run on their own); sets M.micro, M.wl, M.cg, M.machine and the heavy-work
--- results M.speedup, M.map, M.ngx_heavy (report/heavy.lua reads those), M.ngx_trivial and
--- M.ngx_instructions (report/ngx_trivial.lua).
function M.load(prefix)
  micro, wl, cg = load_saved("micro", prefix), load_saved("workload", prefix), load_saved("callgrind", prefix)
  M.micro, M.wl, M.cg = micro, wl, cg
  M.machine = load_saved("machine", prefix)
  M.speedup, M.map, M.ngx_heavy = load_saved("speedup", prefix), load_saved("map", prefix),
    load_saved("ngx-heavy", prefix)
  M.ngx_trivial, M.ngx_instructions = load_saved("ngx-trivial", prefix), load_saved("ngx-instructions", prefix)
end

local RUNTIME_LABEL = { ["lua5.1"] = "Lua 5.1", ["lua5.4"] = "Lua 5.4", ["lua5.5"] = "Lua 5.5", ["luajit"] = "LuaJIT" }

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

local CG_KIND_LABEL = {
  direct = "direct call in the host (helloLua)",
  invoke = "blocking `pool:invoke` (helloLua)",
  echo10 = "`pool:invoke` echo of a 10-field table",
  co_invoke = "`pool:co_invoke`, 100 coroutines",
  chan_pingpong = "channel ping-pong host ↔ state (one round trip)",
  chan_to_host = "channel message from a state to the host",
  chan_stream = "`pool:stream` item",
}

local function cg_fig(lua, kind)
  return cg and cg.per_call[lua] and cg.per_call[lua][kind]
end

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

M.OUT, M.RUNTIME_LABEL, M.CG_KIND_LABEL, M.POOLED = OUT, RUNTIME_LABEL, CG_KIND_LABEL, POOLED
M.micro_fig, M.pingpong, M.paired_ratio, M.micro_runtimes = micro_fig, pingpong, paired_ratio, micro_runtimes
M.wl_summary, M.wl_strategies, M.cg_fig, M.best_of, M.label = wl_summary, wl_strategies, cg_fig, best_of, label

return M
