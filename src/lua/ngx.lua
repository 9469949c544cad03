-- vmpool.ngx: the OpenResty adapter, compiled into the library and loaded by vmpool.lua when the
-- host is ngx_lua. It makes pool:co_invoke (and vmpool.ngx.wait) yield the request's coroutine
-- instead of blocking the worker's event loop, with public ngx_lua APIs only:
--
--   request coroutine                       light thread (one per worker: an ngx.timer)
--   token = notifier:_call(pool, chunk,     sleeps in sock:receiveany() on a unix-socket cosocket;
--     fn, ...): filed in the outbox; the    the native side writes one byte to the other end when
--     turn's first posts the flusher        the completion queue goes from empty to non-empty
--   sem:wait()  -- yields                   tokens = notifier:drain(); sem:post() for each waiter
--   notifier:_take(token) -- the results
--                                           flusher (an ngx.thread of the light thread), resumed
--                                           after the turn's events: notifier:_flush() hands the
--                                           outbox to the pools, waking each worker once
--   (_call, _take, drain and _flush through LuaJIT's FFI in the common case: host_go,
--   drain_and_dispatch, flusher)
--
-- Phases that cannot yield (set, header/body filter, log, balancer) raise an error; init,
-- init_worker and exit_worker block (plain invoke). Everything here is per worker process: the
-- state is rebuilt when the pid changes (a copy inherited from the master is never used).
-- luacheck: read globals ngx

local M, native, with_args = ...

local ngx = ngx
local get_phase, timer_at, tcp = ngx.get_phase, ngx.timer.at, ngx.socket.tcp
local spawn_thread, wait_thread = ngx.thread.spawn, ngx.thread.wait
local worker_pid, worker_exiting, now = ngx.worker.pid, ngx.worker.exiting, ngx.now
local ngx_log, ERR, WARN, NOTICE = ngx.log, ngx.ERR, ngx.WARN, ngx.NOTICE
local error, pcall, tostring, type, pairs, getmetatable = error, pcall, tostring, type, pairs, getmetatable
local setmetatable = setmetatable
local fmt = string.format

local have_semaphore, semaphore = pcall(require, "ngx.semaphore")

local N = native.notifier_methods
local N_CALL, N_TAKE = N._call, N._take

-- The FFI path (src/host/ngx_ffi.rs) of co_invoke's common case and of the light thread's drain:
-- C_NGX is the library through ffi.load, or nil (no ffi module, no library path, declarations
-- that clash), and then the notifier's C functions do everything. ARGS, OUT: the arguments and
-- results of one call (filled and read with no allocation in between, so no finalizer can run
-- and reuse them meanwhile); TOKENS: the finished tokens of one drain.
local C_NGX, ARGS, OUT, TOKENS, ffi_string
local MAX_FFI_VALUES, TOKENS_CAP = 3, 256
local V_NIL, V_FALSE, V_TRUE, V_NUMBER, V_STRING = 0, 1, 2, 3, 4
do
  local has_ffi, ffi = pcall(require, "ffi")
  local path = native._library_path
  if has_ffi and path and pcall(ffi.cdef, [[
    typedef struct { int kind; double num; const char *s; double len; } vmpool_ngx_value;
    double vmpool_ngx_call(void *notifier, void *pool, const char *chunk, size_t clen,
                           const char *fn, size_t flen, int nargs, const vmpool_ngx_value *args);
    int vmpool_ngx_take(void *notifier, double token, vmpool_ngx_value *out);
    int vmpool_ngx_drain(void *notifier, double *out, int cap);
    int vmpool_ngx_flush(void *notifier);
  ]]) then
    local loaded, lib = pcall(ffi.load, path)
    if loaded then
      C_NGX, ffi_string = lib, ffi.string
      ARGS = ffi.new("vmpool_ngx_value[?]", MAX_FFI_VALUES)
      OUT = ffi.new("vmpool_ngx_value[?]", MAX_FFI_VALUES)
      TOKENS = ffi.new("double[?]", TOKENS_CAP)
    end
  end
end
-- the pools vmpool.new made here (see the end of this file): only their userdata reach the FFI
local known_pools = setmetatable({}, { __mode = "k" })

local A = {}

