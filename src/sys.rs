//! What vmpool needs from the operating system: CPU count, fork detection and futexes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// CPUs this process may run on (honours `taskset`), at least 1.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Counts `fork()`s into children of this process. A pool remembers the generation it was created
/// in; one used after a fork (whose threads did not survive it) refuses to work instead of hanging.
/// Reading it costs one atomic load, unlike `getpid()` (a system call on current glibc).
pub fn fork_generation() -> u64 {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic, which is async-signal-safe
        // and valid in a freshly forked child.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

pub fn pid() -> u32 {
    std::process::id()
}

/// Sleeps while `word` still holds `expected` (or until woken, or `timeout`). May return
/// spuriously: callers re-check their condition. Linux futex; the kernel compares and sleeps
/// atomically, so a wake-up sent after the word changed is never lost.
pub fn futex_wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    timeout: Option<std::time::Duration>,
) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call; the timeout
    // points at a local timespec or is null. FUTEX_PRIVATE: the word is never shared across
    // processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        );
    }
}

/// Wakes up to `n` threads sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &std::sync::atomic::AtomicU32, n: i32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; waking has no other effect.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        );
    }
}
