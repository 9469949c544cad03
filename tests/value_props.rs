//! Property tests of value transfer, in Rust: thousands of random nested values go through the Lua
//! stack (decode onto a real state, encode back) and through a pool (host -> child -> host) and
//! must come back unchanged; every value that cannot cross is refused with an error, the stack
//! left as it was; and mutated messages never crash the decoder. Seeded, so a failure names the
//! case that reproduces it.

mod support;

use std::ffi::c_int;

use support::*;
use vmpool::testing::lua::State;
use vmpool::testing::value::{
    decode_values, encode_rust, encode_values, push_values, Role, RustSink, Value, MAX_DEPTH,
};
use vmpool::Error;

/// SplitMix64: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const EDGE_INTS: &[i64] = &[
    0,
    1,
    -1,
    i64::MIN,
    i64::MAX,
    i64::MIN + 1,
    (1 << 53) - 1,
    1 << 53,
    (1 << 53) + 1,
    -(1 << 53),
    i32::MIN as i64,
    u32::MAX as i64,
];

fn edge_floats() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        0.5,
        -1.5,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        f64::MIN_POSITIVE / 4.0, // subnormal
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        9007199254740993.0,
        1e300,
        -1e-300,
    ]
}

fn random_bytes(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(20) {
        0 => 0,
        1 => 1000 + r.below(64 * 1024) as usize,
        _ => r.below(40) as usize,
    };
    if len > 64 {
        // large strings: a random byte repeated, with random bytes sprinkled in (cheap to make)
        let mut s = vec![r.below(256) as u8; len];
        for _ in 0..16 {
            let i = r.below(len as u64) as usize;
            s[i] = r.below(256) as u8;
        }
        return s;
    }
    (0..len).map(|_| r.below(256) as u8).collect()
}

fn random_scalar(r: &mut Rng) -> Value {
    match r.below(9) {
        0 => Value::Bool(r.chance(50)),
        // NULL (ngx.null, cjson.null) and other pointers below 4 GiB (LuaJIT keeps a table of
        // the upper halves it has seen, and refuses too many distinct ones)
        7 => Value::Light(if r.chance(50) { 0 } else { r.below(1 << 32) }),
        1 => Value::Int(EDGE_INTS[r.below(EDGE_INTS.len() as u64) as usize]),
        2 => Value::Int(r.next() as i64),
        3 => Value::Int(r.below(2000) as i64 - 1000),
        4 => {
            let f = edge_floats();
            Value::Float(f[r.below(f.len() as u64) as usize])
        }
        5 => Value::Float(f64::from_bits(r.next())),
        _ => Value::Str(random_bytes(r)),
    }
}

/// A table key that Lua stores as given: no nil or NaN; floats with a fraction (integral floats
/// become integer keys); integers outside `1..=n+1` (so the array part stays exactly `1..=n`).
fn random_key(r: &mut Rng, n: usize, depth: usize, budget: &mut usize) -> Value {
    loop {
        let k = match r.below(10) {
            0..=3 => Value::Str(random_bytes(r)),
            4 | 5 => Value::Int(r.next() as i64),
            6 => Value::Int(-(r.below(100) as i64)),
            7 => Value::Float(r.below(1_000_000) as f64 + 0.25),
            8 => Value::Bool(r.chance(50)),
            _ if depth > 1 && *budget > 0 => {
                *budget -= 1;
                random_table(r, depth - 1, budget)
            }
            _ => Value::Float(f64::INFINITY),
        };
        let ok = match &k {
            Value::Int(i) => *i < 1 || *i > n as i64 + 1,
            Value::Float(f) => !f.is_nan() && f.fract() != 0.0 || f.is_infinite(),
            _ => true,
        };
        if ok {
            return k;
        }
    }
}

