//! A dictionary's entries and values, what nginx's nodes for them take (`NODE`, `ITEM_NODE`),
//! and the answers the operations give.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use super::clock::Now;
use crate::shared::read_cache;
use crate::shared::slab::Block;

/// A list's own node: `NODE`, its key and the head of its elements' queue, aligned to 8 bytes.
#[inline]
pub(super) fn list_node(key: &[u8]) -> usize {
    (NODE + key.len() + 16).next_multiple_of(8)
}

/// Bytes an entry's node takes in nginx besides its key and value: the red-black tree node up to
/// its `color` (32) and `ngx_http_lua_shdict_node_t` up to its `data` (36).
pub const NODE: usize = 68;
/// Bytes a list element's node takes besides its value (`ngx_http_lua_shdict_list_node_t` up to
/// its `data`).
pub const ITEM_NODE: usize = 21;
/// Most entries one write evicts to make room before it fails with "no memory" (ngx: 30).
pub const MAX_EVICTIONS: usize = 30;
/// Longest key, in bytes (ngx stores the length in 16 bits).
pub const MAX_KEY: usize = 65535;
/// Entries `flush_all` removes at once, besides marking every entry expired. ngx does this
/// (`ngx_http_lua_ffi_shdict_flush_all` ends with `ngx_http_lua_shdict_expire(ctx, 0)`: the
/// least recently used entry by force, then up to two more expired ones), and code written for
/// it sees the difference: `get_stale` no longer finds those, and `flush_expired` counts fewer.
pub const FLUSH_ALL_FREES: usize = 3;
/// What `add`, `safe_add` and `replace` of nil answer (`false, err, false`): ngx's message, a
/// result like "exists" rather than an error.
pub const NIL_ADD: &str = "attempt to add or replace nil values";
/// `incr`'s refusal of a sum that is NaN (`inf + -inf`). Not an answer ngx gives (it stores the
/// NaN): NaN equals nothing, itself included, so it could never be read back as what was
/// counted; the Lua side raises a `vmpool:` error for it instead of returning it.
pub const NAN_SUM: &str = "the sum is NaN";

/// A number as the state stored it: Lua 5.3+ integers stay integers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    #[inline]
    pub(super) fn add(self, other: Number) -> Number {
        match (self, other) {
            // Lua's own integer arithmetic wraps around
            (Number::Int(a), Number::Int(b)) => Number::Int(a.wrapping_add(b)),
            (a, b) => Number::Float(a.as_f64() + b.as_f64()),
        }
    }

    #[inline]
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

/// A value an entry holds (besides lists).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Num(Number),
    Str(Box<[u8]>),
}

impl Scalar {
    /// The value as the read cache stores it.
    #[inline]
    pub(super) fn cached(&self) -> read_cache::Value<'_> {
        match self {
            Scalar::Bool(b) => read_cache::Value::Bool(*b),
            Scalar::Num(Number::Int(i)) => read_cache::Value::Int(*i),
            Scalar::Num(Number::Float(f)) => read_cache::Value::Float(*f),
            Scalar::Str(b) => read_cache::Value::Str(b),
        }
    }
}

/// A copy of `b`, or `None` when the system refuses the memory (values can be as large as a
/// dictionary's capacity: an infallible copy would abort the process instead).
pub fn try_copy(b: &[u8]) -> Option<Box<[u8]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(b.len()).ok()?;
    v.extend_from_slice(b);
    Some(v.into_boxed_slice())
}

/// Where [`Dict::get_into`](super::Dict::get_into) puts a string value's bytes, while it still holds them (under the
/// shard's read lock, or from a validated read of the read cache).
pub trait ValueSink {
    /// Takes a copy of `bytes`; false if the memory for it was refused.
    fn put(&mut self, bytes: &[u8]) -> bool;
}

/// A vector reused across calls: its contents replaced by the bytes (a caller that reuses one
/// copies without allocating); false when the system refuses the memory (fallible: a value may
/// be as large as the capacity).
impl ValueSink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        self.clear();
        if self.try_reserve(bytes.len()).is_err() {
            return false;
        }
        self.extend_from_slice(bytes);
        true
    }
}

/// An element of a list.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Num(Number),
    Str(Box<[u8]>),
}

impl Item {
    /// Its node's bytes in nginx.
    #[inline]
    pub(super) fn size(&self) -> usize {
        ITEM_NODE
            + match self {
                Item::Num(_) => 8,
                Item::Str(s) => s.len(),
            }
    }
}

