//! `vmpool.metrics([options])`'s native half (`native._metrics(options, adapters)`): reads the
//! options (`labels`) and the adapters' `stats()` tables that `src/lua/vmpool.lua` gathers, and
//! returns the exposition `crate::metrics` writes.

use std::ffi::c_int;

use crate::lua::protect::push_str;
use crate::lua::{State, TNIL, TNONE, TNUMBER, TSTRING, TTABLE};
use crate::metrics::{self, Exposition, Value, ADAPTER_KEYS};
use crate::Error;

fn bad(what: String) -> Error {
    Error::BadArgument(format!("bad argument #1 to 'vmpool.metrics': {what}"))
}

/// The `labels` of the options at index 1, checked.
fn labels(st: State) -> Result<Vec<(String, String)>, Error> {
    match st.type_of(1) {
        TNIL | TNONE => return Ok(Vec::new()),
        TTABLE => {}
        _ => {
            return Err(bad(format!(
                "expected an options table or nothing, got {} (e.g. vmpool.metrics{{ labels = {{ worker = \"1\" }} }})",
                st.type_name(1)
            )))
        }
    }
    if !st.check_stack(4) {
        return Err(Error::no_stack("reading the options of vmpool.metrics"));
    }
    if let Some(key) = crate::host::options::unknown_key(st, 1, "labels") {
        return Err(bad(format!(
            "unknown option '{key}' (vmpool.metrics takes only labels)"
        )));
    }
    let t = st.raw_get_str(1, "labels");
    let result = match t {
        TNIL => Ok(Vec::new()),
        TTABLE => read_labels(st, st.top()),
        _ => Err(bad(format!(
            "labels must be a table of label names to values, got {}",
            crate::lua::type_name(t)
        ))),
    };
    st.pop(1);
    result
}

fn read_labels(st: State, t: c_int) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    st.push_nil();
    while st.next(t) {
        let name = (st.type_of(-2) == TSTRING)
            .then(|| st.to_bytes(-2))
            .flatten()
            .and_then(|b| std::str::from_utf8(b).ok())
            .map(str::to_string);
        let Some(name) = name.filter(|n| metrics::valid_label_name(n)) else {
            let shown = if st.type_of(-2) == TSTRING {
                format!(
                    "'{}'",
                    String::from_utf8_lossy(st.to_bytes(-2).unwrap_or_default())
                )
            } else {
                format!("a {} key", st.type_name(-2))
            };
            st.pop(2);
            return Err(bad(format!(
                "label name {shown} is not allowed: it must match [a-zA-Z_][a-zA-Z0-9_]*, not start with __, and not be one of vmpool's own labels ({})",
                metrics::OWN_LABELS.join(", ")
            )));
        };
        let value = match st.type_of(-1) {
            TSTRING => st
                .to_bytes(-1)
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            TNUMBER => Some(match st.to_integer_exact(-1) {
                Some(i) => i.to_string(),
                None => crate::error::lua_number(st.to_number(-1)),
            }),
            _ => None,
        };
        let Some(value) = value else {
            let ty = st.type_name(-1).to_string();
            st.pop(2);
            return Err(bad(format!(
                "the value of label '{name}' must be a string or a number, got {ty}"
            )));
        };
        out.push((name, value));
        st.pop(1);
    }
    Ok(out)
}

/// The adapters' counters from the table at index 2 (`{ luv = stats, cqueues = ..., ngx = ... }`).
fn adapters(st: State, x: &mut Exposition) {
    if st.type_of(2) != TTABLE || !st.check_stack(3) {
        return;
    }
    for adapter in ["cqueues", "luv", "ngx"] {
        if st.raw_get_str(2, adapter) == TTABLE {
            let t = st.top();
            for &(key, name, counter, help) in ADAPTER_KEYS {
                if st.raw_get_str(t, key) == TNUMBER {
                    let n = st.to_number(-1);
                    let labels = [("adapter", adapter)];
                    if counter {
                        x.counter(name, help, &labels, n.max(0.0) as u64);
                    } else {
                        x.gauge(name, help, &labels, Value::Float(n));
                    }
                }
                st.pop(1);
            }
        }
        st.pop(1);
    }
}

crate::lua_function!(pub fn metrics => metrics_impl);
fn metrics_impl(st: State) -> Result<c_int, Error> {
    let mut x = Exposition::new(labels(st)?);
    metrics::pools(&mut x);
    metrics::dictionaries(&mut x);
    adapters(st, &mut x);
    let text = x.finish();
    st.set_top(0);
    push_str(st, &text, || "returning the metrics".into())?;
    Ok(1)
}
