-- A pool used in a child process after fork(): its threads did not survive the fork, so every use
-- fails at once with "pool was created in another process" and close/GC return; nothing hangs.
-- Needs lua-posix (Debian ships it for Lua 5.1 to 5.3 and LuaJIT); tests/fork.rs covers Lua 5.4 and the
-- case of a lock copied while held.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"
local Child = require "spec.support.child"

describe("a pool after fork()", function()
  if not Child.available then
    pending("needs lua-posix (Lua 5.1 to 5.3 / LuaJIT); tests/fork.rs covers Lua 5.4")
    return
  end

  it("fails every use with 'pool was created in another process', and close/GC return", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 2, init = Gate.CHILD }
    pool:compile("c", "return { gate = gate, echo = function(...) return ... end }")
    local running = pool:submit("c", "gate", gate.port, "parent's")
    gate:arrivals(1)
    local parent = Child.pid()
    local report, how, code = Child.run(function()
      local lines = {}
      local function try(label, f, ...)
        local ok, err = pcall(f, ...)
        lines[#lines + 1] = label .. "=" .. (ok and "ok" or tostring(err))
      end
      try("invoke", pool.invoke, pool, "c", "echo", 1)
      try("submit", pool.submit, pool, "c", "echo", 1)
      try("co_invoke", vmpool.run, function() return pool:co_invoke("c", "echo", 1) end)
      try("compile", pool.compile, pool, "d", "return 1")
      try("unload", pool.unload, pool, "c")
      try("stats", pool.stats, pool)
      try("wait", running.wait, running)
      try("cancel", running.cancel, running)
      lines[#lines + 1] = "tostring=" .. tostring(pool)
      try("close", pool.close, pool)
      try("close again", pool.close, pool)
      pool, running = nil, nil -- luacheck: ignore 311
      collectgarbage()
      collectgarbage()
      lines[#lines + 1] = "gc=ok"
      return table.concat(lines, "\n")
    end)
    assert.are.equal("exited", how, report)
    assert.are.equal(0, code, report)
    local pid_pattern = "%(pid " .. parent .. "%)"
    for _, label in ipairs { "invoke", "submit", "compile", "unload", "stats", "wait", "cancel" } do
      assert.matches("\n?" .. label .. "=vmpool: pool was created in another process " .. pid_pattern
        .. "; create pools in the process that uses them", report)
    end
    -- under vmpool.run the error ends the run, which reports the coroutine's error
    assert.matches("\nco_invoke=vmpool: a coroutine in vmpool.run failed: vmpool: pool was created in another process "
      .. pid_pattern, report)
    assert.matches("tostring=vmpool.pool %(created in another process%)", report)
    assert.matches("close=ok\nclose again=ok\ngc=ok", report)
    -- the parent's pool goes on as if nothing happened
    gate:release()
    assert.are.equal("parent's", running:wait(10))
    assert.are.equal(3, pool:invoke("c", "echo", 3))
    pool:close()
    gate:close()
  end)
end)
