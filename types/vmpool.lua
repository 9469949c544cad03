---@meta vmpool
-- Editor annotations for vmpool (LuaLS / EmmyLua). This file is never loaded by Lua: the rock
-- installs it in `$(luarocks show --rock-dir vmpool)/types/`; add that directory to LuaLS's
-- `workspace.library` (README.md, "Editor annotations"). spec/annotations_spec.lua checks that
-- every function, method and option of the module appears here. Every error is a plain string
-- that starts with "vmpool:" (README.md, "Errors").

---@alias vmpool.Runtime "Lua 5.1"|"Lua 5.2"|"Lua 5.3"|"Lua 5.4"|"Lua 5.5"|"LuaJIT"

---@class vmpool
---@field _VERSION string The library version, e.g. "0.1.0".
---@field runtime vmpool.Runtime The runtime this build is for.
---@field awaiter? fun(fut: vmpool.Future) Scheduler hook for co_invoke in coroutines vmpool.run does not drive: must return once fut:ready() is true, yielding meanwhile. Default nil.
---@field ngx? vmpool.ngx The OpenResty adapter; present only inside nginx (ngx_lua).
local vmpool = {}

---Options of vmpool.new; every one is optional.
---@class vmpool.Options
---@field core? integer Resident states, created by new and kept until close(). Default: the CPUs this process may use.
---@field max_noncore? integer Extra states created when every state is busy (math.huge: unlimited), closed after idle_timeout. Default 0.
---@field blocking? boolean When every state is busy: true queues the call (up to acquire_timeout), false fails it at once. Default true.
---@field acquire_timeout? number Seconds a queued call waits for a state (math.huge: forever). Default 30.
---@field idle_timeout? number Seconds a non-core state may stay idle before it is closed (0: right after its call, math.huge: never). Default 60.
---@field init? string Lua source run once in every new state, before any chunk. Default none.
---@field time_limit? number Seconds a single call may run (math.huge: no limit, but fut:cancel() interrupts running calls). Default 0 (none).
---@field memory_limit? integer Bytes one state may allocate. Default 0 (none).
---@field max_waiting? integer Most calls queued at once (blocking = true); beyond it calls fail with "queue full". Default unlimited.
---@field jit? boolean LuaJIT only: whether children compile to machine code (true with a time_limit is refused). Default true, false with a time_limit; ignored elsewhere.
---@field nice? integer 0 to 19: the pool's threads run that much nicer than the thread that called vmpool.new (Linux; no effect in the portable build). Default 0; 10 for pools created inside nginx.
---@field sched? "normal"|"batch"|"idle" the scheduling class of the pool's threads: "normal" (the host's), "batch" (SCHED_BATCH) or "idle" (SCHED_IDLE: only CPU time no normal thread wants; an event loop that wakes preempts them at once). Linux; no effect in the portable build. Default "normal".
---@field name? string The name that labels the pool's series in vmpool.metrics() (label pool), 1 to 128 bytes, unique among the open pools of the process. Default "pool-N".

---Creates a pool and its core states.
---Errors: a bad or unknown option, core = 0 with max_noncore = 0, a failing init, a limit the
---runtime cannot enforce, a state or thread that cannot be created.
---@param options? vmpool.Options
---@return vmpool.Pool pool
function vmpool.new(options) end

---Seconds on a monotonic clock (for timing).
---@return number seconds
function vmpool.clock() end

---What the child states of every pool in this process hold, from the allocator vmpool gives each
---state (exact when every state is idle).
---@return { states: integer, bytes: integer, blocks: integer }
function vmpool.memory() end

---The Prometheus text exposition (0.0.4) of every open pool of the process, every vmpool.shared
---dictionary and the counters of the event-loop adapters loaded in this Lua state.
---Errors: options that are not a table, an unknown option, a bad label name or value.
---@param options? { labels?: table<string, string|number> } labels: put first on every series
---@return string exposition
function vmpool.metrics(options) end

