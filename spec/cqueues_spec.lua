--- vmpool.cqueues: pool:co_invoke and vmpool.cqueues.await in coroutines a cqueues controller runs
-- yield, and the controller resumes each when its own call finished. States are held busy with
-- gates (spec/support/gate.lua), never with sleeps; every wait is bounded.
local has_cqueues, cqueues = pcall(require, "cqueues")
if not has_cqueues then
  describe("vmpool.cqueues", function()
    pending("needs cqueues (Debian: lua-cqueues): " .. tostring(cqueues))
  end)
  return
end

local vmpool = require "vmpool"
local vcq = require "vmpool.cqueues"
local Gate = require "spec.support.gate"

local CHUNK = [[
gate, hold = gate, hold -- init's helpers, made functions of this chunk
function echo(...) return ... end
function fail(m) error(m) end
]]

local PCALL_YIELDS = vmpool.runtime ~= "Lua 5.1"

-- Runs the controller until it is empty (bounded: fails after `seconds`); returns the first error
-- a coroutine raised, if one did (the others go on running).
local function run_loop(cq, seconds)
  local deadline = cqueues.monotime() + (seconds or 10)
  local first_error
  repeat
    local ok, err = cq:loop(math.max(0, deadline - cqueues.monotime()))
    if not ok then first_error = first_error or err end
  until cq:empty() or cqueues.monotime() > deadline
  assert(cq:empty(), "the cqueues controller did not finish in time")
  return first_error
end

local function delta(before)
  local d = {}
  for k, v in pairs(vcq.stats()) do d[k] = v - (before[k] or 0) end
  return d
end

