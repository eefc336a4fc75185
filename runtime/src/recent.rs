//! A bounded set that remembers the most recent values: once full, adding a
//! value forgets the oldest. For "have I seen this lately?" questions whose
//! answers only matter for a while (cancellations, batches just delivered).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, RwLock};

/// Cheap to clone; clones share the set.
#[derive(Debug)]
pub struct Recent<T> {
    inner: Arc<RwLock<Remembered<T>>>,
    capacity: usize,
}

impl<T> Clone for Recent<T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            capacity: self.capacity,
        }
    }
}

#[derive(Debug)]
struct Remembered<T> {
    set: HashSet<T>,
    order: VecDeque<T>,
}

impl<T: Copy + Eq + Hash> Recent<T> {
    /// Remembers at most `capacity` values (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(RwLock::new(Remembered {
                set: HashSet::new(),
                order: VecDeque::new(),
            })),
            capacity: capacity.max(1),
        }
    }

    pub fn contains(&self, value: &T) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .set
            .contains(value)
    }

    /// Adds `value`, forgetting the oldest when full.
    pub fn insert(&self, value: T) {
        let mut remembered = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if remembered.set.insert(value) {
            remembered.order.push_back(value);
            if remembered.order.len() > self.capacity
                && let Some(oldest) = remembered.order.pop_front()
            {
                remembered.set.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_oldest_once_full() {
        let recent = Recent::new(3);
        for n in 0..3 {
            recent.insert(n);
        }
        recent.insert(1);
        assert!((0..3).all(|n| recent.contains(&n)), "a repeat adds nothing");
        recent.insert(3);
        assert!(!recent.contains(&0), "the oldest is forgotten");
        assert!((1..4).all(|n| recent.contains(&n)));
    }
}
