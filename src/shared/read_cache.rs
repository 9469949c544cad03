//! A shard's read cache: the current value of recently written keys, readable without taking
//! the shard's lock, and the home of short strings that `set` rewrites without it.
//!
//! Why: a `get` under the shard's read lock writes the lock's word twice (taking and releasing
//! it). With several threads reading the same keys, that cache line moves between the CPUs on
//! nearly every `get`, and reads stop scaling with threads (bench/probes/shared.lua, "scaling"). A hit
//! here writes nothing shared.
//!
//! Each slot is a sequence lock over atomic words, so it is sound in Rust: readers load the
//! sequence, the words and the sequence again, and use what they read only if the sequence was
//! even and did not change. A writer takes the slot by moving its sequence from even to odd with
//! a compare-and-swap ([`acquire`]) and gives it back at the next even value. The holder of the
//! shard's write lock writes slots, and the dictionary keeps them in step with its map: every
//! write of a key ends by publishing the key's new state (or an empty slot), and every removal
//! of another key (eviction, expiry, flush) forgets that key's slot. A key whose slot another key
//! took, a value that does not fit, a list and an expired entry go to the locked path, which is
//! always right.
//!
//! **Home slots.** A published string without a TTL makes the slot its key's *home* ([`HOME`]):
//! then a `set` of a string of the same length writes the slot only ([`ReadCache::rewrite`]),
//! without the shard's lock and without the entry, and the slot holds the current value while
//! the entry's copy may be older. A set that takes the lock writes three cache lines (the lock's
//! word, the slot, the value's bytes), each of which the other CPUs then fetch again; a set at
//! home writes one. The dictionary's locked paths honour it: a write of the key, or of another
//! key taking its slot, first puts the value back into the entry ([`ReadCache::begin`]); a
//! locked read of a home entry reads the slot ([`ReadCache::read_home`]); `flush_all` takes every
//! value home first ([`ReadCache::take_home`]).
//!
//! A hit marks the slot as referenced, the CLOCK bit that eviction reads (`Dict`'s
//! `pop_victim`); the dictionary moves that bit onto the entry before the slot changes hands.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

/// A value as a slot stores it (the dictionary's scalars, without depending on its types).
#[derive(Clone, Copy)]
pub enum Value<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a [u8]),
}

/// Longest key a slot holds, and longest string value: 6 words of 8 bytes.
pub const WORDS: usize = 6;
pub const BYTES: usize = WORDS * 8;
/// Most slots per shard (within a quarter of the capacity: `Dict::new`); with 256, about a fifth
/// of 1,000 keys in 16 shards shared a slot with another key and took the lock.
pub const MAX_SLOTS: usize = 1024;
/// Fewest slots per shard.
pub const MIN_SLOTS: usize = 4;

const EMPTY: u64 = 0;
const FALSE: u64 = 1;
const TRUE: u64 = 2;
const INT: u64 = 3;
const FLOAT: u64 = 4;
const STR: u64 = 5;
/// In `meta`: the slot is the home of its key's value (a string without TTL). Never set on a
/// slot that a holder of the shard's lock has begun writing ([`ReadCache::begin`] clears it),
/// which is how [`acquire`] tells a rewrite in progress from the lock holder's own write.
const HOME: u64 = 1 << 24;

/// One key's state: 128 bytes, one x86 line pair, so that slots do not share lines.
///
/// In this order (`repr(C)`), with the key's and the value's words taking turns, a key and a
/// string of up to 16 bytes each are on the slot's first 64-byte line with everything else a
/// read or a write touches: such a read or write then reaches one line, not two (a `set` that
/// writes both lines takes about twice as long in nginx).
#[repr(C, align(128))]
#[derive(Default)]
struct Slot {
    /// Odd while the slot is being written.
    seq: AtomicU64,
    /// Kind (bits 0-7), key length (8-15), string length (16-23), [`HOME`] (24), flags (32-63).
    meta: AtomicU64,
    expires: AtomicU64,
    /// Set by hits (only when clear, so readers do not take turns writing the line).
    referenced: AtomicBool,
    /// Key word i at 2i, value word i at 2i + 1.
    words: [AtomicU64; 2 * WORDS],
}

