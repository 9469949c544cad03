//! The one error type. Every variant renders as a message that starts with `vmpool:`, says what went
//! wrong and what to do about it; that text is exactly what Lua callers see. The one exception is
//! [`Error::AsNgx`]: `vmpool.shared` raises where `ngx.shared.DICT` raises with ngx's own words,
//! because code written for ngx matches them (and a pool state's `ngx` set-up passes on what Lua
//! raised).

use std::fmt;

/// Everything that can go wrong in a pool, as seen by a caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A bad option to `vmpool.new` (or another bad argument to an API function).
    BadArgument(String),
    /// `compile` was given source that does not compile.
    Syntax { chunk: String, message: String },
    /// `invoke` named a chunk that was never compiled (or was unloaded).
    UnknownChunk(String),
    /// The chunk has no function of that name.
    NoFunction {
        chunk: String,
        function: String,
        global: bool,
    },
    /// The chunk's top level raised an error while a state loaded it.
    ChunkLoad { chunk: String, message: String },
    /// `init` failed in a new state.
    Init(String),
    /// The child's function raised an error; `message` includes the child's traceback.
    Runtime {
        chunk: String,
        function: String,
        message: String,
    },
    /// An argument or result cannot cross between states.
    Unsupported(String),
    /// Bad input to a `vmpool.shared` method that `ngx.shared.DICT` (resty.core) raises for: its
    /// message, word for word (`bad "zone" argument`), with no `vmpool:` prefix. Also what Lua
    /// raised while ngx_lua's functions set up a pool state's `ngx` (`host/ngx_state_api.rs`:
    /// "not enough memory" under `memory_limit`), passed on as raised so that the pool reports
    /// the limit as it does for any `init`.
    AsNgx(String),
    /// The call ran past `time_limit`.
    TimeLimit {
        chunk: String,
        function: String,
        seconds: f64,
        /// Why the state could not be replaced (`None`: it was).
        not_replaced: Option<String>,
    },
    /// The state ran past `memory_limit`.
    MemoryLimit {
        chunk: String,
        function: String,
        bytes: usize,
        /// Why the state could not be replaced (`None`: it was).
        not_replaced: Option<String>,
    },
    /// Item `index` (from 1) of a `pool:map` over `chunk:function` failed with `cause`.
    MapItem {
        index: usize,
        chunk: String,
        function: String,
        cause: Box<Error>,
    },
    /// The call was cancelled before it ran, or interrupted while running.
    Cancelled,
    /// The pool is closed.
    Closed,
    /// A bounded `close` stopped the call while it ran.
    Stopped,
    /// Every state is busy and the pool may neither grow nor wait (`blocking = false`).
    Exhausted { states: usize },
    /// `max_waiting` callers are already queued.
    QueueFull { max_waiting: usize },
    /// No state became free within `acquire_timeout`.
    AcquireTimeout { seconds: f64 },
    /// `fut:wait(timeout)` gave up before the call finished.
    WaitTimeout { seconds: f64 },
    /// A signal (Ctrl-C) interrupted the host while it was `doing` something; `raised` is what
    /// the interpreter's signal hook raised ("interrupted!").
    Interrupted { doing: String, raised: String },
    /// The pool belongs to another process (it was created before a `fork`).
    WrongProcess { pid: u32 },
    /// A state or thread could not be created.
    Spawn(String),
    /// The host's own Lua state raised an error while vmpool worked in it: it ran out of memory
    /// (`message` is `None`), or a `__gc` finalizer that ran meanwhile raised `message`.
    Host {
        doing: String,
        message: Option<String>,
    },
    /// A pool state had no memory (its `memory_limit`, or the system) for what vmpool pushed into
    /// it while `doing` something; `kept` says what was kept for another try ("" if nothing).
    StateMemory { doing: String, kept: String },
    /// The system refused vmpool memory for a copy of a value (`doing` says which): big values
    /// are copied with fallible allocations, so that this is an error and not an abort.
    NoMemory { doing: String },
    /// An event-loop adapter (`require "vmpool.luv"`, `"vmpool.cqueues"`) could not load; its Lua
    /// code words `message` (starting with `vmpool:` when it says what to do).
    Load { module: String, message: String },
    /// The system refused a file descriptor vmpool needed for `doing` (`fut:pollfd()`'s eventfd).
    NoDescriptor { doing: String, cause: String },
    /// The Lua stack had no room left for what vmpool had to push while `doing` something.
    NoStack { doing: String },
    /// An internal method of the adapters (`_name`) called by a program, the wrong way.
    Private { method: String, needs: String },
    /// A method of a vmpool object (`what`: "pool", "future", ...) was called while another
    /// method of the same object was still running on this thread: a `__gc` finalizer or a debug
    /// hook that ran inside that method called back into it.
    InUse { what: &'static str },
    /// Anything else that should not happen.
    Internal(String),
}

