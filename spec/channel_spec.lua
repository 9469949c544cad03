--- vmpool.channel and vmpool.select: in the host, in pool states, and in coroutines of vmpool.run.
-- Every wait is bounded; a state is known to be in its wait because it says so on another channel
-- first (and a stop that comes before the wait starts ends it the same way).
local vmpool = require "vmpool"

-- A fresh name per test: channels are process-wide and live as long as the process.
local n = 0
local function fresh(options)
  n = n + 1
  return vmpool.channel("spec-" .. n, options), "spec-" .. n
end

local CHUNK = [[
local vmpool = require "vmpool"
local function ch(name) return vmpool.channel(name) end
function push_all(name, ...)
  local c = ch(name)
  for i = 1, select("#", ...) do assert(c:push((select(i, ...)))) end
  return true
end
function pop_n(name, count)
  local c, got = ch(name), {}
  for i = 1, count do got[i] = c:pop() end
  return got
end
function echo_doubles(inp, out, count)
  local i, o = ch(inp), ch(out)
  for _ = 1, count do o:push(i:pop() * 2) end
  return "served"
end
-- says "ready" on `ready`, then waits on `name` (pop, or push of one more message)
function wait_pop(ready, name, timeout)
  ch(ready):push("ready")
  return ch(name):pop(timeout)
end
function wait_push(ready, name, timeout)
  ch(ready):push("ready")
  if timeout then return ch(name):push_timeout(timeout, "late") end
  return ch(name):push("late")
end
function select_two(a, b, timeout)
  local c, v = vmpool.select({ ch(a), ch(b) }, timeout)
  if c then return c:name(), v end
  return c, v
end
-- pops a function and a table holding one, calls them, and sends back a function of its own
function call_popped(name, back)
  local f, t = ch(name):pop(10)
  local step = 10
  ch(back):push(function(x) return x * step end, { g = function() return "from the state" end })
  return f(1), t.g()
end
function try_catch_pop(ready, name)
  ch(ready):push("ready")
  local ok, err = pcall(function() return ch(name):pop() end)
  return "carried on after " .. tostring(err)
end
]]

