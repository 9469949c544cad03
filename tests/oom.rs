//! A state at its memory limit between Lua calls: whatever the pool itself does in that state
//! outside the protected call (naming the function, keeping a loaded chunk, encoding results)
//! must not allocate unprotected, where running out of memory ends the whole process. Each case
//! runs in a child process of its own (this test binary, run again for one ignored test), since
//! before the fix it aborted.

mod support;

use std::process::Command;

use support::*;
use vmpool::testing::config::Config;
use vmpool::testing::value::Value;
use vmpool::Error;

const LIMIT: usize = 2 * 1024 * 1024;

/// Fills the state's memory up to the limit, down to the smallest allocation, and keeps it (in a
/// global), then returns normally.
const FILL: &str = r#"
local function add(size) hoard = { hoard, string.rep("x", size) } end
function fill()
  hoard = nil
  collectgarbage()
  for _, size in ipairs { 4096, 256, 16, 0 } do
    while pcall(add, size) do end
  end
  return 0
end
"#;

fn full_pool(chunks: &[(&str, &str)]) -> std::sync::Arc<vmpool::testing::pool::Pool> {
    pool(
        Config {
            core: 1,
            memory_limit: Some(LIMIT),
            ..Config::default()
        },
        chunks,
    )
}

fn isolated(name: &str) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            name,
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("VMPOOL_ISOLATED", "1")
        .status()
        .expect("runs the test binary");
    assert!(status.success(), "{name} ended with {status}");
}

#[test]
fn long_function_name_with_the_state_full() {
    isolated("case_long_function_name_with_the_state_full");
}

#[test]
#[ignore = "run in a child process by long_function_name_with_the_state_full"]
fn case_long_function_name_with_the_state_full() {
    // Lua 5.4 interns only strings of up to 40 bytes: a longer name is a new allocation, and one
    // of 3000 bytes is more than the emergency collection can find in a full state
    let long = "f".repeat(3000);
    let long = long.as_str();
    let src = format!("{FILL}\nfunction {long}() return 'ran' end");
    let p = full_pool(&[("m", &src)]);
    let c = submit(&p, "m", "fill", &[]);
    assert!(wait(&c).is_ok());
    let c = submit(&p, "m", long, &[]);
    match wait(&c) {
        Ok(v) => assert_eq!(v, vec![s("ran")]),
        Err(Error::MemoryLimit { .. }) => {}
        Err(e) => panic!("unexpected {e}"),
    }
    let c = submit(&p, "m", "fill", &[]);
    assert!(wait(&c).is_ok() || matches!(wait(&c), Err(Error::MemoryLimit { .. })));
    p.close();
}

#[test]
fn loading_a_chunk_that_fills_the_state() {
    isolated("case_loading_a_chunk_that_fills_the_state");
}

#[test]
#[ignore = "run in a child process by loading_a_chunk_that_fills_the_state"]
fn case_loading_a_chunk_that_fills_the_state() {
    // the top level fills the state and returns a table, which the pool then keeps in its table
    // of loaded chunks; with 64 chunks loaded before, that table must grow (a 4 KiB allocation)
    let small: Vec<(String, String)> = (0..64)
        .map(|i| {
            (
                format!("c{i}"),
                "return { f = function() return 1 end }".to_string(),
            )
        })
        .collect();
    let mut chunks: Vec<(&str, &str)> = small
        .iter()
        .map(|(n, s)| (n.as_str(), s.as_str()))
        .collect();
    let src = format!("{FILL}\nfill()\nreturn {{ f = function() return 2 end }}");
    chunks.push(("m", &src));
    let p = full_pool(&chunks);
    for (name, _) in &small {
        assert_eq!(
            wait(&submit(&p, name, "f", &[])).unwrap(),
            vec![Value::Int(1)]
        );
    }
    let c = submit(&p, "m", "f", &[]);
    match wait(&c) {
        Ok(v) => assert!(matches!(v.as_slice(), [Value::Int(_)])),
        Err(Error::MemoryLimit { .. }) => {}
        Err(e) => panic!("unexpected {e}"),
    }
    let ok = submit(&p, "m", "f", &[]);
    let _ = wait(&ok);
    p.close();
}

#[test]
fn returning_nested_results_from_a_full_state() {
    isolated("case_returning_nested_results_from_a_full_state");
}

#[test]
#[ignore = "run in a child process by returning_nested_results_from_a_full_state"]
fn case_returning_nested_results_from_a_full_state() {
    // encoding nested results needs Lua stack space; Lua 5.1 and LuaJIT raise an unprotected
    // error if growing the stack fails
    let src = format!(
        "{FILL}\nfunction nested(d) local t = {{}} local c = t for i = 1, d do c.x = {{}} c = c.x end fill() return t end"
    );
    let p = full_pool(&[("m", &src)]);
    for depth in [10, 50, 99] {
        let c = submit(&p, "m", "nested", &[Value::Int(depth)]);
        match wait(&c) {
            Ok(v) => assert!(matches!(v.as_slice(), [Value::Table(..)])),
            Err(Error::MemoryLimit { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    p.close();
}
