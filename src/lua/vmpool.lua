-- The Lua half of vmpool, compiled into the library and run once by `require "vmpool"` with the
-- native table as its argument. It adds what is easiest to say in Lua: the coroutine-aware call
-- (`pool:co_invoke`) and a small scheduler for plain Lua (`vmpool.run`, `vmpool.spawn`).

local native = ...

local coroutine_running, coroutine_yield = coroutine.running, coroutine.yield
local coroutine_create, coroutine_resume, coroutine_status = coroutine.create, coroutine.resume, coroutine.status
local unpack = table.unpack or unpack -- luacheck: ignore 143
local select, setmetatable, error, tostring = select, setmetatable, error, tostring
local type, pcall, pairs = type, pcall, pairs
-- whether the running coroutine can yield here (Lua 5.1 and 5.2 ask the native side)
local isyieldable = coroutine.isyieldable or native._yieldable

local M = {
  _VERSION = native._VERSION,
  runtime = native.runtime,
  _sys = native._sys, -- "linux" or "portable" (the portable-sys build: src/sys.rs), for the specs
  shared = native.shared, -- on LuaJIT, wrapped below (the FFI path of its methods)
  _ngx_state = native._ngx_state, -- pool states in nginx: sets their `ngx` (src/lua/ngx_state.lua)
  new = native.new,
  clock = native.clock,
  memory = native.memory,
  _function_cache = native._function_cache, -- loads, hits of functions sent as callees (specs)
  _limit_hook = native._limit_hook, -- "thread", "signal" or "count": how time limits stop calls
  --- Schedulers other than vmpool.run plug in here (see the README): called as awaiter(fut) inside
  --- a coroutine, it must return once fut:ready() is true, yielding meanwhile.
  awaiter = nil,
}

local Pool = native.pool_methods
local Future = native.future_methods
local pool_invoke, pool_submit, pool_map = Pool.invoke, Pool.submit, Pool.map
local native_map = native._map
local Map = native.map_methods
local map_step = Map._step

--- cqueues' polling protocol: a future can be passed to cqueues.poll.
function Future:events() return "r" end -- luacheck: ignore 212
function Future:timeout() return nil end -- luacheck: ignore 212

local function pack(...)
  return { n = select("#", ...), ... }
end

-- Yielded by a coroutine that waits for a call; anything else it yields just reschedules it.
local WAIT = setmetatable({}, { __tostring = function() return "vmpool.wait" end })

-- The vmpool.run driver of each coroutine it runs (weak: finished coroutines go away).
local driver_of = setmetatable({}, { __mode = "k" })
-- how many coroutines driver_of holds (0: no coroutine is vmpool.run's, which OpenResty's common
-- case of co_invoke checks without coroutine.running, a function LuaJIT does not compile)
local ndriven = 0

local Driver = {}
Driver.__index = Driver

-- Inside OpenResty, co_invoke and co_map outside vmpool.run are src/lua/ngx.lua's, which decide
-- by the request phase (set below, where the adapter is loaded).
local host_co_invoke, host_co_map, host_await_place

