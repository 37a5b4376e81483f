//! The multi-segment log of one partition (Kafka's `LocalLog` plus the segment-deletion part of
//! `UnifiedLog`).
//!
//! # Concurrency
//!
//! [`LocalLog`] is `Send + Sync`; every method takes `&self`. One writer, any number of
//! readers, and no lock shared between them on the read path:
//!
//! - **Writers** (appends, rolls, truncations, deletions, the cleaner's replacement) take the
//!   writer's `RwLock` for writing; flushes and [`LocalLog::with_segments`] for reading.
//! - **Readers** ([`LocalLog::read`], [`LocalLog::read_with`], [`LocalLog::read_exact`],
//!   [`LocalLog::slice_exact`], the timestamp lookups, [`LocalLog::collect_aborted_txns`], the
//!   bounds) take no lock the writer takes: they walk a published segment list (`list.rs`),
//!   swapped in whole at the end of a write section that changed it. Sealed segments are shared
//!   objects in it; the active segment is the writer's own, and readers see it through its
//!   published tail (`publish.rs`: its entries so far, and its size and max timestamp swapped in
//!   whole after each append, so a reader never sees part of a batch). The truncation count
//!   moves before a truncation cuts anything, and a read that saw it move starts again; a
//!   sealed segment is changed or removed only once no reader holds it.
//!   (`docs/design.md`, "Concurrency".)
//!
//! # Open segments
//!
//! A segment's files (the `.log`'s handle and, for an inactive segment, its read-only map; the
//! mapped `.index` and `.timeindex`) are opened when the log first needs the segment and closed
//! again once more than [`LogConfig::max_open_inactive_segments`] inactive segments are open (those read
//! last stay open), at the end of the operation that opened them. Loading opens each inactive
//! segment for its sanity check only; recovery closes each segment once its scan is installed;
//! [`LocalLog::release_segments`] closes every one, the active one too (a log directory does it
//! after loading). So a log of any number of segments holds a bounded number of descriptors and
//! maps.
//!
//! # Loading
//!
//! [`LocalLog`] recovers nothing, as Kafka's `LocalLog` does not: [`LocalLog::open`] and
//! [`LocalLog::open_with`] open a recovered directory and refuse one that needs recovery
//! ([`crate::SegmentError::NeedsRecovery`]). Recovery is the recovery crate's `LogLoader`: it
//! opens the segments as they are with [`LocalLog::open_planned`] (deleting `*.deleted`
//! leftovers) and installs its plan's scans with [`LocalLog::install_scans`] (recovery never
//! deletes: the segments after a cut are moved to the quarantine directory). `.cleaned`/`.swap`
//! handling and producer state belong to that loader too.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use arc_swap::ArcSwap;

use crate::error::Result;
use crate::file_slice::FileSlice;
use crate::io::{StdFs, Storage};
use list::{SealedSlot, SegmentList, Segments};

use crate::segment::{
    Clock, DeletedFiles, LogOffsetMetadata, LogSegment, RollReason, SegmentContext, SystemClock,
};

mod append;
mod list;
mod open;
// The active segment's tail published to readers that take no lock.
pub(crate) mod publish;
#[cfg(test)]
mod publish_tests;
mod read;
mod replace;
mod retention;
mod segments;
pub use segments::SegmentRef;
#[allow(dead_code)]
mod sync;

