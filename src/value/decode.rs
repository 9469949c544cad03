//! The decoder: reads a message (the format in `mod.rs`) into a [`Sink`]: the Lua stack
//! ([`LuaSink`]) or Rust values (`rust.rs`); [`push_scalars`] pushes a message of scalars alone.
//! Written to never panic and never trust its input (it is fuzzed, see `fuzz/`): every read is
//! bounds-checked, counts are checked against the bytes left, table keys that Lua cannot store
//! (nil, NaN) are refused, and a function's prototype is only ever taken from the list beside the
//! message (see `func.rs`).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::func::{self, FnCache, Proto};
use super::*;
use crate::lua::State;

/// Decodes a whole message into `sink`; returns the number of values.
pub fn decode_values<S: Sink>(buf: &[u8], sink: &mut S) -> Result<u32, Corrupt> {
    decode_with(buf, &[], sink)
}

/// Decodes a whole message whose functions' prototypes are `protos` (what the encoder's
/// [`Encoder::take_protos`] gave with it); returns the number of values.
pub fn decode_with<S: Sink>(
    buf: &[u8],
    protos: &[Arc<Proto>],
    sink: &mut S,
) -> Result<u32, Corrupt> {
    let mut r = Reader::new(buf);
    r.protos = protos;
    let count = r.u32()? & !HAS_FUNCTIONS;
    if count as usize > r.left() {
        return Err(Corrupt("value count larger than the message"));
    }
    sink.reserve(count)?;
    let mut c = r.rest;
    for _ in 0..count {
        let tag = c.u8()?;
        tagged(&mut c, &mut r, sink, 0, tag)?;
    }
    if !c.is_empty() {
        return Err(Corrupt("trailing bytes after the last value"));
    }
    Ok(count)
}

fn decode_one<S: Sink>(r: &mut Reader<'_>, sink: &mut S, depth: usize) -> Result<(), Corrupt> {
    let mut c = r.rest;
    let tag = c.u8()?;
    tagged(&mut c, r, sink, depth, tag)?;
    r.rest = c;
    Ok(())
}

/// Decodes the value whose tag was just read from `c`: scalars here (inlined into the table loop,
/// so a field of a plain table costs no call of its own), the rest in [`nested`]. `c` is the
/// caller's local copy of `r.rest` (a local stays in registers across the Lua calls, which may
/// unwind, where a field of `r` would be stored back before each); [`nested`] gets it through `r`.
#[inline(always)]
fn tagged<'a, S: Sink>(
    c: &mut &'a [u8],
    r: &mut Reader<'a>,
    sink: &mut S,
    depth: usize,
    tag: u8,
) -> Result<(), Corrupt> {
    if tag == TAG_STR {
        return string(c, sink);
    }
    match tag {
        TAG_INT => sink.integer(i64::from_le_bytes(c.array()?)),
        TAG_FLOAT => sink.float(f64::from_bits(u64::from_le_bytes(c.array()?))),
        TAG_TRUE => sink.boolean(true),
        TAG_FALSE => sink.boolean(false),
        TAG_NIL => sink.nil(),
        _ => {
            r.rest = *c;
            nested(r, sink, depth, tag)?;
            *c = r.rest;
            Ok(())
        }
    }
}

#[inline(always)]
fn string<S: Sink>(c: &mut &[u8], sink: &mut S) -> Result<(), Corrupt> {
    let len = c.u32()? as usize;
    let s = c.bytes(len)?;
    sink.string(s)
}

/// A table key: as [`tagged`], but nil and NaN (which Lua cannot store as keys) are refused before
/// anything is pushed, so sinks need not inspect what they pushed.
#[inline(always)]
fn key<'a, S: Sink>(
    c: &mut &'a [u8],
    r: &mut Reader<'a>,
    sink: &mut S,
    depth: usize,
) -> Result<(), Corrupt> {
    let tag = c.u8()?;
    // most keys of a hash part are strings
    if tag == TAG_STR {
        return string(c, sink);
    }
    match tag {
        TAG_NIL => Err(BAD_KEY),
        TAG_FLOAT => {
            let f = f64::from_bits(u64::from_le_bytes(c.array()?));
            if f.is_nan() {
                Err(BAD_KEY)
            } else {
                sink.float(f)
            }
        }
        tag => tagged(c, r, sink, depth, tag),
    }
}

