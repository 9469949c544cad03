--- vmpool.luv: pool:co_invoke and vmpool.luv.await in coroutines of vmpool.luv.spawn yield, and
-- the luv loop resumes each when its own call finished. States are held busy with gates
-- (spec/support/gate.lua), never with sleeps; every wait is bounded.
local has_luv, uv = pcall(require, "luv")
if not has_luv then
  describe("vmpool.luv", function()
    pending("needs luv (Debian: lua-luv): " .. tostring(uv))
  end)
  return
end

local vmpool = require "vmpool"
local vluv = require "vmpool.luv"
local Gate = require "spec.support.gate"

local CHUNK = [[
gate, hold = gate, hold -- init's helpers, made functions of this chunk
function echo(...) return ... end
function fail(m) error(m) end
]]

-- pcall can yield on Lua 5.2+ and LuaJIT, not on PUC Lua 5.1
local PCALL_YIELDS = vmpool.runtime ~= "Lua 5.1"

-- Runs the loop until it has nothing left to do; fails if it takes more than `seconds` (a bound,
-- not a verdict on speed).
local function run_loop(seconds)
  -- libuv caches the loop's clock between runs: after other spec files ran for seconds, a timer
  -- started now would be due at once
  uv.update_time()
  local guard = uv.new_timer()
  local expired = false
  guard:start((seconds or 10) * 1000, 0, function() expired = true uv.stop() end)
  guard:unref() -- the guard alone does not keep the loop alive
  uv.run()
  if not guard:is_closing() then guard:close() end
  uv.run("nowait") -- lets the guard's close finish
  assert(not expired, "the luv loop did not finish in time")
end

local function delta(before)
  local now = vluv.stats()
  local d = {}
  for k, v in pairs(now) do d[k] = v - (before[k] or 0) end
  return d, now
end

