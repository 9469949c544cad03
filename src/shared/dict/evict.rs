//! A dictionary's room and eviction: nginx's slab pages for its nodes (`slab.rs`: one pool for
//! the whole dictionary, behind a mutex taken only to take or give back a block), and eviction in
//! one least-recently-used order across the shards.
//!
//! Every entry carries a stamp, taken from the dictionary's count when it goes to its shard's most
//! recently used end; each shard publishes its oldest entry's stamp when its write lock is released.
//! Eviction takes the entry with the oldest stamp among the shards' oldest, so that with any
//! number of shards entries go in the order they would with one (ngx has one queue per zone).
//! A used entry (read, or rewritten in place: CLOCK's mark) found there gets a new stamp and goes
//! to its shard's front instead, its second chance. A shard whose lock another thread holds is
//! passed over: a writer holds its own shard's lock and must not wait for another.

use std::hash::BuildHasher;
use std::sync::atomic::Ordering;

use super::clock::Now;
use super::entry::{refused, Entry, Refused, Stored, MAX_EVICTIONS};
use super::lock::Map;
use super::Dict;
use crate::shared::slab::Block;

/// The shard a caller holds locked, and its map.
pub(super) type Held<'a> = Option<(usize, &'a mut Map)>;

/// Second chances one eviction gives before it takes the oldest entry whatever its mark: a pass
/// clears every mark, but readers on other threads can mark entries again as fast as it goes.
const MAX_SPARED: usize = 4096;

/// What the oldest entry of a shard was.
enum Tail {
    Empty,
    /// Used since it was last passed: it went to the front with a new stamp.
    Spared,
    /// Live, and only an expired one was to be removed.
    Live,
    Removed,
}

impl Dict {
    /// A block for a node of `size` bytes, if nginx would find room for one.
    #[inline]
    pub(super) fn alloc(&self, size: usize) -> Option<Block> {
        self.slab.lock().alloc(size)
    }

    /// Gives back the blocks of an entry taken out of its shard: its node and its list's.
    #[inline]
    pub(super) fn release(&self, e: &Entry) {
        let mut slab = self.slab.lock();
        if let Stored::List(l) = &e.value {
            for (_, b) in l {
                slab.free(*b);
            }
        }
        slab.free(e.block);
    }

    /// Puts `entry` at the most recently used end of `map`, with the next stamp.
    #[inline]
    pub(super) fn insert(&self, map: &mut Map, key: Box<[u8]>, mut entry: Entry) {
        entry.stamp = self.ticks.fetch_add(1, Ordering::Relaxed);
        map.push(key, entry);
    }

    /// A block for a node of `size` bytes written into shard `own` (whose lock `map` is), as
    /// nginx finds one: when there is no room, unless `safe`, it evicts (the least recently used
    /// entry, then up to two more if they expired: `ngx_http_lua_shdict_expire(ctx, 0)`) and tries
    /// again, up to [`MAX_EVICTIONS`] times. `Ok` says whether it evicted (`forcible`); so does the
    /// "no memory" refusal, as ngx's does. The entry being written must not be in `map`.
    pub(super) fn make_room(
        &self,
        own: usize,
        map: &mut Map,
        size: usize,
        safe: bool,
        now: &Now,
    ) -> Result<(Block, bool), Refused> {
        if let Some(b) = self.alloc(size) {
            return Ok((b, false));
        }
        if safe {
            return Err(refused("no memory"));
        }
        let mut held = Some((own, map));
        let mut forcible = false;
        for _ in 0..MAX_EVICTIONS {
            let freed = self.evict(&mut held, now);
            if freed == 0 {
                break;
            }
            self.evictions.fetch_add(freed as u64, Ordering::Relaxed);
            forcible = true;
            if let Some(b) = self.alloc(size) {
                return Ok((b, true));
            }
        }
        Err(Refused {
            err: "no memory",
            forcible,
        })
    }

    /// `ngx_http_lua_shdict_expire(ctx, 0)` over the shards: removes the least recently used
    /// entry, then up to two more while the least recently used has expired; how many it removed.
    pub(super) fn evict(&self, held: &mut Held, now: &Now) -> usize {
        if !self.remove_oldest(held, false, now) {
            return 0;
        }
        let mut freed = 1;
        // the next two only if expired: none can be while no shard has a TTL at its end
        while freed < 3 && self.may_expire(held) && self.remove_oldest(held, true, now) {
            freed += 1;
        }
        freed
    }

    /// Whether some shard's oldest entry has a TTL (the held one's looked at directly: its
    /// count is updated when it is released): if none has, nothing is expired at the end of the
    /// order.
    fn may_expire(&self, held: &Held) -> bool {
        self.expiring.load(Ordering::Relaxed) != 0
            || held
                .as_ref()
                .is_some_and(|(_, m)| m.peek_lru().is_some_and(|(_, e)| e.expires != 0))
    }

