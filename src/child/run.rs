//! One call in a state, once its chunk is loaded: finding the function it names, running it
//! directly (a few scalar arguments) or through the trampoline, and encoding its results. The
//! lookup slots (`LOOKUP_RETURNED`, `LOOKUP_ENV`) are kept here too.

use std::ffi::{c_int, c_void};

use mlua::ffi;

use super::in_state::{self, forget_chunk};
use super::{
    Child, Failed, Failure, Ran, RunCtx, Step, BASE, CHUNKS, DIRECT_ARGS, FUNC_NAME, LOOKUP_ENV,
    LOOKUP_RETURNED, MAX_RESULTS, MSGH, TRAMPOLINE,
};
use crate::call::Outcome;
use crate::chunk::Chunk;
use crate::lua::TTABLE;
use crate::value::{self, Role};
use crate::Error;

/// Which chunk's tables slots `LOOKUP_RETURNED` and `LOOKUP_ENV` hold. Those tables are fixed
/// while the chunk is loaded (only `load_chunk` and `forget_chunk` change the loaded chunks'
/// entries, and `Child::forget` empties the slots): their contents are read at each call.
#[derive(Clone, Copy, Default)]
pub(super) struct Lookup {
    /// The chunk's id; 0 (the anonymous chunk, never looked up) when the slots hold nothing.
    pub(super) chunk: u64,
    /// The chunk returned a table.
    pub(super) returned: bool,
}

/// What is known of a call's results on the stack, for encoding them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Results {
    /// The trampoline saw no table or function among them.
    Flat,
    /// The trampoline saw tables or functions among them, and made the room to encode them.
    Nested,
    /// A direct call's: not looked at, and no room made.
    Unseen,
}

impl Child {
    /// Drops loaded chunk `id` (see `in_state::forget_chunk`), and the lookup slots' hold on it.
    pub(super) fn forget(&mut self, id: u64) {
        forget_chunk(self.st, id);
        if self.lookup.chunk == id {
            self.forget_lookup();
        }
    }

    /// Empties the lookup slots (storing nil allocates nothing).
    pub(super) fn forget_lookup(&mut self) {
        self.lookup = Lookup::default();
        self.st.push_nil();
        self.st.replace(LOOKUP_RETURNED);
        self.st.push_nil();
        self.st.replace(LOOKUP_ENV);
    }

    /// Fills the lookup slots with chunk `id`'s tables (loaded: see `ensure_loaded`). False if it
    /// has no environment (it always has one once loaded).
    #[cold]
    fn fill_lookup(&mut self, id: u64) -> bool {
        let st = self.st;
        let returned = st.raw_geti(CHUNKS, id as i64) == TTABLE;
        st.replace(LOOKUP_RETURNED);
        if st.raw_geti(CHUNKS, -(id as i64)) != TTABLE {
            st.pop(1);
            self.forget_lookup();
            return false;
        }
        st.replace(LOOKUP_ENV);
        self.lookup = Lookup {
            chunk: id,
            returned,
        };
        true
    }

    /// Runs the call whose arguments are in `buf` and encodes its results into `buf`.
    pub(super) fn call(&mut self, chunk: &Chunk, buf: &mut Vec<u8>) -> Ran {
        let st = self.st;
        let n = self.run_function(chunk, buf)?;
        if n > MAX_RESULTS {
            st.set_top(BASE);
            let e = Error::Unsupported(format!(
                "cannot pass the results of '{}': it returned {n} values, more than the {MAX_RESULTS} that can cross at once on {} (return them in a table)",
                String::from_utf8_lossy(&self.func),
                crate::abi::RUNTIME
            ));
            return Err(Box::new((Outcome::Err(e), false)));
        }
        buf.clear();
        let encoded = self.encode_results(chunk, n, buf);
        st.set_top(BASE);
        encoded
    }

    /// Encodes `n` results above `BASE` (a call's, or a map item's first) into `out`: scalars
    /// without the encoder's bookkeeping, anything else after making the stack room that
    /// nested values need, if a direct call left that undone (see `Child::reserve_results`).
    #[inline(always)]
    pub(super) fn encode_results(&mut self, chunk: &Chunk, n: c_int, out: &mut Vec<u8>) -> Ran {
        let seen = self.results;
        if seen != Results::Nested && self.encoder.encode_scalars(self.st, BASE + 1, n, out) {
            return Ok(());
        }
        self.encode_nested(chunk, seen, n, out)
    }