describe("vmpool.channel", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 3 }
    pool:compile("c", CHUNK)
  end)
  teardown(function() pool:close() end)

  it("gives messages back in the order they were pushed, with all their values", function()
    local c = fresh()
    for i = 1, 5 do assert.is_true(c:push(i, "v" .. i, { t = i })) end
    assert.are.equal(5, c:len())
    for i = 1, 5 do
      local a, b, t = c:pop()
      assert.are.same({ i, "v" .. i, { t = i } }, { a, b, t })
    end
    assert.are.equal(0, c:len())
  end)

  it("is the same channel by name in the host and in every pool state", function()
    local c, name = fresh()
    assert.is_true(c == vmpool.channel(name))
    assert.is_true(pool:invoke("c", "push_all", name, 1, 2, 3))
    assert.are.same({ 1, 2, 3 }, { c:pop(), c:pop(), c:pop() })
    c:push("a") c:push("b")
    assert.are.same({ "a", "b" }, pool:invoke("c", "pop_n", name, 2))
  end)

  it("serves a long-lived call in a state while it runs, both ways", function()
    local inp, iname = fresh()
    local out, oname = fresh()
    local fut = pool:submit("c", "echo_doubles", iname, oname, 100)
    for i = 1, 100 do
      inp:push(i)
      assert.are.equal(i * 2, out:pop(10))
    end
    assert.are.equal("served", fut:wait())
  end)

  it("carries Lua functions with their upvalues, standard C functions and tables of them, both ways", function()
    local c, name = fresh()
    local back, bname = fresh()
    local up = 41
    assert.is_true(c:push(function(x) return x + up end, { g = function() return "from the host" end }))
    assert.are.same({ 42, "from the host" }, { pool:invoke("c", "call_popped", name, bname) })
    local f, t = back:pop(10)
    assert.are.equal(70, f(7))
    assert.are.equal("from the state", t.g())
    assert.is_true(c:push(string.format, up))
    local fmt, v = c:pop()
    assert.are.equal("v=41", fmt("v=%d", v))
    -- a function counts its bytecode against the channel's bytes
    local small = fresh { bytes = 40 }
    assert.matches("^vmpool: a message of %d+ encoded bytes can never fit",
      select(2, pcall(small.push, small, function() return 1 end)))
    assert.is_true(small:push(string.rep("x", 30)))
  end)

  it("reports its capacity in messages and bytes, and the defaults", function()
    local c = fresh { capacity = 3, bytes = 1000 }
    assert.are.same({ 3, 1000 }, { c:capacity() })
    local d = fresh()
    assert.are.same({ 1024, 16 * 1024 * 1024 }, { d:capacity() })
  end)

  it("refuses a push when full: try_push and push_timeout answer nil, 'timeout'", function()
    local c = fresh { capacity = 2 }
    assert.is_true(c:try_push(1))
    assert.is_true(c:push(2))
    assert.are.same({ nil, "timeout" }, { c:try_push(3) })
    assert.are.same({ nil, "timeout" }, { c:push_timeout(0.01, 3) })
    assert.are.same({ nil, "timeout" }, { c:push_timeout(0, 3) })
    assert.are.equal(2, c:len())
    assert.are.equal(1, c:pop())
    assert.is_true(c:try_push(3))
  end)

  it("bounds the bytes queued, though an empty channel takes any message that fits", function()
    local c = fresh { bytes = 64 }
    assert.is_true(c:push(string.rep("x", 40)))
    assert.are.same({ nil, "timeout" }, { c:try_push(string.rep("y", 40)) })
    c:pop()
    assert.is_true(c:push(string.rep("y", 40)))
    local ok, err = pcall(c.push, c, string.rep("z", 100))
    assert.is_false(ok)
    assert.matches("^vmpool: a message of %d+ encoded bytes can never fit channel 'spec%-%d+' %(bytes = 64%)", err)
  end)

  it("times out a pop on an empty channel: pop(t), pop(0) and try_pop answer nil, 'timeout'", function()
    local c = fresh()
    assert.are.same({ nil, "timeout" }, { c:try_pop() })
    assert.are.same({ nil, "timeout" }, { c:pop(0) })
    local t0 = vmpool.clock()
    assert.are.same({ nil, "timeout" }, { c:pop(0.02) })
    assert.is_true(vmpool.clock() - t0 >= 0.02)
  end)

  it("takes a timeout too long for the clock as no limit", function()
    local c = fresh()
    for _, t in ipairs { 1e19, 2 ^ 63, 1.8e19, 1e300, math.huge } do
      assert.is_true(c:push_timeout(t, t))
      assert.are.equal(t, c:pop(t))
    end
    assert.are.same({ true, 1e19 }, { pool:invoke(function(name)
      local ch = require("vmpool").channel(name)
      return ch:push_timeout(1e19, 1e19), ch:pop(1e19)
    end, c:name()) })
  end)

  it("after close, fails pushes with nil, 'closed' and lets pops drain, then answer nil, 'closed'", function()
    local c = fresh()
    c:push(1) c:push(2)
    c:close()
    assert.is_true(c:is_closed())
    assert.are.same({ nil, "closed" }, { c:push(3) })
    assert.are.same({ nil, "closed" }, { c:try_push(3) })
    assert.are.equal(1, c:pop())
    assert.are.equal(2, c:try_pop())
    assert.are.same({ nil, "closed" }, { c:pop() })
    assert.are.same({ nil, "closed" }, { c:pop(1) })
    c:close() -- idempotent
  end)

  it("wakes states waiting on both sides when it is closed", function()
    local ready = fresh()
    local empty, ename = fresh()
    local full, fname = fresh { capacity = 1 }
    full:push("first")
    local popper = pool:submit("c", "wait_pop", ready:name(), ename)
    local pusher = pool:submit("c", "wait_push", ready:name(), fname)
    assert.are.equal("ready", ready:pop(10))
    assert.are.equal("ready", ready:pop(10))
    empty:close()
    full:close()
    assert.are.same({ nil, "closed" }, { popper:wait(10) })
    assert.are.same({ nil, "closed" }, { pusher:wait(10) })
    assert.are.equal("first", full:pop()) -- the queued message stays for the drain
  end)

  it("ends a state's push_timeout and pop(t) with nil, 'timeout'", function()
    local ready = fresh()
    local full, fname = fresh { capacity = 1 }
    full:push("x")
    assert.are.same({ nil, "timeout" }, { pool:invoke("c", "wait_push", ready:name(), fname, 0.02) })
    assert.are.same({ nil, "timeout" }, { pool:invoke("c", "wait_pop", ready:name(), fresh():name(), 0.02) })
  end)

  it("raises vmpool: errors for bad input", function()
    local c = fresh()
    local function err(f, ...)
      local ok, e = pcall(f, ...)
      assert.is_false(ok)
      return e
    end
    assert.matches("^vmpool: bad argument #1 to 'vmpool.channel': expected a name %(string%), got number",
      err(vmpool.channel, 1))
    assert.matches("^vmpool: bad argument #1 to 'vmpool.channel': the name is empty", err(vmpool.channel, ""))
    -- two names of invalid UTF-8 must not become one channel
    assert.matches("^vmpool: bad argument #1 to 'vmpool.channel': the name is not valid UTF%-8",
      err(vmpool.channel, "spec-\255"))
    assert.matches("not valid UTF%-8", err(vmpool.channel, "spec-\254"))
    assert.matches("^vmpool: bad argument #2 to 'vmpool.channel': expected an options table or nil, got string",
      err(vmpool.channel, "x", "big"))
    assert.matches("^vmpool: unknown option 'capcity' to vmpool.channel", err(vmpool.channel, "x", { capcity = 1 }))
    assert.matches("^vmpool: option 'capacity' to vmpool.channel must be at least 1",
      err(vmpool.channel, "zero-cap", { capacity = 0 }))
    assert.matches("^vmpool: option 'capacity' to vmpool.channel must be a whole number",
      err(vmpool.channel, "x", { capacity = 1.5 }))
    assert.matches("^vmpool: option 'bytes' to vmpool.channel must be a whole number",
      err(vmpool.channel, "x", { bytes = "1k" }))
    assert.matches("^vmpool: channel 'spec%-%d+' already exists with capacity = 1024 %(asked for 3%)",
      err(vmpool.channel, c:name(), { capacity = 3 }))
    assert.matches("^vmpool: 'channel:push' needs a message whose first value is not nil %(got no values%)",
      err(c.push, c))
    assert.matches("^vmpool: 'channel:push' needs a message whose first value is not nil %(got nil%)",
      err(c.push, c, nil, 2))
    assert.matches("^vmpool: cannot pass argument #2 to 'channel:push': a thread value",
      err(c.push, c, 1, coroutine.create(function() end)))
    assert.matches("^vmpool: bad timeout to 'channel:pop': expected seconds", err(c.pop, c, -1))
    assert.matches("^vmpool: bad timeout to 'channel:pop': expected seconds", err(c.pop, c, "1"))
    assert.matches("^vmpool: bad argument #1 to 'channel:push_timeout': expected seconds",
      err(c.push_timeout, c, "x", 1))
    assert.matches("^vmpool: bad self to 'channel:pop': expected a channel, got number", err(c.pop, 5))
    assert.are.equal(0, c:len()) -- nothing half-pushed
  end)
