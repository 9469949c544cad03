-- pool:map and pool:co_map, in the order of the README's section: results in list order, batches
-- over several states, first results only, unpack, errors that name their item (stop or
-- collect), empty and huge lists, bad arguments, and a map that stops leaving the pool idle.
-- States are held with gates (spec/support/gate.lua), never with sleeps.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"
local Near = require "spec.support.near_deadline"

local CHUNK = [[
local counter = require("vmpool").shared("map_spec")
local socket = require "socket"
function square(x) return x * x end
function add(a, b) return a + b end
function echo(...) return ... end
function two(x) return x, "dropped" end
function odd_only(x) if x % 2 == 1 then return x end end
function gated_id(port) gate(port) return STATE_ID end
function fail_at(x, bad) if x == bad then error("item " .. x .. " is bad") end return x end
function fail_every(x, n) if x % n == 0 then error("multiple of " .. n) end return -x end
function counted(x, bad)
  counter:incr("ran", 1, 0)
  if x == bad then error("stop here") end
  return x
end
function gated(port, x) if x == 1 then gate(port) end return x end
function spin_at(x, bad) if x == bad then while true do end end return x end
function busy(seconds, x)
  local deadline = socket.gettime() + seconds
  while socket.gettime() < deadline do end
  return x
end
gate = gate
]]

local unpack = table.unpack or unpack -- luacheck: ignore 113
-- the table stays alive, so no other state's table can have its address
local INIT = Gate.CHILD .. "\nSTATE_KEY = {} STATE_ID = tostring(STATE_KEY)"

local function check_idle(pool)
  -- a cancelled batch that was already posted to a state keeps it busy until its worker skips it
  Gate.eventually(function() return pool:stats().busy == 0 end)
  local s = pool:stats()
  assert.are.equal(0, s.busy)
  assert.are.equal(0, s.waiting)
  assert.are.equal(s.core + s.noncore, s.created - s.closed)
  assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
  return s
end

