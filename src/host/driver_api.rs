//! The native half of `vmpool.run`: it submits a coroutine's call, remembers it under a small
//! integer token, and hands the Lua driver the tokens of finished calls.
//!
//! Under `vmpool.run`, `co_invoke` does not create a future: a future is a userdata with a
//! finalizer, and thousands of them per second made the garbage collector, not the pool, the
//! bottleneck. A call lives in the driver's slot table from `submit` to `result`, its record is
//! reused afterwards, and tokens (slot numbers) are reused too, so the Lua side's table of
//! waiting coroutines stays a small array.
//!
//! A token is reused only once it can never come back: its call was taken (`result`,
//! `_unwatch`) *and* its completion handed to Lua by `wait`, and not before the next `wait`
//! (`TokenSupply`). A coroutine resumed early by user code takes its call before the completion
//! arrives; reused at once, its token would wake whichever coroutine got it next.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::call::{deadline_after, Call, Outcome};
use crate::host::call_cache::CallCache;
use crate::host::call_io::{push_outcome, PoolHandle};
use crate::host::notifier_api::FLUSH_EVERY;
use crate::host::protect::protected;
use crate::host::userdata::{self, Tagged, UV_DRIVER};
use crate::lua::{State, TNUMBER, TTABLE};
use crate::notify::{Notifier, Subscriber, SubscriberId};
use crate::pool::{Pool, Posting};
use crate::token_map::TokenSupply;
use crate::Error;

pub struct DriverHandle {
    notifier: Arc<Notifier>,
    /// Calls in flight by token (token = index + 1).
    slots: Vec<Slot>,
    supply: TokenSupply,
    cache: CallCache,
    /// Reused between waits.
    tokens: Vec<u64>,
    /// Between `_batch()` and `_flush()`: `submit` files calls in `outbox` (each with its pool
    /// and token), handed to the pools every `FLUSH_EVERY` calls and at `_flush()`.
    batching: bool,
    outbox: Vec<(Arc<Pool>, Arc<Call>, u64)>,
    /// Reused by `_flush`.
    postings: Vec<Posting>,
}

#[derive(Default)]
struct Slot {
    /// Until its coroutine takes it.
    call: Option<Arc<Call>>,
    /// Its token came back through `wait`.
    delivered: bool,
    /// Its call was taken (or given up) and no completion is due: free once `delivered`.
    taken: bool,
}

impl Tagged for DriverHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0004;
}

impl DriverHandle {
    /// Gives `call` a token (a free slot, or a new one) and subscribes it, so that the token
    /// comes back from `driver:wait` when the call finishes (at once if it already has).
    fn watch(&mut self, call: Arc<Call>) -> u64 {
        let token = self.file(call.clone());
        self.subscribe(&call, token);
        token
    }

    /// Gives `call` a token (a free slot, or a new one), not subscribed yet.
    fn file(&mut self, call: Arc<Call>) -> u64 {
        let token = self.supply.take();
        let slot = token as usize - 1;
        if slot == self.slots.len() {
            self.slots.push(Slot::default());
        }
        self.slots[slot] = Slot {
            call: Some(call),
            delivered: false,
            taken: false,
        };
        token
    }

    /// `token` comes back from `driver:wait` when `call` finishes (at once if it already has).
    fn subscribe(&self, call: &Call, token: u64) {
        let subscriber = Subscriber::Queue {
            notifier: self.notifier.clone(),
            token,
        };
        if !call.subscribe(subscriber) {
            // finished already: queue its token ourselves
            self.notifier.push(token);
        }
    }

    /// The slot of a token from Lua.
    fn slot_of(&self, st: State, idx: c_int, what: &str) -> Result<usize, Error> {
        (st.type_of(idx) == TNUMBER)
            .then(|| st.to_number(idx) as usize)
            .filter(|&t| t >= 1 && t <= self.slots.len())
            .map(|t| t - 1)
            .ok_or_else(|| Error::Internal(format!("vmpool.run: unknown {what} token")))
    }

    /// Its call was taken: the slot is free once its token came back (now, or at the `wait`
    /// that delivers it).
    fn taken(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.taken = true;
        if s.delivered {
            self.supply.release(slot as u64 + 1);
        }
    }

    /// `wait` handed these tokens to Lua.
    fn delivered(&mut self) {
        for &t in &self.tokens {
            if let Some(s) = self.slots.get_mut(t as usize - 1) {
                s.delivered = true;
                if s.taken {
                    self.supply.release(t);
                }
            }
        }
    }
}

fn handle<'a>(st: State) -> Result<&'a mut DriverHandle, Error> {
    userdata::get::<DriverHandle>(st, 1)
        .and_then(|b| b.get())
        .ok_or_else(|| Error::BadArgument("expected a vmpool.run driver as first argument".into()))
}