-- The event-loop adapters loaded (vmpool.luv, vmpool.cqueues), each { drives = function(co) ->
-- driver, driven (driven true if that loop resumes co; driver is handed back to co_invoke),
-- co_invoke = function(driver, pool, chunk, fn, ...), co_map = function(driver, pool, chunk, fn,
-- list, options) }, tried in order. (Two results so that
-- cqueues.running, which returns the controller and whether it runs this coroutine, is one.)
local loops = {}
-- the first adapter's functions as upvalues: a program uses one loop, and its calls then cost no
-- walk over the list (the adapter that drove the last call found by the walk goes first)
local first_drives, first_co_invoke
local function add_loop(adapter)
  loops[#loops + 1] = adapter
  if #loops == 1 then
    first_drives, first_co_invoke = adapter.drives, adapter.co_invoke
  end
end

-- The adapter after the first that drives `co`, and its driver; it goes first from now on (a
-- program that loaded both adapters but runs one loop).
local function other_loop(co)
  for i = 2, #loops do
    local loop = loops[i]
    local driver, driven = loop.drives(co)
    if driven then
      loops[i], loops[1] = loops[1], loop
      first_drives, first_co_invoke = loop.drives, loop.co_invoke
      return loop, driver
    end
  end
end

-- The adapter that drives `co` (any of them), and its driver.
local function loop_of(co)
  local driver, driven = first_drives(co)
  if driven then
    return loops[1], driver
  end
  return other_loop(co)
end

local function in_coroutine()
  local co, main = coroutine_running()
  if co == nil or main then
    return nil
  end
  return co
end

-- vmpool.run files its calls in a notifier, the registry of waits every scheduler uses
-- (src/host/waits.rs)
local Native = native.notifier_methods
local native_submit, native_result, native_wait = Native._call, Native._take, Native._collect
local native_watch, native_unwatch = Native._watch, Native._unwatch
local native_batch, native_flush = Native._open_batch, Native._close_batch


function Driver:spawn(fn, ...)
  local args = pack(...)
  local co = coroutine_create(function() return fn(unpack(args, 1, args.n)) end)
  driver_of[co] = self
  ndriven = ndriven + 1
  self.live = self.live + 1
  self.ready[#self.ready + 1] = co
  return co
end

-- An error value as text, even if its __tostring raises.
local function describe(e)
  local fine, text = pcall(tostring, e)
  if fine and type(text) == "string" then
    return text
  end
  return "(error object is a " .. type(e) .. " value whose __tostring failed)"
end

-- Whether `v` is a future of this library (pool:submit's).
local function is_future(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__index == Future
end

-- The argument check of the adapters' await(fut) (`name`: 'vmpool.luv.await', ...).
local function check_future(fut, name)
  if not is_future(fut) then
    error("vmpool: bad argument #1 to '" .. name .. "': expected a future (from pool:submit), got "
      .. type(fut), 0)
  end
end

-- Tables of waiters keyed by call token (`waiting` here, in vmpool.luv, vmpool.cqueues and
-- vmpool.ngx) mark a token nobody waits for with false, never nil. Tokens are small and dense (a
-- token is reused once its call is done; src/token_map.rs), so every token stays a key, the table
-- stops growing at the most calls ever in flight, and Lua keeps it in its array part. Cleared
-- with nil, the keys come and go and Lua rehashes the table as they do: a call under vmpool.luv
-- cost the loop's thread 10,863 instructions with nil, 8,816 with false (Lua 5.4, callgrind).

-- What the event-loop adapters share with this file (their fourth argument).
local shared = {
  describe = describe, is_future = is_future, check_future = check_future,
}

-- A coroutine waiting for `token` was resumed by something other than the driver.
function Driver:resumed_early(co, token)
  if self.waiting[token] == co then
    self.waiting[token] = false
  end
  -- it may be in the woken list already: the driver then checks before it resumes it; and it
  -- may end under that other code's resume, where the driver does not see it end
  self.early = self.early + 1
  self.strays[co] = true
end

-- Counts the coroutines resumed early that ended meanwhile (before the driver sleeps: it must
-- not wait for coroutines that are gone).
function Driver:collect_strays()
  for co in pairs(self.strays) do
    if coroutine_status(co) == "dead" then
      self.strays[co] = nil
      if driver_of[co] == self then
        driver_of[co] = nil
        ndriven = ndriven - 1
        self.live = self.live - 1
      end
    end
  end
end

-- After resuming `co`, when it did not simply yield to wait for a call.
function Driver:stepped(co, ok, first)
  if coroutine_status(co) == "dead" then
    if driver_of[co] == self then
      self.live = self.live - 1
      driver_of[co] = nil
      ndriven = ndriven - 1
    end
    self.strays[co] = nil
    if not ok then
      -- the run ends here: its other coroutines are no longer driven
      for other, d in pairs(driver_of) do
        if d == self then
          driver_of[other] = nil
          ndriven = ndriven - 1
        end
      end
      -- the calls already made in this wake-up's batch go to the pool, like every call in
      -- flight when a run fails (they finish there; their results are dropped)
      native_flush(self.native)
      local text = describe(first)
      local tb = debug and debug.traceback and debug.traceback(co, text) or text
      error("vmpool: a coroutine in vmpool.run failed: " .. tb, 0)
    end
  elseif first ~= WAIT then
    self.ready[#self.ready + 1] = co
  end
end

-- f(a, b, c, a1..an) for n (at most 3) arguments held in fixed parameters (OpenResty's co_invoke
-- below, and src/lua/ngx.lua)
local function with_args(f, a, b, c, n, a1, a2, a3)
  if n == 0 then
    return f(a, b, c)
  elseif n == 1 then
    return f(a, b, c, a1)
  elseif n == 2 then
    return f(a, b, c, a1, a2)
  end
  return f(a, b, c, a1, a2, a3)
end

--- pool:co_invoke(chunk, fn, ...): like invoke, but yields the running coroutine while the call
--- runs (under vmpool.run, or a scheduler set as vmpool.awaiter). Outside a coroutine, or in a
--- coroutine no scheduler drives, it blocks like invoke.
---
--- Where the coroutine cannot yield (a table.sort comparator, a string.gsub callback, a metamethod
--- on 5.1, pcall on 5.1), the call is made as a blocking invoke: nothing is submitted that the
--- coroutine could not wait for.
local function plain_co_invoke(self, chunk, fn, ...)
  if type(self) ~= "userdata" then
    error("vmpool: bad argument #1 to 'co_invoke': expected a pool, got " .. type(self)
      .. " (call it as pool:co_invoke(...), with a colon)", 0)
  end
  local co = coroutine_running()
  local d = driver_of[co]
  if d and not isyieldable() then
    return pool_invoke(self, chunk, fn, ...)
  end
  if d then
    -- under vmpool.run: submitted natively (no future object); the coroutine yields until the
    -- call's token comes back from native_wait
    local token = native_submit(d.native, self, chunk, fn, ...)
    d.waiting[token] = co
    if coroutine_yield(WAIT) ~= token then
      -- resumed by other code (or by the driver, for a call it waited for before): the call is
      -- not known to be done, and native_result waits for it; its completion wakes nobody
      d:resumed_early(co, token)
    end
    return native_result(d.native, token, true)
  end
  if co and first_drives and isyieldable() then
    local driver, driven = first_drives(co)
    if driven then
      return first_co_invoke(driver, self, chunk, fn, ...)
    end
    local loop
    loop, driver = other_loop(co)
    if loop then
      return loop.co_invoke(driver, self, chunk, fn, ...)
    end
  end
  if host_co_invoke then
    return host_co_invoke(self, chunk, fn, ...)
  end
  if in_coroutine() and isyieldable() then
    local awaiter = M.awaiter
    if awaiter then
      local fut = pool_submit(self, chunk, fn, ...)
      awaiter(fut)
      return fut:wait()
    end
  end
  return pool_invoke(self, chunk, fn, ...)
end
Pool.co_invoke = plain_co_invoke -- inside OpenResty, wrapped where the adapter is loaded

--- pool:co_map(chunk, fn, list [, options]): like map, but yields the running coroutine while
--- the batches run (under vmpool.run, vmpool.luv, vmpool.cqueues, or inside OpenResty);
--- elsewhere, and where the coroutine cannot yield, exactly like map.
function Pool:co_map(chunk, fn, list, options)
  if type(self) ~= "userdata" then
    error("vmpool: bad argument #1 to 'co_map': expected a pool, got " .. type(self)
      .. " (call it as pool:co_map(...), with a colon)", 0)
  end
  local d = driver_of[coroutine_running()]
  if d and isyieldable() then
    local m, results, errors = native_map(self, chunk, fn, list, options)
    if type(chunk) == "function" then list = fn end -- pool:co_map(fn, list [, options])
    while not map_step(m, list, results, errors) do
      local token = native_watch(d.native, m)
      if token then
        d.waiting[token] = coroutine_running()
        coroutine_yield(WAIT)
        native_unwatch(d.native, token)
      end
    end
    return results, errors
  end
  local co = coroutine_running()
  if co and first_drives and isyieldable() then
    local loop, driver = loop_of(co)
    if loop then
      return loop.co_map(driver, self, chunk, fn, list, options)
    end
  end
  if host_co_map then
    return host_co_map(self, chunk, fn, list, options)
  end
  return pool_map(self, chunk, fn, list, options)
end

-- Channels and select (src/host/channel_api.rs over src/channel/). Where the running coroutine
-- can yield to a scheduler (vmpool.run, OpenResty, vmpool.luv, vmpool.cqueues), an operation that
-- must wait files a waiter with the channel and yields until the waiter's token comes back through
-- the scheduler's notifier, like a call's; then it tries again with the same waiter (which keeps
-- the deadline). Everywhere else (outside coroutines, in pool states) the thread waits natively.
local chan_push, chan_pop = native._chan_push, native._chan_pop
local chan_push_or_wait, chan_pop_or_wait = native._chan_push_or_wait, native._chan_pop_or_wait
local select_blocking, select_or_wait = native._select, native._select_or_wait
local new_waiter, native_token = native._waiter, Native._token
local rawequal = rawequal

local WaiterMT = {
  __index = {
    _subscribe = native._waiter_subscribe,
    _unsubscribe = native._waiter_unsubscribe,
    _ready = native._waiter_ready,
  },
  __gc = native._waiter_gc,
  __name = "vmpool.waiter",
}

-- vmpool.run's wait for a channel waiter.
local function run_await(d, w)
  local token = native_token(d.native)
  if w:_subscribe(d.native, token) then
    local co = coroutine_running()
    d.waiting[token] = co
    if coroutine_yield(WAIT) ~= token then
      d:resumed_early(co, token) -- the operation tries again and files a new wait
    end
  end
end

-- How the running coroutine waits for a channel: (await, driver) where it can yield to a
-- scheduler, nil where the thread waits. `what` names the operation for errors.
local function waiting_place(what)
  local co = coroutine_running()
  local d = driver_of[co]
  if d then
    if isyieldable() then
      return run_await, d
    end
    return nil
  end
  if co and first_drives and isyieldable() then
    local loop, driver = loop_of(co)
    if loop then
      return loop.await, driver
    end
  end
  if host_await_place then
    return host_await_place(what)
  end
  return nil
end

local Channel = {}
local ChannelMT = {
  __index = Channel,
  __gc = native._chan_gc,
  __eq = native._chan_eq,
  __name = "vmpool.channel",
  __tostring = function(ch) return "vmpool.channel: " .. native._chan_name(ch) end,
}

local function pop_wait(await, driver, ch, timeout, w, first, ...)
  if not rawequal(first, w) then
    return first, ...
  end
  await(driver, w)
  return pop_wait(await, driver, ch, timeout, w, chan_pop_or_wait(ch, timeout, w))
end

local function pop(ch, timeout)
  if timeout ~= 0 then
    local await, driver = waiting_place("channel:pop")
    if await then
      local w = new_waiter(WaiterMT)
      return pop_wait(await, driver, ch, timeout, w, chan_pop_or_wait(ch, timeout, w))
    end
  end
  return chan_pop(ch, timeout)
end

local function push(ch, timeout, ...)
  if timeout ~= 0 then
    local await, driver = waiting_place("channel:push")
    if await then
      local w = new_waiter(WaiterMT)
      local ok, why = chan_push_or_wait(ch, timeout, w, ...)
      while rawequal(ok, w) do
        await(driver, w)
        ok, why = chan_push_or_wait(ch, timeout, w, ...)
      end
      return ok, why
    end
  end
  return chan_push(ch, timeout, ...)
end

--- ch:push(...): appends the message, waiting while the channel is full; true, or nil, "closed".
function Channel:push(...) return push(self, nil, ...) end
--- ch:push_timeout(seconds, ...): push waiting at most `seconds`; nil, "timeout" when it gave up.
function Channel:push_timeout(timeout, ...)
  if type(timeout) ~= "number" then
    error("vmpool: bad argument #1 to 'channel:push_timeout': expected seconds (a non-negative number), got "
      .. type(timeout) .. " (ch:push_timeout(seconds, ...): the timeout comes first)", 0)
  end
  return push(self, timeout, ...)
end
--- ch:try_push(...): push that never waits (nil, "timeout" when full).
function Channel:try_push(...) return chan_push(self, 0, ...) end
--- ch:pop([timeout]): the oldest message's values, waiting while the channel is empty.
function Channel:pop(timeout) return pop(self, timeout) end
--- ch:try_pop(): pop that never waits.
function Channel:try_pop() return chan_pop(self, 0) end
Channel.close = native._chan_close
Channel.len = native._chan_len
Channel.capacity = native._chan_capacity
Channel.is_closed = native._chan_is_closed
Channel.name = native._chan_name

--- vmpool.channel(name [, options]): the process-wide channel called name (created on first use).
function M.channel(name, options)
  return native._channel(name, options, ChannelMT)
end

local function select_wait(await, driver, list, timeout, w, first, ...)
  if not rawequal(first, w) then
    return first, ...
  end
  await(driver, w)
  return select_wait(await, driver, list, timeout, w, select_or_wait(list, timeout, w))
end

--- vmpool.select(channels [, timeout]): the first of the channels to have a message, and the
--- message's values; nil, "timeout", or nil, "closed" once every channel is closed and drained.
function M.select(list, timeout)
  if timeout ~= 0 then
    local await, driver = waiting_place("vmpool.select")
    if await then
      local w = new_waiter(WaiterMT)
      return select_wait(await, driver, list, timeout, w, select_or_wait(list, timeout, w))
    end
  end
  return select_blocking(list, timeout)
end

-- Streams: pool:stream(chunk, fn, ...) runs fn with its own unnamed channel; the state's
-- coroutine.yield at the call's top level pushes onto it (src/channel/stream.rs) and the channel
-- is closed when the call ends. The stream object is the iterator of a generic for (and its
-- to-be-closed value on Lua 5.4); its channel handle owns the channel, so collecting the stream
-- closes it, which ends the call at its next item.
local native_stream, chan_close = native._stream, native._chan_close
local Stream = {}
local StreamMT = { __index = Stream, __name = "vmpool.stream" }

-- The channel is closed and drained: the call ended (or the consumer closed the stream).
local function stream_end(s)
  s.done = true
  if not s.closed then
    local fut = s.fut
    if not fut:ready() then
      -- the call is ending (its channel closed): a scheduler's coroutine yields for it too
      local await, driver = waiting_place("pool:stream")
      if await then
        await(driver, fut)
      end
    end
    fut:wait() -- raises the state's error, with its traceback
  end
  return nil
end

local function stream_item(s, first, ...)
  if first ~= nil then
    return first, ...
  end
  return stream_end(s)
end

function StreamMT.__call(s)
  if s.done then
    return nil
  end
  return stream_item(s, pop(s.ch, nil))
end

--- stream:close(): stops consuming; the call is cancelled (a state waiting to push fails at once).
function Stream:close()
  if not self.done then
    self.done, self.closed = true, true
    chan_close(self.ch)
    self.fut:cancel()
  end
end

function StreamMT.__close(s) s:close() end

--- pool:stream(chunk, fn, ...): an iterator over the items fn yields in a state.
function Pool:stream(chunk, fn, ...)
  local fut, ch = native_stream(self, ChannelMT, chunk, fn, ...)
  local s = setmetatable({ fut = fut, ch = ch, done = false, closed = false }, StreamMT)
  return s, nil, nil, s
end

--- vmpool.run(fn, ...): runs fn(...) in a coroutine, plus every coroutine vmpool.spawn starts,
--- until all are done; returns fn's results. Sleeps (no CPU) while every coroutine waits.
function M.run(fn, ...)
  if type(fn) ~= "function" then
    error("vmpool: bad argument #1 to 'run': expected a function, got " .. type(fn), 0)
  end
  if driver_of[coroutine_running()] then
    error("vmpool: vmpool.run cannot run inside vmpool.run (use vmpool.spawn)", 0)
  end
  local d = setmetatable({
    native = native._notifier(),
    ready = {}, -- coroutines to resume in this round
    spare = {}, -- the other round's list, reused
    waiting = {}, -- token -> coroutine waiting for that call, or false (see above)
    tokens = {}, -- reused buffer for finished tokens
    woken = {}, -- coroutines whose calls finished, to resume next
    woken_tokens = {}, -- woken[i]'s call token, which its resume hands it
    nwoken = 0,
    early = 0, -- waiting coroutines that other code resumed (see resumed_early)
    strays = {}, -- those of them that may have ended out of the driver's sight
    live = 0,
  }, Driver)
  local results
  local args = pack(...)
  d:spawn(function() results = pack(fn(unpack(args, 1, args.n))) end)
  while d.live > 0 do
    local ready, nwoken = d.ready, d.nwoken
    if nwoken > 0 then
      -- each resumed with its call's token, which tells co_invoke the driver's resume from
      -- another one
      local woken, woken_tokens = d.woken, d.woken_tokens
      d.nwoken = 0
      native_batch(d.native)
      for i = 1, nwoken do
        local co = woken[i]
        woken[i] = nil
        -- after a coroutine was resumed early, one in this list may have ended meanwhile
        if d.early == 0 or coroutine_status(co) == "suspended" then
          local ok, first = coroutine_resume(co, woken_tokens[i])
          if not ok or first ~= WAIT then
            d:stepped(co, ok, first)
          end
        end
      end
      native_flush(d.native)
    end
    if ready[1] ~= nil then
      d.ready, d.spare = d.spare, ready
      for i = 1, #ready do
        local co = ready[i]
        ready[i] = nil
        local ok, first = coroutine_resume(co)
        if not ok or first ~= WAIT then
          d:stepped(co, ok, first)
        end
      end
    else
      if d.early > 0 then
        d:collect_strays()
      end
      -- the coroutines resumed above may all have ended
      if d.live == 0 then
        break
      end
      local tokens = d.tokens
      local n = native_wait(d.native, tokens)
      local waiting, woken, woken_tokens = d.waiting, d.woken, d.woken_tokens
      local k = 0
      for i = 1, n do
        local t = tokens[i]
        -- (a token nobody waits for: its coroutine was resumed early and took its call itself)
        local waiter = waiting[t]
        if waiter then
          waiting[t] = false
          k = k + 1
          woken[k], woken_tokens[k] = waiter, t
        end
      end
      d.nwoken = k
    end
  end
  return unpack(results, 1, results.n)
end

--- vmpool.spawn(fn, ...): inside vmpool.run, starts fn(...) as another coroutine of the same run.
function M.spawn(fn, ...)
  if type(fn) ~= "function" then
    error("vmpool: bad argument #1 to 'spawn': expected a function, got " .. type(fn), 0)
  end
  local co = in_coroutine()
  local d = co and driver_of[co]
  if not d then
    error("vmpool: vmpool.spawn must be called inside vmpool.run", 0)
  end
  d:spawn(fn, ...)
end

-- Inside OpenResty: the adapter of src/lua/ngx.lua (compiled into the library) becomes vmpool.ngx,
-- and its co_invoke serves pool:co_invoke outside vmpool.run.
if type(ngx) == "table" and type(ngx.get_phase) == "function" then -- luacheck: ignore 113
  local load_text = loadstring or load -- luacheck: ignore 113
  local host_go, host_go_args
  M.ngx, host_co_invoke, host_co_map, host_await_place, host_go, host_go_args =
    assert(load_text(native._ngx_source, "=vmpool/ngx.lua"))(M, native, with_args)
  -- co_invoke's common case inside nginx (a call of few arguments, no vmpool.run or other loop's
  -- adapter driving coroutines) goes to ngx.lua's host_go through one function of fixed arity:
  -- LuaJIT starts no trace in a vararg function, and host_call's trace runs up to the request's
  -- yield
  local function host_call(self, chunk, fn, n, a1, a2, a3)
    if ndriven == 0 and first_drives == nil and type(self) == "userdata" then
      return host_go(self, chunk, fn, n, a1, a2, a3)
    end
    return with_args(plain_co_invoke, self, chunk, fn, n, a1, a2, a3)
  end
  function Pool:co_invoke(chunk, fn, ...)
    local n = select("#", ...)
    if n <= host_go_args then
      return host_call(self, chunk, fn, n, ...)
    end
    return plain_co_invoke(self, chunk, fn, ...)
  end
end

-- On LuaJIT the busiest methods of vmpool.shared's dictionaries go through the FFI
-- (src/lua/dict_ffi.lua); without the ffi module, or if it cannot load the library, they stay C
-- functions. `vmpool._dict_ffi` says which (true, or the reason as a string), for the specs.
if type(jit) == "table" then -- luacheck: ignore 113
  local has_ffi = pcall(require, "ffi")
  if has_ffi then
    local load_text = loadstring or load -- luacheck: ignore 113
    local register, why = assert(load_text(native._dict_ffi_source, "=vmpool/dict_ffi.lua"))(native)
    if register then
      local c_shared = native.shared
      M.shared = function(...)
        return register(c_shared(...))
      end
      M._dict_ffi = true
    else
      M._dict_ffi = why
    end
  else
    M._dict_ffi = "no ffi module"
  end
end

-- The event-loop adapters loaded in this Lua state, by name (for vmpool.metrics).
local adapters_loaded = {}

-- The event-loop adapters, compiled into the library: `require "vmpool.luv"` and `require
-- "vmpool.cqueues"` find them here (or, before vmpool is loaded, through the library's
-- luaopen_vmpool_luv / luaopen_vmpool_cqueues, which load vmpool and then come here).
if type(package) == "table" and type(package.preload) == "table" then
  local load_text = loadstring or load -- luacheck: ignore 113
  for name, source in pairs { luv = native._luv_source, cqueues = native._cqueues_source } do
    local module = "vmpool." .. name
    package.preload[module] = function()
      local adapter = assert(load_text(source, "=vmpool/" .. name .. ".lua"))(M, native, add_loop, shared)
      adapters_loaded[name] = adapter
      return adapter
    end
  end
end

--- vmpool.metrics([options]): the Prometheus text exposition of every open pool of the process,
--- every vmpool.shared dictionary, and the counters of the adapters loaded in this Lua state
--- (src/metrics.rs; options: labels, checked natively).
function M.metrics(options)
  local stats = {}
  for name, adapter in pairs(adapters_loaded) do
    stats[name] = adapter.stats()
  end
  if M.ngx then
    stats.ngx = M.ngx.stats()
  end
  return native._metrics(options, stats)
end

return M
