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
//!
//! In front of the C library, each state keeps the small blocks it freed for its next allocations
//! ([`cache`]): the C library's `malloc` on a thread of a threaded process takes its arena's lock
//! and atomics that a single-threaded host skips, and a hit in the cache calls nothing. The
//! account counts what Lua holds, never the cache, and the limit is checked before the cache.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use mlua::ffi;
use parking_lot::Mutex;

use crate::lua::State;
use crate::Error;

mod cache;
use cache::{class, class_size, Cache, SMALL_MAX};

/// What one state holds: bytes and blocks allocated and not freed.
pub struct Account {
    bytes: AtomicUsize,
    blocks: AtomicUsize,
    /// Most bytes the state may hold; `usize::MAX` when it has no limit.
    limit: AtomicUsize,
    /// The last allocation refused was refused by the limit, not by the system.
    limit_refused: AtomicBool,
}

impl Default for Account {
    fn default() -> Account {
        Account {
            bytes: AtomicUsize::new(0),
            blocks: AtomicUsize::new(0),
            limit: AtomicUsize::new(usize::MAX),
            limit_refused: AtomicBool::new(false),
        }
    }
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
    /// The allocator's `ud` (from `Box::into_raw`, freed by `Drop` after the state closed); NULL
    /// when the runtime refused a custom allocator (LuaJIT built without GC64) and the state uses
    /// LuaJIT's own: then nothing is counted and no memory limit can be set.
    heap: *mut Heap,
    account: Option<Arc<Account>>,
}

/// The allocator's `ud`: the state's account and its cache of freed blocks. Only the state's
/// thread touches it (the allocator, then `OwnedState`'s `Drop`).
struct Heap {
    account: Arc<Account>,
    cache: Cache,
}

/// Bytes of freed small blocks a state keeps: a small state's garbage of one collector cycle, at
/// the price of that much memory per state no other thread reuses (see the module's docs).
const CACHE_BYTES: usize = 32 * 1024;

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
        let heap = Box::into_raw(Box::new(Heap {
            account: account.clone(),
            cache: Cache::new(CACHE_BYTES),
        }));
        // SAFETY: `allocate` follows `lua_Alloc`'s contract; `heap` outlives the state (`Drop`
        // closes the state before freeing it).
        let raw = unsafe { new_state(allocate, heap as *mut c_void) };
        let (raw, heap, account) = if !raw.is_null() {
            (raw, heap, Some(account))
        } else {
            // SAFETY: no state uses `heap`: it was refused.
            drop(unsafe { Box::from_raw(heap) });
            if cfg!(feature = "luajit") {
                // LuaJIT without GC64 refuses every custom allocator: use its own
                // SAFETY: plain constructor; NULL is checked below.
                (unsafe { ffi::luaL_newstate() }, std::ptr::null_mut(), None)
            } else {
                (raw, std::ptr::null_mut(), None)
            }
        };
        if raw.is_null() {
            return Err(Error::Spawn(
                "cannot create a Lua state: the system has no memory for it".into(),
            ));
        }
        // SAFETY: `raw` is a new state, used only on this thread.
        let st = unsafe { State::from_raw(raw) };
        let owned = OwnedState { st, heap, account };
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
        if !self.heap.is_null() {
            // SAFETY: from `Box::into_raw` in `new`; the state that used it is closed. Dropping
            // it gives the cached blocks back to the C library.
            drop(unsafe { Box::from_raw(self.heap) });
        }
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

/// The state's allocator (`lua_Alloc`): the state's cache of small blocks, else
/// `malloc`/`realloc`/`free`, with the account kept and the limit enforced. The account counts
/// the bytes Lua asked for, whether a block comes from the cache or the C library, and a block
/// in the cache is no longer counted. Returns NULL when the limit or the system refuses, which Lua
/// turns into a "not enough memory" error in the state. A free and a new block the cache has are
/// handled here with no call; the C library is called from functions of their own.
unsafe extern "C" fn allocate(
    ud: *mut c_void,
    ptr: *mut c_void,
    osize: usize,
    nsize: usize,
) -> *mut c_void {
    // SAFETY: `ud` is the state's `Heap`, alive until after `lua_close`, touched only by this
    // thread.
    let h = unsafe { &mut *(ud as *mut Heap) };
    let a = &*h.account;
    if nsize == 0 {
        if !ptr.is_null() {
            a.bytes.store(a.bytes.load(Relaxed) - osize, Relaxed);
            a.blocks.store(a.blocks.load(Relaxed) - 1, Relaxed);
            // SAFETY: `ptr` came from this allocator, which made a small block its class's full
            // size; Lua frees it once.
            if osize > SMALL_MAX || !unsafe { h.cache.put(ptr, class(osize)) } {
                // SAFETY: as above; a block the cache did not take goes back to the C library.
                unsafe { libc::free(ptr) };
            }
        }
        return std::ptr::null_mut();
    }
    if !ptr.is_null() {
        // SAFETY: `ptr` came from this allocator, is live and `osize` bytes long.
        return unsafe { resize(h, ptr, osize, nsize) };
    }
    // a new block; `osize` is a type tag here (Lua 5.2+), not a size
    let bytes = a.bytes.load(Relaxed) + nsize;
    if bytes > a.limit.load(Relaxed) {
        return refused(a, true);
    }
    if nsize <= SMALL_MAX {
        let p = h.cache.take(class(nsize));
        if !p.is_null() {
            a.bytes.store(bytes, Relaxed);
            a.blocks.store(a.blocks.load(Relaxed) + 1, Relaxed);
            return p;
        }
    }
    // SAFETY: `a` is the state's account, as above.
    unsafe { new_block(a, nsize) }
}

