-- The OpenResty benchmark: one nginx worker serving /inline, /vmpool and /run_worker_thread (see
-- nginx.conf here), measured with wrk in interleaved rounds (the machine is shared: each round runs
-- every endpoint once, in a rotating order, so load from elsewhere hits all of them alike).
-- Run it with bench/ngx/run.sh; settings come from the environment:
--   ROUNDS (3), DURATION (10 s), CONNECTIONS (50), CORE (vmpool states, 1),
--   THREADS (thread_pool threads for ngx.run_worker_thread, 1), WARMUP (2 s),
--   ENDPOINTS ("inline vmpool run_worker_thread"; add vmpool_direct for /vmpool with
--   vmpool.ngx.configure{batch = false})
-- Besides wrk's req/s and p99 latency it reads the CPU time each thread of the nginx worker used
-- (/proc/<pid>/task/*/stat): the event loop thread, vmpool's threads, nginx's thread pool.
-- --out=FILE also writes every round's req/s and p99 per endpoint, the settings and the load
-- average to FILE as a Lua literal (`return {...}`, what bench/report/run.lua's report suite reads).
package.path = "bench/lib/?.lua;" .. package.path
local B = require "benchlib"
local H = require "spec.ngx.nginx"
local S = require "bench.ngx.server"
local OUT = B.options(arg or {}).out

local ROUNDS = tonumber(os.getenv("ROUNDS") or 3)
local DURATION = tonumber(os.getenv("DURATION") or 10)
local CONNECTIONS = tonumber(os.getenv("CONNECTIONS") or 50)
local CORE = tonumber(os.getenv("CORE") or 1)
local THREADS = tonumber(os.getenv("THREADS") or 1)
local WARMUP = tonumber(os.getenv("WARMUP") or 2)
local ENDPOINTS = {}
for e in (os.getenv("ENDPOINTS") or "inline vmpool run_worker_thread"):gmatch("[%w_]+") do
  ENDPOINTS[#ENDPOINTS + 1] = e
end

local CLK_TCK = tonumber((select(2, H.sh("getconf CLK_TCK")):match("%d+"))) or 100

-- CPU seconds used so far by the worker's threads: event loop, vmpool's threads, the rest
local function cpu(worker)
  local t = { loop = 0, vmpool = 0, other = 0, loop_cs = 0, vmpool_cs = 0, other_cs = 0 }
  local _, out = H.sh("ls /proc/" .. worker .. "/task")
  for tid in out:gmatch("%d+") do
    local stat = H.read_file("/proc/" .. worker .. "/task/" .. tid .. "/stat")
    local comm = H.read_file("/proc/" .. worker .. "/task/" .. tid .. "/comm") or ""
    local status = H.read_file("/proc/" .. worker .. "/task/" .. tid .. "/status") or ""
    local switches = (tonumber(status:match("\nvoluntary_ctxt_switches:%s*(%d+)")) or 0)
      + (tonumber(status:match("\nnonvoluntary_ctxt_switches:%s*(%d+)")) or 0)
    if stat then
      local rest = stat:match("%) (.*)")
      local fields = {}
      for f in rest:gmatch("%S+") do
        fields[#fields + 1] = f
      end
      -- utime and stime are fields 14 and 15 of stat, 12 and 13 after "pid (comm)"
      local secs = (tonumber(fields[12]) + tonumber(fields[13])) / CLK_TCK
      local kind = tonumber(tid) == worker and "loop" or comm:match("^vmpool") and "vmpool" or "other"
      t[kind] = t[kind] + secs
      t[kind .. "_cs"] = (t[kind .. "_cs"] or 0) + switches
    end
  end
  return t
end

local function to_ms(v, unit)
  v = tonumber(v)
  if unit == "us" then
    return v / 1000
  elseif unit == "s" then
    return v * 1000
  end
  return v
end

local function wrk(port, endpoint, seconds)
  S.configure(port, endpoint)
  local cmd = ("wrk -t1 -c%d -d%ds --latency http://127.0.0.1:%d%s 2>&1"):format(CONNECTIONS, seconds, port,
    S.path(endpoint))
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  local rps = tonumber(out:match("Requests/sec:%s+([%d%.]+)"))
  local p99, unit = out:match("99%%%s+([%d%.]+)(%a+)")
  local requests = tonumber(out:match("(%d+) requests in"))
  local errors = out:match("Socket errors:[^\n]*") or out:match("Non%-2xx[^\n]*")
  assert(rps and p99 and requests, "cannot read wrk's output:\n" .. out)
  return { rps = rps, p99 = to_ms(p99, unit), requests = requests, errors = errors }
end

local function loadavg()
  return (H.read_file("/proc/loadavg") or ""):match("^%S+")
end

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do
    s[i] = x
  end
  table.sort(s)
  local n = #s
  if n % 2 == 1 then
    return s[(n + 1) / 2]
  end
  return (s[n / 2] + s[n / 2 + 1]) / 2
end

local function minmax(xs)
  local lo, hi = math.huge, -math.huge
  for _, x in ipairs(xs) do
    lo, hi = math.min(lo, x), math.max(hi, x)
  end
  return lo, hi
end

local out = {}
local function say(fmt, ...)
  local line = select("#", ...) > 0 and fmt:format(...) or fmt
  print(line)
  io.stdout:flush()
  out[#out + 1] = line
end

local port = H.free_port()
local nginx = H.new(S.conf(port, CORE, THREADS))
local ok, err = pcall(function()
  nginx:start(port)
  local worker = assert(nginx:worker_pids()[1])
  for _, e in ipairs(ENDPOINTS) do
    local status, body = H.get(port, S.path(e))
    assert(status == 200 and body == "7 100000\n", e .. " answered " .. tostring(status) .. " " .. tostring(body))
    wrk(port, e, WARMUP)
  end

  local function output(cmd)
    return (select(2, H.sh(cmd)):gsub("^%s+", ""):gsub("%s+$", ""))
  end
  say("# OpenResty benchmark, %s", os.date("!%Y-%m-%d %H:%M UTC"))
  say("machine: %s cores, %s, %s", output("nproc"), output("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"),
    output("uname -sr"))
  say("server: %s, 1 worker; vmpool core=%d; thread_pool threads=%d",
    (output(H.NGINX .. " -v"):gsub("^nginx version: ", "")), CORE, THREADS)
  say("client: wrk -t1 -c%d -d%ds --latency, %d interleaved rounds", CONNECTIONS, DURATION, ROUNDS)
  say("")
  say("| round | endpoint | req/s | p99 ms | loop CPU us/req | helper CPU us/req "
    .. "| loop / helper context switches per req | load avg |")
  say("|---|---|---|---|---|---|---|---|")
  local runs = {}
  for _, e in ipairs(ENDPOINTS) do
    runs[e] = {}
  end
  for round = 1, ROUNDS do
    for i = 0, #ENDPOINTS - 1 do
      local e = ENDPOINTS[(round - 1 + i) % #ENDPOINTS + 1]
      local before = cpu(worker)
      local r = wrk(port, e, DURATION)
      local after = cpu(worker)
      r.loop_us = (after.loop - before.loop) / r.requests * 1e6
      r.helper_us = ((after.vmpool - before.vmpool) + (after.other - before.other)) / r.requests * 1e6
      r.loop_cs = (after.loop_cs - before.loop_cs) / r.requests
      r.helper_cs = (after.vmpool_cs - before.vmpool_cs + after.other_cs - before.other_cs) / r.requests
      r.round = round
      runs[e][round] = r
      say("| %d | /%s | %.0f | %.2f | %.1f | %.1f | %.2f / %.2f | %s |%s", round, e, r.rps, r.p99, r.loop_us,
        r.helper_us, r.loop_cs, r.helper_cs, loadavg(), r.errors and (" " .. r.errors) or "")
    end
  end

  say("")
  say("| endpoint | req/s median (min-max) | p99 ms median (min-max) | loop CPU us/req | helper CPU us/req |")
  say("|---|---|---|---|---|")
  local med = {}
  for _, e in ipairs(ENDPOINTS) do
    local rps, p99, loop, helper = {}, {}, {}, {}
    for _, r in ipairs(runs[e]) do
      rps[#rps + 1], p99[#p99 + 1], loop[#loop + 1], helper[#helper + 1] = r.rps, r.p99, r.loop_us, r.helper_us
    end
    med[e] = { rps = median(rps), p99 = median(p99) }
    local rlo, rhi = minmax(rps)
    local plo, phi = minmax(p99)
    say("| /%s | %.0f (%.0f-%.0f) | %.2f (%.2f-%.2f) | %.1f | %.1f |", e, med[e].rps, rlo, rhi, med[e].p99, plo, phi,
      median(loop), median(helper))
  end

  -- ratios within each round (same conditions), then their median
  local function ratio(a, b, target)
    if not (runs[a] and runs[b]) then
      return
    end
    local r = {}
    for round = 1, ROUNDS do
      r[round] = runs[a][round].rps / runs[b][round].rps
    end
    local lo, hi = minmax(r)
    say("/%s vs /%s: %.2fx req/s (median of the per-round ratios; min %.2f, max %.2f%s); p99 %.2f vs %.2f ms", a, b,
      median(r), lo, hi, target and ("; target >= " .. target) or "", med[a].p99, med[b].p99)
  end
  say("")
  ratio("vmpool", "run_worker_thread", "1.25 and p99 not above")
  ratio("vmpool", "inline", "0.70")
  ratio("vmpool_direct", "run_worker_thread")
  ratio("vmpool", "vmpool_direct")
  local _, stats = H.get(port, "/stats")
  local s = H.parse_kv(stats)
  local function per(a, b)
    return (tonumber(s[a]) or 0) / math.max(1, tonumber(s[b]) or 1)
  end
  say("vmpool.ngx: %s waits, %.1f completions per wake-up of the light thread, %.1f calls per flush",
    s["ngx.waits"], per("ngx.completions", "ngx.wakeups"), per("ngx.waits", "ngx.flushes"))
  if OUT then
    local rows = {}
    for e, rs in pairs(runs) do
      rows[e] = { rps = {}, p99 = {} }
      for round, r in ipairs(rs) do
        rows[e].rps[round], rows[e].p99[round] = r.rps, r.p99
      end
    end
    local f = assert(io.open(OUT, "w"))
    f:write("return ", B.literal {
      date = os.date("!%Y-%m-%d %H:%M UTC"), rounds = ROUNDS, duration_s = DURATION, connections = CONNECTIONS,
      core = CORE, threads = THREADS, endpoints = ENDPOINTS, runs = rows, loadavg_after = loadavg(),
    }, "\n")
    f:close()
  end
end)
nginx:stop()
if not ok then
  io.stderr:write(tostring(err), "\n", nginx:log(), "\n")
  nginx:remove()
  os.exit(1)
end
nginx:remove()

local dir = H.ROOT .. "/bench/out"
H.sh("mkdir -p " .. H.quote(dir))
local file = dir .. "/ngx-" .. os.date("!%Y%m%d-%H%M%S") .. ".md"
H.write_file(file, table.concat(out, "\n") .. "\n")
print("\nwritten to " .. file)
