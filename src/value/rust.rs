//! Lua values as plain Rust data, for the tests, the fuzz targets and the benchmarks: building
//! messages and reading them back without a Lua state.

use super::scalar::{put_scalar, Scalar};
use super::{Corrupt, Sink, TAG_CFUNC, TAG_LIGHT, TAG_REF, TAG_TABLE, TAG_TABLE_SHARED};

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
    /// A standard library C function, by name (a Lua function has no Rust form: its prototype
    /// only exists in a Lua state, see `func.rs`).
    CFunction(Vec<u8>),
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
            (CFunction(a), CFunction(b)) => a == b,
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
        Value::CFunction(name) => {
            out.push(TAG_CFUNC);
            out.push(name.len() as u8);
            out.extend_from_slice(name);
        }
        Value::Nil => put_scalar(out, Scalar::Nil),
        Value::Bool(b) => put_scalar(out, Scalar::Bool(*b)),
        Value::Int(i) => put_scalar(out, Scalar::Int(*i)),
        Value::Float(f) => put_scalar(out, Scalar::Float(*f)),
        Value::Str(s) => put_scalar(out, Scalar::Str(s)),
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
    fn c_function(&mut self, name: &[u8]) -> Result<(), Corrupt> {
        self.stack.push(Value::CFunction(name.to_vec()));
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
    use crate::value::{decode_values, TAG_NIL, TAG_TRUE};

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
    fn functions_without_their_prototype_beside_the_message_are_corrupt() {
        // a Lua function's tag, prototype index 0, no upvalues: with no prototypes beside the
        // message (all the fuzzer and a corrupt buffer can give), it never decodes
        for index in [0u32, 1, u32::MAX] {
            let mut buf = (1u32 | 1 << 31).to_le_bytes().to_vec();
            buf.push(super::super::TAG_FUNC);
            buf.extend_from_slice(&index.to_le_bytes());
            buf.extend_from_slice(&[0, 0]);
            assert_eq!(
                decode_values(&buf, &mut RustSink::default()),
                Err(Corrupt("a function with no prototype beside the message"))
            );
        }
    }

    #[test]
    fn c_functions_round_trip_by_name() {
        roundtrip(vec![
            Value::CFunction(b"string.format".to_vec()),
            Value::Table(vec![Value::CFunction(b"print".to_vec())], vec![]),
        ]);
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
