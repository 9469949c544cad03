//! Values keyed by call tokens. A notifier hands its tokens out small and dense (a token is
//! reused once it can never come back, `host::notifier_api`), so a vector indexed by the token
//! serves them: an insert and a removal are one store each, where the hash map they replaced
//! cost about 140 instructions per call together (callgrind, `bench/ngx/instructions.lua`).
//! The vector grows to the largest token in use, which is the most calls ever in flight at once.

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

    pub fn get_mut(&mut self, token: u64) -> Option<&mut V> {
        Self::index(token).and_then(|i| self.slots.get_mut(i)?.as_mut())
    }

    pub fn contains_key(&self, token: u64) -> bool {
        self.get(token).is_some()
    }

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
    use super::TokenMap;

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
