//! One call's life: the arguments going in, the outcome coming back, and the hand-offs between the
//! caller, the pool and a worker.
//!
//! A call moves through phases; each transition is a compare-and-swap, so exactly one party owns
//! the call at a time and exactly one outcome is ever written:
//!
//! ```text
//!   NEW --submit--> ASSIGNED (a state is reserved) --worker--> RUNNING --worker--> DONE
//!        \--------> QUEUED (waiting for a state) --worker--> RUNNING
//!   QUEUED / ASSIGNED --cancel, acquire timeout, close--> CLAIMED --> DONE
//! ```
//!
//! Whoever reaches DONE wakes the waiter (if one is parked on the call) and the subscribers (a
//! scheduler's notifier, if the call was subscribed to one).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::chunk::Chunk;
use crate::notify::{Subscriber, SubscriberId, Subscribers};
use crate::spin::AdaptiveSpin;
use crate::sys::INTERRUPT_CHECK;
use crate::Error;

pub const NEW: u32 = 0;
pub const QUEUED: u32 = 1;
pub const ASSIGNED: u32 = 2;
pub const RUNNING: u32 = 3;
pub const CLAIMED: u32 = 4;
pub const DONE: u32 = 5;
const PHASE: u32 = 0b111;
/// A thread is (about to be) parked on this call.
const WAITER: u32 = 1 << 3;
/// `data.subscribers` has (or had) someone: notify them on completion.
const SUBSCRIBED: u32 = 1 << 4;

/// What a call ended with.
#[derive(Debug)]
pub enum Outcome {
    Pending,
    /// The results are encoded in `CallData::buf`.
    Ok,
    Err(Error),
    /// A [`Job::Collect`] ran (it has no results, and the counters do not count it).
    Collected,
}

/// What a call asks of the state it reaches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Job {
    /// Run a chunk's function (every call the host makes).
    #[default]
    Invoke,
    /// Run a full garbage collection (`pool:collect()`).
    Collect,
    /// Run a chunk's function once per item of a batch (`pool:map`): `buf` holds the items (see
    /// `child/batch.rs`), and the results replace them.
    Map,
}

/// The parts of a call that change hands with its phase.
pub struct CallData {
    pub job: Job,
    pub chunk: Option<Arc<Chunk>>,
    /// The child function's name.
    pub func: Vec<u8>,
    /// Encoded arguments going in, encoded results coming back (until `finish` moves them into
    /// the call's result).
    pub buf: Vec<u8>,
    /// The prototypes of the functions in `buf` (see `value/func.rs`): the host's going in, the
    /// state's coming back.
    pub protos: Vec<Arc<crate::value::Proto>>,
    /// Who to tell when the call finishes.
    pub subscribers: Subscribers,
    /// A [`Job::Map`] batch: how many items ran to the end, whose results are in `buf` (or, for
    /// a batch that failed at an item, in `data.buf` under the error).
    pub items_done: u32,
    /// `pool:stream`'s channel (a `channel::Channel`, typed loosely so that `call` does not
    /// depend on `channel`, which uses calls as its watchers): the call's top-level
    /// `coroutine.yield`s push onto it, and it is closed when the call ends (`channel/stream.rs`).
    pub stream: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

pub struct Call {
    state: AtomicU32,
    /// Set by `cancel` on a running call; the child's hook raises an error when it sees it.
    pub interrupt: AtomicBool,
    /// Set by a map that gave up on a running [`Job::Map`] batch: the state stops after the item
    /// it is running (unlike `interrupt`, which stops the item itself and replaces the state).
    pub stop: AtomicBool,
    pub data: Mutex<CallData>,
    /// The outcome, written once by `finish` (encoded results or the error) and read without a
    /// lock: the host pushes results into its Lua state, which can run finalizers that wait on
    /// this very call, so no lock may be held while it does. A plain cell, not a `OnceLock`
    /// (whose `set` cost ~140 instructions per call): the phases already order it, since only
    /// the call's owner writes it, once, before publishing DONE (release), and readers look only
    /// after seeing DONE (acquire); `reset` has exclusive access.
    result: UnsafeCell<Option<Result<Vec<u8>, Error>>>,
    /// When the call was submitted ([`crate::clock::now`] ticks), for the pool's `wait` figures.
    /// Written before the call is handed over, read by the state that takes it.
    pub submitted: AtomicU64,
}

// SAFETY: every field but `result` is Sync; `result` is written once by the call's owner before
// it publishes DONE and read only after DONE is seen (see the field), so no access races.
unsafe impl Sync for Call {}

impl Default for Call {
    fn default() -> Call {
        Call {
            state: AtomicU32::new(NEW),
            interrupt: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            data: Mutex::new(CallData {
                job: Job::Invoke,
                chunk: None,
                func: Vec::new(),
                buf: Vec::new(),
                protos: Vec::new(),
                subscribers: Subscribers::None,
                items_done: 0,
                stream: None,
            }),
            result: UnsafeCell::new(None),
            submitted: AtomicU64::new(0),
        }
    }
}

/// Drops a recycled call's prototypes (rare: only calls that sent functions have any).
#[cold]
fn drop_protos(protos: &mut Vec<Arc<crate::value::Proto>>) {
    protos.clear();
}

impl Call {
    /// A garbage collection for one state, reserved to it (ASSIGNED).
    pub fn collect() -> Call {
        let call = Call::default();
        call.data.lock().job = Job::Collect;
        call.set_phase(ASSIGNED);
        call
    }

