//! Reading the arguments of `vmpool.shared` and of a dictionary's methods (`self`, key, value,
//! exptime, flags, `incr`'s init and init_ttl, max_count, the options table) as
//! `ngx.shared.DICT` takes them: ngx's `nil, err` refusals ([`Refusal`]), its raised words
//! ([`Error::AsNgx`]) and, for input ngx lets through to undefined ends, a `vmpool:` error.

use std::ffi::c_int;
use std::sync::Arc;

use mlua::ffi;

use super::{ensure_stack, SharedHandle};
use crate::host::userdata;
use crate::lua::protect::{protected, push_str};
use crate::lua::{State, TBOOLEAN, TNIL, TNUMBER, TSTRING, TTABLE};
use crate::shared::dict::{self, Number, Scalar};
use crate::shared::{self as registry, Named, Options};
use crate::Error;

pub(super) fn bad(position: c_int, method: &str, what: String) -> Error {
    Error::BadArgument(format!("bad argument #{position} to '{method}': {what}"))
}

/// The dictionary `self` of a method call (stack slot 1, a handle table); anything else (a method
/// called with `.` instead of `:`) raises ngx's `bad "zone" argument`. Fixes the arguments' slots
/// (missing ones become nil, extra ones go) and pushes the handle's userdata above them: a key
/// converted later is pushed above that, so it lands in no argument's slot.
#[inline(always)]
pub(super) fn this<'a>(st: State) -> Result<&'a Named, Error> {
    if st.type_of(1) != TTABLE {
        return Err(Error::AsNgx(r#"bad "zone" argument"#.into()));
    }
    st.set_top(ARGS);
    st.raw_geti(1, 1);
    let p: *const Named = userdata::with(st, ARGS + 1, |h: &SharedHandle| Arc::as_ptr(&h.named))
        .map_err(|_| Error::AsNgx(r#"bad "zone" argument"#.into()))?;
    // SAFETY: `p` points into the `Arc` held by the userdata at stack slot ARGS + 1 of the running
    // C function, which stays there until the function returns (the methods only push above it);
    // only `__gc` (which cannot run on a value that is on the stack) drops the `Arc`; so the
    // `Named` outlives every use of the reference, which the callers confine to the call. (No
    // `Arc` clone: a Lua error that skips Rust destructors would leak its count.)
    let named: &'a Named = unsafe { &*p };
    named.check_process()?;
    Ok(named)
}

/// Stack slots of a method call's arguments, `self` included (`incr` and `set` take the most).
const ARGS: c_int = 5;

/// An error ngx returns as `nil, err` for bad input, in its words.
pub(super) type Refusal = &'static str;

/// How a key that is neither a string nor a number is taken: resty.core's methods turn it into a
/// string with `tostring` (`true` is the key "true"); ngx_lua's list methods refuse it
/// (`luaL_checklstring`), and so do these, with a `vmpool:` error.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Keys {
    AnyType,
    StringOrNumber,
}

/// The key at slot 2: a string, or a number turned into its string (as ngx does), or with
/// [`Keys::AnyType`] any value through `tostring`; `Err` with ngx's words for a key it refuses
/// (nil, empty, over [`dict::MAX_KEY`] bytes). A converted key is a copy pushed on the stack,
/// which then holds the bytes for the rest of the call.
#[inline(always)]
pub(super) fn key<'a>(
    st: State,
    method: &str,
    keys: Keys,
) -> Result<Result<&'a [u8], Refusal>, Error> {
    if st.type_of(2) == TSTRING {
        let k = st.string_bytes(2);
        if !k.is_empty() && k.len() <= dict::MAX_KEY {
            return Ok(Ok(k));
        }
    }
    other_key(st, method, keys)
}

/// [`key`] for every key but a string of an allowed length.
#[inline(never)]
fn other_key<'a>(st: State, method: &str, keys: Keys) -> Result<Result<&'a [u8], Refusal>, Error> {
    let idx = 2;
    let k = match st.type_of(idx) {
        TNIL | crate::lua::TNONE => return Ok(Err("nil key")),
        TSTRING => st.string_bytes(idx),
        TNUMBER => {
            if !st.check_stack(4) {
                return Err(Error::no_stack("a shared dictionary's arguments"));
            }
            let doing = || format!("converting the key of dict:{method}()");
            if st.to_integer_exact(idx).is_none() {
                // a float as LuaJIT's tostring shows it (`%.14g`), as ngx's keys are: `2.0` is
                // "2" on every runtime (Lua 5.3 and 5.4 would say "2.0")
                let text = crate::error::lua_number(st.to_number(idx));
                push_str(st, &text, doing)?;
            } else {
                // converting a number to a string allocates: protected, the string is left on top
                st.push_value(idx);
                protected(st, 1, doing, &mut |st| {
                    st.string_bytes(1);
                    1
                })?;
            }
            st.string_bytes(-1)
        }
        TBOOLEAN if keys == Keys::AnyType => {
            if st.to_boolean(idx) {
                b"true".as_slice()
            } else {
                b"false".as_slice()
            }
        }
        _ if keys == Keys::AnyType => tostring_key(st, idx, method)?,
        t => {
            return Err(bad(
                idx - 1,
                method,
                format!(
                    "the key must be a string or a number (got {})",
                    crate::lua::type_name(t)
                ),
            ))
        }
    };
    if k.is_empty() {
        return Ok(Err("empty key"));
    }
    if k.len() > dict::MAX_KEY {
        return Ok(Err("key too long"));
    }
    Ok(Ok(k))
}

/// The key at `idx` (a table, a function, ...) as the global `tostring` turns it into a string,
/// `__tostring` included, left on top of the stack.
fn tostring_key<'a>(st: State, idx: c_int, method: &str) -> Result<&'a [u8], Error> {
    if !st.check_stack(4) {
        return Err(Error::no_stack("a shared dictionary's arguments"));
    }
    let doing = || format!("converting the key of dict:{method}() with tostring");
    st.push_value(idx);
    protected(st, 1, doing, &mut |st| {
        st.push_globals();
        st.raw_get_str(-1, "tostring");
        st.remove(-2);
        st.push_value(1);
        // SAFETY: inside the protected call, where a Lua error (tostring missing or a raising
        // `__tostring`) is caught; the function and its argument are on top of the stack.
        unsafe { ffi::lua_call(st.as_ptr(), 1, 1) };
        1
    })?;
    if st.type_of(-1) != TSTRING {
        return Err(bad(
            idx - 1,
            method,
            format!(
                "tostring turned the key into a {}, not a string",
                st.type_name(-1)
            ),
        ));
    }
    Ok(st.string_bytes(-1))
}

fn number_at(st: State, idx: c_int) -> Number {
    match st.to_integer_exact(idx) {
        Some(i) => Number::Int(i),
        None => Number::Float(st.to_number(idx)),
    }
}

/// A number to store (a value, a list item) at `idx`. NaN is refused: it equals nothing, itself
/// included, so a stored NaN could never be compared, counted or found by the code that reads
/// it back; and it is never what the caller meant to store.
pub(super) fn stored_number(st: State, idx: c_int, method: &str) -> Result<Number, Error> {
    let n = number_at(st, idx);
    if n.as_f64().is_nan() {
        return Err(bad(
            idx - 1,
            method,
            "the value is NaN, which cannot be stored in a shared dictionary".into(),
        ));
    }
    Ok(n)
}

/// A value to store: nil (`None`), a boolean, a number or a string; any other type is ngx's
/// `"bad value type"`.
pub(super) fn value(
    st: State,
    idx: c_int,
    method: &str,
) -> Result<Result<Option<Scalar>, Refusal>, Error> {
    Ok(Ok(Some(match st.type_of(idx) {
        TNIL | crate::lua::TNONE => return Ok(Ok(None)),
        TBOOLEAN => Scalar::Bool(st.to_boolean(idx)),
        TNUMBER => Scalar::Num(stored_number(st, idx, method)?),
        TSTRING => Scalar::Str(copy(st.string_bytes(idx), method)?),
        _ => return Ok(Err(BAD_VALUE_TYPE)),
    })))
}

pub(super) const BAD_VALUE_TYPE: Refusal = "bad value type";

/// A copy of a value's bytes for the dictionary, or a `vmpool:` error if the system refuses the
/// memory (a value may be as large as the dictionary's capacity).
pub(super) fn copy(b: &[u8], method: &str) -> Result<Box<[u8]>, Error> {
    dict::try_copy(b).ok_or_else(|| no_memory_for_copy(method))
}

pub(super) fn no_memory_for_copy(method: &str) -> Error {
    Error::NoMemory {
        doing: format!("copying the value for dict:{method}()"),
    }
}

/// A TTL in seconds at `idx` (nil = none), as nanoseconds (0 = never); `required` refuses nil.
/// `strings`: a numeric string is converted, where resty.core converts it (`incr`'s `init_ttl`
/// with `tonumber`, `expire`'s `exptime` by arithmetic); `set` & co. refuse one, as resty.core
/// does (its `exptime < 0` raises for a string, and LuaJIT's FFI takes no string as `flags`).
pub(super) fn ttl_arg(
    st: State,
    idx: c_int,
    method: &str,
    name: &str,
    required: bool,
    strings: bool,
) -> Result<u64, Error> {
    let t = st.type_of(idx);
    // SAFETY: `lua_isnumber` only inspects the slot.
    let numeric = t == TNUMBER
        || (strings && t == TSTRING && unsafe { ffi::lua_isnumber(st.as_ptr(), idx) } != 0);
    match t {
        TNIL | crate::lua::TNONE if !required => Ok(0),
        _ if numeric => {
            let s = st.to_number(idx);
            if s.is_nan() || s < 0.0 {
                Err(bad(
                    idx - 1,
                    method,
                    format!("'{name}' must be a non-negative number of seconds, 0 for no expiry (got {s})"),
                ))
            } else {
                Ok(dict::ttl_ns(s))
            }
        }
        _ => Err(bad(
            idx - 1,
            method,
            format!(
                "'{name}' must be a non-negative number of seconds, 0 for no expiry (got {})",
                describe(st, idx)
            ),
        )),
    }
}

/// The value at `idx` for a message: a number or a short string as it is, else its type.
fn describe(st: State, idx: c_int) -> String {
    match st.type_of(idx) {
        TNUMBER => show_number(number_at(st, idx)),
        TSTRING if st.string_bytes(idx).len() <= 40 => {
            format!(
                "\"{}\"",
                String::from_utf8_lossy(st.string_bytes(idx)).escape_debug()
            )
        }
        t => crate::lua::type_name(t).to_string(),
    }
}

/// Whether the optional argument at `idx` is not given: nil, none, or `false`, which resty.core
/// also takes for "not given" (its `if not exptime`, `if not flags`, `if init`), so that code
/// such as `dict:set(k, v, opts.ttl or false)` runs unchanged.
pub(super) fn not_given(st: State, idx: c_int) -> bool {
    match st.type_of(idx) {
        TNIL | crate::lua::TNONE => true,
        TBOOLEAN => !st.to_boolean(idx),
        _ => false,
    }
}

/// An optional non-negative integer argument (flags, max_count).
pub(super) fn uint_arg(
    st: State,
    idx: c_int,
    method: &str,
    name: &str,
    default: u64,
    max: u64,
) -> Result<u64, Error> {
    match st.type_of(idx) {
        TNIL | crate::lua::TNONE => Ok(default),
        TNUMBER => {
            let n = st.to_number(idx);
            if n >= 0.0 && n <= max as f64 && n.fract() == 0.0 {
                Ok(n as u64)
            } else {
                Err(bad(
                    idx - 1,
                    method,
                    format!("'{name}' must be an integer from 0 to {max} (got {n})"),
                ))
            }
        }
        t => Err(bad(
            idx - 1,
            method,
            format!(
                "'{name}' must be an integer from 0 to {max} (got {})",
                crate::lua::type_name(t)
            ),
        )),
    }
}

/// A number argument (incr's value and init): a number or a numeric string (resty.core takes
/// them with `tonumber`); NaN refused.
pub(super) fn number_arg(st: State, idx: c_int, method: &str, name: &str) -> Result<Number, Error> {
    let n = match st.type_of(idx) {
        TNUMBER => number_at(st, idx),
        // SAFETY: `lua_isnumber` only inspects the slot.
        TSTRING if unsafe { ffi::lua_isnumber(st.as_ptr(), idx) } != 0 => string_number(st, idx)?,
        _ => {
            return Err(bad(
                idx - 1,
                method,
                format!(
                    "'{name}' must be a number or a numeric string (got {})",
                    describe(st, idx)
                ),
            ))
        }
    };
    if n.as_f64().is_nan() {
        return Err(bad(idx - 1, method, format!("'{name}' is NaN")));
    }
    Ok(n)
}

/// The number of the numeric string at `idx`, converted as Lua's own arithmetic converts it: on
/// Lua 5.4 and 5.5 an integer string ("3", "0x10") gives an integer, so `incr(k, "3")` on an integer
/// keeps it an integer as `0 + "3"` does there. Lua 5.3's arithmetic turns every string into a
/// float (`0 + "3"` is 3.0), and so does this; elsewhere every number is a float anyway.
fn string_number(st: State, idx: c_int) -> Result<Number, Error> {
    #[cfg(any(feature = "lua54", feature = "lua55"))]
    {
        if !st.check_stack(1) {
            return Err(Error::no_stack("a shared dictionary's arguments"));
        }
        // SAFETY: the slot holds a string (the caller checked it converts in whole, so it has
        // no embedded NUL before its end), which `lua_tolstring` returns without changing the
        // slot, NUL-terminated; `lua_stringtonumber` reads it and pushes a number (no
        // allocation, so no error), within the stack space checked above.
        let converted = unsafe {
            let p = ffi::lua_tolstring(st.as_ptr(), idx, std::ptr::null_mut());
            ffi::lua_stringtonumber(st.as_ptr(), p) != 0
        };
        if converted {
            let n = number_at(st, -1);
            st.pop(1);
            return Ok(n);
        }
    }
    Ok(Number::Float(st.to_number(idx)))
}

/// Reads `{ capacity = bytes | "10m", shards = n }` at `idx` (nil = defaults).
pub(super) fn options(st: State, idx: c_int) -> Result<Options, Error> {
    let mut opts = Options::default();
    match st.type_of(idx) {
        TNIL | crate::lua::TNONE => return Ok(opts),
        TTABLE => {}
        t => {
            return Err(Error::BadArgument(format!(
                "bad argument #2 to 'shared': expected an options table or nothing, got {}",
                crate::lua::type_name(t)
            )))
        }
    }
    ensure_stack(st, 4)?;
    st.push_nil();
    while st.next(idx) {
        let field = st
            .to_bytes(-2)
            .map(|b| String::from_utf8_lossy(b).into_owned());
        // the value itself in the message (`2048.5`, `"10x"`), not just its type
        let bad_value = |what: &str| {
            Error::BadArgument(format!(
                "option '{}' to vmpool.shared must be {what} (got {})",
                field.as_deref().unwrap_or("?"),
                describe(st, -1)
            ))
        };
        match field.as_deref() {
            Some("capacity") => {
                let c = match st.type_of(-1) {
                    TNUMBER => {
                        let n = st.to_number(-1);
                        (n >= 0.0 && n.fract() == 0.0 && n < 2f64.powi(53)).then_some(n as usize)
                    }
                    TSTRING => registry::parse_size(&String::from_utf8_lossy(st.string_bytes(-1))),
                    _ => None,
                };
                opts.capacity = Some(c.ok_or_else(|| {
                    bad_value(&format!(
                        "a size in bytes, at least {}: an integer, or a string such as \"512k\" or \"10m\"",
                        registry::MIN_CAPACITY
                    ))
                })?);
            }
            Some("shards") => {
                let n = st.to_number(-1);
                if st.type_of(-1) != TNUMBER || n.fract() != 0.0 || n < 1.0 {
                    return Err(bad_value(&format!(
                        "an integer from 1 to {}",
                        registry::MAX_SHARDS
                    )));
                }
                opts.shards = Some(n.min(1e9) as usize);
            }
            _ => {
                return Err(Error::BadArgument(format!(
                    "unknown option '{}' to vmpool.shared (options are capacity and shards)",
                    field.as_deref().unwrap_or("(not a string)")
                )))
            }
        }
        st.pop(1);
    }
    Ok(opts)
}

/// The optional exptime of `set` & co. at `idx`: a negative number raises resty.core's
/// `bad "exptime" argument`; NaN and other types a `vmpool:` error ([`ttl_arg`]).
pub(super) fn exptime_arg(st: State, idx: c_int, method: &str) -> Result<u64, Error> {
    if not_given(st, idx) {
        return Ok(0);
    }
    if st.type_of(idx) == TNUMBER && st.to_number(idx) < 0.0 {
        return Err(Error::AsNgx(r#"bad "exptime" argument"#.into()));
    }
    ttl_arg(st, idx, method, "exptime", false, false)
}

/// The optional flags of `set` & co. at `idx`: an integer from 0 to 2^32 - 1 (not given = 0).
pub(super) fn flags_arg(st: State, idx: c_int, method: &str) -> Result<u32, Error> {
    if not_given(st, idx) {
        return Ok(0);
    }
    Ok(uint_arg(st, idx, method, "flags", 0, u32::MAX as u64)? as u32)
}

/// `incr`'s optional `init` (slot 4) and `init_ttl` (slot 5, nanoseconds): `None` without `init`.
/// A non-number raises resty.core's `bad init arg` / `bad init_ttl arg`, a negative `init_ttl`
/// its `bad "init_ttl" argument`, an `init_ttl` without `init` its `must provide "init"`.
pub(super) fn incr_init(st: State) -> Result<Option<(Number, u64)>, Error> {
    let has_init = !not_given(st, 4);
    let init = if has_init {
        // SAFETY: `lua_isnumber` only inspects the slot.
        if unsafe { ffi::lua_isnumber(st.as_ptr(), 4) } == 0 {
            return Err(Error::AsNgx(format!(
                "bad init arg: number expected, got {}",
                st.type_name(4)
            )));
        }
        Some(number_arg(st, 4, "incr", "init")?)
    } else {
        None
    };
    let init_ttl = match st.type_of(5) {
        TNIL | crate::lua::TNONE => 0,
        t => {
            // SAFETY: `lua_isnumber` only inspects the slot.
            if unsafe { ffi::lua_isnumber(st.as_ptr(), 5) } == 0 {
                return Err(Error::AsNgx(format!(
                    "bad init_ttl arg: number expected, got {}",
                    crate::lua::type_name(t)
                )));
            }
            if st.to_number(5) < 0.0 {
                return Err(Error::AsNgx(r#"bad "init_ttl" argument"#.into()));
            }
            if !has_init {
                return Err(Error::AsNgx(
                    r#"must provide "init" when providing "init_ttl""#.into(),
                ));
            }
            ttl_arg(st, 5, "incr", "init_ttl", false, true)?
        }
    };
    Ok(init.map(|i| (i, init_ttl)))
}

/// A number as Lua prints it (`inf`, `-inf`, `2.5`, `1e+300`, `3`), for messages: floats as the
/// other messages quote them ([`crate::error::lua_number`]).
pub(super) fn show_number(n: Number) -> String {
    match n {
        Number::Int(i) => i.to_string(),
        Number::Float(f) => crate::error::lua_number(f),
    }
}
