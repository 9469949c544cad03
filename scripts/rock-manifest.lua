-- Writes the rock_manifest of a binary rock's staged tree (what LuaRocks writes when it installs a
-- rock and reads back when it installs a packed one): every file under DIR with its MD5, nested by
-- directory. Usage: lua scripts/rock-manifest.lua DIR (any Lua 5.1 to 5.5, LuaJIT)
local dir = assert(arg[1], "usage: rock-manifest.lua DIR")
local files = assert(io.popen("cd '" .. dir .. "' && find . -type f ! -name rock_manifest -exec md5sum {} +"))
local tree = {}
for line in files:lines() do
  local md5, path = line:match("^(%x+)  %./(.+)$")
  assert(md5, "md5sum printed: " .. line)
  local node = tree
  for part, rest in path:gmatch("([^/]+)(/?)") do
    if rest == "/" then
      node[part] = node[part] or {}
      node = node[part]
    else
      node[part] = md5
    end
  end
end
assert(files:close())

local function key(k)
  return k:match("^[%a_][%w_]*$") and k or ("[%q]"):format(k)
end

local function write(out, node, indent)
  local names = {}
  for k in pairs(node) do names[#names + 1] = k end
  table.sort(names)
  out[#out + 1] = "{\n"
  for i, k in ipairs(names) do
    out[#out + 1] = indent .. "   " .. key(k) .. " = "
    if type(node[k]) == "table" then
      write(out, node[k], indent .. "   ")
    else
      out[#out + 1] = ("%q"):format(node[k])
    end
    out[#out + 1] = (i < #names and ",\n" or "\n")
  end
  out[#out + 1] = indent .. "}"
end

local out = { "rock_manifest = " }
write(out, tree, "")
out[#out + 1] = "\n"
local f = assert(io.open(dir .. "/rock_manifest", "wb"))
f:write(table.concat(out))
f:close()
