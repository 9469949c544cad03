//! The pool: its front ([`Pool`]: new, submit, cancel, collect, close, stats) over five parts
//! with one job each:
//!
//! - [`ledger`]: the counts (which states exist, which are idle, which calls wait, the counters of
//!   `stats()`) and the only code that changes them;
//! - [`worker`]: the thread that owns one state, and the registry of those threads;
//! - [`housekeeper`]: the idle check (acquire timeouts, idle non-core states, joining threads);
//! - [`registry`]: the open pools of the process by name, for `vmpool.metrics()`;
//! - `spares` and [`call_cache`]: the finished call records kept for the host to reuse, shared
//!   by the pool and cached by each host thread.
//!
//! Besides the counts, each pool keeps two latency histograms ([`crate::histogram`]) that its
//! workers record into without the lock: `wait` (submit to a state taking the call) and `run`
//! (start to end in the state), from three clock reads per call ([`crate::clock`]).
//!
//! The counts are guarded by one mutex (`inner`), held only for a few instructions per call
//! (reserve on submit, release when a worker finishes); Lua code never runs under it, nor under the
//! pool's two other locks (the poll signal of `fut:pollfd()`, the spare call records). What the
//! ledger decides under the lock (post this call, start that worker, tell these states to exit,
//! wake the idle check) is carried out after the lock is released.

pub mod call_cache;
pub mod housekeeper;
pub mod ledger;
pub mod registry;
mod spares;
pub mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::call::{Call, Outcome};
use crate::child::watchdog::Watchdog;
use crate::chunk::Chunks;
use crate::config::Config;
use crate::histogram::Histogram;
use crate::mailbox::Mailbox;
use crate::Error;
use housekeeper::Housekeeper;
pub use ledger::{Ended, Next, Retire, Stats};
use ledger::{Ledger, Reserved};
use spares::Spares;
pub use spares::{MAX_SPARE_BYTES, MAX_SPARE_CALLS};
use worker::Threads;

/// What the pool's mutex guards.
struct Inner {
    ledger: Ledger,
    threads: Threads,
    housekeeper: Housekeeper,
}

/// Aligned to two cache lines, like [`crate::chunk::Chunk`]: in an `Arc<Pool>` the reference
/// counts, which the host changes with every future it creates and frees, then sit on another
/// line than the fields the workers use on every call.
#[repr(align(128))]
pub struct Pool {
    pub config: Config,
    inner: Mutex<Inner>,
    /// Wakes the housekeeper (new deadline, exited worker, close).
    wake_housekeeper: Condvar,
    /// Signalled when the last worker thread exits.
    all_exited: Condvar,
    /// Set by a bounded close whose time ran out: the limit hook stops the calls still running.
    pub stop: Arc<std::sync::atomic::AtomicBool>,
    /// Sets the limit hook on a running state when its call is due (pools with a `time_limit`).
    pub watchdog: Option<Arc<Watchdog>>,
    /// Workers creating a state now: a bounded close waits for them (a state's creation reads
    /// its host's data, e.g. nginx's configuration, which is freed once the host's state closes).
    creating: std::sync::atomic::AtomicUsize,
    pub chunks: Chunks,
    fork_generation: u64,
    pid: u32,
    /// The CPU the host thread last waited on a result from (see `sys::move_off_cpu`); only
    /// kept when this process may use several CPUs.
    pub host_cpu: std::sync::atomic::AtomicI32,
    several_cpus: bool,
    /// Created on the first `fut:pollfd()`.
    poll: Mutex<Option<Arc<crate::notify::PollSignal>>>,
    /// Finished calls given back by dropped futures, for the host to reuse (no allocation per
    /// call in the steady state).
    spare_calls: Mutex<Spares>,
    /// Queue wait (submit to a state taking the call) and run time (start to end in the state)
    /// of every call a state took, in clock ticks (2 x 16 KiB of counters).
    pub wait: Histogram,
    pub run: Histogram,
    /// Set by `close`: the pool leaves the registry of open pools, and a stream's state waiting
    /// for room gives up (the host, in `close`, cannot take its items: `child::stream_must_stop`).
    pub closed: Arc<AtomicBool>,
    /// The name that labels its metrics (set by [`registry::register`]).
    name: OnceLock<String>,
}

