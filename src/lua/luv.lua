-- vmpool.luv: the luv (libuv) adapter, compiled into the library and loaded by `require
-- "vmpool.luv"` (through package.preload, see vmpool.lua). In a coroutine started by
-- vmpool.luv.spawn, pool:co_invoke (and vmpool.luv.await) yields, and the loop resumes it when its
-- own call finished:
--
--   coroutine                                  the loop (uv.run, or Neovim's vim.loop)
--   token = notifier:_call(pool, chunk,        one poll handle per pool on the pool's notifier
--     fn, ...): the call, under a token        eventfd; the native side writes to it when the
--   waiting[token] = co; coroutine.yield()     completion queue goes from empty to non-empty
--                                              callback: tokens = notifier:drain() (which reads the
--                                              eventfd back to zero), resume waiting[token] each
--   notifier:_take(token) -- the results
--
-- The calls that coroutines make while the callback resumes them are deferred (the callback opens
-- a batch on the notifier, notifier:_open_batch, in which notifier:_call defers) and handed to the
-- pool together every 64 calls and when the callback ends (notifier:_close_batch): waking a
-- sleeping worker costs a system call and a context switch, and one batch then wakes it once, not
-- once per call.
--
-- The poll handle exists only while the pool has calls in flight through this adapter: it is
-- closed when the last one is dispatched, so a loop with no other work ends (uv.run returns), and
-- nothing of the adapter is left behind when the pool goes away.

local _, native, add_loop, shared = ...

-- Inside Neovim the loop is vim.loop (vim.uv from 0.10): a second luv loaded with require would
-- be another libuv loop that nobody runs.
local uv
if type(vim) == "table" and type(vim.uv or vim.loop) == "table" then -- luacheck: ignore 113
  uv = vim.uv or vim.loop -- luacheck: ignore 113
else
  local ok, found = pcall(require, "luv")
  if not ok then
    error("vmpool: vmpool.luv needs the luv module (Debian: apt-get install lua-luv; LuaRocks: luarocks "
      .. "install luv), which cannot be loaded: " .. tostring(found), 0)
  end
  uv = found
end

local coroutine_running, coroutine_yield = coroutine.running, coroutine.yield
local coroutine_create, coroutine_resume = coroutine.create, coroutine.resume
local error, pcall, tostring, type, select, setmetatable, pairs =
  error, pcall, tostring, type, select, setmetatable, pairs
local traceback = debug and debug.traceback
local isyieldable = coroutine.isyieldable or native._yieldable
local Future = native.future_methods
local future_wait = Future.wait

local A = {
  --- Called with the message (and traceback) of a coroutine of vmpool.luv.spawn that failed while
  --- the loop resumed it. nil (the default): the error is raised in the loop's callback, as an
  --- error of any luv callback is (standalone luv prints it and exits; Neovim reports it).
  on_error = nil,
}

local driven = setmetatable({}, { __mode = "k" }) -- coroutines started by spawn
-- pool -> its notifier, poll handle and waiters; futures awaited (whatever their pool) share the
-- entry FUTURES
local states = setmetatable({}, { __mode = "k" })
local FUTURES = {}
-- the resume value that says "your call finished" (anything else is someone else's resume)
local FINISHED = setmetatable({}, { __tostring = function() return "vmpool.luv.finished" end })

-- The counters of vmpool.luv.stats(), locals rather than fields of a table: the calls path
-- updates two of them per call, and an upvalue costs less than a table field.
local waits = 0 -- coroutines that yielded for a call
local resumes = 0 -- coroutines the loop resumed because their call finished
local wakeups = 0 -- poll callbacks (each drains every finished call of its pool)
local empty = 0 -- of those, callbacks that found no finished call
local completions = 0 -- tokens the callbacks took
local dropped = 0 -- tokens whose coroutine had stopped waiting
local early = 0 -- waiting coroutines resumed by something other than the adapter
local watchers_opened = 0
local batched = 0 -- calls a poll callback's coroutines made, submitted together

-- the notifier's methods of the calls path as locals: no lookup through the userdata's metatable
local Notifier = native.notifier_methods
local notifier_call, notifier_take, notifier_drop = Notifier._call, Notifier._take, Notifier._drop

local describe = shared.describe -- an error value as text, even if its __tostring raises

-- The message of a coroutine of the adapter that died with err.
local function failure(co, err)
  local text = describe(err)
  if traceback then
    text = traceback(co, text)
  end
  return "vmpool: a coroutine of vmpool.luv.spawn failed: " .. text
end

-- Resumes a coroutine of the adapter; returns the failure message if it died with an error.
local function step(co, ...)
  local ok, err = coroutine_resume(co, ...)
  if ok then
    return nil
  end
  return failure(co, err)
end

-- The failures of one poll callback (`whys`, in the order the coroutines ran): each goes to
-- vmpool.luv.on_error; without a handler one error carries them all.
local function failed(whys)
  local handler = A.on_error
  if handler then
    for i = 1, #whys do
      handler(whys[i])
    end
    return
  end
  local text = whys[1]
  if #whys > 1 then
    text = text .. "\n" .. (#whys - 1) .. " more coroutine(s) of vmpool.luv.spawn failed in the same "
      .. "poll callback (set vmpool.luv.on_error to get each failure on its own):\n"
      .. table.concat(whys, "\n", 2)
  end
  error(text, 0)
end

local function close_watcher(s)
  local handle = s.handle
  if handle then
    s.handle = nil
    handle:stop()
    handle:close()
  end
end

-- The poll callback of pool state s: every finished call's coroutine is resumed, once. The calls
-- those coroutines make meanwhile are deferred and submitted together (every 64 calls,
-- and at the end), so that a batch wakes a sleeping pool worker once, not once per call.
local function dispatcher(s)
  return function()
    wakeups = wakeups + 1
    local notifier = s.notifier
    local tokens = notifier:drain()
    local waiting = s.waiting
    local n = #tokens
    if n == 0 then empty = empty + 1 end
    s.in_flight = s.in_flight - n
    completions = completions + n
    local whys -- the failures, if any (a table only then)
    notifier:_open_batch(0) -- closed below
    for i = 1, n do
      local t = tokens[i]
      local co = waiting[t]
      if co then
        waiting[t] = false
        resumes = resumes + 1
        -- step(co, FINISHED), inline: one Lua call less per call
        local ok, err = coroutine_resume(co, FINISHED)
        if not ok then
          whys = whys or {}
          whys[#whys + 1] = failure(co, err)
        end
      else
        -- its coroutine stopped waiting (resumed early): nobody takes the result
        notifier_drop(notifier, t)
        dropped = dropped + 1
      end
    end
    batched = batched + notifier:_close_batch()
    if s.in_flight == 0 then
      close_watcher(s)
    end
    if whys then
      failed(whys)
    end
  end
end

local function state_of(pool)
  local s = states[pool]
  if s == nil then
    local notifier = native._notifier()
    -- waiting: token -> its waiting coroutine, or false once nobody waits (never nil: see
    -- vmpool.lua, "Tables of waiters")
    s = { notifier = notifier, fd = notifier:_pollfd(), waiting = {}, in_flight = 0, handle = nil }
    s.on_ready = dispatcher(s)
    states[pool] = s
  end
  return s
end

local function open_watcher(s)
  local handle, err = uv.new_poll(s.fd)
  if handle then
    local ok, start_err = handle:start("r", s.on_ready)
    if ok then
      s.handle = handle
      watchers_opened = watchers_opened + 1
      return
    end
    handle:close()
    err = start_err
  end
  error("vmpool: vmpool.luv cannot watch the pool's wake-up descriptor: " .. tostring(err)
    .. " (is the luv loop closed?)", 0)
end

-- Called before a future is subscribed: once its token exists it must find a watcher, or it
-- would never be dispatched.
local function watch(s)
  if s.handle == nil then
    open_watcher(s)
  end
end

-- After a subscription that was not needed: the watcher goes if nothing else is in flight.
local function unwatch(s)
  if s.in_flight == 0 then
    close_watcher(s)
  end
end

-- Yields the running coroutine until the loop hands back token (a call filed in s, or a future
-- subscribed under it; the watcher is open). Returns true if the adapter resumed it; false if
-- something else resumed it first (the token then has no waiter any more).
local function sleep_on(s, token, co)
  s.in_flight = s.in_flight + 1
  s.waiting[token] = co
  waits = waits + 1
  if coroutine_yield() == FINISHED then
    return true
  end
  if s.waiting[token] == co then
    s.waiting[token] = false
  end
  early = early + 1
  return false
end

local function resumed_early(what)
  return "vmpool: " .. what .. " was waiting for its call in a coroutine of vmpool.luv.spawn, and something "
    .. "other than vmpool.luv resumed that coroutine before the call finished (resume only coroutines "
    .. "that do not wait in vmpool, or wait for your own events in another coroutine)"
end

-- `co`: the running coroutine, which `drives` below hands over as its "driver"
local function co_invoke(co, pool, chunk, fn, ...)
  local s = states[pool] or state_of(pool)
  local notifier = s.notifier
  -- deferred inside this pool's poll callback (its batch is open, and so is its watcher), which
  -- submits the batch; submitted otherwise. A refused call raises here, before a watcher exists
  -- for it; a call that finishes before the watcher opens leaves the descriptor readable
  -- (level-triggered), so it is not missed.
  local token = notifier_call(notifier, pool, chunk, fn, ...)
  if s.handle == nil then
    local opened, err = pcall(watch, s)
    if not opened then
      notifier_drop(notifier, token)
      error(err, 0)
    end
  end
  if sleep_on(s, token, co) then
    return notifier_take(notifier, token)
  end
  notifier_drop(notifier, token) -- not started: cancelled; its completion finds no waiter
  error(resumed_early("pool:co_invoke"), 0)
end

-- Yields `co` until `target` (a future, or a map of co_map) finishes what it waits for, subscribed
-- with target:_subscribe(notifier, token) on the entry FUTURES. True once it did (or had already);
-- false if something else resumed `co` first. A target with `unsubscribe` drops its subscription
-- then, unless its completion is queued already (the poll callback drains that as usual): left
-- behind, its token would count as in flight until it finished.
local function wait_for(co, target, unsubscribe)
  local s = states[FUTURES] or state_of(FUTURES)
  local notifier = s.notifier
  local token = notifier:_token()
  watch(s)
  if not target:_subscribe(notifier, token) then
    unwatch(s)
    return true -- finished already
  end
  if sleep_on(s, token, co) then
    return true
  end
  if unsubscribe and unsubscribe(target, notifier, token) then
    s.in_flight = s.in_flight - 1
    unwatch(s)
  end
  return false
end

local native_map = native._map

-- pool:co_map in a coroutine of spawn: the map's batches run in the pool while the coroutine
-- sleeps between them, woken when the batch it waits for (the first unfinished one) is done.
local function co_map(co, pool, chunk, fn, list, options)
  local m, results, errors = native_map(pool, chunk, fn, list, options)
  if type(chunk) == "function" then list = fn end -- pool:co_map(fn, list [, options])
  while not m:_step(list, results, errors) do
    if not wait_for(co, m) and not m:_ready() then
      m:_cancel() -- its batches are cancelled; running ones stop after their item
      error(resumed_early("pool:co_map"), 0)
    end
  end
  return results, errors
end

add_loop {
  -- the coroutine itself as the driver: co_invoke needs it, and gets it without a call
  drives = function(co) return co, driven[co] == true end,
  co_invoke = co_invoke,
  co_map = co_map,
  -- a channel operation's waiter (src/lua/vmpool.lua): resumed early, the operation tries again
  await = function(co, w) wait_for(co, w, w._unsubscribe) end,
}

local check_future = shared.check_future

--- vmpool.luv.await(fut): in a coroutine of vmpool.luv.spawn, yields until the future's call
--- finished, then returns its results (or raises its error). Elsewhere it blocks like fut:wait().
function A.await(fut)
  check_future(fut, "vmpool.luv.await")
  local co = coroutine_running()
  if not (co and driven[co] and isyieldable()) then
    return future_wait(fut)
  end
  if wait_for(co, fut, fut._unsubscribe) or fut:ready() then
    return future_wait(fut)
  end
  error(resumed_early("vmpool.luv.await"), 0)
end

local function pack(...)
  return { n = select("#", ...), ... }
end
local unpack = table.unpack or unpack -- luacheck: ignore 143

--- vmpool.luv.spawn(fn, ...): runs fn(...) in a new coroutine at once, up to its first wait;
--- pool:co_invoke and vmpool.luv.await yield there, and the loop resumes the coroutine when the
--- call finished. Returns the coroutine. An error before the first wait is raised by spawn; a
--- later one goes to vmpool.luv.on_error (or is raised in the loop's callback).
function A.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("vmpool: bad argument #1 to 'vmpool.luv.spawn': expected a function, got " .. type(fn), 0)
  end
  local co
  if select("#", ...) == 0 then
    co = coroutine_create(fn)
  else
    local args = pack(...)
    co = coroutine_create(function() return fn(unpack(args, 1, args.n)) end)
  end
  driven[co] = true
  local why = step(co)
  if why then
    error(why, 0)
  end
  return co
end

--- vmpool.luv.stats(): the adapter's state in this Lua state (every pool) and its counters.
function A.stats()
  local watchers, in_flight, waiting, queued, held, deferred = 0, 0, 0, 0, 0, 0
  for _, s in pairs(states) do
    if s.handle then watchers = watchers + 1 end
    in_flight = in_flight + s.in_flight
    -- a pool collected in this very cycle may have left its state with a finalized notifier
    local live, q, h, d = pcall(s.notifier.pending, s.notifier)
    if live then queued, held, deferred = queued + q, held + h, deferred + d end
    for _, co in pairs(s.waiting) do
      if co then waiting = waiting + 1 end
    end
  end
  return {
    watchers = watchers, -- poll handles open (one per pool with calls in flight)
    in_flight = in_flight, -- calls and futures waited for, not yet dispatched
    waiting = waiting, -- coroutines waiting
    queued = queued, -- finished calls whose completion the next poll callback takes
    held = held, -- calls filed under a token, not yet taken
    deferred = deferred, -- calls of an open batch, not yet handed to the pool
    waits = waits,
    resumes = resumes,
    wakeups = wakeups,
    empty = empty,
    completions = completions,
    dropped = dropped,
    early = early,
    watchers_opened = watchers_opened,
    batched = batched,
  }
end

A.loop = uv

return A
