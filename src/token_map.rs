//! Call tokens: how the registry of waits (`host::waits`, behind every scheduler's notifier) hands
//! them out and takes them back ([`TokenSupply`]), and values keyed by them ([`TokenMap`]).
//!
//! Tokens are small and dense: a token is reused once it can never come back, so a vector
//! indexed by the token serves the values keyed by it. An insert and a removal are one store
//! each (a hash map costs about 140 instructions per call for the two, callgrind). The vector
//! grows to the largest token in use, which is the most calls ever in flight at once.

/// Tokens from 1 up, the freed ones first. A token that came back in the array of a
/// `drain`/`wait` and was then freed is reused only from the next `drain`/`wait` on (`release`,
/// then `recycle`): the loop may still be going through that array, resuming one waiter after
/// another, and a call made by one of them under the same token would be woken by the old
/// completion's entry further on.
#[derive(Default)]
pub struct TokenSupply {
    /// The last token ever handed out (0: none yet).
    last: u64,
    free: Vec<u64>,
    /// Freed since the last `recycle`.
    released: Vec<u64>,
}

impl TokenSupply {
    /// A token nobody holds.
    pub fn take(&mut self) -> u64 {
        self.free.pop().unwrap_or_else(|| {
            self.last += 1;
            self.last
        })
    }

    /// A token that was never queued: free at once.
    pub fn free_now(&mut self, token: u64) {
        self.free.push(token);
    }

    /// A token that came back through the queue and is done with: free from the next `recycle`.
    pub fn release(&mut self, token: u64) {
        self.released.push(token);
    }

    /// Before a `drain`/`wait` collects new tokens: the ones released since the last are free.
    pub fn recycle(&mut self) {
        self.free.append(&mut self.released);
    }
}

pub struct TokenMap<V> {
    slots: Vec<Option<V>>,
    len: usize,
}

impl<V> Default for TokenMap<V> {
    fn default() -> Self {
        TokenMap {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> TokenMap<V> {
    fn index(token: u64) -> Option<usize> {
        usize::try_from(token).ok()
    }

    /// Files `value` under `token`, returning the value it replaces.
    #[inline]
    pub fn insert(&mut self, token: u64, value: V) -> Option<V> {
        let i = Self::index(token).expect("a token fits in usize");
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        let old = self.slots[i].replace(value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn get(&self, token: u64) -> Option<&V> {
        Self::index(token).and_then(|i| self.slots.get(i)?.as_ref())
    }

    #[inline]
    pub fn get_mut(&mut self, token: u64) -> Option<&mut V> {
        Self::index(token).and_then(|i| self.slots.get_mut(i)?.as_mut())
    }

    pub fn contains_key(&self, token: u64) -> bool {
        self.get(token).is_some()
    }

    #[inline]
    pub fn remove(&mut self, token: u64) -> Option<V> {
        let old = Self::index(token).and_then(|i| self.slots.get_mut(i)?.take());
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::{TokenMap, TokenSupply};

    #[test]
    fn a_released_token_is_reused_only_after_the_next_recycle() {
        let mut s = TokenSupply::default();
        assert_eq!((s.take(), s.take(), s.take()), (1, 2, 3));
        s.release(2);
        assert_eq!(s.take(), 4, "released, not free yet");
        s.free_now(4);
        assert_eq!(s.take(), 4, "never queued: free at once");
        s.recycle();
        assert_eq!(s.take(), 2);
        assert_eq!(s.take(), 5);
    }

    #[test]
    fn a_token_map_keeps_each_value_under_its_token_and_counts_them() {
        let mut m = TokenMap::default();
        assert_eq!(m.len(), 0);
        assert_eq!(m.insert(3, "c"), None);
        assert_eq!(m.insert(1, "a"), None);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get(3), Some(&"c"));
        assert_eq!(m.get(2), None);
        assert_eq!(m.get(1_000_000), None);
        assert_eq!(m.insert(3, "C"), Some("c"));
        assert_eq!(m.len(), 2);
        *m.get_mut(1).unwrap() = "A";
        assert_eq!(m.remove(1), Some("A"));
        assert_eq!(m.remove(1), None);
        assert_eq!(m.remove(99), None);
        assert!(!m.contains_key(1));
        assert!(m.contains_key(3));
        assert_eq!(m.len(), 1);
    }
}