crate::lua_function!(pub fn new_driver => new_impl);
fn new_impl(st: State) -> Result<c_int, Error> {
    let h = DriverHandle {
        notifier: Notifier::new(),
        slots: Vec::new(),
        supply: TokenSupply::default(),
        cache: CallCache::default(),
        tokens: Vec::new(),
        batching: false,
        outbox: Vec::new(),
        postings: Vec::new(),
    };
    userdata::push(st, h, UV_DRIVER)?;
    Ok(1)
}

crate::lua_function!(pub fn submit => submit_impl);
/// `driver:submit(pool, chunk, fn, ...)` -> token. Raises like `pool:invoke` when the call
/// cannot be submitted.
fn submit_impl(st: State) -> Result<c_int, Error> {
    let d = handle(st)?;
    let pool = userdata::get::<PoolHandle>(st, 2)
        .and_then(|b| b.get())
        .ok_or_else(|| {
            Error::BadArgument("expected a pool (call it as pool:co_invoke(...))".into())
        })?;
    let call = pool.prepare_with(st, 3, "co_invoke", Some(&mut d.cache))?;
    if d.batching {
        // filed under its token now; handed to its pool and subscribed at the flush (a call
        // the pool refuses then finishes with the error, which its coroutine's `result` raises)
        let token = d.file(call.clone());
        d.outbox.push((pool.pool.clone(), call, token));
        if d.outbox.len() >= FLUSH_EVERY {
            flush_outbox(d);
        }
        st.set_top(0);
        st.push_integer(token as i64);
        return Ok(1);
    }
    if let Err(e) = pool.pool.submit(call.clone()) {
        d.cache.put(call);
        return Err(e);
    }
    let token = d.watch(call);
    st.set_top(0);
    st.push_integer(token as i64);
    Ok(1)
}

/// Hands the outbox's calls to their pools; idle workers are woken once every call is filed.
fn flush_outbox(d: &mut DriverHandle) {
    let mut postings = std::mem::take(&mut d.postings);
    let mut outbox = std::mem::take(&mut d.outbox);
    for (pool, call, token) in outbox.drain(..) {
        match pool.submit_later(call.clone()) {
            Ok(Some(posting)) => postings.push(posting),
            Ok(None) => {}
            Err(e) => call.finish(Outcome::Err(e)),
        }
        d.subscribe(&call, token);
    }
    d.outbox = outbox;
    postings.clear(); // wakes the workers
    d.postings = postings;
}

crate::lua_function!(pub fn batch => batch_impl);
/// `driver:_batch()`: `submit` files calls until `_flush`.
fn batch_impl(st: State) -> Result<c_int, Error> {
    handle(st)?.batching = true;
    Ok(0)
}

crate::lua_function!(pub fn flush => flush_impl);
/// `driver:_flush()`: ends the batch and hands its calls to their pools.
fn flush_impl(st: State) -> Result<c_int, Error> {
    let d = handle(st)?;
    d.batching = false;
    if !d.outbox.is_empty() {
        flush_outbox(d);
    }
    Ok(0)
}

crate::lua_function!(pub fn result => result_impl);
/// `driver:result(token)` -> the call's results (raises its error). Frees the token.
fn result_impl(st: State) -> Result<c_int, Error> {
    let d = handle(st)?;
    let slot = d.slot_of(st, 2, "call")?;
    let call = d.slots[slot]
        .call
        .take()
        .ok_or_else(|| Error::Internal("vmpool.run: call token used twice".into()))?;
    d.taken(slot);
    if !call.is_done() {
        // resumed early (by user code): wait for it rather than hand out nothing, once it is
        // in its pool (it may be in the batch being filed)
        if !d.outbox.is_empty() {
            flush_outbox(d);
        }
        crate::host::call_io::RESULT_WAIT.with(|spin| call.wait(None, spin));
    }
    st.set_top(0);
    let results = push_outcome(st, &call);
    d.cache.put(call);
    results
}

crate::lua_function!(pub fn watch => watch_impl);
/// `driver:_watch(map)` -> token, or nil when the map can step again at once: the token comes
/// back from `driver:wait` when the batch the map waits for finishes (`co_map`). Give it back
/// with `driver:_unwatch(token)`.
fn watch_impl(st: State) -> Result<c_int, Error> {
    let d = handle(st)?;
    let Some(call) = crate::host::map_api::wait_target_at(st, 2)? else {
        st.push_nil();
        return Ok(1);
    };
    let token = d.watch(call);
    st.push_integer(token as i64);
    Ok(1)
}

crate::lua_function!(pub fn unwatch => unwatch_impl);
/// `driver:_unwatch(token)`: frees a token of `_watch`. The batch is its map's (nothing to take
/// from it here); if the coroutine was resumed before it finished, this waits for it, so that
/// its completion cannot wake whoever gets the token next.
fn unwatch_impl(st: State) -> Result<c_int, Error> {
    let d = handle(st)?;
    let slot = d.slot_of(st, 2, "watch")?;
    if let Some(call) = d.slots[slot].call.take() {
        let id = SubscriberId::Queue(Arc::as_ptr(&d.notifier), slot as u64 + 1);
        if !call.is_done() && call.unsubscribe(id) {
            // unsubscribed before it finished: no completion will come, the slot is free now
            d.slots[slot].taken = true;
            d.supply.free_now(slot as u64 + 1);
            return Ok(0);
        }
        if !call.is_done() {
            crate::host::call_io::RESULT_WAIT.with(|spin| call.wait(None, spin));
        }
        d.taken(slot);
    }
    Ok(0)
}

