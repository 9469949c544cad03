//! Notifiers for scheduler loops written in Lua (`vmpool.run`, the OpenResty adapter): futures
//! subscribed with `fut:_subscribe(notifier, token)` push their token when they finish, and the
//! loop collects tokens with `notifier:wait([timeout])` (sleeps, no CPU) or `notifier:drain()`.
//!
//! A loop that can only sleep on sockets it connects itself (OpenResty's cosockets) gets a socket
//! doorbell in two steps: `path = notifier:_doorbell_listen(dir)`, then, once its socket connected to
//! `unix:` .. path, `notifier:_doorbell_accept()`. `notifier:_wake()` rings it unconditionally and
//! `notifier:_doorbell_close()` closes this side.
//!
//! The OpenResty adapter's own calls skip the future userdata (its allocation and finalizer are
//! a good part of a call's cost on the event loop): `token = notifier:_submit(pool, chunk, fn,
//! ...)` submits the call and subscribes it under a fresh token, whose completion always comes
//! back through the queue; the notifier keeps the call until `notifier:_take(token)` returns its
//! results (or raises its error) or `notifier:_drop(token)` gives it up.
//!
//! A token is reused only once it can never come back: its completion was drained *and* its call
//! taken or dropped (a request that stopped waiting leaves a completion behind, which must not
//! wake a newer request), and not before the next `drain`/`wait` (the loop may still be going
//! through the array the completion came in). So tokens stay small and dense, and the adapters' tables of waiting
//! coroutines keyed by them stay arrays: LuaJIT's tables degrade badly under keys that keep
//! growing (about 1 µs per insert and delete with 1,000 live keys, against 2 ns for reused
//! ones: `bench/tables.lua`), which was most of the luv and cqueues adapters' cost per call on
//! LuaJIT.
//!
//! Loops that poll file descriptors themselves (the luv and cqueues adapters, `src/lua/luv.lua`
//! and `src/lua/cqueues.lua`) get an eventfd doorbell from `fd = notifier:_pollfd()`: readable
//! while tokens are queued, quiet again once `drain` took them.
//!
//! `token, first = notifier:_defer(pool, chunk, fn, ...)` prepares the call but only queues it in
//! an outbox that `notifier:_flush()` submits: the adapter flushes once per turn of nginx's event
//! loop, so the requests of one turn wake a sleeping pool worker once, not once each.
//!
//! The luv and cqueues adapters resume a batch of coroutines per wake-up, and the calls those make
//! should reach the pool together too. `notifier:_open_batch(n)` opens a batch: until it closes,
//! `token = notifier:_call(pool, chunk, fn, ...)` defers (and flushes every `FLUSH_EVERY` calls,
//! so that workers start on the first ones); outside a batch it submits. It closes, flushing the
//! rest, at the `n`-th `_take` (the woken coroutines took their results: cqueues, which cannot
//! tell when its controller has run them all) or at `notifier:_close_batch()` (luv's callback
//! end, and cqueues' fallback after a few turns), which returns how many calls batches deferred
//! since the last `_close_batch`. Each call's bookkeeping so stays native: in Lua it cost about
//! a fifth of the adapters' opcodes per call (bench/results/2026-12-02-adapters-native-batch.md).
//!
//! `native._notifier(true)` makes a notifier that knows the process it was made in: after a
//! `fork()`, its `_defer` and `_submit` return `false` instead of a token and do nothing, so
//! that the OpenResty adapter learns that its state was inherited from another process without
//! asking for the worker's pid on every request (an FFI call that LuaJIT's interpreter runs:
//! about 600 of the event loop's instructions per request, `bench/ngx/instructions.lua`).

use std::ffi::c_int;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::call::{Call, Outcome, RUNNING};
use crate::host::call_cache::CallCache;
use crate::host::call_io::{push_outcome, PoolHandle};
use crate::host::future_api;
use crate::host::protect::{protected, push_str};
use crate::host::userdata::{self, UV_NOTIFIER};
use crate::lua::{State, TNUMBER};
use crate::notify::{Doorbell, DoorbellListener, Notifier, Subscriber, SubscriberId};
use crate::pool::{Pool, Posting};
use crate::token_map::{TokenMap, TokenSupply};
use crate::Error;

