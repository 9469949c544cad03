//! The Lua face of `vmpool.channel` and `vmpool.select` (`channel/`), in the host and in every
//! pool state (`require "vmpool"` there loads this same library, so a name reaches the same
//! channel). The functions here are the native halves; `src/lua/vmpool.lua` puts them behind the
//! methods and decides how to wait:
//!
//! - the blocking forms (`_chan_push`, `_chan_pop`, `_select`) wait on this thread: in a pool
//!   state under the running call's stop test (cancel, bounded close, time limit: `child::limits`),
//!   in the host until Ctrl-C (the hook change that `fut:wait()` watches too);
//! - the scheduler forms (`_chan_push_or_wait`, `_chan_pop_or_wait`, `_select_or_wait`) never
//!   wait: they complete the operation now, answer why it cannot complete (`nil, "closed"`,
//!   `nil, "timeout"`), or file the waiter given as their third argument (`vmpool.waiter`,
//!   `channel/watch.rs`) and return it. The coroutine then waits for the waiter through its
//!   scheduler's completion queue, like a call (`w:_subscribe(notifier, token)`), and retries
//!   with the same waiter, which keeps the operation's deadline.

use std::cell::RefCell;
use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use crate::channel::watch::Watch;
use crate::channel::{self, select, Channel, Fail, Message, Side};
use crate::host::call_io::HostWait;
use crate::host::notifier_api::notifier_arg;
use crate::host::userdata::{self, Frame, Held};
use crate::lua::protect::decode_protected;
use crate::lua::{State, TNIL, TNUMBER, TSTRING, TTABLE};
use crate::notify::SubscriberId;
use crate::value::{self, Role};
use crate::Error;

pub struct ChannelHandle {
    chan: Arc<Channel>,
    /// A stream's own handle: collecting it closes the channel, which ends the stream's call.
    owner: bool,
}

impl Drop for ChannelHandle {
    fn drop(&mut self) {
        if self.owner {
            self.chan.close();
        }
    }
}

impl userdata::Tagged for ChannelHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0010;
    const NAME: &'static str = "channel";
    const SHARED: bool = true;
}

/// One channel operation of a scheduler's coroutine (`vmpool.lua` makes one per operation that
/// has to wait).
pub struct WaiterHandle {
    watch: Watch,
    /// The first `*_or_wait` set the deadline.
    started: bool,
}

impl userdata::Tagged for WaiterHandle {
    const TAG: u64 = 0x766d_706f_6f6c_0011;
    const NAME: &'static str = "channel waiter";
}

/// The channel of the handle at `idx` (`self` of `method`).
#[inline]
fn channel_at(st: State, idx: c_int, method: &str) -> Result<Arc<Channel>, Error> {
    let chan = userdata::with(st, idx, |h: &ChannelHandle| h.chan.clone()).map_err(|_| {
        Error::BadArgument(format!(
            "bad self to 'channel:{method}': expected a channel, got {} (call it as ch:{method}(...), with a colon)",
            st.type_name(idx)
        ))
    })?;
    chan.check_process()?;
    Ok(chan)
}

/// The waiter at `idx`, held for the caller's frame.
#[inline]
fn waiter_at(f: &Frame, st: State, idx: c_int) -> Result<Held<'_, WaiterHandle>, Error> {
    userdata::hold(f, st, idx).map_err(|a| {
        a.error::<WaiterHandle>(|| {
            Error::private("channel waits", "a waiter from vmpool's own code")
        })
    })
}

/// The timeout at `idx`: nil = no limit, a non-negative number of seconds.
fn timeout_at(st: State, idx: c_int, method: &str) -> Result<Option<Duration>, Error> {
    match st.type_of(idx) {
        TNIL => Ok(None),
        TNUMBER => {
            let t = st.to_number(idx);
            if t.is_nan() || t < 0.0 {
                return Err(bad_timeout(st, idx, method));
            }
            // too long for a clock: no limit, as every other wait does
            Ok(Duration::try_from_secs_f64(t).ok())
        }
        _ => Err(bad_timeout(st, idx, method)),
    }
}

fn bad_timeout(st: State, idx: c_int, method: &str) -> Error {
    let got = if st.type_of(idx) == TNUMBER {
        crate::error::lua_number(st.to_number(idx))
    } else {
        st.type_name(idx).to_string()
    };
    Error::BadArgument(format!(
        "bad timeout to '{method}': expected seconds (a non-negative number, 0 = do not wait) or nil (wait as long as it takes), got {got}"
    ))
}

