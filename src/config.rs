//! Pool options: every option, its default and what it means. `vmpool.new{...}` fills this from a
//! Lua table (see `host/options.rs`). The README's option table and `types/vmpool.lua` say the same
//! (written by hand); spec/annotations_spec.lua fails when an option is missing from either.

use std::time::Duration;

pub use crate::sys::Sched;

/// The default `nice` of pools created inside nginx (`vmpool.ngx`): CFS then weighs a busy pool
/// thread at about a tenth of the event loop (110 against 1024), so a light request that wakes
/// the loop gets the CPU promptly while heavy calls run.
pub const NGX_NICE: u8 = 10;

/// How a pool sizes itself and what it allows a call to do.
#[derive(Clone, Debug)]
pub struct Config {
    /// Resident ("core") states, created by `vmpool.new` and kept until `close()`.
    /// Default: the number of CPUs this process may run on (`sched_getaffinity`).
    pub core: usize,
    /// Extra ("non-core") states created when every state is busy; they are closed after
    /// `idle_timeout` without work. `math.huge` = unlimited. Default: 0.
    pub max_noncore: usize,
    /// When every state is busy and no non-core state may be created: `true` queues the call until
    /// a state frees (or `acquire_timeout` passes), `false` fails it at once. Default: `true`.
    pub blocking: bool,
    /// How long a queued call waits for a state before it fails; `None` = forever (`math.huge`).
    /// Default: 30 s.
    pub acquire_timeout: Option<Duration>,
    /// How long a non-core state may stay idle before the idle check closes it; `Some(ZERO)` closes
    /// it right after its call, `None` (`math.huge`) never. Default: 60 s.
    pub idle_timeout: Option<Duration>,
    /// Lua source run once in every new state, before any chunk (helpers, `require`s). Default: none.
    pub init: Option<Vec<u8>>,
    /// Longest a single call may run; `None` = no limit. Default: none (0).
    pub time_limit: Option<Duration>,
    /// Most bytes one state may allocate; `None` = no limit. Default: none (0).
    pub memory_limit: Option<usize>,
    /// Most calls that may wait for a state at once (`blocking = true`); beyond it calls fail with
    /// "queue full". Default: unlimited.
    pub max_waiting: usize,
    /// LuaJIT only: whether children compile to machine code. Compiled loops do not run hooks, so a
    /// `time_limit` (or interrupting a running call) needs `jit = false`. Default: `true` without a
    /// time limit, `false` with one.
    pub jit: bool,
    /// How much nicer than the host the pool's threads run (0 to 19; a higher niceness yields
    /// the CPU to other threads sooner): each worker thread sets its niceness to that of the
    /// thread that called `vmpool.new` plus this, at most 19, when it starts (Linux:
    /// `setpriority` on the thread id; the portable build ignores it). Default: 0 (the host's
    /// own); pools created inside nginx default to [`NGX_NICE`] (`src/lua/ngx.lua` passes it), so
    /// that busy pool threads leave the CPU to the worker's event loop first.
    pub nice: u8,
    /// The niceness the worker threads set (from `nice` at `vmpool.new`); `None`: leave it.
    pub thread_nice: Option<i32>,
    /// The scheduling class each worker thread sets when it starts (Linux: `sched_setscheduler`
    /// on its own thread; the portable build ignores it). Default: [`Sched::Normal`] (the host's
    /// class is left alone), inside nginx too: there the idle class does no better for the event
    /// loop's tail than `nice` 10 and costs about 3% of heavy throughput.
    pub sched: Sched,
    /// `package.path` / `package.cpath` for children (copied from the host at `vmpool.new`, so
    /// `require` in `init` finds what the host finds).
    pub package_path: Option<Vec<u8>>,
    pub package_cpath: Option<Vec<u8>>,
    /// The name that labels the pool's series in `vmpool.metrics()`, unique among the open pools
    /// of the process. Default: `pool-N`, N counting the pools the process created.
    pub name: Option<String>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            core: crate::sys::available_cpus(),
            max_noncore: 0,
            blocking: true,
            acquire_timeout: Some(Duration::from_secs(30)),
            idle_timeout: Some(Duration::from_secs(60)),
            init: None,
            time_limit: None,
            memory_limit: None,
            max_waiting: usize::MAX,
            jit: true,
            nice: 0,
            thread_nice: None,
            sched: Sched::Normal,
            package_path: None,
            package_cpath: None,
            name: None,
        }
    }
}

impl Config {
    /// Largest number of states this configuration allows at once.
    pub fn max_states(&self) -> usize {
        self.core.saturating_add(self.max_noncore)
    }
}
