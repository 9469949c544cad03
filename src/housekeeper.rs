//! The idle check: one thread per pool that sleeps until the next deadline (a queued call's
//! `acquire_timeout`, a non-core state's `idle_timeout`) or a wake-up, then enforces it. It also
//! joins the threads of workers that exited, so no thread outlives its state for long. The loop
//! itself is `Pool::housekeep`, next to the bookkeeping it reads.

use std::sync::Arc;

use crate::pool::Pool;

pub fn run(pool: Arc<Pool>) {
    pool.housekeep();
}
