-- Runs Debian's nginx for the integration suite: each instance gets its own prefix (a temporary
-- directory under $VMPOOL_NGX_TMP, which scripts/test-ngx.sh removes, killing any nginx whose pid
-- file is still there), listens on 127.0.0.1 on free ports, and is stopped by the spec's teardown.
-- Every wait polls a condition with a deadline; nothing sleeps for "probably long enough".
local socket = require "socket"

local H = {}

H.ROOT = os.getenv("VMPOOL_ROOT") or assert(io.popen("pwd")):read("*l")
H.NGINX = os.getenv("NGINX") or "nginx"
local TMP = os.getenv("VMPOOL_NGX_TMP") or "/tmp"

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
H.quote = shell_quote

--- Runs a shell command; returns ok, its output (stdout and stderr).
function H.sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo \"rc=$?\""))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)%s*$"))
  return rc == 0, (out:gsub("rc=%d+%s*$", ""))
end

function H.now()
  return socket.gettime()
end

--- Polls fn() every `step` seconds until it returns a true value (returned) or `timeout` passes
--- (raises "timed out after Ns waiting for <what>", with fn's last second result if any).
function H.wait_until(what, timeout, fn, step)
  local deadline = H.now() + timeout
  local last
  while true do
    local v, info = fn()
    if v then
      return v
    end
    last = info
    if H.now() > deadline then
      error(("timed out after %gs waiting for %s%s"):format(timeout, what,
        last and (" (last: " .. tostring(last) .. ")") or ""), 2)
    end
    socket.sleep(step or 0.01)
  end
end

function H.read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("*a")
  f:close()
  return s
end

--- The non-empty lines of `text`, in order.
function H.lines(text)
  local lines = {}
  for line in text:gmatch("[^\n]+") do
    lines[#lines + 1] = line
  end
  return lines
end

function H.write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

function H.free_port()
  local s = assert(socket.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  s:close()
  return tonumber(port)
end

--- Replaces `old` (plain text) by `new` in `text`, exactly once: a template that no longer contains
--- what the suite expects must fail loudly rather than be tested half-changed.
function H.replace_once(text, old, new)
  local i, j = text:find(old, 1, true)
  assert(i, "the template no longer contains: " .. old)
  assert(not text:find(old, j + 1, true), "the template contains this more than once: " .. old)
  return text:sub(1, i - 1) .. new .. text:sub(j + 1)
end

--- Whether process `pid` exists (and is not a zombie).
function H.alive(pid)
  local stat = H.read_file("/proc/" .. pid .. "/stat")
  return stat ~= nil and not stat:match("^%d+ %b() Z")
end

-- HTTP ----------------------------------------------------------------------------------------

--- Sends a GET (HTTP/1.0: the body ends when the server closes) on a new connection; returns the
--- socket, to be read by H.read_response.
function H.send(port, path, timeout)
  local c = assert(socket.tcp())
  c:settimeout(timeout or 10)
  assert(c:connect("127.0.0.1", port))
  assert(c:send("GET " .. path .. " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"))
  return c
end

--- Reads a whole response; returns status (number), body, headers (lower-case names); or nil, err.
function H.read_response(c)
  local line, err = c:receive("*l")
  if not line then
    c:close()
    return nil, "no status line: " .. tostring(err)
  end
  local status = tonumber(line:match("^HTTP/%d%.%d (%d%d%d)"))
  local headers = {}
  while true do
    local h, herr = c:receive("*l")
    if not h then
      c:close()
      return nil, "headers: " .. tostring(herr)
    end
    if h == "" then
      break
    end
    local k, v = h:match("^([^:]+):%s*(.*)$")
    if k then
      headers[k:lower()] = v
    end
  end
  local body, berr, partial = c:receive("*a")
  c:close()
  if not body then
    return nil, "body: " .. tostring(berr) .. " after " .. tostring(partial)
  end
  return status, body, headers
end

--- GET on 127.0.0.1:port; returns status, body, headers, seconds taken.
function H.get(port, path, timeout)
  local t0 = H.now()
  local status, body, headers = H.read_response(H.send(port, path, timeout))
  assert(status, body)
  return status, body, headers, H.now() - t0
end

--- Parses "key value" or "key=value" lines into a table (numbers converted).
function H.parse_kv(body)
  local t = {}
  for k, v in body:gmatch("([%w_%.]+)[ =]([^\n]*)") do
    t[k] = tonumber(v) or v
  end
  return t
end

-- nginx instances --------------------------------------------------------------------------------

--- Whether something accepts connections on 127.0.0.1:`port` right now.
function H.accepts(port)
  local c = socket.tcp()
  c:settimeout(0.5)
  local connected = c:connect("127.0.0.1", port)
  c:close()
  return connected ~= nil
end

local Nginx = {}
Nginx.__index = Nginx

--- A new instance whose conf/nginx.conf is `conf` (with every "@PREFIX@" replaced by the prefix).
--- `files` maps more file names (relative to conf/) to their text.
function H.new(conf, files)
  local ok, dir = H.sh("mktemp -d " .. shell_quote(TMP .. "/ngx.XXXXXX"))
  assert(ok, dir)
  dir = dir:gsub("%s+$", "")
  assert(H.sh("mkdir -p " .. shell_quote(dir .. "/conf") .. " " .. shell_quote(dir .. "/logs")))
  -- the workers run as nobody when the suite runs as root: they read the Lua files, nothing here
  H.sh("chmod 755 " .. shell_quote(dir))
  local self = setmetatable({ prefix = dir, pid_file = dir .. "/logs/nginx.pid" }, Nginx)
  H.write_file(dir .. "/conf/nginx.conf", (conf:gsub("@PREFIX@", dir)))
  for name, text in pairs(files or {}) do
    H.write_file(dir .. "/conf/" .. name, (text:gsub("@PREFIX@", dir)))
  end
  return self
end

function Nginx:cmd(args)
  return H.NGINX .. " -p " .. shell_quote(self.prefix .. "/") .. " -c conf/nginx.conf " .. (args or "")
end

function Nginx:log()
  return H.read_file(self.prefix .. "/logs/error.log") or ""
end

function Nginx:master_pid()
  local s = H.read_file(self.pid_file)
  return s and tonumber(s:match("%d+"))
end

--- The pids of the master's children (its workers, including old ones still shutting down).
function Nginx:worker_pids()
  local pids = {}
  local master = self:master_pid()
  if master then
    local _, out = H.sh("pgrep -P " .. master)
    for pid in out:gmatch("%d+") do
      if H.alive(pid) then
        pids[#pids + 1] = tonumber(pid)
      end
    end
  end
  table.sort(pids)
  return pids
end

--- Starts nginx (daemonized, with its pid file in the prefix) and waits until `port` accepts.
function Nginx:start(port)
  local ok, out = H.sh(self:cmd())
  if not ok then
    error("nginx did not start: " .. out .. "\n" .. self:log(), 2)
  end
  local up, err = pcall(H.wait_until, "nginx to accept connections on port " .. port, 10, function()
    if not self:master_pid() then
      return false, "no pid file yet"
    end
    return H.accepts(port) and #self:worker_pids() > 0, "port closed"
  end)
  if not up then
    self:stop()
    error(tostring(err) .. "\n" .. self:log(), 2)
  end
end

function Nginx:signal(sig)
  local pid = self:master_pid()
  assert(pid, "nginx is not running")
  assert(H.sh("kill -" .. sig .. " " .. pid))
end

--- `nginx -s reload`: waits until every old worker has exited and new ones run.
function Nginx:reload(timeout)
  local old = self:worker_pids()
  local ok, out = H.sh(self:cmd("-s reload"))
  assert(ok, out)
  H.wait_until("the old workers to exit after a reload", timeout or 15, function()
    for _, pid in ipairs(old) do
      if H.alive(pid) then
        return false, "worker " .. pid .. " still running"
      end
    end
    return #self:worker_pids() > 0, "no new worker"
  end)
  return old
end

--- `nginx -s quit` (graceful), then waits for the master to exit; escalates to TERM and KILL if it
--- does not within `timeout`. Returns true if the graceful stop sufficed. Idempotent.
function Nginx:stop(timeout)
  local pid = self:master_pid()
  if not pid or not H.alive(pid) then
    return true
  end
  H.sh(self:cmd("-s quit"))
  local graceful = pcall(H.wait_until, "nginx to quit", timeout or 15, function()
    return not H.alive(pid)
  end)
  if not graceful then
    for _, sig in ipairs { "TERM", "KILL" } do
      H.sh("kill -" .. sig .. " " .. pid)
      for _, w in ipairs(self:worker_pids()) do
        H.sh("kill -" .. sig .. " " .. w)
      end
      if pcall(H.wait_until, "nginx to die", 5, function() return not H.alive(pid) end) then
        break
      end
    end
  end
  return graceful
end

--- Starts an instance from make_conf(port, port2) -> conf, files (two free ports; it waits until
--- the second accepts), retrying with other ports if one was taken between choosing it and nginx
--- binding it. Returns the instance, port and port2.
function H.start(make_conf)
  for attempt = 1, 3 do
    local port, port2 = H.free_port(), H.free_port()
    local conf, files = make_conf(port, port2)
    local nginx = H.new(conf, files)
    local ok, err = pcall(nginx.start, nginx, port2)
    if ok then
      return nginx, port, port2
    end
    nginx:stop()
    nginx:remove()
    if attempt == 3 or not tostring(err):find("Address already in use", 1, true) then
      error(err, 0)
    end
  end
end

--- Where the rock built for LuaJIT is, as a package.cpath entry.
H.ROCK_CPATH = H.ROOT .. "/lua_modules/luajit/lib/lua/5.1/?.so"

--- Starts an instance from a spec's `conf` with its placeholders filled: "@CPATH@" (the rock),
--- "@SPEC@" (spec/ngx) and "@PORT@" (a free port). Returns the instance and that port.
function H.start_conf(conf)
  local nginx, _, port = H.start(function(_, port2)
    return (conf:gsub("@CPATH@", H.ROCK_CPATH):gsub("@SPEC@", H.ROOT .. "/spec/ngx"):gsub("@PORT@", port2))
  end)
  return nginx, port
end

function Nginx:remove()
  H.sh("rm -rf " .. shell_quote(self.prefix))
end

--- The lines of error.log at level `levels` (a Lua pattern alternative list, e.g. {"alert", "crit"}).
function Nginx:log_lines(levels)
  local found = {}
  for line in self:log():gmatch("[^\n]+") do
    for _, level in ipairs(levels) do
      if line:find("[" .. level .. "]", 1, true) then
        found[#found + 1] = line
      end
    end
  end
  return found
end

return H
