//! The module as the host Lua sees it: `luaopen_vmpool` builds the metatables of the pool, future
//! and notifier types, the native functions, and then runs the Lua half of the module
//! (`src/lua/vmpool.lua`: `co_invoke`, `vmpool.run`, `vmpool.spawn`) over them; inside OpenResty
//! that also loads the adapter in `src/lua/ngx.lua` (`vmpool.ngx`). The event-loop adapters
//! (`src/lua/luv.lua`, `src/lua/cqueues.lua`) are compiled in too: `vmpool.lua` makes them the
//! `package.preload` entries of `vmpool.luv` and `vmpool.cqueues`, and [`open_adapter`] is what
//! `require` finds in the library when it looks for those names before `vmpool` is loaded.

pub mod call_io;
pub mod channel_api;
#[cfg(feature = "count-alloc")]
pub mod count_alloc;
pub mod dict;
pub mod future_api;
pub mod map_api;
pub mod map_run;
pub mod metrics_api;
pub mod ngx_ffi;
pub mod ngx_state_api;
pub mod notifier_api;
pub mod options;
pub mod pool_api;
pub mod userdata;
pub mod waits;
pub mod yieldable;

use std::ffi::c_int;

use mlua::ffi;

use crate::lua::State;
use crate::Error;

/// The bytes of a string that LuaJIT's FFI passed as a pointer and a length (`dict/luajit.rs`,
/// `ngx_ffi.rs`): empty for a length of 0 or a null pointer.
///
/// # Safety
/// `ptr` is null or points to `len` readable bytes (a Lua string the caller keeps alive during
/// the call).
pub(crate) unsafe fn ffi_bytes<'a>(ptr: *const std::ffi::c_char, len: usize) -> &'a [u8] {
    if len == 0 || ptr.is_null() {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

/// `e` as a pool state's caller should read it: there, the host's "not enough memory in the host
/// Lua state" is this state's own memory (its `memory_limit`); `kept` says what was kept.
pub(crate) fn in_pool_state(e: Error, kept: impl FnOnce() -> String) -> Error {
    match e {
        Error::Host {
            doing,
            message: None,
        } if crate::child::call_armed() => Error::StateMemory {
            doing,
            kept: kept(),
        },
        e => e,
    }
}

/// The `__gc` of a userdata holding a `T`: drops the value ([`userdata::finalize`]).
pub(crate) fn finalize<T: userdata::Tagged>(st: State) -> Result<c_int, Error> {
    userdata::finalize::<T>(st, 1);
    Ok(0)
}

/// The Lua half of the module, compiled into the library.
const GLUE: &str = include_str!("../lua/vmpool.lua");
/// The OpenResty adapter: compiled by `vmpool.lua` only inside ngx_lua (`native._ngx_source`).
const NGX_GLUE: &str = include_str!("../lua/ngx.lua");
/// The event-loop adapters (`native._luv_source`, `native._cqueues_source`).
const LUV_GLUE: &str = include_str!("../lua/luv.lua");
const CQUEUES_GLUE: &str = include_str!("../lua/cqueues.lua");
/// The LuaJIT FFI path of `vmpool.shared` (`native._dict_ffi_source`, see `dict/luajit.rs`).
const DICT_FFI_GLUE: &str = include_str!("../lua/dict_ffi.lua");
/// `require "vmpool.luv"` through the library's `luaopen_vmpool_luv`: loading `vmpool` registers
/// the adapters in `package.preload`.
const ADAPTER_LOADER: &str = r#"local name = ...
require("vmpool")
local load_adapter = package.preload[name]
if type(load_adapter) ~= "function" then
  error("vmpool: package.preload['" .. name .. "'] was removed after vmpool loaded; restore it or load vmpool in a fresh state", 0)
end
return load_adapter(name)"#;

type Methods = &'static [(&'static str, ffi::lua_CFunction)];

