//! The pool object the host sees: `vmpool.new`, `pool:compile`, `pool:invoke`, `pool:submit`,
//! `pool:unload`, `pool:stats`, `pool:collect`, `pool:close`, and `vmpool.memory()`. The handle
//! and the call I/O they share live in `call_io`.

use std::ffi::c_int;
use std::sync::Arc;

use crate::call::Waited;
use crate::chunk::Chunk;
use crate::host::call_io::{bad_arg, push_outcome, HostWait, PoolHandle, RESULT_SPIN, RESULT_WAIT};
use crate::host::future_api::FutureHandle;
use crate::host::userdata::{self, Access, Frame, Held, UV_FUTURE, UV_POOL};
use crate::lua::protect::{protected, push_str};
use crate::lua::State;
use crate::pool::call_cache::CallCache;
use crate::pool::Pool;
use crate::spin::AdaptiveSpin;
use crate::value;
use crate::Error;

/// The pool `self` at slot 1 of `method`, held for the caller's frame
/// (`crate::hold!(h = handle(st, "invoke"))`).
#[inline]
fn handle<'f>(
    f: &'f Frame,
    st: State,
    method: &'static str,
) -> Result<Held<'f, PoolHandle>, Error> {
    userdata::hold(f, st, 1).map_err(|a| {
        a.error::<PoolHandle>(|| {
            Error::BadArgument(format!(
                "bad argument #1 to '{method}': expected a pool, got {} (call it as pool:{method}(...), with a colon)",
                st.type_name(1)
            ))
        })
    })
}

crate::lua_function!(pub fn new_pool => new_pool_impl);
fn new_pool_impl(st: State) -> Result<c_int, Error> {
    let cfg = crate::host::options::parse(st, 1)?;
    let pool = Pool::new(cfg)?;
    let h = PoolHandle {
        pool,
        main: st.main_thread(),
        last_chunk: None,
        cache: CallCache::keeping_names(),
        encoder: value::Encoder::default(),
        closed: false,
        spin: AdaptiveSpin::new(RESULT_SPIN, false),
    };
    userdata::push(st, h, UV_POOL)?;
    Ok(1)
}

crate::lua_function!(pub fn compile => compile_impl);
fn compile_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st, "compile"));
    h.check()?;
    let name = st
        .to_bytes(2)
        .ok_or_else(|| bad_arg(st, 2, 1, "compile", "a chunk name (string)"))?;
    let name = std::str::from_utf8(name)
        .map_err(|_| Error::BadArgument("chunk names must be UTF-8 text".into()))?
        .to_string();
    if name.is_empty() {
        return Err(Error::BadArgument(
            "bad argument #1 to 'compile': the chunk name is empty".into(),
        ));
    }
    let source = st
        .to_bytes(3)
        .ok_or_else(|| bad_arg(st, 3, 2, "compile", "Lua source (string)"))?;
    let chunk = Arc::new(Chunk::compile(st, &name, source)?);
    h.pool.chunks.insert(chunk);
    st.push_bool(true);
    Ok(1)
}

crate::lua_function!(pub fn unload => unload_impl);
fn unload_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st, "unload"));
    h.check()?;
    let name = st
        .to_bytes(2)
        .ok_or_else(|| bad_arg(st, 2, 1, "unload", "a chunk name (string)"))?;
    let removed = h.pool.chunks.remove(name);
    if removed {
        h.last_chunk = None;
    }
    st.push_bool(removed);
    Ok(1)
}

crate::lua_function!(pub fn invoke => invoke_impl);
fn invoke_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st, "invoke"));
    // the arguments stay on the stack: `push_outcome` pushes the results above them
    let call = h.prepare(st, "invoke")?;
    if let Err(e) = h.pool.submit(call.clone()) {
        h.recycle(call);
        return Err(e);
    }
    if !call.is_done() {
        h.pool.note_host_cpu();
        // SAFETY: `h.main` is the main thread of the state that made the pool, and a userdata
        // belongs to one state: `st` is one of its threads.
        let mut waiting = unsafe { HostWait::with_main(st, h.main) };
        while waiting.call_with(&call, None, &h.spin) != Waited::Done {
            if let Some(e) = waiting.interrupt_error("pool:invoke()") {
                // Nobody can wait for this call again: a queued one is dropped, a running one
                // goes on and keeps its record (it is not recycled).
                h.pool.cancel(&call);
                return Err(e);
            }
        }
    }
    let result = push_outcome(st, &call);
    h.recycle(call);
    result
}

