//! `native._yieldable()`: whether the running coroutine could yield here, for Lua 5.1 and 5.2,
//! which have no `coroutine.isyieldable` (`vmpool.lua` and the adapters ask before they yield).

use std::ffi::c_int;

use crate::lua::State;
use crate::Error;

crate::lua_function!(pub fn yieldable => yieldable_impl);
/// `native._yieldable()`: whether the running coroutine could yield at this point. Lua 5.1 and 5.2
/// have no `coroutine.isyieldable` (5.3, 5.4 and LuaJIT do, and `vmpool.lua` uses theirs): a
/// coroutine cannot yield once a C function or a metamethod that cannot yield is between it and
/// its resume (`table.sort`'s comparator, a `gsub` callback, `pcall` on 5.1), which Lua 5.1
/// tracks as `nCcalls > baseCcalls` and Lua 5.2 as a non-zero `nny` (the test 5.3's
/// `lua_isyieldable` makes).
fn yieldable_impl(st: State) -> Result<c_int, Error> {
    #[cfg(all(feature = "lua51", not(feature = "luajit")))]
    {
        // Offsets of `nCcalls` and `baseCcalls` (two `unsigned short`s) in Lua 5.1.5's
        // `struct lua_State` on 64-bit targets: a GC header (pointer and two bytes), `status`,
        // then nine pointers and two ints.
        const N_CCALLS: usize = 96;
        const BASE_CCALLS: usize = 98;
        let p = st.as_ptr() as *const u8;
        // SAFETY: `p` is the running thread's `lua_State` (Lua 5.1.5, the only 5.1 this builds
        // for, checked at load time by `abi::check_host`); both fields lie inside the struct.
        let (n, base) = unsafe {
            (
                (p.add(N_CCALLS) as *const u16).read_unaligned(),
                (p.add(BASE_CCALLS) as *const u16).read_unaligned(),
            )
        };
        st.push_bool(n <= base);
    }
    #[cfg(feature = "lua52")]
    {
        // Offset of `nny` (an `unsigned short`, the count of non-yieldable calls on the thread's
        // stack) in Lua 5.2's `struct lua_State` on 64-bit targets: a GC header (pointer and two
        // bytes), `status`, then six pointers and an int (`stacksize`). The struct is the same
        // in 5.2.0 to 5.2.4 (lstate.h 2.82; Debian 12 ships 5.2.4).
        const NNY: usize = 68;
        let p = st.as_ptr() as *const u8;
        // SAFETY: `p` is the running thread's `lua_State` (a Lua 5.2 host, checked at load time
        // by `abi::check_host`; every 5.2 release has this layout); the field lies inside it.
        let nny = unsafe { (p.add(NNY) as *const u16).read_unaligned() };
        st.push_bool(nny == 0);
    }
    #[cfg(not(any(all(feature = "lua51", not(feature = "luajit")), feature = "lua52")))]
    st.push_bool(true);
    Ok(1)
}
