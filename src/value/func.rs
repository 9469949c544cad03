//! Functions crossing between states: a Lua function travels as its prototype's bytecode (a
//! [`Proto`], dumped once per function object by the sender and kept in a weak-keyed table) plus
//! its upvalues as values; a C function travels as its standard-library name.
//!
//! Trust: bytecode is only ever loaded from a [`Proto`], and a `Proto` can only be made here, by
//! `lua_dump` of a function in this process. A message carries no bytecode: a function's tag holds
//! an index into the list of `Proto`s that travels beside the message (in the call record, owned
//! Rust data), and an index past that list is corrupt. Bytes from outside the process (the fuzzer,
//! a corrupt buffer) can therefore never reach `lua_load`.
//!
//! Each state keeps the functions it loaded as callees in a [`FnCache`]: an LRU keyed by the
//! prototype's content (hash, then the bytes compared), bounded, so calling one closure a million
//! times loads it once per state, and a stream of distinct closures leaves memory flat.

use std::ffi::{c_int, c_void};
use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mlua::ffi;

use super::Corrupt;
use crate::lua::{State, TFUNCTION, TSTRING, TTABLE, TUSERDATA};

/// One function prototype's bytecode (debug info kept, so tracebacks name its source and lines).
#[derive(Debug)]
pub struct Proto {
    hash: u64,
    bytes: Box<[u8]>,
    /// `function <source:line>`, for messages.
    label: String,
    /// How many upvalues its closures have (Lua 5.1 cannot read those of a stripped function).
    nups: u8,
}

impl Proto {
    /// Its bytecode's size.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// The hash of its bytecode (equal for every closure of one function).
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// How many upvalues its closures have.
    pub fn upvalues(&self) -> u8 {
        self.nups
    }
}

/// Most callees a state keeps loaded ([`FnCache`]).
pub const CACHED_FUNCTIONS: usize = 256;

/// Bytecode loads into a state, and callees found already loaded (process-wide, all pools):
/// `vmpool._function_cache()`, which the specs read to see that a second call is a hit.
pub static LOADS: AtomicU64 = AtomicU64::new(0);
pub static HITS: AtomicU64 = AtomicU64::new(0);

/// Registry key of this module's table in every state that sends or receives functions.
static ANCHOR: u8 = 0;
fn anchor() -> *const c_void {
    &ANCHOR as *const u8 as *const c_void
}
/// Slots of that table.
const T_DUMP: i64 = 1; // the C function that dumps a function (pushing a copy allocates nothing)
const T_PROTOS: i64 = 2; // weak-keyed: function -> userdata holding its `Arc<Proto>`
const T_NAMES: i64 = 3; // C function <-> standard library name, built on first use (false before)
const T_LOADED: i64 = 4; // this state's cached callees, by `FnCache` slot
const T_META: i64 = 5; // metatable of the `Proto` userdata (its __gc drops the Arc)
const T_BUILD_NAMES: i64 = 6; // the C function that builds T_NAMES
const T_GROW: i64 = 7; // the C function that makes stack room for encoding, protected

/// Sets up a state to send and receive functions. Allocates: call it protected (the host's
/// `luaopen_vmpool`, a child's creation).
pub fn install(st: State) {
    if st.raw_get_p(&ANCHOR) == TTABLE {
        st.pop(1);
        return;
    }
    st.pop(1);
    st.create_table(7, 0);
    st.push_cclosure(crate::lua::c_function(dump_fn), 0);
    st.raw_seti(-2, T_DUMP);
    st.create_table(0, 0);
    st.create_table(0, 1);
    st.push_str("k");
    st.raw_set_str(-2, "__mode");
    st.set_metatable(-2);
    st.raw_seti(-2, T_PROTOS);
    st.push_bool(false);
    st.raw_seti(-2, T_NAMES);
    st.create_table(0, 0);
    st.raw_seti(-2, T_LOADED);
    st.create_table(0, 1);
    st.push_cclosure(crate::lua::c_function(proto_gc), 0);
    st.raw_set_str(-2, "__gc");
    st.raw_seti(-2, T_META);
    st.push_cclosure(crate::lua::c_function(build_names), 0);
    st.raw_seti(-2, T_BUILD_NAMES);
    st.push_cclosure(crate::lua::c_function(grow_stack), 0);
    st.raw_seti(-2, T_GROW);
    st.push_light_userdata(anchor() as *mut c_void);
    st.insert(-2);
    st.raw_set(ffi::LUA_REGISTRYINDEX);
}

