//! The Lua face of `vmpool.shared` (see `src/shared/`): `vmpool.shared(name [, options])` and
//! the methods of a dictionary, with the arguments and results of `ngx.shared.DICT`.
//!
//! Here: the handle, its metatables, the results of each method; the reading of their arguments
//! is in `args.rs`, the LuaJIT FFI path of the busiest methods in `luajit.rs`, the semantics in
//! `shared/dict.rs`.
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

use crate::host::userdata::{self, Tagged};
use crate::lua::protect::protected;
use crate::lua::{State, TNUMBER, TSTRING, TTABLE};
use crate::shared::dict::{self, Found, Item, Kind, Mode, Number, Refused, Written};
use crate::shared::{self as registry, Named};
use crate::Error;

mod args;
pub mod luajit;

use args::{
    bad, copy, exptime_arg, flags_arg, incr_init, key, no_memory_for_copy, not_given, number_arg,
    options, show_number, stored_number, this, ttl_arg, uint_arg, value, Keys, BAD_VALUE_TYPE,
};

/// What a dictionary userdata holds.
pub struct SharedHandle {
    named: Arc<Named>,
}

impl SharedHandle {
    /// The dictionary (for the FFI path, `luajit.rs`).
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

/// The key at slot 2 of a method call, or an early return of ngx's `nil, err` for one it refuses.
macro_rules! key_or_refuse {
    ($st:expr, $method:expr, $keys:expr) => {
        match key($st, $method, $keys)? {
            Ok(k) => k,
            Err(refusal) => return nil_err($st, $method, refusal),
        }
    };
}

fn push_number(st: State, n: Number) {
    match n {
        Number::Int(i) => st.push_integer(i),
        Number::Float(f) => st.push_number(f),
    }
}

/// Pushes what `f` pushes (its return value: how many), in a protected call: pushing a string or
/// building a table allocates, which can fail or run `__gc` finalizers that raise, and a Lua error
/// must not unwind through this module's Rust frames (see `lua::protect`). Pushing nil, booleans
/// and numbers cannot raise (the stack space is checked first) and goes without.
fn answer(st: State, method: &str, f: &mut dyn FnMut(State) -> c_int) -> Result<c_int, Error> {
    protected(st, 0, || format!("answering dict:{method}()"), f)
        .map_err(|e| crate::host::in_pool_state(e, String::new))
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
        // a name of invalid UTF-8 is refused rather than made text: two such names would become
        // one dictionary, and one label value in `vmpool.metrics()`
        Some(n) if !n.is_empty() => match std::str::from_utf8(n) {
            Ok(name) => name.to_owned(),
            Err(_) => return Err(Error::BadArgument(
                "bad argument #1 to 'shared': the dictionary name is not valid UTF-8 (it names the dictionary in the process and labels its metrics); use a text name".into(),
            )),
        },
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

crate::lua_function!(fn GC => crate::host::finalize::<SharedHandle>);

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
    let flags = flags_arg(st, 5, method)?;
    if is_string {
        let r = d
            .dict
            .store_str(mode, safe, k, st.string_bytes(3), exptime, flags)
            .ok_or_else(|| no_memory_for_copy(method))?;
        return stored(st, method, r);
    }
    stored(st, method, d.dict.store(mode, safe, k, v, exptime, flags))
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
    let init = incr_init(st)?;
    let has_init = init.is_some();
    match d.dict.incr(k, delta, init) {
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
                    let doing = || format!("answering dict:{method}()");
                    let pushed = protected(st, 0, doing, &mut |st| {
                        st.push_bytes(&s);
                        1
                    });
                    // the item goes back where it was, so that a failed pop loses nothing
                    return pushed.map_err(|e| {
                        let kept = d.dict.push(k, Item::Str(s), front).is_ok();
                        crate::host::in_pool_state(e, || {
                            if kept {
                                "; the item stays in the list"
                            } else {
                                ""
                            }
                            .into()
                        })
                    });
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
            // whole milliseconds, rounded up (never 0, which means "no expiry"), as ngx answers:
            // its clock is cached, so right after `set(k, v, 10)` it says 10, not 9.99999...
            ensure_stack(st, 1)?;
            st.push_number(ns.div_ceil(1_000_000) as f64 / 1e3);
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
