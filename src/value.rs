//! How Lua values cross between states: a compact byte format, an encoder that reads the Lua stack
//! directly and a decoder that pushes directly onto it.
//!
//! Past 600 lines because the format has one definition: the tags, the encoder and the decoder
//! of both directions (Lua stack and Rust values, for the tests and fuzzing) must change together.
//!
//! Host and children always run the same Lua build, so the format only has to round-trip within
//! one runtime. A message is a `u32` count followed by that many values:
//!
//! | tag | value | payload |
//! |---|---|---|
//! | 0 | nil | - |
//! | 1 / 2 | false / true | - |
//! | 3 | integer (Lua 5.3+ integer subtype) | `i64` LE |
//! | 4 | float (every number on 5.1 and LuaJIT) | `f64` LE bits (NaN, inf, -0 survive) |
//! | 5 | string | `u32` length, bytes (embedded zeros allowed) |
//! | 6 | table | `u32` array length n, `u32` hash count m, n values, m key/value pairs |
//! | 7 | light userdata | the pointer as `u64` LE |
//! | 8 | table reached again later in the message | as tag 6 |
//! | 9 | that table again | `u32` byte offset of its tag 8 from the message start |
//!
//! A table reached a second time within one message (shared, or a cycle) is sent once: the
//! encoder patches its first tag to 8 and writes a reference (9) for every later visit, so plain
//! trees pay one lookup per table and no extra bytes. The decoder registers a tag-8 table before
//! its contents, so a reference from inside it (a cycle) finds it.
//!
//! A light userdata is a bare pointer that Lua never dereferences. The NULL one is how
//! `ngx.null` and `cjson.null` spell JSON's null, so it must cross; it arrives as the receiving
//! state's NULL light userdata, which compares equal to that state's `ngx.null`/`cjson.null`.
//! Other pointers cross unchanged, as `ngx.run_worker_thread` passes them: every state lives in
//! one process, so the pointer means in the receiver what it meant in the sender (and is as
//! valid, or not, as there).
//!
//! Functions, full userdata, threads and tables nested deeper than [`MAX_DEPTH`]
//! are refused with an error that names the argument or result and the path inside it.
//!
//! The decoder is written to never panic and never trust its input (it is fuzzed, see `fuzz/`):
//! every read is bounds-checked, counts are checked against the bytes left, and table keys that Lua
//! cannot store (nil, NaN) are refused.

use std::ffi::{c_int, c_void};

use crate::lua::{State, TBOOLEAN, TLIGHTUSERDATA, TNIL, TNUMBER, TSTRING, TTABLE};

/// Deepest table nesting that can cross (a table directly in the argument list is depth 1).
pub const MAX_DEPTH: usize = 100;

const TAG_NIL: u8 = 0;
const TAG_FALSE: u8 = 1;
const TAG_TRUE: u8 = 2;
const TAG_INT: u8 = 3;
const TAG_FLOAT: u8 = 4;
const TAG_STR: u8 = 5;
const TAG_TABLE: u8 = 6;
const TAG_LIGHT: u8 = 7;
const TAG_TABLE_SHARED: u8 = 8;
const TAG_REF: u8 = 9;

/// Past this many tables in one message the encoder looks them up in a hash map.
const LINEAR_SEEN: usize = 16;

/// Which list a value belongs to, for error messages.
#[derive(Clone, Copy, Debug)]
pub enum Role<'a> {
    /// Argument `n` (1-based) of the child function `function`.
    Argument(&'a [u8]),
    /// Result of the child function `function`.
    Result(&'a [u8]),
}

/// Why a value cannot cross, with the path inside the value where the problem sits.
#[derive(Debug)]
struct Refusal {
    problem: String,
    /// Path elements, innermost first (they are collected while the recursion unwinds).
    path: Vec<String>,
}

/// Encodes values from a Lua stack. Keep one per thread of use and reuse it: it keeps its
/// scratch space (the tables already encoded in the message, for sharing) between messages.
#[derive(Default)]
pub struct Encoder {
    seen: Seen,
}

/// The tables of the message being encoded, each with the offset of its tag.
#[derive(Default)]
struct Seen {
    list: Vec<(*const c_void, u32)>,
    /// Past [`LINEAR_SEEN`] tables; foldhash, as the dictionary's shards, for pointer keys.
    map: std::collections::HashMap<*const c_void, u32, foldhash::fast::RandomState>,
}

impl Seen {
    fn clear(&mut self) {
        self.list.clear();
        if !self.map.is_empty() {
            self.map.clear();
        }
    }

    /// The offset of `t` if it was seen; else records it at `offset`.
    fn visit(&mut self, t: *const c_void, offset: u32) -> Option<u32> {
        if self.list.len() < LINEAR_SEEN {
            if let Some(&(_, o)) = self.list.iter().find(|(p, _)| *p == t) {
                return Some(o);
            }
            self.list.push((t, offset));
            return None;
        }
        if self.map.is_empty() {
            self.map.extend(self.list.iter().copied());
        }
        match self.map.entry(t) {
            std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(offset);
                None
            }
        }
    }
}

