//! A model-based stress test of the channels (also run under ThreadSanitizer by scripts/tsan.sh):
//! producers and consumers on threads, each op chosen at random among every way there is to wait
//! (a thread on the condvar with or without a timeout, the try forms, a watcher as a scheduler's
//! coroutine uses, `select` by thread and by watcher), over three small channels, with one channel
//! closed early at random. The model: every message a push accepted is delivered exactly once,
//! and one consumer sees each producer's messages in the order they were pushed.
//!
//! `VMPOOL_CHANNEL_MESSAGES` sets how many messages the producers try to send in all (default
//! 60,000; the 1,000,000 run: `VMPOOL_CHANNEL_MESSAGES=1000000 cargo test --release --test
//! channel_model`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vmpool::testing::call::Call;
use vmpool::testing::channel::select::{self, Scan};
use vmpool::testing::channel::watch::Watch;
use vmpool::testing::channel::{Channel, Fail, Message, Side};
use vmpool::testing::spin::AdaptiveSpin;

const PRODUCERS: u32 = 6;
const CONSUMERS: u32 = 5;

fn never() -> bool {
    false
}

struct Rng(u32);
impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }
}

fn total() -> u32 {
    std::env::var("VMPOOL_CHANNEL_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60_000)
}

/// Waits for a watcher's record, as a scheduler's coroutine sleeps until its token comes back
/// (bounded by a slice: the retry then files again).
fn sleep_on(w: &Watch, spin: &AdaptiveSpin) {
    if let Some(call) = w.call() {
        let until = std::time::Instant::now() + Duration::from_millis(20);
        call.wait(Some(until), spin);
    }
}

/// A push the way a coroutine does it: try, file a watcher, sleep, retry.
fn push_watched(c: &Arc<Channel>, msg: Vec<u8>, spin: &AdaptiveSpin) -> Result<(), Fail> {
    let mut msg = Message::from(msg);
    let mut w = Watch::default();
    loop {
        match c.push_or_watch(msg, None) {
            Ok(()) => {
                w.retire(Some(c));
                return Ok(());
            }
            Err((Fail::Timeout, m)) => msg = m,
            Err((f, _)) => {
                w.retire(None);
                return Err(f);
            }
        }
        w.retire(None);
        let call: Arc<Call> = w.arm();
        match c.push_or_watch(msg, Some(&call)) {
            Ok(()) => {
                w.retire(Some(c));
                return Ok(());
            }
            Err((Fail::Timeout, m)) => {
                msg = m;
                w.filed(c, Side::Push);
            }
            Err((f, _)) => {
                w.retire(None);
                return Err(f);
            }
        }
        sleep_on(&w, spin);
    }
}

/// A pop the way a coroutine does it, giving up after `sleeps` sleeps (a consumer waiting
/// forever on a channel whose producers are done would never drain the others).
fn pop_watched(c: &Arc<Channel>, spin: &AdaptiveSpin, sleeps: u32) -> Result<Message, Fail> {
    let mut w = Watch::default();
    for _ in 0..=sleeps {
        match c.pop_or_watch(None) {
            Ok(m) => {
                w.retire(Some(c));
                return Ok(m);
            }
            Err(Fail::Timeout) => {}
            Err(f) => {
                w.retire(None);
                return Err(f);
            }
        }
        w.retire(None);
        let call = w.arm();
        match c.pop_or_watch(Some(&call)) {
            Ok(m) => {
                w.retire(Some(c));
                return Ok(m);
            }
            Err(Fail::Timeout) => w.filed(c, Side::Pop),
            Err(f) => {
                w.retire(None);
                return Err(f);
            }
        }
        sleep_on(&w, spin);
    }
    w.retire(None);
    Err(Fail::Timeout)
}

/// A select the way a coroutine does it.
fn select_watched(chans: &[Arc<Channel>], spin: &AdaptiveSpin) -> Scan {
    let mut w = Watch::default();
    loop {
        match select::scan(chans, None) {
            Scan::Got(i, m) => {
                w.retire(Some(&chans[i]));
                return Scan::Got(i, m);
            }
            Scan::Closed => return Scan::Closed,
            Scan::Empty => {}
        }
        w.retire(None);
        match select::scan(chans, Some(&mut w)) {
            Scan::Empty => sleep_on(&w, spin),
            got => return got,
        }
    }
}

fn decode(m: &[u8]) -> (u32, u32) {
    (
        u32::from_le_bytes(m[0..4].try_into().unwrap()),
        u32::from_le_bytes(m[4..8].try_into().unwrap()),
    )
}

#[test]
fn every_accepted_message_is_delivered_once_in_order_per_producer_whatever_way_each_side_waits() {
    let per_producer = total() / PRODUCERS;
    let chans: Arc<Vec<Arc<Channel>>> = Arc::new(vec![
        Arc::new(Channel::new("model-a", 3, 1 << 10)),
        Arc::new(Channel::new("model-b", 8, 40)),
        Arc::new(Channel::new("model-c", 32, 1 << 12)),
    ]);
    let early_close = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let chans = chans.clone();
            let early_close = early_close.clone();
            std::thread::spawn(move || {
                let c = &chans[p as usize % chans.len()];
                let spin = AdaptiveSpin::new(Duration::from_micros(20), false);
                let mut rng = Rng(0x9e37_79b9u32.wrapping_mul(p + 1));
                let mut accepted = Vec::new();
                let mut seq = 0u32;
                while seq < per_producer {
                    let r = rng.next();
                    // channel c is closed early, once, by its first producer
                    if p == 2
                        && seq == per_producer / 3
                        && !early_close.swap(true, Ordering::SeqCst)
                    {
                        c.close();
                    }
                    let mut msg = p.to_le_bytes().to_vec();
                    msg.extend_from_slice(&seq.to_le_bytes());
                    if r.is_multiple_of(4) {
                        msg.resize(8 + (r % 24) as usize, 0);
                    }
                    let outcome = match r % 5 {
                        0 => c.push(msg, Some(Duration::ZERO), &never).map_err(|e| e.0),
                        1 => c
                            .push(msg, Some(Duration::from_micros(u64::from(r % 300))), &never)
                            .map_err(|e| e.0),
                        2 => c.push(msg, None, &never).map_err(|e| e.0),
                        _ => push_watched(c, msg, &spin),
                    };
                    match outcome {
                        Ok(()) => {
                            accepted.push(seq);
                            seq += 1;
                        }
                        Err(Fail::Timeout) => {}
                        Err(Fail::Closed) => break,
                        Err(f) => panic!("push failed with {f:?}"),
                    }
                }
                accepted
            })
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|k| {
            let chans = chans.clone();
            std::thread::spawn(move || {
                let spin = AdaptiveSpin::new(Duration::from_micros(20), false);
                let mut got: Vec<Vec<u32>> = vec![Vec::new(); PRODUCERS as usize];
                let mut rng = Rng(0x85eb_ca6bu32.wrapping_mul(k + 1));
                let mut keep = |m: Message| {
                    let (p, s) = decode(&m.bytes);
                    got[p as usize].push(s);
                };
                loop {
                    let r = rng.next();
                    let c = &chans[(r / 7) as usize % chans.len()];
                    let single = match r % 6 {
                        0 => c.try_pop(),
                        1 => c.pop(Some(Duration::from_micros(u64::from(r % 300))), &never),
                        2 => pop_watched(c, &spin, r % 3),
                        3 => {
                            match select::wait(
                                &chans,
                                Some(Duration::from_micros(u64::from(r % 500))),
                                &mut never,
                            ) {
                                Ok((_, m)) => keep(m),
                                Err(Fail::Closed) => break,
                                Err(Fail::Timeout) => {}
                                Err(f) => panic!("select failed with {f:?}"),
                            }
                            continue;
                        }
                        _ => {
                            match select_watched(&chans, &spin) {
                                Scan::Got(_, m) => keep(m),
                                Scan::Closed => break,
                                Scan::Empty => unreachable!(),
                            }
                            continue;
                        }
                    };
                    match single {
                        Ok(m) => keep(m),
                        Err(Fail::Timeout | Fail::Closed) => {}
                        Err(f) => panic!("pop failed with {f:?}"),
                    }
                }
                got
            })
        })
        .collect();
    let mut accepted = Vec::new();
    for p in producers {
        accepted.push(p.join().unwrap());
    }
    for c in chans.iter() {
        c.close();
    }
    let mut all: Vec<Vec<u32>> = vec![Vec::new(); PRODUCERS as usize];
    for k in consumers {
        for (p, seqs) in k.join().unwrap().into_iter().enumerate() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "a consumer saw producer {p}'s messages out of order"
            );
            all[p].extend(seqs);
        }
    }
    let mut delivered = 0;
    for (p, mut seqs) in all.into_iter().enumerate() {
        seqs.sort_unstable();
        delivered += seqs.len();
        assert_eq!(seqs, accepted[p], "producer {p}: delivered != accepted");
    }
    assert!(early_close.load(Ordering::SeqCst));
    // every producer but the closed channel's got all its messages through
    assert!(delivered as u32 >= per_producer * (PRODUCERS - 2));
    for c in chans.iter() {
        assert_eq!(c.len(), 0);
    }
}
