//! The floor of a cross-thread round trip, for the performance report: two threads bounce a
//! message back and forth, with nothing else to do. A `pool:invoke` round trip does the same
//! hand-off plus the Lua work on both sides, so these figures are what it is compared with.
//!
//! - `mpsc`: `std::sync::mpsc` channels (a bounded spin, then the thread parks), the "bare Rust
//!   channel" the report's target is relative to;
//! - `mpsc_polling`: the same channels, both sides polling `try_recv` (the channel without any
//!   sleeping: what a spin-then-park design like vmpool's aims at; skipped on one CPU);
//! - `condvar`: `Mutex` + `Condvar`, always sleeping and waking (what a round trip costs when
//!   nothing spins, e.g. on one CPU);
//! - `spin`: an atomic flag both threads spin on (the hardware floor; skipped on one CPU, where
//!   spinning only burns the time slice the other thread needs).
//!
//! Run: `cargo bench --bench pingpong -- [ROUND_TRIPS]`. Prints one line, a Lua table of
//! microseconds per round trip (one measurement each after a warm-up; `bench/report/run.lua` repeats
//! the process and takes medians).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Instant;

fn mpsc_round_trips(n: u32) -> f64 {
    let (to_b, from_a) = mpsc::channel::<u32>();
    let (to_a, from_b) = mpsc::channel::<u32>();
    let echo = thread::spawn(move || {
        while let Ok(v) = from_a.recv() {
            if to_a.send(v).is_err() {
                break;
            }
        }
    });
    let run = |count: u32| {
        let t0 = Instant::now();
        for i in 0..count {
            to_b.send(i).expect("echo thread alive");
            let v = from_b.recv().expect("echo thread alive");
            debug_assert_eq!(v, i);
        }
        t0.elapsed().as_secs_f64() * 1e6 / count as f64
    };
    run(n / 10 + 1);
    let us = run(n);
    drop(to_b);
    echo.join().expect("echo thread");
    us
}

/// Both sides poll with `try_recv` instead of parking: the channel's own cost, no wake-ups.
fn mpsc_polling_round_trips(n: u32) -> f64 {
    let (to_b, from_a) = mpsc::channel::<u32>();
    let (to_a, from_b) = mpsc::channel::<u32>();
    let poll = |rx: &mpsc::Receiver<u32>| loop {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Disconnected) => return None,
        }
    };
    let echo = thread::spawn(move || {
        while let Some(v) = poll(&from_a) {
            if to_a.send(v).is_err() {
                break;
            }
        }
    });
    let run = |count: u32| {
        let t0 = Instant::now();
        for i in 0..count {
            to_b.send(i).expect("echo thread alive");
            let v = poll(&from_b).expect("echo thread alive");
            debug_assert_eq!(v, i);
        }
        t0.elapsed().as_secs_f64() * 1e6 / count as f64
    };
    run(n / 10 + 1);
    let us = run(n);
    drop(to_b);
    echo.join().expect("echo thread");
    us
}

fn condvar_round_trips(n: u32) -> f64 {
    // the slot holds the turn: odd = the echo thread's, even = ours; u32::MAX = stop
    let shared = Arc::new((Mutex::new(0u32), Condvar::new(), Condvar::new()));
    let s = shared.clone();
    let echo = thread::spawn(move || {
        let (m, ping, pong) = &*s;
        let mut g = m.lock().expect("lock");
        loop {
            while *g % 2 == 0 {
                g = ping.wait(g).expect("wait");
            }
            if *g == u32::MAX {
                break;
            }
            *g += 1;
            pong.notify_one();
        }
    });
    let (m, ping, pong) = &*shared;
    let mut turn = 0u32;
    let mut run = |count: u32| {
        let t0 = Instant::now();
        for _ in 0..count {
            let mut g = m.lock().expect("lock");
            turn += 1;
            *g = turn;
            ping.notify_one();
            turn += 1;
            while *g != turn {
                g = pong.wait(g).expect("wait");
            }
        }
        t0.elapsed().as_secs_f64() * 1e6 / count as f64
    };
    run(n / 10 + 1);
    let us = run(n);
    *m.lock().expect("lock") = u32::MAX;
    ping.notify_one();
    echo.join().expect("echo thread");
    us
}

fn spin_round_trips(n: u32) -> f64 {
    let flag = Arc::new(AtomicU32::new(0));
    let f = flag.clone();
    let echo = thread::spawn(move || loop {
        let v = f.load(Ordering::Acquire);
        if v == u32::MAX {
            break;
        }
        if v % 2 == 1 {
            f.store(v + 1, Ordering::Release);
        } else {
            std::hint::spin_loop();
        }
    });
    let mut turn = 0u32;
    let mut run = |count: u32| {
        let t0 = Instant::now();
        for _ in 0..count {
            turn += 1;
            flag.store(turn, Ordering::Release);
            turn += 1;
            while flag.load(Ordering::Acquire) != turn {
                std::hint::spin_loop();
            }
        }
        t0.elapsed().as_secs_f64() * 1e6 / count as f64
    };
    run(n / 10 + 1);
    let us = run(n);
    flag.store(u32::MAX, Ordering::Release);
    echo.join().expect("echo thread");
    us
}

fn main() {
    // `cargo bench` passes `--bench`; the first numeric argument is the round-trip count
    let n = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u32>().ok())
        .unwrap_or(200_000)
        .max(10);
    let cpus = thread::available_parallelism().map_or(1, |c| c.get());
    let mpsc_us = mpsc_round_trips(n);
    let condvar_us = condvar_round_trips(n / 4 + 1);
    // polling is only meaningful when both threads have a CPU of their own
    let (polling, spin) = if cpus > 1 {
        (
            format!("{:.4}", mpsc_polling_round_trips(n)),
            format!("{:.4}", spin_round_trips(n)),
        )
    } else {
        ("nil".to_string(), "nil".to_string())
    };
    println!(
        "return {{ cpus = {cpus}, round_trips = {n}, mpsc_us = {mpsc_us:.4}, \
         mpsc_polling_us = {polling}, condvar_us = {condvar_us:.4}, spin_us = {spin} }}"
    );
}
