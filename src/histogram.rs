//! A latency histogram that threads record into without a lock: log-linear buckets of clock
//! ticks ([`crate::clock`]: time-stamp counter cycles or nanoseconds; HDR-style, 32 equal buckets
//! per power of two, so a bucket is at most 1/32 = 3.1% of its lower bound wide) over every value
//! below 2^63. The bucket is read off the value converted to a double: its exponent and the top
//! five bits of its mantissa are the power of two and the bucket within it, so a record is about
//! ten instructions, two of them relaxed atomic additions (the shifts and compares of an integer
//! log-linear index, and keeping an exact maximum, cost half again as much on the call path).
//! Ticks become seconds only when the histogram is read; the largest value is read from the
//! buckets too (the top of the highest bucket in use), as exact as the percentiles. A value of 0
//! (a clock read twice in the same tick) counts as 2, in the bucket a double's bits give it.
//!
//! Two readers: `pool:stats()` reads percentiles since the last reset ([`Histogram::snapshot`]:
//! a reset keeps a baseline, the buckets themselves only grow), and `vmpool.metrics()` reads
//! cumulative counts at the Prometheus boundaries [`BOUNDS_NS`] ([`Histogram::cumulative`]), which
//! a reset never moves (Prometheus counters never go back). A boundary counts the buckets whose
//! highest value is at or below it: a value less than a bucket's width (3.1%) below a boundary
//! may count in the next `le` up, never in a lower one.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

const SUB_BITS: u32 = 5;
/// 32 buckets for each of the 64 powers of two.
pub const BUCKETS: usize = 64 << SUB_BITS;
/// A double's exponent and top mantissa bits, shifted down to 16 bits, run from 1023 * 32 for 1:
/// the slot of bucket `k` is `(k + ROTATION) % BUCKETS`.
const ROTATION: usize = (1023 << SUB_BITS) % BUCKETS;

/// The upper bounds (`le`) of the exposition's buckets, in nanoseconds: 1, 2.5 and 5 times each
/// power of ten from 1 µs to 10,000 s (2.8 hours), as Prometheus' own defaults run.
pub const BOUNDS_NS: [u64; 31] = {
    let mut b = [0u64; 31];
    let mut i = 0;
    let mut decade = 1_000u64;
    while i < 31 {
        b[i] = decade;
        if i + 1 < 31 {
            b[i + 1] = decade * 5 / 2;
        }
        if i + 2 < 31 {
            b[i + 2] = decade * 5;
        }
        decade *= 10;
        i += 3;
    }
    b
};

/// Where a value is counted: its bucket's slot in [`Histogram`]'s array (see [`ROTATION`]).
#[inline]
fn slot(ticks: u64) -> usize {
    // below 2^63 (centuries of ticks) the integer is positive; the mask keeps any value in range
    ((ticks as i64 as f64).to_bits() >> (52 - SUB_BITS)) as usize & (BUCKETS - 1)
}

/// The bucket of a value, in the order of the values: 32 * its power of two + the 32nd of it.
#[cfg(test)]
pub fn index(ticks: u64) -> usize {
    (slot(ticks) + BUCKETS - ROTATION) % BUCKETS
}

/// The values a bucket holds: `lo..=hi` (empty, `lo > hi`, for some buckets below 32).
pub fn bounds(idx: usize) -> (u64, u64) {
    let (m, sub) = (
        (idx >> SUB_BITS) as u32,
        (idx & ((1 << SUB_BITS) - 1)) as u64,
    );
    if m >= SUB_BITS {
        let lo = (32 + sub) << (m - SUB_BITS);
        return (lo, lo + ((1u64 << (m - SUB_BITS)) - 1));
    }
    let at = |s: u64| (s << m).div_ceil(32);
    (at(32 + sub), at(33 + sub) - 1)
}

pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum: AtomicU64,
    /// What the last reset saw: counts and sum.
    base: Mutex<Option<(Box<[u64]>, u64)>>,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0),
            base: Mutex::new(None),
        }
    }
}

/// What `pool:stats()` shows of a histogram, in ticks (see [`Summary::nanos`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub sum: u64,
    pub max: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
}

impl Summary {
    /// The same figures with ticks converted by `nanos` (the count stays).
    pub fn nanos(&self, nanos: impl Fn(u64) -> u64) -> Summary {
        Summary {
            count: self.count,
            sum: nanos(self.sum),
            max: nanos(self.max),
            p50: nanos(self.p50),
            p90: nanos(self.p90),
            p99: nanos(self.p99),
            p999: nanos(self.p999),
        }
    }
}

