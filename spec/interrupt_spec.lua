-- Ctrl-C while the host waits for a call (README, "Interrupting a blocked host"). Each case runs a
-- fresh standalone interpreter (spec/support/subprocess.lua) whose call, once it sees the host's
-- thread asleep in its wait, sends the interpreter SIGINT, as a terminal's Ctrl-C would, and
-- goes on running until the host has woken up.
local vmpool = require "vmpool"
local Sub = require "spec.support.subprocess"

-- Defines `pool` with a chunk "c" (its source in `source_of_c`) whose `interrupt_host(hold)`
-- waits (bounded) until the host's main thread sleeps, signals the process, with `hold` runs on
-- until the host calls `caught()` (or gives up after 20 s, which `gave_up()` then says), and
-- returns 7; `later()` returns 8.
local PRELUDE = [[
local vmpool = require "vmpool"
pool = vmpool.new{ core = 1 }
function caught() vmpool.shared("interrupt"):set("caught", true) end
-- whether a held call gave up waiting for caught()
function gave_up() return vmpool.shared("interrupt"):get("gave up") or false end
source_of_c = [==[
local function field(path, pattern)
  local f = assert(io.open(path))
  local line = f:read("*l")
  f:close()
  return line:match(pattern)
end
return {
  interrupt_host = function(hold)
    local pid = field("/proc/self/stat", "^(%d+)")
    local stat = "/proc/" .. pid .. "/task/" .. pid .. "/stat"
    local deadline = os.time() + 20
    while field(stat, "^%d+ %b() (%a)") ~= "S" do
      assert(os.time() < deadline, "the host thread never slept")
    end
    -- io.popen, not os.execute: system() ignores SIGINT in the whole process while it runs
    local kill = assert(io.popen("kill -INT " .. pid))
    kill:close()
    -- still running until the host says it caught the interrupt: what ended its wait was the
    -- signal, not this result
    local woke = require("vmpool").shared("interrupt")
    while hold and not woke:get("caught") do
      if os.time() >= deadline then
        woke:set("gave up", true) -- the host never caught the interrupt
        break
      end
    end
    return 7
  end,
  later = function() return 8 end,
}
]==]
pool:compile("c", source_of_c)
]]

local function run(body)
  local out, status, killed = Sub.run(PRELUDE .. body, { timeout = 60 })
  assert.is_false(killed, "the interpreter hung: " .. out)
  return out, status
end

local function interrupted(what)
  return "vmpool: interrupted while " .. what:gsub("%p", "%%%0")
    .. " waited for a call, which goes on in the pool: interrupted!"
end

