-- Why the notifier reuses tokens (src/host/notifier_api.rs): what one insert and one delete cost
-- in a Lua table with 1,000 live integer keys, when the keys keep growing (a sliding window, as
-- never-reused tokens were) against keys reused from 1..1000. Median of 5 rounds [min-max].
--
-- Usage: lua5.4 bench/probes/tables.lua (or lua5.1, luajit); --quick or BENCH_QUICK=1 checks that it works.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path
local B = require "benchlib"

local o = B.options(arg or {})
o.quick = o.quick or os.getenv("BENCH_QUICK") == "1"
local LIVE, OPS, ROUNDS = 1000, o.quick and 20000 or 400000, o.quick and 1 or 5
local clock, value = os.clock, {}

local function growing()
  local t = {}
  for i = 1, LIVE do t[i] = value end
  local t0 = clock()
  for i = LIVE + 1, LIVE + OPS do
    t[i] = value
    t[i - LIVE] = nil
  end
  return (clock() - t0) / OPS * 1e9, t[LIVE + OPS] or t[1] -- t read, so it is not optimised away
end

local function reused()
  local t = {}
  for i = 1, LIVE do t[i] = value end
  local t0 = clock()
  for i = 1, OPS do
    local k = i % LIVE + 1
    t[k] = nil
    t[k] = value
  end
  return (clock() - t0) / OPS * 1e9, t[LIVE + OPS] or t[1] -- t read, so it is not optimised away
end

local g, r = {}, {}
for i = 1, ROUNDS do
  g[i] = growing()
  r[i] = reused()
end
local function show(name, xs)
  local s = B.summary(xs)
  print(("%-16s %8.1f ns per insert and delete [%.1f-%.1f]"):format(name, s.median, s.min, s.max))
end
print(("%s, %d live keys, %d operations, %d rounds"):format(jit and jit.version or _VERSION, LIVE, OPS, ROUNDS))
show("growing keys", g)
show("reused keys", r)
