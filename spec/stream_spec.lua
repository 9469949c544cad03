--- pool:stream: a state's top-level coroutine.yield feeds a generic for in the host. A stream that
-- is not ended would keep the pool's only state forever, so "the call was cancelled" is checked by
-- the next call getting that state (bounded by a timeout), never by sleeping.
local vmpool = require "vmpool"

local CHUNK = [[
local vmpool = require "vmpool"
function count(n) for i = 1, n do coroutine.yield(i, i * i, { i = i }) end return "not an item" end
function inner()
  local co = coroutine.wrap(function() coroutine.yield("inner's own") return "inner done" end)
  local a = co()
  coroutine.yield(a)
  coroutine.yield(co())
end
function fails(n) for i = 1, n do coroutine.yield(i) end error("boom at " .. n) end
function forever() local i = 0 while true do i = i + 1 coroutine.yield(i) end end
function counted(n)
  local d = vmpool.shared("stream-spec")
  for i = 1, n do
    d:set("produced", i)
    coroutine.yield(i)
  end
end
function nil_item() coroutine.yield(nil, 1) end
function functions(n)
  for i = 1, n do coroutine.yield(function(x) return x + i end, { f = function() return i end }) end
end
function plain() return "no stream" end
function yield_outside() return pcall(coroutine.yield, 1) end
]]