end)

describe("a pool state waiting on a channel", function()
  it("is ended by its time limit, and no message is lost to it", function()
    local pool = vmpool.new { core = 1, time_limit = 0.2 }
    pool:compile("c", CHUNK)
    local ready = fresh()
    local c, name = fresh()
    local ok, err = pcall(pool.invoke, pool, "c", "wait_pop", ready:name(), name)
    assert.is_false(ok)
    assert.matches("^vmpool: time limit exceeded: c:wait_pop ran longer than 0.2s", err)
    c:push("kept")
    assert.are.equal("kept", c:try_pop())
    assert.are.same({ true, 2 }, { pool:invoke("c", "push_all", name, 1, 2), c:len() })
    pool:close()
  end)

  it("is ended by fut:cancel(), in a pool without a time limit, even if the code catches it", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", CHUNK)
    local ready = fresh()
    local c, name = fresh()
    local fut = pool:submit("c", "try_catch_pop", ready:name(), name)
    assert.are.equal("ready", ready:pop(10))
    fut:cancel()
    local ok, err = pcall(fut.wait, fut, 10)
    assert.is_false(ok)
    assert.are.equal("vmpool: call was cancelled", err)
    c:push("kept")
    assert.are.equal("kept", c:try_pop())
    assert.is_true(pool:invoke("c", "push_all", name, 1)) -- the pool goes on
    pool:close()
  end)

  it("without memory for a message (its memory_limit) leaves the message in the channel, first", function()
    local pool = vmpool.new { core = 1, memory_limit = 4e6 }
    pool:compile("m", [=[
      local vmpool = require "vmpool"
      function take(name, how)
        local c = vmpool.channel(name)
        local ok, v = pcall(function()
          if how == "select" then return select(2, vmpool.select({ c }, 1)) end
          return c:pop(1)
        end)
        return ok, ok and #v or v
      end
    ]=])
    local c, name = fresh()
    local big = string.rep("x", 6e6)
    assert.is_true(c:push(big))
    assert.is_true(c:push("next"))
    for _, how in ipairs { "pop", "select" } do
      local ok, err = pool:invoke("m", "take", name, how)
      assert.is_false(ok)
      assert.matches("vmpool: not enough memory in this pool state while receiving a message from "
        .. (how == "pop" and "channel:pop" or "vmpool.select"), err)
      assert.matches("the message stays in channel 'spec%-%d+': raise memory_limit", err)
      assert.are.equal(2, c:len())
    end
    -- first in the queue still, whole
    assert.are.equal(big, c:pop(0))
    assert.are.equal("next", c:pop(0))
    pool:close()
  end)

  it("is ended by close{ timeout = s }, and the close returns", function()
    local pool = vmpool.new { core = 2 }
    pool:compile("c", CHUNK)
    local ready = fresh()
    local futs = {}
    for i = 1, 2 do futs[i] = pool:submit("c", "wait_pop", ready:name(), fresh():name()) end
    ready:pop(10) ready:pop(10)
    pool:close { timeout = 0.05 }
    for _, fut in ipairs(futs) do
      local ok, err = pcall(fut.wait, fut, 10)
      assert.is_false(ok)
      assert.matches("^vmpool: call stopped: the pool was closed while it ran", err)
    end
  end)
end)

