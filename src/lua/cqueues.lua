-- vmpool.cqueues: the cqueues adapter, compiled into the library and loaded by `require
-- "vmpool.cqueues"` (through package.preload, see vmpool.lua). In any coroutine a cqueues
-- controller runs, pool:co_invoke (and vmpool.cqueues.await) yields, and the controller resumes it
-- when its own call finished:
--
--   waiting coroutine                          dispatcher (one coroutine per pool per controller,
--   token = notifier:_submit(pool, chunk,        alive while that pool has calls in flight there)
--     fn, ...): the call, under a token        cqueues.poll(the notifier's eventfd), which the
--   waiting[token] = cond; cond:wait()         native side writes to when the completion queue
--                                              goes from empty to non-empty
--                                              tokens = notifier:drain() (the eventfd reads back to
--                                              zero); waiting[token]:signal() for each
--   notifier:_take(token) -- the results
--
-- Each waiter sleeps on a condition of its own, so a completion wakes the dispatcher and the one
-- coroutine whose call finished (a future's pollfd, which every waiter polls, wakes them all).
--
-- The calls that the woken coroutines of one batch make are deferred (notifier:_defer) and handed
-- to the pool together (notifier:_flush): waking a sleeping worker costs a system call and a
-- context switch, and one batch then wakes it once, not once per call
-- (bench/results/2026-12-01-futures-and-adapters.md).

local _, native, add_loop, shared = ...

local ok_cqueues, cqueues = pcall(require, "cqueues")
if not ok_cqueues then
  error("vmpool: vmpool.cqueues needs the cqueues module (Debian: apt-get install lua-cqueues; LuaRocks: "
    .. "luarocks install cqueues), which cannot be loaded: " .. tostring(cqueues), 0)
end
local condition = require "cqueues.condition"

local cqueues_running, cqueues_poll = cqueues.running, cqueues.poll
-- Inside a controller's coroutine, cqueues.poll(x) is `coroutine.yield(cqueues._POLL, x)` after a
-- check that one runs (cqueues.lua). The adapter waits only where `drives` found a controller, so
-- it yields the protocol's sentinel itself: one Lua call and one C call less per wait. A cqueues
-- without the sentinel gets the public function.
local POLL = cqueues._POLL
local coroutine_yield = coroutine.yield
local new_condition = condition.new
local coroutine_running = coroutine.running
local setmetatable, pairs = setmetatable, pairs
local isyieldable = coroutine.isyieldable or native._yieldable
local Future = native.future_methods
local future_wait = Future.wait
-- the notifier's methods of the calls path as locals: no lookup through the userdata's metatable
local Notifier = native.notifier_methods
local notifier_submit, notifier_defer, notifier_take = Notifier._submit, Notifier._defer, Notifier._take

local A = {}

-- controller -> (pool -> its notifier, dispatcher and waiters); futures awaited (whatever their
-- pool) share the entry FUTURES of their controller
local loops = setmetatable({}, { __mode = "k" })
local FUTURES = {}
local awaited = setmetatable({}, { __mode = "k" }) -- future -> true while a coroutine awaits it
local free, nfree = {}, 0 -- conditions ready for reuse (nobody waits on them)
local MAX_FREE_CONDITIONS = 4096

-- The counters of vmpool.cqueues.stats(), locals rather than fields of a table: the calls path
-- updates three of them per call, and on Lua 5.1 an upvalue costs less than a table field.
local waits = 0 -- coroutines that waited for a call
local resumes = 0 -- times a waiting coroutine woke up (its call finished, or not: see early)
local early = 0 -- of those, wake-ups that found the call still running
local wakeups = 0 -- dispatcher wake-ups (each drains every finished call of its pool)
local empty = 0 -- of those, wake-ups that found no finished call
local completions = 0 -- tokens the dispatchers took
local dropped = 0 -- tokens whose coroutine had stopped waiting
local dispatchers = 0 -- dispatcher coroutines started
local batched = 0 -- calls woken coroutines made, submitted together

-- what cqueues.poll waits on: the notifier's eventfd, readable while tokens are queued
local Pollable = {}
Pollable.__index = Pollable
function Pollable:pollfd() return self.fd end
function Pollable:events() return "r" end -- luacheck: ignore 212
function Pollable:timeout() return nil end -- luacheck: ignore 212

-- Calls deferred in a batch are submitted at least this often, so that workers start on the
-- first ones while the rest of the batch is resumed.
local FLUSH_EVERY = 64

local function flush(s)
  s.deferred = 0
  s.notifier:_flush()
end

-- The dispatcher signals the coroutines whose calls finished; the calls they make when they run
-- are deferred and submitted together (when the last of them woke, or FLUSH_EVERY calls), so that
-- a batch wakes a sleeping pool worker once, not once per call. It yields a few turns of the
-- controller to make sure the batch is submitted even if some woken coroutine never runs.
local function dispatch(s)
  local notifier, waiting, pollable = s.notifier, s.waiting, s.pollable
  while s.in_flight > 0 do
    if POLL then coroutine_yield(POLL, pollable) else cqueues_poll(pollable) end
    wakeups = wakeups + 1
    local tokens = notifier:drain()
    local n = #tokens
    if n == 0 then empty = empty + 1 end
    s.in_flight = s.in_flight - n
    completions = completions + n
    local signalled = 0
    for i = 1, n do
      local t = tokens[i]
      local cond = waiting[t]
      if cond then
        waiting[t] = nil
        cond:signal()
        signalled = signalled + 1
      else
        notifier:_drop(t)
        dropped = dropped + 1
      end
    end
    if signalled > 0 then
      s.batch_left = signalled
      local turns = 0
      repeat
        if POLL then coroutine_yield(POLL, 0) else cqueues_poll(0) end
        turns = turns + 1
      until s.batch_left == 0 or turns == 3
      s.batch_left = 0
      if s.deferred > 0 then flush(s) end
    end
  end
  s.dispatching = false
end

local function state_of(cq, key)
  local pools = loops[cq]
  if pools == nil then
    pools = setmetatable({}, { __mode = "k" })
    loops[cq] = pools
  end
  local s = pools[key]
  if s == nil then
    local notifier = native._notifier()
    s = { notifier = notifier, waiting = {}, in_flight = 0, dispatching = false, batch_left = 0, deferred = 0 }
    s.pollable = setmetatable({ fd = notifier:_pollfd() }, Pollable)
    pools[key] = s
  end
  return s
end

-- Sleeps until the dispatcher hands back token (a call filed in s, or a future subscribed under
-- it).
local function sleep_on(cq, s, token)
  s.in_flight = s.in_flight + 1
  if not s.dispatching then
    s.dispatching = true
    dispatchers = dispatchers + 1
    cq:wrap(dispatch, s)
  end
  local cond
  if nfree > 0 then
    cond = free[nfree]
    free[nfree] = nil
    nfree = nfree - 1
  else
    cond = new_condition()
  end
  local waiting = s.waiting
  waiting[token] = cond
  waits = waits + 1
  repeat
    -- cond:wait() less its Lua wrapper (a condition is pollable)
    if POLL then coroutine_yield(POLL, cond) else cqueues_poll(cond) end
    resumes = resumes + 1
    local still = waiting[token] == cond
    if still then early = early + 1 end
  until not still
  local left = s.batch_left
  if left > 0 then
    -- woken by the dispatcher's current batch: the last one submits what the others deferred
    s.batch_left = left - 1
    if left == 1 and s.deferred > 0 then flush(s) end
  end
  if nfree < MAX_FREE_CONDITIONS then
    nfree = nfree + 1
    free[nfree] = cond
  end
end

-- `cq`: the controller, from `drives` below (one cqueues.running() per call, not two)
local function co_invoke(cq, pool, chunk, fn, ...)
  local pools = loops[cq]
  local s = pools and pools[pool] or state_of(cq, pool) -- the lookup inline: no call per call
  local notifier = s.notifier
  local token
  if s.batch_left > 0 then
    batched = batched + 1
    token = notifier_defer(notifier, pool, chunk, fn, ...) -- submitted with the rest of the batch
    local d = s.deferred + 1
    s.deferred = d
    if d >= FLUSH_EVERY then flush(s) end
  else
    token = notifier_submit(notifier, pool, chunk, fn, ...)
  end
  sleep_on(cq, s, token)
  return notifier_take(notifier, token)
end

add_loop {
  -- the controller, which co_invoke gets back as its first argument
  drives = function()
    local cq, managed = cqueues_running()
    return managed and cq
  end,
  co_invoke = co_invoke,
}

local check_future, check_not_awaited = shared.check_future, shared.check_not_awaited

--- vmpool.cqueues.await(fut): in a coroutine a cqueues controller runs, yields until the future's
--- call finished, then returns its results (or raises its error). Elsewhere it blocks like
--- fut:wait().
function A.await(fut)
  check_future(fut, "vmpool.cqueues.await")
  local cq, managed = cqueues_running()
  if not (managed and coroutine_running() and isyieldable()) then
    return future_wait(fut)
  end
  check_not_awaited(fut, awaited)
  local s = state_of(cq, FUTURES)
  local token = s.notifier:_token()
  if not fut:_subscribe(s.notifier, token) then
    return future_wait(fut) -- finished already
  end
  awaited[fut] = true
  sleep_on(cq, s, token)
  awaited[fut] = nil
  return future_wait(fut)
end

--- vmpool.cqueues.stats(): the adapter's state in this Lua state (every controller and pool that
--- is still alive) and its counters.
function A.stats()
  local dispatching, in_flight, waiting = 0, 0, 0
  for _, pools in pairs(loops) do
    for _, s in pairs(pools) do
      if s.dispatching then dispatching = dispatching + 1 end
      in_flight = in_flight + s.in_flight
      for _ in pairs(s.waiting) do waiting = waiting + 1 end
    end
  end
  return {
    dispatching = dispatching, -- dispatchers alive (one per pool and controller with calls in flight)
    in_flight = in_flight, -- calls and futures waited for, not yet dispatched
    waiting = waiting, -- coroutines waiting
    waits = waits,
    resumes = resumes,
    early = early,
    wakeups = wakeups,
    empty = empty,
    completions = completions,
    dropped = dropped,
    dispatchers = dispatchers,
    batched = batched,
    free_conditions = nfree,
  }
end

return A
