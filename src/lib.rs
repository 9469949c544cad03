//! # vmpool
//!
//! A pool of child Lua states on OS threads for a host Lua program (Lua 5.1 to 5.5, LuaJIT,
//! OpenResty). The host compiles chunks once; each child state loads the bytecode once and keeps
//! it; `pool:invoke(chunk, fn, ...)` runs `fn` in a free state and returns its results.
//!
//! ## A call, phase by phase
//!
//! A call is one record, [`call::Call`], whose phase moves by compare-and-swap so that exactly one
//! party writes its outcome: NEW → ASSIGNED (a state is reserved) or QUEUED (waiting for one) →
//! RUNNING → DONE; a call cancelled, timed out in the queue or caught by `close` goes QUEUED or
//! ASSIGNED → CLAIMED → DONE.
//!
//! 1. Prepare, on the host thread ([`host`]): `pool:invoke` reads its arguments off the Lua stack
//!    ([`lua`], the thin layer over the C API), finds the chunk ([`chunk::Chunks`]), takes a
//!    record from its `CallCache` and encodes the arguments into it ([`value`]; a function travels
//!    as a `Proto` this process dumped, with its upvalues).
//! 2. Submit: [`pool::Pool`] asks its [`pool::ledger`] (every count of the pool, and the only code
//!    that changes them) for an idle state, a new one, the queue or a refusal, under the pool's
//!    `inner` mutex; the call is then posted to that state's [`mailbox`].
//! 3. Run, on the state's thread ([`pool::worker`]): the worker takes the call, and
//!    [`child`]'s `Child::run` loads the chunk's version if needed, arms the limits (the watchdog,
//!    `child::limits`) and calls `fn` under `lua_pcall` (`child/run.rs`): directly when its
//!    arguments are a few scalars, else through the trampoline, which decodes them in the
//!    protected call; then it encodes the results into the record.
//! 4. Release: the worker reports to the pool (`Pool::release`: count the outcome, take the next
//!    queued call or go idle), then `Call::finish_ok` (or `Call::finish`) publishes DONE and wakes whoever waits: the
//!    host parked on the record (after a brief adaptive spin, [`spin`]), or a scheduler's
//!    completion queue ([`notify`]).
//! 5. Results, on the host: the outcome is decoded onto the host's stack in a protected call, and
//!    the record goes back to the cache.
//!
//! ## The types, by module
//!
//! - [`host`]: the Lua face. `PoolHandle` (`host/call_io.rs`, a pool as Lua holds it),
//!   `FutureHandle` (`pool:submit`'s future), `NotifierHandle` over `Waits` (`host/waits.rs`: the
//!   one registry of waits every scheduler files its coroutines' calls in, token → waiting call or
//!   map batch, with batching), `CallCache`; the Lua halves in `src/lua/`: `vmpool.run`
//!   (`vmpool.lua`) and the adapters `vmpool.ngx`, `vmpool.luv`, `vmpool.cqueues`.
//! - [`call`]: `Call`, its `Job` (invoke, collect, a map batch in the [`batch`] format) and its
//!   `Outcome`.
//! - [`pool`]: `Pool` over [`config`]'s `Config`; `Ledger`; `Threads` and the worker loop; the
//!   `Housekeeper` (acquire timeouts, idle non-core states); the registry of open pools.
//! - [`child`]: `Child`, a Lua state created with [`state_heap`]'s counting allocator (with its
//!   cache of freed small blocks); the `Watchdog` that sets the limit hook when a call is due.
//! - [`chunk`]: `Chunk` (compiled once), `Chunks` (the pool's registry and its epoch).
//! - [`notify`]: `Notifier` (a completion queue of tokens), `Doorbell` (how it rings a loop: an
//!   eventfd, or a socket for OpenResty), `PollSignal` (`fut:pollfd()`); [`token_map`] keeps the
//!   tokens small and dense.
//! - [`shared`]: `Dict`, `vmpool.shared`'s dictionaries with `ngx.shared.DICT`'s API, and their
//!   registry; [`channel`]: `Channel`, `vmpool.channel` and `vmpool.select`, with watchers that
//!   wake coroutines through the same completion queues as calls.
//! - [`histogram`] (`Histogram`) and [`clock`]: `pool:stats()`'s latency figures, recorded without
//!   a lock; [`metrics`]: the Prometheus text of `vmpool.metrics()`.
//! - [`error`]: `Error`, every message starting with `vmpool:`; [`abi`]: the runtime check at
//!   load time; [`sys`]: what vmpool needs from the operating system.
//!
//! `docs/architecture.md` is the map: every file of `src/` in one line, what each module does,
//! the path of a call, of a wake-up, of a channel wait and of a map, and where to add a scheduler.
//!
//! Build one cargo feature per runtime (`lua51`, `lua52`, `lua53`, `lua54`, `lua55`, `luajit`) plus
//! `module` for the loadable library; without `module` the crate links the system Lua, which is how
//! `cargo test` runs.

