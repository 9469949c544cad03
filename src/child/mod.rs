//! A child state: a Lua state created on its worker thread with vmpool's counting allocator
//! ([`crate::state_heap`]), with the standard libraries, the pool's `init` code and the chunks it
//! has been asked to run.
//!
//! Creating, configuring and running a state, and turning failures into errors, share the stack
//! layout below; the hook and the in-state functions are in submodules.
//!
//! Stack layout at rest (the state's main thread): slot 1 the message handler (adds a traceback),
//! slot 2 the call trampoline (a C closure over slot 3), slot 3 the table of loaded chunks
//! (`chunk id -> table the chunk returned | false`, `-id -> the chunk's environment`, `0 -> the
//! environments' shared metatable`), slot 4 the last function name, slots 5 and 6 what the last
//! chunk called by name returned and its environment (the tables a name is looked up in, see
//! `run::Lookup`). A call whose arguments are a few scalars pushes the function it names and its
//! arguments and runs it under `lua_pcall` with the message handler (`Child::call_direct`, in
//! `run.rs` with the rest of a call); any other call pushes the trampoline, a pointer to its
//! [`RunCtx`] and the function name, and runs it under `lua_pcall`, so every Lua error (including
//! running out of memory while decoding the arguments) lands in one place.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use mlua::ffi;

use crate::call::{Call, Job, Outcome};
use crate::chunk::{Chunk, Chunks};
use crate::config::Config;
use crate::error::lua_number;
use crate::int_hash::IntSet;
use crate::lua::{State, TTABLE};
use crate::state_heap::OwnedState;
use crate::value;
use crate::Error;
use in_state::{forget_chunk, COLLECT, INSTALL, MESSAGE_HANDLER, TRAMPOLINE_FN};
pub(crate) use limits::{call_armed, call_must_stop, stop_error, stream_must_stop};
use limits::{limit_hook, Limits, Trip, HOOK_COUNT, LIMITS, LIMIT_TRIPPED};
use run::{Lookup, Results};

mod batch;
mod in_state;
mod limits;
mod run;
mod signal;
pub mod watchdog;
pub use signal::number as limit_signal;

const MSGH: c_int = 1;
const TRAMPOLINE: c_int = 2;
const CHUNKS: c_int = 3;
/// The name of the function called last, kept as a Lua string: most calls name the same function
/// as the one before, and pushing the kept string is much cheaper than interning it again.
const FUNC_NAME: c_int = 4;
/// What chunk `Lookup::chunk` returned (its table, else `false`) and its environment: a call
/// by name looks there without first finding them in the table of loaded chunks.
const LOOKUP_RETURNED: c_int = 5;
const LOOKUP_ENV: c_int = 6;
const BASE: c_int = 6;

/// Most arguments a direct call pushes (see `Child::call_direct`). The state's main thread
/// keeps the room for them and the function from its creation on (`Child::new`), so pushing
/// them never grows its stack, which allocates and could raise outside a protected call.
const DIRECT_ARGS: usize = 8;

/// Most results one call may return: what the host can push onto its stack in one C call (Lua 5.1
/// and LuaJIT allow 8,000 slots per C call, Lua 5.4 and 5.5 a million per thread), less a margin.
const MAX_RESULTS: c_int = if cfg!(any(feature = "lua51", feature = "luajit")) {
    7_900
} else {
    900_000
};

/// How a call ended, for the worker: `Ok(())` when it succeeded (its results are in the call's
/// buffer) and the state carries on; else its outcome and whether the state must be replaced,
/// boxed, so that the common case moves one word through the layers instead of an `Outcome`.
pub type Ran = Result<(), Failed>;
/// A call's outcome other than plain success, and whether the state must be replaced.
pub type Failed = Box<(Outcome, bool)>;
/// How [`Child::run`] ended: a success carries the encoded results, which the worker hands to
/// [`Call::finish_ok`] by value (no lock of the call's data to put them there and take them back).
pub type Finished = Result<Vec<u8>, Failed>;

