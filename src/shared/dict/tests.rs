//! The dictionary's unit tests.

use super::*;
use std::sync::atomic::AtomicBool;

fn s(x: &str) -> Scalar {
    Scalar::Str(x.as_bytes().into())
}

/// A value whose node takes one page of its own.
fn page() -> Scalar {
    Scalar::Str(vec![b'p'; 3000].into())
}

/// A dictionary with room for three entries of a page each (5 pages; the zone's own two blocks
/// take two).
fn three(shards: usize) -> Dict {
    let d = Dict::new(24576, shards);
    assert_eq!(d.free_space(), 3 * slab::PAGE);
    d
}

fn got(d: &Dict, k: &str) -> Option<Scalar> {
    match d.get(k.as_bytes(), false) {
        Got::Value { value, .. } => Some(value),
        _ => None,
    }
}

#[test]
fn a_set_value_is_read_back_with_its_flags() {
    let d = Dict::new(1 << 20, 4);
    d.store(Mode::Set, false, b"k", Some(s("v")), 0, 7).unwrap();
    assert_eq!(
        d.get(b"k", false),
        Got::Value {
            value: s("v"),
            flags: 7,
            stale: false
        }
    );
}

#[test]
fn expired_entries_are_stale_then_gone() {
    let d = Dict::new(1 << 20, 1);
    d.store(Mode::Set, false, b"k", Some(s("v")), ttl_ns(1.0), 0)
        .unwrap();
    d.advance(1.5);
    assert!(matches!(d.get(b"k", true), Got::Value { stale: true, .. }));
    assert_eq!(d.flush_expired(0), 1);
    assert_eq!(d.get(b"k", true), Got::Missing);
    assert_eq!(d.free_space(), 252 * slab::PAGE);
    // a plain get removes expired entries it finds at the least recently used end
    d.store(Mode::Set, false, b"k", Some(s("v")), ttl_ns(1.0), 0)
        .unwrap();
    d.advance(1.5);
    assert_eq!(d.get(b"k", false), Got::Missing);
    assert_eq!(d.get(b"k", true), Got::Missing);
}

#[test]
fn full_dictionaries_evict_the_least_recently_used_entry() {
    // with one shard or many: one order for the whole dictionary
    for shards in [1, 16] {
        let d = three(shards);
        for k in ["k0", "k1", "k2"] {
            let w = d
                .store(Mode::Set, false, k.as_bytes(), Some(page()), 0, 0)
                .unwrap();
            assert!(!w.forcible);
        }
        assert!(got(&d, "k0").is_some()); // k1 is now the least recently used
        let w = d
            .store(Mode::Set, false, b"k3", Some(page()), 0, 0)
            .unwrap();
        assert!(w.forcible);
        assert!(got(&d, "k1").is_none(), "{shards} shards");
        assert!(got(&d, "k0").is_some() && got(&d, "k2").is_some() && got(&d, "k3").is_some());
        assert_eq!((d.evictions(), d.items()), (1, 3), "{shards} shards");
        assert!(
            d.store(Mode::Set, false, b"k4", Some(page()), 0, 0)
                .unwrap()
                .forcible
        );
        assert!(got(&d, "k2").is_none(), "{shards} shards");
    }
    let d = three(1);
    for k in ["k0", "k1", "k2"] {
        d.store(Mode::Set, false, k.as_bytes(), Some(page()), 0, 0)
            .unwrap();
    }
    assert_eq!(
        d.store(Mode::Set, true, b"k4", Some(page()), 0, 0),
        Err(Refused {
            err: "no memory",
            forcible: false
        })
    );
}

#[test]
fn a_read_entry_gets_a_second_chance_and_then_is_evicted_like_the_others() {
    let d = three(4);
    let set = |k: &str| {
        d.store(Mode::Set, false, k.as_bytes(), Some(page()), 0, 0)
            .unwrap()
    };
    for k in ["k0", "k1", "k2"] {
        set(k);
    }
    // k0 and k1 are read: k2, written last, is the one eviction picks
    assert!(got(&d, "k0").is_some() && got(&d, "k1").is_some());
    assert!(set("k3").forcible);
    assert!(got(&d, "k2").is_none());
    // that pass cleared k0's and k1's marks (they went to the front, k1 last): unread since,
    // k3 being newer, k0 goes next
    assert!(set("k4").forcible);
    assert!(got(&d, "k0").is_none());
    assert!(got(&d, "k1").is_some() && got(&d, "k3").is_some() && got(&d, "k4").is_some());
}

