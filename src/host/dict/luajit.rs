//! The LuaJIT FFI path of `vmpool.shared`'s busiest methods (`get`, `get_stale`, `set`,
//! `safe_set`, `add`, `safe_add`, `replace`, `delete`, `incr`, `flush_all`): plain C functions that
//! `src/lua/dict_ffi.lua` calls through `ffi.load` of this library.
//!
//! Why: a classic Lua C function ends a LuaJIT trace and pays the C API's stack traffic, and a
//! string result needs a protected push; an FFI call is compiled into the trace, and the Lua side
//! makes the string with `ffi.string`. resty.core reaches `ngx.shared.DICT` the same way.
//!
//! The functions answer only the common case and otherwise return [`FALLBACK`]: the Lua side
//! then calls the method's C function with the same arguments, which gives the answer or raises
//! the `vmpool:` error. So every message, and every case this file does not handle (a dictionary
//! inherited through `fork()`, a list, a key that is a number or has a bad length, a bad TTL or
//! flags, memory the system refuses), stays defined in one place, `mod.rs` (with `args.rs`).
//!
//! No function here raises or unwinds: they return codes, and a panic (there is none to expect)
//! aborts at the `extern "C"` boundary rather than unwinding into LuaJIT.

use std::ffi::{c_char, c_int, c_void};

use super::SharedHandle;
use crate::host::{ffi_bytes as bytes, userdata};
use crate::shared::dict::{self, Found, Kind, Mode, Number, Scalar, ValueSink};

/// Not handled here: call the method's C function.
pub const FALLBACK: c_int = -1;

/// What `vmpool_dict_get` found besides its return code (the layout `dict_ffi.lua` declares).
#[repr(C)]
pub struct DictValue {
    /// The number, when the code is `NUMBER`.
    pub num: f64,
    /// A string's length, when the code is `STRING` or `STRING_TOO_LONG`. A double, not a
    /// `size_t`: LuaJIT reads a 64-bit integer field as a boxed cdata, an allocation, and so a
    /// point where a finalizer may run and call `get` again before the caller copied the bytes
    /// out of the shared buffer; a double reads as a plain number (exact below 2^53).
    pub len: f64,
    pub flags: u32,
    /// `get_stale`: whether the value has expired.
    pub stale: c_int,
}

pub const MISSING: c_int = 0;
pub const FALSE: c_int = 1;
pub const TRUE: c_int = 2;
pub const NUMBER: c_int = 3;
/// The string is in the caller's buffer.
pub const STRING: c_int = 4;
/// The string did not fit: `len` says how long it is; the caller retries with a buffer that large.
pub const STRING_TOO_LONG: c_int = 5;

/// The dictionary of the handle whose payload is at `ud`, if it is usable in this process.
///
/// # Safety
/// `ud` is the payload of a full userdata that `vmpool.shared` made (dict_ffi.lua passes only
/// handles it registered), alive for the duration of the call.
unsafe fn named<'a>(ud: *const c_void) -> Option<&'a crate::shared::Named> {
    // SAFETY: guaranteed by the caller; `peek` checks the tag and that the value is not finalized.
    let handle = unsafe { userdata::peek::<SharedHandle>(ud) }?;
    let named = handle.named();
    named.check_process().ok()?;
    Some(named)
}

/// `dict:get(key)` (`stale` 0) or `dict:get_stale(key)` (`stale` 1) of a string key. A string
/// value is copied into `buf` (`cap` bytes) if it fits.
///
/// # Safety
/// `ud` as for [`named`]; `key` points to `klen` bytes; `buf` to `cap` writable bytes; `out` to a
/// writable [`DictValue`].
#[no_mangle]
pub unsafe extern "C" fn vmpool_dict_get(
    ud: *const c_void,
    key: *const c_char,
    klen: usize,
    stale: c_int,
    buf: *mut c_char,
    cap: usize,
    out: *mut DictValue,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let Some(named) = (unsafe { named(ud) }) else {
        return FALLBACK;
    };
    if klen == 0 || klen > dict::MAX_KEY {
        return FALLBACK;
    }
    // SAFETY: guaranteed by the caller.
    let key = unsafe { bytes(key, klen) };
    // SAFETY: guaranteed by the caller.
    let out = unsafe { &mut *out };
    let mut sink = CallerBuffer {
        buf: buf as *mut u8,
        cap,
        len: 0,
    };
    let found = named.dict.get_into(key, stale != 0, &mut sink);
    match found {
        Found::Missing => MISSING,
        Found::List | Found::NoMemory => FALLBACK,
        Found::Value {
            value,
            flags,
            stale,
        } => {
            out.flags = flags;
            out.stale = c_int::from(stale);
            match value {
                Kind::Bool(false) => FALSE,
                Kind::Bool(true) => TRUE,
                Kind::Num(Number::Int(i)) => {
                    out.num = i as f64;
                    NUMBER
                }
                Kind::Num(Number::Float(f)) => {
                    out.num = f;
                    NUMBER
                }
                Kind::Str => {
                    out.len = sink.len as f64;
                    if sink.len <= cap {
                        STRING
                    } else {
                        STRING_TOO_LONG
                    }
                }
            }
        }
    }
}

