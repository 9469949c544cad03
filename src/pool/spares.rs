//! The finished call records a pool keeps for its host to reuse: futures the host's garbage
//! collector finalized give their calls back here ([`super::Pool::give_back_call`]), and the
//! host thread's own cache of calls (`call_cache.rs`) refills from here, so that a call allocates
//! no record and no buffers in the steady state.

use std::sync::Arc;

use crate::call::Call;

/// The spare calls and the bytes their buffers hold.
#[derive(Default)]
pub(super) struct Spares {
    calls: Vec<Arc<Call>>,
    bytes: usize,
}

/// Most calls kept in `spare_calls`. Futures come back only when the host's garbage collector
/// finalizes them, many thousands at once: with 1,000 futures in flight, Lua 5.4's default pause
/// leaves about 20,000 dead ones per cycle, because the calls' memory is outside the Lua heap the
/// collector paces itself by; the spares must hold them, or the next calls allocate new records
/// and buffers again. The spares are calls the program had alive at once anyway, so keeping them
/// does not raise its peak memory; `pool:collect()` frees them all.
pub const MAX_SPARE_CALLS: usize = 32768;

/// Most bytes the spare calls may hold together, records and buffers (a call that would go over
/// is freed): after calls with big arguments or results the list must not keep that memory.
pub const MAX_SPARE_BYTES: usize = 16 << 20;

/// What a spare call holds: its record (with the `Arc`'s counts) and its buffers.
pub(super) fn size(call: &mut Call) -> usize {
    let d = call.data.get_mut();
    std::mem::size_of::<Call>() + 16 + d.buf.capacity() + d.func.capacity()
}

impl Spares {
    /// Keeps `call` (reset, holding `bytes` by [`size`]) unless that goes over a bound; a call
    /// not kept comes back, for the caller to free once the lock is released.
    pub(super) fn keep(&mut self, call: Arc<Call>, bytes: usize) -> Option<Arc<Call>> {
        if self.calls.len() < MAX_SPARE_CALLS && self.bytes + bytes <= MAX_SPARE_BYTES {
            self.bytes += bytes;
            self.calls.push(call);
            return None;
        }
        Some(call)
    }

    /// Moves up to 64 spare calls into `out`.
    pub(super) fn take(&mut self, out: &mut Vec<Arc<Call>>) {
        let n = self.calls.len().min(64);
        let from = self.calls.len() - n;
        let mut bytes = 0;
        for mut c in self.calls.drain(from..) {
            bytes += Arc::get_mut(&mut c).map_or(0, size);
            out.push(c);
        }
        self.bytes -= bytes.min(self.bytes);
    }
}
