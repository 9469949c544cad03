-- The benchmark runner (Lua 5.4, run from the repository root by bench/run.sh, which builds first).
-- Every figure comes from a separate measuring process (micro.lua, workload.lua, cg.lua, the Rust
-- ping-pong) started with the right module tree, CPU set and priority; the runner repeats them with
-- the order rotated on every repetition (A B C, B C A, ...), so a noisy moment spreads over all rows
-- instead of landing on one, and keeps every single result in bench/out/*.dat.
--
--   lua5.4 bench/report/run.lua micro       repeated micro benchmark         -> bench/out/micro.dat
--   lua5.4 bench/report/run.lua workload    strategies x P x CPUs            -> bench/out/workload.dat
--   lua5.4 bench/report/run.lua callgrind   instructions per call + profile  -> bench/out/callgrind.dat
--   lua5.4 bench/report/run.lua heavy       heavy work: speedup.lua (1 and 2 CPUs), map.lua, and
--                                    ngx/heavy.lua, ngx/run.lua, ngx/instructions.lua
--                                    (each writes its rounds with --out) -> bench/out/speedup.dat,
--                                    map.dat, ngx-heavy.dat, ngx-trivial.dat, ngx-instructions.dat
--                                    (skipped there without nginx or wrk, or valgrind)
--   lua5.4 bench/report/run.lua report      all four (-> bench/out/report-*.dat), then bench/report/write.lua
--                                    writes bench/REPORT.md
--   lua5.4 bench/report/run.lua compare A B two builds interleaved, median ratios (see bench/compare)
--
-- Settings (environment):
--   BENCH_QUICK=1          development mode: fewer repetitions, shorter runs, P = 1000 and 4000
--   BENCH_REPS=N           repetitions of every timed figure (default 5, quick 3; the heavy-work
--                          scripts' rounds only when set: unset, their own defaults)
--   BENCH_NICE=N           run measuring processes under `nice -n N` (default 0)
--   BENCH_RUNTIMES="..."   runtimes of the micro benchmark and callgrind (lua5.1 lua5.4 lua5.5 luajit)
--   BENCH_WORKLOAD_LUA=..  runtime of the workload matrix (default lua5.4)
--   BENCH_CPUS="1 2"       CPU counts of the workload (taskset -c 0..N-1)
--   VMPOOL_PEERS=DIR       Lua Lanes and effil built by bench/peers/build.sh into DIR/<lua>/: the
--                          micro suite then runs bench/peers/peers.lua for them and for vmpool, and the
--                          workload adds their rows (unset: they are measured only if `require`
--                          finds them anyway, e.g. installed with LuaRocks)
package.path = "bench/lib/?.lua;" .. package.path
local B = require "benchlib"
local S = require "strategies"

local OUT = "bench/out"
local env = os.getenv
local QUICK = env("BENCH_QUICK") == "1"
local REPS = tonumber(env("BENCH_REPS") or "") or (QUICK and 3 or 5)
local NICE = tonumber(env("BENCH_NICE") or "") or 0

local function words(s)
  local t = {}
  for w in (s or ""):gmatch("%S+") do t[#t + 1] = w end
  return t
end

local RUNTIMES = words(env("BENCH_RUNTIMES") or "lua5.1 lua5.4 lua5.5 luajit")
local WORKLOAD_LUA = env("BENCH_WORKLOAD_LUA") or "lua5.4"
local CPUS = words(env("BENCH_CPUS") or "1 2")
for i, c in ipairs(CPUS) do CPUS[i] = tonumber(c) end
local PS = QUICK and { 1000, 4000 } or { 1000, 2000, 4000 }
-- calls per workload run: CALLS_PER_P x P (every coroutine makes that many calls), at least
-- MIN_CALLS; a new state per call is ~20x slower, so "no pool" makes NOPOOL_PER_P x P
local CALLS_PER_P = QUICK and 5 or 20
local MIN_CALLS = QUICK and 10000 or 50000
local NOPOOL_PER_P = QUICK and 1 or 2
local MICRO_SCALE = QUICK and 0.25 or 1
local PEERS = env("VMPOOL_PEERS")
if PEERS == "" then PEERS = nil end
local PINGPONG_N = QUICK and 50000 or 200000
-- callgrind run lengths: the difference cancels start-up
local CG_N1, CG_N2 = 2000, 12000

local function sh_quote(s)
  s = tostring(s)
  if s:match("^[%w%.%-_/=,:+]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function capture(cmd, keep_stderr)
  local p = io.popen(cmd .. (keep_stderr and " 2>&1" or " 2>/dev/null"))
  local s = p:read("a")
  p:close()
  return (s:gsub("%s+$", ""))
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- `report` keeps its results apart (report-*.dat) from suites run on their own (micro.dat, ...), so
-- that `make bench` between a report run and `bench/run.sh render` does not mix two runs
local SAVE_PREFIX = ""
local function save(name, value)
  write_file(OUT .. "/" .. SAVE_PREFIX .. name .. ".dat", "return " .. B.literal(value) .. "\n")
end

local function now() return tonumber(capture("date +%s.%N")) or os.time() end

--- the module trees -----------------------------------------------------------------------------

local LUA_VERSION_DIR = { ["lua5.1"] = "5.1", ["luajit"] = "5.1", ["lua5.4"] = "5.4", ["lua5.5"] = "5.5" }

--- The directory holding vmpool.so for runtime `lua` in tree `tree` ("rock" or "count"), or a
--- `{ root = DIR }` tree built elsewhere (bench/compare).
local function module_dir(lua, tree)
  local root = "."
  if type(tree) == "table" then root, tree = tree.root, "rock" end
  if tree == "count" then return root .. "/" .. OUT .. "/trees/count/" .. lua end
  return root .. "/lua_modules/" .. lua .. "/lib/lua/" .. LUA_VERSION_DIR[lua]
end

local function cpu_list(n)
  local t = {}
  for i = 0, n - 1 do t[#t + 1] = tostring(i) end
  return table.concat(t, ",")
end

local LOG = OUT .. "/run.log"

--- The shell command of a measuring process: spec.env ({ "NAME=value", ... }), then the module
--- paths (spec.cpath, spec.peers), nice, taskset (spec.cpus) and spec.argv; with `sample_file`,
--- under bench/report/sample.sh writing to it.
local function command_of(spec, sample_file)
  local parts = {}
  if spec.env and #spec.env > 0 then parts[#parts + 1] = "env " .. table.concat(spec.env, " ") end
  if sample_file then parts[#parts + 1] = "bench/report/sample.sh " .. sample_file end
  if spec.cpath then
    -- the peers' modules (spec.peers: PEERS/<lua>) after vmpool's, never instead of it
    local cpath, path = spec.cpath .. "/?.so;", ""
    if spec.peers then
      cpath = cpath .. spec.peers .. "/lib/?.so;"
      path = " LUA_PATH=" .. sh_quote(spec.peers .. "/share/?.lua;;")
    end
    parts[#parts + 1] = "env -u LUA_INIT -u LUA_INIT_5_4 -u LUA_CPATH_5_4 -u LUA_PATH_5_4 -u LUA_INIT_5_5 " ..
      "-u LUA_CPATH_5_5 -u LUA_PATH_5_5 LUA_CPATH=" ..
      sh_quote(cpath .. ";") .. path
  end
  if NICE ~= 0 then parts[#parts + 1] = "nice -n " .. NICE end
  if spec.cpus then parts[#parts + 1] = "taskset -c " .. cpu_list(spec.cpus) end
  for _, a in ipairs(spec.argv) do parts[#parts + 1] = sh_quote(a) end
  return table.concat(parts, " ")
end

local function log_command(cmd)
  local log = io.open(LOG, "a")
  log:write("$ ", cmd, "\n")
  log:close()
end

--- Runs one measuring process; returns its `return {...}` table (plus `sampled` when sampled),
--- or nil and an error message.
local function measure(spec)
  local sample_file
  if spec.sample then
    sample_file = OUT .. "/sample.tmp"
    os.remove(sample_file)
  end
  local cmd = command_of(spec, sample_file)
  log_command(cmd)
  local p = io.popen(cmd .. " 2>>" .. LOG)
  local text = p:read("a")
  local ok, _, code = p:close()
  local line = text:match("return {[^\n]*")
  local result, err
  if line then result, err = B.load_result(line) end
  if not ok or not result then
    return nil, string.format("%s failed (exit %s): %s", spec.argv[1], tostring(code), err or text:sub(1, 200))
  end
  if sample_file then
    local f = io.open(sample_file)
    if f then
      result.sampled = B.load_result(f:read("a"))
      f:close()
    end
  end
  return result
end

--- machine description ---------------------------------------------------------------------------

local function machine()
  local m = {}
  local lscpu = capture("lscpu")
  m.cpu_model = lscpu:match("Model name:%s*([^\n]+)") or "unknown"
  m.hypervisor = lscpu:match("Hypervisor vendor:%s*([^\n]+)")
  m.cpus = tonumber(capture("nproc")) or 0
  m.threads_per_core = tonumber(lscpu:match("Thread%(s%) per core:%s*(%d+)") or "")
  local meminfo = B.read_file("/proc/meminfo") or ""
  m.mem_gb = (tonumber(meminfo:match("MemTotal:%s*(%d+)")) or 0) / 1024 / 1024
  m.kernel = capture("uname -r")
  m.os = (B.read_file("/etc/os-release") or ""):match('PRETTY_NAME="([^"]+)"')
  m.lua = {}
  for _, lua in ipairs { "lua5.1", "lua5.4", "lua5.5", "luajit" } do
    m.lua[lua] = capture(lua .. " -v", true):match("^[^\n]*")
  end
  m.rustc = capture("rustc -V")
  m.valgrind = capture("valgrind --version")
  m.commit = capture("git rev-parse HEAD")
  m.commit_short = capture("git rev-parse --short HEAD")
  -- uncommitted changes to what is measured or measures (documents and charts do not count)
  m.dirty = capture("git status --porcelain --untracked-files=no -- src Cargo.toml Cargo.lock bench " ..
    "':!bench/*.md' ':!bench/charts'") ~= ""
  m.branch = capture("git rev-parse --abbrev-ref HEAD")
  m.date = capture("date -u '+%Y-%m-%d %H:%M UTC'")
  m.loadavg_start = (B.read_file("/proc/loadavg") or ""):match("^(%S+ %S+ %S+)")
  return m
end

--- the command line that reproduces this run
local function command_line(what)
  local vars = {}
  for _, k in ipairs { "BENCH_QUICK", "BENCH_REPS", "BENCH_NICE", "BENCH_RUNTIMES", "BENCH_WORKLOAD_LUA",
    "BENCH_CPUS", "VMPOOL_PEERS" } do
    local v = env(k)
    if v and v ~= "" then vars[#vars + 1] = k .. "=" .. sh_quote(v) end
  end
  local entry = env("BENCH_ENTRY") or ("bench/run.sh " .. what)
  vars[#vars + 1] = entry
  return table.concat(vars, " ")
end

local function settings()
  return {
    quick = QUICK, reps = REPS, nice = NICE, runtimes = RUNTIMES, workload_lua = WORKLOAD_LUA,
    cpus = CPUS, ps = PS, calls_per_p = CALLS_PER_P, min_calls = MIN_CALLS, nopool_per_p = NOPOOL_PER_P,
    micro_scale = MICRO_SCALE, pingpong_n = PINGPONG_N, cg_n1 = CG_N1, cg_n2 = CG_N2, peers = PEERS,
  }
end

--- rotation: the jobs of repetition r start at job r
local function rotated(jobs, r)
  local t = {}
  for i = 1, #jobs do t[i] = jobs[(i + r - 2) % #jobs + 1] end
  return t
end

local function progress(fmt, ...)
  io.stdout:write(string.format(fmt, ...), "\n")
  io.stdout:flush()
end

--- the peers (Lua Lanes, effil) -----------------------------------------------------------------

--- PEERS/<lua>, when PEERS is set
local function peers_dir(lua) return PEERS and (PEERS .. "/" .. lua) or nil end

--- For each peer, "present" or the first line of the error `require` gave on runtime `lua` (with
--- the same module paths as the measuring processes).
local function baseline_presence(lua)
  local out = {}
  local dirp = peers_dir(lua)
  local prefix = "env -u LUA_INIT -u LUA_INIT_5_4 -u LUA_PATH_5_4 -u LUA_CPATH_5_4 -u LUA_INIT_5_5 -u LUA_PATH_5_5 " ..
    "-u LUA_CPATH_5_5 "
  if dirp then
    prefix = prefix .. "LUA_PATH=" .. sh_quote(dirp .. "/share/?.lua;;") .. " LUA_CPATH=" ..
      sh_quote(dirp .. "/lib/?.so;;") .. " "
  end
  for _, mod in ipairs { "lanes", "effil" } do
    local r = capture(prefix .. lua .. " -e " .. sh_quote("local ok, e = pcall(require, '" .. mod ..
      "') print(ok and 'present' or (tostring(e):match('^[^\\n]*')))"))
    -- bench/peers/build.sh writes down why it did not build a peer for this runtime
    local skipped = r ~= "present" and dirp and B.read_file(dirp .. "/" .. mod .. ".skipped")
    out[mod] = skipped and ("not built: " .. skipped:gsub("%s+$", "")) or r
  end
  return out
end

--- The peers benchmark's jobs (bench/peers/peers.lua): on every runtime where a peer loads, that peer and
--- vmpool; and what was found where, for the report.
local function peers_jobs()
  local jobs, presence = {}, {}
  for _, lua in ipairs(RUNTIMES) do
    presence[lua] = baseline_presence(lua)
    local libs = {}
    for _, lib in ipairs { "lanes", "effil" } do
      if presence[lua][lib] == "present" then libs[#libs + 1] = lib end
    end
    if #libs > 0 then table.insert(libs, 1, "vmpool") end
    for _, lib in ipairs(libs) do
      jobs[#jobs + 1] = { key = "peers:" .. lib .. ":" .. lua, kind = "peers", lib = lib, lua = lua, cpus = 2 }
    end
  end
  return jobs, { dir = PEERS, presence = presence }
end

--- The channels benchmark's jobs (bench/peers/channels.lua): vmpool on every runtime, and each peer where
--- it loads (the same presence as the peers benchmark's).
local function channels_jobs(presence)
  local jobs = {}
  for _, lua in ipairs(RUNTIMES) do
    jobs[#jobs + 1] = { key = "channels:vmpool:" .. lua, kind = "channels", lib = "vmpool", lua = lua }
    for _, lib in ipairs { "lanes", "effil" } do
      if presence[lua] and presence[lua][lib] == "present" then
        jobs[#jobs + 1] = { key = "channels:" .. lib .. ":" .. lua, kind = "channels", lib = lib, lua = lua }
      end
    end
  end
  return jobs
end

--- micro ------------------------------------------------------------------------------------------

local function micro_jobs()
  local jobs = {}
  for _, lua in ipairs(RUNTIMES) do
    jobs[#jobs + 1] = { key = lua .. ":2", kind = "micro", lua = lua, cpus = 2, tree = "rock" }
  end
  -- one CPU: the round trip when nothing can spin (host and worker take turns)
  jobs[#jobs + 1] = { key = "lua5.4:1", kind = "micro", lua = "lua5.4", cpus = 1, tree = "rock" }
  return jobs
end

local function run_micro_job(job)
  if job.kind == "pingpong" then
    return measure { argv = { OUT .. "/bin/pingpong", tostring(PINGPONG_N) }, cpus = job.cpus }
  end
  if job.kind == "channels" then
    local argv = { job.lua, "bench/peers/channels.lua", "--lib=" .. job.lib, "--scale=" .. MICRO_SCALE }
    return measure { argv = argv, cpus = 2, cpath = module_dir(job.lua, "rock"), peers = peers_dir(job.lua) }
  end
  if job.kind == "peers" then
    local argv = { job.lua, "bench/peers/peers.lua", "--lib=" .. job.lib, "--scale=" .. MICRO_SCALE,
      "--cpus=" .. job.cpus }
    return measure { argv = argv, cpus = job.cpus, cpath = module_dir(job.lua, job.tree or "rock"),
      peers = peers_dir(job.lua) }
  end
  local argv = { job.lua, "bench/suites/micro.lua", "--scale=" .. MICRO_SCALE, "--cpus=" .. job.cpus }
  return measure { argv = argv, cpus = job.cpus, cpath = module_dir(job.lua, job.tree) }
end

local function suite_micro()
  local t0 = now()
  local jobs = micro_jobs()
  table.insert(jobs, 1, { key = "pingpong:2", kind = "pingpong", cpus = 2 })
  table.insert(jobs, 2, { key = "pingpong:1", kind = "pingpong", cpus = 1 })
  -- the peers in the same interleaved repetitions, so their ratios to vmpool are paired
  local pjobs, peers = peers_jobs()
  for _, j in ipairs(pjobs) do jobs[#jobs + 1] = j end
  for _, j in ipairs(channels_jobs(peers.presence)) do jobs[#jobs + 1] = j end
  local runs, errors = {}, {}
  local total = REPS * #jobs
  local done = 0
  for r = 1, REPS do
    for _, job in ipairs(rotated(jobs, r)) do
      done = done + 1
      local res, err = run_micro_job(job)
      runs[job.key] = runs[job.key] or {}
      if res then
        res.rep = r -- pairs the peers with vmpool by repetition, whichever runs failed
        table.insert(runs[job.key], res)
        local f = res.figures and res.figures.invoke
        local rt = res.figures and res.figures.round_trip
        local pp = res.figures and res.figures.pingpong
        progress("[micro %d/%d] %-16s rep %d: %s", done, total, job.key, r,
          f and string.format("invoke %.2f us", f.us) or
          rt and string.format("round trip %.2f us", rt.us) or
          pp and string.format("channel ping-pong %.2f us", pp.us) or
          res.absent and ("absent: " .. res.absent) or
          string.format("mpsc %.2f us", res.mpsc_us or 0))
      else
        errors[#errors + 1] = err
        progress("[micro %d/%d] %-16s rep %d: FAILED %s", done, total, job.key, r, err)
      end
    end
  end
  -- one counting run per runtime (count-alloc build): allocations, not time
  -- (and Lua 5.4 on one CPU: whether a call's record can be reused depends on who runs first)
  local counts = {}
  local count_jobs = {}
  for _, lua in ipairs(RUNTIMES) do count_jobs[#count_jobs + 1] = { lua = lua, cpus = 2 } end
  count_jobs[#count_jobs + 1] = { lua = "lua5.4", cpus = 1 }
  for _, cj in ipairs(count_jobs) do
    local key = cj.lua .. ":" .. cj.cpus
    local res, err = run_micro_job { kind = "micro", lua = cj.lua, cpus = cj.cpus, tree = "count" }
    if res then counts[key] = res else errors[#errors + 1] = err end
    progress("[micro count] %s %s", key, res and "ok" or ("FAILED " .. tostring(err)))
  end
  local result = { runs = runs, counts = counts, errors = errors, peers = peers, seconds = now() - t0,
    settings = settings() }
  save("micro", result)
  return result
end

--- workload ---------------------------------------------------------------------------------------

local function calls_for(strategy, p)
  if strategy.id == "nopool" then return NOPOOL_PER_P * p end
  return math.max(CALLS_PER_P * p, MIN_CALLS)
end

local function suite_workload()
  local t0 = now()
  local lua = WORKLOAD_LUA
  local presence = baseline_presence(lua)
  local configs = {}
  for _, cpus in ipairs(CPUS) do
    for _, s in ipairs(S.list) do
      local present = s.kind == "direct" or s.kind == "vmpool" or presence[s.kind] == "present"
      if present then
        for _, p in ipairs(PS) do
          configs[#configs + 1] = {
            key = string.format("%s:%d:%d", s.id, p, cpus),
            strategy = s.id, p = p, cpus = cpus, calls = calls_for(s, p),
          }
        end
      end
    end
  end
  local function argv(c, count)
    local a = { lua, "bench/suites/workload.lua", "--strategy=" .. c.strategy, "--p=" .. c.p,
      "--calls=" .. c.calls, "--cpus=" .. c.cpus }
    if count then a[#a + 1] = "--count" end
    return a
  end
  local runs, counts, errors = {}, {}, {}
  local total = REPS * #configs + #configs
  local done = 0
  for r = 1, REPS do
    for _, c in ipairs(rotated(configs, r)) do
      done = done + 1
      local res, err = measure { argv = argv(c), cpus = c.cpus, cpath = module_dir(lua, "rock"), sample = true,
        peers = peers_dir(lua) }
      runs[c.key] = runs[c.key] or {}
      if res then
        table.insert(runs[c.key], res)
        progress("[workload %d/%d] %-24s rep %d: %8.2f us/op %6.0f MB", done, total, c.key, r,
          res.us_per_op or 0, (res.rss_peak_kb or 0) / 1024)
      else
        errors[#errors + 1] = err
        progress("[workload %d/%d] %-24s rep %d: FAILED %s", done, total, c.key, r, err)
      end
    end
  end
  for _, c in ipairs(configs) do
    done = done + 1
    local res, err = measure { argv = argv(c, true), cpus = c.cpus, cpath = module_dir(lua, "count"),
      peers = peers_dir(lua) }
    if res then counts[c.key] = res else errors[#errors + 1] = err end
    progress("[workload %d/%d] %-24s count: %s", done, total, c.key,
      res and string.format("%.0f native B/op", res.native_bytes or 0) or ("FAILED " .. tostring(err)))
  end
  local result = {
    lua = lua, configs = configs, runs = runs, counts = counts, errors = errors,
    baselines = presence, seconds = now() - t0, settings = settings(),
  }
  save("workload", result)
  return result
end

--- callgrind --------------------------------------------------------------------------------------

local CG_DIR = OUT .. "/callgrind"
local CG_KINDS = { "direct", "invoke", "echo10", "co_invoke", "chan_pingpong", "chan_to_host", "chan_stream" }

--- Runs cg.lua under callgrind (one CPU: no spinning, so the counts are the work of the calls, not
--- of waiting); returns { host = Ir, pool = Ir, files = {host file, pool files...} }.
local function callgrind_run(interp, lua, kind, n, tree, tag)
  os.execute("mkdir -p " .. CG_DIR)
  local prefix = string.format("%s/%s-%s-%s-%d", CG_DIR, tag, lua, kind, n)
  os.execute("rm -f " .. prefix .. ".*")
  local cmd = string.format(
    "env -u LUA_INIT -u LUA_INIT_5_4 -u LUA_CPATH_5_4 LUA_CPATH=%s taskset -c 0 valgrind --tool=callgrind " ..
    "--separate-threads=yes --callgrind-out-file=%s.%%p %s bench/suites/cg.lua --kind=%s --n=%d >>%s 2>&1",
    sh_quote(module_dir(lua, tree) .. "/?.so;;"), prefix, interp, kind, n, LOG)
  local ok = os.execute(cmd)
  if not ok then return nil, "callgrind failed: " .. cmd end
  local files = {}
  local ls = io.popen("ls " .. prefix .. ".*-* 2>/dev/null")
  for f in ls:lines() do files[#files + 1] = f end
  ls:close()
  table.sort(files)
  local r = { host = 0, pool = 0, files = files, threads = #files }
  for _, f in ipairs(files) do
    local text = B.read_file(f) or ""
    local thread = tonumber(text:match("\nthread: (%d+)"))
    local total = tonumber(text:match("\ntotals: (%d+)")) or tonumber(text:match("\nsummary: (%d+)")) or 0
    if thread == 1 then r.host = r.host + total else r.pool = r.pool + total end
  end
  return r
end

--- { ["function [object]"] = Ir } of one callgrind file (self cost, every function).
local function functions_of(file)
  local t = {}
  local p = io.popen("callgrind_annotate --threshold=100 --inclusive=no --show-percs=no " .. sh_quote(file) ..
    " 2>/dev/null")
  local in_table = false
  for line in p:lines() do
    if line:match("file:function") then
      in_table = true
    elseif in_table then
      local ir, what = line:match("^%s*([%d,]+)%s+(.+)$")
      if ir and not what:match("PROGRAM TOTALS") then
        local obj = what:match("%[([^%]]+)%]%s*$") or ""
        obj = obj:match("([^/]+)$") or obj
        local fn = what:gsub("%s*%[[^%]]+%]%s*$", "")
        fn = fn:match("^[^:]*:(.+)$") or fn
        fn = fn:gsub("'%d+$", "") -- recursion levels
        local name = fn .. " [" .. obj .. "]"
        t[name] = (t[name] or 0) + tonumber((ir:gsub(",", "")))
      end
    end
  end
  p:close()
  return t
end

local function side_functions(run)
  local host, pool = {}, {}
  for _, f in ipairs(run.files) do
    local text = B.read_file(f) or ""
    local thread = tonumber(text:match("\nthread: (%d+)"))
    local into = thread == 1 and host or pool
    for name, ir in pairs(functions_of(f)) do into[name] = (into[name] or 0) + ir end
  end
  return host, pool
end

--- Per-call cost of each function: (cost at N2 - cost at N1) / (N2 - N1), largest first.
local function per_call_profile(a, b, dn, top)
  local names = {}
  for k in pairs(a) do names[k] = true end
  for k in pairs(b) do names[k] = true end
  local rows, total = {}, 0
  -- where the instructions go, coarsely: by object file, and a few kinds of work across objects
  local objects, kinds = {}, {}
  for k in pairs(names) do
    local d = ((b[k] or 0) - (a[k] or 0)) / dn
    total = total + d
    if d >= 0.5 then rows[#rows + 1] = { fn = k, ir = d } end
    local obj = k:match("%[([^%]]+)%]$") or "?"
    if obj:match("^lua") or obj:match("^luajit") or obj:match("^liblua") then obj = "Lua" end
    objects[obj] = (objects[obj] or 0) + d
    local kind
    if k:match("fmt") or k:match("format") or k:match("utf8_lossy") or k:match("Utf8Chunks") or
      k:match("write_str") or k:match("Formatter") then
      kind = "string formatting (Rust)"
    elseif k:match("^_?_?[%w_]*malloc") or k:match("^_?_?[%w_]*free ") or k:match("realloc") or
      k:match("^_int_") or k:match("RawVec") or k:match("alloc::alloc") then
      kind = "memory allocation (malloc, free, Vec growth)"
    elseif k:match("memcpy") or k:match("memmove") or k:match("memset") or k:match("memcmp") then
      kind = "memcpy, memset, memcmp"
    elseif k:match("futex") or k:match("parking_lot") or k:match("park") or k:match("syscall") or
      k:match("Timespec") or k:match("clock_gettime") or k:match("Instant") then
      kind = "waiting and waking (parking, clocks, syscalls)"
    end
    if kind then kinds[kind] = (kinds[kind] or 0) + d end
  end
  table.sort(rows, function(x, y) return x.ir > y.ir end)
  local out = {}
  for i = 1, math.min(top, #rows) do out[i] = rows[i] end
  return { total = total, top = out, objects = objects, kinds = kinds }
end

local function suite_callgrind(opts)
  opts = opts or {}
  local t0 = now()
  local runtimes = opts.runtimes or RUNTIMES
  local tree = opts.tree or "rock"
  local result = { n1 = CG_N1, n2 = CG_N2, per_call = {}, profiles = {}, errors = {} }
  local dn = CG_N2 - CG_N1
  for _, lua in ipairs(runtimes) do
    result.per_call[lua] = {}
    for _, kind in ipairs(CG_KINDS) do
      -- Lua 5.4 is measured twice, to show how reproducible the counts are (string hash seeds
      -- and addresses differ between processes; co_invoke's batching depends on scheduling)
      local repeats = (lua == "lua5.4" and not opts.no_profile) and 2 or 1
      for rep = 1, repeats do
        local a, ea = callgrind_run(lua, lua, kind, CG_N1, tree, "stock")
        local b, eb = callgrind_run(lua, lua, kind, CG_N2, tree, "stock")
        if a and b then
          local host = (b.host - a.host) / dn
          local pool = (b.pool - a.pool) / dn
          if rep == 1 then
            result.per_call[lua][kind] = { host = host, pool = pool, total = host + pool, repeats = {} }
          end
          table.insert(result.per_call[lua][kind].repeats, host + pool)
          progress("[callgrind] %-7s %-10s %8.0f instructions per call (host %.0f, pool %.0f)",
            lua, kind, host + pool, host, pool)
        else
          result.errors[#result.errors + 1] = ea or eb
          progress("[callgrind] %s %s FAILED: %s", lua, kind, tostring(ea or eb))
        end
      end
    end
  end
  -- profiles: with the symbolized host, so Lua's own functions have names
  if not opts.no_profile then
    for _, lua in ipairs(runtimes) do
      local sym = OUT .. "/bin/" .. lua .. "-sym"
      if lua ~= "luajit" and io.open(sym) then
        result.profiles[lua] = {}
        for _, kind in ipairs { "invoke", "echo10", "co_invoke", "direct" } do
          local a = callgrind_run(sym, lua, kind, CG_N1, tree, "sym")
          local b = callgrind_run(sym, lua, kind, CG_N2, tree, "sym")
          if a and b then
            local ha, pa = side_functions(a)
            local hb, pb = side_functions(b)
            result.profiles[lua][kind] = {
              host = per_call_profile(ha, hb, dn, 25),
              pool = per_call_profile(pa, pb, dn, 25),
              total = ((b.host + b.pool) - (a.host + a.pool)) / dn,
            }
            progress("[callgrind] profile %s %s: %.0f instructions per call (symbolized host)",
              lua, kind, result.profiles[lua][kind].total)
          end
        end
      end
    end
  end
  result.seconds = now() - t0
  if not opts.no_save then save("callgrind", result) end
  return result
end

--- heavy work: speedup.lua, map.lua, ngx/heavy.lua ------------------------------------------------

-- These scripts take their rounds from their own defaults (speedup 5, map 5, heavy 3; quick 1), or
-- from BENCH_REPS when it is set, and their quick mode from BENCH_QUICK, which they read themselves.
local EXPLICIT_REPS = tonumber(env("BENCH_REPS") or "")

--- The environment variables that change what a heavy-work script measures, as `NAME=value` words
--- for the command shown in the report.
local function shown_vars(extra)
  local vars = {}
  for _, k in ipairs { "BENCH_QUICK", "BENCH_REPS" } do
    local v = env(k)
    if v and v ~= "" then vars[#vars + 1] = k .. "=" .. sh_quote(v) end
  end
  for _, kv in ipairs(extra or {}) do vars[#vars + 1] = kv end
  return table.concat(vars, " ")
end

--- Runs a script that writes its results with `--out=FILE` (spec as for `measure`); its Markdown
--- (stdout) goes to bench/out/<prefix><name>.md. Returns the results with `command` (the
--- command line a reader runs to reproduce them, `shown`) and `seconds`, or nil and an error.
local function run_with_out(name, spec, shown)
  local out_file = OUT .. "/" .. name .. ".out.tmp"
  os.remove(out_file)
  local argv = {}
  for i, a in ipairs(spec.argv) do argv[i] = a end
  argv[#argv + 1] = "--out=" .. out_file
  local cmd = command_of { argv = argv, env = spec.env, cpath = spec.cpath, cpus = spec.cpus }
  log_command(cmd)
  local t0 = now()
  local ok, _, code = os.execute(cmd .. " >" .. OUT .. "/" .. SAVE_PREFIX .. name .. ".md 2>>" .. LOG)
  local text = B.read_file(out_file)
  os.remove(out_file)
  local result, err
  if text then result, err = B.load_result(text) end
  if not ok or not result then
    return nil, string.format("%s failed (exit %s): %s; its standard error is in %s", shown, tostring(code),
      err or "no results written", LOG)
  end
  result.command, result.seconds = shown, now() - t0
  return result
end

--- `--rounds=N` when BENCH_REPS asks for N rounds
local function rounds_args(argv)
  if EXPLICIT_REPS then argv[#argv + 1] = "--rounds=" .. EXPLICIT_REPS end
  return argv
end

--- bench/suites/speedup.lua on 1 CPU and on 2 (Lua 5.4): the speedup of co_invoke and pool:map over
--- serial calls in the host, by call size
local function suite_speedup()
  local lua = "lua5.4"
  local result = { runs = {}, errors = {} }
  for _, cpus in ipairs { 1, 2 } do
    local argv = rounds_args { lua, "bench/suites/speedup.lua" }
    local shown = string.format("%s LUA=%s sh -c '. scripts/luaenv.sh && %staskset -c %s %s'", shown_vars(), lua,
      NICE ~= 0 and ("nice -n " .. NICE .. " ") or "", cpu_list(cpus), table.concat(argv, " "))
    local res, err = run_with_out("speedup-" .. cpus .. "cpu", { argv = argv, cpus = cpus,
      cpath = module_dir(lua, "rock") }, (shown:gsub("^ ", "")))
    if res then result.runs[#result.runs + 1] = res else result.errors[#result.errors + 1] = err end
    progress("[speedup] %d CPU%s: %s", cpus, cpus > 1 and "s" or "", res and "ok" or ("FAILED " .. tostring(err)))
  end
  save("speedup", result)
  return result
end

--- bench/suites/map.lua on 2 CPUs (Lua 5.4): trivial items/s through pool:map next to co_invoke, and the
--- scaling of heavy items from 1 state to 2
local function suite_map()
  local lua = "lua5.4"
  local shown = string.format("%s LUA=%s sh -c '. scripts/luaenv.sh && %staskset -c 0,1 %s bench/suites/map.lua'",
    shown_vars(), lua, NICE ~= 0 and ("nice -n " .. NICE .. " ") or "", lua)
  local res, err = run_with_out("map",
    { argv = { lua, "bench/suites/map.lua" }, cpus = 2, cpath = module_dir(lua, "rock") },
    (shown:gsub("^ ", "")))
  progress("[map] %s", res and "ok" or ("FAILED " .. tostring(err)))
  local result = res or { failed = err }
  save("map", result)
  return result
end

--- A script of bench/ngx/ through bench/ngx/run.sh (LuaJIT, nginx, wrk, and `needs`), its results
--- saved as `name`; recorded as skipped when a tool is missing. `rounds_env`: the script takes its
--- rounds from ROUNDS (BENCH_REPS sets it).
local function suite_ngx(name, script, needs, rounds_env)
  local missing = {}
  for _, cmd in ipairs { "nginx", "wrk", "luajit", table.unpack(needs) } do
    if not os.execute("command -v " .. cmd .. " >/dev/null 2>&1") then missing[#missing + 1] = cmd end
  end
  local result
  if #missing > 0 then
    result = { skipped = table.concat(missing, ", ") .. " not found (scripts/install-deps.sh installs them)" }
  else
    -- bench/run.sh has just built the LuaJIT rock; without it, bench/ngx/run.sh builds it
    local envs = {}
    if io.open("lua_modules/luajit/lib/lua/5.1/vmpool.so") then envs[#envs + 1] = "SKIP_BUILD=1" end
    if rounds_env and EXPLICIT_REPS then envs[#envs + 1] = "ROUNDS=" .. EXPLICIT_REPS end
    local shown = shown_vars(envs) .. " " .. (NICE ~= 0 and ("nice -n " .. NICE .. " ") or "") ..
      "bench/ngx/run.sh " .. script
    local res, err = run_with_out(name, { argv = { "bench/ngx/run.sh", script }, env = envs },
      (shown:gsub("^ ", "")))
    result = res or { failed = err }
  end
  progress("[%s] %s", name, result.skipped and ("skipped: " .. result.skipped) or
    result.failed and ("FAILED " .. result.failed) or "ok")
  save(name, result)
  return result
end

local function suite_heavy()
  suite_speedup()
  suite_map()
  -- heavy requests with a light probe, four variants
  suite_ngx("ngx-heavy", "bench/ngx/heavy.lua", {}, true)
  -- the trivial endpoint against run_worker_thread and inline, and the event loop's instructions
  -- per request under callgrind
  suite_ngx("ngx-trivial", "bench/ngx/run.lua", {}, true)
  suite_ngx("ngx-instructions", "bench/ngx/instructions.lua", { "valgrind" }, false)
end

--- compare ----------------------------------------------------------------------------------------

--- Builds revision `rev` (a commit, or "WORKTREE" for the checkout as it is) into its own tree.
local function build_revision(rev, lua)
  if rev == "WORKTREE" then
    assert(os.execute("scripts/rock.sh " .. lua .. " >/dev/null"), "build failed")
    return { root = ".", label = "worktree" }
  end
  local sha = capture("git rev-parse --verify " .. sh_quote(rev .. "^{commit}"))
  if sha == "" then error("not a revision: " .. rev) end
  -- under target/ (ignored, and outside what luacheck and cargo look at)
  local root = "target/bench-compare/" .. sha:sub(1, 12)
  if not io.open(root .. "/lua_modules/" .. lua .. "/lib/lua/" .. LUA_VERSION_DIR[lua] .. "/vmpool.so") then
    progress("[compare] building %s (%s) in %s", rev, sha:sub(1, 12), root)
    assert(os.execute("rm -rf " .. root .. " && mkdir -p " .. root ..
      " && git archive " .. sha .. " | tar -x -C " .. root), "git archive failed")
    -- the revision's own rockspec and build scripts build it
    assert(os.execute("cd " .. root .. " && scripts/rock.sh " .. lua .. " >/dev/null"), "build of " .. rev .. " failed")
  end
  return { root = root, label = rev .. " (" .. sha:sub(1, 12) .. ")" }
end

local function suite_compare(a_rev, b_rev)
  local lua = env("BENCH_COMPARE_LUA") or "lua5.4"
  local reps = tonumber(env("BENCH_REPS") or "") or 7
  local trees = { A = build_revision(a_rev, lua), B = build_revision(b_rev, lua) }
  local figs = { A = {}, B = {} }
  for r = 1, reps do
    local order = r % 2 == 1 and { "A", "B" } or { "B", "A" }
    for _, side in ipairs(order) do
      local res, err = measure { argv = { lua, "bench/suites/micro.lua", "--scale=" .. MICRO_SCALE, "--cpus=2" },
        cpus = 2, cpath = module_dir(lua, trees[side]) }
      if not res then error(err) end
      for name, f in pairs(res.figures) do
        figs[side][name] = figs[side][name] or {}
        table.insert(figs[side][name], f.us)
      end
      progress("[compare] rep %d %s: invoke %.2f us", r, side, res.figures.invoke.us)
    end
  end
  -- instruction counts: deterministic, one run each
  local cg = {}
  for side, tree in pairs(trees) do
    cg[side] = suite_callgrind { runtimes = { lua }, tree = tree, no_profile = true, no_save = true }
  end
  local lines = {
    string.format("A = %s, B = %s, %s, %d interleaved repetitions (A B, B A, ...)", trees.A.label,
      trees.B.label, lua, reps),
    "",
    string.format("%-16s %28s %28s %12s", "figure", "A median [min-max]", "B median [min-max]", "B/A median"),
  }
  local names = {}
  for k in pairs(figs.A) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local a, b = B.summary(figs.A[k]), B.summary(figs.B[k] or {})
    if a and b then
      local ratios = {}
      for i = 1, math.min(#figs.A[k], #figs.B[k]) do ratios[i] = figs.B[k][i] / figs.A[k][i] end
      lines[#lines + 1] = string.format("%-16s %28s %28s %12.3f", k .. " (us)",
        string.format("%.3f [%.3f-%.3f]", a.median, a.min, a.max),
        string.format("%.3f [%.3f-%.3f]", b.median, b.min, b.max), B.median(ratios))
    end
  end
  for _, kind in ipairs(CG_KINDS) do
    local a = cg.A.per_call[lua] and cg.A.per_call[lua][kind]
    local b = cg.B.per_call[lua] and cg.B.per_call[lua][kind]
    if a and b then
      lines[#lines + 1] = string.format("%-16s %28.0f %28.0f %12.3f", kind .. " (Ir)", a.total, b.total,
        b.total / a.total)
    end
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "us: wall-clock microseconds per call (B/A: median of the per-repetition ratios); " ..
    "Ir: callgrind instructions per call, host + workers, one CPU"
  local text = table.concat(lines, "\n") .. "\n"
  io.write("\n", text)
  write_file(OUT .. "/compare.txt", text)
end

--- main -------------------------------------------------------------------------------------------

local what = arg[1] or "report"
os.execute("mkdir -p " .. OUT)
local started = now()
if what == "micro" or what == "workload" or what == "callgrind" or what == "heavy" or what == "report" then
  local m = machine()
  m.command = command_line(what)
  m.what = what
  if what == "report" then SAVE_PREFIX = "report-" end
  if what == "micro" then
    suite_micro()
  elseif what == "workload" then
    suite_workload()
  elseif what == "callgrind" then
    suite_callgrind()
  elseif what == "heavy" then
    suite_heavy()
  else
    suite_micro()
    suite_workload()
    suite_callgrind()
    suite_heavy()
  end
  m.loadavg_end = (B.read_file("/proc/loadavg") or ""):match("^(%S+ %S+ %S+)")
  m.seconds = now() - started
  m.settings = settings()
  save("machine" .. (what == "report" and "" or "-" .. what), m)
elseif what == "compare" then
  if not arg[2] or not arg[3] then
    io.stderr:write("usage: bench/compare REV_A REV_B   (a revision, or WORKTREE for the checkout)\n")
    os.exit(2)
  end
  suite_compare(arg[2], arg[3])
else
  io.stderr:write("usage: lua5.4 bench/report/run.lua micro|workload|callgrind|heavy|report|compare A B\n")
  os.exit(2)
end
