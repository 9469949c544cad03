//! The state's side of `pool:stream`: a call whose record carries a channel (`CallData::stream`)
//! runs with that channel as this thread's current stream (`Scope`), and `coroutine.yield(...)`
//! at the call's top level (the state's main thread, not a coroutine of its own) pushes the
//! values onto it instead of yielding, waiting while the channel is full (the backpressure).
//! Every state's `coroutine.yield` is [`STREAM_YIELD`] (installed when the state is created):
//! anywhere else it is the plain yield. The channel is closed when the call ends, however it
//! ends, which tells the host's iterator that no more items come.

use std::cell::RefCell;
use std::sync::Arc;

use mlua::ffi;

use super::{Channel, Fail, Message};
use crate::lua::{State, TNIL};
use crate::value::{self, Role};

/// What a stream's wait needs from the state it runs in: its stop test and the error the stop
/// raises (`child::limits`, passed in to keep `channel` free of `child`).
pub struct Current {
    chan: Arc<Channel>,
    stop: fn() -> bool,
    stop_error: fn(State) -> crate::Error,
    /// An item found the channel closed: the consumer ended the stream (see [`consumer_closed`]).
    consumer_closed: bool,
}

thread_local! {
    static CURRENT: RefCell<Option<Current>> = const { RefCell::new(None) };
    /// The message of a failed item, raised from [`stream_yield`]'s frame (which must own
    /// nothing with a destructor when Lua jumps out of it).
    static FAILURE: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The current stream of this thread while it lives; closes the channel when dropped.
pub struct Scope(());

impl Scope {
    pub fn enter(
        chan: Option<Arc<Channel>>,
        stop: fn() -> bool,
        stop_error: fn(State) -> crate::Error,
    ) -> Option<Scope> {
        let chan = chan?;
        CURRENT.with(|c| {
            *c.borrow_mut() = Some(Current {
                chan,
                stop,
                stop_error,
                consumer_closed: false,
            })
        });
        Some(Scope(()))
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(c) = CURRENT.with(|c| c.borrow_mut().take()) {
            c.chan.close();
        }
    }
}

/// Whether this thread's stream call had an item refused because the consumer closed the stream
/// (`break`, `stream:close()`, the stream collected): the call then ends as cancelled, as its
/// consumer meant, whatever error the refused item raised (`Child::run`).
pub fn consumer_closed() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|c| c.consumer_closed))
}

/// `coroutine.yield` in every pool state.
pub const STREAM_YIELD: ffi::lua_CFunction = crate::lua::c_function(stream_yield);

/// A plain `extern "C-unwind"` function with nothing to drop in its frame: `lua_yield` and
/// `lua_error` leave it by a long jump (or LuaJIT's unwinding) on some runtimes.
unsafe extern "C-unwind" fn stream_yield(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls this with its own live state on this thread.
    let st = unsafe { State::from_raw(l) };
    // SAFETY: pushes the running thread (1 when it is the main one) and pops it again.
    let main = unsafe {
        let m = ffi::lua_pushthread(l) == 1;
        ffi::lua_settop(l, -2);
        m
    };
    if main {
        match push_item(st) {
            Ok(true) => return 0,
            Ok(false) => {}
            Err(()) => {
                // the message stays in FAILURE, unchanged, while Lua copies it
                let (p, n) = FAILURE.with(|f| {
                    let f = f.borrow();
                    (f.as_ptr(), f.len())
                });
                // SAFETY: `p..p+n` is FAILURE's buffer, alive and unchanged during the copy; Lua
                // leaves this frame by its error, and nothing here needs dropping.
                unsafe {
                    ffi::lua_settop(l, 0);
                    ffi::lua_pushlstring(l, p as *const std::ffi::c_char, n);
                    ffi::lua_error(l);
                }
            }
        }
    }
    let n = st.top();
    // SAFETY: returns the yield to Lua as the library's own `coroutine.yield` does.
    unsafe { ffi::lua_yield(l, n) as isize }
}

/// Pushes the values on the stack as an item of the current stream: `Ok(false)` when this thread
/// runs no stream; `Err` with the message in `FAILURE` when the push failed.
fn push_item(st: State) -> Result<bool, ()> {
    let Some((chan, stop, stop_error)) = CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map(|c| (c.chan.clone(), c.stop, c.stop_error))
    }) else {
        return Ok(false);
    };
    let fail = |_: State, e: crate::Error| {
        FAILURE.with(|f| *f.borrow_mut() = e.to_string());
        Err(())
    };
    let count = st.top();
    if count < 1 || st.type_of(1) == TNIL {
        return fail(st, crate::Error::BadArgument(
            "coroutine.yield in a stream's function needs an item whose first value is not nil (the iterator ends at a nil): wrap such values in a table".into(),
        ));
    }
    let mut buf = Vec::with_capacity(64);
    let mut encoder = value::Encoder::default();
    if let Err(e) = encoder.encode(st, 1, count, &mut buf, Role::Argument(b"coroutine.yield")) {
        return fail(st, e);
    }
    let item = Message {
        bytes: buf,
        protos: encoder.take_protos(),
    };
    let size = item.size();
    match chan.push(item, None, &stop) {
        Ok(()) => Ok(true),
        Err((Fail::Stopped, _)) => {
            let e = stop_error(st);
            fail(st, e)
        }
        Err((Fail::Closed, _)) => {
            CURRENT.with(|c| {
                if let Some(c) = c.borrow_mut().as_mut() {
                    c.consumer_closed = true;
                }
            });
            fail(st, crate::Error::BadArgument(
            "the stream was closed by its consumer (the loop ended early, stream:close(), or the stream was collected)".into(),
        ))
        }
        Err((Fail::TooLarge, _)) => fail(st, crate::Error::BadArgument(format!(
            "a stream item of {size} encoded bytes is larger than the stream's buffer ({} bytes): yield smaller items",
            chan.byte_capacity()
        ))),
        Err((Fail::Timeout, _)) => fail(st, crate::Error::Internal("a stream push without a timeout timed out".into())),
    }
}
