//! The pool object the host sees: `vmpool.new`, `pool:compile`, `pool:invoke`, `pool:submit`,
//! `pool:unload`, `pool:stats`, `pool:close`.

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::call::Call;
use crate::chunk::Chunk;
use crate::host::call_cache::CallCache;
use crate::host::future_api::FutureHandle;
use crate::host::protect::{protected, push_str};
use crate::host::userdata::{self, UV_FUTURE, UV_POOL};
use crate::lua::State;
use crate::pool::Pool;
use crate::spin::AdaptiveSpin;
use crate::value::{self, Role};
use crate::Error;

/// Most a blocking caller spins for a result before parking.
const RESULT_SPIN: Duration = Duration::from_micros(50);

thread_local! {
    /// The host thread's spin budget for waiting on results (one per OS thread, shared by its pools).
    pub static RESULT_WAIT: AdaptiveSpin = AdaptiveSpin::new(RESULT_SPIN, false);
}

/// What the pool userdata holds.
pub struct PoolHandle {
    pub pool: Arc<Pool>,
    /// The chunk named by the last call, valid while the registry epoch is unchanged.
    last_chunk: Option<(u64, Arc<Chunk>)>,
    /// Finished calls kept for reuse, so a call allocates nothing in the steady state.
    cache: CallCache,
    closed: bool,
    pub poll: Option<Arc<crate::notify::PollSignal>>,
    encoder: value::Encoder,
}

impl userdata::Tagged for PoolHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0001;
}

impl PoolHandle {
    fn check(&self) -> Result<(), Error> {
        if self.closed {
            return Err(Error::Closed);
        }
        self.pool.check_process()
    }

    fn chunk(&mut self, name: &[u8]) -> Result<Arc<Chunk>, Error> {
        let epoch = self.pool.chunks.epoch();
        if let Some((e, c)) = &self.last_chunk {
            if *e == epoch && c.name.as_bytes() == name {
                return Ok(c.clone());
            }
        }
        let chunk = self
            .pool
            .chunks
            .get(name)
            .ok_or_else(|| Error::UnknownChunk(String::from_utf8_lossy(name).into_owned()))?;
        self.last_chunk = Some((epoch, chunk.clone()));
        Ok(chunk)
    }

    /// Builds a call from `pool:METHOD(chunk, fn, ...)` arguments at stack slots 2.. .
    pub fn prepare(&mut self, st: State, method: &str) -> Result<Arc<Call>, Error> {
        self.prepare_with(st, 2, method, None)
    }

    /// Builds a call from arguments `chunk, fn, ...` starting at stack slot `base`, in a call
    /// record taken from `cache` (this pool's own if `None`; given back to it on error).
    pub fn prepare_with(
        &mut self,
        st: State,
        base: c_int,
        method: &str,
        cache: Option<&mut CallCache>,
    ) -> Result<Arc<Call>, Error> {
        self.check()?;
        let name = st
            .to_bytes(base)
            .ok_or_else(|| bad_arg(st, base, 1, method, "a chunk name (string)"))?;
        let func = st
            .to_bytes(base + 1)
            .ok_or_else(|| bad_arg(st, base + 1, 2, method, "a function name (string)"))?;
        let chunk = self.chunk(name)?;
        reserve_encoding_stack(st, base + 2)?;
        let cache = match cache {
            Some(c) => c,
            None => &mut self.cache,
        };
        let mut call = cache.take(Some(&self.pool));
        let encoded = match Arc::get_mut(&mut call) {
            Some(c) => {
                let d = c.data.get_mut();
                d.func.extend_from_slice(func);
                d.chunk = Some(chunk);
                let first = base + 2;
                self.encoder.encode(
                    st,
                    first,
                    st.top() - first + 1,
                    &mut d.buf,
                    Role::Argument(func),
                )
            }
            None => Err(Error::Internal("a spare call was shared".into())),
        };
        match encoded {
            Ok(()) => Ok(call),
            Err(e) => {
                cache.put(call);
                Err(e)
            }
        }
    }

    /// Gives a finished call back for reuse.
    pub fn recycle(&mut self, call: Arc<Call>) {
        self.cache.put(call);
    }
}

/// Stack slots that encoding nested tables needs: two per level and the encoder's margin.
const ENCODE_STACK: c_int = 2 * value::MAX_DEPTH as c_int + 16;

