-- Limits that must hold where they used to leak (issue 10, section 4): init under the pool's
-- limits, positive time limits that round to zero, sizes the system cannot give, and more results
-- than can cross. Cases that would hang without the fix run in a fresh interpreter with a bound.
local vmpool = require "vmpool"
local Sub = require "spec.support.subprocess"
local Gate = require "spec.support.gate"

local IS_LUAJIT = vmpool.runtime == "LuaJIT"
local JIT_OFF = IS_LUAJIT and ", jit = false" or ""

local function run(body)
  local out, status, killed = Sub.run("io.stdout:setvbuf('no') local vmpool = require 'vmpool'\n" .. body,
    { timeout = 20 })
  assert.is_false(killed, "the script hung (killed at the bound):\n" .. out)
  assert.are.equal(0, status, "the script did not exit cleanly:\n" .. out)
  return out
end

describe("init under the pool's limits", function()
  it("an init that never ends fails vmpool.new once time_limit has passed", function()
    local out = run((
      [[print(pcall(vmpool.new, { core = 1, time_limit = 0.2, init = "while true do end" JIT_OFF }))]]
    ):gsub("JIT_OFF", JIT_OFF))
    assert.matches("false\tvmpool: the init code failed in a new state: it ran longer than time_limit = "
      .. "0.2s (make init faster or raise time_limit)", out, 1, true)
  end)

  it("a non-core state whose init outlasts time_limit fails the call it was started for", function()
    local out = run(([[
      local pool = vmpool.new { core = 0, max_noncore = 1, time_limit = 0.2, init = "while true do end" JIT_OFF }
      pool:compile("c", "return { f = function() return 1 end }")
      print(pcall(pool.invoke, pool, "c", "f"))
      local s = pool:stats()
      print("stats", s.invokes, s.errors, s.core + s.noncore, s.busy)
      pool:close()
    ]]):gsub("JIT_OFF", JIT_OFF))
    assert.matches("false\tvmpool: the init code failed in a new state: it ran longer than time_limit = 0.2s",
      out, 1, true)
    assert.matches("stats\t1\t1\t0\t0", out, 1, true)
  end)

  it("an init that allocates past memory_limit fails vmpool.new with that limit in the message", function()
    local ok, err = pcall(vmpool.new, { core = 1, memory_limit = 4000000,
      init = "local t = {} for i = 1, 1e7 do t[i] = i end" })
    assert.is_false(ok)
    assert.matches("^vmpool: the init code failed in a new state: it needed more than memory_limit = 4000000 bytes",
      err)
  end)

  it("an init whose require finds no descriptor to open the module with says so", function()
    local files = {}
    while true do -- every descriptor the process may open
      local f = io.open("/dev/null")
      if not f then break end
      files[#files + 1] = f
      assert(#files < 1e6, "the descriptor limit is too high for this test (ulimit -n)")
    end
    local ok, err = pcall(vmpool.new, { core = 1, init = "require 'socket'" })
    for _, f in ipairs(files) do f:close() end
    assert.is_false(ok)
    assert.matches("^vmpool: the init code failed in a new state: .*module 'socket' not found", err)
    assert.matches("%(the process is out of file descriptors, so require could not open the module's file: close "
      .. "some, or raise the limit: ulimit %-n, nginx's worker_rlimit_nofile%)$", err)
    local pool = vmpool.new { core = 1, init = "require 'socket'" } -- with descriptors, it loads
    pool:close()
  end)
end)

describe("time_limit values", function()
  it("a positive time_limit too small to count still limits (1e-10 is not 'no limit')", function()
    local out = run(([[
      local pool = vmpool.new { core = 1, time_limit = 1e-10 JIT_OFF }
      pool:compile("c", "return { spin = function() while true do end end }")
      print(pcall(pool.invoke, pool, "c", "spin"))
      pool:close()
    ]]):gsub("JIT_OFF", JIT_OFF))
    -- the limit covers loading the chunk too, so it may trip there: "c:(top level)"
    assert.is_truthy(out:find("false\tvmpool: time limit exceeded: c:spin", 1, true)
      or out:find("false\tvmpool: time limit exceeded: c:(top level)", 1, true), out)
  end)
end)

describe("pool sizes the system cannot give", function()
  for _, core in ipairs { 1e9, 2 ^ 64 } do
    it(("core = %.14g is refused by vmpool.new at once, with the limit, before any thread starts"):format(core),
      function()
        local before = Gate.thread_ids()
        local ok, err = pcall(vmpool.new, { core = core })
        assert.is_false(ok)
        assert.matches("^vmpool: option 'core' to vmpool.new must be at most %d+ %(the threads this system "
          .. "allows: the smaller of kernel.threads%-max and RLIMIT_NPROC%) %(got " .. ("%.14g"):format(core)
            :gsub("%+", "%%+") .. "%)$", err)
        assert.are.same({}, Gate.threads_left(before))
      end)
  end
end)

describe("results that cannot cross", function()
  -- what the host can push in one C call, less a margin (MAX_RESULTS in src/child.rs): Lua 5.1
  -- and LuaJIT allow 8,000 slots per C call, 5.2 to 5.5 a million per thread
  local LIMIT = (vmpool.runtime == "Lua 5.1" or IS_LUAJIT) and 7900 or 900000

  local function returning(n)
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "return { many = function(n) local t = {} for i = 1, n do t[i] = i end "
      .. "return (table.unpack or unpack)(t, 1, n) end }")
    local ok, err = pcall(pool.invoke, pool, "c", "many", n)
    local s = pool:stats()
    pool:close()
    return ok, err, s
  end

  it("a call returning more values than the host can take is refused by name and counted as an error",
    function()
      local ok, err, s = returning(LIMIT + 90)
      assert.is_false(ok)
      assert.are.equal("vmpool: cannot pass the results of 'many': it returned " .. (LIMIT + 90) .. " values, "
        .. "more than the " .. LIMIT .. " that can cross at once on " .. vmpool.runtime .. " (return them in a table)",
        err)
      assert.are.same({ 0, 1 }, { s.succeeded, s.errors })
    end)

  it("a call returning as many values as can cross succeeds", function()
    local ok, err, s = returning(LIMIT)
    assert.is_true(ok, err)
    assert.are.same({ 1, 0 }, { s.succeeded, s.errors })
  end)

  -- a host whose stack is nearly full (a deep recursion) receiving many values: LuaJIT's whole
  -- stack holds 65,500 slots and its lua_checkstack raises "stack overflow", Lua 5.2 to 5.5's holds
  -- a million and theirs answers 0; either way the caller's error, not a finalizer's or vmpool's own,
  -- and a popped message stays in its channel
  it("results or a message that the host's stack has no room for left are refused as such", function()
    local many = LIMIT > 7900 and 300000 or LIMIT
    local first, last, step = 4000, 7000, 50 -- frames of deep() below, about 11 slots each
    if many > LIMIT or LIMIT > 7900 then first, last, step = 50000, 90000, 2000 end
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "return { many = function(n) local t = {} for i = 1, n do t[i] = i end "
      .. "return (table.unpack or unpack)(t, 1, n) end }")
    local ch = vmpool.channel("limits_hold_spec_deep", { bytes = 1e8 })
    local values = {}
    for i = 1, many do values[i] = i end
    local function deep(n, what)
      if n == 0 then
        if what == "pop" then return select("#", ch:pop(0)) end
        return select("#", pool:invoke("c", "many", many))
      end
      local a, b, c, d, e, f, g, h = 1, 2, 3, 4, 5, 6, 7, 8
      return deep(n - 1, what) + a + b + c + d + e + f + g + h - 36
    end
    local refused = 0
    for depth = first, last, step do
      for _, what in ipairs { "pop", "invoke" } do
        if what == "pop" then assert.is_true(ch:push((table.unpack or unpack)(values))) end
        local ok, err = pcall(deep, depth, what)
        if ok then
          assert.are.equal(many, err)
        elseif tostring(err):find("^vmpool:") then
          assert.matches("^vmpool: no Lua stack space left for receiving "
            .. (what == "pop" and "a message from channel:pop" or "the results of c:many"), err)
          refused = refused + 1
        else
          assert.matches("stack overflow", err) -- the recursion's own, before vmpool's part
        end
        if what == "pop" then
          assert.are.equal(ok and 0 or 1, ch:len())
          ch:try_pop()
        end
      end
    end
    if vmpool.runtime ~= "Lua 5.1" then assert.is_true(refused > 0, "no depth left too little room") end
    pool:close()
  end)
end)

