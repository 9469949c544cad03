//! `vmpool.metrics()`: the Prometheus text exposition format 0.0.4 of every open pool of the
//! process ([`crate::pool::registry`]), every `vmpool.shared` dictionary and the event-loop
//! adapters' counters (read from their `stats()` by the Lua side, `host/metrics_api.rs`).
//!
//! Each family is written once (`# HELP`, `# TYPE`, then its samples for every pool,
//! dictionary or adapter), counters end in `_total`, times are in seconds, and every series is
//! told apart by its labels (pool names are unique among open pools, dictionary names in the
//! process), so there is no duplicate series.

use std::fmt::Write;

use crate::histogram::BOUNDS_NS;

/// One metric family being written.
struct Family {
    name: String,
    kind: &'static str,
    help: &'static str,
    samples: String,
}

/// Builds an exposition; `common` labels (the caller's, e.g. `worker`) go first on every series.
pub struct Exposition {
    common: Vec<(String, String)>,
    families: Vec<Family>,
}

/// A sample's value: integers print as integers, seconds as the shortest exact decimal.
#[derive(Clone, Copy)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Int(n) => write!(f, "{n}"),
            Value::Float(x) if x.is_nan() => f.write_str("NaN"),
            Value::Float(x) if x.is_infinite() => {
                f.write_str(if x > 0.0 { "+Inf" } else { "-Inf" })
            }
            Value::Float(x) => write!(f, "{x}"),
        }
    }
}

/// The labels vmpool sets itself: a caller's label may not take these names.
pub const OWN_LABELS: &[&str] = &["pool", "outcome", "kind", "dict", "adapter", "le"];

/// Whether `name` is a valid label name that a caller may use.
pub fn valid_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    first_ok
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with("__")
        && !OWN_LABELS.contains(&name)
}

/// A label value as the format quotes it: backslash, double quote and line feed escaped.
fn escape_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Seconds of a number of nanoseconds, as a label or a sample.
pub fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Exposition {
    pub fn new(mut common: Vec<(String, String)>) -> Exposition {
        common.sort();
        Exposition {
            common,
            families: Vec::new(),
        }
    }

    fn family(&mut self, name: &str, kind: &'static str, help: &'static str) -> &mut Family {
        let at = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    name: name.to_string(),
                    kind,
                    help,
                    samples: String::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[at]
    }

    /// Adds a sample `family` + `suffix` with the common labels and `labels`.
    fn push(
        &mut self,
        (name, kind, help): (&str, &'static str, &'static str),
        suffix: &str,
        labels: &[(&str, &str)],
        value: Value,
    ) {
        let common = std::mem::take(&mut self.common);
        let f = self.family(name, kind, help);
        let out = &mut f.samples;
        out.push_str(name);
        out.push_str(suffix);
        let all = common
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(labels.iter().copied());
        let mut first = true;
        for (k, v) in all {
            out.push(if first { '{' } else { ',' });
            first = false;
            out.push_str(k);
            out.push_str("=\"");
            escape_value(out, v);
            out.push('"');
        }
        if !first {
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
        self.common = common;
    }

    /// A counter (`name` ends in `_total`).
    pub fn counter(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], v: u64) {
        self.push((name, "counter", help), "", labels, Value::Int(v));
    }

    pub fn gauge(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], v: Value) {
        self.push((name, "gauge", help), "", labels, v);
    }

    /// A histogram of nanoseconds in seconds: `le` counts at [`BOUNDS_NS`], `+Inf`, sum, count.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &'static str,
        labels: &[(&str, &str)],
        (le, count, sum_ns): ([u64; BOUNDS_NS.len()], u64, u64),
    ) {
        let family = (name, "histogram", help);
        let texts: Vec<String> = BOUNDS_NS
            .iter()
            .map(|&b| format!("{}", seconds(b)))
            .collect();
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        for (i, text) in texts.iter().enumerate() {
            with_le.push(("le", text));
            self.push(family, "_bucket", &with_le, Value::Int(le[i]));
            with_le.pop();
        }
        with_le.push(("le", "+Inf"));
        self.push(family, "_bucket", &with_le, Value::Int(count));
        self.push(family, "_sum", labels, Value::Float(seconds(sum_ns)));
        self.push(family, "_count", labels, Value::Int(count));
    }

    /// The text: each family's `# HELP` and `# TYPE`, then its samples.
    pub fn finish(self) -> String {
        let mut out = String::new();
        for f in self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help.replace('\\', "\\\\"));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            out.push_str(&f.samples);
        }
        out
    }
}

