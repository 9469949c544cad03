//! What every host function that makes a call shares: the pool handle and how it prepares a
//! call from Lua arguments (chunk lookup, argument encoding into a reused call record), pushing a
//! finished call's outcome back, the host thread's wait budget, and bad-argument errors. Every
//! host API that makes or waits for a call builds on it (pool, future, map, notifier, channel and
//! the registry of waits); of those, the future API is the one the others also use.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::call::{Call, Waited};
use crate::chunk::Chunk;
use crate::host::userdata;
use crate::lua::protect::{decode_protected, protected};
use crate::lua::{lua_State, HookMark, State};
use crate::pool::call_cache::CallCache;
use crate::pool::Pool;
use crate::spin::AdaptiveSpin;
use crate::value::{self, Role};
use crate::Error;

/// Most a blocking caller spins for a result before parking.
pub(super) const RESULT_SPIN: Duration = Duration::from_micros(50);

/// Most arguments one call may pass, the same on every runtime: a child state on Lua 5.1 or
/// LuaJIT holds about 8,000 stack slots for the function, its arguments, the encoder and vmpool.
pub const MAX_ARGS: c_int = 7_500;

/// The error for a call of `func` given more than [`MAX_ARGS`] arguments.
pub fn too_many_args(func: &[u8], n: i64) -> Error {
    Error::Unsupported(format!(
        "cannot pass the arguments of '{}': {n} arguments are more than the {MAX_ARGS} a call can take (pass them in a table)",
        String::from_utf8_lossy(func)
    ))
}

thread_local! {
    /// The host thread's spin budget for waiting on results (one per OS thread, shared by its pools).
    pub static RESULT_WAIT: AdaptiveSpin = AdaptiveSpin::new(RESULT_SPIN, false);
}

/// A host thread's wait that Ctrl-C can end. The standalone interpreters answer SIGINT by setting
/// a hook on the main state (see [`State::hook_mark`]); a wait notes the hooks before it first
/// sleeps (so a call that finishes while the host spins pays nothing for this) and gives up when
/// they change. A signal in the few microseconds of spinning before that is noted with the hooks,
/// so it takes effect when the call finishes, as it did before waits could be interrupted.
pub struct HostWait {
    st: State,
    mark: Option<HookMark>,
    /// The universe's main thread if the caller knows it (see [`State::hook_mark_with`]).
    main: Option<*mut lua_State>,
}

impl HostWait {
    pub fn new(st: State) -> HostWait {
        HostWait {
            st,
            mark: None,
            main: None,
        }
    }

    /// A wait by `st`, whose universe's main thread is `main` ([`State::main_thread`]): noting
    /// the hooks then asks Lua nothing but them.
    ///
    /// # Safety
    /// `main` is null or the main thread of `st`'s universe.
    pub unsafe fn with_main(st: State, main: *mut lua_State) -> HostWait {
        HostWait {
            st,
            mark: None,
            main: Some(main),
        }
    }

    fn hook_mark(&self) -> HookMark {
        match self.main {
            // SAFETY: `with_main`'s contract.
            Some(main) => unsafe { self.st.hook_mark_with(main) },
            None => self.st.hook_mark(),
        }
    }

    /// The check a wait calls: the first call notes the hooks, later ones compare.
    pub fn changed(&mut self) -> bool {
        let now = self.hook_mark();
        match self.mark {
            None => {
                self.mark = Some(now);
                false
            }
            Some(m) => m != now,
        }
    }

    /// Waits for `call` until it is done, `deadline` passes, or the hooks change; the call goes
    /// on in the pool in the last two cases.
    pub fn call(&mut self, call: &Call, deadline: Option<std::time::Instant>) -> Waited {
        RESULT_WAIT.with(|spin| self.call_with(call, deadline, spin))
    }

    /// [`HostWait::call`] with the spin budget `spin` (a pool handle's own: no thread-local).
    #[inline]
    pub fn call_with(
        &mut self,
        call: &Call,
        deadline: Option<std::time::Instant>,
        spin: &AdaptiveSpin,
    ) -> Waited {
        self.mark = None;
        call.wait_unless(deadline, spin, || self.changed())
    }

