//! The native channel from many threads at once (also run under ThreadSanitizer by
//! scripts/tsan.sh): producers and consumers with random timeouts, try forms and a small
//! channel; every message must arrive exactly once, in order per producer.

use std::sync::Arc;
use std::time::Duration;

use vmpool::testing::channel::{Channel, Fail};

const PRODUCERS: u32 = 4;
const CONSUMERS: usize = 3;
const PER_PRODUCER: u32 = 5000;

fn never() -> bool {
    false
}

#[test]
fn every_message_arrives_exactly_once_in_order_per_producer_under_random_waits() {
    let c = Arc::new(Channel::new("stress", 7, 64));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9u32.wrapping_mul(p + 1);
                let mut seq = 0u32;
                while seq < PER_PRODUCER {
                    rng ^= rng << 13;
                    rng ^= rng >> 17;
                    rng ^= rng << 5;
                    let mut msg = p.to_le_bytes().to_vec();
                    msg.extend_from_slice(&seq.to_le_bytes());
                    let timeout = match rng % 3 {
                        0 => Some(Duration::ZERO),
                        1 => Some(Duration::from_micros(u64::from(rng % 200))),
                        _ => None,
                    };
                    match c.push(msg, timeout, &never) {
                        Ok(()) => seq += 1,
                        Err((Fail::Timeout, _)) => {}
                        Err((f, _)) => panic!("push failed with {f:?}"),
                    }
                }
            })
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|k| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut got: Vec<Vec<u32>> = vec![Vec::new(); PRODUCERS as usize];
                let mut rng = 0x85eb_ca6bu32.wrapping_mul(k as u32 + 1);
                loop {
                    rng ^= rng << 13;
                    rng ^= rng >> 17;
                    rng ^= rng << 5;
                    let r = if rng.is_multiple_of(2) {
                        c.try_pop()
                    } else {
                        c.pop(Some(Duration::from_micros(u64::from(rng % 300))), &never)
                    };
                    match r {
                        Ok(m) => {
                            let p = u32::from_le_bytes(m.bytes[0..4].try_into().unwrap());
                            let s = u32::from_le_bytes(m.bytes[4..8].try_into().unwrap());
                            got[p as usize].push(s);
                        }
                        Err(Fail::Timeout) => {}
                        Err(Fail::Closed) => return got,
                        Err(f) => panic!("pop failed with {f:?}"),
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.join().unwrap();
    }
    c.close();
    let mut all: Vec<Vec<u32>> = vec![Vec::new(); PRODUCERS as usize];
    for k in consumers {
        for (p, seqs) in k.join().unwrap().into_iter().enumerate() {
            // one consumer sees a producer's messages in the order they were pushed
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "out of order from {p}"
            );
            all[p].extend(seqs);
        }
    }
    for (p, mut seqs) in all.into_iter().enumerate() {
        seqs.sort_unstable();
        assert_eq!(seqs, (0..PER_PRODUCER).collect::<Vec<_>>(), "producer {p}");
    }
    assert_eq!(c.len(), 0);
}