const BAD_KEY: Corrupt = Corrupt("nil or NaN table key");

/// Tables, functions, references, light userdata and unknown tags.
#[inline(never)]
fn nested<S: Sink>(r: &mut Reader<'_>, sink: &mut S, depth: usize, tag: u8) -> Result<(), Corrupt> {
    match tag {
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
            let offset = (r.pos() - 1) as u32;
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
            let mut c = r.rest;
            for i in 1..=narr {
                let tag = c.u8()?;
                tagged(&mut c, r, sink, depth + 1, tag)?;
                sink.set_index(i)?;
            }
            for _ in 0..nhash {
                key(&mut c, r, sink, depth + 1)?;
                let tag = c.u8()?;
                tagged(&mut c, r, sink, depth + 1, tag)?;
                sink.set_pair()?;
            }
            r.rest = c;
            Ok(())
        }
        tag @ (TAG_FUNC | TAG_FUNC_SHARED) => {
            let offset = (r.pos() - 1) as u32;
            if depth >= MAX_DEPTH {
                return Err(Corrupt("functions nested too deeply"));
            }
            let index = r.u32()?;
            let flags = r.u8()?;
            let nups = r.u8()?;
            // the prototype comes from the list beside the message, never from its bytes
            let proto = r
                .protos
                .get(index as usize)
                .ok_or(Corrupt("a function with no prototype beside the message"))?;
            if nups as usize > r.left() {
                return Err(Corrupt("function larger than the message"));
            }
            sink.begin_function(proto, flags)?;
            if tag == TAG_FUNC_SHARED {
                sink.share(r.shared.len() as u32)?;
                r.shared.push(offset);
            }
            for n in 1..=nups {
                match r.rest.first() {
                    Some(&TAG_ENV) => {
                        r.rest = &r.rest[1..];
                        sink.env_upvalue(n)?;
                    }
                    Some(&TAG_UPJOIN) => {
                        r.rest = &r.rest[1..];
                        let other = r.u32()?;
                        let m = r.u8()?;
                        let shared = r
                            .shared
                            .binary_search(&other)
                            .map_err(|_| Corrupt("upvalue joined to no shared function"))?;
                        sink.join_upvalue(n, shared as u32, m)?;
                    }
                    _ => {
                        decode_one(r, sink, depth + 1)?;
                        sink.set_upvalue(n)?;
                    }
                }
            }
            Ok(())
        }
        TAG_CFUNC => {
            let len = r.u8()? as usize;
            let name = r.bytes(len)?;
            sink.c_function(name)
        }
        _ => Err(Corrupt("unknown tag")),
    }
}

const ENDS_EARLY: Corrupt = Corrupt("message ends early");

/// A cursor over a message: `rest` is what is left to read, so each read is one length check.
struct Reader<'a> {
    /// The whole message's length (offsets count from its start).
    len: usize,
    rest: &'a [u8],
    /// Offsets of the shared tables and functions decoded so far, ascending.
    shared: Vec<u32>,
    /// The prototypes the message's functions index.
    protos: &'a [Arc<Proto>],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            len: buf.len(),
            rest: buf,
            shared: Vec::new(),
            protos: &[],
        }
    }

    #[inline(always)]
    fn left(&self) -> usize {
        self.rest.len()
    }

    /// Offset of the next byte from the message start.
    #[inline(always)]
    fn pos(&self) -> usize {
        self.len - self.rest.len()
    }

    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        self.rest.bytes(n)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corrupt> {
        self.rest.array()
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, Corrupt> {
        self.rest.u8()
    }

    #[inline(always)]
    fn u32(&mut self) -> Result<u32, Corrupt> {
        self.rest.u32()
    }
}

/// Reads from the front of a slice, which then starts after what was read: one length check each.
trait Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt>;
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corrupt>;
    fn u8(&mut self) -> Result<u8, Corrupt>;
    fn u32(&mut self) -> Result<u32, Corrupt>;
}