-- where ngx.semaphore's wait (and so a yield) is allowed
local YIELDS = {
  rewrite = true, access = true, content = true, timer = true, preread = true,
  ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true,
}
-- no request and no yield: wait the plain, blocking way
local BLOCKS = { init = true, init_worker = true, exit_worker = true }

local config = {
  -- where the light thread's doorbell socket lives for the microseconds of its setup: a directory
  -- the worker user (often nobody) can write
  socket_dir = "/tmp",
  -- how long a request waits for its call (seconds) before giving up and cancelling it
  wait_timeout = 60,
  -- how long the light thread's read may sleep before it looks around (seconds) when the exit
  -- watch could not be armed (lua_max_pending_timers reached): it bounds how long an exiting
  -- worker may wait for it
  idle_timeout = 300,
  -- hand the calls of one turn of the event loop to the pool together, at the end of the turn (a
  -- sleeping pool worker is then woken once per turn rather than once per request); false submits
  -- each call at once
  batch = true,
}

-- the exit watch: a pending ngx.timer fires early ("premature") when the worker starts to exit
local SENTINEL_DELAY = 86400
-- the light thread's read timeout while the exit watch is armed (a timed-out read logs an error
-- line unless lua_socket_log_errors is off: once a day per idle worker at most)
local WATCHED_READ_TIMEOUT_MS = 86400 * 1000
local RING_BYTES = 256
local MAX_FREE_SEMAPHORES = 4096

local STOPPED, STARTING, RUNNING = "stopped", "starting", "running"
-- a light thread still "starting" after this many seconds lost its timer
local START_GRACE = 5

local W -- this worker's state, see worker()

local function worker()
  local pid = worker_pid()
  local w = W
  if w == nil or w.pid ~= pid then
    -- true: a copy of it inherited through fork() refuses calls (see host_co_invoke)
    local notifier = native._notifier(true)
    if config.batch then
      notifier:_open_batch(0, 0) -- kept open: the flusher hands the outbox over once per turn
    end
    w = {
      pid = pid,
      notifier = notifier,
      waiting = {}, -- token -> semaphore of the request waiting for it, or false (never nil: see
      -- vmpool.lua, "Tables of waiters")
      waiters = 0,
      failed = {}, -- token -> why its waiter was woken without a result (the light thread failed)
      free = {}, -- semaphores ready for reuse (count 0, nobody waiting)
      nfree = 0,
      light_thread = STOPPED,
      light_thread_gen = 0, -- which start of the light thread is the current one
      light_thread_since = 0,
      flush_sem = have_semaphore and semaphore.new() or nil, -- the flusher's; posted when the outbox fills
      flushes = 0,
      exiting = false,
      sentinel = false,
      pools = {}, -- vmpool.ngx.pool(name, ...)
      -- counters of vmpool.ngx.stats()
      waits = 0, wakeups = 0, empty = 0, completions = 0, dropped = 0, timeouts = 0, batched = 0,
      light_thread_starts = 0,
      ffi_calls = 0, ffi_takes = 0, -- calls filed and results taken through the FFI (host_go)
    }
    W = w
  end
  return w
end

-- Wakes the requests of tokens[first..last] (a table from notifier:drain(), or TOKENS).
local function dispatch(w, tokens, first, last)
  local waiting = w.waiting
  for i = first, last do
    local t = tokens[i]
    local sem = waiting[t]
    if sem then
      waiting[t] = false
      w.waiters = w.waiters - 1
      if sem:count() < 0 then
        sem:post(1)
      else
        -- nobody waits on it any more: nginx ended the request (client abort, killed thread)
        w.notifier:_drop(t)
        w.dropped = w.dropped + 1
      end
    else
      -- its request stopped waiting (timed out, or the light thread failed)
      w.failed[t] = nil
      w.dropped = w.dropped + 1
    end
  end
  w.completions = w.completions + (last - first + 1)
end

-- Takes every finished token and wakes their requests; returns how many.
local function drain_and_dispatch(w)
  local notifier = w.notifier
  if C_NGX then
    local total = 0
    while true do
      local k = C_NGX.vmpool_ngx_drain(notifier, TOKENS, TOKENS_CAP)
      dispatch(w, TOKENS, 0, k - 1)
      total = total + k
      if k < TOKENS_CAP then
        return total
      end
    end
  end
  local tokens = notifier:drain()
  local n = #tokens
  dispatch(w, tokens, 1, n)
  return n
