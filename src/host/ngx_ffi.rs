//! The LuaJIT FFI path of OpenResty's `pool:co_invoke` (`src/lua/ngx.lua`, `host_go`): plain C
//! functions that file a call of at most [`MAX_VALUES`] scalar arguments, take its results when
//! they are as few scalars, hand the light thread its finished tokens, and flush the outbox.
//!
//! Why: a classic Lua C function (`notifier:_call`, `_take`, `drain`, `_flush`) ends a LuaJIT
//! trace and pays the C API's stack traffic, and `drain` makes a table per wake-up; an FFI call is
//! compiled into the request's trace (`dict/luajit.rs` does the same for `vmpool.shared`).
//!
//! The functions answer only the common case and otherwise return [`FALLBACK`] having changed
//! nothing: the Lua side then calls the notifier's C function, which gives the answer or raises
//! the `vmpool:` error. No function here raises, unwinds or calls back into Lua.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use crate::host::call_io::PoolHandle;
use crate::host::notifier_api::NotifierHandle;
use crate::host::{ffi_bytes as bytes, userdata};
use crate::value::{self, Scalar};

/// Not handled here: call the notifier's C function.
pub const FALLBACK: c_int = -1;

/// Arguments and results this path carries (`ngx.lua`'s `host_go` has as many parameters).
pub const MAX_VALUES: usize = 3;

pub const NIL: c_int = 0;
pub const FALSE: c_int = 1;
pub const TRUE: c_int = 2;
pub const NUMBER: c_int = 3;
pub const STRING: c_int = 4;

/// One argument or result (the layout `ngx.lua` declares).
#[repr(C)]
pub struct NgxValue {
    pub kind: c_int,
    pub num: f64,
    pub s: *const c_char,
    /// A string's length: a double, since LuaJIT reads a 64-bit integer field as a boxed cdata
    /// (an allocation); exact below 2^53.
    pub len: f64,
}

/// `notifier:_call(pool, chunk, fn, ...)` for `nargs` (at most [`MAX_VALUES`]) arguments at
/// `args`, each nil, a boolean, a number or a string: returns `2 * token + first` (`first`: the
/// batch's outbox was empty, see `Waits::call`), or [`FALLBACK`] when anything is not the common
/// case (a notifier inherited through `fork()`, a closed pool, an unknown chunk, a refusal).
///
/// # Safety
/// `notifier` and `pool` are the payloads of a notifier and a pool this module made (`ngx.lua`
/// passes its worker's notifier and only pools `vmpool.new` returned), alive during the call;
/// `chunk` and `func` point to `clen` and `flen` bytes; `args` to `nargs` readable values whose
/// strings the caller keeps alive during the call.
#[no_mangle]
pub unsafe extern "C" fn vmpool_ngx_call(
    notifier: *mut c_void,
    pool: *mut c_void,
    chunk: *const c_char,
    clen: usize,
    func: *const c_char,
    flen: usize,
    nargs: c_int,
    args: *const NgxValue,
) -> f64 {
    let fallback = f64::from(FALLBACK);
    // SAFETY: guaranteed by the caller; `peek_mut` checks the tags and that nothing holds them.
    let (Some(n), Some(p)) = (
        unsafe { userdata::peek_mut::<NotifierHandle>(notifier) },
        unsafe { userdata::peek_mut::<PoolHandle>(pool) },
    ) else {
        return fallback;
    };
    let Ok(nargs) = usize::try_from(nargs) else {
        return fallback;
    };
    if nargs > MAX_VALUES || n.inherited() || p.check().is_err() {
        return fallback;
    }
    // SAFETY: guaranteed by the caller.
    let (name, func) = unsafe { (bytes(chunk, clen), bytes(func, flen)) };
    let Ok(chunk) = p.chunk(name) else {
        return fallback;
    };
    let mut values = [Scalar::Nil; MAX_VALUES];
    for (i, v) in values.iter_mut().enumerate().take(nargs) {
        // SAFETY: guaranteed by the caller (`i < nargs`).
        let a = unsafe { &*args.add(i) };
        *v = match a.kind {
            NIL => Scalar::Nil,
            FALSE => Scalar::Bool(false),
            TRUE => Scalar::Bool(true),
            // numbers as the encoder writes them on LuaJIT (one number type: always a float)
            NUMBER => Scalar::Float(a.num),
            // SAFETY: guaranteed by the caller.
            STRING => Scalar::Str(unsafe { bytes(a.s, a.len as usize) }),
            _ => return fallback,
        };
    }
    let mut call = n.waits.cache.take(Some(&p.pool));
    let Some(c) = Arc::get_mut(&mut call) else {
        n.waits.cache.put(call);
        return fallback;
    };
    let d = c.data.get_mut();
    d.func.extend_from_slice(func);
    d.chunk = Some(chunk);
    if !value::write_scalars(&values[..nargs], &mut d.buf) {
        n.waits.cache.put(call);
        return fallback;
    }
    match n.waits.call(&p.pool, call) {
        Ok((token, first)) => 2.0 * token as f64 + f64::from(u8::from(first)),
        Err(_) => fallback,
    }
}

