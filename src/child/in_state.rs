//! The C functions that run inside a child state, under the `lua_pcall` of [`super::Child`]: the
//! message handler, the call trampoline (find the function, decode the arguments, call it),
//! loading a chunk version into an environment of its own, and a full collection. They are plain
//! `extern "C-unwind"` functions, not `lua_function!`: Lua errors unwind through them (LuaJIT
//! raises them as foreign exceptions, which `catch_unwind` would turn into an abort), so nothing in
//! their frames has a destructor.

use std::ffi::{c_char, c_int};

use mlua::ffi;

use super::{
    Failure, RunCtx, Step, CHUNKS, ENCODE_STACK, FUNC_NAME, LOOKUP_ENV, LOOKUP_RETURNED,
    MAX_RESULTS,
};
use crate::lua::{State, TFUNCTION, TNIL, TTABLE};
use crate::value;

/// Adds the child's traceback to an error message. Other error values are shown the way the
/// standalone interpreter shows them: numbers as numbers, objects through their `__tostring`
/// (called protected: one that raises is described instead), anything else by its type.
pub(super) const MESSAGE_HANDLER: ffi::lua_CFunction = crate::lua::c_function(message_handler);
unsafe extern "C-unwind" fn message_handler(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls the handler with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    st.set_top(1);
    match st.type_of(1) {
        crate::lua::TSTRING => {
            // LuaJIT calls the handler for a stack overflow with no room to build a traceback
            // (trying ends as "error in error handling"): keep the message as it is
            if cfg!(feature = "luajit") && st.string_bytes(1).ends_with(b"stack overflow") {
                return 1;
            }
        }
        crate::lua::TNUMBER => {
            // SAFETY: converts the number in slot 1 to a string in place (the handler owns it)
            unsafe { ffi::lua_tolstring(l, 1, std::ptr::null_mut()) };
        }
        _ => {
            let what = st.type_name(1);
            let has_tostring = st.get_metatable(1) && {
                let has = st.raw_get_str(-1, "__tostring") != TNIL;
                st.pop(2);
                has
            };
            let shown = has_tostring && {
                st.push_cclosure(TOSTRING_FN, 0);
                st.push_value(1);
                st.pcall(1, 1, 0) == 0 && st.type_of(-1) == crate::lua::TSTRING
            };
            if shown {
                st.replace(1);
            } else {
                st.set_top(0);
                st.push_str("(error object is a ");
                st.push_str(what);
                st.push_str(if has_tostring {
                    " value whose __tostring failed)"
                } else {
                    " value)"
                });
                // SAFETY: three strings are on the stack.
                unsafe { ffi::lua_concat(l, 3) };
            }
        }
    }
    if !st.check_stack(ffi::LUA_TRACEBACK_STACK) {
        return 1;
    }
    // SAFETY: slot 1 holds a string (Lua strings are NUL-terminated and stay alive on the stack
    // during the call); luaL_traceback pushes the message with the traceback appended.
    unsafe {
        let msg: *const c_char = ffi::lua_tolstring(l, 1, std::ptr::null_mut());
        ffi::luaL_traceback(l, l, msg, 1);
    }
    1
}

/// Runs a full garbage collection, twice, inside the child's protected call. A plain C function,
/// not `lua_function!`: a finalizer's error unwinds through it (LuaJIT unwinds with a foreign
/// exception, which `catch_unwind` would turn into an abort).
pub(super) const COLLECT: ffi::lua_CFunction = crate::lua::c_function(collect_garbage);
unsafe extern "C-unwind" fn collect_garbage(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread; nothing in this frame has a
    // destructor, so an error raised by a finalizer may pass through to the enclosing pcall.
    let st = unsafe { State::from_raw(l) };
    st.gc_collect();
    st.gc_collect();
    0
}

/// `__tostring` of the value in slot 1, for the message handler (which calls it protected).
const TOSTRING_FN: ffi::lua_CFunction = crate::lua::c_function(call_tostring);
unsafe extern "C-unwind" fn call_tostring(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state; luaL_callmeta pushes the metamethod's
    // result (its errors go to the `lua_pcall` of the message handler).
    unsafe { ffi::luaL_callmeta(l, 1, c"__tostring".as_ptr()) as isize }
}