// the layout the comment above describes: exactly one line pair
const _: () = assert!(std::mem::size_of::<Slot>() == 128);

impl Slot {
    fn key(&self, i: usize) -> &AtomicU64 {
        &self.words[2 * i]
    }

    fn value(&self, i: usize) -> &AtomicU64 {
        &self.words[2 * i + 1]
    }
}

/// A value read from a slot, with its flags.
pub struct Hit {
    pub value: HitValue,
    pub flags: u32,
}

pub enum HitValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str { bytes: [u8; BYTES], len: usize },
}

impl HitValue {
    /// A string's bytes (empty for other kinds).
    pub fn bytes(&self) -> &[u8] {
        match self {
            HitValue::Str { bytes, len } => &bytes[..*len],
            _ => &[],
        }
    }
}

/// What [`ReadCache::begin`] tells the dictionary about the key whose slot it takes (that key
/// itself included).
pub struct Occupant<'a> {
    /// Another key's read mark, taken off the slot: the entry keeps it.
    pub touched: bool,
    /// The key's current value and flags, when the slot was its home: the entry takes them back.
    pub home: Option<(&'a [u8], u32)>,
}

/// How many words hold `len` bytes.
fn words_for(len: usize) -> usize {
    len.div_ceil(8)
}

/// Word `i` of `bytes` (little-endian, the last one zero-padded), `i < words_for(bytes.len())`.
/// Read straight from the bytes, without packing them into a buffer first: loading words from
/// bytes just stored one by one stalls the CPU, and the buffer's zeroing and copies were most of
/// a publication's instructions (callgrind).
fn word(bytes: &[u8], i: usize) -> u64 {
    match bytes.get(8 * i..8 * i + 8) {
        Some(c) => u64::from_le_bytes(c.try_into().unwrap_or_default()),
        None => short_word(bytes.get(8 * i..).unwrap_or_default()),
    }
}

/// 1 to 7 bytes as a little-endian word: two loads that overlap in the middle (the bytes they
/// share land on the same bits), instead of a loop over the bytes.
fn short_word(b: &[u8]) -> u64 {
    let n = b.len();
    let le32 = |i: usize| u64::from(u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]));
    let le16 = |i: usize| u64::from(u16::from_le_bytes([b[i], b[i + 1]]));
    match n {
        4..=7 => le32(0) | (le32(n - 4) << (8 * (n - 4))),
        2 | 3 => le16(0) | (le16(n - 2) << (8 * (n - 2))),
        1 => u64::from(b[0]),
        _ => 0,
    }
}

/// The bytes of `words` (made by [`word`]).
fn unpack(words: &[u64; WORDS]) -> [u8; BYTES] {
    let mut buf = [0u8; BYTES];
    for (b, w) in buf.chunks_exact_mut(8).zip(words) {
        b.copy_from_slice(&w.to_le_bytes());
    }
    buf
}

pub struct ReadCache {
    slots: Box<[Slot]>,
}

impl ReadCache {
    /// `slots` is rounded down to a power of two within [`MIN_SLOTS`, `MAX_SLOTS`].
    pub fn new(slots: usize) -> ReadCache {
        let n = slots.clamp(MIN_SLOTS, MAX_SLOTS);
        let n = 1usize << (usize::BITS - 1 - n.leading_zeros());
        ReadCache {
            slots: (0..n).map(|_| Slot::default()).collect(),
        }
    }

    fn slot(&self, hash: u64) -> &Slot {
        // the high bits chose the shard: take the slot from the low ones
        &self.slots[hash as usize & (self.slots.len() - 1)]
    }

    /// The live value cached for `key`, or `None` (not cached, being written, or expired at
    /// `now()`, which is only called for a value with a TTL): then the caller takes the lock.
    pub fn read(&self, hash: u64, key: &[u8], now: impl FnOnce() -> u64) -> Option<Hit> {
        let slot = self.slot(hash);
        let Snapshot::Held {
            meta,
            expires,
            value,
        } = snapshot(slot, key)
        else {
            return None;
        };
        if expires != 0 && expires <= now() {
            return None;
        }
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        Some(hit(meta, &value))
    }

