//! The `vmpool.so` of the binary rock (`make dist`): the rock carries one vmpool build per Lua
//! runtime under `vmpool/build/<runtime>.so` next to this file, and this library, which links no
//! Lua and calls no Lua function before it knows the host, loads the build for the Lua that
//! required it and hands over to the build's entry point. The Lua 5.1 slot of LuaRocks serves PUC
//! Lua 5.1 and LuaJIT alike, so one installed rock must pick by the process, not by the tree.
//!
//! The host is judged as `abi::host_runtime` in vmpool does: by the API functions the process
//! exports, newest first. The build itself checks the host again when it opens.

#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A Lua C function as vmpool's builds define their entry points (the `isize` covers the whole
/// return register, as `lua::WideCFunction` in vmpool explains).
type Entry = unsafe extern "C-unwind" fn(*mut c_void) -> isize;

fn exported(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT only looks the name up in the process's global scope.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// The build's file name for the runtime the process runs, and that runtime's name for messages.
fn host_build() -> Option<(&'static str, &'static str)> {
    [
        (c"luaJIT_setmode", "luajit", "LuaJIT"),
        (c"lua_pushexternalstring", "lua5.5", "Lua 5.5"),
        (c"lua_newuserdatauv", "lua5.4", "Lua 5.4"),
        (c"lua_rotate", "lua5.3", "Lua 5.3"),
        (c"lua_callk", "lua5.2", "Lua 5.2"),
        (c"lua_setfenv", "lua5.1", "Lua 5.1"),
    ]
    .into_iter()
    .find(|(symbol, _, _)| !exported(symbol).is_null())
    .map(|(_, file, name)| (file, name))
}

/// The path this library was loaded from (`dladdr` on one of its functions).
fn own_path() -> Option<PathBuf> {
    // SAFETY: `Dl_info` is plain data; zeroed is a valid value for it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address is a function of this object; `dladdr` only fills `info`.
    if unsafe { libc::dladdr(own_path as *const c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: on success `dli_fname` is a NUL-terminated path owned by the loader, copied at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated message owned by libc, copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The entry point `entry` of the build for the host, or the message that says why there is none.
fn resolve(entry: &CStr) -> Result<Entry, String> {
    let (file, runtime) = host_build().ok_or_else(|| {
        "vmpool: the Lua that loaded vmpool is none of Lua 5.1 to 5.5 or LuaJIT (it exports none of \
         their API functions); install vmpool from the source rock for it"
            .to_string()
    })?;
    let dir = own_path()
        .as_deref()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            "vmpool: the binary rock cannot find its own directory (dladdr)".to_string()
        })?;
    let build = dir.join("vmpool").join("build").join(format!("{file}.so"));
    let missing = |why: String| {
        format!(
            "vmpool: this binary rock has no working build for {runtime}: {} ({why}); reinstall the rock, or install the source rock (needs cargo)",
            build.display()
        )
    };
    let cpath = CString::new(build.as_os_str().as_bytes()).map_err(|e| missing(e.to_string()))?;
    // SAFETY: a NUL-terminated path; the build is linked with `-z nodelete` and never closed.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(missing(dlerror()));
    }
    // SAFETY: `handle` is a live handle and `entry` NUL-terminated.
    let f = unsafe { libc::dlsym(handle, entry.as_ptr()) };
    if f.is_null() {
        return Err(missing(dlerror()));
    }
    // SAFETY: vmpool's builds define every `luaopen_vmpool*` with the `Entry` signature.
    Ok(unsafe { std::mem::transmute::<*mut c_void, Entry>(f) })
}

/// Raises `message` as a Lua error in `l`, through the host's own `lua_pushlstring` and
/// `lua_error` (present in every runtime, same signatures).
///
/// # Safety
/// `l` is the live state that called the entry point.
unsafe fn raise(l: *mut c_void, message: String) -> isize {
    type PushLString =
        unsafe extern "C-unwind" fn(*mut c_void, *const c_char, usize) -> *const c_char;
    type Error = unsafe extern "C-unwind" fn(*mut c_void) -> c_int;
    let (push, error) = (exported(c"lua_pushlstring"), exported(c"lua_error"));
    if push.is_null() || error.is_null() {
        return 0;
    }
    // SAFETY: the host's exported functions, with the C API's signatures.
    let (push, error) = unsafe {
        (
            std::mem::transmute::<*mut c_void, PushLString>(push),
            std::mem::transmute::<*mut c_void, Error>(error),
        )
    };
    // SAFETY: `l` is live (contract); lua_pushlstring copies the bytes.
    unsafe { push(l, message.as_ptr().cast(), message.len()) };
    drop(message);
    // SAFETY: nothing in this frame needs dropping: the error unwinds (LuaJIT) or jumps (PUC)
    // over it, as it does over any C function of the API.
    unsafe { error(l) as isize }
}

/// Hands `l` to the build's `entry`; nothing of this frame is alive during that call, so an error
/// it raises passes through as through a C function.
///
/// # Safety
/// `l` is the live state that called the entry point.
unsafe fn forward(l: *mut c_void, entry: &CStr) -> isize {
    match resolve(entry) {
        // SAFETY: the build's entry point, called as Lua would call it (contract).
        Ok(f) => unsafe { f(l) },
        // SAFETY: as for `forward`.
        Err(message) => unsafe { raise(l, message) },
    }
}

/// `require "vmpool"`.
///
/// # Safety
/// Called by Lua's `require` with a live state.
#[no_mangle]
pub unsafe extern "C-unwind" fn luaopen_vmpool(l: *mut c_void) -> isize {
    // SAFETY: as for `forward`.
    unsafe { forward(l, c"luaopen_vmpool") }
}

/// `require "vmpool.luv"` (Lua's all-in-one loader finds it in this library).
///
/// # Safety
/// Called by Lua's `require` with a live state.
#[no_mangle]
pub unsafe extern "C-unwind" fn luaopen_vmpool_luv(l: *mut c_void) -> isize {
    // SAFETY: as for `forward`.
    unsafe { forward(l, c"luaopen_vmpool_luv") }
}

/// `require "vmpool.cqueues"`, as `vmpool.luv`.
///
/// # Safety
/// Called by Lua's `require` with a live state.
#[no_mangle]
pub unsafe extern "C-unwind" fn luaopen_vmpool_cqueues(l: *mut c_void) -> isize {
    // SAFETY: as for `forward`.
    unsafe { forward(l, c"luaopen_vmpool_cqueues") }
}
