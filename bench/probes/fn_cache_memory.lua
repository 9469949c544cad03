-- A state's function cache is bounded (issue 34): one state gets 2,000 distinct functions (its
-- 256-entry cache is full from then on), then 100,000 more, each a different prototype sent once
-- as the callee; its Lua heap is printed after each part, once collected (Lua shrinks its string
-- table by half per collection, so the pool collects 8 times).
-- Usage: lua bench/probes/fn_cache_memory.lua (the rock for that runtime in LUA_CPATH)
local vmpool = require "vmpool"
local pool = vmpool.new { core = 1 }
local load = loadstring or load -- luacheck: ignore 113
local n = 0
local function send(count)
  for _ = 1, count do
    n = n + 1
    local f = load(("return function() return %d end"):format(n))()
    assert(pool:invoke(f) == n)
  end
end
local function settle()
  collectgarbage()
  for _ = 1, 8 do pool:collect() end
  return vmpool.memory().bytes
end
send(2000)
local before = settle()
send(100000)
local after = settle()
local loads, hits = vmpool._function_cache()
print(("%s %s: %d bytes before, %d after 100,000 more functions; %d loads, %d hits"):format(
  _VERSION, jit and jit.version or "", before, after, loads, hits))
pool:close()
