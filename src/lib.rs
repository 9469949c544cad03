//! # vmpool
//!
//! A pool of child Lua states on OS threads for a host Lua program (Lua 5.1 to 5.5, LuaJIT,
//! OpenResty). The host compiles chunks once; each child state loads the bytecode once and keeps
//! it; `pool:invoke(chunk, fn, ...)` runs `fn` in a free state and returns its results.
//!
//! A tour of the crate, in the order a call travels:
//!
//! - [`host`]: what Lua sees. `luaopen_vmpool` registers the pool, future and notifier types;
//!   `pool:invoke` reads its arguments straight off the Lua stack ([`lua`] is the thin layer over
//!   the C API) and encodes them with [`value`] (functions too: their bytecode travels beside the
//!   message as prototypes this process dumped, and each state keeps what it loaded by content). The schedulers' Lua halves live in `src/lua/`:
//!   `vmpool.run`, and the adapters `vmpool.ngx` (OpenResty), `vmpool.luv` and `vmpool.cqueues`
//!   (`luaopen_vmpool_luv` / `luaopen_vmpool_cqueues` are their entry points in the library).
//! - [`call`]: one call's record and the phases it moves through (queued, assigned, running,
//!   done), with exactly one outcome. A `pool:map` batch is one call too ([`batch`] is its
//!   format; `host/map_run.rs` keeps batches in flight, `child/batch.rs` runs one).
//! - [`pool`]: the front (`Pool`: new, submit, cancel, collect, close, stats) over the sizing
//!   options in [`config`]. [`pool::ledger`] holds every count (core states, non-core states up to
//!   `max_noncore`, idle and busy, the waiting queue, the counters of `pool:stats()`) and is the
//!   only code that changes them; [`pool::housekeeper`] is the idle check.
//! - [`pool::worker`]: one OS thread per state, fed through a [`mailbox`]; waiting on either side
//!   spins briefly and adaptively before parking ([`spin`]). It tells the pool what happened
//!   through `release`, `retire`, `replaced` and `worker_exited`.
//! - [`child`]: the child Lua state itself, created with vmpool's counting allocator
//!   ([`state_heap`]): chunk loading (from [`chunk::Chunks`], which owns its epoch), the call
//!   trampoline, tracebacks, and the hook behind `time_limit` and cancellation.
//! - [`notify`]: completion queues and their doorbells (a condition variable, a socket, an
//!   eventfd) that let schedulers (`vmpool.run`, OpenResty, luv, cqueues) sleep until a call
//!   finishes.
//! - [`shared`]: `vmpool.shared`, the process-wide dictionaries with `ngx.shared.DICT`'s API that
//!   the host and every pool state reach (Lua side: `host/dict_api.rs`).
//! - [`histogram`] and [`clock`]: the pools' latency figures (`pool:stats()`'s `wait` and `run`),
//!   recorded by the workers without a lock; [`metrics`] writes them, the counts and the shared
//!   dictionaries as Prometheus text (`vmpool.metrics()`).
//! - [`channel`]: `vmpool.channel` and `vmpool.select`, bounded FIFOs of messages between the
//!   host and the states (Lua side: `host/channel_api.rs`); a coroutine that waits on one is woken
//!   through the same completion queues as calls.
//! - [`chunk`], [`error`], [`abi`], [`sys`]: compiled chunks, the one error type, the runtime
//!   check at load time, and fork detection.
//!
//! `docs/architecture.md` is the map: one paragraph per module, and the path of a call and of a
//! wake-up through them.
//!
//! Build one cargo feature per runtime (`lua51`, `lua52`, `lua53`, `lua54`, `lua55`, `luajit`) plus `module` for the loadable
//! library; without `module` the crate links the system Lua, which is how `cargo test` runs.

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
