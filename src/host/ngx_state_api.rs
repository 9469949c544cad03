//! `vmpool._ngx_state()`: gives a pool state inside nginx the `ngx` table that
//! `ngx.run_worker_thread`'s Lua VMs get, and more (see `src/lua/ngx_state.lua`).
//!
//! Pool states live in the nginx worker process, so ngx_lua's own functions are there to be
//! called. Like the peer, this asks ngx_lua's exported C functions to fill a fresh table in the
//! state: `ngx_http_lua_inject_string_api` (`encode_args`, `decode_args`, `quote_sql_str`,
//! `hmac_sha1`), `ngx_http_lua_inject_config_api` (`ngx.config`),
//! `ngx_http_lua_inject_shdict_api` (`ngx.shared`, on the worker's shared memory zones, whose
//! lists and key listing are C functions), and, beyond the peer, the constants the host's `ngx`
//! gets from `ngx_http_lua_inject_core_consts` (`OK`, `ERROR`, `AGAIN`, `DONE`, `DECLINED`) and
//! `ngx_http_lua_inject_http_consts` (every `HTTP_*` method and status), so that their values are
//! the host's by construction (both only push integers). The Lua part then loads lua-resty-core's FFI modules
//! over it. It runs as a plain C function in the state's own thread (never through the FFI,
//! which must not call back into the calling state).
//!
//! `inject_shdict_api` wants ngx_lua's main configuration, which ngx_lua itself finds with
//! nginx's `ngx_http_cycle_get_module_main_conf(ngx_cycle, ngx_http_lua_module)`; the same walk is
//! done here over the exported `ngx_cycle`, `ngx_http_module` and `ngx_http_lua_module`, using the
//! leading fields of nginx's structures, which have kept their places since modules became
//! loadable (nginx 1.9.11).

use std::ffi::{c_int, c_void, CStr};

use mlua::ffi;

use crate::lua::errors::describe_error;
use crate::lua::{lua_State, State, RUNNER_UPVALUE};
use crate::Error;

/// The Lua half, run with the filled table as its argument.
const NGX_STATE: &str = include_str!("../lua/ngx_state.lua");

type Inject = unsafe extern "C" fn(*mut lua_State);
type InjectShdict = unsafe extern "C" fn(*mut c_void, *mut lua_State);

fn symbol(name: &CStr) -> Result<*mut c_void, Error> {
    // SAFETY: dlsym only reads the loaded objects' symbol tables.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        return Err(Error::BadArgument(format!(
            "the ngx API of pool states needs nginx with ngx_http_lua_module (symbol {} not found); create the pool with ngx_api = false to go without it",
            name.to_string_lossy()
        )));
    }
    Ok(p)
}

/// ngx_lua's main configuration in this worker (`ngx_http_lua_main_conf_t *`).
fn lua_main_conf() -> Result<*mut c_void, Error> {
    let cycle_var = symbol(c"ngx_cycle")? as *const *const *const *const c_void;
    let http_module = symbol(c"ngx_http_module")? as *const usize;
    let lua_module = symbol(c"ngx_http_lua_module")? as *const usize;
    // SAFETY: these are nginx's globals, set up before any Lua code runs in a worker:
    // `ngx_cycle` points to the current `ngx_cycle_t`, whose first field is `void ****conf_ctx`
    // (one slot per module index); `ngx_module_t` starts with `ngx_uint_t ctx_index, index`; the
    // http module's slot holds an `ngx_http_conf_ctx_t` whose first field is `void **main_conf`
    // (one slot per http module's ctx_index). This is `ngx_http_cycle_get_module_main_conf`.
    // The worker's main thread rewrites `ngx_cycle` once, on exit, so it is read as volatile.
    unsafe {
        let cycle = std::ptr::read_volatile(cycle_var);
        if cycle.is_null() {
            return Err(Error::Internal("ngx_cycle is not set".into()));
        }
        let conf_ctx = *cycle as *const *const *const *mut c_void;
        // An exiting worker points `ngx_cycle` at a static exit cycle with no configuration
        // before it frees the real one; a state created then (its pool closing) gets no ngx API.
        if conf_ctx.is_null() {
            return Err(Error::Closed);
        }
        let http_index = *http_module.add(1);
        let http_ctx = *conf_ctx.add(http_index);
        if http_ctx.is_null() {
            return Err(Error::BadArgument(
                "the ngx API of pool states needs an http block in nginx.conf".into(),
            ));
        }
        let main_conf = *http_ctx;
        let lmcf = *main_conf.add(*lua_module);
        if lmcf.is_null() {
            return Err(Error::Internal("ngx_lua has no main configuration".into()));
        }
        Ok(lmcf)
    }
}