---A named dictionary of the process with the API of ngx.shared.DICT, the same in the host and in
---every pool state. The same name returns the same dictionary.
---Errors: a bad name or option; options that conflict with the existing dictionary.
---@param name string
---@param options? { capacity?: integer|string, shards?: integer } capacity: bytes or "10m" (default 1 MiB); shards: 1 to 256 (default 16)
---@return vmpool.SharedDict
function vmpool.shared(name, options) end

---A named, process-wide, bounded FIFO of messages, the same in the host and in every pool state
---(the same name is the same channel; handles of one channel compare equal). A message is the
---values of one push (anything that crosses in a call; the first value not nil). Waits yield a
---scheduler's coroutine (vmpool.run, OpenResty, vmpool.luv, vmpool.cqueues), block a pool
---state's thread (ended by its time limit, cancel and a bounded close) and block the host
---elsewhere (ended by Ctrl-C).
---Errors: a bad name or option; options that conflict with the existing channel.
---@param name string
---@param options? { capacity?: integer, bytes?: integer } capacity: messages (default 1024); bytes: encoded bytes queued (default 16 MiB)
---@return vmpool.Channel
function vmpool.channel(name, options) end

---The first of several channels to have a message, taken: the channel (the element of the list)
---and the message's values; nil, "timeout" or nil, "closed" (every channel closed and drained).
---Fair: each call starts one channel further. Waits as channel:pop does.
---Errors: not a list of channels, an empty list, a bad timeout.
---@param channels vmpool.Channel[]
---@param timeout? number seconds (0: do not wait; nil: as long as it takes)
---@return vmpool.Channel|nil channel
---@return any ... the message's values, or "timeout" / "closed"
function vmpool.select(channels, timeout) end

---A vmpool.channel handle.
---@class vmpool.Channel
local Channel = {}

---Appends a message, waiting while the channel is full.
---Errors: a first value that is nil (or none), a value that cannot cross, a message larger than
---the channel's bytes.
---@param ... any the message's values
---@return true|nil ok
---@return "closed"? err
function Channel:push(...) end

---push, waiting at most `seconds`.
---@param seconds number
---@param ... any the message's values
---@return true|nil ok
---@return "timeout"|"closed"|nil err
function Channel:push_timeout(seconds, ...) end

---push that never waits.
---@param ... any the message's values
---@return true|nil ok
---@return "timeout"|"closed"|nil err
function Channel:try_push(...) end

---Takes the oldest message and returns its values, waiting while the channel is empty (at most
---`timeout` seconds); nil, "timeout", or nil, "closed" once closed and drained.
---@param timeout? number
---@return any ... the message's values, or nil and "timeout" / "closed"
function Channel:pop(timeout) end

---pop that never waits.
---@return any ... the message's values, or nil and "timeout" / "closed"
function Channel:try_pop() end

---Pushes fail from now on; pops drain what is queued, then answer nil, "closed". Wakes every
---waiter. Idempotent.
function Channel:close() end

---@return boolean
function Channel:is_closed() end

---Messages queued.
---@return integer
function Channel:len() end

---@return integer messages
---@return integer bytes
function Channel:capacity() end

---@return string
function Channel:name() end

---A stream of pool:stream: the iterator of a generic for (and its to-be-closed value on 5.4).
---@class vmpool.Stream
local Stream = {}

---Stops consuming and cancels the call; the iterator then ends. Idempotent.
function Stream:close() end

