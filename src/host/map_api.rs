//! `pool:map(name, fn, list [, options])`: `fn` once per item of `list`, in batches (one job
//! carries many items, so the cost of a dispatch is paid once per batch, not per item), with the
//! results in list order. This is its Lua face: the arguments and options, the blocking loop, and
//! the map object the coroutine-aware variants drive; the run itself is `host/map_run.rs`.
//!
//! The blocking `pool:map` runs the whole loop natively. The coroutine-aware variants
//! (`co_map` under `vmpool.run` and in OpenResty, in `vmpool.lua` and `ngx.lua`) hold a
//! `MapRun` in a userdata and drive it step by step: `m:_step(list, results, errors)` does what
//! can be done without waiting, and the scheduler is told which call to wake the coroutine for
//! (`notifier:_watch(m)`, `m:_subscribe(notifier, token)`).

use std::ffi::c_int;

use crate::call::Waited;
use crate::host::call_io::{bad_arg, HostWait, PoolHandle};
use crate::host::map_run::{MapOptions, MapRun};
use crate::host::notifier_api::NotifierHandle;
use crate::host::userdata::{self, Frame, Held, UV_MAP};
use crate::lua::protect::{protected, push_str};
use crate::lua::{State, TBOOLEAN, TNIL, TNONE, TNUMBER, TSTRING, TTABLE};
use crate::Error;

const KNOWN: &[&str] = &["batch", "errors", "unpack"];

/// Runs `f` on the pool `self` of `method` (slot `idx`), held while `f` runs.
fn with_pool<R>(
    st: State,
    idx: c_int,
    method: &str,
    f: impl FnOnce(&mut PoolHandle) -> Result<R, Error>,
) -> Result<R, Error> {
    userdata::with_mut(st, idx, f).map_err(|a| {
        a.error::<PoolHandle>(|| {
            Error::BadArgument(format!(
                "bad argument #1 to '{method}': expected a pool, got {} (call it as pool:{method}(...), with a colon)",
                st.type_name(idx)
            ))
        })
    })?
}

/// The map `self` at slot 1, held for the caller's frame (`crate::hold!(m = map_handle(st))`).
#[inline]
fn map_handle(f: &Frame, st: State) -> Result<Held<'_, MapRun>, Error> {
    userdata::hold(f, st, 1).map_err(|a| {
        a.error::<MapRun>(|| Error::private("a map's method", "a map as its first argument"))
    })
}

/// The notifier at `idx` of `method`, held for the caller's frame.
#[inline]
fn notifier_at<'f>(
    f: &'f Frame,
    st: State,
    idx: c_int,
    method: &str,
) -> Result<Held<'f, NotifierHandle>, Error> {
    userdata::hold(f, st, idx)
        .map_err(|a| a.error::<NotifierHandle>(|| Error::private(method, "a notifier")))
}

/// Reads the options table at `idx` (nil or none: the defaults).
/// `position` is the options' argument number, for messages.
fn options(st: State, idx: c_int, position: c_int, method: &str) -> Result<MapOptions, Error> {
    let mut o = MapOptions {
        unpack: false,
        collect: false,
        batch: None,
    };
    match st.type_of(idx) {
        TNIL | TNONE => return Ok(o),
        TTABLE => {}
        _ => {
            return Err(bad_arg(
                st,
                idx,
                position,
                method,
                "a table of options or nil",
            ))
        }
    }
    if !st.check_stack(3) {
        return Err(Error::no_stack("reading the options of pool:map"));
    }
    let top = st.top();
    let wrong = |what: &str, expected: &str, st: State| {
        Error::BadArgument(format!(
            "bad argument #{position} to '{method}': option '{what}' must be {expected} (got {})",
            describe(st, -1)
        ))
    };
    st.push_nil();
    let mut result = Ok(());
    while st.next(idx) {
        let key = (st.type_of(-2) == TSTRING)
            .then(|| st.to_bytes(-2))
            .flatten()
            .and_then(|b| std::str::from_utf8(b).ok())
            .filter(|k| KNOWN.contains(k));
        let r = match key {
            Some("unpack") if st.type_of(-1) == TBOOLEAN => {
                o.unpack = st.to_boolean(-1);
                Ok(())
            }
            Some("unpack") => Err(wrong("unpack", "a boolean", st)),
            Some("errors") => match st.to_bytes(-1).filter(|_| st.type_of(-1) == TSTRING) {
                Some(b"stop") => {
                    o.collect = false;
                    Ok(())
                }
                Some(b"collect") => {
                    o.collect = true;
                    Ok(())
                }
                _ => Err(wrong("errors", "\"stop\" or \"collect\"", st)),
            },
            Some(_) => {
                let n = st.to_number(-1);
                if st.type_of(-1) == TNUMBER && n >= 1.0 && n.fract() == 0.0 && n <= 1e9 {
                    o.batch = Some(n as usize);
                    Ok(())
                } else {
                    Err(wrong(
                        "batch",
                        "a positive integer (items per batch, at most 1e9)",
                        st,
                    ))
                }
            }
            None => Err(Error::BadArgument(format!(
                "bad argument #{position} to '{method}': unknown option {} (known options: {})",
                describe(st, -2),
                KNOWN.join(", ")
            ))),
        };
        st.pop(1);
        if r.is_err() {
            result = r;
            break;
        }
    }
    st.set_top(top);
    result.map(|()| o)
}