impl Pool {
    /// Creates the pool and its core states; fails (leaving nothing running) if a state cannot
    /// be created or `init` fails.
    pub fn new(config: Config) -> Result<Arc<Pool>, Error> {
        crate::clock::init();
        let core = config.core;
        let stop: Arc<AtomicBool> = Arc::default();
        let watchdog = match config.time_limit {
            Some(limit) if crate::child::watchdog::available() => {
                Some(Watchdog::start(limit, stop.clone())?)
            }
            _ => None,
        };
        let pool = Arc::new(Pool {
            inner: Mutex::new(Inner {
                ledger: Ledger::new(&config),
                threads: Threads::default(),
                housekeeper: Housekeeper::default(),
            }),
            config,
            wake_housekeeper: Condvar::new(),
            all_exited: Condvar::new(),
            stop,
            watchdog,
            creating: Default::default(),
            chunks: Chunks::default(),
            fork_generation: crate::sys::fork_generation(),
            pid: crate::sys::pid(),
            poll: Mutex::new(None),
            host_cpu: std::sync::atomic::AtomicI32::new(-1),
            several_cpus: crate::sys::available_cpus() > 1,
            spare_calls: Mutex::new(Spares::default()),
            wait: Histogram::default(),
            run: Histogram::default(),
            closed: Arc::default(),
            name: OnceLock::new(),
        });
        if let Err(e) = registry::register(&pool) {
            pool.stop_watchdog();
            return Err(e);
        }
        if let Err(e) = housekeeper::start(&pool) {
            pool.closed.store(true, Ordering::Relaxed);
            pool.stop_watchdog();
            return Err(e);
        }

        let latch = Arc::new(worker::Latch::new(core));
        let mut spawn_error = None;
        for _ in 0..core {
            pool.inner.lock().ledger.open(true);
            if let Err(e) = pool.spawn_worker(true, None, Some(latch.clone())) {
                spawn_error = Some(e);
                break;
            }
        }
        let result = match spawn_error {
            Some(e) => Err(e),
            None => latch.wait(),
        };
        if let Err(e) = result {
            pool.close();
            return Err(e);
        }
        Ok(pool)
    }

    /// The name that labels its metrics.
    pub fn name(&self) -> &str {
        self.name.get().map_or("", |s| s.as_str())
    }

