//! The locks of a dictionary's shards and what their release keeps up to date (the read cache's
//! slot of the key written, the shard's oldest entry's expiry and stamp).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use foldhash::fast::RandomState;
use lru::LruCache;
use parking_lot::{RwLock, RwLockWriteGuard};

use super::clock::Now;
use super::entry::Entry;
use crate::shared::read_cache::ReadCache;

pub(super) type Map = LruCache<Box<[u8]>, Entry, RandomState>;

/// A shard's map on cache lines of its own, away from its lock's word and from the other shards:
/// every get writes the lock word twice (taking and releasing the read lock), and a map header
/// on the same line would then be fetched again by every other reader (128 bytes: x86 fetches
/// lines in pairs).
#[repr(align(128))]
pub(super) struct OwnLines(Map);

impl std::ops::Deref for OwnLines {
    type Target = Map;
    #[inline]
    fn deref(&self) -> &Map {
        &self.0
    }
}

impl std::ops::DerefMut for OwnLines {
    #[inline]
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.0
    }
}

/// A shard: its entries behind a read-write lock, and the read cache that `get` tries first.
pub(super) struct Shard {
    pub(super) map: RwLock<OwnLines>,
    pub(super) cache: ReadCache,
    /// When the shard's least recently used entry expires (0: never, or no entry), as of the
    /// last release of the write lock ([`ShardWrite`]). A `set` done in a home slot without the
    /// lock ([`Dict::store_str`](super::Dict::store_str)) skips the lazy removal of expired entries from that end only
    /// when this says there is none to remove, so that it removes what a locked `set` would.
    pub(super) tail_expires: AtomicU64,
    /// The stamp of the shard's least recently used entry (`u64::MAX`: no entry), as of the last
    /// release of the write lock: eviction picks the shard whose oldest entry is oldest
    /// (`evict.rs`) without locking the others to look.
    pub(super) tail_stamp: AtomicU64,
    /// The dictionary's count of shards whose `tail_expires` is not 0 (shared by its shards):
    /// while it is 0 and the shard at hand has no TTL at its end, nothing anywhere is waiting to
    /// be removed lazily, and no write or `get` looks (`Dict::expire_oldest`).
    pub(super) expiring: Arc<AtomicUsize>,
}

impl Shard {
    pub(super) fn new(slots: usize, expiring: Arc<AtomicUsize>) -> Shard {
        Shard {
            map: RwLock::new(OwnLines(LruCache::unbounded_with_hasher(
                RandomState::default(),
            ))),
            cache: ReadCache::new(slots),
            tail_expires: AtomicU64::new(0),
            tail_stamp: AtomicU64::new(u64::MAX),
            expiring,
        }
    }

    #[inline]
    pub(super) fn write(&self) -> ShardWrite<'_> {
        ShardWrite {
            map: self.map.write(),
            shard: self,
        }
    }

    #[inline]
    pub(super) fn try_write(&self) -> Option<ShardWrite<'_>> {
        Some(ShardWrite {
            map: self.map.try_write()?,
            shard: self,
        })
    }
}

/// The shard's write lock; on release it records when the least recently used entry expires and
/// its stamp (each written only when it changed: the words share a line with what every `get`
/// reads).
pub(super) struct ShardWrite<'a> {
    map: RwLockWriteGuard<'a, OwnLines>,
    shard: &'a Shard,
}

impl std::ops::Deref for ShardWrite<'_> {
    type Target = Map;
    #[inline]
    fn deref(&self) -> &Map {
        &self.map
    }
}

impl std::ops::DerefMut for ShardWrite<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.map
    }
}

impl Drop for ShardWrite<'_> {
    #[inline]
    fn drop(&mut self) {
        let (expires, stamp) = self
            .map
            .peek_lru()
            .map_or((0, u64::MAX), |(_, e)| (e.expires, e.stamp));
        let was = self.shard.tail_expires.load(Ordering::Relaxed);
        if was != expires {
            self.shard.tail_expires.store(expires, Ordering::Relaxed);
            if was == 0 {
                self.shard.expiring.fetch_add(1, Ordering::Relaxed);
            } else if expires == 0 {
                self.shard.expiring.fetch_sub(1, Ordering::Relaxed);
            }
        }
        if self.shard.tail_stamp.load(Ordering::Relaxed) != stamp {
            self.shard.tail_stamp.store(stamp, Ordering::Relaxed);
        }
    }
}

/// A shard locked for writing `key`: its read cache slot is being written for as long as this
/// lives, and when it drops the slot gets the key's new state. Every write of a key goes
/// through one, so no write path can leave the cache behind the map.
pub(super) struct KeyWrite<'a> {
    pub(super) map: ShardWrite<'a>,
    pub(super) cache: &'a ReadCache,
    pub(super) hash: u64,
    pub(super) key: &'a [u8],
    pub(super) now: &'a Now<'a>,
    /// The slot was given the key's state already (the common `set` does it where it has the
    /// entry at hand, saving the lookup below).
    pub(super) published: bool,
}

impl std::ops::Deref for KeyWrite<'_> {
    type Target = Map;
    #[inline]
    fn deref(&self) -> &Map {
        &self.map
    }
}

impl std::ops::DerefMut for KeyWrite<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Map {
        &mut self.map
    }
}

impl Drop for KeyWrite<'_> {
    #[inline]
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