end

-- Wakes every waiting request with an error (the light thread cannot run).
local function fail_waiters(w, why)
  local waiting = w.waiting
  w.waiting, w.waiters = {}, 0
  for token, sem in pairs(waiting) do
    if sem then
      w.failed[token] = why
      w.notifier:_drop(token)
      sem:post(1)
    end
  end
end

local light_thread_main, arm_sentinel

-- The light thread's companion (an ngx.thread of the same timer): requests defer their calls to
-- the native outbox and the first of a turn posts w.flush_sem; nginx resumes this thread after the
-- turn's events, and it submits them all at once.
local function flusher(w, ctl)
  local notifier = w.notifier
  while not ctl.stop do
    local ok = ctl.sem:wait(SENTINEL_DELAY)
    if ok then
      -- through the FFI when it can: a C function would end the flusher's trace
      local n = C_NGX and C_NGX.vmpool_ngx_flush(notifier) or -1
      if n < 0 then
        n = notifier:_flush()
      end
      w.batched = w.batched + n
      w.flushes = w.flushes + 1
    end
  end
  notifier:_flush() -- calls deferred while the light thread stopped still go
end

local function start_light_thread(w)
  if w.light_thread ~= STOPPED then
    return true
  end
  if w.exiting or worker_exiting() then
    return nil, "exiting"
  end
  local notifier = w.notifier
  local ok, path = pcall(notifier._doorbell_listen, notifier, config.socket_dir)
  if not ok then
    return nil, path
  end
  w.light_thread_gen = w.light_thread_gen + 1
  local started, err = timer_at(0, light_thread_main, w, path, w.light_thread_gen)
  if not started then
    notifier:_doorbell_close()
    if err == "process exiting" then
      return nil, "exiting"
    end
    return nil, fmt("vmpool: cannot start the light thread that wakes waiting requests: %s "
      .. "(raise lua_max_pending_timers or lua_max_running_timers)", tostring(err))
  end
  w.light_thread = STARTING
  w.light_thread_since = now()
  w.light_thread_starts = w.light_thread_starts + 1
  return true
end

light_thread_main = function(premature, w, path, gen)
  if W ~= w or gen ~= w.light_thread_gen then
    return -- given up for lost (see ensure_light_thread): a newer light thread owns the doorbell
  end
  if premature then
    w.exiting = true -- still serve the requests already waiting
  end
  local notifier = w.notifier
  local sock = tcp()
  sock:settimeouts(5000, 5000, config.idle_timeout * 1000)
  local ok, err = sock:connect("unix:" .. path)
  if ok then
    ok, err = pcall(notifier._doorbell_accept, notifier)
  end
  if not ok then
    sock:close()
    notifier:_doorbell_close()
    w.light_thread = STOPPED
    local why = fmt("vmpool: the light thread cannot connect to its doorbell socket %s: %s "
      .. "(check vmpool.ngx.configure{socket_dir = ...})", path, tostring(err))
    ngx_log(ERR, why)
    fail_waiters(w, why)
    return
  end
  w.light_thread = RUNNING
  arm_sentinel(w)
  if w.sentinel then
    -- worker exit wakes the light thread through the exit watch: no need to look around often
    sock:settimeouts(5000, 5000, WATCHED_READ_TIMEOUT_MS)
  end
  local ctl = { sem = w.flush_sem, stop = false }
  local flush_thread, spawn_err = spawn_thread(flusher, w, ctl)
  if not flush_thread then
    sock:close()
    notifier:_doorbell_close()
    w.light_thread = STOPPED
    local why = "vmpool: cannot start the light thread's flusher: " .. tostring(spawn_err)
    ngx_log(ERR, why)
    fail_waiters(w, why)
    return
  end
  drain_and_dispatch(w)
  local broken
  while true do
    if w.waiters == 0 and (w.exiting or worker_exiting()) then
      break
    end
    local data, rerr = sock:receiveany(RING_BYTES)
    if data then
      w.wakeups = w.wakeups + 1
      if drain_and_dispatch(w) == 0 then w.empty = w.empty + 1 end
    elseif rerr ~= "timeout" then
      broken = rerr
      break
    end
  end
  sock:close()
  notifier:_doorbell_close()
  -- from here on a request starts a new light thread (unless the worker exits), with a new flusher
  w.light_thread = STOPPED
  w.flush_sem = semaphore.new()
  ctl.stop = true
  ctl.sem:post(1)
  wait_thread(flush_thread)
  if broken then
    drain_and_dispatch(w)
    if w.waiters > 0 then
      local restarted, why = start_light_thread(w)
      if not restarted then
        fail_waiters(w, fmt("vmpool: the light thread lost its doorbell socket (%s) and cannot restart: %s",
          tostring(broken), tostring(why)))
      end
    end
  end
