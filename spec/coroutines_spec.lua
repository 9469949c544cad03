-- Coroutine-aware calls: pool:co_invoke, vmpool.run and vmpool.spawn, and other schedulers
-- (cqueues) waiting on a future's file descriptor.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"

local CHUNK = [[
function helloLua(n) return n, 100000 end
return { gate = gate, echo = function(...) return ... end, fail = function(m) error(m) end }
]]

describe("pool:co_invoke", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("c", CHUNK)
  end)
  teardown(function() pool:close() end)

  it("behaves like invoke outside a coroutine", function()
    local a, b = pool:co_invoke("c", "helloLua", 5)
    assert.are.equal(5, a)
    assert.are.equal(100000, b)
  end)

  it("behaves like invoke in a coroutine no scheduler drives", function()
    local co = coroutine.wrap(function() return pool:co_invoke("c", "echo", "plain") end)
    assert.are.equal("plain", co())
  end)

  it("raises the child's error in the calling coroutine", function()
    local ok, err = vmpool.run(function()
      return pcall(pool.co_invoke, pool, "c", "fail", "oops")
    end)
    if ok ~= nil then -- 5.1 cannot yield across pcall: then the error is about that
      assert.is_false(ok)
      assert.is_string(err)
    end
  end)
end)

describe("vmpool.run", function()
  it("returns fn's results after every spawned coroutine finished", function()
    local pool = vmpool.new { core = 2 }
    pool:compile("c", CHUNK)
    local done = 0
    local a, b = vmpool.run(function(x)
      for i = 1, 10 do
        vmpool.spawn(function()
          local n = pool:co_invoke("c", "helloLua", i)
          assert(n == i)
          done = done + 1
        end)
      end
      return x, "end"
    end, "start")
    assert.are.equal("start", a)
    assert.are.equal("end", b)
    assert.are.equal(10, done)
    pool:close()
  end)

  it("keeps many calls in flight while each coroutine waits", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 3, init = Gate.CHILD }
    pool:compile("c", CHUNK)
    local results = {}
    vmpool.run(function()
      for i = 1, 3 do
        vmpool.spawn(function() results[i] = pool:co_invoke("c", "gate", gate.port, i) end)
      end
      -- this coroutine yields to let the three start; they are all inside the pool at once
      vmpool.spawn(function()
        gate:arrivals(3)
        assert.are.equal(3, pool:stats().busy)
        gate:release()
      end)
    end)
    assert.are.same({ 1, 2, 3 }, results)
    gate:close()
    pool:close()
  end)

  it("runs 10,000 coroutines against a small blocking pool", function()
    local pool = vmpool.new { core = 2, blocking = true }
    pool:compile("c", CHUNK)
    local sum, count = 0, 0
    vmpool.run(function()
      for i = 1, 10000 do
        vmpool.spawn(function()
          local n = pool:co_invoke("c", "helloLua", i)
          sum = sum + n
          count = count + 1
        end)
      end
    end)
    assert.are.equal(10000, count)
    assert.are.equal(10000 * 10001 / 2, sum)
    local s = pool:stats()
    assert.are.equal(10000, s.succeeded)
    assert.are.equal(0, s.busy)
    assert.are.equal(0, s.waiting)
    pool:close()
  end)

  it("runs 10,000 coroutines against a non-blocking pool: every call succeeds or is rejected", function()
    local pool = vmpool.new { core = 2, max_noncore = 2, blocking = false }
    pool:compile("c", CHUNK)
    local ok_count, rejected = 0, 0
    vmpool.run(function()
      for i = 1, 10000 do
        vmpool.spawn(function()
          local ok, err = pcall(pool.submit, pool, "c", "helloLua", i)
          if ok then
            local fut = err
            assert(fut:wait() == i)
            ok_count = ok_count + 1
          else
            assert(err:match("^vmpool: pool exhausted"), err)
            rejected = rejected + 1
          end
        end)
      end
    end)
    assert.are.equal(10000, ok_count + rejected)
    local s = pool:stats()
    assert.are.equal(ok_count, s.succeeded)
    assert.are.equal(rejected, s.rejected)
    pool:close()
  end)

  it("submits the calls of the coroutines one wake-up resumes together, each with its own results", function()
    local pool = vmpool.new { core = 2 }
    pool:compile("c", CHUNK)
    local sums = {}
    vmpool.run(function()
      for i = 1, 200 do
        vmpool.spawn(function()
          local sum = 0
          for j = 1, 10 do sum = sum + pool:co_invoke("c", "echo", i * 100 + j) end
          sums[i] = sum
        end)
      end
    end)
    for i = 1, 200 do assert.are.equal(i * 1000 + 55, sums[i]) end
    assert.are.equal(2000, pool:stats().succeeded)
    pool:close()
  end)

  it("raises a call of a batch that the pool refuses (blocking = false) in the coroutine that made it", function()
    local gate = Gate.new()
    local strict = vmpool.new { core = 2, max_noncore = 0, blocking = false, init = Gate.CHILD }
    strict:compile("c", CHUNK)
    local held, second_ran
    local ok, err = pcall(vmpool.run, function()
      vmpool.spawn(function()
        strict:co_invoke("c", "gate", gate.port, "a")
        -- resumed in one batch with b's coroutine: this call waits for the batch's end, when
        -- the pool refuses it, since the gates hold both states
        strict:co_invoke("c", "echo", "a2")
        second_ran = true
      end)
      vmpool.spawn(function() strict:co_invoke("c", "gate", gate.port, "b") end)
      vmpool.spawn(function()
        gate:arrivals(2)
        gate:release()
        -- both finish before the driver waits again, so that one wake-up takes both
        assert.is_truthy(Gate.eventually(function() return strict:stats().succeeded == 2 end))
        held = { strict:submit("c", "gate", gate.port, 1), strict:submit("c", "gate", gate.port, 2) }
        gate:arrivals(2)
      end)
    end)
    assert.is_false(ok)
    assert.matches("vmpool: pool exhausted", err)
    assert.is_nil(second_ran)
    gate:release()
    assert.are.equal(1, held[1]:wait())
    assert.are.equal(2, held[2]:wait())
    gate:close()
    strict:close()
  end)

  it("still runs the calls of a batch when a coroutine resumed after them in it fails", function()
    local gate_a, gate_b = Gate.new(), Gate.new()
    local batched = vmpool.new { core = 2, init = Gate.CHILD }
    batched:compile("c", CHUNK)
    local ok, err = pcall(vmpool.run, function()
      vmpool.spawn(function()
        batched:co_invoke("c", "gate", gate_a.port, "a")
        batched:co_invoke("c", "echo", "a2") -- filed in the batch, which b's failure ends
      end)
      vmpool.spawn(function()
        batched:co_invoke("c", "gate", gate_b.port, "b")
        error("b fails")
      end)
      vmpool.spawn(function()
        -- a's call finishes first, then b's, before the driver waits again: one wake-up
        -- resumes a, then b
        gate_a:arrivals(1)
        gate_b:arrivals(1)
        gate_a:release()
        assert.is_truthy(Gate.eventually(function() return batched:stats().succeeded == 1 end))
        gate_b:release()
        assert.is_truthy(Gate.eventually(function() return batched:stats().succeeded == 2 end))
      end)
    end)
    assert.is_false(ok)
    assert.matches("b fails", err)
    assert.is_truthy(Gate.eventually(function() return batched:stats().succeeded == 3 end),
      "a's second call ran")
    gate_a:close()
    gate_b:close()
    batched:close()
  end)

  it("propagates a failing coroutine's error with its traceback", function()
    local ok, err = pcall(vmpool.run, function()
      vmpool.spawn(function() error("spawned failure") end)
    end)
    assert.is_false(ok)
    assert.matches("^vmpool: a coroutine in vmpool.run failed: .*spawned failure", err)
  end)

  it("survives a waiting coroutine resumed by other code: each call runs once, every result is right", function()
    -- Y resumes X while X waits for a call (before or after that call finished, depending on
    -- timing): X's co_invoke then waits for its call itself, the driver never wakes anybody
    -- with the old completion, and vmpool.run ends once every coroutine ended, including X
    -- ending under Y's resume
    local counting, d = require("spec.support.counting")("vmpool-spec-run-early")
    for _ = 1, 20 do
      d:flush_all()
      local x, x_got, y_got
      vmpool.run(function()
        vmpool.spawn(function()
          x = coroutine.running()
          assert.are.equal(1, counting:co_invoke("c", "echo", 1))
          x_got = counting:co_invoke("c", "count", "x")
        end)
        vmpool.spawn(function()
          assert.are.equal(2, counting:co_invoke("c", "echo", 2))
          if coroutine.status(x) == "suspended" then
            assert(coroutine.resume(x))
          end
          y_got = counting:co_invoke("c", "count", "y")
        end)
      end)
      assert.are.equal(1, y_got)
      assert.are.equal(1, d:get("y"))
      assert.are.equal(1, x_got)
      assert.are.equal(1, d:get("x"))
    end
    counting:close()
  end)

  it("spawn outside run and nested run are errors", function()
    local ok, err = pcall(vmpool.spawn, function() end)
    assert.is_false(ok)
    assert.matches("^vmpool: vmpool.spawn must be called inside vmpool.run", err)
    vmpool.run(function()
      local ok2, err2 = pcall(vmpool.run, function() end)
      assert(not ok2 and err2:match("^vmpool: vmpool.run cannot run inside vmpool.run"), err2)
    end)
    ok, err = pcall(vmpool.run, 42)
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #1 to 'run'", err)
  end)