pub struct NotifierHandle {
    pub notifier: Arc<Notifier>,
    /// Reused between calls.
    tokens: Vec<u64>,
    /// Between `_doorbell_listen` and `_doorbell_accept`.
    listener: Option<DoorbellListener>,
    /// The eventfd doorbell `_pollfd` installed (owned by the notifier's queue).
    pollfd: Option<RawFd>,
    /// Calls submitted by `_submit` and not yet taken or dropped.
    calls: TokenMap<InFlight>,
    /// Finished call records, for reuse.
    cache: CallCache,
    /// Tokens of deferred calls, in order, until `_flush`.
    outbox: Vec<u64>,
    /// Reused by `_flush`.
    postings: Vec<Posting>,
    /// Its tokens: reused once they can never come back (see the module docs).
    supply: TokenSupply,
    /// `sys::fork_generation()` when made with `_notifier(true)`; `None` otherwise.
    born: Option<u64>,
    /// The batch `_open_batch` opened: `_call` defers while it is open.
    batch: Option<Batch>,
    /// Calls `_call` deferred in batches since the last `_close_batch` (which returns it).
    batched: u64,
}

/// A batch of calls `_call` defers (see the module docs).
struct Batch {
    /// `_take`s that close it; 0: only `_close_batch` does.
    takes_left: u64,
}

/// A batch's deferred calls are submitted at least this often, so that workers start on the first
/// ones while the loop still resumes the rest of its coroutines (the notifier's batches, and
/// `vmpool.run`'s in `driver_api.rs`).
pub(crate) const FLUSH_EVERY: usize = 64;

impl NotifierHandle {
    /// Whether it was made with `_notifier(true)` in another process (before a `fork()`).
    fn inherited(&self) -> bool {
        born_elsewhere(self.born, crate::sys::fork_generation())
    }
}

/// Whether a notifier made in fork generation `born` (`None`: one that does not care) is used in
/// generation `now` of another process.
fn born_elsewhere(born: Option<u64>, now: u64) -> bool {
    born.is_some_and(|g| g != now)
}

impl userdata::Tagged for NotifierHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0003;
}

struct InFlight {
    call: Arc<Call>,
    pool: Arc<Pool>,
    /// In the outbox (`_defer`), not yet handed to the pool.
    deferred: bool,
    /// Its token came back through `drain`/`wait`: once the call is taken or dropped, the token
    /// is free.
    drained: bool,
}

impl NotifierHandle {
    /// The tokens just handed to Lua by `drain`/`wait`: a token with no call held (a future's,
    /// or a dropped call's) is free now; a held call's token is free once it is taken or dropped.
    /// Either way it is reused only after the next `drain`/`wait` (`TokenSupply::release`).
    fn delivered(&mut self) {
        for &t in &self.tokens {
            match self.calls.get_mut(t) {
                Some(e) => e.drained = true,
                None => self.supply.release(t),
            }
        }
    }

    /// A token from `_token()` that a subscription did not take (the future or batch had
    /// finished): it will never be queued, so it is free.
    pub fn unused_token(&mut self, token: u64) {
        if !self.calls.contains_key(token) {
            self.supply.free_now(token);
        }
    }

    /// A call leaves the notifier (taken or dropped): its token is free if it was drained; if
    /// not, once its completion is (see `delivered`).
    fn forget(&mut self, token: u64, e: &InFlight) {
        if e.drained {
            self.supply.release(token);
        }
    }
}

fn handle<'a>(st: State) -> Result<&'a mut NotifierHandle, Error> {
    userdata::get::<NotifierHandle>(st, 1)
        .and_then(|b| b.get())
        .ok_or_else(|| Error::BadArgument("expected a notifier as first argument".into()))
}

crate::lua_function!(pub fn new_notifier => new_impl);
fn new_impl(st: State) -> Result<c_int, Error> {
    let born = st.to_boolean(1).then(crate::sys::fork_generation);
    userdata::push(
        st,
        NotifierHandle {
            notifier: Notifier::new(),
            tokens: Vec::new(),
            listener: None,
            pollfd: None,
            calls: TokenMap::default(),
            cache: CallCache::default(),
            outbox: Vec::new(),
            postings: Vec::new(),
            supply: TokenSupply::default(),
            born,
            batch: None,
            batched: 0,
        },
        UV_NOTIFIER,
    )?;
    Ok(1)
}

/// Pushes the collected tokens as an array; if that fails they stay for the next call.
fn push_tokens(st: State, h: &mut NotifierHandle) -> Result<c_int, Error> {
    st.set_top(0);
    let tokens = &h.tokens;
    protected(st, 0, || "collecting finished calls".into(), &mut |st| {
        st.create_table(tokens.len().min(1 << 20) as c_int, 0);
        for (i, &t) in tokens.iter().enumerate() {
            st.push_number(t as f64);
            st.raw_seti(-2, i as i64 + 1);
        }
        1
    })?;
    h.delivered();
    h.tokens.clear();
    Ok(1)
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
    h.supply.recycle();
    let mut tokens = std::mem::take(&mut h.tokens);
    let mut waiting = crate::host::call_io::HostWait::new(st);
    let mut interrupted = false;
    h.notifier.wait(deadline, &mut tokens, &mut || {
        interrupted = waiting.changed();
        interrupted
    });
    if interrupted {
        if let Some(e) = waiting.interrupt_error("notifier:wait()") {
            h.tokens = tokens;
            return Err(e);
        }
    }
    h.tokens = tokens;
    push_tokens(st, h)
}

