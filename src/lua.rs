//! A thin, version-neutral layer over the raw Lua C API (`mlua::ffi`).
//!
//! One small wrapper per C API function vmpool uses, each with its safety argument; no logic of
//! its own beyond `protect` and `run_protected`.
//!
//! Why raw: the host entry points (`invoke`, `submit`, a future's `wait`) and a child's call loop are
//! the hot path, and mlua's generic `Value`/`UserData` machinery costs several thousand instructions
//! per call there (see `bench/README.md`). Most code touches a `lua_State` through the [`State`]
//! type below; where it has no wrapper, code calls `mlua::ffi` directly (a child state's callbacks
//! in `child/`, `value/func.rs` and `channel/stream.rs`, the allocator and panic handler in
//! `state_heap.rs`, the dictionary methods in `host/dict_api.rs` and `host/dict_ffi.rs`), each
//! `unsafe` block with its `// SAFETY:` argument.
//!
//! Rules every caller keeps (they are what makes the safe methods sound):
//! - a `State` is used only on the thread that runs that Lua state, while the state is alive;
//! - stack indices passed in refer to existing slots, and callers keep the stack balanced;
//! - only the *raw* accessors are used on values that came from users (`rawget`, `next`, no
//!   metamethods), so the only Lua error these calls can raise is "not enough memory".

use std::ffi::{c_char, c_int, c_void};

use mlua::ffi;

pub mod errors;
pub mod protect;

pub use ffi::lua_State;
pub use protect::{run_protected, PROTECTED_RUNNER, RUNNER_UPVALUE};

/// Lua type tags, the same numbers on every supported runtime.
pub const TNIL: c_int = ffi::LUA_TNIL;
pub const TBOOLEAN: c_int = ffi::LUA_TBOOLEAN;
pub const TNUMBER: c_int = ffi::LUA_TNUMBER;
pub const TSTRING: c_int = ffi::LUA_TSTRING;
pub const TTABLE: c_int = ffi::LUA_TTABLE;
pub const TFUNCTION: c_int = ffi::LUA_TFUNCTION;
pub const TNONE: c_int = ffi::LUA_TNONE;
pub const TLIGHTUSERDATA: c_int = ffi::LUA_TLIGHTUSERDATA;
pub const TUSERDATA: c_int = ffi::LUA_TUSERDATA;
pub const TTHREAD: c_int = ffi::LUA_TTHREAD;

/// The hooks of a thread and of its main thread at one moment (see [`State::hook_mark`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HookMark {
    own: (Option<usize>, c_int),
    main: Option<(Option<usize>, c_int)>,
}

impl HookMark {
    /// Whether the main thread's hook differs in `later` (always false where the mark has no
    /// main thread: on the main thread itself, and on Lua 5.1 and LuaJIT).
    pub fn main_changed(&self, later: &HookMark) -> bool {
        self.main != later.main
    }
}

/// A borrowed handle to a live `lua_State`.
#[derive(Clone, Copy)]
pub struct State(*mut lua_State);

impl State {
    /// Wraps a raw state pointer.
    ///
    /// # Safety
    /// `l` must point to a live Lua state (or thread) that only the calling thread uses while the
    /// returned value (or any copy of it) is in use.
    #[inline]
    pub unsafe fn from_raw(l: *mut lua_State) -> State {
        State(l)
    }

    #[inline]
    pub fn as_ptr(self) -> *mut lua_State {
        self.0
    }

    #[inline]
    pub fn top(self) -> c_int {
        // SAFETY: the type's invariant: a live state owned by this thread.
        unsafe { ffi::lua_gettop(self.0) }
    }

    #[inline]
    pub fn set_top(self, idx: c_int) {
        // SAFETY: as for `top`; callers only shrink or grow within checked stack space.
        unsafe { ffi::lua_settop(self.0, idx) }
    }

    #[inline]
    pub fn pop(self, n: c_int) {
        self.set_top(-n - 1)
    }

