//! Compiled chunks: Lua source compiled once in the host, shipped as bytecode to every state.
//!
//! A state loads a chunk the first time it runs a call into it and keeps it (keyed by the chunk's
//! id). Recompiling a name creates a new chunk with a new id, so later calls load the new version;
//! states drop versions that are no longer registered when they notice the registry changed.
//! Each loaded version runs in its own environment (see `child.rs`), so a version's functions are
//! exactly what it defines or returns.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::lua::State;
use crate::Error;

/// One compiled version of a named chunk.
///
/// Aligned to two cache lines so that in an `Arc<Chunk>` the reference counts, which the host
/// changes on every call it builds and recycles, sit on another line than the fields a worker
/// reads on every call it runs (with the counts beside them, each read misses the worker's
/// cache).
#[derive(Debug)]
#[repr(align(128))]
pub struct Chunk {
    /// Unique within the process; never reused.
    pub id: u64,
    pub name: String,
    pub bytecode: Box<[u8]>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The id of [`Chunk::anonymous`] (no compiled chunk has it: ids start at 1).
pub const ANONYMOUS: u64 = 0;

impl Chunk {
    /// The chunk of `pool:invoke(fn, ...)`: the function travels in the call's message (see
    /// `value/func.rs`), so there is nothing to load and nothing to unload.
    pub fn anonymous() -> Arc<Chunk> {
        static ANON: std::sync::OnceLock<Arc<Chunk>> = std::sync::OnceLock::new();
        ANON.get_or_init(|| {
            Arc::new(Chunk {
                id: ANONYMOUS,
                name: String::new(),
                bytecode: Box::default(),
            })
        })
        .clone()
    }

    /// Compiles `source` in the host state `st` (syntax errors surface here) and dumps it.
    pub fn compile(st: State, name: &str, source: &[u8]) -> Result<Chunk, Error> {
        let top = st.top();
        if !st.check_stack(2) {
            return Err(Error::no_stack("compiling a chunk"));
        }
        let rc = st.load_text(source, name);
        if rc != 0 {
            let message =
                String::from_utf8_lossy(st.to_bytes(-1).unwrap_or(b"unknown error")).into_owned();
            st.set_top(top);
            return Err(Error::Syntax {
                chunk: name.to_string(),
                message,
            });
        }
        let bytecode = st.dump();
        st.set_top(top);
        let bytecode =
            bytecode.ok_or_else(|| Error::Internal(format!("cannot dump chunk '{name}'")))?;
        Ok(Chunk {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            bytecode: bytecode.into_boxed_slice(),
        })
    }
}

/// A pool's chunks: the registry, and an epoch that moves whenever it changes, so that a state
/// can tell with one atomic load that it has nothing to drop. Every change goes through here, so
/// the epoch cannot be forgotten.
#[derive(Default)]
pub struct Chunks {
    registry: Mutex<Registry>,
    epoch: AtomicU64,
}

impl Chunks {
    /// Registers a chunk (replacing the version of that name, if any).
    pub fn insert(&self, chunk: Arc<Chunk>) {
        self.registry.lock().insert(chunk);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Unregisters the chunk of that name; false if there was none.
    pub fn remove(&self, name: &[u8]) -> bool {
        let removed = self.registry.lock().remove(name);
        if removed {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        removed
    }

    /// The chunk registered under `name`.
    pub fn get(&self, name: &[u8]) -> Option<Arc<Chunk>> {
        self.registry.lock().get(name).cloned()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The registry, for a state that reads what was removed.
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock()
    }
}

/// Most removals [`Registry`] remembers; a state further behind rescans what it loaded.
const REMOVAL_LOG: usize = 4096;

/// The chunks a pool knows, by name. Changed only by the host (`compile`, `unload`); states learn
/// which versions went away from the log of removals, so a recompile costs each state O(1), not a
/// scan of every chunk.
#[derive(Default)]
pub struct Registry {
    by_name: HashMap<Vec<u8>, Arc<Chunk>>,
    live: HashSet<u64>,
    /// Ids replaced or unloaded, oldest first (the last [`REMOVAL_LOG`] of them).
    removed: VecDeque<u64>,
    /// How many removals were dropped off the front of `removed`.
    trimmed: u64,
}

impl Registry {
    pub fn get(&self, name: &[u8]) -> Option<&Arc<Chunk>> {
        self.by_name.get(name)
    }

    /// Registers `chunk`, replacing any chunk of the same name.
    pub fn insert(&mut self, chunk: Arc<Chunk>) {
        self.live.insert(chunk.id);
        if let Some(old) = self.by_name.insert(chunk.name.as_bytes().to_vec(), chunk) {
            self.note_removed(old.id);
        }
    }

    pub fn remove(&mut self, name: &[u8]) -> bool {
        match self.by_name.remove(name) {
            Some(old) => {
                self.note_removed(old.id);
                true
            }
            None => false,
        }
    }

    fn note_removed(&mut self, id: u64) {
        self.live.remove(&id);
        self.removed.push_back(id);
        if self.removed.len() > REMOVAL_LOG {
            self.removed.pop_front();
            self.trimmed += 1;
        }
    }

    pub fn contains_id(&self, id: u64) -> bool {
        self.live.contains(&id)
    }

    /// How many removals there have been: a position in the log for [`Registry::removed_since`].
    pub fn removals(&self) -> u64 {
        self.trimmed + self.removed.len() as u64
    }

    /// The ids removed since position `since`, or `None` if the log no longer reaches back that
    /// far (then check each loaded id with [`Registry::contains_id`]).
    pub fn removed_since(&self, since: u64) -> Option<impl Iterator<Item = u64> + '_> {
        let skip = since.checked_sub(self.trimmed)?;
        Some(self.removed.iter().skip(skip as usize).copied())
    }
}
