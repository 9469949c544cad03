//! nginx's slab allocator (`ngx_slab.c`) in counts only: where a `lua_shared_dict` zone of the
//! same size would put each entry, so that `vmpool.shared` fills, evicts and refuses where nginx
//! does. Nothing is stored here: the dictionary keeps its data in its own maps.
//!
//! A zone of `capacity` bytes starts with the pool's header (200 bytes on 64-bit), a list head and
//! a statistics record per size class (9 classes, 56 bytes each) and a 24-byte descriptor per
//! page; the 4 KiB pages follow, the first aligned to 4 KiB. A block of up to 2 KiB is an object
//! in a page of its size class (powers of two from 8 bytes; below 64 bytes the page's bitmap takes
//! its first objects); a larger one takes whole contiguous pages, first fit in the order the free
//! runs were freed. A class takes objects from the page at the head of its list of pages with room;
//! a full page leaves the list, and goes back to its head when an object in it is freed. A page
//! whose objects are all free is a free page again, joined with free neighbours.
//! `ngx_http_lua_shdict_init_zone` then takes two blocks for itself (the tree and LRU queue's
//! header, and the zone's name for log messages).

pub const PAGE: usize = 4096;
const PAGE_SHIFT: u32 = 12;
const MIN_SHIFT: u32 = 3;
/// Classes up to 64 bytes keep their bitmap in the page itself (nginx: below the "exact" size).
const EXACT_SHIFT: u32 = 6;
const MAX_OBJECT: usize = PAGE / 2;
const CLASSES: usize = (PAGE_SHIFT - MIN_SHIFT) as usize;
/// `sizeof(ngx_slab_pool_t)` plus the classes' list heads and statistics.
const HEADER: usize = 200 + CLASSES * (24 + 32);
const DESCRIPTOR: usize = 24;
/// `ngx_http_lua_shdict_shctx_t`: the red-black tree, its sentinel and the LRU queue.
const SHCTX: usize = 80;
/// The zone's name in `" in lua_shared_dict zone \"NAME\""` with its NUL, besides the name.
const LOG_CTX: usize = 28;
/// Marks a [`Block`]'s `span` as a size class (its shift) rather than a count of pages.
const OBJECT: u32 = 1 << 31;
const NIL: u32 = u32::MAX;

/// Where a block is: an object in page `page`, or the pages from `page` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    page: u32,
    span: u32,
}

/// The kind of block `size` bytes take: a size class (`OBJECT | shift`) or a number of pages.
/// Two sizes of the same span take the same room: a rewrite between them keeps its block.
#[inline]
pub fn span(size: usize) -> u32 {
    if size > MAX_OBJECT {
        size.div_ceil(PAGE) as u32
    } else if size > 1 << MIN_SHIFT {
        OBJECT | (usize::BITS - (size - 1).leading_zeros())
    } else {
        OBJECT | MIN_SHIFT
    }
}

impl Block {
    /// No block: freeing it does nothing.
    pub const NONE: Block = Block { page: NIL, span: 0 };

    pub fn span(self) -> u32 {
        self.span
    }
}

