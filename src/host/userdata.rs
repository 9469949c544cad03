//! Rust values inside Lua full userdata, type-checked by a tag, and lent to the methods.
//!
//! Every C function of the module is a closure over the same upvalues: the metatables of the
//! pool, future, notifier and map types ([`UV_POOL`], [`UV_FUTURE`], [`UV_NOTIFIER`],
//! [`UV_MAP`]), used to create objects, and the runner of protected calls
//! ([`crate::lua::RUNNER_UPVALUE`]). Checking an argument's type does not push anything: a block
//! of exactly our size that starts with the type's 64-bit tag (a random constant) is ours. Only the
//! module writes those tags, and the check does not look at the metatable: Lua code may read it
//! (`getmetatable`, which the OpenResty adapter and the annotation spec use) or swap it with
//! `debug.setmetatable`, and a vmpool object is still recognised as what it is, and nothing else
//! passes for one.
//!
//! Lending is scoped and exclusive by construction. [`hold!`](crate::hold) gives a method `&mut T`
//! ([`hold`]), or `&T` for a type only read ([`share`]), for the rest of its body, from a
//! [`Frame`] no code can name, so nothing lent can escape; [`with`] and [`with_mut`] lend to a
//! closure. A method that allocates in the host state can run `__gc` finalizers and hooks, which
//! may call back into the same object: the block's state says it is held, and that second borrow
//! is refused (`vmpool: this pool is in use ...`) instead of making a second `&mut`. Types whose
//! methods only read ([`Tagged::SHARED`]) are never marked and may be lent again. A lent value
//! stays alive because its slot stays on the stack: methods shrink the stack down to the slots of
//! what they hold, never below.

use std::ffi::c_int;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use mlua::ffi;

use crate::lua::State;
use crate::Error;

pub const UV_POOL: c_int = ffi::lua_upvalueindex(1);
pub const UV_FUTURE: c_int = ffi::lua_upvalueindex(2);
pub const UV_NOTIFIER: c_int = ffi::lua_upvalueindex(3);
pub const UV_MAP: c_int = ffi::lua_upvalueindex(4);
/// Upvalue 5 is the runner of protected calls.
pub const NUM_UPVALUES: c_int = 5;

/// What a block's value is doing: dropped (`__gc` ran: Lua may still hand a finalized object to
/// a method through resurrection, which then sees it as closed), free, held by a running method,
/// or held and finalized meanwhile (the holder drops it when it lets go).
const DEAD: u8 = 0;
const IDLE: u8 = 1;
const HELD: u8 = 2;
const DOOMED: u8 = 3;

/// The block a userdata holds.
pub struct Boxed<T> {
    tag: u64,
    state: u8,
    value: ManuallyDrop<T>,
}

/// A type that lives in a userdata, with its tag.
pub trait Tagged {
    const TAG: u64;
    /// What users call it, for messages ("pool").
    const NAME: &'static str;
    /// Its methods only read it (`&T`, through [`share`] and [`with`]; what changes is in
    /// cells): borrows need no bookkeeping and may nest. Such a type is never [`hold`]en.
    const SHARED: bool = false;
}

/// Lua guarantees 8-byte alignment for userdata blocks on every supported runtime.
const MAX_ALIGN: usize = 8;

/// Why the value at a slot cannot be borrowed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Access {
    /// Not a `Boxed<T>` (another type, or not ours at all).
    Foreign,
    /// Its `__gc` ran (seen again through resurrection).
    Finalized,
    /// A method running below holds it (re-entered from a finalizer or a hook).
    InUse,
}

