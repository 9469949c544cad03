//! The memory of every child state: vmpool creates each state with its own allocator, which
//! counts what the state holds and enforces `memory_limit`.
//!
//! Why not mlua's allocator: it aborts the process when the system refuses an allocation
//! (`handle_alloc_error`), where Lua expects a NULL and raises its ordinary, catchable "not enough
//! memory"; and it counts bytes only. This one returns NULL on refusal, and counts bytes *and*
//! blocks, so that the soak test (`spec/soak/soak.lua`) can check exactly, not through RSS, that every
//! state gives back what it took: [`totals`] sums the accounts of every state open in the process,
//! whichever pool it belongs to (and states nobody closed, which is what a leaked state is).
//!
//! Each account has one writer, the allocator running on its state's thread, which updates it
//! with a plain load and store (no read-modify-write: allocation stays as cheap as malloc). Other
//! threads only read it, and what they read is exact once the state is idle.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use mlua::ffi;
use parking_lot::Mutex;

use crate::lua::State;
use crate::Error;

/// What one state holds: bytes and blocks allocated and not freed.
#[derive(Default)]
pub struct Account {
    bytes: AtomicUsize,
    blocks: AtomicUsize,
    /// Most bytes the state may hold; 0 means no limit.
    limit: AtomicUsize,
    /// The last allocation refused was refused by the limit, not by the system.
    limit_refused: AtomicBool,
}

/// The accounts of every state open in the process.
static OPEN: Mutex<Vec<Arc<Account>>> = Mutex::new(Vec::new());

/// What the open states hold together (see `vmpool.memory()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Child states created and not yet closed, in every pool of the process.
    pub states: usize,
    /// Bytes they hold (what their allocators handed out and did not get back).
    pub bytes: usize,
    /// Blocks they hold.
    pub blocks: usize,
}

/// Sums the accounts of every open state. Exact when every state is idle (a state running a call
/// changes its own account while it is read).
pub fn totals() -> Totals {
    let open = OPEN.lock();
    let mut t = Totals {
        states: open.len(),
        ..Totals::default()
    };
    for a in open.iter() {
        t.bytes += a.bytes.load(Relaxed);
        t.blocks += a.blocks.load(Relaxed);
    }
    t
}

/// A child state created with the counting allocator; dropping it closes the state.
pub struct OwnedState {
    st: State,
    /// `None` when the runtime refused a custom allocator (LuaJIT built without GC64) and the
    /// state uses LuaJIT's own: then nothing is counted and no memory limit can be set.
    account: Option<Arc<Account>>,
}

/// `lua_newstate`; Lua 5.5's takes the seed of its string hashes too, made as `luaL_newstate`
/// makes it.
///
/// # Safety
/// As `lua_newstate`: `f` follows `lua_Alloc`'s contract for `ud` while the state lives.
unsafe fn new_state(f: ffi::lua_Alloc, ud: *mut c_void) -> *mut ffi::lua_State {
    #[cfg(feature = "lua55")]
    // SAFETY: the caller's contract; `luaL_makeseed` reads no state (it is given none).
    unsafe {
        ffi::lua_newstate(f, ud, ffi::luaL_makeseed(std::ptr::null_mut()))
    }
    #[cfg(not(feature = "lua55"))]
    // SAFETY: the caller's contract.
    unsafe {
        ffi::lua_newstate(f, ud)
    }
}

impl OwnedState {
    /// Creates a state with the standard libraries. A state the system has no memory for is an
    /// error, never an abort.
    pub fn new() -> Result<OwnedState, Error> {
        let account = Arc::new(Account::default());
        // SAFETY: `allocate` follows `lua_Alloc`'s contract; `account` outlives the state (it is
        // kept in `OwnedState`, and `Drop` closes the state before letting go of it).
        let raw = unsafe { new_state(allocate, Arc::as_ptr(&account) as *mut c_void) };
        let (raw, account) = if !raw.is_null() {
            (raw, Some(account))
        } else if cfg!(feature = "luajit") {
            // LuaJIT without GC64 refuses every custom allocator: use its own
            // SAFETY: plain constructor; NULL is checked below.
            (unsafe { ffi::luaL_newstate() }, None)
        } else {
            (raw, None)
        };
        if raw.is_null() {
            return Err(Error::Spawn(
                "cannot create a Lua state: the system has no memory for it".into(),
            ));
        }
        // SAFETY: `raw` is a new state, used only on this thread.
        let st = unsafe { State::from_raw(raw) };
        let owned = OwnedState { st, account };
        if let Some(a) = &owned.account {
            OPEN.lock().push(a.clone());
        }
        // SAFETY: `raw` is live; the handler only writes to stderr before Lua aborts.
        unsafe { ffi::lua_atpanic(raw, PANIC) };
        if open_libs(st) != 0 {
            let why = String::from_utf8_lossy(st.to_bytes(-1).unwrap_or(b"not enough memory"))
                .into_owned();
            return Err(Error::Spawn(format!(
                "cannot open the standard libraries in a new state: {why}"
            )));
        }
        st.set_top(0);
        Ok(owned)
    }

    pub fn state(&self) -> State {
        self.st
    }