    /// `key`'s value in its home slot, for a reader that holds the shard's lock and whose entry
    /// says the slot is the key's home: waits out a [`ReadCache::rewrite`] in progress (no
    /// other writer can run while the lock is held). `None` if the slot is not the key's home,
    /// which the entry should not have said (then its own copy is current).
    pub fn read_home(&self, hash: u64, key: &[u8]) -> Option<Hit> {
        let slot = self.slot(hash);
        let mut spins = 0;
        loop {
            match snapshot(slot, key) {
                Snapshot::Busy => backoff(&mut spins),
                Snapshot::Held { meta, value, .. } if meta & HOME != 0 => {
                    return Some(hit(meta, &value))
                }
                _ => return None,
            }
        }
    }

    /// A `set` of `key` to a string as long as the one its home slot holds, done in the slot
    /// alone: without the shard's lock and without the entry (see [`HOME`]). The flags are
    /// rewritten too; the slot is marked as read, as any rewrite in place marks its entry.
    /// False, having changed nothing, when the slot is not `key`'s home with a string of that
    /// length, or someone is writing it, or `may` (asked only when all else allows the rewrite,
    /// so that its cost, a clock read, is paid by rewrites alone) says no: then the caller takes
    /// the lock.
    pub fn rewrite(
        &self,
        hash: u64,
        key: &[u8],
        value: &[u8],
        flags: u32,
        may: impl FnOnce() -> bool,
    ) -> bool {
        let slot = self.slot(hash);
        let s = slot.seq.load(Ordering::Acquire);
        if s & 1 == 1 {
            return false;
        }
        let meta = slot.meta.load(Ordering::Relaxed);
        if meta & (HOME | 0xff) != HOME | STR
            || (meta >> 16) & 0xff != value.len() as u64
            || !holds_key(slot, meta, key)
            || !may()
        {
            return false;
        }
        // what was read above is what the slot holds if the sequence has not moved since
        if slot
            .seq
            .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // the odd sequence is visible before any of the writes that follow
        fence(Ordering::Release);
        for i in 0..words_for(value.len()) {
            slot.value(i).store(word(value, i), Ordering::Relaxed);
        }
        let with_flags = (meta & 0xffff_ffff) | (u64::from(flags) << 32);
        if with_flags != meta {
            slot.meta.store(with_flags, Ordering::Relaxed);
        }
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        slot.seq.store(s + 2, Ordering::Release);
        true
    }

    /// Starts the write of `key`'s slot (the caller holds the shard's write lock and ends it
    /// with [`ReadCache::end`]). If the slot was a key's home (`key`'s own, or another's), or
    /// another key in it was read since eviction last passed it, calls `occupant` with that key
    /// first, so that its entry takes back its value and keeps its CLOCK bit. The mark of `key`
    /// itself stays on the slot: the key was used, and leaving the bit as it is spares the
    /// readers' next hits a write to the line.
    pub fn begin(&self, hash: u64, key: &[u8], occupant: impl FnOnce(&[u8], Occupant)) {
        let slot = self.slot(hash);
        if acquire(slot).is_none() {
            return; // already being written by this lock holder: nothing to start
        }
        let meta = slot.meta.load(Ordering::Relaxed);
        let home = meta & HOME != 0;
        let touched = slot.referenced.load(Ordering::Relaxed) && !holds_key(slot, meta, key);
        if touched {
            slot.referenced.store(false, Ordering::Relaxed);
        }
        if !(home || touched) {
            return;
        }
        if let Some((bytes, len)) = self.occupant(slot) {
            let value = home.then(|| hit(meta, &value_words(slot, meta)));
            let home = value.as_ref().map(|h| (h.value.bytes(), h.flags));
            occupant(&bytes[..len], Occupant { touched, home });
        }
        slot.meta.store(meta & !HOME, Ordering::Relaxed);
    }