crate::lua_function!(pub fn drain => drain_impl);
fn drain_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.supply.recycle();
    let mut tokens = std::mem::take(&mut h.tokens);
    h.notifier.drain(&mut tokens);
    h.tokens = tokens;
    push_tokens(st, h)
}

crate::lua_function!(pub fn doorbell_listen => doorbell_listen_impl);
fn doorbell_listen_impl(st: State) -> Result<c_int, Error> {
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
    let h = handle(st)?;
    let listener = h.listener.take().ok_or_else(|| {
        Error::Internal("_doorbell_accept called without _doorbell_listen".into())
    })?;
    let fd = listener.accept().map_err(|e| {
        Error::Internal(format!(
            "the light thread's doorbell connection did not arrive: {e}"
        ))
    })?;
    drop(listener);
    h.pollfd = None;
    h.notifier.set_doorbell(Some(Doorbell::Socket(fd)));
    st.push_bool(true);
    Ok(1)
}

crate::lua_function!(pub fn doorbell_close => doorbell_close_impl);
fn doorbell_close_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.listener = None;
    h.pollfd = None;
    h.notifier.set_doorbell(None);
    Ok(0)
}

crate::lua_function!(pub fn pollfd => pollfd_impl);
/// `notifier:_pollfd()` -> fd: an eventfd that is readable while finished calls' tokens wait to be
/// drained (installed as the doorbell on the first call; the same descriptor afterwards).
fn pollfd_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
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
            h.notifier.set_doorbell(Some(Doorbell::Wake(bell)));
            h.pollfd = Some(fd);
            fd
        }
    };
    st.push_integer(fd as i64);
    Ok(1)
}

crate::lua_function!(pub fn wake => wake_impl);
fn wake_impl(st: State) -> Result<c_int, Error> {
    handle(st)?.notifier.wake();
    Ok(0)
}

crate::lua_function!(pub fn pending => pending_impl);
/// `notifier:pending()`: tokens queued and not drained; calls held for `_take`; calls deferred.
fn pending_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    st.push_number(h.notifier.pending() as f64);
    st.push_number(h.calls.len() as f64);
    st.push_number(h.outbox.len() as f64);
    Ok(3)
}

crate::lua_function!(pub fn next_token => next_token_impl);
/// `notifier:_token()`: a token for `fut:_subscribe` that no `notifier:_submit` call will use.
fn next_token_impl(st: State) -> Result<c_int, Error> {
    let t = handle(st)?.supply.take();
    st.push_number(t as f64);
    Ok(1)
}

/// Builds the call of `notifier:METHOD(pool, chunk, fn, ...)` and files it under a new token.
fn prepare(st: State, n: &mut NotifierHandle, deferred: bool) -> Result<u64, Error> {
    let pool = userdata::get::<PoolHandle>(st, 2)
        .and_then(|b| b.get())
        .ok_or_else(|| {
            Error::BadArgument("expected a pool (call it as pool:co_invoke(...))".into())
        })?;
    let call = pool.prepare_with(st, 3, "co_invoke", Some(&mut n.cache))?;
    st.set_top(0);
    let token = n.supply.take();
    n.calls.insert(
        token,
        InFlight {
            call,
            pool: pool.pool.clone(),
            deferred,
            drained: false,
        },
    );
    Ok(token)
}

/// Hands a filed call to its pool. Whatever happens, its token comes back through the queue:
/// when it finishes, at once if it finished before it could be subscribed, or with the error if
/// the pool refused it. A call that got an idle state comes back as a posting: the worker is
/// woken when it is dropped.
fn start(notifier: &Arc<Notifier>, token: u64, e: &mut InFlight) -> Result<Option<Posting>, Error> {
    e.deferred = false;
    let posting = e.pool.submit_later(e.call.clone())?;
    let subscriber = Subscriber::Queue {
        notifier: notifier.clone(),
        token,
    };
    if !e.call.subscribe(subscriber) {
        notifier.push(token);
    }
    Ok(posting)
}

