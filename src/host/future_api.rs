//! Futures: what `pool:submit` returns. `fut:ready()`, `fut:wait([timeout])`, `fut:cancel()`, and
//! the hooks schedulers use: `fut:pollfd()` / `fut:events()` / `fut:timeout()` (cqueues' polling
//! protocol, also usable with luv's `uv.new_poll`). `fut:_subscribe(notifier, token)` is the
//! notifier's (`notifier_api`), with the rest of the subscription code.

use std::cell::{Cell, OnceCell};
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::call::{Call, Waited, RUNNING};
use crate::host::call_io::{push_outcome, HostWait};
use crate::host::userdata::{self, Access, Frame};
use crate::lua::protect::push_str;
use crate::lua::{State, TNIL, TNONE, TNUMBER};
use crate::notify::{PollSignal, Subscriber, SubscriberId};
use crate::pool::Pool;
use crate::Error;

pub struct FutureHandle {
    /// Always `Some` until the future is dropped (then the call may be reused).
    call: Option<Arc<Call>>,
    pool: Arc<Pool>,
    /// The pool's poll signal, once `pollfd()` subscribed this future to it.
    poll: OnceCell<Arc<PollSignal>>,
    /// Whether the owner has seen this (subscribed) future finished: it no longer keeps the poll
    /// descriptor readable.
    claimed: Cell<bool>,
    /// The main thread of the host state that made the pool (see `HostWait::with_main`).
    main: *mut mlua::ffi::lua_State,
}

impl userdata::Tagged for FutureHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0002;
    const NAME: &'static str = "future";
    // A finalizer may wait on the very future whose results are being pushed: its methods take
    // `&self`, what they change is in cells.
    const SHARED: bool = true;
}

impl FutureHandle {
    /// A future of `call`, made by a pool whose host state's main thread is `main`
    /// (`PoolHandle::main`: null or that thread).
    pub fn new(call: Arc<Call>, pool: Arc<Pool>, main: *mut mlua::ffi::lua_State) -> FutureHandle {
        FutureHandle {
            call: Some(call),
            pool,
            poll: OnceCell::new(),
            claimed: Cell::new(false),
            main,
        }
    }

    pub(super) fn call(&self) -> &Call {
        self.call.as_deref().expect("a live future holds its call")
    }

    fn done(&self) -> bool {
        let done = self.call().is_done();
        if done && !self.claimed.get() {
            self.claimed.set(true);
            if let Some(p) = self.poll.get() {
                p.claim();
            }
        }
        done
    }
}

impl Drop for FutureHandle {
    fn drop(&mut self) {
        if let Some(p) = self.poll.take() {
            if !self.claimed.get() {
                // finished or not, this future will not be looked at again: balance its signal
                // only its own subscription: a coroutine's await may hold another
                if !self.call().unsubscribe(SubscriberId::Poll(Arc::as_ptr(&p))) {
                    p.claim();
                }
            }
        }
        if let Some(call) = self.call.take() {
            if call.is_done() {
                self.pool.give_back_call(call);
            }
        }
    }
}

/// The future `self` at slot 1 of `method`, lent for the caller's frame
/// (`crate::hold!(f = handle(st, "wait"))`).
#[inline]
pub(super) fn handle<'f>(
    frame: &'f Frame,
    st: State,
    method: &'static str,
) -> Result<&'f FutureHandle, Error> {
    userdata::share(frame, st, 1).map_err(|a| {
        a.error::<FutureHandle>(|| {
            Error::BadArgument(format!(
                "bad argument #1 to '{method}': expected a future, got {} (call it as fut:{method}(...), with a colon)",
                st.type_name(1)
            ))
        })
    })
}

crate::lua_function!(pub fn ready => ready_impl);
fn ready_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(f = handle(st, "ready"));
    let done = f.done();
    st.push_bool(done);
    Ok(1)
}

