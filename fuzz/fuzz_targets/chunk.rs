//! Chunk loading on hostile input: any bytes given to `pool:compile` either compile (and then the
//! dumped bytecode loads in a fresh state, as a child loads it) or fail with a syntax error; binary
//! chunks are always refused (loading untrusted bytecode is unsafe in every Lua). The chunk is never
//! run: fuzzed source may well call os.exit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vmpool::testing::chunk::Chunk;
use vmpool::testing::lua::State;
use vmpool::Error;

struct States {
    _host: mlua::Lua,
    host: State,
    _child: mlua::Lua,
    child: State,
    runs: u32,
}

fn raw(lua: &mlua::Lua) -> State {
    let mut raw = std::ptr::null_mut();
    // SAFETY: copies out the main state's pointer; `States` keeps the `Lua` alive and this
    // thread is the only one that uses it.
    unsafe { lua.exec_raw::<()>((), |l| raw = l) }.expect("a Lua state");
    // SAFETY: see above.
    unsafe { State::from_raw(raw) }
}

thread_local! {
    static STATES: std::cell::RefCell<States> = std::cell::RefCell::new({
        let host = mlua::Lua::new();
        let child = mlua::Lua::new();
        States { host: raw(&host), child: raw(&child), _host: host, _child: child, runs: 0 }
    });
}

fuzz_target!(|data: &[u8]| {
    STATES.with(|s| {
        let mut s = s.borrow_mut();
        let (host, child) = (s.host, s.child);
        let top = host.top();
        match Chunk::compile(host, "fuzz", data) {
            Ok(chunk) => {
                assert_ne!(data.first(), Some(&0x1b), "a binary chunk was accepted");
                let ctop = child.top();
                let rc = child.load_binary(&chunk.bytecode, &chunk.name);
                assert_eq!(rc, 0, "the host's own bytecode does not load in a child");
                child.set_top(ctop);
            }
            Err(Error::Syntax { chunk, message }) => {
                assert_eq!(chunk, "fuzz");
                assert!(!message.is_empty());
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        assert_eq!(host.top(), top);
        s.runs += 1;
        if s.runs % 256 == 0 {
            host.gc_collect();
            child.gc_collect();
        }
    });
});
