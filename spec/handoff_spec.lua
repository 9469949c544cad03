-- What a call's hand-off reuses from the call before it: the host's call records keep their
-- function name and the states their last chunk and name, each compared with the next call's and
-- replaced only when they differ (src/host/call_io.rs prepare_with, src/child/mod.rs Child::run).
-- Whatever the order of calls, each runs the function and chunk it names.
local vmpool = require "vmpool"

local SRC = [[
function f() return "c.f" end
function g() return "c.g" end
function name_longer_than_sixteen_a() return "c.la" end
function name_longer_than_sixteen_b() return "c.lb" end
function abcdefgh1() return "c.9a" end
function abcdefgh2() return "c.9b" end
]]

describe("calls that switch between functions and chunks", function()
  local pool
  before_each(function()
    pool = vmpool.new { core = 2 }
    pool:compile("c", SRC)
    pool:compile("d", [[function f() return "d.f" end function abcdefgh1() return "d.9a" end]])
  end)
  after_each(function() pool:close() end)

  it("each run the function of the chunk they name, blocking or as futures", function()
    local calls = {
      { "c", "f" }, { "c", "f" }, { "c", "g" }, { "d", "f" }, { "c", "f" },
      { "c", "name_longer_than_sixteen_a" }, { "c", "name_longer_than_sixteen_b" },
      { "c", "abcdefgh1" }, { "d", "abcdefgh1" }, { "c", "abcdefgh2" }, { "c", "abcdefgh1" },
    }
    local want = {
      ["c.f"] = "c.f", ["c.g"] = "c.g", ["d.f"] = "d.f", ["c.name_longer_than_sixteen_a"] = "c.la",
      ["c.name_longer_than_sixteen_b"] = "c.lb", ["c.abcdefgh1"] = "c.9a", ["d.abcdefgh1"] = "d.9a",
      ["c.abcdefgh2"] = "c.9b",
    }
    for round = 1, 50 do
      for i = 1, #calls do
        -- a different order each round: states and records meet every pair of names
        local chunk, name = calls[(i * round) % #calls + 1][1], calls[(i * round) % #calls + 1][2]
        assert.are.equal(want[chunk .. "." .. name], pool:invoke(chunk, name))
        assert.are.equal(want[chunk .. "." .. name], pool:submit(chunk, name):wait())
      end
    end
  end)

  it("name the function they called in their errors, after calls of another of the same length", function()
    assert.are.equal("c.9a", pool:invoke("c", "abcdefgh1"))
    local ok, err = pcall(pool.invoke, pool, "c", "abcdefgh3")
    assert.is_false(ok)
    assert.matches("abcdefgh3", tostring(err), 1, true)
    assert.are.equal("c.9b", pool:invoke("c", "abcdefgh2"))
  end)
end)