/// Runs one call inside the child's protected call: finds the function, pushes the arguments,
/// calls it and returns all its results.
pub(super) const TRAMPOLINE_FN: ffi::lua_CFunction = crate::lua::c_function(trampoline);
unsafe extern "C-unwind" fn trampoline(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls the trampoline with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    // SAFETY: `Child::run_function` pushed a pointer to a `RunCtx` that outlives this protected
    // call.
    let ctx = unsafe { &mut *(st.to_userdata(1) as *mut RunCtx) };
    // SAFETY: `RunCtx` points at the call's argument buffer (or the function name), which the
    // worker keeps alive and unchanged during the call.
    let args = unsafe { std::slice::from_raw_parts(ctx.args, ctx.args_len) };
    match ctx.step {
        Step::Call => {}
        Step::PushName => {
            st.push_bytes(args);
            return 1;
        }
        Step::Load => {
            load_chunk(st, ctx.chunk_id);
            return 0;
        }
        Step::Reserve => {
            // false means the stack's size limit (Lua 5.1, LuaJIT), which the encoder reports
            st.check_stack(ENCODE_STACK);
            return 0;
        }
        Step::PushCallee => {
            st.set_top(0);
            // SAFETY: as in `call_sent_function`.
            let (protos, fns) = unsafe { (&*ctx.protos, ctx.fns.as_mut()) };
            return match value::push_message(st, args, protos, fns, true) {
                Ok(1) if st.type_of(1) == TFUNCTION => 1,
                Ok(_) => {
                    ctx.failure = Failure::Corrupt("a map batch without its function");
                    0
                }
                Err(c) => {
                    ctx.failure = Failure::Corrupt(c.0);
                    0
                }
            };
        }
    }
    if ctx.chunk_id == crate::chunk::ANONYMOUS as i64 {
        return call_sent_function(st, ctx, args);
    }
    st.remove(1); // [name]
    if let Err(global) = find_function(st, ffi::lua_upvalueindex(1), ctx.chunk_id, 1) {
        ctx.failure = Failure::NoFunction { global };
        return 0;
    }
    st.replace(1); // [function]
                   // SAFETY: as in `call_sent_function`.
    let protos = unsafe { &*ctx.protos };
    let nargs = match value::push_message(st, args, protos, None, false) {
        Ok(n) => n,
        Err(c) => {
            ctx.failure = Failure::Corrupt(c.0);
            return 0;
        }
    };
    // SAFETY: the function and `nargs` arguments are on the stack; errors propagate to the
    // enclosing `lua_pcall` (see above).
    unsafe { ffi::lua_call(l, nargs, ffi::LUA_MULTRET) };
    results(st, ctx)
}

/// `pool:invoke(fn, ...)`: the message holds the function, then its arguments.
#[inline(never)]
fn call_sent_function(st: State, ctx: &mut RunCtx, args: &[u8]) -> isize {
    // SAFETY: `Child::run_function` set both from the child's own fields, which outlive this
    // protected call and are not touched by anything else during it.
    let (protos, fns) = unsafe { (&*ctx.protos, ctx.fns.as_mut()) };
    if ctx.callee_in_slot {
        st.remove(1); // [function]
        let nargs = match value::push_message(st, args, protos, fns, false) {
            Ok(n) => n,
            Err(c) => {
                ctx.failure = Failure::Corrupt(c.0);
                return 0;
            }
        };
        // SAFETY: as below.
        unsafe { ffi::lua_call(st.as_ptr(), nargs, ffi::LUA_MULTRET) };
        return results(st, ctx);
    }
    st.set_top(0);
    let n = match value::push_message(st, args, protos, fns, true) {
        Ok(n) => n,
        Err(c) => {
            ctx.failure = Failure::Corrupt(c.0);
            return 0;
        }
    };
    if n < 1 || st.type_of(1) != TFUNCTION {
        ctx.failure = Failure::Corrupt("a call message without its function");
        return 0;
    }
    // SAFETY: the function and its `n - 1` arguments are on the stack; errors propagate to the
    // enclosing `lua_pcall` (see above).
    unsafe { ffi::lua_call(st.as_ptr(), n - 1, ffi::LUA_MULTRET) };
    results(st, ctx)
}

/// After the call, with its results on the stack: makes room to encode them.
fn results(st: State, ctx: &mut RunCtx) -> isize {
    // The results are encoded after this protected call returns, and nested tables need stack
    // space for that. Growing the stack there raises "not enough memory" unprotected on Lua 5.1
    // and LuaJIT (ending the process) in a state at its memory limit; reserve it here instead.
    // (A `false` from `check_stack` means the stack's size limit on Lua 5.1 and LuaJIT, which
    // the encoder then reports, but usually no memory on Lua 5.2 to 5.4, which say no instead
    // of raising.)
    let n = st.top();
    ctx.nested = any_nested(st, 1, n);
    if ctx.nested && !room_for_nested(st, n) {
        ctx.failure = Failure::OutOfMemory;
        return 0;
    }
    n as isize
}

/// Whether a table or a function is among the values in slots `from..=to` (encoding them then
/// needs stack room: see [`room_for_nested`]).
pub(super) fn any_nested(st: State, from: c_int, to: c_int) -> bool {
    (from..=to).any(|i| matches!(st.type_of(i), TTABLE | TFUNCTION))
}

/// Makes the stack room that encoding `n` nested results needs; false only when Lua 5.2 to 5.5
/// refused it for want of memory. (Lua 5.1 and LuaJIT raise instead, so they call this in a
/// protected call; a refusal there, or of more than `MAX_RESULTS` values, is the stack's size
/// limit, which the encoder reports.)
pub(super) fn room_for_nested(st: State, n: c_int) -> bool {
    st.check_stack(ENCODE_STACK)
        || cfg!(any(feature = "lua51", feature = "luajit"))
        || n >= MAX_RESULTS
}

