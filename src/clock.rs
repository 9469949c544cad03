//! The clock of the pools' latency figures (`pool:stats()`'s `wait` and `run`: three reads per
//! call, submit, start and end) and of time-limited calls' deadlines, so it must cost next to
//! nothing. Where the kernel keeps time with
//! the CPU's time-stamp counter itself (x86-64 Linux with clocksource `tsc`: invariant and in step
//! across CPUs, which the kernel checks), a read is one `rdtsc`; anywhere else it is
//! `CLOCK_MONOTONIC` in nanoseconds. Ticks become nanoseconds by a 32.32 fixed-point factor,
//! measured once per process against `CLOCK_MONOTONIC` ([`init`], by the first `vmpool.new`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Whether [`now`] reads the time-stamp counter.
static TSC: AtomicBool = AtomicBool::new(false);
/// Nanoseconds per tick, times 2^32 (2^32 itself for the nanosecond clock).
static NS_PER_TICK: AtomicU64 = AtomicU64::new(1 << 32);
static INIT: OnceLock<()> = OnceLock::new();

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// The current time in ticks (compare two with [`nanos`] of their difference).
#[inline]
pub fn now() -> u64 {
    now_with(is_tsc())
}

/// [`now`] for a caller that knows the clock ([`is_tsc`] never changes after [`init`], which runs
/// before any pool exists): a worker's loop is compiled for each, so its reads test nothing.
#[inline]
pub fn now_with(tsc: bool) -> u64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if tsc {
        // SAFETY: rdtsc has no preconditions; `init` chose it only where the kernel uses it.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    let _ = tsc;
    monotonic_ns()
}

/// A number of ticks in nanoseconds.
#[inline]
pub fn nanos(ticks: u64) -> u64 {
    ((u128::from(ticks) * u128::from(NS_PER_TICK.load(Ordering::Relaxed))) >> 32) as u64
}

/// A duration in ticks, or `None` past half the clock's range (a deadline that far never comes).
pub fn ticks_of(d: std::time::Duration) -> Option<u64> {
    let per_tick = u128::from(NS_PER_TICK.load(Ordering::Relaxed).max(1));
    u64::try_from((d.as_nanos() << 32) / per_tick)
        .ok()
        .filter(|&t| t <= u64::MAX / 2)
}

/// Chooses the clock, once per process (calibrating the time-stamp counter takes 1 ms).
pub fn init() {
    INIT.get_or_init(|| {
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        if kernel_uses_tsc() {
            if let Some(f) = calibrate() {
                NS_PER_TICK.store(f, Ordering::Relaxed);
                TSC.store(true, Ordering::Relaxed);
            }
        }
    });
}

/// Whether [`now`] reads the time-stamp counter.
#[inline]
pub fn is_tsc() -> bool {
    TSC.load(Ordering::Relaxed)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn kernel_uses_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// A (ticks, nanoseconds) pair taken together: the clock read between two counter reads, the
/// tightest of a few tries (a preemption in between widens one).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn anchor() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        // SAFETY: rdtsc has no preconditions.
        let a = unsafe { core::arch::x86_64::_rdtsc() };
        let ns = monotonic_ns();
        // SAFETY: as above.
        let b = unsafe { core::arch::x86_64::_rdtsc() };
        if b.wrapping_sub(a) < best.0 {
            best = (b.wrapping_sub(a), a / 2 + b / 2, ns);
        }
    }
    (best.1, best.2)
}

/// Nanoseconds per tick (32.32) over 1 ms of both clocks: off by ~1e-4 at most (a few dozen
/// nanoseconds of anchor error over a millisecond), far below the histograms' 3% buckets. `None`
/// for a counter that does not look like one (below 100 MHz or above 20 GHz).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn calibrate() -> Option<u64> {
    let (t0, n0) = anchor();
    while monotonic_ns().wrapping_sub(n0) < 1_000_000 {
        std::hint::spin_loop();
    }
    let (t1, n1) = anchor();
    let (dt, dn) = (t1.checked_sub(t0)?, n1.checked_sub(n0)?);
    let ghz = dt as f64 / dn as f64;
    if !(0.1..=20.0).contains(&ghz) {
        return None;
    }
    Some(((u128::from(dn) << 32) / u128::from(dt)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tick reading with the clock read around it: (ticks, the clock's midpoint, the gap), the
    /// tightest of ten tries, so that a preemption in between widens only the gap it reports.
    fn bracketed() -> (u64, u64, u64) {
        (0..10)
            .map(|_| {
                let a = monotonic_ns();
                let t = now();
                let b = monotonic_ns();
                (t, a / 2 + b / 2, b - a)
            })
            .min_by_key(|&(_, _, gap)| gap)
            .unwrap()
    }

    #[test]
    fn a_duration_in_ticks_is_that_many_nanoseconds_back_and_a_far_one_is_none() {
        init();
        for ns in [1_000u64, 1_000_000, 60_000_000_000, 86_400_000_000_000] {
            let t = ticks_of(std::time::Duration::from_nanos(ns)).expect("fits");
            let back = nanos(t);
            // one tick of rounding each way, and the factor's 2^-32 relative error
            assert!(
                back.abs_diff(ns) <= 2 + ns / (1 << 20),
                "{ns} ns -> {t} ticks -> {back} ns"
            );
        }
        assert_eq!(ticks_of(std::time::Duration::MAX), None);
        assert_eq!(ticks_of(std::time::Duration::from_secs(u64::MAX / 4)), None);
    }

    #[test]
    fn ticks_measure_time_as_the_monotonic_clock_does() {
        init();
        let (t0, n0, gap0) = bracketed();
        let until = n0 + 20_000_000;
        while monotonic_ns() < until {
            std::hint::spin_loop();
        }
        let (t1, n1, gap1) = bracketed();
        let (ticks_ns, real) = (nanos(t1 - t0) as f64, (n1 - n0) as f64);
        assert!(
            (ticks_ns - real).abs() < real * 0.01 + (gap0 + gap1) as f64 + 1_000.0,
            "{ticks_ns} ns by the ticks, {real} by the clock (gaps {gap0} and {gap1} ns, tsc: {})",
            is_tsc()
        );
    }
}