    /// The error for a wait the hooks' change cut short. It first lets the interpreter's pending
    /// hook run (a protected call of nothing: the hook fires on the call), so that `lua`'s own
    /// "interrupted!" is raised now, named in the message, rather than inside a later push. A
    /// hook set on the main thread while a coroutine waits cannot fire here: the coroutine's
    /// wait ends with an error and the hook fires once the main thread runs. `None` when only
    /// this thread's hook changed and nothing raised (a hook set for another reason): the caller
    /// waits again.
    pub fn interrupt_error(&self, doing: &str) -> Option<Error> {
        self.interrupted(&format!(
            "{doing} waited for a call, which goes on in the pool"
        ))
    }

    /// [`HostWait::interrupt_error`] for a wait that is not a call's (a channel's): `doing` says
    /// what was interrupted.
    pub fn interrupt_error_for(&self, doing: &str) -> Option<Error> {
        self.interrupted(&format!("{doing} was waiting (nothing was sent or taken)"))
    }

    fn interrupted(&self, doing: &str) -> Option<Error> {
        let st = self.st;
        let doing = || doing.to_string();
        match protected(st, 0, doing, &mut |_| 0) {
            Err(e) => Some(e),
            Ok(_) if self.mark.is_some_and(|m| m.main_changed(&self.hook_mark())) => {
                Some(Error::Interrupted {
                    doing: doing(),
                    raised: "a signal hook is pending on the main thread".into(),
                })
            }
            Ok(_) => None,
        }
    }
}

/// What the pool userdata holds.
pub struct PoolHandle {
    pub pool: Arc<Pool>,
    /// The main thread of the host state that made the pool (see [`HostWait::with_main`]).
    pub(super) main: *mut lua_State,
    /// The chunk named by the last call, valid while the registry epoch is unchanged.
    pub(super) last_chunk: Option<(u64, Arc<Chunk>)>,
    /// Finished calls kept for reuse, so a call allocates nothing in the steady state.
    pub(super) cache: CallCache,
    pub(super) closed: bool,
    pub(super) encoder: value::Encoder,
    /// `pool:invoke`'s spin budget for results (the handle is used by one thread at a time; the
    /// other waits share the thread's, [`RESULT_WAIT`]).
    pub(super) spin: AdaptiveSpin,
}

impl userdata::Tagged for PoolHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0001;
    const NAME: &'static str = "pool";
}