/// A histogram's sum from ticks to nanoseconds.
fn ticks_to_ns(
    (le, count, sum): ([u64; BOUNDS_NS.len()], u64, u64),
) -> ([u64; BOUNDS_NS.len()], u64, u64) {
    (le, count, crate::clock::nanos(sum))
}

/// Writes every open pool of the process.
pub fn pools(x: &mut Exposition) {
    for pool in crate::pool::registry::pools() {
        let s = pool.stats();
        let name = pool.name();
        let p = [("pool", name)];
        let outcomes = [
            ("succeeded", s.succeeded),
            ("failed", s.failed),
            ("time_limit", s.time_limits),
            ("memory_limit", s.memory_limits),
            ("timed_out", s.timeouts),
            ("cancelled", s.cancelled),
            ("refused", s.rejected),
        ];
        let ended: u64 = outcomes.iter().map(|o| o.1).sum();
        for (outcome, n) in outcomes {
            x.counter(
                "vmpool_calls_total",
                "Calls that ended, by outcome: succeeded, failed (an error other than a limit, or queued when the pool closed), time_limit, memory_limit, timed_out (no state within acquire_timeout), cancelled, refused (pool exhausted or queue full).",
                &[("pool", name), ("outcome", outcome)],
                n,
            );
        }
        x.gauge(
            "vmpool_calls_in_flight",
            "Calls accepted that have not ended yet (queued or running).",
            &p,
            Value::Int(s.invokes.saturating_sub(ended)),
        );
        x.gauge(
            "vmpool_calls_waiting",
            "Calls queued for a state now.",
            &p,
            Value::Int(s.waiting as u64),
        );
        x.gauge(
            "vmpool_calls_waiting_peak",
            "Most calls queued at once since the pool was created or pool:stats{ reset = true }.",
            &p,
            Value::Int(s.peak_waiting as u64),
        );
        x.histogram(
            "vmpool_call_wait_seconds",
            "Queue wait of the calls a state took: from submission to a state taking the call.",
            &p,
            ticks_to_ns(pool.wait.cumulative(crate::clock::nanos)),
        );
        x.histogram(
            "vmpool_call_run_seconds",
            "Run time of the calls: from start to end in the state.",
            &p,
            ticks_to_ns(pool.run.cumulative(crate::clock::nanos)),
        );
        for (kind, n) in [("core", s.core), ("noncore", s.noncore)] {
            x.gauge(
                "vmpool_states",
                "States alive, by kind (core: resident; noncore: created under load, closed when idle).",
                &[("pool", name), ("kind", kind)],
                Value::Int(n as u64),
            );
        }
        x.gauge(
            "vmpool_states_busy",
            "States reserved for a call now.",
            &p,
            Value::Int(s.busy as u64),
        );
        x.gauge(
            "vmpool_states_busy_peak",
            "Most states busy at once since the pool was created or pool:stats{ reset = true }.",
            &p,
            Value::Int(s.peak_busy as u64),
        );
        x.gauge(
            "vmpool_states_max",
            "Most states the pool may have at once (core + max_noncore; +Inf when unlimited).",
            &p,
            match pool.config.max_states() {
                usize::MAX => Value::Float(f64::INFINITY),
                n => Value::Int(n as u64),
            },
        );
        x.counter(
            "vmpool_states_created_total",
            "States created (a state replaced after a limit counts here and in closed).",
            &p,
            s.created,
        );
        x.counter(
            "vmpool_states_closed_total",
            "States closed, idle closes included.",
            &p,
            s.closed,
        );
        x.counter(
            "vmpool_states_idle_closed_total",
            "Non-core states closed for being idle past idle_timeout.",
            &p,
            s.idle_closed,
        );
        x.gauge(
            "vmpool_threads",
            "Worker threads not yet joined.",
            &p,
            Value::Int(s.threads as u64),
        );
    }
}

/// Writes every `vmpool.shared` dictionary of the process.
pub fn dictionaries(x: &mut Exposition) {
    for named in crate::shared::all() {
        let d = &named.dict;
        let l = [("dict", named.name.as_str())];
        x.gauge(
            "vmpool_shared_dict_capacity_bytes",
            "Capacity of the vmpool.shared dictionary.",
            &l,
            Value::Int(d.capacity() as u64),
        );
        x.gauge(
            "vmpool_shared_dict_free_bytes",
            "Bytes of the capacity in whole free pages, as ngx.shared.DICT:free_space() counts them.",
            &l,
            Value::Int(d.free_space() as u64),
        );
        x.gauge(
            "vmpool_shared_dict_items",
            "Entries stored (expired ones not yet removed included).",
            &l,
            Value::Int(d.items() as u64),
        );
        x.counter(
            "vmpool_shared_dict_evictions_total",
            "Entries evicted to make room for a write.",
            &l,
            d.evictions(),
        );
    }
}