    /// Whether `close` has begun.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Records the CPU of a host thread about to wait for a result.
    #[inline]
    pub fn note_host_cpu(&self) {
        if self.several_cpus {
            self.host_cpu.store(
                crate::sys::current_cpu(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// Keeps a finished call nobody else holds, for reuse.
    pub fn give_back_call(&self, mut call: Arc<Call>) {
        if let Some(c) = Arc::get_mut(&mut call) {
            c.reset();
            let bytes = spares::size(c);
            // a call not kept is freed after the lock is released
            let refused = self.spare_calls.lock().keep(call, bytes);
            drop(refused);
        }
    }

    /// Frees the spare calls (`pool:collect()`).
    pub fn drop_spare_calls(&self) {
        // the list's buffer too: what the pool holds between calls is then the same at every
        // collection, whatever the most spares ever were (the soak compares it exactly)
        drop(std::mem::take(&mut *self.spare_calls.lock()));
    }

    /// Moves up to 64 spare calls into `out`.
    pub fn take_spare_calls(&self, out: &mut Vec<Arc<Call>>) {
        self.spare_calls.lock().take(out);
    }

    /// The pool's poll descriptor for foreign event loops (created on first use).
    pub fn poll_signal(&self) -> std::io::Result<Arc<crate::notify::PollSignal>> {
        let mut p = self.poll.lock();
        if let Some(s) = p.as_ref() {
            return Ok(s.clone());
        }
        let s = crate::notify::PollSignal::new()?;
        *p = Some(s.clone());
        Ok(s)
    }

    /// Checks the pool may be used from this process.
    #[inline]
    pub fn check_process(&self) -> Result<(), Error> {
        if crate::sys::fork_generation() != self.fork_generation {
            return Err(Error::WrongProcess { pid: self.pid });
        }
        Ok(())
    }

    /// Starts the worker of a state the ledger has opened (busy, for `first` if given). A thread
    /// that cannot start retires the state and fails `first` (and the latch) with the error.
    fn spawn_worker(
        self: &Arc<Pool>,
        core: bool,
        first: Option<Arc<Call>>,
        latch: Option<Arc<worker::Latch>>,
    ) -> Result<(), Error> {
        let id = self.inner.lock().threads.starting();
        // outside the lock: starting a thread takes tens of microseconds
        let spawned = worker::spawn(self.clone(), id, core, first.clone(), latch.clone());
        let mut g = self.inner.lock();
        match spawned {
            Ok(handle) => {
                if g.threads.started(id, handle) {
                    // it exited already: its thread waits to be joined
                    self.wake_housekeeper.notify_one();
                }
                Ok(())
            }
            Err(e) => {
                let err = Error::Spawn(format!("cannot start a worker thread: {e}"));
                g.ledger.retire(
                    core,
                    Retire::NotStarted {
                        had_call: first.is_some(),
                    },
                );
                if g.threads.not_started() {
                    self.all_exited.notify_all();
                }
                drop(g);
                if let Some(latch) = latch {
                    latch.fail(err.clone());
                }
                if let Some(call) = first {
                    call.finish(Outcome::Err(err.clone()));
                }
                Err(err)
            }
        }
    }

    /// Reserves a state for `call` (or queues or refuses it). On `Ok` the call will end with
    /// exactly one outcome, delivered through [`Call::finish`].
    pub fn submit(self: &Arc<Pool>, call: Arc<Call>) -> Result<(), Error> {
        self.submit_later(call).map(drop)
    }

    /// Like [`Pool::submit`], but a call that got an idle state comes back as a [`Posting`] that
    /// wakes the state's worker when dropped. Submitting several calls, keep the postings until
    /// all are filed: a worker woken by the first call would otherwise run it and go back to
    /// sleep (often on the submitter's CPU, preempting it) before the next one is queued.
    #[inline]
    pub fn submit_later(self: &Arc<Pool>, call: Arc<Call>) -> Result<Option<Posting>, Error> {
        call.submitted
            .store(crate::clock::now(), std::sync::atomic::Ordering::Relaxed);
        let mut g = self.inner.lock();
        match g.ledger.reserve(&call)? {
            Reserved::Idle(mailbox) => {
                drop(g);
                Ok(Some(Posting {
                    mailbox,
                    call: Some(call),
                }))
            }
            Reserved::Start { core } => {
                drop(g);
                let _ = self.spawn_worker(core, Some(call), None);
                Ok(None)
            }
            Reserved::Queued { first_deadline } => {
                if let Some(d) = first_deadline {
                    self.wake_housekeeper_by(&mut g, d);
                }
                Ok(None)
            }
        }
    }

    /// Asks a running call to stop (`fut:cancel()`): the limit hook raises at its next
    /// instruction, in pools with a `time_limit` (the watchdog sets it).
    pub fn interrupt_running(&self, call: &Call) {
        call.interrupt.store(true, Ordering::SeqCst);
        if let Some(w) = &self.watchdog {
            w.poke();
        }
    }

    /// Ends the watchdog's thread (once no worker is left to arm it).
    pub(super) fn stop_watchdog(&self) {
        if let Some(w) = &self.watchdog {
            w.shut_down();
        }
    }

    /// Runs `f` with the pool's lock held (tests: a fork while a pool thread holds it).
    #[doc(hidden)]
    pub fn with_lock_held<R>(&self, f: impl FnOnce() -> R) -> R {
        let _held = self.inner.lock();
        f()
    }

    /// Cancels a call that has not started. True if it was cancelled (it will never run).
    pub fn cancel(&self, call: &Call) -> bool {
        let cancelled = self.inner.lock().ledger.cancel(call);
        if cancelled {
            call.finish(Outcome::Err(Error::Cancelled));
        }
        cancelled
    }

    /// A worker finished (or skipped) a call, or its state became ready: the ledger counts it
    /// and says what the worker does next.
    pub fn release(&self, me: &Arc<Mailbox>, core: bool, ended: Ended) -> Next {
        let mut g = self.inner.lock();
        let (next, due) = g.ledger.release(me, core, ended, Instant::now);
        if let Some(due) = due {
            self.wake_housekeeper_by(&mut g, due);
        }
        next
    }

    /// A busy state ends (see [`Retire`]); a lost state's successor, if the ledger opened one
    /// for a queued call, is started here.
    pub fn retire(self: &Arc<Pool>, core: bool, why: Retire) {
        let next = self.inner.lock().ledger.retire(core, why);
        if let Some(call) = next {
            let _ = self.spawn_worker(core, Some(call), None);
        }
    }

    /// A worker replaced its state (after a limit was hit).
    pub fn replaced(&self) {
        self.inner.lock().ledger.replaced();
    }

    /// Called by a worker thread as its last act.
    pub fn worker_exited(&self, id: u64) {
        let mut g = self.inner.lock();
        if g.threads.exited(id) {
            self.all_exited.notify_all();
        }
        self.wake_housekeeper.notify_one();
    }

    pub fn stats(&self) -> Stats {
        self.stats_reset(false)
    }

    /// [`Pool::stats`]; with `reset`, the peaks start again from what is busy and queued now.
    pub fn stats_reset(&self, reset: bool) -> Stats {
        let mut g = self.inner.lock();
        let mut s = g.ledger.stats();
        s.threads = g.threads.unjoined();
        if reset {
            g.ledger.reset_peaks();
        }
        s
    }

    /// Reserves every idle state for a garbage collection and posts it (`pool:collect()`);
    /// returns the calls to wait for. States busy with a call are left alone; nothing is
    /// counted.
    pub fn collect_idle(&self) -> Vec<Arc<Call>> {
        let idle = self.inner.lock().ledger.reserve_idle();
        idle.into_iter()
            .map(|mailbox| {
                let call = Arc::new(Call::collect());
                mailbox.post(call.clone());
                call
            })
            .collect()
    }

    /// Closes the pool: queued calls fail with "pool is closed", running calls finish, then every
    /// state is closed and every thread joined. Idempotent. After a `fork` it does nothing: the
    /// pool's threads do not exist in this process, and its locks may have been copied while one
    /// of them held them (nothing here would ever unlock them).
    pub fn close(&self) {
        self.close_within(None);
    }

    /// [`Pool::close`], bounded: running calls have `timeout` to finish; then the ones still
    /// running are stopped (at their next hook check, in pools with a `time_limit`), and after
    /// [`STOP_GRACE`] more `close` returns without joining the threads still busy (a call stuck
    /// in C, a long finalizer): they end on their own, or with the process. `None` waits for all.
    pub fn close_within(&self, timeout: Option<Duration>) {
        if self.check_process().is_err() {
            return;
        }
        let deadline = crate::call::deadline_after(timeout);
        let mut g = self.inner.lock();
        self.closed.store(true, Ordering::Relaxed);
        if let Some(ledger::Closing { queued, idle }) = g.ledger.close() {
            for mb in idle {
                mb.request_exit();
            }
            self.wake_housekeeper.notify_all();
            drop(g);
            for call in queued {
                call.finish(Outcome::Err(Error::Closed));
            }
            g = self.inner.lock();
        }
        if self.wait_exited(&mut g, deadline) {
            self.join_all(g);
        }
    }

    /// Waits until no worker thread is alive; past `deadline`, stops the running calls and
    /// gives up after [`STOP_GRACE`], or once no state is being created after that, at most
    /// [`CREATE_GRACE`] later. True if every thread exited.
    fn wait_exited(&self, g: &mut MutexGuard<'_, Inner>, deadline: Option<Instant>) -> bool {
        let Some(deadline) = deadline else {
            while g.threads.running() > 0 {
                self.all_exited.wait(g);
            }
            return true;
        };
        let mut stopped_at = None;
        while g.threads.running() > 0 {
            let until = match stopped_at {
                None => deadline,
                Some(t) if self.creating.load(Ordering::SeqCst) == 0 => t + STOP_GRACE,
                Some(t) => t + STOP_GRACE + CREATE_GRACE,
            };
            if Instant::now() >= until {
                if stopped_at.is_some() {
                    return false;
                }
                stopped_at = Some(Instant::now());
                // SeqCst with `new_child`: either it sees the flag or this sees its count
                self.stop.store(true, Ordering::SeqCst);
                if let Some(w) = &self.watchdog {
                    w.poke();
                }
                continue;
            }
            self.all_exited.wait_until(g, until);
        }
        true
    }

    /// A worker's new state, unless a bounded close has stopped the pool.
    pub fn new_child(&self) -> Result<crate::child::Child, Error> {
        self.creating.fetch_add(1, Ordering::SeqCst);
        let child = if self.stop.load(Ordering::SeqCst) {
            Err(Error::Closed)
        } else {
            crate::child::Child::new(
                &self.config,
                [&self.stop, &self.closed],
                self.watchdog.as_ref(),
            )
        };
        if self.creating.fetch_sub(1, Ordering::SeqCst) == 1 && self.stop.load(Ordering::SeqCst) {
            let _g = self.inner.lock();
            self.all_exited.notify_all();
        }
        child
    }

    fn join_all(&self, mut g: MutexGuard<'_, Inner>) {
        let handles: Vec<JoinHandle<()>> = g.threads.take_all();
        let hk = g.housekeeper.take_thread();
        self.wake_housekeeper.notify_all();
        drop(g);
        let joined = handles.len();
        for h in handles {
            let _ = h.join();
        }
        self.inner.lock().threads.joined(joined);
        if let Some(h) = hk {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// How long a bounded close waits, after stopping the calls still running, for their threads to
/// end (an interrupted call unwinds and its state closes within microseconds unless a finalizer
/// or a C function holds it).
pub const STOP_GRACE: Duration = Duration::from_millis(100);

/// How much longer it waits for states still being created (their `init` runs to its end).
pub const CREATE_GRACE: Duration = Duration::from_secs(1);

/// A call reserved to an idle state by [`Pool::submit_later`]: dropping it posts the call to the
/// state's worker (so a reservation can never be lost).
pub struct Posting {
    mailbox: Arc<Mailbox>,
    call: Option<Arc<Call>>,
}

impl Drop for Posting {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.mailbox.post(call);
        }
    }
}
