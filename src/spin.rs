//! Waiting for another thread: spin briefly, then park.
//!
//! A futex wake-up of a thread on another CPU costs ~5-10 µs on some machines and ~30 µs on others
//! (VMs whose idle virtual CPUs halt: `bench/suites/pingpong.rs`); a reply usually arrives within 1-2 µs.
//! So a waiter first spins, bounded in *time* (a fixed iteration count gave 100+ µs outliers on
//! busy cores), and each waiting site adapts:
//! - the budget follows the *observed* waits: a wait that ended within `max` (even after
//!   parking) sets the budget to cover it next time, a longer one halves it. Following spin
//!   success alone never recovers once both sides park: each then sees the other's futex latency.
//!   For the same reason a site's `max` must exceed that latency, or the waits it observes after
//!   one park never fit and it stops spinning for good (see `JOB_SPIN` in `pool/worker.rs`).
//! - spins that keep failing although waits are short mean spinning itself stops the other side
//!   from running (one free CPU, or valgrind, which runs one thread at a time): after a few
//!   failures in a row the site stops spinning for exponentially more waits, probing now and then.
//!
//! Idle workers' spinning is also rationed: at most `CPUs - 1` of them spin at once in the process
//! (one CPU is left for the thread that will post work), and a process limited to one CPU never
//! spins.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Per-site spin state. Not `Sync`: each thread keeps its own.
pub struct AdaptiveSpin {
    budget_ns: Cell<u32>,
    max_ns: u32,
    /// Spins in a row that ran out of budget.
    failures: Cell<u32>,
    /// Waits left before the next spin attempt (after repeated failures).
    skip: Cell<u32>,
    /// Counts untimed waits, so that every 16th is timed (timing costs two clock reads).
    untimed: Cell<u32>,
    /// Counts against the process-wide ration of spinners (idle workers do; a caller waiting for
    /// its result does not, since it has nothing else to do with its CPU).
    rationed: bool,
}

/// Below this budget a site does not spin.
const MIN_NS: u32 = 300;
/// Failed spins in a row before the site backs off.
const FAILURES_BEFORE_BACKOFF: u32 = 4;
/// Most waits a backed-off site skips spinning for before it tries again.
const MAX_SKIP: u32 = 1024;

/// Threads spinning right now, process-wide.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

fn max_spinners() -> usize {
    static MAX: AtomicUsize = AtomicUsize::new(usize::MAX);
    let m = MAX.load(Ordering::Relaxed);
    if m != usize::MAX {
        return m;
    }
    let m = crate::sys::available_cpus().saturating_sub(1);
    MAX.store(m, Ordering::Relaxed);
    m
}

/// A wait in progress: when it started (if timed) and whether it may spin.
#[derive(Clone, Copy)]
pub struct Wait {
    start: Option<Instant>,
    spin: bool,
}

impl AdaptiveSpin {
    pub fn new(max: Duration, rationed: bool) -> AdaptiveSpin {
        let max_ns = max.as_nanos().min(u32::MAX as u128) as u32;
        let max_ns = if crate::sys::available_cpus() > 1 {
            max_ns
        } else {
            0
        };
        AdaptiveSpin {
            budget_ns: Cell::new(max_ns / 4),
            max_ns,
            failures: Cell::new(0),
            skip: Cell::new(0),
            untimed: Cell::new(0),
            rationed,
        }
    }

    /// Begins a wait: decides whether it spins and whether it is timed.
    #[inline]
    pub fn start(&self) -> Wait {
        if self.max_ns == 0 {
            return Wait {
                start: None,
                spin: false,
            };
        }
        let skip = self.skip.get();
        let spin = skip == 0 && self.budget_ns.get() >= MIN_NS;
        if !spin {
            self.skip.set(skip.saturating_sub(1));
            let n = self.untimed.get().wrapping_add(1);
            self.untimed.set(n);
            if !n.is_multiple_of(16) {
                return Wait {
                    start: None,
                    spin: false,
                };
            }
        }
        Wait {
            start: Some(Instant::now()),
            spin,
        }
    }

    /// Spins until `ready()` is true or the budget runs out; returns the last `ready()`. The
    /// caller parks on `false` and reports the whole wait with [`AdaptiveSpin::observe`].
    #[inline]
    pub fn spin(&self, wait: Wait, ready: impl Fn() -> bool) -> bool {
        if ready() {
            return true;
        }
        let start = match wait.start {
            Some(s) if wait.spin => s,
            _ => return false,
        };
        if self.rationed && SPINNING.fetch_add(1, Ordering::Relaxed) >= max_spinners() {
            SPINNING.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        let budget = self.budget_ns.get();
        let mut done = false;
        'spin: loop {
            for _ in 0..16 {
                std::hint::spin_loop();
                if ready() {
                    done = true;
                    break 'spin;
                }
            }
            if start.elapsed().as_nanos() > budget as u128 {
                break;
            }
        }
        if self.rationed {
            SPINNING.fetch_sub(1, Ordering::Relaxed);
        }
        if done {
            self.failures.set(0);
            self.observe(wait);
        } else {
            let f = self.failures.get() + 1;
            self.failures.set(f);
            if f >= FAILURES_BEFORE_BACKOFF {
                let shift = (f - FAILURES_BEFORE_BACKOFF).min(10);
                self.skip.set((1u32 << shift).min(MAX_SKIP));
            }
        }
        done
    }

    /// Forgets past failures (after the thread moved to another CPU, spinning may work again).
    pub fn reset(&self) {
        self.failures.set(0);
        self.skip.set(0);
        self.budget_ns
            .set(self.budget_ns.get().max(self.max_ns / 4));
    }

    /// Reports how long a whole wait took (spinning plus parking), if it was timed.
    #[inline]
    pub fn observe(&self, wait: Wait) {
        let Some(start) = wait.start else { return };
        let w = start.elapsed().as_nanos().min(u32::MAX as u128) as u32;
        let b = if w <= self.max_ns {
            w.saturating_mul(2).clamp(MIN_NS, self.max_ns)
        } else {
            self.budget_ns.get() / 2
        };
        self.budget_ns.set(b);
    }
}