/// Encoding table arguments grows the stack, which raises "not enough memory" on Lua 5.1 and
/// LuaJIT when it cannot: make that room first, protected, if any argument from `first` on is a
/// table (the encoder's own checks then find it there).
fn reserve_encoding_stack(st: State, first: c_int) -> Result<(), Error> {
    if !(first..=st.top()).any(|i| st.type_of(i) == crate::lua::TTABLE) {
        return Ok(());
    }
    protected(
        st,
        0,
        || "making stack room for the arguments".into(),
        &mut |st| {
            st.check_stack(ENCODE_STACK);
            0
        },
    )
    .map(|_| ())
}

/// "bad argument #`position` to `method`" for the value at stack slot `idx`.
pub fn bad_arg(st: State, idx: c_int, position: c_int, method: &str, expected: &str) -> Error {
    Error::BadArgument(format!(
        "bad argument #{} to '{method}': expected {expected}, got {}",
        position,
        st.type_name(idx)
    ))
}

/// Pushes the results of a finished call (or returns its error). No lock is held while the
/// results are pushed, and pushing runs protected: allocating them can run finalizers, which may
/// raise or wait on this very call.
pub fn push_outcome(st: State, call: &Call) -> Result<c_int, Error> {
    let buf = match call.result() {
        Some(Ok(buf)) => buf,
        Some(Err(e)) => return Err(e.clone()),
        None => {
            return Err(Error::Internal(
                "outcome read before the call finished".into(),
            ))
        }
    };
    let mut corrupt = None;
    let n = protected(
        st,
        0,
        || format!("receiving the results of {}", call_name(call)),
        &mut |st| match value::push_values(st, buf) {
            Ok(n) => n,
            Err(c) => {
                corrupt = Some(c.0);
                0
            }
        },
    )?;
    match corrupt {
        None => Ok(n),
        Some(what) => Err(Error::Internal(format!("cannot decode results: {what}"))),
    }
}

/// `chunk:function` of a call, for messages.
fn call_name(call: &Call) -> String {
    let d = call.data.lock();
    let chunk = d.chunk.as_ref().map_or("?", |c| c.name.as_str());
    format!("{chunk}:{}", String::from_utf8_lossy(&d.func))
}

fn handle<'a>(st: State) -> Result<&'a mut PoolHandle, Error> {
    userdata::get::<PoolHandle>(st, 1)
        .and_then(|b| b.get())
        .ok_or_else(|| {
            Error::BadArgument(
                "expected a pool as first argument (call it as pool:method(...))".into(),
            )
        })
}

crate::lua_function!(pub fn new_pool => new_pool_impl);
fn new_pool_impl(st: State) -> Result<c_int, Error> {
    let cfg = crate::host::options::parse(st, 1)?;
    let pool = Pool::new(cfg)?;
    let h = PoolHandle {
        pool,
        last_chunk: None,
        cache: CallCache::default(),
        encoder: value::Encoder::default(),
        closed: false,
        poll: None,
    };
    userdata::push(st, h, UV_POOL)?;
    Ok(1)
}

crate::lua_function!(pub fn compile => compile_impl);
fn compile_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.check()?;
    let name = st
        .to_bytes(2)
        .ok_or_else(|| bad_arg(st, 2, 1, "compile", "a chunk name (string)"))?;
    let name = std::str::from_utf8(name)
        .map_err(|_| Error::BadArgument("chunk names must be UTF-8 text".into()))?
        .to_string();
    if name.is_empty() {
        return Err(Error::BadArgument(
            "bad argument #1 to 'compile': the chunk name is empty".into(),
        ));
    }
    let source = st
        .to_bytes(3)
        .ok_or_else(|| bad_arg(st, 3, 2, "compile", "Lua source (string)"))?;
    let chunk = Arc::new(Chunk::compile(st, &name, source)?);
    h.pool.chunks.insert(chunk);
    st.push_bool(true);
    Ok(1)
}

crate::lua_function!(pub fn unload => unload_impl);
fn unload_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.check()?;
    let name = st
        .to_bytes(2)
        .ok_or_else(|| bad_arg(st, 2, 1, "unload", "a chunk name (string)"))?;
    let removed = h.pool.chunks.remove(name);
    if removed {
        h.last_chunk = None;
    }
    st.push_bool(removed);
    Ok(1)
}

crate::lua_function!(pub fn invoke => invoke_impl);
fn invoke_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    let call = h.prepare(st, "invoke")?;
    st.set_top(0);
    if let Err(e) = h.pool.submit(call.clone()) {
        h.recycle(call);
        return Err(e);
    }
    if !call.is_done() {
        h.pool.note_host_cpu();
        RESULT_WAIT.with(|spin| call.wait(None, spin));
    }
    let result = push_outcome(st, &call);
    h.recycle(call);
    result
}

