//! `--features count-alloc` only: leaks on purpose, so that a test can prove the soak's exact
//! accounting catches a leak (`pool:_leak(kind, every)`, see `spec/soak/soak.lua`). Release builds do
//! not contain it.
//!
//! Every `every`-th call a worker runs, it leaks what `kind` says: a call record (an extra
//! reference to it is forgotten, so the record and its buffers are never freed), or a state (the
//! worker forgets its state without closing it and starts a fresh one).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::call::Call;

/// What to leak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leak {
    Nothing = 0,
    CallRecord = 1,
    State = 2,
}

static KIND: AtomicU64 = AtomicU64::new(0);
static EVERY: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Leak `kind` once every `every` calls, from now on (`every = 0` stops leaking).
pub fn set(kind: Leak, every: u64) {
    CALLS.store(0, Relaxed);
    EVERY.store(every, Relaxed);
    KIND.store(kind as u64, Relaxed);
}

/// Called by a worker after each call it ran: leaks the call record if it is the turn of one,
/// and says whether the worker must leak its state.
pub fn after_call(call: &Arc<Call>) -> Leak {
    let every = EVERY.load(Relaxed);
    if every == 0 || !(CALLS.fetch_add(1, Relaxed) + 1).is_multiple_of(every) {
        return Leak::Nothing;
    }
    match KIND.load(Relaxed) {
        1 => {
            std::mem::forget(call.clone());
            Leak::CallRecord
        }
        2 => Leak::State,
        _ => Leak::Nothing,
    }
}