/// The FFI caller's buffer as the sink of a string value: the bytes go straight into it if they
/// fit (one copy, no thread-local vector); their length is kept either way, so that the caller
/// can ask again with a buffer of that size.
struct CallerBuffer {
    buf: *mut u8,
    cap: usize,
    len: usize,
}

impl ValueSink for CallerBuffer {
    fn put(&mut self, bytes: &[u8]) -> bool {
        self.len = bytes.len();
        if bytes.len() <= self.cap {
            // SAFETY: `buf` has `cap` writable bytes (the caller's guarantee for the duration of
            // `vmpool_dict_get`, which owns this sink), at least `bytes.len()`; `bytes` is the
            // dictionary's own memory (a shard's entry or a read-cache copy), which never overlaps
            // a buffer the Lua side allocated.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buf, bytes.len()) };
        }
        true
    }
}

/// What `vmpool_dict_store` answers besides its return code (the layout `dict_ffi.lua` declares).
#[repr(C)]
pub struct StoreOut {
    /// ngx's message when the write was refused ("exists", "no memory", ...): static, not
    /// NUL-terminated.
    pub err: *const c_char,
    /// Its length (a double for the reason given at [`DictValue::len`]).
    pub errlen: f64,
    /// Whether live entries were evicted.
    pub forcible: c_int,
}

/// What `vmpool_dict_store` was given as the value.
pub const VALUE_NIL: c_int = 0;
pub const VALUE_FALSE: c_int = 1;
pub const VALUE_TRUE: c_int = 2;
pub const VALUE_NUMBER: c_int = 3;
pub const VALUE_STRING: c_int = 4;

/// Which write (`mode`): 0 set, 1 add, 2 replace (as [`Mode`]).
fn mode_of(mode: c_int) -> Option<Mode> {
    match mode {
        0 => Some(Mode::Set),
        1 => Some(Mode::Add),
        2 => Some(Mode::Replace),
        _ => None,
    }
}

/// `dict:set/safe_set/add/safe_add/replace(key, value, exptime, flags)` of a string key, and
/// `delete` (a set of nil). `exptime` is in seconds (0 = none), `flags` a number. Returns 1 when
/// stored, 0 when refused (`out.err`: ngx's message, such as "exists", "no memory" or, for an
/// add or replace of nil, "attempt to add or replace nil values"), and sets `out.forcible`.
///
/// # Safety
/// `ud` as for [`named`]; `key` points to `klen` bytes and `s` to `slen` bytes (when `vtype` is
/// [`VALUE_STRING`]); `out` to a writable [`StoreOut`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vmpool_dict_store(
    ud: *const c_void,
    mode: c_int,
    safe: c_int,
    key: *const c_char,
    klen: usize,
    vtype: c_int,
    num: f64,
    s: *const c_char,
    slen: usize,
    exptime: f64,
    flags: f64,
    out: *mut StoreOut,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let Some(named) = (unsafe { named(ud) }) else {
        return FALLBACK;
    };
    let Some(mode) = mode_of(mode) else {
        return FALLBACK;
    };
    if klen == 0 || klen > dict::MAX_KEY {
        return FALLBACK;
    }
    // NaN fails every comparison: the C function explains what is wrong
    let exptime_ok = exptime >= 0.0;
    // a whole number in u32's range: the cast saturates, so only such a number comes back
    // unchanged (`fract()` is a call into libm, a sixth of this function's own instructions)
    let flags_ok = f64::from(flags as u32) == flags;
    if !(exptime_ok && flags_ok) {
        return FALLBACK;
    }
    // SAFETY: guaranteed by the caller.
    let key = unsafe { bytes(key, klen) };
    let (safe, ttl, flags) = (safe != 0, dict::ttl_ns(exptime), flags as u32);
    let value = match vtype {
        // a delete for set; add and replace answer ngx's "attempt to add or replace nil values"
        VALUE_NIL => None,
        VALUE_FALSE => Some(Scalar::Bool(false)),
        VALUE_TRUE => Some(Scalar::Bool(true)),
        // NaN is refused: the C function raises the error
        VALUE_NUMBER if num.is_nan() => return FALLBACK,
        VALUE_NUMBER => Some(Scalar::Num(Number::Float(num))),
        VALUE_STRING => {
            // SAFETY: guaranteed by the caller.
            let s = unsafe { bytes(s, slen) };
            match named.dict.store_str(mode, safe, key, s, ttl, flags) {
                // SAFETY: `out` is writable (the caller's guarantee).
                Some(r) => return unsafe { answer_store(r, &mut *out) },
                None => return FALLBACK, // the C function reports the refused memory
            }
        }
        _ => return FALLBACK,
    };
    let r = named.dict.store(mode, safe, key, value, ttl, flags);
    // SAFETY: `out` is writable (the caller's guarantee).
    unsafe { answer_store(r, &mut *out) }
}

