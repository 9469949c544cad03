//! Everything host code does in the host's Lua state that may raise a Lua error (allocating can
//! run out of memory, and it can run `__gc` finalizers, which may raise) runs through
//! [`protected`]: inside a protected call, with no lock held, so the error comes back as a
//! `vmpool:` error of the running method instead of jumping over Rust frames (which skips their
//! destructors and lock releases on PUC Lua and aborts the process on LuaJIT, where Lua errors
//! are foreign exceptions Rust cannot catch).

use std::ffi::c_int;

use mlua::ffi;

use crate::host::userdata::UV_PROTECT;
use crate::lua::{State, TFUNCTION};
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
    match st.protect(UV_PROTECT, nargs, f) {
        Ok(n) => Ok(n),
        Err(rc) => {
            let message = (rc != ffi::LUA_ERRMEM).then(|| describe_error(st, -1));
            st.pop(1);
            Err(Error::Host {
                doing: doing(),
                message,
            })
        }
    }
}

/// The error value at `idx` as the standalone interpreter would show it: a string or number as
/// is, else its type.
pub fn describe_error(st: State, idx: c_int) -> String {
    match st.type_of(idx) {
        crate::lua::TSTRING => String::from_utf8_lossy(st.string_bytes(idx)).into_owned(),
        crate::lua::TNUMBER => match st.to_integer_exact(idx) {
            Some(i) => i.to_string(),
            None => format_number(st.to_number(idx)),
        },
        _ => format!("(error object is a {} value)", st.type_name(idx)),
    }
}

/// A float the way Lua's `%.14g` prints it (`1e+300`, `nan`, `inf`, `0.5`).
pub fn format_number(n: f64) -> String {
    crate::error::lua_number(n)
}

/// Pushes a copy of `s`.
pub fn push_str(st: State, s: &str, doing: impl FnOnce() -> String) -> Result<(), Error> {
    protected(st, 0, doing, &mut |st| {
        st.push_str(s);
        1
    })
    .map(|_| ())
}

/// How many times [`push_error`] tries to push a message before it gives up. Each try that
/// failed ran, and so used up, at least one finalizer that raised; a host with more of them due
/// at once than this gets Lua's own error instead.
const ERROR_PUSH_TRIES: usize = 8;

/// The first line of an error message, at most 200 bytes of it: what the error that replaces it
/// quotes, short so that pushing it is unlikely to run the collector again.
fn gist(msg: &str) -> &str {
    let line = msg.lines().next().unwrap_or("");
    let mut end = line.len().min(200);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Pushes `msg`, the error a host function is about to raise, for it to raise. Pushing
/// allocates, protected where the function has the runner (every host function does): on Lua
/// 5.1-5.3 that can run a `__gc` finalizer that raises, and then what is pushed is a `vmpool:`
/// error that says so and quotes the start of `msg` (the call keeps its outcome: a future's
/// error can be waited for again), tried again until one push gets through. When Lua runs out of memory, or
/// after [`ERROR_PUSH_TRIES`] failed tries, the error Lua raised is left on top instead.
pub fn push_error(st: State, msg: &str) {
    if st.type_of(UV_PROTECT) != TFUNCTION {
        st.push_str(msg);
        return;
    }
    let mut text: Option<String> = None;
    for attempt in 1..=ERROR_PUSH_TRIES {
        let pushing = text.as_deref().unwrap_or(msg);
        match st.protect(UV_PROTECT, 0, &mut |st| {
            st.push_str(pushing);
            1
        }) {
            Ok(_) => return,
            Err(ffi::LUA_ERRMEM) => return,
            Err(_) if attempt == ERROR_PUSH_TRIES => return,
            Err(_) => {
                let raised = describe_error(st, -1);
                st.pop(1);
                text = Some(
                    Error::Host {
                        doing: format!("reporting another error ({})", gist(msg)),
                        message: Some(raised),
                    }
                    .to_string(),
                );
            }
        }
    }
}
