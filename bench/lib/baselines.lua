-- Other libraries that run Lua on OS threads, used as their documentation recommends for a pool of
-- workers, measured when installed and never required: Lua Lanes (lanes.gen lanes reading jobs from
-- a linda) and effil (effil.thread workers reading jobs from an effil.channel). Neither is packaged
-- by Debian, so they are usually absent; `available(kind)` says why.
--
-- Each pool runs the seed's script (helloLua calling goSayHello) in every worker and exposes:
--   call(n)          one blocking round trip
--   stream(p, calls) `calls` jobs with p in flight (a new job sent as each result arrives)
--   close()
local B = require "benchlib"

local M = {}

local function try_require(name)
  local ok, mod = pcall(require, name)
  if ok then return mod end
  return nil, (tostring(mod):match("^[^\n]*"))
end

--- The module, or nil and why not.
function M.available(kind)
  if kind == "lanes" then
    local lanes, err = try_require("lanes")
    if not lanes then return nil, err end
    local ok, configured = pcall(function() return lanes.configure() end)
    if not ok then return nil, "lanes.configure() failed: " .. tostring(configured) end
    return configured or lanes
  elseif kind == "effil" then
    return try_require("effil")
  end
  return nil, "unknown baseline " .. tostring(kind)
end

-- The body of a worker, for both libraries: define the script's functions, then serve jobs.
-- `receive()` returns the next job (a number, or false to stop); `reply(n, m)` answers it.
local function serve(init, script, receive, reply)
  local loader = loadstring or load -- luacheck: ignore 113
  loader(init)()
  loader(script)()
  local hello = helloLua -- luacheck: ignore 113
  while true do
    local n = receive()
    if not n then return end
    reply(hello(n))
  end
end

local function lanes_pool(lanes, workers)
  local linda = lanes.linda()
  -- the lane body has no upvalues: the worker loop travels as bytecode
  local gen = lanes.gen("*", function(l, init, script, dumped)
    local receive = function()
      local _, job = l:receive(nil, "job")
      return job
    end
    local reply = function(n, m) l:send("done", { n, m }) end
    local loader = loadstring or load -- luacheck: ignore 113
    return loader(dumped)(init, script, receive, reply)
  end)
  local dumped = string.dump(serve)
  local handles = {}
  for i = 1, workers do handles[i] = gen(linda, B.INIT, B.SCRIPT, dumped) end
  local p = {}
  function p.send(n) linda:send("job", n) end
  function p.receive()
    local _, r = linda:receive(nil, "done")
    return r[1], r[2]
  end
  function p.close()
    for _ = 1, workers do linda:send("job", false) end
    for i = 1, workers do handles[i]:join() end
  end
  return p
end

local function effil_pool(effil, workers)
  local jobs, done = effil.channel(), effil.channel()
  local runner = effil.thread(function(init, script, dumped, jobs_ch, done_ch)
    local loader = loadstring or load -- luacheck: ignore 113
    local receive = function() return jobs_ch:pop() end
    local reply = function(n, m) done_ch:push(n, m) end
    return loader(dumped)(init, script, receive, reply)
  end)
  local dumped = string.dump(serve)
  local threads = {}
  for i = 1, workers do threads[i] = runner(B.INIT, B.SCRIPT, dumped, jobs, done) end
  local p = {}
  function p.send(n) jobs:push(n) end
  function p.receive() return done:pop() end
  function p.close()
    for _ = 1, workers do jobs:push(false) end
    for i = 1, workers do threads[i]:wait() end
  end
  return p
end

--- A pool of `workers` workers of library `kind`, or nil and why not.
function M.pool(kind, workers)
  local mod, why = M.available(kind)
  if not mod then return nil, why end
  local ok, p = pcall(kind == "lanes" and lanes_pool or effil_pool, mod, workers)
  if not ok then return nil, kind .. " pool setup failed: " .. tostring(p) end
  function p.call(n)
    p.send(n)
    return p.receive()
  end
  function p.stream(in_flight, calls)
    local sent, got = 0, 0
    while sent < in_flight and sent < calls do
      sent = sent + 1
      p.send(sent)
    end
    while got < calls do
      local _, m = p.receive()
      if m ~= 100000 then error(kind .. ": unexpected result " .. tostring(m)) end
      got = got + 1
      if sent < calls then
        sent = sent + 1
        p.send(sent)
      end
    end
  end
  return p
end

return M
