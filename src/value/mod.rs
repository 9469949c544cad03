//! How Lua values cross between states: a compact byte format and the encoder that reads the Lua
//! stack directly; the decoder that pushes directly onto it is `decode.rs`, functions are
//! `func.rs`, the same format as Rust values (tests, fuzzing) is `rust.rs`.
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
//! | 9 | that table or function again | `u32` byte offset of its tag 8 or 11 from the message start |
//! | 10 | Lua function | `u32` index into the message's prototypes, `u8` flags, `u8` upvalue count n, n upvalues |
//! | 11 | function reached again later in the message (or whose upvalue another joins) | as tag 10 |
//! | 12 | (upvalue only) `_ENV`: the receiving state's globals | - |
//! | 13 | (upvalue only) the same variable as upvalue m of an earlier function | `u32` offset of its tag 11, `u8` m |
//! | 14 | standard library C function | `u8` length, its name (`string.format`) |
//!
//! Bit 31 of the count says the message holds Lua functions: their prototypes travel beside the
//! message (see `func.rs`), so a receiver only fetches that list when it is needed.
//!
//! A table or function reached a second time within one message (shared, or a cycle) is sent
//! once: the encoder patches its first tag to 8 (11) and writes a reference (9) for every later
//! visit, so plain trees pay one lookup per table and no extra bytes. The decoder registers a
//! shared table or function before its contents (upvalues), so a reference from inside it (a
//! cycle, a recursive local function) finds it.
//!
//! A function's upvalues are copied as values, each time it is sent. Where the runtime can join
//! upvalues (5.2+, LuaJIT), two functions of one message that share an upvalue (one variable)
//! share it on arrival too (tag 13), and both carry flag [`JOINED`]. `_ENV` is not copied: it
//! refers to the receiving state's globals, as globals do on 5.1 and LuaJIT, where a function
//! gets the receiving state's globals as its environment; so does any upvalue that holds the
//! sender's globals table (`local G = _G`, a stripped function's nameless `_ENV`).
//!
//! A light userdata is a bare pointer that Lua never dereferences. The NULL one is how
//! `ngx.null` and `cjson.null` spell JSON's null, so it must cross; it arrives as the receiving
//! state's NULL light userdata, which compares equal to that state's `ngx.null`/`cjson.null`.
//! Other pointers cross unchanged, as `ngx.run_worker_thread` passes them: every state lives in
//! one process, so the pointer means in the receiver what it meant in the sender (and is as
//! valid, or not, as there).
//!
//! Full userdata, coroutines, C functions outside the standard library and tables nested deeper
//! than [`MAX_DEPTH`] are refused with an error that names the argument or result and the path
//! inside it (`argument #2 .cb upvalue 'conn'`).
//!
//! The decoder never trusts its input: see `decode.rs`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

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
const TAG_FUNC: u8 = 10;
const TAG_FUNC_SHARED: u8 = 11;
const TAG_ENV: u8 = 12;
const TAG_UPJOIN: u8 = 13;
const TAG_CFUNC: u8 = 14;

/// Function flag: an upvalue of this function is joined with another function's in the message
/// (it is then never a state's cached instance, whose upvalues must stay its own).
pub const JOINED: u8 = 1;
/// Function flag: its upvalues, if any, are `_ENV` (the globals): nothing of one call stays in
/// them. Only the first closure of a prototype in a message has it, so that distinct closures
/// never arrive as the one instance a receiver caches.
pub const PURE: u8 = 2;

/// Bit of the value count that says the message holds Lua functions.
const HAS_FUNCTIONS: u32 = 1 << 31;

/// The standard-library name of a message's first value if it is a C function (the callee of
/// `pool:invoke(string.format, ...)`), for messages.
pub fn c_function_first(buf: &[u8]) -> Option<&[u8]> {
    match buf.get(4..6)? {
        [TAG_CFUNC, len] => buf.get(6..6 + *len as usize),
        _ => None,
    }
}

/// True if the encoded message `buf` holds Lua functions (its prototypes travel beside it).
pub fn has_functions(buf: &[u8]) -> bool {
    buf.get(3).is_some_and(|b| b & 0x80 != 0)
}

/// The most bytes a message of `n` nil, boolean, number or light userdata values takes (its
/// count, and a tag and 8 bytes per value): a longer one holds something else.
pub const fn scalars_len(n: usize) -> usize {
    4 + 9 * n
}