    /// Makes room for `n` more slots; false if Lua cannot grow the stack that far.
    #[inline]
    pub fn check_stack(self, n: c_int) -> bool {
        // SAFETY: as for `top`.
        unsafe { ffi::lua_checkstack(self.0, n) != 0 }
    }

    #[inline]
    pub fn abs_index(self, idx: c_int) -> c_int {
        if idx > 0 || idx <= ffi::LUA_REGISTRYINDEX {
            idx
        } else {
            self.top() + idx + 1
        }
    }

    #[inline]
    pub fn type_of(self, idx: c_int) -> c_int {
        // SAFETY: as for `top`; `lua_type` accepts any acceptable index.
        unsafe { ffi::lua_type(self.0, idx) }
    }

    pub fn type_name(self, idx: c_int) -> &'static str {
        type_name(self.type_of(idx))
    }

    #[inline]
    pub fn to_boolean(self, idx: c_int) -> bool {
        // SAFETY: as for `top`.
        unsafe { ffi::lua_toboolean(self.0, idx) != 0 }
    }

    #[inline]
    pub fn to_number(self, idx: c_int) -> f64 {
        // SAFETY: as for `top`; a non-number gives 0.
        unsafe { ffi::lua_tonumber(self.0, idx) }
    }

    /// The integer at `idx` if it is stored as an integer (Lua 5.3+ subtype); never on 5.1, 5.2
    /// or LuaJIT, whose numbers are all floats.
    #[inline]
    pub fn to_integer_exact(self, idx: c_int) -> Option<i64> {
        #[cfg(any(feature = "lua53", feature = "lua54", feature = "lua55"))]
        {
            // SAFETY: as for `top`.
            unsafe {
                if ffi::lua_isinteger(self.0, idx) != 0 {
                    return Some(ffi::lua_tointeger(self.0, idx));
                }
            }
        }
        let _ = idx;
        None
    }

    /// The bytes of the string at `idx`, or `None` if the value is not a string. Numbers are not
    /// converted (converting would change the stack slot and break table traversal).
    ///
    /// The slice stays valid while the string value stays on the stack (or anywhere else Lua keeps
    /// it alive): callers use it before popping the slot.
    #[inline]
    pub fn to_bytes<'a>(self, idx: c_int) -> Option<&'a [u8]> {
        if self.type_of(idx) != TSTRING {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: the slot holds a string, so `lua_tolstring` returns a pointer to `len` bytes that
        // Lua keeps alive while the value is referenced (see the doc comment above).
        unsafe {
            let p = ffi::lua_tolstring(self.0, idx, &mut len);
            if p.is_null() {
                return None;
            }
            Some(std::slice::from_raw_parts(p as *const u8, len))
        }
    }

    /// The bytes of the value at `idx`, which the caller has checked is a string (this skips
    /// the type check of [`State::to_bytes`]; on a number it would convert the slot in place).
    /// Same lifetime rule as `to_bytes`.
    #[inline]
    pub fn string_bytes<'a>(self, idx: c_int) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: as for `to_bytes`: Lua returns `len` bytes it keeps alive with the value.
        unsafe {
            let p = ffi::lua_tolstring(self.0, idx, &mut len);
            if p.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(p as *const u8, len)
        }
    }

    #[inline]
    pub fn to_userdata(self, idx: c_int) -> *mut c_void {
        // SAFETY: as for `top`.
        unsafe { ffi::lua_touserdata(self.0, idx) }
    }

    #[inline]
    pub fn to_pointer(self, idx: c_int) -> *const c_void {
        // SAFETY: as for `top`.
        unsafe { ffi::lua_topointer(self.0, idx) }
    }

    #[inline]
    pub fn raw_len(self, idx: c_int) -> usize {
        // SAFETY: as for `top`; the raw length never calls metamethods.
        unsafe { ffi::lua_rawlen(self.0, idx) }
    }

    #[inline]
    pub fn push_nil(self) {
        // SAFETY: as for `top`; callers checked the stack space.
        unsafe { ffi::lua_pushnil(self.0) }
    }

    #[inline]
    pub fn push_bool(self, b: bool) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_pushboolean(self.0, b as c_int) }
    }

    #[inline]
    pub fn push_integer(self, i: i64) {
        // SAFETY: as for `push_nil`. On 5.1/5.2/LuaJIT lua_Integer is pointer-sized; values there come
        // from our own counters, never from user data (numbers cross as floats on those runtimes).
        unsafe { ffi::lua_pushinteger(self.0, i as ffi::lua_Integer) }
    }

    #[inline]
    pub fn push_number(self, n: f64) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_pushnumber(self.0, n) }
    }

    /// Pushes a copy of `s` (may raise "not enough memory").
    #[inline]
    pub fn push_bytes(self, s: &[u8]) {
        // SAFETY: as for `push_nil`; Lua copies the bytes.
        unsafe {
            ffi::lua_pushlstring(self.0, s.as_ptr() as *const c_char, s.len());
        }
    }

    #[inline]
    pub fn push_str(self, s: &str) {
        self.push_bytes(s.as_bytes())
    }

    #[inline]
    pub fn push_value(self, idx: c_int) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_pushvalue(self.0, idx) }
    }

    /// Pushes a pointer as a light userdata (Lua stores the value, it never dereferences it).
    #[inline]
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn push_light_userdata(self, p: *mut c_void) {
        // SAFETY: as for `push_nil`; a light userdata is just a pointer value.
        unsafe { ffi::lua_pushlightuserdata(self.0, p) }
    }

    pub fn push_cclosure(self, f: ffi::lua_CFunction, nup: c_int) {
        // SAFETY: as for `push_nil`; `nup` values are on the stack (caller's contract).
        unsafe { ffi::lua_pushcclosure(self.0, f, nup) }
    }

    #[inline]
    pub fn create_table(self, narr: c_int, nrec: c_int) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_createtable(self.0, narr, nrec) }
    }

    /// `t[k] = v` without metamethods, with `t` at `idx` and `k`, `v` on top; pops both.
    #[inline]
    pub fn raw_set(self, idx: c_int) {
        // SAFETY: as for `push_nil`; callers never pass nil or NaN keys.
        unsafe { ffi::lua_rawset(self.0, idx) }
    }

    #[inline]
    pub fn raw_seti(self, idx: c_int, n: i64) {
        // SAFETY: as for `raw_set`.
        unsafe { ffi::lua_rawseti(self.0, idx, n as ffi::lua_Integer) }
    }

    /// Whether the values at `a` and `b` are primitively equal (no metamethods).
    #[inline]
    pub fn raw_equal(self, a: c_int, b: c_int) -> bool {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_rawequal(self.0, a, b) != 0 }
    }

    /// Pushes `t[k]` without metamethods, `t` at `idx`, `k` on top (replaced by the value).
    #[inline]
    pub fn raw_get(self, idx: c_int) -> c_int {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_rawget(self.0, idx) }
    }

    #[inline]
    pub fn raw_geti(self, idx: c_int, n: i64) -> c_int {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_rawgeti(self.0, idx, n as ffi::lua_Integer) }
    }

    /// Pushes `t[name]` without metamethods.
    pub fn raw_get_str(self, idx: c_int, name: &str) -> c_int {
        let idx = self.abs_index(idx);
        self.push_str(name);
        self.raw_get(idx)
    }

    /// `t[name] = top` without metamethods; pops the value.
    pub fn raw_set_str(self, idx: c_int, name: &str) {
        let idx = self.abs_index(idx);
        self.push_str(name);
        self.insert(-2);
        self.raw_set(idx);
    }

    /// Sets field `name` of the table on top of the stack to a C function.
    pub fn set_fn(self, name: &str, f: ffi::lua_CFunction) {
        self.push_cclosure(f, 0);
        self.raw_set_str(-2, name);
    }

    #[inline]
    pub fn next(self, idx: c_int) -> bool {
        // SAFETY: as for `push_nil`; the key on top came from the previous `next` (or is nil) and
        // the table is not modified during traversal.
        unsafe { ffi::lua_next(self.0, idx) != 0 }
    }

    #[inline]
    pub fn insert(self, idx: c_int) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_insert(self.0, idx) }
    }

    /// Moves the top value into slot `idx` (popping it).
    #[inline]
    pub fn replace(self, idx: c_int) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_replace(self.0, idx) }
    }

    #[inline]
    pub fn remove(self, idx: c_int) {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_remove(self.0, idx) }
    }

    pub fn get_metatable(self, idx: c_int) -> bool {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_getmetatable(self.0, idx) != 0 }
    }

    pub fn set_metatable(self, idx: c_int) {
        // SAFETY: as for `push_nil`; a table is on top.
        unsafe {
            ffi::lua_setmetatable(self.0, idx);
        }
    }

    /// Makes the table on top the environment of the Lua function at `func` (its `_ENV` upvalue
    /// on Lua 5.4, its function environment on 5.1 and LuaJIT); pops the table.
    pub fn set_env(self, func: c_int) {
        let func = self.abs_index(func);
        #[cfg(any(feature = "lua51", feature = "luajit"))]
        // SAFETY: as for `push_nil`; `func` holds a Lua function and a table is on top.
        unsafe {
            ffi::lua_setfenv(self.0, func);
        }
        #[cfg(not(any(feature = "lua51", feature = "luajit")))]
        // SAFETY: as for `push_nil`; the first upvalue of a loaded main chunk is `_ENV`.
        unsafe {
            ffi::lua_setupvalue(self.0, func, 1);
        }
    }

    /// What a signal handler may change while the host waits: the hook of this thread and, on
    /// Lua 5.2+, of the main thread. The standalone interpreters answer Ctrl-C by setting a hook
    /// on the main state (`lua.c`'s `laction`, LuaJIT's too), which raises "interrupted!" at the
    /// next instruction; a blocked wait compares two marks to see that this happened.
    pub fn hook_mark(self) -> HookMark {
        let own = self.own_hook();
        #[cfg(not(any(feature = "lua51", feature = "luajit")))]
        let main = {
            // SAFETY: as for `top`. `lua_pushthread` tells whether this is the main thread (the
            // usual case, then nothing else is read); otherwise `lua_rawgeti` on the registry
            // reads it without metamethods or allocation. The caller has the slot: waits run with
            // a near-empty stack. The main thread lives as long as the state.
            unsafe {
                let is_main = ffi::lua_pushthread(self.0) == 1;
                ffi::lua_settop(self.0, -2);
                if is_main {
                    None
                } else {
                    ffi::lua_rawgeti(self.0, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_MAINTHREAD);
                    let main = ffi::lua_tothread(self.0, -1);
                    ffi::lua_settop(self.0, -2);
                    (!main.is_null()).then(|| {
                        (
                            ffi::lua_gethook(main).map(|h| h as usize),
                            ffi::lua_gethookmask(main),
                        )
                    })
                }
            }
        };
        // Lua 5.1 and LuaJIT have no public way to reach the main thread from a coroutine: a wait
        // inside a coroutine sees only that coroutine's hook there.
        #[cfg(any(feature = "lua51", feature = "luajit"))]
        let main = None;
        HookMark { own, main }
    }

    /// The hook of this thread (function and mask): a protected call that fails while it changed
    /// was cut short by a hook, such as the interpreter's Ctrl-C hook, which clears itself.
    #[inline]
    pub fn own_hook(self) -> (Option<usize>, c_int) {
        // SAFETY: as for `top`; reading a hook changes nothing.
        unsafe {
            (
                ffi::lua_gethook(self.0).map(|h| h as usize),
                ffi::lua_gethookmask(self.0),
            )
        }
    }

    /// Pushes the registry.
    pub fn push_registry(self) {
        self.push_value(ffi::LUA_REGISTRYINDEX)
    }

    /// Pushes the global table.
    pub fn push_globals(self) {
        // SAFETY: as for `push_nil`.
        unsafe {
            ffi::lua_pushglobaltable(self.0);
        }
    }

    /// Allocates a full userdata of `size` bytes and pushes it (may raise "not enough memory").
    pub fn new_userdata(self, size: usize) -> *mut c_void {
        // SAFETY: as for `push_nil`.
        unsafe { ffi::lua_newuserdata(self.0, size) }
    }

    /// Calls the function below `nargs` arguments in protected mode with message handler `msgh`
    /// (0 = none). Returns the Lua status code.
    #[inline]
    pub fn pcall(self, nargs: c_int, nresults: c_int, msgh: c_int) -> c_int {
        // SAFETY: as for `push_nil`; the callee and its arguments are on the stack.
        unsafe { ffi::lua_pcall(self.0, nargs, nresults, msgh) }
    }

    /// Compiles `source` as a text chunk named `chunkname` and pushes the function, or the error
    /// message. Binary chunks are refused: only the pool produces bytecode.
    pub fn load_text(self, source: &[u8], chunkname: &str) -> c_int {
        if source.first() == Some(&0x1b) {
            self.push_str("attempt to load a binary chunk (pass Lua source text)");
            return ffi::LUA_ERRSYNTAX;
        }
        self.load(source, chunkname, c"t")
    }

    /// Loads bytecode produced by [`State::dump`].
    pub fn load_binary(self, bytecode: &[u8], chunkname: &str) -> c_int {
        self.load(bytecode, chunkname, c"b")
    }

    fn load(self, buf: &[u8], chunkname: &str, mode: &std::ffi::CStr) -> c_int {
        let mut name = Vec::with_capacity(chunkname.len() + 2);
        name.push(b'=');
        name.extend(chunkname.bytes().filter(|&b| b != 0));
        name.push(0);
        // SAFETY: as for `push_nil`; `buf` outlives the call and `name` is NUL-terminated.
        unsafe {
            ffi::luaL_loadbufferx(
                self.0,
                buf.as_ptr() as *const c_char,
                buf.len(),
                name.as_ptr() as *const c_char,
                mode.as_ptr(),
            )
        }
    }

    /// Dumps the Lua function on top of the stack to bytecode (debug info kept, so child
    /// tracebacks name the chunk and line).
    pub fn dump(self) -> Option<Vec<u8>> {
        let mut out: Vec<u8> = Vec::new();
        // SAFETY: a function is on top (caller's contract); the writer only appends to `out`.
        let rc = unsafe {
            ffi::lua_dump(
                self.0,
                append_writer,
                &mut out as *mut Vec<u8> as *mut c_void,
                0,
            )
        };
        (rc == 0 && !out.is_empty()).then_some(out)
    }

    /// Bytes the collector counts as in use (`collectgarbage("count")`, exact).
    #[cfg(feature = "lua55")]
    pub fn gc_count_bytes(self) -> usize {
        // SAFETY: as for `push_nil`; counting neither allocates nor raises.
        let (kb, b) = unsafe {
            (
                ffi::lua_gc(self.0, ffi::LUA_GCCOUNT),
                ffi::lua_gc(self.0, ffi::LUA_GCCOUNTB),
            )
        };
        kb.max(0) as usize * 1024 + b.max(0) as usize
    }

    /// True if the value at `idx` is a C function (not a Lua function).
    #[inline]
    pub fn is_cfunction(self, idx: c_int) -> bool {
        // SAFETY: as for `top`.
        unsafe { ffi::lua_iscfunction(self.0, idx) != 0 }
    }

    /// Pushes upvalue `n` of the function at `idx` and returns its name, or pushes nothing and
    /// returns `None` past the last upvalue. (C functions' upvalues are named "".)
    #[inline]
    pub fn get_upvalue<'a>(self, idx: c_int, n: c_int) -> Option<&'a [u8]> {
        // SAFETY: as for `top`; the name lives in the function's prototype, which the caller
        // keeps alive (on the stack) while it uses the name.
        unsafe {
            let name = ffi::lua_getupvalue(self.0, idx, n);
            (!name.is_null()).then(|| std::ffi::CStr::from_ptr(name).to_bytes())
        }
    }

    /// Pops the top value into upvalue `n` of the function at `idx`; false (and the value left
    /// on the stack) if the function has no such upvalue.
    #[inline]
    pub fn set_upvalue(self, idx: c_int, n: c_int) -> bool {
        // SAFETY: as for `top`; a value is on top (caller's contract).
        unsafe { !ffi::lua_setupvalue(self.0, idx, n).is_null() }
    }

    /// Pushes `registry[key]` (keyed by the static's address, a light userdata) and returns its
    /// type.
    #[inline]
    pub fn raw_get_p(self, key: &'static u8) -> c_int {
        // SAFETY: as for `top`; a raw get never calls metamethods nor allocates, and the address
        // is only a key.
        unsafe {
            ffi::lua_rawgetp(
                self.0,
                ffi::LUA_REGISTRYINDEX,
                key as *const u8 as *const c_void,
            )
        }
    }

    /// Full garbage collection.
    pub fn gc_collect(self) {
        // SAFETY: as for `push_nil`.
        unsafe {
            ffi::lua_gc(self.0, ffi::LUA_GCCOLLECT, 0);
        }
    }

    /// Raises the message on top of the stack as a Lua error.
    ///
    /// # Safety
    /// Never returns: it unwinds (LuaJIT) or `longjmp`s (PUC Lua) to the enclosing protected call.
    /// The caller must hold no Rust value with a destructor in any frame between here and that
    /// protected call.
    pub unsafe fn error(self) -> ! {
        // SAFETY: forwarded to the caller's contract above.
        unsafe { ffi::lua_error(self.0) }
    }
}