/// A new block of `nsize` bytes from the C library, counted in `a` (a small one of its class's
/// full size, so that it can go to the cache when freed).
///
/// # Safety
/// As `malloc`.
#[inline(never)]
unsafe fn new_block(a: &Account, nsize: usize) -> *mut c_void {
    let size = if nsize <= SMALL_MAX {
        class_size(class(nsize))
    } else {
        nsize
    };
    // SAFETY: plain allocation.
    let p = unsafe { libc::malloc(size) };
    if p.is_null() {
        return refused(a, false);
    }
    a.bytes.store(a.bytes.load(Relaxed) + nsize, Relaxed);
    a.blocks.store(a.blocks.load(Relaxed) + 1, Relaxed);
    p
}

/// `ptr`'s block (of `osize` bytes) resized to `nsize` bytes. A small block keeps its class's full
/// size: resized within its class it stays where it is; to another small class it moves to a
/// block of that class (from the cache when it has one).
///
/// # Safety
/// As `realloc`; `ptr` came from this allocator.
#[inline(never)]
unsafe fn resize(h: &mut Heap, ptr: *mut c_void, osize: usize, nsize: usize) -> *mut c_void {
    let a = &*h.account;
    let bytes = a.bytes.load(Relaxed) - osize + nsize;
    if nsize > osize && bytes > a.limit.load(Relaxed) {
        return refused(a, true);
    }
    let p = if nsize > SMALL_MAX {
        // SAFETY: the caller's contract.
        unsafe { libc::realloc(ptr, nsize) }
    } else if osize > SMALL_MAX {
        // SAFETY: the caller's contract; the block shrinks to its new class's size.
        unsafe { libc::realloc(ptr, class_size(class(nsize))) }
    } else if class(osize) == class(nsize) {
        ptr
    } else {
        let c = class(nsize);
        let mut p = h.cache.take(c);
        if p.is_null() {
            // SAFETY: plain allocation.
            p = unsafe { libc::malloc(class_size(c)) };
        }
        if !p.is_null() {
            // SAFETY: both blocks are live, distinct and at least the smaller size long; `ptr`
            // is then ours to give up, and its class's full size.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr as *const u8, p as *mut u8, osize.min(nsize));
                if !h.cache.put(ptr, class(osize)) {
                    libc::free(ptr);
                }
            }
        }
        p
    };
    if p.is_null() {
        // Lua assumes a block never fails to shrink; the old block is big enough (a small size's
        // class is no bigger than the old block's)
        if nsize > osize {
            return refused(a, false);
        }
        a.bytes.store(bytes, Relaxed);
        return ptr;
    }
    a.bytes.store(bytes, Relaxed);
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

    /// A heap as a state's allocator gets it, and calls of that allocator.
    struct TestHeap(*mut Heap);

    impl TestHeap {
        fn new() -> TestHeap {
            TestHeap(Box::into_raw(Box::new(Heap {
                account: Arc::new(Account::default()),
                cache: Cache::new(CACHE_BYTES),
            })))
        }
        fn call(&self, ptr: *mut c_void, osize: usize, nsize: usize) -> *mut c_void {
            // SAFETY: `self.0` is a live heap; the tests pass blocks this allocator handed out,
            // with their sizes. black_box: in a release build, a block that goes nowhere lets
            // the optimizer drop the malloc and assume it succeeded.
            std::hint::black_box(unsafe { allocate(self.0 as *mut c_void, ptr, osize, nsize) })
        }
        fn account(&self) -> &Account {
            // SAFETY: live until `drop`.
            unsafe { &(*self.0).account }
        }
        fn held(&self) -> (usize, usize) {
            let a = self.account();
            (a.bytes.load(Relaxed), a.blocks.load(Relaxed))
        }
        fn cached(&self) -> bool {
            // SAFETY: live until `drop`; read on this thread.
            unsafe { (*self.0).cache.holds_any() }
        }
    }

    impl Drop for TestHeap {
        fn drop(&mut self) {
            // SAFETY: from `Box::into_raw`; no block of it is used any more.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }

    #[test]
    fn the_account_counts_exactly_what_lua_holds_through_the_cache_and_resizes() {
        let h = TestHeap::new();
        // blocks of every small class and beyond, each filled with its own byte
        let mut live: Vec<(*mut c_void, usize, u8)> = Vec::new();
        let expect = |live: &Vec<(*mut c_void, usize, u8)>| {
            (live.iter().map(|b| b.1).sum::<usize>(), live.len())
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..20_000u32 {
            let tag = round as u8;
            match next(4) {
                0 | 1 => {
                    let max = if next(8) == 0 { 2000 } else { 300 };
                    let size = 1 + next(max) as usize;
                    let p = h.call(std::ptr::null_mut(), 5, size);
                    assert!(!p.is_null());
                    // SAFETY: a fresh block of `size` bytes.
                    unsafe { std::ptr::write_bytes(p as *mut u8, tag, size) };
                    live.push((p, size, tag));
                }
                2 if !live.is_empty() => {
                    let (p, size, _) = live.swap_remove(next(live.len() as u64) as usize);
                    assert!(h.call(p, size, 0).is_null());
                }
                _ if !live.is_empty() => {
                    // resize within a class, to another small class, to and from large sizes
                    let i = next(live.len() as u64) as usize;
                    let (p, size, fill) = live[i];
                    let max = if next(4) == 0 { 2000 } else { 300 };
                    let nsize = 1 + next(max) as usize;
                    let q = h.call(p, size, nsize);
                    assert!(!q.is_null());
                    // SAFETY: `q` holds `nsize` bytes, the first `min` of them kept from `p`.
                    let kept =
                        unsafe { std::slice::from_raw_parts(q as *const u8, size.min(nsize)) };
                    assert!(
                        kept.iter().all(|&b| b == fill),
                        "{size} -> {nsize} lost the contents"
                    );
                    // SAFETY: as above.
                    unsafe { std::ptr::write_bytes(q as *mut u8, fill, nsize) };
                    live[i] = (q, nsize, fill);
                }
                _ => {}
            }
            assert_eq!(h.held(), expect(&live), "round {round}");
        }
        assert!(
            h.cached(),
            "the pattern frees small blocks: some are cached"
        );
        for (p, size, _) in live.drain(..) {
            h.call(p, size, 0);
        }
        assert_eq!(h.held(), (0, 0), "cached blocks are not counted");
    }

    #[test]
    fn the_limit_refuses_exactly_past_it_even_with_cached_blocks_of_the_size() {
        let h = TestHeap::new();
        // free blocks of 48 bytes so that the cache has some of that class
        let blocks: Vec<_> = (0..8)
            .map(|_| h.call(std::ptr::null_mut(), 0, 48))
            .collect();
        for p in blocks {
            h.call(p, 48, 0);
        }
        assert!(h.cached() && h.held() == (0, 0));
        let keep = h.call(std::ptr::null_mut(), 0, 1000);
        h.account().limit.store(1000 + 48 * 3, Relaxed);
        let a = h.call(std::ptr::null_mut(), 0, 48);
        let b = h.call(std::ptr::null_mut(), 0, 48);
        // one byte past the limit: refused, by the limit, though the cache has a block
        assert!(h.call(std::ptr::null_mut(), 0, 49).is_null());
        assert!(h.account().limit_refused.swap(false, Relaxed));
        assert_eq!(h.held(), (1000 + 96, 3));
        // exactly at the limit: granted
        let c = h.call(std::ptr::null_mut(), 0, 48);
        assert!(!c.is_null());
        assert_eq!(h.held(), (1000 + 48 * 3, 4));
        // a resize that would pass it is refused and keeps the block; shrinking always works
        assert!(h.call(c, 48, 49).is_null());
        assert!(h.account().limit_refused.swap(false, Relaxed));
        assert_eq!(h.held(), (1000 + 48 * 3, 4));
        let c = h.call(c, 48, 10);
        assert!(!c.is_null());
        assert_eq!(h.held(), (1000 + 48 * 2 + 10, 4));
        for (p, size) in [(a, 48), (b, 48), (c, 10), (keep, 1000)] {
            h.call(p, size, 0);
        }
        assert_eq!(h.held(), (0, 0));
    }

    #[test]
    fn an_allocation_the_system_refuses_is_null_and_leaves_the_account_unchanged() {
        let h = TestHeap::new();
        let p = h.call(std::ptr::null_mut(), 0, usize::MAX / 2);
        assert!(p.is_null());
        assert!(!h.account().limit_refused.load(Relaxed));
        assert_eq!(h.held(), (0, 0));
        for size in [100, 1000] {
            let p = h.call(std::ptr::null_mut(), 0, size);
            assert!(!p.is_null());
            assert_eq!(h.held(), (size, 1));
            // growing it past what the system has fails and keeps the block as it was
            assert!(h.call(p, size, usize::MAX / 2).is_null());
            assert_eq!(h.held(), (size, 1));
            h.call(p, size, 0);
            assert_eq!(h.held(), (0, 0));
        }
    }
}