    /// Bytes the state holds (0 when not counted).
    pub fn used(&self) -> usize {
        self.account.as_ref().map_or(0, |a| a.bytes.load(Relaxed))
    }

    /// Whether the state's last refused allocation was refused by its memory limit (rather than
    /// by the system); clears the flag.
    pub fn take_limit_refusal(&self) -> bool {
        self.account
            .as_ref()
            .is_some_and(|a| a.limit_refused.swap(false, Relaxed))
    }

    /// Limits the bytes the state may hold; an allocation past it fails as "not enough memory".
    /// False if this runtime cannot count the state's memory.
    pub fn set_limit(&self, bytes: usize) -> bool {
        match &self.account {
            Some(a) => {
                a.limit.store(bytes.max(1), Relaxed);
                true
            }
            None => false,
        }
    }
}

impl Drop for OwnedState {
    fn drop(&mut self) {
        // SAFETY: the state is ours and idle; nothing uses it after this.
        unsafe { ffi::lua_close(self.st.as_ptr()) };
        if let Some(a) = self.account.take() {
            let mut open = OPEN.lock();
            if let Some(i) = open.iter().position(|o| Arc::ptr_eq(o, &a)) {
                // What a closed state still holds would be Lua's own leak; it stays counted (in
                // an account no state writes again) so that `totals` would show it.
                if a.bytes.load(Relaxed) == 0 && a.blocks.load(Relaxed) == 0 {
                    open.swap_remove(i);
                }
            }
        }
    }
}

/// Opens the standard libraries in protected mode (they allocate, and an allocation that fails
/// outside a protected call would end the process). Returns the Lua status.
fn open_libs(st: State) -> c_int {
    unsafe extern "C-unwind" fn open(l: *mut ffi::lua_State) -> c_int {
        // SAFETY: called by Lua, protected, with a live state.
        unsafe { ffi::luaL_openlibs(l) };
        0
    }
    #[cfg(any(feature = "lua51", feature = "luajit"))]
    {
        // SAFETY: `lua_cpcall` allocates the function's closure inside the protected call.
        unsafe { ffi::lua_cpcall(st.as_ptr(), open, std::ptr::null_mut()) }
    }
    #[cfg(not(any(feature = "lua51", feature = "luajit")))]
    {
        // SAFETY: a light C function takes no memory to push; `lua_pcall` protects the rest.
        unsafe {
            ffi::lua_pushcfunction(st.as_ptr(), open);
            ffi::lua_pcall(st.as_ptr(), 0, 0, 0)
        }
    }
}

/// The state's allocator (`lua_Alloc`): `malloc`/`realloc`/`free`, with the account kept and the
/// limit enforced. Returns NULL when the limit or the system refuses, which Lua turns into a
/// "not enough memory" error in the state. A free, the commonest call, updates the account and
/// ends in a tail call to `free`; a new block is counted before `malloc` and uncounted in the
/// rare case it fails, so the common paths keep few values alive across the C library's call.
unsafe extern "C" fn allocate(
    ud: *mut c_void,
    ptr: *mut c_void,
    osize: usize,
    nsize: usize,
) -> *mut c_void {
    // SAFETY: `ud` is the `Account` passed to `lua_newstate`, alive until after `lua_close`.
    let a = unsafe { &*(ud as *const Account) };
    if nsize == 0 {
        if !ptr.is_null() {
            a.bytes.store(a.bytes.load(Relaxed) - osize, Relaxed);
            a.blocks.store(a.blocks.load(Relaxed) - 1, Relaxed);
            // SAFETY: `ptr` came from this allocator (malloc/realloc) and Lua frees it once.
            unsafe { libc::free(ptr) };
        }
        return std::ptr::null_mut();
    }
    if ptr.is_null() {
        // with no block, `osize` is a type tag (Lua 5.2+), not a size
        // SAFETY: `a` is the state's account, as above.
        unsafe { new_block(a, nsize) }
    } else {
        // SAFETY: `ptr` came from this allocator, is live and `osize` bytes long.
        unsafe { resize(a, ptr, osize, nsize) }
    }
}

/// A new block of `nsize` bytes for the state of account `a`.
///
/// # Safety
/// As `malloc`.
#[inline(never)]
unsafe fn new_block(a: &Account, nsize: usize) -> *mut c_void {
    let bytes = a.bytes.load(Relaxed);
    let limit = a.limit.load(Relaxed);
    if limit != 0 && bytes + nsize > limit {
        return refused(a, true);
    }
    a.bytes.store(bytes + nsize, Relaxed);
    a.blocks.store(a.blocks.load(Relaxed) + 1, Relaxed);
    // SAFETY: plain allocation.
    let p = unsafe { libc::malloc(nsize) };
    if p.is_null() {
        a.bytes.store(a.bytes.load(Relaxed) - nsize, Relaxed);
        a.blocks.store(a.blocks.load(Relaxed) - 1, Relaxed);
        return refused(a, false);
    }
    p
}

