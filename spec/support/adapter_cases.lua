-- Cases every event-loop adapter's spec runs (spec/luv_spec.lua, spec/cqueues_spec.lua), each
-- given the adapter's way to start a coroutine and to run its loop to the end:
--   Cases.co_map(it, { spawn = function(fn) ... end, run = function() ... end })
-- States are held with gates (spec/support/gate.lua), never with sleeps; every wait is bounded.
local assert = require "luassert"
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"

local Cases = {}

local CHUNK = [[
hold = hold -- init's helper, a function of this chunk
function held(port, x) if x == 1 then hold(port, 5) end return x end
function square(x) return x * x end
function echo(...) return ... end
function fail_at(x, bad) if x == bad then error("item " .. x .. " is bad") end return x end
]]

local function range(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return t
end

--- `stats` (the adapter's stats function) has every key the adapters share, as a number.
function Cases.stats(it, stats)
  it("stats() has the keys every adapter's stats() has, each a number", function()
    local s = stats()
    for _, key in ipairs(require "spec.support.adapter_stats") do
      assert.is_number(s[key], key)
    end
  end)
end

--- pool:co_map under the adapter: it yields while the batches run, and gives map's results and
--- errors.
function Cases.co_map(it, loop)
  local function with_pool(body)
    local pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("c", CHUNK)
    local ok, err = pcall(body, pool)
    pool:close()
    assert(ok, err)
  end

  it("pool:co_map yields while the batches run, so the loop's other coroutines go on", function()
    with_pool(function(pool)
      local gate = Gate.new()
      local items = {}
      for i = 1, 20 do items[i] = { gate.port, i } end
      local mapped, map_done, released_during_map
      loop.spawn(function()
        mapped = pool:co_map("c", "held", items, { unpack = true })
        map_done = true
      end)
      -- item 1 holds its state (for 5 s at most) until this coroutine lets it go: it runs while
      -- the map waits only if co_map yielded
      loop.spawn(function()
        -- a wait first, so that the map has started whichever coroutine the loop runs first
        pool:co_invoke("c", "echo")
        gate:arrivals(1)
        released_during_map = not map_done
        gate:release()
      end)
      loop.run()
      gate:close()
      assert.are.same(range(20), mapped)
      assert.is_true(released_during_map, "another coroutine ran while co_map waited")
    end)
  end)

  it("pool:co_map runs several maps at once beside co_invoke calls, each with its own results", function()
    with_pool(function(pool)
      local a, b, c
      loop.spawn(function() a = pool:co_map("c", "square", range(3000)) end)
      loop.spawn(function() b = pool:co_map("c", "echo", range(2000), { batch = 7 }) end)
      loop.spawn(function() c = pool:co_invoke("c", "echo", "alongside") end)
      loop.run()
      local squares = {}
      for i = 1, 3000 do squares[i] = i * i end
      assert.are.same(squares, a)
      assert.are.same(range(2000), b)
      assert.are.equal("alongside", c)
      assert.are.equal(0, pool:stats().busy)
    end)
  end)

  it("pool:co_map raises an item's error in its coroutine, or collects the errors", function()
    with_pool(function(pool)
      local items = {}
      for i = 1, 300 do items[i] = { i, 250 } end
      local ok, err, results, errors
      loop.spawn(function()
        results, errors = pool:co_map("c", "fail_at", items, { unpack = true, errors = "collect" })
        -- pcall around a yield: Lua 5.1 blocks there like map, the others yield
        ok, err = pcall(pool.co_map, pool, "c", "fail_at", items, { unpack = true })
      end)
      loop.run()
      assert.are.equal(249, results[249])
      assert.is_nil(results[250])
      assert.are.equal(300, results[300])
      assert.matches("item 250 is bad", errors[250])
      assert.is_false(ok)
      assert.matches("^vmpool: map item 250 of 'c:fail_at' failed: c:%d+: item 250 is bad", err)
      -- a cancelled batch already posted to a state keeps it busy until its worker skips it
      assert.is_true(Gate.eventually(function() return pool:stats().busy == 0 end))
    end)
  end)
end

return Cases
