-- Lua 5.5 makes the control variables of a `for` loop read-only, and some of Debian's pure-Lua
-- modules that busted needs (Penlight 1.13, busted's moonscript loader) assign to them. Of the
-- files under ROOT/<name> (a file or a directory) for each name given, every one that Lua 5.5
-- cannot compile for that reason gets a copy in OUT, under the same relative path, where each
-- loop runs on hidden variables and copies them into locals of the old names at the top of its
-- body, which is what 5.4 did; OUT goes before ROOT on LUA_PATH. Prints the files it rewrote.
-- Usage: lua5.5 loopvars.lua ROOT OUT name ...   (run by scripts/lua55.sh)
local root, out = arg[1], arg[2]

local function rewrite(text)
  local n = 0
  local function hidden(names)
    local h = {}
    for name in names:gmatch("[%a_][%w_]*") do h[#h + 1] = "__v55_" .. name end
    return table.concat(h, ", ")
  end
  -- generic: for a, b in explist do  ->  for __v55_a, __v55_b in explist do local a, b = ...
  local generic = "%f[%w_]for(%s+)([%a_][%w_]*%s*,?%s*[%w_%s,]-)(%s+in%s+)(.-)(%s+do)%f[^%w_]"
  text = text:gsub(generic, function(s1, names, s_in, exps, s_do)
    n = n + 1
    names = names:gsub("%s+$", "")
    return "for" .. s1 .. hidden(names) .. s_in .. exps .. s_do .. " local " .. names .. " = " .. hidden(names) .. ";"
  end)
  -- numeric: for i = a, b[, c] do  ->  for __v55_i = a, b do local i = __v55_i
  text = text:gsub("%f[%w_]for(%s+)([%a_][%w_]*)(%s*=%s*)(.-)(%s+do)%f[^%w_]", function(s1, name, s_eq, exps, s_do)
    n = n + 1
    return "for" .. s1 .. "__v55_" .. name .. s_eq .. exps .. s_do .. " local " .. name .. " = __v55_" .. name .. ";"
  end)
  return text, n
end

local files = {}
for i = 3, #arg do
  local find = assert(io.popen("cd '" .. root .. "' && find -L '" .. arg[i] .. "' -name '*.lua' -type f"))
  for rel in find:lines() do
    local _, err = loadfile(root .. "/" .. rel)
    if err and err:find("attempt to assign to const variable", 1, true) then
      files[#files + 1] = rel
    elseif err then
      error("vmpool: " .. err .. " (Lua 5.5 cannot compile it)", 0)
    end
  end
  find:close()
end

for _, rel in ipairs(files) do
  local f = assert(io.open(root .. "/" .. rel, "rb"))
  local text = f:read("a")
  f:close()
  local fixed, loops = rewrite(text)
  local ok, err = load(fixed, "=" .. rel)
  if not ok then
    error("vmpool: " .. rel .. " still does not compile on Lua 5.5 after rewriting " .. loops .. " loops: " .. err, 0)
  end
  local dir = (out .. "/" .. rel):match("^(.*)/[^/]*$")
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  f = assert(io.open(out .. "/" .. rel, "wb"))
  f:write(fixed)
  f:close()
  print("  " .. rel .. ": " .. loops .. " loops rewritten")
end