local function range(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return t
end

describe("pool:map", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 2, init = INIT }
    pool:compile("c", CHUNK)
  end)
  teardown(function() pool:close() end)

  it("calls fn once per item and returns the results in list order", function()
    assert.are.same({ 1, 4, 9, 16, 25 }, pool:map("c", "square", { 1, 2, 3, 4, 5 }))
  end)

  it("spreads the batches over several states, which run them at once", function()
    local gate = Gate.new()
    local ids
    -- each item holds its state at the gate: both arrive only if two states run them together
    vmpool.run(function()
      vmpool.spawn(function() ids = pool:co_map("c", "gated_id", { gate.port, gate.port }, { batch = 1 }) end)
      vmpool.spawn(function()
        gate:arrivals(2)
        gate:release()
      end)
    end)
    gate:close()
    assert.are_not.equal(ids[1], ids[2])
    check_idle(pool)
  end)

  it("cuts batches of a share of the items left, at most 1,024", function()
    -- the rule of the README: ceil(left / (2 x states)) items, at most 1,024
    local function batches(n, states)
      local count = 0
      while n > 0 do
        n = n - math.min(math.ceil(n / (2 * states)), 1024)
        count = count + 1
      end
      return count
    end
    assert.are.equal(13, batches(64, 2)) -- 16, 12, 9, 7, 5, 4, 3, 2, 2, 1, 1, 1, 1
    for _, n in ipairs { 1, 64, 40000 } do
      local before = pool:stats().invokes
      assert.are.same(range(n), pool:map("c", "echo", range(n)))
      assert.are.equal(batches(n, 2), pool:stats().invokes - before, n .. " items")
    end
    check_idle(pool)
  end)

  it("makes batches of the size the batch option gives", function()
    local before = pool:stats().invokes
    assert.are.same(range(10), pool:map("c", "echo", range(10), { batch = 3 }))
    assert.are.equal(4, pool:stats().invokes - before)
  end)

  it("keeps each call's first result only; nil results leave holes", function()
    assert.are.same({ 1, 2, 3 }, pool:map("c", "two", { 1, 2, 3 }))
    local r = pool:map("c", "odd_only", range(5))
    assert.are.same({ [1] = 1, [3] = 3, [5] = 5 }, r)
    assert.is_nil(r[2])
  end)

  it("passes each item as the argument, tables included", function()
    local r = pool:map("c", "echo", { { a = 1 }, "s", true })
    assert.are.same({ { a = 1 }, "s", true }, r)
  end)

  it("with unpack = true passes the elements of each item as the arguments", function()
    assert.are.same({ 3, 7, 11 }, pool:map("c", "add", { { 1, 2 }, { 3, 4 }, { 5, 6 } }, { unpack = true }))
    assert.are.same({ 1 }, pool:map("c", "fail_at", { { 1, 2 } }, { unpack = true }))
  end)

  it("returns an empty table for an empty list, without calling anything", function()
    local before = pool:stats().invokes
    assert.are.same({}, pool:map("c", "square", {}))
    local r, errors = pool:map("c", "square", {}, { errors = "collect" })
    assert.are.same({}, r)
    assert.are.same({}, errors)
    assert.are.equal(before, pool:stats().invokes)
  end)

  it("maps a huge list", function()
    local n = 1000000
    local r = pool:map("c", "square", range(n))
    assert.are.equal(n, #r)
    for _, i in ipairs { 1, 2, 1023, 1024, 1025, 500000, n - 1, n } do
      assert.are.equal(i * i, r[i])
    end
    check_idle(pool)
  end)

  it("raises an error that names the failing item and keeps the child's traceback", function()
    local ok, err = pcall(pool.map, pool, "c", "fail_at", (function()
      local t = {}
      for i = 1, 100 do t[i] = { i, 17 } end
      return t
    end)(), { unpack = true })
    assert.is_false(ok)
    assert.matches("^vmpool: map item 17 of 'c:fail_at' failed: c:%d+: item 17 is bad", err)
    assert.matches("stack traceback:", err)
    check_idle(pool)
  end)

  it("with errors = 'collect' returns the results and the errors by index", function()
    local items = {}
    for i = 1, 50 do items[i] = { i, 7 } end
    local r, errors = pool:map("c", "fail_every", items, { unpack = true, errors = "collect", batch = 10 })
    for i = 1, 50 do
      if i % 7 == 0 then
        assert.is_nil(r[i])
        assert.matches("^vmpool: map item " .. i .. " of 'c:fail_every' failed: c:%d+: multiple of 7", errors[i])
      else
        assert.are.equal(-i, r[i])
        assert.is_nil(errors[i])
      end
    end
    check_idle(pool)
  end)

  it("names the item whose value cannot cross, in either mode", function()
    local items = { 1, 2, coroutine.wrap(function() end), 4 }
    local ok, err = pcall(pool.map, pool, "c", "echo", items)
    assert.is_false(ok)
    assert.matches("^vmpool: map item 3 of 'c:echo' failed: cannot pass argument #1 to 'echo': a C function "
      .. "that is not a standard library function", err)
    local r, errors = pool:map("c", "echo", items, { errors = "collect" })
    assert.are.same({ [1] = 1, [2] = 2, [4] = 4 }, r)
    assert.matches("^vmpool: map item 3 of 'c:echo' failed: cannot pass argument #1", errors[3])
    check_idle(pool)
  end)

  it("refuses an item that is not a table of arguments with unpack = true", function()
    local ok, err = pcall(pool.map, pool, "c", "add", { { 1, 2 }, 5 }, { unpack = true })
    assert.is_false(ok)
    assert.matches("^vmpool: map item 2 of 'c:add' failed: bad argument #3 to 'map': item 2 is a number", err)
  end)

  it("raises vmpool: errors for bad arguments", function()
    local cases = {
      { "bad argument #1 to 'map': expected a pool", pool.map, "c", "square", {} },
      { "bad argument #1 to 'map': expected a chunk name", pool.map, pool, 1, "square", {} },
      { "bad argument #2 to 'map': expected a function name", pool.map, pool, "c", false, {} },
      { "bad argument #3 to 'map': expected a list of items %(table%), got string",
        pool.map, pool, "c", "square", "x" },
      { "bad argument #4 to 'map': expected a table of options or nil", pool.map, pool, "c", "square", {}, 5 },
      { "bad argument #4 to 'map': unknown option 'batches' %(known options: batch, errors, unpack%)",
        pool.map, pool, "c", "square", {}, { batches = 2 } },
      { "option 'batch' must be a positive integer", pool.map, pool, "c", "square", {}, { batch = 0.5 } },
      { "option 'errors' must be \"stop\" or \"collect\" %(got 'ignore'%)",
        pool.map, pool, "c", "square", {}, { errors = "ignore" } },
      { "option 'unpack' must be a boolean", pool.map, pool, "c", "square", {}, { unpack = 1 } },
      { "unknown chunk 'nope'", pool.map, pool, "nope", "square", { 1 } },
      { "chunk 'c' has no function 'nope'", pool.map, pool, "c", "nope", { 1, 2, 3 } },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(case[2], unpack(case, 3))
      assert.is_false(ok)
      assert.matches("^vmpool: ", err)
      assert.matches(case[1], err)
    end
    check_idle(pool)
  end)
end)

describe("a map that stops", function()
  it("submits nothing after the failure and leaves nothing running when it returns", function()
    local pool = vmpool.new { core = 1, init = INIT }
    pool:compile("c", CHUNK)
    local counter = vmpool.shared("map_spec")
    counter:set("ran", 0)
    local items = {}
    for i = 1, 100 do items[i] = { i, 5 } end
    local before = pool:stats()
    -- one state, two batches in flight: batch 1 fails at item 5 while batch 2 is queued or
    -- running (told to stop after its current item); batch 3 is never made
    local ok, err = pcall(pool.map, pool, "c", "counted", items, { unpack = true, batch = 10 })
    assert.is_false(ok)
    assert.matches("^vmpool: map item 5 of 'c:counted' failed:", err)
    local ran = counter:get("ran")
    assert.is_true(ran >= 5 and ran <= 15, "items run: " .. ran)
    local s = check_idle(pool)
    assert.are.equal(2, s.invokes - before.invokes)
    assert.are.equal(1, s.errors - before.errors)
    assert.are.equal(ran, counter:get("ran"), "an item ran after map returned")
    pool:close()
  end)

  it("at a time_limit replaces the state and the other items keep their results", function()
    local pool = vmpool.new { core = 2, time_limit = 0.5 }
    pool:compile("c", CHUNK)
    local items = {}
    for i = 1, 8 do items[i] = { i, 6 } end
    local r, errors = pool:map("c", "spin_at", items, { unpack = true, errors = "collect", batch = 4 })
    assert.are.same({ 1, 2, 3, 4, 5, nil, 7, 8 }, r)
    assert.matches("^vmpool: map item 6 of 'c:spin_at' failed: time limit exceeded: c:spin_at ran longer than 0.5s",
      errors[6])
    check_idle(pool)
    pool:close()
  end)

  it("gives each item its own deadline and no hook left from the item before", function()
    -- items busy-loop from 0 to twice the limit, so deadlines fire as items end; an item that
    -- succeeds must have started without a hook (the previous item's fired hook is removed, and
    -- its signal, on Lua 5.4 and 5.5, arriving late, finds a new arming)
    local pool = vmpool.new { core = 1, time_limit = Near.LIMIT }
    pool:compile("n", Near.SOURCE)
    local items = Near.durations(150)
    local r, errors = pool:map("n", "near", items, { errors = "collect", batch = 50 })
    local clean = vmpool._limit_hook() ~= "count"
    local succeeded, failed = 0, 0
    for i = 1, #items do
      if errors[i] then
        failed = failed + 1
        assert.matches("time limit exceeded: n:near", errors[i])
      else
        succeeded = succeeded + 1
        assert.are.equal(clean, r[i], "item " .. i)
      end
    end
    assert.is_true(succeeded > 0 and failed > 0, succeeded .. " succeeded, " .. failed .. " failed")
    pool:close()
  end)

  it("fails an item that overran its deadline inside a C function, not the item after it", function()
    -- the mapped function is C itself (socket.sleep: the item is what it runs, not a wait of the
    -- test's), so no Lua instruction runs between its return and the next item's start
    local pool = vmpool.new { core = 1, time_limit = 0.1 }
    pool:compile("c", [=[ return { cwait = require("socket").sleep } ]=])
    for _, list in ipairs { { 0.3 }, { 0.3, 0.01 }, { 0.01, 0.3, 0.01 } } do
      local slow = list[1] == 0.3 and 1 or 2
      local ok, err = pcall(pool.map, pool, "c", "cwait", list)
      assert.is_false(ok, "the map succeeded")
      assert.matches("^vmpool: map item " .. slow .. " of 'c:cwait' failed: time limit exceeded", err)
      local _, errors = pool:map("c", "cwait", list, { errors = "collect" })
      for i = 1, #list do
        assert.are.equal(i == slow, errors[i] ~= nil, "item " .. i .. ": " .. tostring(errors[i]))
      end
    end
    pool:close()
  end)

  it("fails like invoke when no state is free and blocking = false", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 1, blocking = false, init = INIT }
    pool:compile("c", CHUNK)
    local fut = pool:submit("c", "gated", gate.port, 1)
    gate:arrivals(1)
    local ok, err = pcall(pool.map, pool, "c", "square", { 1, 2 })
    assert.is_false(ok)
    assert.matches("^vmpool: pool exhausted", err)
    gate:release()
    assert.are.equal(1, fut:wait())
    -- with the state free again, a map larger than the pool queues nothing and succeeds
    assert.are.same({ 1, 4, 9, 16, 25, 36 }, pool:map("c", "square", range(6), { batch = 1 }))
    check_idle(pool)
    pool:close()
    gate:close()
  end)

  it("is not timed out by its own batches: one queued behind them goes again", function()
    local pool = vmpool.new { core = 1, acquire_timeout = 0.05, init = INIT }
    pool:compile("c", CHUNK)
    local items = {}
    -- each batch holds the only state for 0.2 s or more: the one queued behind it times out
    for i = 1, 3 do items[i] = { 0.2, i } end
    assert.are.same({ 1, 2, 3 }, pool:map("c", "busy", items, { unpack = true, batch = 1 }))
    local s = check_idle(pool)
    assert.is_true(s.timeouts >= 1)
    pool:close()
  end)

  it("times out like invoke when other callers hold every state", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 1, acquire_timeout = 0.05, init = INIT }
    pool:compile("c", CHUNK)
    local held = pool:submit("c", "gated", gate.port, 1)
    gate:arrivals(1)
    local ok, err = pcall(pool.map, pool, "c", "square", { 1, 2, 3 })
    assert.is_false(ok)
    assert.matches("^vmpool: timed out after 0.05s waiting for a free state", err)
    gate:release()
    assert.are.equal(1, held:wait())
    check_idle(pool)
    pool:close()
    gate:close()
  end)

  it("raises pool is closed on a closed pool", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", CHUNK)
    pool:close()
    local ok, err = pcall(pool.map, pool, "c", "square", { 1 })
    assert.is_false(ok)
    assert.matches("^vmpool: pool is closed", err)
  end)
end)

