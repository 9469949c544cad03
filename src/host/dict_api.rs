//! The Lua face of `vmpool.shared` (see `src/shared/`): `vmpool.shared(name [, options])` and
//! the methods of a dictionary, with the arguments and results of `ngx.shared.DICT`.
//!
//! Past 600 lines because each of the dictionary's 21 methods reads and checks its own arguments
//! the way `ngx.shared.DICT` takes them; the semantics are in `shared/dict.rs`.
//!
//! Results follow ngx and resty.core exactly (`true, nil, forcible`; `false, "no memory",
//! forcible`; `nil, "not found"`, ...), bad input included: where they return an error (`nil,
//! "nil key"`, `"empty key"`, `"key too long"`, `"bad value type"`) so does this, and where they
//! raise (`bad "zone" argument`, `bad "exptime" argument`, the checks of `incr`'s `init` and
//! `init_ttl`) this raises with their words ([`Error::AsNgx`]), since code written for ngx
//! matches them. Input ngx lets through to undefined ends (NaN values and TTLs, negative
//! `expire` times, flags out of range, strings as TTLs) raises a `vmpool:` error that says what
//! was wrong.
//!
//! A dictionary handle is a table, as `ngx.shared.DICT` is (`type(dict) == "table"`), whose
//! slot 1 is a full userdata holding an `Arc` of the dictionary; the methods find the userdata
//! there, as resty.core finds its zone. Both metatables are kept in the registry of each state
//! that uses one (the host and any pool state).

use std::ffi::c_int;
use std::sync::Arc;

use mlua::ffi;

use crate::host::protect::{protected, push_str};
use crate::host::userdata::{self, Tagged};
use crate::lua::{State, TBOOLEAN, TNIL, TNUMBER, TSTRING, TTABLE};
use crate::shared::dict::{self, Found, Item, Kind, Mode, Number, Refused, Scalar, Written};
use crate::shared::{self as registry, Named, Options};
use crate::Error;

/// What a dictionary userdata holds.
pub struct SharedHandle {
    named: Arc<Named>,
}

impl SharedHandle {
    /// The dictionary (for the FFI path, `dict_ffi.rs`).
    pub fn named(&self) -> &Named {
        &self.named
    }
}

impl Tagged for SharedHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0005;
    const NAME: &'static str = "shared dictionary";
    const SHARED: bool = true;
}

/// The registry field that holds the metatable of dictionary handles (the tables) in each state.
const META_KEY: &str = "vmpool.shared.dict";
/// The registry field that holds the metatable of the userdata in a handle's slot 1.
const ZONE_META_KEY: &str = "vmpool.shared.zone";

type Methods = &'static [(&'static str, ffi::lua_CFunction)];

const METHODS: Methods = &[
    ("get", get),
    ("get_stale", get_stale),
    ("set", set),
    ("safe_set", safe_set),
    ("add", add),
    ("safe_add", safe_add),
    ("replace", replace),
    ("delete", delete),
    ("incr", incr),
    ("lpush", lpush),
    ("rpush", rpush),
    ("lpop", lpop),
    ("rpop", rpop),
    ("llen", llen),
    ("ttl", ttl),
    ("expire", expire),
    ("flush_all", flush_all),
    ("flush_expired", flush_expired),
    ("get_keys", get_keys),
    ("capacity", capacity),
    ("free_space", free_space),
    ("_advance", advance),
];

fn bad(position: c_int, method: &str, what: String) -> Error {
    Error::BadArgument(format!("bad argument #{position} to '{method}': {what}"))
}

