-- Faults the pool does not cause but must survive: threads or states that cannot be created. Run
-- in a fresh interpreter or a forked child whose address space is capped, so new thread stacks
-- cannot be mapped (needs lua-posix: Lua 5.1 to 5.3 and LuaJIT). Each case must end with every
-- call's outcome, balanced stats and no thread left behind, never with a hang.
local vmpool = require "vmpool"
local Child = require "spec.support.child"

-- Child.run or Child.run_fresh, tried again (at most three times in all) when the child died of
-- SIGABRT: with the address space capped to 1 MiB above its size, a small native allocation (the
-- C library's or Rust's, or LuaJIT's own mmap) can find no room before a thread stack is refused,
-- and those abort as in any program. A fault of vmpool's would abort every time.
local function run_capped(run, body, timeout)
  local report, how, code
  for _ = 1, 3 do
    report, how, code = run(body, timeout)
    if not (how == "killed" and code == 6) then break end
  end
  return report, how, code
end

describe("when the system refuses new threads", function()
  if not Child.available then
    pending("needs lua-posix (Lua 5.1 to 5.3 / LuaJIT)")
    return
  end

  it("vmpool.new fails with 'cannot create a pool state' and leaves no thread", function()
    local report, how, code = run_capped(Child.run_fresh, [[
      local before = Gate.threads()
      Child.cap_address_space(1024 * 1024)
      local ok, err = pcall(vmpool.new, { core = 64 })
      assert(not ok, "64 states started in a capped address space")
      return err .. "\nthreads " .. before .. " -> " .. Gate.threads_back_to(before)
    ]])
    assert.are.equal("exited", how, report)
    assert.are.equal(0, code, report)
    assert.matches("^vmpool: cannot create a pool state: cannot start [%w%- ]+ thread: ", report)
    local before, after = report:match("threads (%d+) %-> (%d+)")
    assert.are.equal(before, after)
  end)

  it("a non-core state that cannot start fails its own call only; the pool recovers", function()
    local report, how, code = run_capped(Child.run_fresh, [[
      local gate = Gate.new()
      local before = Gate.threads()
      local pool = vmpool.new { core = 1, max_noncore = math.huge, idle_timeout = 0, init = Gate.CHILD }
      pool:compile("g", "return { gate = gate, echo = function(...) return ... end }")
      local first = pool:submit("g", "gate", gate.port, "core")
      gate:arrivals(1)
      Child.cap_address_space(1024 * 1024)
      -- threads that exited earlier leave their stacks in the C library's cache, and a new thread
      -- can reuse one without mapping memory: hold every state that does start inside the gate
      -- until starting one fails
      local held, refused = {}, 0
      for i = 1, 100 do
        local fut = pool:submit("g", "gate", gate.port, i)
        if fut:ready() then -- a state that cannot start fails its call at once
          local ok, err = pcall(fut.wait, fut)
          assert(not ok and err:match("^vmpool: cannot create a pool state: "), tostring(err))
          refused = refused + 1
          if refused == 5 then break end
        else
          held[#held + 1] = { fut, i }
        end
      end
      assert(refused == 5, "every state started in a capped address space")
      gate:arrivals(#held)
      Child.cap_address_space(nil)
      local futs = {}
      for i = 1, 4 do futs[i] = pool:submit("g", "gate", gate.port, i) end
      gate:arrivals(4)
      gate:release()
      assert(first:wait(10) == "core")
      for i = 1, 4 do assert(futs[i]:wait(10) == i) end
      for _, h in ipairs(held) do assert(h[1]:wait(10) == h[2]) end
      local s = pool:stats()
      assert(s.busy == 0 and s.waiting == 0, "busy " .. s.busy)
      assert(s.invokes == s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled, "unbalanced")
      assert(s.core + s.noncore == s.created - s.closed, "states")
      assert(s.errors == refused and s.succeeded == 5 + #held, "outcomes")
      pool:close()
      gate:close()
      return ("refused %d threads %d -> %d"):format(refused, before, Gate.threads_back_to(before))
    ]], 30)
    assert.are.equal("exited", how, report)
    assert.are.equal(0, code, report)
    local refused, before, after = report:match("refused (%d+) threads (%d+) %-> (%d+)")
    assert.are.equal("5", refused)
    assert.are.equal(before, after)
  end)
end)

describe("when the system refuses a child's allocation", function()
  if not Child.available then
    pending("needs lua-posix (Lua 5.1 to 5.3 / LuaJIT)")
    return
  end

  local SOURCE = [[
function try(n) return pcall(string.rep, "x", n) end
function grow(n) return #string.rep("x", n) end
function echo(...) return ... end
]]

  -- runs `body(pool)` in a forked child whose address space has 256 MiB to spare
  local function capped(options, body)
    local report, how, code = Child.run(function()
      local pool = vmpool.new(options)
      pool:compile("c", SOURCE)
      Child.cap_address_space(256 * 1024 * 1024)
      local out = body(pool)
      Child.cap_address_space(nil)
      local s = pool:stats()
      assert(s.busy == 0 and s.waiting == 0, "busy " .. s.busy)
      assert(s.invokes == s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled, "unbalanced")
      pool:close()
      return out
    end, 30)
    assert.are.equal("exited", how, report)
    assert.are.equal(0, code, report)
    return report
  end

  for _, options in ipairs { { core = 1 }, { core = 1, memory_limit = 2 ^ 40 } } do
    local with = options.memory_limit and "with a memory_limit the system cannot give" or "without a memory_limit"
    it("is Lua's catchable 'not enough memory' in the child, " .. with, function()
      local report = capped(options, function(pool)
        local ok, err = pool:invoke("c", "try", 1.5e9)
        return tostring(ok) .. " " .. tostring(err)
      end)
      assert.matches("^false not enough memory", report)
    end)

    it("fails an unprotected call with a vmpool: message, and the state keeps working, " .. with, function()
      local report = capped(options, function(pool)
        local ok, err = pcall(pool.invoke, pool, "c", "grow", 1.5e9)
        assert(not ok, "a 1.5 GB string in a state with 256 MiB to spare")
        assert(pool:invoke("c", "echo", "after") == "after", "the state does not work after it")
        assert(pool:stats().created == 1, "the state was replaced")
        return err
      end)
      assert.are.equal(
        "vmpool: error in c:grow: not enough memory (the system refused an allocation of this state)", report)
    end)
  end
end)
