-- `ngx` inside pool states in nginx: lua-nginx-module's t/166-worker-thread.t tests 18-33 and
-- 35-47 ported with the same child code (spec/ngx/state_cases.lua), expecting the peer's response
-- bodies, then what vmpool adds (null values, ngx.log, time and worker data, the errors of what
-- needs a request, vmpool.shared in nginx, ngx_api = false). Run by scripts/test-ngx.sh.
local H = require "spec.ngx.nginx"

local CONF = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log logs/error.log notice;
pid logs/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  lua_shared_dict dogs 6m;
  lua_package_cpath "@CPATH@;;";
  lua_package_path "@SPEC@/?.lua;/usr/share/lua/5.1/?.lua;;";
  server {
    listen 127.0.0.1:@PORT@;
    location = /case { content_by_lua_block { require("state_cases")() } }
  }
}
]]

-- the peer's response bodies (a string: exactly; a table: a pattern the whole body matches)
local EXPECT = {
  [18] = "true : aGVsbG8=\n",
  [19] = "true : http\n",
  [20] = "true : R/pvxzHC4NLtj7S+kXFg/NePTmk=\n",
  [21] = { "^true : foo=3&b%%20r=hello%%20world\n$", "^true : b%%20r=hello%%20world&foo=3\n$" },
  [22] = "true : bar : foo\n",
  [23] = "true : 'a\\Zb\\Z'\n",
  [24] = "true : hello\n",
  [25] = "true : 4289425978\n",
  [26] = "true : 4289425978\n",
  [27] = "true : 6c8349cc7260ae62e3b1396831a8398f\n",
  [28] = "true : 5d41402abc4b2a76b9719d911017c592\n",
  [29] = { "^true : true\n$", "^true : false\n$" },
  [30] = { "^true : /%S+\n$" },
  [31] = { "^true : %d+\n$" },
  [32] = { "^%s*%-%-[^-]+" },
  [33] = { "^true : %d+\n$" },
  [35] = "true,8\n",
  [36] = "true,8\ntrue,nil\n",
  [37] = "true,true\ntrue,nil\n",
  [38] = "true,8\n",
  [39] = "true,false,exists\n",
  [40] = "true,true,true,nil\n",
  [41] = "true,true,nil,8\n",
  [42] = "true,false,not found\n",
  [43] = "true,9,nil,9\n",
  [44] = "true,9,2,nil,7\n",
  [45] = "true,true,nil,true\n",
  [46] = "true,nil,nil\n",
  [47] = "true,Jim:King\n",
}

local function check(name, body, want)
  if type(want) == "string" then
    assert.are.equal(want, body, "case " .. name)
    return
  end
  for _, pattern in ipairs(want) do
    if body:match(pattern) then return end
  end
  error("case " .. name .. ": " .. ("%q"):format(body) .. " matches none of " .. table.concat(want, " | "))
end