/// Settings of one partition log (Kafka `LogConfig`; `-1` disables a retention limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes` (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms` (default 7 days).
    pub segment_ms: i64,
    /// `segment.jitter.ms` applied to every segment (Kafka draws one at random per segment; a
    /// fixed value keeps tests deterministic). Default 0.
    pub segment_jitter_ms: i64,
    /// `index.interval.bytes` (default 4096).
    pub index_interval_bytes: u32,
    /// `segment.index.bytes` (default 10 MiB).
    pub max_index_size: u64,
    /// `retention.bytes` (default -1: unlimited).
    pub retention_bytes: i64,
    /// `retention.ms` (default 7 days; -1: unlimited).
    pub retention_ms: i64,
    /// `file.delete.delay.ms` (default 60000): how long the files of a segment that retention,
    /// truncation or the cleaner removed stay in the directory as `<name>.deleted` before they
    /// are removed ([`LocalLog::delete_expired_files`], and every call that removes segments).
    /// `0` or less: removed at once.
    pub file_delete_delay_ms: i64,
    /// How many inactive segments the log keeps open at most once an operation is over (those
    /// read last; default 8); at least 1. Each holds up to four
    /// descriptors and three maps. Kafka keeps every segment open; seglog bounds them so that a
    /// log directory of many partitions and segments holds a bounded number of descriptors.
    /// Readers that jump between more segments than this (random fetches over a long log)
    /// reopen and map segments again and again: raise it where descriptors allow
    /// (`docs/benchmarks.md`, "Against Kafka's read path").
    pub max_open_inactive_segments: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_jitter_ms: 0,
            index_interval_bytes: 4096,
            max_index_size: crate::index::DEFAULT_MAX_INDEX_SIZE,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 3600 * 1000,
            file_delete_delay_ms: 60_000,
            max_open_inactive_segments: MAX_OPEN_INACTIVE_SEGMENTS,
        }
    }
}

/// The environment of a log: storage seam and clock.
#[derive(Debug, Clone)]
pub struct LogEnv {
    /// Storage every write of the partition goes through (`.log`, `.txnindex`, deletions,
    /// checkpoints; the recovery crate adds producer snapshots, `mirror-state` and quarantine),
    /// all but the memory-mapped indexes.
    pub storage: Arc<dyn Storage>,
    /// Time source for rolls and retention.
    pub clock: Arc<dyn Clock>,
}

impl Default for LogEnv {
    fn default() -> Self {
        LogEnv {
            storage: Arc::new(StdFs),
            clock: Arc::new(SystemClock),
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Base offset of the first batch.
    pub first_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Largest batch max timestamp.
    pub max_timestamp: i64,
    /// Where the records were written.
    pub position: LogOffsetMetadata,
    /// If the append rolled first: the new segment's base offset and why (the caller takes its
    /// producer-state snapshot named after that base).
    pub rolled: Option<(i64, RollReason)>,
}

/// The log's offsets and truncation count, read together ([`LocalLog::bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    /// [`LocalLog::log_start_offset`].
    pub log_start_offset: i64,
    /// [`LocalLog::log_end_offset`].
    pub log_end_offset: i64,
    /// [`LocalLog::recovery_point`].
    pub recovery_point: i64,
    /// [`LocalLog::truncations`].
    pub truncations: u64,
}

/// An owned read result: whole batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchData {
    /// Where the fetch started.
    pub fetch_offset_metadata: LogOffsetMetadata,
    /// Whole batches.
    pub records: Vec<u8>,
    /// The first batch did not fit `max_bytes`.
    pub first_entry_incomplete: bool,
}

/// What [`LocalLog::read_exact`] returns: Kafka's bytes, and the upper bound of the aborted
/// transactions that go with them (Kafka's `addAbortedTransactions`: the offset of the first
/// offset-index entry past the bytes returned, else the next segment's base offset, else the log
/// end offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactFetch {
    /// The bytes (the last batch may be cut short) and where they start.
    pub data: FetchData,
    /// Aborted transactions that overlap `[fetch offset, upper_bound_offset)` go with them (the
    /// fetch offset itself, an empty range, from [`LocalLog::read_exact`] without
    /// `aborted_range`).
    pub upper_bound_offset: i64,
}

