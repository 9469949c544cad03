//! The run of one `pool:map` (see `host/map_api.rs` for its Lua face): the batches it cuts from
//! the list, the window of them in flight, and what becomes of each when it comes back.
//!
//! A [`MapRun`] keeps a window of batches in flight (a few per state, so that a state that
//! finishes one finds the next already queued while the host stores results) and takes them back
//! in list order: the front batch is the one waited for, its results go into the results table,
//! and a new batch is encoded and submitted in its place. Taking them in order makes the error
//! reported in the default mode that of the first failing item in the list, whatever order the
//! states finished in.
//!
//! Nothing leaks when a map stops early: a map that fails cancels its batches that have not
//! started and asks running ones to stop after their current item (the call's `stop` flag,
//! which a state checks between items), and returns only once none is in flight; a `MapRun`
//! dropped midway (a `co_map` whose coroutine was abandoned) does the same cancelling.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::call::{Call, Job, ASSIGNED, RUNNING};
use crate::chunk::Chunk;
use crate::host::call_io::{self, PoolHandle};
use crate::host::userdata;
use crate::lua::protect::{decode_protected, protected};
use crate::lua::{State, TTABLE};
use crate::pool::call_cache::CallCache;
use crate::pool::Pool;
use crate::value::{self, Role};
use crate::Error;

/// Most items in a batch whose size the map chooses: a trivial item costs a state about 0.2 µs,
/// so 1,024 of them make a job of about 200 µs, against a few µs of dispatch per job.
pub const MAX_AUTO_BATCH: usize = 1024;
/// When the map chooses, each batch takes 1/(SHARE_DIVISOR x states) of the items left
/// ("factoring"): large batches while much is left, to amortise dispatch, and smaller and
/// smaller ones towards the end, so that states that finish at different times still end
/// together (the last batches are single items).
pub const SHARE_DIVISOR: usize = 2;
/// Batches in flight per state: one running, one queued behind it.
pub const IN_FLIGHT_PER_STATE: usize = 2;

/// Stack slots that encoding nested tables needs: two per level and the encoder's margin.
const ENCODE_STACK: c_int = 2 * value::MAX_DEPTH as c_int + 16;

/// How the items are cut into batches.
enum Sizes {
    /// The `batch` option: this many items per batch (the last one may have fewer).
    Fixed(usize),
    /// Chosen by the map: a share of what is left over this many states (see `SHARE_DIVISOR`).
    Factoring { states: usize },
}

struct Batch {
    /// Index (from 0) of the batch's first item in the list.
    first: usize,
    count: usize,
    call: Arc<Call>,
    /// Handed to the pool (false: refused for now, tried again once one of ours finishes).
    submitted: bool,
    /// How many batches of this map had finished when it was submitted.
    mark: u64,
}

pub struct MapRun {
    pool: Arc<Pool>,
    chunk: Arc<Chunk>,
    func: Vec<u8>,
    /// Each item is a table of arguments (option `unpack`), not the argument.
    unpack: bool,
    /// Errors are collected by index (option `errors = "collect"`) instead of stopping the map.
    collect: bool,
    len: usize,
    /// The next item (from 0) not yet in a batch.
    next: usize,
    sizes: Sizes,
    window: usize,
    flight: VecDeque<Batch>,
    completed: u64,
    /// Set once the map has failed: nothing new is submitted, and the error is raised once
    /// nothing is in flight any more.
    failure: Option<Error>,
    cache: CallCache,
    encoder: value::Encoder,
    /// `pool:map(fn, list)`: the function's message (encoded once, when the map starts: its
    /// upvalues are copied then) and its prototypes; each batch starts with it.
    callee: Option<(Vec<u8>, Vec<Arc<value::Proto>>)>,
}

impl userdata::Tagged for MapRun {
    const TAG: u64 = 0x766d_706f_6f6c_0006;
    const NAME: &'static str = "map";
}

/// The options of `pool:map` (read by `host/map_api.rs`).
pub struct MapOptions {
    pub unpack: bool,
    pub collect: bool,
    pub batch: Option<usize>,
}

