//! `vmpool.new{...}`: reading the options table into a [`Config`], with an error that names the
//! option and what was expected for anything unknown or mistyped.

use std::ffi::c_int;
use std::time::Duration;

use crate::config::{Config, Sched};
use crate::error::lua_number;
use crate::lua::protect::protected;
use crate::lua::{State, TBOOLEAN, TNIL, TNUMBER, TSTRING, TTABLE};
use crate::Error;

const KNOWN: &[&str] = &[
    "core",
    "max_noncore",
    "blocking",
    "acquire_timeout",
    "idle_timeout",
    "init",
    "time_limit",
    "memory_limit",
    "max_waiting",
    "jit",
    "nice",
    "sched",
    "name",
];

/// Largest integer option accepted (besides `math.huge`): every integer up to it is exact in a
/// Lua float.
const MAX_COUNT: usize = 1 << 53;

/// Most threads this process may start: the smaller of the kernel's `threads-max` and the soft
/// `RLIMIT_NPROC`. A larger `core` is refused before any thread starts.
fn max_threads() -> usize {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/threads-max")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let nproc = (unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut rl) } == 0
        && rl.rlim_cur != libc::RLIM_INFINITY)
        .then_some(rl.rlim_cur as usize);
    [kernel, nproc]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(usize::MAX)
        .min(MAX_COUNT)
}

/// The first key of the table at `idx` that is not `known`, as an option error names it (the
/// string, or "a number key"); `None` if every key is `known`. The options tables of `close`,
/// `stats` and `vmpool.metrics` take one option each.
pub fn unknown_key(st: State, idx: c_int, known: &str) -> Option<String> {
    st.push_nil();
    while st.next(idx) {
        if !(st.type_of(-2) == TSTRING && st.to_bytes(-2) == Some(known.as_bytes())) {
            let key = if st.type_of(-2) == TSTRING {
                String::from_utf8_lossy(st.to_bytes(-2).unwrap_or_default()).into_owned()
            } else {
                format!("a {} key", st.type_name(-2))
            };
            st.pop(2);
            return Some(key);
        }
        st.pop(1);
    }
    None
}

/// Reads the options at `idx` (a table, or nil/none for the defaults).
pub fn parse(st: State, idx: c_int) -> Result<Config, Error> {
    let mut cfg = Config::default();
    match st.type_of(idx) {
        TNIL | crate::lua::TNONE => {}
        TTABLE => read_table(st, st.abs_index(idx), &mut cfg)?,
        _ => {
            return Err(Error::BadArgument(format!(
                "vmpool.new expects a table of options or nothing (got {})",
                st.type_name(idx)
            )))
        }
    }
    if cfg.max_states() == 0 {
        return Err(Error::BadArgument(
            "options core = 0 and max_noncore = 0 leave the pool without any state: it needs at least one state (set core >= 1 or max_noncore >= 1)".into(),
        ));
    }
    read_package_paths(st, &mut cfg)?;
    if cfg.nice > 0 {
        cfg.thread_nice = crate::sys::thread_nice().map(|own| (own + i32::from(cfg.nice)).min(19));
    }
    Ok(cfg)
}

/// Pushes `t[name]` (raw) and returns its type. Making the key string allocates: protected.
fn get_field(st: State, t: c_int, name: &str) -> Result<c_int, Error> {
    st.push_value(t);
    protected(st, 1, || "reading the options".into(), &mut |st| {
        st.raw_get_str(1, name);
        1
    })?;
    Ok(st.type_of(-1))
}

fn read_table(st: State, t: c_int, cfg: &mut Config) -> Result<(), Error> {
    let top = st.top();
    let result = read_fields(st, t, cfg);
    st.set_top(top);
    result?;
    let jit_given = {
        let ty = get_field(st, t, "jit")?;
        st.pop(1);
        ty != TNIL
    };
    if !jit_given {
        cfg.jit = cfg.time_limit.is_none();
    } else if cfg!(feature = "luajit") && cfg.jit && cfg.time_limit.is_some() {
        return Err(Error::BadArgument(
            "option 'time_limit' to vmpool.new needs jit = false on LuaJIT (compiled loops do not run the hook that enforces it); leave 'jit' unset or set it to false".into(),
        ));
    }
    Ok(())
}

