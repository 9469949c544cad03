//! The Lua face of the registry of waits (`host/waits.rs`) that every scheduler uses: a notifier.
//! `vmpool.run` (`src/lua/vmpool.lua`) and the adapters (`src/lua/ngx.lua`, `luv.lua`,
//! `cqueues.lua`) each file their coroutines' calls in one, under small tokens, and collect the
//! tokens of finished ones from it.
//!
//! The calls path, the same under every scheduler: `token, first = notifier:_call(pool, chunk, fn,
//! ...)` files the call without a future userdata (whose allocation and finalizer would be a good
//! part of a call's cost on the event loop) and hands it to its pool, or, while a batch is open,
//! defers it (`first`: the outbox was empty). `notifier:_take(token [, wait])` returns its results
//! (or raises its error) once its token came back; `notifier:_drop(token)` gives it up. A map's
//! batch is waited for with `token = notifier:_watch(m)` (nil: step again at once) and
//! `notifier:_unwatch(token)`; a future's with `fut:_subscribe(notifier, notifier:_token())`.
//!
//! One batching protocol: `notifier:_open_batch([takes [, flush_every]])` opens a batch, in which
//! `_call` defers; the outbox goes to the pools every `flush_every` calls (default 64: workers
//! start on the first ones while the loop still resumes the rest), at `notifier:_flush()`, at the
//! `takes`-th `_take` (cqueues, which cannot tell when its controller has run the woken coroutines)
//! and at `notifier:_close_batch()`, which returns how many calls batches deferred since the last;
//! `notifier:_batch_open()` says whether one is still open (the `takes`-th `_take` closes it).
//! vmpool.run and luv open one per wake-up; ngx keeps one open and flushes once per turn of
//! nginx's event loop. So a batch wakes a sleeping worker once, not once per call.
//!
//! Tokens come back through `notifier:wait([timeout])` and `notifier:drain()` (a new array) or
//! `notifier:_collect(buffer [, timeout])` (into `buffer`, returns the count). A loop that polls
//! file descriptors itself (luv, cqueues) gets an eventfd doorbell from `fd = notifier:_pollfd()`:
//! readable while tokens are queued, quiet again once drained. One that can only sleep on sockets
//! it connects itself (OpenResty's cosockets) gets a socket doorbell in two steps: `path =
//! notifier:_doorbell_listen(dir)`, then, once its socket connected to `unix:` .. path,
//! `notifier:_doorbell_accept()`; `notifier:_wake()` rings it and `notifier:_doorbell_close()`
//! closes this side.
//!
//! `native._notifier(true)` makes a notifier that knows the process it was made in: after a
//! `fork()`, its `_call` returns `false` instead of a token and does nothing, so that the
//! OpenResty adapter learns that its state was inherited from another process without asking for
//! the worker's pid on every request.

use std::ffi::c_int;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::host::call_io::{push_outcome, PoolHandle};
use crate::host::future_api;
use crate::host::userdata::{self, Frame, Held, UV_NOTIFIER};
use crate::host::waits::{Waits, FLUSH_EVERY};
use crate::lua::protect::{protected, push_str};
use crate::lua::{State, TNUMBER, TTABLE};
use crate::notify::{Doorbell, DoorbellListener, SubscriberId};
use crate::Error;

pub struct NotifierHandle {
    pub waits: Waits,
    /// Between `_doorbell_listen` and `_doorbell_accept`.
    listener: Option<DoorbellListener>,
    /// The eventfd doorbell `_pollfd` installed (owned by the notifier's queue).
    pollfd: Option<RawFd>,
    /// `sys::fork_generation()` when made with `_notifier(true)`; `None` otherwise.
    born: Option<u64>,
    /// The main thread of the host state that made the notifier (`State::main_thread`: null or
    /// that thread), for its waits' hook mark (see `HostWait::with_main`).
    main: *mut mlua::ffi::lua_State,
    /// The string results `vmpool_ngx_take` hands out (`host/ngx_ffi.rs`), until its next call.
    pub(crate) ffi_strings: Vec<u8>,
}

