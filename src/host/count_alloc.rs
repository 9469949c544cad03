//! `--features count-alloc` (benchmarks only): a global allocator that counts every native
//! allocation of the library, so the performance report (`bench/`) can say how many bytes a call
//! allocates. It wraps the system allocator with a few relaxed atomic additions per allocation;
//! the counters are read through `pool:_alloc_counts()`, a method present only in this build.
//!
//! What it sees: everything Rust allocates in this library. The child states' own Lua memory goes
//! through their own allocator (`crate::state_heap`, read with `vmpool.memory()`), and the host
//! Lua state allocates with the interpreter's allocator: measure it with `collectgarbage("count")`.
//! Together the three account for every byte vmpool and its states hold.
//!
//! Counts are split by side: the *host* side is every thread that has called `_alloc_counts`
//! (the host's Lua thread), the *pool* side all others (workers, the idle check). A `realloc`
//! counts as one allocation of the new size and one free of the old size.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::lua::State;
use crate::Error;

struct Side {
    allocs: AtomicU64,
    bytes: AtomicU64,
    frees: AtomicU64,
    freed: AtomicU64,
}

impl Side {
    const fn new() -> Side {
        Side {
            allocs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            freed: AtomicU64::new(0),
        }
    }
}

/// `[pool side, host side]`.
static SIDES: [Side; 2] = [Side::new(), Side::new()];

thread_local! {
    /// Set on the threads that read the counters (the host's Lua thread).
    static HOST: Cell<bool> = const { Cell::new(false) };
}

#[inline]
fn side() -> &'static Side {
    // `try_with`: a thread-local without a destructor is always accessible, but never panic in
    // an allocator.
    let host = HOST.try_with(|h| h.get()).unwrap_or(false);
    &SIDES[host as usize]
}

pub struct CountingAlloc;

// SAFETY: every method forwards to `System` unchanged; the counters have no effect on memory.
unsafe impl GlobalAlloc for CountingAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let s = side();
        s.allocs.fetch_add(1, Relaxed);
        s.bytes.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let s = side();
        s.allocs.fetch_add(1, Relaxed);
        s.bytes.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let s = side();
        s.frees.fetch_add(1, Relaxed);
        s.freed.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let s = side();
        s.allocs.fetch_add(1, Relaxed);
        s.bytes.fetch_add(new_size as u64, Relaxed);
        s.frees.fetch_add(1, Relaxed);
        s.freed.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

crate::lua_function!(
    /// `pool:_alloc_counts()` (count-alloc builds only): a table of the native allocation
    /// counters since the library was loaded: `allocs`, `bytes`, `frees`, `freed` (all sides),
    /// the same prefixed `host_` and `pool_`, `live` (bytes allocated and not yet freed) and
    /// `live_blocks` (allocations not yet freed). It
    /// marks the calling thread as the host side; the pool argument is not used.
    pub fn alloc_counts => alloc_counts_impl
);
fn alloc_counts_impl(st: State) -> Result<c_int, Error> {
    HOST.with(|h| h.set(true));
    // read before allocating the table, so that it does not count itself
    let read = |s: &Side| {
        [
            s.allocs.load(Relaxed),
            s.bytes.load(Relaxed),
            s.frees.load(Relaxed),
            s.freed.load(Relaxed),
        ]
    };
    let (pool, host) = (read(&SIDES[0]), read(&SIDES[1]));
    st.set_top(0);
    st.create_table(0, 13);
    const NAMES: [&str; 4] = ["allocs", "bytes", "frees", "freed"];
    for (i, name) in NAMES.iter().enumerate() {
        st.push_number((pool[i] + host[i]) as f64);
        st.raw_set_str(-2, name);
        st.push_number(host[i] as f64);
        st.raw_set_str(-2, &format!("host_{name}"));
        st.push_number(pool[i] as f64);
        st.raw_set_str(-2, &format!("pool_{name}"));
    }
    let live = (pool[1] + host[1]) as i128 - (pool[3] + host[3]) as i128;
    st.push_number(live as f64);
    st.raw_set_str(-2, "live");
    let live_blocks = (pool[0] + host[0]) as i128 - (pool[2] + host[2]) as i128;
    st.push_number(live_blocks as f64);
    st.raw_set_str(-2, "live_blocks");
    Ok(1)
}

crate::lua_function!(
    /// `pool:_leak(kind, every)` (count-alloc builds only): from now on, every `every`-th call
    /// a worker runs leaks a `"call"` record or a `"state"` (see `crate::leak`); `every = 0`
    /// stops. For the test that proves the soak catches leaks.
    pub fn leak => leak_impl
);
fn leak_impl(st: State) -> Result<c_int, Error> {
    let kind = match st.to_bytes(2) {
        Some(b"call") => crate::leak::Leak::CallRecord,
        Some(b"state") => crate::leak::Leak::State,
        _ => {
            return Err(Error::BadArgument(
                "bad argument #1 to '_leak': expected \"call\" or \"state\"".into(),
            ))
        }
    };
    let every = st.to_number(3);
    if !(every >= 0.0 && every.fract() == 0.0) {
        return Err(Error::BadArgument(
            "bad argument #2 to '_leak': expected a whole number of calls (0 stops)".into(),
        ));
    }
    crate::leak::set(kind, every as u64);
    Ok(0)
}