fn random_table(r: &mut Rng, depth: usize, budget: &mut usize) -> Value {
    let wide = *budget >= 10 && r.chance(3);
    if wide {
        *budget -= 10;
    }
    let narr = if wide {
        r.below(3000) as usize
    } else {
        r.below(8) as usize
    };
    let nhash = if wide {
        r.below(500) as usize
    } else {
        r.below(6) as usize
    };
    let mut arr = Vec::new();
    for _ in 0..narr {
        arr.push(if *budget > 0 && depth > 1 && r.chance(15) {
            *budget -= 1;
            random_table(r, depth - 1, budget)
        } else {
            // no nil inside the array part: Lua's length of a table with holes is any border
            random_scalar(r)
        });
    }
    let mut hash: Vec<(Value, Value)> = Vec::new();
    for _ in 0..nhash {
        let k = random_key(r, narr, depth, budget);
        // keys are unique in a Lua table (tables as keys always are: each is a new object)
        if !matches!(k, Value::Table(..)) && hash.iter().any(|(h, _)| *h == k) {
            continue;
        }
        let v = if *budget > 0 && depth > 1 && r.chance(25) {
            *budget -= 1;
            random_table(r, depth - 1, budget)
        } else {
            random_scalar(r)
        };
        hash.push((k, v));
    }
    Value::Table(arr, hash)
}

/// `depth` levels nested: `{x = {x = ... {}}}`.
fn nested(depth: usize) -> Value {
    let mut v = Value::Table(vec![], vec![]);
    for _ in 1..depth {
        v = Value::Table(vec![], vec![(Value::Str(b"x".to_vec()), v)]);
    }
    v
}

fn random_values(r: &mut Rng) -> Vec<Value> {
    let n = r.below(6) as usize;
    (0..n)
        .map(|_| match r.below(10) {
            0 => Value::Nil,
            1..=4 => random_scalar(r),
            5 if r.chance(5) => nested(MAX_DEPTH),
            _ => {
                let mut budget = 40;
                let depth = 1 + r.below(12) as usize;
                random_table(r, depth, &mut budget)
            }
        })
        .collect()
}

