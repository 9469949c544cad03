//! Execution limits through the pool's Rust API: `time_limit`, `memory_limit`, interrupting running
//! calls, and what happens to the state that hit a limit (it is replaced; the pool keeps its size).

mod support;

use std::time::{Duration, Instant};

use support::*;
use vmpool::testing::call::RUNNING;
use vmpool::testing::config::Config;
use vmpool::testing::value::Value;
use vmpool::Error;

const RUNAWAY: &str = r#"
function spin() while true do end end
function pspin() while true do pcall(function() while true do end end) end end
function xspin()
  while true do xpcall(function() while true do end end, function() while true do end end) end
end
function xspin_args()
  -- the extra arguments reach f (Lua 5.2+ and LuaJIT), and a handler that is not a function is
  -- refused as by the plain xpcall
  assert(xpcall(function(a, b) return a + b end, print, 1, 2) == true or _VERSION == "Lua 5.1")
  assert(not pcall(xpcall, function() end, nil))
  local ok, e = xpcall(function() error("plain", 0) end, function(m) return "handled " .. m end)
  assert(not ok and e == "handled plain", e)
  while true do xpcall(spin, function() while true do end end) end
end
function in_coroutine()
  coroutine.resume(coroutine.create(function() while true do end end))
  return "escaped"
end
function catch_in_coroutine()
  local co = coroutine.wrap(function()
    while true do pcall(function() while true do end end) end
  end)
  pcall(co)
  return "escaped"
end
function count(n) local x = 0 for i = 1, n do x = x + i end return x end
function echo(...) return ... end
"#;

fn limited(core: usize, limit: Duration) -> Config {
    Config {
        core,
        time_limit: Some(limit),
        jit: false,
        ..Config::default()
    }
}

fn expect_time_limit(result: Result<Vec<Value>, Error>, function: &str) {
    match result {
        Err(Error::TimeLimit {
            chunk, function: f, ..
        }) => {
            assert_eq!(chunk, "r");
            assert_eq!(f, function);
        }
        other => panic!("{function}: expected a time limit error, got {other:?}"),
    }
}

#[test]
fn time_limit_stops_runaway_loops_and_replaces_the_state() {
    let p = pool(limited(1, Duration::from_millis(50)), &[("r", RUNAWAY)]);
    for (i, f) in ["spin", "pspin", "xspin", "xspin_args"]
        .into_iter()
        .enumerate()
    {
        let t0 = Instant::now();
        let c = submit(&p, "r", f, &[]);
        expect_time_limit(wait(&c), f);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(50),
            "{f} stopped early: {took:?}"
        );
        assert!(took < Duration::from_secs(5), "{f} stopped late: {took:?}");
        let s = p.stats();
        assert_eq!(
            (s.core, s.created, s.closed),
            (1, 2 + i as u64, 1 + i as u64)
        );
        // the replacement state works
        let ok = submit(&p, "r", "echo", &[Value::Int(i as i64)]);
        assert_eq!(wait(&ok).unwrap(), vec![Value::Int(i as i64)]);
    }
    assert_balanced(&p.stats());
    p.close();
}

#[test]
fn time_limit_applies_to_loops_inside_coroutines() {
    // the hook stops the coroutine; the call must still fail even though the coroutine's error
    // was swallowed by `coroutine.resume` and the function went on to return normally
    let p = pool(limited(1, Duration::from_millis(30)), &[("r", RUNAWAY)]);
    for f in ["in_coroutine", "catch_in_coroutine"] {
        let c = submit(&p, "r", f, &[]);
        expect_time_limit(wait(&c), f);
    }
    let s = p.stats();
    assert_eq!((s.core, s.created, s.closed, s.errors), (1, 3, 2, 2));
    p.close();
}

#[test]
fn time_limit_covers_a_chunk_top_level() {
    let p = pool(
        limited(1, Duration::from_millis(30)),
        &[("r", "while true do end")],
    );
    let c = submit(&p, "r", "anything", &[]);
    expect_time_limit(wait(&c), "(top level)");
    p.close();
}

#[test]
fn calls_within_the_time_limit_are_untouched() {
    let p = pool(limited(2, Duration::from_secs(5)), &[("r", RUNAWAY)]);
    let calls: Vec<_> = (0..200)
        .map(|i| submit(&p, "r", "count", &[Value::Int(1000 + i)]))
        .collect();
    for (i, c) in calls.iter().enumerate() {
        let n = 1000 + i as i64;
        assert_eq!(wait(c).unwrap(), vec![Value::Int(n * (n + 1) / 2)]);
    }
    let s = p.stats();
    assert_eq!((s.created, s.closed, s.succeeded), (2, 0, 200));
    p.close();
}