describe("pool:co_map", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 2, init = INIT }
    pool:compile("c", CHUNK)
  end)
  teardown(function() pool:close() end)

  it("behaves like map outside a coroutine", function()
    assert.are.same({ 1, 4, 9 }, pool:co_map("c", "square", { 1, 2, 3 }))
  end)

  it("under vmpool.run yields while the batches run, so other coroutines go on", function()
    local gate = Gate.new()
    local items = {}
    for i = 1, 20 do items[i] = { gate.port, i } end
    local mapped
    vmpool.run(function()
      vmpool.spawn(function()
        mapped = pool:co_map("c", "gated", items, { unpack = true })
      end)
      -- runs only if co_map yielded: item 1 holds its state at the gate until this lets it go
      vmpool.spawn(function()
        gate:arrivals(1)
        gate:release()
      end)
    end)
    assert.are.same(range(20), mapped)
    gate:close()
    check_idle(pool)
  end)

  it("runs several maps at once under vmpool.run, each with its own results", function()
    local a, b
    vmpool.run(function()
      vmpool.spawn(function() a = pool:co_map("c", "square", range(5000)) end)
      vmpool.spawn(function() b = pool:co_map("c", "echo", range(3000)) end)
    end)
    assert.are.equal(5000, #a)
    assert.are.equal(25000000, a[5000])
    assert.are.same(range(3000), b)
    check_idle(pool)
  end)

  it("raises the map's error in its coroutine once nothing of it is in flight", function()
    local items = {}
    for i = 1, 300 do items[i] = { i, 250 } end
    local ok, err
    vmpool.run(function()
      ok, err = pcall(pool.co_map, pool, "c", "fail_at", items, { unpack = true })
    end)
    assert.is_false(ok)
    assert.matches("^vmpool: map item 250 of 'c:fail_at' failed: c:%d+: item 250 is bad", err)
    check_idle(pool)
  end)

  it("collects errors under vmpool.run too", function()
    local items = {}
    for i = 1, 30 do items[i] = { i, 10 } end
    local r, errors
    vmpool.run(function()
      r, errors = pool:co_map("c", "fail_every", items, { unpack = true, errors = "collect" })
    end)
    assert.are.equal(-29, r[29])
    assert.is_nil(r[30])
    assert.matches("multiple of 10", errors[10])
    assert.matches("multiple of 10", errors[20])
    assert.matches("multiple of 10", errors[30])
    check_idle(pool)
  end)

  it("blocks like map where the coroutine cannot yield (a table.sort comparator)", function()
    local r
    vmpool.run(function()
      table.sort({ 2, 1 }, function(a, b)
        r = r or pool:co_map("c", "square", { 1, 2, 3 })
        return a < b
      end)
    end)
    assert.are.same({ 1, 4, 9 }, r)
    check_idle(pool)
  end)

  it("called with a dot raises a vmpool: error", function()
    local ok, err = pcall(pool.co_map, "c", "square", {})
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #1 to 'co_map': expected a pool", err)
  end)
end)
