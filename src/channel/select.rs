//! `vmpool.select`: the first of several channels to have a message. Fair: each scan starts at a
//! channel chosen at random (as Go's `select` chooses), so no channel of a list can be starved by
//! the others, whatever other selects run in between (a rotating index did: a loop alternating
//! two selects always started each at the same place). Waiting files one watcher (`watch.rs`) on
//! every channel at once; whichever has a message first finishes it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::watch::Watch;
use super::{Channel, Fail, Message, Side, POLL_SLICE};
use crate::spin::AdaptiveSpin;

/// Seeds each thread's generator differently.
static SEEDS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's xorshift64* state (never 0).
    static RNG: Cell<u64> = Cell::new(splitmix(SEEDS.fetch_add(1, Ordering::Relaxed)) | 1);
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A channel index below `n`, uniform enough for fairness (xorshift64*, multiply-shift range).
fn random_below(n: usize) -> usize {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
        ((v * n as u64) >> 32) as usize
    })
}

/// What one scan found.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// Channel `i`'s oldest message.
    Got(usize, Message),
    /// Every channel is closed and drained.
    Closed,
    /// Nothing yet (the watcher, if any, was filed on every open channel).
    Empty,
}

/// One scan, from a random start; with nothing found and `watch` armed, files its record on
/// every channel still open (a message arriving meanwhile is then found, or finishes the record).
pub fn scan(chans: &[Arc<Channel>], watch: Option<&mut Watch>) -> Scan {
    let n = chans.len();
    if n == 0 {
        return Scan::Closed;
    }
    let start = random_below(n);
    let mut closed = 0;
    for k in 0..n {
        let i = (start + k) % n;
        match chans[i].try_pop() {
            Ok(m) => return Scan::Got(i, m),
            Err(Fail::Closed) => closed += 1,
            Err(_) => {}
        }
    }
    if closed == n {
        return Scan::Closed;
    }
    let Some(w) = watch else {
        return Scan::Empty;
    };
    let call = w.arm();
    for k in 0..n {
        let i = (start + k) % n;
        match chans[i].pop_or_watch(Some(&call)) {
            Ok(m) => {
                w.retire(Some(&chans[i]));
                return Scan::Got(i, m);
            }
            Err(Fail::Timeout) => w.filed(&chans[i], Side::Pop),
            Err(_) => {}
        }
    }
    Scan::Empty
}

/// Waits up to `timeout` (`None`: no limit) for a message on any of `chans`, polling `stop`.
pub fn wait(
    chans: &[Arc<Channel>],
    timeout: Option<Duration>,
    stop: &mut dyn FnMut() -> bool,
) -> Result<(usize, Message), Fail> {
    // the deadline is this thread's to watch: the record needs no timer
    let deadline = crate::call::deadline_after(timeout);
    let mut w = Watch::default();
    let spin = AdaptiveSpin::new(Duration::ZERO, false);
    // the first call arms the test (the host's notes the hooks it compares against later)
    if stop() {
        return Err(Fail::Stopped);
    }
    loop {
        match scan(chans, Some(&mut w)) {
            Scan::Got(i, m) => return Ok((i, m)),
            Scan::Closed => return Err(Fail::Closed),
            Scan::Empty => {}
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            w.retire(None);
            return Err(Fail::Timeout);
        }
        if let Some(call) = w.call().cloned() {
            let slice = Instant::now() + POLL_SLICE;
            let until = deadline.map_or(slice, |d| d.min(slice));
            call.wait_unless(Some(until), &spin, &mut || false);
        }
        // the channel that woke the record is found first, then the wake-up is not handed on
        match scan(chans, None) {
            Scan::Got(i, m) => {
                w.retire(Some(&chans[i]));
                return Ok((i, m));
            }
            Scan::Closed => {
                w.retire(None);
                return Err(Fail::Closed);
            }
            Scan::Empty => w.retire(None),
        }
        if stop() {
            return Err(Fail::Stopped);
        }
    }
}
