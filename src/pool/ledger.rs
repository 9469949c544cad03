//! The pool's counts: which states exist, which are idle, which calls wait, and the counters
//! `stats()` reports. This is the only code that changes them; [`super::Pool`] holds the ledger
//! under its state mutex and calls it, and turns what it returns into actions outside the lock
//! (starting a worker, posting a call, waking the idle check).
//!
//! The rules, in the order a call meets them ([`Ledger::reserve`]): a free state is taken at once
//! (core states first, then the most recently used non-core one); else a new state is opened
//! (a core one if fewer than `core` are alive, else a non-core one within `max_noncore`); else
//! the call is refused (`blocking = false`) or queued within `max_waiting`. A state that finishes
//! a call takes the oldest queued call before going idle ([`Ledger::release`]), so queued calls
//! never need the caller. A state ends ([`Ledger::retire`]) when it could not be created, when a
//! replacement after a limit could not be created, when it was idle past `idle_timeout`
//! ([`Ledger::expire`]) or when the pool closes.
//!
//! Invariants, with nothing in flight: `live_core + live_noncore = idle + busy`,
//! `created - closed = live_core + live_noncore`, `invokes = succeeded + errors + rejected +
//! timeouts + cancelled` and `errors = failed + time_limits + memory_limits`. The unit tests below
//! check them without threads.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::call::{Call, Outcome, ASSIGNED, CLAIMED, QUEUED, RUNNING};
use crate::config::Config;
use crate::mailbox::Mailbox;
use crate::Error;

/// Counters since the pool was created, plus the live picture (see `pool:stats()`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub core: usize,
    pub noncore: usize,
    pub idle: usize,
    pub busy: usize,
    pub waiting: usize,
    /// Worker threads not yet joined: one per live state, plus those of closed states until the
    /// idle check (or `close`) has joined them.
    pub threads: usize,
    pub created: u64,
    pub closed: u64,
    /// Calls submitted to an open pool; each ends in exactly one of the five counters below.
    pub invokes: u64,
    pub succeeded: u64,
    /// Calls that reached a state and failed (child errors, time and memory limits), and queued
    /// calls failed by `close()`: `failed + time_limits + memory_limits`.
    pub errors: u64,
    /// Errors other than a limit.
    pub failed: u64,
    /// Calls stopped by `time_limit`.
    pub time_limits: u64,
    /// Calls whose state ran past `memory_limit`.
    pub memory_limits: u64,
    /// Refused at submit: pool exhausted (`blocking = false`) or queue full (`max_waiting`).
    pub rejected: u64,
    /// Queued calls that waited longer than `acquire_timeout`.
    pub timeouts: u64,
    /// Calls cancelled before they started, or interrupted while running.
    pub cancelled: u64,
    /// Non-core states closed for being idle (past `idle_timeout`, or at once with 0); in `closed`.
    pub idle_closed: u64,
    /// The most states busy, and calls queued, at once since the last reset of the peaks.
    pub peak_busy: usize,
    pub peak_waiting: usize,
}

/// How a call that reached a state ended, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Succeeded,
    Failed,
    TimeLimit,
    MemoryLimit,
    /// `fut:cancel()` interrupted the call while it ran.
    Interrupted,
    /// Nothing to count: the call was cancelled before it ran (`cancel` counted it), it was a
    /// garbage collection (`pool:collect()`), or there was no call (a state became ready).
    Uncounted,
}

impl Ended {
    pub fn of(outcome: &Outcome) -> Ended {
        match outcome {
            Outcome::Collected => Ended::Uncounted,
            Outcome::Err(Error::Cancelled) => Ended::Interrupted,
            Outcome::Err(e) => match e {
                Error::MapItem { cause, .. } => Ended::of_error(cause),
                e => Ended::of_error(e),
            },
            _ => Ended::Succeeded,
        }
    }

    fn of_error(e: &Error) -> Ended {
        match e {
            Error::TimeLimit { .. } => Ended::TimeLimit,
            Error::MemoryLimit { .. } => Ended::MemoryLimit,
            _ => Ended::Failed,
        }
    }
}

/// What a worker does after a call.
pub enum Next {
    Run(Arc<Call>),
    Idle,
    Exit,
}

