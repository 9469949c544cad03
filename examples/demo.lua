-- The pool at work: the seed report's script run through each sizing strategy, many calls in
-- flight from coroutines, then the pool's stats. Run with `make demo`.
local vmpool = require "vmpool"

local SCRIPT = [[
function helloLua(n)
  goSayHello("hello", "my name is lua") -- a helper every state defines in init
  return n, 100000
end
]]
local INIT = [[function goSayHello(greeting, text) return greeting .. ", " .. text end]]

local function run(label, opts, calls, in_flight)
  opts.init = INIT
  local pool = vmpool.new(opts)
  pool:compile("test.lua", SCRIPT)
  local t0 = vmpool.clock()
  vmpool.run(function()
    local per = math.floor(calls / in_flight)
    for _ = 1, in_flight do
      vmpool.spawn(function()
        for i = 1, per do
          local n, m = pool:co_invoke("test.lua", "helloLua", i)
          assert(n == i and m == 100000)
        end
      end)
    end
  end)
  local elapsed = vmpool.clock() - t0
  local s = pool:stats()
  print(string.format("%-44s %9.0f calls/s   states: core %d, non-core %d, created %d, closed %d",
    label, calls / elapsed, s.core, s.noncore, s.created, s.closed))
  pool:close()
  return s
end

print(("vmpool %s on %s"):format(vmpool._VERSION, vmpool.runtime))
local pool = vmpool.new { core = 2, init = INIT }
pool:compile("test.lua", SCRIPT)
print("pool:invoke('test.lua', 'helloLua', 42) ->", pool:invoke("test.lua", "helloLua", 42))
local ok, err = pcall(pool.invoke, pool, "test.lua", "nope")
print("a missing function ->", ok, err)
pool:close()

local CALLS, IN_FLIGHT = 20000, 200
print(("\n%d calls of helloLua, %d coroutines in flight (vmpool.run + co_invoke):"):format(CALLS, IN_FLIGHT))
run("no pool (a new state per call)", { core = 0, max_noncore = math.huge, idle_timeout = 0 }, 2000, 20)
run("unbounded pool", { core = 0, max_noncore = math.huge, idle_timeout = 60 }, CALLS, IN_FLIGHT)
run("core 4 + unlimited non-core", { core = 4, max_noncore = math.huge }, CALLS, IN_FLIGHT)
run("core 4 + blocking", { core = 4, max_noncore = 0, blocking = true }, CALLS, IN_FLIGHT)
run("core 2 + max non-core 2 + blocking", { core = 2, max_noncore = 2, blocking = true }, CALLS, IN_FLIGHT)
local s = run("default (core = CPUs)", {}, CALLS, IN_FLIGHT)
print("\nstats of the default pool:")
local keys = {}
for k in pairs(s) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do
  local v = s[k]
  if type(v) == "table" then -- `wait` and `run`: latency percentiles in seconds
    print(("  %-13s %d calls, p50 %.1f us, p99 %.1f us, max %.1f us"):format(k, v.count, v.p50 * 1e6,
      v.p99 * 1e6, v.max * 1e6))
  else
    print(("  %-13s %d"):format(k, v))
  end
end
