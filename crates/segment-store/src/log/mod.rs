//! The multi-segment log of one partition (Kafka's `LocalLog` plus the segment-deletion part of
//! `UnifiedLog`).
//!
//! # Concurrency
//!
//! [`LocalLog`] is `Send + Sync`; every method takes `&self`. The segments live behind one
//! `RwLock`: appends, rolls, truncations and deletions take the write lock, reads take the read
//! lock. An append holds the write lock only for the write call and the index update of its
//! batches, and a segment's size advances only after the whole append was written, so a reader
//! can never observe part of a batch. Reads of sealed segments borrow from the segment's
//! read-only map inside [`LocalLog::read_with`]; [`LocalLog::read`] returns an owned copy.
//! The log start and end offsets, the recovery point, the truncation count and the generation
//! are loaded without the lock: they are published at the end of every section under the write
//! lock, and the truncation count moves before a truncation cuts anything. The active segment
//! also publishes its tail for readers without a lock (`publish.rs`), which the read functions do
//! not use yet (`docs/lockfree-plan.md`).
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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::{Result, SegmentError};
use crate::file_slice::FileSlice;
use crate::io::{StdFs, Storage};
use crate::segment::{
    Clock, DeletedFiles, LogOffsetMetadata, LogSegment, RollReason, SegmentContext, SystemClock,
};

mod append;
mod open;
// The active segment's tail published to readers that take no lock; the read path does not use
// it yet (docs/lockfree-plan.md).
#[allow(dead_code)]
pub(crate) mod publish;
#[cfg(test)]
mod publish_tests;
mod read;
mod replace;
mod retention;
mod segments;
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

/// [`SegmentError::OffsetOutOfRange`] unless `offset` lies in `[log start, log end]`.
fn out_of_range(dir: &std::path::Path, inner: &Inner, offset: i64) -> Result<()> {
    if inner.closed {
        return Err(SegmentError::Closed {
            dir: dir.to_path_buf(),
        });
    }
    if offset > inner.log_end_offset || offset < inner.log_start_offset {
        return Err(SegmentError::OffsetOutOfRange {
            offset,
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
        });
    }
    Ok(())
}

/// The base offset of the segment holding `offset` (the last one at or below it).
fn floor_base(inner: &Inner, offset: i64) -> Result<i64> {
    inner
        .segments
        .range(..=offset)
        .next_back()
        .map(|(&b, _)| b)
        .ok_or(SegmentError::OffsetOutOfRange {
            offset,
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
        })
}

/// What [`LocalLog::read_exact`] returns: Kafka's bytes, and the upper bound of the aborted
/// transactions that go with them (Kafka's `addAbortedTransactions`: the offset of the first
/// offset-index entry past the bytes returned, else the next segment's base offset, else the log
/// end offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactFetch {
    /// The bytes (the last batch may be cut short) and where they start.
    pub data: FetchData,
    /// Aborted transactions that overlap `[fetch offset, upper_bound_offset)` go with them.
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
    /// Aborted transactions that overlap `[fetch offset, upper_bound_offset)` go with the bytes.
    pub upper_bound_offset: i64,
    /// One past the last offset of the last whole batch in the slice (the offset a reader of
    /// it fetches next); the fetch offset when it holds no whole batch.
    pub next_fetch_offset: i64,
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
/// at most once an operation is over (a fetch, an append), those read last. Each holds up to four
/// descriptors and three maps (the `.log`'s handle and read-only map, the mapped `.index` and
/// `.timeindex`).
pub const MAX_OPEN_INACTIVE_SEGMENTS: usize = 8;

/// One segment of the log, open or not: a segment's files are opened when the log first needs
/// them (as Kafka opens its indexes lazily) and closed again when more than
/// [`LogConfig::max_open_inactive_segments`] inactive ones are open, so a log of any number of segments holds
/// a bounded number of descriptors and maps.
#[derive(Debug)]
struct Slot {
    /// Boxed: a closed slot is a few words, not a whole segment's struct (a partition holds one
    /// slot per segment, 100,000 or more).
    seg: OnceLock<Box<LogSegment>>,
    /// The `.log`'s size, for a segment that is not open (an open one answers itself).
    size: u64,
}

impl Slot {
    fn open(seg: LogSegment) -> Slot {
        Slot {
            size: seg.size(),
            seg: OnceLock::from(Box::new(seg)),
        }
    }

    fn closed(size: u64) -> Slot {
        Slot {
            seg: OnceLock::new(),
            size,
        }
    }

    fn size(&self) -> u64 {
        self.seg.get().map_or(self.size, |s| s.size())
    }

    /// Closes the segment's files if they are open ([`LogSegment::release`]).
    fn release(&mut self) -> Result<()> {
        match self.seg.take() {
            Some(seg) => {
                self.size = seg.size();
                seg.release()
            }
            None => Ok(()),
        }
    }

    /// The segment, opened or not: for deleting or moving it.
    fn into_segment(self, log: &LocalLog, base: i64) -> Result<LogSegment> {
        match self.seg.into_inner() {
            Some(seg) => Ok(*seg),
            None => LogSegment::open(&log.ctx, &log.dir, base),
        }
    }
}

#[derive(Debug)]
struct Inner {
    segments: BTreeMap<i64, Slot>,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    dir_dirty: bool,
    /// How many times an entry of the directory changed: a flush that synced the directory
    /// clears `dir_dirty` only if none changed since.
    dir_changes: u64,
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
}

/// The offsets and counts of [`Inner`] that readers load without the segment list's lock,
/// stored (release) at the end of every section under its write lock, before the lock is
/// released ([`LocalLog::write_inner`]'s guard): a reader that then takes the read lock sees a
/// segment list at least as new as the values it loaded. The truncation count is moved by the
/// writer itself, before it cuts anything ([`LocalLog::begin_truncation`]).
#[derive(Debug, Default)]
struct PublishedBounds {
    log_start_offset: AtomicI64,
    log_end_offset: AtomicI64,
    recovery_point: AtomicI64,
    /// How many times the log end moved down (truncations): a flush that ran beside one does not
    /// move the recovery point, since what it synced may not be what the log now holds.
    truncations: publish::TruncationCount,
    dir_changes: AtomicU64,
}

impl PublishedBounds {
    fn store(&self, inner: &Inner) {
        let release = Ordering::Release;
        self.log_start_offset.store(inner.log_start_offset, release);
        self.log_end_offset.store(inner.log_end_offset, release);
        self.recovery_point.store(inner.recovery_point, release);
        self.dir_changes.store(inner.dir_changes, release);
    }
}

/// The segments of one partition directory.
#[derive(Debug)]
pub struct LocalLog {
    dir: PathBuf,
    config: LogConfig,
    ctx: SegmentContext,
    inner: RwLock<Inner>,
    /// [`Inner`]'s offsets and counts, for readers that take no lock.
    published: PublishedBounds,
    /// The segments opened on demand since the last [`LocalLog::trim`], oldest first. Its lock
    /// also serialises opening under the read lock (a mapped index locks its file: two opens of
    /// one segment would collide).
    opened: Mutex<Vec<i64>>,
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