impl MapRun {
    /// A map of `func` of chunk `name` over a list of `len` items (nothing is submitted yet).
    pub fn new(
        h: &mut PoolHandle,
        name: &[u8],
        func: &[u8],
        len: usize,
        opts: MapOptions,
    ) -> Result<MapRun, Error> {
        h.check()?;
        let chunk = h.chunk(name)?;
        Ok(MapRun::with_chunk(h, chunk, func.to_vec(), len, opts))
    }

    /// A map of the function at stack slot `f` over a list of `len` items.
    pub fn of_function(
        h: &mut PoolHandle,
        st: State,
        f: c_int,
        len: usize,
        opts: MapOptions,
    ) -> Result<MapRun, Error> {
        h.check()?;
        let mut encoder = value::Encoder::with_depth(8);
        let mut msg = Vec::new();
        let encoded = encoder.encode(st, f, 1, &mut msg, Role::Callee);
        let protos = encoder.take_protos();
        encoded?;
        let label = match protos.first() {
            Some(p) => p.label().as_bytes().to_vec(),
            None => value::c_function_first(&msg)
                .unwrap_or(b"C function")
                .to_vec(),
        };
        let mut run = MapRun::with_chunk(h, Chunk::anonymous(), label, len, opts);
        run.callee = Some((msg, protos));
        Ok(run)
    }

    fn with_chunk(
        h: &mut PoolHandle,
        chunk: Arc<Chunk>,
        func: Vec<u8>,
        len: usize,
        opts: MapOptions,
    ) -> MapRun {
        let pool = h.pool.clone();
        let cfg = &pool.config;
        let states = cfg
            .max_states()
            .min(cfg.core.max(crate::sys::available_cpus()))
            .max(1);
        let sizes = match opts.batch {
            Some(b) => Sizes::Fixed(b),
            None => Sizes::Factoring { states },
        };
        MapRun {
            pool,
            chunk,
            func,
            unpack: opts.unpack,
            collect: opts.collect,
            len,
            next: 0,
            sizes,
            window: states.saturating_mul(IN_FLIGHT_PER_STATE).max(2),
            flight: VecDeque::new(),
            completed: 0,
            failure: None,
            cache: CallCache::default(),
            encoder: value::Encoder::with_depth(8),
            callee: None,
        }
    }