const HOG: &str = r#"
function hog() local t = {} for i = 1, 1e9 do t[i] = i end end
function big() return #string.rep("x", 64 * 1024 * 1024) end
function caught() local ok, e = pcall(string.rep, "x", 64 * 1024 * 1024) return ok, e end
function len(s) return #s end
function echo(...) return ... end
"#;

fn memory_limited(core: usize, bytes: usize) -> Config {
    Config {
        core,
        memory_limit: Some(bytes),
        ..Config::default()
    }
}

#[test]
fn memory_limit_stops_allocation_and_replaces_the_state() {
    let limit = 8 * 1024 * 1024;
    let p = pool(memory_limited(1, limit), &[("m", HOG)]);
    for (i, f) in ["hog", "big"].into_iter().enumerate() {
        let c = submit(&p, "m", f, &[]);
        match wait(&c) {
            Err(Error::MemoryLimit {
                chunk,
                function,
                bytes,
                ..
            }) => assert_eq!((chunk.as_str(), function.as_str(), bytes), ("m", f, limit)),
            other => panic!("{f}: expected a memory limit error, got {other:?}"),
        }
        let s = p.stats();
        assert_eq!(
            (s.core, s.created, s.closed),
            (1, 2 + i as u64, 1 + i as u64)
        );
        let ok = submit(&p, "m", "echo", &[s_val("still here")]);
        assert_eq!(wait(&ok).unwrap(), vec![s_val("still here")]);
    }
    // an allocation the child catches is refused, not fatal: the call goes on, the state stays
    let c = submit(&p, "m", "caught", &[]);
    // Lua 5.3's string buffers raise their own message for the refused allocation
    let refused = if cfg!(feature = "lua53") {
        "not enough memory for buffer allocation"
    } else {
        "not enough memory"
    };
    assert_eq!(wait(&c).unwrap(), vec![Value::Bool(false), s_val(refused)]);
    assert_eq!(p.stats().closed, 2);
    assert_balanced(&p.stats());
    p.close();
}

#[test]
fn memory_limit_counts_the_arguments_a_state_receives() {
    let p = pool(memory_limited(1, 4 * 1024 * 1024), &[("m", HOG)]);
    let small = submit(&p, "m", "len", &[Value::Str(vec![7; 1024])]);
    assert_eq!(wait(&small).unwrap(), vec![Value::Int(1024)]);
    let huge = submit(&p, "m", "len", &[Value::Str(vec![7; 16 * 1024 * 1024])]);
    assert!(
        matches!(wait(&huge), Err(Error::MemoryLimit { .. })),
        "16 MiB argument into a 4 MiB state"
    );
    let again = submit(&p, "m", "len", &[Value::Str(vec![7; 10])]);
    assert_eq!(wait(&again).unwrap(), vec![Value::Int(10)]);
    p.close();
}

