//! The last few batches of a producer, held inline (Kafka's `ProducerStateEntry.batchMetadata`,
//! a deque capped at `NUM_BATCHES_TO_RETAIN`).
//!
//! Producer state and the producer-id audit push one batch per producer batch they apply. A
//! `VecDeque` keeps its items on the heap: each push was a store through a pointer loaded from
//! the entry, which the planning thread then waited on. The ring keeps them inside the entry.

use super::NUM_BATCHES_TO_RETAIN;

/// [`BatchRing::iter`]'s iterator.
pub type Iter<'a, T> = std::iter::Chain<std::slice::Iter<'a, T>, std::slice::Iter<'a, T>>;

/// At most [`NUM_BATCHES_TO_RETAIN`] items, oldest first: a push past that drops the oldest.
#[derive(Clone, Copy)]
pub struct BatchRing<T> {
    items: [T; NUM_BATCHES_TO_RETAIN],
    /// How many items there are (bytes, not words: with many producers, each byte of an entry
    /// is cache the producers compete for).
    len: u8,
    /// Where the next item goes: once full, the oldest.
    next: u8,
}

/// [`NUM_BATCHES_TO_RETAIN`] as the ring counts.
const CAPACITY: u8 = NUM_BATCHES_TO_RETAIN as u8;
const _: () = assert!(NUM_BATCHES_TO_RETAIN <= u8::MAX as usize);

impl<T: Copy + Default> Default for BatchRing<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default> BatchRing<T> {
    /// An empty ring.
    pub fn new() -> Self {
        Self {
            items: [T::default(); NUM_BATCHES_TO_RETAIN],
            len: 0,
            next: 0,
        }
    }
}

impl<T: Copy> BatchRing<T> {
    /// Asks the CPU to start loading every cache line of the ring (see
    /// `ProducerStateEntry::prefetch`): a hint that reads nothing.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(crate) fn prefetch(&self) {
        // Items are smaller than a cache line, so every other one and the counters cover it.
        for item in self.items.iter().step_by(2) {
            safe_arch::prefetch_t0(item);
        }
        safe_arch::prefetch_t0(&self.len);
    }

    /// Appends `item` as the newest, dropping the oldest if the ring is full.
    pub(crate) fn push(&mut self, item: T) {
        if let Some(slot) = self.items.get_mut(usize::from(self.next)) {
            *slot = item;
        }
        self.next = (self.next + 1) % CAPACITY;
        self.len = (self.len + 1).min(CAPACITY);
    }

    /// Drops every item.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.next = 0;
    }

    /// How many items there are.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items, oldest first.
    pub fn iter(&self) -> Iter<'_, T> {
        // Until the ring is full its items are the first `len` slots; then the oldest is the
        // one the next push overwrites.
        let (first, rest) = self
            .items
            .split_at(usize::from(self.next).min(self.items.len()));
        let older: &[T] = if self.len < CAPACITY { &[] } else { rest };
        older.iter().chain(first.iter())
    }

    /// The oldest item.
    pub fn front(&self) -> Option<&T> {
        self.iter().next()
    }

    /// The newest item.
    pub fn back(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        let newest = (self.next + CAPACITY - 1) % CAPACITY;
        self.items.get(usize::from(newest))
    }
}

impl<'a, T: Copy> IntoIterator for &'a BatchRing<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Equal when the items are, oldest first (not where they sit in the ring).
impl<T: Copy + PartialEq> PartialEq for BatchRing<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Copy + Eq> Eq for BatchRing<T> {}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for BatchRing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(r: &BatchRing<u32>) -> Vec<u32> {
        r.iter().copied().collect()
    }

    #[test]
    fn keeps_the_newest_five_oldest_first() {
        let mut r = BatchRing::<u32>::new();
        assert!(r.is_empty());
        assert_eq!((r.front(), r.back()), (None, None));
        for i in 1..=3 {
            r.push(i);
        }
        assert_eq!(items(&r), [1, 2, 3]);
        assert_eq!((r.front(), r.back(), r.len()), (Some(&1), Some(&3), 3));
        for i in 4..=12 {
            r.push(i);
            let want: Vec<u32> = (i.saturating_sub(4).max(1)..=i).collect();
            assert_eq!(items(&r), want, "after {i}");
            assert_eq!(r.back(), Some(&i));
            assert_eq!(r.front(), want.first());
            assert_eq!(r.len(), want.len());
        }
        assert_eq!(
            r.iter().rev().copied().collect::<Vec<_>>(),
            [12, 11, 10, 9, 8]
        );
        r.clear();
        assert!(r.is_empty());
        assert_eq!(items(&r), Vec::<u32>::new());
        r.push(7);
        assert_eq!(items(&r), [7]);
    }

    #[test]
    fn rings_with_the_same_items_are_equal_wherever_they_sit() {
        let (mut a, mut b) = (BatchRing::<u32>::new(), BatchRing::<u32>::new());
        for i in 0..7 {
            a.push(i);
        }
        for i in 2..7 {
            b.push(i);
        }
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), "[2, 3, 4, 5, 6]");
        b.push(7);
        assert_ne!(a, b);
        let (mut c, mut d) = (BatchRing::<u32>::new(), BatchRing::<u32>::new());
        c.push(1);
        d.push(1);
        d.push(2);
        assert_ne!(c, d);
    }
}