/// Makes room on the stack for encoding `n` more nested values. Lua 5.1 and LuaJIT raise "not
/// enough memory" when they cannot grow the stack, so there the room is made inside a protected
/// call (the stack keeps its size after it returns); Lua 5.2 to 5.4 answer false instead of
/// raising. Needs 3 free stack slots; false if there is no room.
pub fn reserve_stack(st: State, n: c_int) -> bool {
    if cfg!(not(any(feature = "lua51", feature = "luajit"))) {
        return st.check_stack(n);
    }
    if !push_anchor(st) {
        return false;
    }
    st.raw_geti(-1, T_GROW);
    st.push_integer(n.into());
    let ok = st.pcall(1, 1, 0) == 0 && st.to_boolean(-1);
    st.pop(2);
    ok
}

/// `grow(n)` -> whether the stack has room for `n` more values (under `lua_pcall`).
unsafe extern "C-unwind" fn grow_stack(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread; nothing here has a
    // destructor.
    let st = unsafe { State::from_raw(l) };
    let n = st.to_integer_exact(1).unwrap_or(0) as c_int;
    let ok = st.check_stack(n);
    st.push_bool(ok);
    1
}

/// Pushes this module's table; false (nothing pushed) if [`install`] never ran in this state.
fn push_anchor(st: State) -> bool {
    if st.raw_get_p(&ANCHOR) == TTABLE {
        true
    } else {
        st.pop(1);
        false
    }
}

/// The `Proto` of the Lua function at `idx` (absolute), dumped on first use and then kept while
/// the function lives. Needs 4 free stack slots; leaves the stack as it was.
pub fn proto_of(st: State, idx: c_int) -> Result<Arc<Proto>, &'static str> {
    if !push_anchor(st) {
        return Err("a function sent from a state vmpool has not set up");
    }
    st.raw_geti(-1, T_PROTOS);
    st.push_value(idx);
    st.raw_get(-2);
    if let Some(p) = proto_in(st, -1) {
        st.pop(3);
        return Ok(p);
    }
    st.pop(2);
    st.raw_geti(-1, T_DUMP);
    st.push_value(idx);
    let rc = st.pcall(1, 1, 0);
    let p = if rc == 0 { proto_in(st, -1) } else { None };
    st.pop(2);
    p.ok_or("a function whose bytecode cannot be dumped (not enough memory)")
}

