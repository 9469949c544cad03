//! What vmpool needs from the operating system: CPU count, fork detection, waiting on a 32-bit
//! word (futex style), which CPU a thread runs on, and a thread's own niceness and scheduling
//! class.
//!
//! The last two are Linux-specific (futexes, `sched_getcpu`, CPU affinity) and live in
//! `sys/linux.rs`; `sys/portable.rs` is the fallback for other Unix systems (parking_lot's parking,
//! no CPU moves). The `portable-sys` cargo feature builds the fallback on Linux too, so that it is
//! tested here (scripts/test.sh).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

#[cfg(all(target_os = "linux", not(feature = "portable-sys")))]
mod linux;
#[cfg(all(target_os = "linux", not(feature = "portable-sys")))]
pub use linux::{
    current_cpu, futex_wait, futex_wake, move_off_cpu, set_thread_nice, set_thread_sched,
    thread_nice, WakeFd,
};

#[cfg(not(all(target_os = "linux", not(feature = "portable-sys"))))]
mod portable;
#[cfg(not(all(target_os = "linux", not(feature = "portable-sys"))))]
pub use portable::{
    current_cpu, futex_wait, futex_wake, move_off_cpu, set_thread_nice, set_thread_sched,
    thread_nice, WakeFd,
};

/// The scheduling class of the pool's threads (option `sched`): which threads the kernel runs
/// first when there are more runnable threads than CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sched {
    /// `"normal"`: the host's own class (`SCHED_OTHER`), weighed by `nice`.
    Normal,
    /// `"batch"`: `SCHED_BATCH`, for CPU-bound work: a batch thread that wakes never preempts the
    /// running one, and `nice` still weighs it.
    Batch,
    /// `"idle"`: `SCHED_IDLE`, runs only on CPU time no normal thread wants: a normal thread that
    /// wakes (an event loop with a request) preempts it at once. `nice` has no effect on it.
    Idle,
}

impl Sched {
    /// The option's value for this class, as the README and errors spell it.
    pub fn name(self) -> &'static str {
        match self {
            Sched::Normal => "normal",
            Sched::Batch => "batch",
            Sched::Idle => "idle",
        }
    }
}

/// Which implementation of the waiting, CPU and niceness functions this build uses (checked by
/// the tests; `vmpool._sys` tells the specs).
pub const IMPLEMENTATION: &str = if cfg!(all(target_os = "linux", not(feature = "portable-sys"))) {
    "linux"
} else {
    "portable"
};