/// The adapters' `stats()` keys that are exported: key, metric name, counter or gauge, help.
pub const ADAPTER_KEYS: &[(&str, &str, bool, &str)] = &[
    (
        "waits",
        "vmpool_adapter_waits_total",
        true,
        "Waits for a call's completion begun.",
    ),
    (
        "resumes",
        "vmpool_adapter_resumes_total",
        true,
        "Waiting coroutines (requests) resumed because their call finished.",
    ),
    (
        "early",
        "vmpool_adapter_early_resumes_total",
        true,
        "Waiting coroutines resumed by other code before their call finished.",
    ),
    (
        "wakeups",
        "vmpool_adapter_wakeups_total",
        true,
        "Times the loop was woken to take finished calls.",
    ),
    (
        "empty",
        "vmpool_adapter_empty_wakeups_total",
        true,
        "Wake-ups that found no finished call.",
    ),
    (
        "completions",
        "vmpool_adapter_completions_total",
        true,
        "Finished calls taken from the completion queue.",
    ),
    (
        "dropped",
        "vmpool_adapter_dropped_total",
        true,
        "Completions whose waiter had stopped waiting.",
    ),
    (
        "batched",
        "vmpool_adapter_batched_total",
        true,
        "Calls handed to the pool as part of a batch.",
    ),
    (
        "timeouts",
        "vmpool_adapter_wait_timeouts_total",
        true,
        "Waits that gave up after wait_timeout (vmpool.ngx).",
    ),
    (
        "flushes",
        "vmpool_adapter_flushes_total",
        true,
        "Batches handed to the pool by the flusher (vmpool.ngx).",
    ),
    (
        "light_thread_starts",
        "vmpool_adapter_light_thread_starts_total",
        true,
        "Starts of the light thread (vmpool.ngx).",
    ),
    (
        "watchers_opened",
        "vmpool_adapter_watchers_opened_total",
        true,
        "Poll handles opened (vmpool.luv).",
    ),
    (
        "dispatchers",
        "vmpool_adapter_dispatchers_started_total",
        true,
        "Dispatcher coroutines started (vmpool.cqueues).",
    ),
    (
        "in_flight",
        "vmpool_adapter_in_flight",
        false,
        "Calls and futures waited for, not yet dispatched.",
    ),
    (
        "waiting",
        "vmpool_adapter_waiting",
        false,
        "Coroutines (requests) waiting now.",
    ),
    (
        "queued",
        "vmpool_adapter_queued",
        false,
        "Finished calls whose completion the next wake-up takes.",
    ),
    (
        "held",
        "vmpool_adapter_held",
        false,
        "Calls filed under a token, not yet taken.",
    ),
    (
        "deferred",
        "vmpool_adapter_deferred",
        false,
        "Calls of an open batch, not yet handed to the pool.",
    ),
    (
        "watchers",
        "vmpool_adapter_watchers",
        false,
        "Poll handles open (vmpool.luv).",
    ),
    (
        "dispatching",
        "vmpool_adapter_dispatchers",
        false,
        "Dispatchers alive (vmpool.cqueues).",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_common_labels_come_first_in_order() {
        let mut x = Exposition::new(vec![
            ("worker".into(), "1".into()),
            ("a".into(), "q\"\\\nz".into()),
        ]);
        x.counter("vmpool_x_total", "Help \\ me.", &[("pool", "p")], 3);
        x.counter("vmpool_x_total", "Help \\ me.", &[("pool", "r")], 4);
        assert_eq!(
            x.finish(),
            "# HELP vmpool_x_total Help \\\\ me.\n# TYPE vmpool_x_total counter\n\
             vmpool_x_total{a=\"q\\\"\\\\\\nz\",worker=\"1\",pool=\"p\"} 3\n\
             vmpool_x_total{a=\"q\\\"\\\\\\nz\",worker=\"1\",pool=\"r\"} 4\n"
        );
    }

    #[test]
    fn label_names_follow_the_format_and_leave_vmpools_own_alone() {
        assert!(valid_label_name("worker") && valid_label_name("_x9"));
        for bad in ["", "9a", "a-b", "__x", "pool", "le", "wörker"] {
            assert!(!valid_label_name(bad), "{bad}");
        }
    }
}
