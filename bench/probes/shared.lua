-- vmpool.shared in plain Lua (issue 11, item 4): what a get and a set of a short string cost next
-- to a bare C function call, and how the dictionary scales when two pool states and the host
-- hammer the same 1,000 keys at once.
--
--   c_call     rawequal(a, b): the cost of calling any C function from Lua, the floor of a method
--   get, set   dict:get(key) / dict:set(key, "value-N") over 1,000 keys, nanoseconds per operation
--   alone      operations per second of the host alone (90% get, 10% set on the same keys, each
--              set a value other than the last one set; --set-every=N makes every Nth operation a
--              set instead, 0 none)
--   together   operations per second of the host plus two pool states doing the same at once,
--              each for the same wall-clock window; scaling = together / alone (goal >= 1.5 on 2 CPUs)
--   compute    the machine's own ceiling for that figure: the same loop with a string operation of
--              similar cost in place of each dictionary call, alone and host + two states, so
--              that the dictionary's scaling can be read against what the CPUs give plain Lua
--
-- Each round measures every figure once, in the order of the list (so each figure's rounds are
-- interleaved with the others'); the result is the median of the rounds with min and max.
--
-- Usage (the rock on the path): LUA=lua5.4 sh -c '. scripts/luaenv.sh && lua5.4 bench/probes/shared.lua'
--   [--rounds=7] [--ops=2000000] [--seconds=1] [--shards=N] [--set-every=10]; --quick or BENCH_QUICK=1 checks that it
--   works.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local o = B.options(arg or {})
o.quick = o.quick or os.getenv("BENCH_QUICK") == "1"
local rounds = tonumber(o.rounds) or (o.quick and 1 or 7)
local ops = tonumber(o.ops) or (o.quick and 20000 or 2000000)
local seconds = tonumber(o.seconds) or (o.quick and 0.05 or 1)
local clock = vmpool.clock
local KEYS = 1000
local SET_EVERY = math.floor(tonumber(o.set_every) or 10)

local dict = vmpool.shared("bench", { capacity = "16m", shards = tonumber(o.shards) })
local keys = {}
for i = 1, KEYS do
  keys[i] = "key-" .. i
  dict:set(keys[i], "value-" .. i)
end

local function per_op(f)
  local t0 = clock()
  f(ops)
  return (clock() - t0) / ops * 1e9
end

local figures = {
  c_call = function()
    return per_op(function(n)
      local eq, a, b = rawequal, keys[1], keys[2]
      for _ = 1, n do eq(a, b) end
    end)
  end,
  get = function()
    return per_op(function(n)
      local d, k = dict, keys
      for i = 1, n do d:get(k[i % KEYS + 1]) end
    end)
  end,
  set = function()
    return per_op(function(n)
      local d, k = dict, keys
      for i = 1, n do d:set(k[i % KEYS + 1], "value") end
    end)
  end,
}

-- The mixed load, as chunk source so that pool states run exactly what the host runs.
local HAMMER = [[
local vmpool = require "vmpool"
local clock = vmpool.clock
function hammer(seconds, nkeys, every)
  local d = vmpool.shared("bench")
  local keys, values = {}, {}
  for i = 1, nkeys do keys[i] = "key-" .. i end
  -- seven strings of one length, taken in turn: a key's next set stores another one (the 100
  -- sets of a round of 1,000 operations move each key on by two)
  for i = 1, 7 do values[i] = "value-" .. (i - 1) end
  local n, stop, sets = 0, clock() + seconds, 0
  while true do
    for i = 1, 1000 do
      local k = keys[(n + i) % nkeys + 1]
      if every > 0 and i % every == 0 then
        sets = sets % 7 + 1
        d:set(k, values[sets])
      else
        d:get(k)
      end
    end
    n = n + 1000
    if clock() >= stop then return n / seconds end
  end
end
-- the same loop without the dictionary (string.byte of the key, then a table write or read)
function compute(seconds, nkeys, every)
  local keys, t = {}, {}
  for i = 1, nkeys do keys[i] = "key-" .. i end
  local byte = string.byte
  local n, stop, sets = 0, clock() + seconds, 0
  while true do
    for i = 1, 1000 do
      local k = keys[(n + i) % nkeys + 1]
      if every > 0 and i % every == 0 then
        sets = sets % 7 + 1
        t[k] = byte(k, 5) + sets
      else
        local _ = t[k] or byte(k, 5)
      end
    end
    n = n + 1000
    if clock() >= stop then return n / seconds end
  end
end
]]
local hammer = assert((loadstring or load)(HAMMER))
hammer()
local pool = vmpool.new { core = 2, max_noncore = 0 }
pool:compile("hammer", HAMMER)
pool:invoke("hammer", "hammer", 0.01, KEYS, SET_EVERY) -- warm both states' code
pool:invoke("hammer", "hammer", 0.01, KEYS, SET_EVERY)