/// How long a waiting host thread sleeps at most before it looks for an interrupt again (a
/// signal handler that set a hook on the host state: Ctrl-C). On Linux a signal with a handler
/// ends a timed futex wait at once (`EINTR`); this bound is the fallback where it does not (the
/// portable build, condition variables) and for hooks set from other threads.
pub const INTERRUPT_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Writes `bytes` to a non-blocking descriptor, retrying only when a signal interrupted the
/// write: a full descriptor (EAGAIN) already holds an unread wake-up, so nothing is lost.
fn write_retrying(fd: std::os::fd::RawFd, bytes: &[u8]) {
    loop {
        // SAFETY: `fd` is open for the caller's lifetime; `bytes` is a valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr() as *const libc::c_void, bytes.len()) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Whether the peer of a connected unix socket is this process (Linux, Android: its pid from
/// `SO_PEERCRED`). Elsewhere the peer's pid is not available: `getpeereid` gives its user, and a
/// peer of the same user is accepted (the doorbell's private 0700 directory keeps others out).
pub fn peer_is_this_process(fd: std::os::fd::RawFd) -> std::io::Result<bool> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid for writes and `len` holds `cred`'s size, as
        // SO_PEERCRED requires; the descriptor is open for the duration of the call.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                &mut cred as *mut libc::ucred as *mut libc::c_void,
                &mut len,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(cred.pid == std::process::id() as libc::pid_t)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let (mut uid, mut gid) = (0, 0);
        // SAFETY: `uid` and `gid` are valid for writes; the descriptor is open for the call.
        if unsafe { libc::getpeereid(fd, &mut uid, &mut gid) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: geteuid has no preconditions.
        Ok(uid == unsafe { libc::geteuid() })
    }
}

/// Sends one byte on a non-blocking socket without raising SIGPIPE if the reader went away
/// (`MSG_NOSIGNAL`; macOS and iOS lack it and set `SO_NOSIGPIPE` on the socket instead, see
/// [`no_sigpipe`]). Returns what `send` returned.
pub fn send_byte(fd: std::os::fd::RawFd) -> isize {
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    let flags = libc::MSG_DONTWAIT;
    // SAFETY: `fd` is a socket the caller keeps open; the buffer is one valid byte.
    unsafe { libc::send(fd, b"!".as_ptr() as *const libc::c_void, 1, flags) }
}

/// Where `MSG_NOSIGNAL` does not exist (macOS, iOS), marks the socket so that writing to it after
/// the reader went away gives EPIPE instead of SIGPIPE; elsewhere nothing to do.
pub fn no_sigpipe(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    #[cfg(any(target_os = "macos", target_os = "ios"))]
    {
        let on: libc::c_int = 1;
        // SAFETY: a valid int option for a socket the caller keeps open.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_NOSIGPIPE,
                &on as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let _ = fd;
    Ok(())
}

/// Whether the process is out of file descriptors right now (opening one fails with EMFILE or
/// ENFILE): `require` then reports a module's file as "not found", which this explains.
pub fn out_of_descriptors() -> bool {
    match std::fs::File::open("/dev/null") {
        Ok(_) => false,
        Err(e) => matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)),
    }
}

/// What to add to a "module ... not found" error raised while the process is out of descriptors.
pub fn descriptors_hint(message: &str) -> &'static str {
    if message.contains("not found") && out_of_descriptors() {
        " (the process is out of file descriptors, so require could not open the module's file: close some, or raise the limit: ulimit -n, nginx's worker_rlimit_nofile)"
    } else {
        ""
    }
}

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

/// A process-wide value that `fork()` resets: what the parent kept in it (its channels, its
/// shared dictionaries) is not the child's, whose copy starts empty. Kept behind a lock.
pub struct PerProcess<T> {
    /// The value and the [`fork_generation`] it was made in.
    slot: Option<(u64, T)>,
}

impl<T: Default> PerProcess<T> {
    pub const fn new() -> Self {
        PerProcess { slot: None }
    }

    /// This process's value: made on first use, and made anew in a forked child.
    pub fn get_mut(&mut self) -> &mut T {
        let generation = fork_generation();
        if self.slot.as_ref().is_some_and(|(g, _)| *g != generation) {
            self.slot = None;
        }
        &mut self
            .slot
            .get_or_insert_with(|| (generation, T::default()))
            .1
    }

    /// This process's value, if it has made one (none inherited through `fork()`).
    pub fn get(&self) -> Option<&T> {
        let generation = fork_generation();
        self.slot
            .as_ref()
            .filter(|(g, _)| *g == generation)
            .map(|(_, v)| v)
    }
}

pub fn pid() -> u32 {
    std::process::id()
}