end)

describe("futures in other event loops", function()
  local has_cqueues, cqueues = pcall(require, "cqueues")

  it("expose a pollable file descriptor", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", CHUNK)
    local fut = pool:submit("c", "echo", 1)
    assert.is_number(fut:pollfd())
    assert.are.equal("r", fut:events())
    assert.is_nil(fut:timeout())
    assert.are.equal(1, fut:wait())
    pool:close()
  end)

  if has_cqueues then
    it("drive co_invoke from cqueues through vmpool.awaiter", function()
      local gate = Gate.new()
      local pool = vmpool.new { core = 2, init = Gate.CHILD }
      pool:compile("c", CHUNK)
      vmpool.awaiter = function(fut)
        while not fut:ready() do cqueues.poll(fut) end
      end
      local loop = cqueues.new()
      local results, ticks = {}, 0
      for i = 1, 2 do
        loop:wrap(function() results[i] = pool:co_invoke("c", "gate", gate.port, i * 10) end)
      end
      -- another cqueues coroutine keeps running while both calls wait in the pool
      loop:wrap(function()
        -- cqueues may run this one first: let the two calls be submitted before blocking on them
        while pool:stats().busy < 2 do cqueues.sleep(0) end
        gate:arrivals(2)
        for _ = 1, 5 do ticks = ticks + 1 cqueues.sleep(0) end
        gate:release()
      end)
      assert(loop:loop(10))
      vmpool.awaiter = nil
      assert.are.same({ 10, 20 }, results)
      assert.are.equal(5, ticks)
      gate:close()
      pool:close()
    end)
  end
end)