/// What the locked path answers: `get_stale` never uses the read cache.
fn locked(d: &Dict, k: &[u8]) -> Got {
    match d.get(k, true) {
        Got::Value { stale: true, .. } => Got::Missing,
        g => g,
    }
}

#[test]
fn a_get_after_every_kind_of_write_answers_what_the_locked_path_answers() {
    let d = Dict::new(1 << 20, 4);
    let long = "k".repeat(60);
    let check = |what: &str| {
        for k in [&b"a"[..], b"b", long.as_bytes()] {
            assert_eq!(d.get(k, false), locked(&d, k), "after {what}, key {k:?}");
        }
    };
    let set = |k: &[u8], v: Scalar, flags| d.store(Mode::Set, false, k, Some(v), 0, flags);
    set(b"a", s("one"), 1).unwrap();
    set(b"b", Scalar::Num(Number::Int(7)), 0).unwrap();
    set(long.as_bytes(), s(&"v".repeat(60)), 0).unwrap();
    check("set");
    assert_eq!(got(&d, "a"), Some(s("one")));
    d.store_str(Mode::Set, false, b"a", b"two", 0, 2)
        .unwrap()
        .unwrap();
    check("a rewrite in place");
    assert_eq!(got(&d, "a"), Some(s("two")));
    d.store_str(Mode::Replace, false, b"a", b"three!", 0, 3)
        .unwrap()
        .unwrap();
    check("replace");
    assert!(d.store(Mode::Add, false, b"a", Some(s("x")), 0, 0).is_err());
    check("a refused add");
    d.incr(b"b", Number::Int(1), None).unwrap();
    check("incr");
    assert_eq!(got(&d, "b"), Some(Scalar::Num(Number::Int(8))));
    set(b"b", Scalar::Bool(false), 0).unwrap();
    check("a boolean");
    d.store(Mode::Set, false, b"b", None, 0, 0).unwrap();
    check("delete");
    d.push(b"b", Item::Num(Number::Int(1)), true).unwrap();
    check("lpush");
    d.pop(b"b", true).unwrap();
    check("lpop of the last element");
    assert!(d.expire(b"a", ttl_ns(1.0)));
    d.advance(2.0);
    check("expire, then time passing");
    assert_eq!(got(&d, "a"), None);
    set(b"a", s("again"), 0).unwrap();
    d.flush_all();
    check("flush_all");
    assert_eq!(got(&d, "a"), None);
    set(b"a", s("after"), 0).unwrap();
    d.flush_expired(0);
    check("flush_expired");
    assert_eq!(got(&d, "a"), Some(s("after")));
}

#[test]
fn an_evicted_entry_is_not_read_back_from_the_read_cache() {
    let d = three(1);
    let set = |k: &str| {
        d.store(Mode::Set, false, k.as_bytes(), Some(page()), 0, 0)
            .unwrap()
    };
    set("k0");
    set("k1");
    set("k2");
    assert!(set("k3").forcible);
    assert_eq!(got(&d, "k0"), None);
    assert_eq!(locked(&d, b"k0"), Got::Missing);
}

