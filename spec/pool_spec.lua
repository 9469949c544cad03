-- The manual, as tests: one block per function of the API (README "API reference").
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"

local SEED = [[
function helloLua(n)
  goSayHello("hello", "my name is lua") -- calls a helper that init defines
  return n, 100000
end
]]
local SEED_INIT = [[
function goSayHello(greeting, text) return greeting .. ", " .. text end
]]

local function check_balanced(pool)
  local s = pool:stats()
  assert.are.equal(0, s.busy)
  assert.are.equal(s.core + s.noncore, s.created - s.closed)
  assert.are.equal(s.core + s.noncore, s.idle + s.busy)
  return s
end

describe("require 'vmpool'", function()
  it("has a version string and names its runtime", function()
    assert.is_string(vmpool._VERSION)
    assert.is_string(vmpool.runtime)
    local expected = jit and "LuaJIT" or _VERSION
    assert.are.equal(expected, vmpool.runtime)
  end)

  it("has a monotonic clock", function()
    local a = vmpool.clock()
    local b = vmpool.clock()
    assert.is_number(a)
    assert.is_true(b >= a)
  end)
end)

describe("vmpool.new", function()
  it("works without options, with one core state per CPU", function()
    local pool = vmpool.new()
    local s = pool:stats()
    assert.is_true(s.core >= 1)
    assert.are.equal(s.core, s.idle)
    assert.are.equal(0, s.noncore)
    pool:close()
  end)

  it("creates `core` states at once", function()
    local pool = vmpool.new { core = 3 }
    local s = pool:stats()
    assert.are.equal(3, s.core)
    assert.are.equal(3, s.created)
    assert.are.equal(3, s.idle)
    pool:close()
  end)

  it("runs `init` in every new state", function()
    local pool = vmpool.new { core = 2, init = "answer = 42" }
    pool:compile("c", "function get() return answer end")
    assert.are.equal(42, pool:invoke("c", "get"))
    pool:close()
  end)

  it("reports a failing `init` with its error", function()
    assert.has_error(function() vmpool.new { core = 1, init = "error('no db')" } end)
    local ok, err = pcall(vmpool.new, { core = 1, init = "error('no db')" })
    assert.is_false(ok)
    assert.matches("^vmpool: the init code failed in a new state: .*no db", err)
    ok, err = pcall(vmpool.new, { core = 1, init = "this is not lua" })
    assert.is_false(ok)
    assert.matches("^vmpool: the init code failed", err)
  end)

  it("refuses unknown options and wrong types, naming them", function()
    local cases = {
      { { cores = 2 }, "unknown option 'cores'" },
      { { core = "2" }, "option 'core' to vmpool.new must be a non%-negative integer %(got string%)" },
      { { core = -1 }, "option 'core' to vmpool.new must be a non%-negative integer" },
      { { core = 1.5 }, "option 'core' to vmpool.new must be a non%-negative integer" },
      { { max_noncore = true }, "option 'max_noncore' to vmpool.new must be a non%-negative integer or math.huge" },
      { { blocking = 1 }, "option 'blocking' to vmpool.new must be a boolean %(got number%)" },
      { { acquire_timeout = "1" }, "option 'acquire_timeout' to vmpool.new must be a non%-negative number of seconds" },
      { { idle_timeout = -1 }, "option 'idle_timeout' to vmpool.new must be a non%-negative number of seconds" },
      { { init = 42 }, "option 'init' to vmpool.new must be a string of Lua source %(got number%)" },
      { { time_limit = {} }, "option 'time_limit' to vmpool.new must be" },
      { { memory_limit = 0.5 }, "option 'memory_limit' to vmpool.new must be a non%-negative integer" },
      { { max_waiting = -3 }, "option 'max_waiting' to vmpool.new must be" },
      { { jit = "off" }, "option 'jit' to vmpool.new must be a boolean" },
      { { core = 0, max_noncore = 0 }, "at least one state" },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(vmpool.new, case[1])
      assert.is_false(ok)
      assert.matches("^vmpool: ", err)
      assert.matches(case[2], err)
    end
    local ok, err = pcall(vmpool.new, 5)
    assert.is_false(ok)
    assert.matches("^vmpool: vmpool.new expects a table of options or nothing %(got number%)", err)
  end)
end)

describe("pool:compile", function()
  local pool
  before_each(function() pool = vmpool.new { core = 2, init = SEED_INIT } end)
  after_each(function() pool:close() end)

  it("returns true and makes the chunk's globals callable", function()
    assert.is_true(pool:compile("test.lua", SEED))
    local n, m = pool:invoke("test.lua", "helloLua", 7)
    assert.are.equal(7, n)
    assert.are.equal(100000, m)
  end)

  it("finds functions in the table the chunk returns", function()
    pool:compile("m", "return { add = function(a, b) return a + b end }")
    assert.are.equal(5, pool:invoke("m", "add", 2, 3))
  end)

  it("falls back to globals when the returned table lacks the name", function()
    pool:compile("m", "function g() return 'global' end return { t = function() return 'table' end }")
    assert.are.equal("table", pool:invoke("m", "t"))
    assert.are.equal("global", pool:invoke("m", "g"))
  end)

  it("raises syntax errors at compile time with the chunk name and line", function()
    local ok, err = pcall(pool.compile, pool, "bad.lua", "local x = 1\nlocal = 2")
    assert.is_false(ok)
    assert.matches("^vmpool: cannot compile chunk 'bad.lua': bad.lua:2:", err)
  end)

  it("refuses bytecode and bad arguments", function()
    local ok, err = pcall(pool.compile, pool, "b", string.dump(function() end))
    assert.is_false(ok)
    assert.matches("^vmpool: cannot compile chunk 'b':.*binary", err)
    ok, err = pcall(pool.compile, pool, nil, "return 1")
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #1 to 'compile'", err)
    ok, err = pcall(pool.compile, pool, "x", nil)
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #2 to 'compile'", err)
  end)

  it("replaces a chunk when the name is compiled again", function()
    pool:compile("v", "function version() return 1 end")
    assert.are.equal(1, pool:invoke("v", "version"))
    pool:compile("v", "function version() return 2 end")
    for _ = 1, 10 do -- every state, not just the one that ran version 1
      assert.are.equal(2, pool:invoke("v", "version"))
    end
  end)

  it("runs the chunk's top level once per state", function()
    local p = vmpool.new { core = 1 }
    p:compile("count", "loads = (loads or 0) + 1 function get() return loads end")
    for _ = 1, 5 do assert.are.equal(1, p:invoke("count", "get")) end
    p:close()
  end)

  it("reports a chunk whose top level fails in a state", function()
    pool:compile("boom", "error('top level failed')")
    local ok, err = pcall(pool.invoke, pool, "boom", "f")
    assert.is_false(ok)
    assert.matches("^vmpool: chunk 'boom' failed while a state ran its top level: .*top level failed", err)
    check_balanced(pool)
  end)
end)

describe("pool:invoke", function()
  local pool
  before_each(function()
    pool = vmpool.new { core = 2, init = SEED_INIT }
    pool:compile("test.lua", SEED)
    pool:compile("util", [[
      return {
        echo = function(...) return ... end,
        count = function(...) return select('#', ...) end,
        fail = function(msg) error(msg) end,
        fail_table = function() error({ code = 1 }) end,
        -- a C closure outside the standard library: cannot cross
        give_function = function() return coroutine.wrap(function() end) end,
        nothing = function() end,
      }
    ]])
  end)
  after_each(function() pool:close() end)

  it("runs the seed's script: helloLua(n) returns n, 100000", function()
    for i = 1, 100 do
      local a, b = pool:invoke("test.lua", "helloLua", i)
      assert.are.equal(i, a)
      assert.are.equal(100000, b)
    end
  end)

  it("passes every argument and returns every result, nils included", function()
    assert.are.equal(4, pool:invoke("util", "count", nil, 1, nil, nil))
    assert.are.same({ n = 3, nil, 2, nil }, table.pack and table.pack(pool:invoke("util", "echo", nil, 2, nil))
      or { n = select("#", pool:invoke("util", "echo", nil, 2, nil)), nil, 2, nil })
    assert.are.equal(0, select("#", pool:invoke("util", "nothing")))
  end)

  it("raises a child's error with its traceback", function()
    local ok, err = pcall(pool.invoke, pool, "util", "fail", "went wrong")
    assert.is_false(ok)
    assert.is_string(err)
    assert.matches("^vmpool: error in util:fail: util:%d+: went wrong", err)
    assert.matches("stack traceback:", err)
  end)

  it("describes non-string error objects", function()
    local ok, err = pcall(pool.invoke, pool, "util", "fail_table")
    assert.is_false(ok)
    assert.matches("^vmpool: error in util:fail_table: %(error object is a table value%)", err)
  end)

  it("names an unknown chunk and a missing function", function()
    local ok, err = pcall(pool.invoke, pool, "nope", "f")
    assert.is_false(ok)
    assert.matches("^vmpool: unknown chunk 'nope' %(compile it first", err)
    ok, err = pcall(pool.invoke, pool, "util", "missing")
    assert.is_false(ok)
    assert.matches("^vmpool: chunk 'util' has no function 'missing'", err)
    ok, err = pcall(pool.invoke, pool, "test.lua", "missing")
    assert.is_false(ok)
    assert.matches("^vmpool: chunk 'test.lua' has no function 'missing' %(it returned no table", err)
  end)

  it("refuses bad argument types before dispatch, naming the position", function()
    local ok, err = pcall(pool.invoke, pool, 42, "f")
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #1 to 'invoke': expected a chunk name %(string%) or a function, got number",
      err)
    ok, err = pcall(pool.invoke, pool, "util", nil)
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #2 to 'invoke'", err)
    ok, err = pcall(pool.invoke, pool, "util", "echo", 1, coroutine.wrap(function() end))
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass argument #2 to 'echo': a C function that is not a standard library "
      .. "function", err)
    ok, err = pcall(pool.invoke, pool, "util", "echo", { a = { coroutine.create(function() end) } })
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass argument #1 to 'echo': a thread value at %.a%[1%]", err)
    ok, err = pcall(pool.invoke, pool, "util", "echo", io.stdout)
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass argument #1 to 'echo': a userdata value", err)
    check_balanced(pool)
  end)

  it("refuses unsupported results, naming the position", function()
    local ok, err = pcall(pool.invoke, pool, "util", "give_function")
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass result #1 of 'give_function': a C function that is not a standard "
      .. "library function", err)
    check_balanced(pool)
  end)

  it("must be called as a method of a pool", function()
    local ok, err = pcall(pool.invoke, {}, "util", "echo")
    assert.is_false(ok)
    assert.matches("^vmpool: bad argument #1 to 'invoke': expected a pool, got table %(call it as "
      .. "pool:invoke%(...%), with a colon%)$", err)
    -- nor any other value: a number, a long string, a light userdata (NULL, as cjson.null),
    -- another kind of full userdata, a future
    local others = { 42, string.rep("x", 256), require("cjson").null, io.stdout,
      pool:submit("util", "echo", 1) }
    for _, self in ipairs(others) do
      ok, err = pcall(pool.invoke, self, "util", "echo")
      assert.is_false(ok)
      assert.matches("^vmpool: bad argument #1 to 'invoke': expected a pool, got ", err)
    end
    assert.equal(1, others[5]:wait())
  end)

  it("works from coroutines when the registry's main-thread entry was replaced as it was made", function()
    -- a pool notes its state's main thread (for the wait's Ctrl-C check); an entry that is not
    -- the main thread (here a coroutine, collected afterwards) must not be taken for it
    if vmpool.runtime == "Lua 5.1" or vmpool.runtime == "LuaJIT" then
      pending("Lua 5.1 and LuaJIT keep no main thread in the registry")
      return
    end
    local registry = debug.getregistry()
    local main = registry[1]
    registry[1] = coroutine.create(function() end)
    local ok, p = pcall(coroutine.wrap(function() return vmpool.new { core = 1 } end))
    registry[1] = main
    collectgarbage()
    collectgarbage()
    assert(ok, p)
    p:compile("c", "function slow(x) local t = os.clock() while os.clock() - t < 0.02 do end return x end")
    assert.equal(5, coroutine.wrap(function() return p:invoke("c", "slow", 5) end)())
    assert.equal(6, p:invoke("c", "slow", 6))
    p:close()
  end)

  it("keeps the pool working and its stats consistent after every kind of error", function()
    local t = { co = coroutine.create(function() end) } -- a thread value cannot cross
    local failing = {
      function() pool:invoke("nope", "f") end,
      function() pool:invoke("util", "missing") end,
      function() pool:invoke("util", "fail", "x") end,
      function() pool:invoke("util", "echo", t) end,
      function() pool:invoke("util", "give_function") end,
    }
    for round = 1, 3 do
      for _, f in ipairs(failing) do
        assert.is_false(pcall(f))
      end
      assert.are.equal(round, pool:invoke("util", "echo", round))
    end
    local s = check_balanced(pool)
    assert.are.equal(2, s.core)
    assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
  end)
