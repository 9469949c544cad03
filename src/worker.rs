//! A worker: one OS thread that owns one child state for its whole life (mlua states are not
//! `Send` in module mode, so a state is created, used and closed on the same thread). It runs the
//! calls posted to its mailbox, and the queued calls the pool hands it, until it is told to exit.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::call::{Call, Outcome, ASSIGNED, RUNNING};
use crate::child::Child;
use crate::mailbox::{Letter, Mailbox};
use crate::pool::{Ended, Next, Pool};
use crate::spin::AdaptiveSpin;
use crate::Error;

/// How long an idle worker spins for its next call before parking, at most.
const JOB_SPIN: Duration = Duration::from_micros(20);

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
    let mut child = match Child::new(&pool.config) {
        Ok(c) => c,
        Err(e) => {
            pool.worker_failed(core, first.is_some());
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
    if let Some(latch) = latch {
        let ready = pool.core_ready(&mailbox);
        latch.done();
        if !ready {
            return;
        }
    }
    let spin = AdaptiveSpin::new(JOB_SPIN, true);
    let spread = crate::sys::available_cpus() > 1;
    let mut last_move: Option<Instant> = None;
    let mut next = first;
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
        let (outcome, replace) = if runnable {
            child.run(pool, &call)
        } else {
            (Outcome::Pending, false)
        };
        let ended = if runnable {
            Ended::of(&outcome)
        } else {
            Ended::Skipped
        };
        #[cfg(feature = "count-alloc")]
        if runnable && crate::leak::after_call(&call) == crate::leak::Leak::State {
            if let Ok(fresh) = Child::new(&pool.config) {
                std::mem::forget(std::mem::replace(&mut child, fresh));
            }
        }
        if replace {
            // a limit was hit and the state may be half-way through anything: rebuild it before
            // the caller hears back, so the pool has its full size again when it does
            drop(child);
            match Child::new(&pool.config) {
                Ok(c) => {
                    child = c;
                    pool.state_replaced();
                }
                Err(e) => {
                    // cannot rebuild: the pool stays one state smaller, and the caller hears why
                    pool.worker_lost(core, ended);
                    let outcome = match outcome {
                        Outcome::Err(limit) => Outcome::Err(limit.not_replaced(&e)),
                        other => other,
                    };
                    call.finish(outcome);
                    return;
                }
            }
        }
        // release before waking the caller, so that a caller that immediately calls again finds
        // this state idle (and `stats()` read after a result already shows it free)
        let after = pool.release(&mailbox, core, ended);
        if runnable {
            call.finish(outcome);
        }
        drop(call);
        next = match after {
            Next::Run(c) => Some(c),
            Next::Idle => None,
            Next::Exit => break,
        };
    }
    drop(child);
}