/// The dictionary `self` of a method call (stack slot 1, a handle table); anything else (a method
/// called with `.` instead of `:`) raises ngx's `bad "zone" argument`. Fixes the arguments' slots
/// (missing ones become nil, extra ones go) and pushes the handle's userdata above them: a key
/// converted later is pushed above that, so it lands in no argument's slot.
#[inline(always)]
fn this<'a>(st: State) -> Result<&'a Named, Error> {
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
type Refusal = &'static str;

/// How a key that is neither a string nor a number is taken: resty.core's methods turn it into a
/// string with `tostring` (`true` is the key "true"); ngx_lua's list methods refuse it
/// (`luaL_checklstring`), and so do these, with a `vmpool:` error.
#[derive(Clone, Copy, PartialEq)]
enum Keys {
    AnyType,
    StringOrNumber,
}

/// The key at slot 2: a string, or a number turned into its string (as ngx does), or with
/// [`Keys::AnyType`] any value through `tostring`; `Err` with ngx's words for a key it refuses
/// (nil, empty, over [`dict::MAX_KEY`] bytes). A converted key is a copy pushed on the stack,
/// which then holds the bytes for the rest of the call.
#[inline(always)]
fn key<'a>(st: State, method: &str, keys: Keys) -> Result<Result<&'a [u8], Refusal>, Error> {
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

/// The key at slot 2 of a method call, or an early return of ngx's `nil, err` for one it refuses.
macro_rules! key_or_refuse {
    ($st:expr, $method:expr, $keys:expr) => {
        match key($st, $method, $keys)? {
            Ok(k) => k,
            Err(refusal) => return nil_err($st, $method, refusal),
        }
    };
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
fn stored_number(st: State, idx: c_int, method: &str) -> Result<Number, Error> {
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
fn value(st: State, idx: c_int, method: &str) -> Result<Result<Option<Scalar>, Refusal>, Error> {
    Ok(Ok(Some(match st.type_of(idx) {
        TNIL | crate::lua::TNONE => return Ok(Ok(None)),
        TBOOLEAN => Scalar::Bool(st.to_boolean(idx)),
        TNUMBER => Scalar::Num(stored_number(st, idx, method)?),
        TSTRING => Scalar::Str(copy(st.string_bytes(idx), method)?),
        _ => return Ok(Err(BAD_VALUE_TYPE)),
    })))
}

const BAD_VALUE_TYPE: Refusal = "bad value type";

/// A copy of a value's bytes for the dictionary, or a `vmpool:` error if the system refuses the
/// memory (a value may be as large as the dictionary's capacity).
fn copy(b: &[u8], method: &str) -> Result<Box<[u8]>, Error> {
    dict::try_copy(b).ok_or_else(|| no_memory_for_copy(method))
}

fn no_memory_for_copy(method: &str) -> Error {
    Error::NoMemory {
        doing: format!("copying the value for dict:{method}()"),
    }
}

/// A TTL in seconds at `idx` (nil = none), as nanoseconds (0 = never); `required` refuses nil.
/// `strings`: a numeric string is converted, where resty.core converts it (`incr`'s `init_ttl`
/// with `tonumber`, `expire`'s `exptime` by arithmetic); `set` & co. refuse one, as resty.core
/// does (its `exptime < 0` raises for a string, and LuaJIT's FFI takes no string as `flags`).
fn ttl_arg(
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
fn not_given(st: State, idx: c_int) -> bool {
    match st.type_of(idx) {
        TNIL | crate::lua::TNONE => true,
        TBOOLEAN => !st.to_boolean(idx),
        _ => false,
    }
}

/// An optional non-negative integer argument (flags, max_count).
fn uint_arg(
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
fn number_arg(st: State, idx: c_int, method: &str, name: &str) -> Result<Number, Error> {
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

fn push_number(st: State, n: Number) {
    match n {
        Number::Int(i) => st.push_integer(i),
        Number::Float(f) => st.push_number(f),
    }
}

/// Pushes what `f` pushes (its return value: how many), in a protected call: pushing a string or
/// building a table allocates, which can fail or run `__gc` finalizers that raise, and a Lua error
/// must not unwind through this module's Rust frames (see `host::protect`). Pushing nil, booleans
/// and numbers cannot raise (the stack space is checked first) and goes without.
fn answer(st: State, method: &str, f: &mut dyn FnMut(State) -> c_int) -> Result<c_int, Error> {
    protected(st, 0, || format!("answering dict:{method}()"), f)
}

fn ensure_stack(st: State, n: c_int) -> Result<(), Error> {
    if st.check_stack(n) {
        Ok(())
    } else {
        Err(Error::no_stack("a shared dictionary's results"))
    }
}

/// `nil, err` (two results).
fn nil_err(st: State, method: &str, err: &str) -> Result<c_int, Error> {
    answer(st, method, &mut |st| {
        st.push_nil();
        st.push_str(err);
        2
    })
}

/// The three results of a store: `true, nil, forcible` or `false, err, forcible`.
fn stored(st: State, method: &str, r: Result<Written, Refused>) -> Result<c_int, Error> {
    ensure_stack(st, 3)?;
    match r {
        Ok(w) => {
            st.push_bool(true);
            st.push_nil();
            st.push_bool(w.forcible);
            Ok(3)
        }
        Err(r) => answer(st, method, &mut |st| {
            st.push_bool(false);
            st.push_str(r.err);
            st.push_bool(r.forcible);
            3
        }),
    }
}

crate::lua_function!(pub fn shared => shared_impl);
/// `vmpool.shared(name [, options])`.
fn shared_impl(st: State) -> Result<c_int, Error> {
    let name = match st.to_bytes(1) {
        Some(n) if !n.is_empty() => String::from_utf8_lossy(n).into_owned(),
        _ => {
            return Err(Error::BadArgument(format!(
            "bad argument #1 to 'shared': expected a dictionary name (non-empty string), got {}",
            st.type_name(1)
        )))
        }
    };
    let opts = options(st, 2)?;
    let named = registry::open(&name, opts)?;
    ensure_stack(st, 8)?;
    // One handle per dictionary in each state: `vmpool.shared(name)` called twice returns the
    // very same value (equal under `==` and `rawequal`, the same key in a table), as
    // `ngx.shared.DICT` does. The handles are cached weakly: a dictionary nobody holds in this
    // state lets its handle be collected.
    st.push_value(1);
    protected(
        st,
        1,
        || "looking up the state's shared dictionary handles".into(),
        &mut |st| {
            push_handles(st);
            st.push_value(1);
            st.raw_get(-2);
            1
        },
    )?;
    if with_handle(st, -1, |cached| Arc::ptr_eq(&cached.named, &named)) == Some(true) {
        return Ok(1);
    }
    st.pop(1);
    // the runner of protected calls goes in as an argument: the methods close over it
    st.push_value(crate::lua::RUNNER_UPVALUE);
    protected(
        st,
        1,
        || "creating a shared dictionary handle".into(),
        &mut |st| {
            push_metatable(st, 1, ZONE_META_KEY);
            push_metatable(st, 1, META_KEY);
            2
        },
    )?;
    let mt = st.top();
    userdata::push(st, SharedHandle { named }, mt - 1)?;
    st.push_value(1);
    st.push_value(mt);
    st.push_value(-3);
    protected(
        st,
        3,
        || "keeping the state's shared dictionary handle".into(),
        &mut |st| {
            // the handle: { zone } with the handle metatable, kept under its name
            st.create_table(1, METHODS.len() as c_int);
            st.push_value(3);
            st.raw_seti(-2, 1);
            // the methods as the handle's own fields too: `dict:get` then finds them at the
            // first lookup, without the metatable's __index
            st.push_value(2);
            st.raw_get_str(-1, "__index");
            st.remove(-2);
            st.push_nil();
            while st.next(-2) {
                st.push_value(-2);
                st.insert(-2);
                st.raw_set(-5);
            }
            st.pop(1);
            st.push_value(2);
            st.set_metatable(-2);
            push_handles(st);
            st.push_value(1);
            st.push_value(-3);
            st.raw_set(-3);
            st.pop(1);
            1
        },
    )?;
    Ok(1)
}

/// `f` of the dictionary of the handle table at `idx`, if it is one (its slot 1 holds a live
/// handle userdata).
fn with_handle<R>(st: State, idx: c_int, f: impl FnOnce(&SharedHandle) -> R) -> Option<R> {
    if st.type_of(idx) != TTABLE || !st.check_stack(1) {
        return None;
    }
    st.raw_geti(idx, 1);
    let r = userdata::with(st, -1, f).ok();
    st.pop(1);
    r
}

/// The registry field of each state's table of dictionary handles, name -> handle.
const HANDLES_KEY: &str = "vmpool.shared.handles";

/// Pushes this state's table of dictionary handles (weak values), creating it on first use.
/// Allocates: runs inside a protected call.
fn push_handles(st: State) {
    st.push_registry();
    if st.raw_get_str(-1, HANDLES_KEY) != TTABLE {
        st.pop(1);
        st.create_table(0, 4);
        st.create_table(0, 1);
        st.push_str("v");
        st.raw_set_str(-2, "__mode");
        st.set_metatable(-2);
        st.push_value(-1);
        st.raw_set_str(-3, HANDLES_KEY);
    }
    st.remove(-2);
}

/// Reads `{ capacity = bytes | "10m", shards = n }` at `idx` (nil = defaults).
fn options(st: State, idx: c_int) -> Result<Options, Error> {
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

/// Pushes this state's metatable `key` ([`META_KEY`] for the handle tables, [`ZONE_META_KEY`] for
/// their userdata), creating it on first use. Allocates: runs inside a protected call, with the
/// runner of protected calls at `runner`.
fn push_metatable(st: State, runner: c_int, key: &str) {
    st.push_registry();
    if st.raw_get_str(-1, key) == TTABLE {
        st.remove(-2);
        return;
    }
    st.pop(1);
    st.create_table(0, 5);
    if key == META_KEY {
        st.create_table(0, METHODS.len() as c_int);
        for &(name, f) in METHODS {
            set_method(st, runner, name, f);
        }
        st.raw_set_str(-2, "__index");
        set_method(st, runner, "__tostring", TOSTRING);
        st.push_str("vmpool.shared");
        st.raw_set_str(-2, "__name");
    } else {
        set_method(st, runner, "__gc", GC);
    }
    st.push_bool(false);
    st.raw_set_str(-2, "__metatable");
    st.push_value(-1);
    st.raw_set_str(-3, key);
    st.remove(-2);
}

/// Sets `f` into the table on top as a closure with the upvalue layout of every host function
/// (userdata.rs): the runner of protected calls in its slot, which is all the methods use.
fn set_method(st: State, runner: c_int, name: &str, f: ffi::lua_CFunction) {
    for slot in 1..=userdata::NUM_UPVALUES {
        if ffi::lua_upvalueindex(slot) == crate::lua::RUNNER_UPVALUE {
            st.push_value(runner);
        } else {
            st.push_nil();
        }
    }
    st.push_cclosure(f, userdata::NUM_UPVALUES);
    st.raw_set_str(-2, name);
}

crate::lua_function!(fn GC => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    userdata::finalize::<SharedHandle>(st, 1);
    Ok(0)
}

crate::lua_function!(fn TOSTRING => tostring_impl);
fn tostring_impl(st: State) -> Result<c_int, Error> {
    let text = with_handle(st, 1, |h| {
        if h.named.check_process().is_err() {
            format!(
                "vmpool.shared '{}' (created in another process)",
                h.named.name
            )
        } else {
            format!(
                "vmpool.shared '{}' (capacity {}, free {})",
                h.named.name,
                h.named.dict.capacity(),
                h.named.dict.free_space()
            )
        }
    })
    .unwrap_or_else(|| "vmpool.shared (finalized)".to_string());
    answer(st, "__tostring", &mut |st| {
        st.push_str(&text);
        1
    })
}

thread_local! {
    /// The buffer `get` copies a string value into (taken out while in use: a finalizer that
    /// runs during the push and calls `get` again gets a fresh one).
    static GET_BUFFER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

fn get_common(st: State, method: &str, stale: bool) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, method, Keys::AnyType);
    let mut bytes = GET_BUFFER.with(|b| b.take());
    let found = d.dict.get_into(k, stale, &mut bytes);
    let result = answer_found(st, method, stale, found, &bytes);
    if bytes.capacity() <= 64 * 1024 {
        GET_BUFFER.with(|b| b.set(bytes)); // big values do not stay resident
    }
    result
}

fn answer_found(
    st: State,
    method: &str,
    stale: bool,
    found: Found,
    bytes: &[u8],
) -> Result<c_int, Error> {
    ensure_stack(st, 3)?;
    match found {
        Found::Missing => {
            st.push_nil();
            Ok(1)
        }
        Found::List => nil_err(st, method, "value is a list"),
        Found::NoMemory => Err(Error::NoMemory {
            doing: format!("copying the value for dict:{method}()"),
        }),
        Found::Value {
            value,
            flags,
            stale: is_stale,
        } => {
            let rest = |st: State| {
                if flags != 0 {
                    st.push_integer(flags as i64);
                } else if !stale {
                    return 1;
                } else {
                    st.push_nil();
                }
                if stale {
                    st.push_bool(is_stale);
                    3
                } else {
                    2
                }
            };
            match value {
                Kind::Str => answer(st, method, &mut |st| {
                    st.push_bytes(bytes);
                    rest(st)
                }),
                Kind::Bool(b) => {
                    st.push_bool(b);
                    Ok(rest(st))
                }
                Kind::Num(n) => {
                    push_number(st, n);
                    Ok(rest(st))
                }
            }
        }
    }
}

crate::lua_function!(fn get => get_impl);
/// `dict:get(key)` → `value[, flags]` | `nil` | `nil, "value is a list"`.
fn get_impl(st: State) -> Result<c_int, Error> {
    get_common(st, "get", false)
}

crate::lua_function!(fn get_stale => get_stale_impl);
/// `dict:get_stale(key)` → `value, flags|nil, stale` | `nil`.
fn get_stale_impl(st: State) -> Result<c_int, Error> {
    get_common(st, "get_stale", true)
}

fn store_common(st: State, method: &str, mode: Mode, safe: bool) -> Result<c_int, Error> {
    let d = this(st)?;
    // resty.core's order: the exptime, then the key, then the value
    let exptime = exptime_arg(st, 4, method)?;
    let k = key_or_refuse!(st, method, Keys::AnyType);
    // a string is copied only if it cannot overwrite the stored one in place (below); nil for
    // add or replace is no mistake for ngx: the dictionary's store answers `false, "attempt to
    // add or replace nil values", false`
    let is_string = st.type_of(3) == TSTRING;
    let v = if is_string {
        None
    } else {
        match value(st, 3, method)? {
            Ok(v) => v,
            Err(refusal) => return nil_err(st, method, refusal),
        }
    };
    let flags = if not_given(st, 5) {
        0
    } else {
        uint_arg(st, 5, method, "flags", 0, u32::MAX as u64)? as u32
    };
    if is_string {
        let r = d
            .dict
            .store_str(mode, safe, k, st.string_bytes(3), exptime, flags)
            .ok_or_else(|| no_memory_for_copy(method))?;
        return stored(st, method, r);
    }
    stored(st, method, d.dict.store(mode, safe, k, v, exptime, flags))
}

/// The optional exptime of `set` & co. at `idx`: a negative number raises resty.core's
/// `bad "exptime" argument`; NaN and other types a `vmpool:` error ([`ttl_arg`]).
fn exptime_arg(st: State, idx: c_int, method: &str) -> Result<u64, Error> {
    if not_given(st, idx) {
        return Ok(0);
    }
    if st.type_of(idx) == TNUMBER && st.to_number(idx) < 0.0 {
        return Err(Error::AsNgx(r#"bad "exptime" argument"#.into()));
    }
    ttl_arg(st, idx, method, "exptime", false, false)
}

crate::lua_function!(fn set => set_impl);
/// `dict:set(key, value, exptime?, flags?)` → `ok, err, forcible`.
fn set_impl(st: State) -> Result<c_int, Error> {
    store_common(st, "set", Mode::Set, false)
}

crate::lua_function!(fn safe_set => safe_set_impl);
fn safe_set_impl(st: State) -> Result<c_int, Error> {
    store_common(st, "safe_set", Mode::Set, true)
}

crate::lua_function!(fn add => add_impl);
fn add_impl(st: State) -> Result<c_int, Error> {
    store_common(st, "add", Mode::Add, false)
}

crate::lua_function!(fn safe_add => safe_add_impl);
fn safe_add_impl(st: State) -> Result<c_int, Error> {
    store_common(st, "safe_add", Mode::Add, true)
}

crate::lua_function!(fn replace => replace_impl);
fn replace_impl(st: State) -> Result<c_int, Error> {
    store_common(st, "replace", Mode::Replace, false)
}

crate::lua_function!(fn delete => delete_impl);
/// `dict:delete(key)` → `true, nil, false`.
fn delete_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, "delete", Keys::AnyType);
    stored(st, "delete", d.dict.store(Mode::Set, false, k, None, 0, 0))
}

crate::lua_function!(fn incr => incr_impl);
/// `dict:incr(key, value, init?, init_ttl?)` → `new` (or `new, nil, forcible` with `init`) |
/// `nil, err`.
fn incr_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, "incr", Keys::AnyType);
    let delta = number_arg(st, 3, "incr", "value")?;
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
    match d.dict.incr(k, delta, init.map(|i| (i, init_ttl))) {
        Ok((n, w)) => {
            ensure_stack(st, 3)?;
            push_number(st, n);
            if !has_init {
                return Ok(1);
            }
            st.push_nil();
            st.push_bool(w.forcible);
            Ok(3)
        }
        Err(r) if r.err == dict::NAN_SUM => Err(bad(
            2,
            "incr",
            format!(
                "adding {} gives NaN (infinities of opposite signs), which cannot be stored in a shared dictionary; the key is left as it was",
                show_number(delta)
            ),
        )),
        Err(r) => nil_err(st, "incr", r.err),
    }
}

/// A number as Lua prints it (`inf`, `-inf`, `2.5`, `1e+300`, `3`), for messages: floats as the
/// other messages quote them ([`crate::error::lua_number`]).
fn show_number(n: Number) -> String {
    match n {
        Number::Int(i) => i.to_string(),
        Number::Float(f) => crate::error::lua_number(f),
    }
}

fn push_common(st: State, method: &str, front: bool) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, method, Keys::StringOrNumber);
    let item = match st.type_of(3) {
        TNUMBER => Item::Num(stored_number(st, 3, method)?),
        TSTRING => Item::Str(copy(st.string_bytes(3), method)?),
        _ => return nil_err(st, method, BAD_VALUE_TYPE),
    };
    match d.dict.push(k, item, front) {
        Ok(n) => {
            ensure_stack(st, 1)?;
            st.push_integer(n as i64);
            Ok(1)
        }
        // no room for a new list's own node: ngx answers false there
        Err(r) if r.forcible => answer(st, method, &mut |st| {
            st.push_bool(false);
            st.push_str(r.err);
            2
        }),
        Err(r) => nil_err(st, method, r.err),
    }
}

crate::lua_function!(fn lpush => lpush_impl);
/// `dict:lpush(key, value)` → new length | `nil, err`.
fn lpush_impl(st: State) -> Result<c_int, Error> {
    push_common(st, "lpush", true)
}

crate::lua_function!(fn rpush => rpush_impl);
fn rpush_impl(st: State) -> Result<c_int, Error> {
    push_common(st, "rpush", false)
}

fn pop_common(st: State, method: &str, front: bool) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, method, Keys::StringOrNumber);
    match d.dict.pop(k, front) {
        Ok(item) => {
            ensure_stack(st, 1)?;
            match item {
                None => st.push_nil(),
                Some(Item::Num(n)) => push_number(st, n),
                Some(Item::Str(s)) => {
                    return answer(st, method, &mut |st| {
                        st.push_bytes(&s);
                        1
                    })
                }
            }
            Ok(1)
        }
        Err(r) => nil_err(st, method, r.err),
    }
}

crate::lua_function!(fn lpop => lpop_impl);
/// `dict:lpop(key)` → value | `nil` | `nil, "value not a list"`.
fn lpop_impl(st: State) -> Result<c_int, Error> {
    pop_common(st, "lpop", true)
}

crate::lua_function!(fn rpop => rpop_impl);
fn rpop_impl(st: State) -> Result<c_int, Error> {
    pop_common(st, "rpop", false)
}

crate::lua_function!(fn llen => llen_impl);
/// `dict:llen(key)` → length (0 if missing) | `nil, "value not a list"`.
fn llen_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, "llen", Keys::StringOrNumber);
    match d.dict.llen(k) {
        Ok(n) => {
            ensure_stack(st, 1)?;
            st.push_integer(n as i64);
            Ok(1)
        }
        Err(r) => nil_err(st, "llen", r.err),
    }
}