pub struct Child {
    /// Owns the state; dropping it closes the state.
    heap: OwnedState,
    st: State,
    /// The chunk versions this state has loaded.
    loaded: LoadedChunks,
    chunk_epoch: u64,
    /// Whether the state runs under a time limit (the watchdog arms it for each call).
    hooked: bool,
    /// This state's slot in the pool's watchdog (pools with a `time_limit`).
    watch: Option<(Arc<watchdog::Watchdog>, Arc<watchdog::Slot>)>,
    limits: Box<Limits>,
    /// The running call's function name, copied from its record when it differs from the last
    /// call's (the record keeps its own: the caller reads it for messages).
    func: Vec<u8>,
    /// The running call's chunk: the last call's `Arc`, kept while calls name the same chunk
    /// (cloned only when another one comes; see `Child::run`).
    chunk: Option<Arc<Chunk>>,
    encoder: value::Encoder,
    /// The callees this state loaded (`pool:invoke(fn, ...)`), by content.
    fns: value::FnCache,
    /// Slot `FUNC_NAME` holds `func` as a string (not an older name, nor a map's function: see
    /// `child/batch.rs`).
    name_in_slot: bool,
    /// The running batch calls the function in slot `FUNC_NAME`.
    batch_callee: bool,
    /// What is known of the last call's results (see `encode_results`).
    results: Results,
    lookup: Lookup,
    /// The prototypes of the functions in the running call's arguments (see `value/func.rs`).
    protos: Vec<Arc<value::Proto>>,
    /// Where a map batch's results are written while its items are read (empty until this state
    /// runs a batch; then it keeps the last batch's item buffer for the next one).
    batch_out: Vec<u8>,
    time_limit: Option<Duration>,
    /// `time_limit` in clock ticks (`None`: none, or too far to ever come).
    limit_ticks: Option<u64>,
    memory_limit: Option<usize>,
}

/// The chunk versions a state has loaded (a set: a state may hold thousands, and every call asks),
/// and how far it has read the registry's log of removed versions.
#[derive(Default)]
struct LoadedChunks {
    ids: IntSet,
    removals_seen: u64,
}

/// Passed to the trampoline through a light userdata; plain data only, since a Lua error may jump
/// over the frames that use it.
struct RunCtx {
    step: Step,
    args: *const u8,
    args_len: usize,
    chunk_id: i64,
    failure: Failure,
    /// The call's prototypes and the state's function cache (a `Step::Call`).
    protos: *const [Arc<value::Proto>],
    fns: *mut value::FnCache,
    /// `pool:map(fn, list)`: the function is in the name's slot, the message holds only the
    /// arguments.
    callee_in_slot: bool,
    /// Set by the trampoline after a call: whether the results hold tables or functions.
    nested: bool,
}