/// Where [`Ledger::reserve`] put a call.
pub enum Reserved {
    /// An idle state, reserved for it: post the call to this mailbox.
    Idle(Arc<Mailbox>),
    /// A new state, counted already: start its worker with the call.
    Start { core: bool },
    /// Queued. `first_deadline` is set when the queue was empty and the call has an acquire
    /// deadline: the idle check must look again by then.
    Queued { first_deadline: Option<Instant> },
}

/// What [`Ledger::close`] leaves the pool to do: fail the queued calls (counted as errors) and
/// tell the idle states to exit (closed).
pub struct Closing {
    pub queued: Vec<Arc<Call>>,
    pub idle: Vec<Arc<Mailbox>>,
}

/// Why a state ends outside [`Ledger::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retire {
    /// It could not be created (no thread, no state); it had been opened for a call, which then
    /// failed, if `had_call`.
    NotStarted { had_call: bool },
    /// It hit a limit with this call and could not be replaced.
    Lost(Ended),
}

/// The sizing options the ledger applies.
struct Sizing {
    core: usize,
    max_noncore: usize,
    blocking: bool,
    max_waiting: usize,
    idle_timeout: Option<Duration>,
    acquire_timeout: Option<Duration>,
}

pub struct Ledger {
    sizing: Sizing,
    closed: bool,
    idle_core: Vec<Arc<Mailbox>>,
    /// Idle non-core states with the time they went idle, oldest first.
    idle_noncore: VecDeque<(Arc<Mailbox>, Instant)>,
    /// Calls waiting for a state, each with when it was queued ([`crate::clock::now`] ticks,
    /// read only with an `acquire_timeout`: cheaper than an `Instant`). Cancelled or timed-out
    /// calls stay until a worker or the idle check pops them (`waiting_live` counts only the
    /// live ones).
    waiting: VecDeque<(Arc<Call>, u64)>,
    waiting_live: usize,
    live_core: usize,
    live_noncore: usize,
    busy: usize,
    stats: Stats,
}

