-- Channels against the peers, one library per process: bench/report/run.lua runs it in the micro suite's
-- interleaved repetitions for vmpool always, and for Lua Lanes and effil where they load (the
-- report divides each peer's figure by vmpool's from the same repetition). The figures:
--
--   pingpong   one worker echoes each message: the host pushes a number on one channel and pops
--              the answer from another (vmpool: vmpool.channel in the host and a state; Lanes: one
--              linda, keys "in" and "out"; effil: two effil.channel), µs per round trip
--   to_host    one worker pushes small messages (a number) as fast as the channel takes them and
--              the host pops them (vmpool: capacity 1,024; Lanes and effil: their default,
--              unbounded), µs per message
--   stream     vmpool only: pool:stream items (a number) into a generic for, µs per item
--
-- Usage: lua bench/peers/channels.lua --lib=vmpool|lanes|effil [--scale=1]; prints one `return {...}`
-- line (with `absent` and no figures when the library cannot be loaded).
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local baselines = require "baselines"
local vmpool = require "vmpool"

local o = B.options(arg or {})
local lib = o.lib or "vmpool"
local scale = tonumber(o.scale) or 1
local clock = vmpool.clock
local TIMEOUT = 60

local function count(n) return math.max(1, math.floor(n * scale)) end

local result = {
  lib = lib,
  runtime = vmpool.runtime,
  lua = jit and jit.version or _VERSION, -- luacheck: ignore 113
  figures = {},
}

--- Runs fn(n) once to warm up, then times fn(n): microseconds per operation.
local function timed(name, n, fn)
  fn(math.max(1, math.floor(n / 10)))
  local t0 = clock()
  fn(n)
  result.figures[name] = { us = (clock() - t0) * 1e6 / n, ops = n }
end

-- what each library provides: pingpong() -> round(i), close(); to_host(n) -> pops n messages
local provider
if lib == "vmpool" then
  local pool = vmpool.new { core = 2 }
  pool:compile("ch", B.CHANNEL_SCRIPT)
  local run = 0
  provider = {
    pingpong = function()
      run = run + 1
      local a, b = "bench-in-" .. run, "bench-out-" .. run
      local inp, out = vmpool.channel(a), vmpool.channel(b)
      local fut = pool:submit("ch", "echo", a, b)
      return function(i)
        inp:push(i)
        return out:pop(TIMEOUT)
      end, function()
        inp:push(false)
        fut:wait()
      end
    end,
    to_host = function(n)
      run = run + 1
      local name = "bench-to-host-" .. run
      local c = vmpool.channel(name)
      local fut = pool:submit("ch", "produce", name, n)
      for i = 1, n do
        if c:pop(TIMEOUT) ~= i then error("vmpool: message " .. i .. " out of order") end
      end
      fut:wait()
    end,
    stream = function(n)
      local k = 0
      for i in pool:stream("ch", "items", n) do
        k = k + 1
        if i ~= k then error("vmpool: item " .. k .. " out of order") end
      end
      if k ~= n then error("vmpool: " .. k .. " items of " .. n) end
    end,
    close = function() pool:close() end,
  }
else
  local mod, why = baselines.available(lib)
  if not mod then
    result.absent = why
    print(B.result_line(result))
    return
  end
  result.version = lib == "lanes" and mod.ABOUT and mod.ABOUT.version or mod.version
  if lib == "lanes" then
    -- lane bodies have no upvalues; the linda is their argument
    local echo = mod.gen("*", function(l, timeout)
      while true do
        local key, v = l:receive(timeout, "in")
        if key == nil then error("lanes echo: nothing within " .. timeout .. " s") end
        if not v then return end
        l:send("out", v)
      end
    end)
    local produce = mod.gen("*", function(l, n)
      for i = 1, n do l:send("out", i) end
    end)
    -- Lanes 3.17 frees a linda under its keeper's lock, which a linda call of the host may already
    -- hold when the collector runs inside it: a deadlock (lib/baselines.lua). Every linda and lane
    -- made here stays referenced until close(), after the last linda call.
    local live = {}
    local function keep(...)
      for i = 1, select("#", ...) do live[#live + 1] = (select(i, ...)) end
      return ...
    end
    provider = {
      pingpong = function()
        local l = keep(mod.linda())
        local h = keep(echo(l, TIMEOUT))
        return function(i)
          l:send("in", i)
          local key, v = l:receive(TIMEOUT, "out")
          if key == nil then error("lanes: no answer within " .. TIMEOUT .. " s") end
          return v
        end, function()
          l:send("in", false)
          h:join()
        end
      end,
      to_host = function(n)
        local l = keep(mod.linda())
        local h = keep(produce(l, n))
        for i = 1, n do
          local key, v = l:receive(TIMEOUT, "out")
          if key == nil or v ~= i then error("lanes: message " .. i .. " missing or out of order") end
        end
        h:join()
      end,
      close = function()
        live = nil
        collectgarbage("collect")
      end,
    }
  else
    local echo = mod.thread(function(inp, out)
      while true do
        local v = inp:pop()
        if not v then return end
        out:push(v)
      end
    end)
    local produce = mod.thread(function(c, n)
      for i = 1, n do c:push(i) end
    end)
    provider = {
      pingpong = function()
        local inp, out = mod.channel(), mod.channel()
        local t = echo(inp, out)
        return function(i)
          inp:push(i)
          return out:pop(TIMEOUT, "s")
        end, function()
          inp:push(false)
          t:wait()
        end
      end,
      to_host = function(n)
        local c = mod.channel()
        local t = produce(c, n)
        for i = 1, n do
          if c:pop(TIMEOUT, "s") ~= i then error("effil: message " .. i .. " missing or out of order") end
        end
        t:wait()
      end,
      close = function() end,
    }
  end
end

do
  local round, stop = provider.pingpong()
  timed("pingpong", count(20000), function(n)
    for i = 1, n do
      if round(i) ~= i then error(lib .. ": wrong answer in the ping-pong") end
    end
  end)
  stop()
end

timed("to_host", count(200000), provider.to_host)

if provider.stream then
  timed("stream", count(200000), provider.stream)
end

provider.close()
result.rss_kb = B.status_field("VmHWM")
print(B.result_line(result))
