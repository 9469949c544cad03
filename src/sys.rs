//! What vmpool needs from the operating system: CPU count and fork detection.

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
