//! Which Lua this build is for, and a check that the host that loaded it is that Lua.
//!
//! A build for one runtime can load into another without a linker error (the Lua 5.1 build loads
//! into LuaJIT and would run children without `jit`); the module never links a Lua library, so it
//! looks at the symbols the host process exports instead.

use crate::Error;

// mlua refuses to build with more than one runtime feature, so exactly one of these applies.
#[cfg(feature = "luajit")]
pub const RUNTIME: &str = "LuaJIT";
#[cfg(feature = "lua55")]
pub const RUNTIME: &str = "Lua 5.5";
#[cfg(feature = "lua54")]
pub const RUNTIME: &str = "Lua 5.4";
#[cfg(feature = "lua53")]
pub const RUNTIME: &str = "Lua 5.3";
#[cfg(feature = "lua52")]
pub const RUNTIME: &str = "Lua 5.2";
#[cfg(feature = "lua51")]
pub const RUNTIME: &str = "Lua 5.1";

fn exported(name: &std::ffi::CStr) -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT only looks the name up in the process's global scope.
    unsafe { !libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()).is_null() }
}

/// True for the error Lua 5.3's auxiliary library raises when a string buffer cannot grow
/// (`string.rep`, `table.concat`, `string.format`, ...). 5.3 raises it as an ordinary runtime
/// error ("not enough memory for buffer allocation", after the position and before the
/// traceback) where the other runtimes raise a memory error; in a state with a memory limit it
/// means the limit was hit. (A chunk that raises that very message itself is taken at its word.)
pub fn is_buffer_memory_error(message: Option<&[u8]>) -> bool {
    cfg!(feature = "lua53")
        && message
            .and_then(|m| m.split(|&b| b == b'\n').next())
            .is_some_and(|line| line.ends_with(b"not enough memory for buffer allocation"))
}

/// The runtime the host process runs, judged by its exported symbols: each test names a
/// function that first appeared in that version (or only exists there), newest first, since later
/// versions keep most of the earlier API.
pub fn host_runtime() -> Option<&'static str> {
    if exported(c"luaJIT_setmode") {
        Some("LuaJIT")
    } else if exported(c"lua_pushexternalstring") {
        Some("Lua 5.5")
    } else if exported(c"lua_newuserdatauv") {
        Some("Lua 5.4")
    } else if exported(c"lua_rotate") {
        Some("Lua 5.3")
    } else if exported(c"lua_callk") {
        Some("Lua 5.2")
    } else if exported(c"lua_setfenv") {
        Some("Lua 5.1")
    } else {
        None
    }
}

/// The `make rock LUA=...` name of a runtime as [`host_runtime`] reports it.
fn rock_name(runtime: &str) -> &'static str {
    match runtime {
        "LuaJIT" => "luajit",
        "Lua 5.5" => "lua5.5",
        "Lua 5.4" => "lua5.4",
        "Lua 5.3" => "lua5.3",
        "Lua 5.2" => "lua5.2",
        _ => "lua5.1",
    }
}

/// Refuses to open in a host whose runtime differs from the one this build is for.
pub fn check_host() -> Result<(), Error> {
    match host_runtime() {
        Some(host) if host != RUNTIME => Err(Error::BadArgument(format!(
            "this vmpool build is for {RUNTIME} but was loaded into {host}; install the build for {host} (e.g. make rock LUA={})",
            rock_name(host)
        ))),
        _ => Ok(()),
    }
}
