-- Section 6 of the report: the analysis. Checks the seed report's conclusions for gopher-lua one by
-- one against this run's workload figures (pool vs no pool, parallelism, core count vs memory,
-- blocking, CPUs, the optimum) and ends with the recommendation; every comparison is computed
-- from the numbers (report/format.lua's `cmp` and `clearly_below`), so another run rewrites it.
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"

local w = D.w
local num, t, x, mb, cmp, clearly_below = F.num, F.t, F.x, F.mb, F.cmp, F.clearly_below
local RUNTIME_LABEL, POOLED, label = R.RUNTIME_LABEL, R.POOLED, R.label
local wl_summary, best_of = R.wl_summary, R.best_of

--- the run the analysis reads (the largest P; 2 CPUs if measured) and accessors of its rows:
--- U = the µs summary, us = its median, rss in MB, cpu in %, states created
local function context(wl)
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

  return { wl = wl, cpus = cpus, P = P, U = U, us = us, rss = rss, cpu = cpu, created = created }
end

local function introduction(ctx)
  local wl, cpus, P = ctx.wl, ctx.cpus, ctx.P
  w(string.format("All figures below are medians from the tables above: %s, P = %d coroutines in flight, %d CPUs " ..
    "unless stated. A difference is called clear only when the medians are at least 5%% apart and the min–max " ..
    "ranges of the runs do not overlap. The seed report's conclusions for gopher-lua (quoted in section 7) are " ..
    "checked one by one; where vmpool's numbers disagree, this says so.", RUNTIME_LABEL[wl.lua] or wl.lua, P, cpus))
  w("")

end

--- seed: creating a VM per call costs much more time and CPU
local function pool_vs_nopool(ctx)
  local wl, cpus, P, U, rss, cpu = ctx.wl, ctx.cpus, ctx.P, ctx.U, ctx.rss, ctx.cpu
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

end

--- seed: an unbounded pool's memory and time per call grow with P
local function parallelism(ctx)
  local wl, U, rss, created = ctx.wl, ctx.U, ctx.rss, ctx.created
  local cg = R.cg
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

end

--- seed: fewer core states, more time per call but less memory
local function core_count(ctx)
  local P, U, us, rss = ctx.P, ctx.U, ctx.us, ctx.rss
  local ps = ctx.wl.settings.ps
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

end

--- seed: blocking uses less memory but takes longer per call
local function blocking(ctx)
  local U, us, rss, created = ctx.U, ctx.us, ctx.rss, ctx.created
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

end

--- seed: more CPUs did not speed up core + blocking pools
local function more_cpus(ctx)
  local wl, cpus, P = ctx.wl, ctx.cpus, ctx.P
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

end

--- the fastest blocking pool of the core-count sweep, and what beats the default
local function optimum(ctx)
  local cpus, P, U, us = ctx.cpus, ctx.P, ctx.U, ctx.us
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
end

local function recommendation()
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

local function section()
  local wl = R.wl
  if not wl then
    w("*No workload results: run `bench/run.sh workload` (or `make report`).*")
    w("")
    return
  end
  local ctx = context(wl)
  introduction(ctx)
  pool_vs_nopool(ctx)
  parallelism(ctx)
  core_count(ctx)
  blocking(ctx)
  more_cpus(ctx)
  optimum(ctx)
  require("report.micro").analysis()
  require("report.heavy").analysis()
  recommendation()
end

return { section = section }
