//! Segment indexes: the offset and time indexes (Kafka's `AbstractIndex`, `OffsetIndex`,
//! `TimeIndex`) and the plain-file transaction index (`TransactionIndex`).
//!
//! The offset and time indexes are memory-mapped on a real file system and held in memory
//! through the storage seam on any other storage (see `file`, which keeps the map's durability
//! points). Entries are decoded with `from_be_bytes` on byte slices; nothing is cast to a
//! struct.

use std::cmp::Ordering;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, SegmentError};
use crate::io::Storage;
use crate::lock::DirLock;

mod entries;
mod entry_file;
mod file;
use file::IndexBytes;

pub mod offset;
pub mod time;
pub mod txn;
pub mod view;

pub(crate) use entries::{
    fetch_upper_bound_offset, lookup, offset_entry, scan_start_before, time_entry, time_lookup,
    OffsetEntries, TimeEntries,
};
pub use offset::{FilePosition, OffsetIndex, OffsetPosition};
pub use time::{TimeIndex, TimestampOffset};
pub use txn::{AbortedTxn, TransactionIndex, TxnIndexSearchResult};
pub use view::{OffsetIndexView, TimeIndexView, TxnIndexView};

/// Kafka's warm section: the last 8192 bytes of entries (`AbstractIndex.warmEntries`).
pub const WARM_SECTION_BYTES: usize = 8192;

/// Default `segment.index.bytes` (10 MiB).
pub const DEFAULT_MAX_INDEX_SIZE: u64 = 10 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SearchResult {
    LargestLowerBound,
    SmallestUpperBound,
}

/// The entry-format-agnostic part of Kafka's `AbstractIndex`.
#[derive(Debug)]
pub(crate) struct IndexCore {
    map: IndexBytes,
    base_offset: i64,
    max_index_size: u64,
    entry_size: usize,
    entries: usize,
    max_entries: usize,
    /// Entries pushed in bulk mode and not yet written (see [`IndexCore::begin_bulk`]).
    pending: Option<Vec<u8>>,
}

/// Runs `f` on `index` with its core (`core(index)`) in bulk mode ([`IndexCore::begin_bulk`]):
/// what `f` appends is written [`BULK_WRITE_BYTES`] at a time, and the rest when `f` returns,
/// whether it succeeded or not (the offset and time indexes' `append_in_bulk`).
pub(crate) fn in_bulk<I, R>(
    index: &mut I,
    core: fn(&mut I) -> &mut IndexCore,
    f: impl FnOnce(&mut I) -> Result<R>,
) -> Result<R> {
    core(index).begin_bulk();
    let result = f(index);
    let written = core(index).end_bulk();
    let r = result?;
    written.map(|()| r)
}

/// Entries [`IndexCore::begin_bulk`] makes room for before the first push.
const BULK_START_ENTRIES: usize = 8192;

/// Bulk mode writes what it collected each time it has this many bytes (and at its end): a few
/// writes for a 1 GiB segment's index, each large enough to go through the file handle.
const BULK_WRITE_BYTES: usize = 256 << 10;

/// Kafka's `indexSlotRangeFor` over `entries` entries of `entry_size` bytes, wherever they are
/// held (a mapped index, an active segment's published tail): search the warm section (the last
/// `8192 / entry_size` entries) first, then the rest. `key_at(n)` is the searched field of entry
/// `n` (`i64::MAX` past the end).
pub(crate) fn search_slots(
    entries: usize,
    entry_size: usize,
    target: i64,
    key_at: impl Fn(usize) -> i64,
    kind: SearchResult,
) -> Option<usize> {
    if entries == 0 {
        return None;
    }
    let warm_entries = WARM_SECTION_BYTES / entry_size;
    let first_hot = entries.saturating_sub(1 + warm_entries);
    if key_at(first_hot) < target {
        return binary_search(entries, target, &key_at, kind, first_hot, entries - 1);
    }
    if key_at(0) > target {
        return match kind {
            SearchResult::LargestLowerBound => None,
            SearchResult::SmallestUpperBound => Some(0),
        };
    }
    binary_search(entries, target, &key_at, kind, 0, first_hot)
}

fn binary_search(
    entries: usize,
    target: i64,
    key_at: &impl Fn(usize) -> i64,
    kind: SearchResult,
    begin: usize,
    end: usize,
) -> Option<usize> {
    let (mut lo, mut hi) = (begin, end);
    while lo < hi {
        // Kafka: (lo + hi + 1) >>> 1; entries fit in i32, so this cannot overflow usize.
        let mid = (lo + hi).div_ceil(2);
        match key_at(mid).cmp(&target) {
            Ordering::Greater => hi = mid - 1,
            Ordering::Less => lo = mid,
            Ordering::Equal => return Some(mid),
        }
    }
    match kind {
        SearchResult::LargestLowerBound => Some(lo),
        SearchResult::SmallestUpperBound if lo == entries - 1 => None,
        SearchResult::SmallestUpperBound => Some(lo + 1),
    }
}

