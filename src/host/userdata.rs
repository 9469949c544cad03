//! Rust values inside Lua full userdata, type-checked by metatable identity.
//!
//! Every C function of the module is a closure over the same upvalues: the metatables of the
//! pool, future, notifier and map types ([`UV_POOL`], [`UV_FUTURE`], [`UV_NOTIFIER`],
//! [`UV_MAP`]), used to create objects, and the runner of protected calls ([`crate::lua::RUNNER_UPVALUE`]). Checking an argument's type does not push anything: a block of exactly our size that
//! starts with the type's 64-bit tag (a random constant) is ours. Only the module writes those
//! tags, and the check does not look at the metatable: Lua code may read it (`getmetatable`,
//! which the OpenResty adapter and the annotation spec use) or swap it with
//! `debug.setmetatable`, and a vmpool object is still recognised as what it is, and nothing else
//! passes for one.

use std::ffi::c_int;
use std::mem::ManuallyDrop;

use mlua::ffi;

use crate::lua::State;

pub const UV_POOL: c_int = ffi::lua_upvalueindex(1);
pub const UV_FUTURE: c_int = ffi::lua_upvalueindex(2);
pub const UV_NOTIFIER: c_int = ffi::lua_upvalueindex(3);
pub const UV_MAP: c_int = ffi::lua_upvalueindex(4);
/// Upvalue 5 is the runner of protected calls.
pub const NUM_UPVALUES: c_int = 5;

/// The block a userdata holds. `live` turns false once `__gc` dropped the value: Lua may still
/// hand a finalized object to a method (resurrection), which then sees it as closed.
pub struct Boxed<T> {
    tag: u64,
    live: bool,
    value: ManuallyDrop<T>,
}

/// A type that lives in a userdata, with its tag.
pub trait Tagged {
    const TAG: u64;
}

/// Lua guarantees 8-byte alignment for userdata blocks on every supported runtime.
const MAX_ALIGN: usize = 8;

impl<T> Boxed<T> {
    pub fn get(&mut self) -> Option<&mut T> {
        if self.live {
            Some(&mut self.value)
        } else {
            None
        }
    }
}

/// Pushes a new userdata holding `value`, with the metatable at `mt` (usually an upvalue index).
/// Allocating it may raise (out of memory, a finalizer): that runs protected, and then `value` is
/// dropped and the error returned.
pub fn push<T: Tagged>(st: State, value: T, mt: c_int) -> Result<(), crate::Error> {
    const { assert!(std::mem::align_of::<Boxed<T>>() <= MAX_ALIGN) };
    let mut block: *mut Boxed<T> = std::ptr::null_mut();
    // the metatable goes in as an argument: upvalue indices mean nothing inside the protected call
    st.push_value(mt);
    crate::host::protect::protected(st, 1, || "creating a vmpool object".into(), &mut |st| {
        let p = st.new_userdata(std::mem::size_of::<Boxed<T>>()) as *mut Boxed<T>;
        // SAFETY: Lua returned a fresh block of the requested size with at least `MAX_ALIGN`
        // alignment (checked above for `T`). Marked dead until the value is written, so a
        // finalizer never sees it half-made.
        unsafe {
            std::ptr::addr_of_mut!((*p).tag).write(T::TAG);
            std::ptr::addr_of_mut!((*p).live).write(false);
        }
        block = p;
        st.push_value(1);
        st.set_metatable(-2);
        1
    })?;
    // SAFETY: `block` is the userdata now on top of the stack (alive), with its header written
    // and its value slot uninitialized; writing the value and then `live` completes it.
    unsafe {
        std::ptr::addr_of_mut!((*block).value).write(ManuallyDrop::new(value));
        std::ptr::addr_of_mut!((*block).live).write(true);
    }
    Ok(())
}

/// The `Boxed<T>` at `idx` if it is one.
///
/// The reference is valid while the userdata is on the stack (it is an argument of the running C
/// function); callers take it once per call.
pub fn get<'a, T: Tagged>(st: State, idx: c_int) -> Option<&'a mut Boxed<T>> {
    if st.type_of(idx) != ffi::LUA_TUSERDATA || st.raw_len(idx) != std::mem::size_of::<Boxed<T>>() {
        return None;
    }
    let p = st.to_userdata(idx) as *mut Boxed<T>;
    // SAFETY: the block is a full userdata of exactly `size_of::<Boxed<T>>()` bytes, aligned as
    // Lua aligns userdata (checked in `push`), so reading its first word is in bounds; only
    // `push::<T>` writes `T::TAG` there, so a match means the block holds a `Boxed<T>`, kept
    // alive by the stack slot `idx`.
    unsafe {
        if std::ptr::addr_of!((*p).tag).read() != T::TAG {
            return None;
        }
        Some(&mut *p)
    }
}

/// The value of the `Boxed<T>` whose payload is at `p` (an FFI caller's userdata), if it is one
/// that has not been finalized.
///
/// # Safety
/// `p` is the payload of a full userdata of exactly `size_of::<Boxed<T>>()` bytes that
/// [`push::<T>`] made, alive while the reference is used (the FFI callers pass only handles the
/// module made, and hold them as arguments for the duration of the call).
pub unsafe fn peek<'a, T: Tagged>(p: *const std::ffi::c_void) -> Option<&'a T> {
    let p = p as *const Boxed<T>;
    if p.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller; the tag is checked anyway, as `get` does.
    unsafe {
        if std::ptr::addr_of!((*p).tag).read() != T::TAG || !(*p).live {
            return None;
        }
        Some(&(*p).value)
    }
}

/// Drops the value of the `Boxed<T>` at `idx` (the `__gc` metamethod). Safe to call twice.
pub fn finalize<T: Tagged>(st: State, idx: c_int) {
    if let Some(b) = get::<T>(st, idx) {
        if b.live {
            b.live = false;
            // SAFETY: `live` was true, so the value was initialized and not dropped yet; it is
            // never touched again once `live` is false.
            unsafe { ManuallyDrop::drop(&mut b.value) };
        }
    }
}