describe("vmpool.select", function()
  it("returns the channel that had a message, and the message", function()
    local a, b = fresh(), fresh()
    b:push("hi", 2)
    local ch, v, w = vmpool.select({ a, b })
    assert.is_true(rawequal(ch, b))
    assert.are.same({ "hi", 2 }, { v, w })
  end)

  it("answers nil, 'timeout' when none has a message in time, and nil, 'closed' once all are closed and drained",
    function()
    local a, b = fresh(), fresh()
    assert.are.same({ nil, "timeout" }, { vmpool.select({ a, b }, 0) })
    assert.are.same({ nil, "timeout" }, { vmpool.select({ a, b }, 0.02) })
    a:close()
    b:push(1)
    b:close()
    local ch, v = vmpool.select({ a, b })
    assert.is_true(ch == b and v == 1)
    assert.are.same({ nil, "closed" }, { vmpool.select({ a, b }) })
  end)

  -- Each select starts at a random channel: the bounds below are 7 standard deviations or more
  -- under the expected counts (a failure by chance is below 1e-11).
  it("starves no channel: with every channel full, each is chosen about as often", function()
    local chans = { (fresh()), (fresh()), (fresh()) }
    for _, c in ipairs(chans) do c:push(c:name()) end
    local count = { 0, 0, 0 }
    for _ = 1, 3000 do
      local ch, v = vmpool.select(chans)
      ch:push(v) -- full again
      for i, c in ipairs(chans) do if rawequal(c, ch) then count[i] = count[i] + 1 end end
    end
    for i = 1, 3 do assert.is_true(count[i] >= 800, "channel " .. i .. " was chosen " .. count[i] .. " times") end
  end)

  it("starves no channel of a loop that alternates two selects", function()
    local a, b, c, d = fresh(), fresh(), fresh(), fresh()
    for _, ch in ipairs { a, b, c, d } do ch:push(ch:name()) end
    local count = {}
    for _ = 1, 400 do
      for _, list in ipairs { { a, b }, { c, d } } do
        local ch, v = vmpool.select(list)
        ch:push(v)
        count[v] = (count[v] or 0) + 1
      end
    end
    for _, ch in ipairs { a, b, c, d } do
      local got = count[ch:name()] or 0
      assert.is_true(got >= 120, ch:name() .. " was chosen " .. got .. " times of 400")
    end
  end)

  it("waits in a pool state for whichever channel gets a message", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", CHUNK)
    local _, an = fresh()
    local b, bn = fresh()
    local fut = pool:submit("c", "select_two", an, bn, 10)
    b:push("to b")
    assert.are.same({ bn, "to b" }, { fut:wait(10) })
    assert.are.same({ nil, "timeout" }, { pool:invoke("c", "select_two", an, bn, 0.01) })
    pool:close()
  end)

  it("raises vmpool: errors for a bad list", function()
    assert.matches("^vmpool: bad argument #1 to 'vmpool.select': expected a list of channels, got nil",
      select(2, pcall(vmpool.select)))
    assert.matches("^vmpool: bad argument #1 to 'vmpool.select': the list of channels is empty",
      select(2, pcall(vmpool.select, {})))
    assert.matches("^vmpool: bad argument #1 to 'vmpool.select': item 2 is a number, not a channel",
      select(2, pcall(vmpool.select, { (fresh()), 3 })))
  end)
end)