/// Objects a page of class `shift` holds for allocation.
fn per_page(shift: u32) -> u16 {
    let objects = PAGE >> shift;
    if shift < EXACT_SHIFT {
        let bitmap = (objects / ((1 << shift) * 8)).max(1);
        (objects - bitmap) as u16
    } else {
        objects as u16
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Free,
    /// A page of objects of class `shift`; `full` when it left its class's list.
    Objects {
        shift: u8,
        used: u16,
        full: bool,
    },
    Busy,
}

/// The zone's pages. Lists are doubly linked through `next`/`prev`, indexed by page; the list
/// heads come after the pages (the free runs' list at `n`, class `c`'s at `n + 1 + c`).
pub struct Slab {
    state: Vec<State>,
    /// At a free run's first page, its length in pages.
    len: Vec<u32>,
    /// At a free run's last page, its first page.
    head: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    free: usize,
}

/// `n` values made by `f` from their index, or `None` if the system refuses the memory (a page
/// table is as large as the capacity asks: an infallible allocation would abort the process).
fn filled<T>(n: usize, f: impl Fn(usize) -> T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.extend((0..n).map(f));
    Some(v)
}

/// Pages a zone of `capacity` bytes has (`ngx_slab_init`).
pub fn pages_in(capacity: usize) -> usize {
    let Some(room) = capacity.checked_sub(HEADER) else {
        return 0;
    };
    let pages = room / (PAGE + DESCRIPTOR);
    let start = (HEADER + pages * DESCRIPTOR).next_multiple_of(PAGE);
    pages.min(capacity.saturating_sub(start) / PAGE)
}

impl Slab {
    /// The pool of a zone of `capacity` bytes, with the blocks lua-nginx-module takes for a zone
    /// called by a name of `name_len` bytes taken (a zone too small for them keeps what is left:
    /// nginx would refuse to start). `None` if the system refuses the memory for the page table
    /// (22 bytes a page).
    pub fn new(capacity: usize, name_len: usize) -> Option<Slab> {
        let n = pages_in(capacity);
        let links = n + 1 + CLASSES;
        let mut s = Slab {
            state: filled(n, |_| State::Free)?,
            len: filled(n, |_| 0)?,
            head: filled(n, |_| 0)?,
            next: filled(links, |i| i as u32)?,
            prev: filled(links, |i| i as u32)?,
            free: n,
        };
        if n > 0 {
            s.add_free_run(0, n as u32);
        }
        s.alloc(SHCTX);
        s.alloc(LOG_CTX + name_len);
        Some(s)
    }

    /// Whole pages free (`ngx_http_lua_ffi_shdict_free_space` counts these).
    pub fn free_pages(&self) -> usize {
        self.free
    }

    fn pages(&self) -> u32 {
        self.state.len() as u32
    }

    fn free_list(&self) -> u32 {
        self.pages()
    }

    fn class_list(&self, shift: u32) -> u32 {
        self.pages() + 1 + (shift - MIN_SHIFT)
    }

    fn unlink(&mut self, p: u32) {
        let (n, v) = (self.next[p as usize], self.prev[p as usize]);
        self.next[v as usize] = n;
        self.prev[n as usize] = v;
        self.next[p as usize] = NIL;
        self.prev[p as usize] = NIL;
    }

    fn link_first(&mut self, list: u32, p: u32) {
        let first = self.next[list as usize];
        self.next[p as usize] = first;
        self.prev[p as usize] = list;
        self.prev[first as usize] = p;
        self.next[list as usize] = p;
    }

    /// Puts the free run `first..first + len` at the head of the free runs' list.
    fn add_free_run(&mut self, first: u32, len: u32) {
        for p in first..first + len {
            self.state[p as usize] = State::Free;
        }
        self.len[first as usize] = len;
        self.head[(first + len - 1) as usize] = first;
        self.link_first(self.free_list(), first);
    }

    /// A block for `size` bytes, or `None` if nginx would have none (`ngx_slab_alloc_locked`).
    pub fn alloc(&mut self, size: usize) -> Option<Block> {
        let span = span(size);
        if span & OBJECT == 0 {
            let page = self.alloc_pages(span)?;
            self.state[page as usize] = State::Busy;
            return Some(Block { page, span });
        }
        let shift = span & !OBJECT;
        let list = self.class_list(shift);
        let first = self.next[list as usize];
        if first != list {
            if let State::Objects { used, full, .. } = &mut self.state[first as usize] {
                *used += 1;
                if *used == per_page(shift) {
                    *full = true;
                    self.unlink(first);
                }
            }
            return Some(Block { page: first, span });
        }
        let page = self.alloc_pages(1)?;
        self.state[page as usize] = State::Objects {
            shift: shift as u8,
            used: 1,
            full: false,
        };
        self.link_first(list, page);
        Some(Block { page, span })
    }

    /// Frees a block [`Slab::alloc`] gave (`ngx_slab_free_locked`).
    pub fn free(&mut self, b: Block) {
        if b.span == 0 {
            return;
        }
        if b.span & OBJECT == 0 {
            self.release_pages(b.page, b.span);
            return;
        }
        let State::Objects { shift, used, full } = &mut self.state[b.page as usize] else {
            debug_assert!(false, "a freed object outside a page of objects");
            return;
        };
        let shift = u32::from(*shift);
        *used -= 1;
        let (empty, was_full) = (*used == 0, *full);
        *full = false;
        if was_full {
            self.link_first(self.class_list(shift), b.page);
        }
        if empty {
            self.unlink(b.page);
            self.release_pages(b.page, 1);
        }
    }

    /// First fit among the free runs, in list order; what is left of the run keeps its place.
    fn alloc_pages(&mut self, want: u32) -> Option<u32> {
        let list = self.free_list();
        let mut p = self.next[list as usize];
        while p != list {
            let len = self.len[p as usize];
            if len >= want {
                if len > want {
                    let rest = p + want;
                    self.len[rest as usize] = len - want;
                    self.head[(p + len - 1) as usize] = rest;
                    let (n, v) = (self.next[p as usize], self.prev[p as usize]);
                    self.next[rest as usize] = n;
                    self.prev[rest as usize] = v;
                    self.next[v as usize] = rest;
                    self.prev[n as usize] = rest;
                    self.next[p as usize] = NIL;
                    self.prev[p as usize] = NIL;
                } else {
                    self.unlink(p);
                }
                for q in p..p + want {
                    self.state[q as usize] = State::Busy;
                }
                self.free -= want as usize;
                return Some(p);
            }
            p = self.next[p as usize];
        }
        None
    }

    /// Frees pages `first..first + n`, joined with a free run after and before them.
    fn release_pages(&mut self, first: u32, n: u32) {
        self.free += n as usize;
        let (mut start, mut len) = (first, n);
        let after = first + n;
        if after < self.pages() && self.state[after as usize] == State::Free {
            len += self.len[after as usize];
            self.unlink(after);
        }
        if first > 0 && self.state[(first - 1) as usize] == State::Free {
            let h = self.head[(first - 1) as usize];
            self.unlink(h);
            len += self.len[h as usize];
            start = h;
        }
        self.add_free_run(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // the figures are what nginx 1.22 with lua-nginx-module 0.10.23 answers (spec/ngx/shared_ops.lua,
    // `fill`): free_space() of an empty zone, entries stored before the first eviction

    fn fill(capacity: usize, name_len: usize, size: usize) -> usize {
        let mut s = Slab::new(capacity, name_len).unwrap();
        let mut n = 0;
        while s.alloc(size).is_some() {
            n += 1;
        }
        n
    }

    #[test]
    fn zones_have_the_pages_nginx_gives_them() {
        assert_eq!(pages_in(12 << 10), 2);
        assert_eq!(pages_in(100 << 10), 24);
        assert_eq!(pages_in(1 << 20), 254);
        assert_eq!(pages_in(1000), 0);
        assert_eq!(Slab::new(100 << 10, 9).unwrap().free_pages(), 22);
        // a name long enough puts the log context in the header's class: one page more
        assert_eq!(Slab::new(100 << 10, 37).unwrap().free_pages(), 23);
        assert_eq!(Slab::new(1 << 20, 7).unwrap().free_pages(), 252);
    }

    #[test]
    fn entries_fill_size_classes_as_in_nginx() {
        // a node is 68 bytes besides the key and the value
        assert_eq!(fill(100 << 10, 9, 68 + 4 + 8), 735);
        assert_eq!(fill(100 << 10, 9, 68 + 4 + 100), 352);
        assert_eq!(fill(100 << 10, 9, 68 + 4 + 1000), 44);
        assert_eq!(fill(100 << 10, 9, 68 + 4 + 4000), 22);
        assert_eq!(fill(100 << 10, 9, 68 + 4 + 9000), 7);
        assert_eq!(fill(1 << 20, 7, 68 + 4 + 100), 4032);
        assert_eq!(fill(12 << 10, 8, 68 + 4 + 1), 31);
        assert_eq!(fill(12 << 10, 8, 68 + 4 + 100), 0);
    }

    #[test]
    fn freed_pages_join_their_neighbours() {
        let mut s = Slab::new(100 << 10, 9).unwrap();
        let blocks: Vec<_> = (0..22).map(|_| s.alloc(PAGE).unwrap()).collect();
        assert_eq!(s.free_pages(), 0);
        // two separate free pages cannot hold a block of two pages; joined they can
        s.free(blocks[3]);
        s.free(blocks[5]);
        assert!(s.alloc(2 * PAGE).is_none());
        s.free(blocks[4]);
        assert_eq!(s.free_pages(), 3);
        let b = s.alloc(3 * PAGE).unwrap();
        assert_eq!(s.free_pages(), 0);
        s.free(b);
        assert_eq!(s.free_pages(), 3);
    }

    #[test]
    fn a_page_of_objects_is_free_again_when_its_last_object_is() {
        let mut s = Slab::new(100 << 10, 9).unwrap();
        let before = s.free_pages();
        let a: Vec<_> = (0..17).map(|_| s.alloc(200).unwrap()).collect();
        assert_eq!(before - s.free_pages(), 2);
        for b in &a[..16] {
            s.free(*b);
        }
        assert_eq!(before - s.free_pages(), 1);
        s.free(a[16]);
        assert_eq!(s.free_pages(), before);
        assert_eq!(span(2048), span(1025));
        assert_ne!(span(2049), span(2048));
        assert_eq!(span(4097), 2);
    }
}