pub fn type_name(t: c_int) -> &'static str {
    match t {
        ffi::LUA_TNIL => "nil",
        ffi::LUA_TBOOLEAN => "boolean",
        ffi::LUA_TLIGHTUSERDATA => "userdata",
        ffi::LUA_TNUMBER => "number",
        ffi::LUA_TSTRING => "string",
        ffi::LUA_TTABLE => "table",
        ffi::LUA_TFUNCTION => "function",
        ffi::LUA_TUSERDATA => "userdata",
        ffi::LUA_TTHREAD => "thread",
        ffi::LUA_TNONE => "no value",
        _ => "cdata",
    }
}

/// A Lua C function that returns its result count in the whole of its return register.
///
/// LuaJIT's x64 interpreter uses the full 64-bit register after calling a C function, while the
/// C ABI leaves the upper half of an `int` result undefined. Release builds of Rust do return
/// counts with garbage there (loaded from a wider `Result`), and LuaJIT then copies a bogus number
/// of results: `print(pool)` crashed. Returning `isize` defines the whole register.
pub type WideCFunction = unsafe extern "C-unwind" fn(*mut lua_State) -> isize;

// `c_function` holds where an `isize` result and an `int` result come back in the same register,
// the `int` in its low 32 bits: every 32-bit target (`isize` is `i32` there) and these 64-bit ones,
// whose C ABIs return integers in one general register (rax, x0, a0, r3, r2, a0) and read an
// `int` from its low half (extended, on the last four, exactly as a small non-negative `isize`
// is). Another target must be checked before it is added here.
#[cfg(not(any(
    target_pointer_width = "32",
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "powerpc64",
    target_arch = "s390x",
    target_arch = "loongarch64",
)))]
compile_error!(
    "vmpool: lua::c_function passes isize-returning functions as lua_CFunction; check that this \
     target's C ABI returns an int in the low half of the register an isize uses, then add it"
);

