//! Which offsets of a pass's dirty range the offset map took, and which of them a newer offset of
//! the same key then replaced: two bits per offset, so that the cleaning that follows decides a
//! record of that range by its offset (newest if taken and not replaced) instead of hashing its
//! key again and looking it up. It answers exactly as the map does: a taken offset is replaced
//! when, and only when, a later put found the same digest in the map.
//!
//! The bits are bounded by a byte budget (`OffsetMap`'s memory over
//! [`NewestOffsets::BUDGET_SHARE`]); offsets past what it covers are looked up in the map.

use super::offset_map::Put;

/// Bits of the first offsets of a range (two per offset, in two bit sets).
#[derive(Debug)]
pub(super) struct NewestOffsets {
    start: i64,
    /// Offsets covered, from `start`.
    len: u64,
    put: Vec<u64>,
    replaced: Vec<u64>,
}

impl NewestOffsets {
    /// The bits take at most the offset map's memory over this.
    pub(super) const BUDGET_SHARE: usize = 16;

    /// Bits for `[start, end)`, or as many of its first offsets as `budget` bytes cover.
    pub(super) fn new(start: i64, end: i64, budget: usize) -> Self {
        let wanted = u64::try_from(end.saturating_sub(start)).unwrap_or(0);
        // Two bits per offset: a byte covers four.
        let len = wanted.min(budget as u64 * 4);
        let words = usize::try_from(len.div_ceil(64)).unwrap_or(0);
        NewestOffsets {
            start,
            len,
            put: vec![0; words],
            replaced: vec![0; words],
        }
    }

    /// The word and bit of `offset`, if covered.
    fn bit(&self, offset: i64) -> Option<(usize, u64)> {
        let rel = self.relative(offset)?;
        Some((usize::try_from(rel / 64).ok()?, 1 << (rel % 64)))
    }

    /// What the map did with `offset`'s key.
    pub(super) fn record(&mut self, offset: i64, put: Put) {
        let replaced = match put {
            Put::Refused => return,
            Put::New => None,
            Put::Replaced(o) => Some(o),
        };
        if let Some((w, b)) = self.bit(offset) {
            if let Some(word) = self.put.get_mut(w) {
                *word |= b;
            }
        }
        if let Some((w, b)) = replaced.and_then(|o| self.bit(o)) {
            if let Some(word) = self.replaced.get_mut(w) {
                *word |= b;
            }
        }
    }

    /// Whether the record at `offset` is its key's newest in the map (`offset >= map.get(key)`),
    /// or `None` when the map did not take it here (not covered, no key, an aborted batch).
    pub(super) fn is_newest(&self, offset: i64) -> Option<bool> {
        let (w, b) = self.bit(offset)?;
        if self.put.get(w)? & b == 0 {
            return None;
        }
        Some(self.replaced.get(w)? & b == 0)
    }

    /// Whether every offset of `[first, last]` is covered, was taken, and was replaced: the
    /// answer of [`Self::is_newest`] is `Some(false)` for each.
    pub(super) fn all_replaced(&self, first: i64, last: i64) -> bool {
        let (Some(from), Some(to)) = (self.relative(first), self.relative(last)) else {
            return false;
        };
        if from > to {
            return false;
        }
        let (Ok(first_word), Ok(last_word)) =
            (usize::try_from(from / 64), usize::try_from(to / 64))
        else {
            return false;
        };
        (first_word..=last_word).all(|w| {
            let low = if w == first_word { from % 64 } else { 0 };
            let high = if w == last_word { to % 64 } else { 63 };
            // Bits low..=high.
            let mask = (u64::MAX >> (63 - high)) & (u64::MAX << low);
            let both = match (self.put.get(w), self.replaced.get(w)) {
                (Some(p), Some(r)) => p & r,
                _ => 0,
            };
            both & mask == mask
        })
    }

    /// `offset` less the start, if covered.
    fn relative(&self, offset: i64) -> Option<u64> {
        let rel = u64::try_from(offset.checked_sub(self.start)?).ok()?;
        (rel < self.len).then_some(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cleaner::OffsetMap;

    /// Random puts over a small key space, against the map's own answer.
    #[test]
    fn answers_as_the_map_does() {
        let mut rng = testkit::XorShift::new(7);
        let mut map = OffsetMap::new(24 * 300);
        let (start, end) = (1_000i64, 6_000i64);
        // A budget covering the first 4,000 offsets only.
        let mut bits = NewestOffsets::new(start, end, 1_000);
        let mut taken = Vec::new();
        for offset in start..end {
            let x = rng.next_u64();
            if x.is_multiple_of(7) {
                continue; // no key, or an aborted batch: never put
            }
            let key = format!("k{}", x % 400);
            let put = map.put_replacing(key.as_bytes(), offset);
            bits.record(offset, put);
            if put != Put::Refused {
                taken.push((offset, key));
            }
        }
        let mut answered = 0;
        for (offset, key) in &taken {
            match bits.is_newest(*offset) {
                Some(newest) => {
                    answered += 1;
                    assert_eq!(newest, *offset >= map.get(key.as_bytes()), "{key}@{offset}");
                }
                None => assert!(*offset >= start + 4_000, "{offset} is covered"),
            }
        }
        let covered = taken.iter().filter(|(o, _)| *o < start + 4_000).count();
        assert_eq!(answered, covered, "every covered offset put is answered");
        assert!(answered > 2_000, "{answered}");
        for offset in start..end {
            if !taken.iter().any(|(o, _)| *o == offset) {
                assert_eq!(bits.is_newest(offset), None, "{offset} was not put");
            }
        }
        assert!(taken
            .iter()
            .any(|(o, k)| *o < start + 4_000 && *o < map.get(k.as_bytes())));
        // Ranges within a word and across words, some past the covered offsets.
        let mut all = 0;
        for i in 0..20_000u64 {
            let first = start - 2 + (rng.next_u64() % 4_200) as i64;
            let len = 1 + [rng.next_u64() % 3, rng.next_u64() % 140][(i % 2) as usize] as i64;
            let last = first + len - 1;
            let expected = (first..=last).all(|o| bits.is_newest(o) == Some(false));
            assert_eq!(
                bits.all_replaced(first, last),
                expected,
                "[{first}, {last}]"
            );
            all += u32::from(expected && len > 1);
        }
        assert!(
            all > 100,
            "{all} ranges of two or more offsets all replaced"
        );
        assert!(!bits.all_replaced(start + 10, start + 9), "an empty range");
        assert_eq!(bits.is_newest(start - 1), None);
        assert_eq!(bits.is_newest(end), None);
    }
}
