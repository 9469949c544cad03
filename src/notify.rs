//! Telling a scheduler that calls finished, without polling.
//!
//! - [`Notifier`]: a completion queue of tokens for one scheduler loop (`vmpool.run`, the OpenResty
//!   light thread, the luv and cqueues adapters). Finished calls push their token; the loop sleeps
//!   on a condition variable (or on a doorbell that rings when the queue goes from empty to
//!   non-empty: a socket for OpenResty, an eventfd that luv and cqueues poll) and drains the queue.
//! - [`PollSignal`]: one file descriptor per pool for a hand-written awaiter (`fut:pollfd()`). It
//!   is readable while at least one subscribed future has finished and its owner has not yet
//!   looked at it (see the README): each waiter re-checks its own future when woken, so every
//!   completion wakes every waiter; the adapters use a notifier instead.
//! - the doorbell (`notify/doorbell.rs`): [`Doorbell`], how a completion queue rings its loop,
//!   and [`DoorbellListener`], how a loop that can only wait on sockets it connected itself
//!   (OpenResty's cosockets) gets a [`Doorbell::Socket`].

mod doorbell;

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::sys::INTERRUPT_CHECK;

pub use doorbell::{Doorbell, DoorbellListener};

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

    /// What tells this subscriber apart from the others of the same call.
    pub fn id(&self) -> SubscriberId {
        match self {
            Subscriber::Queue { notifier, token } => {
                SubscriberId::Queue(Arc::as_ptr(notifier), *token)
            }
            Subscriber::Poll(signal) => SubscriberId::Poll(Arc::as_ptr(signal)),
        }
    }
}

/// A subscriber's identity: its notifier and token, or its poll signal (compared, never
/// dereferenced).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SubscriberId {
    Queue(*const Notifier, u64),
    Poll(*const PollSignal),
}

/// Everyone to tell when one call finishes: nobody, one subscriber (every call of a scheduler,
/// and most futures), or several: a future awaited by coroutines of two loops, or awaited and
/// also polled through `fut:pollfd()`. With one slot, the second subscription replaced the first,
/// whose coroutine then waited forever (and its luv loop never ended). One subscriber needs no
/// allocation.
#[derive(Default)]
pub enum Subscribers {
    #[default]
    None,
    One(Subscriber),
    Many(Vec<Subscriber>),
}

impl Subscribers {
    pub fn add(&mut self, subscriber: Subscriber) {
        *self = match std::mem::take(self) {
            Subscribers::None => Subscribers::One(subscriber),
            Subscribers::One(first) => Subscribers::Many(vec![first, subscriber]),
            Subscribers::Many(mut all) => {
                all.push(subscriber);
                Subscribers::Many(all)
            }
        };
    }

    /// Takes out the subscriber `id`; whether it was there.
    pub fn remove(&mut self, id: SubscriberId) -> bool {
        match self {
            Subscribers::None => false,
            Subscribers::One(s) if s.id() == id => {
                *self = Subscribers::None;
                true
            }
            Subscribers::One(_) => false,
            Subscribers::Many(all) => match all.iter().position(|s| s.id() == id) {
                Some(i) => {
                    all.swap_remove(i);
                    true
                }
                None => false,
            },
        }
    }

    /// Tells each of them (the call finished).
    pub fn notify(self) {
        match self {
            Subscribers::None => {}
            Subscribers::One(s) => s.notify(),
            Subscribers::Many(all) => all.into_iter().for_each(Subscriber::notify),
        }
    }
}

impl Queue {
    /// The queue was drained: the next token rings again. Under the queue's lock, so a ring for a
    /// token pushed after the drain is never read back.
    fn quiet(&mut self) {
        if let Some(bell) = &self.doorbell {
            bell.quiet();
        }
        self.rung = false;
    }
}

#[derive(Default)]
struct Queue {
    tokens: Vec<u64>,
    sleeping: bool,
    /// Rung and not yet drained: no need to ring again.
    rung: bool,
    /// Behind an `Arc`, so that a pusher rings a clone after releasing the lock: a doorbell being
    /// replaced stays open until the last ring through it.
    doorbell: Option<Arc<Doorbell>>,
}

/// A completion queue for one scheduler loop.
#[derive(Default)]
pub struct Notifier {
    queue: Mutex<Queue>,
    cond: Condvar,
}

impl Notifier {
    pub fn new() -> Arc<Notifier> {
        Arc::new(Notifier::default())
    }