/// Copies a message of at most `out.len()` nil, boolean, number or string values into `out`,
/// their strings' bytes into `strings` (cleared first); `None` for any other message.
fn decode_scalars(buf: &[u8], out: &mut [NgxValue], strings: &mut Vec<u8>) -> Option<usize> {
    let mut values = [Scalar::Nil; MAX_VALUES];
    let count = value::read_scalars(buf, &mut values[..out.len().min(MAX_VALUES)])?;
    strings.clear();
    let mut starts = [0; MAX_VALUES];
    for (i, v) in values.iter().enumerate().take(count) {
        if let Scalar::Str(s) = v {
            starts[i] = strings.len();
            strings.extend_from_slice(s);
        }
    }
    for (i, (slot, v)) in out.iter_mut().zip(values).take(count).enumerate() {
        (slot.kind, slot.num) = match v {
            Scalar::Nil => (NIL, 0.0),
            Scalar::Bool(false) => (FALSE, 0.0),
            Scalar::Bool(true) => (TRUE, 0.0),
            // LuaJIT's lua_pushinteger makes the same double
            Scalar::Int(i) => (NUMBER, i as f64),
            Scalar::Float(f) => (NUMBER, f),
            Scalar::Str(s) => {
                // pointed to once all are copied (a later string may move the buffer)
                slot.s = strings[starts[i]..].as_ptr() as *const c_char;
                slot.len = s.len() as f64;
                (STRING, 0.0)
            }
        };
    }
    Some(count)
}

/// `notifier:_take(token)` of a call that finished with at most [`MAX_VALUES`] results, each nil,
/// a boolean, a number or a string: writes them into `out` and returns how many; a string's bytes
/// stay valid until the notifier's next call of this function. [`FALLBACK`] for anything else (a
/// call still running or unknown, an error, other results), which stays for `_take`.
///
/// # Safety
/// `notifier` as for [`vmpool_ngx_call`]; `out` points to [`MAX_VALUES`] writable values.
#[no_mangle]
pub unsafe extern "C" fn vmpool_ngx_take(
    notifier: *mut c_void,
    token: f64,
    out: *mut NgxValue,
) -> c_int {
    // SAFETY: guaranteed by the caller; `peek_mut` checks the tag and that nothing holds it.
    let Some(n) = (unsafe { userdata::peek_mut::<NotifierHandle>(notifier) }) else {
        return FALLBACK;
    };
    // (NaN too)
    if token.is_nan() || token < 1.0 {
        return FALLBACK;
    }
    let token = token as u64;
    let Some(Some(Ok(buf))) = n.waits.finished(token).map(|c| c.result()) else {
        return FALLBACK;
    };
    // SAFETY: guaranteed by the caller.
    let out = unsafe { std::slice::from_raw_parts_mut(out, MAX_VALUES) };
    let Some(count) = decode_scalars(buf, out, &mut n.ffi_strings) else {
        return FALLBACK;
    };
    // the results are copied out: the call leaves the registry as `_take` would take it
    match n.waits.take(token, &|| false) {
        Ok(call) => {
            n.waits.cache.put(call);
            count as c_int
        }
        Err(_) => FALLBACK,
    }
}