describe("vmpool.cqueues", function()
  local pool, gate
  before_each(function()
    pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("c", CHUNK)
    gate = Gate.new()
  end)
  after_each(function()
    gate:close()
    pool:close()
  end)

  it("loads as require 'vmpool.cqueues'", function()
    assert.are.equal(vcq, require "vmpool.cqueues")
  end)

  it("resumes each of 1,000 concurrent calls' coroutines once, with its own results", function()
    local big = vmpool.new { core = 4 }
    big:compile("c", CHUNK)
    local before = vcq.stats()
    local cq = cqueues.new()
    local results, done = {}, 0
    for i = 1, 1000 do
      cq:wrap(function()
        local a, b = big:co_invoke("c", "echo", i, "x" .. i)
        results[i] = a .. b
        done = done + 1
      end)
    end
    assert.is_nil(run_loop(cq))
    assert.are.equal(1000, done)
    for i = 1, 1000 do assert.are.equal(i .. "x" .. i, results[i]) end
    local d = delta(before)
    assert.are.equal(1000, d.waits)
    assert.are.equal(1000, d.resumes, "each coroutine wakes exactly once")
    assert.are.equal(0, d.early)
    assert.are.equal(1000, d.completions)
    assert.is_true(d.wakeups <= 1000, "a wake-up takes every finished call at once")
    big:close()
  end)

  it("submits the calls of the coroutines one wake-up resumes together, each with its own results", function()
    local big = vmpool.new { core = 4 }
    big:compile("c", CHUNK)
    local before = vcq.stats()
    local cq = cqueues.new()
    local sums, done = {}, 0
    for i = 1, 200 do
      cq:wrap(function()
        local sum = 0
        for j = 1, 10 do sum = sum + big:co_invoke("c", "echo", i * 100 + j) end
        sums[i] = sum
        done = done + 1
      end)
    end
    assert.is_nil(run_loop(cq))
    assert.are.equal(200, done)
    for i = 1, 200 do assert.are.equal(i * 1000 + 55, sums[i]) end
    local d = delta(before)
    assert.are.equal(2000, d.waits)
    assert.are.equal(2000, d.completions)
    assert.is_true(d.batched > 0, "calls made by coroutines one wake-up signalled went as one batch")
    big:close()
  end)

  it("raises a call of a batch that the pool refuses (blocking = false) in the coroutine that made it", function()
    local strict = vmpool.new { core = 2, blocking = false, init = Gate.CHILD }
    strict:compile("c", CHUNK)
    local cq = cqueues.new()
    local order, second = {}, nil
    local function body(name)
      return function()
        strict:co_invoke("c", "echo", name)
        order[#order + 1] = name
        -- the first coroutine signalled defers this call; the last one submits the batch, which
        -- the pool refuses, since the gates hold both states
        if #order == 1 then second = strict:co_invoke("c", "echo", name .. "2") end
      end
    end
    cq:wrap(body("a"))
    cq:wrap(body("b"))
    assert(cq:step(0)) -- both calls submitted
    -- both finish before the controller runs again, so that one wake-up takes both
    assert.is_truthy(Gate.eventually(function() return strict:stats().succeeded == 2 end))
    local held = { strict:submit("c", "gate", gate.port, 1), strict:submit("c", "gate", gate.port, 2) }
    gate:arrivals(2)
    local before = vcq.stats()
    local err = run_loop(cq)
    assert.is_nil(second)
    assert.matches("vmpool: pool exhausted", err)
    assert.are.equal(1, delta(before).batched)
    gate:release()
    assert.are.equal(1, held[1]:wait())
    assert.are.equal(2, held[2]:wait())
    strict:close()
  end)

  it("serves each loop's coroutines through its own adapter in a program that loaded vmpool.luv too", function()
    local has_luv, uv = pcall(require, "luv")
    if not has_luv then
      return pending("needs luv (Debian: lua-luv)")
    end
    local vluv = require "vmpool.luv"
    local function through_cqueues(n)
      local cq, sum = cqueues.new(), 0
      for i = 1, n do cq:wrap(function() local v = pool:co_invoke("c", "echo", i); sum = sum + v end) end
      assert.is_nil(run_loop(cq))
      return sum
    end
    local function through_luv(n)
      local sum = 0
      for i = 1, n do vluv.spawn(function() local v = pool:co_invoke("c", "echo", i); sum = sum + v end) end
      uv.run()
      return sum
    end
    -- alternating, so that whichever adapter comes first in vmpool's list, the other one is
    -- found at least once after the first
    for _ = 1, 2 do
      local before_cq, before_luv = vcq.stats(), vluv.stats()
      assert.are.equal(55, through_cqueues(10))
      assert.are.equal(10, delta(before_cq).waits, "each cqueues coroutine waited through vmpool.cqueues")
      assert.are.equal(before_luv.waits, vluv.stats().waits)
      before_cq, before_luv = vcq.stats(), vluv.stats()
      assert.are.equal(55, through_luv(10))
      assert.are.equal(10, vluv.stats().waits - before_luv.waits, "each luv coroutine waited through vmpool.luv")
      assert.are.equal(before_cq.waits, vcq.stats().waits)
    end
  end)

  it("keeps the controller running other coroutines while calls wait, and wakes only when one finished", function()
    local cq = cqueues.new()
    local results = {}
    for i = 1, 2 do
      cq:wrap(function() results[i] = pool:co_invoke("c", "gate", gate.port, i * 10) end)
    end
    assert(cq:step(0)) -- both coroutines ran up to their wait
    gate:arrivals(2) -- both calls are inside their states
    local before = vcq.stats()
    local ticks, wakeups_while_waiting = 0, nil
    cq:wrap(function()
      for _ = 1, 20 do
        cqueues.sleep(0.001)
        ticks = ticks + 1
      end
      wakeups_while_waiting = vcq.stats().wakeups - before.wakeups
      gate:release()
    end)
    assert.is_nil(run_loop(cq))
    assert.are.same({ 10, 20 }, results)
    assert.are.equal(20, ticks)
    assert.are.equal(0, wakeups_while_waiting, "twenty turns of the controller, no wake-up of the adapter")
    local d = delta(before)
    assert.are.equal(0, d.empty, "no wake-up found nothing to do")
    assert.are.equal(2, d.resumes)
    assert.are.equal(0, d.early)
  end)

  it("ends its dispatcher once nothing is in flight, so the controller empties", function()
    local cq = cqueues.new()
    local got
    cq:wrap(function() got = pool:co_invoke("c", "echo", "one") end)
    assert.is_nil(run_loop(cq))
    assert.are.equal("one", got)
    local s = vcq.stats()
    assert.are.equal(0, s.dispatching)
    assert.are.equal(0, s.in_flight)
    assert.is_true(cq:empty())
  end)

  it("raises a child's error in the waiting coroutine, with the child's traceback", function()
    local cq = cqueues.new()
    cq:wrap(function() pool:co_invoke("c", "fail", "oops") end)
    local err = run_loop(cq)
    assert.matches("vmpool: error in c:fail: c:3: oops\nstack traceback", err)
    if PCALL_YIELDS then
      local ok, perr
      cq:wrap(function() ok, perr = pcall(pool.co_invoke, pool, "c", "fail", "again") end)
      assert.is_nil(run_loop(cq))
      assert.is_false(ok)
      assert.matches("^vmpool: error in c:fail: c:3: again\nstack traceback", perr)
    end
  end)

  it("fails at once when every state is busy and blocking = false", function()
    local strict = vmpool.new { core = 1, blocking = false, init = Gate.CHILD }
    strict:compile("c", CHUNK)
    local cq = cqueues.new()
    local first
    cq:wrap(function() first = strict:co_invoke("c", "gate", gate.port, "first") end)
    assert(cq:step(0))
    gate:arrivals(1)
    local before = vcq.stats()
    cq:wrap(function() strict:co_invoke("c", "echo", "second") end)
    local ok, err = cq:step(0)
    assert.is_false(ok)
    assert.matches("vmpool: pool exhausted", err)
    assert.are.equal(0, delta(before).waits, "it never waited")
    gate:release()
    assert.is_nil(run_loop(cq))
    assert.are.equal("first", first)
    strict:close()
  end)

  it("fails a queued call after acquire_timeout, in its coroutine", function()
    local small = vmpool.new { core = 1, acquire_timeout = 0.05, init = Gate.CHILD }
    small:compile("c", CHUNK)
    local cq = cqueues.new()
    cq:wrap(function() small:co_invoke("c", "gate", gate.port) end)
    assert(cq:step(0))
    gate:arrivals(1)
    cq:wrap(function() small:co_invoke("c", "echo", "queued") end)
    -- the gate opens once the queued call has failed (checked on each turn)
    cq:wrap(function()
      while small:stats().timeouts == 0 do cqueues.sleep(0.001) end
      gate:release()
    end)
    local err = run_loop(cq)
    assert.matches("vmpool: timed out after 0.05s waiting for a free state", err)
    assert.are.equal(1, small:stats().timeouts)
    small:close()
  end)

  it("awaits a plain future from pool:submit", function()
    local fut = pool:submit("c", "gate", gate.port, "later")
    local cq = cqueues.new()
    local got
    cq:wrap(function() got = vcq.await(fut) end)
    assert(cq:step(0))
    assert.is_nil(got)
    gate:arrivals(1)
    gate:release()
    assert.is_nil(run_loop(cq))
    assert.are.equal("later", got)
    assert.are.equal("later", fut:wait())
    assert.are.equal("done", vcq.await(pool:submit("c", "echo", "done")), "outside a controller it blocks")
    assert.has_error(function() vcq.await(7) end,
      "vmpool: bad argument #1 to 'vmpool.cqueues.await': expected a future (from pool:submit), got number")
  end)

  it("wakes every coroutine that awaits the same future, each with its results", function()
    local fut = pool:submit("c", "gate", gate.port, 1)
    local cq = cqueues.new()
    local first, second
    cq:wrap(function() first = vcq.await(fut) end)
    cq:wrap(function() second = vcq.await(fut) end)
    assert(cq:step(0))
    gate:arrivals(1)
    gate:release()
    assert.is_nil(run_loop(cq))
    assert.are.equal(1, first)
    assert.are.equal(1, second)
    assert.are.equal(0, vcq.stats().in_flight)
  end)

  it("wakes a coroutine awaiting a future that fut:pollfd() subscribed too", function()
    local fut = pool:submit("c", "gate", gate.port, 1)
    local cq = cqueues.new()
    local got
    cq:wrap(function() got = vcq.await(fut) end)
    assert(cq:step(0))
    assert.is_number(fut:pollfd())
    gate:arrivals(1)
    gate:release()
    assert.is_nil(run_loop(cq))
    assert.are.equal(1, got)
    assert.is_true(cq:empty())
  end)

  it("blocks like invoke in a coroutine no controller runs", function()
    local co = coroutine.wrap(function() return pool:co_invoke("c", "echo", "plain") end)
    assert.are.equal("plain", co())
    assert.are.equal(0, vcq.stats().in_flight)
  end)

  it("does not leak the calls of a controller that is dropped while they wait, nor wedge the pool", function()
    local cq = cqueues.new()
    for i = 1, 2 do cq:wrap(function() pool:co_invoke("c", "gate", gate.port, i) end) end
    assert(cq:step(0))
    gate:arrivals(2)
    assert.are.equal(2, vcq.stats().in_flight)
    cq = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert.are.equal(0, vcq.stats().in_flight, "the dropped controller's calls are no longer held")
    gate:release()
    assert.is_true(Gate.eventually(function() return pool:stats().busy == 0 end), "the pool went idle")
    local fresh
    local cq2 = cqueues.new()
    cq2:wrap(function() fresh = pool:co_invoke("c", "echo", "fresh") end)
    assert.is_nil(run_loop(cq2))
    assert.are.equal("fresh", fresh)
    local p = pool:stats()
    assert.are.equal(p.invokes, p.succeeded)
  end)

  it("gives queued calls the pool's close error and lets the controller empty", function()
    local small = vmpool.new { core = 1, init = Gate.CHILD }
    small:compile("c", CHUNK)
    local cq = cqueues.new()
    local running
    cq:wrap(function() running = small:co_invoke("c", "hold", gate.port, 0.05, "ran") end)
    assert(cq:step(0))
    gate:arrivals(1)
    cq:wrap(function() small:co_invoke("c", "echo", "never") end)
    assert(cq:step(0))
    assert.are.equal(1, small:stats().waiting)
    cq:wrap(function() small:close() end) -- returns once "hold" let go
    local err = run_loop(cq)
    assert.are.equal("ran", running)
    assert.matches("vmpool: pool is closed", err)
    assert.are.equal(0, vcq.stats().dispatching)
  end)
end)

describe("vmpool.cqueues and pool:co_map", function()
  local cq
  require("spec.support.adapter_cases").stats(it, vcq.stats)
  require("spec.support.adapter_cases").co_map(it, {
    spawn = function(fn)
      cq = cq or cqueues.new()
      cq:wrap(fn)
    end,
    run = function()
      local current = cq
      cq = nil
      local err = run_loop(current)
      assert(err == nil, err)
    end,
  })
end)