describe("pool:stream", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 1 }
    pool:compile("s", CHUNK)
  end)
  teardown(function() pool:close() end)

  -- the pool's one state is free again: the stream's call ended
  local function state_is_free()
    local fut = pool:submit("s", "plain")
    assert.are.equal("no stream", fut:wait(10))
  end

  it("gives the items a state's function yields at its top level, in order, with all their values", function()
    local got = {}
    for i, sq, t in pool:stream("s", "count", 5) do got[#got + 1] = { i, sq, t.i } end
    assert.are.same({ { 1, 1, 1 }, { 2, 4, 2 }, { 3, 9, 3 }, { 4, 16, 4 }, { 5, 25, 5 } }, got)
  end)

  it("streams a Lua function sent as the callee, with its upvalues", function()
    local step = 3
    local got = {}
    for v in pool:stream(function(n) for i = 1, n do coroutine.yield(i * step) end end, 4) do
      got[#got + 1] = v
    end
    assert.are.same({ 3, 6, 9, 12 }, got)
    state_is_free()
  end)

  it("ends when the function returns, whatever it returns", function()
    local n = 0
    for _ in pool:stream("s", "count", 0) do n = n + 1 end
    assert.are.equal(0, n)
  end)

  it("gives items holding functions, as a call's results carry them", function()
    local got = {}
    for f, t in pool:stream("s", "functions", 3) do got[#got + 1] = f(10) + t.f() end
    assert.are.same({ 12, 14, 16 }, got)
  end)

  it("leaves the function's own coroutines to it", function()
    local got = {}
    for v in pool:stream("s", "inner") do got[#got + 1] = v end
    assert.are.same({ "inner's own", "inner done" }, got)
  end)

  it("raises the state's error with its traceback after the items before it", function()
    local got = {}
    local ok, err = pcall(function()
      for v in pool:stream("s", "fails", 3) do got[#got + 1] = v end
    end)
    assert.is_false(ok)
    assert.are.same({ 1, 2, 3 }, got)
    assert.matches("^vmpool: error in s:fails: s:%d+: boom at 3\nstack traceback:", err)
    state_is_free()
  end)

  it("raises the state's error in a coroutine of vmpool.run too, after its items", function()
    local got = {}
    local ok, err = pcall(vmpool.run, function()
      for v in pool:stream("s", "fails", 2) do got[#got + 1] = v end
    end)
    assert.is_false(ok)
    assert.are.same({ 1, 2 }, got)
    assert.matches("boom at 2", err)
    state_is_free()
  end)

  it("makes the state wait while its buffer is full (backpressure)", function()
    local d = vmpool.shared("stream-spec")
    local consumed = 0
    for i in pool:stream("s", "counted", 1000) do
      consumed = consumed + 1
      assert.are.equal(consumed, i)
      -- 64 buffered, one being pushed, one in hand
      assert.is_true(d:get("produced") <= consumed + 66, "produced " .. d:get("produced") .. " at " .. consumed)
    end
    assert.are.equal(1000, consumed)
  end)

  it("cancels the call when the loop is left with break", function()
    local last
    for i in pool:stream("s", "forever") do
      last = i
      if i == 100 then break end
    end
    assert.are.equal(100, last)
    collectgarbage() collectgarbage() -- Lua 5.1 and LuaJIT: collection closes the stream
    state_is_free()
  end)

  it("cancels the call on stream:close(), after which the iterator ends", function()
    local s = pool:stream("s", "forever")
    assert.are.same({ 1, 2 }, { s(), s() })
    s:close()
    assert.is_nil(s())
    s:close() -- idempotent
    state_is_free()
  end)

  it("cancels the call when the stream is collected", function()
    do
      local s = pool:stream("s", "forever")
      assert.are.equal(1, s())
    end
    collectgarbage() collectgarbage()
    state_is_free()
  end)

  it("counts a call whose consumer ended the stream as cancelled in stats(), not as failed", function()
    -- break (the state waits on a full buffer), stream:close(), collection: each is one cancel
    local function ended_early(how)
      local before = pool:stats()
      if how == "break" then
        for i in pool:stream("s", "forever") do if i == 3 then break end end
        collectgarbage() collectgarbage() -- Lua 5.1 and LuaJIT: collection closes the stream
      elseif how == "close" then
        local s = pool:stream("s", "forever")
        s()
        s:close()
      else
        do
          local s = pool:stream("s", "forever")
          s()
        end
        collectgarbage() collectgarbage()
      end
      state_is_free()
      local after = pool:stats()
      assert.are.same({ cancelled = 1, errors = 0, succeeded = 1 }, {
        cancelled = after.cancelled - before.cancelled,
        errors = after.errors - before.errors,
        succeeded = after.succeeded - before.succeeded, -- state_is_free's call
      }, how)
    end
    for _, how in ipairs { "break", "close", "collected" } do ended_early(how) end
  end)

  it("lets pool:close() return while a stream nobody reads is still referenced, keeping its items", function()
    -- Lua 5.1 to 5.3 and LuaJIT: after break, the stream lives on until it is collected
    local own = vmpool.new { core = 1 }
    own:compile("s", CHUNK)
    local s = own:stream("s", "forever")
    assert.are.equal(1, s())
    own:close() -- the state waits for room for item 66; nobody can read while close runs
    local got = 1
    local ok, err = pcall(function() for i in s do got = i end end)
    assert.is_true(got >= 65, "items kept: " .. got)
    assert.is_false(ok)
    assert.matches("the pool was closed while it ran", err)
  end)

  it("yields the coroutine of vmpool.run while it waits for items", function()
    local ticks = 0
    local sum = vmpool.run(function()
      vmpool.spawn(function() for _ = 1, 10 do ticks = ticks + 1 coroutine.yield() end end)
      local sum = 0
      for i in pool:stream("s", "count", 500) do sum = sum + i end
      return sum
    end)
    assert.are.equal(500 * 501 / 2, sum)
    assert.are.equal(10, ticks)
  end)

  it("fails an item whose first value is nil in the state, and a plain call's yield stays a yield", function()
    local ok, err = pcall(function() for _ in pool:stream("s", "nil_item") do end end)
    assert.is_false(ok)
    assert.matches("coroutine.yield in a stream's function needs an item whose first value is not nil", err)
    local caught, why = pool:invoke("s", "yield_outside")
    assert.is_false(caught)
    assert.matches("yield", why)
  end)

  it("raises vmpool: errors for bad arguments, as pool:invoke does", function()
    assert.matches("^vmpool: ", select(2, pcall(pool.stream, pool, "nope", "count")))
    assert.matches("^vmpool: bad argument #2 to 'stream'", select(2, pcall(pool.stream, pool, "s", 3)))
    assert.matches("^vmpool: bad argument #1 to 'stream': expected a pool",
      select(2, pcall(pool.stream, {}, "s", "count")))
    state_is_free()
  end)
end)
