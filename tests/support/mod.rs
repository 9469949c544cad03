//! Helpers shared by the reliability tests: a host state to compile chunks in, pools with chunks,
//! calls built from Rust values, and bounded waits.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use vmpool::testing::call::Call;
use vmpool::testing::chunk::Chunk;
use vmpool::testing::config::Config;
use vmpool::testing::lua::State;
use vmpool::testing::pool::{Pool, Stats};
use vmpool::testing::spin::AdaptiveSpin;
use vmpool::testing::value::{decode_values, encode_rust, RustSink, Value};
use vmpool::Error;

/// A Lua state created by mlua on this thread (these tests link the system Lua).
pub struct Host {
    pub lua: mlua::Lua,
    pub st: State,
}

pub fn host() -> Host {
    let lua = mlua::Lua::new();
    let mut raw = std::ptr::null_mut();
    // SAFETY: copies out the main state's pointer; `Host` keeps the `Lua` alive and uses the
    // state on this thread only.
    unsafe { lua.exec_raw::<()>((), |l| raw = l) }.expect("raw state");
    // SAFETY: see above.
    let st = unsafe { State::from_raw(raw) };
    Host { lua, st }
}

/// Compiles `chunks` into `pool` (replacing chunks of the same name).
pub fn compile(pool: &Pool, chunks: &[(&str, &str)]) {
    let h = host();
    for (name, src) in chunks {
        let chunk = Chunk::compile(h.st, name, src.as_bytes()).expect("compiles");
        pool.chunks.insert(Arc::new(chunk));
    }
}

pub fn pool(cfg: Config, chunks: &[(&str, &str)]) -> Arc<Pool> {
    let pool = Pool::new(cfg).expect("pool starts");
    compile(&pool, chunks);
    pool
}

pub fn call(pool: &Pool, chunk: &str, func: &str, args: &[Value]) -> Arc<Call> {
    let mut c = Call::default();
    {
        let d = c.data.get_mut();
        d.chunk = pool.chunks.get(chunk.as_bytes());
        d.func.extend_from_slice(func.as_bytes());
        encode_rust(args, &mut d.buf);
    }
    Arc::new(c)
}

/// Submits a call and returns it.
pub fn submit(pool: &Arc<Pool>, chunk: &str, func: &str, args: &[Value]) -> Arc<Call> {
    let c = call(pool, chunk, func, args);
    pool.submit(c.clone()).expect("submitted");
    c
}

/// Waits (at most 30 s) for the call and returns its results or error.
pub fn wait(c: &Call) -> Result<Vec<Value>, Error> {
    let spin = AdaptiveSpin::new(Duration::from_micros(20), false);
    assert!(
        c.wait(Some(Instant::now() + Duration::from_secs(30)), &spin),
        "call finished in time"
    );
    outcome(c)
}

/// The outcome of a finished call.
pub fn outcome(c: &Call) -> Result<Vec<Value>, Error> {
    match c.result().expect("a finished call has an outcome") {
        Ok(buf) => {
            let mut sink = RustSink::default();
            decode_values(buf, &mut sink).expect("results decode");
            Ok(sink.into_values())
        }
        Err(e) => Err(e.clone()),
    }
}

/// Polls `cond` until it holds or 10 s pass; returns its last value.
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return cond();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn config(core: usize) -> Config {
    Config {
        core,
        ..Config::default()
    }
}

/// The invariants `stats()` keeps once nothing is in flight.
pub fn assert_balanced(s: &Stats) {
    assert_eq!(s.busy, 0, "{s:?}");
    assert_eq!(s.waiting, 0, "{s:?}");
    assert_eq!((s.core + s.noncore) as u64, s.created - s.closed, "{s:?}");
    assert_eq!(s.core + s.noncore, s.idle, "{s:?}");
    assert_eq!(
        s.invokes,
        s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled,
        "{s:?}"
    );
}

pub fn s(text: &str) -> Value {
    Value::Str(text.as_bytes().to_vec())
}
