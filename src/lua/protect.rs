//! Protected calls: how vmpool runs code that may raise a Lua error (allocating can run out of
//! memory, and it can run `__gc` finalizers, which may raise) inside `lua_pcall`, so that the
//! error comes back as a value instead of jumping over Rust frames (which skips their destructors
//! and lock releases on PUC Lua and aborts the process on LuaJIT, where Lua errors are foreign
//! exceptions Rust cannot catch). [`State::protect`] is the mechanism; [`protected`] is how host
//! functions use it (with the runner every host closure keeps as an upvalue, and a `vmpool:`
//! error naming what was being done); [`run_protected`] is the body of every host C function,
//! which raises its error only once its Rust frames are gone (see [`super::errors`]).

use std::ffi::{c_int, c_void};

use mlua::ffi;

pub use super::errors::describe_error;
use super::{c_function, errors, lua_State, State};
use crate::Error;

impl State {
    /// Runs `f` inside a protected call, so that a Lua error it raises (running out of memory, or
    /// a `__gc` finalizer that raises while `f` allocates) becomes an `Err` instead of jumping over
    /// the Rust frames of the caller. This is how host code does everything that may raise: with
    /// no lock held and no Rust value with a destructor alive in `f` (Lua jumps out of `f` when it
    /// raises, skipping its frames).
    ///
    /// The top `nargs` values are moved into the protected call, where `f` sees them as slots
    /// `1..=nargs` of its own frame; whatever `f` returns a count of stays on the stack.
    /// `runner` is the stack index (usually an upvalue) of [`PROTECTED_RUNNER`]: pushing a copy
    /// of an existing function cannot allocate, while creating a C closure can on Lua 5.1 and
    /// LuaJIT. Needs two free stack slots (a C function starts with `LUA_MINSTACK` = 20).
    ///
    /// Returns the number of values `f` left, or the Lua status code with the error value on top.
    pub fn protect(
        self,
        runner: c_int,
        nargs: c_int,
        f: &mut dyn FnMut(State) -> c_int,
    ) -> Result<c_int, c_int> {
        let base = self.top() - nargs;
        self.push_value(runner);
        self.insert(base + 1);
        let mut f: &mut dyn FnMut(State) -> c_int = f;
        self.push_light_userdata(&mut f as *mut &mut dyn FnMut(State) -> c_int as *mut c_void);
        self.insert(base + 2);
        match self.pcall(nargs + 1, ffi::LUA_MULTRET, 0) {
            0 => Ok(self.top() - base),
            rc => Err(rc),
        }
    }

    /// Like [`State::protect`] (no arguments, one result left on top) for a C function that has no
    /// runner to copy (`luaopen_vmpool`): Lua 5.4 pushes the runner as a light C function, which
    /// allocates nothing; Lua 5.1 and LuaJIT create it inside `lua_cpcall`, which discards
    /// results, so the result travels through the registry under a key of our own.
    pub fn protect_detached(self, f: &mut dyn FnMut(State) -> c_int) -> Result<(), c_int> {
        #[cfg(any(feature = "lua51", feature = "luajit"))]
        {
            static KEY: u8 = 0;
            let key = &KEY as *const u8 as *mut c_void;
            let mut keep = |st: State| {
                if f(st) >= 1 {
                    st.push_light_userdata(key);
                    st.push_value(-2);
                    st.raw_set(ffi::LUA_REGISTRYINDEX);
                }
                0
            };
            let mut keep: &mut dyn FnMut(State) -> c_int = &mut keep;
            // SAFETY: as for `push_nil`; `lua_cpcall` calls the runner with our closure's address
            // as its light userdata argument, alive on this frame for the whole call.
            let rc = unsafe {
                ffi::lua_cpcall(
                    self.0,
                    PROTECTED_RUNNER,
                    &mut keep as *mut &mut dyn FnMut(State) -> c_int as *mut c_void,
                )
            };
            if rc != 0 {
                return Err(rc);
            }
            self.push_light_userdata(key);
            self.raw_get(ffi::LUA_REGISTRYINDEX);
            self.push_light_userdata(key);
            self.push_nil();
            self.raw_set(ffi::LUA_REGISTRYINDEX); // removing a key allocates nothing
            Ok(())
        }
        #[cfg(not(any(feature = "lua51", feature = "luajit")))]
        {
            self.push_cclosure(PROTECTED_RUNNER, 0);
            let runner = self.top();
            let r = self.protect(runner, 0, f).map(|_| ());
            self.remove(runner);
            r
        }
    }
}

