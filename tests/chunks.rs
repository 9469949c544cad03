//! Chunk versions: what a state learns when chunks are recompiled or unloaded (the registry's log
//! of removals), and that each version runs in its own environment.

mod support;

use std::sync::Arc;

use support::{compile, config, host, pool, submit, wait};
use vmpool::testing::chunk::{Chunk, Registry};
use vmpool::testing::value::Value;
use vmpool::Error;

fn chunk(name: &str) -> Arc<Chunk> {
    let h = host();
    Arc::new(Chunk::compile(h.st, name, b"return {}").expect("compiles"))
}

#[test]
fn a_state_learns_exactly_the_versions_removed_since_it_last_looked() {
    let mut r = Registry::default();
    let a1 = chunk("a");
    let b = chunk("b");
    r.insert(a1.clone());
    r.insert(b.clone());
    let seen = r.removals();
    assert_eq!(
        r.removed_since(seen).unwrap().count(),
        0,
        "new names remove nothing"
    );
    let a2 = chunk("a");
    r.insert(a2.clone());
    assert!(r.remove(b"b"));
    assert!(!r.remove(b"b"), "removing twice removes nothing more");
    let removed: Vec<u64> = r.removed_since(seen).unwrap().collect();
    assert_eq!(removed, vec![a1.id, b.id]);
    assert!(r.contains_id(a2.id) && !r.contains_id(a1.id) && !r.contains_id(b.id));
    assert_eq!(r.removed_since(r.removals()).unwrap().count(), 0);
}

#[test]
fn a_state_that_fell_behind_the_log_is_told_to_check_each_version() {
    let mut r = Registry::default();
    let first = r.removals();
    for _ in 0..5000 {
        r.insert(chunk("x"));
    }
    assert!(
        r.removed_since(first).is_none(),
        "the log keeps the recent removals only"
    );
    let recent = r.removals() - 10;
    assert_eq!(r.removed_since(recent).unwrap().count(), 10);
}

fn no_function(result: Result<Vec<Value>, Error>, chunk: &str, function: &str) -> bool {
    matches!(result, Err(Error::NoFunction { chunk: c, function: f, .. }) if c == chunk && f == function)
}

#[test]
fn a_chunk_sees_neither_another_chunks_globals_nor_its_own_removed_functions() {
    let p = pool(
        config(1),
        &[
            (
                "a",
                "function g() return 'a' end function gone() return 'here' end",
            ),
            ("b", "return {}"),
        ],
    );
    assert_eq!(
        wait(&submit(&p, "a", "g", &[])).unwrap(),
        vec![Value::Str(b"a".to_vec())]
    );
    assert!(no_function(wait(&submit(&p, "b", "g", &[])), "b", "g"));
    assert_eq!(
        wait(&submit(&p, "a", "gone", &[])).unwrap(),
        vec![Value::Str(b"here".to_vec())]
    );
    compile(&p, &[("a", "function g() return 'a2' end")]);
    assert!(no_function(
        wait(&submit(&p, "a", "gone", &[])),
        "a",
        "gone"
    ));
    assert_eq!(
        wait(&submit(&p, "a", "g", &[])).unwrap(),
        vec![Value::Str(b"a2".to_vec())]
    );
    p.close();
}