fn read_fields(st: State, t: c_int, cfg: &mut Config) -> Result<(), Error> {
    if !st.check_stack(4) {
        return Err(Error::no_stack("reading the options"));
    }
    st.push_nil();
    while st.next(t) {
        let name = match st.to_bytes(-2).and_then(|b| std::str::from_utf8(b).ok()) {
            Some(n) if KNOWN.contains(&n) => n,
            Some(n) => {
                return Err(Error::BadArgument(format!(
                    "unknown option '{n}' to vmpool.new (known options: {})",
                    KNOWN.join(", ")
                )))
            }
            None => {
                return Err(Error::BadArgument(format!(
                    "vmpool.new options must have string keys (got a {} key)",
                    st.type_name(-2)
                )))
            }
        };
        let v = Field { st, name };
        match name {
            "core" => cfg.core = v.count(false, max_threads())?,
            "max_noncore" => cfg.max_noncore = v.count(true, MAX_COUNT)?,
            "blocking" => cfg.blocking = v.boolean()?,
            "acquire_timeout" => cfg.acquire_timeout = v.seconds()?,
            "idle_timeout" => cfg.idle_timeout = v.seconds()?,
            "init" => cfg.init = Some(v.string()?),
            "time_limit" => cfg.time_limit = v.time_limit()?,
            "memory_limit" => {
                cfg.memory_limit = Some(v.count(false, MAX_COUNT)?).filter(|&n| n > 0)
            }
            "max_waiting" => cfg.max_waiting = v.count(true, MAX_COUNT)?,
            "jit" => cfg.jit = v.boolean()?,
            "nice" => cfg.nice = v.niceness()?,
            "sched" => cfg.sched = v.sched()?,
            "name" => cfg.name = Some(v.name()?),
            _ => unreachable!("checked against KNOWN"),
        }
        st.pop(1);
    }
    Ok(())
}

/// The value of one option, at the top of the stack.
struct Field<'n> {
    st: State,
    name: &'n str,
}