describe("ngx in pool states (the peer's t/166-worker-thread.t tests 18-47)", function()
  local nginx, port

  setup(function()
    nginx, port = H.start_conf(CONF)
  end)

  teardown(function()
    if nginx then
      nginx:stop()
      nginx:remove()
    end
  end)

  local function case(name)
    local status, body = H.get(port, "/case?n=" .. name)
    assert.are.equal(200, status, body)
    return body
  end

  for n = 18, 47 do
    if EXPECT[n] then
      it("passes the peer's test " .. n .. " with its child code", function()
        check(n, case(n), EXPECT[n])
      end)
    end
  end

  -- the rest of the peer's file, where vmpool can express it
  local REST = {
    t1 = "true : hello\n",
    t3 = "true , true\n",
    t5 = "true , true\n",
    t6 = "true , true\n",
    -- ngx.run_worker_thread refuses functions; vmpool carries them (7, 13, 14, and 15, where the
    -- function is the callee)
    t7 = "true : hello\n",
    t8 = "true : hello , 200\n",
    t9 = { "^false : vmpool: unknown chunk 'no such module'" },
    t13 = "true : hello\n",
    t15 = "true : nil\n",
    t16 = { "^false : vmpool: bad argument #2 to 'co_invoke'" },
    -- ngx.run_worker_thread refuses cyclic tables; vmpool carries them as cycles
    t48 = "true , true\n",
    t49 = "true , true\n",
    t50 = "true : hello\ntrue : hello\n",
    t51 = { "^true : 10000000\ntrue : %d+%.?%d*\n$" },
  }
  -- (14 answers nothing once its call succeeds: "carries functions ..." below checks its kind of result)
  for _, name in ipairs { "t1", "t3", "t5", "t6", "t7", "t8", "t9", "t13", "t15", "t16", "t48", "t49",
    "t50", "t51" } do
    it("passes the peer's test " .. name:sub(2) .. " (vmpool's messages where they differ)", function()
      check(name, case(name), REST[name])
    end)
  end

  it("keeps working after a light thread waiting for a call is killed (the peer's test 11)", function()
    assert.are.equal("killed\n", case("t11kill"))
    assert.are.equal("true : hello\n", case("t1"))
  end)

  it("keeps working after ngx.exit while a light thread waits for a call (the peer's test 12)", function()
    -- nginx ends that response abruptly (as for the peer: no body); read what it sent
    local c = H.send(port, "/case?n=t12")
    local all, _, partial = c:receive("*a")
    c:close()
    local response = all or partial
    assert.matches("^HTTP/1%.%d 200 ", response)
    assert.matches("\r\n\r\n$", response)
    assert.are.equal("true : hello\n", case("t1"))
  end)

  it("carries functions and closures both ways, as the callee and as values", function()
    local body = case("functions")
    assert.matches("^42 6765 2 true true back 3 true true function 11,14,19\nfalse vmpool: cannot pass the "
      .. "function to call: a thread value at upvalue 'conn' %(only nil", body)
  end)

  it("passes ngx.null and cjson.null both ways as the receiver's ngx.null", function()
    assert.are.equal("true true\ntrue true\n", case("null"))
  end)

  it("logs with ngx.log to the worker's error log, naming the pool state", function()
    assert.are.equal("truetrue\n", case("log"))
    H.wait_until("the log line", 5, function()
      return nginx:log():match("%[warn%][^\n]*%[vmpool state 0x%x+%] from a pool state: hello 42 nil")
    end)
  end)

  it("logs print(...) at the notice level, as ngx_lua's print does", function()
    assert.are.equal("truetrue\n", case("print"))
    H.wait_until("the log line", 5, function()
      return nginx:log():match("%[notice%][^\n]*%[vmpool state 0x%x+%] printed in a pool state: 7 true nil")
    end)
  end)

  it("reads the worker's time and identity", function()
    assert.are.equal("true true true true true\n", case("time"))
  end)

  it("raises a vmpool: error for what needs a request or the event loop", function()
    local body = case("unavailable")
    for _, name in ipairs { "say", "var", "req", "sleep", "timer", "socket", "update_time" } do
      assert.matches(name .. " false vmpool: ngx%." .. name .. " is not available in a pool state %(it needs a "
        .. "request or the nginx event loop", body)
    end
    assert.matches("\nmissing nil\n$", body)
  end)

  it("gives a state every constant of the host's ngx with the host's value (HTTP_*, OK, ...)", function()
    assert.are.equal("true []\n200 404 500 2 8 0 -5 4\n200 404 500 2 8 0 -5 4\n", case("consts"))
  end)

  it("raises the not-available error when a state assigns a name that needs a request", function()
    local body = case("assign")
    for _, name in ipairs { "status=", "status", "header=", "header.x=", "ctx=", "ctx.x=", "say=" } do
      local field = name:match("^%a+")
      assert.matches("\n?" .. name:gsub("%.", "%%.") .. " false vmpool: ngx%." .. field .. " is not available in a "
        .. "pool state %(it needs a request or the nginx event loop; call it in the request", body)
    end
    assert.matches("\nmy_cache= true nil\nmy_cache 5\n$", body)
  end)

  it("raises for require of the lua-resty-core modules that need a request or the event loop", function()
    local body = case("modules")
    for _, name in ipairs { "ngx.semaphore", "ngx.pipe", "ngx.process", "ngx.balancer", "ngx.re", "ngx.req",
      "ngx.resp", "ngx.ssl.session", "ngx.ssl.clienthello", "resty.core.regex", "resty.core.request",
      "resty.core.response", "resty.core.var", "resty.core.ctx", "resty.core.exit", "resty.core.misc",
      "resty.core.ndk", "resty.core.param", "resty.core.phase", "resty.core.socket", "resty.core.coroutine" } do
      local n = name:gsub("%.", "%%.")
      -- each require raises the same error, not "loop or previous error loading module"
      assert.matches("\n?" .. n .. " false false true vmpool: module '" .. n .. "' is not available in a "
        .. "pool state %([^\n]+%)\n", body)
    end
    assert.matches("ngx%.semaphore false false true vmpool: module 'ngx%.semaphore' is not available in a pool "
      .. "state %(its semaphores live in the worker's memory", body)
  end)

  it("keeps the thread-safe, request-free lua-resty-core modules and functions in a state", function()
    local body = case("modules")
    assert.matches("\nbase64 aGVsbG8_\nutils a_b\ncore string function\nssl%.cert_pem_to_der nil\n", body)
    assert.matches("\nssl%.set_cert false vmpool: ngx%.ssl%.set_cert is not available in a pool state %(it works "
      .. "on the SSL connection", body)
    assert.matches("\nssl%.server_name false vmpool: ngx%.ssl%.server_name is not available", body)
    assert.matches("\nocsp%.create_ocsp_request nil\nocsp%.set_ocsp_status_resp false vmpool: "
      .. "ngx%.ocsp%.set_ocsp_status_resp is not available in a pool state %(", body)
    assert.matches("\nerrlog%.get_sys_filter_level number\nerrlog%.get_logs false vmpool: ngx%.errlog%.get_logs "
      .. "is not available in a pool state %(.*\nerrlog%.set_filter_level false vmpool: "
      .. "ngx%.errlog%.set_filter_level is not available", body)
    H.wait_until("the raw_log line", 5, function()
      return nginx:log():match("%[warn%][^\n]*from errlog%.raw_log in a pool state")
    end)
  end)

  it("shares vmpool.shared between the worker and its pool states", function()
    assert.are.equal("11 11\n", case("shared"))
  end)

  it("offers every method of ngx.shared.DICT in a state, on the host's zone", function()
    assert.are.equal("true,true,true,false,true\n1,7,y,true\n3,11\n1,2,3,3,0,2\ntrue,true,0\ncap,free,6\n"
      .. "3 y nil 11 1 1\nnil 0 true\n", case("all_methods"))
  end)

  it("leaves ngx out of pools created with ngx_api = false", function()
    assert.are.equal("nil\n", case("no_api"))
  end)

  it("fails a call whose ngx function raises (a bad argument) with ngx's message, and serves the next",
    function()
    assert.are.equal("false vmpool: error in m:encode: m:2: bad argument #1 to 'encode_args' (table expected, "
      .. "got number)\nfalse vmpool: error in m:lpush: m:3: expecting 3 arguments, but only seen 1\nfalse vmpool: "
      .. "error in m:quote: m:4: bad argument #1 to 'quote_sql_str' (string expected, got table)\nhello\n",
      case("bad_args"))
    assert.are.equal("true : hello\n", case("t1"))
  end)

  it("fails a pool whose memory_limit runs out while its states get their ngx with the limit's error, "
    .. "at every point of the set-up, and serves the next request", function()
    assert.are.equal("true true nil\n", case("setup_memory"))
    assert.are.equal("true : hello\n", case("t1"))
  end)

  it("logs no alert or crash", function()
    assert.are.same({}, nginx:log_lines { "alert", "crit", "emerg" })
    assert.is_nil(nginx:log():find("exited on signal", 1, true))
  end)
end)
