//! A dictionary's clock: the monotonic clock with the dictionary's test skew, read at most once
//! per operation, and TTLs in nanoseconds.

use std::cell::Cell;

use super::Dict;

/// The dictionary's time for one operation: read from the clock when first needed, and only
/// then. Most entries have no TTL, and `clock_gettime` was a sixth of a `set`'s time (perf,
/// LuaJIT) when every operation read it.
pub(super) struct Now<'a> {
    pub(super) dict: &'a Dict,
    /// 0 = not read yet (the clock gives at least 1).
    pub(super) at: Cell<u64>,
}

impl Now<'_> {
    #[inline]
    pub(super) fn get(&self) -> u64 {
        match self.at.get() {
            0 => {
                let t = self.dict.now();
                self.at.set(t);
                t
            }
            t => t,
        }
    }
}

/// Nanoseconds on the monotonic clock, at least 1 (0 means "never"). Read from the system clock
/// each time: no shared start value, so no first-use race for ThreadSanitizer to report.
#[inline]
pub(super) fn monotonic_ns() -> u64 {
    crate::clock::monotonic_ns().min(u64::MAX / 2) + 1
}

/// The longest TTL kept, in nanoseconds (about 146 years): a longer one means no expiry.
pub const MAX_TTL_NS: u64 = u64::MAX / 4;

/// Converts a TTL in seconds into nanoseconds (0 = never; the caller checked it is not negative
/// or NaN), counted in whole milliseconds as ngx counts it (resty.core passes `exptime * 1000` as
/// a C `long`): a fraction of a millisecond is dropped, so a TTL under 1 ms means no expiry there
/// and here. Infinity and anything above [`MAX_TTL_NS`] mean never, as a TTL too long for ngx's
/// millisecond count does there (`1e300`, `2^63`), rather than a deadline clamped to 146 years.
pub fn ttl_ns(seconds: f64) -> u64 {
    let ms = (seconds * 1e3).trunc();
    if ms < 1.0 || ms * 1e6 >= MAX_TTL_NS as f64 {
        0
    } else {
        ms as u64 * 1_000_000
    }
}
