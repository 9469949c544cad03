//! Waiting for another thread: spin briefly, then park.
//!
//! A futex wake-up costs ~5-10 µs here; a reply usually arrives within 1-2 µs. So a waiter first
//! spins, bounded in *time* (a fixed iteration count gave 100+ µs outliers on busy cores), and each
//! waiting site adapts its bound to the waits it observes: a wait that ended within `max` (even
//! after parking) sets the budget to cover it next time, a longer one halves the budget, down to
//! not spinning at all (calls that take milliseconds, or valgrind). Adapting to the *observed* wait
//! rather than to spin success matters: when both sides park, each sees the other's futex latency
//! and a success-only rule never recovers.
//!
//! Idle workers' spinning is also rationed: at most `CPUs - 1` of them spin at once in the process
//! (one CPU is left for the thread that will post work), and a process limited to one CPU never
//! spins.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Per-site spin budget. Not `Sync`: each thread keeps its own.
pub struct AdaptiveSpin {
    budget_ns: Cell<u32>,
    max_ns: u32,
    /// Counts against the process-wide ration of spinners (idle workers do; a caller waiting
    /// for its result does not, since it has nothing else to do with its CPU).
    rationed: bool,
}

/// Below this budget a site does not spin.
const MIN_NS: u32 = 300;

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
            rationed,
        }
    }

    /// Spins until `ready()` is true or the budget runs out; returns the last `ready()`. The
    /// caller parks on `false` and reports the whole wait with [`AdaptiveSpin::observe`].
    #[inline]
    pub fn spin(&self, start: Instant, ready: impl Fn() -> bool) -> bool {
        if ready() {
            return true;
        }
        let budget = self.budget_ns.get();
        if budget < MIN_NS {
            return false;
        }
        if self.rationed && SPINNING.fetch_add(1, Ordering::Relaxed) >= max_spinners() {
            SPINNING.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
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
            self.observe(start.elapsed());
        }
        done
    }

    /// Reports how long a whole wait took (spinning plus parking).
    #[inline]
    pub fn observe(&self, waited: Duration) {
        let w = waited.as_nanos().min(u32::MAX as u128) as u32;
        let b = if w <= self.max_ns {
            w.saturating_mul(2).clamp(MIN_NS, self.max_ns)
        } else {
            self.budget_ns.get() / 2
        };
        self.budget_ns.set(b);
    }
}