/// What Lua gives back for `v` on this runtime: without an integer subtype (5.1, 5.2, LuaJIT)
/// every number is a float.
fn as_lua_sees_it(v: &Value) -> Value {
    if cfg!(any(feature = "lua53", feature = "lua54", feature = "lua55")) {
        return v.clone();
    }
    match v {
        Value::Int(i) => Value::Float(*i as f64),
        Value::Table(a, h) => Value::Table(
            a.iter().map(as_lua_sees_it).collect(),
            h.iter()
                .map(|(k, v)| (as_lua_sees_it(k), as_lua_sees_it(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn decode(buf: &[u8]) -> Vec<Value> {
    let mut sink = RustSink::default();
    decode_values(buf, &mut sink).expect("decodes");
    sink.into_values()
}

/// Decodes `buf` onto `st` and encodes what arrived back; returns the decoded result.
fn through_stack(st: State, buf: &[u8]) -> Vec<Value> {
    let top = st.top();
    let n = push_values(st, buf).expect("a message the encoder wrote decodes");
    assert_eq!(st.top(), top + n);
    let mut out = Vec::new();
    encode_values(st, top + 1, n, &mut out, Role::Result(b"f")).expect("encodes back");
    assert_eq!(st.top(), top + n, "encoding leaves the stack as it was");
    st.set_top(top);
    decode(&out)
}

#[test]
fn random_values_survive_the_lua_stack_unchanged() {
    let h = host();
    let mut r = Rng(0x5EED_0001);
    for case in 0..3000 {
        let values = random_values(&mut r);
        let mut buf = Vec::new();
        encode_rust(&values, &mut buf);
        let back = through_stack(h.st, &buf);
        let expected: Vec<Value> = values.iter().map(as_lua_sees_it).collect();
        assert!(
            back == expected,
            "case {case}: {values:?}\ncame back as {back:?}"
        );
    }
    assert_eq!(h.st.top(), 0);
}

#[test]
fn strings_of_every_short_length_are_copied_byte_for_byte_as_keys_and_values() {
    // the encoder copies short strings in overlapping chunks: each byte differs from its
    // neighbours (and one is NUL), so a byte taken from the wrong place shows
    let h = host();
    for len in (0..=40).chain([63, 64, 65, 1000]) {
        let s: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        let key = Value::Str([b"k".as_slice(), &s].concat());
        let values = vec![
            Value::Str(s.clone()),
            Value::Table(
                vec![Value::Str(s.clone())],
                vec![(key, Value::Str(s.clone()))],
            ),
        ];
        let mut buf = Vec::new();
        encode_rust(&values, &mut buf);
        let top = h.st.top();
        let n = push_values(h.st, &buf).expect("decodes");
        let mut out = Vec::new();
        encode_values(h.st, top + 1, n, &mut out, Role::Result(b"f")).expect("encodes");
        h.st.set_top(top);
        assert_eq!(decode(&out), values, "length {len}");
        assert_eq!(out, buf, "length {len}: the Lua encoder wrote other bytes");
    }
}

#[test]
fn random_values_survive_host_to_child_to_host() {
    let p = pool(config(2), &[("v", "function echo(...) return ... end")]);
    let mut r = Rng(0x5EED_0002);
    let mut calls = Vec::new();
    for _ in 0..1500 {
        let values = random_values(&mut r);
        calls.push((submit(&p, "v", "echo", &values), values));
        if calls.len() == 32 {
            for (c, values) in calls.drain(..) {
                let expected: Vec<Value> = values.iter().map(as_lua_sees_it).collect();
                assert!(wait(&c).unwrap() == expected, "{values:?}");
            }
        }
    }
    for (c, values) in calls {
        let expected: Vec<Value> = values.iter().map(as_lua_sees_it).collect();
        assert!(wait(&c).unwrap() == expected, "{values:?}");
    }
    assert_balanced(&p.stats());
    p.close();
}

/// Lua source that builds values that cannot cross, each at a random place inside a table.
const BAD: &str = r#"
local kind, path_len, seed = ...
local bad
local cw = coroutine.wrap(function() end) -- a C function outside the standard library
if kind == 0 then bad = cw
elseif kind == 1 then bad = io.stdout
elseif kind == 2 then bad = coroutine.create(function() end)
elseif kind == 3 then local u = io.stdout; bad = function() return u end -- an upvalue that cannot cross
end
local root = { 1, 2, "three", name = "x" }
local t = root
for i = 1, path_len do
  local child = { i, tostring(i) }
  if (seed + i) % 3 == 0 then t[i + 10] = child elseif (seed + i) % 3 == 1 then t["k" .. i] = child
  else t[child] = i; t = child end
  t = child
end
if kind == 4 then t.loop = root; t.bad = cw -- a cycle (which crosses) around a C function
elseif kind == 5 then                      -- nested deeper than the limit
  for _ = 1, 101 do t.deeper = {} t = t.deeper end
elseif kind == 6 then t[bad or cw] = 1  -- a bad key
else t.bad = bad end
case_root = root
"#;

#[test]
fn values_that_cannot_cross_are_refused_with_the_stack_intact() {
    let h = host();
    let st = h.st;
    vmpool::testing::value::install(st);
    let f = h.lua.load(BAD).into_function().unwrap();
    let mut r = Rng(0x5EED_0003);
    for case in 0..2000 {
        let kind = r.below(7) as i64;
        f.call::<()>((kind, r.below(20) as i64, r.below(1000) as i64))
            .unwrap();
        let top = st.top();
        st.push_str("fine");
        st.push_globals();
        st.raw_get_str(-1, "case_root");
        st.remove(-2);
        let first: c_int = top + 1;
        let mut out = Vec::new();
        let e = encode_values(st, first, 2, &mut out, Role::Argument(b"g")).expect_err("refused");
        assert_eq!(st.top(), top + 2, "case {case}: the stack is as it was");
        let text = e.to_string();
        assert!(matches!(e, Error::Unsupported(_)), "case {case}: {text}");
        assert!(
            text.starts_with("vmpool: cannot pass argument #2 to 'g': "),
            "case {case}: {text}"
        );
        let expected = match kind {
            0 | 4 | 6 => "a C function that is not a standard library function",
            1 => "a userdata value",
            2 => "a thread value",
            3 => "a userdata value at",
            5 => "tables nested deeper than 100 levels",
            _ => unreachable!(),
        };
        assert!(text.contains(expected), "case {case} (kind {kind}): {text}");
        st.set_top(top);
    }
}

#[test]
fn mutated_messages_never_crash_the_decoder() {
    let h = host();
    let st = h.st;
    let mut r = Rng(0x5EED_0004);
    let mut refused = 0;
    for _ in 0..10_000 {
        let mut buf = Vec::new();
        encode_rust(&random_values(&mut r), &mut buf);
        if buf.len() > 4096 {
            buf.truncate(4096);
        }
        for _ in 0..1 + r.below(4) {
            if buf.is_empty() {
                break;
            }
            let i = r.below(buf.len() as u64) as usize;
            match r.below(4) {
                0 => buf[i] = r.below(256) as u8,
                1 => buf[i] ^= 1 << r.below(8),
                2 => buf.truncate(i),
                _ => buf.insert(i, r.below(8) as u8),
            }
        }
        let rust = decode_values(&buf, &mut RustSink::default());
        let top = st.top();
        match push_values(st, &buf) {
            Ok(n) => {
                assert!(
                    rust.is_ok(),
                    "the Lua sink accepted what the Rust sink refused"
                );
                assert_eq!(st.top(), top + n);
                // whatever decoded is a value that can go back out
                let mut out = Vec::new();
                encode_values(st, top + 1, n, &mut out, Role::Result(b"f")).expect("re-encodes");
            }
            Err(_) => {
                refused += 1;
                assert_eq!(
                    st.top(),
                    top,
                    "a refused message leaves the stack as it was"
                );
            }
        }
        st.set_top(top);
    }
    assert!(
        refused > 500,
        "the mutations should break most messages ({refused})"
    );
}

#[test]
fn functions_load_only_from_the_prototypes_beside_their_message() {
    use std::sync::atomic::Ordering::Relaxed;
    use vmpool::testing::value::{has_functions, install, push_message, Encoder, LOADS};
    let h = host();
    let st = h.st;
    install(st);
    let src = b"local k = 41 return function() return k + 1 end";
    assert_eq!(st.load_text(src, "t"), 0);
    assert_eq!(st.pcall(0, 1, 0), 0);
    let mut enc = Encoder::default();
    let mut buf = Vec::new();
    enc.encode(st, st.top(), 1, &mut buf, Role::Argument(b"f"))
        .expect("a Lua function encodes");
    let protos = enc.take_protos();
    assert_eq!(protos.len(), 1);
    assert!(has_functions(&buf));
    st.pop(1);
    let top = st.top();

    // without the prototypes beside it, the message is refused and nothing is loaded
    let loads = LOADS.load(Relaxed);
    assert!(push_message(st, &buf, &[], None, false).is_err());
    assert_eq!(st.top(), top);
    assert_eq!(LOADS.load(Relaxed), loads);

    // with them, it is the function, its upvalue copied
    assert_eq!(push_message(st, &buf, &protos, None, false), Ok(1));
    assert_eq!(st.pcall(0, 1, 0), 0);
    assert_eq!(st.to_integer_exact(-1), Some(42));
    st.set_top(top);

    // no mutation of the bytes loads anything but that prototype, or crashes
    let mut r = Rng(0x5EED_0005);
    for i in 0..buf.len() {
        for _ in 0..8 {
            let mut m = buf.clone();
            m[i] ^= 1 << r.below(8);
            let before = LOADS.load(Relaxed);
            if let Ok(n) = push_message(st, &m, &protos, None, false) {
                assert_eq!(st.top(), top + n);
            }
            assert!(LOADS.load(Relaxed) - before <= 1);
            st.set_top(top);
        }
    }
}

#[test]
fn table_keys_lua_cannot_store_are_refused_before_anything_is_pushed() {
    let h = host();
    let st = h.st;
    // one value: a table with no array part and one pair, `key = true`
    let message = |key: &[u8]| {
        let mut buf = vec![1, 0, 0, 0, 6, 0, 0, 0, 0, 1, 0, 0, 0];
        buf.extend_from_slice(key);
        buf.push(2);
        buf
    };
    let float = |f: f64| [&[4u8][..], &f.to_bits().to_le_bytes()].concat();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("nil", message(&[0]), "nil or NaN table key"),
        ("NaN", message(&float(f64::NAN)), "nil or NaN table key"),
        ("-NaN", message(&float(-f64::NAN)), "nil or NaN table key"),
        (
            "a float cut short",
            message(&float(1.5))[..13 + 5].to_vec(),
            "message ends early",
        ),
    ];
    for (what, buf, expected) in cases {
        let top = st.top();
        let err = push_values(st, &buf).expect_err(what);
        assert_eq!(err.0, expected, "{what}");
        assert_eq!(st.top(), top, "{what}: the stack is as it was");
        let rust = decode_values(&buf, &mut RustSink::default()).expect_err(what);
        assert_eq!(rust.0, expected, "{what}: the Rust sink agrees");
    }
    // the keys Lua can store arrive: a float with a fraction, -0.0 (stored as 0), a string
    for key in [float(1.5), float(-0.0), vec![5, 1, 0, 0, 0, b'k']] {
        let top = st.top();
        assert_eq!(push_values(st, &message(&key)), Ok(1));
        st.set_top(top);
    }
}

/// `push_scalars` (the host's unprotected push of results) pushes what the decoder pushes for a
/// message of at most `max` nils, booleans, numbers and light userdata, and for any other message
/// (strings, tables, more values, truncated, trailing or mutated bytes) pushes nothing.
#[test]
fn push_scalars_pushes_what_the_decoder_does_or_nothing() {
    use vmpool::testing::value::push_scalars;
    let h = host();
    let st = h.st;
    let mut r = Rng(0x5EED_0007);
    let (mut pushed, mut declined) = (0, 0);
    for case in 0..20_000 {
        let n = r.below(20) as usize;
        let mut values: Vec<Value> = (0..n)
            .map(|_| match r.below(12) {
                0 => Value::Nil,
                1 if r.chance(30) => Value::Table(vec![], vec![]),
                _ => match random_scalar(&mut r) {
                    Value::Str(_) if r.chance(80) => Value::Int(r.next() as i64),
                    v => v,
                },
            })
            .collect();
        if r.chance(5) {
            values.clear();
        }
        let mut buf = Vec::new();
        encode_rust(&values, &mut buf);
        if r.chance(20) && !buf.is_empty() {
            let i = r.below(buf.len() as u64) as usize;
            match r.below(3) {
                0 => buf.truncate(i),
                1 => buf.push(r.below(16) as u8),
                _ => buf[i] = r.below(16) as u8,
            }
        }
        let top = st.top();
        let max = 16;
        match push_scalars(st, &buf, max) {
            Some(k) => {
                pushed += 1;
                assert_eq!(st.top(), top + k, "case {case}");
                let mut out = Vec::new();
                encode_values(st, top + 1, k, &mut out, Role::Result(b"f")).expect("encodes");
                st.set_top(top);
                let expected = push_values(st, &buf).expect("the decoder accepts it too");
                assert_eq!(expected, k, "case {case}");
                let mut again = Vec::new();
                encode_values(st, top + 1, k, &mut again, Role::Result(b"f")).expect("encodes");
                assert!(k as usize <= max, "case {case}");
                assert_eq!(decode(&out), decode(&again), "case {case}: {values:?}");
                assert!(decode(&out).iter().all(|v| matches!(
                    v,
                    Value::Nil | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Light(_)
                )));
            }
            None => {
                declined += 1;
                assert_eq!(st.top(), top, "case {case}: declined, yet pushed");
                let scalars = decode_values(&buf, &mut RustSink::default())
                    .ok()
                    .filter(|&c| c as usize <= max)
                    .map(|_| decode(&buf))
                    .is_some_and(|v| {
                        v.iter().all(|v| {
                            matches!(
                                v,
                                Value::Nil
                                    | Value::Bool(_)
                                    | Value::Int(_)
                                    | Value::Float(_)
                                    | Value::Light(_)
                            )
                        })
                    });
                assert!(
                    !scalars,
                    "case {case}: a message of scalars was declined: {values:?}"
                );
            }
        }
        st.set_top(top);
    }
    assert!(
        pushed > 2000 && declined > 2000,
        "{pushed} pushed, {declined} declined"
    );
}
