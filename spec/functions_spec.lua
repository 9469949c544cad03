-- Functions crossing between the host and pool states: as the callee (`pool:invoke(fn, ...)` and
-- its siblings) and as values (arguments, results, table fields, upvalues), with their upvalues
-- copied, tables and functions keeping their shape, and a clear error for what cannot cross.
local vmpool = require "vmpool"
local cjson = require "cjson" -- Debian's lua-cjson: cjson.null is a light userdata

local has_integers = math.type ~= nil
-- Lua 5.2+ and LuaJIT can join upvalues; Lua 5.1 cannot (closures get an upvalue each)
local joins = jit ~= nil or _VERSION ~= "Lua 5.1"

-- Park-Miller, exact in doubles on every runtime (as in values_spec.lua)
local function rng(seed)
  local state = seed
  return function(n)
    state = state * 16807 % 2147483647
    return state % n
  end
end

-- A random value graph: tables and closures (over one or two values each), scalars, a standard
-- library C function and cjson.null, with tables and functions reached again (shared) and from
-- below (cycles, also through a closure's upvalue).
local function random_graph(r)
  local nodes = {}
  local function scalar()
    local k = r(6)
    if k == 0 then return r(1000)
    elseif k == 1 then return r(1000) + 0.5
    elseif k == 2 then return "s" .. r(100)
    elseif k == 3 then return r(2) == 0
    elseif k == 4 then return string.format
    end
    return cjson.null
  end
  local function value(depth)
    local k = r(10)
    if k < 3 then return nodes[r(#nodes) + 1] end
    if depth > 4 or k < 5 then return scalar() end
    if k < 8 then
      local t = {}
      nodes[#nodes + 1] = t
      for i = 1, r(4) do t[i] = value(depth + 1) end
      for i = 1, r(3) do t["k" .. i] = value(depth + 1) end
      return t
    end
    local a, b = value(depth + 1), value(depth + 1)
    local f
    if r(2) == 0 then f = function() return a end else f = function() return a, b end end
    nodes[#nodes + 1] = f
    return f
  end
  local root = {}
  nodes[1] = root
  for i = 1, 3 + r(5) do root[i] = value(1) end
  return root
end

-- Whether b is a copy of a with the same shape: a one-to-one map between their tables and Lua
-- functions, equal scalars (integer and float kept apart), equal upvalues (but _ENV).
local function same_shape(a, b, map, back)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then
    return a == b and (not has_integers or math.type(a) == math.type(b))
  end
  if type(a) == "function" and debug.getinfo(a, "S").what == "C" then return a == b end
  if type(a) ~= "table" and type(a) ~= "function" then return a == b end
  if map[a] ~= nil or back[b] ~= nil then return map[a] == b and back[b] == a end
  map[a], back[b] = b, a
  if type(a) == "function" then
    local i = 1
    while true do
      local na, va = debug.getupvalue(a, i)
      local nb, vb = debug.getupvalue(b, i)
      if na ~= nb then return false end
      if na == nil then return true end
      if na ~= "_ENV" and not same_shape(va, vb, map, back) then return false end
      i = i + 1
    end
  end
  for k, v in pairs(a) do
    if not same_shape(v, b[k], map, back) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

local function loads_and_hits()
  local loads, hits = vmpool._function_cache()
  return loads, hits
end

describe("functions crossing between states", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 1, init = "WHERE = 'state'" }
    pool:compile("c", [[
      return {
        echo = function(...) return ... end,
        call = function(f, ...) return f(...) end,
        make_counter = function()
          local n = 0
          return function() n = n + 1; return n end
        end,
      }
    ]])
  end)
  teardown(function() pool:close() end)

  it("runs a function passed as the callee, with its arguments", function()
    assert.are.equal(55, pool:invoke(function(n)
      local a, b = 0, 1
      for _ = 1, n do a, b = b, a + b end
      return a
    end, 10))
    assert.are.same({ 3, "x" }, { pool:invoke(function(a, b) return a + 1, b end, 2, "x") })
    assert.are.equal(6, pool:submit(function(x) return x * 2 end, 3):wait())
    assert.are.same({ 2, 4, 6 }, pool:map(function(x) return x * 2 end, { 1, 2, 3 }))
    assert.are.same({ 3, 12 }, pool:map(function(a, b) return a * b end, { { 1, 3 }, { 3, 4 } }, { unpack = true }))
    local got = {}
    vmpool.run(function()
      got.invoke = pool:co_invoke(function(s) return s .. "!" end, "hi")
      got.map = pool:co_map(function(x) return -x end, { 1, 2 })
    end)
    assert.are.equal("hi!", got.invoke)
    assert.are.same({ -1, -2 }, got.map)
  end)

  it("runs a function passed as the callee under vmpool.luv and vmpool.cqueues", function()
    local has_luv, uv = pcall(require, "luv")
    if has_luv then
      local vluv = require "vmpool.luv"
      local got
      vluv.spawn(function()
        got = { pool:co_invoke(function(x) return x + 1 end, 1), pool:co_map(function(x) return x * 3 end, { 2 })[1] }
      end)
      uv.run()
      assert.are.same({ 2, 6 }, got)
    end
    local has_cq, cqueues = pcall(require, "cqueues")
    if has_cq then
      require "vmpool.cqueues"
      local cq, got = cqueues.new(), nil
      cq:wrap(function()
        got = { pool:co_invoke(function(x) return x + 1 end, 1), pool:co_map(function(x) return x * 3 end, { 2 })[1] }
      end)
      assert(cq:loop())
      assert.are.same({ 2, 6 }, got)
    end
  end)

  it("runs a standard library C function as the callee", function()
    assert.are.equal("7-x", pool:invoke(string.format, "%d-%s", 7, "x"))
    assert.are.equal(2, pool:invoke(math.floor, 2.5))
    -- its errors name it
    assert.matches("^vmpool: error in string.rep: ", select(2, pcall(pool.invoke, pool, string.rep)))
    assert.matches("^vmpool: map item 1 of 'string.rep' failed: ", select(2, pcall(pool.map, pool, string.rep, { 1 })))
  end)

  it("copies a closure's upvalues of every type that crosses, integer and float kept apart", function()
    local t = { 1, "two", k = { deep = true } }
    local null = cjson.null
    local fmt = string.format
    local function helper(x) return x + 1 end
    local nothing, yes, no, int, float, big, str = nil, true, false, 3, 3.0, 2 ^ 53, "a\0b"
    local r = { pool:invoke(function()
      local kinds = {}
      if has_integers then kinds = { math.type(int), math.type(float) } end
      return nothing, yes, no, int, float, big, str, t, null, helper(1), fmt("%03d", 7), kinds
    end) }
    assert.is_nil(r[1])
    assert.are.same({ true, false, 3, 3.0, 2 ^ 53, "a\0b", t }, { r[2], r[3], r[4], r[5], r[6], r[7], r[8] })
    assert.are.equal(null, r[9])
    assert.are.equal(2, r[10])
    assert.are.equal("007", r[11])
    if has_integers then
      assert.are.same({ "integer", "float" }, r[12])
    end
  end)

  it("copies upvalues: a counter captured by the closure changes only in the copy", function()
    local n = 0
    local function bump() n = n + 1; return n end
    assert.are.equal(1, pool:invoke(bump))
    assert.are.equal(1, pool:invoke(bump))
    assert.are.equal(0, n)
  end)

  it("does not carry one call's upvalues into the next call of the same function", function()
    local function make(x) return function(set) if set then x = set end return x end end
    local one, two = make(1), make(2)
    assert.are.equal(9, pool:invoke(one, 9))
    assert.are.equal(1, pool:invoke(one))
    assert.are.equal(2, pool:invoke(two))
    assert.are.equal(1, pool:invoke(one))
  end)

  it("gives each call of a closure its own upvalues, also once the state's JIT compiled it (LuaJIT)", function()
    local wrong = {}
    for i = 1, 300 do
      local k, s = i, "s" .. i
      local a, b = pool:invoke(function(x)
        local acc = 0
        for j = 1, 100 do acc = acc + j end
        return k + acc - 5050, s .. x
      end, "!")
      if a ~= i or b ~= s .. "!" then wrong[#wrong + 1] = i .. " -> " .. tostring(a) .. ", " .. tostring(b) end
    end
    local function one() return 1 end -- captures nothing: the state serves it from its cache
    for i = 1, 300 do
      local k = i
      local r = pool:invoke(function() return one() + k end)
      if r ~= i + 1 then wrong[#wrong + 1] = "after a cached upvalue: " .. i .. " -> " .. tostring(r) end
    end
    for round = 1, 100 do
      local r = pool:map(function(x) return x + round end, { 1, 2, 3 })[3]
      if r ~= 3 + round then wrong[#wrong + 1] = "map round " .. round .. " -> " .. tostring(r) end
    end
    assert.are.same({}, wrong)
  end)

  it("calls nested closures and recursive local functions", function()
    local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
    local function outer(k)
      local function inner(x) return x + k end
      return function(x) return inner(inner(x)) end
    end
    assert.are.equal(6765, pool:invoke(function(n) return fib(n) end, 20))
    assert.are.equal(14, pool:invoke(function(f, x) return f(x) end, outer(2), 10))
    -- a closure made in the state, over its own local, comes back working
    local counter = pool:invoke("c", "make_counter")
    assert.are.equal(1, counter())
    assert.are.equal(2, counter())
    local adder = pool:invoke(function(k) return outer(k) end, 5)
    assert.are.equal(20, adder(10))
  end)

  it("carries functions in tables both ways, also as keys", function()
    local key = function() return "key" end
    local t = { f = function(x) return x * 3 end, list = { function() return "a" end }, [key] = "v" }
    local r = pool:invoke(function(tt)
      local k = next(tt, nil)
      local found
      for kk, v in pairs(tt) do if type(kk) == "function" then found = kk() .. v end end
      return { tt.f(2), tt.list[1](), found, back = function() return k ~= nil end }
    end, t)
    assert.are.equal(6, r[1])
    assert.are.equal("a", r[2])
    assert.are.equal("keyv", r[3])
    assert.is_true(r.back())
    local res = pool:invoke("c", "echo", t)
    assert.are.equal(6, res.f(2))
    assert.are.equal("a", res.list[1]())
  end)

  it("carries functions in map items and results", function()
    local base = 100
    local items = { function() return 1 end, function() return base end }
    local r = pool:map(function(f) local v = f() return function() return v + 1 end end, items)
    assert.are.equal(2, r[1]())
    assert.are.equal(101, r[2]())
    local named = pool:map("c", "call", { function() return "x" end, math.random })
    assert.are.equal("x", named[1])
    assert.are.equal("number", type(named[2]))
  end)

  it("keeps shared and cyclic tables and functions in shape both ways", function()
    local shared = { 1 }
    local cyclic = { name = "c" }
    cyclic.self = cyclic
    local f = function() return shared end
    local r = { pool:invoke(function(a, b, c, d, e)
      return a == b, c.self == c, d == e, d() == a, { a, a, c }
    end, shared, shared, cyclic, f, f) }
    assert.are.same({ true, true, true, true }, { r[1], r[2], r[3], r[4] })
    local back = r[5]
    assert.are.equal(back[1], back[2])
    assert.are.equal(back[3], back[3].self)
    local g1, g2 = pool:invoke("c", "echo", f, f)
    assert.are.equal(g1, g2)
  end)

  it("keeps an upvalue shared by functions sent together shared on the other side (5.2+, LuaJIT)", function()
    local count = 0
    local function inc() count = count + 1 end
    local function get() return count end
    local seen = pool:invoke(function(i, g) i(); i(); return g() end, inc, get)
    assert.are.equal(joins and 2 or 0, seen)
    assert.are.equal(0, count)
    local i2, g2 = pool:invoke("c", "echo", inc, get)
    i2()
    assert.are.equal(joins and 1 or 0, g2())
  end)

  it("binds globals to the receiving state's own globals", function()
    assert.are.equal("state", pool:invoke(function() return WHERE end)) -- luacheck: ignore 113
    assert.are.equal("function", pool:invoke(function() return type(string.format) end))
    if _VERSION ~= "Lua 5.1" then
      assert.is_true(pool:invoke(function() return _ENV == _G end)) -- luacheck: ignore 113
    end
  end)

  it("binds an upvalue that holds the globals table to the receiving state's globals", function()
    local G = _G
    assert.are.equal("state", pool:invoke(function() return G.WHERE end))
    local back = pool:invoke(function() local g = _G; return function() return g end end)
    assert.are.equal(_G, back())
    -- string.dump(f, true) drops upvalue names: `_ENV` is then known only by its value
    local function where(x) return math.floor(x) .. WHERE end -- luacheck: ignore 113
    local stripped = (loadstring or load)(string.dump(where, true))
    assert.are.equal("2state", pool:invoke(stripped, 2.5))
    assert.are.equal("3state", pool:invoke(function(f, x) return f(x) end, stripped, 3.5))
  end)

  it("binds an upvalue that holds the io or package table to the receiving state's (they cannot be copied)", function()
    local io_, package_ = io, package
    assert.is_true(pool:invoke(function() return rawequal(io_, io) and rawequal(package_, package) end))
    local back = pool:invoke(function() local i, p = io, package; return function() return i, p end end)
    local i, p = back()
    assert.are.equal(io, i)
    assert.are.equal(package, p)
  end)

  it("keeps distinct closures of one function distinct within a transfer, also as table keys", function()
    -- each load makes a distinct function of the same bytecode (Lua 5.2 and 5.3 would hand the
    -- same closure back from a factory whose closures capture nothing but _ENV)
    local function make()
      return (loadstring or load)("return function(other) return rawequal(other, debug.getinfo(1, 'f').func) end",
        "=same")()
    end
    local keys = {}
    for i = 1, 3 do keys[make()] = i end
    assert.are.equal(3, pool:invoke(function(t)
      local n = 0
      for _ in pairs(t) do n = n + 1 end
      return n
    end, keys))
    local f, g = make(), make()
    assert.is_false(pool:invoke(function(a, b) return rawequal(a, b) end, f, g))
    assert.is_false(pool:invoke(f, g)) -- the callee and another closure of it
    assert.is_true(pool:invoke(f, f))
    local n = 0
    for _ in pairs(pool:invoke("c", "echo", keys)) do n = n + 1 end
    assert.are.equal(3, n)
  end)

  it("names the function's source and line in its errors and tracebacks", function()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(pool.invoke, pool, function() error("boom") end)
    assert.is_false(ok)
    assert.matches("^vmpool: error in function <spec/functions_spec.lua:" .. line .. ">: spec/functions_spec.lua:"
      .. line .. ": boom\nstack traceback:", err)
  end)

  describe("refuses what cannot cross, naming the path", function()
    local function err_of(...)
      local ok, err = pcall(...)
      assert.is_false(ok)
      return err
    end

    it("a full userdata in an upvalue", function()
      local conn = io.stdout
      local t = { cb = function() return conn end }
      assert.matches("^vmpool: cannot pass argument #2 to the function to call: a userdata value at %.cb "
        .. "upvalue 'conn' %(only nil", err_of(pool.invoke, pool, function() end, 1, t))
      assert.matches("^vmpool: cannot pass the function to call: a userdata value at upvalue 'conn'",
        err_of(pool.invoke, pool, t.cb))
    end)

    it("a coroutine", function()
      local co = coroutine.create(function() end)
      assert.matches("^vmpool: cannot pass argument #1 to 'echo': a thread value at upvalue 'co'",
        err_of(pool.invoke, pool, "c", "echo", function() return co end))
      assert.matches("^vmpool: cannot pass result #1 of 'function <spec/functions_spec.lua:%d+>': a thread value",
        err_of(pool.invoke, pool, function() return coroutine.create(function() end) end))
    end)

    it("a C function outside the standard library", function()
      local wrapped = coroutine.wrap(function() end)
      assert.matches("^vmpool: cannot pass argument #1 to 'echo': a C function that is not a standard library "
        .. "function at %.x", err_of(pool.invoke, pool, "c", "echo", { x = wrapped }))
      -- a module captured as an upvalue: the error says to require it where it is called
      local encode = cjson.encode
      assert.matches("^vmpool: cannot pass the function to call: a C function that is not a standard library "
        .. "function at upvalue 'encode' %(.*%); other C functions %(a module's, coroutine.wrap's, an iterator%) "
        .. "stay in their state: make them where they are called %(require the module inside the function, or in "
        .. "the pool's init%)$",
        err_of(pool.invoke, pool, function(t) return encode(t) end, {}))
      assert.are.equal("[1]", pool:invoke(function(t) return require("cjson").encode(t) end, { 1 }))
    end)

    it("a standard library C function the receiving state does not have", function()
      local p = vmpool.new { core = 1, init = "string.rep = nil" }
      local err = err_of(p.invoke, p, function(f) return f end, string.rep)
      p:close()
      assert.matches("^vmpool: cannot pass the arguments of 'function <spec/functions_spec.lua:%d+>': a "
        .. "standard library C function that the receiving state does not have", err)
    end)

    it("a stripped function's upvalues cross where the runtime can read them, and Lua 5.1's are refused", function()
      local k = 41
      local function plus() return k + 1 end
      if _VERSION ~= "Lua 5.1" or jit then
        local stripped = (loadstring or load)(string.dump(plus, true))
        debug.setupvalue(stripped, 1, k)
        assert.are.equal(42, pool:invoke(stripped))
        return
      end
      -- Lua 5.1 reads an upvalue through its name: `luac -s` strips the names
      local src, out = os.tmpname(), os.tmpname()
      local f = assert(io.open(src, "w"))
      f:write("local k = 41 return function() return k + 1 end")
      f:close()
      local made = os.execute("luac5.1 -s -o " .. out .. " " .. src)
      os.remove(src)
      if made ~= 0 then
        os.remove(out)
        pending("luac5.1 is not installed")
        return
      end
      local stripped = assert(loadfile(out))()
      os.remove(out)
      assert.are.equal(42, stripped())
      assert.matches("^vmpool: cannot pass the function to call: a function whose upvalues Lua 5.1 cannot read",
        err_of(pool.invoke, pool, stripped))
      assert.are.equal(2, pool:invoke(function() return 2 end))
    end)

    it("a function whose bytecode the receiving state cannot load", function()
      local ok, p = pcall(vmpool.new, { core = 1, memory_limit = 4 * 1024 * 1024 })
      if not ok then
        pending("memory_limit is not supported by this runtime: " .. tostring(p))
        return
      end
      local huge = (loadstring or load)("return function() return '" .. ("x"):rep(8 * 1024 * 1024) .. "' end")()
      local err = err_of(p.invoke, p, huge)
      assert.matches("the receiving state cannot load", err)
      assert.are.equal(2, p:invoke(function() return 2 end)) -- the state goes on
      p:close()
    end)
  end)

  it("returns random value graphs with sharing, cycles and functions in the same shape", function()
    for seed = 1, 40 do
      local g = random_graph(rng(seed))
      local echoed = pool:invoke("c", "echo", g)
      assert.is_true(same_shape(g, echoed, {}, {}), "seed " .. seed .. " through a named function")
      local through = pool:invoke(function(x) return x end, g)
      assert.is_true(same_shape(g, through, {}, {}), "seed " .. seed .. " through a sent function")
      assert.is_false(same_shape(g, random_graph(rng(seed + 1000)), {}, {}), "seed " .. seed .. ": a different graph")
    end
  end)

  it("loads a function once per state: calling it again is a cache hit", function()
    local k = 7
    local f = function(x) return x + k end
    pool:invoke(f, 0)
    local loads, hits = loads_and_hits()
    for i = 1, 1000 do assert.are.equal(i + 7, pool:invoke(f, i)) end
    local loads2, hits2 = loads_and_hits()
    assert.are.equal(loads, loads2)
    assert.are.equal(hits + 1000, hits2)
    -- another closure of the same function is the same content: a hit too
    local function make(n) return function() return n end end
    pool:invoke(make(1))
    local l3 = loads_and_hits()
    assert.are.equal(2, pool:invoke(make(2)))
    assert.are.equal(l3, (loads_and_hits()))
  end)

  it("keeps a state's function cache bounded: 100,000 distinct functions leave memory flat", function()
    local p = vmpool.new { core = 1 }
    local load = loadstring or load
    local function send(from, to)
      for i = from, to do
        local f = load(("return function() return %d end"):format(i))()
        assert(p:invoke(f) == i)
      end
    end
    -- Lua shrinks its string table by half per collection: collect until it has settled
    local function settle()
      collectgarbage()
      for _ = 1, 8 do p:collect() end
      return vmpool.memory().bytes
    end
    send(1, 2000) -- past the cache's size: it is full from here on
    local before = settle()
    send(2001, 102000)
    local after = settle()
    p:close()
    assert.is_true(after <= before * 1.05 + 16384,
      ("state memory %d bytes before, %d after 100,000 more functions"):format(before, after))
  end)
end)
