//! A worker: one OS thread that owns one child state for its whole life (a Lua state is not
//! `Send`, so a state is created, used and closed on the same thread). It runs the calls posted
//! to its mailbox, and the queued calls the pool hands it, until it is told to exit. It tells the
//! pool what happened through four calls: `release` (a call ended, or the state is ready),
//! `retire` (the state ends early), `replaced` and `worker_exited`; the ledger does the counting.
//!
//! [`Threads`] is the registry of the pool's worker threads, from start to join.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{Ended, Next, Pool, Retire};
use crate::call::{Call, Outcome, ASSIGNED, RUNNING};
use crate::mailbox::{Letter, Mailbox};
use crate::spin::AdaptiveSpin;
use crate::Error;

/// The pool's worker threads: running ones, and exited ones until they are joined.
#[derive(Default)]
pub struct Threads {
    /// Threads started, by id, until they exit.
    running: HashMap<u64, JoinHandle<()>>,
    /// Ids of threads that exited before their spawner stored their handle.
    exited_early: HashSet<u64>,
    /// Handles of threads that exited, for the idle check to join.
    finished: Vec<JoinHandle<()>>,
    next_id: u64,
    /// Threads started (or starting) and not yet exited: `close` may join them all at 0.
    alive: usize,
    /// Threads started and not yet joined (`stats().threads`).
    unjoined: usize,
}

impl Threads {
    /// A thread is about to start: its id.
    pub fn starting(&mut self) -> u64 {
        self.alive += 1;
        self.unjoined += 1;
        self.next_id += 1;
        self.next_id
    }

    /// The thread started: keeps its handle. True if it exited already (its handle then waits
    /// to be joined).
    pub fn started(&mut self, id: u64, handle: JoinHandle<()>) -> bool {
        if self.exited_early.remove(&id) {
            self.finished.push(handle);
            true
        } else {
            self.running.insert(id, handle);
            false
        }
    }

    /// The thread could not start. True if no thread is alive any more.
    pub fn not_started(&mut self) -> bool {
        self.alive -= 1;
        self.unjoined -= 1;
        self.alive == 0
    }

    /// The thread's last act. True if no thread is alive any more.
    pub fn exited(&mut self, id: u64) -> bool {
        match self.running.remove(&id) {
            Some(handle) => self.finished.push(handle),
            // exited before its spawner stored the handle: `started` will move it
            None => {
                self.exited_early.insert(id);
            }
        }
        self.alive -= 1;
        self.alive == 0
    }

    pub fn running(&self) -> usize {
        self.alive
    }

    pub fn unjoined(&self) -> usize {
        self.unjoined
    }

    /// The handles of exited threads, to join outside the lock (then call `joined`).
    pub fn take_finished(&mut self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut self.finished)
    }

    /// Every handle, once no thread is alive (`close`).
    pub fn take_all(&mut self) -> Vec<JoinHandle<()>> {
        let mut all = self.take_finished();
        all.extend(self.running.drain().map(|(_, h)| h));
        all
    }

    pub fn joined(&mut self, n: usize) {
        self.unjoined -= n;
    }
}

/// How long an idle worker spins for its next call before parking, at most: above the ~30 µs a
/// cross-CPU wake-up takes on VMs whose idle virtual CPUs halt, since below it a worker that
/// parked once sees every later wait include the host's wake-up, never fits one in its budget
/// again and parks on every call. The budget adapts below this bound (`src/spin.rs`), so a worker
/// whose calls come further apart still parks at once.
const JOB_SPIN: Duration = Duration::from_micros(100);

/// Counts down as core states come up at `vmpool.new`; the first failure wins.
pub struct Latch {
    state: Mutex<(usize, Option<Error>)>,
    cond: Condvar,
}

impl Latch {
    pub fn new(n: usize) -> Latch {
        Latch {
            state: Mutex::new((n, None)),
            cond: Condvar::new(),
        }
    }

