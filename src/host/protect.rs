//! Everything host code does in the host's Lua state that may raise a Lua error (allocating can
//! run out of memory, and it can run `__gc` finalizers, which may raise) runs through
//! [`protected`]: inside a protected call, with no lock held, so the error comes back as a
//! `vmpool:` error of the running method instead of jumping over Rust frames (which skips their
//! destructors and lock releases on PUC Lua and aborts the process on LuaJIT, where Lua errors
//! are foreign exceptions Rust cannot catch).

use std::ffi::c_int;

use mlua::ffi;

pub use crate::lua::errors::describe_error;
use crate::lua::{State, RUNNER_UPVALUE as UV_PROTECT};
use crate::value::Corrupt;
use crate::Error;

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
    match st.protect(UV_PROTECT, nargs, f) {
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
/// returns, `Ok(Err(what))` when it found the message corrupt or refused a value (its words).
#[inline]
pub fn decode_protected(
    st: State,
    nargs: c_int,
    doing: impl FnOnce() -> String,
    mut decode: impl FnMut(State) -> Result<c_int, Corrupt>,
) -> Result<Result<c_int, &'static str>, Error> {
    let mut corrupt = None;
    let n = protected(st, nargs, doing, &mut |st| match decode(st) {
        Ok(n) => n,
        Err(c) => {
            corrupt = Some(c.0);
            0
        }
    })?;
    Ok(corrupt.map_or(Ok(n), Err))
}

/// Pushes a copy of `s`.
pub fn push_str(st: State, s: &str, doing: impl FnOnce() -> String) -> Result<(), Error> {
    protected(st, 0, doing, &mut |st| {
        st.push_str(s);
        1
    })
    .map(|_| ())
}
