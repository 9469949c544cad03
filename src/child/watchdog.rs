//! The watchdog of a pool with a `time_limit`: one thread that sets the limit hook on a running
//! state's main thread only when something is due (the call's deadline, `fut:cancel()`, a bounded
//! close's stop), so a time-limited call runs at full speed until then instead of paying a count
//! hook every 1,000 instructions. `lua_sethook` is the one Lua API function made to be called
//! from outside the running code (the standalone interpreters' Ctrl-C calls it from a signal
//! handler); 5.1 and LuaJIT check the hook at every instruction.
//!
//! On Lua 5.1 to 5.3 and LuaJIT ([`CROSS_THREAD`]) the watchdog calls it itself. Lua 5.4 and
//! 5.5's `lua_sethook` also marks every frame of the running thread (`settraps`), walking a list
//! the running thread changes and may shrink (`luaE_shrinkCI`) at the same moment: safe from a
//! signal handler on that thread, not from another thread. There the watchdog queues a signal to
//! the state's worker thread, whose handler sets the hook (`child/signal.rs`); where signals are
//! not available ([`signal::ready`]), a time-limited state keeps the count hook all the time.
//!
//! Each state has a [`Slot`]: its worker arms it at a call's start and disarms it at the end, each
//! under the slot's lock, and the watchdog fires only under that lock while the slot is armed, so
//! it never touches a state between calls or after it closed (a signal that arrives after the
//! call ended finds its arming over and does nothing). Disarming removes a hook the watchdog set.
//! The watchdog sleeps until the earliest deadline of the armed slots; with none armed, for one
//! `time_limit` at most (a call armed meanwhile has a later deadline), or until woken
//! ([`Watchdog::poke`]) when there is no deadline at all (`time_limit = math.huge`).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mlua::ffi;
use parking_lot::{Condvar, Mutex};

use super::limits::limit_hook;
use super::signal;
use crate::Error;

/// Whether a pool's watchdog may set a running state's hook from its own thread (see above).
pub const CROSS_THREAD: bool = !cfg!(any(feature = "lua54", feature = "lua55"));

/// Whether a new time-limited pool gets a watchdog: always on Lua 5.1 to 5.3 and LuaJIT; on 5.4
/// and 5.5 where its signal's handler is vmpool's (see the module).
pub fn available() -> bool {
    CROSS_THREAD || signal::ready()
}

/// How a new time-limited pool's calls get the limit hook: "thread" (the watchdog sets it),
/// "signal" (its signal to the worker's thread does) or "count" (the count hook, all the time).
pub fn mechanism() -> &'static str {
    if CROSS_THREAD {
        "thread"
    } else if signal::ready() {
        "signal"
    } else {
        "count"
    }
}

/// How long the watchdog waits before trying again to queue a signal the kernel refused.
const RETRY: Duration = Duration::from_millis(1);

/// The shortest idle sleep: a tiny `time_limit` (1e-10 s) must not make the watchdog spin.
const MIN_IDLE: Duration = Duration::from_millis(1);

/// A state's arming, shared by its worker and the watchdog; on Lua 5.4 and 5.5, with the state's
/// signal slot.
pub struct Slot(Mutex<Armed>, Option<signal::Ticket>);

struct Armed {
    /// The state's main thread, while armed.
    l: *mut ffi::lua_State,
    /// In [`crate::clock::now`] ticks.
    deadline: Option<u64>,
    /// The running call's interrupt flag (`fut:cancel()`), alive while armed.
    interrupt: *const AtomicBool,
    armed: bool,
    /// The watchdog set the hook (or queued its signal) during this arming.
    fired: bool,
    /// The arming's generation in the state's signal slot (`Slot`'s ticket).
    gen: u64,
}

impl Default for Armed {
    fn default() -> Armed {
        Armed {
            l: std::ptr::null_mut(),
            deadline: None,
            interrupt: std::ptr::null(),
            armed: false,
            fired: false,
            gen: 0,
        }
    }
}

// SAFETY: the pointers are only followed under the slot's lock while `armed`, when the worker
// guarantees the state and the call's flag are alive (it disarms under the lock before either
// goes away); `lua_sethook` is the API function meant to be called asynchronously, and the
// watchdog's thread calls it only where it writes only the state's hook fields (`CROSS_THREAD`).
unsafe impl Send for Armed {}