/// What [`LocalLog::slice_exact`] returns: [`ExactFetch`] with the bytes left in the `.log`, as
/// a [`FileSlice`] of it.
#[derive(Debug, Clone)]
pub struct ExactSlice {
    /// Where the fetch starts.
    pub fetch_offset_metadata: LogOffsetMetadata,
    /// The bytes [`LocalLog::read_exact`] returns (the last batch may be cut short), as a range
    /// of the `.log` of the segment holding them; `None` when there are none.
    pub slice: Option<FileSlice>,
    /// The first batch did not fit `max_bytes`.
    pub first_entry_incomplete: bool,
    /// Aborted transactions that overlap `[fetch offset, upper_bound_offset)` go with the bytes
    /// (the fetch offset itself, an empty range, from [`LocalLog::slice_exact`] without
    /// `aborted_range`).
    pub upper_bound_offset: i64,
}

impl ExactSlice {
    /// One past the last offset of the last whole batch in the slice (the offset a reader of
    /// it fetches next); the fetch offset when it holds no whole batch. Found when asked, from
    /// the headers of the slice's last batches ([`FileSlice::next_offset`]): a server that
    /// hands the slice to `sendfile` need not.
    pub fn next_fetch_offset(&self) -> Result<i64> {
        let next = match &self.slice {
            Some(s) => s.next_offset()?,
            None => None,
        };
        Ok(next.unwrap_or(self.fetch_offset_metadata.message_offset))
    }
}

/// Summary of one segment, for iteration without holding the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Base offset.
    pub base_offset: i64,
    /// `.log` size in bytes.
    pub size: u64,
    /// Largest timestamp (max timestamp, or creation time if none).
    pub largest_timestamp: i64,
    /// Offset-index entries.
    pub index_entries: usize,
    /// Time-index entries.
    pub time_index_entries: usize,
}

/// The default of [`LogConfig::max_open_inactive_segments`]: inactive segments a log keeps open
/// at most once an operation is over (a fetch, an append), those used last. Each holds up to four
/// descriptors and three maps (the `.log`'s handle and read-only map, the mapped `.index` and
/// `.timeindex`): 128 descriptors a log at most, beside its active segment's.
pub const MAX_OPEN_INACTIVE_SEGMENTS: usize = 32;

/// One segment of the log, open or not: a segment's files are opened when the log first needs
/// them (as Kafka opens its indexes lazily) and closed again when more than
/// [`LogConfig::max_open_inactive_segments`] inactive ones are open, so a log of any number of
/// segments holds a bounded number of descriptors and maps.
#[derive(Debug)]
enum Slot {
    /// A sealed segment, shared with readers through the published list.
    Sealed(Arc<SealedSlot>),
    /// The active (last) segment: the writer's own; readers see its published tail.
    Active {
        /// Boxed: a closed slot is a few words.
        seg: OnceLock<Box<LogSegment>>,
        /// The `.log`'s size while it is not open.
        size: u64,
    },
}

impl Slot {
    fn active(seg: LogSegment) -> Slot {
        Slot::Active {
            size: seg.size(),
            seg: OnceLock::from(Box::new(seg)),
        }
    }

    /// A sealed segment, open or not.
    fn sealed(base: i64, size: u64, seg: Option<LogSegment>) -> Slot {
        Slot::Sealed(Arc::new(SealedSlot::new(base, size, seg)))
    }

    fn size(&self) -> u64 {
        match self {
            Slot::Sealed(s) => s.size,
            Slot::Active { seg, size } => seg.get().map_or(*size, |s| s.size()),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Slot::Sealed(s) => s.is_open(),
            Slot::Active { seg, .. } => seg.get().is_some(),
        }
    }

    /// Closes the segment's files if they are open ([`LogSegment::release`] for the active
    /// one; a sealed one closes when the last reader holding it lets go).
    fn release(&mut self) -> Result<()> {
        match self {
            Slot::Sealed(s) => {
                drop(s.close());
                Ok(())
            }
            Slot::Active { seg, size } => match seg.take() {
                Some(seg) => {
                    *size = seg.size();
                    seg.release()
                }
                None => Ok(()),
            },
        }
    }