const POOL_METHODS: Methods = &[
    ("compile", pool_api::compile),
    ("invoke", pool_api::invoke),
    ("submit", pool_api::submit),
    ("map", map_api::map),
    ("unload", pool_api::unload),
    ("stats", pool_api::stats),
    ("collect", pool_api::collect),
    ("close", pool_api::close),
    #[cfg(feature = "count-alloc")]
    ("_alloc_counts", count_alloc::alloc_counts),
    #[cfg(feature = "count-alloc")]
    ("_leak", count_alloc::leak),
];
const POOL_META: Methods = &[
    ("__gc", pool_api::gc),
    ("__close", pool_api::close_scope),
    ("__tostring", pool_api::tostring),
];
const FUTURE_METHODS: Methods = &[
    ("ready", future_api::ready),
    ("wait", future_api::wait),
    ("cancel", future_api::cancel),
    ("pollfd", future_api::pollfd),
    ("_subscribe", notifier_api::subscribe_future),
    ("_unsubscribe", notifier_api::unsubscribe_future),
];
const FUTURE_META: Methods = &[
    ("__gc", future_api::gc),
    ("__tostring", future_api::tostring),
];
const NOTIFIER_METHODS: Methods = &[
    ("wait", notifier_api::wait),
    ("drain", notifier_api::drain),
    ("pending", notifier_api::pending),
    ("_collect", notifier_api::collect),
    ("_doorbell_listen", notifier_api::doorbell_listen),
    ("_doorbell_accept", notifier_api::doorbell_accept),
    ("_doorbell_close", notifier_api::doorbell_close),
    ("_wake", notifier_api::wake),
    ("_pollfd", notifier_api::pollfd),
    ("_token", notifier_api::next_token),
    ("_call", notifier_api::call_api),
    ("_flush", notifier_api::flush),
    ("_open_batch", notifier_api::open_batch),
    ("_batch_open", notifier_api::batch_open),
    ("_close_batch", notifier_api::close_batch),
    ("_take", notifier_api::take),
    ("_done", notifier_api::done),
    ("_drop", notifier_api::drop_call),
    ("_watch", map_api::watch),
    ("_unwatch", notifier_api::unwatch),
];
const NOTIFIER_META: Methods = &[("__gc", notifier_api::gc)];
const MAP_METHODS: Methods = &[
    ("_step", map_api::step),
    ("_ready", map_api::ready),
    ("_cancel", map_api::cancel),
    ("_subscribe", map_api::subscribe),
];
const MAP_META: Methods = &[("__gc", map_api::gc), ("__tostring", map_api::tostring)];
const FUNCTIONS: Methods = &[
    ("new", pool_api::new_pool),
    ("shared", dict::shared),
    ("_ngx_state", ngx_state_api::ngx_state),
    ("clock", clock),
    ("memory", pool_api::memory),
    ("_metrics", metrics_api::metrics),
    ("_notifier", notifier_api::new_notifier),
    ("_map", map_api::new_map),
    ("_yieldable", yieldable::yieldable),
    ("_function_cache", function_cache),
    ("_limit_hook", limit_hook),
    ("_channel", channel_api::channel),
    ("_chan_push", channel_api::push),
    ("_chan_pop", channel_api::pop),
    ("_chan_push_or_wait", channel_api::push_or_wait),
    ("_chan_pop_or_wait", channel_api::pop_or_wait),
    ("_chan_close", channel_api::close),
    ("_chan_len", channel_api::len),
    ("_chan_capacity", channel_api::capacity),
    ("_chan_is_closed", channel_api::is_closed),
    ("_chan_name", channel_api::chan_name),
    ("_chan_gc", channel_api::channel_gc),
    ("_chan_eq", channel_api::chan_eq),
    ("_select", channel_api::select_blocking),
    ("_select_or_wait", channel_api::select_or_wait),
    ("_waiter", channel_api::waiter),
    ("_stream", channel_api::stream),
    ("_waiter_subscribe", channel_api::waiter_subscribe),
    ("_waiter_unsubscribe", channel_api::waiter_unsubscribe),
    ("_waiter_ready", channel_api::waiter_ready),
    ("_waiter_gc", channel_api::waiter_gc),
];

crate::lua_function!(fn function_cache => function_cache_impl);
/// `vmpool._function_cache()` -> loads, hits: how many times the process's states loaded a
/// function's bytecode, and how many callees they found already loaded (for the specs).
fn function_cache_impl(st: State) -> Result<c_int, Error> {
    use std::sync::atomic::Ordering::Relaxed;
    st.push_integer(crate::value::LOADS.load(Relaxed) as i64);
    st.push_integer(crate::value::HITS.load(Relaxed) as i64);
    Ok(2)
}

crate::lua_function!(fn limit_hook => limit_hook_impl);
/// `vmpool._limit_hook()`: how a new time-limited pool's calls get the limit hook (for the specs):
/// "thread" (the watchdog sets it), "signal" (the watchdog's signal does, Lua 5.4 and 5.5) or
/// "count" (a count hook all the time).
fn limit_hook_impl(st: State) -> Result<c_int, Error> {
    st.push_str(crate::child::watchdog::mechanism());
    Ok(1)
}

crate::lua_function!(fn clock => clock_impl);
/// `vmpool.clock()`: seconds on a monotonic clock (for timing; plain Lua has only `os.time`).
fn clock_impl(st: State) -> Result<c_int, Error> {
    st.push_number(crate::clock::monotonic_ns() as f64 * 1e-9);
    Ok(1)
}