    /// Ends a write begun with [`ReadCache::begin`]: the slot holds `key`'s `state` (value,
    /// flags, expiry), or nothing when `state` is `None` or does not fit. Returns whether the
    /// slot became the key's home (a string without TTL): the entry must then say so.
    pub fn end(&self, hash: u64, key: &[u8], state: Option<(Value, u32, u64)>) -> bool {
        let slot = self.slot(hash);
        // begun: the sequence is odd already; not begun (a caller that only ends): take it now
        let s = match acquire(slot) {
            Some(even) => even + 1,
            None => slot.seq.load(Ordering::Relaxed),
        };
        let fits = |v: &Value| !matches!(v, Value::Str(b) if b.len() > BYTES);
        let mut home = false;
        match state {
            Some((v, flags, expires)) if key.len() <= BYTES && fits(&v) => {
                // only the words the key and the value need: readers compare and copy no more
                // (the lengths are in `meta`), so words past them may keep older bytes
                for i in 0..words_for(key.len()) {
                    slot.key(i).store(word(key, i), Ordering::Relaxed);
                }
                let (kind, len) = match v {
                    Value::Bool(false) => (FALSE, 0),
                    Value::Bool(true) => (TRUE, 0),
                    Value::Int(i) => {
                        slot.value(0).store(i as u64, Ordering::Relaxed);
                        (INT, 0)
                    }
                    Value::Float(f) => {
                        slot.value(0).store(f.to_bits(), Ordering::Relaxed);
                        (FLOAT, 0)
                    }
                    Value::Str(b) => {
                        for i in 0..words_for(b.len()) {
                            slot.value(i).store(word(b, i), Ordering::Relaxed);
                        }
                        home = expires == 0;
                        (STR, b.len())
                    }
                };
                let meta = kind
                    | ((key.len() as u64) << 8)
                    | ((len as u64) << 16)
                    | if home { HOME } else { 0 }
                    | (u64::from(flags) << 32);
                slot.meta.store(meta, Ordering::Relaxed);
                slot.expires.store(expires, Ordering::Relaxed);
            }
            _ => {
                slot.meta.store(EMPTY, Ordering::Relaxed);
                // an empty slot carries no mark (so the next key in it does not inherit one)
                if slot.referenced.load(Ordering::Relaxed) {
                    slot.referenced.store(false, Ordering::Relaxed);
                }
            }
        }
        slot.seq.store(s + 1, Ordering::Release);
        home
    }

    /// Empties `key`'s slot if it holds `key` (the caller holds the shard's write lock and has
    /// removed the entry, so a value at home there goes with it). A slot being written by that
    /// same caller is left to its `end`.
    pub fn forget(&self, hash: u64, key: &[u8]) {
        let slot = self.slot(hash);
        // the key's words do not change under a rewrite: no need to take the slot to look
        if !self.holds(slot, key) {
            return;
        }
        if let Some(s) = acquire(slot) {
            if self.holds(slot, key) {
                clear(slot);
            }
            slot.seq.store(s + 2, Ordering::Release);
        }
    }

    /// Empties every slot (the caller holds the shard's write lock and has taken every value
    /// home back into its entry with [`ReadCache::take_home`]).
    pub fn forget_all(&self) {
        for slot in self.slots.iter() {
            if let Some(s) = acquire(slot) {
                clear(slot);
                slot.seq.store(s + 2, Ordering::Release);
            }
        }
    }

    /// `key`'s value and flags if its slot is its home, which the slot stops being: the caller,
    /// holding the shard's write lock, puts them back into the entry.
    pub fn take_home(&self, hash: u64, key: &[u8]) -> Option<Hit> {
        let slot = self.slot(hash);
        let s = acquire(slot)?;
        let meta = slot.meta.load(Ordering::Relaxed);
        let taken = (meta & HOME != 0 && holds_key(slot, meta, key)).then(|| {
            slot.meta.store(meta & !HOME, Ordering::Relaxed);
            hit(meta, &value_words(slot, meta))
        });
        slot.seq.store(s + 2, Ordering::Release);
        taken
    }