/// Encodes the values from `first` to the top as one message.
fn message(st: State, first: c_int, method: &str) -> Result<Message, Error> {
    let count = st.top() - first + 1;
    if count < 1 || st.type_of(first) == TNIL {
        return Err(Error::BadArgument(format!(
            "'{method}' needs a message whose first value is not nil (got {}); pop answers nil, \"closed\" and nil, \"timeout\", so a leading nil would read as one of those: wrap such values in a table",
            if count < 1 { "no values" } else { "nil" }
        )));
    }
    // room for a few small values: growing from empty reallocated up to three times
    let mut buf = Vec::with_capacity(64);
    let mut encoder = value::Encoder::default();
    encoder.encode(
        st,
        first,
        count,
        &mut buf,
        Role::Argument(method.as_bytes()),
    )?;
    Ok(Message {
        bytes: buf,
        protos: encoder.take_protos(),
    })
}

/// Pushes the values of the message `chan` gave (onto a stack holding at most one value). When
/// the state has no memory or stack room for them, the message goes back to the front of
/// `chan`, so that no message is lost.
fn push_message(st: State, chan: &Channel, m: Message, what: &str) -> Result<c_int, Error> {
    // scalars allocate nothing, so they need no protected call (as `call_io::push_outcome`); the
    // callers have at most one value on the stack, so 16 slots of LUA_MINSTACK's 20 are free
    if let Some(n) = value::push_scalars(st, &m.bytes, 16) {
        return Ok(n);
    }
    let doing = || format!("receiving a message from {what}");
    let decoded = decode_protected(st, 0, doing, |st| {
        value::push_message(st, &m.bytes, &m.protos, None, false)
    })
    .and_then(|r| {
        r.map_err(|c| match c.0 {
            what if value::is_no_stack(what) => Error::NoStack { doing: doing() },
            what => Error::Internal(format!("cannot decode a channel message: {what}")),
        })
    });
    match decoded {
        Ok(n) => Ok(n),
        Err(e) => {
            chan.give_back(m);
            Err(crate::host::in_pool_state(e, || {
                format!("; the message stays in channel '{}'", chan.name)
            }))
        }
    }
}

fn push_fail(st: State, f: Fail) -> c_int {
    st.set_top(0);
    st.push_nil();
    st.push_str(match f {
        Fail::Closed => "closed",
        _ => "timeout",
    });
    2
}

fn too_large(chan: &Channel, size: usize) -> Error {
    Error::BadArgument(format!(
        "a message of {size} encoded bytes can never fit channel '{}' (bytes = {}): send smaller messages or create the channel with a larger 'bytes'",
        chan.name,
        chan.byte_capacity()
    ))
}

/// The stop test a blocking wait polls.
type StopTest<'a> = &'a dyn Fn() -> bool;

