//! Lua errors as vmpool shows and raises them: an error value described the way the standalone
//! interpreter shows it, and pushing the message a host function is about to raise, which can
//! itself fail (see [`push_error`]). Part of [`crate::lua`] so that `run_protected` can use it;
//! `lua::protect` builds on it.

use mlua::ffi;

use super::{State, RUNNER_UPVALUE, TFUNCTION};
use crate::Error;

/// The error value at `idx` as the standalone interpreter would show it: a string or number as
/// is, else its type.
pub fn describe_error(st: State, idx: std::ffi::c_int) -> String {
    match st.type_of(idx) {
        crate::lua::TSTRING => String::from_utf8_lossy(st.string_bytes(idx)).into_owned(),
        crate::lua::TNUMBER => match st.to_integer_exact(idx) {
            Some(i) => i.to_string(),
            None => crate::error::lua_number(st.to_number(idx)),
        },
        _ => format!("(error object is a {} value)", st.type_name(idx)),
    }
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
    if st.type_of(RUNNER_UPVALUE) != TFUNCTION {
        st.push_str(msg);
        return;
    }
    let mut text: Option<String> = None;
    for attempt in 1..=ERROR_PUSH_TRIES {
        let pushing = text.as_deref().unwrap_or(msg);
        match st.protect(RUNNER_UPVALUE, 0, &mut |st| {
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