    /// Installs (or removes) the doorbell. Tokens already queued ring the new one at once, since
    /// an earlier ring may have gone to a doorbell nobody reads any more.
    pub fn set_doorbell(&self, bell: Option<Doorbell>) {
        let old = {
            let mut guard = self.queue.lock();
            let q = &mut *guard;
            let old = std::mem::replace(&mut q.doorbell, bell.map(Arc::new));
            q.rung = false;
            if !q.tokens.is_empty() {
                if let Some(b) = &q.doorbell {
                    q.rung = true;
                    b.ring();
                }
            }
            old
        };
        // closed outside the lock
        drop(old);
    }

    pub fn has_doorbell(&self) -> bool {
        self.queue.lock().doorbell.is_some()
    }

    /// Queues `token`; the first token after a drain rings the doorbell. The ring (a system call
    /// that wakes the loop) happens after the lock is released: the woken loop drains at once, and
    /// with the lock still held it would wait for this thread, which the loop's wake-up has just
    /// preempted (a pool thread in the idle class always is): in OpenResty, about once per request.
    /// A drain between the unlock and the ring takes the token, and the ring then wakes the loop
    /// for nothing: a spurious wake-up, never a lost one.
    pub fn push(&self, token: u64) {
        let bell = {
            let mut guard = self.queue.lock();
            let q = &mut *guard;
            q.tokens.push(token);
            if q.sleeping {
                self.cond.notify_one();
            }
            if q.rung {
                None
            } else {
                let bell = q.doorbell.clone();
                q.rung = bell.is_some();
                bell
            }
        };
        if let Some(bell) = bell {
            bell.ring();
        }
    }

    /// Rings the doorbell whatever the queue holds (a loop is asked to look at its state).
    pub fn wake(&self) {
        let bell = self.queue.lock().doorbell.clone();
        if let Some(bell) = bell {
            bell.ring();
        }
    }

    /// Takes every queued token without blocking.
    pub fn drain(&self, out: &mut Vec<u64>) {
        let mut q = self.queue.lock();
        out.append(&mut q.tokens);
        q.quiet();
    }