/// The `Proto` held by the userdata at `idx`, if it is one of ours and filled.
fn proto_in(st: State, idx: c_int) -> Option<Arc<Proto>> {
    if st.type_of(idx) != TUSERDATA {
        return None;
    }
    let cell = st.to_userdata(idx) as *const *const Proto;
    // SAFETY: the proto table holds only userdata made by `dump_fn`, one pointer wide, holding
    // null or a pointer from `Arc::into_raw` that the userdata owns until its __gc.
    unsafe {
        let p = *cell;
        if p.is_null() {
            return None;
        }
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

thread_local! {
    /// Where `lua_dump` writes: not a local of `dump_fn`, which Lua may leave by a longjmp.
    static DUMP_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `dump(f)` -> userdata holding `f`'s `Proto`, also stored in the proto table under `f`. Runs
/// under `lua_pcall`; every Lua allocation comes before the Rust ones, so an error leaves nothing
/// owned behind (an empty userdata is ignored and replaced on the next use).
unsafe extern "C-unwind" fn dump_fn(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    st.set_top(1);
    if !push_anchor(st) {
        return 0;
    }
    let cell = st.new_userdata(std::mem::size_of::<*const Proto>()) as *mut *const Proto;
    // SAFETY: a fresh userdata of one pointer's size (Lua aligns userdata for any pointer).
    unsafe { cell.write(std::ptr::null()) };
    st.raw_geti(2, T_META);
    st.set_metatable(3);
    st.raw_geti(2, T_PROTOS);
    st.push_value(1);
    st.push_value(3);
    st.raw_set(-3);
    st.pop(1); // [f, anchor, ud]
               // SAFETY: `lua_Debug` is plain C data; all-zero is a valid start for `lua_getinfo`.
    let mut ar: ffi::lua_Debug = unsafe { std::mem::zeroed() };
    st.push_value(1);
    // SAFETY: ">Su" pops the function on top and fills the source fields and the upvalue count;
    // it allocates nothing.
    let have_info = unsafe { ffi::lua_getinfo(l, c">Su".as_ptr(), &mut ar) } != 0;
    let buf: *mut Vec<u8> = DUMP_BUF.with(|b| b.as_ptr());
    // SAFETY: the thread's own buffer, used by nobody else while this runs (no re-entry: the
    // writer does not call Lua).
    unsafe { (*buf).clear() };
    st.push_value(1);
    // SAFETY: a Lua function is on top; the writer appends to the thread's buffer.
    let rc = unsafe { ffi::lua_dump(l, crate::lua::append_writer, buf as *mut c_void, 0) };
    st.pop(1);
    // SAFETY: as above; from here on nothing calls Lua until the pointer is stored.
    let bytes = unsafe { &mut *buf };
    if rc != 0 || bytes.is_empty() {
        bytes.clear();
        st.push_nil();
        return 1;
    }
    let label = if have_info {
        label_from(&ar)
    } else {
        "function".to_string()
    };
    let proto = Proto {
        hash: foldhash::fast::FixedState::default().hash_one(&bytes[..]),
        bytes: bytes.as_slice().into(),
        label,
        nups: if have_info {
            u8::try_from(i64::from(ar.nups)).unwrap_or(u8::MAX)
        } else {
            0
        },
    };
    bytes.clear();
    // SAFETY: the userdata's cell; it now owns one strong count, dropped by `proto_gc`.
    unsafe { cell.write(Arc::into_raw(Arc::new(proto))) };
    1
}

/// `function <source:line>` from `lua_getinfo`'s source fields.
fn label_from(ar: &ffi::lua_Debug) -> String {
    // SAFETY: `short_src` is a NUL-terminated buffer filled by `lua_getinfo`.
    let src = unsafe { std::ffi::CStr::from_ptr(ar.short_src.as_ptr()) };
    format!("function <{}:{}>", src.to_string_lossy(), ar.linedefined)
}

/// How messages name the function at `idx` before it is dumped: `function <source:line>` for a
/// Lua function, `C function` otherwise. Needs 1 free stack slot; allocates nothing in Lua.
pub fn label_of(st: State, idx: c_int) -> String {
    if st.type_of(idx) != TFUNCTION || st.is_cfunction(idx) {
        return "C function".to_string();
    }
    // SAFETY: `lua_Debug` is plain C data; all-zero is a valid start for `lua_getinfo`.
    let mut ar: ffi::lua_Debug = unsafe { std::mem::zeroed() };
    st.push_value(idx);
    // SAFETY: ">S" pops the Lua function pushed above and fills the source fields.
    if unsafe { ffi::lua_getinfo(st.as_ptr(), c">S".as_ptr(), &mut ar) } == 0 {
        return "function".to_string();
    }
    label_from(&ar)
}

/// `__gc` of a `Proto` userdata: drops its strong count.
unsafe extern "C-unwind" fn proto_gc(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls the finalizer with the userdata made by `dump_fn` in slot 1.
    unsafe {
        let cell = ffi::lua_touserdata(l, 1) as *mut *const Proto;
        if !cell.is_null() && !(*cell).is_null() {
            drop(Arc::from_raw(*cell));
            cell.write(std::ptr::null());
        }
    }
    0
}

/// Base functions that cross by name (the libraries below cross whole).
const BASE: &[&str] = &[
    "assert",
    "collectgarbage",
    "dofile",
    "error",
    "gcinfo",
    "getfenv",
    "getmetatable",
    "ipairs",
    "load",
    "loadfile",
    "loadstring",
    "module",
    "next",
    "pairs",
    "pcall",
    "print",
    "rawequal",
    "rawget",
    "rawlen",
    "rawset",
    "require",
    "select",
    "setfenv",
    "setmetatable",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
];
const LIBRARIES: &[&str] = &[
    "string",
    "table",
    "math",
    "io",
    "os",
    "coroutine",
    "utf8",
    "bit32",
    "bit",
    "debug",
    "package",
];

/// Builds the two-way table of this state's standard library C functions (`T_NAMES`): each
/// function -> its name, each name -> its function. Runs under `lua_pcall`.
unsafe extern "C-unwind" fn build_names(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    st.set_top(0);
    if !push_anchor(st) {
        return 0;
    }
    st.create_table(0, 256); // 2
    st.push_globals(); // 3
                       // [.., value, name]: a C function is found under its name, and named by the first name
                       // found for it
    let add = |tables_too: bool| {
        let ty = st.type_of(-2);
        if (ty == TFUNCTION && st.is_cfunction(-2)) || (tables_too && ty == TTABLE) {
            st.push_value(-2);
            st.raw_get(2);
            let named = st.type_of(-1) != crate::lua::TNIL;
            st.pop(1);
            if !named {
                st.push_value(-2);
                st.push_value(-2);
                st.raw_set(2);
            }
            st.push_value(-1);
            st.push_value(-3);
            st.raw_set(2);
        }
        st.pop(2);
    };
    for name in BASE {
        st.raw_get_str(3, name);
        st.push_str(name);
        add(false);
    }
    for lib in LIBRARIES {
        if st.raw_get_str(3, lib) != TTABLE {
            st.pop(1);
            continue;
        }
        let t = st.top();
        st.push_nil();
        while st.next(t) {
            if st.type_of(-2) == TSTRING {
                st.push_value(-1);
                st.push_str(lib);
                st.push_str(".");
                st.push_value(-5);
                // SAFETY: three strings on top; concatenating strings calls no metamethod.
                unsafe { ffi::lua_concat(l, 3) };
                add(false);
            }
            st.pop(1);
        }
        st.pop(1);
    }
    // the standard tables that hold what no copy can (files, loaded modules) cross by name too
    for lib in UNCOPIABLE {
        st.raw_get_str(3, lib);
        st.push_str(lib);
        add(true);
    }
    st.push_value(2);
    st.raw_seti(1, T_NAMES);
    0
}

/// Standard library tables that cross by name (as upvalues): each holds values that cannot be
/// copied (`io.stdout`, `package.loaded`), and the receiver has its own.
const UNCOPIABLE: &[&str] = &["io", "package"];

/// Pushes this state's names table, building it on first use; false (nothing pushed) if it
/// cannot be built. Needs 3 free stack slots.
fn push_names(st: State) -> bool {
    if !push_anchor(st) {
        return false;
    }
    if st.raw_geti(-1, T_NAMES) != TTABLE {
        st.pop(1);
        st.raw_geti(-1, T_BUILD_NAMES);
        if st.pcall(0, 0, 0) != 0 {
            st.pop(2);
            return false;
        }
        st.raw_geti(-1, T_NAMES);
    }
    st.replace(-2);
    st.type_of(-1) == TTABLE || {
        st.pop(1);
        false
    }
}

/// True if the value at `idx` is this state's globals table: an upvalue holding it (`local G =
/// _G`, or `_ENV` of a function whose upvalue names `string.dump` stripped) crosses as the
/// receiver's globals, as `_ENV` does. Needs 1 free stack slot.
pub fn is_globals(st: State, idx: c_int) -> bool {
    if st.type_of(idx) != TTABLE {
        return false;
    }
    let t = st.to_pointer(idx);
    st.push_globals();
    let g = st.to_pointer(-1);
    st.pop(1);
    t == g
}

/// The standard-library name of the C function (or `io` / `package` table) at `idx` (absolute), if
/// it has one.
pub fn c_function_name(st: State, idx: c_int) -> Option<Vec<u8>> {
    if !push_names(st) {
        return None;
    }
    st.push_value(idx);
    st.raw_get(-2);
    let name = st
        .to_bytes(-1)
        .filter(|n| n.len() <= 255)
        .map(<[u8]>::to_vec);
    st.pop(2);
    name
}

/// Pushes this state's C function of that standard-library name.
pub fn push_c_function(st: State, name: &[u8]) -> Result<(), Corrupt> {
    if !push_names(st) {
        return Err(NO_C_FUNCTION);
    }
    st.push_bytes(name);
    st.raw_get(-2);
    st.replace(-2);
    if !matches!(st.type_of(-1), TFUNCTION | TTABLE) {
        st.pop(1);
        return Err(NO_C_FUNCTION);
    }
    Ok(())
}

/// Refusals found while decoding, which are the sender's to fix, not corruption.
pub const NO_C_FUNCTION: Corrupt =
    Corrupt("a standard library C function that the receiving state does not have");
pub const CANNOT_LOAD: Corrupt =
    Corrupt("a function whose bytecode the receiving state cannot load (not enough memory?)");

/// True for what the decoder refuses because the receiving state cannot take it (not because the
/// message is corrupt): the error then says so, as a `vmpool:` refusal.
pub fn is_refusal(what: &str) -> bool {
    what == NO_C_FUNCTION.0 || what == CANNOT_LOAD.0
}

/// Loads `proto` as a new function instance and pushes it.
pub fn push_fresh(st: State, proto: &Proto) -> Result<(), Corrupt> {
    LOADS.fetch_add(1, Ordering::Relaxed);
    if st.load_binary(&proto.bytes, "?") != 0 {
        st.pop(1);
        return Err(CANNOT_LOAD);
    }
    Ok(())
}

/// A state's loaded callees, by content. The functions themselves live in the state (`T_LOADED`,
/// by slot); this holds which prototype each slot has. Made on the first callee: the map takes
/// about 9 KB, which a pool of named chunks only (or of 1,000 resident states) should not pay.
#[derive(Default)]
pub struct FnCache {
    lru: Option<lru::LruCache<u64, (Arc<Proto>, i64)>>,
}

impl FnCache {
    /// Pushes the state's instance of `proto`, loading it on a miss (evicting the least recently
    /// used past [`CACHED_FUNCTIONS`]). Needs 3 free stack slots.
    pub fn push(&mut self, st: State, proto: &Arc<Proto>) -> Result<(), Corrupt> {
        let lru = self.lru.get_or_insert_with(|| {
            lru::LruCache::new(NonZeroUsize::new(CACHED_FUNCTIONS).expect("non-zero"))
        });
        if let Some((p, slot)) = lru.get(&proto.hash) {
            if Arc::ptr_eq(p, proto) || p.bytes == proto.bytes {
                let slot = *slot;
                HITS.fetch_add(1, Ordering::Relaxed);
                if !push_anchor(st) {
                    return Err(CANNOT_LOAD);
                }
                st.raw_geti(-1, T_LOADED);
                st.raw_geti(-1, slot);
                st.replace(-3);
                st.pop(1);
                if st.type_of(-1) == TFUNCTION {
                    return Ok(());
                }
                st.pop(1);
            } else {
                // a hash collision: this one runs uncached
                return push_fresh(st, proto);
            }
        }
        if !push_anchor(st) {
            return Err(CANNOT_LOAD);
        }
        st.raw_geti(-1, T_LOADED);
        st.replace(-2);
        push_fresh(st, proto).inspect_err(|_| st.pop(1))?; // [loaded, f]
                                                           // the slot of the entry evicted, or the next one; storing into an existing key of the
                                                           // table allocates nothing, a new key may (and raises before the cache changes)
        let slot = match lru.peek_lru() {
            Some((_, (_, s))) if lru.len() == CACHED_FUNCTIONS => *s,
            _ => lru.len() as i64 + 1,
        };
        st.push_value(-1);
        st.raw_seti(-3, slot);
        st.replace(-2);
        if lru.len() == CACHED_FUNCTIONS {
            lru.pop_lru();
        }
        lru.put(proto.hash, (proto.clone(), slot));
        Ok(())
    }
}

/// `lua_upvalueid` and `lua_upvaluejoin`: Lua 5.2+ and LuaJIT (whose `lua.h` has them too);
/// Lua 5.1 cannot join upvalues, so closures sent together there get an upvalue each.
#[cfg(feature = "luajit")]
mod join_ffi {
    use std::ffi::{c_int, c_void};
    /// `luajit.h`: `LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_FLUSH`.
    pub const FLUSH_ALLFUNC: c_int = 3 | 0x0200;
    extern "C-unwind" {
        pub fn luaJIT_setmode(l: *mut mlua::ffi::lua_State, idx: c_int, mode: c_int) -> c_int;
        pub fn lua_upvalueid(l: *mut mlua::ffi::lua_State, f: c_int, n: c_int) -> *mut c_void;
        pub fn lua_upvaluejoin(
            l: *mut mlua::ffi::lua_State,
            f1: c_int,
            n1: c_int,
            f2: c_int,
            n2: c_int,
        );
    }
}
#[cfg(not(any(feature = "lua51", feature = "luajit")))]
use ffi as join_ffi;

/// Whether the cached callees' upvalues must be watched: LuaJIT compiles a closure's immutable
/// upvalues into its traces as constants (a trace is specialised to the closure), so traces of a
/// cached callee whose upvalues a call changed would run with the old values.
pub const WATCH_UPVALUES: bool = cfg!(feature = "luajit");

/// Flushes the compiled traces of the Lua function at `idx` and of the functions inside it
/// (LuaJIT; nothing elsewhere): its upvalues changed since they were compiled.
pub fn flush_traces(st: State, idx: c_int) {
    #[cfg(feature = "luajit")]
    // SAFETY: `idx` holds a Lua function of this state; flushing its traces runs no Lua code.
    unsafe {
        join_ffi::luaJIT_setmode(st.as_ptr(), idx, join_ffi::FLUSH_ALLFUNC);
    }
    #[cfg(not(feature = "luajit"))]
    let _ = (st, idx);
}

/// Whether this runtime can join upvalues (and so identify them).
pub const CAN_JOIN: bool = cfg!(not(feature = "lua51"));

/// The identity of upvalue `n` of the Lua function at `idx` (null where [`CAN_JOIN`] is false).
pub fn upvalue_id(st: State, idx: c_int, n: c_int) -> *mut c_void {
    #[cfg(not(feature = "lua51"))]
    // SAFETY: `idx` holds a Lua function with at least `n` upvalues (the caller just read it).
    return unsafe { join_ffi::lua_upvalueid(st.as_ptr(), idx, n) };
    #[cfg(feature = "lua51")]
    {
        let _ = (st, idx, n);
        std::ptr::null_mut()
    }
}

/// Makes upvalue `n1` of the Lua function at `f1` refer to upvalue `n2` of the one at `f2`; false
/// if either is not a Lua function with such an upvalue.
pub fn upvalue_join(st: State, f1: c_int, n1: c_int, f2: c_int, n2: c_int) -> bool {
    let ok = |f: c_int, n: c_int| {
        st.type_of(f) == TFUNCTION
            && !st.is_cfunction(f)
            && st.get_upvalue(f, n).map(|_| st.pop(1)).is_some()
    };
    if !CAN_JOIN || !ok(f1, n1) || !ok(f2, n2) {
        return false;
    }
    #[cfg(not(feature = "lua51"))]
    // SAFETY: both are Lua functions with those upvalues (checked above).
    unsafe {
        join_ffi::lua_upvaluejoin(st.as_ptr(), f1, n1, f2, n2)
    };
    true
}
