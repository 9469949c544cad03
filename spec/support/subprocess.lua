-- Runs a Lua script in a fresh interpreter of the runtime under test, killed after a bound, with
-- an optional cap on its address space (`ulimit -v`): for cases that could hang, abort or exit the
-- process, on every runtime (spec/support/child.lua needs lua-posix, which Lua 5.4 lacks here).
local vmpool = require "vmpool"

local Sub = {}

local INTERPRETERS = {
  ["Lua 5.1"] = "lua5.1", ["Lua 5.2"] = "lua5.2", ["Lua 5.3"] = "lua5.3", ["Lua 5.4"] = "lua5.4",
  ["Lua 5.5"] = "lua5.5", ["LuaJIT"] = "luajit",
}
Sub.interpreter = INTERPRETERS[vmpool.runtime]

local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Returns what the script printed (stdout and stderr), its exit status (128 + N for signal N,
-- 137 when killed at the bound) and whether it was killed at the bound. `opts.timeout` (seconds,
-- default 30), `opts.address_space` (KiB for `ulimit -v`), `opts.env` ("NAME=value " words put
-- before the command).
function Sub.run(source, opts)
  opts = opts or {}
  local file = os.tmpname()
  local f = assert(io.open(file, "w"))
  f:write(source)
  f:close()
  local cmd = ("%sLUA_PATH=%s LUA_CPATH=%s timeout -s KILL %d %s %s 2>&1; echo \"exit=$?\""):format(
    opts.env or "", quote(package.path), quote(package.cpath), opts.timeout or 30, Sub.interpreter, quote(file))
  if opts.address_space then
    cmd = ("ulimit -v %d; %s"):format(opts.address_space, cmd)
  end
  local p = assert(io.popen("sh -c " .. quote(cmd)))
  local out = p:read("*a")
  p:close()
  os.remove(file)
  local status = tonumber(out:match("exit=(%d+)%s*$"))
  return out:gsub("exit=%d+%s*$", ""), status, status == 137
end

-- Source that defines fin(f): an object whose finalizer is f (newproxy where setmetatable's __gc
-- does not work on userdata-less tables: Lua 5.1 and LuaJIT).
Sub.FINALIZER = [[
local function fin(f)
  if newproxy then
    local p = newproxy(true)
    getmetatable(p).__gc = f
    return p
  end
  return setmetatable({}, { __gc = f })
end
]]

return Sub