impl NotifierHandle {
    /// Whether it was made with `_notifier(true)` in another process (before a `fork()`).
    pub(crate) fn inherited(&self) -> bool {
        self.born.is_some() && born_elsewhere(self.born, crate::sys::fork_generation())
    }
}

/// Whether a notifier made in fork generation `born` (`None`: one that does not care) is used in
/// generation `now` of another process.
fn born_elsewhere(born: Option<u64>, now: u64) -> bool {
    born.is_some_and(|g| g != now)
}

impl userdata::Tagged for NotifierHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0003;
    const NAME: &'static str = "notifier";
}

/// The notifier `self` at slot 1, held for the caller's frame (`crate::hold!(n = handle(st))`).
#[inline]
fn handle(f: &Frame, st: State) -> Result<Held<'_, NotifierHandle>, Error> {
    userdata::hold(f, st, 1).map_err(|a| {
        a.error::<NotifierHandle>(|| {
            Error::BadArgument("expected a notifier as first argument".into())
        })
    })
}

crate::lua_function!(pub fn new_notifier => new_impl);
fn new_impl(st: State) -> Result<c_int, Error> {
    let born = st.to_boolean(1).then(crate::sys::fork_generation);
    let h = NotifierHandle {
        waits: Waits::default(),
        listener: None,
        pollfd: None,
        born,
        main: st.main_thread(),
        ffi_strings: Vec::new(),
    };
    userdata::push(st, h, UV_NOTIFIER)?;
    Ok(1)
}

/// A deadline of `timeout` seconds from the number at `idx` (anything else: none).
fn deadline_at(st: State, idx: c_int) -> Option<std::time::Instant> {
    (st.type_of(idx) == TNUMBER)
        .then(|| Duration::try_from_secs_f64(st.to_number(idx).max(0.0)).ok())
        .and_then(crate::call::deadline_after)
}

/// Sleeps until tokens are queued (see `Waits::wait`); Ctrl-C raises (`doing` names the caller).
fn wait_tokens(st: State, n: &mut NotifierHandle, idx: c_int, doing: &str) -> Result<(), Error> {
    let deadline = deadline_at(st, idx);
    // SAFETY: `n.main` is null or the main thread of the state that made the notifier, and a
    // userdata belongs to one state: `st` is one of its threads.
    let mut waiting = unsafe { crate::host::call_io::HostWait::with_main(st, n.main) };
    let w = &mut n.waits;
    let mut interrupted = false;
    w.wait(deadline, &mut || {
        interrupted = waiting.changed();
        interrupted
    });
    if interrupted {
        if let Some(e) = waiting.interrupt_error(doing) {
            return Err(e);
        }
    }
    Ok(())
}

/// Pushes the collected tokens as a new array; if that fails they stay for the next call.
fn push_tokens(st: State, w: &mut Waits) -> Result<c_int, Error> {
    st.set_top(1);
    let tokens = &w.tokens;
    protected(st, 0, || "collecting finished calls".into(), &mut |st| {
        st.create_table(tokens.len().min(1 << 20) as c_int, 0);
        for (i, &t) in tokens.iter().enumerate() {
            st.push_integer(t as i64);
            st.raw_seti(-2, i as i64 + 1);
        }
        1
    })?;
    w.delivered();
    Ok(1)
}

crate::lua_function!(pub fn wait => wait_impl);
/// `notifier:wait([timeout])` -> tokens: sleeps (no CPU) until calls finished.
fn wait_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
    wait_tokens(st, &mut h, 2, "notifier:wait()")?;
    push_tokens(st, &mut h.waits)
}

crate::lua_function!(pub fn drain => drain_impl);
/// `notifier:drain()` -> tokens: the finished calls' tokens, without sleeping.
fn drain_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
    h.waits.drain();
    push_tokens(st, &mut h.waits)
}