/// Fills `out` with a store's outcome; the return code of `vmpool_dict_store`.
fn answer_store(r: Result<dict::Written, dict::Refused>, out: &mut StoreOut) -> c_int {
    match r {
        Ok(w) => {
            out.forcible = c_int::from(w.forcible);
            1
        }
        Err(refused) => {
            out.forcible = c_int::from(refused.forcible);
            out.err = refused.err.as_ptr() as *const c_char;
            out.errlen = refused.err.len() as f64;
            0
        }
    }
}

/// What `vmpool_dict_incr` answers besides its return code (the layout `dict_ffi.lua` declares).
#[repr(C)]
pub struct IncrOut {
    /// The new value.
    pub num: f64,
    /// ngx's message when refused ("not found", "not a number", "no memory"): static, not
    /// NUL-terminated.
    pub err: *const c_char,
    pub errlen: f64,
    /// Whether live entries were evicted (an `incr` with `init` that created the key).
    pub forcible: c_int,
}

/// `dict:incr(key, value, init, init_ttl)` of a string key: `has_init` says whether `init` was
/// given; `init_ttl` in seconds (0 = none). Returns 1 with the sum in `out.num`, 0 when refused
/// (`out.err`), or [`FALLBACK`] for NaN (the C function raises the error).
///
/// # Safety
/// `ud` as for [`named`]; `key` points to `klen` bytes; `out` to a writable [`IncrOut`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn vmpool_dict_incr(
    ud: *const c_void,
    key: *const c_char,
    klen: usize,
    value: f64,
    has_init: c_int,
    init: f64,
    init_ttl: f64,
    out: *mut IncrOut,
) -> c_int {
    // SAFETY: guaranteed by the caller.
    let Some(named) = (unsafe { named(ud) }) else {
        return FALLBACK;
    };
    let ttl_ok = init_ttl >= 0.0; // false for NaN
    if klen == 0 || klen > dict::MAX_KEY || value.is_nan() || init.is_nan() || !ttl_ok {
        return FALLBACK;
    }
    // SAFETY: guaranteed by the caller.
    let key = unsafe { bytes(key, klen) };
    let init = (has_init != 0).then(|| (Number::Float(init), dict::ttl_ns(init_ttl)));
    // SAFETY: `out` is writable (the caller's guarantee).
    let out = unsafe { &mut *out };
    match named.dict.incr(key, Number::Float(value), init) {
        Ok((n, w)) => {
            out.num = n.as_f64();
            out.forcible = c_int::from(w.forcible);
            1
        }
        Err(r) if r.err == dict::NAN_SUM => FALLBACK,
        Err(r) => {
            out.err = r.err.as_ptr() as *const c_char;
            out.errlen = r.err.len() as f64;
            0
        }
    }
}

/// `dict:flush_all()`: 0, or [`FALLBACK`] for a handle this process cannot use.
///
/// # Safety
/// `ud` as for [`named`].
#[no_mangle]
pub unsafe extern "C" fn vmpool_dict_flush_all(ud: *const c_void) -> c_int {
    // SAFETY: guaranteed by the caller.
    let Some(named) = (unsafe { named(ud) }) else {
        return FALLBACK;
    };
    named.dict.flush_all();
    0
}