impl Ledger {
    pub fn new(config: &Config) -> Ledger {
        // the queue's ticks keep one meaning from here on (the clock is chosen once per process)
        crate::clock::init();
        Ledger {
            sizing: Sizing {
                core: config.core,
                max_noncore: config.max_noncore,
                blocking: config.blocking,
                max_waiting: config.max_waiting,
                idle_timeout: config.idle_timeout,
                acquire_timeout: config.acquire_timeout,
            },
            closed: false,
            idle_core: Vec::new(),
            idle_noncore: VecDeque::new(),
            waiting: VecDeque::new(),
            waiting_live: 0,
            live_core: 0,
            live_noncore: 0,
            busy: 0,
            stats: Stats::default(),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Counts a new state (busy: it is being created, maybe for a call).
    pub fn open(&mut self, core: bool) {
        if core {
            self.live_core += 1;
        } else {
            self.live_noncore += 1;
        }
        self.busy += 1;
        self.stats.created += 1;
    }

    /// Raises the peak of busy states to what is busy now. Only where a call takes a state: the
    /// core states being created by `new` are busy too, and would make every peak at least `core`.
    #[inline]
    fn note_busy(&mut self) {
        if self.busy > self.stats.peak_busy {
            self.stats.peak_busy = self.busy;
        }
    }

    /// Finds a place for a submitted call (see the rules at the top) and sets its phase.
    #[inline]
    pub fn reserve(&mut self, call: &Arc<Call>) -> Result<Reserved, Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        self.stats.invokes += 1;
        let idle = match self.idle_core.pop() {
            Some(mb) => Some(mb),
            None => self.idle_noncore.pop_back().map(|(mb, _)| mb),
        };
        if let Some(mailbox) = idle {
            self.busy += 1;
            self.note_busy();
            call.set_phase(ASSIGNED);
            return Ok(Reserved::Idle(mailbox));
        }
        // fewer core states than configured only after a state could not be replaced: open one
        let core = self.live_core < self.sizing.core;
        if core || self.live_noncore < self.sizing.max_noncore {
            call.set_phase(ASSIGNED);
            self.open(core);
            self.note_busy();
            return Ok(Reserved::Start { core });
        }
        if !self.sizing.blocking {
            self.stats.rejected += 1;
            return Err(Error::Exhausted {
                states: self.live_core + self.live_noncore,
            });
        }
        if self.waiting_live >= self.sizing.max_waiting {
            self.stats.rejected += 1;
            return Err(Error::QueueFull {
                max_waiting: self.sizing.max_waiting,
            });
        }
        let queued_at = match self.sizing.acquire_timeout {
            Some(_) => crate::clock::now(),
            None => 0,
        };
        call.set_phase(QUEUED);
        let first = self.waiting_live == 0;
        self.waiting.push_back((call.clone(), queued_at));
        self.waiting_live += 1;
        self.stats.peak_waiting = self.stats.peak_waiting.max(self.waiting_live);
        let first_deadline = match self.sizing.acquire_timeout {
            Some(t) if first => Instant::now().checked_add(t),
            _ => None,
        };
        Ok(Reserved::Queued { first_deadline })
    }

    /// Cancels a call that has not started. True if it was cancelled (it will never run): the
    /// caller then finishes it with the cancellation.
    pub fn cancel(&mut self, call: &Call) -> bool {
        match call.claim_unstarted() {
            Some(from) => {
                if from == QUEUED {
                    self.waiting_live -= 1;
                }
                // an ASSIGNED call stays in its worker's mailbox; the worker skips it
                self.stats.cancelled += 1;
                true
            }
            None => false,
        }
    }

    fn count(&mut self, ended: Ended) {
        match ended {
            Ended::Succeeded => self.stats.succeeded += 1,
            Ended::Failed => {
                self.stats.errors += 1;
                self.stats.failed += 1;
            }
            Ended::TimeLimit => {
                self.stats.errors += 1;
                self.stats.time_limits += 1;
            }
            Ended::MemoryLimit => {
                self.stats.errors += 1;
                self.stats.memory_limits += 1;
            }
            Ended::Interrupted => self.stats.cancelled += 1,
            Ended::Uncounted => {}
        }
    }

    /// The oldest live queued call, moved to `to`.
    fn take_queued(&mut self, to: u32) -> Option<Arc<Call>> {
        while let Some((next, _)) = self.waiting.pop_front() {
            if next.transition(QUEUED, to) {
                self.waiting_live -= 1;
                return Some(next);
            }
        }
        None
    }

    /// Uncounts a live state (the worker exits).
    fn close_state(&mut self, core: bool) {
        if core {
            self.live_core -= 1;
        } else {
            self.live_noncore -= 1;
        }
        self.stats.closed += 1;
    }

    /// A state finished (or skipped) a call, or became ready: count it, then hand the state the
    /// next queued call, park it as idle, or let it exit. With `Next::Idle`, the second value is
    /// set when the idle check must look again by then (the state is the only idle non-core one).
    /// `now` is asked only when a non-core state goes idle: a busy pool's states go from call to
    /// call without reading the clock under the lock.
    #[inline]
    pub fn release(
        &mut self,
        me: &Arc<Mailbox>,
        core: bool,
        ended: Ended,
        now: impl FnOnce() -> Instant,
    ) -> (Next, Option<Instant>) {
        self.count(ended);
        if let Some(next) = self.take_queued(RUNNING) {
            return (Next::Run(next), None);
        }
        self.busy -= 1;
        let close_now = self.closed || (!core && self.sizing.idle_timeout == Some(Duration::ZERO));
        if close_now {
            if !self.closed {
                self.stats.idle_closed += 1;
            }
            self.close_state(core);
            return (Next::Exit, None);
        }
        if core {
            self.idle_core.push(me.clone());
            return (Next::Idle, None);
        }
        let now = now();
        self.idle_noncore.push_back((me.clone(), now));
        let due = (self.idle_noncore.len() == 1)
            .then(|| self.sizing.idle_timeout.and_then(|t| now.checked_add(t)))
            .flatten();
        (Next::Idle, due)
    }

    /// A busy state ends (see [`Retire`]). A state lost after a limit opens a new state at once
    /// for the oldest queued call, if any, returned as ASSIGNED (it may fail the same way, and
    /// then that call gets the error); otherwise the next `submit` opens one (`core` is a floor).
    pub fn retire(&mut self, core: bool, why: Retire) -> Option<Arc<Call>> {
        match why {
            Retire::NotStarted { had_call } if had_call => self.count(Ended::Failed),
            Retire::NotStarted { .. } => {}
            Retire::Lost(ended) => self.count(ended),
        }
        self.busy -= 1;
        self.close_state(core);
        if self.closed || !matches!(why, Retire::Lost(_)) {
            return None;
        }
        let next = self.take_queued(ASSIGNED)?;
        self.open(core);
        self.note_busy();
        Some(next)
    }

    /// A state was replaced after a limit: one closed, one created.
    pub fn replaced(&mut self) {
        self.stats.closed += 1;
        self.stats.created += 1;
    }

    /// Takes the queued calls whose wait for a state is over (counted as timeouts; the caller
    /// fails them) and the non-core states idle for too long (closed; the caller tells them to
    /// exit); returns them and when to look again.
    pub fn expire(&mut self, now: Instant) -> (Vec<Arc<Call>>, Vec<Arc<Mailbox>>, Option<Instant>) {
        let mut expired = Vec::new();
        // FIFO with one timeout, so the oldest live queued call has the earliest deadline; `now`
        // stands for the clock's present tick
        let tick = crate::clock::now();
        let left = |queued_at: u64, timeout: Duration| {
            timeout.saturating_sub(Duration::from_nanos(crate::clock::nanos(
                tick.saturating_sub(queued_at),
            )))
        };
        let mut next = None;
        while let Some((front, queued_at)) = self.waiting.front() {
            if front.phase() != QUEUED {
                self.waiting.pop_front();
                continue;
            }
            let Some(timeout) = self.sizing.acquire_timeout else {
                break;
            };
            let left = left(*queued_at, timeout);
            if !left.is_zero() {
                next = now.checked_add(left);
                break;
            }
            if let Some((call, _)) = self.waiting.pop_front() {
                if call.transition(QUEUED, CLAIMED) {
                    self.waiting_live -= 1;
                    self.stats.timeouts += 1;
                    expired.push(call);
                }
            }
        }
        let mut to_close = Vec::new();
        if let Some(idle) = self.sizing.idle_timeout {
            while let Some((_, since)) = self.idle_noncore.front() {
                let due = *since + idle;
                if due > now {
                    next = Some(next.map_or(due, |n| n.min(due)));
                    break;
                }
                if let Some((mb, _)) = self.idle_noncore.pop_front() {
                    self.close_state(false);
                    self.stats.idle_closed += 1;
                    to_close.push(mb);
                }
            }
        }
        (expired, to_close, next)
    }

    /// Closes the ledger (see [`Closing`]); `None` if it was closed already.
    pub fn close(&mut self) -> Option<Closing> {
        if self.closed {
            return None;
        }
        self.closed = true;
        let mut queued = Vec::new();
        while let Some(call) = self.take_queued(CLAIMED) {
            self.count(Ended::Failed);
            queued.push(call);
        }
        self.waiting.clear();
        let mut idle = Vec::new();
        for mb in std::mem::take(&mut self.idle_core) {
            self.close_state(true);
            idle.push(mb);
        }
        while let Some((mb, _)) = self.idle_noncore.pop_front() {
            self.close_state(false);
            idle.push(mb);
        }
        Some(Closing { queued, idle })
    }

    /// Reserves every idle state (for a garbage collection: `pool:collect()`), and lets go of
    /// the queued records of calls cancelled or timed out (a worker would drop them when it
    /// next looks at the queue). The states become idle again through [`Ledger::release`].
    pub fn reserve_idle(&mut self) -> Vec<Arc<Mailbox>> {
        self.waiting.retain(|(c, _)| c.phase() == QUEUED);
        let mut idle: Vec<Arc<Mailbox>> = std::mem::take(&mut self.idle_core);
        idle.extend(self.idle_noncore.drain(..).map(|(mb, _)| mb));
        self.busy += idle.len();
        idle
    }

    /// Starts a new interval for the peaks: they become what is busy and queued now.
    pub fn reset_peaks(&mut self) {
        self.stats.peak_busy = self.busy;
        self.stats.peak_waiting = self.waiting_live;
    }

    /// The counters and the live picture (`threads` is the thread registry's: left 0).
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.core = self.live_core;
        s.noncore = self.live_noncore;
        s.idle = self.idle_core.len() + self.idle_noncore.len();
        s.busy = self.busy;
        s.waiting = self.waiting_live;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(core: usize, max_noncore: usize, max_waiting: usize) -> Ledger {
        Ledger::new(&Config {
            core,
            max_noncore,
            max_waiting,
            idle_timeout: Some(Duration::from_secs(1)),
            acquire_timeout: Some(Duration::from_secs(1)),
            ..Config::default()
        })
    }

    /// Opens the core states as `Pool::new` does, and makes them ready.
    fn with_ready_core(l: &mut Ledger, n: usize) -> Vec<Arc<Mailbox>> {
        let mbs: Vec<_> = (0..n).map(|_| Arc::new(Mailbox::default())).collect();
        for mb in &mbs {
            l.open(true);
            let (next, _) = l.release(mb, true, Ended::Uncounted, Instant::now);
            assert!(matches!(next, Next::Idle));
        }
        mbs
    }

    fn balanced(l: &Ledger) -> Stats {
        let s = l.stats();
        assert_eq!(s.core + s.noncore, s.idle + s.busy, "{s:?}");
        assert_eq!(s.created - s.closed, (s.core + s.noncore) as u64, "{s:?}");
        assert_eq!(
            s.errors,
            s.failed + s.time_limits + s.memory_limits,
            "{s:?}"
        );
        s
    }

    #[test]
    fn a_call_takes_an_idle_core_state_then_opens_non_core_ones_then_queues_then_refuses() {
        let mut l = ledger(1, 1, 1);
        with_ready_core(&mut l, 1);
        let calls: Vec<_> = (0..4).map(|_| Arc::new(Call::default())).collect();
        assert!(matches!(l.reserve(&calls[0]), Ok(Reserved::Idle(_))));
        assert!(matches!(
            l.reserve(&calls[1]),
            Ok(Reserved::Start { core: false })
        ));
        match l.reserve(&calls[2]) {
            Ok(Reserved::Queued { first_deadline }) => assert!(first_deadline.is_some()),
            _ => panic!("the third call is not queued"),
        }
        assert!(matches!(
            l.reserve(&calls[3]),
            Err(Error::QueueFull { max_waiting: 1 })
        ));
        let s = balanced(&l);
        assert_eq!((s.busy, s.waiting, s.invokes, s.rejected), (2, 1, 4, 1));
    }

    #[test]
    fn a_finished_state_takes_the_oldest_queued_call_before_going_idle() {
        let mut l = ledger(1, 0, 8);
        let mbs = with_ready_core(&mut l, 1);
        let (a, b) = (Arc::new(Call::default()), Arc::new(Call::default()));
        assert!(matches!(l.reserve(&a), Ok(Reserved::Idle(_))));
        assert!(matches!(l.reserve(&b), Ok(Reserved::Queued { .. })));
        let (next, _) = l.release(&mbs[0], true, Ended::Succeeded, Instant::now);
        match next {
            Next::Run(c) => assert!(Arc::ptr_eq(&c, &b) && c.phase() == RUNNING),
            _ => panic!("the queued call was not handed over"),
        }
        let (next, _) = l.release(&mbs[0], true, Ended::Failed, Instant::now);
        assert!(matches!(next, Next::Idle));
        let s = balanced(&l);
        assert_eq!((s.succeeded, s.errors, s.idle, s.waiting), (1, 1, 1, 0));
    }

    #[test]
    fn without_blocking_a_full_pool_refuses_at_once() {
        let mut l = Ledger::new(&Config {
            core: 1,
            max_noncore: 0,
            blocking: false,
            ..Config::default()
        });
        with_ready_core(&mut l, 1);
        assert!(l.reserve(&Arc::new(Call::default())).is_ok());
        assert!(matches!(
            l.reserve(&Arc::new(Call::default())),
            Err(Error::Exhausted { states: 1 })
        ));
        assert_eq!(l.stats().rejected, 1);
    }

    #[test]
    fn a_cancelled_queued_call_stops_counting_as_waiting_and_is_skipped() {
        let mut l = ledger(1, 0, 8);
        let mbs = with_ready_core(&mut l, 1);
        let (a, b) = (Arc::new(Call::default()), Arc::new(Call::default()));
        l.reserve(&a).ok();
        l.reserve(&b).ok();
        assert!(l.cancel(&b));
        assert!(!l.cancel(&b), "cancelled twice");
        assert_eq!(l.stats().waiting, 0);
        let (next, _) = l.release(&mbs[0], true, Ended::Succeeded, Instant::now);
        assert!(matches!(next, Next::Idle));
        let s = balanced(&l);
        assert_eq!(s.invokes, s.succeeded + s.cancelled);
    }

    #[test]
    fn idle_non_core_states_expire_and_the_first_one_sets_the_deadline() {
        let mut l = ledger(0, 2, 0);
        let t0 = Instant::now();
        let (a, b) = (Arc::new(Mailbox::default()), Arc::new(Mailbox::default()));
        l.open(false);
        l.open(false);
        let (_, due) = l.release(&a, false, Ended::Succeeded, || t0);
        assert_eq!(due, Some(t0 + Duration::from_secs(1)));
        let (_, due) = l.release(&b, false, Ended::Succeeded, || {
            t0 + Duration::from_millis(500)
        });
        assert_eq!(due, None, "only the first idle state sets a deadline");
        let (expired, closed, next) = l.expire(t0 + Duration::from_millis(1200));
        assert!(expired.is_empty());
        assert_eq!(closed.len(), 1);
        assert!(Arc::ptr_eq(&closed[0], &a));
        assert_eq!(next, Some(t0 + Duration::from_millis(1500)));
        let s = balanced(&l);
        assert_eq!((s.noncore, s.closed), (1, 1));
    }

    #[test]
    fn a_queued_call_past_acquire_timeout_expires_as_a_timeout() {
        let mut l = Ledger::new(&Config {
            core: 1,
            max_noncore: 0,
            acquire_timeout: Some(Duration::ZERO),
            ..Config::default()
        });
        with_ready_core(&mut l, 1);
        let (a, b) = (Arc::new(Call::default()), Arc::new(Call::default()));
        l.reserve(&a).ok();
        l.reserve(&b).ok();
        let (expired, _, _) = l.expire(Instant::now() + Duration::from_millis(1));
        assert_eq!(expired.len(), 1);
        assert_eq!(b.phase(), CLAIMED);
        let s = l.stats();
        assert_eq!((s.timeouts, s.waiting), (1, 0));
    }

    #[test]
    fn a_state_lost_after_a_limit_opens_a_new_one_for_the_oldest_queued_call() {
        let mut l = ledger(1, 0, 8);
        with_ready_core(&mut l, 1);
        let (a, b) = (Arc::new(Call::default()), Arc::new(Call::default()));
        l.reserve(&a).ok();
        l.reserve(&b).ok();
        let next = l.retire(true, Retire::Lost(Ended::Failed));
        assert!(next.is_some_and(|c| Arc::ptr_eq(&c, &b) && c.phase() == ASSIGNED));
        let s = balanced(&l);
        assert_eq!(
            (s.core, s.busy, s.errors, s.created, s.closed),
            (1, 1, 1, 2, 1)
        );
    }

    #[test]
    fn a_state_that_could_not_start_fails_its_call_and_leaves_the_pool_smaller() {
        let mut l = ledger(1, 1, 8);
        with_ready_core(&mut l, 1);
        l.reserve(&Arc::new(Call::default())).ok();
        let c = Arc::new(Call::default());
        assert!(matches!(l.reserve(&c), Ok(Reserved::Start { core: false })));
        assert!(l
            .retire(false, Retire::NotStarted { had_call: true })
            .is_none());
        let s = balanced(&l);
        assert_eq!((s.noncore, s.errors, s.created, s.closed), (0, 1, 2, 1));
    }

    #[test]
    fn closing_lets_busy_states_finish_their_calls_then_exit() {
        let mut l = ledger(3, 0, 8);
        let mbs = with_ready_core(&mut l, 3);
        let calls: Vec<_> = (0..3).map(|_| Arc::new(Call::default())).collect();
        for c in &calls {
            l.reserve(c).ok();
        }
        l.release(&mbs[0], true, Ended::Succeeded, Instant::now);
        l.release(&mbs[1], true, Ended::Succeeded, Instant::now);
        // two idle states, one busy, one call queued behind them
        let queued_call = Arc::new(Call::default());
        l.reserve(&Arc::new(Call::default())).ok();
        l.reserve(&Arc::new(Call::default())).ok();
        assert!(matches!(
            l.reserve(&queued_call),
            Ok(Reserved::Queued { .. })
        ));
        l.release(&mbs[0], true, Ended::Succeeded, Instant::now);
        let Closing { queued, idle } = l.close().expect("closed once");
        assert!(l.close().is_none());
        assert_eq!(
            (queued.len(), idle.len()),
            (0, 0),
            "the queued call went to the state"
        );
        for mb in &mbs {
            let (next, _) = l.release(mb, true, Ended::Succeeded, Instant::now);
            assert!(matches!(next, Next::Exit));
        }
        assert!(matches!(
            l.reserve(&Arc::new(Call::default())),
            Err(Error::Closed)
        ));
        let s = balanced(&l);
        assert_eq!((s.core, s.busy, s.closed), (0, 0, 3));
    }

    #[test]
    fn closing_fails_the_calls_still_queued() {
        let mut l = ledger(1, 0, 8);
        let mbs = with_ready_core(&mut l, 1);
        let (a, b) = (Arc::new(Call::default()), Arc::new(Call::default()));
        l.reserve(&a).ok();
        l.reserve(&b).ok();
        let Closing { queued, idle } = l.close().expect("closed once");
        assert_eq!((queued.len(), idle.len()), (1, 0));
        assert!(Arc::ptr_eq(&queued[0], &b) && b.phase() == CLAIMED);
        let (next, _) = l.release(&mbs[0], true, Ended::Succeeded, Instant::now);
        assert!(matches!(next, Next::Exit));
        let s = balanced(&l);
        assert_eq!(s.invokes, s.succeeded + s.errors);
    }

    #[test]
    fn reserving_the_idle_states_for_a_collection_counts_no_call() {
        let mut l = ledger(2, 0, 8);
        let mbs = with_ready_core(&mut l, 2);
        assert_eq!(l.reserve_idle().len(), 2);
        assert_eq!(l.stats().busy, 2);
        for mb in &mbs {
            l.release(mb, true, Ended::Uncounted, Instant::now);
        }
        let s = balanced(&l);
        assert_eq!((s.invokes, s.idle, s.busy), (0, 2, 0));
    }

    #[test]
    fn limits_are_errors_counted_by_kind_and_peaks_restart_from_now() {
        let mut l = ledger(2, 0, 8);
        let mbs = with_ready_core(&mut l, 2);
        let calls: Vec<_> = (0..4).map(|_| Arc::new(Call::default())).collect();
        for c in &calls {
            l.reserve(c).ok();
        }
        assert_eq!((l.stats().peak_busy, l.stats().peak_waiting), (2, 2));
        let limit = |e| {
            Ended::of(&Outcome::Err(Error::MapItem {
                index: 1,
                chunk: "c".into(),
                function: "f".into(),
                cause: Box::new(e),
            }))
        };
        let time = limit(Error::TimeLimit {
            chunk: "c".into(),
            function: "f".into(),
            seconds: 1.0,
            not_replaced: None,
        });
        assert_eq!(time, Ended::TimeLimit);
        l.release(&mbs[0], true, time, Instant::now);
        l.reset_peaks();
        assert_eq!((l.stats().peak_busy, l.stats().peak_waiting), (2, 1));
        let memory = Ended::of(&Outcome::Err(Error::MemoryLimit {
            chunk: "c".into(),
            function: "f".into(),
            bytes: 1,
            not_replaced: None,
        }));
        l.release(&mbs[1], true, memory, Instant::now);
        l.release(
            &mbs[0],
            true,
            Ended::of(&Outcome::Err(Error::Stopped)),
            Instant::now,
        );
        l.release(&mbs[1], true, Ended::Succeeded, Instant::now);
        let s = balanced(&l);
        assert_eq!(
            (
                s.errors,
                s.failed,
                s.time_limits,
                s.memory_limits,
                s.succeeded
            ),
            (3, 1, 1, 1, 1)
        );
        assert_eq!(s.invokes, s.succeeded + s.errors);
    }

    #[test]
    fn idle_closes_are_counted_apart_from_closes_at_close() {
        let mut l = ledger(1, 2, 8);
        let mbs = with_ready_core(&mut l, 1);
        l.reserve(&Arc::new(Call::default())).ok();
        let nc = Arc::new(Mailbox::default());
        assert!(matches!(
            l.reserve(&Arc::new(Call::default())),
            Ok(Reserved::Start { core: false })
        ));
        let t0 = Instant::now();
        l.release(&nc, false, Ended::Succeeded, || t0);
        let (_, closed, _) = l.expire(t0 + Duration::from_secs(2));
        assert_eq!(closed.len(), 1);
        l.release(&mbs[0], true, Ended::Succeeded, Instant::now);
        l.close();
        let s = balanced(&l);
        assert_eq!((s.idle_closed, s.closed), (1, 2));
    }
}
