//! The idle check: one thread per pool that sleeps until the next deadline (a queued call's
//! `acquire_timeout`, a non-core state's `idle_timeout`) or a wake-up, then enforces it: fails
//! the queued calls whose wait is over, tells the non-core states idle for too long to exit (the
//! ledger decides which: [`super::ledger::Ledger::expire`]), and joins the threads of workers that
//! exited, so no thread outlives its state for long. It runs until the pool is closed and every
//! worker has exited.
//!
//! Deciding to sleep and sleeping happen under the pool lock, and every wake-up is sent under it,
//! so none is lost; a wake-up is sent only when it changes something (see
//! [`Pool::wake_housekeeper_by`]).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::{Inner, Pool};
use crate::call::Outcome;
use crate::Error;

/// What the idle check is doing, and its thread.
#[derive(Default)]
pub struct Housekeeper {
    state: State,
    thread: Option<JoinHandle<()>>,
}

#[derive(Clone, Copy, Default)]
enum State {
    /// Running (it looks at the queue and idle states before it sleeps again).
    #[default]
    Awake,
    /// Sleeping until then (`None`: until woken).
    Sleeping(Option<Instant>),
}

impl Housekeeper {
    /// The thread, for `close` to join.
    pub fn take_thread(&mut self) -> Option<JoinHandle<()>> {
        self.thread.take()
    }
}

/// Starts the pool's idle check.
pub fn start(pool: &Arc<Pool>) -> Result<(), Error> {
    let p = pool.clone();
    let thread = std::thread::Builder::new()
        .name("vmpool-idle".into())
        .spawn(move || p.housekeep())
        .map_err(|e| Error::Spawn(format!("cannot start the idle-check thread: {e}")))?;
    pool.inner.lock().housekeeper.thread = Some(thread);
    Ok(())
}

impl Pool {
    /// Makes sure the idle check looks again by `due`: wakes it only if it sleeps past that (a
    /// wake-up per queued call would cost a futex wake each time the queue fills again).
    pub(super) fn wake_housekeeper_by(&self, g: &mut Inner, due: Instant) {
        if let State::Sleeping(until) = g.housekeeper.state {
            if until.is_none_or(|t| t > due) {
                g.housekeeper.state = State::Awake;
                self.wake_housekeeper.notify_one();
            }
        }
    }

    /// The idle check's loop.
    fn housekeep(&self) {
        let mut g = self.inner.lock();
        loop {
            let (expired, to_close, next) = g.ledger.expire(Instant::now());
            for mb in to_close {
                mb.request_exit();
            }
            let finished = g.threads.take_finished();
            if !expired.is_empty() || !finished.is_empty() {
                drop(g);
                let seconds = self
                    .config
                    .acquire_timeout
                    .map_or(f64::INFINITY, |d| d.as_secs_f64());
                for call in expired {
                    call.finish(Outcome::Err(Error::AcquireTimeout { seconds }));
                }
                let joined = finished.len();
                for t in finished {
                    let _ = t.join();
                }
                g = self.inner.lock();
                g.threads.joined(joined);
                continue;
            }
            if g.ledger.is_closed() && g.threads.running() == 0 {
                drop(g);
                self.stop_watchdog();
                return;
            }
            g.housekeeper.state = State::Sleeping(next);
            match next {
                Some(d) => {
                    self.wake_housekeeper.wait_until(&mut g, d);
                }
                None => self.wake_housekeeper.wait(&mut g),
            }
            g.housekeeper.state = State::Awake;
        }
    }
}
