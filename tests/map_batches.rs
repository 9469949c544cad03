//! `pool:map`'s batches in a state, through the pool's Rust API: each item a call of its own,
//! its first result only, the batch stopping at the first failing item (with the results before
//! it) or, between items, when the map asked it to stop.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::*;
use vmpool::testing::batch::{begin_item, end_item, Items};
use vmpool::testing::call::{Call, Job};
use vmpool::testing::pool::Pool;
use vmpool::testing::spin::AdaptiveSpin;
use vmpool::testing::value::{decode_values, encode_rust, RustSink, Value};
use vmpool::Error;

const CHUNK: &str = r#"
function echo(...) return ... end
function fail_at(x, bad) if x == bad then error("bad item " .. x) end return x * 10 end
function unsendable() return coroutine.wrap(function() end) end
"#;

fn batch(pool: &Pool, func: &str, items: &[Vec<Value>]) -> Arc<Call> {
    let mut c = call(pool, "m", func, &[]);
    let d = Arc::get_mut(&mut c).expect("new call").data.get_mut();
    d.job = Job::Map;
    d.buf.clear();
    for item in items {
        let at = begin_item(&mut d.buf);
        encode_rust(item, &mut d.buf);
        end_item(&mut d.buf, at).expect("small item");
    }
    c
}

fn results(buf: &[u8]) -> Vec<Vec<Value>> {
    Items::new(buf)
        .map(|m| {
            let mut sink = RustSink::default();
            decode_values(m.expect("well formed"), &mut sink).expect("decodes");
            sink.into_values()
        })
        .collect()
}

/// Waits (at most 30 s) for a batch; its error, if it failed (its results are batch-shaped, so
/// `support::wait` cannot decode them).
fn wait_batch(c: &Call) -> Result<(), Error> {
    let spin = AdaptiveSpin::new(Duration::from_micros(20), false);
    assert!(c.wait(Some(Instant::now() + Duration::from_secs(30)), &spin));
    match c.result() {
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(e.clone()),
        None => panic!("finished without an outcome"),
    }
}

fn int(i: i64) -> Value {
    Value::Int(i)
}

#[test]
fn a_batch_runs_each_item_and_keeps_its_first_result() {
    let p = pool(config(1), &[("m", CHUNK)]);
    let c = batch(
        &p,
        "echo",
        &[vec![int(1)], vec![int(2), int(3)], vec![], vec![Value::Nil]],
    );
    p.submit(c.clone()).expect("submitted");
    wait_batch(&c).expect("the batch succeeds");
    let buf = match c.result() {
        Some(Ok(buf)) => buf.clone(),
        other => panic!("expected results, got {other:?}"),
    };
    assert_eq!(
        results(&buf),
        vec![vec![int(1)], vec![int(2)], vec![], vec![Value::Nil]]
    );
    assert_eq!(c.data.lock().items_done, 4);
    assert_balanced(&p.stats());
    assert_eq!(p.stats().succeeded, 1, "a batch is one call");
    p.close();
}

#[test]
fn a_batch_stops_at_the_first_failing_item_with_the_results_before_it() {
    let p = pool(config(1), &[("m", CHUNK)]);
    let items: Vec<_> = (1..=5).map(|i| vec![int(i), int(3)]).collect();
    let c = batch(&p, "fail_at", &items);
    p.submit(c.clone()).expect("submitted");
    match wait_batch(&c) {
        Err(Error::Runtime { message, .. }) => assert!(message.contains("bad item 3"), "{message}"),
        other => panic!("expected the item's error, got {other:?}"),
    }
    let d = c.data.lock();
    assert_eq!(d.items_done, 2);
    assert_eq!(results(&d.buf), vec![vec![int(10)], vec![int(20)]]);
    drop(d);
    let s = p.stats();
    assert_balanced(&s);
    assert_eq!(
        (s.errors, s.created, s.closed),
        (1, 1, 0),
        "the state goes on"
    );
    p.close();
}

#[test]
fn a_result_that_cannot_cross_fails_its_item() {
    let p = pool(config(1), &[("m", CHUNK)]);
    let c = batch(&p, "unsendable", &[vec![]]);
    p.submit(c.clone()).expect("submitted");
    match wait_batch(&c) {
        Err(Error::Unsupported(m)) => assert!(m.contains("a C function that is not"), "{m}"),
        other => panic!("expected a refused result, got {other:?}"),
    }
    assert_eq!(c.data.lock().items_done, 0);
    p.close();
}

#[test]
fn a_batch_told_to_stop_runs_no_further_item_and_keeps_its_state() {
    let p = pool(config(1), &[("m", CHUNK)]);
    let items: Vec<_> = (1..=100).map(|i| vec![int(i)]).collect();
    let c = batch(&p, "echo", &items);
    // the flag the map sets on a running batch when it gives up; set before the batch starts,
    // the state stops before the first item
    c.stop.store(true, Ordering::Relaxed);
    p.submit(c.clone()).expect("submitted");
    assert!(matches!(wait_batch(&c), Err(Error::Cancelled)));
    assert_eq!(c.data.lock().items_done, 0);
    let s = p.stats();
    assert_balanced(&s);
    assert_eq!(
        (s.cancelled, s.created, s.closed),
        (1, 1, 0),
        "not replaced"
    );
    // the state runs the next call as usual
    let next = submit(&p, "m", "echo", &[int(7)]);
    assert_eq!(wait(&next).expect("runs"), vec![int(7)]);
    p.close();
}
