-- Values that cross between the host and a pool state, property-style: many random values must
-- come back unchanged, and everything that cannot cross is refused with a clear error.
local vmpool = require "vmpool"

local has_integers = math.type ~= nil

-- Deep comparison that treats NaN as equal to NaN and keeps the integer/float subtype (5.3+).
local function same(a, b, seen)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then
    if has_integers and math.type(a) ~= math.type(b) then return false end
    if a ~= a then return b ~= b end
    if a == 0 and b == 0 then return 1 / a == 1 / b end -- -0.0 stays -0.0
    return a == b
  end
  if type(a) ~= "table" then return a == b end
  seen = seen or {}
  if seen[a] then return seen[a] == b end
  seen[a] = b
  for k, v in pairs(a) do
    if not same(v, b[k], seen) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- A small seeded generator (not math.random: its sequence differs between runtimes). Park-Miller:
-- every product stays below 2^53, so it is exact in the doubles of Lua 5.1 and LuaJIT too (a
-- 1103515245 multiplier lost the low bits there: r(256) was always 0 and r(2) never 1).
local function rng(seed)
  local state = seed
  return function(n)
    state = state * 16807 % 2147483647
    return state % n
  end
end

local SPECIAL_NUMBERS = { 0, -0.0, 1 / 0, -1 / 0, 0 / 0, 0.5, -1e308, 2 ^ 53, -(2 ^ 53), 1e-310 }
if has_integers then
  for _, v in ipairs(load("return { math.maxinteger, math.mininteger, 0, -1, 3 }")()) do
    SPECIAL_NUMBERS[#SPECIAL_NUMBERS + 1] = v
  end
end

local function random_string(r)
  local n = r(40)
  local t = {}
  for i = 1, n do t[i] = string.char(r(256)) end -- binary, embedded zeros included
  return table.concat(t)
end

local function random_value(r, depth)
  -- wide and deep tables only at the top (depth 4), so that one value stays small enough
  local kind = r(depth >= 4 and 9 or depth > 0 and 7 or 5)
  if kind == 7 then -- wide: a long array of scalars and many keys
    local t = {}
    for i = 1, 500 + r(1500) do t[i] = r(2) == 0 and i or random_string(r) end
    for i = 1, r(300) do t["k" .. i] = (r(1000) - 500) / 3 end
    return t
  end
  if kind == 8 then -- deep: a chain of up to 100 levels (the limit) ending in a leaf
    local t = {}
    local c = t
    for _ = 2, 1 + r(100) do c.x = {} c = c.x end
    c.leaf = random_string(r)
    return t
  end
  if kind == 0 then return r(2) == 0 end
  if kind == 1 then return SPECIAL_NUMBERS[r(#SPECIAL_NUMBERS) + 1] end
  if kind == 2 then return r(1000000) - 500000 end
  if kind == 3 then return random_string(r) end
  if kind == 4 then return (r(1000000) - 500000) / 7 end
  local t = {}
  if kind == 5 then
    for i = 1, r(20) do t[i] = random_value(r, depth - 1) end -- array part
  end
  for _ = 1, r(8) do
    local key
    local kk = r(4)
    if kk == 0 then key = random_string(r)
    elseif kk == 1 then key = r(100) + 0.5
    elseif kk == 2 then key = r(2) == 0
    else key = r(1000) + 100 end
    local v = random_value(r, depth - 1)
    if key == key then t[key] = v end
  end
  return t
end

describe("values crossing between states", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 2 }
    pool:compile("v", [[
      return {
        echo = function(...) return ... end,
        describe = function(x) return type(x), math.type and math.type(x) or "number" end,
        make_cycle = function() local t = {} t.t = t return t end,
        make_shared = function() local s = { 1 } return { a = s, b = s, [s] = s }, s end,
        same_table = function(a, b) return rawequal(a, b) end,
        deep = function(n) local t = {} local c = t for _ = 1, n do c.x = {} c = c.x end return t end,
      }
    ]])
  end)
  teardown(function() pool:close() end)

  it("keeps nil, booleans, numbers and binary strings unchanged", function()
    local values = { true, false, "", "a\0b\0", string.rep("\255", 1000) }
    for _, n in ipairs(SPECIAL_NUMBERS) do values[#values + 1] = n end
    for _, v in ipairs(values) do
      assert.is_true(same(v, (pool:invoke("v", "echo", v))), tostring(v))
    end
    assert.is_nil((pool:invoke("v", "echo", nil)))
  end)

  -- Up to 16 results that are all nil, booleans, numbers or light userdata are pushed without a
  -- protected call; more, or any string or table among them, take the protected path. Both
  -- must give the same values, in order, with nils kept in the count.
  it("returns every result in order, with nils in the count, on both sides of 16 scalars", function()
    local unpack_ = table.unpack or unpack
    local function pack(...) return { n = select("#", ...), ... } end
    for _, n in ipairs { 0, 1, 15, 16, 17, 40 } do
      local sent = {}
      for i = 1, n do
        local k = i % 5
        if k == 1 then sent[i] = i
        elseif k == 2 then sent[i] = -i / 4
        elseif k == 3 then sent[i] = i % 2 == 0
        elseif k == 4 then sent[i] = 0 / 0
        end -- k == 0: nil
      end
      local got = pack(pool:invoke("v", "echo", unpack_(sent, 1, n)))
      assert.are.equal(n, got.n, n .. " results")
      for i = 1, n do
        assert.is_true(same(sent[i], got[i]), n .. " results, #" .. i .. ": " .. tostring(got[i]))
      end
    end
    -- a string among them moves the whole list to the protected path
    local got = pack(pool:invoke("v", "echo", 1, nil, true, "s", nil))
    assert.are.same({ n = 5, 1, nil, true, "s", nil }, got)
  end)

  if has_integers then
    it("keeps the integer and float subtypes (Lua 5.3+)", function()
      local t, st = pool:invoke("v", "describe", 3)
      assert.are.equal("number", t)
      assert.are.equal("integer", st)
      st = select(2, pool:invoke("v", "describe", 3.0))
      assert.are.equal("float", st)
      assert.are.equal("integer", math.type((pool:invoke("v", "echo", math.maxinteger))))
    end)
  end

  it("keeps nested tables with array and hash parts", function()
    local v = { 1, 2, nil, 4, name = "x", [10] = { deep = { true } }, [false] = 0.25, [3.5] = "k" }
    assert.is_true(same(v, (pool:invoke("v", "echo", v))))
  end)

  it("sends a table reached twice in one call's arguments as one table reached twice, both ways", function()
    local shared = { 1 }
    local r = pool:invoke("v", "echo", { a = shared, b = shared })
    assert.is_true(same({ 1 }, r.a))
    assert.is_true(rawequal(r.a, r.b))
    assert.is_true(pool:invoke("v", "same_table", shared, shared))
    assert.is_false(pool:invoke("v", "same_table", shared, { 1 }))
    local t, s = pool:invoke("v", "make_shared")
    assert.is_true(rawequal(t.a, s) and rawequal(t.b, s) and rawequal(t[s], s))
  end)

  it("sends cycles as cycles, both ways", function()
    local c = { n = 1 }
    c.self = c
    c.list = { c, { c } }
    local r = pool:invoke("v", "echo", c)
    assert.is_true(rawequal(r.self, r) and rawequal(r.list[1], r) and rawequal(r.list[2][1], r))
    assert.equals(1, r.n)
    local back = pool:invoke("v", "make_cycle")
    assert.is_true(rawequal(back.t, back))
  end)

  it("round-trips random table graphs with sharing and cycles with the same shape (seeded)", function()
    -- shape check: walk both graphs in step, mapping each table of one to the table of the other
    local function same_shape(a, b, map)
      if type(a) ~= "table" then return same(a, b) end
      if type(b) ~= "table" then return false end
      if map[a] ~= nil then return rawequal(map[a], b) end
      map[a] = b
      for k, v in pairs(a) do
        if type(k) == "table" then return false end -- the generator uses scalar keys only
        if not same_shape(v, rawget(b, k), map) then return false end
      end
      for k in pairs(b) do if rawget(a, k) == nil then return false end end
      return true
    end
    local r = rng(4242)
    for i = 1, 300 do
      local nodes = {}
      for j = 1, r(8) + 1 do nodes[j] = { id = j } end
      for _ = 1, r(20) do
        local from, to = nodes[r(#nodes) + 1], nodes[r(#nodes) + 1]
        from[#from + 1] = to
        if r(3) == 0 then from["k" .. r(5)] = random_value(r, 2) end
      end
      local map = {}
      local b1, b2 = pool:invoke("v", "echo", nodes[1], nodes)
      assert.is_true(same_shape(nodes[1], b1, map), "graph #" .. i)
      -- one transfer: the second argument shares its tables with the first
      assert.is_true(same_shape(nodes, b2, map), "graph #" .. i .. " (second argument)")
    end
  end)

  it("round-trips thousands of random nested values unchanged", function()
    local r = rng(12345)
    for i = 1, 2000 do
      local v = random_value(r, 4)
      local back = pool:invoke("v", "echo", v, i)
      assert.is_true(same(v, back), "value #" .. i)
    end
  end)

  it("accepts nesting up to 100 levels and refuses deeper, naming the path", function()
    local function nest(n)
      local t = {}
      local c = t
      for _ = 2, n do c.x = {} c = c.x end
      return t
    end
    assert.is_table(pool:invoke("v", "echo", nest(100)))
    local ok, err = pcall(pool.invoke, pool, "v", "echo", nest(101))
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass argument #1 to 'echo': tables nested deeper than 100 levels", err)
    ok, err = pcall(pool.invoke, pool, "v", "deep", 150)
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass result #1 of 'deep': tables nested deeper than 100 levels", err)
  end)

  it("refuses C functions outside the standard library, userdata and threads, also as table keys", function()
    local cw = coroutine.wrap(function() end)
    local bad_values = { cw, io.stdout, coroutine.create(function() end), { [cw] = 1 }, { x = { y = cw } } }
    for _, bad in ipairs(bad_values) do
      local ok, err = pcall(pool.invoke, pool, "v", "echo", 1, bad)
      assert.is_false(ok)
      assert.matches("^vmpool: cannot pass argument #2 to 'echo'", err)
    end
    local ok, err = pcall(pool.invoke, pool, "v", "echo", { [cw] = 1 })
    assert.is_false(ok)
    assert.matches("a C function that is not a standard library function at %[function%] %(a key%)", err)
  end)
end)