    /// Makes a finished call reusable. Needs exclusive access, so no other party can see it.
    pub fn reset(&mut self) {
        self.reset_keeping_name();
        self.data.get_mut().func.clear();
    }

    /// [`Call::reset`], but the function name stays (a caller that sets the name of every call
    /// it makes, and compares it first, then copies it only when it changes).
    pub fn reset_keeping_name(&mut self) {
        *self.state.get_mut() = NEW;
        *self.interrupt.get_mut() = false;
        *self.stop.get_mut() = false;
        *self.submitted.get_mut() = 0;
        let d = self.data.get_mut();
        d.job = Job::Invoke;
        // the results' buffer keeps its capacity for the next call (swapped in place: moving the
        // whole outcome out would copy the error's room too)
        if let Some(Ok(results)) = self.result.get_mut() {
            std::mem::swap(&mut d.buf, results);
        }
        *self.result.get_mut() = None;
        d.chunk = None;
        d.buf.clear();
        if !d.protos.is_empty() {
            drop_protos(&mut d.protos);
        }
        // most calls had no subscriber: nothing to drop
        if !matches!(d.subscribers, Subscribers::None) {
            d.subscribers = Subscribers::None;
        }
        d.items_done = 0;
        if d.stream.is_some() {
            d.stream = None;
        }
    }

    #[inline]
    pub fn phase(&self) -> u32 {
        self.state.load(Ordering::Acquire) & PHASE
    }

    #[inline]
    pub fn is_done(&self) -> bool {
        self.phase() == DONE
    }

    /// Sets the phase of a call nobody else sees yet (submission).
    pub fn set_phase(&self, phase: u32) {
        self.state.store(phase, Ordering::Release);
    }

