//! A host that installed its own handler for the signal vmpool's watchdog uses on Lua 5.4 and 5.5
//! (`src/child/signal.rs`) keeps it, and time limits still hold (by the count hook). Its own test
//! binary: the handler must be in place before any pool of the process looks at the signal.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::*;
use vmpool::testing::config::Config;
use vmpool::testing::limits;
use vmpool::Error;

static HOST_HITS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn host_handler(_sig: libc::c_int) {
    HOST_HITS.fetch_add(1, Ordering::SeqCst);
}

fn current_handler(sig: libc::c_int) -> libc::sighandler_t {
    // SAFETY: a query; `cur` is plain data.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut cur), 0);
        cur.sa_sigaction
    }
}

#[test]
fn a_host_handler_for_the_limit_signal_is_kept_and_limits_still_hold() {
    let Some(sig) = limits::signal() else {
        // no signal on this build: nothing to take over
        assert_ne!(limits::mechanism(), "signal");
        return;
    };
    // SAFETY: installs a handler that only increments an atomic.
    let prev = unsafe { libc::signal(sig, host_handler as *const () as libc::sighandler_t) };
    assert_eq!(prev, libc::SIG_DFL);

    let p = pool(
        Config {
            core: 1,
            time_limit: Some(Duration::from_millis(50)),
            jit: false,
            ..Config::default()
        },
        &[(
            "r",
            "function spin() while true do end end function echo(...) return ... end",
        )],
    );
    assert_eq!(limits::mechanism(), "count");
    let c = submit(&p, "r", "spin", &[]);
    assert!(matches!(wait(&c), Err(Error::TimeLimit { .. })));
    let c = submit(&p, "r", "echo", &[s("alive")]);
    assert_eq!(wait(&c).unwrap(), vec![s("alive")]);
    p.close();

    assert_eq!(
        current_handler(sig),
        host_handler as *const () as libc::sighandler_t
    );
    // SAFETY: raises the signal on this thread; its handler only increments an atomic.
    unsafe { libc::raise(sig) };
    assert_eq!(HOST_HITS.load(Ordering::SeqCst), 1);
}