crate::lua_function!(pub fn submit => submit_impl);
fn submit_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st, "submit"));
    let call = h.prepare(st, "submit")?;
    // the future goes above the arguments (a C function has `LUA_MINSTACK` free slots there)
    // The future comes first: if it cannot be created, nothing was submitted that nobody holds.
    if let Err(e) = userdata::push(
        st,
        FutureHandle::new(call.clone(), h.pool.clone(), h.main),
        UV_FUTURE,
    ) {
        h.recycle(call);
        return Err(e);
    }
    if let Err(e) = h.pool.submit(call.clone()) {
        userdata::finalize::<FutureHandle>(st, -1);
        h.recycle(call);
        return Err(e);
    }
    Ok(1)
}

crate::lua_function!(pub fn stats => stats_impl);
/// `pool:stats([{ reset = true }])`: the counts, the peaks and the latency figures (see the
/// README); with `reset`, the peaks and the latency figures start a new interval after this
/// reading (the counters and `vmpool.metrics()` never go back).
fn stats_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st, "stats"));
    h.pool.check_process()?;
    let reset = stats_reset(st)?;
    let s = h.pool.stats_reset(reset);
    let latency = [
        (
            "wait",
            h.pool.wait.snapshot(reset).nanos(crate::clock::nanos),
        ),
        ("run", h.pool.run.snapshot(reset).nanos(crate::clock::nanos)),
    ];
    let fields: [(&str, u64); 20] = [
        ("core", s.core as u64),
        ("noncore", s.noncore as u64),
        ("idle", s.idle as u64),
        ("busy", s.busy as u64),
        ("waiting", s.waiting as u64),
        ("threads", s.threads as u64),
        ("created", s.created),
        ("closed", s.closed),
        ("idle_closed", s.idle_closed),
        ("invokes", s.invokes),
        ("succeeded", s.succeeded),
        ("errors", s.errors),
        ("failed", s.failed),
        ("time_limits", s.time_limits),
        ("memory_limits", s.memory_limits),
        ("rejected", s.rejected),
        ("timeouts", s.timeouts),
        ("cancelled", s.cancelled),
        ("peak_busy", s.peak_busy as u64),
        ("peak_waiting", s.peak_waiting as u64),
    ];
    st.set_top(1);
    protected(st, 0, || "building the stats table".into(), &mut |st| {
        st.create_table(0, fields.len() as c_int + 2);
        for &(k, v) in &fields {
            st.push_integer(v as i64);
            st.raw_set_str(-2, k);
        }
        for (name, l) in &latency {
            st.create_table(0, 7);
            st.push_integer(l.count as i64);
            st.raw_set_str(-2, "count");
            for (k, ns) in [
                ("sum", l.sum),
                ("max", l.max),
                ("p50", l.p50),
                ("p90", l.p90),
                ("p99", l.p99),
                ("p999", l.p999),
            ] {
                st.push_number(ns as f64 * 1e-9);
                st.raw_set_str(-2, k);
            }
            st.raw_set_str(-2, name);
        }
        1
    })
}

/// `pool:stats{ reset = true }`: false without a table or without the field.
fn stats_reset(st: State) -> Result<bool, Error> {
    use crate::lua::{TBOOLEAN, TNIL, TNONE, TTABLE};
    let bad = |what: String| {
        Error::BadArgument(format!(
            "bad argument #1 to 'stats': {what} (pass nothing, or {{ reset = true }} to start a new interval)"
        ))
    };
    match st.type_of(2) {
        TNIL | TNONE => return Ok(false),
        TTABLE => {}
        _ => {
            return Err(bad(format!(
                "expected an options table, got {}",
                st.type_name(2)
            )))
        }
    }
    if !st.check_stack(3) {
        return Err(Error::no_stack("reading the options of stats"));
    }
    if let Some(key) = crate::host::options::unknown_key(st, 2, "reset") {
        return Err(bad(format!(
            "unknown option '{key}' (stats takes only reset)"
        )));
    }
    let t = st.raw_get_str(2, "reset");
    let reset = st.to_boolean(-1);
    st.pop(1);
    match t {
        TNIL | TBOOLEAN => Ok(reset),
        _ => Err(bad(format!(
            "reset must be a boolean, got {}",
            crate::lua::type_name(t)
        ))),
    }
}

crate::lua_function!(pub fn collect => collect_impl);
/// `pool:collect()` -> number of states: a full garbage collection in every idle state, waited
/// for (states busy with a call are skipped), and what the pool keeps for reuse freed: call
/// records, and the chunk last named (which may be an old version).
fn collect_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = handle(st, "collect"));
    h.check()?;
    h.cache.clear();
    h.last_chunk = None;
    h.pool.drop_spare_calls();
    let calls = h.pool.collect_idle();
    RESULT_WAIT.with(|spin| {
        for call in &calls {
            call.wait(None, spin);
        }
    });
    st.set_top(1);
    st.push_integer(calls.len() as i64);
    Ok(1)
}