impl Access {
    /// The error of a method whose object is unusable: [`Error::InUse`] if it is held, else
    /// what `wrong` words (a bad argument, a closed object).
    #[cold]
    #[inline(never)]
    pub fn error<T: Tagged>(self, wrong: impl FnOnce() -> Error) -> Error {
        match self {
            Access::InUse => Error::InUse { what: T::NAME },
            Access::Foreign | Access::Finalized => wrong(),
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
    crate::lua::protect::protected(st, 1, || "creating a vmpool object".into(), &mut |st| {
        let p = st.new_userdata(std::mem::size_of::<Boxed<T>>()) as *mut Boxed<T>;
        // SAFETY: Lua returned a fresh block of the requested size with at least `MAX_ALIGN`
        // alignment (checked above for `T`). Marked dead until the value is written, so a
        // finalizer never sees it half-made.
        unsafe {
            std::ptr::addr_of_mut!((*p).tag).write(T::TAG);
            std::ptr::addr_of_mut!((*p).state).write(DEAD);
        }
        block = p;
        st.push_value(1);
        st.set_metatable(-2);
        1
    })?;
    // SAFETY: `block` is the userdata now on top of the stack (alive), with its header written
    // and its value slot uninitialized; writing the value and then the state completes it.
    unsafe {
        std::ptr::addr_of_mut!((*block).value).write(ManuallyDrop::new(value));
        std::ptr::addr_of_mut!((*block).state).write(IDLE);
    }
    Ok(())
}

/// The `Boxed<T>` at `idx` if it is one.
#[inline]
fn block<T: Tagged>(st: State, idx: c_int) -> Option<*mut Boxed<T>> {
    // only userdata have an address here; of those, light userdata have length 0 (and the raw
    // length of anything else could convert a number in place on Lua 5.1, so it comes second)
    let p = st.to_userdata(idx) as *mut Boxed<T>;
    if p.is_null() || st.raw_len(idx) != std::mem::size_of::<Boxed<T>>() {
        return None;
    }
    // SAFETY: the block is a full userdata of exactly `size_of::<Boxed<T>>()` bytes, aligned as
    // Lua aligns userdata (checked in `push`), so reading its first word is in bounds; only
    // `push::<T>` writes `T::TAG` there, so a match means the block holds a `Boxed<T>`, kept
    // alive by the stack slot `idx`.
    let tag = unsafe { std::ptr::addr_of!((*p).tag).read() };
    (tag == T::TAG).then_some(p)
}

/// The anchor of what [`hold`] lends: a [`Held`] cannot outlive the frame it was borrowed from.
pub struct Frame(PhantomData<*mut ()>);

impl Frame {
    /// # Safety
    /// The frame must stay a local of the block that uses what is held from it: not moved out,
    /// boxed or leaked, which would let a [`Held`] outlive the C function whose stack keeps its
    /// userdata alive. [`hold!`](crate::hold) makes one that no code can name.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn new() -> Frame {
        Frame(PhantomData)
    }
}

/// The value of a `Boxed<T>`, held by the running method until this drops.
pub struct Held<'f, T: Tagged> {
    p: *mut Boxed<T>,
    _frame: PhantomData<&'f mut T>,
}

/// Holds the value at `idx` for the caller's frame: `&mut T` that no other borrow aliases (a
/// second `hold` or [`with`] of the same block, from a finalizer or a hook, gets
/// [`Access::InUse`]). The slot `idx` must stay on the stack while the value is held.
#[inline]
pub fn hold<'f, T: Tagged>(
    _frame: &'f Frame,
    st: State,
    idx: c_int,
) -> Result<Held<'f, T>, Access> {
    const { assert!(!T::SHARED, "a SHARED type is lent through `share`") };
    acquire(st, idx)
}

/// [`hold`] without the check that `T` is not SHARED.
#[inline]
fn acquire<'f, T: Tagged>(st: State, idx: c_int) -> Result<Held<'f, T>, Access> {
    let p = block::<T>(st, idx).ok_or(Access::Foreign)?;
    // SAFETY: `p` is a live `Boxed<T>` (see `block`); the state byte is only touched through raw
    // pointers, never through a reference to the whole block, so it does not alias the `&mut T`
    // a `Held` lends.
    unsafe {
        let state = std::ptr::addr_of_mut!((*p).state);
        match *state {
            IDLE => {
                *state = HELD;
                Ok(Held {
                    p,
                    _frame: PhantomData,
                })
            }
            DEAD => Err(Access::Finalized),
            _ => Err(Access::InUse),
        }
    }
}

impl<T: Tagged> Deref for Held<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the block is alive (its slot stays on the stack while held) and marked held,
        // so nothing else borrows its value; the value is initialized (it was IDLE when held,
        // and only this `Held` drops it while held).
        unsafe { &*std::ptr::addr_of!((*self.p).value) }
    }
}

impl<T: Tagged> DerefMut for Held<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference lent.
        unsafe { &mut *std::ptr::addr_of_mut!((*self.p).value) }
    }
}

impl<T: Tagged> Drop for Held<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as for `deref`; no reference lent by this `Held` outlives it. A `__gc` that
        // ran while the value was held left it to us (DOOMED): it is dropped now, once.
        unsafe {
            let state = std::ptr::addr_of_mut!((*self.p).state);
            if *state == DOOMED {
                *state = DEAD;
                ManuallyDrop::drop(&mut *std::ptr::addr_of_mut!((*self.p).value));
            } else {
                *state = IDLE;
            }
        }
    }
}

/// Binds `$name` for the rest of the enclosing block to what `$f(&frame, args...)` lends (a
/// function returning `Result<Held<T>, Error>` or `Result<&T, Error>`, such as a type's
/// `handle`), returning its error: `crate::hold!(h = handle(st));`. Nothing lent from the frame
/// can leave the block.
#[macro_export]
#[doc(hidden)]
macro_rules! hold {
    ($name:ident = $($f:ident)::+ ( $($arg:expr),* $(,)? )) => {
        // SAFETY: a frame no code can name, so nothing moves or leaks it: what is lent from it
        // ends with this block.
        let frame = unsafe { $crate::host::userdata::Frame::new() };
        #[allow(unused_mut)]
        let mut $name = $($f)::+(&frame, $($arg),*)?;
    };
}