/// `notifier:drain()` into the caller's array: writes up to `cap` finished tokens into `out` and
/// returns how many (the rest stay for the next call). Never falls back.
///
/// # Safety
/// `notifier` as for [`vmpool_ngx_call`]; `out` points to `cap` writable doubles.
#[no_mangle]
pub unsafe extern "C" fn vmpool_ngx_drain(
    notifier: *mut c_void,
    out: *mut f64,
    cap: c_int,
) -> c_int {
    // SAFETY: guaranteed by the caller; `peek_mut` checks the tag and that nothing holds it.
    let Some(n) = (unsafe { userdata::peek_mut::<NotifierHandle>(notifier) }) else {
        return FALLBACK;
    };
    let cap = usize::try_from(cap).unwrap_or(0);
    // SAFETY: guaranteed by the caller.
    let out = unsafe { std::slice::from_raw_parts_mut(out, cap) };
    n.waits.drain_into(out) as c_int
}

/// `notifier:_flush()`: hands the deferred calls to their pools and returns how many (the
/// flusher of `ngx.lua`, once per turn of the event loop); [`FALLBACK`], having done nothing, if
/// the notifier is not one this module made or a method holds it.
///
/// # Safety
/// `notifier` as for [`vmpool_ngx_call`].
#[no_mangle]
pub unsafe extern "C" fn vmpool_ngx_flush(notifier: *mut c_void) -> c_int {
    // SAFETY: guaranteed by the caller; `peek_mut` checks the tag and that nothing holds it.
    let Some(n) = (unsafe { userdata::peek_mut::<NotifierHandle>(notifier) }) else {
        return FALLBACK;
    };
    c_int::try_from(n.waits.flush()).unwrap_or(c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{encode_rust, Value};

    fn slots() -> [NgxValue; MAX_VALUES] {
        std::array::from_fn(|_| NgxValue {
            kind: -1,
            num: 0.0,
            s: std::ptr::null(),
            len: 0.0,
        })
    }

    fn decoded(values: &[Value]) -> Option<Vec<Value>> {
        let mut buf = Vec::new();
        encode_rust(values, &mut buf);
        let mut out = slots();
        let mut strings = vec![b'x'; 3];
        let n = decode_scalars(&buf, &mut out, &mut strings)?;
        Some(
            out[..n]
                .iter()
                .map(|v| match v.kind {
                    NIL => Value::Nil,
                    FALSE => Value::Bool(false),
                    TRUE => Value::Bool(true),
                    NUMBER => Value::Float(v.num),
                    // SAFETY: the slot points into `strings`, alive and unchanged here
                    STRING => Value::Str(unsafe { bytes(v.s, v.len as usize) }.to_vec()),
                    k => panic!("kind {k}"),
                })
                .collect(),
        )
    }

    #[test]
    fn scalar_results_come_out_as_they_went_in_each_string_whole() {
        let long = vec![b'y'; 100_000];
        for values in [
            vec![],
            vec![Value::Nil],
            vec![Value::Bool(false), Value::Bool(true)],
            vec![
                Value::Float(1.5),
                Value::Float(-0.0),
                Value::Float(f64::NAN),
            ],
            vec![
                Value::Str(b"ab".to_vec()),
                Value::Str(long.clone()),
                Value::Str(b"a\0b".to_vec()),
            ],
            vec![Value::Str(Vec::new()), Value::Nil, Value::Float(3.0)],
        ] {
            assert_eq!(decoded(&values), Some(values));
        }
        // integers (Lua 5.3+ states) come out as the double LuaJIT makes of them
        assert_eq!(decoded(&[Value::Int(7)]), Some(vec![Value::Float(7.0)]));
    }

    #[test]
    fn anything_but_a_few_scalars_is_left_to_the_c_function() {
        let four = vec![Value::Nil; MAX_VALUES + 1];
        assert_eq!(decoded(&four), None);
        assert_eq!(decoded(&[Value::Table(vec![Value::Nil], vec![])]), None);
        assert_eq!(decoded(&[Value::Float(1.0), Value::Light(0)]), None);
        assert_eq!(decoded(&[Value::CFunction(b"print".to_vec())]), None);
    }
}
