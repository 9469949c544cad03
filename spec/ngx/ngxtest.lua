-- The handlers of spec/ngx/test_server.conf (loaded by the nginx workers the suite starts).
-- luacheck: globals ngx
local vmpool = require "vmpool"

local T = {}

-- Runs in the test pool's states. spin busies its state's CPU for `seconds` of wall time.
local CHILD = [[
local socket = require "socket"
local M = {}
function M.echo(...) return ... end
function M.spin(seconds)
  local deadline = socket.gettime() + seconds
  while socket.gettime() < deadline do end
  return seconds
end
function M.sleep(seconds)
  socket.sleep(seconds)
  return seconds
end
function M.fail_at(x) if x == 3 then error("three") end return x end
function M.nice() return NICE(), POLICY() end
function M.doubles(inp, out, n)
  local vmpool = require "vmpool"
  local i, o = vmpool.channel(inp), vmpool.channel(out)
  for _ = 1, n do o:push(i:pop() * 2) end
  return true
end
function M.count(n) for i = 1, n do coroutine.yield(i) end end
function M.count_fail(n) for i = 1, n do coroutine.yield(i) end error("stream failed at " .. n) end
function M.forever() local i = 0 while true do i = i + 1 coroutine.yield(i) end end
return M
]]

-- the calling thread's niceness and scheduling policy: fields 19 and 41 of /proc/thread-self/stat
-- (17th and 39th after the name)
local NICE_SOURCE = [[
local function stat(n)
  local f = assert(io.open("/proc/thread-self/stat"))
  local line = f:read("*a")
  f:close()
  local fields = {}
  for field in line:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = field end
  return tonumber(fields[n])
end
function NICE() return stat(17) end
function POLICY() return stat(39) end
]]
local own_nice, own_policy = assert(loadstring(NICE_SOURCE .. "\nreturn NICE, POLICY"))()

-- core = 2 and no more: /spin on both states keeps every state busy
function T.pool()
  return vmpool.ngx.pool("test", function()
    local pool = vmpool.new { core = 2, max_noncore = 0, init = NICE_SOURCE }
    pool:compile("t", CHILD)
    return pool
  end)
end