impl Encoder {
    /// An encoder with room for `depth` levels of nesting before it allocates.
    pub fn with_depth(depth: usize) -> Encoder {
        Encoder {
            seen: Seen {
                list: Vec::with_capacity(depth.min(LINEAR_SEEN)),
                map: Default::default(),
            },
        }
    }

    /// Encodes the `count` values starting at stack index `first` into `out` (appending).
    /// The stack is left as it was, also on error.
    pub fn encode(
        &mut self,
        st: State,
        first: c_int,
        count: c_int,
        out: &mut Vec<u8>,
        role: Role<'_>,
    ) -> Result<(), crate::Error> {
        let count = count.max(0);
        let start = out.len();
        out.extend_from_slice(&(count as u32).to_le_bytes());
        self.seen.clear();
        let mut w = Writer {
            out,
            start,
            seen: &mut self.seen,
        };
        for i in 0..count {
            // a failing table restores the stack itself (see `Writer::table`)
            w.value(st, first + i, 0)
                .map_err(|r| describe(role, i + 1, *r))?;
        }
        Ok(())
    }
}

/// Encodes with a fresh [`Encoder`] (tests and cold paths).
pub fn encode_values(
    st: State,
    first: c_int,
    count: c_int,
    out: &mut Vec<u8>,
    role: Role<'_>,
) -> Result<(), crate::Error> {
    Encoder::default().encode(st, first, count, out, role)
}

fn describe(role: Role<'_>, position: c_int, r: Refusal) -> crate::Error {
    let (what, func) = match role {
        Role::Argument(f) => (format!("argument #{position} to"), f),
        Role::Result(f) => (format!("result #{position} of"), f),
    };
    let func = String::from_utf8_lossy(func);
    let at = if r.path.is_empty() {
        String::new()
    } else {
        let mut p: Vec<String> = r.path;
        p.reverse();
        format!(" at {}", p.concat())
    };
    crate::Error::Unsupported(format!(
        "cannot pass {what} '{func}': {}{at} (only nil, boolean, number, string, light userdata such as ngx.null and tables of them nested up to {MAX_DEPTH} levels deep can cross between states)",
        r.problem
    ))
}

struct Writer<'o> {
    out: &'o mut Vec<u8>,
    /// Where the message starts in `out` (references count from there).
    start: usize,
    seen: &'o mut Seen,
}