crate::lua_function!(pub fn wait => wait_impl);
/// `driver:wait(buffer [, timeout])` -> n: sleeps until calls finished (or `timeout` seconds
/// passed), writes their tokens into `buffer[1..n]`.
fn wait_impl(st: State) -> Result<c_int, Error> {
    let d = handle(st)?;
    if st.type_of(2) != TTABLE {
        return Err(Error::Internal("driver:wait needs a buffer table".into()));
    }
    let deadline = if st.type_of(3) == TNUMBER {
        deadline_after(Duration::try_from_secs_f64(st.to_number(3).max(0.0)).ok())
    } else {
        None
    };
    d.supply.recycle();
    // tokens a failed write left behind are handed out before sleeping again
    if d.tokens.is_empty() {
        // Ctrl-C raises out of `vmpool.run` (its calls go on in the pool and their records are
        // dropped with the driver); a hook set for another reason returns no tokens
        let mut waiting = crate::host::call_io::HostWait::new(st);
        let mut interrupted = false;
        d.notifier.wait(deadline, &mut d.tokens, &mut || {
            interrupted = waiting.changed();
            interrupted
        });
        if interrupted {
            if let Some(e) = waiting.interrupt_error("vmpool.run") {
                return Err(e);
            }
        }
    }
    let tokens = &d.tokens;
    st.set_top(2);
    protected(st, 1, || "collecting finished calls".into(), &mut |st| {
        for (i, t) in tokens.iter().enumerate() {
            st.push_integer(*t as i64);
            st.raw_seti(1, i as i64 + 1);
        }
        0
    })?;
    d.delivered();
    let n = d.tokens.len();
    d.tokens.clear();
    st.push_integer(n as i64);
    Ok(1)
}

crate::lua_function!(pub fn yieldable => yieldable_impl);
/// `native._yieldable()`: whether the running coroutine could yield at this point. Lua 5.1 and 5.2
/// have no `coroutine.isyieldable` (5.3, 5.4 and LuaJIT do, and `vmpool.lua` uses theirs): a
/// coroutine cannot yield once a C function or a metamethod that cannot yield is between it and
/// its resume (`table.sort`'s comparator, a `gsub` callback, `pcall` on 5.1), which Lua 5.1
/// tracks as `nCcalls > baseCcalls` and Lua 5.2 as a non-zero `nny` (the test 5.3's
/// `lua_isyieldable` makes).
fn yieldable_impl(st: State) -> Result<c_int, Error> {
    #[cfg(all(feature = "lua51", not(feature = "luajit")))]
    {
        // Offsets of `nCcalls` and `baseCcalls` (two `unsigned short`s) in Lua 5.1.5's
        // `struct lua_State` on 64-bit targets: a GC header (pointer and two bytes), `status`,
        // then nine pointers and two ints.
        const N_CCALLS: usize = 96;
        const BASE_CCALLS: usize = 98;
        let p = st.as_ptr() as *const u8;
        // SAFETY: `p` is the running thread's `lua_State` (Lua 5.1.5, the only 5.1 this builds
        // for, checked at load time by `abi::check_host`); both fields lie inside the struct.
        let (n, base) = unsafe {
            (
                (p.add(N_CCALLS) as *const u16).read_unaligned(),
                (p.add(BASE_CCALLS) as *const u16).read_unaligned(),
            )
        };
        st.push_bool(n <= base);
    }
    #[cfg(feature = "lua52")]
    {
        // Offset of `nny` (an `unsigned short`, the count of non-yieldable calls on the thread's
        // stack) in Lua 5.2's `struct lua_State` on 64-bit targets: a GC header (pointer and two
        // bytes), `status`, then six pointers and an int (`stacksize`). The struct is the same
        // in 5.2.0 to 5.2.4 (lstate.h 2.82; Debian 12 ships 5.2.4).
        const NNY: usize = 68;
        let p = st.as_ptr() as *const u8;
        // SAFETY: `p` is the running thread's `lua_State` (a Lua 5.2 host, checked at load time
        // by `abi::check_host`; every 5.2 release has this layout); the field lies inside it.
        let nny = unsafe { (p.add(NNY) as *const u16).read_unaligned() };
        st.push_bool(nny == 0);
    }
    #[cfg(not(any(all(feature = "lua51", not(feature = "luajit")), feature = "lua52")))]
    st.push_bool(true);
    Ok(1)
}

crate::lua_function!(pub fn gc => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    userdata::finalize::<DriverHandle>(st, 1);
    Ok(0)
}
