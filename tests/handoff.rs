//! The hand-off of a call to a state: what a state keeps between calls (the last call's chunk and
//! function name) and when it lets go of it.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{config, pool, submit, wait};
use vmpool::testing::spin::AdaptiveSpin;
use vmpool::testing::value::Value;

#[test]
fn a_state_lets_go_of_an_unloaded_chunk_when_it_runs_another_and_at_a_collection() {
    let p = pool(
        config(1),
        &[
            ("a", "function f(x) return x + 1 end"),
            ("b", "function g() return 'b' end"),
        ],
    );
    for (unload_then, name) in [("collect", "a"), ("call b", "a")] {
        // (re)compiled, then called twice: the second call finds the state's chunk and name
        support::compile(&p, &[(name, "function f(x) return x + 1 end")]);
        let weak = Arc::downgrade(&p.chunks.get(name.as_bytes()).expect("compiled"));
        for i in 0..2 {
            let c = submit(&p, name, "f", &[Value::Int(i)]);
            assert_eq!(wait(&c).unwrap(), vec![Value::Int(i + 1)]);
        }
        assert!(p.chunks.remove(name.as_bytes()));
        // only the state holds the unloaded version now (the calls' records are dropped)
        assert!(
            weak.upgrade().is_some(),
            "{unload_then}: the state keeps it until then"
        );
        match unload_then {
            "collect" => {
                let collections = p.collect_idle();
                assert_eq!(collections.len(), 1, "the one state was idle");
                let spin = AdaptiveSpin::new(Duration::from_micros(20), false);
                for c in collections {
                    assert!(c.wait(Some(Instant::now() + Duration::from_secs(30)), &spin));
                }
            }
            _ => {
                let c = submit(&p, "b", "g", &[]);
                assert_eq!(wait(&c).unwrap(), vec![Value::Str(b"b".to_vec())]);
            }
        }
        assert!(
            weak.upgrade().is_none(),
            "{unload_then}: the state let go of the unloaded version"
        );
    }
    p.close();
}

#[test]
fn calls_that_alternate_functions_and_chunks_each_run_the_one_they_name() {
    let p = pool(
        config(1),
        &[
            (
                "a",
                "function f() return 'a.f' end function g() return 'a.g' end",
            ),
            (
                "b",
                "function f() return 'b.f' end function longer_name_than_16() return 'b.l' end",
            ),
        ],
    );
    let order = [
        ("a", "f", "a.f"),
        ("a", "f", "a.f"),
        ("a", "g", "a.g"),
        ("b", "f", "b.f"),
        ("b", "longer_name_than_16", "b.l"),
        ("a", "f", "a.f"),
        ("b", "longer_name_than_16", "b.l"),
        ("b", "f", "b.f"),
    ];
    for (chunk, func, want) in order {
        let c = submit(&p, chunk, func, &[]);
        assert_eq!(
            wait(&c).unwrap(),
            vec![Value::Str(want.as_bytes().to_vec())],
            "{chunk}:{func}"
        );
        // the record still names its chunk and function after the call (for messages)
        let d = c.data.lock();
        assert_eq!(d.func, func.as_bytes(), "{chunk}:{func}");
        assert_eq!(d.chunk.as_ref().map(|c| c.name.as_str()), Some(chunk));
    }
    p.close();
}