crate::lua_function!(pub fn submit => submit_impl);
/// `notifier:_submit(pool, chunk, fn, ...)` -> token. Raises like `pool:invoke` when the pool
/// refuses the call; `false` from a `_notifier(true)` inherited through `fork()`.
fn submit_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    if n.inherited() {
        st.push_bool(false);
        return Ok(1);
    }
    let token = prepare(st, n, false)?;
    let started = match n.calls.get_mut(token) {
        Some(e) => start(&n.notifier, token, e).map(drop),
        None => Err(Error::Internal("a filed call vanished".into())),
    };
    if let Err(err) = started {
        if let Some(e) = n.calls.remove(token) {
            n.cache.put(e.call);
        }
        // refused before it was subscribed: its token is never queued
        n.supply.free_now(token);
        return Err(err);
    }
    st.push_number(token as f64);
    Ok(1)
}

crate::lua_function!(pub fn defer => defer_impl);
/// `notifier:_defer(pool, chunk, fn, ...)` -> token, first: the call waits in the outbox for
/// `_flush`; `first` says the outbox was empty (the caller arranges a flush). `false` from a
/// `_notifier(true)` inherited through `fork()`.
fn defer_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    if n.inherited() {
        st.push_bool(false);
        return Ok(1);
    }
    let token = prepare(st, n, true)?;
    n.outbox.push(token);
    st.push_number(token as f64);
    st.push_bool(n.outbox.len() == 1);
    Ok(2)
}

crate::lua_function!(pub fn flush => flush_impl);
/// `notifier:_flush()` -> n: submits the deferred calls (a refused one finishes with the error).
/// Idle workers are woken only once every call is filed, so that one woken worker finds the
/// rest of the batch queued behind its first call.
fn flush_impl(st: State) -> Result<c_int, Error> {
    let count = flush_outbox(handle(st)?);
    st.push_number(count as f64);
    Ok(1)
}

/// Submits the outbox's calls (see `_flush`); returns how many.
fn flush_outbox(n: &mut NotifierHandle) -> usize {
    let mut outbox = std::mem::take(&mut n.outbox);
    let mut postings = std::mem::take(&mut n.postings);
    let mut count = 0;
    for &token in &outbox {
        // dropped calls are gone from `calls`
        if let Some(e) = n.calls.get_mut(token) {
            count += 1;
            match start(&n.notifier, token, e) {
                Ok(Some(posting)) => postings.push(posting),
                Ok(None) => {}
                Err(err) => {
                    e.call.finish(Outcome::Err(err));
                    n.notifier.push(token);
                }
            }
        }
    }
    postings.clear(); // wakes the workers
    n.postings = postings;
    outbox.clear();
    n.outbox = outbox;
    count
}

crate::lua_function!(pub fn call_or_defer => call_impl);
/// `notifier:_call(pool, chunk, fn, ...)` -> token: `_defer` while a batch is open (flushing every
/// `FLUSH_EVERY` calls), `_submit` otherwise.
fn call_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    if n.batch.is_none() || n.inherited() {
        return submit_impl(st);
    }
    let token = prepare(st, n, true)?;
    n.outbox.push(token);
    n.batched += 1;
    if n.outbox.len() >= FLUSH_EVERY {
        flush_outbox(n);
    }
    st.push_number(token as f64);
    Ok(1)
}

crate::lua_function!(pub fn open_batch => open_batch_impl);
/// `notifier:_open_batch(n)`: `_call` defers until the `n`-th `_take` (0: until
/// `_close_batch`). Re-arms a batch that is open already.
fn open_batch_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    let takes_left = if st.type_of(2) == TNUMBER {
        st.to_number(2).max(0.0) as u64
    } else {
        0
    };
    n.batch = Some(Batch { takes_left });
    Ok(0)
}

crate::lua_function!(pub fn batch_open => batch_open_impl);
/// `notifier:_batch_open()`: whether a batch is open.
fn batch_open_impl(st: State) -> Result<c_int, Error> {
    let open = handle(st)?.batch.is_some();
    st.push_bool(open);
    Ok(1)
}

crate::lua_function!(pub fn close_batch_api => close_batch_impl);
/// `notifier:_close_batch()` -> n: closes the batch (if open) and submits its deferred calls;
/// `n`: calls deferred in batches since the last `_close_batch`.
fn close_batch_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    end_batch(n);
    let batched = std::mem::take(&mut n.batched);
    st.push_number(batched as f64);
    Ok(1)
}

fn end_batch(n: &mut NotifierHandle) {
    n.batch = None;
    if !n.outbox.is_empty() {
        flush_outbox(n);
    }
}