crate::lua_function!(pub fn submit => submit_impl);
fn submit_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    let call = h.prepare(st, "submit")?;
    st.set_top(0);
    // The future comes first: if it cannot be created, nothing was submitted that nobody holds.
    if let Err(e) = userdata::push(
        st,
        FutureHandle::new(call.clone(), h.pool.clone()),
        UV_FUTURE,
    ) {
        h.recycle(call);
        return Err(e);
    }
    if let Err(e) = h.pool.submit(call.clone()) {
        userdata::finalize::<FutureHandle>(st, -1);
        h.recycle(call);
        return Err(e);
    }
    Ok(1)
}

crate::lua_function!(pub fn stats => stats_impl);
fn stats_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.pool.check_process()?;
    let s = h.pool.stats();
    let fields: [(&str, u64); 14] = [
        ("core", s.core as u64),
        ("noncore", s.noncore as u64),
        ("idle", s.idle as u64),
        ("busy", s.busy as u64),
        ("waiting", s.waiting as u64),
        ("threads", s.threads as u64),
        ("created", s.created),
        ("closed", s.closed),
        ("invokes", s.invokes),
        ("succeeded", s.succeeded),
        ("errors", s.errors),
        ("rejected", s.rejected),
        ("timeouts", s.timeouts),
        ("cancelled", s.cancelled),
    ];
    protected(st, 0, || "building the stats table".into(), &mut |st| {
        st.create_table(0, fields.len() as c_int);
        for &(k, v) in &fields {
            st.push_integer(v as i64);
            st.raw_set_str(-2, k);
        }
        1
    })
}

crate::lua_function!(pub fn collect => collect_impl);
/// `pool:collect()` -> number of states: a full garbage collection in every idle state, waited
/// for (states busy with a call are skipped), and what the pool keeps for reuse freed: call
/// records, and the chunk last named (which may be an old version).
fn collect_impl(st: State) -> Result<c_int, Error> {
    let h = handle(st)?;
    h.check()?;
    h.cache.clear();
    h.last_chunk = None;
    h.pool.drop_spare_calls();
    let calls = h.pool.collect_idle();
    RESULT_WAIT.with(|spin| {
        for call in &calls {
            call.wait(None, spin);
        }
    });
    st.set_top(0);
    st.push_integer(calls.len() as i64);
    Ok(1)
}

crate::lua_function!(pub fn memory => memory_impl);
/// `vmpool.memory()` -> `{ states, bytes, blocks }` held by every child state of the process.
fn memory_impl(st: State) -> Result<c_int, Error> {
    let t = crate::state_heap::totals();
    st.set_top(0);
    let fields = [
        ("states", t.states),
        ("bytes", t.bytes),
        ("blocks", t.blocks),
    ];
    protected(st, 0, || "building the memory table".into(), &mut |st| {
        st.create_table(0, fields.len() as c_int);
        for &(k, v) in &fields {
            st.push_integer(v as i64);
            st.raw_set_str(-2, k);
        }
        1
    })
}

crate::lua_function!(pub fn close => close_impl);
fn close_impl(st: State) -> Result<c_int, Error> {
    let boxed = userdata::get::<PoolHandle>(st, 1).ok_or_else(|| {
        Error::BadArgument(format!(
            "bad argument #1 to 'close': expected a pool, got {} (call it as pool:close(), with a colon)",
            st.type_name(1)
        ))
    })?;
    // a pool already finalized (seen again through resurrection) is closed: nothing to do
    if let Some(h) = boxed.get() {
        h.closed = true;
        h.last_chunk = None;
        h.cache.clear();
        h.pool.close();
    }
    Ok(0)
}

crate::lua_function!(pub fn gc => gc_impl);
fn gc_impl(st: State) -> Result<c_int, Error> {
    if let Some(h) = userdata::get::<PoolHandle>(st, 1).and_then(|b| b.get()) {
        h.pool.close();
    }
    userdata::finalize::<PoolHandle>(st, 1);
    Ok(0)
}

crate::lua_function!(pub fn tostring => tostring_impl);
fn tostring_impl(st: State) -> Result<c_int, Error> {
    let text = match userdata::get::<PoolHandle>(st, 1).and_then(|b| b.get()) {
        Some(h) if !h.closed && h.pool.check_process().is_err() => {
            "vmpool.pool (created in another process)".to_string()
        }
        Some(h) if !h.closed => {
            let s = h.pool.stats();
            format!(
                "vmpool.pool (core={}, noncore={}, busy={}, waiting={})",
                s.core, s.noncore, s.busy, s.waiting
            )
        }
        _ => "vmpool.pool (closed)".to_string(),
    };
    push_str(st, &text, || "converting a pool to a string".into())?;
    Ok(1)
}