/// What the trampoline does. Besides running the call, it does the few things a call needs that
/// may allocate, so that they too run under `lua_pcall`: in a state at its memory limit, Lua
/// raises "not enough memory" outside a protected call by ending the process.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// Find the function and call it with the arguments.
    Call,
    /// Push the function name (`args` holds it) and return it.
    PushName,
    /// Run the chunk function passed in an environment of its own and keep what its top level
    /// returned, and the environment, as loaded chunk `chunk_id`.
    Load,
    /// Decode a map's function (`args` is its message) and return it.
    PushCallee,
    /// Make the stack room that encoding the results above needs (Lua 5.1 and LuaJIT raise
    /// when they cannot grow it: see `Child::direct_results`).
    Reserve,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Failure {
    None,
    NoFunction {
        global: bool,
    },
    Corrupt(&'static str),
    /// No stack space left to encode the results (Lua 5.4 reports it as a failed
    /// `lua_checkstack`, not as an error).
    OutOfMemory,
}

/// Stack slots that encoding results may need above them: two per level of nesting, and the
/// encoder's own margin (see `value::Writer::table`).
const ENCODE_STACK: c_int = 2 * value::MAX_DEPTH as c_int + 16;

impl Child {
    /// A new state configured for the pool; `flags` are the pool's stop and closed flags (see
    /// [`Limits`]), `watchdog` the pool's (pools with a `time_limit`).
    pub fn new(
        cfg: &Config,
        [stop, closing]: [&Arc<AtomicBool>; 2],
        watchdog: Option<&Arc<watchdog::Watchdog>>,
    ) -> Result<Child, Error> {
        let (stop, closing) = (stop.clone(), closing.clone());
        // deadlines are clock ticks: the clock is chosen before any is taken
        crate::clock::init();
        let heap = OwnedState::new()?;
        let st = heap.state();
        // the four slots at rest, a direct call's function and arguments, and 2 for lookups;
        // the stack never shrinks below what is reserved here (every Lua keeps the room up to
        // its base frame's top, LuaJIT at least its initial 40 slots)
        if !st.check_stack(BASE + 3 + DIRECT_ARGS as c_int) {
            return Err(Error::Spawn("no Lua stack space".into()));
        }
        st.push_cclosure(MESSAGE_HANDLER, 0);
        st.create_table(0, 0);
        st.push_value(-1);
        st.push_cclosure(TRAMPOLINE_FN, 1);
        st.insert(TRAMPOLINE);
        st.push_str("");
        st.push_nil();
        st.push_nil();

        // The buffers are allocated up front, so that what a state holds natively does not depend
        // on what it has run (the soak's leak check compares it exactly: spec/soak/soak.lua).
        let mut child = Child {
            heap,
            st,
            loaded: LoadedChunks {
                ids: IntSet::with_capacity_and_hasher(4, Default::default()),
                removals_seen: 0,
            },
            chunk_epoch: u64::MAX,
            hooked: false,
            watch: None,
            limits: Box::new(Limits {
                deadline: Cell::new(None),
                interrupt: Cell::new(std::ptr::null()),
                stop,
                closing,
                tripped: Cell::new(Trip::None),
                armed: Cell::new(false),
            }),
            func: Vec::with_capacity(32),
            chunk: None,
            encoder: value::Encoder::with_depth(8),
            fns: value::FnCache::default(),
            // the slot starts with "", which `func` is
            name_in_slot: true,
            batch_callee: false,
            results: Results::Unseen,
            lookup: Lookup::default(),
            protos: Vec::new(),
            batch_out: Vec::new(),
            time_limit: cfg.time_limit,
            limit_ticks: cfg.time_limit.and_then(crate::clock::ticks_of),
            memory_limit: cfg.memory_limit,
        };
        // the watchdog stops this state's calls (on Lua 5.4 and 5.5 only if it got a signal slot;
        // otherwise the count hook does)
        let watchdog = watchdog.filter(|_| cfg.time_limit.is_some());
        let ticket = watchdog
            .filter(|_| !watchdog::CROSS_THREAD)
            .and_then(|_| signal::Ticket::acquire(st.as_ptr()));
        let watchdog = watchdog.filter(|_| watchdog::CROSS_THREAD || ticket.is_some());
        child.configure(cfg, watchdog.is_some())?;
        if let Some(w) = watchdog {
            child.watch = Some((w.clone(), w.register(ticket)));
        }
        Ok(child)
    }

    /// `watched`: a watchdog sets the limit hook when a call is due (else the count hook does).
    fn configure(&mut self, cfg: &Config, watched: bool) -> Result<(), Error> {
        let st = self.st;
        st.push_cclosure(INSTALL, 0);
        if st.pcall(0, 0, 0) != 0 {
            return Err(Error::Spawn("no memory to set up the new state".into()));
        }
        st.push_globals();
        // `coroutine.yield` at a stream call's top level pushes an item (`channel/stream.rs`)
        if st.raw_get_str(-1, "coroutine") == TTABLE {
            st.push_cclosure(crate::channel::stream::STREAM_YIELD, 0);
            st.raw_set_str(-2, "yield");
        }
        st.pop(1);
        if st.raw_get_str(-1, "package") == TTABLE {
            if let Some(p) = &cfg.package_path {
                st.push_bytes(p);
                st.raw_set_str(-2, "path");
            }
            if let Some(p) = &cfg.package_cpath {
                st.push_bytes(p);
                st.raw_set_str(-2, "cpath");
            }
            // `require "vmpool"` in the state opens this library, already loaded, without
            // searching the file system (which needs a descriptor the process may not have)
            #[cfg(feature = "module")]
            if st.raw_get_str(-1, "preload") == TTABLE {
                st.push_cclosure(LUAOPEN_VMPOOL, 0);
                st.raw_set_str(-2, "vmpool");
            }
        }
        st.set_top(BASE);
        if cfg!(feature = "luajit") && !cfg.jit {
            self.exec(b"if jit then jit.off() jit.flush() end", "=vmpool.jit")
                .map_err(|m| Error::Spawn(format!("cannot turn the JIT off: {m}")))?;
        }
        if let Some(limit) = cfg.memory_limit {
            let used = self.heap.used();
            if used >= limit {
                return Err(Error::BadArgument(format!(
                    "memory_limit = {limit} is too small: a new state already uses {used} bytes"
                )));
            }
            if !self.heap.set_limit(limit) {
                return Err(Error::BadArgument(
                    "memory_limit is not supported by this Lua runtime: a LuaJIT built without GC64 cannot limit memory per state".into(),
                ));
            }
        }
        if cfg.time_limit.is_some() {
            self.guard_xpcall()
                .map_err(|m| Error::Spawn(format!("cannot wrap xpcall: {m}")))?;
            self.guard_coroutines()
                .map_err(|m| Error::Spawn(format!("cannot wrap coroutine.create: {m}")))?;
        }
        self.run_init(cfg)?;
        // calls are limited by the watchdog, which sets the hook only when one is due; where it
        // cannot (`watchdog::available`), by the count hook all the time
        self.hooked = cfg.time_limit.is_some();
        if self.hooked && !watched {
            // SAFETY: installs our hook on this state's main thread, from its own thread
            // (coroutines created later inherit it); the hook only reads this thread's `LIMITS`.
            unsafe {
                ffi::lua_sethook(
                    st.as_ptr(),
                    Some(limit_hook),
                    ffi::LUA_MASKCOUNT,
                    HOOK_COUNT,
                )
            };
        }
        // once per state: arming a call then only flips `armed` (without a hook, no hook reads
        // the limits between calls, and a channel's wait finds the running call's flags)
        self.limits.armed.set(!self.hooked);
        LIMITS.with(|l| l.set(&*self.limits));
        Ok(())
    }

    /// Runs `init` under the pool's limits. The memory limit is already in force; a finite
    /// `time_limit` gets the limit hook and a deadline for the run, so an `init` that loops or
    /// takes too long fails the state's creation (`vmpool.new` for a core state, the call it was
    /// started for otherwise) instead of hanging it.
    fn run_init(&mut self, cfg: &Config) -> Result<(), Error> {
        let Some(init) = &cfg.init else {
            return Ok(());
        };
        let timed = self.time_limit.filter(|d| *d != Duration::MAX);
        if let Some(limit) = timed {
            // SAFETY: as in `configure`: our hook on this state's main thread, reading this
            // thread's `LIMITS`, which points at this child's `Limits` until the run ends.
            unsafe {
                ffi::lua_sethook(
                    self.st.as_ptr(),
                    Some(limit_hook),
                    ffi::LUA_MASKCOUNT,
                    HOOK_COUNT,
                )
            };
            let lim = &*self.limits;
            lim.deadline
                .set(limits::deadline_after(crate::clock::ticks_of(limit)));
            lim.interrupt.set(std::ptr::null());
            lim.tripped.set(Trip::None);
            lim.armed.set(true);
            LIMITS.with(|l| l.set(lim));
        }
        let result = self.exec(init, "init");
        let tripped = self.limits.tripped.replace(Trip::None) != Trip::None;
        if timed.is_some() {
            self.limits.armed.set(false);
            self.limits.deadline.set(None);
            // SAFETY: removes the hook again; `configure` installs it for calls if they need it.
            unsafe { ffi::lua_sethook(self.st.as_ptr(), None, 0, 0) };
        }
        match result {
            Ok(()) => Ok(()),
            Err(_) if tripped => Err(Error::Init(format!(
                "it ran longer than time_limit = {}s (make init faster or raise time_limit)",
                lua_number(timed.map_or(0.0, |d| d.as_secs_f64()))
            ))),
            Err(m) if m.starts_with("not enough memory") && cfg.memory_limit.is_some() => {
                Err(Error::Init(format!(
                    "it needed more than memory_limit = {} bytes (raise memory_limit or make init use less memory)",
                    cfg.memory_limit.unwrap_or(0)
                )))
            }
            Err(m) => {
                let hint = crate::sys::descriptors_hint(&m);
                Err(Error::Init(format!("{m}{hint}")))
            }
        }
    }

    /// Every Lua runs a message handler with hooks off when the error came from a hook, so an
    /// `xpcall` handler that never returns would escape the time limit. Wrap `xpcall` so that
    /// once a limit has tripped the handler is skipped and the limit's error goes on unwinding.
    fn guard_xpcall(&mut self) -> Result<(), String> {
        const WRAP: &[u8] = br#"
local xpcall, type, tripped = xpcall, type, ...
if type(xpcall) ~= "function" then return end
_G.xpcall = function(f, handler, ...)
  if type(handler) ~= "function" then return xpcall(f, handler, ...) end
  return xpcall(f, function(e)
    if tripped() then return e end
    return handler(e)
  end, ...)
end
"#;
        self.exec_with(WRAP, "=vmpool.xpcall", Some(LIMIT_TRIPPED))
    }

    /// Lua 5.1 to 5.5 keep a hook per coroutine and the watchdog reaches only the main thread:
    /// every coroutine gets the count hook when it first runs, so a loop inside one is still
    /// stopped (LuaJIT's hook is one per state: nothing to do).
    fn guard_coroutines(&mut self) -> Result<(), String> {
        if cfg!(feature = "luajit") {
            return Ok(());
        }
        self.exec_with(
            watchdog::COROUTINE_GUARD,
            "=vmpool.coroutine",
            Some(watchdog::HOOK_COROUTINE),
        )
    }

    /// Runs a piece of source in this state (configuration and `init`).
    fn exec(&mut self, source: &[u8], name: &str) -> Result<(), String> {
        self.exec_with(source, name, None)
    }

    /// Runs a piece of source, passing it `arg` (a C function) as its argument if given.
    fn exec_with(
        &mut self,
        source: &[u8],
        name: &str,
        arg: Option<ffi::lua_CFunction>,
    ) -> Result<(), String> {
        let st = self.st;
        let rc = st.load_text(source, name);
        let rc = if rc == 0 {
            let nargs = match arg {
                Some(f) => {
                    st.push_cclosure(f, 0);
                    1
                }
                None => 0,
            };
            st.pcall(nargs, 0, MSGH)
        } else {
            rc
        };
        let result = if rc == 0 {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(
                st.to_bytes(-1).unwrap_or(b"(error object is not a string)"),
            )
            .into_owned())
        };
        st.set_top(BASE);
        result
    }

    /// Runs `call` (which is RUNNING and owned by this worker). Returns how it ended (see
    /// [`Finished`]); a failed batch's results stay in the call's buffer (`items_done` of them).
    pub fn run(&mut self, chunks: &Chunks, call: &Arc<Call>) -> Finished {
        let epoch = chunks.epoch();
        if epoch != self.chunk_epoch {
            self.drop_stale_chunks(chunks);
            self.chunk_epoch = epoch;
        }
        // Take what the call needs out of it and let go of its lock: the caller may need the
        // lock while the call runs (a scheduler subscribing to it, `cancel`). The record keeps
        // its chunk and function name (a success then needs no second lock); this state copies
        // the name and takes its own reference to the chunk only when they differ from the last
        // call's, since the chunk's reference count is the host's to change (see `Chunk`).
        let (job, mut buf, stream) = {
            let mut data = call.data.lock();
            let job = data.job;
            if job == Job::Collect {
                drop(data);
                // a collection (`pool:collect()`) also lets go of the last call's chunk, so that
                // what the pool holds natively afterwards does not depend on what ran before
                self.chunk = None;
                let replace = self.collect(call);
                return Err(Box::new((Outcome::Collected, replace)));
            }
            if !crate::call::same_name(&data.func, &self.func) {
                self.func.clear();
                self.func.extend_from_slice(&data.func);
                self.name_in_slot = false;
            }
            let same_chunk = match (&data.chunk, &self.chunk) {
                (Some(theirs), Some(mine)) => Arc::ptr_eq(theirs, mine),
                _ => false,
            };
            if !same_chunk {
                self.chunk = data.chunk.clone();
            }
            if !data.protos.is_empty() {
                take_protos(&mut self.protos, &mut data.protos);
            }
            let stream = data.stream.take().and_then(|s| s.downcast().ok());
            (job, std::mem::take(&mut data.buf), stream)
        };
        // a stream's channel is this thread's until the call ends, then closed
        let _stream = crate::channel::stream::Scope::enter(stream, stream_must_stop, stop_error);
        // (moved out and back: the methods below borrow `self` mutably)
        let chunk = self.chunk.take();
        let map = job == Job::Map;
        let mut out = if map {
            std::mem::take(&mut self.batch_out)
        } else {
            Vec::new()
        };
        let mut items_done = 0;
        let ran = match &chunk {
            Some(chunk) => {
                self.arm(call);
                let ran = match self.ensure_loaded(chunks, chunk) {
                    Ok(kept) => {
                        let ran = if map {
                            let (outcome, replace, done) =
                                self.run_batch(chunk, call, &buf, &mut out);
                            self.batch_callee = false;
                            items_done = done;
                            match (outcome, replace) {
                                (Outcome::Ok, false) => Ok(()),
                                failed => Err(Box::new(failed)),
                            }
                        } else {
                            self.call(chunk, &mut buf)
                        };
                        if !kept {
                            self.forget(chunk.id);
                        }
                        ran
                    }
                    Err(failed) => Err(failed),
                };
                // The hook stops a coroutine that runs too long, but the function that resumed
                // it may swallow the error and return before the hook fires in its own thread;
                // and a C function that overran the deadline returns before the hook's next
                // count: a call that tripped a limit or ended past its deadline fails whatever
                // it returned.
                self.limits.trip_if_past_deadline();
                let replacing = matches!(&ran, Err(failed) if failed.1);
                let ran = if !replacing && self.limits.tripped.get() != Trip::None {
                    let function = String::from_utf8_lossy(&self.func).into_owned();
                    match self.limit_outcome(&chunk.name, &function) {
                        Some(tripped) => Err(Box::new(tripped)),
                        None => ran,
                    }
                } else {
                    ran
                };
                self.disarm();
                ran
            }
            None => Err(Box::new((
                Outcome::Err(Error::Internal("call without a chunk".into())),
                false,
            ))),
        };
        let ran = match ran {
            Err(failed) if failed.1 => Err(failed),
            ran if self.collect_uncounted(call) => {
                Err(Box::new((ran.err().map_or(Outcome::Ok, |f| f.0), true)))
            }
            ran => ran,
        };
        // a stream whose consumer stopped reading ends as cancelled (not as a failure), unless a
        // limit stopped it first
        let ran = match ran {
            Err(failed)
                if crate::channel::stream::consumer_closed()
                    && !matches!(
                        failed.0,
                        Outcome::Err(Error::TimeLimit { .. } | Error::MemoryLimit { .. })
                    ) =>
            {
                Err(Box::new((Outcome::Err(Error::Cancelled), failed.1)))
            }
            ran => ran,
        };
        if map {
            // the results go back in the call; the items' buffer is kept for the next batch
            std::mem::swap(&mut buf, &mut out);
            out.clear();
            self.batch_out = out;
        }
        self.chunk = chunk;
        // the arguments' prototypes are dropped here, the results' go back with them
        if !self.protos.is_empty() {
            drop_protos(&mut self.protos);
        }
        // a plain success (no batch, no function among the results) hands its results back by
        // value and leaves the record alone
        if let (Ok(()), false, false) = (&ran, map, self.encoder.has_protos()) {
            return Ok(buf);
        }
        let mut data = call.data.lock();
        data.items_done = items_done;
        self.encoder.move_protos(&mut data.protos);
        match ran {
            Ok(()) => Ok(buf),
            Err(failed) => {
                data.buf = buf;
                Err(failed)
            }
        }
    }

    /// Lua 5.5 builds the strings of `luaL_Buffer` (`string.rep`, `table.concat`, `string.format`,
    /// ...) in blocks its collector does not count, so their garbage never starts a cycle, and a
    /// buffer that grows past the memory limit fails without the emergency collection other
    /// allocations get: with a memory limit, a state whose uncounted bytes pass a quarter of it
    /// is collected after the call. Returns whether the state must be replaced (as `collect`).
    #[cfg(feature = "lua55")]
    fn collect_uncounted(&mut self, call: &Call) -> bool {
        let Some(limit) = self.memory_limit else {
            return false;
        };
        if self.heap.used().saturating_sub(self.st.gc_count_bytes()) <= limit / 4 {
            return false;
        }
        self.collect(call)
    }

    #[cfg(not(feature = "lua55"))]
    fn collect_uncounted(&mut self, _call: &Call) -> bool {
        false
    }

    /// A full garbage collection (twice: objects resurrected by finalizers go in the second),
    /// protected, under the time limit like a call (finalizers run Lua code). Errors raised by
    /// finalizers are dropped. Returns whether the state must be replaced (a limit tripped).
    fn collect(&mut self, call: &Call) -> bool {
        self.arm(call);
        let st = self.st;
        st.push_cclosure(COLLECT, 0);
        let rc = st.pcall(0, 0, MSGH);
        st.set_top(BASE);
        let tripped = self.limits.tripped.get() != Trip::None;
        self.disarm();
        // an allocation failure during the collection leaves the state in doubt too
        tripped || rc == ffi::LUA_ERRMEM
    }

    /// Loads `chunk` unless this state has it. Returns whether the state keeps it: a version
    /// already replaced when it is first loaded (its call was submitted before the recompile)
    /// runs once and is forgotten, since the log of removals has gone past it.
    fn ensure_loaded(&mut self, chunks: &Chunks, chunk: &Chunk) -> Result<bool, Failed> {
        // the chunk the lookup slots hold is loaded (forgetting or reloading it empties them):
        // a state called with one chunk again and again asks no hash set
        if chunk.id == crate::chunk::ANONYMOUS
            || chunk.id == self.lookup.chunk
            || self.loaded.ids.contains(&chunk.id)
        {
            return Ok(true);
        }
        let st = self.st;
        let rc = st.load_binary(&chunk.bytecode, &chunk.name);
        let rc = if rc == 0 {
            // running the top level and keeping what it made allocates: protected (see `Step`)
            let mut ctx = RunCtx::new(Step::Load, &[], chunk.id as i64);
            st.push_value(TRAMPOLINE);
            st.insert(-2);
            st.push_light_userdata(&mut ctx as *mut RunCtx as *mut c_void);
            st.insert(-2);
            st.pcall(2, 0, MSGH)
        } else {
            rc
        };
        if rc != 0 {
            let f = self.failure(rc, &chunk.name, "(top level)", |message| Error::ChunkLoad {
                chunk: chunk.name.clone(),
                message,
            });
            st.set_top(BASE);
            return Err(Box::new(f));
        }
        if self.lookup.chunk == chunk.id {
            self.forget_lookup();
        }
        let kept = chunks.registry().contains_id(chunk.id);
        if kept {
            self.loaded.ids.insert(chunk.id);
        }
        Ok(kept)
    }

    /// Forgets the loaded versions the registry no longer has: those removed since this state
    /// last looked (O(1) per recompile), or, if it fell too far behind, a check of each.
    fn drop_stale_chunks(&mut self, chunks: &Chunks) {
        let registry = chunks.registry();
        let st = self.st;
        let forget = |id: u64| forget_chunk(st, id);
        let loaded = &mut self.loaded;
        match registry.removed_since(loaded.removals_seen) {
            Some(removed) => {
                for id in removed {
                    if loaded.ids.remove(&id) {
                        forget(id);
                    }
                }
            }
            None => loaded.ids.retain(|&id| {
                let live = registry.contains_id(id);
                if !live {
                    forget(id);
                }
                live
            }),
        }
        loaded.removals_seen = registry.removals();
        // the chunk the lookup slots hold may be gone: they are filled again by the next call
        self.forget_lookup();
    }

    /// The outcome of a call that tripped the time limit or was interrupted (the state must then
    /// be replaced), if it did.
    fn limit_outcome(&self, chunk: &str, function: &str) -> Option<(Outcome, bool)> {
        let e = match self.limits.tripped.get() {
            Trip::None => return None,
            Trip::Time => Error::TimeLimit {
                chunk: chunk.into(),
                function: function.into(),
                seconds: self.time_limit.map_or(0.0, |d| d.as_secs_f64()),
                not_replaced: None,
            },
            Trip::Cancel => Error::Cancelled,
            Trip::Closed => Error::Stopped,
        };
        Some((Outcome::Err(e), true))
    }

    /// Turns a failed `lua_pcall` into an outcome; says whether the state must be replaced.
    fn failure(
        &self,
        rc: c_int,
        chunk: &str,
        function: &str,
        runtime: impl FnOnce(String) -> Error,
    ) -> (Outcome, bool) {
        if let Some(tripped) = self.limit_outcome(chunk, function) {
            return tripped;
        }
        if rc == ffi::LUA_ERRMEM || crate::abi::is_buffer_memory_error(self.st.to_bytes(-1)) {
            if let Some(bytes) = self.memory_limit.filter(|_| self.heap.take_limit_refusal()) {
                let e = Error::MemoryLimit {
                    chunk: chunk.into(),
                    function: function.into(),
                    bytes,
                    not_replaced: None,
                };
                return (Outcome::Err(e), true);
            }
            // the system refused: Lua's state is consistent after a memory error, and keeps
            // working once the memory is there again
            return (
                Outcome::Err(runtime(
                    "not enough memory (the system refused an allocation of this state)".into(),
                )),
                false,
            );
        }
        let message = match self.st.to_bytes(-1) {
            // LuaJIT cannot run the message handler after a stack overflow and says only this
            Some(m) if cfg!(feature = "luajit") && rc == ffi::LUA_ERRERR => format!(
                "{} (most likely a stack overflow: recursion too deep)",
                String::from_utf8_lossy(m)
            ),
            Some(m) => String::from_utf8_lossy(m).into_owned(),
            None if rc == ffi::LUA_ERRMEM => "not enough memory".into(),
            None => format!("(error object is a {} value)", self.st.type_name(-1)),
        };
        (Outcome::Err(runtime(message)), false)
    }
}

/// Takes a call's prototypes for the state (rare: only calls that send functions have any).
#[cold]
fn take_protos(mine: &mut Vec<Arc<value::Proto>>, call: &mut Vec<Arc<value::Proto>>) {
    std::mem::swap(mine, call);
}

#[cold]
fn drop_protos(protos: &mut Vec<Arc<value::Proto>>) {
    protos.clear();
}

impl RunCtx {
    fn new(step: Step, args: &[u8], chunk_id: i64) -> RunCtx {
        RunCtx {
            step,
            args: args.as_ptr(),
            args_len: args.len(),
            chunk_id,
            failure: Failure::None,
            protos: &[],
            fns: std::ptr::null_mut(),
            callee_in_slot: false,
            nested: false,
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some((w, slot)) = &self.watch {
            w.unregister(slot);
        }
        LIMITS.with(|l| {
            if std::ptr::eq(l.get(), &*self.limits) {
                l.set(std::ptr::null());
            }
        });
    }
}

/// `luaopen_vmpool`, for pool states' `package.preload`.
#[cfg(feature = "module")]
const LUAOPEN_VMPOOL: ffi::lua_CFunction = crate::lua::c_function(crate::luaopen_vmpool);
