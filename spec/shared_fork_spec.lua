-- A shared dictionary after fork(): the child has a private copy whose locks may have been held
-- by threads that did not survive the fork, so the parent's handles refuse to work there, and
-- vmpool.shared(name) in the child starts a new, empty dictionary of its own. Needs lua-posix
-- (Debian ships it for Lua 5.1 and LuaJIT).
local vmpool = require "vmpool"
local Child = require "spec.support.child"

describe("a shared dictionary after fork()", function()
  if not Child.available then
    pending("needs lua-posix (Lua 5.1 / LuaJIT)")
    return
  end

  it("refuses the parent's handles in the child and starts empty when re-created there", function()
    local d = vmpool.shared("fork-spec")
    d:set("k", "parent's")
    local parent = Child.pid()
    local report, how, code = Child.run(function()
      local lines = {}
      local ok, err = pcall(d.get, d, "k")
      lines[#lines + 1] = "get=" .. (ok and "ok" or tostring(err))
      lines[#lines + 1] = "tostring=" .. tostring(d)
      local again = vmpool.shared("fork-spec")
      lines[#lines + 1] = "fresh=" .. tostring(again:get("k"))
      again:set("k", "child's")
      lines[#lines + 1] = "own=" .. tostring(again:get("k"))
      return table.concat(lines, "\n")
    end)
    assert.are.equal("exited", how, report)
    assert.are.equal(0, code, report)
    assert.matches("get=vmpool: shared dictionary 'fork%-spec' was created in another process %(pid " .. parent
      .. "%); call vmpool.shared%('fork%-spec'%) again in this process", report)
    assert.matches("tostring=vmpool.shared 'fork%-spec' %(created in another process%)", report)
    assert.matches("fresh=nil\nown=child's", report)
    -- the parent's dictionary is untouched
    assert.are.equal("parent's", d:get("k"))
    assert.are.equal("parent's", vmpool.shared("fork-spec"):get("k"))
  end)
end)