end

local function sentinel(premature, w)
  w.sentinel = false
  if W ~= w then
    return
  end
  if premature then
    -- the worker is shutting down (reload, quit): the light thread finishes the waiting requests,
    -- then closes its socket, so nothing is left open when the worker exits
    w.exiting = true
    if w.waiters > 0 then
      ngx_log(NOTICE, "vmpool: worker exiting, finishing ", w.waiters, " waiting request(s) first")
    end
    w.notifier:_wake()
  else
    arm_sentinel(w)
  end
end

arm_sentinel = function(w)
  if w.sentinel or w.exiting then
    return
  end
  local ok, err = timer_at(SENTINEL_DELAY, sentinel, w)
  if ok then
    w.sentinel = true
  else
    ngx_log(WARN, "vmpool: cannot watch for worker exit (", tostring(err), "); an exiting worker may ",
      "take up to vmpool.ngx.configure{idle_timeout} seconds to stop")
  end
end

-- The light thread is needed before a request can wait. True once it runs or starts; false while
-- the worker exits (its light thread is gone for good: callers finish the plain, blocking way).
local function ensure_light_thread(w)
  if w.light_thread == STARTING and now() - w.light_thread_since > START_GRACE then
    -- its timer never ran (nginx drops timers past lua_max_running_timers): start another
    ngx_log(ERR, "vmpool: the light thread did not start within ", START_GRACE, " s (is lua_max_running_timers ",
      "reached?); starting it again")
    w.notifier:_doorbell_close()
    w.light_thread = STOPPED
  end
  if not have_semaphore then
    error("vmpool: ngx.semaphore (lua-resty-core) cannot be loaded: " .. tostring(semaphore)
      .. " (add its directory, e.g. /usr/share/lua/5.1/?.lua, to lua_package_path)", 0)
  end
  local ok, err = start_light_thread(w)
  if ok then
    return true
  elseif err == "exiting" then
    return false
  end
  error(err, 0)
end

-- Yields until the light thread posts token's semaphore. Returns nil when it did; otherwise why
-- the wait ended: the light thread's failure (a string), or false and the semaphore's error
-- ("timeout"). Either way the token no longer has a waiter.
local function sleep_on(w, token, timeout)
  local sem
  local n = w.nfree
  if n > 0 then
    sem = w.free[n]
    w.free[n] = nil
    w.nfree = n - 1
  else
    sem = semaphore.new()
  end
  w.waiting[token] = sem
  w.waiters = w.waiters + 1
  w.waits = w.waits + 1
  local ok, err = sem:wait(timeout)
  if ok then
    local why = w.failed[token]
    if why == nil then
      n = w.nfree
      if n < MAX_FREE_SEMAPHORES then
        w.free[n + 1] = sem
        w.nfree = n + 1
      end
      return nil
    end
    w.failed[token] = nil
    return why
  end
  if w.waiting[token] == sem then
    w.waiting[token] = false
    w.waiters = w.waiters - 1
  end
  return false, err
end

local function gave_up(w, timeout, err)
  w.timeouts = w.timeouts + 1
  return fmt("vmpool: gave up after %gs waiting for the call to finish (%s; it was cancelled if it had "
    .. "not started); raise vmpool.ngx.configure{wait_timeout = seconds} or make the call shorter",
    timeout, tostring(err))
end

local function phase_error(what, phase)
  return fmt("vmpool: %s cannot wait in nginx's %s phase, which cannot yield; call it from "
    .. "rewrite_by_lua, access_by_lua, content_by_lua or an ngx.timer (or use pool:invoke to block "
    .. "the worker on purpose)", what, tostring(phase))
