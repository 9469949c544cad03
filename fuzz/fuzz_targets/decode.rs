//! The value decoder on hostile input: any bytes, decoded by the Rust sink and onto a real Lua
//! stack, must give an error or values, never a crash, a hang or a stack left unbalanced; both
//! sinks must agree on what is valid; and whatever decodes must encode back into a valid message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmpool::testing::lua::State;
use vmpool::testing::value::{decode_values, encode_values, push_values, Role, RustSink};

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
        Host { _lua: lua, st, runs: 0 }
    });
}

fuzz_target!(|data: &[u8]| {
    let rust = decode_values(data, &mut RustSink::default());
    HOST.with(|h| {
        let mut h = h.borrow_mut();
        let st = h.st;
        let top = st.top();
        match push_values(st, data) {
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
                    rust.is_err(),
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
