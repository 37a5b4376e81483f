//! Kafka's searches of the offset and time indexes, written once over their entries wherever
//! they are held: the mapped index files, and the active segment's tail published to readers
//! that take no lock (`segment/tail.rs`). Both give the same answers for the same entries.

use super::entry_file::IndexEntry;
use super::TimestampOffset;
use super::{offset, search_slots, time, FilePosition, OffsetPosition, SearchResult};

/// Offset-index entries: `(offset, position)` in offset order, positions increasing.
pub(crate) trait OffsetEntries {
    /// The segment's base offset.
    fn base_offset(&self) -> i64;
    /// Number of entries.
    fn entries(&self) -> usize;
    /// Entry `n`, `None` past the end.
    fn entry(&self, n: usize) -> Option<OffsetPosition>;
}

/// Time-index entries: `(max timestamp so far, its offset)`, timestamps increasing.
pub(crate) trait TimeEntries {
    /// The segment's base offset.
    fn base_offset(&self) -> i64;
    /// Number of entries.
    fn entries(&self) -> usize;
    /// Entry `n`, `None` past the end.
    fn entry(&self, n: usize) -> Option<TimestampOffset>;
}

fn search_offsets(
    index: &impl OffsetEntries,
    target: i64,
    key: impl Fn(&OffsetPosition) -> i64,
    kind: SearchResult,
) -> Option<usize> {
    let key_at = |n: usize| index.entry(n).map_or(i64::MAX, |e| key(&e));
    search_slots(index.entries(), offset::ENTRY_SIZE, target, key_at, kind)
}

fn position_key(e: &OffsetPosition) -> i64 {
    i64::from(e.position.0)
}

/// Kafka's `OffsetIndex.lookup`: the largest entry with offset `<= target`, or `(base_offset, 0)`
/// if there is none.
pub(crate) fn lookup(index: &impl OffsetEntries, target: i64) -> OffsetPosition {
    let empty = OffsetPosition::empty(index.base_offset());
    match search_offsets(index, target, |e| e.offset, SearchResult::LargestLowerBound) {
        Some(slot) => index
            .entry(slot)
            .or_else(|| index.entry(index.entries().wrapping_sub(1)))
            .unwrap_or(empty),
        None => empty,
    }
}

/// A batch start from which a walk of batch headers up to byte `position` meets the last batch
/// that ends at or before it: the position of the entry before the last entry that starts below
/// `position`, 0 if there is none.
pub(crate) fn scan_start_before(index: &impl OffsetEntries, position: u64) -> u64 {
    let target = i64::try_from(position).unwrap_or(i64::MAX) - 1;
    match search_offsets(index, target, position_key, SearchResult::LargestLowerBound) {
        Some(slot) if slot > 0 => index.entry(slot - 1).map_or(0, |e| u64::from(e.position.0)),
        _ => 0,
    }
}

/// Kafka's `fetchUpperBoundOffset`: the first entry whose position is at least
/// `fetch_offset.position + fetch_size`, if any (with Kafka's search quirks).
pub(crate) fn fetch_upper_bound_offset(
    index: &impl OffsetEntries,
    fetch_offset: OffsetPosition,
    fetch_size: u32,
) -> Option<OffsetPosition> {
    let target = i64::from(fetch_offset.position.0) + i64::from(fetch_size);
    search_offsets(
        index,
        target,
        position_key,
        SearchResult::SmallestUpperBound,
    )
    .and_then(|slot| index.entry(slot))
}

/// Kafka's `TimeIndex.lookup`: the largest entry with timestamp `<= target`, or
/// `(NO_TIMESTAMP, base_offset)`.
pub(crate) fn time_lookup(index: &impl TimeEntries, target_timestamp: i64) -> TimestampOffset {
    let key_at = |n: usize| index.entry(n).map_or(i64::MAX, |e| e.timestamp);
    let kind = SearchResult::LargestLowerBound;
    search_slots(
        index.entries(),
        time::ENTRY_SIZE,
        target_timestamp,
        key_at,
        kind,
    )
    .and_then(|slot| index.entry(slot))
    .unwrap_or_else(|| TimestampOffset::empty(index.base_offset()))
}

/// An offset index's entries as the tail publishes them: relative offsets and positions.
pub(crate) fn offset_entry(base_offset: i64, relative: u32, position: u32) -> OffsetPosition {
    OffsetPosition {
        offset: base_offset + i64::from(relative),
        position: FilePosition(position),
    }
}

/// A time index's entry from a timestamp and a relative offset.
pub(crate) fn time_entry(base_offset: i64, timestamp: i64, relative: u32) -> TimestampOffset {
    TimestampOffset {
        timestamp,
        offset: base_offset + i64::from(relative),
    }
}