impl Error {
    pub fn no_stack(doing: &str) -> Error {
        Error::NoStack {
            doing: doing.into(),
        }
    }

    pub fn private(method: &str, needs: &str) -> Error {
        Error::Private {
            method: method.into(),
            needs: needs.into(),
        }
    }
}

/// A Lua number as Lua's `tostring` shows a float (`%.14g`: `1e+300`, `nan`, `inf`, `0.5`), for
/// messages that quote a number the user gave.
pub fn lua_number(n: f64) -> String {
    let mut buf = [0u8; 64];
    // SAFETY: snprintf writes at most `buf.len()` bytes (NUL included) into the buffer we own;
    // the format takes exactly one double.
    let len = unsafe {
        libc::snprintf(
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
            c"%.14g".as_ptr(),
            n,
        )
    };
    let len = (len.max(0) as usize).min(buf.len() - 1);
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadArgument(m) => write!(f, "vmpool: {m}"),
            Error::Syntax { chunk, message } => write!(
                f,
                "vmpool: cannot compile chunk '{chunk}': {message} (fix the Lua source and compile again)"
            ),
            Error::UnknownChunk(name) => write!(
                f,
                "vmpool: unknown chunk '{name}' (compile it first with pool:compile(name, source))"
            ),
            Error::NoFunction { chunk, function, global: false } => write!(
                f,
                "vmpool: chunk '{chunk}' has no function '{function}' (neither the table it returned nor the globals have one; check the name)"
            ),
            Error::NoFunction { chunk, function, global: true } => write!(
                f,
                "vmpool: chunk '{chunk}' has no function '{function}' (it returned no table and defines no such global; check the name)"
            ),
            Error::ChunkLoad { chunk, message } => {
                write!(f, "vmpool: chunk '{chunk}' failed while a state ran its top level: {message}")
            }
            Error::Init(m) => write!(f, "vmpool: the init code failed in a new state: {m}"),
            Error::Runtime { chunk, function, message } => {
                write!(f, "vmpool: error in {}: {message}", qualified(chunk, function))
            }
            Error::Unsupported(m) => write!(f, "vmpool: {m}"),
            Error::AsNgx(m) => f.write_str(m),
            Error::TimeLimit { chunk, function, seconds, not_replaced } => write!(
                f,
                "vmpool: time limit exceeded: {} ran longer than {seconds}s ({}; raise time_limit or make the call shorter)",
                qualified(chunk, function),
                replacement(not_replaced)
            ),
            Error::MemoryLimit { chunk, function, bytes, not_replaced } => write!(
                f,
                "vmpool: memory limit exceeded: {} needed more than {bytes} bytes ({}; raise memory_limit or use less memory)",
                qualified(chunk, function),
                replacement(not_replaced)
            ),
            Error::MapItem { index, chunk, function, cause } => {
                write!(f, "vmpool: map item {index} of '{}' failed: ", qualified(chunk, function))?;
                match cause.as_ref() {
                    // the child's own message and traceback, without "error in c:f" again
                    Error::Runtime { message, .. } => write!(f, "{message}"),
                    other => {
                        let text = other.to_string();
                        write!(f, "{}", text.strip_prefix("vmpool: ").unwrap_or(&text))
                    }
                }
            }
            Error::Cancelled => write!(f, "vmpool: call was cancelled"),
            Error::Closed => write!(f, "vmpool: pool is closed (create a new pool with vmpool.new)"),
            Error::Stopped => write!(
                f,
                "vmpool: call stopped: the pool was closed while it ran (wait for its calls before closing, or give close{{ timeout = s }} more time)"
            ),
            Error::Exhausted { states } => write!(
                f,
                "vmpool: pool exhausted: all {states} states are busy and blocking = false (raise core or max_noncore, or set blocking = true)"
            ),
            Error::QueueFull { max_waiting } => write!(
                f,
                "vmpool: queue full: {max_waiting} callers are already waiting for a state (raise max_waiting or the pool size)"
            ),
            Error::AcquireTimeout { seconds } => write!(
                f,
                "vmpool: timed out after {seconds}s waiting for a free state (raise acquire_timeout, core or max_noncore)"
            ),
            Error::WaitTimeout { seconds } => write!(
                f,
                "vmpool: timed out after {seconds}s waiting for the call to finish (it is still running; wait again or cancel it)"
            ),
            Error::Interrupted { doing, raised } => {
                write!(f, "vmpool: interrupted while {doing}: {raised}")
            }
            Error::WrongProcess { pid } => write!(
                f,
                "vmpool: pool was created in another process (pid {pid}); create pools in the process that uses them (in OpenResty: in init_worker_by_lua or lazily, not in init_by_lua)"
            ),
            Error::Spawn(m) => write!(f, "vmpool: cannot create a pool state: {m}"),
            Error::Host { doing, message: None } => write!(
                f,
                "vmpool: not enough memory in the host Lua state while {doing} (free memory in the host or pass smaller values)"
            ),
            Error::Host { doing, message: Some(m) } => write!(
                f,
                "vmpool: a Lua error was raised in the host while {doing}: {m} (a __gc finalizer that ran meanwhile raised it; finalizers must not raise errors)"
            ),
            Error::StateMemory { doing, kept } => write!(
                f,
                "vmpool: not enough memory in this pool state while {doing} (its memory_limit or the system refused it){kept}: raise memory_limit or use smaller values"
            ),
            Error::NoMemory { doing } => write!(
                f,
                "vmpool: not enough memory while {doing} (the system refused the allocation; use smaller values or free memory)"
            ),
            Error::Load { message, .. } if message.starts_with("vmpool:") => f.write_str(message),
            Error::Load { module, message } => write!(f, "vmpool: cannot load {module}: {message}"),
            Error::NoDescriptor { doing, cause } => write!(
                f,
                "vmpool: cannot create {doing}: {cause} (the process is out of file descriptors: close some, or raise its limit with ulimit -n)"
            ),
            Error::NoStack { doing } => write!(
                f,
                "vmpool: no Lua stack space left for {doing} (the calling code is nested too deeply or holds too many values on the stack: call from a shallower place)"
            ),
            Error::Private { method, needs } => write!(
                f,
                "vmpool: {method} needs {needs} (it is an internal method of vmpool's schedulers, not for programs: use pool:co_invoke, pool:co_map or vmpool.run)"
            ),
            Error::InUse { what } => write!(
                f,
                "vmpool: this {what} is in use by one of its methods still running on this thread (a __gc finalizer or a debug hook called it from inside that method); call it after that method returns"
            ),
            Error::Internal(m) => write!(f, "vmpool: internal error (please report it): {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// What became of the state a limit was hit in, for the limit messages.
fn replacement(not_replaced: &Option<String>) -> String {
    match not_replaced {
        None => "the state was replaced".into(),
        Some(why) => format!(
            "the state was closed and no replacement could be created: {why}; the next call starts one again"
        ),
    }
}

impl Error {
    /// A limit error whose state could not be replaced says so instead of "replaced".
    pub fn not_replaced(self, why: &Error) -> Error {
        let why = Some(why.to_string());
        match self {
            Error::TimeLimit {
                chunk,
                function,
                seconds,
                ..
            } => Error::TimeLimit {
                chunk,
                function,
                seconds,
                not_replaced: why,
            },
            Error::MemoryLimit {
                chunk,
                function,
                bytes,
                ..
            } => Error::MemoryLimit {
                chunk,
                function,
                bytes,
                not_replaced: why,
            },
            other => other,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// `chunk:function`, or the function's own label for `pool:invoke(fn, ...)` (no chunk).
fn qualified(chunk: &str, function: &str) -> String {
    if chunk.is_empty() {
        function.to_string()
    } else {
        format!("{chunk}:{function}")
    }
}