crate::lua_function!(pub fn memory => memory_impl);
/// `vmpool.memory()` -> `{ states, bytes, blocks }` held by every child state of the process.
fn memory_impl(st: State) -> Result<c_int, Error> {
    let t = crate::state_heap::totals();
    st.set_top(0);
    let fields = [
        ("states", t.states),
        ("bytes", t.bytes),
        ("blocks", t.blocks),
    ];
    protected(st, 0, || "building the memory table".into(), &mut |st| {
        st.create_table(0, fields.len() as c_int);
        for &(k, v) in &fields {
            st.push_integer(v as i64);
            st.raw_set_str(-2, k);
        }
        1
    })
}

crate::lua_function!(pub fn close => close_impl);
fn close_impl(st: State) -> Result<c_int, Error> {
    let closed = userdata::with_mut(st, 1, |h: &mut PoolHandle| -> Result<(), Error> {
        let timeout = close_timeout(st)?;
        h.closed = true;
        h.last_chunk = None;
        h.cache.clear();
        h.pool.close_within(timeout);
        Ok(())
    });
    match closed {
        Ok(r) => r.map(|()| 0),
        // a pool already finalized (seen again through resurrection) is closed: nothing to do
        Err(Access::Finalized) => close_timeout(st).map(|_| 0),
        Err(a) => Err(a.error::<PoolHandle>(|| {
            Error::BadArgument(format!(
                "bad argument #1 to 'close': expected a pool, got {} (call it as pool:close(), with a colon)",
                st.type_name(1)
            ))
        })),
    }
}

/// `pool:close{ timeout = s }`: `None` (wait for every running call) without a table, without
/// the field, or for `math.huge`.
fn close_timeout(st: State) -> Result<Option<std::time::Duration>, Error> {
    use crate::lua::{TNIL, TNONE, TNUMBER, TTABLE};
    let bad = |what: String| {
        Error::BadArgument(format!(
            "bad argument #1 to 'close': {what} (pass nothing, or a table such as {{ timeout = 0.5 }})"
        ))
    };
    match st.type_of(2) {
        TNIL | TNONE => return Ok(None),
        TTABLE => {}
        _ => {
            return Err(bad(format!(
                "expected an options table, got {}",
                st.type_name(2)
            )))
        }
    }
    if let Some(key) = crate::host::options::unknown_key(st, 2, "timeout") {
        return Err(bad(format!(
            "unknown option '{key}' (close takes only timeout)"
        )));
    }
    let t = st.raw_get_str(2, "timeout");
    let n = st.to_number(-1);
    st.pop(1);
    match t {
        TNIL => Ok(None),
        // math.huge, or longer than a duration counts: forever (as vmpool.new's durations)
        TNUMBER if n >= 0.0 => Ok(std::time::Duration::try_from_secs_f64(n).ok()),
        _ => Err(bad(format!(
            "timeout must be a non-negative number of seconds or math.huge, got {}",
            if t == TNUMBER {
                crate::error::lua_number(n)
            } else {
                crate::lua::type_name(t).to_string()
            }
        ))),
    }
}

// `<close>` (Lua 5.4): closes like `pool:close()`; its second argument is the error that ends
// the scope, not options.
crate::lua_function!(pub fn close_scope => close_scope_impl);
fn close_scope_impl(st: State) -> Result<c_int, Error> {
    st.set_top(1);
    close_impl(st)
}

// The finalizer: the host state is closing (a worker's exit, the end of a script) or dropped
// the pool, so nobody is left to wait for: running calls are stopped at once, and the threads
// still busy after `pool::STOP_GRACE` are left to end on their own.
crate::lua_function!(pub fn gc => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    // (held by a method running below: the state is closing under it, which drops it after)
    let _ = userdata::with(st, 1, |h: &PoolHandle| {
        h.pool.close_within(Some(std::time::Duration::ZERO))
    });
    userdata::finalize::<PoolHandle>(st, 1);
    Ok(0)
}

crate::lua_function!(pub fn tostring => tostring_impl);
fn tostring_impl(st: State) -> Result<c_int, Error> {
    let text = userdata::with(st, 1, |h: &PoolHandle| match h {
        h if !h.closed && h.pool.check_process().is_err() => {
            "vmpool.pool (created in another process)".to_string()
        }
        h if !h.closed => {
            let s = h.pool.stats();
            format!(
                "vmpool.pool (core={}, noncore={}, busy={}, waiting={})",
                s.core, s.noncore, s.busy, s.waiting
            )
        }
        _ => "vmpool.pool (closed)".to_string(),
    });
    let text = match text {
        Ok(text) => text,
        Err(Access::InUse) => "vmpool.pool (in use)".to_string(),
        Err(_) => "vmpool.pool (closed)".to_string(),
    };
    push_str(st, &text, || "converting a pool to a string".into())?;
    Ok(1)
}
