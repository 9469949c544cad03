-- Execution limits and what they promise: time_limit, memory_limit, max_waiting, cancelling
-- queued and running calls, and shutdown with calls in flight. Every wait is bounded; states are
-- held busy with gates (spec/support/gate.lua), never with sleeps.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"
local Child = require "spec.support.child"
local Near = require "spec.support.near_deadline"

local IS_LUAJIT = vmpool.runtime == "LuaJIT"

local RUNAWAY = [[
function spin() while true do end end
function pspin() while true do pcall(function() while true do end end) end end
function xspin()
  while true do xpcall(function() while true do end end, function() while true do end end) end
end
function co_spin()
  coroutine.resume(coroutine.create(function() while true do end end))
  return "escaped"
end
function wrap_spin()
  local ok = pcall(coroutine.wrap(function() while true do end end))
  return "escaped", ok
end
function hooks()
  local in_co = coroutine.wrap(function() return debug.gethook() ~= nil end)()
  return debug.gethook() == nil, in_co
end
function gated_spin(port) gate(port) while true do end end
function echo(...) return ... end
function jit_on() return jit and jit.status() end
function count(n) local x = 0 for i = 1, n do x = x + i end return x end
gate, hold = gate, hold -- init's helpers, made functions of this chunk (a chunk's functions are its own)
]]

local function check_balanced(pool)
  local s = pool:stats()
  assert.are.equal(0, s.busy)
  assert.are.equal(0, s.waiting)
  assert.are.equal(s.core + s.noncore, s.created - s.closed)
  assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
  return s
end

