//! How the watchdog reaches a running state on Lua 5.4 and 5.5: it queues a real-time signal to
//! the state's worker thread, whose handler sets the limit hook on that thread itself, as the
//! standalone interpreters' Ctrl-C does (5.4's `ldebug.c`: `lua_sethook` "can be called during a
//! signal"; from another thread it cannot, see `watchdog.rs`).
//!
//! The handler is async-signal-safe: it allocates nothing, takes no lock and touches no
//! thread-local; it finds its state through the signal's value, which packs a slot index (into a
//! process-global table of slots that are never freed, only reused) and the generation of the
//! arming the watchdog found due. It sets the hook only if that slot is still in that arming and
//! the handler runs on the slot's thread: the worker stores the generation at a call's start and
//! clears it at its end, on the same thread, so a compiler fence orders them against the handler. A late signal (the call ended, the slot
//! went to another state) finds another generation and does nothing. Linux with glibc on 64-bit
//! targets only (`pthread_sigqueue`, a 64-bit signal value); elsewhere, or when the host has its
//! own handler for the signal, [`ready`] is false and time-limited states keep the count hook.

#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    target_pointer_width = "64",
    not(feature = "portable-sys")
))]
mod imp {
    use std::ffi::{c_int, c_void};
    use std::ptr;
    use std::sync::atomic::{
        compiler_fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering,
    };
    use std::sync::Once;

    use mlua::ffi;

    use crate::child::limits::limit_hook;

    /// The signal's value: the slot's index above these bits, the arming's generation in them.
    const GEN_BITS: u32 = 48;
    const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
    const SEG_LEN: usize = 256;
    /// 65,536 slots (the index's 16 bits): states past that keep the count hook.
    const SEGS: usize = 256;

    struct SigSlot {
        taken: AtomicBool,
        /// The running arming's generation (low `GEN_BITS`), 0 between calls.
        armed: AtomicU64,
        /// The last generation given out (only grows, across the slot's owners).
        last: AtomicU64,
        /// The owning state's main thread.
        l: AtomicPtr<ffi::lua_State>,
        /// The owning worker's thread id.
        tid: AtomicI64,
    }

    type Segment = [SigSlot; SEG_LEN];

    /// Segments are allocated on first need and never freed: a late signal may name any slot.
    static TABLE: [AtomicPtr<Segment>; SEGS] = [const { AtomicPtr::new(ptr::null_mut()) }; SEGS];