pub(crate) fn round_down(n: u64, multiple: usize) -> u64 {
    n - n % multiple as u64
}

impl IndexCore {
    /// Kafka's `AbstractIndex` constructor: a missing file is created (writable only) with length
    /// `round_down(max_index_size, entry_size)` and 0 entries; an existing file is mapped whole
    /// with `entries = len / entry_size` (no scan for zeros).
    ///
    /// `grow`: the index of the active segment, opened writable at its maximum size (an existing
    /// file of whole entries is zero-extended before it is mapped, instead of mapped and
    /// resized).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        storage: &Arc<dyn Storage>,
        lock: &DirLock,
        path: &Path,
        base_offset: i64,
        max_index_size: u64,
        writable: bool,
        entry_size: usize,
        grow: bool,
    ) -> Result<IndexCore> {
        let max_len = round_down(max_index_size, entry_size);
        // Opened if it is there (no separate existence check: one lookup less per index), with
        // the length its entries fill.
        let opened = if writable && grow {
            // A file of whole entries only: any other length stays as it is, for the sanity
            // check to see (and `resize` to refuse or round).
            IndexBytes::open_grown(storage, lock, path, max_len, |len| {
                len.is_multiple_of(entry_size as u64)
            })
        } else {
            IndexBytes::open(storage, lock, path, writable).map(|m| {
                let len = m.len();
                (m, len)
            })
        };
        let (map, used_len) = match opened {
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) && writable => {
                if max_index_size < entry_size as u64 {
                    return Err(SegmentError::InvalidIndexSize {
                        path: path.to_path_buf(),
                        requested: max_index_size,
                        minimum: entry_size as u64,
                    });
                }
                (IndexBytes::create(storage, lock, path, max_len)?, 0)
            }
            r => r?,
        };
        let entries_in = |len: u64| usize::try_from(len / entry_size as u64).unwrap_or(usize::MAX);
        Ok(IndexCore {
            base_offset,
            max_index_size,
            entry_size,
            entries: entries_in(used_len),
            max_entries: entries_in(map.len()),
            map,
            pending: None,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        self.map.path()
    }
    pub(crate) fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }
    pub(crate) fn max_entries(&self) -> usize {
        self.max_entries
    }
    pub(crate) fn max_index_size(&self) -> u64 {
        self.max_index_size
    }
    pub(crate) fn length(&self) -> u64 {
        self.map.len()
    }
    pub(crate) fn size_in_bytes(&self) -> usize {
        self.entries * self.entry_size
    }

    /// Closes the index trimmed to its entries (Kafka's `trimToValidSize` then `close`),
    /// writing any bulk entries first.
    pub(crate) fn close_trimmed(mut self) -> Result<()> {
        self.end_bulk()?;
        let len = self.size_in_bytes() as u64;
        self.map.close_with_len(len)
    }

    /// Closes the index for a move out of the log: trimmed to its entries only if the log gave
    /// it room (fewer entries than the file holds: the active segment's index, grown to its
    /// maximum size when the log opened, or cut by a truncation), else left at its length. So an
    /// index nothing was written to is moved with the bytes it was found with.
    pub(crate) fn close_without_room(mut self) -> Result<()> {
        if self.entries < self.max_entries {
            self.close_trimmed()
        } else {
            self.end_bulk()?;
            let len = self.map.len();
            self.map.close_with_len(len)
        }
    }

    /// The bytes of the used entries that are written (outside bulk mode: all of them).
    pub(crate) fn used(&self) -> &[u8] {
        let written = self.entries - self.pending_entries();
        self.map
            .read(0, written * self.entry_size)
            .unwrap_or_default()
    }

    /// The bytes of slot `n`, if `n < entries`.
    pub(crate) fn slot(&self, n: usize) -> Option<&[u8]> {
        if n >= self.entries {
            return None;
        }
        let written = self.entries - self.pending_entries();
        match &self.pending {
            Some(p) if n >= written => p
                .get((n - written) * self.entry_size..)?
                .get(..self.entry_size),
            _ => self.map.read(n * self.entry_size, self.entry_size),
        }
    }

    fn pending_entries(&self) -> usize {
        self.pending
            .as_ref()
            .map_or(0, |p| p.len() / self.entry_size)
    }

    /// Until [`Self::end_bulk`], pushed entries are collected (and [`Self::slot`] reads them
    /// there) instead of written one by one.
    pub(crate) fn begin_bulk(&mut self) {
        if self.pending.is_none() {
            // Room for up to 64 KiB of entries at first (a small heap allocation, not a map
            // that would be unmapped again); it grows as needed up to one write of
            // [`BULK_WRITE_BYTES`], never to the whole index (a 1 GiB segment's are 4 MB of fresh
            // pages).
            let free = self.max_entries.saturating_sub(self.entries);
            self.pending = Some(Vec::with_capacity(
                free.min(BULK_START_ENTRIES) * self.entry_size,
            ));
        }
    }

    /// Writes the entries pushed since [`Self::begin_bulk`] (those not written yet) and ends the
    /// bulk mode. If the write fails they are not counted.
    pub(crate) fn end_bulk(&mut self) -> Result<()> {
        let result = self.write_pending();
        self.pending = None;
        result
    }

    /// Writes the collected entries with one write and empties the collection (bulk mode goes
    /// on). If the write fails they are not counted.
    fn write_pending(&mut self) -> Result<()> {
        let Some(pending) = &mut self.pending else {
            return Ok(());
        };
        if pending.is_empty() {
            return Ok(());
        }
        let written = self.entries - pending.len() / self.entry_size;
        let result = self.map.write_at(written * self.entry_size, pending);
        if result.is_err() {
            self.entries = written;
        }
        pending.clear();
        result
    }

    /// `0 <= offset - base <= i32::MAX` (Kafka `toRelative`).
    pub(crate) fn to_relative(&self, offset: i64) -> Option<i32> {
        offset
            .checked_sub(self.base_offset)
            .and_then(|r| i32::try_from(r).ok())
            .filter(|&r| r >= 0)
    }

    pub(crate) fn relative_offset(&self, offset: i64) -> Result<i32> {
        self.to_relative(offset)
            .ok_or_else(|| SegmentError::OffsetOverflow {
                path: self.path().to_path_buf(),
                offset,
                base_offset: self.base_offset,
            })
    }

    /// Writes `entry` into the next slot. The caller has checked ordering and fullness.
    pub(crate) fn push<const N: usize>(&mut self, entry: &[u8; N]) -> Result<()> {
        debug_assert_eq!(N, self.entry_size);
        if self.entries >= self.max_entries {
            return Err(SegmentError::IndexFull {
                path: self.path().to_path_buf(),
                entries: self.entries,
            });
        }
        let full = match &mut self.pending {
            // `N` is known here: a fixed-size copy per entry.
            Some(p) => {
                p.extend_from_slice(entry.as_slice());
                p.len() >= BULK_WRITE_BYTES
            }
            None => {
                self.map.write_at(self.entries * self.entry_size, entry)?;
                false
            }
        };
        self.entries += 1;
        if full {
            self.write_pending()?;
        }
        Ok(())
    }

    pub(crate) fn truncate_to_entries(&mut self, entries: usize) {
        let entries = entries.min(self.entries);
        let written = self.entries - self.pending_entries();
        if let Some(p) = &mut self.pending {
            p.truncate(entries.saturating_sub(written) * self.entry_size);
        }
        self.entries = entries;
    }

    /// Kafka's `resize`: round down, no-op if unchanged, else unmap, `set_len`, remap. Refuses to
    /// cut off live entries (Kafka fails the same way, from `mmap.position(position)`).
    pub(crate) fn resize(&mut self, new_size: u64) -> Result<bool> {
        self.end_bulk()?;
        let rounded = round_down(new_size, self.entry_size);
        if self.map.len() == rounded {
            return Ok(false);
        }
        let needed = self.size_in_bytes() as u64;
        if rounded < needed {
            return Err(SegmentError::InvalidIndexSize {
                path: self.path().to_path_buf(),
                requested: new_size,
                minimum: needed,
            });
        }
        self.map.resize(rounded)?;
        self.max_entries = usize::try_from(rounded / self.entry_size as u64).unwrap_or(usize::MAX);
        Ok(true)
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.map.flush()
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.map.sync()
    }

    /// Kafka's `indexSlotRangeFor` over this index's slots ([`search_slots`]). `key(n)` is the
    /// searched field of slot `n`.
    pub(crate) fn search(
        &self,
        target: i64,
        key: impl Fn(&[u8]) -> i64,
        kind: SearchResult,
    ) -> Option<usize> {
        let key_at = |n: usize| self.slot(n).map(&key).unwrap_or(i64::MAX);
        search_slots(self.entries, self.entry_size, target, key_at, kind)
    }

    /// The `truncateTo` slot rule shared by both indexes: find the largest entry whose offset is
    /// `<= offset`; drop it too if it is exactly `offset`.
    pub(crate) fn truncate_to_offset(&mut self, offset: i64, offset_of: impl Fn(&[u8]) -> i64) {
        let new_entries = match self.search(offset, &offset_of, SearchResult::LargestLowerBound) {
            None => 0,
            Some(slot) if self.slot(slot).map(&offset_of) == Some(offset) => slot,
            Some(slot) => slot + 1,
        };
        self.truncate_to_entries(new_entries);
    }
}

/// The fixed-position big-endian reads the index modules use.
pub(crate) use record_format::internals::{
    be_i32_at as be_i32, be_i64_at as be_i64, be_u32_at as be_u32,
};