impl Writer<'_> {
    fn value(&mut self, st: State, idx: c_int, depth: usize) -> Result<(), Refused> {
        match st.type_of(idx) {
            TNIL => self.out.push(TAG_NIL),
            TBOOLEAN => self.out.push(if st.to_boolean(idx) {
                TAG_TRUE
            } else {
                TAG_FALSE
            }),
            TNUMBER => {
                let (tag, bits) = match st.to_integer_exact(idx) {
                    Some(i) => (TAG_INT, i as u64),
                    None => (TAG_FLOAT, st.to_number(idx).to_bits()),
                };
                let b = bits.to_le_bytes();
                self.out
                    .extend_from_slice(&[tag, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            }
            TSTRING => {
                let s = st.string_bytes(idx);
                let len =
                    u32::try_from(s.len()).map_err(|_| refuse("a string longer than 4 GiB"))?;
                let l = len.to_le_bytes();
                // fallible: a big string must be an error, not an abort, when memory runs out
                self.out.try_reserve(5 + s.len()).map_err(|_| {
                    refuse(&format!(
                        "a string of {} bytes (not enough memory to copy it)",
                        s.len()
                    ))
                })?;
                self.out
                    .extend_from_slice(&[TAG_STR, l[0], l[1], l[2], l[3]]);
                self.out.extend_from_slice(s);
            }
            TTABLE => self.table(st, idx, depth)?,
            TLIGHTUSERDATA => {
                let b = (st.to_userdata(idx) as usize as u64).to_le_bytes();
                self.out.extend_from_slice(&[
                    TAG_LIGHT, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                ]);
            }
            other => {
                return Err(refuse(&format!("a {} value", crate::lua::type_name(other))));
            }
        }
        Ok(())
    }

    /// Encodes the table at `idx`; on error the stack is back as it was.
    fn table(&mut self, st: State, idx: c_int, depth: usize) -> Result<(), Refused> {
        let top = st.top();
        let r = self.table_contents(st, idx, depth);
        if r.is_err() {
            st.set_top(top);
        }
        r
    }

    fn table_contents(&mut self, st: State, idx: c_int, depth: usize) -> Result<(), Refused> {
        if depth >= MAX_DEPTH {
            return Err(refuse(&format!(
                "tables nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let idx = st.abs_index(idx);
        let t = st.to_pointer(idx);
        let offset = u32::try_from(self.out.len() - self.start)
            .map_err(|_| refuse("a message larger than 4 GiB"))?;
        if let Some(first) = self.seen.visit(t, offset) {
            self.out[self.start + first as usize] = TAG_TABLE_SHARED;
            let b = first.to_le_bytes();
            self.out
                .extend_from_slice(&[TAG_REF, b[0], b[1], b[2], b[3]]);
            return Ok(());
        }
        if !st.check_stack(4) {
            return Err(refuse("a table nested too deeply for the Lua stack"));
        }
        let n = st.raw_len(idx);
        let narr = u32::try_from(n).map_err(|_| refuse("a table with more than 2^32 elements"))?;
        self.out.push(TAG_TABLE);
        let counts_at = self.out.len();
        self.out.extend_from_slice(&narr.to_le_bytes());
        self.out.extend_from_slice(&0u32.to_le_bytes());

        for i in 1..=n as i64 {
            st.raw_geti(idx, i);
            let r = self.value(st, -1, depth + 1);
            st.pop(1);
            r.map_err(|e| e.within(format!("[{i}]")))?;
        }

        let mut nhash: u32 = 0;
        // the key sits in this slot during the traversal, its value above it; nested encoding only
        // pushes above them (and the labels for errors are only built on error)
        let key = st.top() + 1;
        st.push_nil();
        while st.next(idx) {
            if is_array_key(st, key, n) {
                st.pop(1);
                continue;
            }
            self.value(st, key, depth + 1)
                .map_err(|e| e.within(format!("{} (a key)", key_label(st, key))))?;
            self.value(st, key + 1, depth + 1)
                .map_err(|e| e.within(key_label(st, key)))?;
            st.pop(1);
            nhash = nhash
                .checked_add(1)
                .ok_or_else(|| refuse("a table with more than 2^32 keys"))?;
        }
        self.out[counts_at + 4..counts_at + 8].copy_from_slice(&nhash.to_le_bytes());
        Ok(())
    }
}

/// Boxed so that the encoder's `Result`s stay one word on the (common) success path.
type Refused = Box<Refusal>;

fn refuse(problem: &str) -> Refused {
    Box::new(Refusal {
        problem: problem.to_string(),
        path: Vec::new(),
    })
}

impl Refusal {
    fn within(mut self: Box<Self>, segment: String) -> Refused {
        self.path.push(segment);
        self
    }
}

/// True if the key at `idx` is an integer in `1..=n` (already sent as part of the array).
fn is_array_key(st: State, idx: c_int, n: usize) -> bool {
    if n == 0 || st.type_of(idx) != TNUMBER {
        return false;
    }
    if let Some(i) = st.to_integer_exact(idx) {
        return i >= 1 && (i as u64) <= n as u64;
    }
    let f = st.to_number(idx);
    f >= 1.0 && f <= n as f64 && f.fract() == 0.0
}

/// A short description of a table key for error paths: `.name`, `[3]`, `["a b"]`.
fn key_label(st: State, idx: c_int) -> String {
    match st.type_of(idx) {
        TSTRING => {
            let s = String::from_utf8_lossy(st.to_bytes(idx).unwrap_or_default()).into_owned();
            let ident = !s.is_empty()
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !s.starts_with(|c: char| c.is_ascii_digit());
            if ident {
                format!(".{s}")
            } else {
                format!("[{s:?}]")
            }
        }
        TNUMBER => match st.to_integer_exact(idx) {
            Some(i) => format!("[{i}]"),
            None => format!("[{}]", st.to_number(idx)),
        },
        TBOOLEAN => format!("[{}]", st.to_boolean(idx)),
        TLIGHTUSERDATA => format!("[userdata {:p}]", st.to_userdata(idx)),
        other => format!("[{}]", crate::lua::type_name(other)),
    }
}

/// A decoding failure: the bytes are not a message this encoder produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

/// Receives decoded values. The decoder drives it depth-first; tables are built bottom-up.
pub trait Sink {
    /// Room for `n` more values at the current level (called with the message's value count).
    fn reserve(&mut self, _n: u32) -> Result<(), Corrupt> {
        Ok(())
    }
    fn nil(&mut self) -> Result<(), Corrupt>;
    fn boolean(&mut self, b: bool) -> Result<(), Corrupt>;
    fn integer(&mut self, i: i64) -> Result<(), Corrupt>;
    fn float(&mut self, f: f64) -> Result<(), Corrupt>;
    fn string(&mut self, s: &[u8]) -> Result<(), Corrupt>;
    /// A light userdata: the pointer's address (0 for NULL).
    fn light_userdata(&mut self, address: u64) -> Result<(), Corrupt>;
    /// Starts a table with the given size hints; its elements follow.
    fn begin_table(&mut self, narr: u32, nhash: u32) -> Result<(), Corrupt>;
    /// Stores the value just produced as element `i` of the table being built.
    fn set_index(&mut self, i: u32) -> Result<(), Corrupt>;
    /// Stores the key and value just produced into the table being built.
    fn set_pair(&mut self) -> Result<(), Corrupt>;
    /// The table just begun is shared table number `n` (0-based, in message order).
    fn share(&mut self, _n: u32) -> Result<(), Corrupt> {
        Ok(())
    }
    /// Produces shared table number `n` again (the decoder has checked that it exists).
    fn reference(&mut self, _n: u32) -> Result<(), Corrupt>;
}

/// Decodes a whole message into `sink`; returns the number of values.
pub fn decode_values<S: Sink>(buf: &[u8], sink: &mut S) -> Result<u32, Corrupt> {
    let mut r = Reader::new(buf, 0);
    let count = r.u32()?;
    if count as usize > r.left() {
        return Err(Corrupt("value count larger than the message"));
    }
    sink.reserve(count)?;
    for _ in 0..count {
        decode_one(&mut r, sink, 0)?;
    }
    if r.left() != 0 {
        return Err(Corrupt("trailing bytes after the last value"));
    }
    Ok(count)
}

fn decode_one<S: Sink>(r: &mut Reader<'_>, sink: &mut S, depth: usize) -> Result<(), Corrupt> {
    match r.u8()? {
        TAG_NIL => sink.nil(),
        TAG_FALSE => sink.boolean(false),
        TAG_TRUE => sink.boolean(true),
        TAG_INT => sink.integer(i64::from_le_bytes(r.array()?)),
        TAG_FLOAT => sink.float(f64::from_bits(u64::from_le_bytes(r.array()?))),
        TAG_STR => {
            let len = r.u32()? as usize;
            let s = r.bytes(len)?;
            sink.string(s)
        }
        TAG_LIGHT => sink.light_userdata(u64::from_le_bytes(r.array()?)),
        TAG_REF => {
            let offset = r.u32()?;
            let n = r
                .shared
                .binary_search(&offset)
                .map_err(|_| Corrupt("reference to no shared table"))?;
            sink.reference(n as u32)
        }
        tag @ (TAG_TABLE | TAG_TABLE_SHARED) => {
            let offset = (r.pos - 1) as u32;
            if depth >= MAX_DEPTH {
                return Err(Corrupt("tables nested too deeply"));
            }
            let narr = r.u32()?;
            let nhash = r.u32()?;
            // Every value takes at least one byte: refuse counts the message cannot hold before
            // asking Lua to preallocate them.
            let needed = narr as u64 + 2 * nhash as u64;
            if needed > r.left() as u64 {
                return Err(Corrupt("table larger than the message"));
            }
            sink.begin_table(narr, nhash)?;
            if tag == TAG_TABLE_SHARED {
                // offsets only grow, so the list stays sorted for `binary_search`
                sink.share(r.shared.len() as u32)?;
                r.shared.push(offset);
            }
            for i in 1..=narr {
                decode_one(r, sink, depth + 1)?;
                sink.set_index(i)?;
            }
            for _ in 0..nhash {
                check_key(r)?;
                decode_one(r, sink, depth + 1)?;
                decode_one(r, sink, depth + 1)?;
                sink.set_pair()?;
            }
            Ok(())
        }
        _ => Err(Corrupt("unknown tag")),
    }
}

/// Refuses a table key Lua cannot store (nil, NaN) before it is decoded, so sinks need not
/// inspect what they pushed.
fn check_key(r: &Reader<'_>) -> Result<(), Corrupt> {
    match r.buf.get(r.pos) {
        Some(&TAG_NIL) => Err(Corrupt("nil or NaN table key")),
        Some(&TAG_FLOAT) => {
            let bits = r
                .buf
                .get(r.pos + 1..r.pos + 9)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .ok_or(Corrupt("message ends early"))?;
            if f64::from_bits(u64::from_le_bytes(bits)).is_nan() {
                Err(Corrupt("nil or NaN table key"))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offsets of the shared tables decoded so far, ascending.
    shared: Vec<u32>,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], pos: usize) -> Reader<'a> {
        Reader {
            buf,
            pos,
            shared: Vec::new(),
        }
    }

    fn left(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        let end = self.pos.checked_add(n).ok_or(Corrupt("length overflow"))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(Corrupt("message ends early"))?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corrupt> {
        let s = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, Corrupt> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(Corrupt("message ends early"))?;
        self.pos += 1;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(self.array()?))
    }
}

/// A [`Sink`] that pushes values onto a Lua stack.
///
/// Used inside a protected call on the child side; on the host it can only fail with "not enough
/// memory" (see `lua.rs`). It holds no value with a destructor, so an out-of-memory error that
/// jumps over it leaks nothing.
/// A light userdata's address as a pointer of this machine (only a corrupt message has one that
/// does not fit).
fn light_address(address: u64) -> Result<usize, Corrupt> {
    usize::try_from(address).map_err(|_| Corrupt("light userdata out of range"))
}

pub struct LuaSink {
    st: State,
    /// Stack slot just above the values, where the table of shared tables goes (made on the
    /// first one).
    shared_at: c_int,
    has_shared: bool,
}

impl LuaSink {
    pub fn new(st: State) -> LuaSink {
        LuaSink {
            st,
            shared_at: st.top() + 1,
            has_shared: false,
        }
    }

    /// Drops the table of shared tables once the message is decoded.
    fn finish(&mut self) {
        if self.has_shared {
            self.st.remove(self.shared_at);
            self.has_shared = false;
        }
    }
}

impl Sink for LuaSink {
    fn reserve(&mut self, n: u32) -> Result<(), Corrupt> {
        if self.st.check_stack((n as c_int).saturating_add(2)) {
            Ok(())
        } else {
            Err(Corrupt("Lua stack overflow"))
        }
    }
    fn nil(&mut self) -> Result<(), Corrupt> {
        self.st.push_nil();
        Ok(())
    }
    fn boolean(&mut self, b: bool) -> Result<(), Corrupt> {
        self.st.push_bool(b);
        Ok(())
    }
    fn integer(&mut self, i: i64) -> Result<(), Corrupt> {
        self.st.push_integer(i);
        Ok(())
    }
    fn float(&mut self, f: f64) -> Result<(), Corrupt> {
        self.st.push_number(f);
        Ok(())
    }
    fn string(&mut self, s: &[u8]) -> Result<(), Corrupt> {
        self.st.push_bytes(s);
        Ok(())
    }
    /// Pushes the pointer back. An address that does not fit this machine's pointers (only a
    /// corrupt message has one) is refused.
    fn light_userdata(&mut self, address: u64) -> Result<(), Corrupt> {
        self.st
            .push_light_userdata(light_address(address)? as *mut c_void);
        Ok(())
    }
    /// Pushes the new table; its elements need a key and a value slot above it, and a nested
    /// table's own check covers the levels below.
    fn begin_table(&mut self, narr: u32, nhash: u32) -> Result<(), Corrupt> {
        if !self.st.check_stack(3) {
            return Err(Corrupt("Lua stack overflow"));
        }
        let clamp = |n: u32| n.min(1 << 26) as c_int;
        self.st.create_table(clamp(narr), clamp(nhash));
        Ok(())
    }
    fn set_index(&mut self, i: u32) -> Result<(), Corrupt> {
        self.st.raw_seti(-2, i as i64);
        Ok(())
    }
    /// The decoder has refused nil and NaN keys (`check_key`).
    fn set_pair(&mut self) -> Result<(), Corrupt> {
        self.st.raw_set(-3);
        Ok(())
    }
    /// `begin_table` left room for the two slots this uses.
    fn share(&mut self, n: u32) -> Result<(), Corrupt> {
        if !self.has_shared {
            self.st.create_table(0, 0);
            self.st.insert(self.shared_at);
            self.has_shared = true;
        }
        self.st.push_value(-1);
        self.st.raw_seti(self.shared_at, n as i64 + 1);
        Ok(())
    }
    fn reference(&mut self, n: u32) -> Result<(), Corrupt> {
        if !self.st.check_stack(1) {
            return Err(Corrupt("Lua stack overflow"));
        }
        self.st.raw_geti(self.shared_at, n as i64 + 1);
        Ok(())
    }
}

/// Decodes a message onto the Lua stack; returns the number of values pushed. On error the stack
/// is restored.
pub fn push_values(st: State, buf: &[u8]) -> Result<c_int, Corrupt> {
    let top = st.top();
    let mut sink = LuaSink::new(st);
    match decode_values(buf, &mut sink) {
        Ok(n) => {
            sink.finish();
            Ok(n as c_int)
        }
        Err(e) => {
            st.set_top(top);
            Err(e)
        }
    }
}

/// Pushes a message of at most `max` values that are all nil, booleans, numbers or light
/// userdata, and returns how many; pushes nothing and returns `None` for any other message
/// (strings, tables, more values, or bytes that do not parse). Pushing such values allocates
/// nothing, so it cannot raise: the host pushes them without a protected call, which cost a
/// fifth of the host's instructions per future (bench/results/2026-12-01-futures-host-path.md).
/// The caller must have `max` free stack slots without asking Lua for them (asking may grow the
/// stack, which allocates).
pub fn push_scalars(st: State, buf: &[u8], max: usize) -> Option<c_int> {
    // the whole message through the decoder first: one that does not qualify leaves the stack as
    // it was
    let count = decode_values(buf, &mut ScalarCheck { max }).ok()?;
    let mut r = Reader::new(buf, 4);
    let mut sink = LuaSink::new(st);
    for _ in 0..count {
        // checked above: every value parses and is a scalar (no `reserve`: it may grow the stack)
        let _ = decode_one(&mut r, &mut sink, 0);
    }
    Some(count as c_int)
}

/// Stores nothing; refuses more than `max` values and every value whose push allocates (strings
/// and tables), so that [`push_scalars`] knows before pushing anything.
struct ScalarCheck {
    max: usize,
}

const NOT_SCALARS: Corrupt = Corrupt("not scalars only");

impl Sink for ScalarCheck {
    fn reserve(&mut self, n: u32) -> Result<(), Corrupt> {
        if n as usize > self.max {
            return Err(NOT_SCALARS);
        }
        Ok(())
    }
    fn nil(&mut self) -> Result<(), Corrupt> {
        Ok(())
    }
    fn boolean(&mut self, _: bool) -> Result<(), Corrupt> {
        Ok(())
    }
    fn integer(&mut self, _: i64) -> Result<(), Corrupt> {
        Ok(())
    }
    fn float(&mut self, _: f64) -> Result<(), Corrupt> {
        Ok(())
    }
    fn string(&mut self, _: &[u8]) -> Result<(), Corrupt> {
        Err(NOT_SCALARS)
    }
    fn light_userdata(&mut self, address: u64) -> Result<(), Corrupt> {
        light_address(address).map(drop)
    }
    fn begin_table(&mut self, _: u32, _: u32) -> Result<(), Corrupt> {
        Err(NOT_SCALARS)
    }
    fn set_index(&mut self, _: u32) -> Result<(), Corrupt> {
        Err(NOT_SCALARS)
    }
    fn set_pair(&mut self) -> Result<(), Corrupt> {
        Err(NOT_SCALARS)
    }
    fn reference(&mut self, _: u32) -> Result<(), Corrupt> {
        Err(NOT_SCALARS)
    }
}

/// A Lua value as plain Rust data: what tests, the fuzz target and the benchmarks use to build and
/// check messages without a Lua state.
#[derive(Debug, Clone)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
    /// A light userdata's address (0 is the NULL of `ngx.null` / `cjson.null`).
    Light(u64),
    /// Array part (`1..=n`) and the other key/value pairs.
    Table(Vec<Value>, Vec<(Value, Value)>),
    /// A table that [`Value::Ref`]s in the same message name again (encoded as tag 8).
    Shared(Box<Value>),
    /// The `n`th shared table of the message (0-based, in message order).
    Ref(u32),
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (Nil, Nil) => true,
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            // bit equality: NaN == NaN and -0 != +0, which is what "survives unchanged" means
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Str(a), Str(b)) => a == b,
            (Light(a), Light(b)) => a == b,
            (Shared(a), Shared(b)) => a == b,
            (Ref(a), Ref(b)) => a == b,
            (Table(a1, h1), Table(a2, h2)) => {
                a1 == a2 && h1.len() == h2.len() && h1.iter().all(|p| h2.contains(p))
            }
            _ => false,
        }
    }
}

/// Encodes Rust values into a message (the same format the Lua encoder writes).
pub fn encode_rust(values: &[Value], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    let mut shared = Vec::new();
    for v in values {
        encode_rust_one(v, out, start, &mut shared);
    }
}

/// `shared` collects the offsets of the shared tables written so far, for [`Value::Ref`].
fn encode_rust_one(v: &Value, out: &mut Vec<u8>, start: usize, shared: &mut Vec<u32>) {
    match v {
        Value::Shared(t) => {
            let at = out.len();
            shared.push((at - start) as u32);
            encode_rust_one(t, out, start, shared);
            out[at] = TAG_TABLE_SHARED;
        }
        Value::Ref(n) => {
            // a dangling reference encodes to an offset no table has (tests of the decoder)
            let offset = shared.get(*n as usize).copied().unwrap_or(u32::MAX);
            out.push(TAG_REF);
            out.extend_from_slice(&offset.to_le_bytes());
        }
        Value::Nil => out.push(TAG_NIL),
        Value::Bool(false) => out.push(TAG_FALSE),
        Value::Bool(true) => out.push(TAG_TRUE),
        Value::Int(i) => {
            out.push(TAG_INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Float(f) => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Value::Str(s) => {
            out.push(TAG_STR);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
        Value::Light(p) => {
            out.push(TAG_LIGHT);
            out.extend_from_slice(&p.to_le_bytes());
        }
        Value::Table(arr, hash) => {
            out.push(TAG_TABLE);
            out.extend_from_slice(&(arr.len() as u32).to_le_bytes());
            out.extend_from_slice(&(hash.len() as u32).to_le_bytes());
            for v in arr {
                encode_rust_one(v, out, start, shared);
            }
            for (k, v) in hash {
                encode_rust_one(k, out, start, shared);
                encode_rust_one(v, out, start, shared);
            }
        }
    }
}

/// A [`Sink`] that builds Rust [`Value`]s.
#[derive(Default)]
pub struct RustSink {
    stack: Vec<Value>,
    /// Stack positions of the shared tables still being built (wrapped in `Shared` when done).
    shared_open: Vec<usize>,
}

impl RustSink {
    pub fn into_values(mut self) -> Vec<Value> {
        while let Some(at) = self.shared_open.pop() {
            let t = std::mem::replace(&mut self.stack[at], Value::Nil);
            self.stack[at] = Value::Shared(Box::new(t));
        }
        self.stack
    }

    /// Pops the value just produced; a finished shared table comes out as `Value::Shared`.
    fn pop_value(&mut self) -> Result<Value, Corrupt> {
        let v = self.stack.pop().ok_or(Corrupt("sink underflow"))?;
        if self.shared_open.last() == Some(&self.stack.len()) {
            self.shared_open.pop();
            return Ok(Value::Shared(Box::new(v)));
        }
        Ok(v)
    }
}

impl Sink for RustSink {
    fn nil(&mut self) -> Result<(), Corrupt> {
        self.stack.push(Value::Nil);
        Ok(())
    }
    fn boolean(&mut self, b: bool) -> Result<(), Corrupt> {
        self.stack.push(Value::Bool(b));
        Ok(())
    }
    fn integer(&mut self, i: i64) -> Result<(), Corrupt> {
        self.stack.push(Value::Int(i));
        Ok(())
    }
    fn float(&mut self, f: f64) -> Result<(), Corrupt> {
        self.stack.push(Value::Float(f));
        Ok(())
    }
    fn string(&mut self, s: &[u8]) -> Result<(), Corrupt> {
        self.stack.push(Value::Str(s.to_vec()));
        Ok(())
    }
    fn light_userdata(&mut self, address: u64) -> Result<(), Corrupt> {
        self.stack.push(Value::Light(address));
        Ok(())
    }
    fn begin_table(&mut self, _narr: u32, _nhash: u32) -> Result<(), Corrupt> {
        self.stack.push(Value::Table(Vec::new(), Vec::new()));
        Ok(())
    }
    fn share(&mut self, _n: u32) -> Result<(), Corrupt> {
        self.shared_open.push(self.stack.len() - 1);
        Ok(())
    }
    fn reference(&mut self, n: u32) -> Result<(), Corrupt> {
        self.stack.push(Value::Ref(n));
        Ok(())
    }
    fn set_index(&mut self, _i: u32) -> Result<(), Corrupt> {
        let v = self.pop_value()?;
        match self.stack.last_mut() {
            Some(Value::Table(arr, _)) => {
                arr.push(v);
                Ok(())
            }
            _ => Err(Corrupt("element outside a table")),
        }
    }
    fn set_pair(&mut self) -> Result<(), Corrupt> {
        let v = self.pop_value()?;
        let k = self.pop_value()?;
        match &k {
            Value::Nil => return Err(Corrupt("nil or NaN table key")),
            Value::Float(f) if f.is_nan() => return Err(Corrupt("nil or NaN table key")),
            _ => {}
        }
        match self.stack.last_mut() {
            Some(Value::Table(_, hash)) => {
                hash.push((k, v));
                Ok(())
            }
            _ => Err(Corrupt("pair outside a table")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(values: Vec<Value>) {
        let mut buf = Vec::new();
        encode_rust(&values, &mut buf);
        let mut sink = RustSink::default();
        let n = decode_values(&buf, &mut sink).expect("decodes");
        assert_eq!(n as usize, values.len());
        assert_eq!(sink.into_values(), values);
    }

    #[test]
    fn scalars_round_trip_with_their_bits() {
        roundtrip(vec![
            Value::Nil,
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(i64::MIN),
            Value::Int(i64::MAX),
            Value::Float(f64::NAN),
            Value::Float(f64::INFINITY),
            Value::Float(-0.0),
            Value::Str(b"a\0b".to_vec()),
            Value::Light(0),
            Value::Light(0x7fff_1234_5678),
        ]);
    }

    #[test]
    fn nested_tables_round_trip() {
        let inner = Value::Table(
            vec![Value::Int(1)],
            vec![(Value::Str(b"k".to_vec()), Value::Bool(true))],
        );
        roundtrip(vec![Value::Table(
            vec![inner.clone(), Value::Nil],
            vec![(Value::Int(10), inner)],
        )]);
    }

    #[test]
    fn truncated_messages_are_corrupt_not_panics() {
        let mut buf = Vec::new();
        encode_rust(&[Value::Str(b"hello".to_vec()), Value::Int(5)], &mut buf);
        for cut in 0..buf.len() {
            assert!(
                decode_values(&buf[..cut], &mut RustSink::default()).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn huge_counts_are_refused_before_allocation() {
        let mut buf = 1u32.to_le_bytes().to_vec();
        buf.push(TAG_TABLE);
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        buf.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_values(&buf, &mut RustSink::default()),
            Err(Corrupt("table larger than the message"))
        );
    }

    #[test]
    fn nil_keys_are_refused() {
        let mut buf = 1u32.to_le_bytes().to_vec();
        buf.push(TAG_TABLE);
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes());
        buf.push(TAG_NIL);
        buf.push(TAG_TRUE);
        assert!(decode_values(&buf, &mut RustSink::default()).is_err());
    }
    #[test]
    fn shared_and_cyclic_tables_round_trip_with_their_references() {
        use Value::*;
        // a cycle (shared table 0 refers to itself) and a table shared between two arguments
        let inner = Shared(Box::new(Table(vec![Int(1)], vec![])));
        let cyclic = Shared(Box::new(Table(
            vec![Ref(0), inner],
            vec![(Str(b"again".to_vec()), Ref(1))],
        )));
        roundtrip(vec![cyclic, Ref(1), Ref(0)]);
    }

    #[test]
    fn references_to_no_shared_table_are_corrupt() {
        let mut sink = RustSink::default();
        let mut buf = Vec::new();
        // a reference before any shared table, and one to a plain table's offset
        encode_rust(&[Value::Ref(0)], &mut buf);
        assert!(decode_values(&buf, &mut sink).is_err());
        let mut buf = 2u32.to_le_bytes().to_vec();
        buf.push(TAG_TABLE);
        buf.extend_from_slice(&[0; 8]);
        buf.push(TAG_REF);
        buf.extend_from_slice(&4u32.to_le_bytes());
        assert!(decode_values(&buf, &mut RustSink::default()).is_err());
    }
}
