//! The limit hook behind `time_limit` and cancelling running calls (set by the watchdog when a
//! call is due, and as a count hook in coroutines and `init`), and what it checks: the running
//! call's deadline and interrupt flag, shared with the hook through a thread-local pointer to the
//! worker's state's [`Limits`], which counts only while `armed` (a call, `init` or a
//! collection); and `Child::arm` and `disarm`, which set them around a call.

use std::cell::Cell;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mlua::ffi;

use super::Child;
use crate::call::Call;
use crate::lua::State;
use crate::Error;

/// VM instructions between two checks of the time limit and of cancellation.
pub(super) const HOOK_COUNT: c_int = 1000;

/// What the limit hook checks, shared with it through a thread-local pointer.
pub(super) struct Limits {
    /// The armed call's deadline in [`crate::clock::now`] ticks.
    pub(super) deadline: Cell<Option<u64>>,
    pub(super) interrupt: Cell<*const AtomicBool>,
    /// The pool's stop flag: set when a bounded `close` stops the calls still running.
    pub(super) stop: Arc<AtomicBool>,
    /// The pool's closed flag: set when `close` starts (read only by a stream's wait for room).
    pub(super) closing: Arc<AtomicBool>,
    pub(super) tripped: Cell<Trip>,
    /// Whether the readers of `LIMITS` see these limits: while a call (or `init`, or a
    /// collection) is armed, and always in a state without the limit hook. A flag beside the
    /// pointer, so that arming a call costs no thread-local access: the pointer is set once per
    /// state (`Child::configure`).
    pub(super) armed: Cell<bool>,
}

impl Limits {
    /// What stops the armed call, if anything (cancel, the pool's stop, the deadline, in that
    /// order), noted in `tripped`: the hook's check, and a channel wait's.
    fn check(&self) -> Trip {
        if self.tripped.get() != Trip::None {
            return self.tripped.get();
        }
        let interrupt = self.interrupt.get();
        // SAFETY: the interrupt flag belongs to the armed call, alive while it is armed (the
        // callers run only then, on the call's thread).
        if !interrupt.is_null() && unsafe { (*interrupt).load(Ordering::Relaxed) } {
            self.tripped.set(Trip::Cancel);
        } else if self.stop.load(Ordering::Relaxed) {
            self.tripped.set(Trip::Closed);
        } else if self
            .deadline
            .get()
            .is_some_and(|d| crate::clock::now() >= d)
        {
            self.tripped.set(Trip::Time);
        }
        self.tripped.get()
    }

