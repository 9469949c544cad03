//! The Linux versions of the waiting and CPU functions: futexes, `sched_getcpu`, CPU affinity and
//! a thread's niceness and scheduling class.

use super::Sched;

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

/// The CPU the calling thread runs on (a cheap read on current glibc, via rseq), or -1.
pub fn current_cpu() -> i32 {
    // SAFETY: plain query without arguments.
    unsafe { libc::sched_getcpu() }
}

/// Moves the calling thread off CPU `cpu`, if its affinity allows another CPU, and leaves its
/// affinity as it was. Used by a worker that keeps being woken on its caller's CPU: with the
/// caller parked and the worker runnable in turn, the scheduler never sees an imbalance and keeps
/// both on one CPU (each call then costs two context switches) while another CPU idles.
pub fn move_off_cpu(cpu: i32) -> bool {
    if cpu < 0 || cpu as usize >= libc::CPU_SETSIZE as usize {
        return false;
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data; the calls get a valid pointer and its exact size, and only
    // affect the calling thread (pid 0).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0
            || !libc::CPU_ISSET(cpu as usize, &allowed)
            || libc::CPU_COUNT(&allowed) < 2
        {
            return false;
        }
        let mut elsewhere = allowed;
        libc::CPU_CLR(cpu as usize, &mut elsewhere);
        let moved = libc::sched_setaffinity(0, size, &elsewhere) == 0;
        libc::sched_setaffinity(0, size, &allowed);
        moved
    }
}

/// The calling thread's niceness (Linux keeps it per thread, and a thread inherits its creator's).
pub fn thread_nice() -> Option<i32> {
    // SAFETY: plain system calls on the calling thread's own id; errno is this thread's.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        // -1 is a valid niceness: only errno tells a failure apart
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
    }
}

/// Sets the calling thread's niceness to `nice` (`setpriority` on the thread id changes this
/// thread only). True if it took effect; going below the current niceness needs privileges.
pub fn set_thread_nice(nice: i32) -> bool {
    // SAFETY: plain system calls on the calling thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0
    }
}

/// Puts the calling thread in scheduling class `sched` (`sched_setscheduler` with pid 0 changes
/// the calling thread only). True if it took effect. Moving to a lower class needs no privilege;
/// [`Sched::Normal`] leaves the thread as it is.
pub fn set_thread_sched(sched: Sched) -> bool {
    let policy = match sched {
        Sched::Normal => return true,
        Sched::Batch => libc::SCHED_BATCH,
        Sched::Idle => libc::SCHED_IDLE,
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system call on the calling thread; `param` lives across the call.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// A descriptor that pollers see readable from [`WakeFd::signal`] until [`WakeFd::reset`]: an
/// eventfd (one descriptor, a counter the kernel keeps).
pub struct WakeFd(std::os::fd::OwnedFd);

impl WakeFd {
    pub fn new() -> std::io::Result<WakeFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain system call; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(WakeFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// The descriptor to poll for reading.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }

    pub fn signal(&self) {
        super::write_retrying(self.fd(), &1u64.to_ne_bytes());
    }

    pub fn reset(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading a non-blocking eventfd we own into an 8-byte buffer we own; EAGAIN
        // (already zero) is fine.
        unsafe {
            libc::read(self.fd(), buf.as_mut_ptr() as *mut libc::c_void, 8);
        }
    }
}
