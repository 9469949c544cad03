//! The pool's bookkeeping: which states exist, which are idle, which calls wait, and the counters
//! `stats()` reports. Everything here is guarded by one mutex, held only for a few instructions per
//! call (reserve on submit, release when a worker finishes); Lua code never runs under it.
//!
//! Reservation happens at submit time: a free state is taken at once (core states first, then the
//! most recently used non-core one), else a non-core state is started (within `max_noncore`), else
//! the call is queued (`blocking = true`, within `max_waiting`) or refused. A worker that finishes a
//! call takes the oldest queued call before going idle, so queued calls never need the caller.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::call::{deadline_after, Call, Outcome, ASSIGNED, QUEUED, RUNNING};
use crate::chunk::Registry;
use crate::config::Config;
use crate::mailbox::Mailbox;
use crate::Error;

/// Counters since the pool was created, plus the live picture (see `pool:stats()`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub core: usize,
    pub noncore: usize,
    pub idle: usize,
    pub busy: usize,
    pub waiting: usize,
    /// Worker threads not yet joined: one per live state, plus those of closed states until the
    /// idle check (or `close`) has joined them.
    pub threads: usize,
    pub created: u64,
    pub closed: u64,
    /// Calls submitted to an open pool; each ends in exactly one of the five counters below.
    pub invokes: u64,
    pub succeeded: u64,
    /// Calls that reached a state and failed (child errors, time and memory limits), and queued
    /// calls failed by `close()`.
    pub errors: u64,
    /// Refused at submit: pool exhausted (`blocking = false`) or queue full (`max_waiting`).
    pub rejected: u64,
    /// Queued calls that waited longer than `acquire_timeout`.
    pub timeouts: u64,
    /// Calls cancelled before they started, or interrupted while running.
    pub cancelled: u64,
}

impl Stats {
    fn count(&mut self, ended: Ended) {
        match ended {
            Ended::Succeeded => self.succeeded += 1,
            Ended::Failed => self.errors += 1,
            Ended::Interrupted => self.cancelled += 1,
            Ended::Skipped | Ended::Collected => {}
        }
    }
}

/// How a call that reached a state ended, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Succeeded,
    Failed,
    /// `fut:cancel()` interrupted the call while it ran.
    Interrupted,
    /// The call was cancelled before it ran (the worker found it claimed; `cancel` counted it).
    Skipped,
    /// A garbage collection (`pool:collect()`), not a call of the host's: not counted.
    Collected,
}

impl Ended {
    pub fn of(outcome: &Outcome) -> Ended {
        match outcome {
            Outcome::Collected => Ended::Collected,
            Outcome::Err(Error::Cancelled) => Ended::Interrupted,
            Outcome::Err(_) => Ended::Failed,
            _ => Ended::Succeeded,
        }
    }
}

/// What a worker does after a call.
pub enum Next {
    Run(Arc<Call>),
    Idle,
    Exit,
}

struct WorkerEntry {
    thread: Option<JoinHandle<()>>,
}

/// What the idle check is doing, so that wake-ups are sent only when they change something.
#[derive(Clone, Copy, Default)]
enum Housekeeper {
    /// Running (it looks at the queue and idle states before it sleeps again).
    #[default]
    Awake,
    /// Sleeping until then (`None`: until woken).
    Sleeping(Option<Instant>),
}

#[derive(Default)]
struct Inner {
    housekeeper_state: Housekeeper,
    closed: bool,
    idle_core: Vec<Arc<Mailbox>>,
    /// Idle non-core states with the time they went idle, oldest first.
    idle_noncore: VecDeque<(Arc<Mailbox>, Instant)>,
    /// Calls waiting for a state. Cancelled or timed-out calls stay until a worker or the
    /// housekeeper pops them (`waiting_live` counts only the live ones).
    waiting: VecDeque<Arc<Call>>,
    waiting_live: usize,
    workers: HashMap<u64, WorkerEntry>,
    exited_early: HashSet<u64>,
    next_worker: u64,
    /// Threads of workers that exited, to be joined by the housekeeper.
    finished: Vec<JoinHandle<()>>,
    live_core: usize,
    live_noncore: usize,
    busy: usize,
    stats: Stats,
    /// Worker threads still running (reaches 0 once `close` may join them all).
    threads: usize,
    /// Worker threads started and not yet joined (`stats().threads`).
    unjoined: usize,
    housekeeper: Option<JoinHandle<()>>,
}

