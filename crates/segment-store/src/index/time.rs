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

use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, SegmentError};
use crate::index::view::{length_check, TimeIndexView};
use crate::index::{be_i32, be_i64, IndexCore, SearchResult};
use crate::io::{StdFs, Storage};
use crate::lock::DirLock;

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

/// The memory-mapped time index of one segment.
#[derive(Debug)]
pub struct TimeIndex {
    core: IndexCore,
    last_entry: TimestampOffset,
}

impl TimeIndex {
    /// Opens or creates the index at `path`; as [`crate::OffsetIndex::open`] with 12-byte
    /// entries.
    pub fn open(
        lock: &DirLock,
        path: &Path,
        base_offset: i64,
        max_index_size: u64,
        writable: bool,
    ) -> Result<TimeIndex> {
        let storage: Arc<dyn Storage> = Arc::new(StdFs);
        Self::open_in(&storage, lock, path, base_offset, max_index_size, writable)
    }

    /// [`Self::open`] on `storage`: memory-mapped where it names real files
    /// ([`Storage::supports_mmap`]), otherwise held in memory and read and written through
    /// `storage` (durable at [`Self::flush`], as a map is at its `msync`).
    pub fn open_in(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        base_offset: i64,
        max_index_size: u64,
        writable: bool,
    ) -> Result<TimeIndex> {
        Self::open_with(
            storage,
            lock,
            path,
            base_offset,
            max_index_size,
            writable,
            false,
        )
    }