impl Histogram {
    #[inline]
    pub fn record(&self, ticks: u64) {
        self.buckets[slot(ticks)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(ticks, Ordering::Relaxed);
    }

    /// The counts in the order of the values (`index` in the tests).
    fn counts(&self) -> Vec<u64> {
        (0..BUCKETS)
            .map(|k| self.buckets[(k + ROTATION) % BUCKETS].load(Ordering::Relaxed))
            .collect()
    }

    /// The distribution since the last reset; with `reset`, a new interval starts after it.
    pub fn snapshot(&self, reset: bool) -> Summary {
        let mut base = self.base.lock();
        let mut counts = self.counts();
        let sum_now = self.sum.load(Ordering::Relaxed);
        let mut sum = sum_now;
        if let Some((b, s)) = base.as_ref() {
            for (c, b) in counts.iter_mut().zip(b.iter()) {
                *c = c.saturating_sub(*b);
            }
            sum = sum.saturating_sub(*s);
        }
        let summary = summarize(&counts, sum);
        if reset {
            // the interval's counts are `counts`: the next one starts from everything seen now
            let seen: Box<[u64]> = match base.take() {
                Some((b, _)) => counts.iter().zip(b.iter()).map(|(c, b)| c + b).collect(),
                None => counts.into(),
            };
            *base = Some((seen, sum_now));
        }
        summary
    }

    /// Since the pool was created: for each of [`BOUNDS_NS`], the values at or below it (with
    /// `nanos` converting ticks), then the count and the sum of all values in ticks.
    pub fn cumulative(&self, nanos: impl Fn(u64) -> u64) -> ([u64; BOUNDS_NS.len()], u64, u64) {
        let counts = self.counts();
        let mut out = [0u64; BOUNDS_NS.len()];
        let (mut acc, mut idx) = (0u64, 0usize);
        for (b, &bound) in BOUNDS_NS.iter().enumerate() {
            while idx < BUCKETS && nanos(bounds(idx).1) <= bound {
                acc += counts[idx];
                idx += 1;
            }
            out[b] = acc;
        }
        let count: u64 = counts.iter().sum();
        (out, count, self.sum.load(Ordering::Relaxed))
    }
}

/// Percentiles of bucket counts: the value of rank ceil(q * count) is reported as the highest
/// value its bucket holds, so it is never below the true one, and above it by at most the
/// bucket's width (3.1%); the largest value likewise.
fn summarize(counts: &[u64], sum: u64) -> Summary {
    let count: u64 = counts.iter().sum();
    let at = |q: f64| -> u64 {
        if count == 0 {
            return 0;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut acc = 0;
        for (idx, &c) in counts.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return bounds(idx).1;
            }
        }
        0
    };
    let max = counts
        .iter()
        .rposition(|&c| c > 0)
        .map_or(0, |idx| bounds(idx).1);
    Summary {
        count,
        sum,
        max,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        p999: at(0.999),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_falls_in_the_bucket_whose_bounds_hold_it_and_buckets_are_at_most_3_percent_wide()
    {
        let mut v = 1u64;
        while v < i64::MAX as u64 / 2 {
            let (lo, hi) = bounds(index(v));
            assert!(lo <= v && v <= hi, "{v} in {lo}..={hi}");
            assert!((hi - lo) as f64 <= lo as f64 / 32.0, "{lo}..={hi}");
            v = v + 1 + v / 7;
        }
        assert_eq!(index(1 << 62), 62 * 32);
        for v in 1..64 {
            let (lo, hi) = bounds(index(v));
            assert!(lo <= v && v <= hi, "{v}: {lo}..={hi}");
        }
        assert_eq!(bounds(index(0)), (2, 2));
        let mut next = 1;
        for idx in 0..BUCKETS {
            let (lo, hi) = bounds(idx);
            if lo <= hi {
                assert_eq!(lo, next, "buckets are contiguous");
                next = hi.wrapping_add(1);
            }
        }
    }

    #[test]
    fn percentiles_are_the_top_of_the_bucket_of_their_rank() {
        let h = Histogram::default();
        for _ in 0..50 {
            h.record(1_000_000);
        }
        for _ in 0..49 {
            h.record(10_000_000);
        }
        h.record(100_000_000);
        let s = h.snapshot(false);
        assert_eq!(s.count, 100);
        assert_eq!(s.sum, 50 * 1_000_000 + 49 * 10_000_000 + 100_000_000);
        for (p, v) in [
            (s.p50, 1_000_000),
            (s.p90, 10_000_000),
            (s.p99, 10_000_000),
            (s.p999, 100_000_000),
            (s.max, 100_000_000),
        ] {
            assert!(
                p >= v && p as f64 <= v as f64 * (1.0 + 1.0 / 32.0),
                "{p} for {v}"
            );
        }
    }

    #[test]
    fn a_reset_starts_a_new_interval_and_leaves_the_cumulative_counts() {
        let h = Histogram::default();
        h.record(5_000);
        let first = h.snapshot(true);
        assert_eq!((first.count, first.max), (1, bounds(index(5_000)).1));
        let empty = h.snapshot(false);
        assert_eq!(empty, Summary::default());
        h.record(7_000);
        let second = h.snapshot(true);
        assert_eq!(
            (second.count, second.sum, second.max),
            (1, 7_000, bounds(index(7_000)).1)
        );
        let (_, count, sum) = h.cumulative(|t| t);
        assert_eq!((count, sum), (2, 12_000));
    }

    #[test]
    fn the_exposition_counts_the_buckets_at_or_below_each_boundary() {
        let h = Histogram::default();
        let values = [
            999,
            1_000,
            1_001,
            2_500,
            2_501,
            9_000_000,
            10_000_000,
            10_500_000,
            3_600_000_000_000,
        ];
        for v in values {
            h.record(v);
        }
        let (le, count, _) = h.cumulative(|t| t);
        for (b, &bound) in BOUNDS_NS.iter().enumerate() {
            let exact = values.iter().filter(|&&v| v <= bound).count() as u64;
            // a value within a bucket's width below a boundary may count in the next one up
            let below = values
                .iter()
                .filter(|&&v| v as f64 <= bound as f64 * (1.0 - 1.0 / 32.0))
                .count() as u64;
            assert!(
                below <= le[b] && le[b] <= exact,
                "le = {bound} ns: {}",
                le[b]
            );
        }
        assert_eq!(count, values.len() as u64);
    }
}
