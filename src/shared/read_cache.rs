//! A shard's read cache: the current value of recently written keys, readable without taking
//! the shard's lock.
//!
//! Why: a `get` under the shard's read lock writes the lock's word twice (taking and releasing
//! it). With several threads reading the same keys, that cache line moves between the CPUs on
//! nearly every `get`, and the dictionary stopped scaling: the host and two pool states on the
//! same 1,000 keys made 0.8-1.3x the operations per second of the host alone on LuaJIT
//! (bench/shared.lua, "scaling"). A hit here writes nothing shared.
//!
//! Each slot is a sequence lock over atomic words, so it is sound in Rust: readers load the
//! sequence, the words and the sequence again, and use what they read only if the sequence was
//! even and did not change. Only the holder of the shard's write lock changes a slot, so there
//! is one writer per slot at a time. The dictionary keeps the slots in step with its map:
//! every write of a key ends by publishing the key's new state (or an empty slot), and every
//! removal of another key (eviction, expiry, flush) forgets that key's slot. A key whose slot
//! another key took, a value that does not fit, a list and an expired entry go to the locked
//! path, which is always right.
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
/// Most slots per shard.
pub const MAX_SLOTS: usize = 256;
/// Fewest slots per shard.
pub const MIN_SLOTS: usize = 4;

const EMPTY: u64 = 0;
const FALSE: u64 = 1;
const TRUE: u64 = 2;
const INT: u64 = 3;
const FLOAT: u64 = 4;
const STR: u64 = 5;

/// One key's state: 128 bytes, one x86 line pair, so that slots do not share lines.
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    /// Odd while the slot is being written.
    seq: AtomicU64,
    /// Kind (bits 0-7), key length (8-15), string length (16-23), flags (32-63).
    meta: AtomicU64,
    expires: AtomicU64,
    key: [AtomicU64; WORDS],
    value: [AtomicU64; WORDS],
    /// Set by hits (only when clear, so readers do not take turns writing the line).
    referenced: AtomicBool,
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

