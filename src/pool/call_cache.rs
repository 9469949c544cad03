//! A host thread's finished calls kept for reuse, so that a call allocates nothing in the steady
//! state: its record, argument buffer and name buffer all come back; when it runs dry it refills
//! from the pool's spares (`spares.rs`).
//!
//! A worker drops its reference to a call right after publishing the outcome, so the caller may
//! see the outcome while the worker still holds the call for a moment: such calls wait in
//! `returning` until the caller holds the only reference.

use std::sync::Arc;

use crate::call::Call;
use crate::pool::Pool;

/// Most calls kept in each list.
const MAX_KEPT: usize = 64;

#[derive(Default)]
pub struct CallCache {
    spare: Vec<Arc<Call>>,
    returning: Vec<Arc<Call>>,
    /// Records keep their function name when reset (see [`CallCache::keeping_names`]).
    keeps_names: bool,
}

impl CallCache {
    /// A cache whose records keep their function name when they come back: its user sets the
    /// name of each call it makes, comparing it first (`PoolHandle::prepare_with`), so a caller
    /// that calls one function again and again copies its name once per record.
    pub fn keeping_names() -> CallCache {
        CallCache {
            keeps_names: true,
            ..CallCache::default()
        }
    }

    #[inline(always)]
    fn reset(&self, call: &mut Call) {
        if self.keeps_names {
            call.reset_keeping_name();
        } else {
            call.reset();
        }
    }

    /// A call nobody else holds, reset; from this cache, else from the pool's shared spares
    /// (given back by dropped futures), else a new one.
    pub fn take(&mut self, pool: Option<&Pool>) -> Arc<Call> {
        if let Some(c) = self.spare.pop() {
            return c;
        }
        // (one uniqueness check per record: each is a compare-and-swap)
        for i in 0..self.returning.len() {
            let keeps_names = self.keeps_names;
            if let Some(c) = Arc::get_mut(&mut self.returning[i]) {
                if keeps_names {
                    c.reset_keeping_name();
                } else {
                    c.reset();
                }
                return self.returning.swap_remove(i);
            }
        }
        if let Some(pool) = pool {
            pool.take_spare_calls(&mut self.spare);
        }
        self.spare.pop().unwrap_or_default()
    }

    /// Gives a finished call back.
    pub fn put(&mut self, mut call: Arc<Call>) {
        match Arc::get_mut(&mut call) {
            Some(c) if self.spare.len() < MAX_KEPT => {
                self.reset(c);
                self.spare.push(call);
            }
            Some(_) => {}
            None if self.returning.len() < MAX_KEPT => self.returning.push(call),
            None => {}
        }
    }

    /// Frees every call kept, and the lists' buffers.
    pub fn clear(&mut self) {
        self.spare = Vec::new();
        self.returning = Vec::new();
    }
}
