//! The registry of waits that every scheduler uses (`vmpool.run`, ngx, luv, cqueues, through the
//! notifier of `host/notifier_api.rs`): a call or a map's batch a coroutine waits for, under a
//! small token that the notifier's queue hands back when it finished.
//!
//! A call lives here from `call` to `take` (or `drop`): filed under its token, handed to its pool
//! at once or, while a batch is open, kept in the outbox and handed over at the flush (every
//! `flush_every` calls and when the batch closes), so that one batch wakes a sleeping worker once.
//! A map's batch is watched (`watch`/`unwatch`) the same way, without a pool to hand it to. Each
//! call's record comes back to the cache once taken.
//!
//! A token is reused only once it can never come back: its completion was delivered (`drain` or
//! `wait`, then `delivered`) *and* its call taken or dropped (a coroutine that stopped waiting
//! leaves a completion behind, which must not wake a newer one), and not before the next
//! `drain`/`wait` (the loop may still be going through the tokens the completion came in). So
//! tokens stay small and dense, and the schedulers' tables of waiters keyed by them stay arrays.

use std::sync::Arc;
use std::time::Instant;

use crate::call::{Call, Outcome, RUNNING};
use crate::host::call_io::RESULT_WAIT;
use crate::notify::{Notifier, Subscriber, SubscriberId};
use crate::pool::call_cache::CallCache;
use crate::pool::{Pool, Posting};
use crate::token_map::{TokenMap, TokenSupply};
use crate::Error;

/// A batch's deferred calls are handed to their pools at least this often by default, so that
/// workers start on the first ones while the loop still resumes the rest of its coroutines.
pub(crate) const FLUSH_EVERY: usize = 64;

pub struct Waits {
    pub notifier: Arc<Notifier>,
    /// Delivered tokens, between the queue and Lua (reused).
    pub tokens: Vec<u64>,
    /// Calls and watched batches, by token, until taken, dropped or unwatched.
    calls: TokenMap<InFlight>,
    /// Finished call records, for reuse.
    pub cache: CallCache,
    /// Tokens of deferred calls, in order, until the flush.
    outbox: Vec<u64>,
    /// Reused by the flush.
    postings: Vec<Posting>,
    supply: TokenSupply,
    /// While open, `call` defers.
    batch: Option<Batch>,
    /// Calls deferred in batches since the last `close_batch` (which returns it).
    batched: u64,
}

struct InFlight {
    call: Arc<Call>,
    /// Where it goes (`None`: a map's batch, in its pool already).
    pool: Option<Arc<Pool>>,
    /// In the outbox, not yet handed to its pool.
    deferred: bool,
    /// Its token was delivered: once the call is taken or dropped, the token is free.
    drained: bool,
}

struct Batch {
    /// `take`s that close it; 0: only `close_batch` does.
    takes_left: u64,
    /// The outbox is flushed when it holds this many calls (0: only at the flush).
    flush_every: usize,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            notifier: Notifier::new(),
            tokens: Vec::new(),
            calls: TokenMap::default(),
            cache: CallCache::default(),
            outbox: Vec::new(),
            postings: Vec::new(),
            supply: TokenSupply::default(),
            batch: None,
            batched: 0,
        }
    }
}

impl Waits {
    /// A token for a subscription (a future's, a map's) that holds no call here.
    pub fn next_token(&mut self) -> u64 {
        self.supply.take()
    }

    /// A token from `next_token` that a subscription did not take (it had finished): it will
    /// never be queued, so it is free.
    pub fn unused_token(&mut self, token: u64) {
        if !self.calls.contains_key(token) {
            self.supply.free_now(token);
        }
    }

    /// `token` (from `next_token`) comes back when `call` (a future's, a map's batch) finishes;
    /// false if it has finished already (the token is free again).
    pub fn subscribe(&mut self, call: &Call, token: u64) -> bool {
        let subscriber = Subscriber::Queue {
            notifier: self.notifier.clone(),
            token,
        };
        let subscribed = call.subscribe(subscriber);
        if !subscribed {
            self.unused_token(token);
        }
        subscribed
    }