    #[inline(never)]
    fn encode_nested(&mut self, chunk: &Chunk, seen: Results, n: c_int, out: &mut Vec<u8>) -> Ran {
        if seen == Results::Unseen && !self.reserve_results() {
            let function = String::from_utf8_lossy(&self.func).into_owned();
            let failed = self.failure(ffi::LUA_ERRMEM, &chunk.name, &function, |message| {
                Error::Runtime {
                    chunk: chunk.name.clone(),
                    function: function.clone(),
                    message,
                }
            });
            return Err(Box::new(failed));
        }
        match self
            .encoder
            .encode(self.st, BASE + 1, n, out, Role::Result(&self.func))
        {
            Ok(()) => Ok(()),
            Err(e) => Err(Box::new((Outcome::Err(e), false))),
        }
    }

    /// Calls the function this state's `func` names with the arguments encoded in `args`. On
    /// success its results are on the stack above `BASE` (the count is returned); on failure the
    /// stack is back at `BASE` and the outcome says why.
    pub(super) fn run_function(&mut self, chunk: &Chunk, args: &[u8]) -> Result<c_int, Failed> {
        let st = self.st;
        let named = chunk.id != crate::chunk::ANONYMOUS;
        if named && !self.name_in_slot {
            // a new string: protected (see `Step`)
            let mut ctx = RunCtx::new(Step::PushName, &self.func, 0);
            st.push_value(TRAMPOLINE);
            st.push_light_userdata(&mut ctx as *mut RunCtx as *mut c_void);
            let rc = st.pcall(1, 1, MSGH);
            if rc != 0 {
                let function = String::from_utf8_lossy(&self.func).into_owned();
                let failed = self.failure(rc, &chunk.name, &function, |message| Error::Runtime {
                    chunk: chunk.name.clone(),
                    function: function.clone(),
                    message,
                });
                st.set_top(BASE);
                return Err(Box::new(failed));
            }
            st.replace(FUNC_NAME);
            self.name_in_slot = true;
        }
        let (rc, failure, results) = match self.call_direct(chunk, args) {
            Some(rc) => (rc, Failure::None, Results::Unseen),
            None => {
                // Decoding the arguments allocates, which can hit the memory limit or run a
                // finalizer the chunk left behind that raises: it runs inside the trampoline's
                // protected call.
                let mut ctx = RunCtx::new(Step::Call, args, chunk.id as i64);
                ctx.protos = self.protos.as_slice();
                ctx.fns = &mut self.fns;
                ctx.callee_in_slot = self.batch_callee;
                st.push_value(TRAMPOLINE);
                st.push_light_userdata(&mut ctx as *mut RunCtx as *mut c_void);
                st.push_value(FUNC_NAME);
                let rc = st.pcall(2, ffi::LUA_MULTRET, MSGH);
                // what the trampoline saw of the results
                let seen = if ctx.nested {
                    Results::Nested
                } else {
                    Results::Flat
                };
                (rc, ctx.failure, seen)
            }
        };
        self.results = results;
        if rc == 0 && failure == Failure::None {
            return Ok(st.top() - BASE);
        }
        Err(self.call_failed(chunk, rc, failure, results != Results::Unseen))
    }