/// Runs a blocking wait on this thread with the stop test of where it runs: a pool state's call,
/// or the host's Ctrl-C. `wait` returns `Err(Fail::Stopped)` when the test said so.
fn blocking<T>(
    st: State,
    doing: &str,
    wait: &mut dyn FnMut(StopTest<'_>) -> Result<T, Fail>,
) -> Result<Result<T, Fail>, Error> {
    if crate::child::call_armed() {
        return match wait(&crate::child::call_must_stop) {
            Err(Fail::Stopped) => Err(crate::child::stop_error(st)),
            r => Ok(r),
        };
    }
    let host = RefCell::new(HostWait::new(st));
    loop {
        match wait(&|| host.borrow_mut().changed()) {
            Err(Fail::Stopped) => {
                if let Some(e) = host.borrow().interrupt_error_for(doing) {
                    return Err(e);
                }
                // a hook changed for another reason: wait again
            }
            r => return Ok(r),
        }
    }
}

crate::lua_function!(pub fn channel => channel_impl);
/// `_channel(name, options, metatable)`: the handle of the channel called `name`.
fn channel_impl(st: State) -> Result<c_int, Error> {
    let name = match st.type_of(1) {
        // invalid UTF-8 is refused rather than made text, which would make two names one channel
        TSTRING => match std::str::from_utf8(st.string_bytes(1)) {
            Ok(name) => name.to_owned(),
            Err(_) => return Err(Error::BadArgument(
                "bad argument #1 to 'vmpool.channel': the name is not valid UTF-8; use a text name"
                    .into(),
            )),
        },
        _ => {
            return Err(Error::BadArgument(format!(
                "bad argument #1 to 'vmpool.channel': expected a name (string), got {}",
                st.type_name(1)
            )))
        }
    };
    if name.is_empty() {
        return Err(Error::BadArgument(
            "bad argument #1 to 'vmpool.channel': the name is empty".into(),
        ));
    }
    let mut opts = channel::Options::default();
    match st.type_of(2) {
        TNIL => {}
        TTABLE => {
            for (key, slot) in [("capacity", &mut opts.capacity), ("bytes", &mut opts.bytes)] {
                st.raw_get_str(2, key);
                let v = match st.type_of(-1) {
                    TNIL => None,
                    TNUMBER => Some(st.to_number(-1))
                        .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 9.007_199_254_740_992e15)
                        .map(|f| f as i64),
                    _ => None,
                };
                let given = st.type_of(-1) != TNIL;
                st.pop(1);
                match v {
                    Some(n) => *slot = Some(n as usize),
                    None if given => {
                        return Err(Error::BadArgument(format!(
                            "option '{key}' to vmpool.channel must be a whole number of {} (at least 1)",
                            if key == "bytes" { "bytes" } else { "messages" }
                        )))
                    }
                    None => {}
                }
            }
            // an unknown option is most likely a typo
            st.push_nil();
            while st.next(2) {
                st.pop(1);
                let known = st.type_of(-1) == TSTRING
                    && matches!(st.string_bytes(-1), b"capacity" | b"bytes");
                if !known {
                    let k = st
                        .to_bytes(-1)
                        .map(|b| String::from_utf8_lossy(b).into_owned());
                    st.pop(1);
                    return Err(Error::BadArgument(format!(
                        "unknown option '{}' to vmpool.channel (the options are capacity and bytes)",
                        k.unwrap_or_else(|| "?".into())
                    )));
                }
            }
        }
        _ => {
            return Err(Error::BadArgument(format!(
                "bad argument #2 to 'vmpool.channel': expected an options table or nil, got {}",
                st.type_name(2)
            )))
        }
    }
    let chan = channel::open(&name, opts)?;
    userdata::push(st, ChannelHandle { chan, owner: false }, 3)?;
    Ok(1)
}

crate::lua_function!(pub fn push => push_impl);
/// `_chan_push(ch, timeout, ...)` -> true | nil, "timeout" | nil, "closed": waits on this thread.
fn push_impl(st: State) -> Result<c_int, Error> {
    let chan = channel_at(st, 1, "push")?;
    let timeout = timeout_at(st, 2, "channel:push_timeout")?;
    let mut msg = Some(message(st, 3, "channel:push")?);
    let r = blocking(st, "channel:push", &mut |stop| {
        let m = msg.take().unwrap_or_default();
        chan.push(m, timeout, stop).map_err(|(f, m)| {
            msg = Some(m);
            f
        })
    })?;
    match r {
        Ok(()) => {
            st.push_bool(true);
            Ok(1)
        }
        Err(Fail::TooLarge) => Err(too_large(&chan, msg.map_or(0, |m| m.size()))),
        Err(f) => Ok(push_fail(st, f)),
    }
}

crate::lua_function!(pub fn pop => pop_impl);
/// `_chan_pop(ch, timeout)` -> values | nil, "timeout" | nil, "closed": waits on this thread.
fn pop_impl(st: State) -> Result<c_int, Error> {
    let chan = channel_at(st, 1, "pop")?;
    let timeout = timeout_at(st, 2, "channel:pop")?;
    match blocking(st, "channel:pop", &mut |stop| chan.pop(timeout, stop))? {
        Ok(m) => {
            st.set_top(0);
            push_message(st, &chan, m, "channel:pop")
        }
        Err(f) => Ok(push_fail(st, f)),
    }
}

/// The waiter at 3 for an operation with `timeout`, held for the caller's frame, and whether the
/// operation may wait: on the first try, its deadline is set.
fn start_waiter(
    f: &Frame,
    st: State,
    timeout: Option<Duration>,
) -> Result<(Held<'_, WaiterHandle>, bool), Error> {
    let mut w = waiter_at(f, st, 3)?;
    if !w.started {
        w.started = true;
        w.watch.deadline = crate::call::deadline_after(timeout);
    }
    // a zero timeout never waits
    let may_wait = timeout != Some(Duration::ZERO) && !w.watch.expired();
    Ok((w, may_wait))
}