---A vmpool.shared dictionary: every method answers as ngx.shared.DICT's does. Bad keys (not a
---string or number, empty, over 65535 bytes), table or function values, negative or NaN TTLs
---raise "vmpool: ..." errors.
---@class vmpool.SharedDict
local SharedDict = {}
---@param key string
---@return any value, integer? flags
function SharedDict:get(key) end
---@param key string
---@return any value, integer? flags, boolean stale
function SharedDict:get_stale(key) end
---@param key string
---@param value any nil, boolean, number or string
---@param exptime? number seconds (0: never)
---@param flags? integer
---@return boolean ok, string? err, boolean forcible
function SharedDict:set(key, value, exptime, flags) end
---@return boolean ok, string? err "no memory"
function SharedDict:safe_set(key, value, exptime, flags) end
---@return boolean ok, string? err "exists", boolean forcible
function SharedDict:add(key, value, exptime, flags) end
---@return boolean ok, string? err
function SharedDict:safe_add(key, value, exptime, flags) end
---@return boolean ok, string? err "not found", boolean forcible
function SharedDict:replace(key, value, exptime, flags) end
---@param key string
function SharedDict:delete(key) end
---@param key string
---@param value number
---@param init? number
---@param init_ttl? number
---@return number? value, string? err, boolean forcible
function SharedDict:incr(key, value, init, init_ttl) end
---@return integer? length, string? err
function SharedDict:lpush(key, value) end
---@return integer? length, string? err
function SharedDict:rpush(key, value) end
---@return any value, string? err
function SharedDict:lpop(key) end
---@return any value, string? err
function SharedDict:rpop(key) end
---@return integer? length, string? err
function SharedDict:llen(key) end
---@return number? seconds, string? err
function SharedDict:ttl(key) end
---@param exptime number
---@return boolean? ok, string? err
function SharedDict:expire(key, exptime) end
function SharedDict:flush_all() end
---@param max_count? integer
---@return integer flushed
function SharedDict:flush_expired(max_count) end
---@param max_count? integer (default 1024; 0: all)
---@return string[]
function SharedDict:get_keys(max_count) end
---@return integer bytes
function SharedDict:capacity() end
---@return integer bytes
function SharedDict:free_space() end

---Runs fn(...) in a coroutine, plus every coroutine vmpool.spawn starts inside it, resuming each
---when its call completes; sleeps on the pool's completion signal while all wait.
---Errors: "vmpool.run: a coroutine failed: <error and traceback>"; vmpool.run inside vmpool.run.
---@param fn fun(...): ...
---@param ... any arguments for fn
---@return any ... fn's results, once every coroutine is done
function vmpool.run(fn, ...) end

---Starts fn(...) as another coroutine of the running vmpool.run.
---Errors: called outside vmpool.run.
---@param fn fun(...)
---@param ... any arguments for fn
function vmpool.spawn(fn, ...) end

---A pool of child Lua states (vmpool.new). After close(), every method but stats() raises
---"vmpool: pool is closed".
---@class vmpool.Pool
local Pool = {}

---Compiles source once in the host as chunk name; compiling a name again replaces it.
---Errors: a syntax error (with chunk name and line), bytecode instead of source, a closed pool.
---@param name string
---@param source string Lua source text
---@return true
function Pool:compile(name, source) end

---Runs function fn of chunk name (a field of the table the chunk returned, else a global it
---defined) in a free state and returns its results. Blocks the calling OS thread.
---Errors: unknown chunk, no such function, a value that cannot cross, the child's error with its
---traceback, pool exhausted (blocking = false), timed out waiting for a state, queue full, time or
---memory limit exceeded, pool closed.
---With a function first (`pool:invoke(function(n) ... end, 30)`), runs that function itself: its
---bytecode is loaded once per state, its upvalues copied into each call, its globals the state's.
---@overload fun(self: vmpool.Pool, fn: function, ...: any): ...
---@param name string chunk name
---@param fn string function name
---@param ... any arguments (copied into the child: nil, booleans, numbers, strings, light userdata, functions with their upvalues, standard library C functions and tables of them; shared tables, functions and cycles keep their shape)
---@return any ... the function's results
function Pool:invoke(name, fn, ...) end

---Like invoke, but returns a future at once; the state is reserved (or the call queued) now.
---Errors: those of invoke that happen before the call is dispatched.
---@overload fun(self: vmpool.Pool, fn: function, ...: any): vmpool.Future
---@param name string chunk name
---@param fn string function name
---@param ... any arguments
---@return vmpool.Future fut
function Pool:submit(name, fn, ...) end

---Runs fn of chunk name (or the function fn itself) in a state (arguments as for invoke) and
---returns an iterator over the
---items it produces: each coroutine.yield(...) at the function's top level is one item; its return
---ends the stream. 64 items wait between the sides (backpressure). break (5.4), stream:close() or
---collection cancel the call; an error in the state is raised by the iterator, with its traceback.
---In a scheduler's coroutine the iterator yields while it waits.
---Errors: those of invoke.
---@overload fun(self: vmpool.Pool, fn: function, ...: any): vmpool.Stream, nil, nil, vmpool.Stream
---@param name string chunk name
---@param fn string function name
---@param ... any arguments
---@return vmpool.Stream iterator
---@return nil
---@return nil
---@return vmpool.Stream closing
function Pool:stream(name, fn, ...) end

