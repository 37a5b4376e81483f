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

use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, SegmentError};
use crate::index::view::{length_check, OffsetIndexView};
use crate::index::{be_i32, be_u32, IndexCore, SearchResult};
use crate::io::{StdFs, Storage};
use crate::lock::DirLock;

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

/// The memory-mapped offset index of one segment.
#[derive(Debug)]
pub struct OffsetIndex {
    core: IndexCore,
    last_offset: i64,
}

impl OffsetIndex {
    /// Opens or creates the index at `path` (Kafka's constructor). A new file (only if
    /// `writable`) is preallocated to `round_down(max_index_size, 8)` bytes and holds no
    /// entries; an existing file holds `len / 8` entries. `lock` must cover `path` (see
    /// [`crate::mmap::MmapFile`]).
    pub fn open(
        lock: &DirLock,
        path: &Path,
        base_offset: i64,
        max_index_size: u64,
        writable: bool,
    ) -> Result<OffsetIndex> {
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
    ) -> Result<OffsetIndex> {
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
    ) -> Result<OffsetIndex> {
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
        let mut idx = OffsetIndex {
            core,
            last_offset: base_offset,
        };
        idx.last_offset = idx.last_entry().offset;
        Ok(idx)
    }

    fn parse(&self, b: &[u8]) -> OffsetPosition {
        OffsetPosition {
            offset: self.core.base_offset() + i64::from(be_i32(b, RELATIVE_OFFSET_OFFSET)),
            position: FilePosition(be_u32(b, POSITION_OFFSET)),
        }
    }

    fn offset_key(base: i64) -> impl Fn(&[u8]) -> i64 {
        move |b| base + i64::from(be_i32(b, RELATIVE_OFFSET_OFFSET))
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
    /// The configured maximum size (what [`Self::reset`] resizes to).
    pub fn max_index_size(&self) -> u64 {
        self.core.max_index_size()
    }
    /// Current file length in bytes.
    pub fn length(&self) -> u64 {
        self.core.length()
    }
    /// Bytes used by entries (`entries * 8`).
    pub fn size_in_bytes(&self) -> usize {
        self.core.size_in_bytes()
    }
    /// No free slot left.
    pub fn is_full(&self) -> bool {
        self.entries() >= self.max_entries()
    }
    /// Offset of the last entry, or the base offset if empty.
    pub fn last_offset(&self) -> i64 {
        self.last_offset
    }

    /// The last entry, or `(base_offset, 0)` if empty.
    pub fn last_entry(&self) -> OffsetPosition {
        match self
            .entries()
            .checked_sub(1)
            .and_then(|n| self.core.slot(n))
        {
            Some(b) => self.parse(b),
            None => OffsetPosition {
                offset: self.base_offset(),
                position: FilePosition(0),
            },
        }
    }

    /// Entry `n`, or `None` if `n >= entries()`.
    pub fn entry(&self, n: usize) -> Option<OffsetPosition> {
        self.core.slot(n).map(|b| self.parse(b))
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
        if self.entries() != 0 && offset <= self.last_offset {
            return Err(SegmentError::InvalidOffset {
                path: self.path().to_path_buf(),
                offset,
                last_offset: self.last_offset,
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
        self.last_offset = offset;
        Ok(())
    }

    /// The largest entry with offset `<= target`, or `(base_offset, 0)` if there is none.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let key = Self::offset_key(self.base_offset());
        match self
            .core
            .search(target, key, SearchResult::LargestLowerBound)
        {
            Some(slot) => self.entry(slot).unwrap_or(self.last_entry()),
            None => OffsetPosition {
                offset: self.base_offset(),
                position: FilePosition(0),
            },
        }
    }

    /// Kafka's `fetchUpperBoundOffset`: the first entry whose position is at least
    /// `fetch_offset.position + fetch_size`, if any. Kafka's search quirks are kept: with at most
    /// 1025 entries and a target equal to the first entry's position, the answer is slot 1.
    pub fn fetch_upper_bound_offset(
        &self,
        fetch_offset: OffsetPosition,
        fetch_size: u32,
    ) -> Option<OffsetPosition> {
        let target = i64::from(fetch_offset.position.0) + i64::from(fetch_size);
        let key = |b: &[u8]| i64::from(be_u32(b, POSITION_OFFSET));
        self.core
            .search(target, key, SearchResult::SmallestUpperBound)
            .and_then(|slot| self.entry(slot))
    }

    /// Removes every entry with offset `>= offset` (Kafka's slot rule: the largest entry `<=
    /// offset` is kept unless it equals `offset`).
    pub fn truncate_to(&mut self, offset: i64) {
        let key = Self::offset_key(self.base_offset());
        self.core.truncate_to_offset(offset, key);
        self.last_offset = self.last_entry().offset;
    }

    /// Removes all entries (the file keeps its length).
    pub fn truncate(&mut self) {
        self.core.truncate_to_entries(0);
        self.last_offset = self.base_offset();
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

    /// Resizes the file to `round_down(new_size, 8)`; returns whether anything changed.
    pub fn resize(&mut self, new_size: u64) -> Result<bool> {
        self.core.resize(new_size)
    }

    /// Shrinks the file to exactly the used entries.
    pub fn trim_to_valid_size(&mut self) -> Result<()> {
        self.resize(self.size_in_bytes() as u64).map(|_| ())
    }

    /// Kafka's `sanityCheck`: entries with a last offset below the base, or a length that is
    /// not a multiple of 8, mean corruption. The entries are checked through the same
    /// [`OffsetIndexView`] a recovery plan and `dump` use.
    pub fn sanity_check(&self) -> Result<()> {
        OffsetIndexView::new(self.base_offset(), self.core.used())
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