/// A `_take` in an open batch: the last one it waits for closes it.
fn count_take(n: &mut NotifierHandle) {
    if let Some(b) = &mut n.batch {
        if b.takes_left > 0 {
            b.takes_left -= 1;
            if b.takes_left == 0 {
                end_batch(n);
            }
        }
    }
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
/// `notifier:_take(token)`: the results of a finished call (or its error, raised).
fn take_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    let token = token_arg(st, 2)?;
    let entry = n
        .calls
        .remove(token)
        .ok_or_else(|| Error::Internal(format!("no call with token {token}")))?;
    if !entry.call.is_done() {
        n.calls.insert(token, entry);
        return Err(Error::Internal(format!(
            "the call with token {token} has not finished"
        )));
    }
    st.set_top(0);
    n.forget(token, &entry);
    count_take(n);
    let result = push_outcome(st, &entry.call);
    n.cache.put(entry.call);
    result
}

crate::lua_function!(pub fn done => done_impl);
/// `notifier:_done(token)`: whether the call finished (nil if the notifier does not hold it).
fn done_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    let token = token_arg(st, 2)?;
    match n.calls.get(token) {
        Some(e) => st.push_bool(e.call.is_done()),
        None => st.push_nil(),
    }
    Ok(1)
}

crate::lua_function!(pub fn drop_call => drop_impl);
/// `notifier:_drop(token)`: forgets a call nobody will take; one that has not started is
/// cancelled, a running one interrupted (pools with a time_limit). Its completion token still
/// arrives, and finds no waiter.
fn drop_impl(st: State) -> Result<c_int, Error> {
    let n = handle(st)?;
    let token = token_arg(st, 2)?;
    if let Some(e) = n.calls.remove(token) {
        n.forget(token, &e);
        if e.deferred {
            // never submitted: out of the outbox, and its token comes back at once, as every
            // token of `_defer` and `_submit` does once (the adapters count their calls in
            // flight by it: without it a luv loop would never end)
            n.outbox.retain(|&t| t != token);
            n.cache.put(e.call);
            n.notifier.push(token);
        } else if !e.call.is_done() && !e.pool.cancel(&e.call) && e.call.phase() == RUNNING {
            e.call.interrupt.store(true, Ordering::Relaxed);
        }
    }
    Ok(0)
}

crate::lua_function!(pub fn gc => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    userdata::finalize::<NotifierHandle>(st, 1);
    Ok(0)
}

/// The notifier and token of `fut:METHOD(notifier, token)` (arguments 2 and 3).
fn notifier_and_token<'a>(st: State, method: &str) -> Result<(&'a mut NotifierHandle, u64), Error> {
    let handle = userdata::get::<NotifierHandle>(st, 2)
        .and_then(|b| b.get())
        .ok_or_else(|| {
            Error::BadArgument(format!(
                "bad argument #1 to '{method}': expected a notifier"
            ))
        })?;
    if st.type_of(3) != TNUMBER {
        return Err(Error::BadArgument(format!(
            "bad argument #2 to '{method}': expected a token (number)"
        )));
    }
    Ok((handle, st.to_number(3) as u64))
}

crate::lua_function!(pub fn subscribe_future => subscribe_future_impl);
/// `fut:_subscribe(notifier, token)` -> whether it subscribed (false: the call is done already):
/// the notifier queues `token` when the future's call finishes.
fn subscribe_future_impl(st: State) -> Result<c_int, Error> {
    let f = future_api::handle(st)?;
    let (handle, token) = notifier_and_token(st, "_subscribe")?;
    let notifier = handle.notifier.clone();
    let subscribed = f.call().subscribe(Subscriber::Queue { notifier, token });
    if !subscribed {
        handle.unused_token(token);
    }
    st.push_bool(subscribed);
    Ok(1)
}

crate::lua_function!(pub fn unsubscribe_future => unsubscribe_future_impl);
/// `fut:_unsubscribe(notifier, token)` -> whether the subscription was dropped before the call
/// finished (then `token` never comes back, and is free again); false if its completion was (or
/// is being) queued, which the loop then drains as usual. For an await that gives up early: left
/// in place, its token would keep a luv loop's count of calls in flight above zero forever.
fn unsubscribe_future_impl(st: State) -> Result<c_int, Error> {
    let f = future_api::handle(st)?;
    let (handle, token) = notifier_and_token(st, "_unsubscribe")?;
    let id = SubscriberId::Queue(Arc::as_ptr(&handle.notifier), token);
    let dropped = f.call().unsubscribe(id);
    if dropped {
        handle.unused_token(token);
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
