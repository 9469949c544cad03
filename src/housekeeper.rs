//! The idle check: one thread per pool that sleeps until the next deadline (a queued call's
//! `acquire_timeout`, a non-core state's `idle_timeout`) or a wake-up, then enforces it. It also
//! joins the threads of workers that exited, so no thread outlives its state for long.

use std::sync::Arc;
use std::time::Instant;

use crate::pool::Pool;

pub fn run(pool: Arc<Pool>) {
    loop {
        let (finished, next, stop) = pool.housekeeping(Instant::now());
        for t in finished {
            let _ = t.join();
        }
        if stop {
            return;
        }
        pool.housekeeper_sleep(next);
    }
}