/// Sets the limit hook to fire at the next instruction (the hook then raises the limit's error).
///
/// # Safety
/// `l` is a live state's main thread.
unsafe fn fire(l: *mut ffi::lua_State) {
    // SAFETY: the caller's promise; the hook reads only its own thread's `LIMITS`.
    unsafe { ffi::lua_sethook(l, Some(limit_hook), ffi::LUA_MASKCOUNT, 1) };
}

impl Slot {
    /// `ticket`: the state's signal slot, on Lua 5.4 and 5.5.
    fn new(ticket: Option<signal::Ticket>) -> Slot {
        Slot(Mutex::new(Armed::default()), ticket)
    }

    /// Sets the hook of the armed state `a` to fire now: directly, or through its thread's
    /// signal. False if the signal could not be queued (try again).
    fn fire_armed(&self, a: &Armed) -> bool {
        match &self.1 {
            Some(ticket) => ticket.send(a.gen),
            None => {
                // SAFETY: armed, so `l` is a live state, its worker blocked from disarming by the
                // lock the caller holds; without a ticket the pool exists only where
                // `CROSS_THREAD` allows another thread to call `lua_sethook`.
                unsafe { fire(a.l) };
                true
            }
        }
    }

    /// A call starts on state `l`: the watchdog may fire from now on. `interrupt` and `stop` are
    /// read after arming, so a cancel or stop that came before (and whose poke found the slot
    /// unarmed) is seen here and fires at once.
    pub fn arm(
        &self,
        l: *mut ffi::lua_State,
        deadline: Option<u64>,
        interrupt: &AtomicBool,
        stop: &AtomicBool,
    ) {
        let mut a = self.0.lock();
        a.l = l;
        a.deadline = deadline;
        a.interrupt = interrupt;
        a.armed = true;
        a.fired = false;
        if let Some(t) = &self.1 {
            a.gen = t.arm();
        }
        if interrupt.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
            a.fired = true;
            // SAFETY: `l` is this worker's own live state.
            unsafe { fire(l) };
        }
    }

    /// The next item of a map batch starts with a deadline of its own (on the worker's thread,
    /// between items: a hook fired for the previous deadline has found nothing to stop).
    pub fn set_deadline(&self, deadline: Option<u64>, stop: &AtomicBool) {
        let mut a = self.0.lock();
        if !a.armed {
            return;
        }
        a.deadline = deadline;
        // SAFETY: armed (the batch runs), so the call's flag is alive.
        let cancelled = unsafe { (*a.interrupt).load(Ordering::SeqCst) };
        if a.fired && !cancelled && !stop.load(Ordering::SeqCst) {
            // the previous item's deadline fired and that item ended in time: no hook until due,
            // and a signal still on its way for that deadline finds a new arming
            if let Some(t) = &self.1 {
                a.gen = t.arm();
            }
            // SAFETY: the worker's own live state.
            unsafe { ffi::lua_sethook(a.l, None, 0, 0) };
            a.fired = false;
        }
    }

    /// The call ended: the watchdog leaves the state alone, and a hook it set is removed.
    pub fn disarm(&self) {
        let mut a = self.0.lock();
        if let Some(t) = &self.1 {
            // before the hook is removed: a signal from now on leaves it alone
            t.disarm();
        }
        if a.fired {
            // SAFETY: still armed, so `l` is the worker's own live state.
            unsafe { ffi::lua_sethook(a.l, None, 0, 0) };
        }
        *a = Armed::default();
    }
}

/// One pool's watchdog (see the module).
pub struct Watchdog {
    shared: Mutex<Shared>,
    wake: Condvar,
    /// The pool's stop flag (a bounded close whose time ran out).
    stop: Arc<AtomicBool>,
    /// The longest sleep with no deadline pending; `None`: until poked.
    idle: Option<Duration>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    slots: Vec<Arc<Slot>>,
    shutdown: bool,
}

impl Watchdog {
    /// Starts the watchdog of a pool with this `time_limit` (`Duration::MAX`: no deadline, only
    /// cancel and stop).
    pub fn start(time_limit: Duration, stop: Arc<AtomicBool>) -> Result<Arc<Watchdog>, Error> {
        let idle = (time_limit != Duration::MAX).then(|| time_limit.max(MIN_IDLE));
        let w = Arc::new(Watchdog {
            shared: Mutex::new(Shared::default()),
            wake: Condvar::new(),
            stop,
            idle,
            thread: Mutex::new(None),
        });
        let me = w.clone();
        let thread = std::thread::Builder::new()
            .name("vmpool-watchdog".into())
            .spawn(move || me.watch())
            .map_err(|e| Error::Spawn(format!("cannot start the time-limit thread: {e}")))?;
        *w.thread.lock() = Some(thread);
        Ok(w)
    }

