//! The wire format of a `pool:map` batch: the items of one job and, coming back, their results.
//! Both directions are a plain concatenation of length-prefixed messages of [`crate::value`]:
//!
//! ```text
//!   u32 LE byte length, message (a value count and the values), u32 length, message, ...
//! ```
//!
//! Going in, item k's message holds its arguments; coming back, its first result (or none).
//! The prefix lets each side decode one item at a time with the ordinary decoder, which checks
//! that a message is exactly its slice, and lets the host skip nothing: the results of item k are
//! the k-th message. The reader never trusts its input (a short or overlong prefix is corrupt).

use crate::value::Corrupt;

/// Starts an item in `out`: reserves its length prefix and returns where it sits.
pub fn begin_item(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Ends the item begun at `at`: writes its length. An item longer than 4 GiB cannot be written
/// (the value encoder refuses strings that long, so only many of them could make one).
pub fn end_item(out: &mut [u8], at: usize) -> Result<(), crate::Error> {
    let len = u32::try_from(out.len() - at - 4).map_err(|_| {
        crate::Error::Unsupported(
            "cannot pass a map item of more than 4 GiB (pass smaller items)".into(),
        )
    })?;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// The items of a batch, in order.
pub struct Items<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Items<'a> {
    pub fn new(buf: &'a [u8]) -> Items<'a> {
        Items { buf, pos: 0 }
    }
}

impl<'a> Iterator for Items<'a> {
    type Item = Result<&'a [u8], Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let item = (|| {
            let prefix = self
                .buf
                .get(self.pos..self.pos + 4)
                .ok_or(Corrupt("batch ends inside a length"))?;
            let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
            let start = self.pos + 4;
            let end = start
                .checked_add(len)
                .filter(|&e| e <= self.buf.len())
                .ok_or(Corrupt("batch item longer than the batch"))?;
            self.pos = end;
            Ok(&self.buf[start..end])
        })();
        if item.is_err() {
            self.pos = self.buf.len(); // stop after a corrupt item
        }
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{decode_values, encode_rust, RustSink, Value};

    fn batch(items: &[Vec<Value>]) -> Vec<u8> {
        let mut out = Vec::new();
        for item in items {
            let at = begin_item(&mut out);
            encode_rust(item, &mut out);
            end_item(&mut out, at).unwrap();
        }
        out
    }

    #[test]
    fn items_come_back_in_order_each_a_whole_message() {
        let items = vec![
            vec![Value::Int(1)],
            vec![],
            vec![Value::Str(b"two".to_vec()), Value::Nil],
        ];
        let buf = batch(&items);
        let decoded: Vec<Vec<Value>> = Items::new(&buf)
            .map(|m| {
                let mut sink = RustSink::default();
                decode_values(m.expect("well formed"), &mut sink).expect("decodes");
                sink.into_values()
            })
            .collect();
        assert_eq!(items, decoded);
    }

    #[test]
    fn an_empty_batch_has_no_items() {
        assert_eq!(0, Items::new(&[]).count());
    }

    #[test]
    fn a_cut_batch_is_corrupt_and_ends_the_items() {
        let buf = batch(&[vec![Value::Int(7)], vec![Value::Int(8)]]);
        for cut in 1..buf.len() {
            let results: Vec<_> = Items::new(&buf[..cut]).collect();
            let complete = results.iter().filter(|r| r.is_ok()).count();
            assert!(
                results.last().is_some_and(|r| r.is_err()) || complete == 1,
                "cut at {cut}"
            );
            assert!(complete <= 1, "cut at {cut}");
        }
    }
}