-- pool:co_map in a request: n items through echo (their sum), or a map whose item 3 fails
function T.map()
  local n = tonumber(ngx.var.arg_n) or 1000
  local list = {}
  for i = 1, n do list[i] = i end
  local ok, r = pcall(T.pool().co_map, T.pool(), "t", ngx.var.arg_fail and "fail_at" or "echo", list)
  if not ok then
    ngx.say((tostring(r):gsub("\n.*", "")))
    return
  end
  local sum = 0
  for i = 1, n do sum = sum + r[i] end
  ngx.say(#r, " ", sum)
end

-- the niceness and scheduling policy of this worker's thread and of a pool state's (the options
-- nice and sched, default 10 and "normal" here)
function T.nice()
  local nice, policy = T.pool():co_invoke("t", "nice")
  ngx.say("worker=", own_nice(), " state=", nice, " worker_policy=", own_policy(), " state_policy=", policy)
end

-- the reload test's load: more states, calls that wait without using the CPU
local function work_pool()
  return vmpool.ngx.pool("work", function()
    local pool = vmpool.new { core = 4, max_noncore = 0 }
    pool:compile("t", CHILD)
    return pool
  end)
end

function T.stats()
  local s = vmpool.ngx.stats()
  for k, v in pairs(s) do
    ngx.say("ngx.", k, "=", tostring(v))
  end
  for k, v in pairs(T.pool():stats()) do
    ngx.say("pool.", k, "=", tostring(v))
  end
end

-- vmpool.run inside a request: its coroutines wait through its own driver (blocking the worker),
-- not the adapter's semaphores (no wait counted); a run that fails leaves the request's own
-- co_invoke yielding through the adapter (one wait)
function T.run()
  local pool = T.pool()
  local got = {}
  local waits = vmpool.ngx.stats().waits
  vmpool.run(function()
    vmpool.spawn(function() got[2] = pool:co_invoke("t", "echo", "two") end)
    got[1] = pool:co_invoke("t", "echo", "one")
  end)
  ngx.say(got[1], " ", got[2], " ", vmpool.ngx.stats().waits - waits)
  local ok, err = pcall(vmpool.run, function()
    vmpool.spawn(function() pool:co_invoke("t", "echo", "never waited for") end)
    error("boom")
  end)
  ngx.say(ok and "no error" or (tostring(err):gsub("\n.*", "")))
  waits = vmpool.ngx.stats().waits
  local after = pool:co_invoke("t", "echo", "after")
  ngx.say(after, " ", vmpool.ngx.stats().waits - waits)
end

-- pool:co_invoke's FFI path (src/host/ngx_ffi.rs) and its way back to the C functions: each
-- call's results as a line (their count, then each value), how many calls and takes went
-- through the FFI, and how many calls the flusher handed over (vmpool_ngx_flush's counts)
function T.ffi()
  local pool = T.pool()
  local function show(...)
    local parts = { select("#", ...) }
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      if type(v) == "string" then
        -- (an error's first line only)
        local text = #v > 1000 and (#v .. " bytes " .. v:sub(1, 3)) or v:gsub("%z", "<0>"):gsub("\n.*", "")
        parts[#parts + 1] = "[" .. text .. "]"
      elseif type(v) == "table" then
        parts[#parts + 1] = "table " .. tostring(v[1])
      elseif type(v) == "userdata" then
        parts[#parts + 1] = "userdata"
      else
        parts[#parts + 1] = tostring(v)
      end
    end
    ngx.say(table.concat(parts, " "))
  end
  local before = vmpool.ngx.stats()
  show(pool:co_invoke("t", "echo"))
  show(pool:co_invoke("t", "echo", nil))
  show(pool:co_invoke("t", "echo", false, true))
  show(pool:co_invoke("t", "echo", 1.5, -0.25, 1e300))
  show(pool:co_invoke("t", "echo", "", "a\0b", nil))
  show(pool:co_invoke("t", "echo", "ab", string.rep("y", 100000), "cd"))
  -- a function as the callee: filed by the C function, its results taken through the FFI
  show(pool:co_invoke(function(a, b) return a + b, a .. b end, 2, 3))
  -- not carried by the FFI: four arguments, a table, a light userdata; a table result
  show(pool:co_invoke("t", "echo", 1, 2, 3, 4))
  show(pool:co_invoke("t", "echo", { 7 }))
  show(pool:co_invoke("t", "echo", ngx.null))
  -- errors: raised in the state (the FFI files the call, _take raises), an unknown chunk (the
  -- FFI declines, _call raises)
  show(pcall(pool.co_invoke, pool, "t", "fail_at", 3))
  show(pcall(pool.co_invoke, pool, "no such chunk", "f"))
  local after = vmpool.ngx.stats()
  ngx.say("ffi ", after.ffi_calls - before.ffi_calls, " ", after.ffi_takes - before.ffi_takes)
  ngx.say("batched ", after.batched - before.batched)
end

function T.echo()
  ngx.say(T.pool():co_invoke("t", "echo", ngx.var.arg_x))
end

function T.call(fn, arg)
  ngx.say(T.pool():co_invoke("t", fn, arg))
end

function T.work()
  local ms = tonumber(ngx.var.arg_ms) or 10
  local s = work_pool():co_invoke("t", "sleep", ms / 1000)
  ngx.say("ok ", s)
end

-- vmpool.ngx.wait with a timeout shorter than the call
function T.short_wait()
  local fut = T.pool():submit("t", "sleep", tonumber(ngx.var.arg_s) or 0.4)
  local ok, err = pcall(vmpool.ngx.wait, fut, 0.1)
  ngx.status = ok and 200 or 504
  ngx.say(err)
end

-- bad input comes back as errors; the pool keeps working
function T.bad()
  local pool = T.pool()
  local cases = {
    function() return pool:co_invoke("no such chunk", "f") end,
    function() return pool:co_invoke("t", "no_such_function") end,
    function() return pool:co_invoke("t", "echo", ngx.say) end, -- a C function outside the standard library
    function() return pool:co_invoke("t", "echo", coroutine.create(function() end)) end,
    function() return pool:co_invoke("t", "spin", "not a number") end,
    function() return vmpool.ngx.wait("not a future") end,
  }
  for i, case in ipairs(cases) do
    local ok, err = pcall(case)
    ngx.say(i, " ", ok and "ok" or (tostring(err):gsub("\n.*", "")))
  end
  ngx.say("after ", pool:co_invoke("t", "echo", "still works"))
end

-- two calls of one request (two ngx.threads) in one turn of the event loop, on a pool that refuses
-- to queue: one runs, the other gets the pool's error
function T.exhausted()
  local pool = vmpool.ngx.pool("strict", function()
    local p = vmpool.new { core = 1, max_noncore = 0, blocking = false }
    p:compile("t", CHILD)
    return p
  end)
  local threads = {}
  for i = 1, 2 do
    threads[i] = ngx.thread.spawn(function()
      local ok, r = pcall(pool.co_invoke, pool, "t", "sleep", 0.05)
      return ok and ("ok " .. r) or r
    end)
  end
  for i = 1, 2 do
    local _, r = ngx.thread.wait(threads[i])
    ngx.say(r)
  end
end

-- an ngx.timer callback that co_invokes (yields) and records the result
function T.timer()
  local key = ngx.var.arg_key
  local ok, err = ngx.timer.at(0, function()
    local r1 = T.pool():co_invoke("t", "sleep", 0.05)
    local r2 = T.pool():co_invoke("t", "echo", "timer")
    ngx.shared.vmpool_test:set(key, tostring(r1) .. " " .. r2)
  end)
  ngx.say(ok and "started" or err)
end

-- channels, select and a stream in a request: each wait yields the request (a light thread pops
-- while the main thread pushes into a channel of capacity 1, so both sides wait in turn; if a
-- wait blocked the worker instead, the popper would time out before the first push)
function T.chan()
  local n = tonumber(ngx.var.arg_n) or 100
  local id = ngx.var.arg_id
  local c = vmpool.channel("ngx-chan-" .. id, { capacity = 1 })
  local popper = ngx.thread.spawn(function()
    local sum = 0
    for _ = 1, n do sum = sum + assert(c:pop(5)) end
    return sum
  end)
  for i = 1, n do assert(c:push(i)) end
  local _, popped = ngx.thread.wait(popper)
  -- a state serving two channels while the request talks to it
  local iname, oname = "ngx-in-" .. id, "ngx-out-" .. id
  local inp, out = vmpool.channel(iname, { capacity = 1 }), vmpool.channel(oname, { capacity = 1 })
  local fut = T.pool():submit("t", "doubles", iname, oname, n)
  local feeder = ngx.thread.spawn(function() for i = 1, n do inp:push(i) end end)
  local doubled = 0
  for _ = 1, n do doubled = doubled + out:pop(5) end
  ngx.thread.wait(feeder)
  assert(vmpool.ngx.wait(fut, 5))
  -- select: the channel a light thread pushes to, then a timeout
  local a, b = vmpool.channel("ngx-a-" .. id), vmpool.channel("ngx-b-" .. id)
  ngx.thread.spawn(function() b:push("hi") end)
  local ch, v = vmpool.select({ a, b }, 5)
  local _, why = vmpool.select({ a, b }, 0.01)
  -- a stream
  local streamed = 0
  for i in T.pool():stream("t", "count", n) do streamed = streamed + i end
  ngx.say(popped, " ", doubled, " ", ch == b and "b" or "a", ":", v, " ", why, " ", streamed)
end

-- closing, timeouts, a closed channel in select, a function in a message, a stream's error and
-- its close, each in a request (one line of results)
function T.chan_edges()
  local id = ngx.var.arg_id
  local empty = vmpool.channel("ngx-empty-" .. id)
  local full = vmpool.channel("ngx-full-" .. id, { capacity = 1 })
  assert(full:push(0))
  local timed = { full:push_timeout(0.01, 1) }
  local popper = ngx.thread.spawn(function() return empty:pop() end)
  local pusher = ngx.thread.spawn(function() return full:push(1) end)
  ngx.sleep(0) -- both wait now
  empty:close()
  full:close()
  local _, p1, p2 = ngx.thread.wait(popper)
  local _, q1, q2 = ngx.thread.wait(pusher)
  local drained = full:pop()
  local _, sel = vmpool.select({ empty, full })
  local other = vmpool.channel("ngx-other-" .. id)
  local _, sel_t = vmpool.select({ empty, other }, 0.01)
  local up = 20
  assert(other:push(function(x) return x + up end))
  local f = other:pop()
  local got = 0
  local ok, err = pcall(function() for i in T.pool():stream("t", "count_fail", 3) do got = i end end)
  local s = T.pool():stream("t", "forever")
  local first = s()
  s:close()
  local after = T.pool():co_invoke("t", "echo", "free")
  local again = T.pool():co_invoke("t", "echo", "free")
  ngx.say(table.concat({ tostring(timed[2]), tostring(p1), tostring(p2), tostring(q1), tostring(q2),
    tostring(drained), tostring(sel), tostring(sel_t), f(1), got, tostring(ok),
    (tostring(err):match("stream failed at 3") or tostring(err)), first, after, again }, " "))
end

-- a channel's waiting pop, select and push where nginx cannot yield, and its try forms (one line)
function T.try_chan()
  local c = vmpool.channel("ngx-try-chan")
  local function one(f, ...)
    local r = { pcall(f, ...) }
    return r[1] and tostring(r[2]) .. "/" .. tostring(r[3]) or (tostring(r[2]):gsub("\n", " "))
  end
  return table.concat({ one(c.pop, c, 0.01), one(vmpool.select, { c }, 0.01), one(c.try_push, c, 1),
    one(c.try_pop, c), one(c.try_pop, c) }, " | ")
end

-- co_invoke where nginx cannot yield: returns the error message (one line)
function T.try(phase)
  local ok, err = pcall(T.pool().co_invoke, T.pool(), "t", "echo", phase)
  return ok and "no error" or (tostring(err):gsub("\n", " "))
end

return T
