//! One shared dictionary: the data and the semantics of `ngx.shared.DICT`, without Lua.
//!
//! Past 600 lines because it is one data structure with `ngx.shared.DICT`'s 21 operations, their
//! exact results, eviction and byte accounting, and its unit tests.
//!
//! Entries live in shards, each a read-write lock over a map kept in the order entries were
//! added; a key's hash picks its shard, so threads working on different keys rarely meet on a
//! lock, and no operation holds a lock for longer than one entry's work (the whole-dictionary
//! operations lock one shard at a time). Reads (`get`, `get_stale`, `ttl`, `llen`, `get_keys`)
//! share the lock: instead of moving the entry to the front, which is a write, a read sets the
//! entry's `referenced` bit, and so does a write that rewrites an entry in place (a value no
//! bigger, `incr`); eviction gives a referenced entry a second chance (the CLOCK approximation
//! of least-recently-used). Readers of the same keys on several threads then run
//! side by side instead of queueing on a mutex (bench/shared.lua, "scaling"). Most `get`s take no
//! lock at all: they read the key's slot in the shard's read cache (`read_cache.rs`), which every
//! write of a key updates through [`KeyWrite`] before the lock is released, and every removal of
//! an entry empties. Most `set`s of a short string take no lock either: a string without TTL
//! makes the slot its value's home, and a `set` of a string of the same length is done in the
//! slot ([`Dict::store_str`]; the entry's `home` and `read_cache.rs` say how the locked paths
//! stay right). The capacity is one
//! byte budget for the whole dictionary, reserved with an atomic counter, so a dictionary of any
//! size can hold one entry as large as itself.
//!
//! What follows `ngx.shared.DICT` (lua-nginx-module's `ngx_http_lua_shdict.c`), so that code written
//! for it behaves the same:
//! - expired entries are invisible to `get` but stay readable by `get_stale` until they are
//!   removed: lazily, up to two from the least recently used end of the shard on each write and
//!   each `get`, by `flush_expired`, or when their room is needed;
//! - a write that needs room evicts the least recently used entries (of its own shard first, then
//!   of others it can lock without waiting), at most [`MAX_EVICTIONS`], and reports that it did
//!   (`forcible`); the `safe` writes and list pushes evict nothing and fail with "no memory"
//!   instead;
//! - `flush_all` marks every entry expired (still readable by `get_stale`) and then removes up
//!   to three of them at once, from the least recently used end ([`FLUSH_ALL_FREES`]);
//! - `add` and `replace` of nil fail with ngx's "attempt to add or replace nil values";
//! - `incr` keeps the TTL and flags of an existing number; `init_ttl` only applies to the entry
//!   it creates.
//!
//! Where it differs, on purpose: `ttl` and `expire` treat an expired entry as absent (ngx answers
//! for expired entries that happen not to have been removed yet, which depends on timing); a write
//! that fails with "no memory" leaves the old value in place (ngx has already dropped it); the
//! least recently used order is kept per shard, so with more than one shard eviction picks the
//! least recently used entry of the shard that needs room, not of the whole dictionary (and
//! `flush_all` takes its three from the shards' least recently used ends, shard by shard); and that
//! order is CLOCK's approximation: the oldest-added entry not used (read or rewritten in place)
//! since eviction last passed it goes first. With `shards = 1` that is ngx's order except where
//! two entries were both used between evictions (ngx orders them by the time of their last use;
//! here they keep the order they were added in among themselves).

use std::cell::Cell;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

// foldhash (hashbrown's own default) instead of std's SipHash: SipHash was about 190 of a get's
// 2,300 instructions (callgrind). Each dictionary gets its own random seed, which keeps keys
// chosen by outsiders (request data) from colliding on purpose without knowing it; foldhash does
// not claim more than that against a determined attacker.
use foldhash::fast::RandomState;
use lru::LruCache;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::read_cache::{self, Hit, HitValue, Occupant, ReadCache};

/// Bytes an entry costs besides its key and value (about what ngx's node and slab rounding cost),
/// so that many tiny entries cannot exceed the capacity by much in real memory.
pub const ENTRY_OVERHEAD: usize = 64;
/// Bytes a list element costs besides its value.
pub const ITEM_OVERHEAD: usize = 24;
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
    fn add(self, other: Number) -> Number {
        match (self, other) {
            // Lua's own integer arithmetic wraps around
            (Number::Int(a), Number::Int(b)) => Number::Int(a.wrapping_add(b)),
            (a, b) => Number::Float(a.as_f64() + b.as_f64()),
        }
    }

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
    fn cached(&self) -> read_cache::Value<'_> {
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

/// Where [`Dict::get_into`] puts a string value's bytes, while it still holds them (under the
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
    fn size(&self) -> usize {
        ITEM_OVERHEAD
            + match self {
                Item::Num(_) => 8,
                Item::Str(s) => s.len(),
            }
    }
}

#[derive(Debug)]
enum Stored {
    Scalar(Scalar),
    List(VecDeque<Item>),
}

#[derive(Debug)]
struct Entry {
    value: Stored,
    flags: u32,
    /// Nanoseconds on the dictionary's clock; 0 = never.
    expires: u64,
    /// What the entry counts against the capacity.
    size: usize,
    /// Set by reads (under the shared lock), cleared by eviction passing over the entry: a read
    /// entry gets a second chance before it is evicted.
    referenced: AtomicBool,
    /// The key's read cache slot is the home of its value (a string without TTL): `set`s of a
    /// string of the same length write the slot only (`ReadCache::rewrite`), and this entry's
    /// bytes and flags may be older than the slot's until they are taken back. Changed under the
    /// shard's write lock only.
    home: bool,
}

impl Entry {
    fn new(value: Stored, flags: u32, expires: u64, size: usize) -> Entry {
        Entry {
            value,
            flags,
            expires,
            size,
            referenced: AtomicBool::new(false),
            home: false,
        }
    }

    /// Takes back the value and flags its home slot held (`value` is as long as the string
    /// stored: a rewrite in the slot keeps the length).
    fn take_back(&mut self, value: &[u8], flags: u32) {
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
    fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    fn expired(&self, now: &Now) -> bool {
        self.expires != 0 && self.expires <= now.get()
    }

    /// What the read cache holds for this entry at `now`: its value, flags and expiry, or
    /// nothing for a list or an expired entry.
    fn cached(&self, now: &Now) -> Option<(read_cache::Value<'_>, u32, u64)> {
        match &self.value {
            Stored::Scalar(v) if !self.expired(now) => Some((v.cached(), self.flags, self.expires)),
            _ => None,
        }
    }
}

fn scalar_size(key: &[u8], v: &Scalar) -> usize {
    ENTRY_OVERHEAD
        + key.len()
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

/// What [`Dict::get_into`] found; a string's bytes are in the caller's buffer.
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

/// The kind of value [`Dict::get_into`] found (a string's bytes are in the caller's buffer).
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

fn refused(err: &'static str) -> Refused {
    Refused {
        err,
        forcible: false,
    }
}

type Map = LruCache<Box<[u8]>, Entry, RandomState>;

/// A shard's map on cache lines of its own, away from its lock's word and from the other shards:
/// every get writes the lock word twice (taking and releasing the read lock), and a map header
/// on the same line would then be fetched again by every other reader (128 bytes: x86 fetches
/// lines in pairs).
#[repr(align(128))]
struct OwnLines(Map);

impl std::ops::Deref for OwnLines {
    type Target = Map;
    fn deref(&self) -> &Map {
        &self.0
    }
}

impl std::ops::DerefMut for OwnLines {
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.0
    }
}

/// A shard: its entries behind a read-write lock, and the read cache that `get` tries first.
struct Shard {
    map: RwLock<OwnLines>,
    cache: ReadCache,
    /// When the shard's least recently used entry expires (0: never, or no entry), as of the
    /// last release of the write lock ([`ShardWrite`]). A `set` done in a home slot without the
    /// lock ([`Dict::store_str`]) skips the lazy removal of expired entries from that end only
    /// when this says there is none to remove, so that it removes what a locked `set` would.
    tail_expires: AtomicU64,
}

impl Shard {
    fn write(&self) -> ShardWrite<'_> {
        ShardWrite {
            map: self.map.write(),
            tail_expires: &self.tail_expires,
        }
    }