    /// Moves `from` -> `to`, keeping the flag bits; false if the call is in another phase.
    pub fn transition(&self, from: u32, to: u32) -> bool {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if cur & PHASE != from {
                return false;
            }
            match self.state.compare_exchange_weak(
                cur,
                (cur & !PHASE) | to,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    /// Claims a call that has not started (QUEUED or ASSIGNED) so that the claimer alone writes its
    /// outcome. Returns the phase it was claimed from.
    pub fn claim_unstarted(&self) -> Option<u32> {
        [QUEUED, ASSIGNED]
            .into_iter()
            .find(|&from| self.transition(from, CLAIMED))
    }

    /// Writes the outcome and publishes DONE. Only the owner of the call (the worker that ran it, or
    /// whoever claimed it) calls this, exactly once. A success's results are the call's buffer.
    pub fn finish(&self, outcome: Outcome) {
        let result = match outcome {
            Outcome::Ok | Outcome::Collected => Ok(std::mem::take(&mut self.data.lock().buf)),
            Outcome::Err(e) => Err(e),
            Outcome::Pending => Err(Error::Internal("a call finished without an outcome".into())),
        };
        self.publish(result);
    }

    /// [`Call::finish`] for a success whose encoded results the owner holds (the worker's, moved
    /// out of the call's buffer when it started): no lock of the call's data.
    #[inline]
    pub fn finish_ok(&self, results: Vec<u8>) {
        self.publish(Ok(results));
    }

    #[inline(always)]
    fn publish(&self, result: Result<Vec<u8>, Error>) {
        // SAFETY: only the owner finishes, once, and nobody reads the cell before the DONE
        // stored below (see `result`): no other reference to it exists now.
        unsafe { *self.result.get() = Some(result) };
        let old = self.state.swap(DONE, Ordering::AcqRel);
        if old & WAITER != 0 {
            crate::sys::futex_wake(&self.state, i32::MAX);
        }
        if old & SUBSCRIBED != 0 {
            // `subscribe` stores a subscriber before it sets the flag, so it is there (unless
            // `unsubscribe` took it back); notified outside the lock
            let subscribers = std::mem::take(&mut self.data.lock().subscribers);
            subscribers.notify();
        }
    }

    /// The outcome of a finished call: its encoded results or its error (`None` before DONE).
    pub fn result(&self) -> Option<&Result<Vec<u8>, Error>> {
        if self.is_done() {
            // SAFETY: DONE was seen with acquire ordering after `finish` wrote the cell, which is
            // never written again until `reset` (exclusive access).
            unsafe { (*self.result.get()).as_ref() }
        } else {
            None
        }
    }

    /// Asks to be notified when the call is done (besides whoever asked before). Returns false
    /// (and keeps nothing) if it already is: then the caller handles it at once.
    pub fn subscribe(&self, subscriber: Subscriber) -> bool {
        if self.is_done() {
            return false;
        }
        let id = subscriber.id();
        self.data.lock().subscribers.add(subscriber);
        let old = self.state.fetch_or(SUBSCRIBED, Ordering::AcqRel);
        if old & PHASE == DONE {
            // finished meanwhile. If the finisher did not take this subscriber (it took the
            // others before it was stored, or the flag was not set yet), the caller handles the
            // completion; if it did, the notification comes, and the caller must not.
            return !self.data.lock().subscribers.remove(id);
        }
        true
    }

    /// Drops the subscription `id`. False if it is not there: the call already finished (or is
    /// finishing) and the subscriber was, or is about to be, notified.
    pub fn unsubscribe(&self, id: SubscriberId) -> bool {
        self.data.lock().subscribers.remove(id)
    }

    /// Waits until the call is done or `deadline` passes; true if done.
    pub fn wait(&self, deadline: Option<Instant>, spin: &AdaptiveSpin) -> bool {
        self.wait_unless(deadline, spin, &mut || false) == Waited::Done
    }

    /// Waits like [`Call::wait`], but also gives up when `interrupted()` turns true: the host's
    /// waits pass a check that a signal handler changed the host state's hooks (Ctrl-C in the
    /// standalone interpreters). The check runs once before the first sleep, where it may note
    /// what it compares against later (a call that finishes while spinning never pays for it),
    /// then after every wake-up and at least every
    /// [`crate::sys::INTERRUPT_CHECK`]; on Linux a signal with a handler ends a timed futex wait at once
    /// (`EINTR`), so Ctrl-C is seen immediately there.
    pub fn wait_unless(
        &self,
        deadline: Option<Instant>,
        spin: &AdaptiveSpin,
        mut interrupted: impl FnMut() -> bool,
    ) -> Waited {
        if self.is_done() {
            return Waited::Done;
        }
        let start = spin.start();
        if spin.spin(start, || self.is_done()) {
            return Waited::Done;
        }
        let waited = self.park(deadline, &mut interrupted);
        if waited == Waited::Done {
            spin.observe(start);
        }
        waited
    }

    #[inline]
    fn park(&self, deadline: Option<Instant>, mut interrupted: impl FnMut() -> bool) -> Waited {
        // arms the check (see `wait_unless`)
        if interrupted() {
            return Waited::Interrupted;
        }
        loop {
            let old = self.state.fetch_or(WAITER, Ordering::AcqRel);
            if old & PHASE == DONE {
                return Waited::Done;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return Waited::TimedOut,
                },
                None => INTERRUPT_CHECK,
            };
            // sleeps only while the word is unchanged: `finish` swaps in DONE before waking. Always
            // with a timeout: an untimed futex wait is restarted after a signal handler that was
            // installed with SA_RESTART (`signal()` in lua.c 5.1-5.3 and LuaJIT), a timed one is not.
            crate::sys::futex_wait(&self.state, old | WAITER, Some(left.min(INTERRUPT_CHECK)));
            if self.is_done() {
                return Waited::Done;
            }
            if interrupted() {
                return Waited::Interrupted;
            }
        }
    }
}

/// How [`Call::wait_unless`] ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Waited {
    Done,
    TimedOut,
    Interrupted,
}

/// Whether two chunk or function names are equal: every call compares one on the host and one
/// in the state, and names are short, so up to 16 bytes are compared as two overlapping words
/// each (the length first) instead of calling `memcmp`.
#[inline(always)]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    match n {
        0 => true,
        1..=3 => a == b,
        4..=8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        9..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        _ => a == b,
    }
}

/// `now + d`, or `None` (forever) when `d` is `None` or too far to represent.
pub fn deadline_after(d: Option<Duration>) -> Option<Instant> {
    d.and_then(|d| Instant::now().checked_add(d))
}

#[cfg(test)]
mod tests {
    use super::same_name;

    #[test]
    fn same_name_agrees_with_byte_equality_for_every_length_and_differing_byte() {
        for n in 0..=40usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_name(&a, &a.clone()), "length {n}");
            // a name one byte longer or shorter
            let mut longer = a.clone();
            longer.push(b'x');
            assert!(
                !same_name(&a, &longer) && !same_name(&longer, &a),
                "length {n}"
            );
            // one byte changed, at every position
            for at in 0..n {
                let mut b = a.clone();
                b[at] ^= 0x20;
                assert!(!same_name(&a, &b), "length {n}, byte {at}");
            }
        }
    }
}
