-- vmpool.shared: a dictionary of the process with the API of ngx.shared.DICT, read like the
-- manual (README.md, "vmpool.shared"). TTLs are checked by moving the dictionary's clock forward
-- (dict:_advance), never by sleeping.
local vmpool = require "vmpool"

local has_integers = math.type ~= nil

-- every test gets a dictionary of its own
local serial = 0
local function fresh(options)
  serial = serial + 1
  return vmpool.shared("spec-" .. serial, options)
end

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  assert.is_string(err)
  return err
end

describe("vmpool.shared", function()
  describe("vmpool.shared(name [, options])", function()
    it("returns the same dictionary for the same name", function()
      local a = vmpool.shared("spec-same")
      local b = vmpool.shared("spec-same")
      a:set("k", "v")
      assert.are.equal("v", b:get("k"))
    end)

    it("returns the very same value for the same name within a state", function()
      local a = vmpool.shared("spec-identity")
      assert.is_true(rawequal(a, vmpool.shared("spec-identity")))
      assert.are.equal(a, vmpool.shared("spec-identity", { capacity = a:capacity() }))
      local by_dict = { [a] = true }
      assert.is_true(by_dict[vmpool.shared("spec-identity")])
      assert.is_false(rawequal(a, vmpool.shared("spec-identity-other")))
    end)

    it("is a table holding its zone in slot 1, as ngx.shared.DICT is, with a hidden metatable", function()
      local d = vmpool.shared("spec-type")
      assert.are.equal("table", type(d))
      assert.are.equal("userdata", type(rawget(d, 1)))
      assert.is_false(getmetatable(d))
      assert.matches("^vmpool.shared 'spec%-type' %(capacity %d+, free %d+%)$", tostring(d))
      -- as resty.core's methods, these take any table whose slot 1 is the zone
      assert.is_true((d.set({ rawget(d, 1) }, "k", "v")))
      assert.are.equal("v", d:get("k"))
      assert.are.equal('bad "zone" argument', err_of(d.get, { 1 }, "k"))
      assert.are.equal('bad "zone" argument', err_of(d.get, {}, "k"))
      assert.are.equal('bad "zone" argument', err_of(d.get, rawget(d, 1), "k"))
    end)

    it("hands a pool state its own handle of the same dictionary, the same value on each call", function()
      local pool = vmpool.new { core = 1 }
      pool:compile("same", [[
        local vmpool = require "vmpool"
        function same(name) return rawequal(vmpool.shared(name), vmpool.shared(name)), vmpool.shared(name):get("k") end
      ]])
      vmpool.shared("spec-identity-state"):set("k", "from the host")
      assert.are.same({ true, "from the host" }, { pool:invoke("same", "same", "spec-identity-state") })
      pool:close()
    end)

    it("takes a capacity in bytes or as an nginx size, defaulting to 1 MiB", function()
      assert.are.equal(1048576, fresh():capacity())
      assert.are.equal(65536, fresh({ capacity = 65536 }):capacity())
      assert.are.equal(10 * 1024 * 1024, fresh({ capacity = "10m" }):capacity())
      assert.are.equal(512 * 1024, fresh({ capacity = "512k" }):capacity())
    end)

    it("refuses options that conflict with the existing dictionary", function()
      vmpool.shared("spec-clash", { capacity = "64k" })
      assert.are.equal(65536, vmpool.shared("spec-clash"):capacity())
      assert.are.equal(65536, vmpool.shared("spec-clash", { capacity = 65536 }):capacity())
      assert.matches("^vmpool: shared dictionary 'spec%-clash' already exists with capacity = 65536 "
        .. "%(asked for 131072%)", err_of(vmpool.shared, "spec-clash", { capacity = "128k" }))
    end)

    it("refuses bad names and options with vmpool: errors", function()
      assert.matches("^vmpool: bad argument #1 to 'shared': expected a dictionary name", err_of(vmpool.shared, 42))
      assert.matches("^vmpool: bad argument #1 to 'shared'", err_of(vmpool.shared, ""))
      -- two names of invalid UTF-8 must not become one dictionary (nor one metrics label)
      assert.matches("^vmpool: bad argument #1 to 'shared': the dictionary name is not valid UTF%-8",
        err_of(vmpool.shared, "spec-\255"))
      assert.matches("not valid UTF%-8", err_of(vmpool.shared, "spec-\254"))
      assert.matches("^vmpool: unknown option 'size' to vmpool.shared", err_of(vmpool.shared, "x1", { size = 1 }))
      assert.matches("^vmpool: option 'capacity' to vmpool.shared must be a size",
        err_of(vmpool.shared, "x2", { capacity = "lots" }))
      assert.matches("^vmpool: option 'capacity' to vmpool.shared must be at least 8192 bytes, as lua_shared_dict's",
        err_of(vmpool.shared, "x3", { capacity = 10 }))
      assert.matches("^vmpool: option 'shards' to vmpool.shared must be an integer from 1 to 256",
        err_of(vmpool.shared, "x4", { shards = 0.5 }))
    end)

    it("says which option value was refused, and what is allowed", function()
      assert.matches("^vmpool: option 'capacity' to vmpool.shared must be a size in bytes, at least 8192: "
        .. "an integer, or a string such as \"512k\" or \"10m\" %(got 2048%.5%)$",
        err_of(vmpool.shared, "x5", { capacity = 2048.5 }))
      assert.matches("%(got \"10x\"%)$", err_of(vmpool.shared, "x6", { capacity = "10x" }))
      assert.matches("^vmpool: option 'shards' to vmpool.shared must be an integer from 1 to 256 %(got 0%)$",
        err_of(vmpool.shared, "x7", { shards = 0 }))
      assert.matches("must be an integer from 1 to 256 %(got 2%.5%)$", err_of(vmpool.shared, "x8", { shards = 2.5 }))
      assert.matches("must be an integer from 1 to 256 %(got \"4\"%)$", err_of(vmpool.shared, "x9", { shards = "4" }))
    end)

    it("refuses a capacity whose page count the system has no memory for, with a vmpool: error", function()
      assert.matches("^vmpool: not enough memory while creating shared dictionary 'spec%-huge' of capacity",
        err_of(vmpool.shared, "spec-huge", { capacity = "1000000000g" }))
      assert.is_true(vmpool.shared("spec-huge", { capacity = "1m" }):set("k", 1))
    end)

    it("prints its name, capacity and free space", function()
      -- 16 KiB as nginx lays it out: three pages, two of them taken by the zone's own blocks
      assert.matches("^vmpool.shared 'spec%-print' %(capacity 16384, free 4096%)$",
        tostring(vmpool.shared("spec-print", { capacity = "16k" })))
    end)
  end)

  describe("dict:get(key) and dict:set(key, value, exptime, flags)", function()
    it("stores booleans, numbers and binary strings, and deletes with nil", function()
      local d = fresh()
      assert.are.same({ true, nil, false }, { d:set("b", false) })
      assert.is_false(d:get("b"))
      d:set("n", 0.25)
      assert.are.equal(0.25, d:get("n"))
      d:set("s", "a\0b")
      assert.are.equal("a\0b", d:get("s"))
      d:set("s", nil)
      assert.is_nil(d:get("s"))
      assert.are.equal(1, select("#", d:get("s")))
    end)

    if has_integers then
      it("keeps integers integers on Lua 5.3 and later", function()
        local d = fresh()
        d:set("i", 3)
        assert.are.equal("integer", math.type(d:get("i")))
        assert.are.equal("integer", math.type(d:incr("i", 1)))
        assert.are.equal("float", math.type(d:incr("i", 0.5)))
      end)

      it("converts numeric strings to incr as Lua's arithmetic does: an integer string stays an integer", function()
        -- Lua 5.4 keeps "3" an integer in arithmetic; Lua 5.3 makes every string a float
        local int = math.type(0 + "3")
        local d = fresh()
        d:set("z", 0)
        local n = d:incr("z", "3")
        assert.are.equal(3, n)
        assert.are.equal(int, math.type(n))
        assert.are.equal(int, math.type(d:get("z")))
        assert.are.equal(int, math.type((d:incr("z", "0x10"))))
        assert.are.equal(19, d:get("z"))
        assert.are.equal("float", math.type((d:incr("z", "1.0"))))
        n = d:incr("n", 1, "10")
        assert.are.equal(11, n)
        assert.are.equal(math.type(1 + "10"), math.type(n))
        assert.are.equal(math.type(1 + "10"), math.type(d:get("n")))
      end)
    end

    it("returns flags only when they are not zero", function()
      local d = fresh()
      d:set("k", "v", 0, 7)
      assert.are.same({ "v", 7 }, { d:get("k") })
      d:set("k", "v")
      assert.are.equal(1, select("#", d:get("k")))
    end)

    it("turns number keys into strings, as ngx.shared does", function()
      local d = fresh()
      d:set(12, "twelve")
      assert.are.equal("twelve", d:get("12"))
    end)

    it("turns a float key into the string LuaJIT's tostring gives, 2.0 into \"2\" on every runtime", function()
      local d = fresh()
      d:set(2.0, "two")
      d:set(0.5, "half")
      d:set(1e15, "big")
      d:set(1 / 3, "third")
      assert.are.equal("two", d:get("2"))
      assert.are.equal("two", d:get(2))
      assert.are.equal("half", d:get("0.5"))
      assert.are.equal("big", d:get("1e+15"))
      assert.are.equal("third", d:get("0.33333333333333"))
      local keys = d:get_keys(0)
      table.sort(keys)
      assert.are.same({ "0.33333333333333", "0.5", "1e+15", "2" }, keys)
    end)

    it("hides an entry once its exptime has passed", function()
      local d = fresh()
      d:set("k", "v", 10)
      d:_advance(9)
      assert.are.equal("v", d:get("k"))
      d:_advance(1.5)
      assert.is_nil(d:get("k"))
      d:set("forever", "v", math.huge)
      assert.are.equal(0, d:ttl("forever"))
    end)

    it("treats a TTL too long to count (over about 146 years) as no expiry, as math.huge", function()
      local d = fresh()
      for _, ttl in ipairs { 1e300, 2^63, 5e9 } do
        assert.is_true(d:set("k", "v", ttl))
        assert.are.equal(0, d:ttl("k"))
        d:_advance(1e10)
        assert.are.equal("v", d:get("k"))
      end
      d:set("k", "v", 4e9)
      assert.is_true(d:ttl("k") > 3.9e9)
      d:_advance(4.1e9)
      assert.is_nil(d:get("k"))
    end)

    it("answers nil, err in ngx's words for a nil, empty or too long key and a value of a bad type", function()
      local d = fresh()
      local long = string.rep("k", 65536)
      for _, call in ipairs {
        function(k) return d:get(k) end, function(k) return d:get_stale(k) end,
        function(k) return d:set(k, 1) end, function(k) return d:safe_set(k, 1) end,
        function(k) return d:add(k, 1) end, function(k) return d:safe_add(k, 1) end,
        function(k) return d:replace(k, 1) end, function(k) return d:delete(k) end,
        function(k) return d:incr(k, 1) end, function(k) return d:ttl(k) end,
        function(k) return d:expire(k, 1) end, function(k) return d:lpush(k, 1) end,
        function(k) return d:rpush(k, 1) end, function(k) return d:lpop(k) end,
        function(k) return d:rpop(k) end, function(k) return d:llen(k) end,
      } do
        assert.are.same({ nil, "nil key" }, { call(nil) })
        assert.are.same({ nil, "empty key" }, { call("") })
        assert.are.same({ nil, "key too long" }, { call(long) })
      end
      assert.is_true((d:set(string.rep("k", 65535), 1)))
      assert.are.same({ nil, "bad value type" }, { d:set("k", {}) })
      assert.are.same({ nil, "bad value type" }, { d:add("k", print) })
      assert.are.same({ nil, "bad value type" }, { d:lpush("l", true) })
      assert.are.same({ nil, "bad value type" }, { d:rpush("l", {}) })
      assert.is_nil(d:get("k"))
      assert.are.equal(0, d:llen("l"))
    end)

    it("takes a boolean or table key through tostring, as resty.core does; the list methods refuse it", function()
      local d = fresh()
      assert.is_true((d:set(true, "yes")))
      assert.are.equal("yes", d:get("true"))
      local key = setmetatable({}, { __tostring = function() return "custom" end })
      assert.is_true((d:set(key, 1)))
      assert.are.equal(1, d:get("custom"))
      assert.are.equal(2, d:incr(key, 1))
      assert.matches("^vmpool: bad argument #1 to 'lpush': the key must be a string or a number %(got boolean%)",
        err_of(d.lpush, d, true, 1))
    end)

    it("raises ngx's words for a bad zone and a negative exptime, vmpool: errors for NaN and bad flags", function()
      local d = fresh()
      assert.are.equal('bad "zone" argument', err_of(d.get, "k"))
      assert.are.equal('bad "zone" argument', err_of(d.set, "k", 1))
      assert.are.equal('bad "zone" argument', err_of(d.set, { 1 }, "k", 1))
      assert.are.equal('bad "exptime" argument', err_of(d.set, d, "k", 1, -1))
      -- the exptime is checked before the key, as resty.core checks it
      assert.are.equal('bad "exptime" argument', err_of(d.add, d, nil, 1, -1))
      assert.are.equal('bad "exptime" argument', err_of(d.expire, d, "k"))
      assert.matches("^vmpool: bad argument #2 to 'set': the value is NaN, which cannot be stored",
        err_of(d.set, d, "k", 0 / 0))
      assert.matches("^vmpool: bad argument #2 to 'safe_add': the value is NaN", err_of(d.safe_add, d, "n", 0 / 0))
      assert.matches("^vmpool: bad argument #2 to 'rpush': the value is NaN", err_of(d.rpush, d, "l", 0 / 0))
      assert.is_nil(d:get("n"))
      assert.are.equal(0, d:llen("l"))
      assert.matches("^vmpool: bad argument #3 to 'set': 'exptime' must be a non%-negative number",
        err_of(d.set, d, "k", 1, 0 / 0))
      assert.matches("^vmpool: bad argument #4 to 'set': 'flags' must be an integer from 0 to 4294967295",
        err_of(d.set, d, "k", 1, 0, -1))
      assert.matches("^vmpool: bad argument #2 to 'expire': 'exptime' must be a non%-negative number",
        err_of(d.expire, d, "k", -1))
    end)
  end)

  describe("dict:get_stale(key)", function()
    it("returns an expired value with stale = true until it is removed", function()
      local d = fresh()
      d:set("k", "v", 1, 5)
      assert.are.same({ "v", 5, false }, { d:get_stale("k") })
      d:_advance(2)
      assert.are.same({ "v", 5, true }, { d:get_stale("k") })
      assert.are.equal(1, d:flush_expired())
      assert.is_nil(d:get_stale("k"))
    end)
  end)

  describe("dict:add, dict:safe_add and dict:replace", function()
    it("add stores only a missing (or expired) key", function()
      local d = fresh()
      assert.are.same({ true, nil, false }, { d:add("k", 1) })
      assert.are.same({ false, "exists", false }, { d:add("k", 2) })
      assert.are.equal(1, d:get("k"))
      d:expire("k", 1)
      d:_advance(2)
      assert.is_true((d:safe_add("k", 3)))
      assert.are.equal(3, d:get("k"))
    end)

    it("replace stores only a live key", function()
      local d = fresh()
      assert.are.same({ false, "not found", false }, { d:replace("k", 1) })
      d:set("k", 1)
      assert.are.same({ true, nil, false }, { d:replace("k", 2) })
      assert.are.equal(2, d:get("k"))
    end)

    it("answer nil as ngx does: false, \"attempt to add or replace nil values\", false, changing nothing", function()
      local d = fresh()
      local refused = { false, "attempt to add or replace nil values", false }
      for _, name in ipairs { "add", "safe_add", "replace" } do
        assert.are.same(refused, { d[name](d, "missing", nil) }, name)
        assert.are.equal(3, select("#", d[name](d, "missing")))
      end
      d:set("k", "v", 0, 4)
      for _, name in ipairs { "add", "safe_add", "replace" } do
        assert.are.same(refused, { d[name](d, "k", nil, 10, 2) }, name)
      end
      assert.are.same({ "v", 4 }, { d:get("k") })
      assert.are.equal(0, d:ttl("k"))
      assert.is_nil(d:get_stale("missing"))
      -- bad arguments around the nil still raise
      assert.are.equal('bad "exptime" argument', err_of(d.add, d, "k", nil, -1))
      assert.are.same({ nil, "nil key" }, { d:replace(nil, nil) })
    end)
  end)

  describe("dict:delete(key)", function()
    it("removes the key and answers true, nil, false", function()
      local d = fresh()
      d:set("k", 1)
      assert.are.same({ true, nil, false }, { d:delete("k") })
      assert.is_nil(d:get("k"))
      assert.are.same({ true, nil, false }, { d:delete("never") })
    end)
  end)

  describe("dict:incr(key, value, init, init_ttl)", function()
    it("adds to a number and keeps its TTL and flags", function()
      local d = fresh()
      d:set("n", 10, 100, 3)
      assert.are.equal(15, d:incr("n", 5))
      assert.are.same({ 15, 3 }, { d:get("n") })
      assert.is_true(d:ttl("n") > 99)
      assert.are.equal(14.5, d:incr("n", -0.5))
    end)

    it("keeps an integer an integer on Lua 5.3 to 5.5, wrapping past math.maxinteger as + does", function()
      if not has_integers then return end
      local d = fresh()
      d:set("n", math.maxinteger)
      assert.are.equal(math.mininteger, d:incr("n", 1))
      assert.are.equal("integer", math.type(d:get("n")))
    end)

    it("fails with not found without init, and creates with init and init_ttl", function()
      local d = fresh()
      assert.are.same({ nil, "not found" }, { d:incr("n", 1) })
      assert.are.same({ 11, nil, false }, { d:incr("n", 1, 10, 5) })
      assert.is_true(d:ttl("n") > 4 and d:ttl("n") <= 5)
      assert.are.same({ 12, nil, false }, { d:incr("n", 1, 10, 60) }) -- init_ttl: only on creation
      assert.is_true(d:ttl("n") <= 5)
      d:_advance(6)
      assert.are.same({ 11, nil, false }, { d:incr("n", 1, 10) })
      assert.are.equal(0, d:ttl("n"))
    end)

    it("takes false for a missing exptime, flags and init, as resty.core does", function()
      local d = fresh()
      assert.are.same({ true, nil, false }, { d:set("k", "v", false, false) })
      assert.are.same({ "v" }, { d:get("k") })
      assert.are.equal(0, d:ttl("k"))
      assert.are.same({ true, nil, false }, { d:add("a", 1, false) })
      assert.are.same({ true, nil, false }, { d:replace("a", 2, 5, false) })
      assert.are.same({ true, nil, false }, { d:safe_set("s", 3, false, 7) })
      assert.are.same({ 3, 7 }, { d:get("s") })
      assert.are.same({ nil, "not found" }, { d:incr("missing", 1, false) })
      assert.are.equal(3, d:incr("a", 1, false))
      assert.are.equal('must provide "init" when providing "init_ttl"', err_of(d.incr, d, "missing", 1, false, 5))
    end)

    it("takes numeric strings for value, init and init_ttl, as resty.core's tonumber does", function()
      local d = fresh()
      d:set("n", 1)
      assert.are.equal(4, d:incr("n", "3"))
      assert.are.same({ 11, nil, false }, { d:incr("new", 1, "10", "5") })
      local left = d:ttl("new")
      assert.is_true(left > 4.9 and left <= 5, tostring(left))
      assert.are.same({ 3, nil, false }, { d:incr("forever", "1", "2", "0") })
      assert.are.equal(0, d:ttl("forever"))
      d:_advance(6)
      assert.is_nil(d:get("new"))
      assert.are.equal("bad init_ttl arg: number expected, got string", err_of(d.incr, d, "x", 1, 0, "soon"))
      assert.are.equal('bad "init_ttl" argument', err_of(d.incr, d, "x", 1, 0, "-5"))
      assert.are.equal('must provide "init" when providing "init_ttl"', err_of(d.incr, d, "x", 1, nil, "5"))
      assert.are.equal("bad init arg: number expected, got string", err_of(d.incr, d, "x", 1, "ten"))
      assert.are.equal("bad init arg: number expected, got table", err_of(d.incr, d, "x", 1, {}))
      assert.is_nil(d:get("x"))
    end)

    it("refuses a sum that is NaN, keeping the old value", function()
      local d = fresh()
      d:set("inf", 1 / 0, 0, 6)
      assert.matches("^vmpool: bad argument #2 to 'incr': adding %-inf gives NaN %(infinities of opposite signs%), "
        .. "which cannot be stored in a shared dictionary; the key is left as it was",
        err_of(d.incr, d, "inf", -1 / 0))
      assert.are.same({ 1 / 0, 6 }, { d:get("inf") })
      assert.matches("^vmpool: bad argument #2 to 'incr': adding inf gives NaN",
        err_of(d.incr, d, "new", 1 / 0, -1 / 0))
      assert.is_nil(d:get_stale("new"))
      assert.are.equal(1 / 0, d:incr("inf", 1 / 0)) -- infinity itself is a number like others
    end)

    it("refuses a value that is not a number", function()
      local d = fresh()
      d:set("s", "text")
      assert.are.same({ nil, "not a number" }, { d:incr("s", 1) })
      assert.matches("^vmpool: bad argument #2 to 'incr': 'value' must be a number or a numeric string %(got nil%)",
        err_of(d.incr, d, "s"))
      assert.matches("^vmpool: bad argument #2 to 'incr': 'value' must be a number or a numeric string %(got \"abc\"%)",
        err_of(d.incr, d, "s", "abc"))
      assert.matches("^vmpool: bad argument #2 to 'incr': 'value' is NaN", err_of(d.incr, d, "s", 0 / 0))
      assert.are.equal('must provide "init" when providing "init_ttl"', err_of(d.incr, d, "x", 1, nil, 5))
      assert.are.equal('bad "init_ttl" argument', err_of(d.incr, d, "x", 1, 0, -5))
      assert.matches("^vmpool: bad argument #4 to 'incr': 'init_ttl' must be a non%-negative number",
        err_of(d.incr, d, "x", 1, 0, 0 / 0))
    end)
  end)

  describe("lists: dict:lpush, rpush, lpop, rpop, llen", function()
    it("push at either end, pop from either end, and vanish when empty", function()
      local d = fresh()
      assert.are.equal(1, d:lpush("l", "b"))
      assert.are.equal(2, d:lpush("l", "a"))
      assert.are.equal(3, d:rpush("l", 3))
      assert.are.equal(3, d:llen("l"))
      assert.are.equal("a", d:lpop("l"))
      assert.are.equal(3, d:rpop("l"))
      assert.are.equal("b", d:rpop("l"))
      assert.is_nil(d:lpop("l"))
      assert.are.equal(0, d:llen("l"))
      assert.are.same({ nil, "not found" }, { d:ttl("l") })
    end)

    it("refuse to mix lists and other values", function()
      local d = fresh()
      d:set("s", 1)
      assert.are.same({ nil, "value not a list" }, { d:lpush("s", 1) })
      assert.are.same({ nil, "value not a list" }, { d:lpop("s") })
      assert.are.same({ nil, "value not a list" }, { d:llen("s") })
      d:rpush("l", 1)
      assert.are.same({ nil, "value is a list" }, { d:get("l") })
      assert.are.same({ nil, "not a number" }, { d:incr("l", 1) })
      assert.are.same({ nil, "bad value type" }, { d:lpush("l", true) })
    end)

    it("replace an expired non-list by a new list", function()
      local d = fresh()
      d:set("k", "v", 1)
      d:_advance(2)
      assert.are.equal(1, d:rpush("k", "x"))
      assert.are.equal("x", d:lpop("k"))
    end)
  end)

  describe("dict:ttl(key) and dict:expire(key, exptime)", function()
    it("report and change the time left, 0 meaning never", function()
      local d = fresh()
      d:set("k", "v")
      assert.are.equal(0, d:ttl("k"))
      assert.is_true(d:expire("k", 10))
      local left = d:ttl("k")
      assert.is_true(left > 9.9 and left <= 10, tostring(left))
      assert.is_true(d:expire("k", 0))
      assert.are.equal(0, d:ttl("k"))
      assert.are.same({ nil, "not found" }, { d:ttl("missing") })
      assert.are.same({ nil, "not found" }, { d:expire("missing", 1) })
      assert.are.equal('bad "exptime" argument', err_of(d.expire, d, "k"))
    end)

    -- resty.core passes exptime * 1000 to a C long and its ttl divides whole milliseconds by 1000
    it("count TTLs in whole milliseconds as ngx does: under 1 ms is no expiry, ttl answers in ms", function()
      local d = fresh()
      local function whole_ms(t) return tonumber(("%.3f"):format(t)) == t end
      assert.is_true(d:set("k", "v", 10))
      local left = d:ttl("k")
      assert.is_true(whole_ms(left) and left > 9.9 and left <= 10, tostring(left))
      assert.is_true(d:expire("k", 10.5))
      left = d:ttl("k")
      assert.is_true(whole_ms(left) and left > 10.4 and left <= 10.5, tostring(left))
      -- the dictionary's clock is the real one plus _advance's offset, so a key left with under a
      -- millisecond may expire before ttl looks on a busy machine: such a look is tried again
      local function ttl_soon(setup)
        for _ = 1, 50 do
          setup()
          local t, err = d:ttl("last")
          if t then return t end
          assert.are.equal("not found", err)
        end
        error("the key expired before ttl looked, 50 times in a row")
      end
      -- what is left of the last millisecond still counts as one
      assert.are.equal(0.001, ttl_soon(function()
        assert.is_true(d:set("last", "v"))
        assert.is_true(d:expire("last", 10.5))
        d:_advance(10.4995)
      end))
      -- 0.0009 s is 0 ms: no expiry, as in ngx; 0.0019 s is 1 ms
      for _, method in ipairs { "set", "add", "safe_set", "safe_add" } do
        d:delete("tiny")
        assert.is_true(d[method](d, "tiny", "v", 0.0009))
        assert.are.equal(0, d:ttl("tiny"))
      end
      assert.are.same({ 5, nil, false }, { d:incr("n", 1, 4, 0.0009) })
      assert.are.equal(0, d:ttl("n"))
      assert.is_true(d:expire("n", 0.0005))
      assert.are.equal(0, d:ttl("n"))
      assert.are.equal(0.001, ttl_soon(function() assert.is_true(d:set("last", "v", 0.0019)) end))
      d:_advance(0.0011)
      assert.is_nil(d:get("last"))
      d:_advance(1e6)
      assert.are.equal("v", d:get("tiny"))
      assert.are.equal(5, d:get("n"))
    end)

    it("expire takes a numeric string, as resty.core does; set's exptime and flags do not", function()
      local d = fresh()
      d:set("k", "v")
      assert.is_true(d:expire("k", "10"))
      local left = d:ttl("k")
      assert.is_true(left > 9.9 and left <= 10, tostring(left))
      assert.is_true(d:expire("k", "0"))
      assert.are.equal(0, d:ttl("k"))
      assert.matches("^vmpool: bad argument #2 to 'expire': 'exptime' must be a non%-negative",
        err_of(d.expire, d, "k", "x"))
      assert.matches("^vmpool: bad argument #3 to 'set': 'exptime' must be a non%-negative number of seconds, "
        .. "0 for no expiry %(got \"5\"%)", err_of(d.set, d, "k", 1, "5"))
      assert.matches("^vmpool: bad argument #4 to 'set': 'flags' must be an integer", err_of(d.set, d, "k", 1, 0, "3"))
      assert.are.equal("v", d:get("k"))
    end)
  end)

  describe("dict:flush_all(), dict:flush_expired(max_count), dict:get_keys(max_count)", function()
    it("flush_all expires everything; flush_expired frees it", function()
      local d = fresh({ capacity = 65536 })
      local empty = d:free_space()
      for i = 1, 10 do d:set("k" .. i, ("x"):rep(3000)) end -- a page each
      assert.are.equal(10, #d:get_keys())
      assert.are.equal(empty - 10 * 4096, d:free_space())
      assert.are.equal(0, select("#", d:flush_all()))
      assert.are.same({}, d:get_keys())
      local stale = 0
      for i = 1, 10 do
        if d:get_stale("k" .. i) ~= nil then stale = stale + 1 end
      end
      assert.are.equal(7, stale) -- flush_all removed 3 at once, as ngx does
      assert.are.equal(3, d:flush_expired(3))
      assert.are.equal(4, d:flush_expired())
      assert.are.equal(empty, d:free_space())
    end)

    it("flush_all removes up to three entries at once, the least recently used, as ngx does", function()
      local d = fresh({ shards = 1 })
      d:set("foo", "bar")
      d:set("baz", 1)
      d:flush_all()
      assert.is_nil(d:get_stale("foo"))
      assert.is_nil(d:get_stale("baz"))
      assert.are.equal(0, d:flush_expired())
      for i = 1, 6 do d:set("k" .. i, i) end
      assert.are.equal(1, d:get("k1")) -- used: k2, k3 and k4 are the least recently used
      d:flush_all()
      for _, k in ipairs { "k2", "k3", "k4" } do assert.is_nil(d:get_stale(k), k) end
      for _, k in ipairs { "k1", "k5", "k6" } do
        assert.are.same({ tonumber(k:sub(2)), nil, true }, { d:get_stale(k) })
      end
      assert.are.equal(3, d:flush_expired())
      -- with several shards, three in all
      local many = fresh({ shards = 4 })
      local empty = many:free_space()
      for i = 1, 20 do many:set("k" .. i, i) end
      many:flush_all()
      assert.are.equal(17, many:flush_expired())
      assert.are.equal(empty, many:free_space())
    end)

    it("get_keys returns at most 1024 keys by default, all with 0", function()
      local d = fresh()
      for i = 1, 1100 do d:set("k" .. i, true) end
      assert.are.equal(1024, #d:get_keys())
      assert.are.equal(1100, #d:get_keys(0))
      assert.are.equal(5, #d:get_keys(5))
      local seen = {}
      for _, k in ipairs(d:get_keys(0)) do seen[k] = true end
      for i = 1, 1100 do assert.is_true(seen["k" .. i]) end
    end)
  end)

  describe("capacity and eviction", function()
    it("evicts the least recently used entries when full, and says so", function()
      local d = fresh({ capacity = "100k" })
      local value = string.rep("x", 100)
      local n = 0
      repeat
        n = n + 1
        local ok, err, forcible = d:set("k" .. n, value)
        assert.is_true(ok, err)
      until forcible
      -- k1 was the least recently used when the dictionary filled up
      assert.is_nil(d:get("k1"))
      assert.are.equal(value, d:get("k" .. n))
      d:get("k2") -- now k3 is the oldest
      local _, _, forcible = d:set("new", value)
      assert.is_true(forcible)
      assert.are.equal(value, d:get("k2"))
      assert.is_nil(d:get("k3"))
    end)

    it("safe_set and safe_add fail with no memory instead of evicting", function()
      local d = fresh({ capacity = "100k" })
      local value = string.rep("x", 100)
      local n = 0
      while d:safe_set("k" .. n + 1, value) do n = n + 1 end
      assert.are.equal(352, n) -- as nginx's 100k zone: 22 pages of 16
      assert.are.same({ false, "no memory", false }, { d:safe_set("more", value) })
      assert.are.same({ false, "no memory", false }, { d:safe_add("more", value) })
      for i = 1, n do assert.are.equal(value, d:get("k" .. i)) end
      -- a refused write has removed the key's old value, as ngx's has
      assert.are.same({ false, "no memory", false }, { d:safe_set("k1", string.rep("x", 2000)) })
      assert.is_nil(d:get("k1"))
    end)

    it("fills as nginx's zone of the same size, and counts free space in whole pages", function()
      local d = fresh({ capacity = "1m" })
      assert.are.equal(1048576, d:capacity())
      assert.are.equal(252 * 4096, d:free_space()) -- 254 pages, two taken by the zone's own blocks
      local n = 0
      repeat
        n = n + 1
        local ok, _, forcible = d:set("k" .. n, string.rep("x", 1000))
        assert.is_true(ok)
      until forcible
      assert.are.equal(505, n) -- two to a page, as in nginx; the 505th evicts
      assert.are.equal(0, d:free_space())
    end)

    it("evicts before it refuses a value larger than the dictionary, and says so, as ngx does", function()
      local d = fresh({ capacity = "100k" })
      for i = 1, 50 do d:set("k" .. i, string.rep("x", 100)) end
      assert.are.same({ false, "no memory", true }, { d:set("k1", string.rep("x", 200 * 1024)) })
      local left = 0
      for i = 1, 50 do if d:get("k" .. i) then left = left + 1 end end
      assert.are.equal(19, left) -- k1 itself, then 30 evicted
    end)

    it("evicts nothing for a list push: a full dictionary answers nil, \"no memory\" as ngx does", function()
      local d = fresh({ capacity = "100k", shards = 1 })
      local n = 0
      while d:safe_set("k" .. n + 1, string.rep("v", 1000)) do n = n + 1 end
      for i = 1, 50 do
        assert.are.same({ nil, "no memory" }, { d:lpush("l" .. i % 5, string.rep("x", 4000)) })
        assert.are.same({ nil, "no memory" }, { d:rpush("l" .. i % 5, string.rep("x", 4000)) })
      end
      for i = 1, n do assert.is_truthy(d:get("k" .. i), "k" .. i .. " was evicted") end
      assert.are.equal(0, d:llen("l1"))
      -- set still evicts to make room
      local ok, _, forcible = d:set("other", string.rep("y", 4000))
      assert.is_true(ok)
      assert.is_true(forcible)
    end)

    it("frees the space of removed entries", function()
      local d = fresh({ capacity = "100k" })
      local empty = d:free_space()
      d:set("k", string.rep("x", 5000))
      d:rpush("l", string.rep("y", 500))
      assert.are.equal(empty - 3 * 4096, d:free_space()) -- two pages, and one of 1 KiB objects
      d:delete("k")
      d:lpop("l")
      assert.are.equal(empty, d:free_space())
    end)
  end)

  describe("in pool states", function()
    local pool
    setup(function()
      pool = vmpool.new { core = 2 }
      pool:compile("c", [[
        local vmpool = require "vmpool"
        local d = vmpool.shared("spec-pool")
        return {
          put = function(k, v) return d:set(k, v) end,
          get = function(k) return d:get(k) end,
          count = function(n) for _ = 1, n do d:incr("hits", 1, 0) end return true end,
        }
      ]])
    end)
    teardown(function() pool:close() end)

    it("see the host's dictionary, and the host sees theirs", function()
      local d = vmpool.shared("spec-pool")
      d:set("from-host", "h")
      assert.are.equal("h", pool:invoke("c", "get", "from-host"))
      assert.is_true(pool:invoke("c", "put", "from-state", 7))
      assert.are.equal(7, d:get("from-state"))
    end)

    it("count exactly when several states and the host increment at once", function()
      local d = vmpool.shared("spec-pool")
      d:delete("hits")
      local futures = {}
      for i = 1, 4 do futures[i] = pool:submit("c", "count", 5000) end
      for _ = 1, 5000 do d:incr("hits", 1, 0) end
      for i = 1, 4 do assert.is_true(futures[i]:wait()) end
      assert.are.equal(25000, d:get("hits"))
    end)

    it("load vmpool (require) in a new state even when the process is out of descriptors", function()
      vmpool.shared("spec-pool-nofd"):set("k", "from the host")
      local files = {}
      while true do -- every descriptor the process may open: require must not need one
        local f = io.open("/dev/null")
        if not f then break end
        files[#files + 1] = f
        assert(#files < 1e6, "the descriptor limit is too high for this test (ulimit -n)")
      end
      local ok, got = pcall(function()
        local p = vmpool.new { core = 1 }
        p:compile("n", [=[ function get() return require("vmpool").shared("spec-pool-nofd"):get("k") end ]=])
        local v = p:invoke("n", "get")
        p:close()
        return v
      end)
      for _, f in ipairs(files) do f:close() end
      assert.is_true(ok, got)
      assert.are.equal("from the host", got)
    end)

    it("keep a popped item that a state has no memory for (its memory_limit) in the list", function()
      local small = vmpool.new { core = 1, memory_limit = 4e6 }
      small:compile("m", [=[
        local d = require("vmpool").shared("spec-pool-small", { capacity = "64m" })
        function take(method, k) return pcall(d[method], d, k) end
      ]=])
      local d = vmpool.shared("spec-pool-small", { capacity = "64m" })
      local first, last = ("f"):rep(5e6), ("l"):rep(5e6)
      assert.are.equal(1, d:rpush("list", first))
      d:rpush("list", "middle")
      d:rpush("list", last)
      for _, method in ipairs { "lpop", "rpop" } do
        local ok, err = small:invoke("m", "take", method, "list")
        assert.is_false(ok)
        assert.matches("^vmpool: not enough memory in this pool state while answering dict:" .. method
          .. "%(%) %(its memory_limit or the system refused it%); the item stays in the list", err)
        assert.are.equal(3, d:llen("list"))
      end
      assert.are.equal(first, d:lpop("list"))
      assert.are.equal(last, d:rpop("list"))
      assert.are.equal("middle", d:lpop("list"))
      -- a get (on LuaJIT the FFI path answers with the state's own memory error)
      d:set("big", first)
      local ok, err = small:invoke("m", "take", "get", "big")
      assert.is_false(ok)
      if vmpool.runtime ~= "LuaJIT" then
        assert.matches("^vmpool: not enough memory in this pool state while answering dict:get%(%)", err)
      end
      small:close()
    end)
  end)

  describe("on LuaJIT, the FFI path", function()
    if vmpool.runtime ~= "LuaJIT" then
      pending("LuaJIT only")
      return
    end

    it("is what get, get_stale, set, safe_set, add, safe_add, replace and delete use", function()
      assert.is_true(vmpool._dict_ffi)
    end)

    it("answers its own call when a finalizer uses the dictionary in the middle of it", function()
      local d = fresh()
      d:set("mine", "aaa", 0, 1)
      d:set("other", "bbbbbb", 0, 2)
      -- finalizers that read and write the dictionary run at allocation points, ffi.string's
      -- among them: each get and set must still answer with its own value, flags and forcible
      local function litter()
        for _ = 1, 20 do
          getmetatable(newproxy(true)).__gc = function()
            d:get("other")
            d:set("third", "c", 0, 3)
          end
        end
      end
      collectgarbage("setpause", 50)
      for _ = 1, 2000 do
        litter()
        local v, flags = d:get("mine")
        assert.are.equal("aaa", v)
        assert.are.equal(1, flags)
        local ok, err, forcible = d:add("mine", "x")
        assert.are.same({ false, "exists", false }, { ok, err, forcible })
      end
      collectgarbage("setpause", 200)
    end)

    it("answers every call exactly as the C functions do", function()
      local Sub = require "spec.support.subprocess"
      -- the same calls in two fresh interpreters, one without the ffi module (the C functions)
      local script = [[
        local vmpool = require "vmpool"
        local d = vmpool.shared("ffi-vs-c", { capacity = "16k", shards = 1 }) -- one LRU order
        local function show(...)
          local t = { n = select("#", ...), ... }
          for i = 1, t.n do
            local v = t[i]
            t[i] = type(v) == "string" and ("%q"):format(#v > 40 and (#v .. " bytes " .. v:sub(1, 8)) or v)
              or tostring(v)
          end
          print(table.concat(t, " ", 1, t.n))
        end
        local function try(name, ...)
          local r = { pcall(d[name], d, ...) }
          show(name, unpack(r, 1, table.maxn(r)))
        end
        try("set", "s", "str", 0, 3) try("get", "s") try("get_stale", "s")
        try("set", "n", 1.5) try("get", "n") try("set", "i", 7) try("get", "i")
        try("set", "t", true) try("get", "t") try("set", "f", false) try("get", "f")
        try("get", "none") try("get_stale", "none")
        try("set", "big", string.rep("b", 5000)) try("get", "big")
        for i = 1, 40 do try("set", "fill" .. i, string.rep("v", 100)) end
        try("safe_set", "safe", string.rep("w", 3000)) try("safe_add", "safe2", string.rep("w", 3000))
        try("add", "s", "again") try("add", "s2", "new") try("replace", "s2", "newer") try("replace", "zz", 1)
        try("get", "s2") try("delete", "s2") try("get", "s2") try("delete", "never")
        try("set", "e", "soon", 0.5) d:_advance(1) try("get", "e") try("get_stale", "e")
        try("set", 12, "number key") try("get", 12) try("get", "12") try("delete", 12)
        try("lpush", "list", "x") try("get", "list") try("set", "list", 1)
        try("set", "", 1) try("get", "") try("delete", "") try("set", string.rep("k", 65536), 1)
        try("set", "k", {}) try("set", "k", 1, -1) try("set", "k", 1, 0 / 0) try("set", "k", 1, "x")
        try("set", "k", 1, 0, -1) try("set", "k", 1, 0, 1.5) try("set", "k", 1, 0, "x")
        try("add", "k", nil) try("replace", "k", nil) try("safe_add", "nk", nil) try("add", "k", nil, -1)
        try("add", "fill40", nil, 5, 1) try("get", "fill40")
        try("incr", "cnt", 1, 0) try("incr", "cnt", 2.5) try("incr", "cnt", "3") try("incr", "s", 1)
        try("incr", "none", 1) try("incr", "ttl", 1, 0, 10) show("ttl", d:ttl("ttl") > 9) try("incr", "cnt", 0 / 0)
        try("incr", "cnt", 1, "x") try("incr", "cnt", 1, nil, 5) try("incr", "cnt", 1, 0, -1)
        try("incr", 7, 1, 0) try("incr", "cnt", 1 / 0) try("incr", "cnt", -1 / 0)
        try("flush_all") try("get", "cnt") try("get_stale", "ttl") try("flush_expired")
        show(pcall(d.get, {}, "k")) show(pcall(d.set, 1, "k", 1))
        print(vmpool._dict_ffi)
      ]]
      local with_ffi, status = Sub.run(script)
      assert.are.equal(0, status, with_ffi)
      local without, status2 = Sub.run('package.preload.ffi = function() error("no ffi here") end\n' .. script)
      assert.are.equal(0, status2, without)
      assert.matches("\ntrue\n$", with_ffi)
      assert.matches("\nno ffi module\n$", without)
      local a = with_ffi:gsub("\n[^\n]*\n$", "\n")
      local b = without:gsub("\n[^\n]*\n$", "\n")
      assert.are.equal(b, a)
    end)
  end)
end)