impl Field<'_> {
    fn wrong(&self, expected: &str) -> Error {
        Error::BadArgument(format!(
            "option '{}' to vmpool.new must be {expected} (got {})",
            self.name,
            self.st.type_name(-1)
        ))
    }

    fn number(&self, expected: &str) -> Result<f64, Error> {
        if self.st.type_of(-1) != TNUMBER {
            return Err(self.wrong(expected));
        }
        let n = self.st.to_number(-1);
        if n.is_nan() || n < 0.0 {
            return Err(Error::BadArgument(format!(
                "option '{}' to vmpool.new must be {expected} (got {})",
                self.name,
                lua_number(n)
            )));
        }
        Ok(n)
    }

    /// A non-negative integer up to `max`; `math.huge` allowed (as "unlimited") when `huge_ok`.
    fn count(&self, huge_ok: bool, max: usize) -> Result<usize, Error> {
        let expected = if huge_ok {
            "a non-negative integer or math.huge"
        } else {
            "a non-negative integer"
        };
        let n = self.number(expected)?;
        if n.is_infinite() && huge_ok {
            return Ok(usize::MAX);
        }
        if n.is_infinite() || n.fract() != 0.0 {
            return Err(Error::BadArgument(format!(
                "option '{}' to vmpool.new must be {expected} (got {})",
                self.name,
                lua_number(n)
            )));
        }
        if n > max as f64 {
            let why = if self.name == "core" {
                " (the threads this system allows: the smaller of kernel.threads-max and RLIMIT_NPROC)"
            } else {
                ""
            };
            return Err(Error::BadArgument(format!(
                "option '{}' to vmpool.new must be at most {max}{why} (got {})",
                self.name,
                lua_number(n)
            )));
        }
        Ok(n as usize)
    }

    /// Seconds as a duration; `None` (forever) for `math.huge` and for anything longer than a
    /// duration can count (about 5.8e11 years).
    fn seconds(&self) -> Result<Option<Duration>, Error> {
        let n = self.number("a non-negative number of seconds or math.huge")?;
        Ok(Duration::try_from_secs_f64(n).ok())
    }

    /// `time_limit`: 0 is no limit; `math.huge` (or any value too long for a duration) means "no
    /// deadline, but keep the hook" (running calls can then be interrupted by `fut:cancel()`); a
    /// positive value too small for a duration is rounded up to 1 ns, never down to "no limit".
    fn time_limit(&self) -> Result<Option<Duration>, Error> {
        Ok(match self.seconds()? {
            None => Some(Duration::MAX),
            Some(d) if d.is_zero() && self.st.to_number(-1) > 0.0 => Some(Duration::from_nanos(1)),
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
        })
    }

    /// `nice`: an integer from 0 to 19 (lowering it below 0 needs privileges a pool should not
    /// ask for).
    fn niceness(&self) -> Result<u8, Error> {
        let n = self.count(false, 19)?;
        Ok(n as u8)
    }

    /// `sched`: "normal", "batch" or "idle"; a wrong string is shown (cut to 40 bytes).
    fn sched(&self) -> Result<Sched, Error> {
        const EXPECTED: &str = "\"normal\", \"batch\" or \"idle\"";
        let got = match self.st.to_bytes(-1) {
            Some(b) if self.st.type_of(-1) == TSTRING => b,
            _ => return Err(self.wrong(EXPECTED)),
        };
        [Sched::Normal, Sched::Batch, Sched::Idle]
            .into_iter()
            .find(|s| got == s.name().as_bytes())
            .ok_or_else(|| {
                let shown = String::from_utf8_lossy(&got[..got.len().min(40)]);
                Error::BadArgument(format!(
                    "option 'sched' to vmpool.new must be {EXPECTED} (got \"{}\"{})",
                    shown.escape_debug(),
                    if got.len() > 40 { "..." } else { "" }
                ))
            })
    }

    /// `name`: 1 to 128 bytes of UTF-8 text.
    fn name(&self) -> Result<String, Error> {
        let bytes = match self.st.to_bytes(-1) {
            Some(b) if self.st.type_of(-1) == TSTRING => b,
            _ => return Err(self.wrong("a string (the name that labels the pool's metrics)")),
        };
        match std::str::from_utf8(bytes) {
            Ok(s) if !s.is_empty() && s.len() <= 128 => Ok(s.to_string()),
            _ => {
                Err(Error::BadArgument(format!(
                "option 'name' to vmpool.new must be 1 to 128 bytes of UTF-8 text (got {} bytes{})",
                bytes.len(),
                if std::str::from_utf8(bytes).is_ok() { "" } else { " that are not UTF-8" }
            )))
            }
        }
    }

    fn boolean(&self) -> Result<bool, Error> {
        if self.st.type_of(-1) != TBOOLEAN {
            return Err(self.wrong("a boolean"));
        }
        Ok(self.st.to_boolean(-1))
    }

    fn string(&self) -> Result<Vec<u8>, Error> {
        match self.st.to_bytes(-1) {
            Some(b) if self.st.type_of(-1) == TSTRING => Ok(b.to_vec()),
            _ => Err(self.wrong("a string of Lua source")),
        }
    }
}

/// Children get the host's `package.path` and `package.cpath`, so `require` in `init` finds what
/// the host finds.
fn read_package_paths(st: State, cfg: &mut Config) -> Result<(), Error> {
    let top = st.top();
    let result = (|| {
        if !st.check_stack(3) {
            return Ok(());
        }
        st.push_globals();
        if get_field(st, -1, "package")? == TTABLE {
            let package = st.top();
            if get_field(st, package, "path")? == TSTRING {
                cfg.package_path = st.to_bytes(-1).map(|b| b.to_vec());
            }
            st.pop(1);
            if get_field(st, package, "cpath")? == TSTRING {
                cfg.package_cpath = st.to_bytes(-1).map(|b| b.to_vec());
            }
        }
        Ok(())
    })();
    st.set_top(top);
    result
}