/// The upvalue slot where every host closure keeps [`PROTECTED_RUNNER`] (the module's closures
/// are built over the same upvalues: see `host::userdata`).
pub const RUNNER_UPVALUE: c_int = ffi::lua_upvalueindex(5);

/// The C function [`State::protect`] calls under `lua_pcall`: it runs the Rust closure whose
/// address is its first argument on the remaining arguments.
pub const PROTECTED_RUNNER: ffi::lua_CFunction = c_function(protected_runner);
unsafe extern "C-unwind" fn protected_runner(l: *mut lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state, on the thread of the `protect` call that
    // pushed it.
    let st = unsafe { State::from_raw(l) };
    let p = st.to_userdata(1) as *mut &mut dyn FnMut(State) -> c_int;
    if p.is_null() {
        return 0;
    }
    st.remove(1);
    // SAFETY: `protect` passed the address of a closure reference that lives on its frame for
    // the whole protected call; only `protect` pushes this function with such an argument.
    let f = unsafe { &mut *p };
    f(st) as isize
}

/// The body of every host-facing C function: run `f`, turn a Rust panic into an error, and raise
/// errors as plain strings (mlua's userdata errors would force users to `tostring` them).
///
/// `f` must not raise Lua errors itself: on LuaJIT they are foreign exceptions, and
/// `catch_unwind` aborts the process when one reaches it. Whatever may raise runs through
/// [`State::protect`] (`crate::lua::protect::protected`).
pub fn run_protected(state: State, f: fn(State) -> Result<c_int, crate::Error>) -> c_int {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(state)));
    let msg = match outcome {
        Ok(Ok(n)) => return n,
        Ok(Err(e)) => e.to_string(),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            format!("vmpool: internal error (please report it): {what}")
        }
    };
    // Pushing the message allocates, which can fail or run finalizers that raise: see push_error.
    errors::push_error(state, &msg);
    drop(msg);
    // SAFETY: every Rust value of this frame has been dropped; the caller frame is Lua's.
    unsafe { state.error() }
}

/// Runs `f` protected (see [`State::protect`]) with the runner every host function closes over.
/// `doing` says what `f` was for, for the error message ("receiving the results of c:f").
///
/// `f` must hold no Rust value with a destructor while it calls Lua, and its caller no lock that
/// Lua code run meanwhile (a finalizer) might need.
pub fn protected(
    st: State,
    nargs: c_int,
    doing: impl FnOnce() -> String,
    f: &mut dyn FnMut(State) -> c_int,
) -> Result<c_int, Error> {
    let hook = st.own_hook();
    match st.protect(RUNNER_UPVALUE, nargs, f) {
        Ok(n) => Ok(n),
        Err(rc) => {
            let message = (rc != ffi::LUA_ERRMEM).then(|| describe_error(st, -1));
            st.pop(1);
            match message {
                // the interpreter's Ctrl-C hook fired meanwhile (and cleared itself)
                Some(raised) if st.own_hook() != hook => Err(Error::Interrupted {
                    doing: doing(),
                    raised,
                }),
                // LuaJIT's lua_checkstack raises this itself when the whole stack (65,500 slots)
                // cannot grow, where the other runtimes answer 0
                Some(raised) if raised.ends_with("stack overflow") => {
                    Err(Error::NoStack { doing: doing() })
                }
                message => Err(Error::Host {
                    doing: doing(),
                    message,
                }),
            }
        }
    }
}

/// Decodes a message onto the stack with `decode` in a protected call (decoding allocates; see
/// [`protected`], whose `nargs` and `doing` these are): `Ok(Ok(n))` with the count `decode`
/// returns, `Ok(Err(e))` when it found the message corrupt or refused a value.
#[inline]
pub fn decode_protected<E>(
    st: State,
    nargs: c_int,
    doing: impl FnOnce() -> String,
    mut decode: impl FnMut(State) -> Result<c_int, E>,
) -> Result<Result<c_int, E>, Error> {
    let mut refused = None;
    let n = protected(st, nargs, doing, &mut |st| match decode(st) {
        Ok(n) => n,
        Err(e) => {
            refused = Some(e);
            0
        }
    })?;
    Ok(refused.map_or(Ok(n), Err))
}

/// Pushes a copy of `s`.
pub fn push_str(st: State, s: &str, doing: impl FnOnce() -> String) -> Result<(), Error> {
    protected(st, 0, doing, &mut |st| {
        st.push_str(s);
        1
    })
    .map(|_| ())
}
