//! Every place the code can answer "vmpool: internal error (please report it)", each with the
//! reason no Lua program can reach it. A new `Error::Internal` site fails this test until it is
//! listed here with its reason, or turned into an error that says what the user did and what to
//! do (`Error::no_stack`, `Error::private`, `Error::NoDescriptor`, ...).

use std::path::Path;

/// (file, start of the message, why a program cannot cause it)
const SITES: &[(&str, &str, &str)] = &[
    ("src/call.rs", "a call finished without an outcome",
     "finish() is only called with a real outcome; Pending is the state before it"),
    ("src/child/batch.rs", "bad map batch:",
     "the batch message is written by the host's own encoder in the same process"),
    ("src/child/mod.rs", "call without a chunk",
     "every call the host posts names a compiled chunk it holds (checked before submit)"),
    ("src/child/run.rs", "a call failed without a cause",
     "Child::call_failed runs only when lua_pcall failed or the trampoline noted a failure"),
    ("src/child/run.rs", "bad call message:",
     "the call message is written by the host's own encoder; more arguments than a call takes are refused before it is sent (call_io::too_many_args)"),
    ("src/chunk.rs", "cannot dump chunk",
     "lua_dump fails only if its writer does, and ours appends to a Vec"),
    ("src/host/call_io.rs", "a spare call was shared",
     "spare calls come back only from futures the host dropped: nobody else holds them"),
    ("src/host/call_io.rs", "a spare function call was shared",
     "as above, for pool:invoke(fn, ...)"),
    ("src/host/call_io.rs", "outcome read before the call finished",
     "results are read only after the call's state is DONE"),
    ("src/host/call_io.rs", "cannot decode results:",
     "results are encoded by the state's own encoder; more results than can cross are refused in the state, by name; a host stack without room for them is Error::NoStack"),
    ("src/channel/stream.rs", "a stream push without a timeout timed out",
     "Channel::push answers Timeout only when given a timeout, and a stream's push has none"),
    ("src/host/channel_api.rs", "cannot decode a channel message:",
     "a channel's messages are written only by the same library's encoder (channel_api.rs's push); a stack without room for them is Error::NoStack"),
    ("src/host/map_run.rs", "a spare call was shared",
     "as in call_io.rs: a map's batches are its own calls"),
    ("src/host/map_run.rs", "a map batch came back unfinished",
     "a batch is collected only after its call is DONE"),
    ("src/host/map_run.rs", "cannot decode map results:",
     "as for results: written by the state's own encoder; no stack room is Error::NoStack"),
    ("src/host/mod.rs", "the adapter loader does not compile:",
     "the loader is Lua source built into the library (every suite loads it)"),
    ("src/host/mod.rs", "the module's Lua part does not compile:",
     "built-in source, loaded by every test"),
    ("src/host/mod.rs", "the module's Lua part failed:",
     "built-in source; running out of memory there is reported as Error::Host"),
    ("src/host/ngx_state_api.rs", "ngx_cycle is not set",
     "states are created in nginx workers (and the master) only after nginx set ngx_cycle"),
    ("src/host/ngx_state_api.rs", "ngx_lua has no main configuration",
     "the symbols it looks up are ngx_lua's, so ngx_lua is loaded and configured"),
    ("src/host/ngx_state_api.rs", "vmpool/ngx_state.lua does not compile:",
     "built-in source, loaded by the nginx suite"),
    ("src/host/notifier_api.rs", "the light thread's doorbell connection did not arrive:",
     "the light thread connects before it calls accept; running out of descriptors is Error::NoDescriptor"),
];

/// (file, message) of every `Error::Internal(` in `src/` but the enum's own definition.
fn sites_in_code() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == "src/error.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("Error::Internal(") {
                rest = &rest[at + "Error::Internal(".len()..];
                let quote = rest
                    .find('"')
                    .expect("an Error::Internal without a message");
                let msg = &rest[quote + 1..];
                let end = msg.find('"').unwrap();
                out.push((rel.clone(), msg[..end].to_string()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_internal_error_site_is_listed_with_the_reason_no_program_reaches_it() {
    let code = sites_in_code();
    let unlisted: Vec<_> = code
        .iter()
        .filter(|(f, m)| !SITES.iter().any(|(sf, sm, _)| sf == f && m.starts_with(sm)))
        .collect();
    assert!(
        unlisted.is_empty(),
        "Error::Internal sites with no reason listed in tests/internal_errors.rs (turn each into a \
         clear error, or list it with why no program can reach it): {unlisted:#?}"
    );
    let gone: Vec<_> = SITES
        .iter()
        .filter(|(sf, sm, _)| !code.iter().any(|(f, m)| f == sf && m.starts_with(sm)))
        .collect();
    assert!(
        gone.is_empty(),
        "listed sites no longer in the code: {gone:#?}"
    );
    assert_eq!(code.len(), SITES.len(), "one entry per site");
}
