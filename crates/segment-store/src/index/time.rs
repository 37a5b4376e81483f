//! The time index (`.timeindex`), Kafka's `TimeIndex`.
//!
//! ```text
//! entry (12 bytes, big-endian), timestamps and offsets both non-decreasing:
//!   0  8  timestamp        = max timestamp seen up to and including the offset
//!   8  4  relative offset  = offset - segment base offset
//! ```
//!
//! Preallocation, trimming and search are as for the offset index; the last slot is reserved
//! for the entry written on roll/close (`is_full` is `entries >= max_entries - 1`).

use crate::error::{IndexCorruption, Result, SegmentError};
use crate::index::entry_file::{IndexEntry, IndexFile};
use crate::index::view::TimeIndexView;
use crate::index::{be_i32, be_i64, entries};

/// Size of one entry.
pub const ENTRY_SIZE: usize = 12;
const TIMESTAMP_OFFSET: usize = 0;
const RELATIVE_OFFSET_OFFSET: usize = TIMESTAMP_OFFSET + 8;
const _: () = assert!(RELATIVE_OFFSET_OFFSET + 4 == ENTRY_SIZE);

/// Kafka's `RecordBatch.NO_TIMESTAMP`.
pub const NO_TIMESTAMP: i64 = -1;

/// A time-index entry (Kafka `TimestampOffset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimestampOffset {
    /// The timestamp.
    pub timestamp: i64,
    /// Absolute offset.
    pub offset: i64,
}

impl IndexEntry for TimestampOffset {
    const ENTRY_SIZE: usize = ENTRY_SIZE;
    const RELATIVE_OFFSET_AT: usize = RELATIVE_OFFSET_OFFSET;
    const RESERVED_SLOTS: usize = 1;

    fn parse(base_offset: i64, b: &[u8]) -> Self {
        TimestampOffset {
            timestamp: be_i64(b, TIMESTAMP_OFFSET),
            offset: base_offset + i64::from(be_i32(b, RELATIVE_OFFSET_OFFSET)),
        }
    }

    /// `(NO_TIMESTAMP, base_offset)`.
    fn empty(base_offset: i64) -> Self {
        TimestampOffset {
            timestamp: NO_TIMESTAMP,
            offset: base_offset,
        }
    }

    fn offset(&self) -> i64 {
        self.offset
    }

    /// Last timestamp below the first, or last offset below the base, mean corruption.
    fn check_entries(base_offset: i64, used: &[u8]) -> Result<(), IndexCorruption> {
        TimeIndexView::new(base_offset, used).sanity_check()
    }
}

/// The memory-mapped time index of one segment (Kafka's `TimeIndex`): its last entry is
/// `(NO_TIMESTAMP, base_offset)` when empty, and its last slot is kept for the entry written at
/// a roll or close (`IndexFile::is_full` counts it).
pub type TimeIndex = IndexFile<TimestampOffset>;

impl IndexFile<TimestampOffset> {
    /// Kafka's `maybeAppend`: fails if full (unless `skip_full_check`), if `offset` is below the
    /// last offset ([`SegmentError::InvalidOffset`]) or `timestamp` below the last timestamp
    /// ([`SegmentError::TimestampDecreasing`]); appends only if `timestamp` is larger than the
    /// last timestamp (equal timestamps are skipped silently). Returns whether an entry was
    /// written.
    pub fn maybe_append(
        &mut self,
        timestamp: i64,
        offset: i64,
        skip_full_check: bool,
    ) -> Result<bool> {
        if !skip_full_check && self.is_full() {
            return Err(SegmentError::IndexFull {
                path: self.path().to_path_buf(),
                entries: self.entries(),
            });
        }
        if self.entries() != 0 && offset < self.last.offset {
            return Err(SegmentError::InvalidOffset {
                path: self.path().to_path_buf(),
                offset,
                last_offset: self.last.offset,
            });
        }
        if self.entries() != 0 && timestamp < self.last.timestamp {
            return Err(SegmentError::TimestampDecreasing {
                path: self.path().to_path_buf(),
                timestamp,
                last_timestamp: self.last.timestamp,
            });
        }
        if timestamp <= self.last.timestamp {
            return Ok(false);
        }
        let relative = self.core.relative_offset(offset)?;
        let mut entry = [0u8; ENTRY_SIZE];
        entry[TIMESTAMP_OFFSET..RELATIVE_OFFSET_OFFSET].copy_from_slice(&timestamp.to_be_bytes());
        entry[RELATIVE_OFFSET_OFFSET..].copy_from_slice(&relative.to_be_bytes());
        self.core.push(&entry)?;
        self.last = TimestampOffset { timestamp, offset };
        Ok(true)
    }

    /// The largest entry with timestamp `<= target`, or `(NO_TIMESTAMP, base_offset)`.
    pub fn lookup(&self, target_timestamp: i64) -> TimestampOffset {
        entries::time_lookup(self, target_timestamp)
    }
}

impl entries::TimeEntries for IndexFile<TimestampOffset> {
    fn base_offset(&self) -> i64 {
        self.core.base_offset()
    }
    fn entries(&self) -> usize {
        self.core.entries()
    }
    fn entry(&self, n: usize) -> Option<TimestampOffset> {
        IndexFile::entry(self, n)
    }
}