crate::lua_function!(pub fn collect => collect_impl);
/// `notifier:_collect(buffer [, timeout])` -> n: sleeps until calls finished (or `timeout`
/// seconds passed), writes their tokens into `buffer[1..n]` (vmpool.run's wait: no table per
/// wake-up).
fn collect_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
    if st.type_of(2) != TTABLE {
        return Err(Error::private("notifier:_collect", "a buffer table"));
    }
    wait_tokens(st, &mut h, 3, "vmpool.run")?;
    let tokens = &h.waits.tokens;
    let n = tokens.len();
    st.set_top(2);
    protected(st, 1, || "collecting finished calls".into(), &mut |st| {
        for (i, t) in tokens.iter().enumerate() {
            st.push_integer(*t as i64);
            st.raw_seti(1, i as i64 + 1);
        }
        0
    })?;
    h.waits.delivered();
    st.push_integer(n as i64);
    Ok(1)
}
crate::lua_function!(pub fn doorbell_listen => doorbell_listen_impl);
fn doorbell_listen_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
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
    let listener = DoorbellListener::bind(std::path::Path::new(dir)).map_err(|e| {
        Error::BadArgument(format!(
            "cannot create the doorbell socket in '{dir}': {e} (set vmpool.ngx.configure{{socket_dir = ...}} \
             to a short path of a directory the nginx worker user can write)"
        ))
    })?;
    let path = listener.path().to_string_lossy().into_owned();
    h.listener = Some(listener);
    push_str(st, &path, || "returning the doorbell path".into())?;
    Ok(1)
}

crate::lua_function!(pub fn doorbell_accept => doorbell_accept_impl);
fn doorbell_accept_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
    let listener = h.listener.take().ok_or_else(|| {
        Error::private(
            "notifier:_doorbell_accept",
            "a notifier:_doorbell_listen first",
        )
    })?;
    let fd = listener.accept().map_err(|e| match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) => Error::NoDescriptor {
            doing: "the light thread's doorbell connection".into(),
            cause: e.to_string(),
        },
        _ => Error::Internal(format!(
            "the light thread's doorbell connection did not arrive: {e}"
        )),
    })?;
    drop(listener);
    h.pollfd = None;
    h.waits.notifier.set_doorbell(Some(Doorbell::Socket(fd)));
    st.push_bool(true);
    Ok(1)
}

crate::lua_function!(pub fn doorbell_close => doorbell_close_impl);
fn doorbell_close_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
    h.listener = None;
    h.pollfd = None;
    h.waits.notifier.set_doorbell(None);
    Ok(0)
}

crate::lua_function!(pub fn pollfd => pollfd_impl);
/// `notifier:_pollfd()` -> fd: an eventfd that is readable while finished calls' tokens wait to be
/// drained (installed as the doorbell on the first call; the same descriptor afterwards).
fn pollfd_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st));
    let fd = match h.pollfd {
        Some(fd) => fd,
        None => {
            let bell = crate::sys::WakeFd::new().map_err(|e| {
                Error::BadArgument(format!(
                    "cannot create the event loop's wake-up descriptor: {e} (the process may have too many open files: raise ulimit -n)"
                ))
            })?;
            let fd = bell.fd();
            h.listener = None;
            h.waits.notifier.set_doorbell(Some(Doorbell::Wake(bell)));
            h.pollfd = Some(fd);
            fd
        }
    };
    st.push_integer(fd as i64);
    Ok(1)
}

crate::lua_function!(pub fn wake => wake_impl);
fn wake_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    n.waits.notifier.wake();
    Ok(0)
}

crate::lua_function!(pub fn pending => pending_impl);
/// `notifier:pending()`: tokens queued and not drained; calls held for `_take`; calls deferred.
fn pending_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let (queued, held, deferred) = n.waits.pending();
    st.push_number(queued as f64);
    st.push_number(held as f64);
    st.push_number(deferred as f64);
    Ok(3)
}

crate::lua_function!(pub fn next_token => next_token_impl);
/// `notifier:_token()`: a token for `fut:_subscribe` that no `notifier:_call` call will use.
fn next_token_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let t = n.waits.next_token();
    st.push_integer(t as i64);
    Ok(1)
}