crate::lua_function!(fn ttl => ttl_impl);
/// `dict:ttl(key)` → seconds left (0 = no expiry) | `nil, "not found"`.
fn ttl_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let k = key_or_refuse!(st, "ttl", Keys::AnyType);
    match d.dict.ttl(k) {
        Some(0) => {
            st.push_integer(0);
            Ok(1)
        }
        Some(ns) => {
            ensure_stack(st, 1)?;
            st.push_number(ns as f64 / 1e9);
            Ok(1)
        }
        None => nil_err(st, "ttl", "not found"),
    }
}

crate::lua_function!(fn expire => expire_impl);
/// `dict:expire(key, exptime)` → `true` | `nil, "not found"`.
fn expire_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    if not_given(st, 3) {
        return Err(Error::AsNgx(r#"bad "exptime" argument"#.into()));
    }
    let k = key_or_refuse!(st, "expire", Keys::AnyType);
    let t = ttl_arg(st, 3, "expire", "exptime", true, true)?;
    if d.dict.expire(k, t) {
        ensure_stack(st, 1)?;
        st.push_bool(true);
        Ok(1)
    } else {
        nil_err(st, "expire", "not found")
    }
}

crate::lua_function!(fn flush_all => flush_all_impl);
/// `dict:flush_all()` → nothing.
fn flush_all_impl(st: State) -> Result<c_int, Error> {
    this(st)?.dict.flush_all();
    Ok(0)
}

crate::lua_function!(fn flush_expired => flush_expired_impl);
/// `dict:flush_expired(max_count?)` → how many were removed.
fn flush_expired_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let max = uint_arg(st, 2, "flush_expired", "max_count", 0, u32::MAX as u64)?;
    let n = d.dict.flush_expired(max as usize);
    ensure_stack(st, 1)?;
    st.push_integer(n as i64);
    Ok(1)
}

