//! The pool's bookkeeping under concurrent use from many threads: submits that run, queue, get
//! rejected or time out waiting, cancels racing the workers, interrupts, non-core states coming
//! and going, and a close() that lands while calls are in flight. Every call must end with
//! exactly one outcome and the counters must balance. This is also what `scripts/tsan.sh` runs
//! under ThreadSanitizer.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use vmpool::testing::call::{Call, RUNNING};
use vmpool::testing::config::Config;
use vmpool::testing::pool::Pool;
use vmpool::testing::value::Value;
use vmpool::Error;

const CHUNK: &str = r#"
function echo(...) return ... end
function fail() error("boom", 0) end
function spin() while true do end end
function work(n) local x = 0 for i = 1, n do x = x + i end return x end
"#;

#[derive(Default)]
struct Seen {
    ok: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
    /// Queued calls that close() failed.
    closed: AtomicU64,
    /// Calls refused by submit because the pool was already closed (not invokes).
    closed_at_submit: AtomicU64,
}

/// Tiny per-thread generator.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn one_call(p: &Arc<Pool>, rng: &mut u64, seen: &Seen) {
    let r = next(rng) % 100;
    let (func, args): (&str, Vec<Value>) = match r {
        0..=69 => ("echo", vec![Value::Int(r as i64), s("x")]),
        70..=79 => ("fail", vec![]),
        80..=82 => ("spin", vec![]),
        _ => ("work", vec![Value::Int(2000 + (next(rng) % 20_000) as i64)]),
    };
    let c = call(p, "c", func, &args);
    match p.submit(c.clone()) {
        Err(Error::QueueFull { .. }) => {
            seen.rejected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(Error::Closed) => {
            seen.closed_at_submit.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(e) => panic!("unexpected submit error {e}"),
        Ok(()) => {}
    }
    // sometimes cancel: at once (before it starts: it never runs; if it started, interrupt
    // it), or after letting the worker get going
    let pick = next(rng) % 10;
    if pick == 1 {
        std::thread::yield_now();
    }
    if pick <= 1 && !p.cancel(&c) && c.phase() == RUNNING {
        p.interrupt_running(&c);
    }
    let outcome = wait(&c);
    let counter = match &outcome {
        Ok(v) => {
            if func == "echo" {
                assert_eq!(v, &args);
            }
            &seen.ok
        }
        Err(Error::Runtime { .. }) | Err(Error::TimeLimit { .. }) => &seen.failed,
        Err(Error::Cancelled) => &seen.cancelled,
        Err(Error::AcquireTimeout { .. }) => &seen.timeouts,
        Err(Error::Closed) => &seen.closed,
        Err(e) => panic!("unexpected outcome {e}"),
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

fn hammer(threads: usize, calls_per_thread: usize, close_midway: bool) {
    let p = pool(
        Config {
            core: 2,
            max_noncore: 2,
            idle_timeout: Some(Duration::from_millis(1)),
            time_limit: Some(Duration::from_millis(5)),
            acquire_timeout: Some(Duration::from_millis(3)),
            max_waiting: 2,
            jit: false,
            ..Config::default()
        },
        &[("c", CHUNK)],
    );
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    // With close_midway, no thread makes the second half of its calls before close() has begun:
    // on a loaded machine the callers could otherwise all finish before this thread gets to
    // close, and the race with close() would not be tested at all.
    let closing = Arc::new(AtomicBool::new(false));
    let halfway = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (p, seen) = (p.clone(), seen.clone());
            let (closing, halfway) = (closing.clone(), halfway.clone());
            std::thread::spawn(move || {
                let mut rng = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
                for i in 0..calls_per_thread {
                    if close_midway && i == calls_per_thread / 2 {
                        halfway.fetch_add(1, Ordering::AcqRel);
                        let deadline = Instant::now() + Duration::from_secs(20);
                        while !closing.load(Ordering::Acquire) && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    one_call(&p, &mut rng, &seen);
                }
            })
        })
        .collect();
    if close_midway {
        // close while the others are still calling: nothing may hang or lose its outcome
        while seen.ok.load(Ordering::Relaxed) < (threads * calls_per_thread / 4) as u64
            && halfway.load(Ordering::Acquire) < threads
            && started.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        closing.store(true, Ordering::Release);
        p.close();
    }
    for w in workers {
        w.join().expect("a calling thread panicked");
    }
    p.close();
    let s = p.stats();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let total = get(&seen.ok)
        + get(&seen.failed)
        + get(&seen.rejected)
        + get(&seen.timeouts)
        + get(&seen.cancelled)
        + get(&seen.closed)
        + get(&seen.closed_at_submit);
    assert_eq!(
        total,
        (threads * calls_per_thread) as u64,
        "every call has one outcome"
    );
    assert_eq!(s.invokes, total - get(&seen.closed_at_submit), "{s:?}");
    assert_eq!(s.succeeded, get(&seen.ok), "{s:?}");
    assert_eq!(s.errors, get(&seen.failed) + get(&seen.closed), "{s:?}");
    assert_eq!(s.rejected, get(&seen.rejected), "{s:?}");
    assert_eq!(s.timeouts, get(&seen.timeouts), "{s:?}");
    assert_eq!(s.cancelled, get(&seen.cancelled), "{s:?}");
    if close_midway {
        assert!(
            get(&seen.closed_at_submit) > 0,
            "close() landed after every call"
        );
    }
    assert_eq!(
        (s.core, s.noncore, s.busy, s.waiting, s.idle),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(s.created, s.closed, "{s:?}");
}

#[test]
fn many_threads_every_outcome_counters_balance() {
    hammer(12, 150, false);
}

#[test]
fn close_while_many_threads_call() {
    hammer(12, 150, true);
}

/// Cancels racing the worker that picks the call up, with interrupts: a call cancelled before it
/// started never ran (the state's counter says so).
#[test]
fn cancel_races_never_lose_or_duplicate_a_call() {
    let p = pool(
        Config {
            core: 1,
            time_limit: Some(Duration::MAX),
            jit: false,
            ..Config::default()
        },
        &[(
            "c",
            "ran = 0 function mark() ran = ran + 1 return ran end function get() return ran end",
        )],
    );
    let cancelled_before = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (p, cancelled_before) = (p.clone(), cancelled_before.clone());
            std::thread::spawn(move || {
                let mut marks = Vec::new();
                for _ in 0..300 {
                    let c: Arc<Call> = submit(&p, "c", "mark", &[]);
                    if p.cancel(&c) {
                        cancelled_before.fetch_add(1, Ordering::Relaxed);
                        assert!(matches!(wait(&c), Err(Error::Cancelled)));
                    } else {
                        match wait(&c) {
                            Ok(v) => marks.push(v),
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                marks.len() as u64
            })
        })
        .collect();
    let ran: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let get = submit(&p, "c", "get", &[]);
    let total = match wait(&get).unwrap().as_slice() {
        [Value::Int(n)] => *n,
        other => panic!("{other:?}"),
    };
    assert_eq!(total as u64, ran, "calls that ran = calls not cancelled");
    let s = p.stats();
    assert_eq!(s.cancelled, cancelled_before.load(Ordering::Relaxed));
    assert_eq!(s.succeeded, ran + 1);
    assert_balanced(&s);
    p.close();
}