---Like invoke, but yields the running coroutine instead of blocking the OS thread when a scheduler
---drives it (vmpool.run, OpenResty, vmpool.awaiter); elsewhere exactly like invoke.
---Errors: those of invoke; in nginx, a phase that cannot yield.
---@overload fun(self: vmpool.Pool, fn: function, ...: any): ...
---@param name string chunk name
---@param fn string function name
---@param ... any arguments
---@return any ... the function's results
function Pool:co_invoke(name, fn, ...) end

---Options of pool:map and pool:co_map.
---@class vmpool.MapOptions
---@field unpack? boolean Each item is a table whose elements 1..#item are fn's arguments, instead of the argument. Default false.
---@field errors? "stop"|"collect" "stop": the first failing item (in list order) raises and the rest is cancelled; "collect": map returns the results and a table of errors by index. Default "stop".
---@field batch? integer Items per batch (one job of a state). Default: ceil(items left / (2 x states)), at most 1,024 (smaller and smaller batches, so the states finish together).

---Calls fn of chunk name once per item of list (list[1] .. list[#list], raw length), spread over
---the pool's states in batches, and returns each call's first result at the item's index (nil
---results leave holes; further results are dropped). Blocks the calling OS thread.
---Errors: "vmpool: map item N of 'name:fn' failed: ..." (the child's message and traceback, a
---time or memory limit, a value that cannot cross) for the first failing item unless
---errors = "collect"; bad arguments or options; unknown chunk or function; those of invoke about
---getting a state (exhausted, timed out, queue full, closed).
---With a function first (`pool:map(function(x) ... end, list)`), maps that function itself.
---@overload fun(self: vmpool.Pool, fn: function, list: table, options?: vmpool.MapOptions): table, table<integer, string>?
---@param name string chunk name
---@param fn string function name
---@param list table the items
---@param options? vmpool.MapOptions
---@return table results results[i] = first result of fn(list[i])
---@return table<integer, string>? errors with errors = "collect": the error of each failed item, by index
function Pool:map(name, fn, list, options) end

---Like map, but yields the running coroutine while the batches run when vmpool.run or OpenResty
---drives it; elsewhere (and where the coroutine cannot yield) exactly like map.
---Errors: those of map; in nginx, a phase that cannot yield, or a wait past wait_timeout.
---@overload fun(self: vmpool.Pool, fn: function, list: table, options?: vmpool.MapOptions): table, table<integer, string>?
---@param name string chunk name
---@param fn string function name
---@param list table the items
---@param options? vmpool.MapOptions
---@return table results
---@return table<integer, string>? errors
function Pool:co_map(name, fn, list, options) end

---Removes a chunk; later calls into it fail with "vmpool: unknown chunk".
---@param name string
---@return boolean removed true if there was such a chunk
function Pool:unload(name) end

---The live picture, the counters since vmpool.new, the peaks and the latency figures since the
---last reset. With { reset = true }, the peaks and the latency figures start a new interval after
---this reading (the counters keep counting). Errors: a bad options table.
---@param options? { reset?: boolean }
---@return vmpool.Stats
function Pool:stats(options) end

---A full garbage collection in every idle state (busy ones are skipped), and the call records
---kept for reuse freed. Errors: a closed pool.
---@return integer states the number of states that collected
function Pool:collect() end

---Fails queued calls, waits for running calls, closes every state and joins every thread.
---Idempotent; garbage collection (and <close> on Lua 5.4 and 5.5) does the same.
function Pool:close() end

---@class vmpool.Stats
---@field core integer core states alive
---@field noncore integer non-core states alive
---@field idle integer states free (core + noncore = idle + busy)
---@field busy integer states reserved
---@field waiting integer calls queued for a state
---@field threads integer worker threads not yet joined (one per state, plus closed states' until joined)
---@field created integer states created since new
---@field closed integer states closed since new
---@field invokes integer calls accepted for dispatch
---@field succeeded integer calls that returned
---@field errors integer calls that reached a state and failed, and queued calls failed by close()
---@field rejected integer calls refused (pool exhausted, queue full)
---@field timeouts integer calls that timed out waiting for a state (acquire_timeout)
---@field cancelled integer calls cancelled before they started or interrupted while running
---@field failed integer errors other than a limit (errors = failed + time_limits + memory_limits)
---@field time_limits integer calls stopped by time_limit
---@field memory_limits integer calls whose state ran past memory_limit
---@field idle_closed integer non-core states closed for being idle (counted in closed too)
---@field peak_busy integer most states busy at once since the last reset
---@field peak_waiting integer most calls queued at once since the last reset
---@field wait vmpool.Latency queue wait: submit to a state taking the call, since the last reset
---@field run vmpool.Latency run time: start to end in the state, since the last reset

---Seconds (count: calls); percentiles are the top of their bucket (at most 3.1% above the true value).
---@class vmpool.Latency
---@field count integer calls measured
---@field sum number seconds, all calls
---@field max number seconds, the longest
---@field p50 number seconds
---@field p90 number seconds
---@field p99 number seconds
---@field p999 number seconds

---The pending result of pool:submit.
---@class vmpool.Future
local Future = {}

---True once the call finished (successfully or not).
---@return boolean
function Future:ready() end

---Waits for the call (blocking the OS thread) and returns its results; raises the call's error.
---Results can be read again.
---@param timeout? number seconds; past it returns nil and "vmpool: timed out after ...s waiting for the call to finish ..."
---@return any ... the call's results
function Future:wait(timeout) end

---Cancels the call: true if it had not started (it never runs). A running call is interrupted at
---its next hook check in pools with a time_limit (then false). wait then raises
---"vmpool: call was cancelled".
---@return boolean
function Future:cancel() end

---A file descriptor readable while some subscribed future of the pool has finished and its owner
---has not looked at it yet, for event loops (cqueues, luv); re-check ready() after each wake-up.
---@return integer fd
function Future:pollfd() end

---cqueues' polling protocol: the events to wait for on pollfd().
---@return "r"
function Future:events() end

---cqueues' polling protocol: no timeout of its own.
---@return nil
function Future:timeout() end

---The OpenResty adapter (inside nginx: require("vmpool").ngx).
---@class vmpool.ngx
local ngx_adapter = {}

---Settings of vmpool.ngx.configure, for this worker process.
---@class vmpool.ngx.Options
---@field wait_timeout? number Seconds a request waits for its call before it gives up and cancels it. Default 60.
---@field socket_dir? string Where the doorbell socket exists during its setup; writable by the worker user, short. Default "/tmp".
---@field batch? boolean Hand a turn's calls to the pool together; false submits each at once. Default true.
---@field idle_timeout? number Seconds the light thread's read may sleep when the exit watch could not be armed. Default 300.

---This worker's pool called name, made by create() the first time (refused in init_by_lua).
---Errors: no create and no such pool; called in init_by_lua.
---@param name string
---@param create? fun(): vmpool.Pool
---@return vmpool.Pool
function ngx_adapter.pool(name, create) end

---Waits for a future from pool:submit, yielding the request (blocking in init phases).
---Errors: the call's error; "vmpool: gave up after ...s waiting for the call to finish (...)".
---@param fut vmpool.Future
---@param timeout? number seconds (default: wait_timeout)
---@return any ... the call's results
function ngx_adapter.wait(fut, timeout) end

---Settings for this worker process (call it in init_by_lua or init_worker_by_lua).
---@param options vmpool.ngx.Options
function ngx_adapter.configure(options) end

---Starts the light thread now instead of at the first wait (optional, in init_worker_by_lua).
function ngx_adapter.init_worker() end

---Closes this worker's pools made by vmpool.ngx.pool and the doorbell (in exit_worker_by_lua).
function ngx_adapter.exit_worker() end

---This worker's adapter state and counters: light_thread, waiting, waits, wakeups, completions,
---dropped, timeouts, flushes, light_thread_starts.
---@return table
function ngx_adapter.stats() end

return vmpool