/// A channel operation as the `_or_wait` functions run it: `op(input, None)` first; if that would
/// block (`Fail::Timeout`, which gives `input` back) and the waiter may wait, `op(input, call)`
/// with the waiter's call armed, which files it on the channel's `side` if it would still block:
/// then `None` (the coroutine yields). Otherwise the watch is retired, handing a wake-up on to
/// the channel when the operation took it.
fn run_or_file<M, T>(
    w: &mut WaiterHandle,
    chan: &Arc<Channel>,
    side: Side,
    may_wait: bool,
    input: M,
    op: impl Fn(M, Option<&Arc<crate::call::Call>>) -> Result<T, (Fail, M)>,
) -> Option<Result<T, (Fail, M)>> {
    let r = match op(input, None) {
        Err((Fail::Timeout, input)) if may_wait => {
            w.watch.retire(None);
            let call = w.watch.arm();
            let r = op(input, Some(&call));
            if let Err((Fail::Timeout, _)) = r {
                w.watch.filed(chan, side);
                return None;
            }
            r
        }
        r => r,
    };
    w.watch.retire(r.is_ok().then_some(&**chan));
    Some(r)
}

crate::lua_function!(pub fn push_or_wait => push_or_wait_impl);
/// `_chan_push_or_wait(ch, timeout, waiter, ...)` -> true | nil, why | waiter (filed).
fn push_or_wait_impl(st: State) -> Result<c_int, Error> {
    let chan = channel_at(st, 1, "push")?;
    let timeout = timeout_at(st, 2, "channel:push_timeout")?;
    let msg = message(st, 4, "channel:push")?;
    // SAFETY: a local of this function, never moved: the waiter held from it ends here (it is
    // let go before the stack is cut down to the results: its slot 3 keeps it alive till then).
    let frame = unsafe { Frame::new() };
    let (mut w, may_wait) = start_waiter(&frame, st, timeout)?;
    let try_push = |msg, call: Option<&_>| chan.push_or_watch(msg, call);
    let r = run_or_file(&mut w, &chan, Side::Push, may_wait, msg, try_push);
    drop(w);
    let Some(r) = r else {
        st.set_top(3);
        return Ok(1);
    };
    match r {
        Ok(()) => {
            st.set_top(0);
            st.push_bool(true);
            Ok(1)
        }
        Err((Fail::TooLarge, m)) => Err(too_large(&chan, m.size())),
        Err((f, _)) => Ok(push_fail(st, f)),
    }
}

crate::lua_function!(pub fn pop_or_wait => pop_or_wait_impl);
/// `_chan_pop_or_wait(ch, timeout, waiter)` -> values | nil, why | waiter (filed).
fn pop_or_wait_impl(st: State) -> Result<c_int, Error> {
    let chan = channel_at(st, 1, "pop")?;
    let timeout = timeout_at(st, 2, "channel:pop")?;
    // SAFETY: a local of this function, never moved: the waiter held from it ends here (it is
    // let go before the stack is cut down to the results: its slot 3 keeps it alive till then).
    let frame = unsafe { Frame::new() };
    let (mut w, may_wait) = start_waiter(&frame, st, timeout)?;
    let try_pop = |(), call: Option<&_>| chan.pop_or_watch(call).map_err(|f| (f, ()));
    let r = run_or_file(&mut w, &chan, Side::Pop, may_wait, (), try_pop);
    drop(w);
    let Some(r) = r else {
        st.set_top(3);
        return Ok(1);
    };
    match r.map_err(|(f, ())| f) {
        Ok(m) => {
            st.set_top(0);
            push_message(st, &chan, m, "channel:pop")
        }
        Err(f) => Ok(push_fail(st, f)),
    }
}

/// The channels of the list at 1.
fn channel_list(st: State) -> Result<Vec<Arc<Channel>>, Error> {
    if st.type_of(1) != TTABLE {
        return Err(Error::BadArgument(format!(
            "bad argument #1 to 'vmpool.select': expected a list of channels, got {}",
            st.type_name(1)
        )));
    }
    let n = st.raw_len(1);
    if n == 0 {
        return Err(Error::BadArgument(
            "bad argument #1 to 'vmpool.select': the list of channels is empty".into(),
        ));
    }
    let mut chans = Vec::with_capacity(n);
    for i in 1..=n {
        st.raw_geti(1, i as i64);
        let c = userdata::with(st, -1, |h: &ChannelHandle| h.chan.clone()).ok();
        let got = st.type_name(-1);
        st.pop(1);
        let c = c.ok_or_else(|| {
            Error::BadArgument(format!(
                "bad argument #1 to 'vmpool.select': item {i} is a {got}, not a channel"
            ))
        })?;
        c.check_process()?;
        chans.push(c);
    }
    Ok(chans)
}