pub struct Pool {
    pub config: Config,
    inner: Mutex<Inner>,
    /// Wakes the housekeeper (new deadline, exited worker, close).
    wake_housekeeper: Condvar,
    /// Signalled when the last worker thread exits.
    all_exited: Condvar,
    pub chunks: Mutex<Registry>,
    /// Moves whenever `chunks` changes, so states know to drop versions no longer registered.
    pub chunk_epoch: AtomicU64,
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
    spare_calls: Mutex<Vec<Arc<Call>>>,
}

/// Most calls kept in `spare_calls`.
const MAX_SPARE_CALLS: usize = 1024;

impl Pool {
    /// Creates the pool and its core states; fails (leaving nothing running) if a state cannot
    /// be created or `init` fails.
    pub fn new(config: Config) -> Result<Arc<Pool>, Error> {
        let core = config.core;
        let pool = Arc::new(Pool {
            config,
            inner: Mutex::new(Inner::default()),
            wake_housekeeper: Condvar::new(),
            all_exited: Condvar::new(),
            chunks: Mutex::new(Registry::default()),
            chunk_epoch: AtomicU64::new(0),
            fork_generation: crate::sys::fork_generation(),
            pid: crate::sys::pid(),
            poll: Mutex::new(None),
            host_cpu: std::sync::atomic::AtomicI32::new(-1),
            several_cpus: crate::sys::available_cpus() > 1,
            spare_calls: Mutex::new(Vec::new()),
        });
        let hk = {
            let p = pool.clone();
            std::thread::Builder::new()
                .name("vmpool-idle".into())
                .spawn(move || crate::housekeeper::run(p))
                .map_err(|e| Error::Spawn(format!("cannot start the idle-check thread: {e}")))?
        };
        pool.inner.lock().housekeeper = Some(hk);

        let latch = Arc::new(crate::worker::Latch::new(core));
        let mut spawn_error = None;
        for _ in 0..core {
            let id = {
                let mut g = pool.inner.lock();
                g.live_core += 1;
                g.busy += 1;
                g.stats.created += 1;
                g.next_worker += 1;
                g.next_worker
            };
            if let Err(e) = pool.spawn_worker(id, true, None, Some(latch.clone())) {
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
            let mut spare = self.spare_calls.lock();
            if spare.len() < MAX_SPARE_CALLS {
                c.reset();
                spare.push(call);
            }
        }
    }

    /// Frees the spare calls (`pool:collect()`).
    pub fn drop_spare_calls(&self) {
        self.spare_calls.lock().clear();
    }

    /// Moves up to 64 spare calls into `out`.
    pub fn take_spare_calls(&self, out: &mut Vec<Arc<Call>>) {
        let mut spare = self.spare_calls.lock();
        let n = spare.len().min(64);
        let from = spare.len() - n;
        out.extend(spare.drain(from..));
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

    fn spawn_worker(
        self: &Arc<Pool>,
        id: u64,
        core: bool,
        first: Option<Arc<Call>>,
        latch: Option<Arc<crate::worker::Latch>>,
    ) -> Result<(), Error> {
        {
            let mut g = self.inner.lock();
            g.threads += 1;
            g.unjoined += 1;
        }
        // outside the lock: starting a thread takes tens of microseconds
        let spawned = crate::worker::spawn(self.clone(), id, core, first.clone(), latch.clone());
        let mut g = self.inner.lock();
        match spawned {
            Ok(handle) => {
                if g.exited_early.remove(&id) {
                    g.finished.push(handle);
                    self.wake_housekeeper.notify_one();
                } else {
                    g.workers.insert(
                        id,
                        WorkerEntry {
                            thread: Some(handle),
                        },
                    );
                }
                Ok(())
            }
            Err(e) => {
                g.threads -= 1;
                g.unjoined -= 1;
                let err = Error::Spawn(format!("cannot start a worker thread: {e}"));
                if core {
                    g.live_core -= 1;
                } else {
                    g.live_noncore -= 1;
                }
                g.busy -= 1;
                g.stats.closed += 1;
                if first.is_some() {
                    g.stats.errors += 1;
                }
                if g.threads == 0 {
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
    pub fn submit_later(self: &Arc<Pool>, call: Arc<Call>) -> Result<Option<Posting>, Error> {
        let mut g = self.inner.lock();
        if g.closed {
            return Err(Error::Closed);
        }
        g.stats.invokes += 1;
        let idle = match g.idle_core.pop() {
            Some(mb) => Some(mb),
            None => g.idle_noncore.pop_back().map(|(mb, _)| mb),
        };
        if let Some(mailbox) = idle {
            g.busy += 1;
            drop(g);
            call.set_phase(ASSIGNED);
            return Ok(Some(Posting {
                mailbox,
                call: Some(call),
            }));
        }
        // fewer core states than configured only after a state could not be replaced: start one
        let core = g.live_core < self.config.core;
        if core || g.live_noncore < self.config.max_noncore {
            call.set_phase(ASSIGNED);
            self.start_state_for(g, core, call);
            return Ok(None);
        }
        if !self.config.blocking {
            g.stats.rejected += 1;
            return Err(Error::Exhausted {
                states: g.live_core + g.live_noncore,
            });
        }
        if g.waiting_live >= self.config.max_waiting {
            g.stats.rejected += 1;
            return Err(Error::QueueFull {
                max_waiting: self.config.max_waiting,
            });
        }
        let deadline = deadline_after(self.config.acquire_timeout);
        call.data.lock().acquire_deadline = deadline;
        call.set_phase(QUEUED);
        let first = g.waiting_live == 0;
        g.waiting.push_back(call);
        g.waiting_live += 1;
        if first {
            if let Some(d) = deadline {
                self.wake_housekeeper_by(&mut g, d);
            }
        }
        Ok(None)
    }

    /// Counts a new state reserved for `call` (already ASSIGNED) and starts its worker, outside
    /// the lock. A failed start finishes the call with the error: the caller sees it as the
    /// outcome.
    fn start_state_for(
        self: &Arc<Pool>,
        mut g: MutexGuard<'_, Inner>,
        core: bool,
        call: Arc<Call>,
    ) {
        if core {
            g.live_core += 1;
        } else {
            g.live_noncore += 1;
        }
        g.busy += 1;
        g.stats.created += 1;
        g.next_worker += 1;
        let id = g.next_worker;
        drop(g);
        let _ = self.spawn_worker(id, core, Some(call), None);
    }

    /// Cancels a call that has not started. True if it was cancelled (it will never run).
    pub fn cancel(&self, call: &Call) -> bool {
        let mut g = self.inner.lock();
        match call.claim_unstarted() {
            Some(from) => {
                if from == QUEUED {
                    g.waiting_live -= 1;
                }
                // an ASSIGNED call stays in its worker's mailbox; the worker skips it and releases
                g.stats.cancelled += 1;
                drop(g);
                call.finish(Outcome::Err(Error::Cancelled));
                true
            }
            None => false,
        }
    }

    /// A worker finished (or skipped) a call: count it, then hand the worker the next queued
    /// call, park it as idle, or let it exit.
    pub fn release(&self, me: &Arc<Mailbox>, core: bool, ended: Ended) -> Next {
        let mut g = self.inner.lock();
        g.stats.count(ended);
        while let Some(next) = g.waiting.pop_front() {
            if next.transition(QUEUED, RUNNING) {
                g.waiting_live -= 1;
                return Next::Run(next);
            }
        }
        g.busy -= 1;
        let close_now = g.closed || (!core && self.config.idle_timeout == Some(Duration::ZERO));
        if close_now {
            if core {
                g.live_core -= 1;
            } else {
                g.live_noncore -= 1;
            }
            g.stats.closed += 1;
            return Next::Exit;
        }
        if core {
            g.idle_core.push(me.clone());
        } else {
            let now = Instant::now();
            g.idle_noncore.push_back((me.clone(), now));
            if g.idle_noncore.len() == 1 {
                if let Some(due) = self.config.idle_timeout.and_then(|t| now.checked_add(t)) {
                    self.wake_housekeeper_by(&mut g, due);
                }
            }
        }
        Next::Idle
    }

    /// A worker replaced its state (after a limit was hit).
    pub fn state_replaced(&self) {
        let mut g = self.inner.lock();
        g.stats.closed += 1;
        g.stats.created += 1;
    }

    /// A worker could not create its state: undo its reservation (and count the failed call it
    /// was started for, if any).
    pub fn worker_failed(&self, core: bool, had_call: bool) {
        let mut g = self.inner.lock();
        if had_call {
            g.stats.errors += 1;
        }
        if core {
            g.live_core -= 1;
        } else {
            g.live_noncore -= 1;
        }
        g.busy -= 1;
        g.stats.closed += 1;
    }

    /// A worker lost its state (a replacement could not be created) and exits. A new state is
    /// started at once for the oldest waiting call, if any (it may fail the same way, and then
    /// that call gets the error); otherwise the next `submit` starts one (`core` is a floor).
    pub fn worker_lost(self: &Arc<Pool>, core: bool, ended: Ended) {
        let mut g = self.inner.lock();
        g.stats.count(ended);
        if core {
            g.live_core -= 1;
        } else {
            g.live_noncore -= 1;
        }
        g.busy -= 1;
        g.stats.closed += 1;
        if g.closed {
            return;
        }
        while let Some(next) = g.waiting.pop_front() {
            if next.transition(QUEUED, ASSIGNED) {
                g.waiting_live -= 1;
                self.start_state_for(g, core, next);
                return;
            }
        }
    }

    /// A core worker finished creating its state at `new()`: it becomes idle.
    pub fn core_ready(&self, me: &Arc<Mailbox>) -> bool {
        let mut g = self.inner.lock();
        g.busy -= 1;
        if g.closed {
            g.live_core -= 1;
            g.stats.closed += 1;
            return false;
        }
        g.idle_core.push(me.clone());
        true
    }

    /// Called by a worker thread as its last act.
    pub fn worker_exited(&self, id: u64) {
        let mut g = self.inner.lock();
        match g.workers.remove(&id) {
            Some(mut entry) => {
                if let Some(t) = entry.thread.take() {
                    g.finished.push(t);
                }
            }
            // exited before its spawner stored the handle: `spawn_worker` will move it
            None => {
                g.exited_early.insert(id);
            }
        }
        g.threads -= 1;
        if g.threads == 0 {
            self.all_exited.notify_all();
        }
        self.wake_housekeeper.notify_one();
    }

    pub fn stats(&self) -> Stats {
        let g = self.inner.lock();
        let mut s = g.stats.clone();
        s.core = g.live_core;
        s.noncore = g.live_noncore;
        s.idle = g.idle_core.len() + g.idle_noncore.len();
        s.busy = g.busy;
        s.waiting = g.waiting_live;
        s.threads = g.unjoined;
        s
    }

    /// Reserves every idle state for a garbage collection and posts it (`pool:collect()`);
    /// returns the calls to wait for. States busy with a call are left alone. Nothing is counted:
    /// the states become idle again when they are done. Also lets go of the records of cancelled
    /// or timed-out calls that still sit in the queue (a worker would drop them when it next
    /// looks at the queue).
    pub fn collect_idle(&self) -> Vec<Arc<Call>> {
        let mut g = self.inner.lock();
        g.waiting.retain(|c| c.phase_is(QUEUED));
        let mut idle: Vec<Arc<Mailbox>> = std::mem::take(&mut g.idle_core);
        idle.extend(g.idle_noncore.drain(..).map(|(mb, _)| mb));
        g.busy += idle.len();
        drop(g);
        idle.into_iter()
            .map(|mailbox| {
                let call = Arc::new(Call::collect());
                mailbox.post(call.clone());
                call
            })
            .collect()
    }

    pub fn is_closed(&self) -> bool {
        self.inner.lock().closed
    }

    /// The idle check's loop (run by the housekeeper thread until the pool is closed and every
    /// worker has exited): fails queued calls past `acquire_timeout`, closes non-core states idle
    /// past `idle_timeout`, joins exited workers' threads, then sleeps until the next deadline.
    /// Deciding to sleep and sleeping happen under the pool lock, and every wake-up is sent
    /// under it, so none is lost.
    /// Makes sure the housekeeper looks again by `due`: wakes it only if it sleeps past that
    /// (a wake-up per queued call would cost a futex wake each time the queue fills again).
    fn wake_housekeeper_by(&self, g: &mut Inner, due: Instant) {
        if let Housekeeper::Sleeping(until) = g.housekeeper_state {
            if until.is_none_or(|t| t > due) {
                g.housekeeper_state = Housekeeper::Awake;
                self.wake_housekeeper.notify_one();
            }
        }
    }

    pub fn housekeep(&self) {
        let mut g = self.inner.lock();
        loop {
            let (expired, next) = self.expire(&mut g, Instant::now());
            let finished = std::mem::take(&mut g.finished);
            if !expired.is_empty() || !finished.is_empty() {
                drop(g);
                let seconds = self
                    .config
                    .acquire_timeout
                    .map_or(f64::INFINITY, |d| d.as_secs_f64());
                for call in expired {
                    call.finish(Outcome::Err(Error::AcquireTimeout { seconds }));
                }
                let joined = finished.len();
                for t in finished {
                    let _ = t.join();
                }
                g = self.inner.lock();
                g.unjoined -= joined;
                continue;
            }
            if g.closed && g.threads == 0 {
                return;
            }
            g.housekeeper_state = Housekeeper::Sleeping(next);
            match next {
                Some(d) => {
                    self.wake_housekeeper.wait_until(&mut g, d);
                }
                None => self.wake_housekeeper.wait(&mut g),
            }
            g.housekeeper_state = Housekeeper::Awake;
        }
    }

    /// Takes the queued calls whose wait for a state is over and closes the non-core states idle
    /// for too long; returns the calls to fail and when to look again.
    fn expire(&self, g: &mut Inner, now: Instant) -> (Vec<Arc<Call>>, Option<Instant>) {
        let mut expired = Vec::new();
        // FIFO with one timeout, so the oldest live queued call has the earliest deadline
        while let Some(front) = g.waiting.front() {
            if !front.phase_is(QUEUED) {
                g.waiting.pop_front();
                continue;
            }
            let deadline = front.data.lock().acquire_deadline;
            match deadline {
                Some(d) if d <= now => {
                    if let Some(call) = g.waiting.pop_front() {
                        if call.transition(QUEUED, crate::call::CLAIMED) {
                            g.waiting_live -= 1;
                            g.stats.timeouts += 1;
                            expired.push(call);
                        }
                    }
                }
                _ => break,
            }
        }
        let mut next = g
            .waiting
            .front()
            .and_then(|c| c.data.lock().acquire_deadline);
        if let Some(idle) = self.config.idle_timeout {
            while let Some((_, since)) = g.idle_noncore.front() {
                let due = *since + idle;
                if due > now {
                    next = Some(next.map_or(due, |n| n.min(due)));
                    break;
                }
                if let Some((mb, _)) = g.idle_noncore.pop_front() {
                    g.live_noncore -= 1;
                    g.stats.closed += 1;
                    mb.request_exit();
                }
            }
        }
        (expired, next)
    }

    /// Closes the pool: queued calls fail with "pool is closed", running calls finish, then every
    /// state is closed and every thread joined. Idempotent. After a `fork` it does nothing: the
    /// pool's threads do not exist in this process, and its locks may have been copied while one
    /// of them held them (nothing here would ever unlock them).
    pub fn close(&self) {
        if self.check_process().is_err() {
            return;
        }
        let mut g = self.inner.lock();
        if g.closed {
            self.join_all(g);
            return;
        }
        g.closed = true;
        let mut queued = Vec::new();
        while let Some(call) = g.waiting.pop_front() {
            if call.transition(QUEUED, crate::call::CLAIMED) {
                g.waiting_live -= 1;
                g.stats.errors += 1;
                queued.push(call);
            }
        }
        for mb in std::mem::take(&mut g.idle_core) {
            g.live_core -= 1;
            g.stats.closed += 1;
            mb.request_exit();
        }
        while let Some((mb, _)) = g.idle_noncore.pop_front() {
            g.live_noncore -= 1;
            g.stats.closed += 1;
            mb.request_exit();
        }
        self.wake_housekeeper.notify_all();
        drop(g);
        for call in queued {
            call.finish(Outcome::Err(Error::Closed));
        }
        self.join_all(self.inner.lock());
    }

    fn join_all(&self, mut g: parking_lot::MutexGuard<'_, Inner>) {
        while g.threads > 0 {
            self.all_exited.wait(&mut g);
        }
        let mut handles: Vec<JoinHandle<()>> = std::mem::take(&mut g.finished);
        handles.extend(g.workers.drain().filter_map(|(_, mut w)| w.thread.take()));
        let hk = g.housekeeper.take();
        self.wake_housekeeper.notify_all();
        drop(g);
        let joined = handles.len();
        for h in handles {
            let _ = h.join();
        }
        self.inner.lock().unjoined -= joined;
        if let Some(h) = hk {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

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

impl Call {
    pub fn phase_is(&self, phase: u32) -> bool {
        self.phase() == phase
    }
}
