//! `vmpool.shared(name [, options])`: named dictionaries of the process, with the API and
//! semantics of `ngx.shared.DICT` ([`dict`]), visible from the host and from every state of every
//! pool. The registry below maps names to dictionaries; the Lua side is `host/dict/`.
//!
//! Every state reaches the same registry because it is a static of this library, and a pool
//! state that does `require "vmpool"` opens this very library again (its `package.preload`
//! holds `luaopen_vmpool`: `Child::configure`).
//!
//! After `fork()` the child has a copy of the parent's dictionaries that nobody else sees, and
//! whose locks may have been held by threads that did not survive the fork: handles from before
//! the fork refuse to work, and `vmpool.shared(name)` in the child starts a new, empty dictionary.

pub mod dict;
mod read_cache;
pub mod slab;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

pub use dict::Dict;

use crate::sys::PerProcess;
use crate::Error;

/// `capacity` when the options do not give one: 1 MiB.
pub const DEFAULT_CAPACITY: usize = 1 << 20;
/// `shards` when the options do not give one.
pub const DEFAULT_SHARDS: usize = 16;
/// The smallest capacity accepted: nginx's smallest `lua_shared_dict` (one page of entries).
pub const MIN_CAPACITY: usize = 8192;
/// The most shards accepted.
pub const MAX_SHARDS: usize = 256;

/// What `vmpool.shared` was asked for; `None` = not given.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options {
    pub capacity: Option<usize>,
    pub shards: Option<usize>,
}

/// A dictionary with the name it was registered under and the process it belongs to.
pub struct Named {
    pub name: String,
    pub dict: Dict,
    /// `sys::fork_generation()` when it was created.
    pub generation: u64,
    pub pid: u32,
}

impl Named {
    /// Refuses a dictionary inherited through `fork()`.
    pub fn check_process(&self) -> Result<(), Error> {
        if crate::sys::fork_generation() == self.generation {
            return Ok(());
        }
        Err(Error::BadArgument(format!(
            "shared dictionary '{}' was created in another process (pid {}); call vmpool.shared('{}') again in this process (it starts empty there)",
            self.name, self.pid, self.name
        )))
    }
}

/// The dictionaries of this process by name.
static REGISTRY: Mutex<PerProcess<HashMap<String, Arc<Named>>>> = Mutex::new(PerProcess::new());

/// The dictionary called `name`, created with `opts` if there is none. Options that disagree
/// with an existing dictionary's are an error.
pub fn open(name: &str, opts: Options) -> Result<Arc<Named>, Error> {
    let capacity = opts.capacity.unwrap_or(DEFAULT_CAPACITY);
    let shards = opts.shards.unwrap_or(DEFAULT_SHARDS);
    if capacity < MIN_CAPACITY {
        return Err(Error::BadArgument(format!(
            "option 'capacity' to vmpool.shared must be at least {MIN_CAPACITY} bytes, as lua_shared_dict's (got {capacity})"
        )));
    }
    if !(1..=MAX_SHARDS).contains(&shards) {
        return Err(Error::BadArgument(format!(
            "option 'shards' to vmpool.shared must be an integer from 1 to {MAX_SHARDS} (got {shards})"
        )));
    }
    let mut guard = REGISTRY.lock();
    let dicts = guard.get_mut();
    if let Some(d) = dicts.get(name) {
        let clash = |what: &str, has: usize, asked: usize| {
            Error::BadArgument(format!(
                "shared dictionary '{name}' already exists with {what} = {has} (asked for {asked}); pass the same options, or none, to use it"
            ))
        };
        if let Some(c) = opts.capacity.filter(|&c| c != d.dict.capacity()) {
            return Err(clash("capacity", d.dict.capacity(), c));
        }
        if let Some(s) = opts.shards.filter(|&s| s != d.dict.shard_count()) {
            return Err(clash("shards", d.dict.shard_count(), s));
        }
        return Ok(d.clone());
    }
    let dict = Dict::named(capacity, shards, name.len()).ok_or_else(|| Error::NoMemory {
        doing: format!(
            "creating shared dictionary '{name}' of capacity {capacity} (its page count takes 22 bytes per 4 KiB page)"
        ),
    })?;
    let d = Arc::new(Named {
        name: name.to_string(),
        dict,
        generation: crate::sys::fork_generation(),
        pid: crate::sys::pid(),
    });
    dicts.insert(name.to_string(), d.clone());
    Ok(d)
}

/// Every dictionary of this process (none inherited through `fork()`), by name.
pub fn all() -> Vec<Arc<Named>> {
    let guard = REGISTRY.lock();
    let mut all: Vec<Arc<Named>> = match guard.get() {
        Some(dicts) => dicts.values().cloned().collect(),
        None => Vec::new(),
    };
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

/// Parses a capacity given as a string the way nginx's `lua_shared_dict` reads sizes: a number
/// of bytes with an optional `k` or `m` suffix (`"10m"`, `"512k"`); also `g`.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1usize << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_name_gives_the_same_dictionary() {
        let a = open("registry-test-same", Options::default()).unwrap();
        let b = open("registry-test-same", Options::default()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = open(
            "registry-test-same",
            Options {
                capacity: Some(DEFAULT_CAPACITY),
                shards: None,
            },
        )
        .unwrap();
        assert!(Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn conflicting_options_are_refused() {
        open("registry-test-clash", Options::default()).unwrap();
        let e = open(
            "registry-test-clash",
            Options {
                capacity: Some(65536),
                shards: None,
            },
        )
        .err()
        .unwrap();
        assert!(e.to_string().starts_with(
            "vmpool: shared dictionary 'registry-test-clash' already exists with capacity = 1048576"
        ));
    }

    #[test]
    fn sizes_read_like_nginx_sizes() {
        assert_eq!(parse_size("10m"), Some(10 << 20));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("m"), None);
        assert_eq!(parse_size("-1k"), None);
        assert_eq!(parse_size("1.5m"), None);
    }
}
