-- Chunks are isolated from each other and from their old versions: each loaded version runs in an
-- environment of its own (reads fall through to the state's globals, where `init` puts helpers;
-- writes stay in the chunk), so a chunk's functions are exactly what that version defines or
-- returns, in every state.
local vmpool = require "vmpool"

describe("chunk isolation", function()
  local pool
  before_each(function()
    pool = vmpool.new { core = 1, init = "function helper(x) return 'helped ' .. x end" }
  end)
  after_each(function() pool:close() end)

  it("a chunk does not see the globals another chunk defined", function()
    pool:compile("A", "function g() return 'from A' end")
    pool:compile("B", "return {}")
    assert.are.equal("from A", pool:invoke("A", "g"))
    local ok, err = pcall(pool.invoke, pool, "B", "g")
    assert.is_false(ok)
    assert.matches("^vmpool: chunk 'B' has no function 'g'", err)
  end)

  it("a function that a recompile removed no longer runs", function()
    pool:compile("A", "function f() return 1 end function gone() return 'old' end")
    assert.are.equal("old", pool:invoke("A", "gone"))
    pool:compile("A", "function f() return 2 end")
    local ok, err = pcall(pool.invoke, pool, "A", "gone")
    assert.is_false(ok)
    assert.matches("^vmpool: chunk 'A' has no function 'gone'", err)
    assert.are.equal(2, pool:invoke("A", "f"))
  end)

  it("a function that unload and compile removed no longer runs", function()
    pool:compile("A", "function gone() return 'old' end")
    assert.are.equal("old", pool:invoke("A", "gone"))
    assert.is_true(pool:unload("A"))
    pool:compile("A", "return { f = function() return 'new' end }")
    local ok, err = pcall(pool.invoke, pool, "A", "gone")
    assert.is_false(ok)
    assert.matches("^vmpool: chunk 'A' has no function 'gone'", err)
    assert.are.equal("new", pool:invoke("A", "f"))
  end)

  it("chunks read init's helpers, and a chunk's global writes stay in that chunk", function()
    pool:compile("A", "helper = nil; shared = 'A'; function who() return shared end")
    pool:compile("B", "function use(x) return helper(x), shared end")
    assert.are.equal("A", pool:invoke("A", "who"))
    local helped, shared = pool:invoke("B", "use", 1)
    assert.are.equal("helped 1", helped)
    assert.is_nil(shared)
  end)

  it("a chunk's functions keep seeing the chunk's own globals", function()
    pool:compile("C", "counter = 0; function bump() counter = counter + 1 return counter end")
    assert.are.equal(1, pool:invoke("C", "bump"))
    assert.are.equal(2, pool:invoke("C", "bump"))
  end)
end)
