-- The smoke test of an installed rock inside Neovim (LuaJIT), run by scripts/install-check.sh as
-- `nvim --headless -u NONE -c 'luafile spec/install/smoke_nvim.lua'` with VMPOOL_CPATH the fresh
-- tree's lib/lua/5.1/?.so: invoke, submit, co_invoke under vmpool.run, and co_invoke through
-- vmpool.luv on the editor's own loop (vim.loop). Exits 0 when every check passed, 1 otherwise.
package.cpath = assert(os.getenv("VMPOOL_CPATH"), "set VMPOOL_CPATH") .. ";" .. package.cpath

local function finish(ok, why)
  vim.schedule(function()
    io.stderr:write(ok and "nvim: ok\n" or ("nvim: FAILED: " .. tostring(why) .. "\n"))
    vim.cmd(ok and "qall!" or "cquit 1")
  end)
end

local ok, err = pcall(function()
  local vmpool = require "vmpool"
  assert(vmpool.runtime == "LuaJIT", "vmpool.runtime is " .. tostring(vmpool.runtime))
  local pool = vmpool.new { core = 2 }
  pool:compile("check", "function add(a, b) return a + b end")
  assert(pool:invoke("check", "add", 2, 3) == 5, "pool:invoke")
  assert(pool:submit("check", "add", 4, 5):wait() == 9, "pool:submit")
  assert(vmpool.run(function() return pool:co_invoke("check", "add", 6, 7) end) == 13, "vmpool.run")
  local vluv = require "vmpool.luv"
  -- the editor's loop resumes the coroutine once its call finished
  vluv.spawn(function()
    local sum = pool:co_invoke("check", "add", 1, 2)
    pool:close()
    if sum == 3 and vluv.stats().resumes == 1 then
      finish(true)
    else
      finish(false, "vmpool.luv returned " .. tostring(sum))
    end
  end)
end)
if not ok then finish(false, err) end
