//! `vmpool.shared` dictionaries from many threads at once (also run under ThreadSanitizer by
//! scripts/tsan.sh): every operation at once on few keys, with evictions between shards, must
//! keep counters exact and the byte accounting whole.

use std::sync::Arc;

use vmpool::testing::shared::dict::{ttl_ns, Dict, Got, Item, Mode, Number, Scalar};

#[test]
fn every_operation_at_once_from_four_threads_keeps_the_dictionary_consistent() {
    // small enough that writes evict, in other shards too
    let d = Arc::new(Dict::new(16 * 1024, 4));
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..4000u32 {
                    let k = format!("k{}", (i * 7 + t) % 23);
                    let k = k.as_bytes();
                    match i % 11 {
                        0 => {
                            let v = Scalar::Str(vec![b'v'; (i % 200) as usize].into());
                            let _ = d.store(Mode::Set, false, k, Some(v), ttl_ns(0.5), i % 3);
                        }
                        1 => {
                            let _ = d.store(Mode::Add, true, k, Some(Scalar::Bool(true)), 0, 0);
                        }
                        2 => {
                            let _ = d.incr(k, Number::Int(1), Some((Number::Int(0), 0)));
                        }
                        3 => {
                            let _ = d.push(k, Item::Num(Number::Float(0.5)), i % 2 == 0);
                        }
                        4 => {
                            let _ = d.pop(k, i % 2 == 0);
                        }
                        5 => {
                            let _ = d.get(k, i % 2 == 0);
                        }
                        6 => {
                            let _ = d.store(Mode::Set, false, k, None, 0, 0);
                        }
                        7 => {
                            let _ = d.expire(k, ttl_ns(0.001));
                            let _ = d.ttl(k);
                            let _ = d.llen(k);
                        }
                        8 => {
                            let _ = d.keys(10);
                        }
                        9 => {
                            let _ = d.flush_expired(5);
                        }
                        _ => {
                            if i % 1000 == 10 {
                                d.flush_all();
                            }
                        }
                    }
                    assert!(d.free_space() <= d.capacity());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    d.flush_all();
    d.flush_expired(0);
    assert_eq!(d.free_space(), d.capacity());
}

#[test]
fn increments_from_many_threads_are_never_lost() {
    let d = Arc::new(Dict::new(1 << 20, 8));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..5000 {
                    let k = format!("c{}", i % 3);
                    d.incr(k.as_bytes(), Number::Int(1), Some((Number::Int(0), 0)))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total: i64 = (0..3)
        .map(|i| match d.get(format!("c{i}").as_bytes(), false) {
            Got::Value {
                value: Scalar::Num(Number::Int(n)),
                ..
            } => n,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(total, 20000);
}