/// The path of the shared object this code was loaded from (`dladdr` on one of its functions),
/// for the LuaJIT FFI path of `vmpool.shared` (`ffi.load` needs it: `require` loads C modules
/// with `RTLD_LOCAL`, so their symbols are not in `ffi.C`). `None` if the loader cannot say.
pub fn library_path() -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: `Dl_info` is plain data; zeroed is a valid value for it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = library_path as *const libc::c_void;
    // SAFETY: `here` is the address of a function of this object; `dladdr` only fills `info`.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: on success `dli_fname` is a NUL-terminated path owned by the loader, valid while the
    // object stays loaded (it is never unloaded: `-z nodelete`); it is copied at once.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(
        name.to_bytes(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    #[test]
    fn the_portable_sys_feature_selects_the_fallback() {
        let expected = if cfg!(feature = "portable-sys") || !cfg!(target_os = "linux") {
            "portable"
        } else {
            "linux"
        };
        assert_eq!(expected, IMPLEMENTATION);
        if IMPLEMENTATION == "portable" {
            assert_eq!(-1, current_cpu());
            assert!(!move_off_cpu(0));
            assert!(!set_thread_nice(5));
            assert!(!set_thread_sched(Sched::Idle));
            assert_eq!(None, thread_nice());
        }
    }

    /// Field `n` (1-based, as proc(5) numbers them) of the calling thread's stat line.
    #[cfg(target_os = "linux")]
    fn own_stat(n: usize) -> i64 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("readable");
        let after_name = &stat[stat.rfind(')').expect("a name") + 2..];
        after_name
            .split(' ')
            .nth(n - 3)
            .expect("enough fields")
            .parse()
            .expect("a number")
    }

    /// The niceness of the calling thread, as the kernel reports it (field 19 of its stat line).
    #[cfg(target_os = "linux")]
    fn own_nice() -> i64 {
        own_stat(19)
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn setting_a_threads_class_changes_that_thread_only() {
        let before = own_stat(41);
        let (batch, idle, normal) = std::thread::spawn(move || {
            let batch = (set_thread_sched(Sched::Batch), own_stat(41));
            let idle = (set_thread_sched(Sched::Idle), own_stat(41));
            // "normal" leaves the class alone (going back up may need privileges)
            let normal = (set_thread_sched(Sched::Normal), own_stat(41));
            (batch, idle, normal)
        })
        .join()
        .unwrap();
        if IMPLEMENTATION == "linux" {
            assert_eq!((true, libc::SCHED_BATCH as i64), batch);
            assert_eq!((true, libc::SCHED_IDLE as i64), idle);
            assert_eq!((true, libc::SCHED_IDLE as i64), normal);
        } else {
            assert_eq!((false, before), batch);
            assert_eq!((false, before), idle);
        }
        assert_eq!(before, own_stat(41), "the calling thread is unchanged");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn setting_a_threads_nice_changes_that_thread_only() {
        let before = own_nice();
        // raising one's niceness needs no privilege
        let target = (before + 3).min(19) as i32;
        let (set, nice) = std::thread::spawn(move || (set_thread_nice(target), own_nice()))
            .join()
            .unwrap();
        if IMPLEMENTATION == "linux" {
            assert!(set);
            assert_eq!(Some(before as i32), thread_nice());
            assert_eq!(target as i64, nice);
        } else {
            assert!(!set);
            assert_eq!(before, nice);
        }
        assert_eq!(before, own_nice(), "the calling thread is unchanged");
    }

    #[test]
    fn a_wait_on_a_word_that_already_changed_returns_at_once() {
        let word = AtomicU32::new(1);
        // no timeout: if this slept, the test would hang instead of passing
        futex_wait(&word, 0, None);
    }

    #[test]
    fn a_wait_with_a_timeout_returns_without_a_wake_up() {
        let word = AtomicU32::new(0);
        futex_wait(&word, 0, Some(Duration::from_millis(1)));
        assert_eq!(0, word.load(Ordering::SeqCst));
    }

    #[test]
    fn a_wake_after_the_word_changed_reaches_every_waiter() {
        let word = Arc::new(AtomicU32::new(0));
        let (done, finished) = mpsc::channel();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (word, done) = (word.clone(), done.clone());
                std::thread::spawn(move || {
                    while word.load(Ordering::SeqCst) == 0 {
                        futex_wait(&word, 0, None);
                    }
                    done.send(()).unwrap();
                })
            })
            .collect();
        word.store(1, Ordering::SeqCst);
        futex_wake(&word, i32::MAX);
        for _ in 0..3 {
            // bounded: a lost wake-up fails here instead of hanging the test run
            finished
                .recv_timeout(Duration::from_secs(30))
                .expect("a waiter was not woken");
        }
        for w in waiters {
            w.join().unwrap();
        }
    }
}