    fn try_write(&self) -> Option<ShardWrite<'_>> {
        Some(ShardWrite {
            map: self.map.try_write()?,
            tail_expires: &self.tail_expires,
        })
    }
}

/// The shard's write lock; on release it records when the least recently used entry expires
/// (written only when that changed: the word shares a line with what every `get` reads).
struct ShardWrite<'a> {
    map: RwLockWriteGuard<'a, OwnLines>,
    tail_expires: &'a AtomicU64,
}

impl std::ops::Deref for ShardWrite<'_> {
    type Target = Map;
    fn deref(&self) -> &Map {
        &self.map
    }
}

impl std::ops::DerefMut for ShardWrite<'_> {
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.map
    }
}

impl Drop for ShardWrite<'_> {
    fn drop(&mut self) {
        let tail = self.map.peek_lru().map_or(0, |(_, e)| e.expires);
        if self.tail_expires.load(Ordering::Relaxed) != tail {
            self.tail_expires.store(tail, Ordering::Relaxed);
        }
    }
}

/// A shard locked for writing `key`: its read cache slot is being written for as long as this
/// lives, and when it drops the slot gets the key's new state. Every write of a key goes
/// through one, so no write path can leave the cache behind the map.
struct KeyWrite<'a> {
    map: ShardWrite<'a>,
    cache: &'a ReadCache,
    hash: u64,
    key: &'a [u8],
    now: &'a Now<'a>,
    /// The slot was given the key's state already (the common `set` does it where it has the
    /// entry at hand, saving the lookup below).
    published: bool,
}

impl std::ops::Deref for KeyWrite<'_> {
    type Target = Map;
    fn deref(&self) -> &Map {
        &self.map
    }
}

impl std::ops::DerefMut for KeyWrite<'_> {
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.map
    }
}

impl Drop for KeyWrite<'_> {
    fn drop(&mut self) {
        if self.published {
            return;
        }
        let (cache, hash, key, now) = (self.cache, self.hash, self.key, self.now);
        match self.map.peek_mut(key) {
            Some(e) => e.home = cache.end(hash, key, e.cached(now)),
            None => {
                cache.end(hash, key, None);
            }
        }
    }
}

/// The dictionary's time for one operation: read from the clock when first needed, and only
/// then. Most entries have no TTL, and `clock_gettime` was a sixth of a `set`'s time (perf,
/// LuaJIT) when every operation read it.
struct Now<'a> {
    dict: &'a Dict,
    /// 0 = not read yet (the clock gives at least 1).
    at: Cell<u64>,
}

impl Now<'_> {
    fn get(&self) -> u64 {
        match self.at.get() {
            0 => {
                let t = self.dict.now();
                self.at.set(t);
                t
            }
            t => t,
        }
    }
}

pub struct Dict {
    shards: Box<[Shard]>,
    hasher: RandomState,
    capacity: usize,
    used: AtomicUsize,
    /// Added to the monotonic clock: lets tests move a dictionary's time forward (`_advance`).
    skew: AtomicU64,
    /// Entries evicted to make room (`vmpool.metrics()`).
    evictions: AtomicU64,
}

/// Nanoseconds on the monotonic clock, at least 1 (0 means "never"). Read from the system clock
/// each time: no shared start value, so no first-use race for ThreadSanitizer to report.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .min(u64::MAX / 2)
        + 1
}

/// The longest TTL kept, in nanoseconds (about 146 years): a longer one means no expiry.
pub const MAX_TTL_NS: u64 = u64::MAX / 4;

/// Converts a TTL in seconds into nanoseconds (0 = never; the caller checked it is not negative
/// or NaN). Infinity and anything above [`MAX_TTL_NS`] mean never, as a TTL too long for ngx's
/// millisecond count does there (`1e300`, `2^63`), rather than a deadline clamped to 146 years.
pub fn ttl_ns(seconds: f64) -> u64 {
    let ns = seconds * 1e9;
    if seconds <= 0.0 || ns >= MAX_TTL_NS as f64 {
        0
    } else {
        // at least 1 ns, so that a tiny positive TTL still expires
        (ns as u64).max(1)
    }
}

/// What a read of the read cache found, a string's bytes handed to `out`.
fn found(hit: Hit, out: &mut impl ValueSink) -> Found {
    let value = match hit.value {
        HitValue::Bool(b) => Kind::Bool(b),
        HitValue::Int(i) => Kind::Num(Number::Int(i)),
        HitValue::Float(f) => Kind::Num(Number::Float(f)),
        HitValue::Str { .. } => {
            if !out.put(hit.value.bytes()) {
                return Found::NoMemory;
            }
            Kind::Str
        }
    };
    Found::Value {
        value,
        flags: hit.flags,
        stale: false,
    }
}

impl Dict {
    /// A dictionary of `capacity` bytes in `shards` shards (both at least 1).
    pub fn new(capacity: usize, shards: usize) -> Dict {
        let shards = shards.max(1);
        // a quarter of the capacity at most goes to the read caches (128 bytes a slot)
        let slots = capacity / 4 / 128 / shards;
        let shards = (0..shards)
            .map(|_| Shard {
                map: RwLock::new(OwnLines(LruCache::unbounded_with_hasher(
                    RandomState::default(),
                ))),
                cache: ReadCache::new(slots),
                tail_expires: AtomicU64::new(0),
            })
            .collect();
        Dict {
            shards,
            hasher: RandomState::default(),
            capacity,
            used: AtomicUsize::new(0),
            skew: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Entries stored, expired ones not yet removed included.
    pub fn items(&self) -> usize {
        self.shards.iter().map(|s| s.map.read().len()).sum()
    }

    /// Entries evicted to make room since the dictionary was created.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Bytes not taken by entries.
    pub fn free_space(&self) -> usize {
        self.capacity
            .saturating_sub(self.used.load(Ordering::Relaxed))
    }

    /// Moves this dictionary's clock forward (tests of TTLs without waiting).
    pub fn advance(&self, seconds: f64) {
        self.skew
            .fetch_add((seconds.max(0.0) * 1e9) as u64, Ordering::Relaxed);
    }

    pub fn now(&self) -> u64 {
        monotonic_ns() + self.skew.load(Ordering::Relaxed)
    }

    /// The time of this operation, read lazily (see [`Now`]).
    fn clock(&self) -> Now<'_> {
        Now {
            dict: self,
            at: Cell::new(0),
        }
    }

    fn deadline(&self, ttl: u64, now: &Now) -> u64 {
        if ttl == 0 {
            0
        } else {
            now.get().saturating_add(ttl)
        }
    }

    /// `key`'s hash and the shard it picks.
    fn locate(&self, key: &[u8]) -> (usize, u64) {
        let hash = self.hasher.hash_one(key);
        // the high bits pick the shard by a multiplication (a division was a tenth of a `set`),
        // the low ones the read cache's slot
        let shard = ((u128::from(hash) * self.shards.len() as u128) >> 64) as usize;
        (shard, hash)
    }

    /// The shard of `key` locked for writing it (see [`KeyWrite`]); `now` is the time the
    /// write runs at.
    #[inline]
    fn write_key<'a>(&'a self, key: &'a [u8], now: &'a Now<'a>) -> (usize, KeyWrite<'a>) {
        self.write_located(key, self.locate(key), now)
    }

