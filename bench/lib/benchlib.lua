-- Helpers shared by the benchmark scripts: the workload of the seed report, statistics, what a
-- process reads about itself from /proc, and a writer of Lua table literals (every measuring
-- process prints one `return {...}` line that the runner loads). Runs on Lua 5.1, 5.4 and LuaJIT.
local M = {}

-- The seed report's script: helloLua(n) calls a helper that every state defines in `init`.
M.SCRIPT = [[
function helloLua(n)
  goSayHello("hello", "my name is lua") -- a helper every state defines in init
  return n, 100000
end
function echo(...) return ... end
]]
M.INIT = [[function goSayHello(greeting, text) return greeting .. ", " .. text end]]
M.CHUNK = "test.lua"
-- The channel benchmarks' chunk (bench/peers/channels.lua, bench/suites/cg.lua's chan_* kinds): echo(a, b)
-- answers each message of channel a on channel b until a false one; produce(name, n) pushes 1..n;
-- items(n) streams 1..n.
M.CHANNEL_SCRIPT = [[
local vmpool = require "vmpool"
function echo(a, b)
  local i, o = vmpool.channel(a), vmpool.channel(b)
  while true do
    local v = i:pop()
    if not v then return end
    o:push(v)
  end
end
function produce(name, n)
  local c = vmpool.channel(name)
  for i = 1, n do c:push(i) end
end
function items(n) for i = 1, n do coroutine.yield(i) end end
]]

-- The same functions in the host, for the direct-call baseline.
function M.host_functions()
  local env = {}
  local src = M.INIT .. "\n" .. M.SCRIPT
  local fn
  if setfenv then -- luacheck: ignore 113
    fn = assert(loadstring(src, "=host")) -- luacheck: ignore 113
    setfenv(fn, env) -- luacheck: ignore 113
  else
    fn = assert(load(src, "=host", "t", env))
  end
  fn()
  return env.helloLua, env.echo
end

-- The 10-field table of the "table echo" figures.
function M.table10()
  return { a = 1, b = 2.5, c = "three", d = true, e = "five", f = 6, g = 7.25, h = false, i = "nine", j = 10 }
end

--- statistics --------------------------------------------------------------------------------

function M.sorted(xs)
  local t = {}
  for i = 1, #xs do t[i] = xs[i] end
  table.sort(t)
  return t
end

function M.median(xs)
  local n = #xs
  if n == 0 then return nil end
  local t = M.sorted(xs)
  if n % 2 == 1 then return t[(n + 1) / 2] end
  return (t[n / 2] + t[n / 2 + 1]) / 2
end

--- {median=, min=, max=, n=} of the numbers in xs (nils skipped).
function M.summary(xs)
  local clean = {}
  for i = 1, #xs do
    if type(xs[i]) == "number" then clean[#clean + 1] = xs[i] end
  end
  if #clean == 0 then return nil end
  local t = M.sorted(clean)
  return { median = M.median(t), min = t[1], max = t[#t], n = #t }
end

--- /proc -------------------------------------------------------------------------------------

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
M.read_file = read_file

--- CPU seconds this process has used (all threads, user + system), from /proc/self/stat.
local clk_tck
function M.cpu_seconds()
  local s = read_file("/proc/self/stat")
  if not s then return nil end
  local rest = s:match("%) (.*)$")
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- rest starts at field 3 (state); utime is field 14, stime field 15
  local ticks = tonumber(fields[12]) + tonumber(fields[13])
  if not clk_tck then
    local p = io.popen("getconf CLK_TCK 2>/dev/null")
    clk_tck = p and tonumber(p:read("*l")) or 100
    if p then p:close() end
  end
  return ticks / clk_tck
end

--- A field of /proc/self/status in kB (VmRSS, VmHWM, Threads is a count).
function M.status_field(name)
  local s = read_file("/proc/self/status")
  return s and tonumber(s:match(name .. ":%s*(%d+)"))
end

--- writing Lua literals ----------------------------------------------------------------------

local function is_identifier(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

local function literal(v, indent)
  local t = type(v)
  if t == "number" then
    if v ~= v then return "0/0" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
    return string.format("%.17g", v)
  elseif t == "string" then
    return string.format("%q", v)
  elseif t == "boolean" or t == "nil" then
    return tostring(v)
  elseif t == "table" then
    indent = indent or ""
    local inner = indent .. "  "
    local parts = {}
    local n = #v
    for i = 1, n do parts[#parts + 1] = inner .. literal(v[i], inner) end
    local keys = {}
    for k in pairs(v) do
      if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then
        keys[#keys + 1] = k
      end
    end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local key = is_identifier(k) and k or ("[" .. literal(k) .. "]")
      parts[#parts + 1] = inner .. key .. " = " .. literal(v[k], inner)
    end
    if #parts == 0 then return "{}" end
    return "{\n" .. table.concat(parts, ",\n") .. "\n" .. indent .. "}"
  end
  error("cannot write a " .. t)
end

--- Lua source for v (tables sorted by key, so outputs diff well).
function M.literal(v) return literal(v) end

--- One line: `return {...}` with no newlines (what measuring processes print).
function M.result_line(v)
  return "return " .. (literal(v):gsub("\n%s*", " "))
end

--- Loads a `return {...}` text; nil, message if it is not one.
function M.load_result(text)
  local fn, err
  if setfenv then -- luacheck: ignore 113
    fn, err = loadstring(text) -- luacheck: ignore 113
    if fn then setfenv(fn, { math = math }) end -- luacheck: ignore 113
  else
    fn, err = load(text, "=result", "t", { math = math })
  end
  if not fn then return nil, err end
  local ok, v = pcall(fn)
  if not ok then return nil, v end
  return v
end

--- Command-line options `--key=value` / `--flag` into a table.
function M.options(args)
  local o = {}
  for _, a in ipairs(args) do
    local k, v = a:match("^%-%-([%w_-]+)=(.*)$")
    if k then
      o[k:gsub("-", "_")] = tonumber(v) or v
    else
      k = a:match("^%-%-([%w_-]+)$")
      if k then o[k:gsub("-", "_")] = true else o[#o + 1] = a end
    end
  end
  return o
end

return M
