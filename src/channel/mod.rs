//! `vmpool.channel(name [, options])`: named, process-wide, bounded FIFOs of messages. A message
//! is the bytes of one `push`'s values encoded by `value.rs`, and its functions' prototypes
//! ([`Message`]); the channel never looks inside.
//! The registry below maps names to channels the way `shared/mod.rs` maps dictionaries, with the
//! same `fork()` rule: a channel belongs to the process that made it.
//!
//! Waiting: one mutex guards the queue; poppers wait on `not_empty`, pushers on `not_full`. Each
//! completed push wakes one popper and each completed pop one pusher (no herd); a waiter that
//! gives up (timeout, cancel) after being woken passes its wake-up on, so none is lost. Only
//! `close()` wakes everyone. A wait polls its caller's `stop` test every `POLL_SLICE`, which is
//! how a state's `time_limit`, `fut:cancel()`, `pool:close()` and the host's Ctrl-C end it.
//!
//! Besides threads on the condvars, a side has *watchers*: call records (`call.rs`) that a
//! scheduler's coroutine or a `select` waits on (`watch.rs`). Waking one finishes its record, which
//! posts its token to the scheduler's completion queue like a finished call; when threads and
//! watchers both wait, wake-ups alternate between them. A woken watcher retries the operation.

pub mod select;
pub mod stream;
pub mod timer;
pub mod watch;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::call::{Call, Outcome, CLAIMED, NEW};
use crate::sys::PerProcess;
use crate::value::Proto;
use crate::Error;

/// `capacity` (messages) when the options do not give one.
pub const DEFAULT_CAPACITY: usize = 1024;
/// `bytes` when the options do not give one: 16 MiB of encoded messages.
pub const DEFAULT_BYTES: usize = 16 << 20;
/// How often a wait re-checks its caller's `stop` test.
pub const POLL_SLICE: Duration = Duration::from_millis(10);
/// A thread that would wait spins this long at most first (adaptively, `spin.rs`): the other side
/// of a ping-pong usually answers within a few µs, and a futex wake-up costs 5-30 µs.
const CHANNEL_SPIN: Duration = Duration::from_micros(50);

thread_local! {
    static SPIN: crate::spin::AdaptiveSpin = crate::spin::AdaptiveSpin::new(CHANNEL_SPIN, false);
}

/// What `vmpool.channel` was asked for; `None` = not given.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options {
    pub capacity: Option<usize>,
    pub bytes: Option<usize>,
}

/// One message: the encoded values of one push, and the prototypes of the Lua functions among
/// them (bytecode travels beside a message, never inside it: `value/func.rs`).
#[derive(Debug, Default)]
pub struct Message {
    pub bytes: Vec<u8>,
    pub protos: Vec<Arc<Proto>>,
}

impl Message {
    /// What it counts against the channel's `bytes`: its encoding and its functions' bytecode.
    pub fn size(&self) -> usize {
        self.bytes.len() + self.protos.iter().map(|p| p.len()).sum::<usize>()
    }
}

impl From<Vec<u8>> for Message {
    fn from(bytes: Vec<u8>) -> Message {
        Message {
            bytes,
            protos: Vec::new(),
        }
    }
}

impl PartialEq for Message {
    fn eq(&self, other: &Message) -> bool {
        self.bytes == other.bytes
            && self.protos.len() == other.protos.len()
            && self
                .protos
                .iter()
                .zip(&other.protos)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

impl Eq for Message {}

impl PartialEq<Vec<u8>> for Message {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.protos.is_empty() && self.bytes == *other
    }
}

/// Why an operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// The timeout passed (or a try form found no room / no message).
    Timeout,
    /// The channel is closed (push), or closed and drained (pop).
    Closed,
    /// The caller's `stop` test said to give up (time limit, cancel, pool close, Ctrl-C).
    Stopped,
    /// The message alone is larger than the channel's byte capacity: it could never fit.
    TooLarge,
}

/// Which side of a channel a waiter waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Waits for a message.
    Pop,
    /// Waits for room.
    Push,
}

struct Queue {
    msgs: VecDeque<Message>,
    bytes: usize,
    closed: bool,
    /// Watchers waiting for a message / for room, oldest first (records already finished, by a
    /// timer or another channel of a `select`, are skipped when met).
    pop_watch: VecDeque<Arc<Call>>,
    push_watch: VecDeque<Arc<Call>>,
    /// Threads waiting on `not_empty` / `not_full`.
    pop_threads: usize,
    push_threads: usize,
    /// Alternates wake-ups between threads and watchers when both wait.
    turn: bool,
}

