-- Every error message vmpool can raise (the variants of src/error.rs), each triggered the way a
-- user would meet it and matched in full: it starts with "vmpool:", says what was wrong and what to
-- do. The first test reads src/error.rs and fails if a variant has no case here.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"
local Child = require "spec.support.child"

local IS_LUAJIT = vmpool.runtime == "LuaJIT"

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  assert.is_string(err) -- a plain string, not an mlua userdata
  return err
end

local function with_pool(opts, src, body)
  local pool = vmpool.new(opts)
  if src then pool:compile("c", src) end
  local ok, err = pcall(body, pool)
  pool:close()
  assert(ok, err)
end

-- variant name -> function that triggers it and checks the text (nil for a variant no user
-- action can reach, with the reason)
local cases = {}
local unreachable = {
  Internal = "raised only if the pool's own invariants break: 'internal error (please report it)'",
  Host = "needs the host out of memory or a raising finalizer: spec/containment_spec.lua matches it "
    .. "in a fresh interpreter under ulimit -v",
  NoMemory = "needs the system to refuse memory: spec/containment_spec.lua matches it for a shared dictionary's "
    .. "values in a fresh interpreter under ulimit -v",
  Interrupted = "needs a signal to the interpreter while it waits: spec/interrupt_spec.lua matches it in a "
    .. "fresh interpreter",
  NoStack = "needs the Lua stack at its hard limit inside a vmpool function; unpack and the call itself refuse "
    .. "first (tried: 7,997 arguments to dict.get on 5.1 and LuaJIT, 65,530 on 5.4); on LuaJIT, 7,900 results "
    .. "in a deep recursion reach it: spec/limits_hold_spec.lua matches it there",
  Private = "the adapters' internal methods (notifier:_take, m:_subscribe, ...) are out of a program's reach "
    .. "without the debug library: the adapters keep their notifiers in upvalues",
}

cases.Stopped = function()
  local pool = vmpool.new { core = 1, time_limit = math.huge }
  pool:compile("c", "function spin() while true do end end")
  local fut = pool:submit("c", "spin")
  pool:close { timeout = 0 }
  assert.are.equal("vmpool: call stopped: the pool was closed while it ran (wait for its calls before closing, "
    .. "or give close{ timeout = s } more time)", select(2, pcall(fut.wait, fut)))
end

cases.StateMemory = function()
  local ch = vmpool.channel("messages_spec_state_memory", { bytes = 1e7 })
  assert.is_true(ch:push(("m"):rep(6e6)))
  with_pool({ core = 1, memory_limit = 4e6 }, [[
    function take() local ch = require("vmpool").channel("messages_spec_state_memory") return ch:pop(0) end
  ]], function(pool)
    assert.matches("^vmpool: error in c:take: vmpool: not enough memory in this pool state while receiving a "
      .. "message from channel:pop %(its memory_limit or the system refused it%); the message stays in channel "
      .. "'messages_spec_state_memory': raise memory_limit or use smaller values",
      err_of(pool.invoke, pool, "c", "take"))
  end)
  assert.are.equal(1, ch:len())
  ch:try_pop()
end

cases.BadArgument = function()
  assert.matches("^vmpool: unknown option 'cores' to vmpool.new %(known options: core, max_noncore, ",
    err_of(vmpool.new, { cores = 1 }))
  assert.matches("^vmpool: option 'core' to vmpool.new must be a non%-negative integer %(got string%)$",
    err_of(vmpool.new, { core = "1" }))
  with_pool({ core = 1 }, nil, function(pool)
    assert.matches("^vmpool: bad argument #1 to 'invoke': expected a chunk name %(string%) or a function, got "
      .. "no value$", err_of(pool.invoke, pool))
  end)
end

cases.Syntax = function()
  with_pool({ core = 1 }, nil, function(pool)
    assert.matches("^vmpool: cannot compile chunk 'bad': bad:1: .+ %(fix the Lua source and compile again%)$",
      err_of(pool.compile, pool, "bad", "x ="))
  end)