describe("time_limit", function()
  local pool
  before_each(function()
    pool = vmpool.new { core = 1, time_limit = 0.1, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
  end)
  after_each(function() pool:close() end)

  for _, f in ipairs { "spin", "pspin", "xspin", "co_spin", "wrap_spin" } do
    it("stops " .. f .. " with 'time limit exceeded' and replaces the state", function()
      local t0 = vmpool.clock()
      local ok, err = pcall(pool.invoke, pool, "r", f)
      local took = vmpool.clock() - t0
      assert.is_false(ok)
      assert.matches("^vmpool: time limit exceeded: r:" .. f .. " ran longer than 0.1s %(the state was replaced; "
        .. "raise time_limit or make the call shorter%)$", err)
      assert.is_true(took >= 0.1, "stopped after " .. took)
      assert.is_true(took < 5, "stopped after " .. took)
      local s = check_balanced(pool)
      assert.are.equal(1, s.core)
      assert.are.equal(2, s.created)
      assert.are.equal(1, s.closed)
      assert.are.equal(1, s.errors)
      assert.are.equal("alive", pool:invoke("r", "echo", "alive"))
    end)
  end

  it("runs a call's main thread without a hook until its limit is due; coroutines keep a count hook", function()
    local main_free, co_hooked = pool:invoke("r", "hooks")
    -- Lua 5.4 and 5.5 get the hook through a signal to the worker's thread (their lua_sethook
    -- cannot be called from the watchdog's thread safely: src/child/watchdog.rs); only where that
    -- signal is not available ("count": another build, a host handler) the count hook stays
    -- (the portable-sys build, like other systems, has no such signal)
    local expected = "thread"
    if vmpool.runtime == "Lua 5.4" or vmpool.runtime == "Lua 5.5" then
      expected = vmpool._sys == "portable" and "count" or "signal"
    end
    assert.are.equal(expected, vmpool._limit_hook())
    assert.are.equal(expected ~= "count", main_free)
    -- LuaJIT has one hook per state, which the watchdog sets: its coroutines need none of their own
    assert.are.equal(not IS_LUAJIT, co_hooked)
    assert.are.equal("alive", pool:invoke("r", "echo", "alive"))
  end)

  it("keeps the count hook with VMPOOL_LIMIT_SIGNAL=0, and the limit still ends a runaway loop", function()
    local Sub = require "spec.support.subprocess"
    local out, status = Sub.run([[
      local vmpool = require "vmpool"
      local pool = vmpool.new { core = 1, time_limit = 0.05 }
      pool:compile("l", "function spin() while true do end end")
      local ok, err = pcall(pool.invoke, pool, "l", "spin")
      print(vmpool._limit_hook(), ok, (err:match("^vmpool: time limit exceeded")))
      pool:close()
    ]], { env = "VMPOOL_LIMIT_SIGNAL=0 " })
    assert.are.equal(0, status, out)
    local mechanism = (vmpool.runtime == "Lua 5.4" or vmpool.runtime == "Lua 5.5") and "count" or "thread"
    assert.are.equal(mechanism .. "\tfalse\tvmpool: time limit exceeded\n", out)
  end)

  it("fails a call that overran it inside a C function when the function returns, not with its results", function()
    local gate = Gate.new()
    -- hold() blocks in socket's receive for 0.3 s, past the 0.1 s limit, then returns "done"
    local ok, err = pcall(pool.invoke, pool, "r", "hold", gate.port, 0.3, "done")
    gate:close()
    assert.is_false(ok)
    assert.matches("^vmpool: time limit exceeded: r:hold ran longer than 0.1s %(the state was replaced; ", err)
    local s = check_balanced(pool)
    assert.are.equal(2, s.created)
    assert.are.equal("alive", pool:invoke("r", "echo", "alive"))
  end)

  it("also stops a future's call; the caller need not be waiting", function()
    local fut = pool:submit("r", "spin")
    assert.is_truthy(Gate.eventually(function() return fut:ready() end))
    local ok, err = pcall(fut.wait, fut)
    assert.is_false(ok)
    assert.matches("^vmpool: time limit exceeded: r:spin", err)
  end)

  it("leaves no hook behind: the call after a timed-out one runs without it and completes", function()
    local clean = vmpool._limit_hook() ~= "count"
    for _ = 1, 3 do
      assert.matches("^vmpool: time limit exceeded: r:spin", select(2, pcall(pool.invoke, pool, "r", "spin")))
      assert.are.equal(clean, (pool:invoke("r", "hooks")))
      assert.are.equal(5050, pool:invoke("r", "count", 100))
    end
  end)

  it("leaves no stale hook to the next call when deadlines fire as calls end", function()
    -- calls that busy-loop from 0 to twice the limit: some end just before their deadline fires
    -- (the watchdog's hook or signal may then arrive after the call); every call that succeeds
    -- must have started without a hook, and every failure is the time limit's
    local p = vmpool.new { core = 1, time_limit = Near.LIMIT }
    p:compile("n", Near.SOURCE)
    local clean = vmpool._limit_hook() ~= "count"
    local succeeded, failed = 0, 0
    for _, d in ipairs(Near.durations(200)) do
      local ok, r = pcall(p.invoke, p, "n", "near", d)
      if ok then
        succeeded = succeeded + 1
        assert.are.equal(clean, r)
      else
        failed = failed + 1
        assert.matches("^vmpool: time limit exceeded: n:near", r)
      end
    end
    assert.is_true(succeeded > 0 and failed > 0, succeeded .. " succeeded, " .. failed .. " failed")
    p:close()
  end)

  it("leaves calls within the limit alone, and their states too", function()
    for i = 1, 50 do assert.are.equal(i * (i + 1) / 2, pool:invoke("r", "count", i)) end
    local s = check_balanced(pool)
    assert.are.equal(0, s.closed)
  end)

  it("times each call on its own: queued time does not count", function()
    local gate = Gate.new()
    local held = pool:submit("r", "gate", gate.port, "held")
    gate:arrivals(1)
    local queued = pool:submit("r", "count", 1000)
    -- the queued call waits longer than time_limit before it starts, then runs well within it;
    -- the held call, past its own deadline inside a C function, fails when it returns
    local t0 = vmpool.clock()
    while vmpool.clock() - t0 < 0.15 do assert.is_false(queued:ready()) end
    gate:release()
    assert.matches("^vmpool: time limit exceeded: r:gate ran longer than 0.1s", select(2, pcall(held.wait, held, 10)))
    assert.are.equal(500500, queued:wait(10))
    gate:close()
  end)

  it("is off with 0, and with math.huge only allows interrupting running calls", function()
    local p = vmpool.new { core = 1, time_limit = 0 }
    p:compile("r", RUNAWAY)
    assert.are.equal(5050, p:invoke("r", "count", 100))
    p:close()
    p = vmpool.new { core = 1, time_limit = math.huge }
    p:compile("r", RUNAWAY)
    assert.are.equal(5050, p:invoke("r", "count", 100))
    p:close()
    local ok, err = pcall(vmpool.new, { time_limit = -1 })
    assert.is_false(ok)
    assert.matches("^vmpool: option 'time_limit' to vmpool.new must be a non%-negative number of seconds", err)
  end)
end)

describe("the jit option", function()
  if IS_LUAJIT then
    it("defaults to off in children of pools with a time limit, on otherwise", function()
      local p = vmpool.new { core = 1, time_limit = 1 }
      p:compile("r", RUNAWAY)
      assert.is_false(p:invoke("r", "jit_on"))
      p:close()
      p = vmpool.new { core = 1 }
      p:compile("r", RUNAWAY)
      assert.is_true(p:invoke("r", "jit_on"))
      p:close()
      p = vmpool.new { core = 1, jit = false }
      p:compile("r", RUNAWAY)
      assert.is_false(p:invoke("r", "jit_on"))
      p:close()
    end)

    it("cannot be true together with a time limit (compiled loops skip the hook)", function()
      for _, limit in ipairs { 1, math.huge } do
        local ok, err = pcall(vmpool.new, { core = 1, time_limit = limit, jit = true })
        assert.is_false(ok)
        assert.matches("^vmpool: option 'time_limit' to vmpool.new needs jit = false on LuaJIT %(compiled loops do "
          .. "not run the hook that enforces it%); leave 'jit' unset or set it to false$", err)
      end
      local p = vmpool.new { core = 1, time_limit = 1, jit = false }
      p:close()
    end)
  else
    it("is accepted and has no effect on " .. vmpool.runtime, function()
      local p = vmpool.new { core = 1, time_limit = 0.05, jit = true }
      p:compile("r", RUNAWAY)
      assert.is_nil(p:invoke("r", "jit_on"))
      local ok, err = pcall(p.invoke, p, "r", "spin")
      assert.is_false(ok)
      assert.matches("^vmpool: time limit exceeded", err)
      p:close()
    end)
  end
end)

describe("memory_limit", function()
  local LIMIT = 8 * 1024 * 1024
  local HOG = [[
    function hog() local t = {} for i = 1, 1e9 do t[i] = i end end
    function big() return #string.rep("x", 64 * 1024 * 1024) end
    function caught() return pcall(string.rep, "x", 64 * 1024 * 1024) end
    function len(s) return #s end
    function blob(n) return string.rep("y", n) end
  ]]
  local pool
  before_each(function()
    pool = vmpool.new { core = 1, memory_limit = LIMIT }
    pool:compile("m", HOG)
  end)
  after_each(function() pool:close() end)

  for _, f in ipairs { "hog", "big" } do
    it("fails " .. f .. " with 'memory limit exceeded' and replaces the state", function()
      local host_kb = collectgarbage("count")
      local ok, err = pcall(pool.invoke, pool, "m", f)
      assert.is_false(ok)
      assert.matches("^vmpool: memory limit exceeded: m:" .. f .. " needed more than " .. LIMIT
        .. " bytes %(the state was replaced; raise memory_limit or use less memory%)$", err)
      local s = check_balanced(pool)
      assert.are.equal(1, s.core)
      assert.are.equal(2, s.created)
      assert.are.equal(1, s.closed)
      assert.are.equal(3, pool:invoke("m", "len", "abc"))
      -- the host's own heap did not take the child's allocations
      assert.is_true(collectgarbage("count") < host_kb + 1024)
    end)
  end

  it("counts the arguments a state receives", function()
    local ok, err = pcall(pool.invoke, pool, "m", "len", string.rep("z", 2 * LIMIT))
    assert.is_false(ok)
    assert.matches("^vmpool: memory limit exceeded: m:len", err)
    assert.are.equal(1, pool:invoke("m", "len", "z"))
  end)

  it("lets a child that catches the refused allocation go on (nothing was exceeded)", function()
    local ok, err = pool:invoke("m", "caught")
    assert.is_false(ok)
    assert.matches("not enough memory", err)
    assert.are.equal(0, pool:stats().closed)
  end)

  it("does not count results once they left the state (they are copied out of Lua)", function()
    for _ = 1, 20 do assert.are.equal(LIMIT / 4, #pool:invoke("m", "blob", LIMIT / 4)) end
    assert.are.equal(0, pool:stats().closed)
  end)

  it("survives a state that is full between calls: nested results, new names, new chunks", function()
    -- everything the pool does in a state outside the call itself must not allocate where running
    -- out of memory ends the process (Lua 5.1 and LuaJIT: growing the stack to encode nested
    -- results). Where lua-posix can fork, run it in a child so that a crash is a failure here.
    local function scenario()
      local p = vmpool.new { core = 1, memory_limit = 2 * 1024 * 1024 }
      p:compile("m", [[
        local function add(size) hoard = { hoard, string.rep("x", size) } end
        function fill()
          hoard = nil
          collectgarbage()
          for _, size in ipairs { 4096, 256, 16, 0 } do while pcall(add, size) do end end
        end
        function nested(d) local t = {} local c = t for _ = 1, d do c.x = {} c = c.x end fill() return t end
      ]])
      local outcomes = {}
      for _, depth in ipairs { 10, 50, 99 } do
        local ok, r = pcall(p.invoke, p, "m", "nested", depth)
        outcomes[#outcomes + 1] = ok and type(r) or r:match("^vmpool: memory limit exceeded") and "limit" or r
      end
      p:close()
      return table.concat(outcomes, " ")
    end
    local report
    if Child.available then
      pool:close() -- fork with no other pool's threads around
      local how, code
      report, how, code = Child.run(scenario, 60)
      assert.are.equal("exited", how, report)
      assert.are.equal(0, code, report)
    else
      report = scenario()
    end
    for word in report:gmatch("%S+") do
      assert.is_true(word == "table" or word == "limit", report)
    end
  end)

  it("refuses a limit below what a fresh state needs, and 0 means none", function()
    local ok, err = pcall(vmpool.new, { core = 1, memory_limit = 1000 })
    assert.is_false(ok)
    assert.matches("^vmpool: memory_limit = 1000 is too small: a new state already uses %d+ bytes", err)
    local p = vmpool.new { core = 1, memory_limit = 0 }
    p:compile("m", HOG)
    assert.are.equal(32 * 1024 * 1024, #p:invoke("m", "blob", 32 * 1024 * 1024))
    p:close()
  end)
end)

describe("max_waiting", function()
  local gate, pool
  before_each(function()
    gate = Gate.new()
    pool = vmpool.new { core = 1, max_waiting = 2, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
  end)
  after_each(function()
    gate:close()
    pool:close()
  end)

  it("rejects callers beyond it with 'queue full', counted in stats().rejected", function()
    local held = pool:submit("r", "gate", gate.port, "held")
    gate:arrivals(1)
    local q = { pool:submit("r", "echo", 1), pool:submit("r", "echo", 2) }
    for i = 1, 3 do
      local ok, err = pcall(pool.invoke, pool, "r", "echo", "refused")
      assert.is_false(ok)
      assert.matches("^vmpool: queue full: 2 callers are already waiting for a state %(raise max_waiting or the pool "
        .. "size%)$", err)
      assert.are.equal(i, pool:stats().rejected)
    end
    -- a cancelled waiter frees its place at once
    assert.is_true(q[1]:cancel())
    local q3 = pool:submit("r", "echo", 3)
    assert.is_false(pcall(pool.submit, pool, "r", "echo", 4))
    gate:release()
    assert.are.equal("held", held:wait(10))
    assert.are.equal(2, q[2]:wait(10))
    assert.are.equal(3, q3:wait(10))
    local s = check_balanced(pool)
    assert.are.equal(4, s.rejected)
    assert.are.equal(1, s.cancelled)
    assert.are.equal(3, s.succeeded)
  end)

  it("rejects coroutines under vmpool.run the same way", function()
    local held = pool:submit("r", "gate", gate.port, "held")
    gate:arrivals(1)
    local outcomes = {}
    vmpool.run(function()
      for i = 1, 5 do
        vmpool.spawn(function()
          if i <= 2 then -- queued (no pcall: Lua 5.1 cannot yield across it)
            outcomes[i] = pool:co_invoke("r", "echo", i)
          else -- refused at once, before any yield
            local ok, err = pcall(pool.co_invoke, pool, "r", "echo", i)
            outcomes[i] = not ok and err:match("^vmpool: queue full") and "full" or tostring(err)
          end
        end)
      end
      vmpool.spawn(function()
        -- every coroutine has submitted (two queued, three refused) before this one runs
        assert(pool:stats().waiting == 2)
        gate:release()
      end)
    end)
    assert.are.same({ 1, 2, "full", "full", "full" }, outcomes)
    assert.are.equal("held", held:wait(10))
  end)
end)

describe("fut:cancel()", function()
  local gate
  before_each(function() gate = Gate.new() end)
  after_each(function() gate:close() end)

  it("stops a call before it starts: it never runs, whatever the race with the worker", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "ran = 0 function mark() ran = ran + 1 return ran end function get() return ran end")
    local ran, cancelled = 0, 0
    for _ = 1, 500 do
      local fut = pool:submit("c", "mark")
      if fut:cancel() then
        cancelled = cancelled + 1
        local ok, err = pcall(fut.wait, fut)
        assert.is_false(ok)
        assert.are.equal("vmpool: call was cancelled", err)
      else
        ran = ran + 1
        assert.are.equal(ran, fut:wait(10))
      end
    end
    assert.are.equal(ran, pool:invoke("c", "get"))
    local s = check_balanced(pool)
    assert.are.equal(cancelled, s.cancelled)
    pool:close()
  end)

  it("interrupts a running call in a pool with a time limit (math.huge: no deadline)", function()
    local pool = vmpool.new { core = 1, time_limit = math.huge, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
    local fut = pool:submit("r", "gated_spin", gate.port)
    gate:arrivals(1)
    gate:release() -- the call now spins
    assert.is_false(fut:cancel()) -- it had started: false, but it is interrupted
    local ok, err = pcall(fut.wait, fut, 10)
    assert.is_false(ok)
    assert.are.equal("vmpool: call was cancelled", err)
    local s = check_balanced(pool)
    assert.are.equal(1, s.cancelled)
    assert.are.equal(0, s.errors)
    assert.are.equal(1, s.closed) -- the interrupted state was replaced
    assert.are.equal(1, s.core)
    assert.are.equal("next", pool:invoke("r", "echo", "next"))
    pool:close()
  end)

  it("interrupts a running loop long before a finite time limit", function()
    local pool = vmpool.new { core = 1, time_limit = 60, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
    local fut = pool:submit("r", "gated_spin", gate.port)
    gate:arrivals(1)
    gate:release()
    local t0 = vmpool.clock()
    assert.is_false(fut:cancel())
    local ok, err = pcall(fut.wait, fut, 10)
    assert.is_false(ok)
    assert.are.equal("vmpool: call was cancelled", err)
    assert.is_true(vmpool.clock() - t0 < 10)
    assert.are.equal("next", pool:invoke("r", "echo", "next"))
    pool:close()
  end)

  it("cannot interrupt a running call in a pool without a time limit: the call finishes", function()
    local pool = vmpool.new { core = 1, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
    local fut = pool:submit("r", "gate", gate.port, "finished")
    gate:arrivals(1)
    assert.is_false(fut:cancel())
    gate:release()
    assert.are.equal("finished", fut:wait(10))
    assert.is_false(fut:cancel()) -- done: nothing to cancel
    local s = check_balanced(pool)
    assert.are.equal(0, s.cancelled)
    pool:close()
  end)
end)

describe("a state replaced after a limit", function()
  it("closes after its caller has the error, so a slow finalizer does not delay it", function()
    local pool = vmpool.new { core = 1, time_limit = 0.2 }
    pool:compile("g", [[
      function slow_gc_then_spin(seconds)
        setmetatable({}, { __gc = function()
          local t = os.clock() + seconds
          while os.clock() < t do end
        end })
        while true do end
      end
    ]])
    local t0 = vmpool.clock()
    local ok, err = pcall(pool.invoke, pool, "g", "slow_gc_then_spin", 3)
    local took = vmpool.clock() - t0
    assert.is_false(ok)
    assert.matches("^vmpool: time limit exceeded", err)
    -- 0.2 s of limit; before, the error came after the 3 s finalizer too
    assert.is_true(took < 2.5, "the error took " .. took .. " s")
    local s = pool:stats()
    assert.are.equal(1, s.core)
    assert.are.equal(2, s.created)
    pool:close()
  end)
end)

describe("shutdown with calls in flight", function()
  it("close(): running calls end (here by their time limit), queued ones fail, no thread remains", function()
    local before = Gate.thread_ids()
    local pool = vmpool.new { core = 2, time_limit = 0.2 }
    pool:compile("r", RUNAWAY)
    local running = { pool:submit("r", "spin"), pool:submit("r", "pspin") }
    local queued = {}
    for i = 1, 5 do queued[i] = pool:submit("r", "echo", i) end
    assert.are.equal(5, pool:stats().waiting)
    local t0 = vmpool.clock()
    pool:close()
    assert.is_true(vmpool.clock() - t0 < 5)
    for _, fut in ipairs(running) do
      assert.is_true(fut:ready())
      local ok, err = pcall(fut.wait, fut)
      assert.is_false(ok)
      assert.matches("^vmpool: time limit exceeded", err)
    end
    for _, fut in ipairs(queued) do
      assert.is_true(fut:ready())
      local ok, err = pcall(fut.wait, fut)
      assert.is_false(ok)
      assert.matches("^vmpool: pool is closed %(create a new pool with vmpool.new%)$", err)
    end
    local s = pool:stats()
    assert.are.equal(0, s.core + s.noncore + s.busy + s.waiting + s.idle)
    assert.are.equal(s.created, s.closed)
    assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
    assert.are.same({}, Gate.threads_left(before))
  end)

  it("garbage collection without close() stops the running calls, fails the queued ones, leaves no thread", function()
    collectgarbage()
    local before = Gate.thread_ids()
    local running, queued
    do
      local pool = vmpool.new { core = 1, max_noncore = 1, time_limit = 0.2, idle_timeout = 60 }
      pool:compile("r", RUNAWAY)
      running = { pool:submit("r", "spin"), pool:submit("r", "xspin") }
      queued = pool:submit("r", "echo", 1)
      assert.is_true(#Gate.new_threads(before) >= 3)
    end
    collectgarbage()
    collectgarbage()
    for _, fut in ipairs(running) do
      assert.is_true(fut:ready())
      local err = select(2, pcall(fut.wait, fut))
      assert.matches("^vmpool: call stopped: the pool was closed while it ran", err)
    end
    assert.is_true(queued:ready())
    assert.matches("^vmpool: pool is closed", select(2, pcall(queued.wait, queued)))
    assert.are.same({}, Gate.threads_left(before))
  end)

  it("close{ timeout = s } lets running calls that end in time return their results", function()
    local pool = vmpool.new { core = 2, time_limit = math.huge }
    pool:compile("r", RUNAWAY)
    local futs = { pool:submit("r", "count", 1e5), pool:submit("r", "echo", "done") }
    local t0 = vmpool.clock()
    pool:close { timeout = 30 }
    assert.is_true(vmpool.clock() - t0 < 10)
    assert.are.equal(5000050000, futs[1]:wait())
    assert.are.equal("done", futs[2]:wait())
    assert.are.equal(0, pool:stats().threads)
  end)

  it("close{ timeout = s } stops the calls still running after s, in a pool with a time_limit", function()
    local before = Gate.thread_ids()
    local gate = Gate.new()
    local pool = vmpool.new { core = 2, time_limit = math.huge, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
    local running = { pool:submit("r", "gated_spin", gate.port), pool:submit("r", "gated_spin", gate.port) }
    gate:arrivals(2)
    gate:release()
    local queued = pool:submit("r", "echo", 1)
    local t0 = vmpool.clock()
    pool:close { timeout = 0.1 }
    assert.is_true(vmpool.clock() - t0 < 5)
    for _, fut in ipairs(running) do
      local ok, err = pcall(fut.wait, fut, 0)
      assert.is_false(ok)
      assert.are.equal("vmpool: call stopped: the pool was closed while it ran"
        .. " (wait for its calls before closing, or give close{ timeout = s } more time)", err)
    end
    assert.matches("^vmpool: pool is closed", select(2, pcall(queued.wait, queued, 0)))
    local s = pool:stats()
    assert.are.equal(0, s.threads)
    assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
    assert.are.same({}, Gate.threads_left(before))
  end)

  it("close{ timeout = s } returns without joining a call stuck in C; a later close() joins it", function()
    local before = Gate.thread_ids()
    local gate = Gate.new()
    local pool = vmpool.new { core = 1, init = Gate.CHILD }
    pool:compile("r", RUNAWAY)
    local fut = pool:submit("r", "gate", gate.port, "finished")
    gate:arrivals(1)
    pool:close { timeout = 0 }
    -- the call sits in a socket read, which no hook can stop: its thread is left running
    assert.is_false(fut:ready())
    assert.are.equal(1, pool:stats().threads)
    gate:release()
    assert.are.equal("finished", fut:wait(10))
    pool:close()
    assert.are.equal(0, pool:stats().threads)
    assert.are.same({}, Gate.threads_left(before))
  end)

  it("close() refuses options it does not know, with a vmpool: error", function()
    local pool = vmpool.new { core = 1 }
    for _, case in ipairs {
      { 5, "expected an options table, got number" },
      { { timeout = -1 }, "timeout must be a non%-negative number of seconds or math.huge, got %-1" },
      { { timeout = "1" }, "timeout must be a non%-negative number of seconds or math.huge, got string" },
      { { timeot = 1 }, "unknown option 'timeot' %(close takes only timeout%)" },
      { { 1 }, "unknown option 'a number key'" },
    } do
      local ok, err = pcall(pool.close, pool, case[1])
      assert.is_false(ok)
      assert.matches("^vmpool: bad argument #1 to 'close': " .. case[2], err)
    end
    -- the pool is still open and works
    pool:compile("e", "function f(x) return x end")
    assert.are.equal(2, pool:invoke("e", "f", 2))
    -- a timeout too long for a clock waits as math.huge does
    pool:close { timeout = 1e300 }
    assert.matches("^vmpool: pool is closed", select(2, pcall(pool.invoke, pool, "e", "f", 1)))
  end)

  it("calls submitted after close() fail at once; close() is idempotent", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("r", RUNAWAY)
    pool:close()
    pool:close()
    local ok, err = pcall(pool.submit, pool, "r", "echo")
    assert.is_false(ok)
    assert.matches("^vmpool: pool is closed", err)
    ok, err = pcall(vmpool.run, function() return pool:co_invoke("r", "echo") end)
    assert.is_false(ok)
    assert.matches("vmpool: pool is closed", err)
  end)
end)