end

-- Yields until token's call finished; raises (the call dropped) if the wait ended otherwise.
local function await_call(w, notifier, token)
  local timeout = config.wait_timeout
  local why, err = sleep_on(w, token, timeout)
  if why ~= nil and not (why == false and notifier:_done(token)) then
    notifier:_drop(token) -- its completion, when it comes, finds no waiter and is dropped
    error(why or gave_up(w, timeout, err), 0)
  end
end

-- The wait and the results of host_co_invoke's call, in a function of its own that it tail-calls:
-- the request resumes inside sleep_on, and LuaJIT cannot compile a return through a vararg
-- function's frame (host_co_invoke's, "NYI: return to lower frame"), so that frame must be gone.
local function finish_call(w, notifier, token)
  await_call(w, notifier, token)
  return notifier:_take(token)
end

-- This worker's state when a call can be filed at once (a phase that yields, the worker's state
-- built and its light thread running), else nil. No pid check: see host_co_invoke.
local function host_ready()
  local w = W
  if w ~= nil and w.light_thread == RUNNING and YIELDS[get_phase()] then
    return w
  end
  return nil
end

local host_co_invoke -- below

-- One argument into its FFI slot; false if the FFI path does not carry it.
local function put_arg(slot, v)
  local t = type(v)
  if t == "number" then
    slot.kind, slot.num = V_NUMBER, v
  elseif t == "string" then
    slot.kind, slot.s, slot.len = V_STRING, v, #v
  elseif t == "boolean" then
    slot.kind = v and V_TRUE or V_FALSE
  elseif t == "nil" then
    slot.kind = V_NIL
  else
    return false
  end
  return true
end

