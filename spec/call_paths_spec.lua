-- A call by name whose arguments are a few nil, boolean or number values runs its function
-- directly under the state's protected call; any other call (a string or table argument, more
-- than 8 arguments, a callable table, a missing function) goes through the trampoline that
-- decodes its arguments. Both paths must behave alike: same results, same errors (message and
-- traceback), same lookup of the function at each call (src/child/mod.rs, Child::call_direct).
local vmpool = require "vmpool"

local SRC = [[
local M = {}
function M.pair(a, b) return a, b end
M.callable = setmetatable({}, { __call = function(_, x) return "called", x end })
M.floor = math.floor
M.raise = error
M.not_a_function = 42
function M.replace() M.pair = function() return "replaced" end end
function count(...) return select("#", ...), ... end
function fail() error("boom") end
function index_nil() local t = nil return t.x end
function fail_table() error({}) end
function nested(x) return { x = x, t = { x } }, x end
function define_later() later = function(x) return "later", x end end
return M
]]

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  assert.is_string(err)
  return err
end

describe("a call with scalar arguments and any other call", function()
  local pool
  before_each(function()
    pool = vmpool.new { core = 1 }
    pool:compile("c", SRC)
  end)
  after_each(function() pool:close() end)

  it("pass nil, booleans and numbers as they are, holes and subtypes included", function()
    assert.are.same({ 4, nil, true, false, 2.5 }, { pool:invoke("c", "count", nil, true, false, 2.5) })
    assert.are.same({ 0 }, { pool:invoke("c", "count") })
    local n, x = pool:invoke("c", "count", 3)
    assert.are.equal(1, n)
    assert.are.equal(math.type and "integer" or "number", math.type and math.type(x) or type(x))
    -- 8 scalars still go directly, 9 through the trampoline: the same count and values
    local eight = { pool:invoke("c", "count", 1, 2, 3, 4, 5, 6, 7, 8) }
    local nine = { pool:invoke("c", "count", 1, 2, 3, 4, 5, 6, 7, 8, 9) }
    assert.are.same({ 8, 1, 2, 3, 4, 5, 6, 7, 8 }, eight)
    assert.are.same({ 9, 1, 2, 3, 4, 5, 6, 7, 8, 9 }, nine)
    assert.are.same({ 2, 1, "s" }, { pool:invoke("c", "count", 1, "s") })
  end)

  it("return nested results from a function called directly", function()
    local t, x = pool:invoke("c", "nested", 7)
    assert.are.same({ x = 7, t = { 7 } }, t)
    assert.are.equal(7, x)
    local u = pool:invoke("c", "nested", "seven")
    assert.are.same({ x = "seven", t = { "seven" } }, u)
  end)

  it("raise the same error, message and traceback, whichever way the arguments came", function()
    for _, f in ipairs { "fail", "index_nil", "fail_table" } do
      local direct = err_of(pool.invoke, pool, "c", f, 1)
      local decoded = err_of(pool.invoke, pool, "c", f, "1")
      assert.matches("^vmpool: error in c:" .. f .. ": .*\nstack traceback:\n", direct)
      assert.are.equal(direct, decoded)
    end
    assert.matches("^vmpool: error in c:fail: c:9: boom\n", err_of(pool.invoke, pool, "c", "fail"))
  end)

  it("call C functions found by name, with the same errors", function()
    assert.are.equal(2, pool:invoke("c", "floor", 2.5))
    local direct = err_of(pool.invoke, pool, "c", "raise", 42)
    local decoded = err_of(pool.invoke, pool, "c", "raise", "42")
    assert.matches("^vmpool: error in c:raise: 42\nstack traceback:", direct)
    assert.are.equal(direct, decoded)
  end)

  it("call a callable table found by name", function()
    assert.are.same({ "called", 1 }, { pool:invoke("c", "callable", 1) })
    assert.are.same({ "called", "s" }, { pool:invoke("c", "callable", "s") })
  end)

  it("fail the same way for a name that is missing or not a function", function()
    for _, name in ipairs { "missing", "not_a_function" } do
      local direct = err_of(pool.invoke, pool, "c", name, 1)
      assert.matches("^vmpool: chunk 'c' has no function '" .. name .. "'", direct)
      assert.are.equal(direct, err_of(pool.invoke, pool, "c", name, "s"))
      assert.are.equal(direct, err_of(pool.invoke, pool, "c", name))
    end
  end)

  it("look the function up at each call: the chunk's table and globals may change", function()
    assert.are.same({ 1, 2 }, { pool:invoke("c", "pair", 1, 2) })
    pool:invoke("c", "replace")
    assert.are.equal("replaced", pool:invoke("c", "pair", 1, 2))
    assert.matches("has no function 'later'", err_of(pool.invoke, pool, "c", "later", 1))
    pool:invoke("c", "define_later")
    assert.are.same({ "later", 1 }, { pool:invoke("c", "later", 1) })
  end)

  it("run a recompiled chunk's functions, and each chunk's own, when calls alternate", function()
    pool:compile("d", "function pair(a, b) return b, a end")
    for _ = 1, 3 do
      assert.are.same({ 1, 2 }, { pool:invoke("c", "pair", 1, 2) })
      assert.are.same({ 2, 1 }, { pool:invoke("d", "pair", 1, 2) })
    end
    pool:compile("c", "return { pair = function(a, b) return a + b end }")
    assert.are.equal(3, pool:invoke("c", "pair", 1, 2))
    pool:compile("c", "function pair(a, b) return a * b end")
    assert.are.equal(6, pool:invoke("c", "pair", 2, 3))
  end)

  it("map scalar items with the same results and errors as invoke", function()
    assert.are.same({ 1, 2, 3 }, pool:map("c", "floor", { 1.5, 2.5, 3.5 }))
    assert.are.same({ 1, 2, 3 }, pool:map(function(x) return math.floor(x) end, { 1.5, 2.5, 3.5 }))
    local invoked = err_of(pool.invoke, pool, "c", "fail", 2)
    local mapped = err_of(pool.map, pool, "c", "fail", { 1, 2 })
    assert.are.equal(invoked:match("c:9: boom\nstack traceback:.*$"), mapped:match("c:9: boom\nstack traceback:.*$"))
  end)
end)

describe("a call with scalar arguments under the pool's limits", function()
  it("is stopped by time_limit", function()
    local pool = vmpool.new { core = 1, time_limit = 0.05 }
    pool:compile("c", "function spin(n) while n > 0 do end end function id(x) return x end")
    assert.matches("^vmpool: time limit exceeded", err_of(pool.invoke, pool, "c", "spin", 1))
    assert.are.equal(5, pool:invoke("c", "id", 5))
    pool:close()
  end)

  it("fails with the memory limit error when its function allocates too much", function()
    local pool = vmpool.new { core = 1, memory_limit = 4 * 1024 * 1024 }
    pool:compile("c", [[
      function hog(n) local t = {} for i = 1, n do t[i] = { i } end return #t end
      function len(s) return #s end
    ]])
    assert.matches("^vmpool: memory limit exceeded: c:hog", err_of(pool.invoke, pool, "c", "hog", 1e9))
    -- the trampoline's path, where decoding the argument itself runs out
    assert.matches("^vmpool: memory limit exceeded: c:len",
      err_of(pool.invoke, pool, "c", "len", string.rep("z", 8 * 1024 * 1024)))
    assert.are.equal(10, pool:invoke("c", "hog", 10))
    pool:close()
  end)
end)