end

cases.UnknownChunk = function()
  with_pool({ core = 1 }, nil, function(pool)
    assert.are.equal("vmpool: unknown chunk 'nope' (compile it first with pool:compile(name, source))",
      err_of(pool.invoke, pool, "nope", "f"))
  end)
end

cases.NoFunction = function()
  with_pool({ core = 1 }, "function f() end", function(pool)
    assert.are.equal("vmpool: chunk 'c' has no function 'g' (it returned no table and defines no such global; "
      .. "check the name)", err_of(pool.invoke, pool, "c", "g"))
    pool:compile("t", "return { f = function() end }")
    assert.are.equal("vmpool: chunk 't' has no function 'g' (neither the table it returned nor the globals have "
      .. "one; check the name)", err_of(pool.invoke, pool, "t", "g"))
  end)
end

cases.ChunkLoad = function()
  with_pool({ core = 1 }, "error('broken top level', 0)", function(pool)
    assert.matches("^vmpool: chunk 'c' failed while a state ran its top level: broken top level",
      err_of(pool.invoke, pool, "c", "f"))
  end)
end

cases.Init = function()
  assert.matches("^vmpool: the init code failed in a new state: .*no database",
    err_of(vmpool.new, { core = 1, init = "error('no database')" }))
end

cases.Runtime = function()
  with_pool({ core = 1 }, "function f() error('went wrong') end", function(pool)
    assert.matches("^vmpool: error in c:f: c:1: went wrong\nstack traceback:\n", err_of(pool.invoke, pool, "c", "f"))
  end)
end

cases.Unsupported = function()
  with_pool({ core = 1 }, "function echo(...) return ... end function give() return coroutine.wrap(function() end) end",
    function(pool)
    assert.are.equal("vmpool: cannot pass argument #1 to 'echo': a thread value at .x (only nil, boolean, "
      .. "number, string, light userdata such as ngx.null, Lua functions, standard library C functions and tables "
      .. "of them nested up to 100 levels deep can cross between states)",
      err_of(pool.invoke, pool, "c", "echo", { x = coroutine.create(function() end) }))
    assert.matches("^vmpool: cannot pass result #1 of 'give': a C function that is not a standard library "
      .. "function %(only nil",
      err_of(pool.invoke, pool, "c", "give"))
  end)
end

cases.TimeLimit = function()
  with_pool({ core = 1, time_limit = 0.05 }, "function f() while true do end end", function(pool)
    assert.are.equal("vmpool: time limit exceeded: c:f ran longer than 0.05s (the state was replaced; raise "
      .. "time_limit or make the call shorter)", err_of(pool.invoke, pool, "c", "f"))
  end)
end

cases.MemoryLimit = function()
  with_pool({ core = 1, memory_limit = 4194304 }, "function f() return string.rep('x', 2^26) end", function(pool)
    assert.are.equal("vmpool: memory limit exceeded: c:f needed more than 4194304 bytes (the state was "
      .. "replaced; raise memory_limit or use less memory)", err_of(pool.invoke, pool, "c", "f"))
  end)
end

cases.MapItem = function()
  with_pool({ core = 1 }, "function f(x) if x == 2 then error('two') end return x end", function(pool)
    local err = err_of(pool.map, pool, "c", "f", { 1, 2, 3 })
    assert.matches("^vmpool: map item 2 of 'c:f' failed: c:1: two\nstack traceback:\n", err)
    err = err_of(pool.map, pool, "c", "f", { 1, coroutine.create(function() end) })
    assert.matches("^vmpool: map item 2 of 'c:f' failed: cannot pass argument #1 to 'f': a thread value "
      .. "%(only nil, boolean", err)
  end)
end