    /// [`Self::open_in`]; `active`: writable at its maximum size at once (see
    /// `IndexCore::open`).
    pub(crate) fn open_with(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        base_offset: i64,
        max_index_size: u64,
        writable: bool,
        active: bool,
    ) -> Result<TimeIndex> {
        let core = IndexCore::open(
            storage,
            lock,
            path,
            base_offset,
            max_index_size,
            writable,
            ENTRY_SIZE,
            active,
        )?;
        let mut idx = TimeIndex {
            core,
            last_entry: TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: base_offset,
            },
        };
        idx.last_entry = idx.last_entry_from_file();
        Ok(idx)
    }

    fn parse(&self, b: &[u8]) -> TimestampOffset {
        TimestampOffset {
            timestamp: be_i64(b, TIMESTAMP_OFFSET),
            offset: self.core.base_offset() + i64::from(be_i32(b, RELATIVE_OFFSET_OFFSET)),
        }
    }

    fn last_entry_from_file(&self) -> TimestampOffset {
        match self
            .entries()
            .checked_sub(1)
            .and_then(|n| self.core.slot(n))
        {
            Some(b) => self.parse(b),
            None => TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: self.base_offset(),
            },
        }
    }

    /// The index file.
    pub fn path(&self) -> &Path {
        self.core.path()
    }
    /// The segment's base offset.
    pub fn base_offset(&self) -> i64 {
        self.core.base_offset()
    }
    /// Number of entries.
    pub fn entries(&self) -> usize {
        self.core.entries()
    }
    /// Slots the current file length can hold.
    pub fn max_entries(&self) -> usize {
        self.core.max_entries()
    }
    /// The configured maximum size.
    pub fn max_index_size(&self) -> u64 {
        self.core.max_index_size()
    }
    /// Current file length in bytes.
    pub fn length(&self) -> u64 {
        self.core.length()
    }
    /// Bytes used by entries (`entries * 12`).
    pub fn size_in_bytes(&self) -> usize {
        self.core.size_in_bytes()
    }
    /// Full for ordinary appends: the last slot is kept for the roll/close entry.
    pub fn is_full(&self) -> bool {
        self.entries() + 1 >= self.max_entries()
    }
    /// The last entry, or `(NO_TIMESTAMP, base_offset)` if empty.
    pub fn last_entry(&self) -> TimestampOffset {
        self.last_entry
    }
    /// Entry `n`, or `None` if `n >= entries()`.
    pub fn entry(&self, n: usize) -> Option<TimestampOffset> {
        self.core.slot(n).map(|b| self.parse(b))
    }

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
        if self.entries() != 0 && offset < self.last_entry.offset {
            return Err(SegmentError::InvalidOffset {
                path: self.path().to_path_buf(),
                offset,
                last_offset: self.last_entry.offset,
            });
        }
        if self.entries() != 0 && timestamp < self.last_entry.timestamp {
            return Err(SegmentError::TimestampDecreasing {
                path: self.path().to_path_buf(),
                timestamp,
                last_timestamp: self.last_entry.timestamp,
            });
        }
        if timestamp <= self.last_entry.timestamp {
            return Ok(false);
        }
        let relative = self.core.relative_offset(offset)?;
        let mut entry = [0u8; ENTRY_SIZE];
        entry[TIMESTAMP_OFFSET..RELATIVE_OFFSET_OFFSET].copy_from_slice(&timestamp.to_be_bytes());
        entry[RELATIVE_OFFSET_OFFSET..].copy_from_slice(&relative.to_be_bytes());
        self.core.push(&entry)?;
        self.last_entry = TimestampOffset { timestamp, offset };
        Ok(true)
    }

    /// The largest entry with timestamp `<= target`, or `(NO_TIMESTAMP, base_offset)`.
    pub fn lookup(&self, target_timestamp: i64) -> TimestampOffset {
        let key = |b: &[u8]| be_i64(b, TIMESTAMP_OFFSET);
        match self
            .core
            .search(target_timestamp, key, SearchResult::LargestLowerBound)
            .and_then(|slot| self.entry(slot))
        {
            Some(e) => e,
            None => TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: self.base_offset(),
            },
        }
    }

    /// Removes every entry with offset `>= offset` (searching by the offset field).
    pub fn truncate_to(&mut self, offset: i64) {
        let base = self.base_offset();
        self.core.truncate_to_offset(offset, move |b| {
            base + i64::from(be_i32(b, RELATIVE_OFFSET_OFFSET))
        });
        self.last_entry = self.last_entry_from_file();
    }

    /// Removes all entries (the file keeps its length).
    pub fn truncate(&mut self) {
        self.core.truncate_to_entries(0);
        self.last_entry = self.last_entry_from_file();
    }

    /// Runs `f` (which appends entries) and writes what it appends in writes of 256 KiB, the
    /// rest when it returns, whether it succeeded or not: recovery rebuilds a segment's index
    /// this way (writing the entries of a 1 GiB segment one by one through the map, each first
    /// write of a page a page fault, took longer than a few large writes).
    pub fn append_in_bulk<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        super::in_bulk(self, |index| &mut index.core, f)
    }

    /// Removes all entries and resizes the file to the max index size.
    pub fn reset(&mut self) -> Result<()> {
        self.truncate();
        self.resize(self.max_index_size()).map(|_| ())
    }

    /// Resizes the file to `round_down(new_size, 12)`; returns whether anything changed.
    pub fn resize(&mut self, new_size: u64) -> Result<bool> {
        let changed = self.core.resize(new_size)?;
        if changed {
            self.last_entry = self.last_entry_from_file();
        }
        Ok(changed)
    }

    /// Shrinks the file to exactly the used entries.
    pub fn trim_to_valid_size(&mut self) -> Result<()> {
        self.resize(self.size_in_bytes() as u64).map(|_| ())
    }

    /// Kafka's `sanityCheck`: last timestamp below the first, last offset below the base, or a
    /// length not a multiple of 12 mean corruption. The entries are checked through the same
    /// [`TimeIndexView`] a recovery plan and `dump` use.
    pub fn sanity_check(&self) -> Result<()> {
        TimeIndexView::new(self.base_offset(), self.core.used())
            .sanity_check()
            .and_then(|()| length_check(self.length(), ENTRY_SIZE))
            .map_err(|reason| SegmentError::CorruptIndex {
                path: self.path().to_path_buf(),
                reason,
            })
    }

    /// Writes dirty pages to disk.
    pub fn flush(&self) -> Result<()> {
        self.core.flush()
    }

    /// [`Self::flush`] and the file's length made durable too (after a trim or resize).
    pub fn sync(&self) -> Result<()> {
        self.core.sync()
    }

    /// Trims the file to its entries and unmaps it.
    pub fn close(self) -> Result<()> {
        self.core.close_trimmed()
    }

    /// Closes the index to move it out of the log: trimmed only if the log gave it room (see
    /// `IndexCore::close_without_room`).
    pub(crate) fn close_without_room(self) -> Result<()> {
        self.core.close_without_room()
    }
}
