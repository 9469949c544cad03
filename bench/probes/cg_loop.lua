-- What bench/callgrind-style loop figures run under valgrind: one loop of `--n` iterations, in the
-- host or in a state, so that two values of --n subtracted and divided give the instructions of
-- one iteration (the figures of issue 33's table; bench/results/2026-12-07-hot-path.md).
--
--   --loop=arith   x = x + i % 7
--   --loop=alloc   local t = { i, tostring(i) }
--   --where=host | state | limit (a state with time_limit = 60) | huge (time_limit = math.huge)
--   --live=N       first makes N strings of ~40 bytes that stay alive (a bigger heap: the collector's
--                  cycles free more at a time), the same in the host and in a state
--
-- Usage: taskset -c 0 valgrind --tool=callgrind lua5.4 bench/probes/cg_loop.lua --loop=arith --where=limit --n=2000000
local opts = {}
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^%-%-(%w+)=(.*)$")
  if k then opts[k] = v end
end
local n = assert(tonumber(opts.n), "--n")
local loop, where = opts.loop or "arith", opts.where or "state"
local live = tonumber(opts.live) or 0
local SRC = {
  arith = "return function(n) local x = 0 for i = 1, n do x = x + i % 7 end return x end",
  alloc = "return function(n) local t for i = 1, n do t = { i, tostring(i) } end return t[1] end",
}
local src = assert(SRC[loop], "--loop")
local KEEP = "return function(n) KEPT = {} for i = 1, n do KEPT[i] = ('%038d'):format(i) end end"
if where == "host" then
  local keep = (loadstring or load)(KEEP)()
  keep(live)
  local f = (loadstring or load)(src)()
  f(1000)
  f(n)
  return
end
local vmpool = require "vmpool"
local o = { core = 1 }
if where == "limit" then o.time_limit = 60 elseif where == "huge" then o.time_limit = math.huge end
local pool = vmpool.new(o)
pool:compile("l", "return { run = (" .. src:gsub("^return ", "") .. "), keep = ("
  .. KEEP:gsub("^return ", "") .. ") }")
pool:invoke("l", "keep", live)
pool:invoke("l", "run", 1000)
pool:invoke("l", "run", n)
pool:close()
