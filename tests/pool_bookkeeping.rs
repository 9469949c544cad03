//! The pool's bookkeeping through its Rust API: reservations, queueing, outcomes and the counters
//! `stats()` reports. Lua values are built with `value::Value`, chunks compiled in a host state
//! that mlua creates (these tests link the system Lua, no `module` feature).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{call, config, pool, wait};
use vmpool::testing::call::Call;
use vmpool::testing::config::Config;
use vmpool::testing::pool::{Pool, MAX_SPARE_BYTES, MAX_SPARE_CALLS};
use vmpool::testing::value::Value;
use vmpool::Error;

const UTIL: &str =
    "return { echo = function(...) return ... end, fail = function(m) error(m, 0) end,
  spin = function(n) local x = 0 for i = 1, n do x = x + i end return x end }";

#[test]
fn invoke_returns_the_child_results() {
    let p = pool(config(2), &[("u", UTIL)]);
    let args = vec![Value::Int(7), Value::Str(b"x\0y".to_vec()), Value::Nil];
    let c = call(&p, "u", "echo", &args);
    p.submit(c.clone()).unwrap();
    assert_eq!(wait(&c).unwrap(), args);
    p.close();
}

#[test]
fn child_errors_carry_the_message_and_a_traceback() {
    let p = pool(config(1), &[("u", UTIL)]);
    let c = call(&p, "u", "fail", &[Value::Str(b"broken".to_vec())]);
    p.submit(c.clone()).unwrap();
    match wait(&c) {
        Err(Error::Runtime {
            chunk,
            function,
            message,
        }) => {
            assert_eq!(chunk, "u");
            assert_eq!(function, "fail");
            assert!(message.starts_with("broken"), "{message}");
            assert!(message.contains("stack traceback"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let s = p.stats();
    assert_eq!((s.errors, s.busy, s.idle), (1, 0, 1));
    p.close();
}

#[test]
fn many_calls_from_many_threads_all_end_and_balance_the_counters() {
    let p = pool(
        Config {
            core: 2,
            max_noncore: 2,
            ..Config::default()
        },
        &[("u", UTIL)],
    );
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..300 {
                    let c = call(&p, "u", "echo", &[Value::Int(t * 1000 + i)]);
                    p.submit(c.clone()).unwrap();
                    assert_eq!(wait(&c).unwrap(), vec![Value::Int(t * 1000 + i)]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = p.stats();
    assert_eq!(s.invokes, 2400);
    assert_eq!(s.succeeded, 2400);
    assert_eq!(s.busy, 0);
    assert_eq!(s.waiting, 0);
    assert_eq!((s.core + s.noncore) as u64, s.created - s.closed);
    p.close();
    let s = p.stats();
    assert_eq!((s.core, s.noncore), (0, 0));
    assert_eq!(s.created, s.closed);
}

#[test]
fn non_blocking_pool_refuses_when_exhausted() {
    let p = pool(
        Config {
            core: 1,
            blocking: false,
            ..Config::default()
        },
        &[("u", UTIL)],
    );
    let long = call(&p, "u", "spin", &[Value::Int(30_000_000)]);
    p.submit(long.clone()).unwrap();
    let refused = call(&p, "u", "echo", &[]);
    assert!(matches!(
        p.submit(refused),
        Err(Error::Exhausted { states: 1 })
    ));
    wait(&long).unwrap();
    assert_eq!(p.stats().rejected, 1);
    p.close();
}

#[test]
fn queued_call_times_out_without_anyone_waiting_on_it() {
    let cfg = Config {
        core: 1,
        acquire_timeout: Some(Duration::from_millis(30)),
        ..Config::default()
    };
    let p = pool(cfg, &[("u", UTIL)]);
    let long = call(&p, "u", "spin", &[Value::Int(200_000_000)]);
    p.submit(long.clone()).unwrap();
    let queued = call(&p, "u", "echo", &[]);
    p.submit(queued.clone()).unwrap();
    assert_eq!(p.stats().waiting, 1);
    // the idle check fails it on its own: poll the phase, bounded
    let deadline = Instant::now() + Duration::from_secs(10);
    while !queued.is_done() && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(matches!(wait(&queued), Err(Error::AcquireTimeout { .. })));
    assert_eq!(p.stats().timeouts, 1);
    wait(&long).unwrap();
    p.close();
}

#[test]
fn cancelled_queued_call_never_runs() {
    let p = pool(config(1), &[("u", UTIL)]);
    let long = call(&p, "u", "spin", &[Value::Int(30_000_000)]);
    p.submit(long.clone()).unwrap();
    let queued = call(&p, "u", "echo", &[Value::Int(1)]);
    p.submit(queued.clone()).unwrap();
    assert!(p.cancel(&queued));
    assert!(!p.cancel(&queued));
    assert!(matches!(wait(&queued), Err(Error::Cancelled)));
    wait(&long).unwrap();
    let s = p.stats();
    assert_eq!((s.cancelled, s.succeeded, s.waiting), (1, 1, 0));
    p.close();
}

#[test]
fn idle_timeout_closes_noncore_states() {
    let cfg = Config {
        core: 0,
        max_noncore: 3,
        idle_timeout: Some(Duration::from_millis(20)),
        ..Config::default()
    };
    let p = pool(cfg, &[("u", UTIL)]);
    let calls: Vec<_> = (0..3)
        .map(|_| call(&p, "u", "spin", &[Value::Int(2_000_000)]))
        .collect();
    for c in &calls {
        p.submit(c.clone()).unwrap();
    }
    assert_eq!(p.stats().noncore, 3);
    for c in &calls {
        wait(c).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.stats().noncore > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let s = p.stats();
    assert_eq!((s.noncore, s.created, s.closed), (0, 3, 3));
    p.close();
}

#[test]
fn close_fails_queued_calls_and_finishes_running_ones() {
    let p = pool(config(1), &[("u", UTIL)]);
    let long = call(&p, "u", "spin", &[Value::Int(50_000_000)]);
    p.submit(long.clone()).unwrap();
    let queued = call(&p, "u", "echo", &[]);
    p.submit(queued.clone()).unwrap();
    p.close();
    assert!(wait(&long).is_ok());
    assert!(matches!(wait(&queued), Err(Error::Closed)));
    assert!(matches!(
        p.submit(call(&p, "u", "echo", &[])),
        Err(Error::Closed)
    ));
}

#[test]
fn init_failure_fails_new() {
    let cfg = Config {
        core: 2,
        init: Some(b"error('nope')".to_vec()),
        ..Config::default()
    };
    match Pool::new(cfg) {
        Err(Error::Init(m)) => assert!(m.contains("nope"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("pool started"),
    }
}

#[test]
fn spare_calls_are_kept_up_to_a_count_and_a_total_of_buffer_bytes() {
    let pool = pool(Config::default(), &[]);
    let with_buffer = |bytes: usize| {
        let mut c = Call::default();
        c.data.get_mut().buf.reserve_exact(bytes);
        Arc::new(c)
    };
    // big buffers: only as many as fit in the byte budget (16 MiB, records included) are kept
    for _ in 0..20 {
        pool.give_back_call(with_buffer(1 << 20));
    }
    let mut out = Vec::new();
    pool.take_spare_calls(&mut out);
    assert_eq!(
        out.len(),
        (MAX_SPARE_BYTES >> 20) - 1,
        "15 of the 1 MiB calls and their records fit the 16 MiB budget"
    );
    // taking them frees their share of the budget: small ones are kept by the thousand
    for _ in 0..MAX_SPARE_CALLS + 1000 {
        pool.give_back_call(with_buffer(64));
    }
    let mut kept = 0;
    loop {
        let mut more = Vec::new();
        pool.take_spare_calls(&mut more);
        if more.is_empty() {
            break;
        }
        kept += more.len();
    }
    assert_eq!(kept, MAX_SPARE_CALLS, "at most MAX_SPARE_CALLS spare calls");
    // a call someone else still holds is never kept
    let shared = with_buffer(64);
    pool.give_back_call(shared.clone());
    let mut none = Vec::new();
    pool.take_spare_calls(&mut none);
    assert!(none.is_empty());
    pool.close();
}
