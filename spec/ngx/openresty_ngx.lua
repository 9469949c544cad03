-- vmpool inside nginx (Debian's nginx + libnginx-mod-http-lua), end to end over HTTP. Run by
-- scripts/test-ngx.sh (from scripts/test.sh) with busted on LuaJIT:
--   busted --lua=luajit --pattern=_ngx spec/ngx
-- The server under test is examples/openresty/nginx.conf itself, made runnable from a temporary
-- prefix (free ports, one worker, absolute paths) plus the test endpoints of test_server.conf.
local H = require "spec.ngx.nginx"

local EXAMPLE = H.ROOT .. "/examples/openresty"

-- error.log lines that must never appear
local BAD_LEVELS = { "alert", "crit", "emerg" }

local function example_conf(port, test_port)
  local conf = assert(H.read_file(EXAMPLE .. "/nginx.conf"))
  conf = H.replace_once(conf, "worker_processes 2;", "worker_processes 1;")
  conf = H.replace_once(conf, '"${prefix}?.lua;', '"' .. EXAMPLE .. "/?.lua;" .. H.ROOT .. "/spec/ngx/?.lua;")
  -- the test server goes at the end of the http block: before the file's last closing brace
  local last = conf:match(".*()}")
  conf = conf:sub(1, last - 1) .. "  include test_server.conf;\n" .. conf:sub(last)
  local test = assert(H.read_file(H.ROOT .. "/spec/ngx/test_server.conf")):gsub("@PORT@", test_port)
  -- what the example's run.sh writes: where the rock is, and the port
  return conf, {
    ["test_server.conf"] = test,
    ["lua_cpath.conf"] = 'lua_package_cpath "' .. H.ROCK_CPATH .. ';;";\n',
    ["listen.conf"] = "listen 127.0.0.1:" .. port .. ";\n",
  }
end

local start = H.start

local function assert_clean_log(nginx)
  local bad = nginx:log_lines(BAD_LEVELS)
  assert.are.same({}, bad)
  assert.is_nil(nginx:log():find("exited on signal", 1, true))
end

describe("vmpool in OpenResty (examples/openresty/nginx.conf)", function()
  local nginx, port, tport

  local function stats()
    local status, body = H.get(tport, "/stats")
    assert.are.equal(200, status)
    return H.parse_kv(body)
  end

  setup(function()
    nginx, port, tport = start(example_conf)
  end)

  teardown(function()
    if nginx then
      nginx:stop()
      nginx:remove()
    end
  end)

  it("yields a request waiting on channels, select and a stream, and the waits meet", function()
    for id = 1, 3 do
      local status, body = H.get(tport, "/chan?n=100&id=" .. id)
      assert.are.equal(200, status, body)
      assert.are.equal("5050 10100 b:hi timeout 5050\n", body)
    end
    assert_clean_log(nginx)
  end)

  it("in a request, closing wakes waiters on both sides, and timeouts, select, functions and streams behave", function()
    for id = 1, 2 do
      local status, body = H.get(tport, "/chan_edges?id=" .. id)
      assert.are.equal(200, status, body)
      assert.are.equal(
        "timeout nil closed nil closed 0 closed timeout 21 3 false stream failed at 3 1 free free\n", body)
    end
    assert_clean_log(nginx)
  end)

  it("serves the example's results and errors over HTTP", function()
    local status, body = H.get(port, "/hello?name=you")
    assert.are.equal(200, status)
    assert.are.equal("hello, you\n", body)

    status, body = H.get(port, "/fib?n=20")
    assert.are.equal(200, status)
    assert.are.equal("6765\n", body)

    status, body = H.get(port, "/fanout?n=3")
    assert.are.equal(200, status)
    assert.are.equal("10946\n17711\n28657\n", body)

    status, body = H.get(port, "/fail")
    assert.are.equal(500, status)
    assert.matches("^vmpool: error in app:fail: ", body)
    assert.truthy(body:find("something went wrong", 1, true))

    -- init_worker_by_lua cannot yield: co_invoke ran there as a plain, blocking invoke
    status, body = H.get(tport, "/warmup")
    assert.are.equal(200, status)
    assert.are.equal("hello, init_worker\n", body)
  end)

  it("yields the request in the rewrite, access and content phases and in ngx.timer", function()
    assert.are.equal("rewrite\n", select(2, H.get(tport, "/rewrite")))
    assert.are.equal("access\n", select(2, H.get(tport, "/access")))
    assert.are.equal("content\n", select(2, H.get(tport, "/echo?x=content")))

    assert.are.equal("started\n", select(2, H.get(tport, "/timer?key=t1")))
    local result = H.wait_until("the timer's calls", 5, function()
      local r = select(2, H.get(tport, "/dict?key=t1"))
      return r ~= "nil\n" and r, r
    end)
    assert.are.equal("0.05 timer\n", result)
    local s = stats()
    assert.are.equal("running", s["ngx.light_thread"])
    assert.are.equal(0, s["ngx.waiting"])
  end)

  it("gives vmpool.ngx.stats() the keys every adapter's stats() has, each a number", function()
    local s = stats()
    for _, key in ipairs(require "spec.support.adapter_stats") do
      assert.is_truthy(tonumber(s["ngx." .. key]), key)
    end
  end)

  it("raises a vmpool: error for a channel wait where nginx cannot yield, where try forms work", function()
    local body = select(2, H.get(tport, "/phase/set_chan"))
    local pop, sel, push, got, empty = body:match("^(.-) | (.-) | (.-) | (.-) | (.-)\n$")
    assert.matches("^vmpool: channel:pop cannot wait in nginx's set phase, which cannot yield", pop)
    assert.matches("^vmpool: vmpool.select cannot wait in nginx's set phase, which cannot yield", sel)
    assert.are.same({ "true/nil", "1/nil", "nil/timeout" }, { push, got, empty })
  end)

  it("raises a vmpool: error in the phases that cannot yield", function()
    local expected = "^vmpool: pool:co_invoke cannot wait in nginx's (%S+) phase, which cannot yield"
    local body = select(2, H.get(tport, "/phase/set"))
    assert.are.equal("set", body:match(expected))

    local _, _, headers = H.get(tport, "/phase/header_filter")
    assert.are.equal("header_filter", (headers["x-err"] or ""):match(expected))

    body = select(2, H.get(tport, "/phase/body_filter"))
    assert.are.equal("body_filter", body:match("body\n(.*)"):match(expected))

    assert.are.equal(200, (H.get(tport, "/phase/log")))
    local logged = H.wait_until("the log phase's result", 5, function()
      local r = select(2, H.get(tport, "/dict?key=log"))
      return r ~= "nil\n" and r, r
    end)
    assert.are.equal("log", logged:match(expected))
  end)

  it("answers bad input with vmpool: errors and keeps working", function()
    local status, body = H.get(tport, "/bad")
    assert.are.equal(200, status)
    local lines = H.lines(body)
    assert.are.equal(7, #lines, body)
    for i = 1, 6 do
      assert.matches("^" .. i .. " vmpool: ", lines[i])
    end
    assert.matches("unknown chunk 'no such chunk'", lines[1])
    assert.matches("no function 'no_such_function'", lines[2])
    assert.matches("cannot", lines[3])
    assert.matches("cannot", lines[4])
    assert.matches("expected a future", lines[6])
    assert.are.equal("after still works", lines[7])
  end)

  it("passes co_invoke's scalar arguments and results through LuaJIT's FFI unchanged, the rest as before", function()
    local status, body = H.get(tport, "/ffi")
    assert.are.equal(200, status, body)
    local lines = H.lines(body)
    assert.are.same({
      "0",
      "1 nil",
      "2 false true",
      "3 1.5 -0.25 1e+300",
      "3 [] [a<0>b] nil",
      "3 [ab] [100000 bytes yyy] [cd]",
      "2 5 [23]",
      "4 1 2 3 4",
      "1 table 7",
      "1 userdata",
    }, { unpack(lines, 1, 10) })
    assert.matches("^2 false %[vmpool: .*three", lines[11])
    assert.matches("^2 false %[vmpool: .*no such chunk", lines[12])
    -- the six calls of scalars went through the FFI both ways; fail_at's only there (its error
    -- is raised by the C function), the function's results only back, and the rest not at all
    assert.are.equal("ffi 7 7", lines[13], body)
    -- every call filed (all but the unknown chunk's) went to the pool through the flusher, which
    -- counts what vmpool_ngx_flush returns
    assert.are.equal("batched 11", lines[14], body)
    assert_clean_log(nginx)
  end)

  it("runs vmpool.run's coroutines under its own driver inside a request, before and after a failed run", function()
    local status, body = H.get(tport, "/run")
    assert.are.equal(200, status, body)
    local lines = H.lines(body)
    -- no adapter wait: vmpool.run's driver waited for both calls
    assert.are.equal("one two 0", lines[1], body)
    assert.matches("^vmpool: a coroutine in vmpool.run failed: .*boom", lines[2])
    -- the request's own call after the failed run yields through the adapter: one wait
    assert.are.equal("after 1", lines[3], body)
    assert_clean_log(nginx)
  end)

  it("delivers a pool's refusal of a call to the request that made it", function()
    local status, body = H.get(tport, "/exhausted")
    assert.are.equal(200, status)
    local ok, refused = 0, 0
    for line in body:gmatch("[^\n]+") do
      if line == "ok 0.05" then
        ok = ok + 1
      elseif line:match("^vmpool: pool exhausted: all 1 states are busy and blocking = false") then
        refused = refused + 1
      end
    end
    assert.are.same({ 1, 1 }, { ok, refused }, body)
  end)

  it("keeps the event loop free while a call spins on every state", function()
    -- both states of the test pool spin for 300 ms; the worker must still answer at once
    local spinners = { H.send(tport, "/spin?s=0.3"), H.send(tport, "/spin?s=0.3") }
    H.wait_until("both states to be busy", 5, function()
      local busy = stats()["pool.busy"]
      return busy == 2, busy
    end)
    local status, body, _, took = H.get(tport, "/ping")
    assert.are.equal(200, status)
    assert.are.equal("pong\n", body)
    local still_busy = stats()["pool.busy"]
    for _, c in ipairs(spinners) do
      local s, b = H.read_response(c)
      assert.are.equal(200, s)
      assert.are.equal("0.3\n", b)
    end
    assert.are.equal(2, still_busy, "the spins ended before /ping was measured")
    assert.is_true(took < 0.05, ("/ping took %.1f ms while the states spun"):format(took * 1000))
  end)

  it("maps a list with pool:co_map, the request yielding while the batches run", function()
    local status, body = H.get(tport, "/map?n=5000")
    assert.are.equal(200, status)
    assert.are.equal("5000 12502500\n", body)
    status, body = H.get(tport, "/map?n=10&fail=1")
    assert.are.equal(200, status)
    assert.matches("^vmpool: map item 3 of 't:fail_at' failed: t:%d+: three", body)
    local s = stats()
    assert.are.equal(0, s["ngx.waiting"])
    assert.are.equal("after\n", select(2, H.get(tport, "/echo?x=after")))
  end)

  it("runs pool threads 10 steps nicer than the worker, in its scheduling class, by default", function()
    local status, body = H.get(tport, "/nice")
    assert.are.equal(200, status)
    local worker, state, worker_policy, state_policy =
      body:match("^worker=(%-?%d+) state=(%-?%d+) worker_policy=(%d+) state_policy=(%d+)")
    assert.are.equal(math.min(tonumber(worker) + 10, 19), tonumber(state), body)
    assert.are.equal(worker_policy, state_policy, body)
  end)

  it("gives up on a wait that times out and drops its late completion", function()
    local before = stats()
    local status, body = H.get(tport, "/short_wait?s=0.4")
    assert.are.equal(504, status)
    assert.matches("^vmpool: gave up after 0.1s waiting for the call to finish", body)
    H.wait_until("the late completion to be dropped", 5, function()
      local s = stats()
      return s["ngx.dropped"] == before["ngx.dropped"] + 1 and s["pool.busy"] == 0, s["ngx.dropped"]
    end)
    local s = stats()
    assert.are.equal(before["ngx.timeouts"] + 1, s["ngx.timeouts"])
    assert.are.equal(0, s["ngx.waiting"])
    assert.are.equal("after\n", select(2, H.get(tport, "/echo?x=after")))
  end)

  it("drops the completion of a request whose client went away", function()
    local before = stats()
    local c = H.send(tport, "/sleep?s=0.3")
    H.wait_until("the request to wait for its call", 5, function()
      local waiting = stats()["ngx.waiting"]
      return waiting == 1, waiting
    end)
    c:close() -- lua_check_client_abort on: nginx ends the request, its coroutine never resumes
    H.wait_until("the orphaned completion to be dropped", 5, function()
      local s = stats()
      return s["ngx.dropped"] == before["ngx.dropped"] + 1 and s["ngx.waiting"] == 0, s["ngx.dropped"]
    end)
    assert.are.equal("after_abort\n", select(2, H.get(tport, "/echo?x=after_abort")))
    assert.are.same({}, nginx:log_lines { "error" })
  end)

  it("reloads under load without losing a request", function()
    -- wrk with one connection per request: a kept-alive connection that the old worker closes
    -- while wrk sends on it would count as an error that is no fault of the server's
    local cmd = ("wrk -t1 -c12 -d4s --timeout 10s -H 'Connection: close' 'http://127.0.0.1:%d/work?ms=20' 2>&1")
      :format(tport)
    local wrk = assert(io.popen(cmd))
    local ok, err = pcall(function()
      H.wait_until("load to reach the worker", 5, function()
        local s = stats()
        return s["ngx.waits"] >= 20, s["ngx.waits"]
      end)
      nginx:reload()
      nginx:reload()
    end)
    local out = wrk:read("*a")
    wrk:close()
    assert(ok, err)
    local requests = tonumber(out:match("(%d+) requests in"))
    assert.is_truthy(requests, out)
    assert.is_true(requests > 100, out)
    assert.is_nil(out:find("Socket errors", 1, true), out)
    assert.is_nil(out:find("Non-2xx", 1, true), out)
    -- the old workers had requests waiting when they were told to exit, and finished them
    assert.matches("vmpool: worker exiting, finishing %d+ waiting request", nginx:log())
    assert_clean_log(nginx)
    assert.are.same({}, nginx:log_lines { "error" })
  end)

  it("quits gracefully, finishing a waiting request, closing its sockets and socket directory", function()
    assert.are.equal("hello, quit\n", select(2, H.get(port, "/hello?name=quit")))
    local workers = nginx:worker_pids()
    assert.is_true(#workers > 0)
    local waiting = H.send(tport, "/sleep?s=0.5")
    H.wait_until("the request to wait for its call", 5, function()
      local n = stats()["ngx.waiting"]
      return n == 1, n
    end)
    local log_before = #nginx:log()
    assert.is_true(nginx:stop(), "nginx did not quit gracefully in time")
    -- the response was sent before the worker exited; it waits in our socket's buffer
    local status, body = H.read_response(waiting)
    assert.are.equal(200, status)
    assert.are.equal("0.5\n", body)
    assert.matches("vmpool: worker exiting, finishing 1 waiting request%(s%) first", nginx:log():sub(log_before + 1))
    assert_clean_log(nginx)
    assert.is_nil(nginx:log():find("open socket", 1, true))
    for _, pid in ipairs(workers) do
      local _, leftovers = H.sh("for d in /tmp/vmpool-" .. pid .. "-*; do [ -e \"$d\" ] && echo \"$d\"; done; true")
      assert.are.equal("", leftovers)
    end
  end)
end)

describe("a pool created in nginx's master (init_by_lua)", function()
  local nginx, tport

  local CONF = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log logs/error.log notice;
pid logs/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  lua_package_cpath "@CPATH@;;";
  lua_package_path "/usr/share/lua/5.1/?.lua;;";
  init_by_lua_block {
    local vmpool = require "vmpool"
    -- the mistake under test: the master's threads do not survive the fork into the workers
    master_pool = vmpool.new { core = 1 }
    master_pool:compile("c", "function f() return 42 end")
    -- init_by_lua cannot yield: co_invoke blocks there, in the master, where it works
    in_master = master_pool:co_invoke("c", "f")
    local ok, err = pcall(vmpool.ngx.pool, "p", function() return vmpool.new { core = 1 } end)
    ngx_pool_in_master = ok and "no error" or err
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /in_master { content_by_lua_block { ngx.say(in_master) } }
    location = /socket_dir {
      content_by_lua_block {
        local vmpool = require "vmpool"
        local pool = vmpool.ngx.pool("p", function()
          local p = vmpool.new { core = 1 }
          p:compile("c", "function f() return 7 end")
          return p
        end)
        vmpool.ngx.configure { socket_dir = "/nonexistent/vmpool" }
        local ok, err = pcall(pool.co_invoke, pool, "c", "f")
        ngx.say(ok and "no error" or err)
        vmpool.ngx.configure { socket_dir = "/tmp" }
        ngx.say(pool:co_invoke("c", "f"))
      }
    }
    location = /ngx_pool { content_by_lua_block { ngx.say(ngx_pool_in_master) } }
    location = /co_invoke {
      content_by_lua_block {
        local ok, err = pcall(master_pool.co_invoke, master_pool, "c", "f")
        ngx.say(ok and "no error" or err)
      }
    }
    location = /invoke {
      content_by_lua_block {
        local ok, err = pcall(master_pool.invoke, master_pool, "c", "f")
        ngx.say(ok and "no error" or err)
      }
    }
  }
}
]]

  setup(function()
    nginx, tport = H.start_conf(CONF)
  end)

  teardown(function()
    if nginx then
      nginx:stop()
      nginx:remove()
    end
  end)

  it("says when the light thread cannot make its socket, and recovers once it can", function()
    -- nothing in this instance has waited yet: the light thread starts on this request
    local status, body = H.get(tport, "/socket_dir")
    assert.are.equal(200, status)
    local first, second = body:match("^([^\n]*)\n([^\n]*)\n$")
    assert.matches("^vmpool: cannot create the doorbell socket in '/nonexistent/vmpool': ", first)
    assert.matches("set vmpool.ngx.configure{socket_dir = ...}", first, 1, true)
    assert.are.equal("7", second)
  end)

  it("works in the master and fails at once in a worker with the fork error", function()
    assert.are.equal("42\n", select(2, H.get(tport, "/in_master")))
    for _, path in ipairs { "/co_invoke", "/invoke" } do
      local status, body, _, took = H.get(tport, path, 5)
      assert.are.equal(200, status)
      assert.matches("^vmpool: pool was created in another process %(pid %d+%); create pools in the "
        .. "process that uses them %(in OpenResty: in init_worker_by_lua or lazily", body)
      assert.is_true(took < 1, path .. " took " .. took .. " s")
    end
  end)

  it("refuses vmpool.ngx.pool in init_by_lua", function()
    local body = select(2, H.get(tport, "/ngx_pool"))
    assert.matches("^vmpool: vmpool.ngx.pool makes a pool for one nginx worker; call it in init_worker_by_lua", body)
  end)

  it("stops cleanly", function()
    assert.is_true(nginx:stop())
    assert_clean_log(nginx)
  end)
end)
