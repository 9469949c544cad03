//! Messages of scalars written and read without a Lua state, for callers that hold plain values
//! (OpenResty's FFI path, `host/ngx_ffi.rs`): the same format the encoder writes, with none of a
//! [`Sink`](super::Sink)'s table bookkeeping and no owned copy of a string.

use super::{HAS_FUNCTIONS, TAG_FALSE, TAG_FLOAT, TAG_INT, TAG_NIL, TAG_STR, TAG_TRUE};

/// A nil, boolean, number or string, borrowing the string's bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a [u8]),
}

/// Appends a message of `values` to `out`; false, with `out` as it was, when a string is longer
/// than a message can carry (4 GiB) or memory for it cannot be had (the caller then takes the
/// path that raises the error).
pub fn write_scalars(values: &[Scalar<'_>], out: &mut Vec<u8>) -> bool {
    let mut strings = 0usize;
    for v in values {
        if let Scalar::Str(s) = v {
            if u32::try_from(s.len()).is_err() {
                return false;
            }
            strings += s.len();
        }
    }
    if out.try_reserve(4 + 9 * values.len() + strings).is_err() {
        return false;
    }
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    for &v in values {
        put_scalar(out, v);
    }
    true
}

/// Appends one scalar in the message's format (the Rust encoder of `rust.rs` writes its scalars
/// here too). A string's length must fit in 32 bits (the callers check it or never exceed it).
#[inline]
pub(super) fn put_scalar(out: &mut Vec<u8>, v: Scalar<'_>) {
    match v {
        Scalar::Nil => out.push(TAG_NIL),
        Scalar::Bool(b) => out.push(if b { TAG_TRUE } else { TAG_FALSE }),
        Scalar::Int(i) => {
            out.push(TAG_INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Scalar::Float(f) => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Scalar::Str(s) => {
            out.push(TAG_STR);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s);
        }
    }
}

/// Reads a message of at most `out.len()` scalars into `out` and returns how many; `None` for a
/// message with more values, or any value that is not nil, a boolean, a number or a string.
pub fn read_scalars<'a>(buf: &'a [u8], out: &mut [Scalar<'a>]) -> Option<usize> {
    let (head, mut rest) = buf.split_first_chunk::<4>()?;
    let count = u32::from_le_bytes(*head);
    if count & HAS_FUNCTIONS != 0 || count as usize > out.len() {
        return None;
    }
    for slot in out.iter_mut().take(count as usize) {
        let (&tag, after) = rest.split_first()?;
        (*slot, rest) = match tag {
            TAG_NIL => (Scalar::Nil, after),
            TAG_FALSE => (Scalar::Bool(false), after),
            TAG_TRUE => (Scalar::Bool(true), after),
            TAG_INT | TAG_FLOAT => {
                let (word, after) = after.split_first_chunk::<8>()?;
                let word = u64::from_le_bytes(*word);
                let v = if tag == TAG_INT {
                    Scalar::Int(word as i64)
                } else {
                    Scalar::Float(f64::from_bits(word))
                };
                (v, after)
            }
            TAG_STR => {
                let (len, after) = after.split_first_chunk::<4>()?;
                let len = u32::from_le_bytes(*len) as usize;
                if len > after.len() {
                    return None;
                }
                let (s, after) = after.split_at(len);
                (Scalar::Str(s), after)
            }
            _ => return None,
        };
    }
    rest.is_empty().then_some(count as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{decode_values, encode_rust, RustSink, Value};

    fn as_value(s: &Scalar<'_>) -> Value {
        match *s {
            Scalar::Nil => Value::Nil,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
            Scalar::Str(s) => Value::Str(s.to_vec()),
        }
    }

    fn cases() -> Vec<Vec<Scalar<'static>>> {
        static LONG: [u8; 70_000] = [b'y'; 70_000];
        vec![
            vec![],
            vec![Scalar::Nil],
            vec![Scalar::Bool(false), Scalar::Bool(true), Scalar::Nil],
            vec![Scalar::Int(i64::MIN), Scalar::Int(7), Scalar::Float(-0.0)],
            vec![Scalar::Float(f64::NAN), Scalar::Float(1e300)],
            vec![Scalar::Str(b""), Scalar::Str(b"a\0b"), Scalar::Str(&LONG)],
        ]
    }

    #[test]
    fn written_scalars_are_the_message_the_general_encoder_writes() {
        for values in cases() {
            let (mut mine, mut theirs) = (vec![0xAA], vec![0xAA]);
            assert!(write_scalars(&values, &mut mine));
            let rust: Vec<Value> = values.iter().map(as_value).collect();
            encode_rust(&rust, &mut theirs);
            assert_eq!(mine, theirs);
            // and the general decoder reads them back
            let mut sink = RustSink::default();
            decode_values(&mine[1..], &mut sink).unwrap();
            assert_eq!(sink.into_values(), rust);
        }
    }

    #[test]
    fn read_scalars_gives_back_what_was_written_and_refuses_everything_else() {
        for values in cases() {
            let mut buf = Vec::new();
            assert!(write_scalars(&values, &mut buf));
            let mut out = [Scalar::Nil; 3];
            assert_eq!(read_scalars(&buf, &mut out), Some(values.len()));
            for (a, b) in out.iter().zip(&values) {
                assert_eq!(as_value(a), as_value(b));
            }
            // one slot too few
            if !values.is_empty() {
                let mut short = vec![Scalar::Nil; values.len() - 1];
                assert_eq!(read_scalars(&buf, &mut short), None);
            }
            // cut short anywhere, or with a byte too many
            for cut in 0..buf.len().min(40) {
                assert_eq!(read_scalars(&buf[..cut], &mut out), None, "cut at {cut}");
            }
            let mut longer = buf.clone();
            longer.push(0);
            assert_eq!(read_scalars(&longer, &mut [Scalar::Nil; 3]), None);
        }
        for other in [
            vec![Value::Table(vec![Value::Nil], vec![])],
            vec![Value::Nil, Value::Light(0)],
            vec![Value::CFunction(b"print".to_vec())],
        ] {
            let mut buf = Vec::new();
            encode_rust(&other, &mut buf);
            assert_eq!(read_scalars(&buf, &mut [Scalar::Nil; 3]), None);
        }
    }
}
