//! A waiter that is not a thread on a condvar: a scheduler's coroutine (it yields, and its record
//! posts a token to the scheduler's completion queue when finished) or a `select` over several
//! channels (any one of them may finish it). Each wait arms a fresh call record; the channel that
//! can proceed, `close()`, or the deadline's timer finishes it, whichever comes first (a
//! compare-and-swap on the record's phase decides). Retiring the record afterwards removes it from
//! every list it was filed in and, if a channel woke it but the waiter did not use that channel,
//! hands the wake-up on, so none is lost.

use std::sync::Arc;
use std::time::Instant;

use super::{Channel, Side};
use crate::call::Call;

#[derive(Default)]
pub struct Watch {
    /// The record of the current wait, until retired.
    call: Option<Arc<Call>>,
    /// Where it was filed.
    filed: Vec<(Arc<Channel>, Side)>,
    /// When the whole operation gives up (`None`: never), kept across re-arms.
    pub deadline: Option<Instant>,
}

impl Watch {
    /// A fresh record for the next wait (the timer finishes it at the deadline).
    pub fn arm(&mut self) -> Arc<Call> {
        let call = Arc::new(Call::default());
        if let Some(d) = self.deadline {
            super::timer::at(d, &call);
        }
        self.call = Some(call.clone());
        call
    }

    /// The record of the current wait, if armed.
    pub fn call(&self) -> Option<&Arc<Call>> {
        self.call.as_ref()
    }

    /// Notes that the current record was filed on `chan`'s `side`.
    pub fn filed(&mut self, chan: &Arc<Channel>, side: Side) {
        self.filed.push((chan.clone(), side));
    }

    /// Whether the current wait is over (woken, closed, deadline): the coroutine may retry. True
    /// when not armed.
    pub fn ready(&self) -> bool {
        self.call.as_ref().is_none_or(|c| c.is_done())
    }

    /// Ends the current wait: out of every list; a channel's wake-up that `used` (the channel the
    /// waiter then completed its operation on) did not take is handed on.
    pub fn retire(&mut self, used: Option<&Channel>) {
        let Some(call) = self.call.take() else {
            return;
        };
        for (chan, _) in &self.filed {
            chan.unwatch(&call);
        }
        // finished by a channel (Ok), not by the timer (Err): someone may be owed the wake-up
        if matches!(call.result(), Some(Ok(_))) {
            for (chan, side) in &self.filed {
                if used.is_none_or(|u| !std::ptr::eq(u, &**chan)) {
                    chan.pass_on(*side);
                }
            }
        }
        self.filed.clear();
    }

    /// Whether the deadline has passed.
    pub fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.retire(None);
    }
}