    /// Tokens queued and not delivered; calls held; calls deferred.
    pub fn pending(&self) -> (usize, usize, usize) {
        (self.notifier.pending(), self.calls.len(), self.outbox.len())
    }

    /// Sleeps until tokens are queued (or `deadline`, or `interrupted()`), into `tokens`; tokens
    /// left there by a delivery that failed are delivered first, without sleeping.
    pub fn wait(&mut self, deadline: Option<Instant>, interrupted: &mut dyn FnMut() -> bool) {
        self.supply.recycle();
        if self.tokens.is_empty() {
            self.notifier.wait(deadline, &mut self.tokens, interrupted);
        }
    }

    /// The queued tokens, into `tokens`, without sleeping.
    pub fn drain(&mut self) {
        self.supply.recycle();
        self.notifier.drain(&mut self.tokens);
    }

    /// `tokens` reached Lua: a token with no call held (a future's, or a taken or dropped call's)
    /// is free now; a held call's token once it is taken or dropped. Either way it is reused only
    /// after the next `drain`/`wait`.
    pub fn delivered(&mut self) {
        for i in 0..self.tokens.len() {
            self.deliver(self.tokens[i]);
        }
        self.tokens.clear();
    }

    fn deliver(&mut self, t: u64) {
        match self.calls.get_mut(t) {
            Some(e) => e.drained = true,
            None => self.supply.release(t),
        }
    }

    /// `drain` and `delivered` for a loop that takes at most `out.len()` tokens at a time
    /// (`host/ngx_ffi.rs`): the first ones go into `out`, the rest stay for the next call, which
    /// drains the queue only once they are delivered. Returns how many.
    pub fn drain_into(&mut self, out: &mut [f64]) -> usize {
        self.supply.recycle();
        if self.tokens.is_empty() {
            self.notifier.drain(&mut self.tokens);
        }
        let k = self.tokens.len().min(out.len());
        for (i, slot) in out.iter_mut().enumerate().take(k) {
            let t = self.tokens[i];
            *slot = t as f64;
            self.deliver(t);
        }
        self.tokens.drain(..k);
        k
    }

    /// A call leaves the registry (taken, dropped, unwatched): its token is free if it was
    /// delivered; if not, once it is (see `delivered`).
    fn forget(&mut self, token: u64, e: &InFlight) {
        if e.drained {
            self.supply.release(token);
        }
    }

    #[inline]
    fn file(&mut self, call: Arc<Call>, pool: Option<Arc<Pool>>, deferred: bool) -> u64 {
        let token = self.supply.take();
        let entry = InFlight {
            call,
            pool,
            deferred,
            drained: false,
        };
        self.calls.insert(token, entry);
        token
    }

    /// `call`: handed to its pool now, or deferred while a batch is open. Returns its token and
    /// whether the outbox was empty before (the caller may arrange a flush). Raises like
    /// `pool:invoke` when the pool refuses a call handed over now.
    #[inline]
    pub fn call(&mut self, pool: &Arc<Pool>, call: Arc<Call>) -> Result<(u64, bool), Error> {
        let Some(batch) = &self.batch else {
            return self.submit(pool, call).map(|t| (t, false));
        };
        let every = batch.flush_every;
        let token = self.file(call, Some(pool.clone()), true);
        self.outbox.push(token);
        self.batched += 1;
        let first = self.outbox.len() == 1;
        if every > 0 && self.outbox.len() >= every {
            self.flush();
        }
        Ok((token, first))
    }

    fn submit(&mut self, pool: &Arc<Pool>, call: Arc<Call>) -> Result<u64, Error> {
        let token = self.supply.take();
        let mut entry = InFlight {
            call,
            pool: Some(pool.clone()),
            deferred: false,
            drained: false,
        };
        // filed once in its pool (its completion is queued, not delivered, before the filing)
        if let Err(err) = start(&self.notifier, token, &mut entry) {
            self.cache.put(entry.call);
            // refused before it was subscribed: its token is never queued
            self.supply.free_now(token);
            return Err(err);
        }
        self.calls.insert(token, entry);
        Ok(token)
    }