    pub fn done(&self) {
        let mut s = self.state.lock();
        s.0 = s.0.saturating_sub(1);
        self.cond.notify_all();
    }

    pub fn fail(&self, e: Error) {
        let mut s = self.state.lock();
        s.0 = s.0.saturating_sub(1);
        s.1.get_or_insert(e);
        self.cond.notify_all();
    }

    /// Waits for every count (or the first failure).
    pub fn wait(&self) -> Result<(), Error> {
        let mut s = self.state.lock();
        while s.0 > 0 && s.1.is_none() {
            self.cond.wait(&mut s);
        }
        match s.1.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub fn spawn(
    pool: Arc<Pool>,
    id: u64,
    core: bool,
    first: Option<Arc<Call>>,
    latch: Option<Arc<Latch>>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(if core {
            "vmpool-core".into()
        } else {
            "vmpool-noncore".into()
        })
        .spawn(move || {
            run(&pool, core, first, latch);
            pool.worker_exited(id);
        })
}

/// How often a worker may move itself off its caller's CPU.
const MOVE_INTERVAL: Duration = Duration::from_millis(5);

/// A caller blocked on its result and the worker it waits for end up on one CPU once both park
/// in turn (the scheduler wakes each on the other's CPU and sees no imbalance), and every call
/// then costs two context switches while another CPU idles. The worker notices that it runs on
/// the CPU its caller last waited on and moves away (rate-limited).
/// Returns whether it moved (its spinning may then succeed again).
fn leave_callers_cpu(pool: &Pool, last_move: &mut Option<Instant>) -> bool {
    let host = pool.host_cpu.load(Ordering::Relaxed);
    if host < 0 || crate::sys::current_cpu() != host {
        return false;
    }
    let now = Instant::now();
    if last_move.is_some_and(|t| now.duration_since(t) < MOVE_INTERVAL) {
        return false;
    }
    *last_move = Some(now);
    crate::sys::move_off_cpu(host)
}

fn run(pool: &Arc<Pool>, core: bool, first: Option<Arc<Call>>, latch: Option<Arc<Latch>>) {
    // best effort, both: a system that refuses them runs the state at the host's priority
    crate::sys::set_thread_sched(pool.config.sched);
    if let Some(nice) = pool.config.thread_nice {
        crate::sys::set_thread_nice(nice);
    }
    let child = match pool.new_child() {
        Ok(c) => c,
        Err(e) => {
            pool.retire(
                core,
                Retire::NotStarted {
                    had_call: first.is_some(),
                },
            );
            if let Some(latch) = latch {
                latch.fail(e.clone());
            }
            if let Some(call) = first {
                if call.transition(ASSIGNED, RUNNING) {
                    call.finish(Outcome::Err(e));
                }
            }
            return;
        }
    };
    let mailbox = Arc::new(Mailbox::default());
    let mut next = first;
    if let Some(latch) = latch {
        // a core state created at `new()`: it becomes idle (or exits if the pool closed)
        let after = pool.release(&mailbox, core, Ended::Uncounted);
        latch.done();
        match after {
            Next::Run(c) => next = Some(c),
            Next::Idle => {}
            Next::Exit => return,
        }
    }
    // the clock never changes after the first pool's `new`: one loop per clock, no test per read
    if crate::clock::is_tsc() {
        serve::<true>(pool, core, child, &mailbox, next);
    } else {
        serve::<false>(pool, core, child, &mailbox, next);
    }
}

/// The worker's call loop, until it is told to exit or its state is lost; `TSC`: whether the
/// clock is the time-stamp counter ([`crate::clock::now_with`]).
fn serve<const TSC: bool>(
    pool: &Arc<Pool>,
    core: bool,
    mut child: crate::child::Child,
    mailbox: &Arc<Mailbox>,
    mut next: Option<Arc<Call>>,
) {
    let spin = AdaptiveSpin::new(JOB_SPIN, true);
    let spread = crate::sys::available_cpus() > 1;
    let mut last_move: Option<Instant> = None;
    loop {
        let call = match next.take() {
            Some(call) => call,
            None => match mailbox.wait(&spin) {
                Letter::Call(call) => call,
                Letter::Exit => break,
            },
        };
        if spread && leave_callers_cpu(pool, &mut last_move) {
            spin.reset();
        }
        // queued calls arrive already RUNNING; posted ones are claimed here (or were cancelled)
        let runnable = call.phase() == RUNNING || call.transition(ASSIGNED, RUNNING);
        // calls are timed from their submission (0 for a collection, which is not a call)
        let submitted = call.submitted.load(Ordering::Relaxed);
        let start = if runnable && submitted != 0 {
            let start = crate::clock::now_with(TSC);
            pool.wait.record(start.saturating_sub(submitted));
            Some(start)
        } else {
            None
        };
        // `None`: cancelled before it ran
        let ran = runnable.then(|| child.run(&pool.chunks, &call));
        if let Some(start) = start {
            pool.run
                .record(crate::clock::now_with(TSC).saturating_sub(start));
        }
        let (ended, replace) = match &ran {
            Some(Ok(_)) => (Ended::of(&Outcome::Ok), false),
            Some(Err(failed)) => (Ended::of(&failed.0), failed.1),
            None => (Ended::Uncounted, false),
        };
        #[cfg(feature = "count-alloc")]
        if runnable && crate::leak::after_call(&call) == crate::leak::Leak::State {
            if let Ok(fresh) = crate::child::Child::new(
                &pool.config,
                [&pool.stop, &pool.closed],
                pool.watchdog.as_ref(),
            ) {
                std::mem::forget(std::mem::replace(&mut child, fresh));
            }
        }
        // a limit was hit and the state may be half-way through anything: a fresh one takes its
        // place before the caller hears back (so the pool has its full size again when it does),
        // and the old one closes after that, so its finalizers do not delay the caller's error
        let mut replaced = None;
        if replace {
            match swap_in_fresh(pool, &mut child) {
                Ok(old) => {
                    replaced = Some(old);
                    pool.replaced();
                }
                Err(e) => {
                    // cannot rebuild (or the pool is being stopped): the pool stays one state
                    // smaller, and the caller hears why
                    pool.retire(core, Retire::Lost(ended));
                    let outcome = match outcome_of(ran) {
                        Outcome::Err(limit) if !matches!(e, Error::Closed) => {
                            Outcome::Err(limit.not_replaced(&e))
                        }
                        other => other,
                    };
                    call.finish(outcome);
                    return;
                }
            }
        }
        // release before waking the caller, so that a caller that immediately calls again finds
        // this state idle (and `stats()` read after a result already shows it free)
        let after = pool.release(mailbox, core, ended);
        match ran {
            Some(Ok(results)) => call.finish_ok(results),
            Some(Err(failed)) => call.finish(failed.0),
            None => {} // cancelled before it ran: its canceller finished it
        }
        drop(call);
        drop(replaced);
        next = match after {
            Next::Run(c) => Some(c),
            Next::Idle => None,
            Next::Exit => break,
        };
    }
    drop(child);
}

/// The outcome of a call that ran (`ran`), or `Pending` for one that did not (its results, if
/// any, are dropped: only a failure reaches this).
#[inline(always)]
fn outcome_of(ran: Option<crate::child::Finished>) -> Outcome {
    match ran {
        Some(Ok(_)) => Outcome::Ok,
        Some(Err(failed)) => failed.0,
        None => Outcome::Pending,
    }
}

/// Puts a fresh state in `child`'s place and returns the old one (boxed: the call loop's
/// `Option` of it stays one word, with no copy of a whole state on the fast path).
#[cold]
#[inline(never)]
fn swap_in_fresh(
    pool: &Pool,
    child: &mut crate::child::Child,
) -> Result<Box<crate::child::Child>, Error> {
    let fresh = pool.new_child()?;
    Ok(Box::new(std::mem::replace(child, fresh)))
}
