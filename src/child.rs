//! A child state: a Lua state created on its worker thread with vmpool's counting allocator
//! ([`crate::state_heap`]), with the standard libraries, the pool's `init` code and the chunks it
//! has been asked to run.
//!
//! Stack layout at rest (the state's main thread): slot 1 the message handler (adds a traceback),
//! slot 2 the call trampoline (a C closure over slot 3), slot 3 the table of loaded chunks
//! (`chunk id -> table the chunk returned | false`, `-id -> the chunk's environment`, `0 -> the
//! environments' shared metatable`), slot 4 the last function name. A call pushes
//! the trampoline, a pointer to its [`RunCtx`] and the function name, and runs it under
//! `lua_pcall`, so every Lua error (including running out of memory while decoding the arguments)
//! lands in one place.

use std::cell::Cell;
use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::ffi;

use crate::call::{Call, Job, Outcome};
use crate::chunk::{Chunk, Chunks};
use crate::config::Config;
use crate::error::lua_number;
use crate::lua::{State, TFUNCTION, TNIL, TTABLE};
use crate::state_heap::OwnedState;
use crate::value::{self, Role};
use crate::Error;

const MSGH: c_int = 1;
const TRAMPOLINE: c_int = 2;
const CHUNKS: c_int = 3;
/// The name of the function called last, kept as a Lua string: most calls name the same function
/// as the one before, and pushing the kept string is much cheaper than interning it again.
const FUNC_NAME: c_int = 4;
const BASE: c_int = 4;

/// Most results one call may return: what the host can push onto its stack in one C call (Lua 5.1
/// and LuaJIT allow 8,000 slots per C call, Lua 5.4 a million per thread), less a margin.
const MAX_RESULTS: c_int = if cfg!(any(feature = "lua51", feature = "luajit")) {
    7_900
} else {
    900_000
};

/// VM instructions between two checks of the time limit and of cancellation.
const HOOK_COUNT: c_int = 1000;

pub struct Child {
    /// Owns the state; dropping it closes the state.
    heap: OwnedState,
    st: State,
    /// The chunk versions this state has loaded.
    loaded: LoadedChunks,
    chunk_epoch: u64,
    /// Whether the limit hook is installed.
    hooked: bool,
    limits: Box<Limits>,
    /// Reused buffer for the function name (results go into the call's buffer).
    func: Vec<u8>,
    /// The name held in slot `FUNC_NAME`.
    func_in_slot: Vec<u8>,
    encoder: value::Encoder,
    time_limit: Option<Duration>,
    memory_limit: Option<usize>,
}

/// What the limit hook checks, shared with it through a thread-local pointer.
struct Limits {
    deadline: Cell<Option<Instant>>,
    interrupt: Cell<*const AtomicBool>,
    tripped: Cell<Trip>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Trip {
    None,
    Time,
    Cancel,
}

thread_local! {
    static LIMITS: Cell<*const Limits> = const { Cell::new(std::ptr::null()) };
}

/// The chunk versions a state has loaded (a set: a state may hold thousands, and every call asks),
/// and how far it has read the registry's log of removed versions.
#[derive(Default)]
struct LoadedChunks {
    ids: HashSet<u64, BuildHasherDefault<IdHasher>>,
    removals_seen: u64,
}

/// Chunk ids are consecutive integers: one multiplication spreads them well enough.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Passed to the trampoline through a light userdata; plain data only, since a Lua error may jump
/// over the frames that use it.
struct RunCtx {
    step: Step,
    args: *const u8,
    args_len: usize,
    chunk_id: i64,
    failure: Failure,
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
    pub fn new(cfg: &Config) -> Result<Child, Error> {
        let heap = OwnedState::new()?;
        let st = heap.state();
        if !st.check_stack(8) {
            return Err(Error::Spawn("no Lua stack space".into()));
        }
        st.push_cclosure(MESSAGE_HANDLER, 0);
        st.create_table(0, 0);
        st.push_value(-1);
        st.push_cclosure(TRAMPOLINE_FN, 1);
        st.insert(TRAMPOLINE);
        st.push_str("");

        // The buffers are allocated up front, so that what a state holds natively does not depend
        // on what it has run (the soak's leak check compares it exactly: bench/soak.lua).
        let mut child = Child {
            heap,
            st,
            loaded: LoadedChunks {
                ids: HashSet::with_capacity_and_hasher(4, Default::default()),
                removals_seen: 0,
            },
            chunk_epoch: u64::MAX,
            hooked: false,
            limits: Box::new(Limits {
                deadline: Cell::new(None),
                interrupt: Cell::new(std::ptr::null()),
                tripped: Cell::new(Trip::None),
            }),
            func: Vec::new(),
            func_in_slot: Vec::with_capacity(32),
            encoder: value::Encoder::with_depth(8),
            time_limit: cfg.time_limit,
            memory_limit: cfg.memory_limit,
        };
        child.configure(cfg)?;
        Ok(child)
    }