    /// A new state's slot (`ticket`: its signal slot, on Lua 5.4 and 5.5).
    pub fn register(&self, ticket: Option<signal::Ticket>) -> Arc<Slot> {
        let slot = Arc::new(Slot::new(ticket));
        self.shared.lock().slots.push(slot.clone());
        slot
    }

    /// A state closes: its slot (disarmed) leaves the list.
    pub fn unregister(&self, slot: &Arc<Slot>) {
        self.shared.lock().slots.retain(|s| !Arc::ptr_eq(s, slot));
    }

    /// Looks at every armed state now: a call was cancelled or the pool stopped.
    pub fn poke(&self) {
        let _g = self.shared.lock();
        self.wake.notify_one();
    }

    /// Ends the thread and joins it (once the pool's workers are gone).
    pub fn shut_down(&self) {
        self.shared.lock().shutdown = true;
        self.wake.notify_one();
        let thread = self.thread.lock().take();
        if let Some(t) = thread {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    fn watch(&self) {
        let mut g = self.shared.lock();
        while !g.shutdown {
            let now = crate::clock::now();
            let next = self.scan(&g.slots, now);
            let sleep =
                next.map(|t| Duration::from_nanos(crate::clock::nanos(t.saturating_sub(now))));
            match sleep.or(self.idle) {
                Some(d) => {
                    self.wake.wait_for(&mut g, d);
                }
                None => self.wake.wait(&mut g),
            }
        }
    }

    /// Fires on the armed states that are due; returns the earliest deadline still pending (clock
    /// ticks, as `now`).
    fn scan(&self, slots: &[Arc<Slot>], now: u64) -> Option<u64> {
        let stop = self.stop.load(Ordering::SeqCst);
        let retry_in = crate::clock::ticks_of(RETRY).unwrap_or(0);
        let mut next: Option<u64> = None;
        for slot in slots {
            let mut a = slot.0.lock();
            if !a.armed || a.fired {
                continue;
            }
            // SAFETY: armed, so the call's flag is alive (see `Armed`).
            let cancelled = unsafe { (*a.interrupt).load(Ordering::SeqCst) };
            let due = a.deadline.is_some_and(|d| d <= now);
            if stop || cancelled || due {
                if slot.fire_armed(&a) {
                    a.fired = true;
                } else {
                    let retry = now.saturating_add(retry_in);
                    next = Some(next.map_or(retry, |n| n.min(retry)));
                }
            } else if let Some(d) = a.deadline {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        }
        next
    }
}

/// The hook a coroutine of a time-limited state gets (`coroutine.create`/`wrap` are wrapped; see
/// `Child::guard_coroutines`): Lua 5.1 to 5.5 keep hooks per coroutine, and the watchdog reaches
/// only the main thread, so code in a coroutine is checked by count as before.
pub(super) const HOOK_COROUTINE: ffi::lua_CFunction = crate::lua::c_function(hook_coroutine);
unsafe extern "C-unwind" fn hook_coroutine(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this on the running coroutine's own thread; it sets that thread's hook.
    unsafe {
        ffi::lua_sethook(
            l,
            Some(limit_hook),
            ffi::LUA_MASKCOUNT,
            super::limits::HOOK_COUNT as c_int,
        )
    };
    0
}

/// Wraps `coroutine.create` and `coroutine.wrap` so that each coroutine calls [`HOOK_COROUTINE`]
/// (its argument) when it first runs.
pub(super) const COROUTINE_GUARD: &[u8] = br#"
local co, type, hook = coroutine, type, ...
if type(co) ~= "table" then return end
local create, wrap = co.create, co.wrap
co.create = function(f)
  if type(f) ~= "function" then return create(f) end
  return create(function(...) hook() return f(...) end)
end
co.wrap = function(f)
  if type(f) ~= "function" then return wrap(f) end
  return wrap(function(...) hook() return f(...) end)
end
"#;