describe("vmpool.luv", function()
  local pool, gate
  before_each(function()
    pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("c", CHUNK)
    gate = Gate.new()
    vluv.on_error = nil
  end)
  after_each(function()
    gate:close()
    pool:close()
    vluv.on_error = nil
  end)

  it("loads as require 'vmpool.luv' and drives the loop luv itself runs", function()
    assert.are.equal(uv, vluv.loop)
    assert.are.equal(vluv, require "vmpool.luv")
  end)

  it("loads before vmpool itself, from the library (a fresh interpreter)", function()
    local Sub = require "spec.support.subprocess"
    local out, status = Sub.run([[
      local vluv = require "vmpool.luv"      -- the library's luaopen_vmpool_luv
      local vcq = require "vmpool.cqueues"   -- package.preload, now that vmpool is loaded
      local pool = require("vmpool").new { core = 1 }
      pool:compile("c", "function id(x) return x end")
      local got
      vluv.spawn(function() got = pool:co_invoke("c", "id", "luv") end)
      vluv.loop.run()
      pool:close()
      print(got, type(vcq.await))
    ]])
    assert.are.equal(0, status, out)
    assert.matches("^luv\tfunction", out)
  end)

  it("resumes each of 1,000 concurrent calls' coroutines once, with its own results", function()
    local big = vmpool.new { core = 4 }
    big:compile("c", CHUNK)
    local before = vluv.stats()
    local results, done = {}, 0
    for i = 1, 1000 do
      vluv.spawn(function()
        local a, b = big:co_invoke("c", "echo", i, "x" .. i)
        results[i] = a .. b
        done = done + 1
      end)
    end
    assert.are.equal(1000, vluv.stats().waiting + done)
    run_loop()
    assert.are.equal(1000, done)
    for i = 1, 1000 do assert.are.equal(i .. "x" .. i, results[i]) end
    local d = delta(before)
    assert.are.equal(1000, d.resumes, "each coroutine is resumed exactly once")
    assert.are.equal(0, d.early)
    assert.are.equal(1000, d.completions)
    assert.is_true(d.wakeups <= 1000, "a wake-up takes every finished call at once")
    big:close()
  end)

  it("submits the calls of the coroutines one wake-up resumes together, each with its own results", function()
    local big = vmpool.new { core = 4 }
    big:compile("c", CHUNK)
    local before = vluv.stats()
    local sums, done = {}, 0
    for i = 1, 200 do
      vluv.spawn(function()
        local sum = 0
        for j = 1, 10 do sum = sum + big:co_invoke("c", "echo", i * 100 + j) end
        sums[i] = sum
        done = done + 1
      end)
    end
    run_loop()
    assert.are.equal(200, done)
    for i = 1, 200 do assert.are.equal(i * 1000 + 55, sums[i]) end
    local d = delta(before)
    assert.are.equal(2000, d.resumes, "each call's coroutine is resumed exactly once")
    assert.are.equal(2000, d.completions)
    assert.is_true(d.batched > 0, "calls made while a wake-up resumed coroutines went as one batch")
    assert.are.equal(0, vluv.stats().watchers)
    big:close()
  end)

  it("raises a call of a batch that the pool refuses (blocking = false) in the coroutine that made it", function()
    local strict = vmpool.new { core = 2, blocking = false, init = Gate.CHILD }
    strict:compile("c", CHUNK)
    local caught, second = nil, nil
    vluv.on_error = function(msg) caught = msg end
    vluv.spawn(function()
      strict:co_invoke("c", "echo", "a")
      -- resumed by the poll callback: deferred, then refused, since the gates hold both states
      second = strict:co_invoke("c", "echo", "a2")
    end)
    vluv.spawn(function() strict:co_invoke("c", "echo", "b") end)
    -- both first calls finish before the loop runs, so that one wake-up takes both
    assert.is_truthy(Gate.eventually(function() return strict:stats().succeeded == 2 end))
    local held = { strict:submit("c", "gate", gate.port, 1), strict:submit("c", "gate", gate.port, 2) }
    gate:arrivals(2)
    local before = vluv.stats()
    run_loop()
    assert.is_nil(second)
    assert.matches("^vmpool: a coroutine of vmpool.luv.spawn failed: vmpool: pool exhausted", caught)
    assert.are.equal(1, delta(before).batched)
    assert.are.equal(0, vluv.stats().watchers, "nothing is left in flight")
    gate:release()
    assert.are.equal(1, held[1]:wait())
    assert.are.equal(2, held[2]:wait())
    strict:close()
  end)

  it("keeps the loop running other callbacks while calls wait, and wakes it only when one finished", function()
    local results = {}
    for i = 1, 2 do
      vluv.spawn(function() results[i] = pool:co_invoke("c", "gate", gate.port, i * 10) end)
    end
    gate:arrivals(2) -- both calls are inside their states
    local before = vluv.stats()
    local ticks, wakeups_while_waiting = 0, nil
    local timer = uv.new_timer()
    timer:start(1, 1, function()
      ticks = ticks + 1
      if ticks == 20 then
        timer:close()
        wakeups_while_waiting = vluv.stats().wakeups - before.wakeups
        gate:release()
      end
    end)
    run_loop()
    assert.are.same({ 10, 20 }, results)
    assert.are.equal(20, ticks)
    assert.are.equal(0, wakeups_while_waiting, "twenty turns of the loop, no wake-up of the adapter")
    local d = delta(before)
    assert.are.equal(0, d.empty, "no wake-up found nothing to do")
    assert.are.equal(2, d.resumes)
  end)

  it("releases its watcher once nothing is in flight, so uv.run() returns", function()
    local got
    vluv.spawn(function() got = pool:co_invoke("c", "echo", "one") end)
    assert.are.equal(1, vluv.stats().watchers)
    uv.run() -- no guard: it must return by itself
    assert.are.equal("one", got)
    local s = vluv.stats()
    assert.are.equal(0, s.watchers)
    assert.are.equal(0, s.in_flight)
    assert.is_false(uv.loop_alive())
  end)

  it("raises a child's error in the waiting coroutine, with the child's traceback", function()
    local caught
    vluv.on_error = function(msg) caught = msg end
    vluv.spawn(function() pool:co_invoke("c", "fail", "oops") end)
    run_loop()
    assert.matches("^vmpool: a coroutine of vmpool.luv.spawn failed: vmpool: error in c:fail: c:3: oops", caught)
    assert.matches("stack traceback", caught)
    if PCALL_YIELDS then
      local ok, err
      vluv.spawn(function() ok, err = pcall(pool.co_invoke, pool, "c", "fail", "again") end)
      run_loop()
      assert.is_false(ok)
      assert.matches("^vmpool: error in c:fail: c:3: again\nstack traceback", err)
    end
  end)

  it("fails at once when every state is busy and blocking = false", function()
    local strict = vmpool.new { core = 1, blocking = false, init = Gate.CHILD }
    strict:compile("c", CHUNK)
    local first
    vluv.spawn(function() first = strict:co_invoke("c", "gate", gate.port, "first") end)
    gate:arrivals(1)
    -- raised by spawn: the coroutine failed before it ever yielded
    local ok, err = pcall(vluv.spawn, function() strict:co_invoke("c", "echo", "second") end)
    assert.is_false(ok)
    assert.matches("^vmpool: a coroutine of vmpool.luv.spawn failed: vmpool: pool exhausted", err)
    gate:release()
    run_loop()
    assert.are.equal("first", first)
    assert.are.equal(0, strict:stats().busy)
    -- refused with nothing of the adapter in flight: no watcher is left to keep the loop alive
    local held = strict:submit("c", "gate", gate.port, "held")
    gate:arrivals(1)
    assert.is_false(pcall(vluv.spawn, function() strict:co_invoke("c", "echo", "refused") end))
    assert.are.equal(0, vluv.stats().watchers)
    gate:release()
    assert.are.equal("held", held:wait())
    strict:close()
  end)

  it("fails a queued call after acquire_timeout, in its coroutine", function()
    local small = vmpool.new { core = 1, acquire_timeout = 0.05, init = Gate.CHILD }
    small:compile("c", CHUNK)
    local caught
    vluv.on_error = function(msg) caught = msg end
    vluv.spawn(function() small:co_invoke("c", "gate", gate.port) end)
    gate:arrivals(1)
    vluv.spawn(function() small:co_invoke("c", "echo", "queued") end)
    local timer = uv.new_timer()
    -- the gate opens once the queued call has failed (a condition, checked on each tick)
    timer:start(1, 1, function()
      if caught then timer:close() gate:release() end
    end)
    run_loop()
    assert.matches("vmpool: timed out after 0.05s waiting for a free state", caught)
    assert.are.equal(1, small:stats().timeouts)
    small:close()
  end)

  it("awaits a plain future from pool:submit", function()
    local fut = pool:submit("c", "gate", gate.port, "later")
    local got
    vluv.spawn(function() got = vluv.await(fut) end)
    assert.is_nil(got)
    gate:arrivals(1)
    gate:release()
    run_loop()
    assert.are.equal("later", got)
    assert.are.equal("later", fut:wait()) -- the future keeps its results
    assert.are.equal("done", vluv.await(pool:submit("c", "echo", "done")), "outside a coroutine it blocks")
    assert.has_error(function() vluv.await("nope") end,
      "vmpool: bad argument #1 to 'vmpool.luv.await': expected a future (from pool:submit), got string")
  end)

  it("wakes every coroutine that awaits the same future, each with its results", function()
    local fut = pool:submit("c", "gate", gate.port, 1)
    local first, second
    vluv.spawn(function() first = vluv.await(fut) end)
    vluv.spawn(function() second = vluv.await(fut) end)
    gate:arrivals(1)
    gate:release()
    run_loop()
    assert.are.equal(1, first)
    assert.are.equal(1, second)
    assert.are.equal(0, vluv.stats().in_flight)
    assert.are.equal(0, vluv.stats().watchers)
  end)

  it("wakes a coroutine awaiting a future that fut:pollfd() subscribed too", function()
    local fut = pool:submit("c", "gate", gate.port, 1)
    local got
    vluv.spawn(function() got = vluv.await(fut) end)
    assert.is_number(fut:pollfd())
    gate:arrivals(1)
    gate:release()
    run_loop()
    assert.are.equal(1, got)
    assert.are.equal(0, vluv.stats().watchers)
  end)

  it("lets a future be awaited again after a foreign resume, and the loop still ends", function()
    local fut = pool:submit("c", "gate", gate.port, 1)
    local co = vluv.spawn(function() return vluv.await(fut) end)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.matches("something other than vmpool.luv resumed that coroutine", err)
    assert.are.equal(0, vluv.stats().in_flight, "the abandoned wait no longer counts as in flight")
    local got
    vluv.spawn(function() got = vluv.await(fut) end)
    gate:arrivals(1)
    gate:release()
    run_loop()
    assert.are.equal(1, got)
    assert.are.equal(0, vluv.stats().in_flight)
    assert.are.equal(0, vluv.stats().watchers)
  end)

  it("gives vmpool.luv.on_error every coroutine that failed in one poll callback", function()
    local caught = {}
    vluv.on_error = function(msg) caught[#caught + 1] = msg end
    local futs = { pool:submit("c", "gate", gate.port, 1), pool:submit("c", "gate", gate.port, 2) }
    for i = 1, 2 do
      vluv.spawn(function() vluv.await(futs[i]) error("boom" .. i, 0) end)
    end
    gate:arrivals(2)
    gate:release()
    -- both completions queued before the loop runs, so that one poll callback resumes both
    assert.is_truthy(Gate.eventually(function() return vluv.stats().queued == 2 end))
    local before = vluv.stats()
    run_loop()
    assert.are.equal(1, delta(before).wakeups)
    assert.are.equal(2, #caught)
    table.sort(caught)
    assert.matches("failed: boom1", caught[1])
    assert.matches("failed: boom2", caught[2])
  end)

  it("raises every failure of one poll callback in one error when there is no on_error", function()
    -- luv ends the process on an error raised in its callback: a fresh interpreter
    local Sub = require "spec.support.subprocess"
    local out = Sub.run([[
      local vluv = require "vmpool.luv"
      local pool = require("vmpool").new { core = 2 }
      pool:compile("c", "function slow(x) local t = os.clock() while os.clock() - t < 0.05 do end return x end")
      local futs = { pool:submit("c", "slow", 1), pool:submit("c", "slow", 2) }
      for i = 1, 2 do
        vluv.spawn(function() vluv.await(futs[i]) error("boom" .. i, 0) end)
      end
      -- both completions queued before the loop runs, so that one poll callback takes both (a
      -- call's wait returns a moment before its completion is queued: bounded wait for that)
      futs[1]:wait() futs[2]:wait()
      local t0 = os.time()
      while vluv.stats().queued < 2 do assert(os.time() - t0 < 10, "completions not queued") end
      vluv.loop.run()
    ]])
    assert.matches("boom1", out)
    assert.matches("boom2", out)
    assert.matches("1 more coroutine%(s%) of vmpool.luv.spawn failed in the same poll callback", out)
  end)

  it("raises its own errors as plain vmpool: messages, without a position", function()
    local function err_of(f, ...)
      local ok, e = pcall(f, ...)
      assert.is_false(ok)
      return e
    end
    local function caller() return vluv.spawn(5) end -- a Lua caller, where a level would add one
    assert.are.equal("vmpool: bad argument #1 to 'vmpool.luv.spawn': expected a function, got number",
      err_of(caller))
    local function awaits() return vluv.await("x") end
    assert.matches("^vmpool: bad argument #1 to 'vmpool.luv.await'", err_of(awaits))
    local function dot() return pool.co_invoke("c", "echo") end
    assert.matches("^vmpool: bad argument #1 to 'co_invoke'", err_of(dot))
  end)

  it("blocks like invoke in a coroutine it did not start", function()
    local co = coroutine.wrap(function() return pool:co_invoke("c", "echo", "plain") end)
    assert.are.equal("plain", co())
    assert.are.equal(0, vluv.stats().in_flight)
  end)

  it("raises in a waiting coroutine that other code resumed, and drops its call", function()
    local before = vluv.stats()
    local co = vluv.spawn(function() return pool:co_invoke("c", "gate", gate.port) end)
    gate:arrivals(1)
    local ok, err = coroutine.resume(co)
    assert.is_false(ok)
    assert.matches("something other than vmpool.luv resumed that coroutine", err)
    gate:release()
    run_loop()
    local d, now = delta(before)
    assert.are.equal(1, d.early)
    assert.are.equal(1, d.dropped)
    assert.are.equal(0, now.in_flight)
    assert.are.equal(0, now.watchers)
  end)

  it("gives up a call still waiting in the wake-up's batch: it never runs twice and the loop ends", function()
    -- X's second call is made while the poll callback resumes coroutines, so it waits in the
    -- batch; Y, resumed in the same callback, resumes X early, which gives that call up, then
    -- makes its own. Each call runs at most once, Y gets its own result, and the loop ends.
    local counting, d = require("spec.support.counting")("vmpool-spec-luv-batch")
    for _ = 1, 20 do
      d:flush_all()
      local x, y_result, y_error
      x = vluv.spawn(function()
        counting:co_invoke("c", "echo", 1)
        counting:co_invoke("c", "count", "x")
      end)
      vluv.spawn(function()
        counting:co_invoke("c", "echo", 2)
        if coroutine.status(x) == "suspended" then
          assert.is_false(coroutine.resume(x))
        end
        local ok, r = pcall(counting.co_invoke, counting, "c", "count", "y")
        if ok then y_result = r else y_error = r end
      end)
      run_loop()
      assert.is_nil(y_error)
      assert.are.equal(1, y_result)
      assert.are.equal(1, d:get("y"))
      assert.is_true((d:get("x") or 0) <= 1)
    end
    assert.are.equal(0, vluv.stats().in_flight)
    counting:close()
  end)

  it("never wakes a newer call with the completion of one a coroutine gave up", function()
    -- the given-up call's token comes back while newer calls wait; tokens are reused, but only
    -- once their completion is in, so each coroutine still gets exactly its own result
    local co = vluv.spawn(function() return pool:co_invoke("c", "gate", gate.port, "given up") end)
    gate:arrivals(1)
    assert.is_false(coroutine.resume(co))
    local got = {}
    local deadline = uv.hrtime() + 10e9
    for round = 1, 4 do
      for i = 1, 5 do
        vluv.spawn(function()
          local r = pool:co_invoke("c", "echo", round * 10 + i)
          got[#got + 1] = r
        end)
      end
      if round == 3 then gate:release() end
      -- the given-up call keeps the watcher open until round 3: run the loop until this round's
      -- results are in (bounded)
      while #got < round * 5 do
        assert(uv.hrtime() < deadline, "the calls did not finish in time")
        uv.run("once")
      end
    end
    run_loop()
    table.sort(got)
    assert.are.same({ 11, 12, 13, 14, 15, 21, 22, 23, 24, 25, 31, 32, 33, 34, 35, 41, 42, 43, 44, 45 }, got)
    assert.are.equal(0, vluv.stats().in_flight)
  end)

  it("does not leak the calls of coroutines abandoned in a stopped loop, nor wedge the pool", function()
    local late = {}
    for i = 1, 2 do
      vluv.spawn(function() late[i] = pool:co_invoke("c", "gate", gate.port, i) end)
    end
    gate:arrivals(2)
    local timer = uv.new_timer()
    timer:start(1, 0, function() timer:close() uv.stop() end)
    uv.run() -- stopped with both calls in flight
    assert.are.equal(2, vluv.stats().in_flight)
    gate:release()
    assert.is_true(Gate.eventually(function() return pool:stats().busy == 0 end), "the pool went idle")
    collectgarbage()
    collectgarbage()
    -- the next turn of the loop delivers what finished meanwhile and serves new calls
    local fresh
    vluv.spawn(function() fresh = pool:co_invoke("c", "echo", "fresh") end)
    run_loop()
    assert.are.equal("fresh", fresh)
    assert.are.same({ 1, 2 }, late)
    local s = vluv.stats()
    assert.are.equal(0, s.in_flight)
    assert.are.equal(0, s.watchers)
    local p = pool:stats()
    assert.are.equal(p.invokes, p.succeeded)
  end)

  it("gives queued calls the pool's close error and lets the loop end", function()
    local small = vmpool.new { core = 1, init = Gate.CHILD }
    small:compile("c", CHUNK)
    local running, queued
    vluv.on_error = function(msg) queued = msg end
    vluv.spawn(function() running = small:co_invoke("c", "hold", gate.port, 0.05, "ran") end)
    vluv.spawn(function() small:co_invoke("c", "echo", "never") end)
    gate:arrivals(1)
    local timer = uv.new_timer()
    timer:start(1, 0, function() timer:close() small:close() end) -- returns once "hold" let go
    run_loop()
    assert.are.equal("ran", running)
    assert.matches("vmpool: pool is closed", queued)
    assert.are.equal(0, vluv.stats().watchers)
  end)

  it("refuses spawn without a function", function()
    assert.has_error(function() vluv.spawn(42) end,
      "vmpool: bad argument #1 to 'vmpool.luv.spawn': expected a function, got number")
  end)
end)

describe("vmpool.luv and pool:co_map", function()
  require("spec.support.adapter_cases").stats(it, vluv.stats)
  require("spec.support.adapter_cases").co_map(it, {
    spawn = vluv.spawn,
    run = function() run_loop() end,
  })
end)