/// `ptr`'s block (of `osize` bytes) resized to `nsize` bytes.
///
/// # Safety
/// As `realloc`; `ptr` came from this allocator.
#[inline(never)]
unsafe fn resize(a: &Account, ptr: *mut c_void, osize: usize, nsize: usize) -> *mut c_void {
    let bytes = a.bytes.load(Relaxed);
    let limit = a.limit.load(Relaxed);
    if nsize > osize && limit != 0 && bytes - osize + nsize > limit {
        return refused(a, true);
    }
    // SAFETY: the caller's contract.
    let p = unsafe { libc::realloc(ptr, nsize) };
    if p.is_null() {
        // Lua assumes a block never fails to shrink; the old block is big enough
        if nsize <= osize {
            return ptr;
        }
        return refused(a, false);
    }
    a.bytes
        .store(a.bytes.load(Relaxed) - osize + nsize, Relaxed);
    p
}

/// An allocation refused: by the limit (`by_limit`) or by the system.
#[cold]
#[inline(never)]
fn refused(a: &Account, by_limit: bool) -> *mut c_void {
    a.limit_refused.store(by_limit, Relaxed);
    std::ptr::null_mut()
}

/// Lua's last word before it aborts on an error outside any protected call: say it came from a
/// vmpool state (vmpool runs everything in its states protected, so this is a bug to report).
const PANIC: ffi::lua_CFunction = crate::lua::c_function(panic_handler);
unsafe extern "C-unwind" fn panic_handler(l: *mut ffi::lua_State) -> isize {
    // SAFETY: Lua calls the handler with its live state; the message, if a string, is on top.
    let msg = unsafe {
        let mut len = 0usize;
        let p: *const c_char = ffi::lua_tolstring(l, -1, &mut len);
        if p.is_null() {
            "(error object is not a string)".to_string()
        } else {
            String::from_utf8_lossy(std::slice::from_raw_parts(p as *const u8, len)).into_owned()
        }
    };
    eprintln!(
        "vmpool: internal error (please report it): unprotected error in a pool state: {msg}"
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(st: State, code: &str) -> Result<(), String> {
        let rc = st.load_text(code.as_bytes(), "test");
        let rc = if rc == 0 { st.pcall(0, 0, 0) } else { rc };
        let r = if rc == 0 {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(st.to_bytes(-1).unwrap_or(b"?")).into_owned())
        };
        st.set_top(0);
        r
    }

    #[test]
    fn a_state_counts_what_it_holds_and_gives_every_block_back_when_closed() {
        let s = OwnedState::new().unwrap();
        let account = s.account.clone().unwrap();
        let fresh = s.used();
        assert!(fresh > 0 && account.blocks.load(Relaxed) > 0);
        run(
            s.state(),
            "t = {} for i = 1, 10000 do t[i] = tostring(i) end",
        )
        .unwrap();
        let peak = s.used();
        assert!(peak > fresh + 100_000, "{peak} vs {fresh}");
        run(s.state(), "t = nil collectgarbage() collectgarbage()").unwrap();
        assert!(
            s.used() < peak / 2,
            "{} after the collection, {peak} before",
            s.used()
        );
        drop(s);
        assert_eq!(account.bytes.load(Relaxed), 0);
        assert_eq!(account.blocks.load(Relaxed), 0);
        assert!(!OPEN.lock().iter().any(|a| Arc::ptr_eq(a, &account)));
    }

    #[test]
    fn an_allocation_past_the_limit_is_a_catchable_lua_error() {
        let s = OwnedState::new().unwrap();
        assert!(s.set_limit(s.used() + 64 * 1024));
        let st = s.state();
        run(
            st,
            "local ok, e = pcall(string.rep, 'x', 1e6) assert(not ok and e:find('memory'), e)",
        )
        .unwrap();
        // and the state goes on working
        run(st, "local s = ('y'):rep(100) assert(#s == 100)").unwrap();
    }

    #[test]
    fn an_allocation_the_system_refuses_is_null_and_leaves_the_account_unchanged() {
        let a = Account::default();
        let ud = &a as *const Account as *mut c_void;
        // SAFETY: `ud` is a live account; a failed allocation hands out no block.
        let p = unsafe { allocate(ud, std::ptr::null_mut(), 0, usize::MAX / 2) };
        // black_box: in a release build, a block that goes nowhere lets the optimizer drop the
        // malloc and assume it succeeded
        assert!(std::hint::black_box(p).is_null());
        assert_eq!((a.bytes.load(Relaxed), a.blocks.load(Relaxed)), (0, 0));
        // SAFETY: as above; the block is freed through the same allocator.
        unsafe {
            let p = allocate(ud, std::ptr::null_mut(), 0, 100);
            assert!(!p.is_null());
            assert_eq!((a.bytes.load(Relaxed), a.blocks.load(Relaxed)), (100, 1));
            // growing it past what the system has fails and keeps the block as it was
            assert!(std::hint::black_box(allocate(ud, p, 100, usize::MAX / 2)).is_null());
            assert_eq!((a.bytes.load(Relaxed), a.blocks.load(Relaxed)), (100, 1));
            allocate(ud, p, 100, 0);
        }
        assert_eq!((a.bytes.load(Relaxed), a.blocks.load(Relaxed)), (0, 0));
    }
}