impl PoolHandle {
    pub(super) fn check(&self) -> Result<(), Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        self.pool.check_process()
    }

    #[inline]
    pub(super) fn chunk(&mut self, name: &[u8]) -> Result<Arc<Chunk>, Error> {
        if let Some((e, c)) = &self.last_chunk {
            if *e == self.pool.chunks.epoch() && crate::call::same_name(c.name.as_bytes(), name) {
                return Ok(c.clone());
            }
        }
        self.chunk_looked_up(name)
    }

    /// [`PoolHandle::chunk`] when the last one is not it: the registry's, noted for next time.
    #[inline(never)]
    fn chunk_looked_up(&mut self, name: &[u8]) -> Result<Arc<Chunk>, Error> {
        let epoch = self.pool.chunks.epoch();
        let chunk = self
            .pool
            .chunks
            .get(name)
            .ok_or_else(|| Error::UnknownChunk(String::from_utf8_lossy(name).into_owned()))?;
        self.last_chunk = Some((epoch, chunk.clone()));
        Ok(chunk)
    }

    /// Builds a call from `pool:METHOD(chunk, fn, ...)` arguments at stack slots 2.. .
    pub fn prepare(&mut self, st: State, method: &str) -> Result<Arc<Call>, Error> {
        self.prepare_with(st, 2, method, None)
    }

    /// Builds a call from arguments `chunk, fn, ...` (or `fn, ...` with a function) starting at
    /// stack slot `base`, in a call record taken from `cache` (this pool's own if `None`; given
    /// back to it on error).
    pub fn prepare_with(
        &mut self,
        st: State,
        base: c_int,
        method: &str,
        cache: Option<&mut CallCache>,
    ) -> Result<Arc<Call>, Error> {
        self.check()?;
        let Some(name) = st.to_bytes(base) else {
            if st.type_of(base) == crate::lua::TFUNCTION {
                return self.prepare_function(st, base, cache);
            }
            return Err(bad_arg(
                st,
                base,
                1,
                method,
                "a chunk name (string) or a function",
            ));
        };
        let func = st
            .to_bytes(base + 1)
            .ok_or_else(|| bad_arg(st, base + 1, 2, method, "a function name (string)"))?;
        let chunk = self.chunk(name)?;
        let nargs = st.top() - (base + 2) + 1;
        if nargs > MAX_ARGS {
            return Err(too_many_args(func, nargs.into()));
        }
        let cache = match cache {
            Some(c) => c,
            None => &mut self.cache,
        };
        let mut call = cache.take(Some(&self.pool));
        let encoded = match Arc::get_mut(&mut call) {
            Some(c) => {
                let d = c.data.get_mut();
                // (a record of this handle's cache keeps its last call's name)
                if !crate::call::same_name(&d.func, func) {
                    d.func.clear();
                    d.func.extend_from_slice(func);
                }
                d.chunk = Some(chunk);
                // nil, booleans, numbers and strings (most calls' arguments) skip the encoder's
                // table bookkeeping, and need no stack room
                if self.encoder.encode_scalars(st, base + 2, nargs, &mut d.buf) {
                    return Ok(call);
                }
                match reserve_encoding_stack(st, base + 2).and_then(|()| {
                    self.encoder
                        .encode(st, base + 2, nargs, &mut d.buf, Role::Argument(func))
                }) {
                    Ok(()) => {
                        self.encoder.move_protos(&mut d.protos);
                        Ok(())
                    }
                    Err(e) => {
                        self.encoder.drop_protos();
                        Err(e)
                    }
                }
            }
            None => Err(Error::Internal("a spare call was shared".into())),
        };
        match encoded {
            Ok(()) => Ok(call),
            Err(e) => {
                cache.put(call);
                Err(e)
            }
        }
    }

    /// Builds a call from `fn, ...` at stack slots `base..`, `fn` a function: the function
    /// travels first in the message, its prototype beside it (see `value/func.rs`), and the
    /// anonymous chunk stands for the chunk.
    #[cold]
    #[inline(never)]
    fn prepare_function(
        &mut self,
        st: State,
        base: c_int,
        cache: Option<&mut CallCache>,
    ) -> Result<Arc<Call>, Error> {
        let count = st.top() - base + 1;
        if count - 1 > MAX_ARGS {
            let label = value::label_of(st, base);
            return Err(too_many_args(label.as_bytes(), (count - 1).into()));
        }
        // the arguments' room; the function's own upvalues get it from the encoder if one of
        // them nests (`value::func::reserve_stack`), so a closure over scalars pays nothing
        reserve_encoding_stack(st, base + 1)?;
        let cache = match cache {
            Some(c) => c,
            None => &mut self.cache,
        };
        let mut call = cache.take(Some(&self.pool));
        let Some(c) = Arc::get_mut(&mut call) else {
            return Err(Error::Internal("a spare function call was shared".into()));
        };
        let d = c.data.get_mut();
        let encoded = self
            .encoder
            .encode(st, base, count, &mut d.buf, Role::Callee);
        self.encoder.move_protos(&mut d.protos);
        d.func.clear();
        d.func.extend_from_slice(match d.protos.first() {
            Some(p) => p.label().as_bytes(),
            None => value::c_function_first(&d.buf).unwrap_or(b"C function"),
        });
        d.chunk = Some(Chunk::anonymous());
        match encoded {
            Ok(()) => Ok(call),
            Err(e) => {
                cache.put(call);
                Err(e)
            }
        }
    }

    /// Gives a finished call back for reuse.
    pub fn recycle(&mut self, call: Arc<Call>) {
        self.cache.put(call);
    }
}

/// Stack slots that encoding nested tables needs: two per level and the encoder's margin.
#[cfg(any(feature = "lua51", feature = "luajit"))]
const ENCODE_STACK: c_int = 2 * value::MAX_DEPTH as c_int + 16;