describe("Ctrl-C while the host waits", function()
  it("ends a blocked invoke with the interpreter's 'interrupted!' and the pool keeps working", function()
    local out, status = run [[
      local ok, err = pcall(pool.invoke, pool, "c", "interrupt_host", true)
      caught()
      print("first", ok, err, gave_up())
      print("next", pool:invoke("c", "later"))
      pool:close()
      print("closed", pool:stats().threads)
    ]]
    assert.equal(0, status, out)
    assert.matches("first\tfalse\t" .. interrupted("pool:invoke()") .. "\tfalse", out)
    assert.matches("next\t8", out)
    assert.matches("closed\t0", out)
  end)

  it("ends the script with status 1 when nothing catches it, as Ctrl-C in Lua code does", function()
    local out, status = run [[
      pool:invoke("c", "interrupt_host")
      print("not reached")
    ]]
    assert.equal(1, status, out)
    -- Usually the signal ends the wait. The call may also finish as the signal lands: then its
    -- results are delivered (scalars without running any Lua code) and the interrupt stops the
    -- script at its next Lua instruction, with the interpreter's own message at the script's line.
    local wait_ended = out:find("vmpool: interrupted while [^\n]*: interrupted!")
    local code_stopped = out:find("^%S+: [^\n]*:%d+: interrupted!")
    assert.is_truthy(wait_ended or code_stopped, out)
    assert.not_matches("not reached", out)
  end)

  it("ends fut:wait(), and the future can be waited for again", function()
    local out, status = run [[
      local fut = pool:submit("c", "interrupt_host", true)
      local ok, err = pcall(fut.wait, fut)
      caught()
      print("first", ok, err, gave_up())
      print("again", fut:wait())
    ]]
    assert.equal(0, status, out)
    assert.matches("first\tfalse\t" .. interrupted("fut:wait()") .. "\tfalse", out)
    assert.matches("again\t7", out)
  end)

  it("ends a vmpool.run that waits, and the pool keeps working", function()
    local out, status = run [[
      local vmpool = require "vmpool"
      local ok, err = pcall(vmpool.run, function()
        return pool:co_invoke("c", "interrupt_host", true)
      end)
      caught()
      print("first", ok, err, gave_up())
      print("next", pool:invoke("c", "later"))
    ]]
    assert.equal(0, status, out)
    assert.matches("first\tfalse\t" .. interrupted("vmpool.run") .. "\tfalse", out)
    assert.matches("next\t8", out)
  end)

  -- one interrupt per interpreter: lua.c's handler restores the default action until its next
  -- chunk, so a second Ctrl-C in the same chunk ends the process
  for _, case in ipairs { { "channel:pop", "c:pop()" }, { "vmpool.select", "vmpool.select({ c })" } } do
    it("ends " .. case[1] .. " blocking the host, and nothing is taken", function()
      local out, status = run([[
        local vmpool = require "vmpool"
        local c = vmpool.channel("interrupted")
        local fut = pool:submit("c", "interrupt_host", true)
        local ok, err = pcall(function() return ]] .. case[2] .. [[ end)
        caught()
        print("first", ok, err, gave_up(), fut:wait())
        c:push("after")
        print("next", c:pop(), c:len())
      ]])
      assert.equal(0, status, out)
      assert.matches("first\tfalse\tvmpool: interrupted while " .. case[1]:gsub("%p", "%%%0")
        .. " was waiting %(nothing was sent or taken%): interrupted!\tfalse\t7", out)
      assert.matches("next\tafter\t0", out)
    end)
  end

  it("ends a blocked pool:map, and the pool keeps working", function()
    local out, status = run [[
      local ok, err = pcall(pool.map, pool, "c", "interrupt_host", { true })
      caught()
      print("first", ok, err, gave_up())
      print("next", pool:invoke("c", "later"))
    ]]
    assert.equal(0, status, out)
    assert.matches("first\tfalse\t" .. interrupted("pool:map()") .. "\tfalse", out)
    assert.matches("next\t8", out)
  end)

  -- the coroutine's wait raises; the interpreter's own hook then fires in the main thread, as
  -- the coroutine returns, and ends the outer pcall with "interrupted!". The pool notes its
  -- state's main thread when it is made (its futures and maps carry it): made in a coroutine, it
  -- must still watch the main thread's hook, not its maker's.
  for _, case in ipairs {
    { "", "", "pool:invoke" },
    { " for a pool that was made inside another coroutine",
      "pool = coroutine.wrap(function() return vmpool.new{ core = 1 } end)()\n"
        .. "pool:compile('c', source_of_c)\n", "pool:invoke" },
    { "", "", "fut:wait" },
    { " for a pool that was made inside another coroutine",
      "pool = coroutine.wrap(function() return vmpool.new{ core = 1 } end)()\n"
        .. "pool:compile('c', source_of_c)\n", "fut:wait" },
    { "", "", "pool:map" },
  } do
    local call = ({
      ["pool:invoke"] = 'pool:invoke("c", "interrupt_host", true)',
      ["fut:wait"] = 'pool:submit("c", "interrupt_host", true):wait()',
      ["pool:map"] = 'pool:map("c", "interrupt_host", { true })',
    })[case[3]]
    it("ends " .. case[3] .. "'s wait inside a coroutine" .. case[1]
      .. " on Lua 5.2 to 5.5, where the main thread's hook is visible", function()
      if vmpool.runtime == "Lua 5.1" or vmpool.runtime == "LuaJIT" then
        pending("Lua 5.1 and LuaJIT do not let a coroutine reach the main thread's hook")
        return
      end
      local out, status = run(case[2] .. [[
        local ok, err = pcall(function()
          return pcall(coroutine.wrap(function() return ]] .. call .. [[ end))
        end)
        caught()
        print("first", ok, err, gave_up())
        print("next", pool:invoke("c", "later"))
      ]])
      assert.equal(0, status, out)
      assert.matches("first\tfalse\t[^\n]*interrupted!\tfalse", out)
      assert.matches("next\t8", out)
    end)
  end
end)
