-- A worker's exit with calls in flight (`nginx -s stop`, `-s quit`, a reload with
-- worker_shutdown_timeout): the pools' close never holds the worker, so the master never kills it
-- and error.log stays free of alerts. Run by scripts/test-ngx.sh with busted on LuaJIT.
local H = require "spec.ngx.nginx"

local CONF = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log logs/error.log notice;
pid logs/nginx.pid;
@SHUTDOWN@
events { worker_connections 256; }
http {
  access_log off;
  lua_package_cpath "@CPATH@;;";
  lua_package_path "/usr/share/lua/5.1/?.lua;;";
  init_worker_by_lua_block {
    local vmpool = require "vmpool"
    -- Lua code the hook can stop (a pool with a time_limit), queueing past its two states
    vmpool.ngx.pool("spin", function()
      local p = vmpool.new { core = 2, time_limit = math.huge }
      p:compile("s", "function spin() while true do end end")
      return p
    end)
    -- calls inside a C function, which nothing can stop
    vmpool.ngx.pool("c", function()
      local p = vmpool.new { core = 4, max_noncore = 28 }
      p:compile("c", [=[
        local ffi = require "ffi"
        ffi.cdef "int poll(void *fds, unsigned long nfds, int timeout);"
        function csleep(ms) ffi.C.poll(nil, 0, ms) return ms end
      ]=])
      return p
    end)
    -- a state whose init is still running when the worker exits, and then sets up ngx (again)
    vmpool.ngx.pool("late", function()
      local p = vmpool.new { core = 0, max_noncore = 1, init = [=[
        local ffi = require "ffi"
        ffi.cdef "int poll(void *fds, unsigned long nfds, int timeout);"
        ffi.C.poll(nil, 0, 300)
        require("vmpool")._ngx_state()
      ]=] }
      p:compile("l", "function f() return 'late' end")
      return p
    end)
  }
  @EXIT@
  server {
    listen 127.0.0.1:@PORT@;
    location = /spin {
      content_by_lua_block {
        local pool = require("vmpool").ngx.pool("spin")
        ngx.say(pool:co_invoke("s", "spin"))
      }
    }
    location = /csleep {
      content_by_lua_block {
        local pool = require("vmpool").ngx.pool("c")
        ngx.say(pool:co_invoke("c", "csleep", tonumber(ngx.var.arg_ms)))
      }
    }
    location = /late {
      content_by_lua_block {
        local pool = require("vmpool").ngx.pool("late")
        ngx.say(pool:co_invoke("l", "f"))
      }
    }
    location = /waiting { content_by_lua_block { ngx.say(require("vmpool").ngx.stats().waiting) } }
    location = /hello { content_by_lua_block { ngx.say("hello") } }
  }
}
]]

local EXIT_WORKER = 'exit_worker_by_lua_block { require("vmpool").ngx.exit_worker() }'

local function start(shutdown, exit_worker)
  local conf = CONF:gsub("@SHUTDOWN@", shutdown or ""):gsub("@EXIT@", exit_worker and EXIT_WORKER or "")
  return H.start_conf(conf)
end

-- Sends `n` requests for `path` and waits until the worker has all of them waiting for a call.
local function in_flight(port, requests)
  local sockets = {}
  for _, r in ipairs(requests) do
    for _ = 1, r[2] do
      sockets[#sockets + 1] = H.send(port, r[1], 15)
    end
  end
  H.wait_until("the requests to wait for their calls", 10, function()
    local _, body = H.get(port, "/waiting")
    local n = tonumber(body)
    return n == #sockets, n
  end)
  return sockets
end

-- Waits at most `bound` seconds after `t0` for every pid in `pids` to be gone.
local function gone_within(what, pids, t0, bound)
  H.wait_until(what, bound - (H.now() - t0), function()
    for _, pid in ipairs(pids) do
      if H.alive(pid) then
        return false, "worker " .. pid .. " still running"
      end
    end
    return true
  end, 0.005)
end

local function assert_clean_log(nginx)
  assert.are.same({}, nginx:log_lines { "alert", "crit", "emerg" })
  assert.is_nil(nginx:log():find("exited on signal", 1, true), nginx:log())
end

describe("an nginx worker exiting with calls in flight", function()
  local nginx
  after_each(function()
    if nginx then
      nginx:stop(5)
      nginx:remove()
      nginx = nil
    end
  end)

  for _, exit_worker in ipairs { false, true } do
    local how = exit_worker and "vmpool.ngx.exit_worker() in exit_worker_by_lua" or "the pools' finalizers only"
    it("exits at once on nginx -s stop, with " .. how .. ": no alert, no signal 9", function()
      local port
      nginx, port = start(nil, exit_worker)
      local sockets = in_flight(port, { { "/spin", 10 }, { "/csleep?ms=6000", 20 } })
      local workers, master = nginx:worker_pids(), nginx:master_pid()
      local t0 = H.now()
      assert(H.sh(nginx:cmd("-s stop")))
      gone_within("the worker to exit on -s stop", workers, t0, 0.5)
      H.wait_until("the master to exit", 5, function() return not H.alive(master) end)
      for _, c in ipairs(sockets) do
        c:close()
      end
      assert_clean_log(nginx)
    end)
  end

  -- nginx points ngx_cycle at an empty exit cycle before the pools' finalizers run; a state
  -- setting up ngx then must get an error, not read the configuration through it (SIGSEGV)
  it("exits cleanly on nginx -s stop while a state being created sets up ngx", function()
    local port
    nginx, port = start(nil, false)
    local sockets = in_flight(port, { { "/late", 1 } })
    local workers, master = nginx:worker_pids(), nginx:master_pid()
    local t0 = H.now()
    assert(H.sh(nginx:cmd("-s stop")))
    -- close waits up to CREATE_GRACE (1 s) for states being created
    gone_within("the worker to exit on -s stop", workers, t0, 1.5)
    H.wait_until("the master to exit", 5, function() return not H.alive(master) end)
    sockets[1]:close()
    assert_clean_log(nginx)
  end)

  it("finishes the waiting requests on nginx -s quit, then exits", function()
    local port
    nginx, port = start(nil, true)
    local sockets = in_flight(port, { { "/csleep?ms=1000", 20 } })
    local workers = nginx:worker_pids()
    local t0 = H.now()
    assert(H.sh(nginx:cmd("-s quit")))
    for _, c in ipairs(sockets) do
      local status, body = H.read_response(c)
      assert.are.equal(200, status)
      assert.are.equal("1000\n", body)
    end
    -- the calls end about 1 s after they started; the worker exits right after its last response
    gone_within("the worker to exit on -s quit", workers, t0, 1.5)
    assert_clean_log(nginx)
  end)

  it("leaves a reload's old worker within worker_shutdown_timeout + 0.5 s", function()
    local port
    nginx, port = start("worker_shutdown_timeout 1s;", true)
    local sockets = in_flight(port, { { "/spin", 10 }, { "/csleep?ms=6000", 20 } })
    local old = nginx:worker_pids()
    local t0 = H.now()
    assert(H.sh(nginx:cmd("-s reload")))
    gone_within("the old worker to exit after a reload", old, t0, 1.5)
    -- the requests the old worker was told to drop got no answer; none got half of one
    for _, c in ipairs(sockets) do
      local status = H.read_response(c)
      assert.is_nil(status)
    end
    H.wait_until("a new worker", 5, function() return #nginx:worker_pids() > 0 end)
    assert.are.equal("hello\n", select(2, H.get(port, "/hello")))
    assert_clean_log(nginx)
  end)
end)
