-- The seed report's pooling strategies, as vmpool options, each held busy with gates so that the
-- sizing decisions are visible in stats() at the moment they are made.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"

local CHUNK = "return { gate = gate, echo = function(...) return ... end }"

local function pool_with(opts)
  opts.init = Gate.CHILD
  local pool = vmpool.new(opts)
  pool:compile("g", CHUNK)
  return pool
end

local function held(pool, gate, n)
  local futs = {}
  for i = 1, n do futs[i] = pool:submit("g", "gate", gate.port, i) end
  gate:arrivals(n)
  return futs
end

local function finish(gate, futs)
  gate:release()
  for i, f in ipairs(futs) do assert.are.equal(i, f:wait(10)) end
end

describe("strategy", function()
  local gate
  before_each(function() gate = Gate.new() end)
  after_each(function() gate:close() end)

  it("no pool (core = 0, max_noncore = math.huge, idle_timeout = 0): a state per call, closed after it", function()
    local pool = pool_with { core = 0, max_noncore = math.huge, idle_timeout = 0 }
    assert.are.equal(0, pool:stats().created)
    for i = 1, 5 do assert.are.equal(i, pool:invoke("g", "echo", i)) end
    local s = pool:stats()
    assert.are.equal(5, s.created)
    assert.are.equal(5, s.closed)
    assert.are.equal(0, s.noncore)
    local futs = held(pool, gate, 3)
    assert.are.equal(3, pool:stats().noncore)
    finish(gate, futs)
    s = pool:stats()
    assert.are.equal(0, s.noncore)
    assert.are.equal(8, s.closed)
    pool:close()
  end)

  it("unbounded pool (core = 0, max_noncore = math.huge, idle_timeout > 0): grows, reuses idle states", function()
    local pool = pool_with { core = 0, max_noncore = math.huge, idle_timeout = 60 }
    local futs = held(pool, gate, 4)
    local s = pool:stats()
    assert.are.equal(4, s.noncore)
    assert.are.equal(4, s.busy)
    finish(gate, futs)
    for i = 1, 10 do pool:invoke("g", "echo", i) end
    s = pool:stats()
    assert.are.equal(4, s.created) -- sequential calls reuse idle states
    assert.are.equal(4, s.idle)
    pool:close()
  end)

  it("fixed core + unlimited non-core (core = N, max_noncore = math.huge): non-core states beyond N", function()
    local pool = pool_with { core = 2, max_noncore = math.huge }
    local futs = held(pool, gate, 5)
    local s = pool:stats()
    assert.are.equal(2, s.core)
    assert.are.equal(3, s.noncore)
    assert.are.equal(0, s.waiting)
    finish(gate, futs)
    pool:close()
  end)

  it("fixed core + blocking (core = N, max_noncore = 0, blocking = true): the N+1th call waits", function()
    local pool = pool_with { core = 2, max_noncore = 0, blocking = true }
    local futs = held(pool, gate, 2)
    local extra = pool:submit("g", "echo", "waited")
    local s = pool:stats()
    assert.are.equal(1, s.waiting)
    assert.are.equal(0, s.noncore)
    assert.is_false(extra:ready())
    gate:release(1) -- one of the two held calls ends; its state takes the waiting call
    assert.are.equal("waited", extra:wait(10))
    gate:release()
    assert.are.equal(1, futs[1]:wait(10))
    assert.are.equal(2, futs[2]:wait(10))
    assert.are.equal(0, pool:stats().waiting)
    pool:close()
  end)

  it("core + max non-core + blocking (core = N, max_noncore = M): N+M run, then calls wait", function()
    local pool = pool_with { core = 1, max_noncore = 2, blocking = true, idle_timeout = 60 }
    local futs = held(pool, gate, 3)
    local s = pool:stats()
    assert.are.equal(1, s.core)
    assert.are.equal(2, s.noncore)
    local extra = pool:submit("g", "echo", "queued")
    assert.are.equal(1, pool:stats().waiting)
    assert.are.equal(2, pool:stats().noncore)
    finish(gate, futs)
    assert.are.equal("queued", extra:wait(10))
    pool:close()
  end)

  it("non-blocking (blocking = false): fails at once when exhausted, counted as rejected", function()
    local pool = pool_with { core = 1, max_noncore = 1, blocking = false }
    local futs = held(pool, gate, 2)
    local t0 = vmpool.clock()
    local ok, err = pcall(pool.invoke, pool, "g", "echo", 1)
    assert.is_false(ok)
    assert.matches("^vmpool: pool exhausted: all 2 states are busy and blocking = false", err)
    ok, err = pcall(pool.submit, pool, "g", "echo", 1)
    assert.is_false(ok)
    assert.matches("^vmpool: pool exhausted", err)
    assert.is_true(vmpool.clock() - t0 < 1)
    assert.are.equal(2, pool:stats().rejected)
    finish(gate, futs)
    assert.are.equal(3, pool:invoke("g", "echo", 3))
    pool:close()
  end)

  it("acquire_timeout: a blocked caller gives up with a timeout error", function()
    local pool = pool_with { core = 1, acquire_timeout = 0.1 }
    local futs = held(pool, gate, 1)
    local t0 = vmpool.clock()
    local ok, err = pcall(pool.invoke, pool, "g", "echo", 1)
    local waited = vmpool.clock() - t0
    assert.is_false(ok)
    assert.matches("^vmpool: timed out after 0.1s waiting for a free state", err)
    assert.is_true(waited >= 0.1, "waited " .. waited)
    -- a future times out on its own too (the idle check expires it; nobody needs to wait on it)
    local fut = pool:submit("g", "echo", 2)
    assert.is_truthy(Gate.eventually(function() return fut:ready() end))
    ok, err = pcall(fut.wait, fut)
    assert.is_false(ok)
    assert.matches("^vmpool: timed out after 0.1s waiting for a free state", err)
    local s = pool:stats()
    assert.are.equal(2, s.timeouts)
    assert.are.equal(0, s.waiting)
    finish(gate, futs)
    pool:close()
  end)

  it("max_waiting: callers beyond it are rejected with 'queue full'", function()
    local pool = pool_with { core = 1, max_waiting = 2 }
    local futs = held(pool, gate, 1)
    local q1 = pool:submit("g", "echo", "a")
    local q2 = pool:submit("g", "echo", "b")
    local ok, err = pcall(pool.submit, pool, "g", "echo", "c")
    assert.is_false(ok)
    assert.matches("^vmpool: queue full: 2 callers are already waiting", err)
    assert.are.equal(1, pool:stats().rejected)
    finish(gate, futs)
    assert.are.equal("a", q1:wait(10))
    assert.are.equal("b", q2:wait(10))
    pool:close()
  end)

  it("idle check: non-core states idle past idle_timeout are closed without further calls", function()
    local pool = pool_with { core = 1, max_noncore = 3, idle_timeout = 0.05 }
    local futs = held(pool, gate, 4)
    assert.are.equal(3, pool:stats().noncore)
    finish(gate, futs)
    assert.is_truthy(Gate.eventually(function() return pool:stats().noncore == 0 end))
    local s = pool:stats()
    assert.are.equal(1, s.core)
    assert.are.equal(1, s.idle)
    assert.are.equal(3, s.closed)
    pool:close()
  end)

  it("core states are never closed by the idle check", function()
    local pool = pool_with { core = 2, idle_timeout = 0 }
    for i = 1, 3 do pool:invoke("g", "echo", i) end
    local s = pool:stats()
    assert.are.equal(2, s.core)
    assert.are.equal(0, s.closed)
    pool:close()
  end)
end)