end)

describe("pool:submit and futures", function()
  local pool, gate
  before_each(function()
    gate = Gate.new()
    pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("g", "return { gate = gate, echo = function(...) return ... end, fail = error }")
  end)
  after_each(function()
    gate:close()
    pool:close()
  end)

  it("returns a future whose wait() gives the results", function()
    local fut = pool:submit("g", "echo", 1, "two")
    local a, b = fut:wait()
    assert.are.equal(1, a)
    assert.are.equal("two", b)
    assert.is_true(fut:ready())
    -- results can be read again
    assert.are.equal(1, (fut:wait()))
  end)

  it("reserves a state at submit time: stats() shows it busy at once", function()
    local fut = pool:submit("g", "gate", gate.port, "done")
    assert.are.equal(1, pool:stats().busy)
    gate:arrivals(1)
    assert.is_false(fut:ready())
    gate:release(1)
    assert.are.equal("done", fut:wait(10))
    assert.are.equal(0, pool:stats().busy)
  end)

  it("wait(timeout) returns nil and a message when the call is still running", function()
    local fut = pool:submit("g", "gate", gate.port, "late")
    gate:arrivals(1)
    local t0 = vmpool.clock()
    local r, err = fut:wait(0.05)
    assert.is_nil(r)
    assert.matches("^vmpool: timed out after 0.05s waiting for the call to finish", err)
    assert.is_true(vmpool.clock() - t0 >= 0.05)
    gate:release(1)
    assert.are.equal("late", fut:wait(10))
  end)

  it("wait() raises the child's error", function()
    local fut = pool:submit("g", "fail", "bad thing")
    local ok, err = pcall(fut.wait, fut)
    assert.is_false(ok)
    assert.matches("^vmpool: error in g:fail: bad thing", err)
  end)

  it("cancel() stops a call that has not started; it never runs", function()
    local p = vmpool.new { core = 1, init = Gate.CHILD }
    p:compile("g", [[
      ran = 0
      return { gate = gate, mark = function() ran = ran + 1 end, ran = function() return ran end }
    ]])
    local holder = p:submit("g", "gate", gate.port)
    gate:arrivals(1)
    local queued = p:submit("g", "mark")
    assert.are.equal(1, p:stats().waiting)
    assert.is_true(queued:cancel())
    assert.is_true(queued:ready())
    local ok, err = pcall(queued.wait, queued)
    assert.is_false(ok)
    assert.matches("^vmpool: call was cancelled", err)
    assert.are.equal(0, p:stats().waiting)
    gate:release(1)
    holder:wait(10)
    assert.are.equal(0, p:invoke("g", "ran"))
    local s = p:stats()
    assert.are.equal(1, s.cancelled)
    assert.is_false(queued:cancel())
    p:close()
  end)

  it("cancel() returns false once the call has started", function()
    local fut = pool:submit("g", "gate", gate.port, "ran")
    gate:arrivals(1)
    assert.is_false(fut:cancel())
    gate:release(1)
    assert.are.equal("ran", fut:wait(10))
  end)

  it("prints as a future", function()
    local fut = pool:submit("g", "echo", 1)
    fut:wait()
    assert.are.equal("vmpool.future (done)", tostring(fut))
  end)
end)

