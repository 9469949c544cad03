//! The fallback for systems without Linux's futexes, `sched_getcpu` and affinity calls: waiting on
//! a word through parking_lot's parking lot (keyed by the word's address), no CPU moves, and no
//! per-thread niceness or scheduling class.

use super::Sched;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot_core::{FilterOp, ParkToken, DEFAULT_PARK_TOKEN, DEFAULT_UNPARK_TOKEN};

fn key(word: &AtomicU32) -> usize {
    word as *const AtomicU32 as usize
}

/// Sleeps while `word` still holds `expected` (or until woken, or `timeout`). May return
/// spuriously: callers re-check their condition. The check runs under the parking lot's bucket
/// lock, which [`futex_wake`] takes too, so a wake-up sent after the word changed is never lost.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let deadline = timeout.and_then(|d| Instant::now().checked_add(d));
    // SAFETY: the key is the address of an atomic the caller owns and that is never a parking_lot
    // lock; the closures neither panic nor call into parking_lot.
    unsafe {
        parking_lot_core::park(
            key(word),
            || word.load(Ordering::SeqCst) == expected,
            || {},
            |_, _| {},
            DEFAULT_PARK_TOKEN,
            deadline,
        );
    }
}

/// Wakes up to `n` threads sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    let mut left = n.max(0);
    // SAFETY: as for `futex_wait`; the filter and callback neither panic nor call into parking_lot.
    unsafe {
        parking_lot_core::unpark_filter(
            key(word),
            |_: ParkToken| {
                if left == 0 {
                    FilterOp::Stop
                } else {
                    left -= 1;
                    FilterOp::Unpark
                }
            },
            |_| DEFAULT_UNPARK_TOKEN,
        );
    }
}

/// Unknown here: -1 (callers then skip moving a worker off its caller's CPU).
pub fn current_cpu() -> i32 {
    -1
}

/// Never moves: without affinity calls the scheduler places threads itself.
pub fn move_off_cpu(_cpu: i32) -> bool {
    false
}

/// Unknown here: POSIX niceness belongs to a whole process, not to one thread.
pub fn thread_nice() -> Option<i32> {
    None
}

/// Does nothing: POSIX `setpriority` applies to a whole process, not to one thread, so the
/// `nice` option has no effect in this build.
pub fn set_thread_nice(_nice: i32) -> bool {
    false
}

/// Does nothing: POSIX scheduling policies apply to a whole process here, so the `sched` option
/// has no effect in this build.
pub fn set_thread_sched(_sched: Sched) -> bool {
    false
}

/// A descriptor that pollers see readable from [`WakeFd::signal`] until [`WakeFd::reset`]: the
/// read end of a non-blocking pipe (eventfd is Linux's), whose write end takes one byte per signal.
pub struct WakeFd {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

impl WakeFd {
    pub fn new() -> std::io::Result<WakeFd> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `pipe` writes two descriptors into the array we own; checked before use.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both are fresh descriptors that nothing else owns.
        let (read, write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        for fd in fds {
            // SAFETY: fcntl on descriptors we own, with flag arguments only.
            let ok = unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                fl >= 0
                    && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
                    && libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0
            };
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(WakeFd { read, write })
    }

    /// The descriptor to poll for reading.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.read.as_raw_fd()
    }

    pub fn signal(&self) {
        use std::os::fd::AsRawFd;
        // a full pipe (EAGAIN) is readable already: nothing is lost
        super::write_retrying(self.write.as_raw_fd(), b"!");
    }

    pub fn reset(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading a non-blocking pipe we own into a buffer we own.
            let n =
                unsafe { libc::read(self.fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
            if n < buf.len() as isize {
                if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                }
                return; // drained (short read), empty (EAGAIN) or closed
            }
        }
    }
}