/// Pushes list[i + 1] and the message it gave.
fn push_selected(st: State, chans: &[Arc<Channel>], i: usize, m: Message) -> Result<c_int, Error> {
    st.set_top(1);
    st.raw_geti(1, i as i64 + 1);
    st.remove(1);
    let n = push_message(st, &chans[i], m, "vmpool.select")?;
    Ok(n + 1)
}

crate::lua_function!(pub fn select_blocking => select_impl);
/// `_select(list, timeout)` -> channel, values | nil, why: waits on this thread.
fn select_impl(st: State) -> Result<c_int, Error> {
    let chans = channel_list(st)?;
    let timeout = timeout_at(st, 2, "vmpool.select")?;
    let r = blocking(st, "vmpool.select", &mut |stop| {
        let mut stop = || stop();
        select::wait(&chans, timeout, &mut stop)
    })?;
    match r {
        Ok((i, m)) => push_selected(st, &chans, i, m),
        Err(f) => Ok(push_fail(st, f)),
    }
}

crate::lua_function!(pub fn select_or_wait => select_or_wait_impl);
/// `_select_or_wait(list, timeout, waiter)` -> channel, values | nil, why | waiter (filed).
fn select_or_wait_impl(st: State) -> Result<c_int, Error> {
    let chans = channel_list(st)?;
    let timeout = timeout_at(st, 2, "vmpool.select")?;
    // SAFETY: a local of this function, never moved: the waiter held from it ends here (it is
    // let go before the stack is cut down to the results: its slot 3 keeps it alive till then).
    let frame = unsafe { Frame::new() };
    let (mut w, may_wait) = start_waiter(&frame, st, timeout)?;
    let r = match select::scan(&chans, None) {
        select::Scan::Empty if may_wait => {
            w.watch.retire(None);
            let r = select::scan(&chans, Some(&mut w.watch));
            if r == select::Scan::Empty {
                st.set_top(3);
                return Ok(1);
            }
            r
        }
        r => r,
    };
    w.watch.retire(match &r {
        select::Scan::Got(i, _) => Some(&*chans[*i]),
        _ => None,
    });
    drop(w);
    match r {
        select::Scan::Got(i, m) => push_selected(st, &chans, i, m),
        select::Scan::Closed => Ok(push_fail(st, Fail::Closed)),
        select::Scan::Empty => Ok(push_fail(st, Fail::Timeout)),
    }
}

crate::lua_function!(pub fn close => close_impl);
fn close_impl(st: State) -> Result<c_int, Error> {
    channel_at(st, 1, "close")?.close();
    Ok(0)
}

crate::lua_function!(pub fn len => len_impl);
fn len_impl(st: State) -> Result<c_int, Error> {
    let n = channel_at(st, 1, "len")?.len();
    st.push_integer(n as i64);
    Ok(1)
}

crate::lua_function!(pub fn capacity => capacity_impl);
/// `ch:capacity()` -> messages, bytes.
fn capacity_impl(st: State) -> Result<c_int, Error> {
    let c = channel_at(st, 1, "capacity")?;
    st.push_integer(c.capacity() as i64);
    st.push_integer(c.byte_capacity() as i64);
    Ok(2)
}

crate::lua_function!(pub fn is_closed => is_closed_impl);
fn is_closed_impl(st: State) -> Result<c_int, Error> {
    let closed = channel_at(st, 1, "is_closed")?.is_closed();
    st.push_bool(closed);
    Ok(1)
}

crate::lua_function!(pub fn chan_name => name_impl);
fn name_impl(st: State) -> Result<c_int, Error> {
    let name = channel_at(st, 1, "name")?.name.clone();
    st.push_bytes(name.as_bytes());
    Ok(1)
}

crate::lua_function!(pub fn channel_gc => crate::host::finalize::<ChannelHandle>);

crate::lua_function!(pub fn waiter => waiter_impl);
/// `_waiter(metatable)`: a waiter for one operation.
fn waiter_impl(st: State) -> Result<c_int, Error> {
    let w = WaiterHandle {
        watch: Watch::default(),
        started: false,
    };
    userdata::push(st, w, 1)?;
    Ok(1)
}