crate::lua_function!(pub fn wait => wait_impl);
fn wait_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(f = handle(st, "wait"));
    let timeout = match st.type_of(2) {
        TNIL | TNONE => None,
        TNUMBER if st.to_number(2) >= 0.0 => {
            let secs = st.to_number(2);
            if secs.is_infinite() {
                None
            } else {
                Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
            }
        }
        _ => {
            return Err(Error::BadArgument(format!(
                "bad argument #1 to 'wait': expected a timeout in seconds (non-negative number) or nothing, got {}",
                st.type_name(2)
            )))
        }
    };
    if !f.call().is_done() {
        f.pool.check_process()?;
        let deadline = crate::call::deadline_after(timeout);
        // SAFETY: `f.main` is null or the main thread of the state that made the pool, and a
        // userdata belongs to one state: `st` is one of its threads.
        let mut waiting = unsafe { HostWait::with_main(st, f.main) };
        loop {
            match waiting.call(f.call(), deadline) {
                Waited::Done => break,
                // Ctrl-C raises; the call goes on and the future can be waited for again. A
                // hook set for another reason (nothing raised) is no reason to stop waiting.
                Waited::Interrupted => {
                    if let Some(e) = waiting.interrupt_error("fut:wait()") {
                        return Err(e);
                    }
                }
                Waited::TimedOut => {
                    let seconds = timeout.map_or(f64::INFINITY, |d| d.as_secs_f64());
                    st.set_top(1);
                    st.push_nil();
                    let message = Error::WaitTimeout { seconds }.to_string();
                    push_str(st, &message, || "reporting a wait timeout".into())?;
                    return Ok(2);
                }
            }
        }
    }
    f.done();
    // the results go above the timeout: `push_outcome` needs no lower stack than at the call
    push_outcome(st, f.call())
}

crate::lua_function!(pub fn cancel => cancel_impl);
fn cancel_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(f = handle(st, "cancel"));
    f.pool.check_process()?;
    let cancelled = f.pool.cancel(f.call());
    if !cancelled && f.call().phase() == RUNNING {
        // interrupted at the child's next hook check (pools with a time_limit)
        f.pool.interrupt_running(f.call());
    }
    st.push_bool(cancelled);
    Ok(1)
}

/// The error for a descriptor `pollfd` could not get (EMFILE, ENFILE: a condition users cause).
fn no_descriptor(e: std::io::Error) -> Error {
    Error::NoDescriptor {
        doing: "the descriptor fut:pollfd() returns".into(),
        cause: e.to_string(),
    }
}

crate::lua_function!(pub fn pollfd => pollfd_impl);
fn pollfd_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(f = handle(st, "pollfd"));
    if f.poll.get().is_none() && !f.claimed.get() {
        let signal = f.pool.poll_signal().map_err(no_descriptor)?;
        if !f.call().subscribe(Subscriber::Poll(signal.clone())) {
            // already finished: make the descriptor readable for this future too, so a poller
            // does not sleep on it (claimed, like any other, when the owner sees it done)
            signal.raise();
        }
        let _ = f.poll.set(signal.clone());
        st.push_integer(signal.fd() as i64);
        return Ok(1);
    }
    let fd = match f.poll.get() {
        Some(p) => p.fd(),
        None => f.pool.poll_signal().map_err(no_descriptor)?.fd(),
    };
    st.push_integer(fd as i64);
    Ok(1)
}

crate::lua_function!(pub fn gc => crate::host::finalize::<FutureHandle>);

crate::lua_function!(pub fn tostring => tostring_impl);
fn tostring_impl(st: State) -> Result<c_int, Error> {
    let text = match userdata::with(st, 1, |f: &FutureHandle| f.call().phase()) {
        Ok(phase) => format!(
            "vmpool.future ({})",
            match phase {
                crate::call::QUEUED => "queued",
                crate::call::ASSIGNED => "assigned",
                crate::call::RUNNING => "running",
                crate::call::DONE => "done",
                _ => "finishing",
            }
        ),
        Err(Access::InUse) => "vmpool.future (in use)".into(),
        Err(_) => "vmpool.future (finalized)".into(),
    };
    push_str(st, &text, || "converting a future to a string".into())?;
    Ok(1)
}