local alone, together = {}, {}
local compute_alone, compute_together = {}, {}
local function contention(fn, alone_out, together_out)
  alone_out[#alone_out + 1] = _G[fn](seconds, KEYS, SET_EVERY)
  local a = pool:submit("hammer", fn, seconds, KEYS, SET_EVERY)
  local b = pool:submit("hammer", fn, seconds, KEYS, SET_EVERY)
  local host = _G[fn](seconds, KEYS, SET_EVERY)
  together_out[#together_out + 1] = host + a:wait() + b:wait()
end

local samples = { c_call = {}, get = {}, set = {} }
for _ = 1, rounds do
  for _, name in ipairs { "c_call", "get", "set" } do
    samples[name][#samples[name] + 1] = figures[name]()
  end
  contention("hammer", alone, together)
  contention("compute", compute_alone, compute_together)
end
pool:close()

local scaling, compute_scaling, relative = {}, {}, {}
for i = 1, #alone do
  scaling[i] = together[i] / alone[i]
  compute_scaling[i] = compute_together[i] / compute_alone[i]
  relative[i] = scaling[i] / compute_scaling[i]
end

local function show(name, s, unit)
  print(("%-10s %12.1f %s  [%.1f-%.1f]  (%d rounds)"):format(name, s.median, unit, s.min, s.max, s.n))
end
print(("vmpool.shared, %s, %d CPUs, %d keys, %d operations per figure and round, load average %s")
  :format(vmpool.runtime, tonumber(io.popen("nproc"):read("*l")) or 0, KEYS, ops,
    (io.open("/proc/loadavg") and io.open("/proc/loadavg"):read("*l"):match("^(%S+ %S+ %S+)") or "?")))
local c = B.summary(samples.c_call)
show("c_call", c, "ns/op")
for _, name in ipairs { "get", "set" } do
  local s = B.summary(samples[name])
  show(name, s, "ns/op")
  print(("%-10s %12.2f x the C call (median)"):format("", s.median / c.median))
end
show("alone", B.summary(alone), "ops/s")
show("together", B.summary(together), "ops/s")
local sc = B.summary(scaling)
print(("%-10s %12.2f x alone  [%.2f-%.2f]  (goal >= 1.5)"):format("scaling", sc.median, sc.min, sc.max))
local cs, rel = B.summary(compute_scaling), B.summary(relative)
print(("%-10s %12.2f x alone  [%.2f-%.2f]  (the same loop without the dictionary: the machine's ceiling)")
  :format("compute", cs.median, cs.min, cs.max))
print(("%-10s %12.2f x        [%.2f-%.2f]  (scaling / compute, per round)"):format("relative", rel.median, rel.min,
  rel.max))
print(("shards     %12d"):format(tonumber(o.shards) or 16))
print(("set every  %12d"):format(SET_EVERY) .. (SET_EVERY == 0 and "  (no sets)" or "  operations"))