describe("pool:unload", function()
  it("removes a chunk: later invokes fail with a clear error", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "function f() return 1 end")
    assert.are.equal(1, pool:invoke("c", "f"))
    assert.is_true(pool:unload("c"))
    local ok, err = pcall(pool.invoke, pool, "c", "f")
    assert.is_false(ok)
    assert.matches("^vmpool: unknown chunk 'c'", err)
    assert.is_false(pool:unload("c"))
    pool:compile("c", "function f() return 2 end")
    assert.are.equal(2, pool:invoke("c", "f"))
    pool:close()
  end)
end)

describe("pool:stats", function()
  it("has every counter", function()
    local pool = vmpool.new { core = 1 }
    local s = pool:stats()
    for _, k in ipairs { "core", "noncore", "idle", "busy", "waiting", "threads", "created", "closed", "invokes",
      "succeeded", "errors", "rejected", "timeouts", "cancelled" } do
      assert.is_number(s[k], k)
    end
    pool:close()
  end)

  it("counts invokes and their outcomes", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "function ok() end function bad() error('x') end")
    pool:invoke("c", "ok")
    pcall(pool.invoke, pool, "c", "bad")
    local s = pool:stats()
    assert.are.equal(2, s.invokes)
    assert.are.equal(1, s.succeeded)
    assert.are.equal(1, s.errors)
    pool:close()
  end)

  it("counts one worker thread per state, and none once closed", function()
    local pool = vmpool.new { core = 3 }
    assert.are.equal(3, pool:stats().threads)
    pool:close()
    assert.are.equal(0, pool:stats().threads)
  end)
