--- Channels, select and streams in coroutines of the event-loop adapters (vmpool.luv,
-- vmpool.cqueues): the coroutine yields while it waits and its loop resumes it once per completed
-- wait, through the adapter's own completion queue (its stats count the waits and resumes).
local vmpool = require "vmpool"

local CHUNK = [[
local vmpool = require "vmpool"
function push_n(name, n) local c = vmpool.channel(name) for i = 1, n do c:push(i) end return true end
function doubles(inp, out, n)
  local i, o = vmpool.channel(inp), vmpool.channel(out)
  for _ = 1, n do o:push(i:pop() * 2) end
  return true
end
function count(n) for i = 1, n do coroutine.yield(i) end end
]]

local n = 0
local function fresh(options)
  n = n + 1
  local name = "loops-spec-" .. n
  return vmpool.channel(name, options), name
end

-- The cases, for one adapter: `spawn(fn)` starts a coroutine the loop drives, `run()` runs the
-- loop until it is empty (bounded), `stats()` is the adapter's.
local function cases(spawn, run, stats)
  local pool
  setup(function()
    pool = vmpool.new { core = 2 }
    pool:compile("c", CHUNK)
  end)
  teardown(function() pool:close() end)

  it("wakes each coroutine waiting in pop once per message it gets, not all of them per message", function()
    local c, name = fresh()
    local before = stats()
    local got = {}
    for _ = 1, 8 do spawn(function() local v = c:pop(10) got[#got + 1] = v end) end
    assert.are.equal(0, #got) -- all of them wait
    local fut = pool:submit("c", "push_n", name, 8)
    run()
    assert.is_true(fut:wait(10))
    table.sort(got)
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8 }, got)
    local waits = stats().waits - before.waits
    local resumes = stats().resumes - before.resumes
    assert.are.equal(waits, resumes, "each wait ended with one resume")
    -- a coroutine woken for a message another took first waits again; a herd would be 8 per message
    assert.is_true(waits >= 8 and waits <= 16, "waits: " .. waits)
  end)

  it("exchanges messages with a state both ways, with push waiting while the channel is full", function()
    local inp, iname = fresh { capacity = 1 }
    local out, oname = fresh { capacity = 1 }
    local sum, served = 0, nil
    spawn(function() served = pool:co_invoke("c", "doubles", iname, oname, 100) end)
    spawn(function() for i = 1, 100 do assert(inp:push(i)) end end)
    spawn(function() for _ = 1, 100 do sum = sum + out:pop(10) end end)
    run()
    assert.are.equal(100 * 101, sum)
    assert.is_true(served)
  end)

  it("times out a pop and a select with nil, 'timeout', and wakes waiters on close", function()
    local empty = fresh()
    local other = fresh()
    local res = {}
    spawn(function() res.pop = { empty:pop(0.02) } end)
    spawn(function() res.select = { vmpool.select({ empty, other }, 0.02) } end)
    run()
    assert.are.same({ nil, "timeout" }, res.pop)
    assert.are.same({ nil, "timeout" }, res.select)
    spawn(function() res.closed = { other:pop() } end)
    spawn(function() other:close() end)
    run()
    assert.are.same({ nil, "closed" }, res.closed)
  end)

  it("selects whichever channel a state pushes to", function()
    local a = fresh()
    local b, bname = fresh()
    local got
    spawn(function() got = { vmpool.select({ a, b }, 10) } end)
    pool:submit("c", "push_n", bname, 1)
    run()
    assert.is_true(rawequal(b, got[1]))
    assert.are.equal(1, got[2])
  end)

  it("iterates a stream, yielding while it waits for items", function()
    local sum = 0
    spawn(function() for i in pool:stream("c", "count", 300) do sum = sum + i end end)
    run()
    assert.are.equal(300 * 301 / 2, sum)
  end)
end

local has_luv, uv = pcall(require, "luv")
describe("channels under vmpool.luv", function()
  if not has_luv then
    pending("needs luv (Debian: lua-luv): " .. tostring(uv))
    return
  end
  local vluv = require "vmpool.luv"
  cases(vluv.spawn, function()
    uv.update_time()
    local guard = uv.new_timer()
    local expired = false
    guard:start(20000, 0, function() expired = true uv.stop() end)
    guard:unref()
    uv.run()
    if not guard:is_closing() then guard:close() end
    uv.run("nowait")
    assert(not expired, "the luv loop did not finish in time")
  end, vluv.stats)
end)

local has_cqueues, cqueues = pcall(require, "cqueues")
describe("channels under vmpool.cqueues", function()
  if not has_cqueues then
    pending("needs cqueues (Debian: lua-cqueues): " .. tostring(cqueues))
    return
  end
  local vcq = require "vmpool.cqueues"
  local cq = cqueues.new()
  cases(function(fn) cq:wrap(fn) cq:step(0) end, function()
    local deadline = cqueues.monotime() + 20
    repeat
      assert(cq:loop(math.max(0, deadline - cqueues.monotime())))
    until cq:empty() or cqueues.monotime() > deadline
    assert(cq:empty(), "the cqueues controller did not finish in time")
  end, vcq.stats)
end)