#[test]
fn memory_limit_below_a_fresh_state_is_refused_by_new() {
    match vmpool::testing::pool::Pool::new(memory_limited(1, 1000)) {
        Err(Error::BadArgument(m)) => {
            assert!(m.contains("memory_limit = 1000 is too small"), "{m}")
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("pool started with a 1000-byte memory limit"),
    }
}

fn s_val(text: &str) -> Value {
    s(text)
}

/// What `fut:cancel()` does: cancel if not started, else ask the running call to stop.
fn cancel(p: &vmpool::testing::pool::Pool, c: &vmpool::testing::call::Call) -> bool {
    let cancelled = p.cancel(c);
    if !cancelled && c.phase() == RUNNING {
        p.interrupt_running(c);
    }
    cancelled
}

#[test]
fn cancel_interrupts_a_running_call_in_a_pool_with_a_hook() {
    // time_limit = math.huge: no deadline, but running calls can be interrupted
    let p = pool(limited(1, Duration::MAX), &[("r", RUNAWAY)]);
    for f in ["spin", "pspin", "in_coroutine"] {
        let c = submit(&p, "r", f, &[]);
        assert!(eventually(|| c.phase() == RUNNING));
        assert!(
            !cancel(&p, &c),
            "a running call is not cancelled before it starts"
        );
        assert!(
            matches!(wait(&c), Err(Error::Cancelled)),
            "{f}: {:?}",
            outcome(&c)
        );
    }
    let s = p.stats();
    assert_eq!((s.core, s.created, s.closed), (1, 4, 3));
    assert_eq!(
        (s.cancelled, s.errors),
        (3, 0),
        "interrupted calls count as cancelled: {s:?}"
    );
    assert_balanced(&s);
    p.close();
}

#[test]
fn cancel_cannot_interrupt_a_running_call_without_a_hook() {
    let p = pool(config(1), &[("r", RUNAWAY)]);
    let c = submit(&p, "r", "count", &[Value::Int(20_000_000)]);
    assert!(eventually(|| c.phase() == RUNNING));
    assert!(!cancel(&p, &c));
    let n: i64 = 20_000_000;
    assert_eq!(wait(&c).unwrap(), vec![Value::Int(n * (n + 1) / 2)]);
    let s = p.stats();
    assert_eq!((s.succeeded, s.cancelled, s.closed), (1, 0, 0));
    p.close();
}

#[test]
fn a_cancelled_call_never_runs() {
    // races cancel against the worker picking the call up: every call either ran (its result
    // arrives) or never ran (the state's counter did not move)
    let p = pool(
        config(1),
        &[(
            "c",
            "ran = 0 function mark() ran = ran + 1 return ran end function get() return ran end",
        )],
    );
    let mut ran = 0;
    let mut cancelled = 0;
    for _ in 0..2000 {
        let c = submit(&p, "c", "mark", &[]);
        if p.cancel(&c) {
            assert!(matches!(wait(&c), Err(Error::Cancelled)));
            cancelled += 1;
        } else {
            ran += 1;
            assert_eq!(wait(&c).unwrap(), vec![Value::Int(ran)]);
        }
    }
    let get = submit(&p, "c", "get", &[]);
    assert_eq!(wait(&get).unwrap(), vec![Value::Int(ran)]);
    let s = p.stats();
    assert_eq!(s.cancelled, cancelled);
    assert_eq!(s.succeeded, ran as u64 + 1);
    assert_balanced(&s);
    p.close();
}

#[test]
fn a_state_that_cannot_be_replaced_does_not_wedge_the_pool() {
    // init fails while a marker file exists: the state that hits the time limit then cannot be
    // replaced. The pool must not be left without states for good: waiting calls get a state (or
    // the error that prevents one) at once, and later calls start one again.
    let marker = std::env::temp_dir().join(format!("vmpool-init-fails-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let init = format!(
        "if io.open({:?}) then error('init refuses: marker present', 0) end",
        marker.to_str().unwrap()
    );
    let p = pool(
        Config {
            core: 1,
            time_limit: Some(Duration::from_millis(30)),
            acquire_timeout: Some(Duration::from_secs(120)),
            init: Some(init.into_bytes()),
            jit: false,
            ..Config::default()
        },
        &[("r", RUNAWAY)],
    );
    let ok = submit(&p, "r", "echo", &[Value::Int(1)]);
    assert_eq!(wait(&ok).unwrap(), vec![Value::Int(1)]);
    std::fs::write(&marker, b"").unwrap();
    let spin = submit(&p, "r", "spin", &[]);
    let queued1 = submit(&p, "r", "echo", &[Value::Int(2)]);
    let queued2 = submit(&p, "r", "echo", &[Value::Int(3)]);
    let spun = wait(&spin);
    // the message does not claim a replacement that never came
    let text = spun
        .as_ref()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        text.contains("the state was closed and no replacement could be created: vmpool: the init code failed")
            && !text.contains("the state was replaced"),
        "{text}"
    );
    expect_time_limit(spun, "spin");
    // the oldest waiting call gets a new state at once, which fails the same way
    match wait(&queued1) {
        Err(Error::Init(m)) => assert!(m.contains("init refuses"), "{m}"),
        other => panic!("expected the init error, got {other:?}"),
    }
    std::fs::remove_file(&marker).unwrap();
    // a new call starts a state again (the pool keeps `core` as a floor); the other waiting call
    // runs on it
    let later = submit(&p, "r", "echo", &[Value::Int(4)]);
    assert_eq!(wait(&later).unwrap(), vec![Value::Int(4)]);
    assert_eq!(wait(&queued2).unwrap(), vec![Value::Int(3)]);
    let s = p.stats();
    assert_eq!(s.core, 1, "{s:?}");
    assert_balanced(&s);
    p.close();
}