/// The pool at slot 2 of `notifier:_call`, held for the caller's frame.
#[inline]
fn pool_arg(f: &Frame, st: State) -> Result<Held<'_, PoolHandle>, Error> {
    userdata::hold(f, st, 2).map_err(|a| {
        a.error::<PoolHandle>(|| {
            Error::BadArgument("expected a pool (call it as pool:co_invoke(...))".into())
        })
    })
}

crate::lua_function!(pub fn call_api => call_impl);
/// `notifier:_call(pool, chunk, fn, ...)` -> token [, true]: the call, handed to its pool now or,
/// while a batch is open, deferred (`true`: the outbox was empty). Raises like `pool:invoke`
/// when the pool refuses a call handed over now; `false` from a `_notifier(true)` inherited
/// through `fork()`.
fn call_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    if n.inherited() {
        st.push_bool(false);
        return Ok(1);
    }
    crate::hold!(pool = pool_arg(st));
    let call = pool.prepare_with(st, 3, "co_invoke", Some(&mut n.waits.cache))?;
    // the token goes above the arguments (a C function has `LUA_MINSTACK` free slots there)
    let (token, first) = n.waits.call(&pool.pool, call)?;
    st.push_integer(token as i64);
    if first {
        st.push_bool(true);
        return Ok(2);
    }
    Ok(1)
}

crate::lua_function!(pub fn flush => flush_impl);
/// `notifier:_flush()` -> n: hands the deferred calls to their pools (the batch stays open).
fn flush_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let count = n.waits.flush();
    st.push_number(count as f64);
    Ok(1)
}

/// The non-negative integer at `idx`, or `default` (none or not a number).
fn count_arg(st: State, idx: c_int, default: u64) -> u64 {
    if st.type_of(idx) == TNUMBER {
        st.to_number(idx).max(0.0) as u64
    } else {
        default
    }
}

crate::lua_function!(pub fn open_batch => open_batch_impl);
/// `notifier:_open_batch([takes [, flush_every]])`: `_call` defers until the `takes`-th `_take`
/// (0, the default: until `_close_batch`), flushing every `flush_every` calls (default 64; 0: only
/// at `_flush` and the close). Re-arms a batch that is open already.
fn open_batch_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let takes = count_arg(st, 2, 0);
    let every = count_arg(st, 3, FLUSH_EVERY as u64) as usize;
    n.waits.open_batch(takes, every);
    Ok(0)
}

crate::lua_function!(pub fn batch_open => batch_open_impl);
/// `notifier:_batch_open()`: whether a batch is open.
fn batch_open_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let open = n.waits.batch_open();
    st.push_bool(open);
    Ok(1)
}

crate::lua_function!(pub fn close_batch => close_batch_impl);
/// `notifier:_close_batch()` -> n: closes the batch (if open) and hands its calls over; `n`: calls
/// deferred in batches since the last `_close_batch`.
fn close_batch_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let batched = n.waits.close_batch();
    st.push_number(batched as f64);
    Ok(1)
}

fn token_arg(st: State, idx: c_int) -> Result<u64, Error> {
    if st.type_of(idx) != TNUMBER {
        return Err(Error::BadArgument(format!(
            "expected a call token (number), got {}",
            st.type_name(idx)
        )));
    }
    Ok(st.to_number(idx) as u64)
}

crate::lua_function!(pub fn take => take_impl);
/// `notifier:_take(token [, wait])`: the results of a finished call (or its error, raised). One
/// still running is an error, unless `wait`: then this waits for it (a coroutine resumed early).
fn take_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let token = token_arg(st, 2)?;
    let call = n.waits.take(token, &|| st.to_boolean(3))?;
    // the results go above the arguments: `push_outcome` needs no lower stack than at the call
    let result = push_outcome(st, &call);
    n.waits.cache.put(call);
    result
}