    fn segment(i: usize) -> &'static Segment {
        let p = TABLE[i].load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a published segment is never freed or moved.
            return unsafe { &*p };
        }
        let fresh = Box::into_raw(Box::new(std::array::from_fn(|_| SigSlot {
            taken: AtomicBool::new(false),
            armed: AtomicU64::new(0),
            last: AtomicU64::new(0),
            l: AtomicPtr::new(ptr::null_mut()),
            tid: AtomicI64::new(0),
        })));
        match TABLE[i].compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: just published, never freed.
            Ok(_) => unsafe { &*fresh },
            Err(winner) => {
                // SAFETY: `fresh` was never published; `winner` is, and is never freed.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*winner
                }
            }
        }
    }

    /// The signal: a real-time one a Lua host is unlikely to use (not `SIGRTMAX` itself, which
    /// valgrind keeps for itself).
    fn sig() -> c_int {
        libc::SIGRTMAX() - 4
    }

    /// The signal the watchdog uses (`SIGRTMAX - 4`).
    pub fn number() -> Option<c_int> {
        Some(sig())
    }

    /// Installs the handler once per process if the signal has the default disposition, so a
    /// handler the host installed is never replaced; then (each call) whether ours is in place.
    /// `VMPOOL_LIMIT_SIGNAL=0` in the environment (read once) keeps the count hook instead.
    pub fn ready() -> bool {
        // an atomic, not a `OnceLock<bool>`: the result is read on every new pool, and an atomic
        // read is one ThreadSanitizer sees as synchronised without an instrumented std
        static ONCE: Once = Once::new();
        static INSTALLED: AtomicBool = AtomicBool::new(false);
        ONCE.call_once(|| {
            let off = std::env::var_os("VMPOOL_LIMIT_SIGNAL").is_some_and(|v| v == "0");
            INSTALLED.store(!off && install(), Ordering::Release)
        });
        INSTALLED.load(Ordering::Acquire) && ours()
    }

    fn install() -> bool {
        // SAFETY: `sigaction` structs are plain data (zeroed is valid); the handler is a function
        // of this module, which stays mapped for the life of the process (`-z nodelete`, build.rs).
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            // swap and look, rather than look and set: a handler installed meanwhile by another
            // thread is put back below instead of being lost
            if libc::sigaction(sig(), &act, &mut old) != 0 {
                return false;
            }
            if old.sa_sigaction != libc::SIG_DFL {
                libc::sigaction(sig(), &old, ptr::null_mut());
                return false;
            }
            true
        }
    }

    fn ours() -> bool {
        // SAFETY: a query only; `cur` is plain data.
        unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig(), ptr::null(), &mut cur) == 0
                && cur.sa_sigaction == on_signal as *const () as usize
        }
    }

    /// The handler (see the module): sets the limit hook on the slot's state if the slot is still
    /// in the arming the signal names.
    extern "C" fn on_signal(_sig: c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
        if info.is_null() {
            return;
        }
        // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO; `si_value` is meaningful for
        // SI_QUEUE, the only code read further.
        let v = unsafe {
            if (*info).si_code != libc::SI_QUEUE {
                return;
            }
            (*info).si_value().sival_ptr as usize as u64
        };
        let (index, gen) = ((v >> GEN_BITS) as usize, v & GEN_MASK);
        let Some(seg) = TABLE.get(index / SEG_LEN) else {
            return;
        };
        let seg = seg.load(Ordering::Acquire);
        if seg.is_null() || gen == 0 {
            return;
        }
        // SAFETY: a published segment is never freed.
        let slot = unsafe { &(*seg)[index % SEG_LEN] };
        // Acquire: a new owner's `tid` and `l` (stored before its arming) are seen with it
        if slot.armed.load(Ordering::Acquire) != gen || slot.tid.load(Ordering::Relaxed) != tid() {
            return;
        }
        compiler_fence(Ordering::SeqCst);
        let l = slot.l.load(Ordering::Relaxed);
        // SAFETY: the slot is in the arming the watchdog found due and this is its owner's
        // thread (a value forged by someone else's `sigqueue` fails one of the checks), so this
        // thread is inside that call: its state is alive and not being created or closed, and
        // `disarm` clears `armed` before the call's end touches the hook. The hook fields are
        // written from a signal handler on the running thread, which 5.4 and 5.5 allow
        // (`ldebug.c`); `lua_sethook` is bound when the module loads (`BIND_NOW`), so no lazy
        // symbol resolution runs here; the hook itself runs later, outside the handler.
        unsafe { ffi::lua_sethook(l, Some(limit_hook), ffi::LUA_MASKCOUNT, 1) };
    }

    /// The calling thread's id (a system call, async-signal-safe; no thread-local).
    fn tid() -> i64 {
        // SAFETY: gettid has no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) }
    }

    /// A state's slot, taken on its worker's thread for the state's life.
    pub struct Ticket {
        slot: &'static SigSlot,
        index: u64,
        thread: libc::pthread_t,
    }

    impl Ticket {
        /// Takes a free slot for the state `l` of the calling thread and lets the signal through
        /// on it (a host thread that blocks every signal passes its mask to the threads it
        /// starts). `None` if the table is full.
        pub fn acquire(l: *mut ffi::lua_State) -> Option<Ticket> {
            let (index, slot) = (0..SEGS).find_map(|s| {
                let seg = segment(s);
                seg.iter().enumerate().find_map(|(i, slot)| {
                    slot.taken
                        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                        .then_some((s * SEG_LEN + i, slot))
                })
            })?;
            slot.l.store(l, Ordering::Relaxed);
            slot.tid.store(tid(), Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            // SAFETY: `set` is plain data initialised by sigemptyset; changes this thread's mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig());
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
            }
            Some(Ticket {
                slot,
                index: index as u64,
                // SAFETY: no preconditions.
                thread: unsafe { libc::pthread_self() },
            })
        }

        /// A call starts (on the owner's thread): the signal may set the hook from now on.
        /// Returns the arming's generation, which the watchdog passes to [`Ticket::send`].
        pub fn arm(&self) -> u64 {
            let mut gen = (self.slot.last.load(Ordering::Relaxed) + 1) & GEN_MASK;
            if gen == 0 {
                gen = 1;
            }
            self.slot.last.store(gen, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
            self.slot.armed.store(gen, Ordering::Release);
            compiler_fence(Ordering::SeqCst);
            gen
        }

        /// The call ends (on the owner's thread): a signal from now on does nothing.
        pub fn disarm(&self) {
            compiler_fence(Ordering::SeqCst);
            self.slot.armed.store(0, Ordering::Relaxed);
            compiler_fence(Ordering::SeqCst);
        }

        /// Queues the signal for arming `gen` to the owner's thread (the watchdog, while the
        /// arming holds, so the thread is alive). False if it could not be queued (the process
        /// has too many signals pending): the caller tries again later.
        pub fn send(&self, gen: u64) -> bool {
            let value = libc::sigval {
                sival_ptr: ((self.index << GEN_BITS) | gen) as usize as *mut c_void,
            };
            // SAFETY: the caller holds the slot armed, so the owning thread has not returned
            // from the call, let alone exited: `thread` names a live thread.
            unsafe { libc::pthread_sigqueue(self.thread, sig(), value) == 0 }
        }
    }

    impl Drop for Ticket {
        fn drop(&mut self) {
            self.disarm();
            self.slot.l.store(ptr::null_mut(), Ordering::Relaxed);
            self.slot.taken.store(false, Ordering::Release);
        }
    }
}