/// Lends the value at `idx` of a [`Tagged::SHARED`] type for the caller's frame. The slot `idx`
/// must stay on the stack while the value is used.
#[inline]
pub fn share<T: Tagged>(_frame: &Frame, st: State, idx: c_int) -> Result<&T, Access> {
    const {
        assert!(
            T::SHARED,
            "a type that is not SHARED is lent through `hold`"
        )
    };
    lend(st, idx)
}

/// [`share`] without the check that `T` is SHARED.
#[inline]
fn lend<'f, T: Tagged>(st: State, idx: c_int) -> Result<&'f T, Access> {
    let p = block::<T>(st, idx).ok_or(Access::Foreign)?;
    // SAFETY: `p` is a live `Boxed<T>` (see `block`), kept by its slot for the borrow's life;
    // a SHARED value is never lent as `&mut`, so shared references may coexist; DEAD means
    // dropped.
    unsafe {
        if std::ptr::addr_of!((*p).state).read() == DEAD {
            return Err(Access::Finalized);
        }
        Ok(&*std::ptr::addr_of!((*p).value))
    }
}

/// Runs `f` on the value at `idx` (read only). A value that is held ([`hold`]) by a method
/// running below is [`Access::InUse`]; one that is not [`Tagged::SHARED`] is held while `f`
/// runs.
#[inline]
pub fn with<T: Tagged, R>(st: State, idx: c_int, f: impl FnOnce(&T) -> R) -> Result<R, Access> {
    if T::SHARED {
        return Ok(f(lend::<T>(st, idx)?));
    }
    let held = acquire::<T>(st, idx)?;
    Ok(f(&held))
}

/// Runs `f` on the value at `idx`, held ([`hold`]) while `f` runs.
#[inline]
pub fn with_mut<T: Tagged, R>(
    st: State,
    idx: c_int,
    f: impl FnOnce(&mut T) -> R,
) -> Result<R, Access> {
    const { assert!(!T::SHARED, "a SHARED type is only read, through `with`") };
    let mut held = acquire::<T>(st, idx)?;
    Ok(f(&mut held))
}

/// The value of the `Boxed<T>` whose payload is at `p` (an FFI caller's userdata), if it is one
/// that has not been finalized.
///
/// # Safety
/// `p` is the payload of a full userdata of exactly `size_of::<Boxed<T>>()` bytes that
/// [`push::<T>`] made, alive while the reference is used (the FFI callers pass only handles the
/// module made, and hold them as arguments for the duration of the call).
pub unsafe fn peek<'a, T: Tagged>(p: *const std::ffi::c_void) -> Option<&'a T> {
    const { assert!(T::SHARED, "only a SHARED type may be read by FFI callers") };
    let p = p as *const Boxed<T>;
    if p.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller; the tag is checked anyway, as `block` does. A SHARED
    // value is never lent as `&mut`.
    unsafe {
        if std::ptr::addr_of!((*p).tag).read() != T::TAG
            || std::ptr::addr_of!((*p).state).read() == DEAD
        {
            return None;
        }
        Some(&*std::ptr::addr_of!((*p).value))
    }
}

/// [`peek`] for a type whose methods change it: the value of a block no method holds.
///
/// # Safety
/// As for [`peek`]; the caller (an FFI function) calls no Lua function while it uses the
/// reference, so nothing else can borrow the value meanwhile (an idle block is lent to nobody).
pub unsafe fn peek_mut<'a, T: Tagged>(p: *mut std::ffi::c_void) -> Option<&'a mut T> {
    const { assert!(!T::SHARED, "a SHARED type is only read, through `peek`") };
    let p = p as *mut Boxed<T>;
    if p.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller; the tag and the state are checked, as `block` does.
    unsafe {
        if std::ptr::addr_of!((*p).tag).read() != T::TAG
            || std::ptr::addr_of!((*p).state).read() != IDLE
        {
            return None;
        }
        Some(&mut **std::ptr::addr_of_mut!((*p).value))
    }
}

/// Drops the value of the `Boxed<T>` at `idx` (the `__gc` metamethod). Safe to call twice. A
/// value a method holds (a `__gc` that ran inside that method: the state closing under it) is
/// left to the holder, which drops it when it lets go.
pub fn finalize<T: Tagged>(st: State, idx: c_int) {
    let Some(p) = block::<T>(st, idx) else {
        return;
    };
    // SAFETY: `p` is a live `Boxed<T>` (see `block`); its state byte is touched only through raw
    // pointers. IDLE means initialized and not held; a SHARED value's `&T` may be lent, but only
    // while a stack slot keeps the object reachable, and Lua finalizes unreachable objects only
    // (HELD here means the state is closing: `lua_close` finalizes everything).
    unsafe {
        let state = std::ptr::addr_of_mut!((*p).state);
        match *state {
            IDLE => {
                *state = DEAD;
                ManuallyDrop::drop(&mut *std::ptr::addr_of_mut!((*p).value));
            }
            HELD => *state = DOOMED,
            _ => {}
        }
    }
}
