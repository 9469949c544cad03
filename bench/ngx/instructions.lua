-- Instructions per request on nginx's event loop (issue 14, item 2: the trivial endpoint at
-- <= 16,000), for the endpoints of nginx.conf here: nginx runs as one process (`master_process
-- off`, so the event loop is its main thread) under callgrind with one output per thread; wrk
-- warms the endpoint up, callgrind's counters are zeroed, wrk loads it for DURATION seconds, and
-- the counters are dumped. Instructions per request = each thread's count / wrk's requests.
-- Unlike wall-clock figures these hardly move with the machine's load (instructions, not time).
-- Settings: ENDPOINTS ("inline vmpool run_worker_thread"; vmpool_direct is /vmpool with
-- vmpool.ngx.configure{batch = false}, each call submitted at once), DURATION (8 s), CONNECTIONS (10),
-- CORE and THREADS (1: the states of the pool and the threads of nginx's thread pool),
-- BENCH_QUICK=1 (2 s, checks that the script works), KEEP (a directory: each endpoint's dumps are
-- copied there as <endpoint>.<part>-<thread>, for callgrind_annotate).
-- Run with `bench/ngx/run.sh bench/ngx/instructions.lua` (builds the LuaJIT rock; needs valgrind).
package.path = "bench/lib/?.lua;" .. package.path
local B = require "benchlib"
local H = require "spec.ngx.nginx"
local S = require "bench.ngx.server"
-- --out=FILE: the counts also go to FILE as a Lua literal (what bench/report/run.lua's report suite reads)
local OUT = B.options(arg or {}).out

local QUICK = os.getenv("BENCH_QUICK") == "1"
local DURATION = tonumber(os.getenv("DURATION") or (QUICK and 2 or 8))
local CONNECTIONS = tonumber(os.getenv("CONNECTIONS") or 10)
local CORE = tonumber(os.getenv("CORE") or 1)
local THREADS = tonumber(os.getenv("THREADS") or 1)
local ENDPOINTS = {}
for e in (os.getenv("ENDPOINTS") or "inline vmpool run_worker_thread"):gmatch("[%w_]+") do
  ENDPOINTS[#ENDPOINTS + 1] = e
end

assert(H.sh("command -v valgrind >/dev/null && command -v callgrind_control >/dev/null"),
  "vmpool: bench/ngx/instructions.lua needs valgrind (apt-get install valgrind)")

local function wrk(port, path, seconds)
  local ok, out = H.sh(("wrk -t1 -c%d -d%ds http://127.0.0.1:%d%s"):format(CONNECTIONS, seconds, port, path))
  local n = ok and tonumber(out:match("(%d+) requests in"))
  return assert(n, out), out:match("Non%-2xx[^\n]*") or out:match("Socket errors:[^\n]*")
end

-- Ir totals of every thread's dump (files <base>.<part>-<thread>), by thread number
local function totals(base)
  local _, list = H.sh("ls " .. H.quote(base) .. ".*-*")
  local by_thread = {}
  for file in list:gmatch("%S+") do
    local thread = tonumber(file:match("%-(%d+)$"))
    local text = H.read_file(file) or ""
    local ir = tonumber(text:match("\nsummary:%s*(%d+)") or text:match("\ntotals:%s*(%d+)"))
    if thread and ir then by_thread[thread] = (by_thread[thread] or 0) + ir end
  end
  return by_thread
end

local function measure(endpoint)
  local path = S.path(endpoint)
  local port = H.free_port()
  local nginx = H.new(S.conf(port, CORE, THREADS))
  local base = nginx.prefix .. "/callgrind.out"
  local cmd = ("valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=%s %s > %s 2>&1 &"):format(
    H.quote(base), nginx:cmd("-g 'daemon off; master_process off;'"), H.quote(nginx.prefix .. "/logs/valgrind.log"))
  assert(H.sh(cmd))
  local result
  local ok, err = pcall(function()
    H.wait_until("nginx under valgrind to accept connections on port " .. port, 120, function()
      return H.accepts(port) and nginx:master_pid(), "port closed"
    end, 0.2)
    S.configure(port, endpoint, 60)
    local status, body = H.get(port, path, 60)
    assert(status == 200, endpoint .. " answered " .. tostring(status) .. " " .. tostring(body))
    wrk(port, path, QUICK and 1 or 3) -- warm-up: traces compiled, pools grown
    local pid = nginx:master_pid()
    assert(H.sh("callgrind_control --zero " .. pid .. " >/dev/null"))
    local requests, errors = wrk(port, path, DURATION)
    assert(H.sh("callgrind_control --dump " .. pid .. " >/dev/null"))
    local by_thread = H.wait_until("callgrind's dump", 60, function()
      local t = totals(base)
      return t[1] and t
    end, 0.2)
    local others = 0
    for thread, ir in pairs(by_thread) do
      if thread ~= 1 then others = others + ir end
    end
    result = { requests = requests, loop = by_thread[1] / requests, others = others / requests, errors = errors }
    if os.getenv("KEEP") then
      local keep = H.quote(os.getenv("KEEP"))
      assert(H.sh(("mkdir -p %s && for f in %s.*-*; do cp \"$f\" %s/%s.\"${f##*.}\"; done"):format(
        keep, H.quote(base), keep, endpoint)))
    end
  end)
  local pid = nginx:master_pid()
  if pid then H.sh("kill -QUIT " .. pid) end
  pcall(H.wait_until, "nginx under valgrind to exit", 60, function() return not (pid and H.alive(pid)) end, 0.2)
  if pid and H.alive(pid) then H.sh("kill -KILL " .. pid) end
  if not ok then error(tostring(err) .. "\n" .. (H.read_file(nginx.prefix .. "/logs/valgrind.log") or ""), 0) end
  return result
end

print(("# Event-loop instructions per request, %s"):format(os.date("!%Y-%m-%d %H:%M UTC")))
print(("nginx as one process under callgrind; wrk -t1 -c%d -d%ds after a warm-up; vmpool core = %d, "
  .. "thread_pool threads = %d"):format(CONNECTIONS, DURATION, CORE, THREADS))
print("")
print("| endpoint | requests | event loop instructions per request | other threads' per request |")
print("|---|--:|--:|--:|")
local loop, rows = {}, {}
for _, e in ipairs(ENDPOINTS) do
  local r = measure(e)
  loop[e], rows[e] = r.loop, r
  print(("| /%s | %d | %.0f | %.0f |%s"):format(e, r.requests, r.loop, r.others, r.errors and (" " .. r.errors) or ""))
end
if loop.vmpool then
  print("")
  print(("/vmpool: %.0f event-loop instructions per request (goal <= 16,000)%s"):format(loop.vmpool,
    loop.run_worker_thread and ("; /run_worker_thread %.0f"):format(loop.run_worker_thread) or ""))
end
if OUT then
  local f = assert(io.open(OUT, "w"))
  f:write("return ", B.literal {
    date = os.date("!%Y-%m-%d %H:%M UTC"), duration_s = DURATION, connections = CONNECTIONS, core = CORE,
    threads = THREADS, endpoints = ENDPOINTS, runs = rows,
  }, "\n")
  f:close()
end