    /// Whether `key`'s slot holds `key` and was read since it was written; clears the mark
    /// (the caller holds the shard's write lock: eviction asking whether to spare the entry).
    pub fn take_referenced(&self, hash: u64, key: &[u8]) -> bool {
        let slot = self.slot(hash);
        self.holds(slot, key)
            && slot.referenced.load(Ordering::Relaxed)
            && slot.referenced.swap(false, Ordering::Relaxed)
    }

    /// The slot's occupant: its key's bytes and length, if any (only the lock holder calls
    /// this, so the words do not change under it).
    fn occupant(&self, slot: &Slot) -> Option<([u8; BYTES], usize)> {
        let meta = slot.meta.load(Ordering::Relaxed);
        if meta & 0xff == EMPTY {
            return None;
        }
        let len = (((meta >> 8) & 0xff) as usize).min(BYTES);
        let words = std::array::from_fn(|i| slot.key(i).load(Ordering::Relaxed));
        Some((unpack(&words), len))
    }

    /// Whether the slot's occupant is `key` (only the lock holder calls this).
    fn holds(&self, slot: &Slot, key: &[u8]) -> bool {
        holds_key(slot, slot.meta.load(Ordering::Relaxed), key)
    }
}

/// Whether `slot`, whose `meta` word is `meta`, holds `key`: not empty, the same length, and the
/// same words, only as many as hold the key (a write stores no more; see [`ReadCache::end`]).
/// The comparison of every read, and of [`ReadCache::holds`].
// always inlined: on `read`'s path a call of its own cost a get about 12 instructions (callgrind)
#[inline(always)]
fn holds_key(slot: &Slot, meta: u64, key: &[u8]) -> bool {
    meta & 0xff != EMPTY
        && (meta >> 8) & 0xff == key.len() as u64
        && key.len() <= BYTES
        && (0..words_for(key.len())).all(|i| slot.key(i).load(Ordering::Relaxed) == word(key, i))
}

/// What a read of a slot saw.
enum Snapshot {
    /// Someone is writing the slot.
    Busy,
    /// The slot holds another key, or nothing.
    Other,
    /// The slot holds the key: its `meta`, expiry and value words, read consistently.
    Held {
        meta: u64,
        expires: u64,
        value: [u64; WORDS],
    },
}

/// A consistent read of `slot` for `key`, without writing anything (the sequence lock's read).
#[inline(always)]
fn snapshot(slot: &Slot, key: &[u8]) -> Snapshot {
    let s1 = slot.seq.load(Ordering::Acquire);
    if s1 & 1 == 1 {
        return Snapshot::Busy;
    }
    let meta = slot.meta.load(Ordering::Relaxed);
    // a reader never trusts what it read before the sequence is checked again below, but a
    // mismatch means "not cached" either way
    if !holds_key(slot, meta, key) {
        return Snapshot::Other;
    }
    let expires = slot.expires.load(Ordering::Relaxed);
    let value = value_words(slot, meta);
    // the loads above happen before the sequence is read again
    fence(Ordering::Acquire);
    if slot.seq.load(Ordering::Relaxed) != s1 {
        return Snapshot::Busy;
    }
    Snapshot::Held {
        meta,
        expires,
        value,
    }
}

/// The length of the string a slot's `meta` describes (0 for other kinds).
fn value_len(meta: u64) -> usize {
    (((meta >> 16) & 0xff) as usize).min(BYTES)
}

/// The words of the value that `slot`, whose `meta` word is `meta`, holds: a number in the
/// first, a string in as many as it needs. Consistent only under the sequence lock (a reader
/// checks the sequence afterwards; a writer holds the slot).
#[inline(always)]
fn value_words(slot: &Slot, meta: u64) -> [u64; WORDS] {
    let mut value = [0u64; WORDS];
    for (i, w) in value
        .iter_mut()
        .enumerate()
        .take(words_for(value_len(meta)).max(1))
    {
        *w = slot.value(i).load(Ordering::Relaxed);
    }
    value
}

