-- Futures as a sliding window (issue 33), the child process the micro benchmark times whole:
-- a fresh `core = 2` pool, 1,000 futures in flight, wait for the oldest and submit a new call in
-- its place, --n calls in all, then close. Nothing is warmed up: the pool's start, its call
-- records' first use and its close are part of the figure, as in a program that does only this.
-- Prints the number of calls checked.
--
-- Usage: lua bench/suites/window.lua --n=300000 (bench/suites/micro.lua runs it and times it)
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local n = assert(tonumber(B.options(arg or {}).n), "--n")
local IN_FLIGHT = 1000

local pool = vmpool.new { core = 2, init = B.INIT }
pool:compile(B.CHUNK, B.SCRIPT)
local ring = {}
for i = 1, math.min(IN_FLIGHT, n) do ring[i] = pool:submit(B.CHUNK, "helloLua", i) end
for i = 1, n do
  local k = (i - 1) % IN_FLIGHT + 1
  local a = ring[k]:wait()
  if a ~= i then error("window: wrong result " .. tostring(a)) end
  local nxt = i + IN_FLIGHT
  ring[k] = nxt <= n and pool:submit(B.CHUNK, "helloLua", nxt) or nil
end
pool:close()
print(n)
