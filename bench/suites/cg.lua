-- What bench/callgrind runs under valgrind: `--n` calls of one kind after a short warm-up.
-- Running it with two values of --n and subtracting cancels start-up, warm-up and shutdown, so
-- the difference divided by the difference of n is the cost of one call.
--
--   direct     helloLua(i) in the host
--   invoke     pool:invoke(chunk, "helloLua", i) (core = 1)
--   closure    pool:invoke(f, i), f a closure with helloLua's body over an upvalue (core = 1)
--   echo10     pool:invoke(chunk, "echo", t) with a 10-field table (core = 1)
--   co_invoke  pool:co_invoke from 100 coroutines under vmpool.run (core = 1)
--   ring       futures: 1,000 in flight (default pool), wait for the oldest, submit a new one
--   run1000    pool:co_invoke from 1,000 coroutines under vmpool.run (default pool)
--   luv        the same under vmpool.luv (vmpool.luv.spawn, uv.run())
--   cqueues    the same under vmpool.cqueues (cq:wrap, cq:loop())
--   dict_get   dict:get(key) of a short string over 1,000 keys of a vmpool.shared dictionary
--   dict_set   dict:set(key, value) of a short string over the same keys
--   dict_evict dict:set(key, value) of a new key each time in a full 64 KiB dictionary of 16
--              shards: each set evicts the least recently used entry
--   chan_pingpong  a number to a state and back over two vmpool.channel (one round trip)
--   chan_to_host   a number pushed by a state, popped by the host (one message)
--   chan_stream    a number yielded by pool:stream's function, read by the for loop (one item)
--
-- Usage: lua bench/suites/cg.lua --kind=invoke --n=2000 [--limit=60]
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = dir .. "/../lib/?.lua;" .. package.path

local B = require "benchlib"
local vmpool = require "vmpool"

local o = B.options(arg or {})
local kind = o.kind or "invoke"
local n = assert(tonumber(o.n), "--n")
local CHUNK = B.CHUNK
local WARM = 200

-- --limit=S: the pool gets time_limit = S (what arming and disarming the limit costs a call)
local pool = vmpool.new { core = 1, init = B.INIT, time_limit = tonumber(o.limit) }
pool:compile(CHUNK, B.SCRIPT)

local run
if kind == "direct" then
  local hello = B.host_functions()
  run = function(count)
    for i = 1, count do
      local a = hello(i)
      if a ~= i then error("wrong result") end
    end
  end
elseif kind == "invoke" then
  run = function(count)
    for i = 1, count do
      local a, b = pool:invoke(CHUNK, "helloLua", i)
      if a ~= i or b ~= 100000 then error("wrong result") end
    end
  end
