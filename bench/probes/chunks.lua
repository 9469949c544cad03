-- Per-call cost against the number of chunks a pool holds (issue 10, section 6): an invoke of a
-- loaded chunk with 10,000 chunks compiled (and loaded) must cost within 1.2x of the same with
-- 10, and a recompile must cost each state O(1), not O(chunks). Run with the rock on the path:
--   LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/probes/chunks.lua'
-- BENCH_QUICK=1 runs a few hundred iterations only (to check that the script works, not to
-- measure). Prints medians of BENCH_REPS (5) interleaved runs with [min-max], and each ratio
-- against the 10-chunk pool measured in the same run.
local vmpool = require "vmpool"
package.path = "bench/lib/?.lua;" .. package.path
local B = require "benchlib"

local QUICK = os.getenv("BENCH_QUICK") == "1"
local REPS = tonumber(os.getenv("BENCH_REPS")) or (QUICK and 1 or 5)
local CALLS = QUICK and 200 or 200000
local RECOMPILES = QUICK and 50 or 2000
local SIZES = QUICK and { 10, 200 } or { 10, 1000, 10000 }

local function source(i)
  return ("return { f = function(x) return x + %d end }"):format(i)
end

-- a pool with `n` chunks compiled and loaded into its one state
local function pool_with(n)
  local pool = vmpool.new { core = 1 }
  for i = 1, n do
    pool:compile("c" .. i, source(i))
    pool:invoke("c" .. i, "f", 0)
  end
  return pool
end

-- microseconds per invoke of one loaded chunk
local function invoke_us(pool)
  local t0 = vmpool.clock()
  for i = 1, CALLS do
    pool:invoke("c1", "f", i)
  end
  return (vmpool.clock() - t0) / CALLS * 1e6
end

-- microseconds per recompile of one chunk followed by an invoke of it (the state drops the old
-- version and loads the new one)
local function recompile_us(pool)
  local t0 = vmpool.clock()
  for i = 1, RECOMPILES do
    pool:compile("c2", source(i))
    pool:invoke("c2", "f", i)
  end
  return (vmpool.clock() - t0) / RECOMPILES * 1e6
end

local function summary(xs)
  local s = B.summary(xs)
  return string.format("%.3g [%.3g-%.3g]", s.median, s.min, s.max)
end

print(string.format("vmpool %s on %s, %d reps, %d invokes, %d recompiles", vmpool._VERSION,
  vmpool.runtime, REPS, CALLS, RECOMPILES))
local pools = {}
for _, n in ipairs(SIZES) do
  pools[n] = pool_with(n)
end
local invokes, recompiles = {}, {}
for _, n in ipairs(SIZES) do
  invokes[n], recompiles[n] = {}, {}
end
for r = 1, REPS do -- interleaved, so drift of the machine spreads over every size
  for _, n in ipairs(SIZES) do
    invokes[n][r] = invoke_us(pools[n])
    recompiles[n][r] = recompile_us(pools[n])
  end
end
local base_invoke = B.median(invokes[SIZES[1]])
local base_recompile = B.median(recompiles[SIZES[1]])
for _, n in ipairs(SIZES) do
  print(string.format("%6d chunks: invoke %s us (%.2fx)   recompile+invoke %s us (%.2fx)", n,
    summary(invokes[n]), B.median(invokes[n]) / base_invoke,
    summary(recompiles[n]), B.median(recompiles[n]) / base_recompile))
  pools[n]:close()
end
