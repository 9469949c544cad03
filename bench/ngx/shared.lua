-- OpenResty parity costs (issue 11, item 4), measured inside one nginx worker:
--   dict     get and set of a short string, ns per operation: ngx.shared.DICT (resty.core's FFI
--            path) against vmpool.shared, and a bare C-function call for scale; the goal is
--            vmpool.shared at >= 0.8x the speed of ngx.shared.DICT
--   ngx fns  ngx.md5, encode_base64, crc32_short, escape_uri, encode_args, ngx.shared.DICT:get
--            called in a vmpool.ngx pool state against the same call on the event loop, ns per call
--            (each timed in a loop where it runs); the goal is <= 1.5x
-- Every round measures every figure once, so rounds interleave; medians of the rounds with
-- [min-max]. Settings: ROUNDS (7), N (200000 operations per figure and round).
-- Run with `bench/ngx/run.sh bench/ngx/shared.lua` (builds the LuaJIT rock; nginx on 127.0.0.1).
local H = require "spec.ngx.nginx"

local ROUNDS = tonumber(os.getenv("ROUNDS") or 7)
local N = tonumber(os.getenv("N") or 200000)
local FUNCTIONS = { "md5", "encode_base64", "crc32_short", "escape_uri", "encode_args", "shared_get" }

-- What a state and the event loop run: `loop(name, n)` times n calls of one ngx function.
local LOOP = [==[
local clock = require("vmpool").clock
local input = ("x"):rep(40) .. " /?&="
local args = { a = "1", b = "two words" }
local calls = {
  md5 = function() return ngx.md5(input) end,
  encode_base64 = function() return ngx.encode_base64(input) end,
  crc32_short = function() return ngx.crc32_short(input) end,
  escape_uri = function() return ngx.escape_uri(input) end,
  encode_args = function() return ngx.encode_args(args) end,
  shared_get = function() return ngx.shared.bench:get("k1") end,
}
local function loop(name, n)
  local f = assert(calls[name], name)
  local t0 = clock()
  for _ = 1, n do f() end
  return (clock() - t0) / n * 1e9
end
return { loop = loop }
]==]

local CONF = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log logs/error.log warn;
pid logs/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  lua_package_cpath "@ROOT@/lua_modules/luajit/lib/lua/5.1/?.so;;";
  lua_package_path "@PREFIX@/conf/?.lua;/usr/share/lua/5.1/?.lua;;";
  lua_shared_dict bench 16m;
  init_worker_by_lua_block {
    local vmpool = require "vmpool"
    vmpool.ngx.pool("bench", function()
      local pool = vmpool.new { core = 1, max_noncore = 0 }
      pool:compile("loop", require("loop_source"))
      return pool
    end)
    vmpool.ngx.init_worker()
    for i = 1, 1000 do ngx.shared.bench:set("k" .. i, "value-" .. i) end
    local d = vmpool.shared("bench", { capacity = "16m" })
    for i = 1, 1000 do d:set("k" .. i, "value-" .. i) end
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /dict {
      content_by_lua_block {
        local vmpool = require "vmpool"
        local clock, n, what = vmpool.clock, tonumber(ngx.var.arg_n), ngx.var.arg_what
        local keys = {}
        for i = 1, 1000 do keys[i] = "k" .. i end
        local d = what:match("^ngx") and ngx.shared.bench or vmpool.shared("bench")
        local t0 = clock()
        if what == "c_call" then
          local eq, a, b = rawequal, keys[1], keys[2]
          for _ = 1, n do eq(a, b) end
        elseif what:match("_get$") then
          for i = 1, n do d:get(keys[i % 1000 + 1]) end
        else
          for i = 1, n do d:set(keys[i % 1000 + 1], "value") end
        end
        ngx.say((clock() - t0) / n * 1e9)
      }
    }
    location = /fn {
      content_by_lua_block {
        local vmpool = require "vmpool"
        local name, n = ngx.var.arg_name, tonumber(ngx.var.arg_n)
        if ngx.var.arg_where == "loop" then
          ngx.say(require("loop_source_fns").loop(name, n))
        else
          ngx.say(vmpool.ngx.pool("bench"):co_invoke("loop", "loop", name, n))
        end
      }
    }
  }
}
]]

local port = H.free_port()
local conf = CONF:gsub("@ROOT@", H.ROOT):gsub("@PORT@", tostring(port))
local nginx = H.new(conf, {
  ["loop_source.lua"] = "return " .. ("%q"):format(LOOP),
  ["loop_source_fns.lua"] = LOOP,
})

local function number(path)
  local status, body = H.get(port, path, 120)
  assert(status == 200, path .. " answered " .. tostring(status) .. ": " .. tostring(body))
  return assert(tonumber(body), body)
end

local function summary(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return med, s[1], s[n]
end

local ok, err = pcall(function()
  nginx:start(port)
  local dict = { c_call = {}, ngx_get = {}, vm_get = {}, ngx_set = {}, vm_set = {} }
  local fns = {}
  for _, f in ipairs(FUNCTIONS) do fns[f] = { loop = {}, state = {} } end
  local order = { "c_call", "ngx_get", "vm_get", "ngx_set", "vm_set" }
  for round = 1, ROUNDS do
    for i = 0, #order - 1 do
      local what = order[(round - 1 + i) % #order + 1]
      local t = dict[what]
      t[#t + 1] = number(("/dict?what=%s&n=%d"):format(what, N))
    end
    for _, f in ipairs(FUNCTIONS) do
      local wheres = round % 2 == 1 and { "loop", "state" } or { "state", "loop" }
      for _, where in ipairs(wheres) do
        local t = fns[f][where]
        t[#t + 1] = number(("/fn?name=%s&where=%s&n=%d"):format(f, where, N))
      end
    end
  end
  print(("# OpenResty parity costs, %s"):format(os.date("!%Y-%m-%d %H:%M UTC")))
  print(("%d interleaved rounds of %d operations per figure; load average at the end: %s"):format(ROUNDS, N,
    (H.read_file("/proc/loadavg") or ""):match("^(%S+ %S+ %S+)")))
  print("")
  print("| dictionary, ns per operation | median | min | max |")
  print("|---|--:|--:|--:|")
  for _, what in ipairs(order) do
    print(("| %s | %.1f | %.1f | %.1f |"):format(what, summary(dict[what])))
  end
  local ng, vg = summary(dict.ngx_get), summary(dict.vm_get)
  local ns, vs = summary(dict.ngx_set), summary(dict.vm_set)
  print(("\nvmpool.shared speed relative to ngx.shared.DICT (goal >= 0.8): get %.2fx, set %.2fx\n")
    :format(ng / vg, ns / vs))
  print("| ngx function, ns per call | event loop | pool state | state / loop (goal <= 1.5) |")
  print("|---|--:|--:|--:|")
  for _, f in ipairs(FUNCTIONS) do
    local l, s = summary(fns[f].loop), summary(fns[f].state)
    print(("| %s | %.1f | %.1f | %.2f |"):format(f, l, s, s / l))
  end
end)
local log = nginx:log()
nginx:stop()
if not ok then error(tostring(err) .. "\nerror.log:\n" .. log:sub(-3000), 0) end