elseif kind == "closure" then
  local big = 100000
  local f = function(i)
    goSayHello("hello", "my name is lua") -- luacheck: ignore 113 (the state's global)
    return i, big
  end
  run = function(count)
    for i = 1, count do
      local a, b = pool:invoke(f, i)
      if a ~= i or b ~= 100000 then error("wrong result") end
    end
  end
elseif kind == "echo10" then
  local t = B.table10()
  run = function(count)
    for _ = 1, count do
      local r = pool:invoke(CHUNK, "echo", t)
      if r.j ~= 10 then error("wrong result") end
    end
  end
elseif kind == "co_invoke" then
  run = function(count)
    local per = math.max(1, math.floor(count / 100))
    vmpool.run(function()
      for _ = 1, 100 do
        vmpool.spawn(function()
          for i = 1, per do
            local a = pool:co_invoke(CHUNK, "helloLua", i)
            if a ~= i then error("wrong result") end
          end
        end)
      end
    end)
  end
elseif kind == "ring" then
  local futures = vmpool.new { init = B.INIT }
  futures:compile(CHUNK, B.SCRIPT)
  local IN_FLIGHT = 1000
  run = function(count)
    local ring = {}
    for i = 1, IN_FLIGHT do ring[i] = futures:submit(CHUNK, "helloLua", i) end
    for i = IN_FLIGHT + 1, count + IN_FLIGHT do
      local k = (i - 1) % IN_FLIGHT + 1
      if ring[k]:wait() ~= i - IN_FLIGHT then error("wrong result") end
      if i <= count then ring[k] = futures:submit(CHUNK, "helloLua", i) end
    end
  end
elseif kind == "run1000" or kind == "luv" or kind == "cqueues" then
  local many = vmpool.new { init = B.INIT }
  many:compile(CHUNK, B.SCRIPT)
  local IN_FLIGHT = 1000
  local function body(per)
    for i = 1, per do
      if many:co_invoke(CHUNK, "helloLua", i) ~= i then error("wrong result") end
    end
  end
  run = function(count)
    local per = math.max(1, math.floor(count / IN_FLIGHT))
    if kind == "run1000" then
      vmpool.run(function()
        for _ = 1, IN_FLIGHT do vmpool.spawn(body, per) end
      end)
    elseif kind == "luv" then
      local uv, vluv = require "luv", require "vmpool.luv"
      for _ = 1, IN_FLIGHT do vluv.spawn(body, per) end
      uv.run()
    else
      local cqueues = require "cqueues"
      require "vmpool.cqueues"
      local cq = cqueues.new()
      for _ = 1, IN_FLIGHT do cq:wrap(body, per) end
      assert(cq:loop())
    end
  end
elseif kind == "dict_get" or kind == "dict_set" then
  local dict = vmpool.shared("cg", { capacity = "4m" })
  local keys, values = {}, {}
  for i = 1, 1000 do
    keys[i], values[i] = "key-" .. i, "value-" .. i
    dict:set(keys[i], values[i])
  end
  if kind == "dict_get" then
    run = function(count)
      for i = 1, count do
        if dict:get(keys[i % 1000 + 1]) == nil then error("wrong result") end
      end
    end
  else
    run = function(count)
      for i = 1, count do
        if not dict:set(keys[i % 1000 + 1], values[(i + 7) % 1000 + 1]) then error("wrong result") end
      end
    end
  end
elseif kind == "dict_evict" then
  local dict = vmpool.shared("cg_evict", { capacity = "64k" })
  local keys = {}
  for i = 1, 14200 do keys[i] = "key-" .. i end -- as many for every --n (up to 12,000)
  local value = ("v"):rep(40)
  for i = 1, 2000 do dict:set(keys[i], value) end -- full: the later sets evict
  local next_key = 2000
  run = function(count)
    for _ = 1, count do
      next_key = next_key + 1
      if not dict:set(keys[next_key], value) then error("wrong result") end
    end
  end
elseif kind == "chan_pingpong" or kind == "chan_to_host" or kind == "chan_stream" then
  pool:compile("ch", B.CHANNEL_SCRIPT)
  local runs = 0
  run = function(count)
    runs = runs + 1
    local a, b = "cg-a-" .. runs, "cg-b-" .. runs
    if kind == "chan_pingpong" then
      local inp, out = vmpool.channel(a), vmpool.channel(b)
      local fut = pool:submit("ch", "echo", a, b)
      for i = 1, count do
        inp:push(i)
        if out:pop() ~= i then error("wrong result") end
      end
      inp:push(false)
      fut:wait()
    elseif kind == "chan_to_host" then
      local c = vmpool.channel(a)
      local fut = pool:submit("ch", "produce", a, count)
      for i = 1, count do
        if c:pop() ~= i then error("wrong result") end
      end
      fut:wait()
    else
      local k = 0
      for i in pool:stream("ch", "items", count) do
        k = k + 1
        if i ~= k then error("wrong result") end
      end
    end
  end
else
  error("unknown --kind " .. kind)
end

run(WARM)
-- a full collection before and after, so both run lengths end with the same amount of garbage
collectgarbage("collect")
run(n)
collectgarbage("collect")
pool:close()
