//! A `pool:map` batch in a state: the function runs once per item, each item a call of its own
//! (its own protected call, message handler and traceback, its own `time_limit` deadline), and
//! only its first result is encoded. The batch stops at the first item that fails, and between
//! items when the host asked it to (the call's `stop` flag, which the map sets when it gives up);
//! the host then knows from `items_done` which results it has and which item failed.

use std::sync::atomic::Ordering;

use super::{Child, Failure, RunCtx, Step, BASE, FUNC_NAME, MSGH, TRAMPOLINE};
use crate::call::{Call, Outcome};
use crate::child::limits::Trip;
use crate::chunk::Chunk;
use crate::Error;

impl Child {
    /// Runs the items in `items` ([`crate::batch`] format), appending each one's first result
    /// to `out`. Returns the outcome (the failing item's error, if one failed), whether the state
    /// must be replaced (a limit was hit) and how many items ran to the end.
    pub(super) fn run_batch(
        &mut self,
        chunk: &Chunk,
        call: &Call,
        items: &[u8],
        out: &mut Vec<u8>,
    ) -> (Outcome, bool, u32) {
        out.clear();
        let st = self.st;
        let mut done = 0u32;
        let mut items = crate::batch::Items::new(items);
        if chunk.id == crate::chunk::ANONYMOUS {
            // `pool:map(fn, list)`: the first message is the function
            if let Err((outcome, replace)) = self.push_callee(chunk, items.next()) {
                return (outcome, replace, 0);
            }
        }
        for item in items {
            // stopping here leaves the state as clean as after any call: no need to replace it
            if call.stop.load(Ordering::Relaxed) {
                return (Outcome::Err(Error::Cancelled), false, done);
            }
            let item = match item {
                Ok(item) => item,
                Err(c) => {
                    let (outcome, replace) = bad_batch(c.0);
                    return (outcome, replace, done);
                }
            };
            if self.hooked && done > 0 {
                // `time_limit` holds per item (`arm` set the first item's deadline)
                let deadline = super::limits::deadline_after(self.limit_ticks);
                self.limits.deadline.set(deadline);
                if let Some((_, slot)) = &self.watch {
                    slot.set_deadline(deadline, &self.limits.stop);
                }
            }
            let n = match self.run_function(chunk, item) {
                Ok(n) => n,
                Err(failed) => {
                    let (outcome, replace) = *failed;
                    return (outcome, replace, done);
                }
            };
            // an item that ended past its deadline fails whatever it returned, as a call does: a C
            // function that overran returns before the hook's next count
            self.limits.trip_if_past_deadline();
            if self.limits.tripped.get() != Trip::None {
                // or a coroutine hit the limit and the function swallowed the error (see `run`)
                st.set_top(BASE);
                let function = String::from_utf8_lossy(&self.func).into_owned();
                if let Some((outcome, replace)) = self.limit_outcome(&chunk.name, &function) {
                    return (outcome, replace, done);
                }
            }
            let at = crate::batch::begin_item(out);
            let encoded = self.encode_results(chunk, n.min(1), out).and_then(|()| {
                crate::batch::end_item(out, at).map_err(|e| Box::new((Outcome::Err(e), false)))
            });
            st.set_top(BASE);
            if let Err(failed) = encoded {
                out.truncate(at);
                let (outcome, replace) = *failed;
                return (outcome, replace, done);
            }
            done += 1;
        }
        (Outcome::Ok, false, done)
    }

    /// Decodes a map's function into the name's slot (protected: it allocates), for the items
    /// of the batch to call.
    fn push_callee(
        &mut self,
        chunk: &Chunk,
        message: Option<Result<&[u8], crate::value::Corrupt>>,
    ) -> Result<(), (Outcome, bool)> {
        let st = self.st;
        let bad = bad_batch;
        let message = match message {
            Some(Ok(m)) => m,
            Some(Err(c)) => return Err(bad(c.0)),
            None => return Err(bad("no function")),
        };
        let mut ctx = RunCtx::new(Step::PushCallee, message, 0);
        ctx.protos = self.protos.as_slice();
        ctx.fns = &mut self.fns;
        st.push_value(TRAMPOLINE);
        st.push_light_userdata(&mut ctx as *mut RunCtx as *mut std::ffi::c_void);
        let rc = st.pcall(1, 1, MSGH);
        let function = String::from_utf8_lossy(&self.func).into_owned();
        if rc != 0 {
            let failed = self.failure(rc, &chunk.name, &function, |message| Error::Runtime {
                chunk: chunk.name.clone(),
                function: function.clone(),
                message,
            });
            st.set_top(BASE);
            return Err(failed);
        }
        if let Failure::Corrupt(what) = ctx.failure {
            st.set_top(BASE);
            if crate::value::is_refusal(what) {
                let e = Error::Unsupported(format!("cannot pass the function of a map: {what}"));
                return Err((Outcome::Err(e), false));
            }
            return Err(bad(what));
        }
        st.replace(FUNC_NAME);
        self.name_in_slot = false;
        self.batch_callee = true;
        Ok(())
    }
}

/// A batch message this process's encoder did not write.
fn bad_batch(what: &str) -> (Outcome, bool) {
    let e = Error::Internal(format!("bad map batch: {what}"));
    (Outcome::Err(e), false)
}
