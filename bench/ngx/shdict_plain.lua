-- A content handler of OpenResty's shared-dictionary tests, run in plain Lua (5.1 to 5.4 or
-- LuaJIT) with ngx.shared.NAME standing for vmpool.shared(NAME, { capacity = SIZE }) and the few
-- ngx functions those handlers use stood in for: what bench/ngx/shdict_compat.py --plain runs.
--
-- Usage: lua bench/ngx/shdict_plain.lua HANDLER.lua REQUESTS NAME=SIZE...
-- The handler serves REQUESTS requests in a row (pipelined requests: the dictionaries persist);
-- each response body goes to stdout followed by "\0status N\n"; the error log to stderr.
local vmpool = require "vmpool"

local handler_file = assert(arg[1], "the handler's file")
local requests = tonumber(arg[2]) or 1
local sizes = {}
for i = 3, #arg do
  local name, size = arg[i]:match("^([^=]+)=(.+)$")
  sizes[name] = size
end

local out = {}
local status
local levels = { [0] = "stderr", "emerg", "alert", "crit", "error", "warn", "notice", "info", "debug" }

-- ngx.say's formatting of numbers: "%.14g", integers without a point, as LuaJIT's tostring
local function text(v)
  local t = type(v)
  if t == "number" then
    if v == math.floor(v) and v > -1e15 and v < 1e15 then return ("%d"):format(v) end
    return ("%.14g"):format(v)
  elseif t == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = text(v[i]) end
    return table.concat(parts)
  elseif v == nil then
    return "nil"
  end
  return tostring(v)
end

local function write(...)
  for i = 1, select("#", ...) do out[#out + 1] = text((select(i, ...))) end
  return 1
end

local function sleep(s)
  local t = vmpool.clock() + s
  while vmpool.clock() < t do end
end

-- a userdata without methods where the runtime can make one (ngx.null is a lightuserdata)
local null = newproxy and newproxy(false) or setmetatable({}, { __tostring = function() return "null" end })

local shared = setmetatable({}, { __index = function(t, name)
  if not sizes[name] then return nil end
  local d = vmpool.shared(name, { capacity = sizes[name] })
  rawset(t, name, d)
  return d
end })

local start = vmpool.clock()
local ngx = {
  say = function(...) write(...) out[#out + 1] = "\n" return 1 end,
  print = write,
  log = function(level, ...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = text((select(i, ...))) end
    io.stderr:write(("[%s] %s\n"):format(levels[level] or "error", table.concat(parts)))
  end,
  sleep = sleep,
  null = null,
  shared = shared,
  now = function() return os.time() + (vmpool.clock() - start) % 1 end,
  time = os.time,
  update_time = function() end,
  exit = function(code) status = code error({ exit = true }) end,
  var = {},
  header = {},
  location = {
    capture = function(uri)
      local s = uri:match("^/sleep/(.+)$")
      if s then sleep(tonumber(s)) end
      return { status = 200, body = "" }
    end,
  },
  STDERR = 0, EMERG = 1, ALERT = 2, CRIT = 3, ERR = 4, WARN = 5, NOTICE = 6, INFO = 7, DEBUG = 8,
  HTTP_OK = 200, OK = 0, ERROR = -1,
}
_G.ngx = ngx
package.loaded["resty.core"] = true
package.loaded["resty.core.shdict"] = true
if not pcall(require, "ffi") then
  package.loaded.ffi = {} -- the handlers require it; on PUC Lua none of them uses it
end

local f = assert(io.open(handler_file))
local code = f:read("*a")
f:close()
local ERROR_PAGE = "<html>\r\n<head><title>500 Internal Server Error</title></head>\r\n<body>\r\n"
  .. "<center><h1>500 Internal Server Error</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
local chunk, err = (loadstring or load)(code, "=content_by_lua(nginx.conf:1)")
for _ = 1, requests do
  out, status = {}, 200
  if not chunk then
    io.stderr:write("[error] failed to load: " .. err .. "\n")
    status, out = 500, { ERROR_PAGE }
  else
    local ok, e = pcall(chunk)
    if not ok and not (type(e) == "table" and e.exit) then
      io.stderr:write("[error] lua entry thread aborted: runtime error: " .. tostring(e) .. "\n")
      if #out == 0 then -- nginx sends its error page unless output has begun
        status, out = 500, { ERROR_PAGE }
      end
    end
  end
  io.stdout:write(table.concat(out))
  io.stdout:write("\0status " .. status .. "\n")
end