/// Sets the state up to send and receive functions (`value::install`), protected.
pub(super) const INSTALL: ffi::lua_CFunction = crate::lua::c_function(install);
unsafe extern "C-unwind" fn install(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread; nothing here has a
    // destructor.
    value::install(unsafe { State::from_raw(l) });
    0
}

/// Drops loaded chunk `id` (what it returned and its environment). Storing nil allocates nothing.
pub(super) fn forget_chunk(st: State, id: u64) {
    st.push_nil();
    st.raw_seti(CHUNKS, id as i64);
    st.push_nil();
    st.raw_seti(CHUNKS, -(id as i64));
}

/// Inside the trampoline, with `[ctx, chunk function]` on the stack: runs the chunk's top level in
/// an environment of its own, whose reads fall through to the state's globals (where `init` put
/// its helpers) and which keeps the chunk's own globals, and stores what the top level returned
/// (a table, else `false`) as `chunks[id]` and the environment as `chunks[-id]`. Chunks thus
/// never see each other's globals, and a version's functions are exactly what it defines.
fn load_chunk(st: State, id: i64) {
    let chunks = ffi::lua_upvalueindex(1);
    st.remove(1); // [f]
    st.create_table(0, 4); // [f, env]
                           // one metatable for every environment, kept at chunks[0]
    if st.raw_geti(chunks, 0) != TTABLE {
        st.pop(1);
        st.create_table(0, 1);
        st.push_globals();
        st.raw_set_str(-2, "__index");
        st.push_value(-1);
        st.raw_seti(chunks, 0);
    }
    st.set_metatable(-2);
    st.push_value(-1);
    st.set_env(1); // [f, env]
    st.push_value(1);
    // SAFETY: a function is on top; its errors propagate to the enclosing `lua_pcall`.
    unsafe { ffi::lua_call(st.as_ptr(), 0, 1) }; // [f, env, returned]
    if st.type_of(-1) != TTABLE {
        st.pop(1);
        st.push_bool(false);
    }
    st.raw_seti(chunks, id);
    st.raw_seti(chunks, -id);
}

/// Pushes the function a call names: field `name` (the string at slot `name`) of the table chunk
/// `id` returned (found in the table at `chunks`), else the chunk's own global of that name (in
/// its environment, `chunks[-id]`; not the state's globals). Raw gets: no metamethod runs, so
/// this cannot raise. On failure pushes nothing and says whether the chunk
/// returned no table (so only the globals were searched).
fn find_function(st: State, chunks: c_int, id: i64, name: c_int) -> Result<(), bool> {
    // `replace(-2)` drops the table under the function (cheaper than `remove`, which rotates)
    let returned_table = st.raw_geti(chunks, id) == TTABLE;
    if returned_table {
        st.push_value(name);
        if st.raw_get(-2) != TNIL {
            st.replace(-2);
            return check_callable(st, returned_table);
        }
        st.pop(1);
    }
    st.pop(1);
    st.raw_geti(chunks, -id);
    if st.type_of(-1) != TTABLE {
        st.pop(1);
        return Err(!returned_table);
    }
    st.push_value(name);
    st.raw_get(-2);
    st.replace(-2);
    check_callable(st, returned_table)
}

/// The direct call's lookup (see `Child::call_direct`): pushes the function the name in slot
/// `FUNC_NAME` names, found as [`find_function`] finds it in the tables of the lookup slots
/// (`returned`: the chunk returned a table), if it is a Lua or C function; pushes nothing and
/// returns false otherwise (no such function, or a callable table: the trampoline then finds it
/// again, and fails or calls it). Runs outside any protected call: raw gets and copies only,
/// which neither allocate nor raise; needs 1 free stack slot.
pub(super) fn push_named_function(st: State, returned: bool) -> bool {
    if returned {
        st.push_value(FUNC_NAME);
        match st.raw_get(LOOKUP_RETURNED) {
            TFUNCTION => return true,
            TNIL => st.pop(1),
            _ => {
                st.pop(1);
                return false;
            }
        }
    }
    st.push_value(FUNC_NAME);
    if st.raw_get(LOOKUP_ENV) == TFUNCTION {
        true
    } else {
        st.pop(1);
        false
    }
}

fn check_callable(st: State, returned_table: bool) -> Result<(), bool> {
    if is_callable(st, -1) {
        Ok(())
    } else {
        st.pop(1);
        Err(!returned_table)
    }
}

fn is_callable(st: State, idx: c_int) -> bool {
    match st.type_of(idx) {
        TFUNCTION => true,
        TNIL => false,
        _ => {
            if !st.get_metatable(idx) {
                return false;
            }
            let t = st.raw_get_str(-1, "__call");
            st.pop(2);
            t != TNIL
        }
    }
}
