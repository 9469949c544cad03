//! The value decoder on hostile input: any bytes, decoded by the Rust sink and onto a real Lua
//! stack, must give an error or values, never a crash, a hang or a stack left unbalanced; both
//! sinks must agree on what is valid (but a C function name the state does not have, which only
//! the Lua sink can know); whatever decodes must encode back into a valid message; and no input
//! ever loads bytecode (`LOADS` does not move): a function's prototype can only come from the list
//! beside a message, which outside input never has.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::atomic::Ordering::Relaxed;
use vmpool::testing::lua::State;
use vmpool::testing::value::{
    decode_values, encode_values, install, is_refusal, push_values, Role, RustSink, LOADS,
};

struct Host {
    _lua: mlua::Lua,
    st: State,
    runs: u32,
}

thread_local! {
    static HOST: std::cell::RefCell<Host> = std::cell::RefCell::new({
        let lua = mlua::Lua::new();
        let mut raw = std::ptr::null_mut();
        // SAFETY: copies out the main state's pointer; `Host` keeps the `Lua` alive and this
        // thread is the only one that uses it.
        unsafe { lua.exec_raw::<()>((), |l| raw = l) }.expect("a Lua state");
        // SAFETY: see above.
        let st = unsafe { State::from_raw(raw) };
        install(st); // standard library C functions decode by name
        Host { _lua: lua, st, runs: 0 }
    });
}

fuzz_target!(|data: &[u8]| {
    let rust = decode_values(data, &mut RustSink::default());
    HOST.with(|h| {
        let mut h = h.borrow_mut();
        let st = h.st;
        let top = st.top();
        let loads = LOADS.load(Relaxed);
        let pushed = push_values(st, data);
        assert_eq!(LOADS.load(Relaxed), loads, "outside input loaded bytecode");
        match pushed {
            Ok(n) => {
                assert!(
                    rust.is_ok(),
                    "the Lua sink accepted what the Rust sink refused"
                );
                assert_eq!(st.top(), top + n);
                let mut out = Vec::new();
                encode_values(st, top + 1, n, &mut out, Role::Result(b"fuzz"))
                    .expect("decoded values encode back");
                let again = decode_values(&out, &mut RustSink::default()).expect("re-decodes");
                assert_eq!(again, n as u32);
            }
            Err(e) => {
                assert!(
                    rust.is_err() || is_refusal(e.0),
                    "the Rust sink accepted what the Lua sink refused: {e:?}"
                );
                assert_eq!(
                    st.top(),
                    top,
                    "a refused message leaves the stack as it was"
                );
            }
        }
        st.set_top(top);
        h.runs += 1;
        if h.runs % 1024 == 0 {
            st.gc_collect();
        }
    });
});
