//! One shared dictionary: the data and the semantics of `ngx.shared.DICT`, without Lua; its
//! operations are here, the entries in `entry.rs`, the locks in `lock.rs`, the clock in
//! `clock.rs`, the room and eviction in `evict.rs`.
//!
//! Entries live in shards, each a read-write lock over a map kept in the order entries were added;
//! a key's hash picks its shard, so threads working on different keys rarely meet on a lock, and no
//! operation holds a lock for longer than one entry's work (the whole-dictionary operations lock
//! one shard at a time). Reads (`get`, `get_stale`, `ttl`, `llen`, `get_keys`) share the lock:
//! instead of moving the entry to the front, which is a write, a read sets the entry's `referenced`
//! bit, and so does a write that rewrites a string in place (one of the same length) or `incr`s a
//! number (other writes move the entry to the front); eviction gives a referenced entry a second
//! chance (the CLOCK approximation of least-recently-used). Readers of the same keys on several
//! threads then run side by side instead of queueing on a mutex (bench/probes/shared.lua, "scaling"). Most
//! `get`s take no lock at all: they read the key's slot in the shard's read cache
//! (`read_cache.rs`), which every write of a key updates through [`KeyWrite`] before the lock is
//! released, and every removal of an entry empties. Most `set`s of a short string take no lock
//! either: a string without TTL makes the slot its value's home, and a `set` of a string of the
//! same length is done in the slot ([`Dict::store_str`]; the entry's `home` and `read_cache.rs` say
//! how the locked paths stay right).
//!
//! The capacity is counted as nginx counts a `lua_shared_dict` zone of the same size: in slab
//! pages (`slab.rs`), one pool for the whole dictionary, each entry holding the block its node
//! would take there, so that a dictionary sized for nginx holds as many entries, evicts at the
//! same point and refuses the same writes.
//!
//! What follows `ngx.shared.DICT` (lua-nginx-module's `ngx_http_lua_shdict.c`), so that code written
//! for it behaves the same:
//! - expired entries are invisible to `get` but stay readable by `get_stale` until they are
//!   removed: lazily, up to two from the dictionary's least recently used end on each write,
//!   `llen` and `get` that takes the lock (`evict.rs`), by `flush_expired`, or when their room
//!   is needed (a `get` answered by the read cache leaves it to the next);
//! - a write that finds no room evicts the least recently used entry of the dictionary and up to
//!   two expired ones after it, and tries again, at most [`MAX_EVICTIONS`] times, and reports that
//!   it did (`forcible`), even when it fails in the end; the `safe` writes and list pushes evict
//!   nothing and fail with "no memory" instead; a write that fails has removed the key's old value;
//! - `flush_all` marks every entry expired (still readable by `get_stale`) and then removes up
//!   to three of them at once, from the least recently used end ([`FLUSH_ALL_FREES`]);
//! - `add` and `replace` of nil fail with ngx's "attempt to add or replace nil values";
//! - `incr` keeps the TTL and flags of an existing number; `init_ttl` only applies to the entry
//!   it creates.
//!
//! Where it differs, on purpose: `ttl` and `expire` treat an expired entry as absent (ngx answers
//! for expired entries that happen not to have been removed yet, which depends on timing); the
//! least recently used order is CLOCK's approximation: the oldest entry not used (read or
//! rewritten in place) since eviction last passed it goes first; ngx orders entries both used
//! between evictions by the time of their last use, here they keep the order in which they were
//! added or last passed by eviction.

mod clock;
mod entry;
mod evict;
mod lock;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

// foldhash (hashbrown's own default) instead of std's SipHash, which costs about 190 of a get's
// 2,300 instructions (callgrind). Each dictionary gets its own random seed, which keeps keys
// chosen by outsiders (request data) from colliding on purpose without knowing it; foldhash does
// not claim more than that against a determined attacker.
use foldhash::fast::RandomState;
use parking_lot::{Mutex, RwLockReadGuard};