/// Checks `pool:METHOD(name, fn, list [, options])` (or `pool:METHOD(fn, list [, options])`)
/// with the pool at `base - 1` and sets a map up (nothing is submitted yet). Returns it with the
/// list's slot.
fn start(
    st: State,
    h: &mut PoolHandle,
    base: c_int,
    method: &str,
) -> Result<(MapRun, c_int), Error> {
    h.check()?;
    if st.type_of(base) == crate::lua::TFUNCTION {
        if st.type_of(base + 1) != TTABLE {
            return Err(bad_arg(st, base + 1, 2, method, "a list of items (table)"));
        }
        let opts = options(st, base + 2, 3, method)?;
        let run = MapRun::of_function(h, st, base, st.raw_len(base + 1), opts)?;
        return Ok((run, base + 1));
    }
    if st.type_of(base) != TSTRING {
        return Err(bad_arg(
            st,
            base,
            1,
            method,
            "a chunk name (string) or a function",
        ));
    }
    if st.type_of(base + 1) != TSTRING {
        return Err(bad_arg(st, base + 1, 2, method, "a function name (string)"));
    }
    if st.type_of(base + 2) != TTABLE {
        return Err(bad_arg(st, base + 2, 3, method, "a list of items (table)"));
    }
    let opts = options(st, base + 3, 4, method)?;
    let run = MapRun::new(
        h,
        st.to_bytes(base).unwrap_or_default(),
        st.to_bytes(base + 1).unwrap_or_default(),
        st.raw_len(base + 2),
        opts,
    )?;
    Ok((run, base + 2))
}

/// A value for a message: strings quoted, numbers and booleans as Lua shows them, else the type.
fn describe(st: State, idx: c_int) -> String {
    match st.type_of(idx) {
        TSTRING => format!(
            "'{}'",
            String::from_utf8_lossy(st.to_bytes(idx).unwrap_or_default())
        ),
        TNUMBER => crate::error::lua_number(st.to_number(idx)),
        TBOOLEAN => st.to_boolean(idx).to_string(),
        _ => st.type_name(idx).to_string(),
    }
}

/// Pushes a results table for `len` items (and an errors table if `collect`). Returns the
/// slot of each (0 for no errors table).
fn push_tables(st: State, len: usize, collect: bool) -> Result<(c_int, c_int), Error> {
    let narr = len.min(1 << 26) as c_int;
    protected(
        st,
        0,
        || "creating the results of a map".into(),
        &mut |st| {
            st.create_table(narr, 0);
            if collect {
                st.create_table(0, 0);
            }
            1 + c_int::from(collect)
        },
    )?;
    let top = st.top();
    Ok(if collect { (top - 1, top) } else { (top, 0) })
}