/// Finishes a watcher's record unless something else (a timer, another channel) did first.
fn ready(call: &Call) -> bool {
    if call.transition(NEW, CLAIMED) {
        call.finish(Outcome::Ok);
        return true;
    }
    false
}

/// One bounded FIFO.
pub struct Channel {
    pub name: String,
    capacity: usize,
    max_bytes: usize,
    q: Mutex<Queue>,
    /// Moves at every push, pop and close (under the lock): what a spinning waiter watches.
    version: AtomicU64,
    not_empty: Condvar,
    not_full: Condvar,
    /// `sys::fork_generation()` when it was created.
    pub generation: u64,
    pub pid: u32,
}

impl Channel {
    pub fn new(name: &str, capacity: usize, max_bytes: usize) -> Channel {
        Channel {
            name: name.to_string(),
            capacity,
            max_bytes,
            q: Mutex::new(Queue {
                msgs: VecDeque::new(),
                bytes: 0,
                closed: false,
                pop_watch: VecDeque::new(),
                push_watch: VecDeque::new(),
                pop_threads: 0,
                push_threads: 0,
                turn: false,
            }),
            version: AtomicU64::new(0),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            generation: crate::sys::fork_generation(),
            pid: crate::sys::pid(),
        }
    }

    /// Refuses a channel inherited through `fork()`.
    pub fn check_process(&self) -> Result<(), Error> {
        if crate::sys::fork_generation() == self.generation {
            return Ok(());
        }
        Err(Error::BadArgument(format!(
            "channel '{}' was created in another process (pid {}); call vmpool.channel('{}') again in this process (it starts empty there)",
            self.name, self.pid, self.name
        )))
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn byte_capacity(&self) -> usize {
        self.max_bytes
    }

    pub fn len(&self) -> usize {
        self.q.lock().msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_closed(&self) -> bool {
        self.q.lock().closed
    }

    fn has_room(&self, q: &Queue, size: usize) -> bool {
        // an empty channel takes any message that fits the byte capacity at all
        q.msgs.len() < self.capacity && (q.msgs.is_empty() || q.bytes + size <= self.max_bytes)
    }

    /// Appends `msg` (the caller checked for room) and moves the version; waking is the caller's.
    fn append(&self, q: &mut Queue, msg: Message) {
        q.bytes += msg.size();
        q.msgs.push_back(msg);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Appends `msg`, waiting up to `timeout` for room (`Some(ZERO)` = never wait, `None` =
    /// no limit). `stop` is polled while waiting. Gives the message back when it fails.
    pub fn push(
        &self,
        msg: impl Into<Message>,
        timeout: Option<Duration>,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), (Fail, Message)> {
        let msg = msg.into();
        if msg.size() > self.max_bytes {
            return Err((Fail::TooLarge, msg));
        }
        // a timeout past what the clock can represent is no limit
        let deadline = crate::call::deadline_after(timeout);
        let mut q = self.q.lock();
        let mut woken = false;
        let mut spun = false;
        let mut parked = None;
        loop {
            if q.closed {
                return Err((Fail::Closed, msg));
            }
            if self.has_room(&q, msg.size()) {
                self.append(&mut q, msg);
                // room may remain for the next pusher we were woken ahead of
                if woken && self.has_room(&q, 0) {
                    self.wake_one(&mut q, Side::Push);
                }
                self.wake_one(&mut q, Side::Pop);
                observed(parked);
                return Ok(());
            }
            if self.spun_and_changed(&mut q, timeout, &mut spun, &mut parked) {
                continue;
            }
            q.push_threads += 1;
            let waited = wait(&self.not_full, &mut q, deadline, stop);
            q.push_threads -= 1;
            let fail = match waited {
                Ok(w) => {
                    woken = w;
                    continue;
                }
                Err(f) => f,
            };
            // giving up: a wake-up meant for this waiter goes to the next one
            if q.closed || self.has_room(&q, 0) {
                self.wake_one(&mut q, Side::Push);
            }
            return Err((fail, msg));
        }
    }

    /// Takes the oldest message, waiting up to `timeout` for one; a closed channel is drained
    /// first, then answers `Closed`.
    pub fn pop(&self, timeout: Option<Duration>, stop: &dyn Fn() -> bool) -> Result<Message, Fail> {
        // a timeout past what the clock can represent is no limit
        let deadline = crate::call::deadline_after(timeout);
        let mut q = self.q.lock();
        let mut spun = false;
        let mut parked = None;
        loop {
            if let Some(m) = self.take(&mut q) {
                observed(parked);
                return Ok(m);
            }
            if q.closed {
                return Err(Fail::Closed);
            }
            if self.spun_and_changed(&mut q, timeout, &mut spun, &mut parked) {
                continue;
            }
            q.pop_threads += 1;
            let waited = wait(&self.not_empty, &mut q, deadline, stop);
            q.pop_threads -= 1;
            if let Err(f) = waited {
                if !q.msgs.is_empty() || q.closed {
                    self.wake_one(&mut q, Side::Pop);
                }
                return Err(f);
            }
        }
    }

    /// Before a thread's first wait (once, and not for a zero timeout): whether the channel
    /// changed while it spun, so the caller tries again; if not, `parked` notes when it started.
    fn spun_and_changed(
        &self,
        q: &mut parking_lot::MutexGuard<'_, Queue>,
        timeout: Option<Duration>,
        spun: &mut bool,
        parked: &mut Option<crate::spin::Wait>,
    ) -> bool {
        if *spun || timeout == Some(Duration::ZERO) {
            return false;
        }
        *spun = true;
        match self.spin(q) {
            Ok(()) => true,
            Err(start) => {
                *parked = Some(start);
                false
            }
        }
    }

    /// Before a thread's first wait: spins (lock released, bounded, adaptive) until the channel
    /// changes. `Ok` if it did (the caller tries again); else the wait's start, for `observed`
    /// once the operation completes after parking (so the budget follows the real waits).
    fn spin(&self, q: &mut parking_lot::MutexGuard<'_, Queue>) -> Result<(), crate::spin::Wait> {
        let seen = self.version.load(Ordering::Acquire);
        parking_lot::MutexGuard::unlocked(q, || {
            SPIN.with(|spin| {
                let start = spin.start();
                if spin.spin(start, || self.version.load(Ordering::Acquire) != seen) {
                    spin.observe(start);
                    return Ok(());
                }
                Err(start)
            })
        })
    }

    /// The oldest message, if any, waking a pusher (room) and, if more remain, another popper.
    fn take(&self, q: &mut Queue) -> Option<Message> {
        let m = q.msgs.pop_front()?;
        q.bytes -= m.size();
        self.version.fetch_add(1, Ordering::Release);
        self.wake_one(q, Side::Push);
        if !q.msgs.is_empty() {
            // another popper may be waiting behind a push that woke only us
            self.wake_one(q, Side::Pop);
        }
        Some(m)
    }

    /// Puts back, as the oldest, a message a pop took but could not hand over (the popping state
    /// had no memory for its values), so that nothing is lost; a pusher may have taken its room
    /// meanwhile, so the channel can hold one message or its bytes over capacity until popped.
    pub fn give_back(&self, msg: Message) {
        let mut q = self.q.lock();
        q.bytes += msg.size();
        q.msgs.push_front(msg);
        self.version.fetch_add(1, Ordering::Release);
        self.wake_one(&mut q, Side::Pop);
    }

    /// Takes the oldest message if there is one, never waiting (the test `select` uses).
    pub fn try_pop(&self) -> Result<Message, Fail> {
        self.pop_or_watch(None)
    }

    /// Takes the oldest message now; with none, answers `Closed` (closed and drained) or `Timeout`
    /// after filing `watcher` (if given) to be finished when a message or `close()` comes.
    pub fn pop_or_watch(&self, watcher: Option<&Arc<Call>>) -> Result<Message, Fail> {
        let mut q = self.q.lock();
        if let Some(m) = self.take(&mut q) {
            return Ok(m);
        }
        if q.closed {
            return Err(Fail::Closed);
        }
        if let Some(w) = watcher {
            q.pop_watch.push_back(w.clone());
        }
        Err(Fail::Timeout)
    }

    /// Appends `msg` now if there is room; otherwise gives it back with `Timeout` after filing
    /// `watcher` (if given) to be finished when room or `close()` comes.
    pub fn push_or_watch(
        &self,
        msg: impl Into<Message>,
        watcher: Option<&Arc<Call>>,
    ) -> Result<(), (Fail, Message)> {
        let msg = msg.into();
        if msg.size() > self.max_bytes {
            return Err((Fail::TooLarge, msg));
        }
        let mut q = self.q.lock();
        if q.closed {
            return Err((Fail::Closed, msg));
        }
        if self.has_room(&q, msg.size()) {
            self.append(&mut q, msg);
            self.wake_one(&mut q, Side::Pop);
            return Ok(());
        }
        if let Some(w) = watcher {
            q.push_watch.push_back(w.clone());
        }
        Err((Fail::Timeout, msg))
    }

    /// Removes `watcher` from both sides' lists.
    pub fn unwatch(&self, watcher: &Arc<Call>) {
        let mut q = self.q.lock();
        q.pop_watch.retain(|c| !Arc::ptr_eq(c, watcher));
        q.push_watch.retain(|c| !Arc::ptr_eq(c, watcher));
    }

    /// A watcher woken for `side` that will not use its wake-up hands it on, if the side can
    /// still proceed.
    pub fn pass_on(&self, side: Side) {
        let mut q = self.q.lock();
        let can = match side {
            Side::Pop => !q.msgs.is_empty() || q.closed,
            Side::Push => q.closed || self.has_room(&q, 0),
        };
        if can {
            self.wake_one(&mut q, side);
        }
    }

    /// Wakes one waiter of `side`: a thread or a watcher, alternating when both wait.
    fn wake_one(&self, q: &mut Queue, side: Side) {
        q.turn = !q.turn;
        let turn = q.turn;
        let (list, threads, cv) = match side {
            Side::Pop => (&mut q.pop_watch, q.pop_threads, &self.not_empty),
            Side::Push => (&mut q.push_watch, q.push_threads, &self.not_full),
        };
        if threads == 0 || (!list.is_empty() && turn) {
            while let Some(c) = list.pop_front() {
                if ready(&c) {
                    return;
                }
            }
        }
        if threads > 0 {
            cv.notify_one();
        }
    }

    /// Pushes fail from now on; pops drain what is queued, then answer `Closed`. Wakes every
    /// waiter on both sides. Idempotent.
    pub fn close(&self) {
        let mut guard = self.q.lock();
        let q = &mut *guard;
        q.closed = true;
        self.version.fetch_add(1, Ordering::Release);
        for c in q.pop_watch.drain(..).chain(q.push_watch.drain(..)) {
            ready(&c);
        }
        drop(guard);
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

/// A wait that spun, parked and then completed tells the spin how long it took.
fn observed(parked: Option<crate::spin::Wait>) {
    if let Some(start) = parked {
        SPIN.with(|spin| spin.observe(start));
    }
}

/// One wait on `cv`: `Ok(true)` when notified, `Ok(false)` on a poll slice with nothing to say
/// (the caller re-checks its condition either way), `Err` when the deadline passed or `stop` holds.
fn wait(
    cv: &Condvar,
    q: &mut parking_lot::MutexGuard<'_, Queue>,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> Result<bool, Fail> {
    if stop() {
        return Err(Fail::Stopped);
    }
    let now = Instant::now();
    let until = match deadline {
        Some(d) if d <= now => return Err(Fail::Timeout),
        Some(d) => d.min(now + POLL_SLICE),
        None => now + POLL_SLICE,
    };
    Ok(!cv.wait_until(q, until).timed_out())
}

/// The channels of this process by name.
static REGISTRY: Mutex<PerProcess<HashMap<String, Arc<Channel>>>> = Mutex::new(PerProcess::new());

/// The channel called `name`, created with `opts` if there is none. Options that disagree with
/// an existing channel's are an error.
pub fn open(name: &str, opts: Options) -> Result<Arc<Channel>, Error> {
    let capacity = opts.capacity.unwrap_or(DEFAULT_CAPACITY);
    let bytes = opts.bytes.unwrap_or(DEFAULT_BYTES);
    if capacity == 0 {
        return Err(Error::BadArgument(
            "option 'capacity' to vmpool.channel must be at least 1 message (got 0)".into(),
        ));
    }
    if bytes == 0 {
        return Err(Error::BadArgument(
            "option 'bytes' to vmpool.channel must be at least 1 (got 0)".into(),
        ));
    }
    let mut guard = REGISTRY.lock();
    let chans = guard.get_mut();
    if let Some(c) = chans.get(name) {
        let clash = |what: &str, has: usize, asked: usize| {
            Error::BadArgument(format!(
                "channel '{name}' already exists with {what} = {has} (asked for {asked}); pass the same options, or none, to use it"
            ))
        };
        if let Some(a) = opts.capacity.filter(|&a| a != c.capacity) {
            return Err(clash("capacity", c.capacity, a));
        }
        if let Some(b) = opts.bytes.filter(|&b| b != c.max_bytes) {
            return Err(clash("bytes", c.max_bytes, b));
        }
        return Ok(c.clone());
    }
    let c = Arc::new(Channel::new(name, capacity, bytes));
    chans.insert(name.to_string(), c.clone());
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEVER: &dyn Fn() -> bool = &|| false;

    #[test]
    fn messages_come_out_in_the_order_they_went_in() {
        let c = Channel::new("t-fifo", 8, 1 << 10);
        for i in 0..5u8 {
            c.push(vec![i], None, NEVER).unwrap();
        }
        assert_eq!(c.len(), 5);
        for i in 0..5u8 {
            assert_eq!(c.pop(None, NEVER).unwrap(), vec![i]);
        }
    }

    #[test]
    fn a_full_channel_times_out_a_push_and_gives_the_message_back() {
        let c = Channel::new("t-full", 1, 1 << 10);
        c.push(vec![1], None, NEVER).unwrap();
        let (f, m) = c.push(vec![2], Some(Duration::ZERO), NEVER).unwrap_err();
        assert_eq!(f, Fail::Timeout);
        assert_eq!(m, vec![2]);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_byte_capacity_bounds_the_channel_but_an_empty_channel_takes_any_message_that_fits() {
        let c = Channel::new("t-bytes", 100, 10);
        assert_eq!(
            c.push(vec![0; 11], None, NEVER).unwrap_err().0,
            Fail::TooLarge
        );
        c.push(vec![0; 10], None, NEVER).unwrap();
        assert_eq!(
            c.push(vec![0; 1], Some(Duration::ZERO), NEVER)
                .unwrap_err()
                .0,
            Fail::Timeout
        );
    }

    #[test]
    fn an_empty_channel_times_out_a_pop() {
        let c = Channel::new("t-empty", 1, 1 << 10);
        assert_eq!(c.try_pop().unwrap_err(), Fail::Timeout);
        assert_eq!(
            c.pop(Some(Duration::from_millis(1)), NEVER).unwrap_err(),
            Fail::Timeout
        );
    }

    #[test]
    fn close_fails_pushes_and_lets_pops_drain_then_answer_closed() {
        let c = Channel::new("t-close", 4, 1 << 10);
        c.push(vec![1], None, NEVER).unwrap();
        c.close();
        assert_eq!(c.push(vec![2], None, NEVER).unwrap_err().0, Fail::Closed);
        assert_eq!(c.pop(None, NEVER).unwrap(), vec![1]);
        assert_eq!(c.pop(None, NEVER).unwrap_err(), Fail::Closed);
    }

    #[test]
    fn close_wakes_waiters_on_both_sides() {
        let empty = Arc::new(Channel::new("t-close-pop", 1, 1 << 10));
        let full = Arc::new(Channel::new("t-close-push", 1, 1 << 10));
        full.push(vec![0], None, NEVER).unwrap();
        let (e, f) = (empty.clone(), full.clone());
        let popper = std::thread::spawn(move || e.pop(None, NEVER));
        let pusher = std::thread::spawn(move || f.push(vec![1], None, NEVER).map_err(|x| x.0));
        empty.close();
        full.close();
        assert_eq!(popper.join().unwrap().unwrap_err(), Fail::Closed);
        assert_eq!(pusher.join().unwrap().unwrap_err(), Fail::Closed);
    }

    #[test]
    fn a_stop_test_ends_a_wait() {
        let c = Channel::new("t-stop", 1, 1 << 10);
        let flag = std::sync::atomic::AtomicBool::new(true);
        let stop = || flag.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(c.pop(None, &stop).unwrap_err(), Fail::Stopped);
    }

    #[test]
    fn the_same_name_gives_the_same_channel_and_options_must_agree() {
        let a = open("registry-test-chan", Options::default()).unwrap();
        let b = open("registry-test-chan", Options::default()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let e = open(
            "registry-test-chan",
            Options {
                capacity: Some(3),
                bytes: None,
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().starts_with(
            "vmpool: channel 'registry-test-chan' already exists with capacity = 1024"
        ));
        assert!(open(
            "registry-test-zero",
            Options {
                capacity: Some(0),
                bytes: None
            }
        )
        .is_err());
    }
}
