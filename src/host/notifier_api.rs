//! Notifiers for scheduler loops written in Lua (`vmpool.run`, the OpenResty adapter): futures
//! subscribed with `fut:_subscribe(notifier, token)` push their token when they finish, and the
//! loop collects tokens with `notifier:wait([timeout])` (sleeps, no CPU) or `notifier:drain()`.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::host::userdata::{self, UV_NOTIFIER};
use crate::lua::{State, TNUMBER};
use crate::notify::Notifier;
use crate::Error;

pub struct NotifierHandle {
    pub notifier: Arc<Notifier>,
    /// Reused between calls.
    tokens: Vec<u64>,
}

impl userdata::Tagged for NotifierHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0003;
}

fn handle<'a>(st: State) -> Result<&'a mut NotifierHandle, Error> {
    userdata::get::<NotifierHandle>(st, 1)
        .and_then(|b| b.get())
        .ok_or_else(|| Error::BadArgument("expected a notifier as first argument".into()))
}

crate::lua_function!(pub fn new_notifier => new_impl);
fn new_impl(st: State) -> Result<c_int, Error> {
    userdata::push(
        st,
        NotifierHandle {
            notifier: Notifier::new(),
            tokens: Vec::new(),
        },
        UV_NOTIFIER,
    );
    Ok(1)
}

fn push_tokens(st: State, h: &mut NotifierHandle) -> c_int {
    st.set_top(0);
    st.create_table(h.tokens.len().min(1 << 20) as c_int, 0);
    for (i, t) in h.tokens.drain(..).enumerate() {
        st.push_number(t as f64);
        st.raw_seti(-2, i as i64 + 1);
    }
    1
}

crate::lua_function!(pub fn wait => wait_impl);
fn wait_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    let deadline = if st.type_of(2) == TNUMBER {
        let secs = st.to_number(2).max(0.0);
        crate::call::deadline_after(Duration::try_from_secs_f64(secs).ok())
    } else {
        None
    };
    let mut tokens = std::mem::take(&mut h.tokens);
    h.notifier.wait(deadline, &mut tokens);
    h.tokens = tokens;
    Ok(push_tokens(st, h))
}

crate::lua_function!(pub fn drain => drain_impl);
fn drain_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    let mut tokens = std::mem::take(&mut h.tokens);
    h.notifier.drain(&mut tokens);
    h.tokens = tokens;
    Ok(push_tokens(st, h))
}

crate::lua_function!(pub fn gc => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    userdata::finalize::<NotifierHandle>(st, 1);
    Ok(0)
}
