//! A state's cache of freed small blocks, by size class, in front of the C library's allocator.
//!
//! A state's allocator runs on its state's thread only, so the cache is a plain free list per
//! class (no lock, no atomic: nothing here can be held across a `fork()`). Blocks are the C
//! library's (`malloc`), each of its class's full size, so any block of a class fits any request
//! of that class; the cache holds at most `room` bytes of them, and gives them all back to the C
//! library when emptied (`drain`, when the state closes).

use std::ffi::c_void;

/// Size classes: class `c` holds blocks of `16 * c + 8` bytes, the sizes glibc's 64-bit chunks
/// give (16-byte steps, 8 bytes of header), so asking for the class's size costs glibc no more
/// than asking for the request's.
const CLASSES: usize = 17;

/// The largest request the cache serves (264 bytes: tables, strings, closures, small arrays).
pub const SMALL_MAX: usize = 16 * (CLASSES - 1) + 8;

/// The class of a request of `n` bytes, `n <= SMALL_MAX`.
#[inline(always)]
pub fn class(n: usize) -> usize {
    (n + 7) >> 4
}

/// The bytes of every block of class `c`.
#[inline(always)]
pub fn class_size(c: usize) -> usize {
    16 * c + 8
}

/// Freed blocks by class, each list linked through the blocks' first word.
pub struct Cache {
    heads: [*mut c_void; CLASSES],
    /// What the cache may still take, in 16-byte units: a block of class `c` is `c + 1` of them,
    /// its size with glibc's header.
    room: usize,
}

impl Cache {
    /// An empty cache that holds at most `bytes` bytes of blocks (counting glibc's headers).
    pub const fn new(bytes: usize) -> Cache {
        Cache {
            heads: [std::ptr::null_mut(); CLASSES],
            room: bytes / 16,
        }
    }

    /// A cached block of class `c` (`class_size(c)` bytes), or NULL when there is none.
    #[inline(always)]
    pub fn take(&mut self, c: usize) -> *mut c_void {
        let p = self.heads[c];
        if !p.is_null() {
            // SAFETY: a cached block is a live `malloc` block whose first word `put` wrote.
            self.heads[c] = unsafe { *(p as *mut *mut c_void) };
            self.room += c + 1;
        }
        p
    }

    /// Keeps block `p` of class `c` for a later `take`; false (and nothing kept) when the cache is
    /// full.
    ///
    /// # Safety
    /// `p` is a `malloc` block of at least `class_size(c)` bytes that nothing else uses any more.
    #[inline(always)]
    pub unsafe fn put(&mut self, p: *mut c_void, c: usize) -> bool {
        if self.room <= c {
            return false;
        }
        // SAFETY: the caller's contract: `p` is ours and holds a pointer.
        unsafe { *(p as *mut *mut c_void) = self.heads[c] };
        self.heads[c] = p;
        self.room -= c + 1;
        true
    }

    /// Gives every cached block back to the C library.
    pub fn drain(&mut self) {
        for c in 0..CLASSES {
            loop {
                let p = self.take(c);
                if p.is_null() {
                    break;
                }
                // SAFETY: `take` handed the block over; it came from `malloc`.
                unsafe { libc::free(p) };
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.drain();
    }
}

#[cfg(test)]
impl Cache {
    /// Whether any block is cached.
    pub fn holds_any(&self) -> bool {
        self.heads.iter().any(|p| !p.is_null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_small_request_fits_its_class_and_classes_match_glibc_chunks() {
        for n in 1..=SMALL_MAX {
            let c = class(n);
            assert!(c < CLASSES && class_size(c) >= n, "{n}");
            // the class's size is the largest request glibc serves with the same chunk
            assert!(c == 0 || class_size(c - 1) < n, "{n}");
        }
    }

    #[test]
    fn the_cache_holds_no_more_than_its_bound_and_gives_blocks_back_last_in_first_out() {
        let mut cache = Cache::new(1024);
        let c = class(40); // 40-byte blocks, 48 with glibc's header
        let mut kept = Vec::new();
        loop {
            // SAFETY: a fresh block of the class's size, handed to the cache or freed.
            unsafe {
                let p = libc::malloc(class_size(c));
                if !cache.put(p, c) {
                    libc::free(p);
                    break;
                }
                kept.push(p);
            }
        }
        assert_eq!(kept.len(), 1024 / 48);
        // 16 bytes are left: another class of 32 finds no room either, until a block is taken
        // SAFETY: as above; `q` is kept (freed by `drain`) once `put` takes it.
        unsafe {
            let q = libc::malloc(class_size(1));
            assert!(!cache.put(q, 1));
            assert_eq!(cache.take(c), *kept.last().unwrap());
            assert!(cache.put(q, 1));
        }
        assert_eq!(cache.take(0), std::ptr::null_mut());
        // SAFETY: `take` handed the block over.
        unsafe { libc::free(kept.pop().unwrap()) };
        cache.drain();
        assert!(!cache.holds_any());
        assert_eq!(cache.room, 1024 / 16);
    }
}