    /// [`Dict::write_key`] for a caller that has located `key` already ([`Dict::locate`]).
    #[inline]
    fn write_located<'a>(
        &'a self,
        key: &'a [u8],
        (own, hash): (usize, u64),
        now: &'a Now<'a>,
    ) -> (usize, KeyWrite<'a>) {
        let shard = &self.shards[own];
        let mut map = shard.write();
        shard.cache.begin(hash, key, |occupant, o: Occupant| {
            if let Some(e) = map.peek_mut(occupant) {
                if o.touched {
                    e.touch();
                }
                if let Some((value, flags)) = o.home {
                    e.take_back(value, flags);
                }
            }
        });
        let guard = KeyWrite {
            map,
            cache: &shard.cache,
            hash,
            key,
            now,
            published: false,
        };
        (own, guard)
    }

    /// Takes the entry to evict out of shard `own` (whose lock `map` is): the oldest-added one
    /// that was not used (read or rewritten in place) since eviction last passed it. A used
    /// entry at the tail loses its mark and goes to the front (its second chance); after one
    /// pass over the shard every mark is gone, so this ends.
    fn pop_victim(&self, own: usize, map: &mut Map) -> Option<Entry> {
        let cache = &self.shards[own].cache;
        for _ in 0..map.len() {
            let (k, e) = map.peek_lru()?;
            let hit = cache.take_referenced(self.hasher.hash_one(k), k);
            if !(e.referenced.swap(false, Ordering::Relaxed) | hit) {
                break;
            }
            let (k, e) = map.pop_lru()?;
            map.push(k, e);
        }
        let (k, e) = map.pop_lru()?;
        cache.forget(self.hasher.hash_one(&k), &k);
        Some(e)
    }

    fn try_reserve(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|&t| t <= self.capacity)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Removes up to two expired entries from the least recently used end (ngx does this on
    /// every write and `get`, so that expired entries do not pile up).
    fn expire_tail(&self, own: usize, map: &mut Map, now: &Now) {
        for _ in 0..2 {
            match map.peek_lru() {
                Some((_, e)) if e.expired(now) => {
                    if let Some((k, e)) = map.pop_lru() {
                        self.shards[own].cache.forget(self.hasher.hash_one(&k), &k);
                        self.release(e.size);
                    }
                }
                _ => return,
            }
        }
    }

    /// Reserves `need` more bytes for a write into shard `own` (whose lock `map` is), evicting
    /// least recently used entries unless `safe`. The entry being written must not be in `map`.
    fn make_room(
        &self,
        own: usize,
        map: &mut Map,
        need: usize,
        safe: bool,
    ) -> Result<bool, Refused> {
        if need > self.capacity {
            return Err(refused("no memory"));
        }
        let mut forcible = false;
        for _ in 0..=MAX_EVICTIONS {
            if self.try_reserve(need) {
                return Ok(forcible);
            }
            if safe || !self.evict_one(own, map) {
                break;
            }
            forcible = true;
        }
        Err(Refused {
            err: "no memory",
            forcible,
        })
    }

    /// Evicts the least recently used entry of shard `own`, or else of another shard whose lock
    /// is free right now (never waiting for one while holding `own`'s: no deadlock).
    fn evict_one(&self, own: usize, map: &mut Map) -> bool {
        if let Some(e) = self.pop_victim(own, map) {
            self.release(e.size);
            self.evictions.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let n = self.shards.len();
        for step in 1..n {
            let i = (own + step) % n;
            if let Some(mut other) = self.shards[i].try_write() {
                if let Some(e) = self.pop_victim(i, &mut other) {
                    self.release(e.size);
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
            }
        }
        false
    }

    /// The shard of `key` locked for reading, after the write that removes expired entries from
    /// its tail when there are any (`expire = true`; ngx removes them on every `get`). Checking
    /// under the shared lock first keeps the common read from taking the exclusive one.
    fn read_shard(&self, own: usize, now: &Now, expire: bool) -> RwLockReadGuard<'_, OwnLines> {
        let shard = &self.shards[own];
        let map = shard.map.read();
        if !expire || !map.peek_lru().is_some_and(|(_, e)| e.expired(now)) {
            return map;
        }
        drop(map);
        self.expire_tail(own, &mut shard.write(), now);
        shard.map.read()
    }

    /// `get` (`stale = false`) and `get_stale` (`stale = true`), as an owned value.
    pub fn get(&self, key: &[u8], stale: bool) -> Got {
        let mut bytes = Vec::new();
        match self.get_into(key, stale, &mut bytes) {
            Found::Missing => Got::Missing,
            Found::List => Got::List,
            Found::NoMemory => Got::NoMemory,
            Found::Value {
                value,
                flags,
                stale,
            } => Got::Value {
                value: match value {
                    Kind::Bool(b) => Scalar::Bool(b),
                    Kind::Num(n) => Scalar::Num(n),
                    Kind::Str => Scalar::Str(bytes.into_boxed_slice()),
                },
                flags,
                stale,
            },
        }
    }

    /// [`Dict::get`] with a string's bytes handed to `out` ([`ValueSink`]): a reused vector, or
    /// the FFI caller's buffer, so that a caller copies without allocating. The bytes must leave
    /// the shard's lock before they go into a Lua state, which can run finalizers that use this
    /// dictionary.
    pub fn get_into(&self, key: &[u8], stale: bool, out: &mut impl ValueSink) -> Found {
        let (own, hash) = self.locate(key);
        if !stale {
            if let Some(hit) = self.shards[own].cache.read(hash, key, || self.now()) {
                return found(hit, out);
            }
        }
        let now = &self.clock();
        let map = self.read_shard(own, now, !stale);
        let Some(e) = map.peek(key) else {
            return Found::Missing;
        };
        let expired = e.expired(now);
        if expired && !stale {
            return Found::Missing;
        }
        e.touch();
        if e.home {
            if let Some(hit) = self.shards[own].cache.read_home(hash, key) {
                return found(hit, out);
            }
        }
        let value = match &e.value {
            Stored::List(_) => return Found::List,
            Stored::Scalar(Scalar::Bool(b)) => Kind::Bool(*b),
            Stored::Scalar(Scalar::Num(n)) => Kind::Num(*n),
            Stored::Scalar(Scalar::Str(s)) => {
                if !out.put(s) {
                    return Found::NoMemory;
                }
                Kind::Str
            }
        };
        Found::Value {
            value,
            flags: e.flags,
            stale: expired,
        }
    }

    /// `set`, `add`, `replace` and their `safe_` variants. `value` `None` deletes with
    /// `Mode::Set`; add and replace refuse it with [`NIL_ADD`], as ngx does before it looks at
    /// the key (so without the lazy removal of expired entries either). `ttl` in nanoseconds,
    /// 0 = never.
    pub fn store(
        &self,
        mode: Mode,
        safe: bool,
        key: &[u8],
        value: Option<Scalar>,
        ttl: u64,
        flags: u32,
    ) -> Result<Written, Refused> {
        if value.is_none() && mode != Mode::Set {
            return Err(refused(NIL_ADD));
        }
        let now = &self.clock();
        let (own, mut map) = self.write_key(key, now);
        self.expire_tail(own, &mut map, now);
        self.store_locked(own, &mut map, mode, safe, key, value, ttl, flags, now)
    }

    /// [`Dict::store`] of a string the caller still owns: a string as long as the one stored is
    /// written over it in place ([`Dict::overwrite_string`]); otherwise the bytes are copied and
    /// stored. `None` when the system refuses the memory for the copy (nothing changed).
    ///
    /// One lock for both: the copy is made under it when the value cannot be written in place.
    /// Trying in place under one lock and storing under a second took the lock, the lazy expiry
    /// and the read cache's publication twice, a third of a `set` that changes a string's length
    /// (callgrind: 2,136 instructions per such set; bench/results/2026-12-03-shared-set-one-line.md).
    pub fn store_str(
        &self,
        mode: Mode,
        safe: bool,
        key: &[u8],
        value: &[u8],
        ttl: u64,
        flags: u32,
    ) -> Option<Result<Written, Refused>> {
        // hashed once for both paths
        let at = self.locate(key);
        if mode != Mode::Add && ttl == 0 && self.rewrite_at_home(at, key, value, flags) {
            return Some(Ok(Written { forcible: false }));
        }
        let now = &self.clock();
        let (own, mut map) = self.write_located(key, at, now);
        self.expire_tail(own, &mut map, now);
        if let Some(w) = self.overwrite_string(&mut map, mode, key, value, ttl, flags, now) {
            return Some(Ok(w));
        }
        let copy = try_copy(value)?;
        Some(self.store_locked(
            own,
            &mut map,
            mode,
            safe,
            key,
            Some(Scalar::Str(copy)),
            ttl,
            flags,
            now,
        ))
    }

    /// `set` or `replace` of a string without TTL, done in the key's home slot without the
    /// shard's lock ([`ReadCache::rewrite`]) when the slot holds a string of the same length and
    /// the shard has no expired entry for a locked `set` to remove first. Such a key is live (a
    /// home holds no TTL), and its size does not change; false when this does not apply. `key`
    /// is in shard `own` with hash `hash` ([`Dict::locate`]).
    fn rewrite_at_home(
        &self,
        (own, hash): (usize, u64),
        key: &[u8],
        value: &[u8],
        flags: u32,
    ) -> bool {
        let shard = &self.shards[own];
        shard.cache.rewrite(hash, key, value, flags, || {
            let tail = shard.tail_expires.load(Ordering::Relaxed);
            tail == 0 || tail > self.now()
        })
    }

    /// The store itself, in shard `own` locked for `key` (`map`), its expired tail removed.
    #[allow(clippy::too_many_arguments)]
    fn store_locked(
        &self,
        own: usize,
        map: &mut KeyWrite,
        mode: Mode,
        safe: bool,
        key: &[u8],
        value: Option<Scalar>,
        ttl: u64,
        flags: u32,
        now: &Now,
    ) -> Result<Written, Refused> {
        let live = map.peek(key).map(|e| !e.expired(now));
        match (mode, live) {
            (Mode::Add, Some(true)) => return Err(refused("exists")),
            (Mode::Replace, None | Some(false)) => return Err(refused("not found")),
            _ => {}
        }
        let Some(value) = value else {
            if let Some(old) = map.pop(key) {
                self.release(old.size);
            }
            return Ok(Written { forcible: false });
        };
        let size = scalar_size(key, &value);
        let entry = Entry::new(Stored::Scalar(value), flags, self.deadline(ttl, now), size);
        self.put(own, map, key, entry, safe)
    }

    /// The common rewrite of a string, done without allocating: `set` (or `replace` of a live
    /// key) of a string as long as the one stored, whose bytes are overwritten in place (and the
    /// entry marked as used, as any rewrite in place does), in the shard `map` locked for `key`.
    /// Returns `None`, having changed nothing, when that does not apply; [`Dict::store_str`]
    /// then copies the value and stores it.
    ///
    /// Why: a copy per `set` means a `malloc` in the writing thread and a `free` of the old value
    /// under the shard's lock, often of memory another thread allocated, which takes that
    /// thread's allocator arena lock: with several threads writing the same keys it was the
    /// dictionary's main cost (bench/shared.lua, "scaling").
    #[allow(clippy::too_many_arguments)]
    fn overwrite_string(
        &self,
        map: &mut KeyWrite,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        ttl: u64,
        flags: u32,
        now: &Now,
    ) -> Option<Written> {
        if mode == Mode::Add {
            return None;
        }
        let deadline = self.deadline(ttl, now);
        let e = map.map.peek_mut(key)?;
        if mode == Mode::Replace && e.expired(now) {
            return None;
        }
        let Stored::Scalar(v) = &mut e.value else {
            return None;
        };
        let Scalar::Str(b) = &mut *v else {
            return None;
        };
        if b.len() != value.len() {
            return None;
        }
        b.copy_from_slice(value);
        // written only when they change: the entry's line is read by every writer of the key,
        // and a write would make the others fetch it again
        if e.flags != flags {
            e.flags = flags;
        }
        if e.expires != deadline {
            e.expires = deadline;
        }
        e.home = map.cache.end(map.hash, key, e.cached(now));
        map.published = true;
        // marked, not moved to the front: see `Dict::put`
        e.touch();
        Some(Written { forcible: false })
    }

    /// Puts `entry` under `key`, replacing what is there: the old entry's bytes are reused, more
    /// are reserved (evicting unless `safe`); if there is no room the old entry stays.
    fn put(
        &self,
        own: usize,
        map: &mut Map,
        key: &[u8],
        entry: Entry,
        safe: bool,
    ) -> Result<Written, Refused> {
        // the common case, a key rewritten with a value no bigger: in place (one lookup),
        // without taking the key out and back in.
        //
        // A rewrite in place marks the entry as used (CLOCK's bit, as a read does) instead of
        // moving it to the front of the shard's order: the move writes the entry's neighbours
        // and the shard's list head, cache lines every other writer of the shard then fetches
        // again. With the host and 2 states on 1,000 keys (10% sets), that took the scaling from
        // 1.13x to 1.43-1.49x on LuaJIT (bench/shared.lua; results 2026-12-02-shared-read-cache).
        if let Some(e) = map.peek_mut(key) {
            if entry.size <= e.size {
                self.release(e.size - entry.size);
                *e = entry;
                e.touch();
                return Ok(Written { forcible: false });
            }
        }
        let old = map.pop_entry(key);
        let old_size = old.as_ref().map_or(0, |(_, e)| e.size);
        if entry.size <= old_size {
            self.release(old_size - entry.size);
            let k = old.map_or_else(|| Box::from(key), |(k, _)| k);
            map.push(k, entry);
            return Ok(Written { forcible: false });
        }
        match self.make_room(own, map, entry.size - old_size, safe) {
            Ok(forcible) => {
                let k = old.map_or_else(|| Box::from(key), |(k, _)| k);
                map.push(k, entry);
                Ok(Written { forcible })
            }
            Err(r) => {
                if let Some((k, e)) = old {
                    map.push(k, e);
                }
                Err(r)
            }
        }
    }

    /// `incr`: adds `delta` to the number under `key`. A missing (or expired) key is created with
    /// `init + delta` and `init_ttl` if `init` is given, else "not found". A sum that is NaN is
    /// refused with [`NAN_SUM`], leaving the key as it was.
    pub fn incr(
        &self,
        key: &[u8],
        delta: Number,
        init: Option<(Number, u64)>,
    ) -> Result<(Number, Written), Refused> {
        let now = &self.clock();
        let (own, mut map) = self.write_key(key, now);
        self.expire_tail(own, &mut map, now);
        // marked, not moved to the front: see `Dict::put`
        if let Some(e) = map.peek_mut(key).filter(|e| !e.expired(now)) {
            e.touch();
            return match &mut e.value {
                Stored::Scalar(Scalar::Num(n)) => {
                    let sum = n.add(delta);
                    if sum.as_f64().is_nan() {
                        return Err(refused(NAN_SUM));
                    }
                    *n = sum;
                    Ok((sum, Written { forcible: false }))
                }
                _ => Err(refused("not a number")),
            };
        }
        let Some((init, init_ttl)) = init else {
            return Err(refused("not found"));
        };
        let n = init.add(delta);
        if n.as_f64().is_nan() {
            return Err(refused(NAN_SUM));
        }
        let value = Scalar::Num(n);
        let size = scalar_size(key, &value);
        let entry = Entry::new(Stored::Scalar(value), 0, self.deadline(init_ttl, now), size);
        self.put(own, &mut map, key, entry, false).map(|w| (n, w))
    }

    /// `lpush` (`front`) and `rpush`: returns the list's new length. A missing or expired key
    /// becomes a new list without TTL; a live non-list is "value not a list".
    pub fn push(&self, key: &[u8], item: Item, front: bool) -> Result<usize, Refused> {
        let now = &self.clock();
        let (own, mut map) = self.write_key(key, now);
        self.expire_tail(own, &mut map, now);
        let (mut list, flags, expires, old_size) = match map.pop(key) {
            Some(e) if e.expired(now) => {
                self.release(e.size);
                (VecDeque::new(), 0, 0, 0)
            }
            Some(Entry {
                value: Stored::List(l),
                flags,
                expires,
                size,
                ..
            }) => (l, flags, expires, size),
            Some(other) => {
                map.push(Box::from(key), other);
                return Err(refused("value not a list"));
            }
            None => (VecDeque::new(), 0, 0, 0),
        };
        let base = if old_size == 0 {
            ENTRY_OVERHEAD + key.len()
        } else {
            0
        };
        let need = base + item.size();
        let restore = |map: &mut Map, list: VecDeque<Item>| {
            if old_size > 0 {
                let e = Entry::new(Stored::List(list), flags, expires, old_size);
                map.push(Box::from(key), e);
            }
        };
        // a list push evicts nothing, as ngx's: without room it fails with "no memory"
        if let Err(r) = self.make_room(own, &mut map, need, true) {
            restore(&mut map, list);
            return Err(r);
        }
        if front {
            list.push_front(item);
        } else {
            list.push_back(item);
        }
        let len = list.len();
        let e = Entry::new(Stored::List(list), flags, expires, old_size + need);
        map.push(Box::from(key), e);
        Ok(len)
    }

    /// `lpop` (`front`) and `rpop`. An emptied list is removed.
    pub fn pop(&self, key: &[u8], front: bool) -> Result<Option<Item>, Refused> {
        let now = &self.clock();
        let (own, mut map) = self.write_key(key, now);
        self.expire_tail(own, &mut map, now);
        let Some(e) = map.get_mut(key).filter(|e| !e.expired(now)) else {
            return Ok(None);
        };
        let Stored::List(list) = &mut e.value else {
            return Err(refused("value not a list"));
        };
        let item = if front {
            list.pop_front()
        } else {
            list.pop_back()
        };
        let empty = list.is_empty();
        if let Some(i) = &item {
            e.size -= i.size();
            self.release(i.size());
        }
        if empty {
            if let Some(e) = map.pop(key) {
                self.release(e.size);
            }
        }
        Ok(item)
    }

    /// `llen`: 0 for a missing or expired key.
    pub fn llen(&self, key: &[u8]) -> Result<usize, Refused> {
        let now = &self.clock();
        let map = self.read_shard(self.locate(key).0, now, false);
        match map
            .peek(key)
            .filter(|e| !e.expired(now))
            .inspect(|e| e.touch())
        {
            None => Ok(0),
            Some(Entry {
                value: Stored::List(l),
                ..
            }) => Ok(l.len()),
            Some(_) => Err(refused("value not a list")),
        }
    }

    /// `ttl`: nanoseconds left (0 = no expiry), `None` if the key is missing or expired.
    pub fn ttl(&self, key: &[u8]) -> Option<u64> {
        let now = &self.clock();
        let map = self.read_shard(self.locate(key).0, now, false);
        let e = map.peek(key).filter(|e| !e.expired(now))?;
        Some(if e.expires == 0 {
            0
        } else {
            e.expires - now.get()
        })
    }

    /// `expire`: gives a live key a new TTL (0 = never); false if it is missing or expired.
    pub fn expire(&self, key: &[u8], ttl: u64) -> bool {
        let now = &self.clock();
        let (_, mut map) = self.write_key(key, now);
        match map.peek_mut(key).filter(|e| !e.expired(now)) {
            Some(e) => {
                e.expires = self.deadline(ttl, now);
                true
            }
            None => false,
        }
    }

    /// `flush_all`: every entry expires now (`get_stale` still sees them until they are removed),
    /// and [`FLUSH_ALL_FREES`] of them are removed at once, as ngx does: those eviction would
    /// take, from the first shards' least recently used ends (with one shard, the dictionary's
    /// least recently used entries).
    pub fn flush_all(&self) {
        let now = &self.clock();
        let mut freed = 0;
        for (i, shard) in self.shards.iter().enumerate() {
            let mut map = shard.write();
            for (k, e) in map.iter_mut() {
                // values at home go back into their entries: the slots are emptied below
                if e.home {
                    if let Some(h) = shard.cache.take_home(self.hasher.hash_one(k), k) {
                        e.take_back(h.value.bytes(), h.flags);
                    }
                    e.home = false;
                }
                e.expires = now.get();
            }
            // before the read cache is emptied: its marks of read entries are part of the order
            while freed < FLUSH_ALL_FREES {
                let Some(e) = self.pop_victim(i, &mut map) else {
                    break;
                };
                self.release(e.size);
                freed += 1;
            }
            shard.cache.forget_all();
        }
    }

    /// `flush_expired`: removes expired entries, at most `max` (0 = all); returns how many.
    pub fn flush_expired(&self, max: usize) -> usize {
        let now = &self.clock();
        let mut freed = 0;
        for shard in self.shards.iter() {
            let mut map = shard.write();
            map.retain(|k, e| {
                let remove = e.expired(now) && (max == 0 || freed < max);
                if remove {
                    freed += 1;
                    shard.cache.forget(self.hasher.hash_one(k), k);
                    self.release(e.size);
                }
                !remove
            });
            if max != 0 && freed >= max {
                break;
            }
        }
        freed
    }

    /// `get_keys`: live keys, at most `max` (0 = all), most recently written first within a
    /// shard.
    pub fn keys(&self, max: usize) -> Vec<Box<[u8]>> {
        let now = &self.clock();
        let mut keys = Vec::new();
        for shard in self.shards.iter() {
            let map = shard.map.read();
            for (k, e) in map.iter() {
                if max != 0 && keys.len() >= max {
                    return keys;
                }
                if !e.expired(now) {
                    keys.push(k.clone());
                }
            }
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Scalar {
        Scalar::Str(x.as_bytes().into())
    }

    fn got(d: &Dict, k: &str) -> Option<Scalar> {
        match d.get(k.as_bytes(), false) {
            Got::Value { value, .. } => Some(value),
            _ => None,
        }
    }

    #[test]
    fn a_set_value_is_read_back_with_its_flags() {
        let d = Dict::new(1 << 20, 4);
        d.store(Mode::Set, false, b"k", Some(s("v")), 0, 7).unwrap();
        assert_eq!(
            d.get(b"k", false),
            Got::Value {
                value: s("v"),
                flags: 7,
                stale: false
            }
        );
    }

    #[test]
    fn expired_entries_are_stale_then_gone() {
        let d = Dict::new(1 << 20, 1);
        d.store(Mode::Set, false, b"k", Some(s("v")), ttl_ns(1.0), 0)
            .unwrap();
        d.advance(1.5);
        assert!(matches!(d.get(b"k", true), Got::Value { stale: true, .. }));
        assert_eq!(d.flush_expired(0), 1);
        assert_eq!(d.get(b"k", true), Got::Missing);
        assert_eq!(d.free_space(), d.capacity());
        // a plain get removes expired entries it finds at the least recently used end
        d.store(Mode::Set, false, b"k", Some(s("v")), ttl_ns(1.0), 0)
            .unwrap();
        d.advance(1.5);
        assert_eq!(d.get(b"k", false), Got::Missing);
        assert_eq!(d.get(b"k", true), Got::Missing);
    }

    #[test]
    fn full_dictionaries_evict_the_least_recently_used_entry() {
        let entry = scalar_size(b"k0", &s("0123456789"));
        let d = Dict::new(entry * 3, 1);
        for k in ["k0", "k1", "k2"] {
            let w = d
                .store(Mode::Set, false, k.as_bytes(), Some(s("0123456789")), 0, 0)
                .unwrap();
            assert!(!w.forcible);
        }
        assert!(got(&d, "k0").is_some()); // k1 is now the least recently used
        let w = d
            .store(Mode::Set, false, b"k3", Some(s("0123456789")), 0, 0)
            .unwrap();
        assert!(w.forcible);
        assert!(got(&d, "k1").is_none());
        assert!(got(&d, "k0").is_some() && got(&d, "k2").is_some() && got(&d, "k3").is_some());
        assert_eq!((d.evictions(), d.items()), (1, 3));
        assert_eq!(
            d.store(Mode::Set, true, b"k4", Some(s("0123456789")), 0, 0),
            Err(Refused {
                err: "no memory",
                forcible: false
            })
        );
    }

    #[test]
    fn a_read_entry_gets_a_second_chance_and_then_is_evicted_like_the_others() {
        let entry = scalar_size(b"k0", &s("0123456789"));
        let d = Dict::new(entry * 3, 1);
        let set = |k: &str| {
            d.store(Mode::Set, false, k.as_bytes(), Some(s("0123456789")), 0, 0)
                .unwrap()
        };
        for k in ["k0", "k1", "k2"] {
            set(k);
        }
        // k0 and k1 are read: k2, written last, is the one eviction picks
        assert!(got(&d, "k0").is_some() && got(&d, "k1").is_some());
        assert!(set("k3").forcible);
        assert!(got(&d, "k2").is_none());
        // that pass cleared k0's and k1's marks (they went to the front, k1 last): unread since,
        // k3 being newer, k0 goes next
        assert!(set("k4").forcible);
        assert!(got(&d, "k0").is_none());
        assert!(got(&d, "k1").is_some() && got(&d, "k3").is_some() && got(&d, "k4").is_some());
    }

    /// What the locked path answers: `get_stale` never uses the read cache.
    fn locked(d: &Dict, k: &[u8]) -> Got {
        match d.get(k, true) {
            Got::Value { stale: true, .. } => Got::Missing,
            g => g,
        }
    }

    #[test]
    fn a_get_after_every_kind_of_write_answers_what_the_locked_path_answers() {
        let d = Dict::new(1 << 20, 4);
        let long = "k".repeat(60);
        let check = |what: &str| {
            for k in [&b"a"[..], b"b", long.as_bytes()] {
                assert_eq!(d.get(k, false), locked(&d, k), "after {what}, key {k:?}");
            }
        };
        let set = |k: &[u8], v: Scalar, flags| d.store(Mode::Set, false, k, Some(v), 0, flags);
        set(b"a", s("one"), 1).unwrap();
        set(b"b", Scalar::Num(Number::Int(7)), 0).unwrap();
        set(long.as_bytes(), s(&"v".repeat(60)), 0).unwrap();
        check("set");
        assert_eq!(got(&d, "a"), Some(s("one")));
        d.store_str(Mode::Set, false, b"a", b"two", 0, 2)
            .unwrap()
            .unwrap();
        check("a rewrite in place");
        assert_eq!(got(&d, "a"), Some(s("two")));
        d.store_str(Mode::Replace, false, b"a", b"three!", 0, 3)
            .unwrap()
            .unwrap();
        check("replace");
        assert!(d.store(Mode::Add, false, b"a", Some(s("x")), 0, 0).is_err());
        check("a refused add");
        d.incr(b"b", Number::Int(1), None).unwrap();
        check("incr");
        assert_eq!(got(&d, "b"), Some(Scalar::Num(Number::Int(8))));
        set(b"b", Scalar::Bool(false), 0).unwrap();
        check("a boolean");
        d.store(Mode::Set, false, b"b", None, 0, 0).unwrap();
        check("delete");
        d.push(b"b", Item::Num(Number::Int(1)), true).unwrap();
        check("lpush");
        d.pop(b"b", true).unwrap();
        check("lpop of the last element");
        assert!(d.expire(b"a", ttl_ns(1.0)));
        d.advance(2.0);
        check("expire, then time passing");
        assert_eq!(got(&d, "a"), None);
        set(b"a", s("again"), 0).unwrap();
        d.flush_all();
        check("flush_all");
        assert_eq!(got(&d, "a"), None);
        set(b"a", s("after"), 0).unwrap();
        d.flush_expired(0);
        check("flush_expired");
        assert_eq!(got(&d, "a"), Some(s("after")));
    }

    #[test]
    fn an_evicted_entry_is_not_read_back_from_the_read_cache() {
        let entry = scalar_size(b"k0", &s("0123456789"));
        let d = Dict::new(entry * 2, 1);
        let set = |k: &str| {
            d.store(Mode::Set, false, k.as_bytes(), Some(s("0123456789")), 0, 0)
                .unwrap()
        };
        set("k0");
        set("k1");
        assert!(set("k2").forcible);
        assert_eq!(got(&d, "k0"), None);
        assert_eq!(locked(&d, b"k0"), Got::Missing);
    }

    #[test]
    fn readers_never_see_half_of_a_write() {
        // every value written is consistent in itself: n bytes of n, flags n; a reader that saw
        // one half of a write and the other half of the next would find a mismatch
        let d = std::sync::Arc::new(Dict::new(1 << 20, 2));
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (d, done) = (d.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        for k in [&b"k0"[..], b"k1"] {
                            if let Got::Value { value, flags, .. } = d.get(k, false) {
                                match value {
                                    Scalar::Str(b) => {
                                        assert_eq!(b.len() as u32, flags);
                                        assert!(b.iter().all(|&x| u32::from(x) == flags));
                                    }
                                    Scalar::Num(Number::Int(i)) => assert_eq!(i as u32, flags),
                                    other => panic!("unexpected {other:?}"),
                                }
                                seen += 1;
                            }
                        }
                    }
                    seen
                })
            })
            .collect();
        for i in 0..200_000u32 {
            let n = 1 + i % 48;
            let k: &[u8] = if i % 2 == 0 { b"k0" } else { b"k1" };
            if i % 3 == 0 {
                d.store(
                    Mode::Set,
                    false,
                    k,
                    Some(Scalar::Num(Number::Int(n.into()))),
                    0,
                    n,
                )
                .unwrap();
            } else {
                let v = vec![n as u8; n as usize];
                d.store_str(Mode::Set, false, k, &v, 0, n).unwrap().unwrap();
            }
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    }

    #[test]
    fn readers_of_one_shard_do_not_wait_for_each_other() {
        let d = std::sync::Arc::new(Dict::new(1 << 20, 1));
        d.store(Mode::Set, false, b"k", Some(s("v")), 0, 0).unwrap();
        // a reader in the middle of its read: a mutex would keep the other thread waiting
        let held = d.shards[0].map.read();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let d = d.clone();
            std::thread::spawn(move || {
                let _ = tx.send((got(&d, "k"), d.ttl(b"k"), d.llen(b"k"), d.keys(0).len()));
            })
        };
        let seen = rx.recv_timeout(std::time::Duration::from_secs(30));
        drop(held);
        reader.join().unwrap();
        assert_eq!(
            seen.expect("the reads finished while another reader held the shard"),
            (Some(s("v")), Some(0), Err(refused("value not a list")), 1)
        );
    }

    /// [`Dict::overwrite_string`] under a lock of its own, as `store_str` calls it.
    fn overwrite(
        d: &Dict,
        mode: Mode,
        key: &[u8],
        value: &[u8],
        ttl: u64,
        flags: u32,
    ) -> Option<Written> {
        let now = &d.clock();
        let (own, mut map) = d.write_key(key, now);
        d.expire_tail(own, &mut map, now);
        d.overwrite_string(&mut map, mode, key, value, ttl, flags, now)
    }

    #[test]
    fn a_string_of_the_same_length_is_overwritten_in_place_and_is_spared_by_the_next_eviction() {
        let entry = scalar_size(b"k0", &s("0123456789"));
        let d = Dict::new(entry * 3, 1);
        for k in ["k0", "k1", "k2"] {
            d.store(Mode::Set, false, k.as_bytes(), Some(s("0123456789")), 0, 0)
                .unwrap();
        }
        let before = d.free_space();
        let w = overwrite(&d, Mode::Set, b"k0", b"abcdefghij", ttl_ns(5.0), 9);
        assert_eq!(w, Some(Written { forcible: false }));
        assert_eq!(d.free_space(), before, "the same size is accounted");
        assert_eq!(
            d.get(b"k0", false),
            Got::Value {
                value: s("abcdefghij"),
                flags: 9,
                stale: false
            }
        );
        assert_eq!(d.ttl(b"k0").map(|t| (t as f64 / 1e9).round()), Some(5.0));
        // k1 is the least recently used now, so a new key evicts it, not k0
        d.store(Mode::Set, false, b"k3", Some(s("0123456789")), 0, 0)
            .unwrap();
        assert!(got(&d, "k1").is_none() && got(&d, "k0").is_some());
        // what it does not do, leaving the entry as it was: another length, add, a missing
        // key, a replace of an expired key, a non-string
        assert_eq!(overwrite(&d, Mode::Set, b"k0", b"short", 0, 0), None);
        assert_eq!(overwrite(&d, Mode::Add, b"k0", b"0123456789", 0, 0), None);
        assert_eq!(overwrite(&d, Mode::Set, b"nope", b"0123456789", 0, 0), None);
        d.advance(10.0);
        assert_eq!(
            overwrite(&d, Mode::Replace, b"k0", b"ABCDEFGHIJ", 0, 0),
            None
        );
        assert!(matches!(d.get(b"k0", true), Got::Value { stale: true, .. }));
        d.store(
            Mode::Set,
            false,
            b"n",
            Some(Scalar::Num(Number::Int(1))),
            0,
            0,
        )
        .unwrap();
        assert_eq!(overwrite(&d, Mode::Set, b"n", b"12345678", 0, 0), None);
    }

    /// Whether `k`'s entry says its value is at home in its slot, and the entry's own bytes.
    fn entry_home(d: &Dict, k: &[u8]) -> (bool, Vec<u8>) {
        let map = d.shards[d.locate(k).0].map.read();
        let e = map.peek(k).expect("an entry");
        match &e.value {
            Stored::Scalar(Scalar::Str(b)) => (e.home, b.to_vec()),
            other => panic!("not a string: {other:?}"),
        }
    }

    fn set_str(d: &Dict, k: &[u8], v: &[u8], flags: u32) {
        d.store_str(Mode::Set, false, k, v, 0, flags)
            .unwrap()
            .unwrap();
    }

    fn value(v: &str, flags: u32, stale: bool) -> Got {
        Got::Value {
            value: s(v),
            flags,
            stale,
        }
    }

    #[test]
    fn a_string_set_at_home_is_what_every_later_read_and_write_of_the_key_sees() {
        // one shard of 8 read cache slots: the other keys below soon take `k`'s slot
        let d = Dict::new(4096, 1);
        set_str(&d, b"k", b"aaaa", 1);
        assert_eq!(entry_home(&d, b"k"), (true, b"aaaa".to_vec()));
        set_str(&d, b"k", b"bbbb", 2);
        // written in the slot only: the entry's copy is the older one
        assert_eq!(entry_home(&d, b"k"), (true, b"aaaa".to_vec()));
        assert_eq!(d.get(b"k", false), value("bbbb", 2, false));
        // get_stale takes the lock, and reads the home slot
        assert_eq!(d.get(b"k", true), value("bbbb", 2, false));
        assert_eq!(d.ttl(b"k"), Some(0));
        // another key taking the slot gives the value back to the entry
        let mut i = 0;
        while entry_home(&d, b"k").0 {
            set_str(&d, format!("other-{i}").as_bytes(), b"x", 0);
            i += 1;
            assert!(i < 1000, "no other key took k's slot");
        }
        assert_eq!(entry_home(&d, b"k"), (false, b"bbbb".to_vec()));
        assert_eq!(d.get(b"k", false), value("bbbb", 2, false));
        // a write of another length takes the lock, and finds the current value's size
        set_str(&d, b"k", b"cc", 3);
        assert_eq!(d.get(b"k", false), value("cc", 3, false));
        // replace at home; add is refused as for any live key
        set_str(&d, b"k", b"dd", 3);
        assert_eq!(
            d.store_str(Mode::Replace, false, b"k", b"ee", 0, 4),
            Some(Ok(Written { forcible: false }))
        );
        assert_eq!(
            d.store_str(Mode::Add, false, b"k", b"ff", 0, 4),
            Some(Err(refused("exists")))
        );
        assert_eq!(d.get(b"k", false), value("ee", 4, false));
        // a TTL takes the lock and ends the home: the entry has the value
        d.store_str(Mode::Set, false, b"k", b"gg", ttl_ns(60.0), 5)
            .unwrap()
            .unwrap();
        assert_eq!(entry_home(&d, b"k"), (false, b"gg".to_vec()));
        assert_eq!(d.get(b"k", false), value("gg", 5, false));
    }

    #[test]
    fn every_locked_write_of_a_key_at_home_starts_from_its_current_value() {
        let d = Dict::new(1 << 20, 1);
        let at_home = |k: &[u8]| {
            set_str(&d, k, b"0000", 0);
            set_str(&d, k, b"1111", 7);
            assert!(entry_home(&d, k).0);
        };
        at_home(b"k");
        assert!(d.expire(b"k", ttl_ns(60.0)));
        assert_eq!(d.get(b"k", true), value("1111", 7, false));
        at_home(b"k");
        assert_eq!(
            d.incr(b"k", Number::Int(1), None),
            Err(refused("not a number"))
        );
        assert_eq!(d.get(b"k", false), value("1111", 7, false));
        at_home(b"k");
        assert_eq!(
            d.push(b"k", Item::Num(Number::Int(1)), true),
            Err(refused("value not a list"))
        );
        assert_eq!(d.get(b"k", true), value("1111", 7, false));
        at_home(b"k");
        d.store(Mode::Set, false, b"k", None, 0, 0).unwrap();
        assert_eq!(d.get(b"k", true), Got::Missing);
        // flush_all: the values at home are what get_stale reads afterwards
        at_home(b"a");
        at_home(b"b");
        for k in ["c", "d", "e", "f"] {
            set_str(&d, k.as_bytes(), b"cdef", 0);
        }
        at_home(b"a");
        at_home(b"b");
        d.flush_all();
        // (get_stale only: a get would remove expired entries, which all are now)
        assert_eq!(d.get(b"a", true), value("1111", 7, true));
        assert_eq!(d.get(b"b", true), value("1111", 7, true));
    }

    #[test]
    fn a_set_at_home_removes_an_expired_entry_as_a_locked_set_does() {
        let d = Dict::new(1 << 20, 1);
        d.store(Mode::Set, false, b"old", Some(s("x")), ttl_ns(1.0), 0)
            .unwrap();
        set_str(&d, b"k", b"aaaa", 0);
        set_str(&d, b"k", b"bbbb", 0);
        assert_eq!(
            entry_home(&d, b"k"),
            (true, b"aaaa".to_vec()),
            "done at home"
        );
        d.advance(2.0);
        // "old", at the least recently used end, has expired: this set goes through the lock
        set_str(&d, b"k", b"cccc", 0);
        assert_eq!(d.get(b"old", true), Got::Missing, "removed by the set");
        assert_eq!(d.get(b"k", false), value("cccc", 0, false));
    }

    #[test]
    fn flush_all_removes_the_three_least_recently_used_entries_at_once() {
        let d = Dict::new(1 << 20, 1);
        for k in ["k1", "k2", "k3", "k4", "k5"] {
            d.store(Mode::Set, false, k.as_bytes(), Some(s("v")), 0, 0)
                .unwrap();
        }
        assert!(got(&d, "k1").is_some()); // used: k2, k3 and k4 are the least recently used
        d.flush_all();
        for k in ["k2", "k3", "k4"] {
            assert_eq!(d.get(k.as_bytes(), true), Got::Missing, "{k}");
        }
        for k in ["k1", "k5"] {
            assert!(matches!(
                d.get(k.as_bytes(), true),
                Got::Value { stale: true, .. }
            ));
        }
        assert_eq!(d.flush_expired(0), 2);
        assert_eq!(d.free_space(), d.capacity());
        // with several shards, three in all
        let d = Dict::new(1 << 20, 4);
        for i in 0..20 {
            d.store(
                Mode::Set,
                false,
                format!("k{i}").as_bytes(),
                Some(s("v")),
                0,
                0,
            )
            .unwrap();
        }
        d.flush_all();
        assert_eq!(d.flush_expired(0), 17);
    }

    #[test]
    fn add_and_replace_of_nil_answer_as_ngx_does_and_change_nothing() {
        let d = Dict::new(1 << 20, 1);
        d.store(Mode::Set, false, b"k", Some(s("v")), 0, 0).unwrap();
        for mode in [Mode::Add, Mode::Replace] {
            for k in [&b"k"[..], b"missing"] {
                assert_eq!(d.store(mode, false, k, None, 0, 0), Err(refused(NIL_ADD)));
            }
        }
        assert_eq!(got(&d, "k"), Some(s("v")));
        assert_eq!(got(&d, "missing"), None);
    }

    #[test]
    fn an_incr_to_nan_is_refused_and_keeps_the_old_value() {
        let d = Dict::new(1 << 20, 1);
        let inf = Scalar::Num(Number::Float(f64::INFINITY));
        d.store(Mode::Set, false, b"k", Some(inf.clone()), 0, 0)
            .unwrap();
        let minus_inf = Number::Float(f64::NEG_INFINITY);
        assert_eq!(d.incr(b"k", minus_inf, None), Err(refused(NAN_SUM)));
        assert_eq!(got(&d, "k"), Some(inf));
        let init = Some((Number::Float(f64::INFINITY), 0));
        assert_eq!(d.incr(b"new", minus_inf, init), Err(refused(NAN_SUM)));
        assert_eq!(got(&d, "new"), None);
    }

    #[test]
    fn a_failed_write_keeps_the_old_value() {
        let d = Dict::new(200, 1);
        d.store(Mode::Set, false, b"k", Some(s("small")), 0, 0)
            .unwrap();
        let big = Scalar::Str(vec![b'x'; 300].into());
        assert_eq!(
            d.store(Mode::Set, false, b"k", Some(big), 0, 0)
                .unwrap_err()
                .err,
            "no memory"
        );
        assert_eq!(got(&d, "k"), Some(s("small")));
    }

    #[test]
    fn accounting_returns_to_zero_after_every_kind_of_removal() {
        let d = Dict::new(1 << 16, 4);
        for i in 0..50u32 {
            let k = format!("k{i}");
            d.store(Mode::Set, false, k.as_bytes(), Some(s("value")), 0, 0)
                .unwrap();
            d.push(format!("l{i}").as_bytes(), Item::Num(Number::Int(1)), true)
                .unwrap();
            d.incr(
                format!("n{i}").as_bytes(),
                Number::Int(1),
                Some((Number::Int(0), 0)),
            )
            .unwrap();
        }
        for i in 0..50u32 {
            d.store(Mode::Set, false, format!("k{i}").as_bytes(), None, 0, 0)
                .unwrap();
            assert!(d.pop(format!("l{i}").as_bytes(), false).unwrap().is_some());
        }
        d.flush_all();
        d.flush_expired(0);
        assert_eq!(d.free_space(), d.capacity());
    }

    #[test]
    fn threads_evicting_from_each_others_shards_keep_the_accounting_exact() {
        let d = std::sync::Arc::new(Dict::new(8192, 4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for i in 0..3000u32 {
                        let k = format!("t{t}-{}", i % 97);
                        let v = Scalar::Str(vec![b'x'; (i % 300) as usize].into());
                        let _ = d.store(Mode::Set, i % 5 == 0, k.as_bytes(), Some(v), 0, 0);
                        let _ =
                            d.push(b"shared-list", Item::Num(Number::Int(i as i64)), i % 2 == 0);
                        if i % 3 == 0 {
                            let _ = d.pop(b"shared-list", true);
                        }
                        assert!(d.free_space() <= d.capacity());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let used: usize = d
            .shards
            .iter()
            .map(|s| s.map.read().iter().map(|(_, e)| e.size).sum::<usize>())
            .sum();
        assert_eq!(d.capacity() - d.free_space(), used);
        d.flush_all();
        d.flush_expired(0);
        assert_eq!(d.free_space(), d.capacity());
    }

    #[test]
    fn threads_hammering_the_same_keys_keep_counts_exact() {
        let d = std::sync::Arc::new(Dict::new(1 << 20, 8));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for i in 0..2000 {
                        let k = format!("c{}", i % 10);
                        d.incr(k.as_bytes(), Number::Int(1), Some((Number::Int(0), 0)))
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let total: i64 = (0..10)
            .map(|i| match got(&d, &format!("c{i}")) {
                Some(Scalar::Num(Number::Int(n))) => n,
                other => panic!("{other:?}"),
            })
            .sum();
        assert_eq!(total, 8000);
    }
}