/// `bytes` in words, zero-padded; `None` if longer than [`BYTES`]. Word by word, without a
/// `memcpy` into a buffer: loading words from bytes just stored one by one stalls the CPU (that
/// was most of a publish's time, perf).
fn pack(bytes: &[u8]) -> Option<[u64; WORDS]> {
    if bytes.len() > BYTES {
        return None;
    }
    let mut words = [0u64; WORDS];
    let mut chunks = bytes.chunks_exact(8);
    for (w, c) in words.iter_mut().zip(&mut chunks) {
        *w = u64::from_le_bytes(c.try_into().unwrap_or_default());
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        words[bytes.len() / 8] = short_word(tail);
    }
    Some(words)
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

/// The bytes of `words` (what [`pack`] packed).
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
        let want = pack(key)?;
        let slot = self.slot(hash);
        let s1 = slot.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return None;
        }
        let meta = slot.meta.load(Ordering::Relaxed);
        let expires = slot.expires.load(Ordering::Relaxed);
        let got = load_words(&slot.key);
        let value = load_words(&slot.value);
        // the loads above happen before the sequence is read again
        fence(Ordering::Acquire);
        if slot.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        let kind = meta & 0xff;
        if kind == EMPTY || (meta >> 8) & 0xff != key.len() as u64 || got != want {
            return None;
        }
        if expires != 0 && expires <= now() {
            return None;
        }
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        let value = match kind {
            FALSE => HitValue::Bool(false),
            TRUE => HitValue::Bool(true),
            INT => HitValue::Int(value[0] as i64),
            FLOAT => HitValue::Float(f64::from_bits(value[0])),
            _ => HitValue::Str {
                bytes: unpack(&value),
                len: ((meta >> 16) & 0xff) as usize,
            },
        };
        Some(Hit {
            value,
            flags: (meta >> 32) as u32,
        })
    }

    /// Starts the write of `key`'s slot (the caller holds the shard's write lock and ends it
    /// with [`ReadCache::end`]). If another key in the slot was read since eviction last passed
    /// it, calls `referenced` with that key first, so that its entry keeps its CLOCK bit. The
    /// mark of `key` itself stays on the slot: the key was used, and leaving the bit as it is
    /// spares the readers' next hits a write to the line.
    pub fn begin(&self, hash: u64, key: &[u8], referenced: impl FnOnce(&[u8])) {
        let slot = self.slot(hash);
        let s = slot.seq.load(Ordering::Relaxed);
        if s & 1 == 1 {
            return; // already being written (by this lock holder): nothing to start
        }
        if slot.referenced.load(Ordering::Relaxed) && !self.holds(slot, key) {
            slot.referenced.store(false, Ordering::Relaxed);
            if let Some(words) = self.occupant(slot) {
                let len = ((slot.meta.load(Ordering::Relaxed) >> 8) & 0xff) as usize;
                referenced(&unpack(&words)[..len]);
            }
        }
        slot.seq.store(s + 1, Ordering::Relaxed);
        // the odd sequence is visible before any of the writes that follow
        fence(Ordering::Release);
    }

    /// Ends a write begun with [`ReadCache::begin`]: the slot holds `key`'s `state` (value,
    /// flags, expiry), or nothing when `state` is `None` or does not fit.
    pub fn end(&self, hash: u64, key: &[u8], state: Option<(Value, u32, u64)>) {
        let slot = self.slot(hash);
        let mut s = slot.seq.load(Ordering::Relaxed);
        if s & 1 == 0 {
            // not begun (a caller that only ends): make it odd before writing, as begin does
            s += 1;
            slot.seq.store(s, Ordering::Relaxed);
            fence(Ordering::Release);
        }
        let packed = state.and_then(|(v, flags, expires)| {
            let words = pack(key)?;
            let (kind, len, value) = match v {
                Value::Bool(false) => (FALSE, 0, [0; WORDS]),
                Value::Bool(true) => (TRUE, 0, [0; WORDS]),
                Value::Int(i) => (INT, 0, one(i as u64)),
                Value::Float(f) => (FLOAT, 0, one(f.to_bits())),
                Value::Str(b) => (STR, b.len(), pack(b)?),
            };
            let meta =
                kind | ((key.len() as u64) << 8) | ((len as u64) << 16) | (u64::from(flags) << 32);
            Some((meta, expires, words, value))
        });
        match packed {
            Some((meta, expires, words, value)) => {
                slot.meta.store(meta, Ordering::Relaxed);
                slot.expires.store(expires, Ordering::Relaxed);
                store_words(&slot.key, words);
                store_words(&slot.value, value);
            }
            None => {
                slot.meta.store(EMPTY, Ordering::Relaxed);
                // an empty slot carries no mark (so the next key in it does not inherit one)
                if slot.referenced.load(Ordering::Relaxed) {
                    slot.referenced.store(false, Ordering::Relaxed);
                }
            }
        }
        slot.seq.store(s + 1, Ordering::Release);
    }

    /// Empties `key`'s slot if it holds `key` (the caller holds the shard's write lock and has
    /// removed the entry). A slot being written by that same caller is left to its `end`.
    pub fn forget(&self, hash: u64, key: &[u8]) {
        let slot = self.slot(hash);
        let s = slot.seq.load(Ordering::Relaxed);
        if s & 1 == 0 && self.holds(slot, key) {
            empty(slot, s);
        }
    }

    /// Empties every slot (the caller holds the shard's write lock).
    pub fn forget_all(&self) {
        for slot in self.slots.iter() {
            let s = slot.seq.load(Ordering::Relaxed);
            if s & 1 == 0 {
                empty(slot, s);
            }
        }
    }

    /// Whether `key`'s slot holds `key` and was read since it was written; clears the mark
    /// (the caller holds the shard's write lock: eviction asking whether to spare the entry).
    pub fn take_referenced(&self, hash: u64, key: &[u8]) -> bool {
        let slot = self.slot(hash);
        self.holds(slot, key)
            && slot.referenced.load(Ordering::Relaxed)
            && slot.referenced.swap(false, Ordering::Relaxed)
    }

    /// The key words of the slot's occupant, if any (only the lock holder calls this, so the
    /// words do not change under it).
    fn occupant(&self, slot: &Slot) -> Option<[u64; WORDS]> {
        if slot.meta.load(Ordering::Relaxed) & 0xff == EMPTY {
            return None;
        }
        Some(load_words(&slot.key))
    }

    /// Whether the slot's occupant is `key`: the same length and the same packed words, the
    /// comparison `read` makes.
    fn holds(&self, slot: &Slot, key: &[u8]) -> bool {
        let meta = slot.meta.load(Ordering::Relaxed);
        (meta >> 8) & 0xff == key.len() as u64
            && pack(key).is_some_and(|want| self.occupant(slot) == Some(want))
    }
}

/// Empties `slot`, whose even sequence is `s`, as one write (the caller holds the shard's write
/// lock, and nobody else is writing the slot).
fn empty(slot: &Slot, s: u64) {
    slot.seq.store(s + 1, Ordering::Relaxed);
    fence(Ordering::Release);
    slot.meta.store(EMPTY, Ordering::Relaxed);
    slot.referenced.store(false, Ordering::Relaxed);
    slot.seq.store(s + 2, Ordering::Release);
}

/// A slot's words as they are now (readers check the sequence around this).
fn load_words(words: &[AtomicU64; WORDS]) -> [u64; WORDS] {
    std::array::from_fn(|i| words[i].load(Ordering::Relaxed))
}

/// Writes a slot's words (the caller holds the shard's write lock, the sequence odd).
fn store_words(words: &[AtomicU64; WORDS], values: [u64; WORDS]) {
    for (w, v) in words.iter().zip(values) {
        w.store(v, Ordering::Relaxed);
    }
}

fn one(w: u64) -> [u64; WORDS] {
    let mut v = [0; WORDS];
    v[0] = w;
    v
}