describe("channels in coroutines of vmpool.run", function()
  it("yield the coroutine while it waits: a producer and a consumer in one thread", function()
    local c = fresh { capacity = 2 }
    local got = vmpool.run(function()
      vmpool.spawn(function()
        for i = 1, 20 do assert(c:push(i)) end
        c:close()
      end)
      local got = {}
      while true do
        local v, why = c:pop()
        if v == nil then got[#got + 1] = why break end
        got[#got + 1] = v
      end
      return got
    end)
    local want = {}
    for i = 1, 20 do want[i] = i end
    want[21] = "closed"
    assert.are.same(want, got)
  end)

  it("time out a pop or push with nil, 'timeout' while other coroutines run", function()
    local empty = fresh()
    local full = fresh { capacity = 1 }
    full:push(0)
    local ticks = 0
    local a, b, c, d = vmpool.run(function()
      vmpool.spawn(function()
        local other = fresh()
        for _ = 1, 3 do ticks = ticks + 1 other:pop(0.005) end
      end)
      local x, y = empty:pop(0.05)
      local z, w = full:push_timeout(0.05, 1)
      return x, y, z, w
    end)
    assert.are.same({ nil, "timeout", nil, "timeout" }, { a, b, c, d })
    assert.are.equal(3, ticks)
  end)

  it("wake coroutines waiting on both sides when the channel is closed", function()
    local empty = fresh()
    local full = fresh { capacity = 1 }
    full:push(0)
    local res = {}
    vmpool.run(function()
      for i = 1, 3 do vmpool.spawn(function() res["pop" .. i] = { empty:pop() } end) end
      for i = 1, 3 do vmpool.spawn(function() res["push" .. i] = { full:push(i) } end) end
      vmpool.spawn(function() empty:close() full:close() end)
    end)
    for i = 1, 3 do
      assert.are.same({ nil, "closed" }, res["pop" .. i])
      assert.are.same({ nil, "closed" }, res["push" .. i])
    end
  end)

  it("exchange messages with a pool state while both wait", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", CHUNK)
    local inp, iname = fresh { capacity = 1 }
    local out, oname = fresh { capacity = 1 }
    local sum = vmpool.run(function()
      local served
      vmpool.spawn(function() served = pool:co_invoke("c", "echo_doubles", iname, oname, 50) end)
      vmpool.spawn(function() for i = 1, 50 do inp:push(i) end end)
      local sum = 0
      for _ = 1, 50 do sum = sum + out:pop() end
      return sum, served
    end)
    assert.are.equal(50 * 51, sum)
    pool:close()
  end)

  it("deliver each message to exactly one of many waiting coroutines", function()
    local c = fresh()
    local got = {}
    vmpool.run(function()
      for _ = 1, 8 do
        vmpool.spawn(function()
          while true do
            local v = c:pop()
            if v == nil then return end
            got[#got + 1] = v
          end
        end)
      end
      vmpool.spawn(function()
        for i = 1, 200 do c:push(i) end
        c:close()
      end)
    end)
    table.sort(got)
    assert.are.equal(200, #got)
    for i = 1, 200 do assert.are.equal(i, got[i]) end
  end)

  it("select over several channels, yielding while none has a message", function()
    local a, b = fresh(), fresh()
    local got = vmpool.run(function()
      vmpool.spawn(function() b:push("b1") a:push("a1") end)
      local seen = {}
      for _ = 1, 2 do
        local ch, v = vmpool.select({ a, b }, 5)
        seen[#seen + 1] = (rawequal(ch, a) and "a:" or "b:") .. v
      end
      seen[#seen + 1] = select(2, vmpool.select({ a, b }, 0.01))
      return seen
    end)
    table.sort(got)
    assert.are.same({ "a:a1", "b:b1", "timeout" }, got)
  end)
end)