describe("arguments that cannot cross", function()
  -- MAX_ARGS in src/host/call_io.rs: what a child state on Lua 5.1 or LuaJIT holds, less a
  -- margin, and the same on every runtime
  local LIMIT = 7500
  local unpack = table.unpack or unpack

  local function numbers(n)
    local t = {}
    for i = 1, n do t[i] = i end
    return t
  end

  local function pool_counting()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "return { count = function(...) return select('#', ...) end }")
    return pool
  end

  it("a call passing more arguments than a call can take is refused by name and the pool still serves",
    function()
      local pool = pool_counting()
      local ok, err = pcall(pool.invoke, pool, "c", "count", unpack(numbers(LIMIT + 1)))
      assert.is_false(ok)
      assert.are.equal("vmpool: cannot pass the arguments of 'count': " .. (LIMIT + 1)
        .. " arguments are more than the " .. LIMIT .. " a call can take (pass them in a table)", err)
      ok, err = pcall(pool.submit, pool, "c", "count", unpack(numbers(LIMIT + 1)))
      assert.is_false(ok)
      assert.matches("^vmpool: cannot pass the arguments of 'count'", err)
      assert.are.equal(3, pool:invoke("c", "count", 1, 2, 3))
      -- a function sent as the callee is named as every other message names it
      local line = debug.getinfo(1, "l").currentline + 1
      local function count(...) return select("#", ...) end
      ok, err = pcall(pool.invoke, pool, count, unpack(numbers(LIMIT + 1)))
      assert.is_false(ok)
      assert.are.equal("vmpool: cannot pass the arguments of 'function <spec/limits_hold_spec.lua:" .. line .. ">': "
        .. (LIMIT + 1) .. " arguments are more than the " .. LIMIT .. " a call can take (pass them in a table)", err)
      assert.are.equal(LIMIT, pool:invoke(count, unpack(numbers(LIMIT))))
      pool:close()
    end)

  it("a call passing as many arguments as a call can take succeeds", function()
    local pool = pool_counting()
    assert.are.equal(LIMIT, pool:invoke("c", "count", unpack(numbers(LIMIT))))
    assert.are.equal(LIMIT, pool:submit("c", "count", unpack(numbers(LIMIT))):wait())
    local nested = numbers(LIMIT)
    nested[LIMIT] = { { { 1 } } }
    assert.are.equal(LIMIT, pool:invoke("c", "count", unpack(nested)))
    pool:close()
  end)

  it("a map item with more arguments than a call can take is refused with the same limit", function()
    local pool = pool_counting()
    local ok, err = pcall(pool.map, pool, "c", "count", { { 1 }, numbers(LIMIT + 1) }, { unpack = true })
    assert.is_false(ok)
    assert.are.equal("vmpool: map item 2 of 'c:count' failed: cannot pass the arguments of 'count': " .. (LIMIT + 1)
      .. " arguments are more than the " .. LIMIT .. " a call can take (pass them in a table)", err)
    assert.are.same({ 1, LIMIT }, pool:map("c", "count", { { 1 }, numbers(LIMIT) }, { unpack = true }))
    pool:close()
  end)
end)
