//! A pool used in a child process after `fork()`: its threads did not survive the fork, so it must
//! refuse to work (and `close()` must return) instead of hanging.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use vmpool::testing::value::Value;
use vmpool::Error;

/// Forks; the child runs `child` and exits with its code (no destructors, no atexit handlers).
/// Returns the child's exit code, or `None` if it had not exited within `limit` (it is killed).
fn in_child(limit: Duration, child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child only runs `child` (which uses the pool's own fork-aware entry points and
    // the allocator, whose locks glibc resets at fork) and then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: ends the child at once, as `fork` children of a threaded program should.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if Instant::now() > deadline {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_pool_refuses_to_work_after_fork_and_closes_without_hanging() {
    let p = pool(config(2), &[("u", "function echo(...) return ... end")]);
    let parent = std::process::id();
    let code = in_child(Duration::from_secs(10), || {
        match p.check_process() {
            Err(Error::WrongProcess { pid }) if pid == parent => {}
            _ => return 2,
        }
        let msg = p.check_process().unwrap_err().to_string();
        if !msg.starts_with(&format!(
            "vmpool: pool was created in another process (pid {parent})"
        )) {
            return 3;
        }
        p.close();
        p.close();
        0
    });
    assert_eq!(code, Some(0));
    // the parent's pool is untouched
    assert!(p.check_process().is_ok());
    let c = submit(&p, "u", "echo", &[Value::Int(5)]);
    assert_eq!(wait(&c).unwrap(), vec![Value::Int(5)]);
    p.close();
}

#[test]
fn close_after_fork_returns_even_if_the_pool_lock_was_held_at_fork_time() {
    // A fork that lands while a pool thread holds the pool's lock copies the lock, locked, into
    // the child, where no thread will ever unlock it: close() there must not wait for it. A
    // thread holds it on purpose across the fork.
    let p = pool(config(1), &[("u", "function echo(...) return ... end")]);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let p = p.clone();
        std::thread::spawn(move || {
            p.with_lock_held(|| {
                held_tx.send(()).unwrap();
                release_rx.recv().unwrap();
            })
        })
    };
    held_rx.recv().unwrap();
    let code = in_child(Duration::from_secs(5), || {
        if p.check_process().is_ok() {
            return 2;
        }
        p.close();
        0
    });
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    assert_eq!(
        code,
        Some(0),
        "close() after fork hung on the copied pool lock"
    );
    // the parent's pool goes on
    let c = submit(&p, "u", "echo", &[Value::Int(5)]);
    assert_eq!(wait(&c).unwrap(), vec![Value::Int(5)]);
    p.close();
}

#[test]
fn a_shared_dictionary_is_refused_after_fork_and_starts_empty_when_opened_again() {
    use vmpool::testing::shared::{self, dict::Mode, dict::Scalar, Options};
    let d = shared::open("fork-rs", Options::default()).unwrap();
    d.dict
        .store(Mode::Set, false, b"k", Some(Scalar::Bool(true)), 0, 0)
        .unwrap();
    let parent = std::process::id();
    let code = in_child(Duration::from_secs(10), || {
        let msg = match d.check_process() {
            Err(e) => e.to_string(),
            Ok(()) => return 2,
        };
        if !msg.starts_with(&format!(
            "vmpool: shared dictionary 'fork-rs' was created in another process (pid {parent})"
        )) {
            return 3;
        }
        let again = shared::open("fork-rs", Options::default()).unwrap();
        if again.check_process().is_err()
            || again.dict.get(b"k", true) != shared::dict::Got::Missing
        {
            return 4;
        }
        0
    });
    assert_eq!(code, Some(0));
    assert!(d.check_process().is_ok());
    assert!(matches!(
        d.dict.get(b"k", false),
        shared::dict::Got::Value { .. }
    ));
}

#[test]
fn a_channel_is_refused_after_fork_and_starts_empty_when_opened_again() {
    use vmpool::testing::channel::{self, Options};
    let c = channel::open("fork-rs", Options::default()).unwrap();
    c.push(b"m".to_vec(), Some(Duration::ZERO), &|| false)
        .unwrap();
    let parent = std::process::id();
    let code = in_child(Duration::from_secs(10), || {
        let msg = match c.check_process() {
            Err(e) => e.to_string(),
            Ok(()) => return 2,
        };
        if !msg.starts_with(&format!(
            "vmpool: channel 'fork-rs' was created in another process (pid {parent})"
        )) {
            return 3;
        }
        let again = channel::open("fork-rs", Options::default()).unwrap();
        if again.check_process().is_err() || !again.is_empty() || Arc::ptr_eq(&again, &c) {
            return 4;
        }
        0
    });
    assert_eq!(code, Some(0));
    assert!(c.check_process().is_ok());
    assert_eq!(c.len(), 1, "the parent's channel keeps its message");
    let same = channel::open("fork-rs", Options::default()).unwrap();
    assert!(
        Arc::ptr_eq(&same, &c),
        "the parent's registry still holds its channel"
    );
}