    /// Blocks until at least one token is queued, `deadline` passes or `interrupted()` turns
    /// true (called once before the first sleep to arm it, then after each wake-up, at least
    /// every [`crate::sys::INTERRUPT_CHECK`]: the host's Ctrl-C), then takes them all.
    pub fn wait(
        &self,
        deadline: Option<Instant>,
        out: &mut Vec<u64>,
        interrupted: &mut dyn FnMut() -> bool,
    ) {
        let mut q = self.queue.lock();
        // arms the check before the first sleep, as `Call::wait_unless` does
        let mut armed = false;
        while q.tokens.is_empty() {
            if !armed {
                armed = true;
                if interrupted() {
                    break;
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                break;
            }
            let slice = now + INTERRUPT_CHECK;
            q.sleeping = true;
            self.cond
                .wait_until(&mut q, deadline.map_or(slice, |d| d.min(slice)));
            q.sleeping = false;
            if q.tokens.is_empty() && interrupted() {
                break;
            }
        }
        out.append(&mut q.tokens);
        q.quiet();
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
    fd: crate::sys::WakeFd,
}

impl PollSignal {
    pub fn new() -> std::io::Result<Arc<PollSignal>> {
        Ok(Arc::new(PollSignal {
            unclaimed: Mutex::new(0),
            fd: crate::sys::WakeFd::new()?,
        }))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.fd()
    }

    pub fn raise(&self) {
        let mut n = self.unclaimed.lock();
        *n += 1;
        if *n == 1 {
            self.fd.signal();
        }
    }

    /// A finished subscribed future was looked at (or dropped).
    pub fn claim(&self) {
        let mut n = self.unclaimed.lock();
        *n -= 1;
        if *n == 0 {
            self.fd.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    fn connected_bell() -> (Arc<Notifier>, UnixStream) {
        let dir = std::env::temp_dir();
        let listener = DoorbellListener::bind(&dir).unwrap();
        let reader = UnixStream::connect(listener.path()).unwrap();
        let fd = listener.accept().unwrap();
        let n = Notifier::new();
        n.set_doorbell(Some(Doorbell::Socket(fd)));
        reader.set_nonblocking(true).unwrap();
        (n, reader)
    }

    fn rings(reader: &mut UnixStream) -> usize {
        let mut buf = [0u8; 64];
        match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => panic!("{e}"),
        }
    }

    fn queued(n: &Arc<Notifier>, token: u64) -> Subscriber {
        Subscriber::Queue {
            notifier: n.clone(),
            token,
        }
    }

    #[test]
    fn every_subscriber_of_a_call_is_notified_once() {
        let n = Notifier::new();
        let mut subs = Subscribers::default();
        for t in 1..=3 {
            subs.add(queued(&n, t));
        }
        subs.notify();
        let mut out = Vec::new();
        n.drain(&mut out);
        out.sort_unstable();
        assert_eq!(out, [1, 2, 3]);
    }

    #[test]
    fn removing_one_subscriber_keeps_the_others() {
        let (a, b) = (Notifier::new(), Notifier::new());
        let mut subs = Subscribers::default();
        subs.add(queued(&a, 7));
        subs.add(queued(&b, 7));
        assert!(subs.remove(SubscriberId::Queue(Arc::as_ptr(&a), 7)));
        assert!(
            !subs.remove(SubscriberId::Queue(Arc::as_ptr(&a), 7)),
            "removed once"
        );
        assert!(
            !subs.remove(SubscriberId::Queue(Arc::as_ptr(&b), 8)),
            "another token"
        );
        subs.notify();
        let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
        a.drain(&mut from_a);
        b.drain(&mut from_b);
        assert!(from_a.is_empty());
        assert_eq!(from_b, [7]);
    }

    #[test]
    fn socket_doorbell_rings_once_per_empty_to_nonempty() {
        let (n, mut reader) = connected_bell();
        n.push(1);
        n.push(2);
        assert_eq!(rings(&mut reader), 1);
        let mut out = Vec::new();
        n.drain(&mut out);
        assert_eq!(out, [1, 2]);
        n.push(3);
        assert_eq!(rings(&mut reader), 1);
        n.wake();
        assert_eq!(rings(&mut reader), 1);
    }

    #[test]
    fn new_doorbell_rings_for_tokens_already_queued() {
        let n = Notifier::new();
        n.push(7); // no doorbell yet: nobody hears it
        let (m, mut reader) = connected_bell();
        m.push(1);
        assert_eq!(rings(&mut reader), 1);
        // moving the doorbell of `m` to `n`, which holds an unheard token
        let dir = std::env::temp_dir();
        let listener = DoorbellListener::bind(&dir).unwrap();
        let mut r2 = UnixStream::connect(listener.path()).unwrap();
        r2.set_nonblocking(true).unwrap();
        n.set_doorbell(Some(Doorbell::Socket(listener.accept().unwrap())));
        assert_eq!(rings(&mut r2), 1);
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call; no timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn wake_fd_doorbell_is_readable_exactly_while_tokens_wait_to_be_drained() {
        let bell = crate::sys::WakeFd::new().unwrap();
        let fd = bell.fd();
        let n = Notifier::new();
        n.set_doorbell(Some(Doorbell::Wake(bell)));
        assert!(!readable(fd));
        n.push(1);
        n.push(2);
        assert!(readable(fd));
        let mut out = Vec::new();
        n.drain(&mut out);
        assert_eq!(out, [1, 2]);
        assert!(
            !readable(fd),
            "a drained queue leaves the descriptor quiet (a loop would spin)"
        );
        n.push(3);
        assert!(readable(fd));
        n.wait(None, &mut out, &mut || false);
        assert_eq!(out, [1, 2, 3]);
        assert!(!readable(fd));
    }

    fn readable_within(fd: RawFd, ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    /// The ring comes after the pusher releases the lock, so a drain can run between the two:
    /// the loop must still hear of every token (the worst case is a wake-up that finds nothing).
    #[test]
    fn pushes_racing_drains_never_leave_a_token_unheard() {
        const PER_THREAD: u64 = 20_000;
        let bell = crate::sys::WakeFd::new().unwrap();
        let fd = bell.fd();
        let n = Notifier::new();
        n.set_doorbell(Some(Doorbell::Wake(bell)));
        let pushers: Vec<_> = (0..2)
            .map(|t| {
                let n = n.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        n.push(t * PER_THREAD + i);
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        let mut out = Vec::new();
        while (got.len() as u64) < 2 * PER_THREAD {
            // a lost ring leaves tokens queued and the descriptor quiet: poll times out
            assert!(
                readable_within(fd, 10_000),
                "{} tokens queued, none heard of",
                n.pending()
            );
            n.drain(&mut out);
            got.append(&mut out);
        }
        for p in pushers {
            p.join().unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, (0..2 * PER_THREAD).collect::<Vec<_>>());
    }

    #[test]
    fn listener_cleans_up_and_refuses_when_nobody_connected() {
        let dir = std::env::temp_dir();
        let listener = DoorbellListener::bind(&dir).unwrap();
        let path = listener.path().to_path_buf();
        assert!(path.exists());
        let err = listener.accept().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
        drop(listener);
        assert!(!path.exists());
        assert!(!path.parent().unwrap().exists());
    }

    #[test]
    fn ringing_a_closed_reader_is_harmless() {
        let (n, reader) = connected_bell();
        drop(reader);
        n.push(1);
        n.wake();
        n.set_doorbell(None);
        assert!(!n.has_doorbell());
    }
}