-- Where a coroutine cannot yield, co_invoke under vmpool.run makes the call as a blocking invoke:
-- nothing is submitted that nobody waits for, no dead coroutine is resumed, every other coroutine
-- gets its result.
describe("co_invoke where the coroutine cannot yield", function()
  local pool
  before_each(function()
    pool = vmpool.new { core = 2 }
    pool:compile("c", "return { id = function(x) return x end }")
  end)
  after_each(function() pool:close() end)

  local function run_with(blocked)
    local others = {}
    local got = vmpool.run(function()
      for i = 1, 20 do
        vmpool.spawn(function() others[i] = pool:co_invoke("c", "id", i) end)
      end
      return blocked()
    end)
    for i = 1, 20 do assert.are.equal(i, others[i]) end
    local s = pool:stats()
    assert.are.equal(s.invokes, s.succeeded) -- nothing orphaned, nothing failed
    assert.are.equal(0, s.busy)
    return got
  end

  it("in a table.sort comparator: each call runs as a blocking call", function()
    local got = run_with(function()
      local t = { 3, 1, 2 }
      table.sort(t, function(a, b) return pool:co_invoke("c", "id", a) < pool:co_invoke("c", "id", b) end)
      return table.concat(t, ",")
    end)
    assert.are.equal("1,2,3", got)
  end)

  it("in a string.gsub callback and (on Lua 5.1) inside pcall: blocking calls too", function()
    local got = run_with(function()
      local s = ("abc"):gsub("%a", function(c) return pool:co_invoke("c", "id", c:upper()) end)
      local ok, v = pcall(pool.co_invoke, pool, "c", "id", "p")
      assert(ok, v)
      return s .. v
    end)
    assert.are.equal("ABCp", got)
  end)
end)