/// Encoding table and function arguments grows the stack, which raises "not enough memory" on
/// Lua 5.1 and LuaJIT when it cannot: make that room first, protected, if any argument from
/// `first` on is a table or a function (the encoder's own checks then find it there).
#[cfg(any(feature = "lua51", feature = "luajit"))]
fn reserve_encoding_stack(st: State, first: c_int) -> Result<(), Error> {
    let nests = |t| t == crate::lua::TTABLE || t == crate::lua::TFUNCTION;
    if !(first..=st.top()).any(|i| nests(st.type_of(i))) {
        return Ok(());
    }
    protected(
        st,
        0,
        || "making stack room for the arguments".into(),
        &mut |st| {
            st.check_stack(ENCODE_STACK);
            0
        },
    )
    .map(|_| ())
}

/// Lua 5.2 to 5.5 grow the stack inside `lua_checkstack`'s own protected call and answer false
/// instead of raising: the encoder's own checks ask for the room each level needs.
#[cfg(not(any(feature = "lua51", feature = "luajit")))]
#[inline(always)]
fn reserve_encoding_stack(_: State, _: c_int) -> Result<(), Error> {
    Ok(())
}

/// "bad argument #`position` to `method`" for the value at stack slot `idx`.
pub fn bad_arg(st: State, idx: c_int, position: c_int, method: &str, expected: &str) -> Error {
    Error::BadArgument(format!(
        "bad argument #{} to '{method}': expected {expected}, got {}",
        position,
        st.type_name(idx)
    ))
}

/// Results pushed without a protected call when they are all scalars (see
/// [`value::push_scalars`]): a host C function starts with `LUA_MINSTACK` (20) free slots above
/// its arguments, and its stack is no higher than that when it pushes the results.
const UNPROTECTED_RESULTS: usize = 16;

/// Pushes the results of a finished call (or returns its error). Called by a host C function
/// whose stack is no higher than when it was called (it may have dropped arguments, never the
/// objects it holds: `userdata::hold`'s slots keep them alive).
/// No lock is held while the results are pushed, and pushing runs protected unless nothing needs
/// allocating: allocating can run finalizers, which may raise or wait on this very call.
#[inline]
pub fn push_outcome(st: State, call: &Call) -> Result<c_int, Error> {
    if let Some(Ok(buf)) = call.result() {
        if let Some(n) = value::push_scalars(st, buf, UNPROTECTED_RESULTS) {
            return Ok(n);
        }
    }
    push_outcome_decoded(st, call)
}

/// [`push_outcome`] for an error, or results that are not all scalars.
#[inline(never)]
fn push_outcome_decoded(st: State, call: &Call) -> Result<c_int, Error> {
    let buf = match call.result() {
        Some(Ok(buf)) => buf,
        Some(Err(e)) => return Err(e.clone()),
        None => {
            return Err(Error::Internal(
                "outcome read before the call finished".into(),
            ))
        }
    };
    // the prototypes of functions among the results travel in the record (see `value/func.rs`)
    let protos = if value::has_functions(buf) {
        call.data.lock().protos.clone()
    } else {
        Vec::new()
    };
    let doing = || format!("receiving the results of {}", call_name(call));
    match decode_protected(st, 0, doing, |st| {
        value::push_message(st, buf, &protos, None, false)
    })? {
        Ok(n) => Ok(n),
        Err(value::Corrupt(what)) if value::is_refusal(what) => Err(Error::Unsupported(format!(
            "cannot pass the results of {}: {what}",
            call_name(call)
        ))),
        Err(value::Corrupt(what)) if value::is_no_stack(what) => Err(Error::NoStack {
            doing: format!("receiving the results of {}", call_name(call)),
        }),
        Err(value::Corrupt(what)) => Err(Error::Internal(format!("cannot decode results: {what}"))),
    }
}

/// `chunk:function` of a call, for messages.
fn call_name(call: &Call) -> String {
    let d = call.data.lock();
    let chunk = d.chunk.as_ref().map_or("?", |c| c.name.as_str());
    if chunk.is_empty() {
        return String::from_utf8_lossy(&d.func).into_owned();
    }
    format!("{chunk}:{}", String::from_utf8_lossy(&d.func))
}