/// `notifier:METHOD(token)` that answers nothing: `op` on the notifier's waits.
fn with_token(st: State, op: fn(&mut Waits, u64)) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let token = token_arg(st, 2)?;
    op(&mut n.waits, token);
    Ok(0)
}

crate::lua_function!(pub fn done => done_impl);
/// `notifier:_done(token)`: whether the call finished (nil if the notifier does not hold it).
fn done_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(n = handle(st));
    let token = token_arg(st, 2)?;
    match n.waits.done(token) {
        Some(finished) => st.push_bool(finished),
        None => st.push_nil(),
    }
    Ok(1)
}

crate::lua_function!(pub fn drop_call => drop_impl);
/// `notifier:_drop(token)`: forgets a call nobody will take (see `Waits::drop_call`).
fn drop_impl(st: State) -> Result<c_int, Error> {
    with_token(st, Waits::drop_call)
}

crate::lua_function!(pub fn unwatch => unwatch_impl);
/// `notifier:_unwatch(token)`: frees a token of `_watch` (see `Waits::unwatch`).
fn unwatch_impl(st: State) -> Result<c_int, Error> {
    with_token(st, Waits::unwatch)
}

crate::lua_function!(pub fn gc => crate::host::finalize::<NotifierHandle>);

/// The notifier of `fut:METHOD(notifier, token)` (argument 2), held for the caller's frame, once
/// argument 3 is checked to be a token (`st.to_number(3)`).
#[inline]
pub(crate) fn notifier_arg<'f>(
    f: &'f Frame,
    st: State,
    method: &str,
) -> Result<Held<'f, NotifierHandle>, Error> {
    let handle = userdata::hold(f, st, 2).map_err(|a| {
        a.error::<NotifierHandle>(|| {
            Error::BadArgument(format!(
                "bad argument #1 to '{method}': expected a notifier"
            ))
        })
    })?;
    if st.type_of(3) != TNUMBER {
        return Err(Error::BadArgument(format!(
            "bad argument #2 to '{method}': expected a token (number)"
        )));
    }
    Ok(handle)
}

crate::lua_function!(pub fn subscribe_future => subscribe_future_impl);
/// `fut:_subscribe(notifier, token)` -> whether it subscribed (false: the call is done already):
/// the notifier queues `token` when the future's call finishes.
fn subscribe_future_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(f = future_api::handle(st, "_subscribe"));
    crate::hold!(handle = notifier_arg(st, "_subscribe"));
    let token = st.to_number(3) as u64;
    let subscribed = handle.waits.subscribe(f.call(), token);
    st.push_bool(subscribed);
    Ok(1)
}

crate::lua_function!(pub fn unsubscribe_future => unsubscribe_future_impl);
/// `fut:_unsubscribe(notifier, token)` -> whether the subscription was dropped before the call
/// finished (then `token` never comes back, and is free again); false if its completion was (or
/// is being) queued, which the loop then drains as usual. For an await that gives up early: left
/// in place, its token would keep a luv loop's count of calls in flight above zero forever.
fn unsubscribe_future_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(f = future_api::handle(st, "_unsubscribe"));
    crate::hold!(handle = notifier_arg(st, "_unsubscribe"));
    let token = st.to_number(3) as u64;
    let id = SubscriberId::Queue(std::sync::Arc::as_ptr(&handle.waits.notifier), token);
    let dropped = f.call().unsubscribe(id);
    if dropped {
        handle.waits.unused_token(token);
    }
    st.push_bool(dropped);
    Ok(1)
}

#[cfg(test)]
mod tests {
    use super::born_elsewhere;

    #[test]
    fn only_a_notifier_that_asked_and_was_made_before_a_fork_is_inherited() {
        assert!(!born_elsewhere(None, 0));
        assert!(!born_elsewhere(None, 3));
        assert!(!born_elsewhere(Some(2), 2));
        assert!(born_elsewhere(Some(2), 3));
        // the child's generation after `fork()` in the child: it was made in the parent
        assert!(born_elsewhere(Some(0), crate::sys::fork_generation() + 1));
    }
}