crate::lua_function!(fn get_keys => get_keys_impl);
/// `dict:get_keys(max_count?)` → array of keys (default at most 1024; 0 = all).
fn get_keys_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let max = uint_arg(st, 2, "get_keys", "max_count", 1024, u32::MAX as u64)?;
    let keys = d.dict.keys(max as usize);
    ensure_stack(st, 3)?;
    answer(st, "get_keys", &mut |st| {
        st.create_table(keys.len().min(1 << 26) as c_int, 0);
        for (i, k) in keys.iter().enumerate() {
            st.push_bytes(k);
            st.raw_seti(-2, i as i64 + 1);
        }
        1
    })
}

crate::lua_function!(fn capacity => capacity_impl);
/// `dict:capacity()` → bytes.
fn capacity_impl(st: State) -> Result<c_int, Error> {
    let c = this(st)?.dict.capacity();
    st.push_integer(c as i64);
    Ok(1)
}

crate::lua_function!(fn free_space => free_space_impl);
/// `dict:free_space()` → bytes in whole free pages, as ngx counts them.
fn free_space_impl(st: State) -> Result<c_int, Error> {
    let f = this(st)?.dict.free_space();
    st.push_integer(f as i64);
    Ok(1)
}

crate::lua_function!(fn advance => advance_impl);
/// `dict:_advance(seconds)`: moves the dictionary's clock forward, for tests of TTLs that must
/// not wait (the dictionary is shared: every user sees the jump).
fn advance_impl(st: State) -> Result<c_int, Error> {
    let d = this(st)?;
    let t = ttl_arg(st, 2, "_advance", "seconds", true, false)?;
    d.dict.advance(t as f64 / 1e9);
    Ok(0)
}
