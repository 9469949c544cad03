-- The nice option: pool threads run nicer than the host by that much (Linux), so that a busy pool
-- leaves the CPU to the host's own thread (an nginx worker's event loop) first. Each state reads
-- its own thread's niceness from /proc.
local vmpool = require "vmpool"

-- the calling thread's niceness: field 19 of /proc/thread-self/stat (16th after the name)
local NICE = [[
function nice()
  local f = assert(io.open("/proc/thread-self/stat"))
  local stat = f:read("*a")
  f:close()
  local fields = {}
  for field in stat:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = field end
  return tonumber(fields[17])
end
]]

local function own_nice()
  local f = assert(io.open("/proc/thread-self/stat"))
  local stat = f:read("*a")
  f:close()
  local fields = {}
  for field in stat:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = field end
  return tonumber(fields[17])
end

local linux = io.open("/proc/thread-self/stat") ~= nil
local portable = vmpool._sys == "portable"

describe("the nice option", function()
  if not linux or portable then
    it("has no effect where threads have no niceness of their own", function()
      local pool = vmpool.new { core = 1, nice = 5 }
      if linux then
        pool:compile("n", NICE)
        assert.are.equal(own_nice(), pool:invoke("n", "nice"))
      end
      pool:close()
    end)
    return
  end

  it("runs every pool thread that much nicer than the thread that made the pool", function()
    local host = own_nice()
    local pool = vmpool.new { core = 2, max_noncore = 1, nice = 5 }
    pool:compile("n", NICE)
    local seen = pool:map("n", "nice", { 1, 2, 3, 4 }, { batch = 1 })
    for i = 1, 4 do assert.are.equal(math.min(host + 5, 19), seen[i]) end
    pool:close()
  end)

  it("stops at 19", function()
    local pool = vmpool.new { core = 1, nice = 19 }
    pool:compile("n", NICE)
    assert.are.equal(19, pool:invoke("n", "nice"))
    pool:close()
  end)

  it("leaves pool threads at the host's niceness by default", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("n", NICE)
    assert.are.equal(own_nice(), pool:invoke("n", "nice"))
    pool:close()
  end)

  it("refuses values outside 0 to 19", function()
    for _, bad in ipairs { -1, 20, 2.5, "5" } do
      local ok, err = pcall(vmpool.new, { core = 1, nice = bad })
      assert.is_false(ok)
      assert.matches("^vmpool: option 'nice' to vmpool.new must be", err)
    end
  end)
end)