    /// The outcome of a call that failed (`lua_pcall`'s status `rc`, or what the trampoline
    /// noted in `failure`); the stack goes back to `BASE`.
    #[cold]
    #[inline(never)]
    fn call_failed(
        &mut self,
        chunk: &Chunk,
        rc: c_int,
        failure: Failure,
        via_trampoline: bool,
    ) -> Failed {
        let st = self.st;
        let func_name = || String::from_utf8_lossy(&self.func).into_owned();
        let runtime = |message: String| Error::Runtime {
            chunk: chunk.name.clone(),
            function: func_name(),
            // a direct call has no trampoline under the function: the same traceback either way
            message: if via_trampoline {
                without_trampoline(message)
            } else {
                message
            },
        };
        if rc != 0 {
            let failed = self.failure(rc, &chunk.name, &func_name(), runtime);
            st.set_top(BASE);
            return Box::new(failed);
        }
        let failed = match failure {
            // (not reached: a call with neither fails before this)
            Failure::None => (
                Outcome::Err(Error::Internal("a call failed without a cause".into())),
                false,
            ),
            Failure::NoFunction { global } => (
                Outcome::Err(Error::NoFunction {
                    chunk: chunk.name.clone(),
                    function: func_name(),
                    global,
                }),
                false,
            ),
            Failure::Corrupt(what) if value::is_refusal(what) => (
                Outcome::Err(Error::Unsupported(format!(
                    "cannot pass the arguments of '{}': {what}",
                    func_name()
                ))),
                false,
            ),
            Failure::Corrupt(what) => (
                Outcome::Err(Error::Internal(format!("bad call message: {what}"))),
                false,
            ),
            // (`failure` reads no message for a memory error: none is pushed, which could raise)
            Failure::OutOfMemory => {
                self.failure(ffi::LUA_ERRMEM, &chunk.name, &func_name(), runtime)
            }
        };
        st.set_top(BASE);
        Box::new(failed)
    }

    /// The direct call: a call whose arguments are at most [`DIRECT_ARGS`] nil, booleans,
    /// numbers or light userdata, of a function (not a callable table) found by name or in the
    /// name's slot (a map's), runs under its own `lua_pcall` with the message handler, without
    /// the trampoline's C frame. Finding the function (raw gets) and pushing such arguments
    /// (into the room `Child::new` reserved) neither allocates nor raises, so it needs no
    /// protection. Returns `lua_pcall`'s status, or `None` (stack at `BASE`) for any other call.
    #[inline(always)]
    fn call_direct(&mut self, chunk: &Chunk, args: &[u8]) -> Option<c_int> {
        let st = self.st;
        // (a longer message holds something else: no need to look)
        if args.len() > value::scalars_len(DIRECT_ARGS) {
            return None;
        }
        if self.batch_callee {
            // `push_callee` checked that it is a function
            st.push_value(FUNC_NAME);
        } else if chunk.id == crate::chunk::ANONYMOUS
            || (self.lookup.chunk != chunk.id && !self.fill_lookup(chunk.id))
            || !in_state::push_named_function(st, self.lookup.returned)
        {
            return None;
        }
        match value::push_scalars(st, args, DIRECT_ARGS) {
            Some(nargs) => Some(st.pcall(nargs, ffi::LUA_MULTRET, MSGH)),
            None => {
                st.set_top(BASE);
                None
            }
        }
    }

    /// After a direct call, with its results above `BASE`: makes the stack room that encoding
    /// nested results needs, as the trampoline does after its call (`in_state::results`), and
    /// says whether there is. Lua 5.2 to 5.5 say no instead of raising; Lua 5.1 and LuaJIT
    /// raise, so there it is made inside a protected call of the trampoline.
    #[cold]
    fn reserve_results(&self) -> bool {
        let st = self.st;
        let top = st.top();
        if !in_state::any_nested(st, BASE + 1, top) {
            return true;
        }
        if cfg!(not(any(feature = "lua51", feature = "luajit"))) {
            return in_state::room_for_nested(st, top - BASE);
        }
        let mut ctx = RunCtx::new(Step::Reserve, &[], 0);
        st.push_value(TRAMPOLINE);
        st.push_light_userdata(&mut ctx as *mut RunCtx as *mut c_void);
        // the only error is a memory error; `failure` needs only its code
        let ok = st.pcall(1, 0, 0) == 0;
        st.set_top(top);
        ok
    }
}

/// A call's error message without the traceback's last line, which is the trampoline's C frame
/// (the bottom of the state's stack during the call), so that a call through the trampoline
/// and a direct call show the same traceback.
fn without_trampoline(mut message: String) -> String {
    const FRAME: &str = "\n\t[C]: in ?";
    if message.ends_with(FRAME) {
        message.truncate(message.len() - FRAME.len());
    }
    message
}