/// Turns a [`WideCFunction`] into the `lua_CFunction` type Lua's API takes.
pub const fn c_function(f: WideCFunction) -> ffi::lua_CFunction {
    // SAFETY: both are `extern "C-unwind"` functions of one pointer argument that differ only in
    // their result, an `isize` where the caller expects a C `int`. On the targets the guard above
    // admits, both results come back in the same register, the `int` in its low 32 bits, so a C
    // caller (Lua) that reads an `int` reads the count, which is small and non-negative (0 to a
    // few thousand: the values the function pushed). Rust code never calls the function through
    // the converted type.
    unsafe { std::mem::transmute::<WideCFunction, ffi::lua_CFunction>(f) }
}

/// Declares a Lua C function (a `lua_CFunction` constant) that runs
/// `$body(state) -> Result<c_int, Error>` with Rust panics caught and errors raised as plain
/// `vmpool: ...` strings.
#[macro_export]
#[doc(hidden)]
macro_rules! lua_function {
    ($(#[$m:meta])* $vis:vis fn $name:ident => $body:path) => {
        $(#[$m])*
        #[allow(non_upper_case_globals)]
        $vis const $name: mlua::ffi::lua_CFunction = {
            unsafe extern "C-unwind" fn wide(l: *mut $crate::lua::lua_State) -> isize {
                // SAFETY: Lua calls a C function with its own live state on the current thread.
                let state = unsafe { $crate::lua::State::from_raw(l) };
                $crate::lua::run_protected(state, $body) as isize
            }
            $crate::lua::c_function(wide)
        };
    };
}

/// The `lua_Writer` of every dump: appends each block to the `Vec<u8>` that `ud` points to.
///
/// # Safety
/// `ud` is a live `Vec<u8>` used by nobody else during the `lua_dump` call.
pub unsafe extern "C-unwind" fn append_writer(
    _l: *mut lua_State,
    p: *const c_void,
    sz: usize,
    ud: *mut c_void,
) -> c_int {
    // Lua 5.5 ends the dump with a call that passes no block (NULL, 0)
    if p.is_null() || sz == 0 {
        return 0;
    }
    // SAFETY: `ud` is a live `Vec` (contract); Lua hands `sz` readable bytes at `p` (not null:
    // checked above).
    unsafe {
        (*(ud as *mut Vec<u8>)).extend_from_slice(std::slice::from_raw_parts(p as *const u8, sz))
    };
    0
}

impl State {
    /// The main thread of this state's universe, for [`State::hook_mark_with`]: it lives as long
    /// as the state. Null on Lua 5.1 and LuaJIT, which have no public way to reach it (and if
    /// the registry's entry for it was replaced by something else).
    pub fn main_thread(self) -> *mut lua_State {
        #[cfg(not(any(feature = "lua51", feature = "luajit")))]
        // SAFETY: as for `top`; `lua_rawgeti` on the registry reads without metamethods or
        // allocation, and a C function has the slot (`LUA_MINSTACK`). The thread found is
        // alive while it is on this stack; `lua_pushthread` on it (with room made first, which
        // answers false rather than raising on 5.2+) says whether it is the main thread, which
        // lives as long as the state, and is popped at once.
        unsafe {
            ffi::lua_rawgeti(self.0, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_MAINTHREAD);
            let mut main = ffi::lua_tothread(self.0, -1);
            if !main.is_null() {
                let is_main = ffi::lua_checkstack(main, 1) != 0 && {
                    let is_main = ffi::lua_pushthread(main) == 1;
                    ffi::lua_settop(main, -2);
                    is_main
                };
                if !is_main {
                    main = std::ptr::null_mut();
                }
            }
            ffi::lua_settop(self.0, -2);
            main
        }
        #[cfg(any(feature = "lua51", feature = "luajit"))]
        std::ptr::null_mut()
    }

    /// [`State::hook_mark`] given this universe's [`State::main_thread`]: the same mark without
    /// asking Lua which thread is the main one.
    ///
    /// # Safety
    /// `main` is null or the main thread of this state's universe.
    #[inline]
    pub unsafe fn hook_mark_with(self, main: *mut lua_State) -> HookMark {
        let own = self.own_hook();
        let main = if main.is_null() || main == self.0 {
            None
        } else {
            // SAFETY: `main` is the main thread of this state's universe (the contract), which
            // lives as long as the state; reading its hook changes nothing.
            unsafe {
                Some((
                    ffi::lua_gethook(main).map(|h| h as usize),
                    ffi::lua_gethookmask(main),
                ))
            }
        };
        HookMark { own, main }
    }
}
