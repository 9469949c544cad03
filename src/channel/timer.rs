//! The deadlines of watchers (`watch.rs`): one process-wide thread that finishes each watcher's
//! record when its deadline passes, so that a coroutine waiting with a timeout is woken through
//! its scheduler's completion queue like any other wake-up (no scheduler needs timers of its own).
//! Records are held weakly: a wait that ended earlier costs the thread nothing but the entry.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::call::{Call, Outcome, CLAIMED, NEW};
use crate::Error;

struct Entry(Instant, Weak<Call>);

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    /// `sys::fork_generation()` of the thread serving the heap (a forked child starts its own).
    generation: Option<u64>,
}

static TIMERS: Mutex<Timers> = Mutex::new(Timers {
    heap: BinaryHeap::new(),
    generation: None,
});
static WAKE: Condvar = Condvar::new();

/// Finishes `call` at `deadline` (with an error outcome, which tells it from a channel's wake-up)
/// unless something finished it first.
pub fn at(deadline: Instant, call: &Arc<Call>) {
    let mut t = TIMERS.lock();
    let generation = crate::sys::fork_generation();
    if t.generation != Some(generation) {
        t.generation = Some(generation);
        t.heap.clear();
        let spawned = std::thread::Builder::new()
            .name("vmpool-chan-timer".into())
            .spawn(run);
        if spawned.is_err() {
            // no thread: the deadline is still checked at every wake-up, and the wait is
            // finished now rather than left without a timer
            t.generation = None;
            drop(t);
            expire(call);
            return;
        }
    }
    let earliest = t.heap.peek().is_none_or(|Reverse(e)| deadline < e.0);
    t.heap.push(Reverse(Entry(deadline, Arc::downgrade(call))));
    if earliest {
        WAKE.notify_one();
    }
}

fn expire(call: &Call) {
    if call.transition(NEW, CLAIMED) {
        call.finish(Outcome::Err(Error::WaitTimeout { seconds: 0.0 }));
    }
}

fn run() {
    let mut t = TIMERS.lock();
    loop {
        let now = Instant::now();
        while let Some(Reverse(e)) = t.heap.peek() {
            if e.0 > now {
                break;
            }
            let Some(Reverse(Entry(_, call))) = t.heap.pop() else {
                break;
            };
            if let Some(call) = call.upgrade() {
                // finishing posts to a completion queue: not under the heap's lock
                drop(t);
                expire(&call);
                t = TIMERS.lock();
            }
        }
        match t.heap.peek() {
            Some(Reverse(e)) => {
                let until = e.0;
                WAKE.wait_until(&mut t, until);
            }
            None => WAKE.wait(&mut t),
        }
    }
}