    /// At a call's end: a call that ran past its deadline (inside a C function, which the hook
    /// cannot stop) trips the time limit as if the hook had seen it.
    pub(super) fn trip_if_past_deadline(&self) {
        if self.tripped.get() == Trip::None
            && self
                .deadline
                .get()
                .is_some_and(|d| crate::clock::now() >= d)
        {
            self.tripped.set(Trip::Time);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Trip {
    None,
    Time,
    Cancel,
    Closed,
}

thread_local! {
    pub(super) static LIMITS: Cell<*const Limits> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` on this thread's armed limits, if any.
#[inline]
fn with_armed<R>(f: impl FnOnce(Option<&Limits>) -> R) -> R {
    LIMITS.with(|c| {
        let p = c.get();
        // SAFETY: `LIMITS` points at the worker's state's `Limits` (boxed, so it does not move)
        // until that state is dropped, which resets it first; only this thread reads it.
        let lim = (!p.is_null()).then(|| unsafe { &*p });
        f(lim.filter(|l| l.armed.get()))
    })
}

// `tripped()` in a child: whether the running call hit its time limit or was interrupted (the
// `xpcall` guard asks it; see `Child::guard_xpcall`).
crate::lua_function!(pub(super) fn LIMIT_TRIPPED => limit_tripped);
fn limit_tripped(st: State) -> Result<c_int, Error> {
    let tripped = with_armed(|lim| lim.is_some_and(|l| l.tripped.get() != Trip::None));
    st.push_bool(tripped);
    Ok(1)
}

/// The hook behind `time_limit` and cancelling running calls.
pub(super) unsafe extern "C-unwind" fn limit_hook(
    l: *mut ffi::lua_State,
    _ar: *mut ffi::lua_Debug,
) {
    let trip = with_armed(|lim| lim.map_or(Trip::None, Limits::check));
    let msg: &'static str = match trip {
        Trip::None => return,
        Trip::Time => "vmpool: time limit exceeded",
        Trip::Cancel => "vmpool: call was cancelled",
        Trip::Closed => "vmpool: call stopped: the pool was closed while it ran",
    };
    // SAFETY: from now on the hook fires on every instruction, so a script that catches the error
    // with pcall is stopped again at its next instruction until the error reaches our own
    // `lua_pcall`. Nothing in this frame has a destructor when `lua_error` jumps out of it.
    unsafe {
        ffi::lua_sethook(l, Some(limit_hook), ffi::LUA_MASKCOUNT, 1);
        ffi::lua_pushlstring(l, msg.as_ptr() as *const c_char, msg.len());
        ffi::lua_error(l);
    }
}

/// Whether this thread runs a pool state's call (or `init`): a wait here is a pool state's, which
/// the call's stop test ends ([`call_must_stop`]); elsewhere it is the host's. (In a pool without
/// a `time_limit` the worker's thread keeps its limits armed between calls, when nothing reads
/// them.)
pub(crate) fn call_armed() -> bool {
    with_armed(|lim| lim.is_some())
}

/// The stop test of a wait inside the armed call (a channel's): true once the call was cancelled,
/// its pool stopped by a bounded close, or its time limit passed. It trips the limit as the hook
/// does, so the call fails with the limit's error whatever Lua code makes of [`stop_error`].
pub(crate) fn call_must_stop() -> bool {
    with_armed(|lim| lim.is_some_and(|l| l.check() != Trip::None))
}

/// The stop test of a stream's item waiting for room: [`call_must_stop`], and also once the pool
/// is closing: the host is inside `close` then, so nobody can take items and the wait would never
/// end. The call stops as a bounded close stops it (`Trip::Closed`); the items already buffered
/// stay for the iterator.
pub(crate) fn stream_must_stop() -> bool {
    with_armed(|lim| {
        lim.is_some_and(|l| {
            if l.check() != Trip::None {
                return true;
            }
            if l.closing.load(Ordering::Relaxed) {
                l.tripped.set(Trip::Closed);
                return true;
            }
            false
        })
    })
}

/// The error a wait stopped by [`call_must_stop`] raises. The hook is set to fire at the next
/// instruction, as it does when it trips, so a `pcall` around the wait cannot carry on.
pub(crate) fn stop_error(st: State) -> Error {
    let trip = with_armed(|lim| lim.map(|l| l.tripped.get()));
    // SAFETY: installs our hook on the running state (its own thread); the hook reads only this
    // thread's `LIMITS`, and the state is replaced after a tripped call.
    unsafe { ffi::lua_sethook(st.as_ptr(), Some(limit_hook), ffi::LUA_MASKCOUNT, 1) };
    match trip {
        Some(Trip::Closed) => Error::Stopped,
        Some(Trip::Time) => {
            Error::BadArgument("time limit exceeded while waiting on a channel".into())
        }
        _ => Error::Cancelled,
    }
}

impl Child {
    /// Arms the call's limits. `LIMITS` points at this child's limits for good (see `configure`),
    /// so a call pays for no thread-local access; without a hook they stay armed between calls
    /// and only the call's flags are set (a channel's wait reads them: [`call_must_stop`]).
    #[inline]
    pub(super) fn arm(&mut self, call: &Call) {
        let lim = &*self.limits;
        lim.interrupt.set(&call.interrupt);
        lim.tripped.set(Trip::None);
        if !self.hooked {
            return;
        }
        let deadline = deadline_after(self.limit_ticks);
        lim.deadline.set(deadline);
        lim.armed.set(true);
        if let Some((_, slot)) = &self.watch {
            slot.arm(self.st.as_ptr(), deadline, &call.interrupt, &lim.stop);
        }
    }

    /// The call ended: the hook and a channel's wait no longer see its limits (with a hook), and
    /// the watchdog leaves the state alone.
    #[inline]
    pub(super) fn disarm(&mut self) {
        self.limits.interrupt.set(std::ptr::null());
        if !self.hooked {
            return;
        }
        if let Some((_, slot)) = &self.watch {
            slot.disarm();
        }
        self.limits.armed.set(false);
    }
}

/// The clock tick `ticks` from now (`None`: no deadline, or one too far to represent).
#[inline]
pub(super) fn deadline_after(ticks: Option<u64>) -> Option<u64> {
    ticks.and_then(|t| crate::clock::now().checked_add(t))
}