    /// Hands the outbox's calls to their pools (a refused one finishes with the error); idle
    /// workers are woken once every call is filed, so that one woken worker finds the rest of the
    /// batch queued behind its first call. Returns how many.
    pub fn flush(&mut self) -> usize {
        let mut outbox = std::mem::take(&mut self.outbox);
        let mut postings = std::mem::take(&mut self.postings);
        let mut count = 0;
        for &token in &outbox {
            // dropped calls are gone from `calls`
            if let Some(e) = self.calls.get_mut(token) {
                count += 1;
                match start(&self.notifier, token, e) {
                    Ok(Some(posting)) => postings.push(posting),
                    Ok(None) => {}
                    Err(err) => {
                        e.call.finish(Outcome::Err(err));
                        self.notifier.push(token);
                    }
                }
            }
        }
        postings.clear(); // wakes the workers
        self.postings = postings;
        outbox.clear();
        self.outbox = outbox;
        count
    }

    /// `call` defers until the `takes_left`-th `take` (0: until `close_batch`), flushing every
    /// `flush_every` calls (0: only then). Re-arms a batch that is open already.
    pub fn open_batch(&mut self, takes_left: u64, flush_every: usize) {
        self.batch = Some(Batch {
            takes_left,
            flush_every,
        });
    }

    pub fn batch_open(&self) -> bool {
        self.batch.is_some()
    }

    /// Closes the batch (if open) and flushes it; returns the calls deferred in batches since the
    /// last `close_batch`.
    pub fn close_batch(&mut self) -> u64 {
        self.end_batch();
        std::mem::take(&mut self.batched)
    }

    fn end_batch(&mut self) {
        self.batch = None;
        if !self.outbox.is_empty() {
            self.flush();
        }
    }

    /// The call of `token`, which leaves the registry (the caller pushes its outcome and gives the
    /// record back to `cache`). One that has not finished is an error, unless `wait()`: then it is
    /// handed to its pool if it was deferred, and waited for (a coroutine resumed early).
    #[inline(always)]
    pub fn take(&mut self, token: u64, wait: &dyn Fn() -> bool) -> Result<Arc<Call>, Error> {
        let running = match self.calls.get(token) {
            Some(e) => !e.call.is_done(),
            None => return Err(no_token(token)),
        };
        if running {
            self.finish_first(token, wait)?;
        }
        let Some(entry) = self.calls.remove(token) else {
            return Err(no_token(token));
        };
        self.forget(token, &entry);
        if let Some(b) = &mut self.batch {
            // the last take the batch waits for closes it
            if b.takes_left > 0 {
                b.takes_left -= 1;
                if b.takes_left == 0 {
                    self.end_batch();
                }
            }
        }
        Ok(entry.call)
    }

    /// `take` of a call still running: an error unless `wait()`; then it is handed to its pool if
    /// it was deferred, and waited for.
    #[cold]
    #[inline(never)]
    fn finish_first(&mut self, token: u64, wait: &dyn Fn() -> bool) -> Result<(), Error> {
        if !wait() {
            return Err(Error::private(
                "notifier:_take",
                &format!(
                    "the token of a finished call (the call with token {token} is still running)"
                ),
            ));
        }
        let deferred = self.calls.get(token).is_some_and(|e| e.deferred);
        if deferred {
            self.flush();
        }
        if let Some(e) = self.calls.get(token) {
            RESULT_WAIT.with(|spin| e.call.wait(None, spin));
        }
        Ok(())
    }

    /// The call of `token` if it finished (not a map's batch).
    pub fn finished(&self, token: u64) -> Option<&Arc<Call>> {
        self.calls
            .get(token)
            .filter(|e| e.pool.is_some() && e.call.is_done())
            .map(|e| &e.call)
    }

