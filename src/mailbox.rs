//! A worker's inbox: one call at a time (the pool reserves a state before posting to it), plus an
//! exit request. Lock-free: posting is one pointer store and one atomic `or`; a futex wake-up
//! happens only when the worker sleeps.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

use crate::call::Call;
use crate::spin::AdaptiveSpin;

pub enum Letter {
    Call(Arc<Call>),
    Exit,
}

/// A call is in `slot`.
const LETTER: u32 = 1;
/// The worker was asked to exit.
const EXIT: u32 = 2;
/// The worker sleeps (or is about to) on `state`.
const SLEEPING: u32 = 4;

#[derive(Default)]
pub struct Mailbox {
    /// An `Arc<Call>` turned into a raw pointer, or null.
    slot: AtomicPtr<Call>,
    /// `LETTER | EXIT | SLEEPING` bits; the futex word.
    state: AtomicU32,
}

impl Mailbox {
    pub fn post(&self, call: Arc<Call>) {
        let prev = self
            .slot
            .swap(Arc::into_raw(call) as *mut Call, Ordering::AcqRel);
        debug_assert!(prev.is_null(), "a reserved worker got a second call");
        if !prev.is_null() {
            // SAFETY: a non-null slot always holds a pointer from `Arc::into_raw` (see above).
            drop(unsafe { Arc::from_raw(prev) });
        }
        self.ring(LETTER);
    }

    pub fn request_exit(&self) {
        self.ring(EXIT);
    }

    fn ring(&self, bit: u32) {
        if self.state.fetch_or(bit, Ordering::AcqRel) & SLEEPING != 0 {
            crate::sys::futex_wake(&self.state, 1);
        }
    }

    fn take(&self) -> Option<Arc<Call>> {
        self.state.fetch_and(!LETTER, Ordering::AcqRel);
        let p = self.slot.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: a non-null slot holds a pointer from `Arc::into_raw`, and the swap gave us the
        // only copy of it.
        (!p.is_null()).then(|| unsafe { Arc::from_raw(p) })
    }

    /// Blocks until a call or an exit request arrives (a call is delivered before an exit).
    pub fn wait(&self, spin: &AdaptiveSpin) -> Letter {
        let wait = spin.start();
        loop {
            let s = self.state.load(Ordering::Acquire);
            if s & LETTER != 0 {
                if let Some(call) = self.take() {
                    spin.observe(wait);
                    return Letter::Call(call);
                }
                continue;
            }
            if s & EXIT != 0 {
                return Letter::Exit;
            }
            if spin.spin(wait, || {
                self.state.load(Ordering::Acquire) & (LETTER | EXIT) != 0
            }) {
                continue;
            }
            let old = self.state.fetch_or(SLEEPING, Ordering::AcqRel);
            if old & (LETTER | EXIT) == 0 {
                // sleeps only while nothing was posted: `ring` changes the word before waking
                crate::sys::futex_wait(&self.state, old | SLEEPING, None);
            }
            self.state.fetch_and(!SLEEPING, Ordering::AcqRel);
        }
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        drop(self.take());
    }
}
