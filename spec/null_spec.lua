-- JSON's null crosses between states: a NULL light userdata (what cjson.null and ngx.null are)
-- arrives as the receiving state's NULL, so `v == cjson.null` holds on both sides and cjson
-- re-encodes what a pool state decoded exactly as the state would.
local vmpool = require "vmpool"
local cjson = require "cjson" -- Debian's lua-cjson (scripts/install-deps.sh installs it)

local null = cjson.null

describe("null values crossing between states", function()
  local pool
  setup(function()
    pool = vmpool.new { core = 1 }
    pool:compile("json", [[
      local cjson = require "cjson"
      return {
        echo = function(...) return ... end,
        decode = function(text) return cjson.decode(text) end,
        encode = function(v) return cjson.encode(v) end,
        -- how the state sees each of its arguments: true where it is its own cjson.null
        nulls = function(...)
          local seen = {}
          for i = 1, select("#", ...) do seen[i] = select(i, ...) == cjson.null end
          return seen
        end,
        null_keys = function(t)
          return t[cjson.null], type(next(t))
        end,
      }
    ]])
  end)
  teardown(function() pool:close() end)

  it("passes cjson.null as an argument and returns it as the host's cjson.null", function()
    local seen = pool:invoke("json", "nulls", null, 1, null)
    assert.are.same({ true, false, true }, seen)
    local a, b, c = pool:invoke("json", "echo", null, "x", null)
    assert.are.equal(null, a)
    assert.are.equal("x", b)
    assert.are.equal(null, c)
    assert.are.equal("userdata", type(a))
  end)

  it("passes nulls inside tables, as values and as keys, both ways", function()
    local back = pool:invoke("json", "echo", { null, { x = null }, [null] = "key" })
    assert.are.equal(null, back[1])
    assert.are.equal(null, back[2].x)
    assert.are.equal("key", back[null])
    local value, key_type = pool:invoke("json", "null_keys", { [null] = 42 })
    assert.are.equal(42, value)
    assert.are.equal("userdata", key_type)
  end)

  it("re-encodes a document the state decoded exactly as the state encodes it", function()
    -- arrays and one-key objects: their encoding does not depend on table traversal order
    local docs = {
      "null",
      "[null]",
      '[1,null,"a",[null,[null]],{"k":null}]',
      '{"a":{"b":[null,true,false,null]}}',
      '[{"x":null},{"y":[null,null,null]},null]',
    }
    for _, text in ipairs(docs) do
      local decoded = pool:invoke("json", "decode", text)
      assert.are.equal(text, cjson.encode(decoded))
      assert.are.equal(pool:invoke("json", "encode", decoded), cjson.encode(decoded))
    end
  end)

  it("keeps every null of a larger object with many keys", function()
    local text = '{"a":null,"b":1,"c":[null,{"d":null,"e":"f"}],"g":{"h":null}}'
    local decoded = pool:invoke("json", "decode", text)
    assert.are.same(cjson.decode(text), decoded)
    assert.are.equal(null, decoded.a)
    assert.are.equal(null, decoded.c[1])
    assert.are.equal(null, decoded.c[2].d)
    assert.are.equal(null, decoded.g.h)
    assert.are.same(cjson.decode(text), cjson.decode(cjson.encode(decoded)))
  end)

  it("refuses full userdata still, naming the path", function()
    local ok, err = pcall(pool.invoke, pool, "json", "echo", { null, io.stdout })
    assert.is_false(ok)
    assert.matches("^vmpool: cannot pass argument #1 to 'echo': a userdata value at %[2%]", err)
  end)
end)