/// Past this many tables in one message the encoder looks them up in a hash map.
const LINEAR_SEEN: usize = 16;

/// Stack slots that encoding nested values may need: two per level and the encoder's margin.
const ENCODE_STACK: c_int = 2 * MAX_DEPTH as c_int + 16;

/// Whether functions have an `_ENV` upvalue (Lua 5.2+).
const ENV_UPVALUE: bool = cfg!(not(any(feature = "lua51", feature = "luajit")));

/// Which list a value belongs to, for error messages.
#[derive(Clone, Copy, Debug)]
pub enum Role<'a> {
    /// Argument `n` (1-based) of the child function `function`.
    Argument(&'a [u8]),
    /// Result of the child function `function`.
    Result(&'a [u8]),
    /// The values of `pool:invoke(fn, ...)`: the function called, then its arguments.
    Callee,
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
    fns: Functions,
}

/// What the encoder keeps about the functions it met: the prototypes of every message since the
/// last [`Encoder::take_protos`] (the list the messages' function tags index), and the upvalues of
/// the message being encoded (identity -> offset of the function and its upvalue number).
#[derive(Default)]
struct Functions {
    protos: Vec<Arc<Proto>>,
    upvalues: Upvalues,
    /// The content hashes of the message's Lua functions' prototypes so far.
    in_message: Vec<u64>,
    /// Whether the message being encoded holds a Lua function.
    used: bool,
}

/// The upvalues of the message's functions by identity, each with the offset of the first
/// function that has it and its number there.
type Upvalues = FirstSeen<*mut c_void, (u32, u8)>;

impl Functions {
    #[cold]
    fn forget_message(&mut self) {
        self.upvalues.clear();
        self.in_message.clear();
        self.used = false;
    }

    fn index_of(&mut self, p: Arc<Proto>) -> Result<u32, Refused> {
        // a message holds few distinct prototypes: a scan from the newest is enough
        if let Some(i) = self.protos.iter().rposition(|q| Arc::ptr_eq(q, &p)) {
            return Ok(i as u32);
        }
        let i = u32::try_from(self.protos.len()).map_err(|_| refuse("too many functions"))?;
        self.protos.push(p);
        Ok(i)
    }
}

/// The tables of the message being encoded, each with the offset of its tag.
type Seen = FirstSeen<*const c_void, u32>;

/// Identities met in one message, each with where it was met first: a short list scanned from the
/// start, a hash map (foldhash, as the dictionary's shards, for pointer keys) past [`LINEAR_SEEN`].
struct FirstSeen<K, V> {
    list: Vec<(K, V)>,
    map: std::collections::HashMap<K, V, foldhash::fast::RandomState>,
}

impl<K, V> Default for FirstSeen<K, V> {
    fn default() -> Self {
        FirstSeen {
            list: Vec::new(),
            map: Default::default(),
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash, V: Copy> FirstSeen<K, V> {
    fn clear(&mut self) {
        self.list.clear();
        if !self.map.is_empty() {
            self.map.clear();
        }
    }

    /// Where `id` was met first; else records it as met at `at`.
    fn visit(&mut self, id: K, at: V) -> Option<V> {
        if self.list.len() < LINEAR_SEEN {
            if let Some(&(_, first)) = self.list.iter().find(|(p, _)| *p == id) {
                return Some(first);
            }
            self.list.push((id, at));
            return None;
        }
        if self.map.is_empty() {
            self.map.extend(self.list.iter().copied());
        }
        match self.map.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(at);
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
            fns: Functions::default(),
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
        self.seen.clear();
        // only a message that held a function left upvalues behind
        if self.fns.used {
            self.fns.forget_message();
        }
        let mut w = self.begin(out, count);
        let start = w.start;
        for i in 0..count {
            // a failing table restores the stack itself (see `Writer::table`)
            let idx = first + i;
            w.typed(st, idx, st.type_of(idx), 0)
                .map_err(|r| describe(role, i + 1, *r))?;
        }
        if self.fns.used {
            out[start + 3] |= (HAS_FUNCTIONS >> 24) as u8;
        }
        Ok(())
    }

    /// Encodes as [`Encoder::encode`] does if the `count` values from `first` are all nil,
    /// booleans, numbers or strings, and says whether it did (else `out` is as it was): most
    /// calls return a few such values, and they need no table bookkeeping and no stack room.
    pub fn encode_scalars(
        &mut self,
        st: State,
        first: c_int,
        count: c_int,
        out: &mut Vec<u8>,
    ) -> bool {
        let mut w = self.begin(out, count);
        let start = w.start;
        for idx in first..first + count {
            let ty = st.type_of(idx);
            // a string out of line: its inline copy (for table fields) would cost the numbers'
            // loop registers
            let written = match ty {
                TNIL | TBOOLEAN | TNUMBER => w.typed(st, idx, ty, 0).is_ok(),
                TSTRING => w.string_at(st, idx).is_ok(),
                _ => false,
            };
            if !written {
                out.truncate(start);
                return false;
            }
        }
        true
    }

    /// Starts a message of `count` values at the end of `out`: its header, and the writer of
    /// its values.
    #[inline(always)]
    fn begin<'a>(&'a mut self, out: &'a mut Vec<u8>, count: c_int) -> Writer<'a> {
        let start = out.len();
        out.extend_from_slice(&(count.max(0) as u32).to_le_bytes());
        Writer {
            reserved: false,
            out,
            start,
            seen: &mut self.seen,
            fns: &mut self.fns,
        }
    }

    /// The prototypes the messages encoded since the last take refer to (they travel with them).
    pub fn take_protos(&mut self) -> Vec<Arc<Proto>> {
        std::mem::take(&mut self.fns.protos)
    }

    /// Whether the messages encoded since the last take refer to prototypes.
    #[inline(always)]
    pub fn has_protos(&self) -> bool {
        !self.fns.protos.is_empty()
    }

    /// Moves those prototypes into `into` (emptied first), keeping both lists' capacity: the
    /// encoder's list for the next message, `into`'s for the next time.
    #[inline(always)]
    pub fn move_protos(&mut self, into: &mut Vec<Arc<Proto>>) {
        // most messages hold no function: nothing to drop or swap
        if !self.fns.protos.is_empty() || !into.is_empty() {
            self.swap_protos(into);
        }
    }

    #[cold]
    fn swap_protos(&mut self, into: &mut Vec<Arc<Proto>>) {
        into.clear();
        std::mem::swap(into, &mut self.fns.protos);
    }

    /// Starts the list of prototypes with `protos` (a message encoded earlier that travels with
    /// the next ones).
    pub fn seed_protos(&mut self, protos: &[Arc<Proto>]) {
        self.fns.protos.clear();
        self.fns.protos.extend_from_slice(protos);
    }

    /// Forgets the prototypes of messages that will not be sent.
    #[cold]
    pub fn drop_protos(&mut self) {
        self.fns.protos.clear();
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
    let what = match role {
        Role::Argument(f) => format!("argument #{position} to '{}'", String::from_utf8_lossy(f)),
        Role::Result(f) => format!("result #{position} of '{}'", String::from_utf8_lossy(f)),
        Role::Callee if position == 1 => "the function to call".to_string(),
        Role::Callee => format!("argument #{} to the function to call", position - 1),
    };
    let at = if r.path.is_empty() {
        String::new()
    } else {
        let mut p: Vec<String> = r.path;
        p.reverse();
        format!(" at {}", p.concat().trim_start())
    };
    let hint = if r.problem == NOT_STANDARD_C {
        "; other C functions (a module's, coroutine.wrap's, an iterator) stay in their state: make them where they are called (require the module inside the function, or in the pool's init)"
    } else {
        ""
    };
    crate::Error::Unsupported(format!(
        "cannot pass {what}: {}{at} (only nil, boolean, number, string, light userdata such as ngx.null, Lua functions, standard library C functions and tables of them nested up to {MAX_DEPTH} levels deep can cross between states){hint}",
        r.problem
    ))
}

const NOT_STANDARD_C: &str = "a C function that is not a standard library function";

struct Writer<'o> {
    /// Whether this message made room on the stack for nested upvalues (see `function`).
    reserved: bool,
    out: &'o mut Vec<u8>,
    /// Where the message starts in `out` (references count from there).
    start: usize,
    seen: &'o mut Seen,
    fns: &'o mut Functions,
}

impl Writer<'_> {
    fn value(&mut self, st: State, idx: c_int, depth: usize) -> Result<(), Refused> {
        self.typed(st, idx, st.type_of(idx), depth)
    }

    /// Encodes the value at `idx`, of Lua type `ty`: scalars here (inlined into the table loops,
    /// so a field of a plain table costs no call of its own), the rest in [`Writer::nested`].
    #[inline(always)]
    fn typed(&mut self, st: State, idx: c_int, ty: c_int, depth: usize) -> Result<(), Refused> {
        match ty {
            TSTRING => self.string(st.string_bytes(idx)),
            TNUMBER => {
                let (tag, bits) = match st.to_integer_exact(idx) {
                    Some(i) => (TAG_INT, i as u64),
                    None => (TAG_FLOAT, st.to_number(idx).to_bits()),
                };
                let b = bits.to_le_bytes();
                self.out
                    .extend_from_slice(&[tag, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                Ok(())
            }
            TBOOLEAN => {
                self.out.push(if st.to_boolean(idx) {
                    TAG_TRUE
                } else {
                    TAG_FALSE
                });
                Ok(())
            }
            TNIL => {
                self.out.push(TAG_NIL);
                Ok(())
            }
            _ => self.nested(st, idx, ty, depth),
        }
    }

    #[inline(always)]
    fn string(&mut self, s: &[u8]) -> Result<(), Refused> {
        let len = u32::try_from(s.len()).map_err(|_| refuse("a string longer than 4 GiB"))?;
        if self.out.capacity() - self.out.len() < 5 + s.len() {
            self.grow_for_string(s.len())?;
        }
        let l = len.to_le_bytes();
        put_string(self.out, [TAG_STR, l[0], l[1], l[2], l[3]], s);
        Ok(())
    }

    #[inline(never)]
    fn string_at(&mut self, st: State, idx: c_int) -> Result<(), Refused> {
        self.string(st.string_bytes(idx))
    }

    /// Fallible: a big string must be an error, not an abort, when memory runs out.
    #[cold]
    #[inline(never)]
    fn grow_for_string(&mut self, len: usize) -> Result<(), Refused> {
        self.out.try_reserve(5 + len).map_err(|_| {
            refuse(&format!(
                "a string of {len} bytes (not enough memory to copy it)"
            ))
        })
    }

    /// Tables, functions, light userdata, and the refusal of every other type.
    #[inline(never)]
    fn nested(&mut self, st: State, idx: c_int, ty: c_int, depth: usize) -> Result<(), Refused> {
        match ty {
            TTABLE => self.table(st, idx, depth),
            crate::lua::TFUNCTION => self.function(st, idx, depth),
            TLIGHTUSERDATA => {
                let b = (st.to_userdata(idx) as usize as u64).to_le_bytes();
                self.out.extend_from_slice(&[
                    TAG_LIGHT, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                ]);
                Ok(())
            }
            other => Err(refuse(&format!("a {} value", crate::lua::type_name(other)))),
        }
    }

    /// Encodes the table at `idx`; on error the stack is back as it was.
    fn table(&mut self, st: State, idx: c_int, depth: usize) -> Result<(), Refused> {
        let top = st.top();
        let r = self.table_contents(st, idx, depth, top);
        if r.is_err() {
            st.set_top(top);
        }
        r
    }

    /// Writes a reference to the table or function whose tag is at `first`, marking it shared.
    fn reference(&mut self, first: u32) {
        self.mark_shared(first);
        let b = first.to_le_bytes();
        self.out
            .extend_from_slice(&[TAG_REF, b[0], b[1], b[2], b[3]]);
    }

    fn mark_shared(&mut self, first: u32) {
        let tag = &mut self.out[self.start + first as usize];
        *tag = match *tag {
            TAG_TABLE => TAG_TABLE_SHARED,
            TAG_FUNC => TAG_FUNC_SHARED,
            t => t,
        };
    }

    /// Encodes the function at `idx`: a C function by its standard library name, a Lua function
    /// as its prototype and upvalues. The stack is left as it was, also on error.
    #[inline(never)]
    fn function(&mut self, st: State, idx: c_int, depth: usize) -> Result<(), Refused> {
        let idx = st.abs_index(idx);
        if !st.check_stack(6) {
            return Err(refuse("a function nested too deeply for the Lua stack"));
        }
        if st.is_cfunction(idx) {
            let name = func::c_function_name(st, idx).ok_or_else(|| refuse(NOT_STANDARD_C))?;
            self.out.push(TAG_CFUNC);
            self.out.push(name.len() as u8);
            self.out.extend_from_slice(&name);
            return Ok(());
        }
        if depth >= MAX_DEPTH {
            return Err(refuse(&format!(
                "functions and tables nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let offset = u32::try_from(self.out.len() - self.start)
            .map_err(|_| refuse("a message larger than 4 GiB"))?;
        if let Some(first) = self.seen.visit(st.to_pointer(idx), offset) {
            self.reference(first);
            return Ok(());
        }
        let proto = func::proto_of(st, idx).map_err(refuse)?;
        let nups = proto.upvalues();
        // another closure of a prototype the message already holds (by content: each closure
        // has its own dump) is never PURE, or the receiver would serve both from its cache as
        // one function; a hash collision only costs a load
        let pure = if self.fns.in_message.contains(&proto.hash()) {
            0
        } else {
            self.fns.in_message.push(proto.hash());
            PURE
        };
        let index = self.fns.index_of(proto)?.to_le_bytes();
        self.fns.used = true;
        let at = self.start + offset as usize;
        self.out
            .extend_from_slice(&[TAG_FUNC, index[0], index[1], index[2], index[3], pure, 0]);
        let mut n: u8 = 0;
        while let Some(name) = st.get_upvalue(idx, n as c_int + 1) {
            n = n
                .checked_add(1)
                .ok_or_else(|| refuse("a function with more than 255 upvalues"))?;
            if (ENV_UPVALUE && name == b"_ENV") || func::is_globals(st, -1) {
                st.pop(1);
                self.out.push(TAG_ENV);
                continue;
            }
            if st.type_of(-1) == TTABLE {
                // `local io = io`: a standard table no copy can hold crosses by name
                if let Some(lib) = func::c_function_name(st, st.top()) {
                    st.pop(1);
                    self.out.push(TAG_CFUNC);
                    self.out.push(lib.len() as u8);
                    self.out.extend_from_slice(&lib);
                    continue;
                }
            }
            self.out[at + 5] &= !PURE;
            if !self.reserved && matches!(st.type_of(-1), TTABLE | crate::lua::TFUNCTION) {
                // an upvalue that nests: the room the caller made covers only the arguments
                if !func::reserve_stack(st, ENCODE_STACK) {
                    st.pop(1);
                    return Err(refuse("a function nested too deeply for the Lua stack"));
                }
                self.reserved = true;
            }
            if func::CAN_JOIN {
                let id = func::upvalue_id(st, idx, n as c_int);
                if let Some((other, m)) = self.fns.upvalues.visit(id, (offset, n)) {
                    st.pop(1);
                    self.mark_shared(other);
                    self.out[self.start + other as usize + 5] |= JOINED;
                    self.out[at + 5] |= JOINED;
                    let b = other.to_le_bytes();
                    self.out
                        .extend_from_slice(&[TAG_UPJOIN, b[0], b[1], b[2], b[3], m]);
                    continue;
                }
            }
            let r = self.value(st, -1, depth + 1);
            st.pop(1);
            r.map_err(|e| e.within(format!(" upvalue '{}'", String::from_utf8_lossy(name))))?;
        }
        if n < nups {
            // Lua 5.1 reads an upvalue through its name, which `luac -s` strips
            return Err(refuse("a function whose upvalues Lua 5.1 cannot read (its debug info was stripped, as by luac -s): load it from source or from bytecode with debug info"));
        }
        self.out[at + 6] = n;
        Ok(())
    }

    /// `top` is the stack's top, as [`Writer::table`] found it.
    fn table_contents(
        &mut self,
        st: State,
        idx: c_int,
        depth: usize,
        top: c_int,
    ) -> Result<(), Refused> {
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
            self.reference(first);
            return Ok(());
        }
        if !st.check_stack(4) {
            return Err(refuse("a table nested too deeply for the Lua stack"));
        }
        let n = st.raw_len(idx);
        let narr = u32::try_from(n).map_err(|_| refuse("a table with more than 2^32 elements"))?;
        // the tag and the counts, the hash count patched at the end
        let counts_at = self.out.len() + 1;
        let a = narr.to_le_bytes();
        self.out
            .extend_from_slice(&[TAG_TABLE, a[0], a[1], a[2], a[3], 0, 0, 0, 0]);

        for i in 1..=n as i64 {
            let ty = st.raw_geti(idx, i);
            let r = self.typed(st, -1, ty, depth + 1);
            st.pop(1);
            r.map_err(|e| e.within(format!("[{i}]")))?;
        }

        let mut nhash: u32 = 0;
        // the key sits in this slot during the traversal, its value above it; nested encoding only
        // pushes above them (and the labels for errors are only built on error)
        let key = top + 1;
        st.push_nil();
        while st.next(idx) {
            let kt = st.type_of(key);
            if n != 0 && is_array_key(st, key, kt, n) {
                st.pop(1);
                continue;
            }
            self.typed(st, key, kt, depth + 1)
                .map_err(|e| e.within(format!("{} (a key)", key_label(st, key))))?;
            self.typed(st, key + 1, st.type_of(key + 1), depth + 1)
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

/// Appends `head` and `s` to `out`, which has room for them: one capacity check for a string's
/// tag, length and bytes, and short strings (keys, mostly) copied inline rather than by `memcpy`.
/// Unsafe because a safe form (a fixed buffer appended whole, then truncated) costs more than
/// `memcpy` (bench/results/2026-12-07-echo-codec.md, "The safe form of the short copy").
#[inline(always)]
fn put_string(out: &mut Vec<u8>, head: [u8; 5], s: &[u8]) {
    let n = s.len();
    assert!(out.capacity() - out.len() >= 5 + n);
    let at = out.len();
    // SAFETY: the assertion above: the 5 + n bytes past the length are allocated; every read of
    // `s` is within its n bytes (the ranges overlap for lengths between the chunk sizes), and
    // each byte written below is set before the length covers it.
    unsafe {
        let dst = out.as_mut_ptr().add(at);
        dst.cast::<[u8; 5]>().write_unaligned(head);
        let (src, dst) = (s.as_ptr(), dst.add(5));
        match n {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                let (a, b) = (src.cast::<u32>(), src.add(n - 4).cast::<u32>());
                let (x, y) = (a.read_unaligned(), b.read_unaligned());
                dst.cast::<u32>().write_unaligned(x);
                dst.add(n - 4).cast::<u32>().write_unaligned(y);
            }
            8..=16 => {
                let (a, b) = (src.cast::<u64>(), src.add(n - 8).cast::<u64>());
                let (x, y) = (a.read_unaligned(), b.read_unaligned());
                dst.cast::<u64>().write_unaligned(x);
                dst.add(n - 8).cast::<u64>().write_unaligned(y);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
        out.set_len(at + 5 + n);
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
fn is_array_key(st: State, idx: c_int, ty: c_int, n: usize) -> bool {
    if ty != TNUMBER {
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
    /// Produces shared table (or function) number `n` again (the decoder has checked that it
    /// exists).
    fn reference(&mut self, _n: u32) -> Result<(), Corrupt>;
    /// Starts a Lua function of prototype `proto` with `flags` ([`JOINED`], [`PURE`]); its
    /// upvalues follow.
    fn begin_function(&mut self, _proto: &Arc<Proto>, _flags: u8) -> Result<(), Corrupt> {
        Err(NO_FUNCTIONS)
    }
    /// Stores the value just produced as upvalue `n` of the function being built.
    fn set_upvalue(&mut self, _n: u8) -> Result<(), Corrupt> {
        Err(NO_FUNCTIONS)
    }
    /// Upvalue `n` of the function being built is `_ENV`: the receiver's globals.
    fn env_upvalue(&mut self, _n: u8) -> Result<(), Corrupt> {
        Err(NO_FUNCTIONS)
    }
    /// Upvalue `n` of the function being built is upvalue `m` of shared function `shared`.
    fn join_upvalue(&mut self, _n: u8, _shared: u32, _m: u8) -> Result<(), Corrupt> {
        Err(NO_FUNCTIONS)
    }
    /// The standard library C function of that name.
    fn c_function(&mut self, _name: &[u8]) -> Result<(), Corrupt> {
        Err(NO_FUNCTIONS)
    }
}

const NO_FUNCTIONS: Corrupt = Corrupt("a function where none can be");

mod decode;
mod func;
mod rust;
mod scalar;

pub use decode::{
    decode_values, decode_with, is_no_stack, push_message, push_scalars, push_values, LuaSink,
};
pub use func::{install, is_refusal, label_of, FnCache, Proto, CACHED_FUNCTIONS, HITS, LOADS};
pub use rust::{encode_rust, RustSink, Value};
pub use scalar::{read_scalars, write_scalars, Scalar};