end)

-- a finalizer that counts in the state's globals (5.1 has no __gc on tables: newproxy)
local FINALIZED = [[
finalized = 0
function litter(n)
  for _ = 1, n do
    if newproxy then
      getmetatable(newproxy(true)).__gc = function() finalized = finalized + 1 end
    else
      setmetatable({}, { __gc = function() finalized = finalized + 1 end })
    end
  end
end
function count() return finalized end
-- the same, at a gate: two calls held there at once run on two different states
function litter_at(port, n) gate(port) litter(n) end
function count_at(port) gate(port) return finalized end
function fail_on_gc()
  if newproxy then
    getmetatable(newproxy(true)).__gc = function() error("finalizer failed") end
  else
    setmetatable({}, { __gc = function() error("finalizer failed") end })
  end
end
]]

describe("pool:collect", function()
  it("runs a full collection in every idle state and returns how many", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("c", "gate = gate\n" .. FINALIZED)
    -- each state litters once: both calls are held at the gate together, so on different states
    local a, b = pool:submit("c", "litter_at", gate.port, 10), pool:submit("c", "litter_at", gate.port, 10)
    gate:arrivals(2)
    gate:release()
    a:wait()
    b:wait()
    assert.are.equal(2, pool:collect())
    -- both states ran their finalizers: each reports its own 10
    local x, y = pool:submit("c", "count_at", gate.port), pool:submit("c", "count_at", gate.port)
    gate:arrivals(2)
    gate:release()
    assert.are.equal(10, x:wait())
    assert.are.equal(10, y:wait())
    local s = check_balanced(pool)
    assert.are.equal(4, s.invokes) -- the collections are not counted
    gate:close()
    pool:close()
  end)

  it("skips states busy with a call", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("g", "return { hold = hold }")
    local running = pool:submit("g", "hold", gate.port, 5, "done")
    gate:arrivals(1)
    assert.are.equal(1, pool:collect())
    gate:release()
    assert.are.equal("done", running:wait(10))
    pool:close()
  end)

  it("drops the errors of finalizers and keeps the state working", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", FINALIZED)
    pool:invoke("c", "fail_on_gc")
    assert.are.equal(1, pool:collect())
    assert.are.equal(0, pool:invoke("c", "count"))
    check_balanced(pool)
    pool:close()
  end)

  it("refuses a closed pool", function()
    local pool = vmpool.new { core = 1 }
    pool:close()
    local ok, err = pcall(pool.collect, pool)
    assert.is_false(ok)
    assert.are.equal("vmpool: pool is closed (create a new pool with vmpool.new)", err)
  end)
end)