pub use clock::{ttl_ns, MAX_TTL_NS};
pub use entry::{
    try_copy, Found, Got, Item, Kind, Mode, Number, Refused, Scalar, ValueSink, Written,
    FLUSH_ALL_FREES, ITEM_NODE, MAX_EVICTIONS, MAX_KEY, NAN_SUM, NIL_ADD, NODE,
};

use super::read_cache::{Hit, HitValue, Occupant};
use super::slab::{self, Slab};
use clock::{monotonic_ns, Now};
use entry::{list_node, node_size, refused, Entry, Stored};
use lock::{KeyWrite, Map, OwnLines, Shard};

/// The refusal of a list push without room for the list's own node: ngx answers `false, "no
/// memory"` then (`nil, "no memory"` without room for the element): `forcible` marks it.
fn no_room_for_list() -> Refused {
    Refused {
        err: "no memory",
        forcible: true,
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

pub struct Dict {
    shards: Box<[Shard]>,
    hasher: RandomState,
    capacity: usize,
    /// Where nginx's slab allocator would put each node of the dictionary (`slab.rs`).
    slab: Mutex<Slab>,
    /// How many shards have an entry with a TTL at their least recently used end (see
    /// `Shard::expiring`).
    expiring: Arc<AtomicUsize>,
    /// The count entries' stamps are taken from (`evict.rs`).
    ticks: AtomicU64,
    /// Added to the monotonic clock: lets tests move a dictionary's time forward (`_advance`).
    skew: AtomicU64,
    /// Entries removed to make room for a write (`vmpool.metrics()`).
    evictions: AtomicU64,
}

impl Dict {
    /// A dictionary of `capacity` bytes in `shards` shards (at least 1), as nginx's zone of that
    /// size called by a name of 4 bytes. Panics if the system refuses the memory of its page
    /// table ([`Dict::named`] says so instead).
    pub fn new(capacity: usize, shards: usize) -> Dict {
        Dict::named(capacity, shards, 4).expect("memory for a dictionary's page table")
    }

    /// A dictionary as nginx's zone of `capacity` bytes called by a name of `name_len` bytes
    /// (lua-nginx-module keeps the name in the zone: see `slab.rs`); `None` if the system refuses
    /// the memory of its page table (22 bytes a 4 KiB page).
    pub fn named(capacity: usize, shards: usize, name_len: usize) -> Option<Dict> {
        let shards = shards.max(1);
        // a quarter of the capacity at most goes to the read caches (128 bytes a slot)
        Dict::with_slots(capacity, shards, name_len, capacity / 4 / 128 / shards)
    }

    /// [`Dict::named`] with `slots` read cache slots a shard.
    fn with_slots(capacity: usize, shards: usize, name_len: usize, slots: usize) -> Option<Dict> {
        let slab = Slab::new(capacity, name_len)?;
        let expiring = Arc::new(AtomicUsize::new(0));
        Some(Dict {
            shards: (0..shards)
                .map(|_| Shard::new(slots, expiring.clone()))
                .collect(),
            expiring,
            hasher: RandomState::default(),
            capacity,
            slab: Mutex::new(slab),
            ticks: AtomicU64::new(0),
            skew: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        })
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

    /// Entries removed to make room for a write since the dictionary was created.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Bytes in whole free pages, as ngx counts them: room for new entries of a size class
    /// whose pages have room left is not counted.
    pub fn free_space(&self) -> usize {
        self.slab.lock().free_pages() * slab::PAGE
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

    /// The shard of `key` locked for reading, after the removal of the dictionary's oldest
    /// entries if they expired (`expire = true`; ngx removes them on every `get`), which takes
    /// the locks it needs only when some shard has an entry with a TTL at its end.
    fn read_shard(&self, own: usize, now: &Now, expire: bool) -> RwLockReadGuard<'_, OwnLines> {
        if expire && self.expiring.load(Ordering::Relaxed) != 0 {
            self.expire_oldest(&mut None, now);
        }
        self.shards[own].map.read()
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
        self.expire_oldest(&mut Some((own, &mut *map)), now);
        self.store_locked(own, &mut map, mode, safe, key, value, ttl, flags, now)
    }

    /// [`Dict::store`] of a string the caller still owns, copied only when it must be: a `set` or
    /// `replace` without TTL of a string as long as the one at the key's home slot is written
    /// there without the lock ([`Dict::rewrite_at_home`]); else, under the shard's lock, one as
    /// long as the stored string is written over it ([`Dict::overwrite_string`]); else the bytes
    /// are copied and stored under that same lock, so that the lock, the lazy expiry and the read
    /// cache's publication happen once. `None` when the system refuses the memory for the copy
    /// (nothing changed).
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
        self.expire_oldest(&mut Some((own, &mut *map)), now);
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
    /// shard's lock ([`ReadCache::rewrite`](super::read_cache::ReadCache::rewrite)) when the slot holds a string of the same length and
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
        // a locked set removes the dictionary's oldest entry if it expired: not done here
        shard
            .cache
            .rewrite(hash, key, value, flags, || !self.oldest_expired())
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
                self.release(&old);
            }
            return Ok(Written { forcible: false });
        };
        let size = node_size(key, &value);
        let entry = Entry::new(Stored::Scalar(value), flags, self.deadline(ttl, now));
        self.put(own, map, key, entry, size, safe, now)
    }

    /// The common rewrite of a string, done without allocating: `set` (or `replace` of a live
    /// key) of a string as long as the one stored, whose bytes are overwritten in place (and the
    /// entry marked as used, as any rewrite in place does), in the shard `map` locked for `key`.
    /// Returns `None`, having changed nothing, when that does not apply; [`Dict::store_str`]
    /// then copies the value and stores it.
    ///
    /// Why: a copy per `set` means a `malloc` in the writing thread and a `free` of the old value
    /// under the shard's lock, often of memory another thread allocated, which takes that
    /// thread's allocator arena lock: with several threads writing the same keys, that would be
    /// the dictionary's main cost (bench/probes/shared.lua, "scaling").
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
        // marked (CLOCK's bit, as a read does), not moved to the front: the move writes the
        // entry's neighbours and the shard's list head, lines every other writer then fetches
        e.touch();
        Some(Written { forcible: false })
    }

    /// Puts `entry`, whose node takes `size` bytes, under `key`, replacing what is there. An
    /// entry whose node takes the same room (the same size class, or as many pages) is written over
    /// in its block and moved to the front; otherwise the old entry goes first and a block is
    /// found for the new one, evicting unless `safe`, as ngx does (so a write refused for want of
    /// room has removed the old value, as ngx's has).
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        own: usize,
        map: &mut Map,
        key: &[u8],
        mut entry: Entry,
        size: usize,
        safe: bool,
        now: &Now,
    ) -> Result<Written, Refused> {
        if let Some(e) = map.peek_mut(key) {
            if e.block.span() == slab::span(size) && !matches!(e.value, Stored::List(_)) {
                entry.block = e.block;
                entry.stamp = self.ticks.fetch_add(1, Ordering::Relaxed);
                *e = entry;
                map.promote(key);
                return Ok(Written { forcible: false });
            }
        }
        let k = match map.pop_entry(key) {
            Some((k, old)) => {
                self.release(&old);
                k
            }
            None => Box::from(key),
        };
        let (block, forcible) = self.make_room(own, map, size, safe, now)?;
        entry.block = block;
        self.insert(map, k, entry);
        Ok(Written { forcible })
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
        self.expire_oldest(&mut Some((own, &mut *map)), now);
        // marked, not moved to the front: see `Dict::overwrite_string`
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
        let size = node_size(key, &value);
        let entry = Entry::new(Stored::Scalar(value), 0, self.deadline(init_ttl, now));
        self.put(own, &mut map, key, entry, size, false, now)
            .map(|w| (n, w))
    }

    /// `lpush` (`front`) and `rpush`: returns the list's new length. A missing or expired key
    /// becomes a new list without TTL; a live non-list is "value not a list". Nothing is
    /// evicted, as in ngx: without room for the list's node `Err` says "no memory" with
    /// `forcible` set (ngx answers `false, "no memory"` then), without room for the element
    /// with `forcible` clear (`nil, "no memory"`), and a list left empty is removed.
    pub fn push(&self, key: &[u8], item: Item, front: bool) -> Result<usize, Refused> {
        let now = &self.clock();
        let (own, mut map) = self.write_key(key, now);
        self.expire_oldest(&mut Some((own, &mut *map)), now);
        if map
            .peek(key)
            .is_some_and(|e| !e.expired(now) && !matches!(e.value, Stored::List(_)))
        {
            return Err(refused("value not a list"));
        }
        let (k, mut entry) = match map.pop_entry(key) {
            Some((k, mut e)) if e.expired(now) => {
                if let Stored::List(l) = &mut e.value {
                    // ngx empties an expired list in place and starts it again without TTL
                    let mut slab = self.slab.lock();
                    for (_, b) in l.drain(..) {
                        slab.free(b);
                    }
                    drop(slab);
                    e.expires = 0;
                    (k, e)
                } else {
                    self.release(&e);
                    match self.new_list(key) {
                        Some(e) => (k, e),
                        None => return Err(no_room_for_list()),
                    }
                }
            }
            Some((k, e)) => (k, e),
            _ => match self.new_list(key) {
                Some(e) => (Box::from(key), e),
                None => return Err(no_room_for_list()),
            },
        };
        let Stored::List(list) = &mut entry.value else {
            unreachable!("a list entry")
        };
        let Some(block) = self.alloc(item.size()) else {
            if list.is_empty() {
                self.release(&entry);
            } else {
                self.insert(&mut map, k, entry);
            }
            return Err(refused("no memory"));
        };
        if front {
            list.push_front((item, block));
        } else {
            list.push_back((item, block));
        }
        let len = list.len();
        self.insert(&mut map, k, entry);
        Ok(len)
    }

    /// A new, empty list's entry with its node's block, if there is room for one.
    fn new_list(&self, key: &[u8]) -> Option<Entry> {
        let mut e = Entry::new(Stored::List(VecDeque::new()), 0, 0);
        e.block = self.alloc(list_node(key))?;
        Some(e)
    }

    /// `lpop` (`front`) and `rpop`. An emptied list is removed.
    pub fn pop(&self, key: &[u8], front: bool) -> Result<Option<Item>, Refused> {
        let now = &self.clock();
        let (own, mut map) = self.write_key(key, now);
        self.expire_oldest(&mut Some((own, &mut *map)), now);
        let Some(e) = map.peek_mut(key).filter(|e| !e.expired(now)) else {
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
        if let Some((_, b)) = &item {
            self.slab.lock().free(*b);
        }
        // ngx moves the list to the front, or removes it when it is empty
        if let Some((k, e)) = map.pop_entry(key) {
            if empty {
                self.release(&e);
            } else {
                self.insert(&mut map, k, e);
            }
        }
        Ok(item.map(|(i, _)| i))
    }

    /// `llen`: 0 for a missing or expired key. Removes the oldest entries if expired, as ngx's.
    pub fn llen(&self, key: &[u8]) -> Result<usize, Refused> {
        let now = &self.clock();
        let map = self.read_shard(self.locate(key).0, now, true);
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
        for shard in self.shards.iter() {
            let mut map = shard.write();
            for (k, e) in map.iter_mut() {
                let hash = self.hasher.hash_one(k);
                // values at home go back into their entries, and the slots' marks of reads into
                // the entries' (they are part of the order eviction follows below)
                if e.home {
                    if let Some(h) = shard.cache.take_home(hash, k) {
                        e.take_back(h.value.bytes(), h.flags);
                    }
                    e.home = false;
                }
                if shard.cache.take_referenced(hash, k) {
                    e.touch();
                }
                e.expires = now.get();
            }
            shard.cache.forget_all();
        }
        // the least recently used entry by force, then two more (all have expired now)
        let freed = self.evict(&mut None, now);
        debug_assert!(freed <= FLUSH_ALL_FREES);
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
                    self.release(e);
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