    /// Items in the list.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether errors are collected (`errors = "collect"`): the map then returns them too.
    pub fn collects(&self) -> bool {
        self.collect
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// `chunk:fn, N items, M batches in flight`, for `tostring`.
    pub fn describe(&self) -> String {
        format!(
            "{}:{}, {} items, {} batches in flight",
            self.chunk.name,
            String::from_utf8_lossy(&self.func),
            self.len,
            self.flight.len()
        )
    }

    fn next_size(&self) -> usize {
        let size = match self.sizes {
            Sizes::Fixed(b) => b,
            Sizes::Factoring { states } => (self.len - self.next)
                .div_ceil(states * SHARE_DIVISOR)
                .min(MAX_AUTO_BATCH),
        };
        size.min(self.len - self.next).max(1)
    }

    /// Advances the map as far as it can without waiting: takes the finished batches at the
    /// front (in list order), then fills the window. `Ok(true)` once every item has its outcome;
    /// `Err` once the map failed and nothing of it is in flight any more. `list`, `results` and
    /// `errors` (0 without `errors = "collect"`) are stack slots.
    pub fn step(
        &mut self,
        st: State,
        list: c_int,
        results: c_int,
        errors: c_int,
    ) -> Result<bool, Error> {
        // room for encoding nested tables, once per step (the stack does not shrink meanwhile)
        protected(
            st,
            0,
            || "making stack room for the map".into(),
            &mut |st| {
                st.check_stack(ENCODE_STACK + 4);
                0
            },
        )?;
        loop {
            while self
                .flight
                .front()
                .is_some_and(|b| b.submitted && b.call.is_done())
            {
                if let Some(b) = self.flight.pop_front() {
                    self.finished(st, b, list, results, errors);
                }
            }
            if self.failure.is_none() {
                self.fill(st, list, errors);
            }
            if self.flight.is_empty() {
                return match self.failure.take() {
                    Some(e) => Err(e),
                    None => Ok(true),
                };
            }
            // the front may have finished while the window was filled
            if !self
                .flight
                .front()
                .is_some_and(|b| b.submitted && b.call.is_done())
            {
                return Ok(false);
            }
        }
    }

    /// The call to wait for before the next step: the first batch in flight that has not
    /// finished (`None`: step again at once).
    pub fn wait_target(&self) -> Option<&Arc<Call>> {
        self.flight
            .iter()
            .find(|b| b.submitted && !b.call.is_done())
            .map(|b| &b.call)
    }

    /// Submits the batches refused before, then new ones until the window is full.
    fn fill(&mut self, st: State, list: c_int, errors: c_int) {
        for i in 0..self.flight.len() {
            if !self.flight[i].submitted && !self.submit(i) {
                return;
            }
        }
        while self.failure.is_none() && self.flight.len() < self.window && self.next < self.len {
            let size = self.next_size();
            let first = self.next;
            let (batch, bad) = self.encode(st, list, first, size);
            self.next = first + size;
            let mut submitted = true;
            if let Some(b) = batch {
                self.flight.push_back(b);
                submitted = self.submit(self.flight.len() - 1);
            }
            if let Some((index, e)) = bad {
                self.item_failed(st, errors, index, e);
                // the rest of this batch's items, after the one that cannot cross
                if index + 1 < first + size {
                    self.requeue(st, list, errors, index + 1, first + size, false);
                }
            }
            if !submitted {
                return;
            }
        }
    }

    /// Hands batch `i` of the window to the pool. False if the pool refused it for now (it is
    /// tried again after one of ours finishes) or for good (the map failed).
    fn submit(&mut self, i: usize) -> bool {
        let call = self.flight[i].call.clone();
        match self.pool.submit(call) {
            Ok(()) => {
                let b = &mut self.flight[i];
                b.submitted = true;
                b.mark = self.completed;
                true
            }
            // the pool is busy with our own batches: wait for one of them
            Err(Error::Exhausted { .. } | Error::QueueFull { .. }) if self.running() => {
                self.window = self.window.min(self.flight.len()).max(1);
                false
            }
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    /// Whether a batch of this map is in the pool and not finished.
    fn running(&self) -> bool {
        self.flight.iter().any(|b| b.submitted && !b.call.is_done())
    }

    /// Whether a batch of this map holds a state (reserved for it or running it).
    fn holding_state(&self) -> bool {
        self.flight
            .iter()
            .any(|b| b.submitted && matches!(b.call.phase(), ASSIGNED | RUNNING))
    }

    /// Encodes up to `count` items from index `first` into a new batch. Stops before an item
    /// that cannot cross, which it returns with the error.
    fn encode(
        &mut self,
        st: State,
        list: c_int,
        first: usize,
        count: usize,
    ) -> (Option<Batch>, Option<(usize, Error)>) {
        let mut call = self.cache.take(Some(&self.pool));
        let Some(c) = Arc::get_mut(&mut call) else {
            let e = Error::Internal("a spare call was shared".into());
            return (None, Some((first, e)));
        };
        let d = c.data.get_mut();
        d.job = Job::Map;
        d.chunk = Some(self.chunk.clone());
        d.func.extend_from_slice(&self.func);
        if let Some((msg, protos)) = &self.callee {
            // the batch's first message is the function (`child/batch.rs`); the items' functions
            // index the prototypes after its own
            let at = crate::batch::begin_item(&mut d.buf);
            d.buf.extend_from_slice(msg);
            if let Err(e) = crate::batch::end_item(&mut d.buf, at) {
                self.cache.put(call);
                return (None, Some((first, e)));
            }
            self.encoder.seed_protos(protos);
        }
        let mut bad = None;
        let mut encoded = 0;
        for i in first..first + count {
            let at = crate::batch::begin_item(&mut d.buf);
            let r = encode_item(
                st,
                &mut self.encoder,
                list,
                i,
                self.unpack,
                &self.func,
                &mut d.buf,
            )
            .and_then(|()| crate::batch::end_item(&mut d.buf, at));
            if let Err(e) = r {
                d.buf.truncate(at);
                bad = Some((i, e));
                break;
            }
            encoded += 1;
        }
        self.encoder.move_protos(&mut d.protos);
        if encoded == 0 {
            self.cache.put(call);
            return (None, bad);
        }
        let batch = Batch {
            first,
            count: encoded,
            call,
            submitted: false,
            mark: 0,
        };
        (Some(batch), bad)
    }

    /// Makes batches again for items `first..end` (the rest of a batch that stopped at a failed
    /// item, or a batch that must wait for a state again) and puts them at the front of the
    /// window (`at_front`, since they precede everything in it) or its back.
    fn requeue(
        &mut self,
        st: State,
        list: c_int,
        errors: c_int,
        mut first: usize,
        end: usize,
        at_front: bool,
    ) {
        let mut made = Vec::new();
        while first < end && self.failure.is_none() {
            let (batch, bad) = self.encode(st, list, first, end - first);
            if let Some(b) = batch {
                first += b.count;
                made.push(b);
            }
            if let Some((index, e)) = bad {
                self.item_failed(st, errors, index, e);
                first = index + 1;
            }
        }
        if at_front {
            for b in made.into_iter().rev() {
                self.flight.push_front(b);
            }
        } else {
            self.flight.extend(made);
        }
    }

    /// A batch came back: its results go into `results`; a failed item is reported or
    /// collected, and the rest of its batch goes again.
    fn finished(&mut self, st: State, b: Batch, list: c_int, results: c_int, errors: c_int) {
        let seen = self.completed;
        self.completed += 1;
        let call = b.call.clone();
        match call.result() {
            Some(Ok(buf)) => {
                if self.failure.is_none() {
                    let protos = results_protos(&call, buf);
                    if let Err(e) = self.store(st, results, b.first, buf, &protos) {
                        self.fail(e);
                    }
                }
            }
            Some(Err(e)) => {
                let done = call.data.lock().items_done as usize;
                if self.failure.is_none() && done > 0 {
                    let buf = std::mem::take(&mut call.data.lock().buf);
                    let protos = results_protos(&call, &buf);
                    if let Err(e) = self.store(st, results, b.first, &buf, &protos) {
                        self.fail(e);
                    }
                }
                self.batch_failed(st, list, errors, &b, done, e.clone(), seen);
            }
            None => self.fail(Error::Internal("a map batch came back unfinished".into())),
        }
        drop(b);
        self.cache.put(call);
    }

    #[allow(clippy::too_many_arguments)]
    fn batch_failed(
        &mut self,
        st: State,
        list: c_int,
        errors: c_int,
        b: &Batch,
        done: usize,
        e: Error,
        seen: u64,
    ) {
        if self.failure.is_some() {
            return; // stopping: outcomes no longer matter
        }
        let end = b.first + b.count;
        match e {
            // it waited behind this map's own batches (one finished meanwhile, or one holds a
            // state now): the pool was busy with this map, so it goes again
            Error::AcquireTimeout { .. } if seen > b.mark || self.holding_state() => {
                self.requeue(st, list, errors, b.first, end, true)
            }
            Error::Runtime { .. }
            | Error::TimeLimit { .. }
            | Error::MemoryLimit { .. }
            | Error::Unsupported(_) => {
                let index = b.first + done;
                self.item_failed(st, errors, index, e);
                if index + 1 < end {
                    self.requeue(st, list, errors, index + 1, end, true);
                }
            }
            other => self.fail(other),
        }
    }

    /// Item `index` (from 0) failed: collected, or the map fails.
    fn item_failed(&mut self, st: State, errors: c_int, index: usize, cause: Error) {
        let e = Error::MapItem {
            index: index + 1,
            chunk: self.chunk.name.clone(),
            function: String::from_utf8_lossy(&self.func).into_owned(),
            cause: Box::new(cause),
        };
        if !self.collect || errors == 0 {
            self.fail(e);
            return;
        }
        let text = e.to_string();
        st.push_value(errors);
        let stored = protected(st, 1, || "recording a map item's error".into(), &mut |st| {
            st.push_bytes(text.as_bytes());
            st.raw_seti(1, index as i64 + 1);
            0
        });
        if let Err(e) = stored {
            self.fail(e);
        }
    }

    /// Stores the results in `buf` ([`crate::batch`] format) as `results[first + 1]`, ...
    fn store(
        &self,
        st: State,
        results: c_int,
        first: usize,
        buf: &[u8],
        protos: &[Arc<value::Proto>],
    ) -> Result<(), Error> {
        st.push_value(results);
        let doing = || {
            format!(
                "receiving the results of a map over {}:{}",
                self.chunk.name,
                String::from_utf8_lossy(&self.func)
            )
        };
        let stored = decode_protected(st, 1, doing, |st| {
            let mut index = first as i64;
            for item in crate::batch::Items::new(buf) {
                index += 1;
                let n = item.and_then(|m| value::push_message(st, m, protos, None, false))?;
                if n > 0 {
                    st.pop(n - 1);
                    st.raw_seti(1, index);
                }
            }
            Ok(0)
        })?;
        match stored {
            Ok(_) => Ok(()),
            Err(value::Corrupt(what)) if value::is_refusal(what) => {
                Err(Error::Unsupported(format!(
                    "cannot pass the results of a map over {}: {what}",
                    String::from_utf8_lossy(&self.func)
                )))
            }
            Err(value::Corrupt(what)) if value::is_no_stack(what) => Err(Error::NoStack {
                doing: format!(
                    "the results of a map over {}",
                    String::from_utf8_lossy(&self.func)
                ),
            }),
            Err(value::Corrupt(what)) => Err(Error::Internal(format!(
                "cannot decode map results: {what}"
            ))),
        }
    }

    /// The map fails with `e` (the first failure wins): batches not handed to the pool are
    /// dropped, those that have not started are cancelled, running ones stop after their item.
    pub fn fail(&mut self, e: Error) {
        if self.failure.is_none() {
            self.failure = Some(e);
        }
        let mut kept = VecDeque::with_capacity(self.flight.len());
        for b in self.flight.drain(..) {
            if b.submitted {
                kept.push_back(b);
            } else {
                self.cache.put(b.call);
            }
        }
        self.flight = kept;
        for b in &self.flight {
            if !b.call.is_done() && !self.pool.cancel(&b.call) {
                b.call.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for MapRun {
    fn drop(&mut self) {
        self.fail(Error::Cancelled);
    }
}

/// The prototypes of the functions among a batch's results (only looked up if it has any).
fn results_protos(call: &crate::call::Call, buf: &[u8]) -> Vec<Arc<value::Proto>> {
    let any = crate::batch::Items::new(buf).any(|m| m.is_ok_and(value::has_functions));
    if any {
        call.data.lock().protos.clone()
    } else {
        Vec::new()
    }
}

/// Encodes item `i` (from 0) of the list at `list`: the value itself, or with `unpack` the
/// elements of the table it must be.
fn encode_item(
    st: State,
    encoder: &mut value::Encoder,
    list: c_int,
    i: usize,
    unpack: bool,
    func: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let top = st.top();
    st.raw_geti(list, i as i64 + 1);
    let r = if !unpack {
        encoder.encode(st, top + 1, 1, out, Role::Argument(func))
    } else if st.type_of(top + 1) != TTABLE {
        Err(Error::BadArgument(format!(
            "bad argument #3 to 'map': item {} is a {}, not a table of arguments (option unpack = true)",
            i + 1,
            st.type_name(top + 1)
        )))
    } else {
        let n = st.raw_len(top + 1);
        match c_int::try_from(n) {
            Ok(n) if n > call_io::MAX_ARGS => Err(call_io::too_many_args(func, n.into())),
            Ok(n) if st.check_stack(n.saturating_add(ENCODE_STACK)) => {
                for k in 1..=n {
                    st.raw_geti(top + 1, k as i64);
                }
                encoder.encode(st, top + 2, n, out, Role::Argument(func))
            }
            _ => Err(Error::Unsupported(format!(
                "cannot pass map item {}: {n} arguments are more than the Lua stack holds (pass fewer)",
                i + 1
            ))),
        }
    };
    st.set_top(top);
    r
}
