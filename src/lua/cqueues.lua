-- vmpool.cqueues: the cqueues adapter, compiled into the library and loaded by `require
-- "vmpool.cqueues"` (through package.preload, see vmpool.lua). In any coroutine a cqueues
-- controller runs, pool:co_invoke (and vmpool.cqueues.await) yields, and the controller resumes it
-- when its own call finished:
--
--   waiting coroutine                          dispatcher (one coroutine per pool per controller,
--   token = notifier:_call(pool, chunk,        alive while that pool has calls in flight there)
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
-- The calls that the woken coroutines of one batch make are handed to the pool together: the
-- dispatcher opens a batch on the notifier (notifier:_open_batch), in which notifier:_call defers,
-- and the batch closes (submitting them) when every woken coroutine took its results, or after a
-- few turns of the controller. Waking a sleeping worker costs a system call and a context switch,
-- and one batch then wakes it once, not once per call.

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
-- wait_on(POLL, x) waits for x: the sentinel's yield, or (without one) cqueues.poll(x)
local wait_on = POLL and coroutine.yield or function(_, x) return cqueues_poll(x) end
local new_condition = condition.new
local cond_signal = new_condition().signal -- the method itself: no lookup through the metatable
local coroutine_running = coroutine.running
local setmetatable, pairs = setmetatable, pairs
local isyieldable = coroutine.isyieldable or native._yieldable
local Future = native.future_methods
local future_wait = Future.wait
-- the notifier's methods of the calls path as locals: no lookup through the userdata's metatable
local Notifier = native.notifier_methods
local notifier_call, notifier_take = Notifier._call, Notifier._take

local A = {}

-- controller -> (pool -> its notifier, dispatcher and waiters); futures awaited (whatever their
-- pool) share the entry FUTURES of their controller
local loops = setmetatable({}, { __mode = "k" })
local FUTURES = {}
-- Each token of a notifier keeps its condition (s.conds[token]) for the next call under that
-- token: tokens are small and reused, and a lookup costs less than a free list's pop and push. A
-- dispatcher whose calls all finished drops them if more than this many piled up.
local MAX_KEPT_CONDITIONS = 4096

-- The counters of vmpool.cqueues.stats(), locals rather than fields of a table: the calls path
-- updates three of them per call, and on Lua 5.1 an upvalue costs less than a table field.
local waits = 0 -- coroutines that waited for a call
local woken = 0 -- waiting coroutines woken with their call finished
local early = 0 -- times a waiting coroutine woke up with its call still running
local wakeups = 0 -- dispatcher wake-ups (each drains every finished call of its pool)
local empty = 0 -- of those, wake-ups that found no finished call
local completions = 0 -- tokens the dispatchers took
local dropped = 0 -- tokens whose coroutine had stopped waiting
local dispatchers = 0 -- dispatcher coroutines started
local batched = 0 -- calls woken coroutines made, submitted together (counted at each batch's end)

-- what cqueues.poll waits on: the notifier's eventfd, readable while tokens are queued
local Pollable = {}
Pollable.__index = Pollable
function Pollable:pollfd() return self.fd end
function Pollable:events() return "r" end -- luacheck: ignore 212
function Pollable:timeout() return nil end -- luacheck: ignore 212

-- The dispatcher signals the coroutines whose calls finished; the calls they make when they run
-- are deferred and submitted together (when the last of them took its results, and every 64
-- calls), so that a batch wakes a sleeping pool worker once, not once per call. It yields a few
-- turns of the controller, then closes the batch itself: a woken coroutine may never run.
local function dispatch(s)
  local notifier, waiting, pollable = s.notifier, s.waiting, s.pollable
  while s.in_flight > 0 do
    wait_on(POLL, pollable)
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
        waiting[t] = false
        cond_signal(cond)
        signalled = signalled + 1
      else
        notifier:_drop(t)
        dropped = dropped + 1
      end
    end
    if signalled > 0 then
      notifier:_open_batch(signalled)
      local turns = 0
      repeat
        wait_on(POLL, 0)
        turns = turns + 1
      until turns == 3 or not notifier:_batch_open()
      batched = batched + notifier:_close_batch()
    end
  end
  s.dispatching = false
  if s.nconds > MAX_KEPT_CONDITIONS then
    s.conds, s.nconds = {}, 0
  end
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
    -- waiting: token -> the condition its coroutine waits on, or false (never nil: see
    -- vmpool.lua, "Tables of waiters")
    s = {
      notifier = notifier, waiting = {}, conds = {}, nconds = 0, in_flight = 0, dispatching = false,
    }
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
  local conds = s.conds
  local cond = conds[token]
  if cond == nil then
    cond = new_condition()
    conds[token] = cond
    s.nconds = s.nconds + 1
  end
  local waiting = s.waiting
  waiting[token] = cond
  waits = waits + 1
  -- cond:wait() less its Lua wrapper (a condition is pollable); the dispatcher clears
  -- waiting[token] before it signals
  wait_on(POLL, cond)
  while waiting[token] == cond do
    early = early + 1 -- resumed by other code: the call still runs
    wait_on(POLL, cond)
  end
  woken = woken + 1
end

-- `cq`: the controller, from `drives` below (one cqueues.running() per call, not two)
local function co_invoke(cq, pool, chunk, fn, ...)
  local pools = loops[cq]
  local s = pools and pools[pool] or state_of(cq, pool) -- the lookup inline: no call per call
  local notifier = s.notifier
  -- deferred while the dispatcher's batch is open, submitted otherwise
  local token = notifier_call(notifier, pool, chunk, fn, ...)
  sleep_on(cq, s, token)
  return notifier_take(notifier, token) -- the batch's last take submits it
end

-- Sleeps until `target` (a future, or a map of co_map), subscribed on the controller's entry
-- FUTURES, finishes what it waits for (at once if it had).
local function wait_for(cq, target)
  local s = state_of(cq, FUTURES)
  local token = s.notifier:_token()
  if target:_subscribe(s.notifier, token) then
    sleep_on(cq, s, token)
  end
end

local native_map = native._map

-- pool:co_map in a coroutine of a controller: the map's batches run in the pool while the
-- coroutine sleeps between them, woken when the batch it waits for (the first unfinished one) is
-- done.
local function co_map(cq, pool, chunk, fn, list, options)
  local m, results, errors = native_map(pool, chunk, fn, list, options)
  if type(chunk) == "function" then list = fn end -- pool:co_map(fn, list [, options])
  while not m:_step(list, results, errors) do
    wait_for(cq, m)
  end
  return results, errors
end

add_loop {
  -- cqueues.running() returns the controller (which co_invoke gets back as its first argument)
  -- and whether that controller runs this coroutine: drives's contract, with no Lua call
  drives = cqueues_running,
  co_invoke = co_invoke,
  co_map = co_map,
  await = wait_for, -- a channel operation's waiter (src/lua/vmpool.lua)
}

local check_future = shared.check_future

--- vmpool.cqueues.await(fut): in a coroutine a cqueues controller runs, yields until the future's
--- call finished, then returns its results (or raises its error). Elsewhere it blocks like
--- fut:wait().
function A.await(fut)
  check_future(fut, "vmpool.cqueues.await")
  local cq, managed = cqueues_running()
  if not (managed and coroutine_running() and isyieldable()) then
    return future_wait(fut)
  end
  wait_for(cq, fut)
  return future_wait(fut)
end

--- vmpool.cqueues.stats(): the adapter's state in this Lua state (every controller and pool that
--- is still alive) and its counters.
function A.stats()
  local dispatching, in_flight, waiting, conditions, queued, held, deferred = 0, 0, 0, 0, 0, 0, 0
  for _, pools in pairs(loops) do
    for _, s in pairs(pools) do
      if s.dispatching then dispatching = dispatching + 1 end
      in_flight = in_flight + s.in_flight
      local live, q, h, d = pcall(s.notifier.pending, s.notifier)
      if live then queued, held, deferred = queued + q, held + h, deferred + d end
      for _, cond in pairs(s.waiting) do
        if cond then waiting = waiting + 1 end
      end
      conditions = conditions + s.nconds
    end
  end
  return {
    dispatching = dispatching, -- dispatchers alive (one per pool and controller with calls in flight)
    in_flight = in_flight, -- calls and futures waited for, not yet dispatched
    waiting = waiting, -- coroutines waiting
    queued = queued, -- finished calls whose completion the next dispatcher wake-up takes
    held = held, -- calls filed under a token, not yet taken
    deferred = deferred, -- calls of an open batch, not yet handed to the pool
    waits = waits,
    resumes = woken + early, -- times a waiting coroutine woke up
    early = early,
    wakeups = wakeups,
    empty = empty,
    completions = completions,
    dropped = dropped,
    dispatchers = dispatchers,
    batched = batched,
    free_conditions = conditions - waiting, -- kept for the next call under their token
  }
end

return A
