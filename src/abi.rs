//! Which Lua this build is for, and a check that the host that loaded it is that Lua.
//!
//! A build for one runtime can load into another without a linker error (the Lua 5.1 build loads
//! into LuaJIT and would run children without `jit`); the module never links a Lua library, so it
//! looks at the symbols the host process exports instead.

use crate::Error;

#[cfg(feature = "luajit")]
pub const RUNTIME: &str = "LuaJIT";
#[cfg(all(feature = "lua54", not(feature = "luajit")))]
pub const RUNTIME: &str = "Lua 5.4";
#[cfg(all(feature = "lua51", not(feature = "luajit"), not(feature = "lua54")))]
pub const RUNTIME: &str = "Lua 5.1";

fn exported(name: &std::ffi::CStr) -> bool {
    // SAFETY: dlsym with RTLD_DEFAULT only looks the name up in the process's global scope.
    unsafe { !libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()).is_null() }
}

/// The runtime the host process runs, judged by its exported symbols.
pub fn host_runtime() -> Option<&'static str> {
    if exported(c"luaJIT_setmode") {
        Some("LuaJIT")
    } else if exported(c"lua_newuserdatauv") {
        Some("Lua 5.4")
    } else if exported(c"lua_setfenv") {
        Some("Lua 5.1")
    } else {
        None
    }
}

/// Refuses to open in a host whose runtime differs from the one this build is for.
pub fn check_host() -> Result<(), Error> {
    match host_runtime() {
        Some(host) if host != RUNTIME => Err(Error::BadArgument(format!(
            "this vmpool build is for {RUNTIME} but was loaded into {host}; install the build for {host} (e.g. make rock LUA={})",
            match host {
                "LuaJIT" => "luajit",
                "Lua 5.4" => "lua5.4",
                _ => "lua5.1",
            }
        ))),
        _ => Ok(()),
    }
}