/// `require "vmpool"`: the body of `luaopen_vmpool`. Building the module allocates: it runs
/// protected, so an error there (out of memory, a finalizer that raises) is a `vmpool:` error of
/// `require`.
pub fn open(st: State) -> Result<c_int, Error> {
    crate::abi::check_host()?;
    crate::sys::fork_generation();
    if !st.check_stack(16) {
        return Err(Error::no_stack("opening the module"));
    }
    st.set_top(0);
    let mut failed: Option<Error> = None;
    let built = st.protect_detached(&mut |st| match build(st) {
        Ok(n) => n,
        Err(e) => {
            failed = Some(e);
            0
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    match built {
        Ok(()) => Ok(1),
        Err(rc) => {
            let message =
                (rc != mlua::ffi::LUA_ERRMEM).then(|| crate::lua::errors::describe_error(st, -1));
            st.pop(1);
            Err(Error::Host {
                doing: "opening the module".into(),
                message,
            })
        }
    }
}

/// `require "vmpool.luv"` (or `"vmpool.cqueues"`) when `require` reaches the library's
/// `luaopen_vmpool_luv`: requires `vmpool` and runs the adapter's preload entry, all in a
/// protected call, so that an error (luv not installed, say) never unwinds through Rust frames.
pub fn open_adapter(st: State, module: &str) -> Result<c_int, Error> {
    if !st.check_stack(8) {
        return Err(Error::no_stack("opening an adapter"));
    }
    st.set_top(0);
    if st.load_text(ADAPTER_LOADER.as_bytes(), "=vmpool/adapter") != 0 {
        return Err(Error::Internal(format!(
            "the adapter loader does not compile: {}",
            String::from_utf8_lossy(st.to_bytes(-1).unwrap_or_default())
        )));
    }
    st.push_str(module);
    if st.pcall(1, 1, 0) != 0 {
        let message = crate::lua::errors::describe_error(st, -1);
        st.pop(1);
        return Err(Error::Load {
            module: module.into(),
            message,
        });
    }
    Ok(1)
}

/// Builds the module table (inside `open`'s protected call) and leaves it on top.
fn build(st: State) -> Result<c_int, Error> {
    if !st.check_stack(16) {
        return Err(Error::no_stack("opening the module"));
    }
    st.set_top(0);
    crate::value::install(st);
    // slots 1..4: the metatables every function closes over, 5: the protected-call runner (see
    // userdata.rs)
    let metatable = |name: &str| {
        st.create_table(0, 6);
        st.push_str(name);
        st.raw_set_str(-2, "__name");
    };
    for name in [
        "vmpool.pool",
        "vmpool.future",
        "vmpool.notifier",
        "vmpool.map",
    ] {
        metatable(name);
    }
    st.push_cclosure(crate::lua::PROTECTED_RUNNER, 0);
    let native = 6;
    st.create_table(0, 8);
    let types: [(&str, c_int, Methods, Methods); 4] = [
        ("pool_methods", 1, POOL_METHODS, POOL_META),
        ("future_methods", 2, FUTURE_METHODS, FUTURE_META),
        ("notifier_methods", 3, NOTIFIER_METHODS, NOTIFIER_META),
        ("map_methods", 4, MAP_METHODS, MAP_META),
    ];
    for (field, mt, methods, meta) in types {
        st.create_table(0, methods.len() as c_int);
        set_closures(st, methods);
        st.push_value(-1);
        st.raw_set_str(mt, "__index");
        st.raw_set_str(native, field);
        st.push_value(mt);
        set_closures(st, meta);
        st.pop(1);
    }
    set_closures(st, FUNCTIONS);
    st.push_str(crate::VERSION);
    st.raw_set_str(native, "_VERSION");
    st.push_str(crate::abi::RUNTIME);
    st.raw_set_str(native, "runtime");
    st.push_str(NGX_GLUE);
    st.raw_set_str(native, "_ngx_source");
    st.push_str(crate::sys::IMPLEMENTATION);
    st.raw_set_str(native, "_sys");
    st.push_integer(i64::from(crate::config::NGX_NICE));
    st.raw_set_str(native, "_ngx_nice");
    st.push_str(LUV_GLUE);
    st.raw_set_str(native, "_luv_source");
    st.push_str(CQUEUES_GLUE);
    st.raw_set_str(native, "_cqueues_source");
    st.push_str(DICT_FFI_GLUE);
    st.raw_set_str(native, "_dict_ffi_source");
    if let Some(path) = crate::sys::library_path() {
        st.push_bytes(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()));
        st.raw_set_str(native, "_library_path");
    }

    if st.load_text(GLUE.as_bytes(), "vmpool.lua") != 0 {
        return Err(Error::Internal(format!(
            "the module's Lua part does not compile: {}",
            String::from_utf8_lossy(st.to_bytes(-1).unwrap_or_default())
        )));
    }
    st.push_value(native);
    let rc = st.pcall(1, 1, 0);
    if rc == mlua::ffi::LUA_ERRMEM {
        return Err(Error::Host {
            doing: "opening the module".into(),
            message: None,
        });
    }
    if rc != 0 {
        return Err(Error::Internal(format!(
            "the module's Lua part failed: {}",
            String::from_utf8_lossy(st.to_bytes(-1).unwrap_or_default())
        )));
    }
    Ok(1)
}

/// Sets each function as a closure over the module's upvalues (slots 1..=NUM_UPVALUES) into the
/// table on top.
fn set_closures(st: State, fns: Methods) {
    for &(name, f) in fns {
        for mt in 1..=userdata::NUM_UPVALUES {
            st.push_value(mt);
        }
        st.push_cclosure(f, userdata::NUM_UPVALUES);
        st.raw_set_str(-2, name);
    }
}
