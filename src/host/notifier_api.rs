//! Notifiers for scheduler loops written in Lua (`vmpool.run`, the OpenResty adapter): futures
//! subscribed with `fut:_subscribe(notifier, token)` push their token when they finish, and the
//! loop collects tokens with `notifier:wait([timeout])` (sleeps, no CPU) or `notifier:drain()`.
//!
//! A loop that can only sleep on sockets it connects itself (OpenResty's cosockets) gets a socket
//! doorbell in two steps: `path = notifier:_bell_listen(dir)`, then, once its socket connected to
//! `unix:` .. path, `notifier:_bell_accept()`. `notifier:_wake()` rings it unconditionally and
//! `notifier:_bell_close()` closes this side.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::host::userdata::{self, UV_NOTIFIER};
use crate::lua::{State, TNUMBER};
use crate::notify::{BellListener, Doorbell, Notifier};
use crate::Error;

pub struct NotifierHandle {
    pub notifier: Arc<Notifier>,
    /// Reused between calls.
    tokens: Vec<u64>,
    /// Between `_bell_listen` and `_bell_accept`.
    listener: Option<BellListener>,
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
            listener: None,
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

crate::lua_function!(pub fn bell_listen => bell_listen_impl);
fn bell_listen_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    let dir = st
        .to_bytes(2)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or_else(|| {
            Error::BadArgument(format!(
                "the doorbell socket directory must be a path (string), got {}",
                st.type_name(2)
            ))
        })?;
    h.listener = None;
    let listener = BellListener::bind(std::path::Path::new(dir)).map_err(|e| {
        Error::BadArgument(format!(
            "cannot create the doorbell socket in '{dir}': {e} (set vmpool.ngx.configure{{socket_dir = ...}} \
             to a short path of a directory the nginx worker user can write)"
        ))
    })?;
    let path = listener.path().to_string_lossy().into_owned();
    h.listener = Some(listener);
    st.push_str(&path);
    Ok(1)
}

crate::lua_function!(pub fn bell_accept => bell_accept_impl);
fn bell_accept_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    let listener = h
        .listener
        .take()
        .ok_or_else(|| Error::Internal("_bell_accept called without _bell_listen".into()))?;
    let fd = listener.accept().map_err(|e| {
        Error::Internal(format!(
            "the light thread's doorbell connection did not arrive: {e}"
        ))
    })?;
    drop(listener);
    h.notifier.set_doorbell(Some(Doorbell::Socket(fd)));
    st.push_bool(true);
    Ok(1)
}

crate::lua_function!(pub fn bell_close => bell_close_impl);
fn bell_close_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.listener = None;
    h.notifier.set_doorbell(None);
    Ok(0)
}

crate::lua_function!(pub fn wake => wake_impl);
fn wake_impl(st: State) -> Result<c_int, Error> {
    handle(st)?.notifier.wake();
    Ok(0)
}

crate::lua_function!(pub fn pending => pending_impl);
fn pending_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?.notifier.pending();
    st.push_number(n as f64);
    Ok(1)
}

crate::lua_function!(pub fn gc => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    userdata::finalize::<NotifierHandle>(st, 1);
    Ok(0)
}