describe("vmpool.memory", function()
  it("counts the states of every pool and what they hold", function()
    -- pools other tests left to the garbage collector are closed now, not during this test
    collectgarbage()
    collectgarbage()
    local before = vmpool.memory()
    local pool = vmpool.new { core = 2 }
    local with = vmpool.memory()
    assert.are.equal(before.states + 2, with.states)
    assert.is_true(with.bytes > before.bytes and with.blocks > before.blocks)
    pool:compile("c", "function keep(n) big = {} for i = 1, n do big[i] = tostring(i) end end "
      .. "function drop() big = nil end")
    pool:invoke("c", "keep", 20000)
    local holding = vmpool.memory()
    assert.is_true(holding.bytes > with.bytes + 200000, holding.bytes - with.bytes)
    pool:invoke("c", "drop")
    pool:collect()
    assert.is_true(vmpool.memory().bytes < holding.bytes - 200000)
    pool:close()
    local after = vmpool.memory()
    assert.are.same(before, after)
  end)
end)

describe("pool:close", function()
  it("is idempotent and makes later calls fail with 'pool is closed'", function()
    local pool = vmpool.new { core = 2 }
    pool:compile("c", "function f() return 1 end")
    pool:close()
    pool:close()
    for _, f in ipairs {
      function() pool:invoke("c", "f") end,
      function() pool:submit("c", "f") end,
      function() pool:compile("d", "return 1") end,
    } do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("^vmpool: pool is closed", err)
    end
    assert.are.equal("vmpool.pool (closed)", tostring(pool))
  end)

  it("waits for running calls and fails queued ones", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 1, init = Gate.CHILD }
    pool:compile("g", "return { hold = hold, echo = function(...) return ... end }")
    -- the running call ends by itself after 1 s: close() blocks this thread until it does
    local running = pool:submit("g", "hold", gate.port, 1.0, "finished")
    gate:arrivals(1)
    local queued = pool:submit("g", "echo", "never")
    assert.are.equal(1, pool:stats().waiting)
    pool:close()
    assert.are.equal("finished", running:wait(10))
    local ok, err = pcall(queued.wait, queued)
    assert.is_false(ok)
    assert.matches("^vmpool: pool is closed", err)
    local s = pool:stats()
    assert.are.equal(0, s.core)
    assert.are.equal(0, s.busy)
    assert.are.equal(0, s.waiting)
    assert.are.equal(s.created, s.closed)
    assert.are.equal(s.invokes, s.succeeded + s.errors)
    gate:close()
  end)

  it("happens when the pool is garbage-collected: no thread outlives it", function()
    collectgarbage()
    local before = Gate.thread_ids()
    do
      local p = vmpool.new { core = 3 }
      p:compile("c", "function f() return 1 end")
      assert.are.equal(1, p:invoke("c", "f"))
      assert.is_true(#Gate.new_threads(before) >= 3)
    end
    collectgarbage()
    collectgarbage()
    assert.are.same({}, Gate.threads_left(before))
  end)

  it("joins every thread on close()", function()
    local before = Gate.thread_ids()
    local p = vmpool.new { core = 4, max_noncore = 2 }
    p:close()
    assert.are.same({}, Gate.threads_left(before))
  end)

  if _VERSION == "Lua 5.4" or _VERSION == "Lua 5.5" then
    it("happens on scope exit for a <close> variable (Lua 5.4 and 5.5)", function()
      local closed_pool = load([[
        local vmpool = ...
        local outer
        do
          local pool <close> = vmpool.new { core = 1 }
          outer = pool
        end
        return outer
      ]])(vmpool)
      assert.are.equal("vmpool.pool (closed)", tostring(closed_pool))
    end)
  end
end)
