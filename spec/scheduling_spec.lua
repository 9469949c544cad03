-- The nice and sched options: pool threads run nicer than the host by that much, and in the
-- scheduling class asked for (Linux), so that a busy pool leaves the CPU to the host's own thread
-- (an nginx worker's event loop) first. Each state reads its own thread's /proc entry.
local vmpool = require "vmpool"

-- the calling thread's niceness and scheduling policy: fields 19 and 41 of /proc/thread-self/stat
-- (17th and 39th after the name); policy 0 is SCHED_OTHER, 3 SCHED_BATCH, 5 SCHED_IDLE
local STAT = [[
local function stat(n)
  local f = assert(io.open("/proc/thread-self/stat"))
  local line = f:read("*a")
  f:close()
  local fields = {}
  for field in line:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = field end
  return tonumber(fields[n])
end
function nice() return stat(17) end
function policy() return stat(39) end
]]
assert(loadstring or load)(STAT)()
local own_nice, own_policy = _G.nice, _G.policy
_G.nice, _G.policy = nil, nil
local POLICY = { normal = 0, batch = 3, idle = 5 }

local linux = io.open("/proc/thread-self/stat") ~= nil
local portable = vmpool._sys == "portable"

describe("the nice option", function()
  if not linux or portable then
    it("has no effect where threads have no niceness of their own", function()
      local pool = vmpool.new { core = 1, nice = 5 }
      if linux then
        pool:compile("n", STAT)
        assert.are.equal(own_nice(), pool:invoke("n", "nice"))
      end
      pool:close()
    end)
    return
  end

  it("runs every pool thread that much nicer than the thread that made the pool", function()
    local host = own_nice()
    local pool = vmpool.new { core = 2, max_noncore = 1, nice = 5 }
    pool:compile("n", STAT)
    local seen = pool:map("n", "nice", { 1, 2, 3, 4 }, { batch = 1 })
    for i = 1, 4 do assert.are.equal(math.min(host + 5, 19), seen[i]) end
    pool:close()
  end)

  it("stops at 19", function()
    local pool = vmpool.new { core = 1, nice = 19 }
    pool:compile("n", STAT)
    assert.are.equal(19, pool:invoke("n", "nice"))
    pool:close()
  end)

  it("leaves pool threads at the host's niceness by default", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("n", STAT)
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

describe("the sched option", function()
  if not linux or portable then
    it("has no effect where threads have no scheduling class of their own", function()
      local pool = vmpool.new { core = 1, sched = "idle" }
      if linux then
        pool:compile("n", STAT)
        assert.are.equal(own_policy(), pool:invoke("n", "policy"))
      end
      pool:close()
    end)
    return
  end

  for _, class in ipairs { "batch", "idle" } do
    it("puts every pool thread in the " .. class .. " class, non-core states too", function()
      local host = own_policy()
      local pool = vmpool.new { core = 2, max_noncore = 1, sched = class }
      pool:compile("n", STAT)
      local seen = pool:map("n", "policy", { 1, 2, 3, 4 }, { batch = 1 })
      for i = 1, 4 do assert.are.equal(POLICY[class], seen[i]) end
      assert.are.equal(host, own_policy(), "the host's thread is unchanged")
      pool:close()
    end)
  end

  it("leaves pool threads in the host's class by default and with \"normal\"", function()
    for _, options in ipairs { { core = 1 }, { core = 1, sched = "normal" } } do
      local pool = vmpool.new(options)
      pool:compile("n", STAT)
      assert.are.equal(own_policy(), pool:invoke("n", "policy"))
      pool:close()
    end
  end)

  it("keeps nice in the batch class", function()
    local pool = vmpool.new { core = 1, sched = "batch", nice = 3 }
    pool:compile("n", STAT)
    assert.are.equal(POLICY.batch, pool:invoke("n", "policy"))
    assert.are.equal(math.min(own_nice() + 3, 19), pool:invoke("n", "nice"))
    pool:close()
  end)

  it("refuses anything but \"normal\", \"batch\" and \"idle\", naming what it got", function()
    for bad, shown in pairs { fast = '"fast"', IDLE = '"IDLE"', [5] = "number", [true] = "boolean" } do
      local ok, err = pcall(vmpool.new, { core = 1, sched = bad })
      assert.is_false(ok)
      assert.are.equal('vmpool: option \'sched\' to vmpool.new must be "normal", "batch" or "idle" (got '
        .. shown .. ")", err)
    end
  end)
end)