    /// Removes the dictionary's least recently used entry (only if it expired, with
    /// `expired_only`): the oldest by stamp among the shards' oldest, after the second chances of
    /// those used since. Shard `held` is the caller's, locked; with one held, a shard another
    /// thread has locked is passed over. False if it removed nothing.
    fn remove_oldest(&self, held: &mut Held, expired_only: bool, now: &Now) -> bool {
        let mut passed = [0u64; 4]; // a bit per shard (at most 256)
        let mut spared = 0;
        loop {
            let spare = spared < MAX_SPARED;
            // the oldest stamp: the others' from their atomics (u64::MAX: empty), the held
            // shard's from its map (its atomic is updated when it is released)
            let held_at = held.as_ref().map_or(usize::MAX, |(h, _)| *h);
            let (mut best, mut at) = (u64::MAX, usize::MAX);
            for (i, shard) in self.shards.iter().enumerate() {
                let stamp = shard.tail_stamp.load(Ordering::Relaxed);
                if stamp < best && i != held_at && passed[i / 64] & (1 << (i % 64)) == 0 {
                    (best, at) = (stamp, i);
                }
            }
            if let Some((h, map)) = held {
                let own = map.peek_lru().map_or(u64::MAX, |(_, e)| e.stamp);
                if own < best && passed[*h / 64] & (1 << (*h % 64)) == 0 {
                    (best, at) = (own, *h);
                }
            }
            if best == u64::MAX {
                return false;
            }
            let i = at;
            let is_held = matches!(held, Some((h, _)) if *h == i);
            if expired_only && !is_held {
                // as of the shard's last release its oldest entry has not expired: no lock
                let at = self.shards[i].tail_expires.load(Ordering::Relaxed);
                if at == 0 || at > now.get() {
                    return false;
                }
            }
            let tail = match held {
                Some((h, map)) if *h == i => self.take_tail(i, map, expired_only, spare, now),
                _ => {
                    let guard = if held.is_some() {
                        self.shards[i].try_write()
                    } else {
                        Some(self.shards[i].write())
                    };
                    match guard {
                        Some(mut map) => self.take_tail(i, &mut map, expired_only, spare, now),
                        None => Tail::Empty,
                    }
                }
            };
            match tail {
                Tail::Removed => return true,
                Tail::Live => return false,
                Tail::Spared => spared += 1,
                Tail::Empty => passed[i / 64] |= 1 << (i % 64),
            }
        }
    }

    /// Shard `own`'s oldest entry (`map` locked): spared if it was used since it was last
    /// passed (and `spare`), else removed, unless `expired_only` and it is live.
    fn take_tail(
        &self,
        own: usize,
        map: &mut Map,
        expired_only: bool,
        spare: bool,
        now: &Now,
    ) -> Tail {
        let cache = &self.shards[own].cache;
        let Some((k, e)) = map.peek_lru() else {
            return Tail::Empty;
        };
        let hash = self.hasher.hash_one(k);
        let hit = cache.take_referenced(hash, k);
        if (e.referenced.swap(false, Ordering::Relaxed) | hit) && spare {
            if let Some((k, e)) = map.pop_lru() {
                self.insert(map, k, e);
            }
            return Tail::Spared;
        }
        if expired_only && !e.expired(now) {
            return Tail::Live;
        }
        let Some((k, e)) = map.pop_lru() else {
            return Tail::Empty;
        };
        cache.forget(hash, &k);
        self.release(&e);
        Tail::Removed
    }

    /// Whether the dictionary's least recently used entry has expired, as of the shards' last
    /// releases (one load when no shard has an entry with a TTL at its end).
    pub(super) fn oldest_expired(&self) -> bool {
        if self.expiring.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let oldest = self
            .shards
            .iter()
            .map(|s| (s.tail_stamp.load(Ordering::Relaxed), s))
            .filter(|(stamp, _)| *stamp != u64::MAX)
            .min_by_key(|(stamp, _)| *stamp);
        oldest.is_some_and(|(_, s)| {
            let at = s.tail_expires.load(Ordering::Relaxed);
            at != 0 && at <= self.now()
        })
    }

    /// Removes the dictionary's least recently used entry if it expired, and the next one too
    /// (`ngx_http_lua_shdict_expire(ctx, 1)`, which ngx does on every write and `get`, so that
    /// expired entries do not pile up). Costs one load when no shard has an entry with a TTL at
    /// its end (the held one is looked at directly: its count is updated when it is released).
    pub(super) fn expire_oldest(&self, held: &mut Held, now: &Now) {
        if !self.may_expire(held) {
            return;
        }
        for _ in 0..2 {
            if !self.remove_oldest(held, true, now) {
                return;
            }
        }
    }
}
