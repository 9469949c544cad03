-- `luarocks test` runs this script with the interpreter LuaRocks targets: it runs the busted
-- suite (spec/, settings in .busted) on that same interpreter. Arguments after `luarocks test --`
-- go to busted; BUSTED names the busted command if it is not `busted` on PATH.
local function quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local command = { quote(os.getenv("BUSTED") or "busted"), "--lua=" .. quote(arg[-1]) }
for i = 1, #arg do
  command[#command + 1] = quote(arg[i])
end
local ok, _, code = os.execute(table.concat(command, " "))
-- Lua 5.1 and LuaJIT return the exit status; 5.2+ return true, or nil with how and the code
if ok == true or ok == 0 then
  os.exit(0)
end
os.exit(type(code) == "number" and code ~= 0 and code or 1)
