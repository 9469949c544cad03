//! Telling a scheduler that calls finished, without polling.
//!
//! - [`Notifier`]: a completion queue of tokens for one scheduler loop (`vmpool.run`, the OpenResty
//!   light thread). Finished calls push their token; the loop sleeps on a condition variable (or an
//!   fd made readable when the queue goes from empty to non-empty) and drains the queue.
//! - [`PollSignal`]: one file descriptor per pool for foreign event loops (cqueues, luv). It is
//!   readable while at least one subscribed future has finished and its owner has not yet looked at
//!   it (see `fut:pollfd()` in the README): each waiter re-checks its own future when woken.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Who to tell when a call finishes.
pub enum Subscriber {
    Queue { notifier: Arc<Notifier>, token: u64 },
    Poll(Arc<PollSignal>),
}

impl Subscriber {
    pub fn notify(self) {
        match self {
            Subscriber::Queue { notifier, token } => notifier.push(token),
            Subscriber::Poll(signal) => signal.raise(),
        }
    }
}

/// How a notifier rings when its queue goes from empty to non-empty.
pub enum Doorbell {
    /// An eventfd: write a counter increment.
    EventFd(OwnedFd),
    /// A stream socket: write one byte.
    Socket(OwnedFd),
}

impl Doorbell {
    fn ring(&self) {
        match self {
            Doorbell::EventFd(fd) => write_all(fd.as_raw_fd(), &1u64.to_ne_bytes()),
            Doorbell::Socket(fd) => write_all(fd.as_raw_fd(), b"!"),
        }
    }
}

fn write_all(fd: RawFd, bytes: &[u8]) {
    loop {
        // SAFETY: `fd` is open for the doorbell's lifetime; `bytes` is a valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr() as *const libc::c_void, bytes.len()) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // A full non-blocking socket (EAGAIN) already holds an unread ring: nothing is lost.
            return;
        }
    }
}

#[derive(Default)]
struct Queue {
    tokens: Vec<u64>,
    sleeping: bool,
    /// Rung and not yet drained: no need to ring again.
    rung: bool,
}

/// A completion queue for one scheduler loop.
#[derive(Default)]
pub struct Notifier {
    queue: Mutex<Queue>,
    cond: Condvar,
    doorbell: Mutex<Option<Doorbell>>,
}

impl Notifier {
    pub fn new() -> Arc<Notifier> {
        Arc::new(Notifier::default())
    }

    pub fn set_doorbell(&self, bell: Option<Doorbell>) {
        *self.doorbell.lock() = bell;
    }

    pub fn push(&self, token: u64) {
        let ring = {
            let mut q = self.queue.lock();
            q.tokens.push(token);
            if q.sleeping {
                self.cond.notify_one();
            }
            !std::mem::replace(&mut q.rung, true)
        };
        if ring {
            if let Some(bell) = self.doorbell.lock().as_ref() {
                bell.ring();
            }
        }
    }

    /// Takes every queued token without blocking.
    pub fn drain(&self, out: &mut Vec<u64>) {
        let mut q = self.queue.lock();
        out.append(&mut q.tokens);
        q.rung = false;
    }

    /// Blocks until at least one token is queued (or `deadline` passes), then takes them all.
    pub fn wait(&self, deadline: Option<Instant>, out: &mut Vec<u64>) {
        let mut q = self.queue.lock();
        while q.tokens.is_empty() {
            q.sleeping = true;
            let timed_out = match deadline {
                Some(d) => self.cond.wait_until(&mut q, d).timed_out(),
                None => {
                    self.cond.wait(&mut q);
                    false
                }
            };
            q.sleeping = false;
            if timed_out {
                break;
            }
        }
        out.append(&mut q.tokens);
        q.rung = false;
    }

    pub fn pending(&self) -> usize {
        self.queue.lock().tokens.len()
    }
}

/// A level-triggered "some subscribed future finished and nobody looked yet" file descriptor.
pub struct PollSignal {
    /// Finished-but-unclaimed futures. May dip below zero for a moment when a future is dropped
    /// between its call finishing and the notification arriving.
    unclaimed: Mutex<isize>,
    fd: OwnedFd,
}

impl PollSignal {
    pub fn new() -> std::io::Result<Arc<PollSignal>> {
        Ok(Arc::new(PollSignal {
            unclaimed: Mutex::new(0),
            fd: eventfd()?,
        }))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn raise(&self) {
        let mut n = self.unclaimed.lock();
        *n += 1;
        if *n == 1 {
            write_all(self.fd.as_raw_fd(), &1u64.to_ne_bytes());
        }
    }

    /// A finished subscribed future was looked at (or dropped).
    pub fn claim(&self) {
        let mut n = self.unclaimed.lock();
        *n -= 1;
        if *n == 0 {
            let mut buf = [0u8; 8];
            // SAFETY: reading an eventfd we own into an 8-byte buffer; EAGAIN (already zero) is fine.
            unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    8,
                );
            }
        }
    }
}

/// Creates a non-blocking eventfd.
pub fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