cases.Cancelled = function()
  local gate = Gate.new()
  with_pool({ core = 1, init = Gate.CHILD }, "return { gate = gate }", function(pool)
    local held = pool:submit("c", "gate", gate.port)
    gate:arrivals(1)
    local fut = pool:submit("c", "gate", gate.port)
    assert.is_true(fut:cancel())
    assert.are.equal("vmpool: call was cancelled", err_of(fut.wait, fut))
    gate:release()
    held:wait(10)
  end)
  gate:close()
end

cases.Closed = function()
  local pool = vmpool.new { core = 1 }
  pool:close()
  assert.are.equal("vmpool: pool is closed (create a new pool with vmpool.new)", err_of(pool.compile, pool, "c", ""))
end

cases.Exhausted = function()
  local gate = Gate.new()
  with_pool({ core = 1, blocking = false, init = Gate.CHILD }, "return { gate = gate }", function(pool)
    local held = pool:submit("c", "gate", gate.port)
    gate:arrivals(1)
    assert.are.equal("vmpool: pool exhausted: all 1 states are busy and blocking = false (raise core or "
      .. "max_noncore, or set blocking = true)", err_of(pool.invoke, pool, "c", "gate"))
    gate:release()
    held:wait(10)
  end)
  gate:close()
end

cases.QueueFull = function()
  local gate = Gate.new()
  with_pool({ core = 1, max_waiting = 0, init = Gate.CHILD }, "return { gate = gate }", function(pool)
    local held = pool:submit("c", "gate", gate.port)
    gate:arrivals(1)
    assert.are.equal("vmpool: queue full: 0 callers are already waiting for a state (raise max_waiting or the "
      .. "pool size)", err_of(pool.invoke, pool, "c", "gate"))
    gate:release()
    held:wait(10)
  end)
  gate:close()
end

cases.AcquireTimeout = function()
  local gate = Gate.new()
  with_pool({ core = 1, acquire_timeout = 0.02, init = Gate.CHILD }, "return { gate = gate }", function(pool)
    local held = pool:submit("c", "gate", gate.port)
    gate:arrivals(1)
    assert.are.equal("vmpool: timed out after 0.02s waiting for a free state (raise acquire_timeout, core or "
      .. "max_noncore)", err_of(pool.invoke, pool, "c", "gate"))
    gate:release()
    held:wait(10)
  end)
  gate:close()
end

cases.WaitTimeout = function()
  local gate = Gate.new()
  with_pool({ core = 1, init = Gate.CHILD }, "return { gate = gate }", function(pool)
    local fut = pool:submit("c", "gate", gate.port, "late")
    gate:arrivals(1)
    local r, err = fut:wait(0.01)
    assert.is_nil(r)
    assert.are.equal("vmpool: timed out after 0.01s waiting for the call to finish (it is still running; wait "
      .. "again or cancel it)", err)
    gate:release()
    assert.are.equal("late", fut:wait(10))
  end)
  gate:close()
end

cases.WrongProcess = function()
  if not Child.available then
    pending("needs lua-posix to fork (Lua 5.1 to 5.3 / LuaJIT); tests/fork.rs checks this message on Lua 5.4")
    return
  end
  with_pool({ core = 1 }, "function f() end", function(pool)
    local parent = Child.pid()
    local report = Child.run(function() return select(2, pcall(pool.invoke, pool, "c", "f")) end)
    assert.are.equal("vmpool: pool was created in another process (pid " .. parent .. "); create pools in the "
      .. "process that uses them (in OpenResty: in init_worker_by_lua or lazily, not in init_by_lua)", report)
  end)
end

cases.Spawn = function()
  if not Child.available then
    pending("needs lua-posix to cap a forked child's address space (Lua 5.1 to 5.3 / LuaJIT)")
    return
  end
  local report, how, code = Child.run_fresh([[
    Child.cap_address_space(1024 * 1024)
    return select(2, pcall(vmpool.new, { core = 64 }))
  ]])
  assert.matches("^vmpool: cannot create a pool state: cannot start [%w%- ]+ thread: ", report,
    nil, nil, "the child " .. how .. " (" .. tostring(code) .. ")")