crate::lua_function!(pub fn waiter_subscribe => waiter_subscribe_impl);
/// `w:_subscribe(notifier, token)` -> whether it subscribed (false: it is ready already), as
/// `fut:_subscribe` does: the notifier queues `token` when a channel, `close()` or the deadline
/// finishes the wait.
fn waiter_subscribe_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(w = waiter_at(st, 1));
    crate::hold!(handle = notifier_arg(st, "_subscribe"));
    let token = st.to_number(3) as u64;
    let subscribed = match w.watch.call() {
        Some(call) => handle.waits.subscribe(call, token),
        None => {
            handle.waits.unused_token(token);
            false
        }
    };
    st.push_bool(subscribed);
    Ok(1)
}

crate::lua_function!(pub fn waiter_unsubscribe => waiter_unsubscribe_impl);
/// `w:_unsubscribe(notifier, token)`, as `fut:_unsubscribe`.
fn waiter_unsubscribe_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(w = waiter_at(st, 1));
    crate::hold!(handle = notifier_arg(st, "_unsubscribe"));
    let token = st.to_number(3) as u64;
    let id = SubscriberId::Queue(Arc::as_ptr(&handle.waits.notifier), token);
    let dropped = w.watch.call().is_some_and(|c| c.unsubscribe(id));
    if dropped {
        handle.waits.unused_token(token);
    }
    st.push_bool(dropped);
    Ok(1)
}

crate::lua_function!(pub fn waiter_ready => waiter_ready_impl);
/// `w:_ready()`: whether the wait is over (the coroutine may retry).
fn waiter_ready_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(w = waiter_at(st, 1));
    let ready = w.watch.ready();
    st.push_bool(ready);
    Ok(1)
}

// A waiter collected mid-wait (its coroutine was abandoned) leaves every list, and hands on a
// wake-up it got and did not use.
crate::lua_function!(pub fn waiter_gc => crate::host::finalize::<WaiterHandle>);

crate::lua_function!(pub fn chan_eq => chan_eq_impl);
/// `a == b`: handles of the same channel are equal.
fn chan_eq_impl(st: State) -> Result<c_int, Error> {
    let chan = |i| userdata::with(st, i, |h: &ChannelHandle| Arc::as_ptr(&h.chan)).ok();
    let eq = matches!((chan(1), chan(2)), (Some(a), Some(b)) if a == b);
    st.push_bool(eq);
    Ok(1)
}

/// Items a stream buffers between the state and the iterator before the state waits.
pub const STREAM_CAPACITY: usize = 64;

/// The pool of `pool:stream` (slot 1), held for the caller's frame.
fn stream_pool(f: &Frame, st: State) -> Result<Held<'_, crate::host::call_io::PoolHandle>, Error> {
    userdata::hold(f, st, 1).map_err(|a| {
        a.error::<crate::host::call_io::PoolHandle>(|| {
            Error::BadArgument(format!(
                "bad argument #1 to 'stream': expected a pool, got {} (call it as pool:stream(...), with a colon)",
                st.type_name(1)
            ))
        })
    })
}

crate::lua_function!(pub fn stream => stream_impl);
/// `_stream(pool, metatable, chunk, fn, ...)` -> future, channel: `pool:stream`'s call, whose
/// top-level `coroutine.yield`s push onto the channel (`channel/stream.rs`). The channel's handle
/// owns it: collecting the handle closes it, which ends the call at its next item.
fn stream_impl(st: State) -> Result<c_int, Error> {
    crate::hold!(h = stream_pool(st));
    let call = h.prepare_with(st, 3, "stream", None)?;
    let chan = Arc::new(Channel::new(
        "(stream)",
        STREAM_CAPACITY,
        channel::DEFAULT_BYTES,
    ));
    call.data.lock().stream = Some(chan.clone());
    st.set_top(2);
    let pushed = userdata::push(st, ChannelHandle { chan, owner: true }, 2).and_then(|()| {
        userdata::push(
            st,
            crate::host::future_api::FutureHandle::new(call.clone(), h.pool.clone(), h.main),
            userdata::UV_FUTURE,
        )
    });
    if let Err(e) = pushed {
        h.recycle(call);
        return Err(e);
    }
    if let Err(e) = h.pool.submit(call.clone()) {
        userdata::finalize::<crate::host::future_api::FutureHandle>(st, -1);
        h.recycle(call);
        return Err(e);
    }
    // future, channel
    st.insert(-2);
    Ok(2)
}
