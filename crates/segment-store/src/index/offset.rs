//! The offset index (`.index`), Kafka's `OffsetIndex`.
//!
//! ```text
//! entry (8 bytes, big-endian), one per indexed batch, in offset order:
//!   0  4  relative offset  = batch lastOffset - segment base offset (0..=i32::MAX)
//!   4  4  position         = byte position of the batch's start in the .log
//! ```
//!
//! The file is preallocated to `round_down(max_index_size, 8)` bytes when created and trimmed to
//! `entries * 8` on roll/close; an existing file is assumed to hold `len / 8` entries.

use crate::error::{IndexCorruption, Result, SegmentError};
use crate::index::entry_file::{IndexEntry, IndexFile};
use crate::index::view::OffsetIndexView;
use crate::index::{be_i32, be_u32, entries};

/// Size of one entry.
pub const ENTRY_SIZE: usize = 8;
const RELATIVE_OFFSET_OFFSET: usize = 0;
const POSITION_OFFSET: usize = RELATIVE_OFFSET_OFFSET + 4;
const _: () = assert!(POSITION_OFFSET + 4 == ENTRY_SIZE);

/// A byte position in a segment's `.log` (Kafka stores it as an `int`, so at most `i32::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FilePosition(pub u32);

/// An offset-index entry: `offset` (absolute) and the position of its batch (Kafka
/// `OffsetPosition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetPosition {
    /// Absolute offset (base offset + relative offset).
    pub offset: i64,
    /// Position of the batch in the `.log`.
    pub position: FilePosition,
}

impl IndexEntry for OffsetPosition {
    const ENTRY_SIZE: usize = ENTRY_SIZE;
    const RELATIVE_OFFSET_AT: usize = RELATIVE_OFFSET_OFFSET;
    const RESERVED_SLOTS: usize = 0;

    fn parse(base_offset: i64, b: &[u8]) -> Self {
        OffsetPosition {
            offset: base_offset + i64::from(be_i32(b, RELATIVE_OFFSET_OFFSET)),
            position: FilePosition(be_u32(b, POSITION_OFFSET)),
        }
    }

    /// `(base_offset, 0)`.
    fn empty(base_offset: i64) -> Self {
        OffsetPosition {
            offset: base_offset,
            position: FilePosition(0),
        }
    }

    fn offset(&self) -> i64 {
        self.offset
    }

    /// Entries with a last offset below the base mean corruption.
    fn check_entries(base_offset: i64, used: &[u8]) -> Result<(), IndexCorruption> {
        OffsetIndexView::new(base_offset, used).sanity_check()
    }
}

/// The memory-mapped offset index of one segment (Kafka's `OffsetIndex`): its last entry is
/// `(base_offset, 0)` when empty.
pub type OffsetIndex = IndexFile<OffsetPosition>;

impl IndexFile<OffsetPosition> {
    /// Offset of the last entry, or the base offset if empty.
    pub fn last_offset(&self) -> i64 {
        self.last.offset
    }

    /// Whether `offset` fits this index's relative offsets (`canAppendOffset`).
    pub fn can_append_offset(&self, offset: i64) -> bool {
        self.core.to_relative(offset).is_some()
    }

    /// Appends `(offset, position)`. `offset` must be larger than the last offset
    /// ([`SegmentError::InvalidOffset`]) and fit 32 bits relative to the base
    /// ([`SegmentError::OffsetOverflow`]); the index must not be full
    /// ([`SegmentError::IndexFull`]).
    pub fn append(&mut self, offset: i64, position: FilePosition) -> Result<()> {
        if self.is_full() {
            return Err(SegmentError::IndexFull {
                path: self.path().to_path_buf(),
                entries: self.entries(),
            });
        }
        if self.entries() != 0 && offset <= self.last.offset {
            return Err(SegmentError::InvalidOffset {
                path: self.path().to_path_buf(),
                offset,
                last_offset: self.last.offset,
            });
        }
        let relative = self.core.relative_offset(offset)?;
        if i32::try_from(position.0).is_err() {
            return Err(SegmentError::PositionOverflow {
                path: self.path().to_path_buf(),
                position: u64::from(position.0),
            });
        }
        let mut entry = [0u8; ENTRY_SIZE];
        entry[RELATIVE_OFFSET_OFFSET..POSITION_OFFSET].copy_from_slice(&relative.to_be_bytes());
        entry[POSITION_OFFSET..].copy_from_slice(&position.0.to_be_bytes());
        self.core.push(&entry)?;
        self.last = OffsetPosition { offset, position };
        Ok(())
    }

    /// The largest entry with offset `<= target`, or `(base_offset, 0)` if there is none.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        entries::lookup(self, target)
    }

    /// A batch start from which a walk of batch headers up to byte `position` meets the last
    /// batch that ends at or before it: the position of the entry before the last entry that
    /// starts below `position` (its batch ends at or before that entry's start), 0 if there is
    /// none. The entries' positions increase with their offsets.
    pub fn scan_start_before(&self, position: u64) -> u64 {
        entries::scan_start_before(self, position)
    }

    /// Kafka's `fetchUpperBoundOffset`: the first entry whose position is at least
    /// `fetch_offset.position + fetch_size`, if any. Kafka's search quirks are kept: with at most
    /// 1025 entries and a target equal to the first entry's position, the answer is slot 1.
    pub fn fetch_upper_bound_offset(
        &self,
        fetch_offset: OffsetPosition,
        fetch_size: u32,
    ) -> Option<OffsetPosition> {
        entries::fetch_upper_bound_offset(self, fetch_offset, fetch_size)
    }
}

impl entries::OffsetEntries for IndexFile<OffsetPosition> {
    fn base_offset(&self) -> i64 {
        self.core.base_offset()
    }
    fn entries(&self) -> usize {
        self.core.entries()
    }
    fn entry(&self, n: usize) -> Option<OffsetPosition> {
        IndexFile::entry(self, n)
    }
}