#[test]
fn readers_never_see_half_of_a_write() {
    // every value written is consistent in itself: n bytes of n, flags n; a reader that saw
    // one half of a write and the other half of the next would find a mismatch
    let d = std::sync::Arc::new(Dict::new(1 << 20, 2));
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (d, done) = (d.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = 0u64;
                while !done.load(Ordering::Relaxed) {
                    for k in [&b"k0"[..], b"k1"] {
                        if let Got::Value { value, flags, .. } = d.get(k, false) {
                            match value {
                                Scalar::Str(b) => {
                                    assert_eq!(b.len() as u32, flags);
                                    assert!(b.iter().all(|&x| u32::from(x) == flags));
                                }
                                Scalar::Num(Number::Int(i)) => assert_eq!(i as u32, flags),
                                other => panic!("unexpected {other:?}"),
                            }
                            seen += 1;
                        }
                    }
                }
                seen
            })
        })
        .collect();
    for i in 0..200_000u32 {
        let n = 1 + i % 48;
        let k: &[u8] = if i % 2 == 0 { b"k0" } else { b"k1" };
        if i % 3 == 0 {
            d.store(
                Mode::Set,
                false,
                k,
                Some(Scalar::Num(Number::Int(n.into()))),
                0,
                n,
            )
            .unwrap();
        } else {
            let v = vec![n as u8; n as usize];
            d.store_str(Mode::Set, false, k, &v, 0, n).unwrap().unwrap();
        }
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

#[test]
fn readers_of_one_shard_do_not_wait_for_each_other() {
    let d = std::sync::Arc::new(Dict::new(1 << 20, 1));
    d.store(Mode::Set, false, b"k", Some(s("v")), 0, 0).unwrap();
    // a reader in the middle of its read: a mutex would keep the other thread waiting
    let held = d.shards[0].map.read();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = {
        let d = d.clone();
        std::thread::spawn(move || {
            let _ = tx.send((got(&d, "k"), d.ttl(b"k"), d.llen(b"k"), d.keys(0).len()));
        })
    };
    let seen = rx.recv_timeout(std::time::Duration::from_secs(30));
    drop(held);
    reader.join().unwrap();
    assert_eq!(
        seen.expect("the reads finished while another reader held the shard"),
        (Some(s("v")), Some(0), Err(refused("value not a list")), 1)
    );
}

/// [`Dict::overwrite_string`] under a lock of its own, as `store_str` calls it.
fn overwrite(
    d: &Dict,
    mode: Mode,
    key: &[u8],
    value: &[u8],
    ttl: u64,
    flags: u32,
) -> Option<Written> {
    let now = &d.clock();
    let (own, mut map) = d.write_key(key, now);
    d.expire_oldest(&mut Some((own, &mut *map)), now);
    d.overwrite_string(&mut map, mode, key, value, ttl, flags, now)
}

#[test]
fn a_string_of_the_same_length_is_overwritten_in_place_and_is_spared_by_the_next_eviction() {
    // values of a page each, in a dictionary of three pages
    let v = |c: u8| vec![c; 3000];
    let d = three(1);
    for k in ["k0", "k1", "k2"] {
        d.store(
            Mode::Set,
            false,
            k.as_bytes(),
            Some(Scalar::Str(v(b'0').into())),
            0,
            0,
        )
        .unwrap();
    }
    let before = d.free_space();
    let w = overwrite(&d, Mode::Set, b"k0", &v(b'a'), ttl_ns(5.0), 9);
    assert_eq!(w, Some(Written { forcible: false }));
    assert_eq!(d.free_space(), before, "the same size is accounted");
    assert_eq!(
        d.get(b"k0", false),
        Got::Value {
            value: Scalar::Str(v(b'a').into()),
            flags: 9,
            stale: false
        }
    );
    assert_eq!(d.ttl(b"k0").map(|t| (t as f64 / 1e9).round()), Some(5.0));
    // k1 is the least recently used now, so a new key evicts it, not k0
    assert!(
        d.store(Mode::Set, false, b"k3", Some(page()), 0, 0)
            .unwrap()
            .forcible
    );
    assert!(got(&d, "k1").is_none() && got(&d, "k0").is_some());
    // what it does not do, leaving the entry as it was: another length, add, a missing
    // key, a replace of an expired key, a non-string
    assert_eq!(overwrite(&d, Mode::Set, b"k0", b"short", 0, 0), None);
    assert_eq!(overwrite(&d, Mode::Add, b"k0", &v(b'b'), 0, 0), None);
    assert_eq!(overwrite(&d, Mode::Set, b"nope", &v(b'b'), 0, 0), None);
    d.advance(10.0);
    assert_eq!(overwrite(&d, Mode::Replace, b"k0", &v(b'c'), 0, 0), None);
    assert!(matches!(d.get(b"k0", true), Got::Value { stale: true, .. }));
    d.store(
        Mode::Set,
        false,
        b"n",
        Some(Scalar::Num(Number::Int(1))),
        0,
        0,
    )
    .unwrap();
    assert_eq!(overwrite(&d, Mode::Set, b"n", b"12345678", 0, 0), None);
}

/// Whether `k`'s entry says its value is at home in its slot, and the entry's own bytes.
fn entry_home(d: &Dict, k: &[u8]) -> (bool, Vec<u8>) {
    let map = d.shards[d.locate(k).0].map.read();
    let e = map.peek(k).expect("an entry");
    match &e.value {
        Stored::Scalar(Scalar::Str(b)) => (e.home, b.to_vec()),
        other => panic!("not a string: {other:?}"),
    }
}

fn set_str(d: &Dict, k: &[u8], v: &[u8], flags: u32) {
    d.store_str(Mode::Set, false, k, v, 0, flags)
        .unwrap()
        .unwrap();
}

fn value(v: &str, flags: u32, stale: bool) -> Got {
    Got::Value {
        value: s(v),
        flags,
        stale,
    }
}

#[test]
fn a_string_set_at_home_is_what_every_later_read_and_write_of_the_key_sees() {
    // one shard of 8 read cache slots: the other keys below soon take `k`'s slot
    let d = Dict::with_slots(1 << 20, 1, 4, 8).unwrap();
    set_str(&d, b"k", b"aaaa", 1);
    assert_eq!(entry_home(&d, b"k"), (true, b"aaaa".to_vec()));
    set_str(&d, b"k", b"bbbb", 2);
    // written in the slot only: the entry's copy is the older one
    assert_eq!(entry_home(&d, b"k"), (true, b"aaaa".to_vec()));
    assert_eq!(d.get(b"k", false), value("bbbb", 2, false));
    // get_stale takes the lock, and reads the home slot
    assert_eq!(d.get(b"k", true), value("bbbb", 2, false));
    assert_eq!(d.ttl(b"k"), Some(0));
    // another key taking the slot gives the value back to the entry
    let mut i = 0;
    while entry_home(&d, b"k").0 {
        set_str(&d, format!("other-{i}").as_bytes(), b"x", 0);
        i += 1;
        assert!(i < 1000, "no other key took k's slot");
    }
    assert_eq!(entry_home(&d, b"k"), (false, b"bbbb".to_vec()));
    assert_eq!(d.get(b"k", false), value("bbbb", 2, false));
    // a write of another length takes the lock, and finds the current value's size
    set_str(&d, b"k", b"cc", 3);
    assert_eq!(d.get(b"k", false), value("cc", 3, false));
    // replace at home; add is refused as for any live key
    set_str(&d, b"k", b"dd", 3);
    assert_eq!(
        d.store_str(Mode::Replace, false, b"k", b"ee", 0, 4),
        Some(Ok(Written { forcible: false }))
    );
    assert_eq!(
        d.store_str(Mode::Add, false, b"k", b"ff", 0, 4),
        Some(Err(refused("exists")))
    );
    assert_eq!(d.get(b"k", false), value("ee", 4, false));
    // a TTL takes the lock and ends the home: the entry has the value
    d.store_str(Mode::Set, false, b"k", b"gg", ttl_ns(60.0), 5)
        .unwrap()
        .unwrap();
    assert_eq!(entry_home(&d, b"k"), (false, b"gg".to_vec()));
    assert_eq!(d.get(b"k", false), value("gg", 5, false));
}

#[test]
fn every_locked_write_of_a_key_at_home_starts_from_its_current_value() {
    let d = Dict::new(1 << 20, 1);
    let at_home = |k: &[u8]| {
        set_str(&d, k, b"0000", 0);
        set_str(&d, k, b"1111", 7);
        assert!(entry_home(&d, k).0);
    };
    at_home(b"k");
    assert!(d.expire(b"k", ttl_ns(60.0)));
    assert_eq!(d.get(b"k", true), value("1111", 7, false));
    at_home(b"k");
    assert_eq!(
        d.incr(b"k", Number::Int(1), None),
        Err(refused("not a number"))
    );
    assert_eq!(d.get(b"k", false), value("1111", 7, false));
    at_home(b"k");
    assert_eq!(
        d.push(b"k", Item::Num(Number::Int(1)), true),
        Err(refused("value not a list"))
    );
    assert_eq!(d.get(b"k", true), value("1111", 7, false));
    at_home(b"k");
    d.store(Mode::Set, false, b"k", None, 0, 0).unwrap();
    assert_eq!(d.get(b"k", true), Got::Missing);
    // flush_all: the values at home are what get_stale reads afterwards
    at_home(b"a");
    at_home(b"b");
    for k in ["c", "d", "e", "f"] {
        set_str(&d, k.as_bytes(), b"cdef", 0);
    }
    at_home(b"a");
    at_home(b"b");
    d.flush_all();
    // (get_stale only: a get would remove expired entries, which all are now)
    assert_eq!(d.get(b"a", true), value("1111", 7, true));
    assert_eq!(d.get(b"b", true), value("1111", 7, true));
}

#[test]
fn a_set_at_home_removes_an_expired_entry_as_a_locked_set_does() {
    let d = Dict::new(1 << 20, 1);
    d.store(Mode::Set, false, b"old", Some(s("x")), ttl_ns(1.0), 0)
        .unwrap();
    set_str(&d, b"k", b"aaaa", 0);
    set_str(&d, b"k", b"bbbb", 0);
    assert_eq!(
        entry_home(&d, b"k"),
        (true, b"aaaa".to_vec()),
        "done at home"
    );
    d.advance(2.0);
    // "old", at the least recently used end, has expired: this set goes through the lock
    set_str(&d, b"k", b"cccc", 0);
    assert_eq!(d.get(b"old", true), Got::Missing, "removed by the set");
    assert_eq!(d.get(b"k", false), value("cccc", 0, false));
}

#[test]
fn flush_all_removes_the_three_least_recently_used_entries_at_once() {
    let d = Dict::new(1 << 20, 1);
    for k in ["k1", "k2", "k3", "k4", "k5"] {
        d.store(Mode::Set, false, k.as_bytes(), Some(s("v")), 0, 0)
            .unwrap();
    }
    assert!(got(&d, "k1").is_some()); // used: k2, k3 and k4 are the least recently used
    d.flush_all();
    for k in ["k2", "k3", "k4"] {
        assert_eq!(d.get(k.as_bytes(), true), Got::Missing, "{k}");
    }
    for k in ["k1", "k5"] {
        assert!(matches!(
            d.get(k.as_bytes(), true),
            Got::Value { stale: true, .. }
        ));
    }
    assert_eq!(d.flush_expired(0), 2);
    assert_eq!(d.free_space(), 252 * slab::PAGE);
    // with several shards, three in all
    let d = Dict::new(1 << 20, 4);
    for i in 0..20 {
        d.store(
            Mode::Set,
            false,
            format!("k{i}").as_bytes(),
            Some(s("v")),
            0,
            0,
        )
        .unwrap();
    }
    d.flush_all();
    assert_eq!(d.flush_expired(0), 17);
}

#[test]
fn add_and_replace_of_nil_answer_as_ngx_does_and_change_nothing() {
    let d = Dict::new(1 << 20, 1);
    d.store(Mode::Set, false, b"k", Some(s("v")), 0, 0).unwrap();
    for mode in [Mode::Add, Mode::Replace] {
        for k in [&b"k"[..], b"missing"] {
            assert_eq!(d.store(mode, false, k, None, 0, 0), Err(refused(NIL_ADD)));
        }
    }
    assert_eq!(got(&d, "k"), Some(s("v")));
    assert_eq!(got(&d, "missing"), None);
}

#[test]
fn an_incr_to_nan_is_refused_and_keeps_the_old_value() {
    let d = Dict::new(1 << 20, 1);
    let inf = Scalar::Num(Number::Float(f64::INFINITY));
    d.store(Mode::Set, false, b"k", Some(inf.clone()), 0, 0)
        .unwrap();
    let minus_inf = Number::Float(f64::NEG_INFINITY);
    assert_eq!(d.incr(b"k", minus_inf, None), Err(refused(NAN_SUM)));
    assert_eq!(got(&d, "k"), Some(inf));
    let init = Some((Number::Float(f64::INFINITY), 0));
    assert_eq!(d.incr(b"new", minus_inf, init), Err(refused(NAN_SUM)));
    assert_eq!(got(&d, "new"), None);
}

#[test]
fn a_write_refused_for_want_of_room_has_removed_the_old_value_as_in_ngx() {
    let d = three(1);
    let empty = d.free_space();
    d.store(Mode::Set, false, b"k", Some(s("small")), 0, 0)
        .unwrap();
    let big = Scalar::Str(vec![b'x'; 5 * slab::PAGE].into());
    assert_eq!(
        d.store(Mode::Set, true, b"k", Some(big.clone()), 0, 0),
        Err(refused("no memory"))
    );
    assert_eq!(got(&d, "k"), None);
    // larger than the whole dictionary: evicts what there is first, and says so
    for k in ["a", "b", "c"] {
        d.store(Mode::Set, false, k.as_bytes(), Some(page()), 0, 0)
            .unwrap();
    }
    assert_eq!(
        d.store(Mode::Set, false, b"k", Some(big), 0, 0),
        Err(Refused {
            err: "no memory",
            forcible: true
        })
    );
    assert_eq!(d.free_space(), empty);
}

#[test]
fn accounting_returns_to_zero_after_every_kind_of_removal() {
    let d = Dict::new(1 << 16, 4);
    for i in 0..50u32 {
        let k = format!("k{i}");
        d.store(Mode::Set, false, k.as_bytes(), Some(s("value")), 0, 0)
            .unwrap();
        d.push(format!("l{i}").as_bytes(), Item::Num(Number::Int(1)), true)
            .unwrap();
        d.incr(
            format!("n{i}").as_bytes(),
            Number::Int(1),
            Some((Number::Int(0), 0)),
        )
        .unwrap();
    }
    for i in 0..50u32 {
        d.store(Mode::Set, false, format!("k{i}").as_bytes(), None, 0, 0)
            .unwrap();
        assert!(d.pop(format!("l{i}").as_bytes(), false).unwrap().is_some());
    }
    d.flush_all();
    d.flush_expired(0);
    assert_eq!(d.free_space(), Dict::new(1 << 16, 4).free_space());
}

#[test]
fn threads_evicting_from_each_others_shards_keep_the_accounting_exact() {
    let d = std::sync::Arc::new(Dict::new(24576, 4));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..3000u32 {
                    let k = format!("t{t}-{}", i % 97);
                    let v = Scalar::Str(vec![b'x'; (i % 300) as usize].into());
                    let _ = d.store(Mode::Set, i % 5 == 0, k.as_bytes(), Some(v), 0, 0);
                    let _ = d.push(b"shared-list", Item::Num(Number::Int(i as i64)), i % 2 == 0);
                    if i % 3 == 0 {
                        let _ = d.pop(b"shared-list", true);
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
    assert_eq!(d.free_space(), 3 * slab::PAGE);
}

#[test]
fn threads_hammering_the_same_keys_keep_counts_exact() {
    let d = std::sync::Arc::new(Dict::new(1 << 20, 8));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..2000 {
                    let k = format!("c{}", i % 10);
                    d.incr(k.as_bytes(), Number::Int(1), Some((Number::Int(0), 0)))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let total: i64 = (0..10)
        .map(|i| match got(&d, &format!("c{i}")) {
            Some(Scalar::Num(Number::Int(n))) => n,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(total, 8000);
}

#[test]
fn eviction_takes_the_least_recently_used_entry_of_the_whole_dictionary_whatever_its_shard() {
    // 22 free pages, an entry of a page each, keys spread over 16 shards
    let d = Dict::new(100 << 10, 16);
    let set = |k: &str| {
        d.store(Mode::Set, false, k.as_bytes(), Some(page()), 0, 0)
            .unwrap()
    };
    for i in 0..22 {
        assert!(!set(&format!("p{i}")).forcible);
    }
    // read: a second chance each
    assert!(got(&d, "p0").is_some() && got(&d, "p1").is_some());
    for i in 0..5 {
        assert!(set(&format!("n{i}")).forcible);
    }
    for i in 2..7 {
        assert!(
            got(&d, &format!("p{i}")).is_none(),
            "p{i} is one of the 5 oldest unread"
        );
    }
    for i in (0..2).chain(7..22) {
        assert!(
            got(&d, &format!("p{i}")).is_some(),
            "p{i} was evicted out of order"
        );
    }
}

#[test]
fn a_write_removes_the_dictionary_s_two_oldest_expired_entries_whatever_their_shard() {
    let d = Dict::new(1 << 20, 16);
    for k in ["a", "b", "c"] {
        d.store(Mode::Set, false, k.as_bytes(), Some(s("v")), ttl_ns(1.0), 0)
            .unwrap();
    }
    d.store(Mode::Set, false, b"live", Some(s("v")), 0, 0)
        .unwrap();
    d.advance(2.0);
    // any write, in whichever shard: ngx's expire(ctx, 1) takes the two oldest if expired
    d.store(Mode::Set, false, b"other", Some(s("v")), 0, 0)
        .unwrap();
    assert_eq!(d.get(b"a", true), Got::Missing);
    assert_eq!(d.get(b"b", true), Got::Missing);
    // and the next one (an llen, as ngx's): c, then live (not expired) stops it. (Not read
    // before: get_stale is a use, as ngx's lookup moves what it finds to the front.)
    assert!(d.llen(b"nothing").is_ok());
    assert_eq!(d.get(b"c", true), Got::Missing);
    assert!(got(&d, "live").is_some());
}