crate::lua_function!(pub fn ngx_state => ngx_state_impl);
/// Sets the global `ngx` of the calling (pool) state.
fn ngx_state_impl(st: State) -> Result<c_int, Error> {
    let string_api = symbol(c"ngx_http_lua_inject_string_api")?;
    let config_api = symbol(c"ngx_http_lua_inject_config_api")?;
    let shdict_api = symbol(c"ngx_http_lua_inject_shdict_api")?;
    let core_consts = symbol(c"ngx_http_lua_inject_core_consts")?;
    let http_consts = symbol(c"ngx_http_lua_inject_http_consts")?;
    let lmcf = lua_main_conf()?;
    if !st.check_stack(8) {
        return Err(Error::no_stack("the ngx API of a pool state"));
    }
    match st.load_text(NGX_STATE.as_bytes(), "vmpool/ngx_state.lua") {
        0 => {}
        ffi::LUA_ERRMEM => return Err(raised(st)),
        _ => {
            return Err(Error::Internal(format!(
                "vmpool/ngx_state.lua does not compile: {}",
                String::from_utf8_lossy(st.to_bytes(-1).unwrap_or_default())
            )))
        }
    }
    // The table and what ngx_lua's functions put in it allocate in this state, which raises
    // "not enough memory" under `memory_limit`: all of it runs protected, so the raise comes back
    // here as a status instead of unwinding through this frame (which aborts on LuaJIT, whose
    // errors Rust's `catch_unwind` cannot take). They raise nothing else: they read no argument.
    let filled = st.protect(RUNNER_UPVALUE, 0, &mut |st| {
        st.create_table(0, 104);
        // SAFETY: the symbols are ngx_lua's functions of these signatures (see the module
        // comment); each adds fields to the table on top of the stack of the state it is given,
        // which is this state, on its own thread, inside a protected call, where a raise lands
        // (no frame in between holds anything that needs dropping).
        unsafe {
            std::mem::transmute::<*mut c_void, Inject>(string_api)(st.as_ptr());
            std::mem::transmute::<*mut c_void, Inject>(config_api)(st.as_ptr());
            std::mem::transmute::<*mut c_void, InjectShdict>(shdict_api)(lmcf, st.as_ptr());
            std::mem::transmute::<*mut c_void, Inject>(core_consts)(st.as_ptr());
            std::mem::transmute::<*mut c_void, Inject>(http_consts)(st.as_ptr());
        }
        st.push_light_userdata(std::ptr::null_mut());
        st.raw_set_str(-2, "null");
        1
    });
    if filled.is_err() {
        // the compiled Lua part stays below the error: the caller's stack is dropped anyway
        return Err(raised(st));
    }
    match st.pcall(1, 0, 0) {
        0 => Ok(0),
        ffi::LUA_ERRMEM => Err(raised(st)),
        _ => Err(Error::BadArgument(format!(
            "cannot set up ngx in a pool state: {}",
            String::from_utf8_lossy(st.to_bytes(-1).unwrap_or(b"(error object is not a string)"))
        ))),
    }
}

/// The error on top of the stack (popped), passed on as Lua raised it.
fn raised(st: State) -> Error {
    let message = describe_error(st, -1);
    st.pop(1);
    Error::AsNgx(message)
}