impl<'a> Cursor<'a> for &'a [u8] {
    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        let (s, rest) = self.split_at_checked(n).ok_or(ENDS_EARLY)?;
        *self = rest;
        Ok(s)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corrupt> {
        let (a, rest) = self.split_first_chunk::<N>().ok_or(ENDS_EARLY)?;
        *self = rest;
        Ok(*a)
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, Corrupt> {
        let (&b, rest) = self.split_first().ok_or(ENDS_EARLY)?;
        *self = rest;
        Ok(b)
    }

    #[inline(always)]
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

pub struct LuaSink<'c> {
    st: State,
    /// Stack slot just above the values, where the table of shared tables goes (made on the
    /// first one).
    shared_at: c_int,
    has_shared: bool,
    /// The state's loaded callees, if it keeps them (a child state).
    cache: Option<&'c mut FnCache>,
    /// The next function begun is the callee of `pool:invoke(fn, ...)`.
    callee_next: bool,
    /// LuaJIT: whether the callee is the state's cached instance, whose upvalues this message
    /// sets, and whether one of them changed value (its traces then go: see
    /// `func::WATCH_UPVALUES`).
    callee_cached: bool,
    upvalue_changed: bool,
}

impl<'c> LuaSink<'c> {
    pub fn new(st: State) -> LuaSink<'c> {
        LuaSink {
            st,
            shared_at: st.top() + 1,
            has_shared: false,
            cache: None,
            callee_next: false,
            callee_cached: false,
            upvalue_changed: false,
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

/// What decoding answers when the Lua stack has no room left for the values: the receiving
/// code is nested too deeply, which is its caller's error (`Error::NoStack`), not a bad message.
pub const NO_STACK: Corrupt = Corrupt("Lua stack overflow");

/// Whether a decode's refusal is [`NO_STACK`].
pub fn is_no_stack(what: &str) -> bool {
    what == NO_STACK.0
}

impl Sink for LuaSink<'_> {
    fn reserve(&mut self, n: u32) -> Result<(), Corrupt> {
        if self.st.check_stack((n as c_int).saturating_add(2)) {
            Ok(())
        } else {
            Err(NO_STACK)
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
            return Err(NO_STACK);
        }
        let clamp = |n: u32| n.min(1 << 26) as c_int;
        self.st.create_table(clamp(narr), clamp(nhash));
        Ok(())
    }
    fn set_index(&mut self, i: u32) -> Result<(), Corrupt> {
        self.st.raw_seti(-2, i as i64);
        Ok(())
    }
    /// The decoder has refused nil and NaN keys (`key`).
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
            return Err(NO_STACK);
        }
        self.st.raw_geti(self.shared_at, n as i64 + 1);
        Ok(())
    }
    /// The callee, and a function with nothing but `_ENV` to set, come from the state's cache
    /// (loaded once per state); any other function is a new instance, so that upvalues one
    /// message sets are never those of a function the state kept from an earlier one.
    fn begin_function(&mut self, proto: &Arc<Proto>, flags: u8) -> Result<(), Corrupt> {
        if !self.st.check_stack(6) {
            return Err(NO_STACK);
        }
        let callee = std::mem::replace(&mut self.callee_next, false);
        match &mut self.cache {
            Some(cache) if flags & JOINED == 0 && (callee || flags & PURE != 0) => {
                cache.push(self.st, proto)?;
                if callee {
                    self.callee_cached = func::WATCH_UPVALUES;
                }
                Ok(())
            }
            _ => func::push_fresh(self.st, proto),
        }
    }
    fn set_upvalue(&mut self, n: u8) -> Result<(), Corrupt> {
        // the callee is the message's first value (above the shared table, once there is one)
        if func::WATCH_UPVALUES
            && self.callee_cached
            && self.st.top() - 1 == self.shared_at + self.has_shared as c_int
            && self.st.get_upvalue(-2, n as c_int).is_some()
        {
            // [.., f, new, old]: `begin_function` left room for it. LuaJIT never compiles a
            // table upvalue in as a constant, and a table arrives as a new copy each call.
            let tables = self.st.type_of(-1) == TTABLE && self.st.type_of(-2) == TTABLE;
            self.upvalue_changed |= !tables && !self.st.raw_equal(-1, -2);
            self.st.pop(1);
        }
        if self.st.set_upvalue(-2, n as c_int) {
            Ok(())
        } else {
            self.st.pop(1);
            Err(Corrupt("upvalue out of range"))
        }
    }
    fn env_upvalue(&mut self, n: u8) -> Result<(), Corrupt> {
        self.st.push_globals();
        self.set_upvalue(n)
    }
    fn join_upvalue(&mut self, n: u8, shared: u32, m: u8) -> Result<(), Corrupt> {
        self.st.raw_geti(self.shared_at, shared as i64 + 1);
        let joined = func::upvalue_join(self.st, -2, n as c_int, -1, m as c_int);
        self.st.pop(1);
        if joined {
            Ok(())
        } else {
            Err(Corrupt("upvalue joined to no such upvalue"))
        }
    }
    fn c_function(&mut self, name: &[u8]) -> Result<(), Corrupt> {
        // a C function callee: the functions among its arguments are values
        self.callee_next = false;
        if !self.st.check_stack(4) {
            return Err(NO_STACK);
        }
        func::push_c_function(self.st, name)
    }
}