crate::lua_function!(pub fn map => map_impl);
/// `pool:map(name, fn, list [, options])` -> results (and errors with `errors = "collect"`).
fn map_impl(st: State) -> Result<c_int, Error> {
    let ((mut run, list), main) =
        with_pool(st, 1, "map", |h| Ok((start(st, h, 2, "map")?, h.main)))?;
    st.set_top(list + 1);
    let (results, errors) = push_tables(st, run.len(), run.collects())?;
    loop {
        if run.step(st, list, results, errors)? {
            break;
        }
        if let Some(call) = run.wait_target() {
            run.pool().note_host_cpu();
            // SAFETY: `main` is null or the main thread of the state that made the pool, and a
            // userdata belongs to one state: `st` is one of its threads.
            let mut waiting = unsafe { HostWait::with_main(st, main) };
            if waiting.call(call, None) == Waited::Interrupted {
                // Ctrl-C: the map's calls are stopped as when an item fails (dropping the run)
                if let Some(e) = waiting.interrupt_error("pool:map()") {
                    return Err(e);
                }
            }
        }
    }
    Ok(1 + c_int::from(errors != 0))
}

crate::lua_function!(pub fn new_map => new_map_impl);
/// `native._map(pool, name, fn, list [, options])` -> map, results [, errors]: a map for a
/// scheduler to drive with `m:_step`.
fn new_map_impl(st: State) -> Result<c_int, Error> {
    let (run, _) = with_pool(st, 1, "co_map", |h| start(st, h, 2, "co_map"))?;
    let (len, collect) = (run.len(), run.collects());
    st.set_top(0);
    userdata::push(st, run, UV_MAP)?;
    push_tables(st, len, collect)?;
    Ok(st.top())
}

crate::lua_function!(pub fn step => step_impl);
/// `m:_step(list, results [, errors])` -> true once done, false to wait (see `_ready`,
/// `_subscribe`, `notifier:_watch`); raises the map's error once nothing is in flight.
fn step_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(m = map_handle(st));
    let errors = if st.type_of(4) == TTABLE { 4 } else { 0 };
    let done = m.step(st, 2, 3, errors)?;
    st.push_bool(done);
    Ok(1)
}

crate::lua_function!(pub fn ready => ready_impl);
/// `m:_ready()`: whether the next step can run without waiting.
fn ready_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(m = map_handle(st));
    st.push_bool(m.wait_target().is_none());
    Ok(1)
}

crate::lua_function!(pub fn cancel => cancel_impl);
/// `m:_cancel()`: gives the map up (its batches are cancelled; nobody takes its results).
fn cancel_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(m = map_handle(st));
    m.fail(Error::Cancelled);
    Ok(0)
}

crate::lua_function!(pub fn subscribe => subscribe_impl);
/// `m:_subscribe(notifier, token)` -> whether it subscribed (false: step again at once): the
/// notifier queues `token` when the batch the map waits for finishes.
fn subscribe_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(m = map_handle(st));
    crate::hold!(handle = notifier_at(st, 2, "m:_subscribe"));
    if st.type_of(3) != TNUMBER {
        return Err(Error::private("m:_subscribe", "a token"));
    }
    let token = st.to_number(3) as u64;
    let subscribed = m
        .wait_target()
        .is_some_and(|call| handle.waits.subscribe(call, token));
    st.push_bool(subscribed);
    Ok(1)
}

crate::lua_function!(pub fn tostring => tostring_impl);
fn tostring_impl(st: State) -> Result<c_int, Error> {
    let text = match userdata::with(st, 1, |m: &MapRun| m.describe()) {
        Ok(what) => format!("vmpool.map ({what})"),
        Err(userdata::Access::InUse) => "vmpool.map (in use)".into(),
        Err(_) => "vmpool.map (finished)".into(),
    };
    push_str(st, &text, || "converting a map to a string".into())?;
    Ok(1)
}

crate::lua_function!(pub fn gc => crate::host::finalize::<MapRun>);

/// The map at slot 2 of `notifier:_watch`, held for the caller's frame.
#[inline]
fn map_arg(f: &Frame, st: State) -> Result<Held<'_, MapRun>, Error> {
    userdata::hold(f, st, 2)
        .map_err(|a| a.error::<MapRun>(|| Error::private("notifier:_watch", "a map")))
}

crate::lua_function!(pub fn watch => watch_impl);
/// `notifier:_watch(map)` -> token, or nil when the map can step again at once: the token comes
/// back when the batch the map waits for finishes (vmpool.run's `co_map`). Give it back with
/// `notifier:_unwatch(token)`.
fn watch_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(handle = notifier_at(st, 1, "notifier:_watch"));
    crate::hold!(m = map_arg(st));
    match m.wait_target() {
        Some(call) => st.push_integer(handle.waits.watch(call.clone()) as i64),
        None => st.push_nil(),
    }
    Ok(1)
}