    /// Whether the call of `token` finished (`None`: not held).
    pub fn done(&self, token: u64) -> Option<bool> {
        self.calls.get(token).map(|e| e.call.is_done())
    }

    /// Forgets a call nobody will take; one that has not started is cancelled, a running one
    /// interrupted (pools with a time_limit). Its completion token still arrives, and finds no
    /// waiter.
    pub fn drop_call(&mut self, token: u64) {
        let Some(e) = self.calls.remove(token) else {
            return;
        };
        self.forget(token, &e);
        if e.deferred {
            // never handed over: out of the outbox, and its token comes back at once, as every
            // token of `call` does once (the adapters count their calls in flight by it)
            self.outbox.retain(|&t| t != token);
            self.cache.put(e.call);
            self.notifier.push(token);
        } else if let Some(pool) = &e.pool {
            if !e.call.is_done() && !pool.cancel(&e.call) && e.call.phase() == RUNNING {
                pool.interrupt_running(&e.call);
            }
        }
    }

    /// A token that comes back when `call` (a map's batch, in its pool already) finishes.
    pub fn watch(&mut self, call: Arc<Call>) -> u64 {
        let token = self.file(call.clone(), None, false);
        subscribe(&self.notifier, token, &call);
        token
    }

    /// Frees a token of `watch`. If its coroutine was resumed before the batch finished, this
    /// unsubscribes it, or waits for it, so that its completion cannot wake whoever gets the
    /// token next.
    pub fn unwatch(&mut self, token: u64) {
        let Some(e) = self.calls.remove(token) else {
            return;
        };
        if !e.call.is_done() {
            let id = SubscriberId::Queue(Arc::as_ptr(&self.notifier), token);
            if e.call.unsubscribe(id) {
                // no completion will come: the token is free now
                self.supply.free_now(token);
                return;
            }
            RESULT_WAIT.with(|spin| e.call.wait(None, spin));
        }
        self.forget(token, &e);
    }
}

/// `token` comes back through the queue when `call` finishes (at once if it has).
fn subscribe(notifier: &Arc<Notifier>, token: u64, call: &Call) {
    let subscriber = Subscriber::Queue {
        notifier: notifier.clone(),
        token,
    };
    if !call.subscribe(subscriber) {
        notifier.push(token);
    }
}

/// Hands a filed call to its pool and subscribes it. A call that got an idle state comes back as
/// a posting: the worker is woken when it is dropped.
#[inline(always)]
fn start(notifier: &Arc<Notifier>, token: u64, e: &mut InFlight) -> Result<Option<Posting>, Error> {
    e.deferred = false;
    let posting = match &e.pool {
        Some(pool) => pool.submit_later(e.call.clone())?,
        None => None,
    };
    subscribe(notifier, token, &e.call);
    Ok(posting)
}

/// A token that names no call: only an adapter's internal methods take tokens.
#[cold]
fn no_token(token: u64) -> Error {
    Error::private(
        "notifier:_take",
        &format!("the token of a call it holds (no call has token {token})"),
    )
}

#[cfg(test)]
mod tests {
    use super::Waits;

    #[test]
    fn draining_into_a_short_array_delivers_every_token_once_in_order() {
        let mut w = Waits::default();
        let tokens: Vec<u64> = (0..5).map(|_| w.next_token()).collect();
        for &t in &tokens {
            w.notifier.push(t);
        }
        let mut out = [0.0; 2];
        let mut got = Vec::new();
        loop {
            let k = w.drain_into(&mut out);
            got.extend(out[..k].iter().map(|&t| t as u64));
            if k < out.len() {
                break;
            }
        }
        assert_eq!(got, tokens);
        assert_eq!(w.drain_into(&mut out), 0);
        // delivered, with no call held: each is handed out again once recycled
        let mut again: Vec<u64> = (0..5).map(|_| w.next_token()).collect();
        again.sort_unstable();
        assert_eq!(again, tokens);
    }
}
