-- Other libraries that run Lua on OS threads (the peers), used as their documentation recommends
-- for a pool of workers, measured when installed and never required: Lua Lanes (lanes.gen lanes
-- reading jobs from a linda) and effil (effil.thread workers reading jobs from an effil.channel).
-- Neither is packaged by Debian: bench/peers/build.sh builds both from source and the report finds
-- them through VMPOOL_PEERS (or `luarocks install lanes effil`); `available(kind)` says why not.
--
-- Each pool runs the seed's script (helloLua calling goSayHello) in every worker; `pool` returns
-- once every worker has loaded it and waits for a job, and exposes:
--   call(n)          one blocking round trip
--   stream(p, calls) `calls` jobs with p in flight (a new job sent as each result arrives)
--   close()
-- `spawn(kind)` gives the no-pool counterpart: a function that starts a new worker for one call.
local B = require "benchlib"

local M = {}

local function try_require(name)
  local ok, mod = pcall(require, name)
  if ok then return mod end
  return nil, (tostring(mod):match("^[^\n]*"))
end

local function load_module(kind)
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

-- the loaded modules: lanes.configure() may run once per process (Lanes then removes it)
local loaded = {}

--- The module, or nil and why not.
function M.available(kind)
  if not loaded[kind] then loaded[kind] = { load_module(kind) } end
  return loaded[kind][1], loaded[kind][2]
end

-- a worker that neither starts nor answers within this many seconds fails the run instead of hanging it
local TIMEOUT = 60

-- The body of a worker, for both libraries: define the script's functions, say so, then serve jobs.
-- `receive()` returns the next job (a number, or false to stop); `reply(n, m)` answers it.
local function serve(init, script, ready, receive, reply)
  local loader = loadstring or load -- luacheck: ignore 113
  loader(init)()
  loader(script)()
  local hello = helloLua -- luacheck: ignore 113
  ready()
  while true do
    local n = receive()
    if not n then return end
    reply(hello(n))
  end
end

local function lanes_pool(lanes, workers)
  local linda = lanes.linda()
  -- the lane body has no upvalues: the worker loop travels as bytecode
  local gen = lanes.gen("*", function(l, init, script, dumped, timeout)
    local ready = function() l:send("ready", true) end
    local receive = function()
      local key, job = l:receive(timeout, "job")
      if key == nil then error("lanes worker: no job within " .. timeout .. " s") end
      return job
    end
    local reply = function(n, m) l:send("done", { n, m }) end
    local loader = loadstring or load -- luacheck: ignore 113
    local worker = assert(loader(dumped))
    return worker(init, script, ready, receive, reply)
  end)
  local dumped = string.dump(serve)
  local handles = {}
  for i = 1, workers do handles[i] = gen(linda, B.INIT, B.SCRIPT, dumped, TIMEOUT) end
  for _ = 1, workers do
    if linda:receive(TIMEOUT, "ready") == nil then
      local _, why = handles[1]:join(0) -- a lane that failed says why here
      error("a lane did not start within " .. TIMEOUT .. " s (" .. tostring(why) .. ")")
    end
  end
  local p = {}
  function p.send(n) linda:send("job", n) end
  function p.receive()
    local key, r = linda:receive(TIMEOUT, "done")
    if key == nil then error("no answer from a lane within " .. TIMEOUT .. " s") end
    return r[1], r[2]
  end
  function p.close()
    for _ = 1, workers do linda:send("job", false) end
    for i = 1, workers do handles[i]:join() end
    -- Collect the linda now. Lanes 3.17 frees a linda under its keeper's lock, which a linda
    -- operation of the host may already hold when the collector runs inside it: the process then
    -- deadlocks (seen: deep_userdata_gc -> keeper_acquire inside linda:receive).
    linda, handles = nil, nil
    collectgarbage("collect")
  end
  return p
end

local function effil_pool(effil, workers)
  local jobs, done, started = effil.channel(), effil.channel(), effil.channel()
  local runner = effil.thread(function(init, script, dumped, jobs_ch, done_ch, ready_ch, timeout)
    local loader = loadstring or load -- luacheck: ignore 113
    local ready = function() ready_ch:push(true) end
    local receive = function()
      local job = jobs_ch:pop(timeout, "s")
      if job == nil then error("effil worker: no job within " .. timeout .. " s") end
      return job
    end
    local reply = function(n, m) done_ch:push(n, m) end
    return loader(dumped)(init, script, ready, receive, reply)
  end)
  local dumped = string.dump(serve)
  local threads = {}
  for i = 1, workers do threads[i] = runner(B.INIT, B.SCRIPT, dumped, jobs, done, started, TIMEOUT) end
  for _ = 1, workers do
    if started:pop(TIMEOUT, "s") == nil then error("an effil thread did not start within " .. TIMEOUT .. " s") end
  end
  local p = {}
  function p.send(n) jobs:push(n) end
  function p.receive()
    local n, m = done:pop(TIMEOUT, "s")
    if n == nil then error("no answer from an effil thread within " .. TIMEOUT .. " s") end
    return n, m
  end
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

-- The body of a worker started for a single call (no pool): a new Lua state on a new thread that
-- defines the script's functions and makes the call, as a new vmpool state does.
local function one_call(init, script, n)
  local loader = loadstring or load -- luacheck: ignore 113
  loader(init)()
  loader(script)()
  return helloLua(n) -- luacheck: ignore 113
end

--- A function call(n) that starts a new worker of library `kind` for the one call, waits for it
--- and returns its results; or nil and why not.
function M.spawn(kind)
  local mod, why = M.available(kind)
  if not mod then return nil, why end
  if kind == "lanes" then
    local gen = mod.gen("*", one_call)
    return function(n)
      local h = gen(B.INIT, B.SCRIPT, n)
      return h[1], h[2]
    end
  end
  local runner = mod.thread(one_call)
  return function(n) return runner(B.INIT, B.SCRIPT, n):get() end
end

return M