    fn configure(&mut self, cfg: &Config) -> Result<(), Error> {
        let st = self.st;
        st.push_globals();
        if st.raw_get_str(-1, "package") == TTABLE {
            if let Some(p) = &cfg.package_path {
                st.push_bytes(p);
                st.raw_set_str(-2, "path");
            }
            if let Some(p) = &cfg.package_cpath {
                st.push_bytes(p);
                st.raw_set_str(-2, "cpath");
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
        }
        self.run_init(cfg)?;
        if cfg.time_limit.is_some() {
            // SAFETY: installs our hook on this state's main thread (coroutines created later
            // inherit it); the hook only reads this thread's `LIMITS`.
            unsafe {
                ffi::lua_sethook(
                    st.as_ptr(),
                    Some(limit_hook),
                    ffi::LUA_MASKCOUNT,
                    HOOK_COUNT,
                )
            };
            self.hooked = true;
        }
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
            lim.deadline.set(crate::call::deadline_after(Some(limit)));
            lim.interrupt.set(std::ptr::null());
            lim.tripped.set(Trip::None);
            LIMITS.with(|l| l.set(lim));
        }
        let result = self.exec(init, "init");
        let tripped = self.limits.tripped.replace(Trip::None) != Trip::None;
        if timed.is_some() {
            LIMITS.with(|l| l.set(std::ptr::null()));
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
            Err(m) => Err(Error::Init(m)),
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

    /// Runs `call` (which is RUNNING and owned by this worker). Returns its outcome and whether
    /// the state must be replaced (a limit was hit).
    pub fn run(&mut self, chunks: &Chunks, call: &Arc<Call>) -> (Outcome, bool) {
        let epoch = chunks.epoch();
        if epoch != self.chunk_epoch {
            self.drop_stale_chunks(chunks);
            self.chunk_epoch = epoch;
        }
        // Take what the call needs out of it and let go of its lock: the caller may need the
        // lock while the call runs (a scheduler subscribing to it, `cancel`).
        let (job, chunk, mut buf) = {
            let mut data = call.data.lock();
            std::mem::swap(&mut self.func, &mut data.func);
            (data.job, data.chunk.clone(), std::mem::take(&mut data.buf))
        };
        if job == Job::Collect {
            let replace = self.collect(call);
            let mut data = call.data.lock();
            data.buf = buf;
            std::mem::swap(&mut self.func, &mut data.func);
            return (Outcome::Collected, replace);
        }
        let (outcome, replace) = match chunk {
            Some(chunk) => {
                self.arm(call);
                let result = match self.ensure_loaded(chunks, &chunk) {
                    Ok(kept) => {
                        let result = self.call(&chunk, &mut buf);
                        if !kept {
                            forget_chunk(self.st, chunk.id);
                        }
                        result
                    }
                    Err(failed) => failed,
                };
                // The hook stops a coroutine that runs too long, but the function that resumed
                // it may swallow the error and return before the hook fires in its own thread:
                // a call that tripped a limit fails whatever it returned.
                let result = if !result.1 && self.limits.tripped.get() != Trip::None {
                    let function = String::from_utf8_lossy(&self.func).into_owned();
                    self.limit_outcome(&chunk.name, &function).unwrap_or(result)
                } else {
                    result
                };
                self.disarm();
                result
            }
            None => (
                Outcome::Err(Error::Internal("call without a chunk".into())),
                false,
            ),
        };
        let mut data = call.data.lock();
        data.buf = buf;
        std::mem::swap(&mut self.func, &mut data.func);
        (outcome, replace)
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

    fn arm(&mut self, call: &Call) {
        if !self.hooked {
            return;
        }
        let lim = &*self.limits;
        lim.deadline
            .set(crate::call::deadline_after(self.time_limit));
        lim.interrupt.set(&call.interrupt);
        lim.tripped.set(Trip::None);
        LIMITS.with(|l| l.set(lim));
    }

    fn disarm(&mut self) {
        if !self.hooked {
            return;
        }
        LIMITS.with(|l| l.set(std::ptr::null()));
        self.limits.interrupt.set(std::ptr::null());
    }

    /// Loads `chunk` unless this state has it. Returns whether the state keeps it: a version
    /// already replaced when it is first loaded (its call was submitted before the recompile)
    /// runs once and is forgotten, since the log of removals has gone past it.
    fn ensure_loaded(&mut self, chunks: &Chunks, chunk: &Chunk) -> Result<bool, (Outcome, bool)> {
        if self.loaded.ids.contains(&chunk.id) {
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
            return Err(f);
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
    }

    fn call(&mut self, chunk: &Chunk, buf: &mut Vec<u8>) -> (Outcome, bool) {
        let st = self.st;
        let func_name = || String::from_utf8_lossy(&self.func).into_owned();
        if self.func != self.func_in_slot {
            // a new string: protected (see `Step`)
            let mut ctx = RunCtx::new(Step::PushName, &self.func, 0);
            st.push_value(TRAMPOLINE);
            st.push_light_userdata(&mut ctx as *mut RunCtx as *mut c_void);
            let rc = st.pcall(1, 1, MSGH);
            if rc != 0 {
                let failed =
                    self.failure(rc, &chunk.name, &func_name(), |message| Error::Runtime {
                        chunk: chunk.name.clone(),
                        function: func_name(),
                        message,
                    });
                st.set_top(BASE);
                return failed;
            }
            st.replace(FUNC_NAME);
            self.func_in_slot.clear();
            self.func_in_slot.extend_from_slice(&self.func);
        }
        // Decoding the arguments allocates, which can hit the memory limit or run a finalizer
        // the chunk left behind that raises: it runs inside the trampoline's protected call.
        let mut ctx = RunCtx::new(Step::Call, buf, chunk.id as i64);
        st.push_value(TRAMPOLINE);
        st.push_light_userdata(&mut ctx as *mut RunCtx as *mut c_void);
        st.push_value(FUNC_NAME);
        let rc = st.pcall(2, ffi::LUA_MULTRET, MSGH);
        if rc != 0 {
            let failed = self.failure(rc, &chunk.name, &func_name(), |message| Error::Runtime {
                chunk: chunk.name.clone(),
                function: func_name(),
                message,
            });
            st.set_top(BASE);
            return failed;
        }
        let outcome = match ctx.failure {
            Failure::None if st.top() - BASE > MAX_RESULTS => {
                Outcome::Err(Error::Unsupported(format!(
                    "cannot pass the results of '{}': it returned {} values, more than the {MAX_RESULTS} that can cross at once on {} (return them in a table)",
                    func_name(),
                    st.top() - BASE,
                    crate::abi::RUNTIME
                )))
            }
            Failure::None => {
                buf.clear();
                let n = st.top() - BASE;
                match self
                    .encoder
                    .encode(st, BASE + 1, n, buf, Role::Result(&self.func))
                {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Err(e),
                }
            }
            Failure::NoFunction { global } => Outcome::Err(Error::NoFunction {
                chunk: chunk.name.clone(),
                function: func_name(),
                global,
            }),
            Failure::Corrupt(what) => {
                Outcome::Err(Error::Internal(format!("bad call message: {what}")))
            }
            Failure::OutOfMemory => {
                st.set_top(BASE);
                st.push_str("not enough memory");
                let failed = self.failure(ffi::LUA_ERRMEM, &chunk.name, &func_name(), |m| {
                    Error::Runtime {
                        chunk: chunk.name.clone(),
                        function: func_name(),
                        message: m,
                    }
                });
                st.set_top(BASE);
                return failed;
            }
        };
        st.set_top(BASE);
        (outcome, false)
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

impl RunCtx {
    fn new(step: Step, args: &[u8], chunk_id: i64) -> RunCtx {
        RunCtx {
            step,
            args: args.as_ptr(),
            args_len: args.len(),
            chunk_id,
            failure: Failure::None,
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        LIMITS.with(|l| {
            if std::ptr::eq(l.get(), &*self.limits) {
                l.set(std::ptr::null());
            }
        });
    }
}

/// Adds the child's traceback to an error message. Other error values are shown the way the
/// standalone interpreter shows them: numbers as numbers, objects through their `__tostring`
/// (called protected: one that raises is described instead), anything else by its type.
const MESSAGE_HANDLER: ffi::lua_CFunction = crate::lua::c_function(message_handler);
unsafe extern "C-unwind" fn message_handler(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls the handler with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    st.set_top(1);
    match st.type_of(1) {
        crate::lua::TSTRING => {
            // LuaJIT calls the handler for a stack overflow with no room to build a traceback
            // (trying ends as "error in error handling"): keep the message as it is
            if cfg!(feature = "luajit") && st.string_bytes(1).ends_with(b"stack overflow") {
                return 1;
            }
        }
        crate::lua::TNUMBER => {
            // SAFETY: converts the number in slot 1 to a string in place (the handler owns it)
            unsafe { ffi::lua_tolstring(l, 1, std::ptr::null_mut()) };
        }
        _ => {
            let what = st.type_name(1);
            let has_tostring = st.get_metatable(1) && {
                let has = st.raw_get_str(-1, "__tostring") != TNIL;
                st.pop(2);
                has
            };
            let shown = has_tostring && {
                st.push_cclosure(TOSTRING_FN, 0);
                st.push_value(1);
                st.pcall(1, 1, 0) == 0 && st.type_of(-1) == crate::lua::TSTRING
            };
            if shown {
                st.replace(1);
            } else {
                st.set_top(0);
                st.push_str("(error object is a ");
                st.push_str(what);
                st.push_str(if has_tostring {
                    " value whose __tostring failed)"
                } else {
                    " value)"
                });
                // SAFETY: three strings are on the stack.
                unsafe { ffi::lua_concat(l, 3) };
            }
        }
    }
    if !st.check_stack(ffi::LUA_TRACEBACK_STACK) {
        return 1;
    }
    // SAFETY: slot 1 holds a string (Lua strings are NUL-terminated and stay alive on the stack
    // during the call); luaL_traceback pushes the message with the traceback appended.
    unsafe {
        let msg: *const c_char = ffi::lua_tolstring(l, 1, std::ptr::null_mut());
        ffi::luaL_traceback(l, l, msg, 1);
    }
    1
}

/// Runs a full garbage collection, twice, inside the child's protected call. A plain C function,
/// not `lua_function!`: a finalizer's error unwinds through it (LuaJIT unwinds with a foreign
/// exception, which `catch_unwind` would turn into an abort).
const COLLECT: ffi::lua_CFunction = crate::lua::c_function(collect_garbage);
unsafe extern "C-unwind" fn collect_garbage(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread; nothing in this frame has a
    // destructor, so an error raised by a finalizer may pass through to the enclosing pcall.
    let st = unsafe { State::from_raw(l) };
    st.gc_collect();
    st.gc_collect();
    0
}

/// `__tostring` of the value in slot 1, for the message handler (which calls it protected).
const TOSTRING_FN: ffi::lua_CFunction = crate::lua::c_function(call_tostring);
unsafe extern "C-unwind" fn call_tostring(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state; luaL_callmeta pushes the metamethod's
    // result (its errors go to the `lua_pcall` of the message handler).
    unsafe { ffi::luaL_callmeta(l, 1, c"__tostring".as_ptr()) as isize }
}

/// Runs one call inside the child's protected call: finds the function, pushes the arguments,
/// calls it and returns all its results.
const TRAMPOLINE_FN: ffi::lua_CFunction = crate::lua::c_function(trampoline);
unsafe extern "C-unwind" fn trampoline(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls the trampoline with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    // SAFETY: `Child::call` pushed a pointer to a `RunCtx` that outlives this protected call.
    let ctx = unsafe { &mut *(st.to_userdata(1) as *mut RunCtx) };
    // SAFETY: `RunCtx` points at the call's argument buffer (or the function name), which the
    // worker keeps alive and unchanged during the call.
    let args = unsafe { std::slice::from_raw_parts(ctx.args, ctx.args_len) };
    match ctx.step {
        Step::Call => {}
        Step::PushName => {
            st.push_bytes(args);
            return 1;
        }
        Step::Load => {
            load_chunk(st, ctx.chunk_id);
            return 0;
        }
    }
    st.remove(1); // [name]
    if let Err(global) = find_function(st, ffi::lua_upvalueindex(1), ctx.chunk_id, 1) {
        ctx.failure = Failure::NoFunction { global };
        return 0;
    }
    st.replace(1); // [function]
    let nargs = match value::push_values(st, args) {
        Ok(n) => n,
        Err(c) => {
            ctx.failure = Failure::Corrupt(c.0);
            return 0;
        }
    };
    // SAFETY: the function and `nargs` arguments are on the stack; errors propagate to the
    // enclosing `lua_pcall` (see above).
    unsafe { ffi::lua_call(l, nargs, ffi::LUA_MULTRET) };
    // The results are encoded after this protected call returns, and nested tables need stack
    // space for that. Growing the stack there raises "not enough memory" unprotected on Lua 5.1
    // and LuaJIT (ending the process) in a state at its memory limit; reserve it here instead.
    // (A `false` from `check_stack` means the stack's size limit on Lua 5.1 and LuaJIT, which
    // the encoder then reports, but usually no memory on Lua 5.2 to 5.4, which say no instead
    // of raising.)
    let n = st.top();
    if (1..=n).any(|i| st.type_of(i) == TTABLE)
        && !st.check_stack(ENCODE_STACK)
        && cfg!(not(any(feature = "lua51", feature = "luajit")))
        && n < 900_000
    {
        ctx.failure = Failure::OutOfMemory;
        return 0;
    }
    n as isize
}

/// Drops loaded chunk `id` (what it returned and its environment). Storing nil allocates nothing.
fn forget_chunk(st: State, id: u64) {
    st.push_nil();
    st.raw_seti(CHUNKS, id as i64);
    st.push_nil();
    st.raw_seti(CHUNKS, -(id as i64));
}

/// Inside the trampoline, with `[ctx, chunk function]` on the stack: runs the chunk's top level in
/// an environment of its own, whose reads fall through to the state's globals (where `init` put
/// its helpers) and which keeps the chunk's own globals, and stores what the top level returned
/// (a table, else `false`) as `chunks[id]` and the environment as `chunks[-id]`. Chunks thus
/// never see each other's globals, and a version's functions are exactly what it defines.
fn load_chunk(st: State, id: i64) {
    let chunks = ffi::lua_upvalueindex(1);
    st.remove(1); // [f]
    st.create_table(0, 4); // [f, env]
                           // one metatable for every environment, kept at chunks[0]
    if st.raw_geti(chunks, 0) != TTABLE {
        st.pop(1);
        st.create_table(0, 1);
        st.push_globals();
        st.raw_set_str(-2, "__index");
        st.push_value(-1);
        st.raw_seti(chunks, 0);
    }
    st.set_metatable(-2);
    st.push_value(-1);
    st.set_env(1); // [f, env]
    st.push_value(1);
    // SAFETY: a function is on top; its errors propagate to the enclosing `lua_pcall`.
    unsafe { ffi::lua_call(st.as_ptr(), 0, 1) }; // [f, env, returned]
    if st.type_of(-1) != TTABLE {
        st.pop(1);
        st.push_bool(false);
    }
    st.raw_seti(chunks, id);
    st.raw_seti(chunks, -id);
}

/// Pushes the function a call names: field `name` (the string at slot `name`) of the table chunk
/// `id` returned (found in the table at `chunks`), else the chunk's own global of that name (in
/// its environment, `chunks[-id]`; not the state's globals). Raw gets: no metamethod runs, so
/// this cannot raise. On failure pushes nothing and says whether the chunk
/// returned no table (so only the globals were searched).
fn find_function(st: State, chunks: c_int, id: i64, name: c_int) -> Result<(), bool> {
    // `replace(-2)` drops the table under the function (cheaper than `remove`, which rotates)
    let returned_table = st.raw_geti(chunks, id) == TTABLE;
    if returned_table {
        st.push_value(name);
        if st.raw_get(-2) != TNIL {
            st.replace(-2);
            return check_callable(st, returned_table);
        }
        st.pop(1);
    }
    st.pop(1);
    st.raw_geti(chunks, -id);
    if st.type_of(-1) != TTABLE {
        st.pop(1);
        return Err(!returned_table);
    }
    st.push_value(name);
    st.raw_get(-2);
    st.replace(-2);
    check_callable(st, returned_table)
}

fn check_callable(st: State, returned_table: bool) -> Result<(), bool> {
    if is_callable(st, -1) {
        Ok(())
    } else {
        st.pop(1);
        Err(!returned_table)
    }
}

fn is_callable(st: State, idx: c_int) -> bool {
    match st.type_of(idx) {
        TFUNCTION => true,
        TNIL => false,
        _ => {
            if !st.get_metatable(idx) {
                return false;
            }
            let t = st.raw_get_str(-1, "__call");
            st.pop(2);
            t != TNIL
        }
    }
}

// `tripped()` in a child: whether the running call hit its time limit or was interrupted (the
// `xpcall` guard asks it; see `Child::guard_xpcall`).
crate::lua_function!(fn LIMIT_TRIPPED => limit_tripped);
fn limit_tripped(st: State) -> Result<c_int, Error> {
    let tripped = LIMITS.with(|c| {
        let p = c.get();
        // SAFETY: as in `limit_hook`: set only while a call is armed on this thread.
        !p.is_null() && unsafe { (*p).tripped.get() } != Trip::None
    });
    st.push_bool(tripped);
    Ok(1)
}

/// The count hook behind `time_limit` and cancelling running calls.
unsafe extern "C-unwind" fn limit_hook(l: *mut ffi::lua_State, _ar: *mut ffi::lua_Debug) {
    let trip = LIMITS.with(|c| {
        let p = c.get();
        if p.is_null() {
            return Trip::None;
        }
        // SAFETY: `LIMITS` points at the running child's `Limits` while a call is armed, and is
        // reset before that child is dropped; the hook runs on the child's own thread.
        let lim = unsafe { &*p };
        if lim.tripped.get() != Trip::None {
            return lim.tripped.get();
        }
        let interrupt = lim.interrupt.get();
        // SAFETY: the interrupt flag belongs to the call being run, alive while it is armed.
        if !interrupt.is_null() && unsafe { (*interrupt).load(Ordering::Relaxed) } {
            lim.tripped.set(Trip::Cancel);
        } else if lim.deadline.get().is_some_and(|d| Instant::now() >= d) {
            lim.tripped.set(Trip::Time);
        }
        lim.tripped.get()
    });
    let msg: &'static str = match trip {
        Trip::None => return,
        Trip::Time => "vmpool: time limit exceeded",
        Trip::Cancel => "vmpool: call was cancelled",
    };
    // SAFETY: from now on the hook fires on every instruction, so a script that catches the error
    // with pcall is stopped again at its next instruction until the error reaches our own
    // `lua_pcall`. Nothing in this frame has a destructor when `lua_error` jumps out of it.
    unsafe {
        ffi::lua_sethook(l, Some(limit_hook), ffi::LUA_MASKCOUNT, 1);
        ffi::lua_pushlstring(l, msg.as_ptr() as *const c_char, msg.len());
        ffi::lua_error(l);
    }
}