#[cfg(all(
    test,
    target_os = "linux",
    target_env = "gnu",
    target_pointer_width = "64",
    not(feature = "portable-sys")
))]
mod tests {
    use mlua::ffi;

    use super::{ready, Ticket};

    /// Whether `l` has a hook (the signals below are sent to this thread, so each is handled
    /// before `pthread_sigqueue` returns).
    fn hooked(l: *mut ffi::lua_State) -> bool {
        // SAFETY: `l` is a live state of this thread.
        unsafe { ffi::lua_gethook(l).is_some() }
    }

    #[test]
    fn a_signal_sets_the_hook_only_in_the_arming_it_names() {
        assert!(ready());
        let lua = mlua::Lua::new();
        let mut l = std::ptr::null_mut();
        // SAFETY: copies out the state's pointer; `lua` outlives its uses on this thread.
        unsafe { lua.exec_raw::<()>((), |raw| l = raw) }.unwrap();
        let t = Ticket::acquire(l).expect("a free slot");
        let first = t.arm();
        t.disarm();
        assert!(t.send(first));
        assert!(!hooked(l), "a signal after its call ended set the hook");
        let second = t.arm();
        assert_ne!(first, second);
        assert!(t.send(first));
        assert!(!hooked(l), "a late signal set the hook in the next call");
        assert!(t.send(second));
        assert!(hooked(l), "the due arming's signal did not set the hook");
        t.disarm();
        // SAFETY: this thread's own state; removes the hook as the watchdog's disarm does.
        unsafe { ffi::lua_sethook(l, None, 0, 0) };
        assert!(t.send(second));
        assert!(!hooked(l), "a signal after disarming set the hook");
    }
}

#[cfg(not(all(
    target_os = "linux",
    target_env = "gnu",
    target_pointer_width = "64",
    not(feature = "portable-sys")
)))]
mod imp {
    use mlua::ffi;

    pub fn ready() -> bool {
        false
    }

    /// The signal the watchdog would use: none here.
    pub fn number() -> Option<std::ffi::c_int> {
        None
    }

    /// Never made: [`ready`] is false here.
    pub enum Ticket {}

    impl Ticket {
        pub fn acquire(_l: *mut ffi::lua_State) -> Option<Ticket> {
            None
        }
        pub fn arm(&self) -> u64 {
            match *self {}
        }
        pub fn disarm(&self) {
            match *self {}
        }
        pub fn send(&self, _gen: u64) -> bool {
            match *self {}
        }
    }
}

pub use imp::{number, ready, Ticket};