#[derive(Debug)]
pub(super) enum Stored {
    Scalar(Scalar),
    /// Each element with the block nginx would have given its node.
    List(VecDeque<(Item, Block)>),
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) value: Stored,
    pub(super) flags: u32,
    /// Nanoseconds on the dictionary's clock; 0 = never.
    pub(super) expires: u64,
    /// Where nginx would have put the entry's node (a list's elements have blocks of their own).
    pub(super) block: Block,
    /// When the entry went to its shard's most recently used end, on the dictionary's count of
    /// such moves: eviction compares the shards' oldest entries by it (`evict.rs`).
    pub(super) stamp: u64,
    /// Set by reads (under the shared lock), cleared by eviction passing over the entry: a read
    /// entry gets a second chance before it is evicted.
    pub(super) referenced: AtomicBool,
    /// The key's read cache slot is the home of its value (a string without TTL): `set`s of a
    /// string of the same length write the slot only (`ReadCache::rewrite`), and this entry's
    /// bytes and flags may be older than the slot's until they are taken back. Changed under the
    /// shard's write lock only.
    pub(super) home: bool,
}

impl Entry {
    /// An entry whose block is not taken yet, nor its stamp given (`Dict::insert`).
    pub(super) fn new(value: Stored, flags: u32, expires: u64) -> Entry {
        Entry {
            value,
            flags,
            expires,
            block: Block::NONE,
            stamp: 0,
            referenced: AtomicBool::new(false),
            home: false,
        }
    }

    /// Takes back the value and flags its home slot held (`value` is as long as the string
    /// stored: a rewrite in the slot keeps the length).
    #[inline]
    pub(super) fn take_back(&mut self, value: &[u8], flags: u32) {
        if let Stored::Scalar(Scalar::Str(b)) = &mut self.value {
            if b.len() == value.len() {
                b.copy_from_slice(value);
            }
        }
        self.flags = flags;
        self.home = false;
    }

    /// Marks the entry as read. Only a load when it is marked already, so that readers on
    /// several threads do not take turns writing the entry's cache line.
    #[inline]
    pub(super) fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(super) fn expired(&self, now: &Now) -> bool {
        self.expires != 0 && self.expires <= now.get()
    }

    /// What the read cache holds for this entry at `now`: its value, flags and expiry, or
    /// nothing for a list or an expired entry.
    #[inline]
    pub(super) fn cached(&self, now: &Now) -> Option<(read_cache::Value<'_>, u32, u64)> {
        match &self.value {
            Stored::Scalar(v) if !self.expired(now) => Some((v.cached(), self.flags, self.expires)),
            _ => None,
        }
    }
}

/// The bytes of an entry's node in nginx (value lengths as ngx stores them: a number is a double).
#[inline]
pub(super) fn node_size(key: &[u8], v: &Scalar) -> usize {
    NODE + key.len()
        + match v {
            Scalar::Bool(_) => 1,
            Scalar::Num(_) => 8,
            Scalar::Str(s) => s.len(),
        }
}

/// Which store operation (`set`, `safe_set`, `add`, `safe_add`, `replace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Set,
    Add,
    Replace,
}

/// What `get` found.
#[derive(Debug, PartialEq)]
pub enum Got {
    Missing,
    Value {
        value: Scalar,
        flags: u32,
        stale: bool,
    },
    /// The key holds a list (`get` answers nil, "value is a list").
    List,
    /// The system refused the memory for a copy of the value.
    NoMemory,
}

/// What [`Dict::get_into`](super::Dict::get_into) found; a string's bytes are in the caller's buffer.
#[derive(Debug, PartialEq)]
pub enum Found {
    Missing,
    Value {
        value: Kind,
        flags: u32,
        stale: bool,
    },
    List,
    NoMemory,
}

/// The kind of value [`Dict::get_into`](super::Dict::get_into) found (a string's bytes are in the caller's buffer).
#[derive(Debug, PartialEq, Clone, Copy)]
pub enum Kind {
    Bool(bool),
    Num(Number),
    Str,
}

/// How a write that may evict went: `forcible` is true if it evicted live entries.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Written {
    pub forcible: bool,
}

/// A write refused: the message ngx gives ("exists", "not found", "no memory", ...) and whether
/// entries were evicted on the way.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Refused {
    pub err: &'static str,
    pub forcible: bool,
}

#[inline]
pub(super) fn refused(err: &'static str) -> Refused {
    Refused {
        err,
        forcible: false,
    }
}
