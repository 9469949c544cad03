-- vmpool inside Neovim (`nvim --headless`, LuaJIT), through vim.loop: run by scripts/test-nvim.sh
-- as `nvim --headless -u NONE -c 'luafile spec/nvim/offload_nvim.lua'`. Neovim 0.7 has no -l,
-- so the verdict is the exit code: `qall!` (0) when every check passed, `cquit 1` otherwise.
-- VMPOOL_CPATH is where the rock built for LuaJIT lives; VMPOOL_ROOT the repository.
--
-- The checks run from the editor's own loop: this file only starts them and returns, as a
-- plugin's code would.
local root = assert(os.getenv("VMPOOL_ROOT"), "set VMPOOL_ROOT")
package.cpath = assert(os.getenv("VMPOOL_CPATH"), "set VMPOOL_CPATH") .. ";" .. package.cpath
package.path = root .. "/examples/neovim/lua/?.lua;" .. package.path

local uv = vim.loop
local CALLS, STATES, CALL_SECONDS = 1000, 100, 0.2

local function say(...)
  io.stderr:write(table.concat({ ... }, " "), "\n")
end

local finished = false
local function finish(ok, why)
  if finished then return end
  finished = true
  vim.schedule(function()
    if ok then
      say("nvim: ok")
      vim.cmd("qall!")
    else
      say("nvim: FAILED: " .. tostring(why))
      vim.cmd("cquit 1")
    end
  end)
end

local function check(cond, what)
  if not cond then error(what, 2) end
end

-- a bound on the whole test, not a verdict on speed
local guard = uv.new_timer()
guard:start(120000, 0, function() finish(false, "the test did not finish within 120 s") end)

local ok, err = pcall(function()
  local vmpool = require "vmpool"
  local vluv = require "vmpool.luv"
  check(vmpool.runtime == "LuaJIT", "expected LuaJIT, got " .. tostring(vmpool.runtime))
  check(vluv.loop == vim.loop, "vmpool.luv drives vim.loop")

  -- each call takes 200 ms in its state (the state sleeps; the editor's loop must not)
  local pool = vmpool.new { core = STATES }
  pool:compile("slow", [[
    local socket = require "socket"
    function square(x) socket.sleep(]] .. CALL_SECONDS .. [[) return x * x end
  ]])

  local results, done, first_done_at_tick = {}, 0, nil
  local ticks, ticks_while_waiting = 0, 0
  local timer = uv.new_timer()
  timer:start(1, 1, function()
    ticks = ticks + 1
    if done < CALLS and vluv.stats().waiting > 0 then
      ticks_while_waiting = ticks_while_waiting + 1
    end
  end)

  local fuzzy = require("fuzzy_offload").setup { core = 1 }

  local function verdict()
    timer:close()
    for i = 1, CALLS do check(results[i] == i * i, "result " .. i .. " is " .. tostring(results[i])) end
    -- the editor's loop ran its timer while every call was still waiting, and during the waits
    check(first_done_at_tick and first_done_at_tick >= 1,
      "the timer fired before the first call finished (ticks then: " .. tostring(first_done_at_tick) .. ")")
    check(ticks_while_waiting >= CALLS / STATES,
      "the timer fired " .. ticks_while_waiting .. " times while calls waited (at least one per round)")
    local s = vluv.stats()
    check(s.resumes == CALLS, "each coroutine resumed once: " .. s.resumes)
    check(s.empty == 0, "no empty wake-up: " .. s.empty)
    say(("nvim: %d calls of %gs on %d states; timer ticks %d (%d while calls waited, %d before the first result); "
      .. "adapter wake-ups %d for %d completions"):format(CALLS, CALL_SECONDS, STATES, ticks,
      ticks_while_waiting, first_done_at_tick, s.wakeups, s.completions))
    -- the example plugin offloads its function the same way
    fuzzy.rank("vmp", { "vim", "map", "vmpool", "v_m_p" }, function(ranked, rank_err)
      local fine = ranked and ranked[1] == "vmpool" and ranked[2] == "v_m_p" and ranked[3] == nil
      pool:close()
      fuzzy.pool():close()
      uv.timer_stop(guard)
      guard:close()
      finish(fine and vluv.stats().watchers == 0,
        "fuzzy_offload.rank gave " .. vim.inspect(ranked) .. " " .. tostring(rank_err))
    end)
  end

  for i = 1, CALLS do
    vluv.spawn(function()
      results[i] = pool:co_invoke("slow", "square", i)
      done = done + 1
      if done == 1 then first_done_at_tick = ticks end
      if done == CALLS then
        local fine, why = pcall(verdict)
        if not fine then finish(false, why) end
      end
    end)
  end
  check(vluv.stats().waiting == CALLS, "all calls in flight at once")
end)
if not ok then finish(false, err) end