/// The value a snapshot's `meta` and words describe.
fn hit(meta: u64, value: &[u64; WORDS]) -> Hit {
    let value = match meta & 0xff {
        FALSE => HitValue::Bool(false),
        TRUE => HitValue::Bool(true),
        INT => HitValue::Int(value[0] as i64),
        FLOAT => HitValue::Float(f64::from_bits(value[0])),
        _ => HitValue::Str {
            bytes: unpack(value),
            len: value_len(meta),
        },
    };
    Hit {
        value,
        flags: (meta >> 32) as u32,
    }
}

/// Takes `slot` for a write by the holder of its shard's write lock: its even sequence, now
/// made odd. Waits out a [`ReadCache::rewrite`] in progress, the only other writer there can
/// be. `None` if this lock holder is writing the slot already (begun and not ended: odd and
/// not a home, see [`HOME`]).
fn acquire(slot: &Slot) -> Option<u64> {
    let mut spins = 0;
    loop {
        let s = slot.seq.load(Ordering::Relaxed);
        if s & 1 == 1 {
            if slot.meta.load(Ordering::Relaxed) & HOME == 0 {
                return None;
            }
            backoff(&mut spins);
            continue;
        }
        if slot
            .seq
            .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // the odd sequence is visible before any of the writes that follow
            fence(Ordering::Release);
            return Some(s);
        }
    }
}

/// Waits a little for a rewrite to end: it takes some nanoseconds, unless its thread lost its
/// CPU in the middle, and then yielding lets it run.
fn backoff(spins: &mut u32) {
    if *spins < 100 {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Empties `slot` (taken by the caller): no key, no mark.
fn clear(slot: &Slot) {
    slot.meta.store(EMPTY, Ordering::Relaxed);
    slot.referenced.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(c: &ReadCache, key: &[u8], v: Value) {
        c.begin(0, key, |_, _| {});
        c.end(0, key, Some((v, 0, 0)));
    }

    fn read_str(c: &ReadCache, key: &[u8]) -> Option<Vec<u8>> {
        c.read(0, key, || 1).map(|h| h.value.bytes().to_vec())
    }

    /// A slot's words past the current key and value keep older bytes (a write stores only the
    /// words it needs); the lengths in `meta` must keep readers from ever using them.
    #[test]
    fn a_shorter_key_or_value_after_a_longer_one_in_the_slot_reads_back_exactly() {
        let c = ReadCache::new(MIN_SLOTS);
        let long_key = b"a-key-of-exactly-forty-bytes-for-a-slot!";
        publish(&c, long_key, Value::Str(&[b'x'; BYTES]));
        assert_eq!(read_str(&c, long_key), Some(vec![b'x'; BYTES]));

        // the same first word as the long key, shorter
        publish(&c, b"a-key-of", Value::Str(b"short"));
        assert_eq!(read_str(&c, b"a-key-of"), Some(b"short".to_vec()));
        assert!(c.read(0, long_key, || 1).is_none(), "the old key is gone");
        // a prefix of the stored key, and the stored key with a byte more, are other keys
        assert!(c.read(0, b"a-key-o", || 1).is_none());
        assert!(c.read(0, b"a-key-of-", || 1).is_none());

        publish(&c, b"a-key-of", Value::Str(b""));
        assert_eq!(read_str(&c, b"a-key-of"), Some(Vec::new()));
        publish(&c, b"a-key-of", Value::Int(-3));
        assert!(matches!(
            c.read(0, b"a-key-of", || 1).map(|h| h.value),
            Some(HitValue::Int(-3))
        ));
        publish(&c, b"a-key-of", Value::Str(b"nine byte"));
        assert_eq!(read_str(&c, b"a-key-of"), Some(b"nine byte".to_vec()));
    }

    #[test]
    fn keys_and_values_longer_than_a_slot_are_not_cached() {
        let c = ReadCache::new(MIN_SLOTS);
        let key = [b'k'; BYTES + 1];
        publish(&c, &key, Value::Bool(true));
        assert!(c.read(0, &key, || 1).is_none());
        publish(&c, b"k", Value::Str(&[b'v'; BYTES + 1]));
        assert!(c.read(0, b"k", || 1).is_none());
        publish(&c, b"k", Value::Str(&[b'v'; BYTES]));
        assert_eq!(read_str(&c, b"k"), Some(vec![b'v'; BYTES]));
    }
}
