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
    assert_eq!(d.free_space(), Dict::new(d.capacity(), 1).free_space());
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

/// A value of `VALUE_LEN` bytes, all of them `b'a' + n % 26`, with flags `n`: a read that mixed
/// two writes would find bytes that disagree with each other or with the flags.
const VALUE_LEN: usize = 12;

fn consistent(v: &Got) {
    if let Got::Value { value, flags, .. } = v {
        let Scalar::Str(b) = value else {
            panic!("not a string: {v:?}")
        };
        let want = b'a' + (flags % 26) as u8;
        assert!(
            b.len() == VALUE_LEN && b.iter().all(|&x| x == want),
            "torn: {v:?}"
        );
    }
}

#[test]
fn sets_at_home_racing_with_locked_writes_of_the_same_slots_lose_nothing() {
    // one shard of 16 read cache slots for 3 written keys and 24 others: slots change hands
    // all the time, under sets done in the slots without the lock (same length, no TTL). The
    // threads meet halfway: after that no flush_all can come after a writer's last set.
    let d = Arc::new(Dict::new(16 * 1024, 1));
    let halfway = Arc::new(std::sync::Barrier::new(4));
    const SETS: u32 = 20_000;
    let writers: Vec<_> = (0..3u32)
        .map(|t| {
            let (d, halfway) = (d.clone(), halfway.clone());
            std::thread::spawn(move || {
                let k = format!("w{t}");
                for n in 0..SETS {
                    if n == SETS / 2 {
                        halfway.wait();
                    }
                    let v = [b'a' + (n % 26) as u8; VALUE_LEN];
                    d.store_str(Mode::Set, false, k.as_bytes(), &v, 0, n)
                        .unwrap()
                        .unwrap();
                    if n % 7 == 0 {
                        consistent(&d.get(format!("w{}", (t + 1) % 3).as_bytes(), n % 2 == 0));
                    }
                }
            })
        })
        .collect();
    let churn = {
        let (d, halfway) = (d.clone(), halfway.clone());
        std::thread::spawn(move || {
            for n in 0..30_000u32 {
                if n == 15_000 {
                    halfway.wait();
                }
                let k = format!("o{}", n % 24);
                // other lengths and values with a TTL: locked writes that take slots
                let v = vec![b'o'; 1 + (n % 5) as usize];
                let ttl = if n % 3 == 0 { ttl_ns(60.0) } else { 0 };
                d.store_str(Mode::Set, false, k.as_bytes(), &v, ttl, 0)
                    .unwrap()
                    .unwrap();
                if n % 4000 == 3999 && n < 15_000 {
                    d.flush_all();
                }
                consistent(&d.get(format!("w{}", n % 3).as_bytes(), n % 2 == 0));
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    churn.join().unwrap();
    let n = SETS - 1;
    let last = Got::Value {
        value: Scalar::Str(vec![b'a' + (n % 26) as u8; VALUE_LEN].into()),
        flags: n,
        stale: false,
    };
    // room for the keys below: 16 KiB as nginx counts it holds 63 entries of this size
    for n in 0..24 {
        d.store(Mode::Set, false, format!("o{n}").as_bytes(), None, 0, 0)
            .unwrap();
    }
    for t in 0..3 {
        let k = format!("w{t}");
        assert_eq!(d.get(k.as_bytes(), false), last, "{k}");
        assert_eq!(d.get(k.as_bytes(), true), last, "{k}, locked");
        // and the entry holds it too once other keys have taken every slot
        for i in 0..60 {
            d.store_str(Mode::Set, false, format!("x{i}").as_bytes(), b"x", 0, 0)
                .unwrap()
                .unwrap();
        }
        assert_eq!(
            d.get(k.as_bytes(), true),
            last,
            "{k} after its slot changed hands"
        );
    }
}