    /// The segment, opened or not, by value: for deleting or moving it (a sealed one once no
    /// reader holds it).
    fn into_segment(self, log: &LocalLog, base: i64) -> Result<LogSegment> {
        match self {
            Slot::Sealed(s) => s.take(|| LogSegment::open(&log.ctx, &log.dir, base)),
            Slot::Active { seg, .. } => match seg.into_inner() {
                Some(seg) => Ok(*seg),
                None => LogSegment::open(&log.ctx, &log.dir, base),
            },
        }
    }
}

#[derive(Debug)]
struct Inner {
    segments: Segments,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    dir_dirty: bool,
    /// How many times an entry of the directory changed: a flush that synced the directory
    /// clears `dir_dirty` only if none changed since.
    dir_changes: u64,
    /// How many times segments were removed or replaced (retention, the cleaner, recovery's
    /// quarantine): a segment added by a roll takes nothing away from a reader.
    removals: u64,
    /// Closed through [`LocalLog::close_shared`]: no segment left, every access refused.
    closed: bool,
}

impl Inner {
    /// Lowers the recovery point to `offset` after the log end moved down there (the
    /// truncation was counted before it began: [`LocalLog::begin_truncation`]).
    fn truncated_to(&mut self, offset: i64) {
        self.recovery_point = self.recovery_point.min(offset);
    }

    fn mark_dir_dirty(&mut self) {
        self.dir_dirty = true;
        self.dir_changes = self.dir_changes.wrapping_add(1);
    }

    /// [`Self::mark_dir_dirty`] for segments removed or replaced ([`LocalLog::generation`]).
    fn mark_segments_removed(&mut self) {
        self.mark_dir_dirty();
        self.removals = self.removals.wrapping_add(1);
    }
}

/// The offsets and counts of [`Inner`] that readers load without a lock, stored (release) at
/// the end of every section under the writer's lock, after the segment list, before the lock is
/// released ([`LocalLog::write_inner`]'s guard): a reader that loads them, then the list, sees a
/// list at least as new as the values it loaded. The truncation count is moved by the
/// writer itself, before it cuts anything ([`LocalLog::begin_truncation`]).
#[derive(Debug, Default)]
struct PublishedBounds {
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
    recovery_point: AtomicI64,
    /// How many times the log end moved down (truncations): a flush that ran beside one does not
    /// move the recovery point, since what it synced may not be what the log now holds.
    truncations: publish::TruncationCount,
    removals: AtomicU64,
}

impl PublishedBounds {
    fn store(&self, inner: &Inner) {
        let release = Ordering::Release;
        self.log_start_offset.store(inner.log_start_offset, release);
        self.log_end_offset.store(inner.log_end_offset, release);
        self.recovery_point.store(inner.recovery_point, release);
        self.removals.store(inner.removals, release);
    }
}

/// The segments of one partition directory.
#[derive(Debug)]
pub struct LocalLog {
    dir: PathBuf,
    config: LogConfig,
    ctx: SegmentContext,
    /// The writer's lock: appends, rolls, truncations, deletions take it for writing; flushes
    /// and [`LocalLog::with_segments`] for reading. Readers never take it (but to open a
    /// released active segment: [`LocalLog::open_active_for_read`]).
    inner: RwLock<Inner>,
    /// [`Inner`]'s offsets and counts, for readers that take no lock.
    published: PublishedBounds,
    /// The segment list readers read, swapped in whole at the end of every write section that
    /// changed it.
    list: ArcSwap<SegmentList>,
    /// The sealed segments opened on demand and not closed by `LocalLog::trim_cache` since.
    opened: Mutex<Vec<Arc<SealedSlot>>>,
    /// Counts the uses of sealed segments through their slots: the clock of the least recently
    /// used order in which the cache closes them.
    uses: AtomicU64,
    /// Files of removed segments renamed `.deleted`, each with the time (on the clock) from which
    /// it may be removed, oldest first (Kafka's scheduled `delete-file` tasks).
    pending_deletes: Mutex<Vec<(i64, DeletedFiles)>>,
}

struct Summary {
    first_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
}
