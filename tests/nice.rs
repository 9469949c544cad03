//! The `nice` option through the pool's Rust API: every worker thread sets the niceness the
//! options computed (`Config::thread_nice`), read back by the state from its own /proc entry.

mod support;

use support::*;
use vmpool::testing::config::Config;
use vmpool::testing::value::Value;

const NICE: &str = r#"
function nice()
  local f = assert(io.open("/proc/thread-self/stat"))
  local stat = f:read("*a")
  f:close()
  local fields = {}
  for field in stat:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = field end
  return tonumber(fields[17])
end
"#;

fn own_nice() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("readable");
    let after_name = &stat[stat.rfind(')').expect("a name") + 2..];
    after_name
        .split(' ')
        .nth(16)
        .expect("19 fields")
        .parse()
        .expect("a number")
}

#[test]
fn worker_threads_run_at_the_niceness_the_options_computed() {
    let target = (own_nice() + 2).min(19);
    let cfg = Config {
        core: 2,
        max_noncore: 1,
        nice: 2,
        thread_nice: Some(target as i32),
        ..Config::default()
    };
    let p = pool(cfg, &[("n", NICE)]);
    // several calls at once: whichever states run them (core ones, a non-core one if all are
    // busy) run at the target
    let calls: Vec<_> = (0..8).map(|_| submit(&p, "n", "nice", &[])).collect();
    // the portable build (other systems) has no per-thread niceness and leaves it alone
    let expected = if cfg!(all(target_os = "linux", not(feature = "portable-sys"))) {
        target
    } else {
        own_nice()
    };
    for c in &calls {
        assert_eq!(wait(c).expect("runs"), vec![Value::Int(expected)]);
    }
    p.close();
}

#[test]
fn without_the_option_worker_threads_keep_the_hosts_niceness() {
    let p = pool(config(1), &[("n", NICE)]);
    let c = submit(&p, "n", "nice", &[]);
    assert_eq!(wait(&c).expect("runs"), vec![Value::Int(own_nice())]);
    p.close();
}
