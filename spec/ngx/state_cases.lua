-- The handlers of spec/ngx/state_api_ngx.lua, loaded by the nginx worker: lua-nginx-module's
-- t/166-worker-thread.t tests 18-33 and 35-47, with the same child code (the `child` strings are
-- the peer's user files, unchanged) and the same host code, where the peer's
-- `ngx.run_worker_thread("testpool", module, fn, ...)` is `run(module, fn, ...)`: a pool:co_invoke
-- that answers `true, results...` or `false, err` as the peer does. Then cases beyond the peer.
-- luacheck: globals ngx
local vmpool = require "vmpool"

local CASES = {}

CASES[18] = { module = "hello", child = [[
local function hello()
    return ngx.encode_base64("hello")
end
return {hello=hello}
]], host = function(run)
  local ok, hello_or_err = run("hello", "hello")
  ngx.say(ok, " : ", hello_or_err)
end }

CASES[19] = { module = "hello", child = [[
local function hello()
    return ngx.config.subsystem
end
return {hello=hello}
]] }

CASES[20] = { module = "hello", child = [[
local function hello()
  local key = "thisisverysecretstuff"
  local src = "some string we want to sign"
  local digest = ngx.hmac_sha1(key, src)
  return ngx.encode_base64(digest)
end
return {hello=hello}
]] }

CASES[21] = { module = "hello", child = [[
local function hello()
  return ngx.encode_args({foo = 3, ["b r"] = "hello world"})
end
return {hello=hello}
]] }

CASES[22] = { module = "hello", child = [[
local function hello()
  local args = "a=bar&b=foo"
  args = ngx.decode_args(args)
  return args
end
return {hello=hello}
]], host = function(run)
  local ok, ret = run("hello", "hello")
  ngx.say(ok, " : ", ret.a, " : ", ret.b)
end }

CASES[23] = { module = "hello", child = [[
local function hello(str)
  return ngx.quote_sql_str(str)
end
return {hello=hello}
]], host = function(run)
  local ok, hello_or_err = run("hello", "hello", "a\026b\026")
  ngx.say(ok, " : ", hello_or_err)
end }

CASES[24] = { module = "hello", child = [[
local function hello()
    return ngx.decode_base64("aGVsbG8=")
end
return {hello=hello}
]] }

CASES[25] = { module = "hello", child = [[
local function hello()
    return ngx.crc32_short("hello, world")
end
return {hello=hello}
]] }

CASES[26] = { module = "hello", child = [[
local function hello()
    return ngx.crc32_long("hello, world")
end
return {hello=hello}
]] }

CASES[27] = { module = "hello", child = [[
local function hello()
    local s = ngx.md5_bin(45)
    s = string.gsub(s, ".", function (c)
            return string.format("%02x", string.byte(c))
        end)
    return s
end
return {hello=hello}
]] }

CASES[28] = { module = "hello", child = [[
local function hello()
    return ngx.md5("hello")
end
return {hello=hello}
]] }

CASES[29] = { module = "hello", child = [[
local function hello()
    return ngx.config.debug
end
return {hello=hello}
]] }

CASES[30] = { module = "hello", child = [[
local function hello()
    return ngx.config.prefix()
end
return {hello=hello}
]] }

CASES[31] = { module = "hello", child = [[
local function hello()
    return ngx.config.nginx_version
end
return {hello=hello}
]] }

CASES[32] = { module = "hello", child = [[
local function hello()
    return ngx.config.nginx_configure()
end
return {hello=hello}
]], host = function(run)
  local ok, hello_or_err = run("hello", "hello") -- luacheck: ignore 211
  ngx.say(hello_or_err)
end }

CASES[33] = { module = "hello", child = [[
local function hello()
    return ngx.config.ngx_lua_version
end
return {hello=hello}
]] }

CASES[35] = { module = "test_shdict", child = [[
local function dictget(str)
    local dogs = ngx.shared.dogs
    return dogs:get("Jim")
end
return {dictget=dictget}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  local ok, err = run("test_shdict", "dictget")
  ngx.say(ok, ",", err)
end }

CASES[36] = { module = "test_shdict", child = CASES[35].child, host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  local ok, err = run("test_shdict", "dictget")
  ngx.say(ok, ",", err)
  dogs:set("Jim", nil)
  ok, err = run("test_shdict", "dictget")
  ngx.say(ok, ",", err)
end }

CASES[37] = { module = "test_shdict", child = [[
local function dictsetnil(str)
    local dogs = ngx.shared.dogs
    return dogs:set("Jim", nil)
end
return {dictsetnil=dictsetnil}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  local ok, err = run("test_shdict", "dictsetnil")
  ngx.say(ok, ",", err)
  ngx.say(ok, ",", dogs:get("Jim"))
end }

-- the peer sets a 1 s TTL and sleeps 2 s; here the TTL is 10 ms and the request waits until the
-- host sees the key expire (nginx's cached time moves on each turn of the event loop). It asks
-- get_stale, as a get would remove the expired entry.
CASES[38] = { module = "test_shdict", child = [[
local function dictget(str)
    local dogs = ngx.shared.dogs
    return dogs:get_stale("Jim")
end
return {dictget=dictget}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8, 0.01)
  local deadline = ngx.now() + 5
  while not select(3, dogs:get_stale("Jim")) and ngx.now() < deadline do ngx.sleep(0.005) end
  local ok, err = run("test_shdict", "dictget")
  ngx.say(ok, ",", err)
end }

CASES[39] = { module = "test_shdict", child = [[
local function dictadd(str)
    local dogs = ngx.shared.dogs
    local success, err = dogs:add("Jim", "hello")
    return success, err
end
return {dictadd=dictadd}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  local ok, err, err2 = run("test_shdict", "dictadd")
  ngx.say(ok, ",", err, ",", err2)
end }

CASES[40] = { module = "test_shdict", child = [[
local function dictadd(str)
    local dogs = ngx.shared.dogs
    local bigstr = string.rep("A", 1024*1024*5)
    local success, err, forcible = dogs:add("King", bigstr)
    return success, err, forcible
end
return {dictadd=dictadd}
]], host = function(run)
  local dogs = ngx.shared.dogs
  local bigstr = string.rep("A", 1024 * 1024 * 3)
  dogs:set("Jim", bigstr)
  local ok, ret, err, forcible = run("test_shdict", "dictadd") -- luacheck: ignore 211
  ngx.say(ok, ",", ret, ",", forcible, ",", dogs:get("Jim"))
end }

CASES[41] = { module = "test_shdict", child = [[
local function dictreplace(str)
    local dogs = ngx.shared.dogs
    local success, err = dogs:replace("Jim", 8)
    return success, err
end
return {dictreplace=dictreplace}
]], host = function(run)
  local dogs = ngx.shared.dogs
  local bigstr = string.rep("A", 1024 * 1024 * 3)
  dogs:set("Jim", bigstr)
  local ok, ret, err = run("test_shdict", "dictreplace")
  ngx.say(ok, ",", ret, ",", err, ",", dogs:get("Jim"))
end }

CASES[42] = { module = "test_shdict", child = CASES[41].child, host = function(run)
  local ok, ret, err = run("test_shdict", "dictreplace")
  ngx.say(ok, ",", ret, ",", err)
end }

CASES[43] = { module = "test_shdict", child = [[
local function dictincr(str)
    local dogs = ngx.shared.dogs
    local success, err = dogs:incr("Jim", 1)
    return success, err
end
return {dictincr=dictincr}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  local ok, ret, err = run("test_shdict", "dictincr")
  ngx.say(ok, ",", ret, ",", err, ",", dogs:get("Jim"))
end }

CASES[44] = { module = "test_shdict", child = [[
local function dictlpush(str)
    local dogs = ngx.shared.dogs
    local val = dogs:lpop("Jim")
    local len, err = dogs:lpush("Jim", 7)
    return val, len, err
end
return {dictlpush=dictlpush}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:lpush("Jim", 8)
  dogs:lpush("Jim", 9)
  local ok, val, len, err = run("test_shdict", "dictlpush")
  ngx.say(ok, ",", val, ",", len, ",", err, ",", dogs:lpop("Jim"))
end }

CASES[45] = { module = "test_shdict", child = [[
local function dictexpire(str)
    local dogs = ngx.shared.dogs
    local success, err = dogs:expire("Jim", 1)
    return success, err
end
return {dictexpire=dictexpire}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  local ok, success, err = run("test_shdict", "dictexpire")
  ngx.say(ok, ",", success, ",", err, ",", dogs:ttl("Jim") <= 1)
end }

CASES[46] = { module = "test_shdict", child = [[
local function dictexpire(str)
    local dogs = ngx.shared.dogs
    dogs:flush_all()
end
return {dictexpire=dictexpire}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  dogs:set("King", 9)
  local ok = run("test_shdict", "dictexpire")
  ngx.say(ok, ",", dogs:get("Jim"), ",", dogs:get("King"))
end }

CASES[47] = { module = "test_shdict", child = [[
local function dictgetkeys(str)
    local dogs = ngx.shared.dogs
    return dogs:get_keys()
end
return {dictgetkeys=dictgetkeys}
]], host = function(run)
  local dogs = ngx.shared.dogs
  dogs:set("Jim", 8)
  dogs:set("King", 9)
  local ok, keys = run("test_shdict", "dictgetkeys")
  ngx.say(ok, ",", table.concat(keys, ":"))
end }

-- beyond the peer

CASES.null = { module = "m", child = [[
local cjson = require "cjson"
return {
  decode = function(text) return cjson.decode(text) end,
  is_null = function(v) return v == ngx.null, v == cjson.null end,
}
]], host = function(run)
  local _, doc = run("m", "decode", '{"a":null,"b":[null]}')
  ngx.say(doc.a == ngx.null, " ", doc.b[1] == ngx.null)
  local _, a, b = run("m", "is_null", ngx.null)
  ngx.say(a, " ", b)
end }

-- functions and closures both ways: as the callee (co_invoke, co_map) and as values, with their
-- upvalues copied, tables keeping their shape, the state's own ngx as a global, and the error
-- for an upvalue that cannot cross
CASES.functions = { module = "m", child = [[
return { echo = function(...) return ... end }
]], host = function(run, pool)
  local k = 10
  local _, a = run(function(n) return n * 2 + k end, 16)
  local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
  local _, b = run(function(n) return fib(n) end, 20)
  local shared = { 1 }
  local cyclic = {}
  cyclic.self = cyclic
  local t = { f = function(x) return x + 1 end, s = shared, s2 = shared, c = cyclic }
  local _, r = run(function(tt)
    return { tt.f(1), tt.s == tt.s2, tt.c.self == tt.c, back = function() return "back" end }
  end, t)
  local _, e = run("m", "echo", t)
  local _, g = run(function() return type(ngx.now) end)
  local squares = pool:co_map(function(x) return x * x + k end, { 1, 2, 3 })
  ngx.say(a, " ", b, " ", r[1], " ", r[2], " ", r[3], " ", r.back(), " ", e.f(2), " ", e.s == e.s2, " ",
    e.c.self == e.c, " ", g, " ", table.concat(squares, ","))
  local conn = coroutine.create(function() end)
  local ok, err = run(function() return conn end)
  ngx.say(ok, " ", err)
end }

CASES.log = { module = "m", child = [[
return { log = function(msg) ngx.log(ngx.WARN, "from a pool state: ", msg, " ", 42, " ", nil) return true end }
]], host = function(run)
  ngx.say(run("m", "log", "hello"))
end }

CASES.print = { module = "m", child = [[
return { print = function() print("printed in a pool state: ", 7, " ", true, " ", nil) return true end }
]], host = function(run)
  ngx.say(run("m", "print"))
end }

CASES.time = { module = "m", child = [[
return {
  now = function() return ngx.now(), ngx.time(), ngx.today(), ngx.worker.pid(), ngx.worker.id() end,
}
]], host = function(run)
  local _, now, time, today, pid, id = run("m", "now")
  ngx.say(math.abs(now - ngx.now()) < 5, " ", math.abs(time - ngx.time()) < 5, " ", today == ngx.today(),
    " ", pid == ngx.worker.pid(), " ", id == ngx.worker.id())
end }

CASES.unavailable = { module = "m", child = [[
return {
  try = function(name) local ok, err = pcall(function() return ngx[name] end) return ok, err end,
  missing = function() return ngx.no_such_field end,
}
]], host = function(run)
  for _, name in ipairs { "say", "var", "req", "sleep", "timer", "socket", "update_time" } do
    local _, ok, err = run("m", "try", name)
    ngx.say(name, " ", ok, " ", err)
  end
  ngx.say("missing ", select(2, run("m", "missing")))
end }

-- every constant of the host's ngx (whatever is a number there) has the host's value in a state
CASES.consts = { module = "m", child = [[
return {
  compare = function(host)
    local n, bad = 0, {}
    for k, v in pairs(host) do
      n = n + 1
      local ok, mine = pcall(function() return ngx[k] end)
      if not ok or mine ~= v then bad[#bad + 1] = k .. "=" .. tostring(mine) end
    end
    table.sort(bad)
    return n, table.concat(bad, " ")
  end,
  some = function()
    return ngx.HTTP_OK, ngx.HTTP_NOT_FOUND, ngx.HTTP_INTERNAL_SERVER_ERROR, ngx.HTTP_GET, ngx.HTTP_POST, ngx.OK,
      ngx.DECLINED, ngx.ERR
  end,
}
]], host = function(run)
  local numbers = {}
  for k, v in pairs(ngx) do
    if type(v) == "number" then numbers[k] = v end
  end
  local _, n, bad = run("m", "compare", numbers)
  ngx.say(n > 60, " [", bad, "]")
  ngx.say(table.concat({ select(2, run("m", "some")) }, " "))
  ngx.say(table.concat({ ngx.HTTP_OK, ngx.HTTP_NOT_FOUND, ngx.HTTP_INTERNAL_SERVER_ERROR, ngx.HTTP_GET, ngx.HTTP_POST,
    ngx.OK, ngx.DECLINED, ngx.ERR }, " "))
end }

-- assigning a name that is not available raises as reading it does; other new fields are stored
CASES.assign = { module = "m", child = [[
return { run = function()
  local out = {}
  local function try(what, f)
    local ok, err = pcall(f)
    out[#out + 1] = what .. " " .. tostring(ok) .. " " .. tostring(err)
  end
  try("status=", function() ngx.status = 201 end)
  try("status", function() return ngx.status end)
  try("header=", function() ngx.header = {} end)
  try("header.x=", function() ngx.header["X-A"] = "1" end)
  try("ctx=", function() ngx.ctx = {} end)
  try("ctx.x=", function() ngx.ctx.x = 1 end)
  try("say=", function() ngx.say = print end)
  try("my_cache=", function() ngx.my_cache = 5 end)
  out[#out + 1] = "my_cache " .. tostring(ngx.my_cache)
  return table.concat(out, "\n")
end }
]], host = function(run)
  local _, text = run("m", "run")
  ngx.say(text)
end }

-- require of lua-resty-core's modules in a state
CASES.modules = { module = "m", child = [[
return {
  blocked = function(names)
    local out = {}
    for _, name in ipairs(names) do
      local ok, err = pcall(require, name)
      local ok2, err2 = pcall(require, name)
      out[#out + 1] = name .. " " .. tostring(ok) .. " " .. tostring(ok2) .. " " .. tostring(err == err2) .. " "
        .. tostring(err)
    end
    return table.concat(out, "\n")
  end,
  kept = function()
    local out = {}
    local function say(...) out[#out + 1] = table.concat({ ... }, " ") end
    local function try(what, f)
      local ok, err = pcall(f)
      say(what, tostring(ok), tostring(err))
    end
    say("base64", require("ngx.base64").encode_base64url("hello?"))
    say("utils", require("resty.core.utils").str_replace_char("a-b", "-", "_"))
    say("core", type(require("resty.core").version), type(ngx.md5))
    local ssl = require "ngx.ssl"
    say("ssl.cert_pem_to_der", tostring(ssl.cert_pem_to_der("not a pem")))
    try("ssl.set_cert", function() return ssl.set_cert(nil) end)
    try("ssl.server_name", function() return ssl.server_name() end)
    local ocsp = require "ngx.ocsp"
    say("ocsp.create_ocsp_request", tostring(ocsp.create_ocsp_request("not der")))
    try("ocsp.set_ocsp_status_resp", function() return ocsp.set_ocsp_status_resp("x") end)
    local errlog = require "ngx.errlog"
    errlog.raw_log(ngx.WARN, "from errlog.raw_log in a pool state")
    say("errlog.get_sys_filter_level", type(errlog.get_sys_filter_level()))
    try("errlog.get_logs", function() return errlog.get_logs(1) end)
    try("errlog.set_filter_level", function() return errlog.set_filter_level(ngx.WARN) end)
    return table.concat(out, "\n")
  end,
}
]], host = function(run)
  local _, text = run("m", "blocked", { "ngx.semaphore", "ngx.pipe", "ngx.process", "ngx.balancer", "ngx.re",
    "ngx.req", "ngx.resp", "ngx.ssl.session", "ngx.ssl.clienthello", "resty.core.regex", "resty.core.request",
    "resty.core.response", "resty.core.var", "resty.core.ctx", "resty.core.exit", "resty.core.misc",
    "resty.core.ndk", "resty.core.param", "resty.core.phase", "resty.core.socket", "resty.core.coroutine" })
  ngx.say(text)
  local _, kept = run("m", "kept")
  ngx.say(kept)
end }

CASES.shared = { module = "m", child = [[
local d = require("vmpool").shared("per-worker")
return { incr = function() return d:incr("n", 1, 0) end }
]], host = function(run)
  local d = vmpool.shared("per-worker")
  d:set("n", 10)
  local _, n = run("m", "incr")
  ngx.say(n, " ", d:get("n"))
end }

-- every method of ngx.shared.DICT from a state, on the zone the host sees
CASES.all_methods = { module = "m", child = [[
return { run = function()
  local dogs = ngx.shared.dogs
  local out = {}
  local function say(...) out[#out + 1] = table.concat({ ... }, ",") end
  say(tostring(dogs:set("a", 1, 0, 7)), tostring(dogs:safe_set("b", "x")), tostring(dogs:add("c", true)),
    tostring(dogs:safe_add("c", false)), tostring(dogs:replace("b", "y")))
  say(dogs:get("a"), select(2, dogs:get("a")), dogs:get("b"), tostring(dogs:get("c")))
  say(dogs:incr("a", 2), dogs:incr("n", 1, 10, 100))
  say(dogs:rpush("l", 1), dogs:rpush("l", 2), dogs:lpush("l", 0), dogs:llen("l"), dogs:lpop("l"), dogs:rpop("l"))
  say(tostring(dogs:expire("b", 100)), tostring(dogs:ttl("b") > 99), dogs:ttl("a"))
  dogs:set("old", "v", 0.001)
  say(dogs:capacity() > 0 and "cap" or "no cap", dogs:free_space() >= 0 and "free" or "no free",
    #dogs:get_keys(0))
  tostring(dogs:delete("c"))
  return table.concat(out, "\n")
end }
]], host = function(run)
  local _, text = run("m", "run")
  ngx.say(text)
  local dogs = ngx.shared.dogs
  ngx.say(dogs:get("a"), " ", dogs:get("b"), " ", tostring(dogs:get("c")), " ", dogs:get("n"), " ",
    dogs:llen("l"), " ", dogs:lpop("l"))
  -- ngx's flush_all frees up to three entries at once and marks the rest expired: with only the
  -- few entries above (how many depends on whether "old" has expired yet) it may free them all and
  -- leave flush_expired nothing, so give it more than it can free at once
  for i = 1, 10 do dogs:set("filler" .. i, i) end
  dogs:flush_all()
  local freed = dogs:flush_expired()
  ngx.say(tostring(dogs:get("b")), " ", #dogs:get_keys(0), " ", freed > 0)
end }

CASES.no_api = { module = "m", pool = "plain", child = [[
return { kind = function() return type(ngx) end }
]], host = function(run)
  ngx.say(select(2, run("m", "kind")))
end }

-- ngx_lua's C functions raising in a state (bad arguments): the call fails with their message,
-- and the same pool serves the next call
CASES.bad_args = { module = "m", child = [[
return {
  encode = function(v) local r = ngx.encode_args(v) return r end,
  lpush = function() local r = ngx.shared.dogs:lpush() return r end,
  quote = function(v) local r = ngx.quote_sql_str(v) return r end,
  hello = function() return "hello" end,
}
]], host = function(run)
  for _, call in ipairs { { "encode", 42 }, { "lpush" }, { "quote", {} } } do
    local ok, err = run("m", call[1], call[2])
    ngx.say(ok, " ", tostring(err):match("^[^\n]*"))
  end
  ngx.say(select(2, run("m", "hello")))
end }

-- a state's memory_limit running out while ngx_lua's functions fill its ngx: every limit from
-- what `require "vmpool"` leaves in a state on, 256 bytes apart, across the set-up's first
-- 128 KiB. Each pool starts, or fails with the limit's message (out of memory in vmpool's or
-- ngx_lua's C code) or with the set-up's (out of memory in its Lua part: a `require`)
CASES.setup_memory = { host = function()
  local probe = vmpool.new { core = 1, max_noncore = 0, ngx_api = false,
    init = 'require("vmpool") BASE = collectgarbage("count")' }
  probe:compile("p", "function base() return BASE end")
  local base = math.floor(probe:co_invoke("p", "base") * 1024)
  probe:close()
  local count, other = { started = 0, limit = 0, lua = 0 }, nil
  for limit = base, base + 131072, 256 do
    local ok, pool = pcall(vmpool.new, { core = 1, max_noncore = 0, memory_limit = limit })
    local err = tostring(pool)
    if ok then
      count.started = count.started + 1
      pool:close()
    elseif err == "vmpool: the init code failed in a new state: it needed more than memory_limit = "
        .. ("%d"):format(limit) .. " bytes (raise memory_limit or make init use less memory)" then
      count.limit = count.limit + 1
    elseif err:find("^vmpool: the init code failed in a new state: vmpool: cannot set up ngx in a pool state: ")
        and err:find("not enough memory", 1, true) then
      count.lua = count.lua + 1
    else
      other = other or err
    end
  end
  ngx.say(count.limit > 0, " ", count.lua > 0, " ", tostring(other))
  ngx.log(ngx.NOTICE, "setup_memory from ", base, ": ", count.limit, " limit, ", count.lua, " lua, ",
    count.started, " started")
end }

-- the rest of t/166-worker-thread.t that vmpool can express (regression tests; vmpool's own
-- messages where the peer has its own)

local HELLO = [[
local function hello()
    return "hello"
end
return {hello=hello}
]]

CASES.t1 = { module = "hello", child = HELLO }

CASES.t3 = { module = "hello", child = [[
local function hello(arg1)
    if arg1.hello == "world" and arg1[1].embed == 1 then
        return true
    end
    return false
end
return {hello=hello}
]], host = function(run)
  local ok, ok_or_err = run("hello", "hello", {["hello"]="world", [1]={["embed"]=1}})
  ngx.say(ok, " , ", ok_or_err)
end }

CASES.t5 = { module = "hello", child = [[
local b='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function enc(data)
    return ((data:gsub('.', function(x)
        local r,b='',x:byte()
        for i=8,1,-1 do r=r..(b%2^i-b%2^(i-1)>0 and '1' or '0') end
        return r;
    end)..'0000'):gsub('%d%d%d?%d?%d?%d?', function(x)
        if (#x < 6) then return '' end
        local c=0
        for i=1,6 do c=c+(x:sub(i,i)=='1' and 2^(6-i) or 0) end
        return b:sub(c+1,c+1)
    end)..({ '', '==', '=' })[#data%3+1])
end
return {enc=enc}
]], host = function(run)
  local ok, base64 = run("hello", "enc", "hello")
  ngx.say(ok, " , ", base64 == "aGVsbG8=")
end }

CASES.t6 = { module = "hello", child = [[
local function hello()
    return {["hello"]="world", [1]={["embed"]=1}}
end
return {hello=hello}
]], host = function(run)
  local ok, ret = run("hello", "hello")
  if ret.hello == "world" and ret[1].embed == 1 then
    ngx.say(ok, " , ", true)
  end
end }

CASES.t7 = { module = "hello", child = HELLO, host = function(run)
  local function dummy() end
  local ok, err = run("hello", "hello", dummy)
  ngx.say(ok, " : ", err)
end }

CASES.t8 = { module = "hello", child = [[
local function hello()
    return "hello", 200
end
return {hello=hello}
]], host = function(run)
  local ok, res1, res2 = run("hello", "hello")
  ngx.say(ok, " : ", res1, " , ", res2)
end }

CASES.t9 = { host = function(run) -- nothing compiled under that name
  local ok, err = run("no such module", "hello")
  ngx.say(ok, " : ", err)
end }

CASES.t11kill = { module = "hello", child = [[
local function hello()
    os.execute("sleep 1")
    return "hello"
end
return {hello=hello}
]], host = function(run)
  local function t()
    local ok, hello_or_err = run("hello", "hello")
    ngx.say(ok, " : ", hello_or_err)
  end
  local t1 = ngx.thread.spawn(t)
  ngx.thread.kill(t1)
  ngx.say("killed")
end }

CASES.t12 = { module = "hello", child = CASES.t11kill.child, host = function(run)
  local function t()
    local ok, hello_or_err = run("hello", "hello")
    ngx.say(ok, " : ", hello_or_err)
  end
  ngx.thread.spawn(t)
  ngx.exit(200)
end }

CASES.t13 = { module = "hello", child = HELLO, host = function(run)
  local function dummy() end
  local ok, err = run("hello", "hello", {["hello"]="world", [1]={["embed"]=1, ["dummy"]=dummy}})
  ngx.say(ok, " : ", err)
end }

CASES.t14 = { module = "hello", child = [[
local function hello()
    local function dummy() end
    return {["hello"]="world", [1]={["embed"]=1, ["dummy"]=dummy}}
end
return {hello=hello}
]], host = function(run)
  local ok, ret = run("hello", "hello")
  if ok == false then
    ngx.say("false", " , ", ret)
  end
end }

CASES.t15 = { module = "hello", child = HELLO, host = function(run)
  local function dummy() end
  local ok, err = run(dummy, "hello")
  ngx.say(ok, " : ", err)
end }

CASES.t16 = { module = "hello", child = HELLO, host = function(run)
  local function dummy() end
  local ok, err = run("hello", dummy)
  ngx.say(ok, " : ", err)
end }

CASES.t48 = { module = "hello", child = [[
local function hello(arg1)
    return true
end
return {hello=hello}
]], host = function(run)
  local t = {}
  t.a = t
  local ok, ok_or_err = run("hello", "hello", t)
  ngx.say(ok, " , ", ok_or_err)
end }

CASES.t49 = { module = "hello", child = CASES.t48.child, host = function(run)
  local t = {}
  local s = {}
  t.a = s
  s.b = t
  local ok, ok_or_err = run("hello", "hello", t)
  ngx.say(ok, " , ", ok_or_err)
end }

CASES.t50 = { module = "hello", child = HELLO, host = function(run)
  local ok, hello_or_err = run("hello", "hello")
  ngx.say(ok, " : ", hello_or_err)
  ok, hello_or_err = run("hello", "hello")
  ngx.say(ok, " : ", hello_or_err)
end }

CASES.t51 = { module = "hello", child = [[
local function hello()
    return string.rep("helloworld", 1000000)
end
local function gcsize()
    return collectgarbage("count")
end
return {
    hello = hello,
    gcsize = gcsize
}
]], host = function(run)
  local ok, hello_or_err = run("hello", "hello")
  ngx.say(ok, " : ", #hello_or_err)
  local ok2, gcsize_or_err = run("hello", "gcsize")
  ngx.say(ok2, " : ", gcsize_or_err)
end }

-- the peer's test cases whose host code is the common one
for _, case in pairs(CASES) do
  case.host = case.host or CASES[18].host
end

local function the_pool(kind)
  return vmpool.ngx.pool(kind, function()
    return vmpool.new { core = 2, max_noncore = 0, ngx_api = kind ~= "plain" }
  end)
end

--- GET /case?n=NAME: runs case NAME (its chunk compiled fresh) with a clean ngx.shared.dogs.
return function()
  local name = ngx.var.arg_n
  local case = CASES[tonumber(name) or name]
  if not case then
    ngx.status = 404
    ngx.say("no case ", name)
    return
  end
  local dogs = ngx.shared.dogs
  dogs:flush_all()
  dogs:flush_expired()
  local pool = the_pool(case.pool or "api")
  if case.module then pool:compile(case.module, case.child) end
  local function run(module, fn, ...)
    return pcall(pool.co_invoke, pool, module, fn, ...)
  end
  case.host(run, pool)
end
