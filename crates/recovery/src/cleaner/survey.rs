//! What the offset map's read of the dirty segments saw of each batch, so that the cleaning read
//! that follows passes over a batch none of whose records survive without reading it: its size,
//! and, for a plain batch, its offsets. A batch is plain when the cleaning of it depends on its
//! records' offsets alone: a data batch, not transactional, not the last of a producer that
//! producer state holds, whose records sit at `base, base + 1, ..` up to its last offset, each
//! with a key the map took. None of its records survives when a newer offset of the same key
//! replaced each of them in the map ([`NewestOffsets::all_replaced`]); the cleaning then removes it
//! whole, as `clean_into` does after reading it (the batch that ends the pass is read).
//!
//! The entries are bounded by a byte budget (`OffsetMap`'s memory over
//! [`BatchSurvey::BUDGET_SHARE`]); batches past it are read.

use std::collections::BTreeMap;

use super::newest::NewestOffsets;

/// One batch of a segment as the offset map's read saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SurveyedBatch {
    /// Bytes of the batch (`LOG_OVERHEAD` included).
    pub(super) size: u32,
    /// Its base offset less the segment's base offset.
    base_delta: u32,
    /// Its records, if plain; 0 otherwise.
    plain_records: u32,
}

impl SurveyedBatch {
    /// `[first, last]` offsets of a plain batch of a segment at `segment_base`.
    pub(super) fn plain_offsets(&self, segment_base: i64) -> Option<(i64, i64)> {
        if self.plain_records == 0 {
            return None;
        }
        let first = segment_base.checked_add(i64::from(self.base_delta))?;
        Some((first, first.checked_add(i64::from(self.plain_records) - 1)?))
    }

    /// Its records, if plain.
    pub(super) fn plain_records(&self) -> u32 {
        self.plain_records
    }
}

/// The batches of each dirty segment from its start, in file order, as far as the budget goes.
#[derive(Debug)]
pub(super) struct BatchSurvey {
    segments: BTreeMap<i64, Vec<SurveyedBatch>>,
    /// Entries the budget still allows.
    room: usize,
}

impl BatchSurvey {
    /// The entries take at most the offset map's memory over this.
    pub(super) const BUDGET_SHARE: usize = 8;

    /// A survey of at most `budget` bytes of entries.
    pub(super) fn new(budget: usize) -> Self {
        BatchSurvey {
            segments: BTreeMap::new(),
            room: budget / std::mem::size_of::<SurveyedBatch>(),
        }
    }

    /// The next batch of the segment at `segment_base`, `size` bytes from `base_offset`, with
    /// `plain_records` records if plain (else 0). A batch past the budget, or whose figures do
    /// not fit an entry, ends the segment's entries.
    pub(super) fn push(
        &mut self,
        segment_base: i64,
        size: u64,
        base_offset: i64,
        plain_records: u32,
    ) {
        let entries = self.segments.entry(segment_base).or_default();
        if entries.last().is_some_and(|e| e.size == 0) {
            return;
        }
        let entry = match (
            u32::try_from(size),
            base_offset
                .checked_sub(segment_base)
                .and_then(|d| u32::try_from(d).ok()),
        ) {
            (Ok(size), Some(base_delta)) if self.room > 0 && size > 0 => SurveyedBatch {
                size,
                base_delta,
                plain_records,
            },
            // A closing entry: nothing follows it.
            _ => SurveyedBatch {
                size: 0,
                base_delta: 0,
                plain_records: 0,
            },
        };
        self.room = self.room.saturating_sub(1);
        entries.push(entry);
    }

    /// The surveyed batches of the segment at `segment_base`, from its start, in file order.
    pub(super) fn segment(&self, segment_base: i64) -> &[SurveyedBatch] {
        let entries = self
            .segments
            .get(&segment_base)
            .map_or(&[][..], Vec::as_slice);
        match entries.iter().position(|e| e.size == 0) {
            Some(end) => entries.get(..end).unwrap_or(&[]),
            None => entries,
        }
    }
}

/// Whether none of the records of `batch` (of the segment at `segment_base`) survives a cleaning
/// with `newest` whose map ends at `map_end` (its latest offset): a plain batch within the map
/// whose every offset a newer one replaced.
pub(super) fn removed_unread(
    batch: &SurveyedBatch,
    segment_base: i64,
    newest: &NewestOffsets,
    map_end: i64,
) -> Option<(i64, i64)> {
    let (first, last) = batch.plain_offsets(segment_base)?;
    (last <= map_end && newest.all_replaced(first, last)).then_some((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stop_at_the_budget_and_at_figures_that_do_not_fit() {
        let size = std::mem::size_of::<SurveyedBatch>();
        let mut s = BatchSurvey::new(6 * size);
        s.push(100, 70, 100, 1);
        s.push(100, 80, 101, 0);
        s.push(200, 90, 250, 3);
        // A base offset below its segment's: the segment's entries end there.
        s.push(200, 90, 199, 1);
        s.push(200, 90, 300, 1);
        s.push(300, 1 << 33, 300, 1);
        s.push(100, 60, 102, 2);
        s.push(100, 60, 104, 1);
        assert_eq!(s.segment(100).len(), 3, "the budget ends after six entries");
        assert_eq!(s.segment(200).len(), 1);
        assert!(s.segment(300).is_empty());
        assert!(s.segment(400).is_empty());
        let seg = s.segment(100);
        assert_eq!(seg[0].plain_offsets(100), Some((100, 100)));
        assert_eq!(seg[1].plain_offsets(100), None);
        assert_eq!(seg[2].plain_offsets(100), Some((102, 103)));
        assert_eq!(s.segment(200)[0].plain_offsets(200), Some((250, 252)));
    }
}