// What already holds, kept: every unsafe block says why it is sound, unsafe functions mark their
// own unsafe operations, and every dependency is used.
#![deny(
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn,
    unused_crate_dependencies
)]

#[cfg(not(any(
    feature = "lua51",
    feature = "lua52",
    feature = "lua53",
    feature = "lua54",
    feature = "lua55",
    feature = "luajit"
)))]
compile_error!("select a Lua runtime: --features lua51, lua52, lua53, lua54, lua55 or luajit");

// `host` (and `abi`, which it calls) are reached only through `luaopen_vmpool`, which exists in
// the loadable-module build; the Rust tests build without it.
#[cfg_attr(not(feature = "module"), allow(dead_code))]
pub(crate) mod abi;
pub(crate) mod batch;
pub(crate) mod call;
#[cfg_attr(not(feature = "module"), allow(dead_code))]
pub(crate) mod channel;
pub(crate) mod child;
pub(crate) mod chunk;
pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod histogram;
#[cfg_attr(not(feature = "module"), allow(dead_code))]
pub(crate) mod host;
pub(crate) mod int_hash;
#[cfg(feature = "count-alloc")]
pub(crate) mod leak;
pub(crate) mod lua;
pub(crate) mod mailbox;
#[cfg_attr(not(feature = "module"), allow(dead_code))]
pub(crate) mod metrics;
pub(crate) mod notify;
pub(crate) mod pool;
pub(crate) mod shared;
pub(crate) mod spin;
pub(crate) mod state_heap;
pub(crate) mod sys;
#[cfg_attr(not(feature = "module"), allow(dead_code))]
pub(crate) mod token_map;
pub(crate) mod value;

pub use error::{Error, Result};

/// What the Rust tests (`tests/`), the fuzz targets (`fuzz/`) and the benchmarks reach inside the
/// crate. Not an API: the library's interface is the Lua module.
#[doc(hidden)]
pub mod testing {
    pub mod batch {
        pub use crate::batch::*;
    }
    pub mod call {
        pub use crate::call::*;
    }
    pub mod channel {
        pub use crate::channel::*;
    }
    pub mod chunk {
        pub use crate::chunk::*;
    }
    pub mod config {
        pub use crate::config::*;
    }
    pub mod limits {
        pub use crate::child::limit_signal as signal;
        pub use crate::child::watchdog::mechanism;
    }
    pub mod lua {
        pub use crate::lua::*;
    }
    pub mod pool {
        pub use crate::pool::*;
    }
    pub mod shared {
        pub use crate::shared::*;
    }
    pub mod spin {
        pub use crate::spin::*;
    }
    pub mod value {
        pub use crate::value::*;
    }
}

/// The library version (`vmpool._VERSION`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The entry point `require "vmpool"` looks for.
///
/// # Safety
/// Called by Lua's `require` with a live state.
#[cfg(feature = "module")]
#[no_mangle]
pub unsafe extern "C-unwind" fn luaopen_vmpool(l: *mut lua::lua_State) -> isize {
    // SAFETY: Lua calls this with a live state on the current thread. The `isize` result defines
    // the whole return register (see `lua::WideCFunction`).
    let state = unsafe { lua::State::from_raw(l) };
    lua::run_protected(state, host::open) as isize
}

/// What `require "vmpool.luv"` finds in the library (Lua's all-in-one loader: the library
/// `vmpool` and the function `luaopen_vmpool_luv`) when `vmpool` is not loaded yet; once it is,
/// `package.preload` serves the name.
///
/// # Safety
/// Called by Lua's `require` with a live state.
#[cfg(feature = "module")]
#[no_mangle]
pub unsafe extern "C-unwind" fn luaopen_vmpool_luv(l: *mut lua::lua_State) -> isize {
    // SAFETY: as for `luaopen_vmpool`.
    let state = unsafe { lua::State::from_raw(l) };
    lua::run_protected(state, |st| host::open_adapter(st, "vmpool.luv")) as isize
}

/// `require "vmpool.cqueues"`, as [`luaopen_vmpool_luv`] is `vmpool.luv`.
///
/// # Safety
/// Called by Lua's `require` with a live state.
#[cfg(feature = "module")]
#[no_mangle]
pub unsafe extern "C-unwind" fn luaopen_vmpool_cqueues(l: *mut lua::lua_State) -> isize {
    // SAFETY: as for `luaopen_vmpool`.
    let state = unsafe { lua::State::from_raw(l) };
    lua::run_protected(state, |st| host::open_adapter(st, "vmpool.cqueues")) as isize
}