-- notifier:_call(pool, chunk, fn, a1..an) through the FFI: 2 * token + first, or -1 where the
-- FFI does not serve it (then notifier:_call does, with its errors).
local function ffi_call(notifier, pool, chunk, fn, n, a1, a2, a3)
  if not (C_NGX and known_pools[pool] and type(chunk) == "string" and type(fn) == "string")
    or (n > 0 and not put_arg(ARGS[0], a1))
    or (n > 1 and not put_arg(ARGS[1], a2))
    or (n > 2 and not put_arg(ARGS[2], a3)) then
    return -1
  end
  return C_NGX.vmpool_ngx_call(notifier, pool, chunk, #chunk, fn, #fn, n, ARGS)
end

local function result(slot)
  local kind = slot.kind
  if kind == V_NUMBER then
    return slot.num
  elseif kind == V_STRING then
    return ffi_string(slot.s, slot.len)
  elseif kind == V_NIL then
    return nil
  end
  return kind == V_TRUE
end

-- host_go(pool, chunk, fn, n, a1, a2, a3): pool:co_invoke(chunk, fn, a1..an) for n at most
-- MAX_FFI_VALUES (vmpool.lua's co_invoke, when no vmpool.run or other loop drives coroutines).
-- In the common case (host_ready) it files the call (through the FFI when it can), waits, and
-- returns the results (through the FFI when they are a few scalars); otherwise host_co_invoke
-- decides. One function of fixed arity, so that it is one compiled trace up to the yield, and one
-- after it.
local function host_go(pool, chunk, fn, n, a1, a2, a3)
  local w = host_ready()
  if w == nil then
    return with_args(host_co_invoke, pool, chunk, fn, n, a1, a2, a3)
  end
  local notifier = w.notifier
  local token, first
  local r = ffi_call(notifier, pool, chunk, fn, n, a1, a2, a3)
  if r >= 0 then
    first = r % 2 == 1
    token = (r - r % 2) / 2
    w.ffi_calls = w.ffi_calls + 1
  else
    if n == 0 then
      token, first = N_CALL(notifier, pool, chunk, fn)
    elseif n == 1 then
      token, first = N_CALL(notifier, pool, chunk, fn, a1)
    elseif n == 2 then
      token, first = N_CALL(notifier, pool, chunk, fn, a1, a2)
    else
      token, first = N_CALL(notifier, pool, chunk, fn, a1, a2, a3)
    end
    if token == false then
      W = nil -- inherited through fork(): start over with this process's own state
      return with_args(host_co_invoke, pool, chunk, fn, n, a1, a2, a3)
    end
  end
  if first then
    w.flush_sem:post(1)
  end
  await_call(w, notifier, token)
  local k = C_NGX and C_NGX.vmpool_ngx_take(notifier, token, OUT) or -1
  if k >= 0 then
    w.ffi_takes = w.ffi_takes + 1
  end
  if k == 0 then
    return
  elseif k == 1 then
    return result(OUT[0])
  elseif k == 2 then
    return result(OUT[0]), result(OUT[1])
  elseif k == 3 then
    return result(OUT[0]), result(OUT[1]), result(OUT[2])
  end
  return N_TAKE(notifier, token)
end

--- pool:co_invoke(chunk, fn, ...) inside OpenResty, returned to vmpool.lua with the adapter (see
--- its dispatch). The hot path: one native call submits and subscribes, one takes the results; no
--- future object is made.
host_co_invoke = function(pool, chunk, fn, ...)
  local phase = get_phase()
  if YIELDS[phase] then
    -- No pid check here, unlike the other entry points: the worker's state built in another
    -- process (inherited through fork()) has a notifier that refuses the call (a false token),
    -- and the state is then built anew. Asking for the pid was an FFI call that the interpreter
    -- runs, about 600 instructions per request.
    local w = W
    if w == nil then
      w = worker()
    end
    if w.light_thread ~= RUNNING and not ensure_light_thread(w) then
      return pool:invoke(chunk, fn, ...)
    end
    local notifier = w.notifier
    -- deferred in the worker's batch (config.batch): the turn's first call posts the flusher
    local token, first = notifier:_call(pool, chunk, fn, ...)
    if first then
      w.flush_sem:post(1)
    end
    if token == false then
      W = nil -- inherited through fork(): start over with this process's own state
      return host_co_invoke(pool, chunk, fn, ...)
    end
    return finish_call(w, notifier, token)
  elseif BLOCKS[phase] then
    return pool:invoke(chunk, fn, ...)
  end
  error(phase_error("pool:co_invoke", phase), 0)
end

--- pool:co_map(chunk, fn, list [, options]) inside OpenResty: the map's batches run in the pool
--- while the request sleeps on a semaphore between them, woken when the batch it waits for (the
--- first unfinished one, in list order) is done. wait_timeout bounds each of those waits.
local function host_co_map(pool, chunk, fn, list, options)
  local phase = get_phase()
  if YIELDS[phase] then
    local w = W
    if w == nil or w.pid ~= worker_pid() then
      w = worker()
    end
    if w.light_thread ~= RUNNING and not ensure_light_thread(w) then
      return pool:map(chunk, fn, list, options)
    end
    local m, results, errors = native._map(pool, chunk, fn, list, options)
    if type(chunk) == "function" then list = fn end -- pool:co_map(fn, list [, options])
    local notifier = w.notifier
    local timeout = config.wait_timeout
    while not m:_step(list, results, errors) do
      local token = notifier:_token()
      if m:_subscribe(notifier, token) then
        local why, err = sleep_on(w, token, timeout)
        if why ~= nil and not (why == false and m:_ready()) then
          m:_cancel() -- its batches are cancelled; running ones stop after their item
          error(why or gave_up(w, timeout, err), 0)
        end
      end
    end
    return results, errors
  elseif BLOCKS[phase] then
    return pool:map(chunk, fn, list, options)
  end
  error(phase_error("pool:co_map", phase), 0)
end

-- A channel operation's wait (src/lua/vmpool.lua): the request sleeps until the waiter is ready
-- (a channel woke it, the channel closed, or its deadline passed). Each sleep is bounded by a
-- day, since ngx.semaphore needs a timeout; one that ends so just returns, and the operation
-- tries again and files a new wait.
local CHANNEL_SLICE = 86400

local function channel_await(w, target)
  local notifier = w.notifier
  local token = notifier:_token()
  if target:_subscribe(notifier, token) then
    local why = sleep_on(w, token, CHANNEL_SLICE)
    if why then
      error(why, 0) -- the light thread failed
    end
  end
end

-- How a channel operation waits here: (channel_await, worker) in a phase that yields; nil where
-- the worker blocks (init phases, or the light thread is gone); an error elsewhere.
local function host_await_place(what)
  local phase = get_phase()
  if YIELDS[phase] then
    local w = W
    if w == nil or w.pid ~= worker_pid() then
      w = worker()
    end
    if w.light_thread ~= RUNNING and not ensure_light_thread(w) then
      return nil
    end
    return channel_await, w
  elseif BLOCKS[phase] then
    return nil
  end
  error(phase_error(what, phase), 0)
end

--- vmpool.ngx.wait(fut [, timeout]): waits for a future from pool:submit, yielding the request
--- (or blocking in init phases); returns the call's results or raises its error.
function A.wait(fut, timeout)
  local mt = type(fut) == "userdata" and getmetatable(fut)
  if not mt or mt.__index ~= native.future_methods then
    error("vmpool: bad argument #1 to 'vmpool.ngx.wait': expected a future (from pool:submit), got "
      .. type(fut), 0)
  end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0) then
    error("vmpool: bad argument #2 to 'vmpool.ngx.wait': expected a timeout in seconds (non-negative number), got "
      .. tostring(timeout), 0)
  end
  local phase = get_phase()
  if BLOCKS[phase] then
    return fut:wait(timeout)
  elseif not YIELDS[phase] then
    error(phase_error("vmpool.ngx.wait", phase), 0)
  end
  local w = worker()
  if w.light_thread ~= RUNNING and not ensure_light_thread(w) then
    return fut:wait(timeout)
  end
  local notifier = w.notifier
  local token = notifier:_token()
  if not fut:_subscribe(notifier, token) then
    return fut:wait() -- already finished
  end
  timeout = timeout or config.wait_timeout
  local why, err = sleep_on(w, token, timeout)
  if why == nil or (why == false and fut:ready()) then
    return fut:wait()
  end
  fut:cancel()
  error(why or gave_up(w, timeout, err), 0)
end

--- vmpool.ngx.configure{socket_dir =, wait_timeout =, idle_timeout =, batch =}: settings for this
--- worker process (call it in init_by_lua or init_worker_by_lua).
function A.configure(opts)
  if type(opts) ~= "table" then
    error("vmpool: bad argument #1 to 'vmpool.ngx.configure': expected a table, got " .. type(opts), 0)
  end
  for k, v in pairs(opts) do
    if k == "socket_dir" then
      if type(v) ~= "string" or v == "" then
        error("vmpool: vmpool.ngx.configure: socket_dir must be a directory path (string)", 0)
      end
    elseif k == "batch" then
      if type(v) ~= "boolean" then
        error("vmpool: vmpool.ngx.configure: batch must be true or false, got " .. tostring(v), 0)
      end
    elseif k == "wait_timeout" or k == "idle_timeout" then
      if type(v) ~= "number" or v ~= v or v <= 0 or v > 2000000 then
        error(fmt("vmpool: vmpool.ngx.configure: %s must be a number of seconds in (0, 2000000], got %s",
          k, tostring(v)), 0)
      end
    else
      error(fmt("vmpool: vmpool.ngx.configure: unknown option '%s' (known: socket_dir, wait_timeout, "
        .. "idle_timeout, batch)", tostring(k)), 0)
    end
  end
  for k, v in pairs(opts) do
    config[k] = v
  end
  if W ~= nil and opts.batch ~= nil then
    if config.batch then
      W.notifier:_open_batch(0, 0)
    else
      W.notifier:_close_batch()
    end
  end
end

--- vmpool.ngx.pool(name [, create]): this worker's pool called name, made by create() the first
--- time (in this worker process, never in the master); without create, the pool must exist.
function A.pool(name, create)
  if create ~= nil and type(create) ~= "function" then
    error("vmpool: bad argument #2 to 'vmpool.ngx.pool': expected a function that creates the pool, got "
      .. type(create), 0)
  end
  local w = W
  if w ~= nil and w.pid == worker_pid() then
    -- a request asking for its worker's pool, the common case: no phase check, since no pool is
    -- ever filed in init_by_lua
    local pool = w.pools[name]
    if pool ~= nil then
      return pool
    end
  end
  if get_phase() == "init" then
    error("vmpool: vmpool.ngx.pool makes a pool for one nginx worker; call it in init_worker_by_lua or "
      .. "in a request, not in init_by_lua (the master's threads do not survive the fork into workers)", 0)
  end
  if w == nil or w.pid ~= worker_pid() then
    w = worker()
  end
  local pool = w.pools[name]
  if pool ~= nil then
    return pool
  end
  if create == nil then
    error(fmt("vmpool: this worker has no pool named '%s' (create it with vmpool.ngx.pool(name, create), "
      .. "e.g. in init_worker_by_lua)", tostring(name)), 0)
  end
  pool = create()
  if pool == nil then
    error("vmpool: vmpool.ngx.pool: create() returned nothing (return the pool from vmpool.new)", 0)
  end
  w.pools[name] = pool
  return pool
end

--- vmpool.ngx.init_worker(): starts the light thread now instead of at the first wait (optional;
--- call it in init_worker_by_lua).
function A.init_worker()
  ensure_light_thread(worker())
end

--- vmpool.ngx.exit_worker([options]): closes this worker's pools made by vmpool.ngx.pool and the
--- native end of the doorbell (call it in exit_worker_by_lua; a graceful exit has stopped the light
--- thread). Each pool closes with pool:close{ timeout = options.timeout } (default 0: the requests
--- are gone, and on `nginx -s stop` the master kills a worker that does not exit promptly).
function A.exit_worker(options)
  local timeout = 0
  if options ~= nil then
    if type(options) ~= "table" then
      error("vmpool: bad argument #1 to 'exit_worker': expected an options table or nothing, got " .. type(options), 2)
    end
    timeout = options.timeout == nil and 0 or options.timeout
  end
  local w = W
  if w == nil or w.pid ~= worker_pid() then
    return
  end
  w.exiting = true
  w.notifier:_doorbell_close()
  local pools = w.pools
  w.pools = {}
  for _, pool in pairs(pools) do
    pool:close { timeout = timeout }
  end
end

--- vmpool.ngx.stats(): this worker's adapter state and counters.
function A.stats()
  local w = worker()
  local queued, held, deferred = w.notifier:pending()
  return {
    pid = w.pid,
    light_thread = w.light_thread,
    exiting = w.exiting,
    waiting = w.waiters,
    in_flight = w.waiters, -- calls and futures waited for, not yet dispatched
    waits = w.waits,
    resumes = w.completions - w.dropped, -- every completion either wakes its request or is dropped
    early = 0, -- (a request waits on a semaphore: nothing else resumes it)
    wakeups = w.wakeups,
    empty = w.empty,
    completions = w.completions,
    batched = w.batched,
    dropped = w.dropped,
    timeouts = w.timeouts,
    light_thread_starts = w.light_thread_starts,
    queued = queued,
    held = held,
    deferred = deferred,
    flushes = w.flushes,
    ffi_calls = w.ffi_calls,
    ffi_takes = w.ffi_takes,
    free_semaphores = w.nfree,
  }
end

-- Pool states created in nginx get an `ngx` of their own (src/lua/ngx_state.lua): the option
-- ngx_api of vmpool.new, default true here (outside nginx there is no such option); false leaves
-- it out. Its set-up is put before the pool's init code, on the same line so that init's line
-- numbers stay right. Their threads run nicer than the worker (option nice, default
-- native._ngx_nice here, 0 elsewhere: src/config.rs), so that the event loop comes first.
do
  local plain_new = M.new
  local SETUP = 'require("vmpool")._ngx_state() '
  function M.new(options)
    if options == nil then options = {} end
    if type(options) ~= "table" then
      return plain_new(options)
    end
    local copy = {}
    for k, v in pairs(options) do copy[k] = v end
    local api = copy.ngx_api
    copy.ngx_api = nil
    if api ~= nil and type(api) ~= "boolean" then
      error("vmpool: option 'ngx_api' to vmpool.new must be a boolean (got " .. type(api) .. ")", 0)
    end
    if copy.nice == nil then
      copy.nice = native._ngx_nice
    end
    if api ~= false and (copy.init == nil or type(copy.init) == "string") then
      copy.init = SETUP .. (copy.init or "")
    end
    local pool = plain_new(copy)
    known_pools[pool] = true
    return pool
  end
end

return A, host_co_invoke, host_co_map, host_await_place, host_go, MAX_FFI_VALUES