end

cases.NoDescriptor = function()
  with_pool({ core = 1 }, "function echo(...) return ... end", function(pool)
    local fut = pool:submit("c", "echo", 7)
    local files = {}
    while true do -- every descriptor the process may open, then fut:pollfd() needs one more
      local f = io.open("/dev/null")
      if not f then break end
      files[#files + 1] = f
      assert(#files < 1e6, "the descriptor limit is too high for this test (ulimit -n)")
    end
    local ok, err = pcall(fut.pollfd, fut)
    for _, f in ipairs(files) do f:close() end
    assert.is_false(ok)
    assert.are.equal("vmpool: cannot create the descriptor fut:pollfd() returns: Too many open files (os error 24) "
      .. "(the process is out of file descriptors: close some, or raise its limit with ulimit -n)", err)
    assert.are.equal(7, fut:wait()) -- the future itself still works
    assert.are.equal(8, pool:invoke("c", "echo", 8))
  end)
end

cases.AsNgx = function()
  -- ngx.shared.DICT's own words, unprefixed, where resty.core raises (README, vmpool.shared)
  local d = vmpool.shared("messages-as-ngx")
  assert.are.equal('bad "zone" argument', err_of(d.get, "k"))
  assert.are.equal('bad "exptime" argument', err_of(d.set, d, "k", 1, -1))
  assert.are.equal('bad "exptime" argument', err_of(d.expire, d, "k"))
  assert.are.equal("bad init arg: number expected, got table", err_of(d.incr, d, "k", 1, {}))
  assert.are.equal("bad init_ttl arg: number expected, got boolean", err_of(d.incr, d, "k", 1, 0, true))
  assert.are.equal('bad "init_ttl" argument', err_of(d.incr, d, "k", 1, 0, -1))
  assert.are.equal('must provide "init" when providing "init_ttl"', err_of(d.incr, d, "k", 1, nil, 1))
end

cases.InUse = function()
  -- a call hook runs on vmpool's protected push of the results inside pool:invoke, where the pool
  -- is in use
  with_pool({ core = 1 }, "function t() return { 1 } end", function(pool)
    local err
    debug.sethook(function()
      local ok, e = pcall(pool.stats, pool)
      if not ok then err = err or e end
    end, "c")
    local r = pool:invoke("c", "t")
    debug.sethook()
    assert.are.equal(1, r[1])
    assert.are.equal("vmpool: this pool is in use by one of its methods still running on this thread (a __gc "
      .. "finalizer or a debug hook called it from inside that method); call it after that method returns", err)
  end)
end

cases.Load = function()
  local Sub = require "spec.support.subprocess"
  -- a fresh interpreter that finds vmpool but no luv, and one whose vmpool cannot load
  local out, status = Sub.run([[
    package.cpath = assert(package.cpath:match("[^;]*lua_modules/[^;]*%?%.so"))
    package.preload.vmpool = function() error("plain failure", 0) end
    print(select(2, pcall(require, "vmpool.cqueues")))
    package.preload.vmpool = nil
    package.loaded.vmpool = nil -- Lua 5.1 leaves its "loop or previous error" sentinel there
    print(select(2, pcall(require, "vmpool.luv")))
  ]])
  assert.are.equal(0, status, out)
  assert.matches("\nvmpool: vmpool.luv needs the luv module %(Debian: apt%-get install lua%-luv; LuaRocks: "
    .. "luarocks install luv%), which cannot be loaded: module 'luv' not found", out)
  assert.matches("^vmpool: cannot load vmpool.cqueues: plain failure\n", out)
end

describe("error messages", function()
  it("has a case for every variant of src/error.rs", function()
    local f = assert(io.open("src/error.rs"))
    local src = f:read("*a")
    f:close()
    local display = assert(src:match("impl fmt::Display for Error(.-)\nimpl std::error::Error"))
    local n = 0
    for variant in display:gmatch("Error::(%w+)") do
      n = n + 1
      assert.is_truthy(cases[variant] or unreachable[variant], "no case for Error::" .. variant)
    end
    assert.is_true(n >= 19)
  end)

  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(name, cases[name])
  end

  -- the make rock LUA=... name of each runtime, and of the one running these specs
  local ROCK_NAMES = { LuaJIT = "luajit", ["Lua 5.1"] = "lua5.1", ["Lua 5.2"] = "lua5.2", ["Lua 5.3"] = "lua5.3",
    ["Lua 5.4"] = "lua5.4", ["Lua 5.5"] = "lua5.5" }
  it("BadArgument: no other runtime's build opens here (the linker refuses it or vmpool names the right build)",
    function()
      local here = ROCK_NAMES[vmpool.runtime]
      local tried = 0
      for runtime, name in pairs(ROCK_NAMES) do
        local path = "lua_modules/" .. name .. "/lib/lua/" .. (name == "luajit" and "5.1" or name:sub(4))
          .. "/vmpool.so"
        local f = name ~= here and io.open(path)
        if f then
          f:close()
          tried = tried + 1
          local open, why = package.loadlib(path, "luaopen_vmpool")
          if open then
            local ok, err = pcall(open)
            assert.is_false(ok, "the " .. runtime .. " build opened in " .. vmpool.runtime)
            assert.are.equal("vmpool: this vmpool build is for " .. runtime .. " but was loaded into "
              .. vmpool.runtime .. "; install the build for " .. vmpool.runtime .. " (e.g. make rock LUA=" .. here
              .. ")", err)
          else
            assert.is_string(why)
          end
        end
      end
      if tried == 0 then pending("needs another runtime's build in lua_modules/ (scripts/rock.sh)") end
    end)

  if IS_LUAJIT then
    it("BadArgument: a build for another runtime refuses to load (the Lua 5.1 build into LuaJIT)", function()
      local path = "lua_modules/lua5.1/lib/lua/5.1/vmpool.so"
      local f = io.open(path)
      if not f then
        pending("needs the Lua 5.1 build (scripts/rock.sh lua5.1) at " .. path)
        return
      end
      f:close()
      local open = assert(package.loadlib(path, "luaopen_vmpool"))
      local ok, err = pcall(open)
      assert.is_false(ok)
      assert.are.equal("vmpool: this vmpool build is for Lua 5.1 but was loaded into LuaJIT; install the build "
        .. "for LuaJIT (e.g. make rock LUA=luajit)", err)
    end)

    it("BadArgument: jit = true with a time limit (LuaJIT)", function()
      assert.matches("^vmpool: option 'time_limit' to vmpool.new needs jit = false on LuaJIT",
        err_of(vmpool.new, { time_limit = 1, jit = true }))
    end)
  end
end)

-- Every message starts with "vmpool:" however the API is misused, and a child's error value keeps
-- its information the way the standalone interpreter shows it (issue 10, section 7).
describe("messages keep their information", function()
  it("pool.co_invoke and pool.close called with a dot say how to call them", function()
    with_pool({ core = 1 }, "return { f = function() return 1 end }", function(pool)
      assert.matches("^vmpool: bad argument #1 to 'co_invoke': expected a pool, got string %(call it as "
        .. "pool:co_invoke%(...%), with a colon%)$", err_of(pool.co_invoke, "c", "f"))
      assert.matches("^vmpool: bad argument #1 to 'close': expected a pool, got no value %(call it as "
        .. "pool:close%(%), with a colon%)$", err_of(pool.close))
      -- every method of pools and futures names itself and what it got instead
      for _, method in ipairs { "compile", "invoke", "submit", "map", "unload", "stats", "collect", "stream" } do
        assert.matches("^vmpool: bad argument #1 to '" .. method .. "': expected a pool, got number %(call it as "
          .. "pool:" .. method .. "%(", err_of(pool[method], 42), 1, false)
      end
      local fut = pool:submit("c", "f")
      for _, method in ipairs { "wait", "ready", "cancel", "pollfd" } do
        assert.matches("^vmpool: bad argument #1 to '" .. method .. "': expected a future, got string %(call it as "
          .. "fut:" .. method .. "%(", err_of(fut[method], "x"))
      end
      fut:wait()
    end)
  end)

  it("a failing vmpool.run coroutine, even one whose error object's __tostring raises", function()
    local err = err_of(vmpool.run, function()
      error(setmetatable({}, { __tostring = function() error("no text for you") end }))
    end)
    assert.matches("^vmpool: a coroutine in vmpool.run failed: %(error object is a table value whose "
      .. "__tostring failed%)", err)
  end)

  it("a child's error(42), an error object with __tostring, and one whose __tostring raises", function()
    with_pool({ core = 1 }, [[return {
      number = function() error(42) end,
      shown = function() error(setmetatable({}, { __tostring = function() return "custom text" end })) end,
      broken = function() error(setmetatable({}, { __tostring = function() error("nope") end })) end,
      plain = function() error({}) end,
    }]], function(pool)
      assert.matches("^vmpool: error in c:number: [^\n]*42\nstack traceback:", err_of(pool.invoke, pool, "c", "number"))
      assert.matches("^vmpool: error in c:shown: custom text\nstack traceback:",
        err_of(pool.invoke, pool, "c", "shown"))
      assert.matches("^vmpool: error in c:broken: %(error object is a table value whose __tostring failed%)",
        err_of(pool.invoke, pool, "c", "broken"))
      assert.matches("^vmpool: error in c:plain: %(error object is a table value%)",
        err_of(pool.invoke, pool, "c", "plain"))
    end)
  end)

  it("a stack overflow from recursion says stack overflow", function()
    with_pool({ core = 1 }, "return { deep = function() local function r(n) return 1 + r(n + 1) end return r(1) end }",
      function(pool)
        assert.matches("stack overflow", err_of(pool.invoke, pool, "c", "deep"))
      end)
  end)

  it("option errors print numbers as Lua does and say the accepted range", function()
    assert.matches("^vmpool: option 'memory_limit' to vmpool.new must be at most 9007199254740992 %(got 1e%+300%)$",
      err_of(vmpool.new, { memory_limit = 1e300 }))
    assert.matches("^vmpool: option 'idle_timeout' to vmpool.new must be a non%-negative number of seconds or "
      .. "math.huge %(got %-?nan%)$", err_of(vmpool.new, { idle_timeout = 0 / 0 }))
    assert.matches("^vmpool: option 'core' to vmpool.new must be a non%-negative integer %(got 1.5%)$",
      err_of(vmpool.new, { core = 1.5 }))
  end)

  it("durations too long for a clock mean forever, like math.huge", function()
    local pool = vmpool.new { core = 1, acquire_timeout = 1e300, idle_timeout = 1e300, time_limit = 1e300 }
    pool:compile("c", "return { f = function() return 'ok' end }")
    assert.are.equal("ok", pool:invoke("c", "f"))
    pool:close()
  end)

  it("stats() counts are integers where Lua has them (5.3+), its latency figures seconds", function()
    with_pool({ core = 1 }, "return { f = function() end }", function(pool)
      pool:invoke("c", "f")
      local s = pool:stats()
      assert.are.equal("1", tostring(s.succeeded))
      assert.are.equal("1", tostring(s.run.count))
      if math.type then
        for k, v in pairs(s) do
          if k == "wait" or k == "run" then
            for field, x in pairs(v) do
              assert.are.equal(field == "count" and "integer" or "float", math.type(x), k .. "." .. field)
            end
          else
            assert.are.equal("integer", math.type(v), k)
          end
        end
      end
    end)
  end)
end)