/// Decodes a message onto the Lua stack; returns the number of values pushed. On error the stack
/// is restored.
pub fn push_values(st: State, buf: &[u8]) -> Result<c_int, Corrupt> {
    push_message(st, buf, &[], None, false)
}

/// Decodes a message whose functions' prototypes are `protos` onto the Lua stack; `cache` is the
/// state's function cache, if it keeps one, and `callee` says the first value is the function to
/// call (served from that cache). Returns the number of values pushed; on error the stack is
/// restored.
pub fn push_message(
    st: State,
    buf: &[u8],
    protos: &[Arc<Proto>],
    cache: Option<&mut FnCache>,
    callee: bool,
) -> Result<c_int, Corrupt> {
    let top = st.top();
    let mut sink = LuaSink::new(st);
    sink.cache = cache;
    sink.callee_next = callee;
    match decode_with(buf, protos, &mut sink) {
        Ok(n) => {
            sink.finish();
            if sink.upvalue_changed {
                func::flush_traces(st, top + 1);
            }
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
/// nothing, so it cannot raise: the host pushes them without a protected call (one cost a fifth
/// of the host's instructions per future). The caller must have `max` free stack slots without
/// asking Lua for them (asking may grow the stack, which allocates).
pub fn push_scalars(st: State, buf: &[u8], max: usize) -> Option<c_int> {
    let (head, mut rest) = buf.split_first_chunk::<4>()?;
    let count = u32::from_le_bytes(*head) & !HAS_FUNCTIONS;
    if count as usize > max {
        return None;
    }
    // A scalar is a tag and a fixed-size payload: pushed as they come, and popped again if a
    // later value does not qualify (pushing and popping scalars allocates nothing).
    for pushed in 0..count {
        let Some(after) = push_scalar(st, rest) else {
            if pushed > 0 {
                st.pop(pushed as c_int);
            }
            return None;
        };
        rest = after;
    }
    if !rest.is_empty() {
        if count > 0 {
            st.pop(count as c_int);
        }
        return None;
    }
    Some(count as c_int)
}

/// Pushes the scalar `bytes` starts with and returns the bytes after it; pushes nothing for
/// anything else (or a value cut short).
#[inline(always)]
fn push_scalar(st: State, bytes: &[u8]) -> Option<&[u8]> {
    let (&tag, after) = bytes.split_first()?;
    match tag {
        TAG_NIL => st.push_nil(),
        TAG_FALSE | TAG_TRUE => st.push_bool(tag == TAG_TRUE),
        TAG_INT | TAG_FLOAT | TAG_LIGHT => {
            let (word, after) = after.split_first_chunk::<8>()?;
            let word = u64::from_le_bytes(*word);
            match tag {
                TAG_INT => st.push_integer(word as i64),
                TAG_FLOAT => st.push_number(f64::from_bits(word)),
                _ => st.push_light_userdata(light_address(word).ok()? as *mut c_void),
            }
            return Some(after);
        }
        _ => return None,
    }
    Some(after)
}
