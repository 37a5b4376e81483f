//! [`IndexFile`]: what the offset index and the time index share (Kafka's `AbstractIndex` with
//! its entry type): opening, the cached last entry, entries by slot, truncation, resizing,
//! bulk appends, Kafka's sanity check, flush, sync and close. Each index adds its own appends
//! and look-ups ([`crate::OffsetIndex`], [`crate::TimeIndex`]).

use std::path::Path;
use std::sync::Arc;

use crate::error::{IndexCorruption, Result, SegmentError};
use crate::index::view::length_check;
use crate::index::{be_i32, IndexCore};
use crate::io::{StdFs, Storage};
use crate::lock::DirLock;

/// An index entry type: its layout in the file and what an empty index answers.
pub trait IndexEntry: Copy + std::fmt::Debug + sealed::Sealed {
    /// Size of one entry in bytes.
    const ENTRY_SIZE: usize;
    /// Byte position of the 4-byte relative offset in an entry.
    const RELATIVE_OFFSET_AT: usize;
    /// Slots kept free for ordinary appends (the time index keeps its last one for the entry
    /// written at a roll or close).
    const RESERVED_SLOTS: usize;
    /// Decodes one entry of an index whose segment starts at `base_offset`.
    fn parse(base_offset: i64, bytes: &[u8]) -> Self;
    /// What the last entry of an empty index is.
    fn empty(base_offset: i64) -> Self;
    /// The entry's absolute offset.
    fn offset(&self) -> i64;
    /// Kafka's `sanityCheck` of the used entries (through the view a plan and `dump` use).
    fn check_entries(base_offset: i64, used: &[u8]) -> Result<(), IndexCorruption>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::index::OffsetPosition {}
    impl Sealed for crate::index::TimestampOffset {}
}

/// A memory-mapped (or, on storage that cannot map, stored) index of entries `E` of one
/// segment. [`crate::OffsetIndex`] and [`crate::TimeIndex`] are its two kinds.
#[derive(Debug)]
pub struct IndexFile<E: IndexEntry> {
    pub(crate) core: IndexCore,
    /// The last entry, or [`IndexEntry::empty`].
    pub(crate) last: E,
}

impl<E: IndexEntry> IndexFile<E> {
    /// Opens or creates the index at `path` (Kafka's constructor). A new file (only if
    /// `writable`) is preallocated to `round_down(max_index_size, entry size)` bytes and holds
    /// no entries; an existing file holds `len / entry size` entries. `lock` must cover `path`
    /// (see [`crate::mmap::MmapFile`]).
    pub fn open(
        lock: &DirLock,
        path: &Path,
        base_offset: i64,
        max_index_size: u64,
        writable: bool,
    ) -> Result<Self> {
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
    ) -> Result<Self> {
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
    ) -> Result<Self> {
        let core = IndexCore::open(
            storage,
            lock,
            path,
            base_offset,
            max_index_size,
            writable,
            E::ENTRY_SIZE,
            active,
        )?;
        let mut idx = IndexFile {
            core,
            last: E::empty(base_offset),
        };
        idx.last = idx.last_entry_from_file();
        Ok(idx)
    }

    fn last_entry_from_file(&self) -> E {
        match self
            .entries()
            .checked_sub(1)
            .and_then(|n| self.core.slot(n))
        {
            Some(b) => E::parse(self.base_offset(), b),
            None => E::empty(self.base_offset()),
        }
    }

    /// The absolute offset of the relative offset field of `bytes` (an entry).
    pub(crate) fn offset_key(base: i64) -> impl Fn(&[u8]) -> i64 {
        move |b| base + i64::from(be_i32(b, E::RELATIVE_OFFSET_AT))
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
    /// Bytes used by entries (`entries * entry size`).
    pub fn size_in_bytes(&self) -> usize {
        self.core.size_in_bytes()
    }
    /// No free slot left for an ordinary append.
    pub fn is_full(&self) -> bool {
        self.entries() + E::RESERVED_SLOTS >= self.max_entries()
    }
    /// The last entry, or [`IndexEntry::empty`] if there is none.
    pub fn last_entry(&self) -> E {
        self.last
    }
    /// Entry `n`, or `None` if `n >= entries()`.
    pub fn entry(&self, n: usize) -> Option<E> {
        self.core.slot(n).map(|b| E::parse(self.base_offset(), b))
    }

    /// Removes every entry with offset `>= offset` (Kafka's slot rule: the largest entry `<=
    /// offset` is kept unless it equals `offset`).
    pub fn truncate_to(&mut self, offset: i64) {
        self.core
            .truncate_to_offset(offset, Self::offset_key(self.base_offset()));
        self.last = self.last_entry_from_file();
    }

    /// Removes all entries (the file keeps its length).
    pub fn truncate(&mut self) {
        self.core.truncate_to_entries(0);
        self.last = self.last_entry_from_file();
    }

    /// Runs `f` (which appends entries) and writes what it appends in writes of 256 KiB, the
    /// rest when it returns, whether it succeeded or not: recovery rebuilds a segment's index
    /// this way, in a few large writes rather than one write (or first touch of a mapped page)
    /// per entry.
    pub fn append_in_bulk<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        super::in_bulk(self, |index| &mut index.core, f)
    }

    /// Removes all entries and resizes the file to the max index size.
    pub fn reset(&mut self) -> Result<()> {
        self.truncate();
        self.resize(self.max_index_size()).map(|_| ())
    }

    /// Resizes the file to `round_down(new_size, entry size)`; returns whether anything
    /// changed.
    pub fn resize(&mut self, new_size: u64) -> Result<bool> {
        let changed = self.core.resize(new_size)?;
        if changed {
            self.last = self.last_entry_from_file();
        }
        Ok(changed)
    }

    /// Shrinks the file to exactly the used entries.
    pub fn trim_to_valid_size(&mut self) -> Result<()> {
        self.resize(self.size_in_bytes() as u64).map(|_| ())
    }

    /// Kafka's `sanityCheck`: entries that contradict the index's rules (see each kind), or a
    /// length that is not a multiple of the entry size, mean corruption.
    pub fn sanity_check(&self) -> Result<()> {
        E::check_entries(self.base_offset(), self.core.used())
            .and_then(|()| length_check(self.length(), E::ENTRY_SIZE))
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
