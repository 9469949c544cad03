//! A worker's inbox: one call at a time (the pool reserves a state before posting to it), plus an
//! exit request. Lock-free on the hot path: posting is one atomic swap, and a futex wake only when
//! the worker is parked.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

use crate::call::Call;
use crate::spin::AdaptiveSpin;

pub enum Letter {
    Call(Arc<Call>),
    Exit,
}

#[derive(Default)]
pub struct Mailbox {
    /// An `Arc<Call>` turned into a raw pointer, or null.
    slot: AtomicPtr<Call>,
    exit: AtomicBool,
    /// The worker is parked or about to park.
    sleeping: AtomicBool,
}

impl Mailbox {
    fn key(&self) -> usize {
        self as *const Mailbox as usize
    }

    pub fn post(&self, call: Arc<Call>) {
        let prev = self
            .slot
            .swap(Arc::into_raw(call) as *mut Call, Ordering::SeqCst);
        debug_assert!(prev.is_null(), "a reserved worker got a second call");
        if !prev.is_null() {
            // SAFETY: a non-null slot always holds a pointer from `Arc::into_raw` (see `post`).
            drop(unsafe { Arc::from_raw(prev) });
        }
        self.wake();
    }

    pub fn request_exit(&self) {
        self.exit.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            // SAFETY: the key is this mailbox's address, used only as a parking-lot key.
            unsafe {
                parking_lot_core::unpark_one(self.key(), |_| {
                    parking_lot_core::DEFAULT_UNPARK_TOKEN
                });
            }
        }
    }

    fn take(&self) -> Option<Arc<Call>> {
        let p = self.slot.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null slot holds a pointer from `Arc::into_raw`, and the swap gave us the
        // only copy of it.
        (!p.is_null()).then(|| unsafe { Arc::from_raw(p) })
    }

    fn has_letter(&self) -> bool {
        !self.slot.load(Ordering::SeqCst).is_null() || self.exit.load(Ordering::SeqCst)
    }

    /// Blocks until a call or an exit request arrives (a call is delivered before an exit).
    pub fn wait(&self, spin: &AdaptiveSpin) -> Letter {
        let start = std::time::Instant::now();
        loop {
            if let Some(call) = self.take() {
                spin.observe(start.elapsed());
                return Letter::Call(call);
            }
            if self.exit.load(Ordering::SeqCst) {
                return Letter::Exit;
            }
            if spin.spin(start, || self.has_letter()) {
                continue;
            }
            self.sleeping.store(true, Ordering::SeqCst);
            // SAFETY: parking on this mailbox's address; `validate` runs under the bucket lock and
            // `post`/`request_exit` publish before checking `sleeping`, so no wake-up is lost.
            unsafe {
                parking_lot_core::park(
                    self.key(),
                    || !self.has_letter(),
                    || {},
                    |_, _| {},
                    parking_lot_core::DEFAULT_PARK_TOKEN,
                    None,
                );
            }
            self.sleeping.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        drop(self.take());
    }
}
