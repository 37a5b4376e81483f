//! One segment: a `.log` and its offset, time and transaction indexes (Kafka's `LogSegment`).
//!
//! ```text
//! <dir>/<20-digit base>.log        FileRecords: the batches (all writes through Storage)
//! <dir>/<20-digit base>.index      OffsetIndex: (lastOffset - base, batch start position), sparse
//! <dir>/<20-digit base>.timeindex  TimeIndex:   (max timestamp so far, its batch's lastOffset - base)
//! <dir>/<20-digit base>.txnindex   TransactionIndex: aborted transactions (through Storage)
//! ```
//!
//! Index maintenance is Kafka's (≥ 3.7, per batch): before each batch is accounted, if more than
//! `index.interval.bytes` bytes were appended since the last index entry, an offset-index entry
//! `(batch.lastOffset, batch start position)` and a time-index entry `(maxTimestampSoFar,
//! offsetOfMaxTimestampSoFar)` are written and the counter resets; then the batch's size is added
//! to the counter. [`LogSegment::recover`] applies the same rule to `validBytes - lastIndexEntry`,
//! so a recovered segment has the indexes an uninterrupted append produced.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use record_format::internals::{ScannedBatch, DEFAULT_REGION_BYTES};
use record_format::FormatError;

use crate::error::{Result, SegmentError};
use crate::file_name::{segment_file_path, FileKind};
use crate::file_records::FileRecords;
use crate::index::{
    AbortedTxn, OffsetIndex, TimeIndex, TimestampOffset, TransactionIndex, DEFAULT_MAX_INDEX_SIZE,
};
use crate::io::{index_storage, OpenMode, Storage};
use crate::lock::DirLock;

mod append_read;
mod files;
mod recover;
mod roll;
mod scan;
mod scanner;
mod tail;
mod view;

pub(crate) use append_read::ReadBounds;
use files::remove_file_if_exists;
pub(crate) use files::DeletedFiles;
pub use scan::{scan_segment, SegmentScan};
pub use scanner::SegmentScanner;
pub(crate) use tail::PublishedTail;
#[cfg(test)]
pub(crate) use tail::TailIndex;
#[cfg(test)]
pub(crate) use view::SegmentView;

/// Wall-clock milliseconds, injectable for tests (Kafka's `Time`).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Per-segment settings (Kafka: `index.interval.bytes`, `segment.index.bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// Bytes between offset-index entries (default 4096).
    pub index_interval_bytes: u32,
    /// Preallocated size of the offset and time indexes (default 10 MiB).
    pub max_index_size: u64,
    /// Bytes per unit of recovery's parallel framing and CRC checks (default 1 MiB; not a Kafka
    /// setting). Tests and the fuzzer set it small to get many regions out of a small segment.
    pub recovery_region_bytes: usize,
}

impl Default for SegmentConfig {
    fn default() -> Self {
        SegmentConfig {
            index_interval_bytes: 4096,
            max_index_size: DEFAULT_MAX_INDEX_SIZE,
            recovery_region_bytes: DEFAULT_REGION_BYTES,
        }
    }
}

/// What a segment needs from its surroundings: the storage the `.log` and `.txnindex` are
/// written through, the directory lock (which the mapped indexes require), a clock and the
/// settings.
#[derive(Debug, Clone)]
pub struct SegmentContext {
    /// Storage for the `.log`, `.txnindex` and quarantine files.
    pub storage: Arc<dyn Storage>,
    /// The partition directory's lock.
    pub lock: DirLock,
    /// Time source for segment creation times.
    pub clock: Arc<dyn Clock>,
    /// Index settings.
    pub config: SegmentConfig,
}

/// Inputs of [`LogSegment::should_roll`] (Kafka `RollParams`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollParams {
    /// `segment.bytes`.
    pub max_segment_bytes: u64,
    /// `segment.ms`.
    pub max_segment_ms: i64,
    /// The segment's random jitter subtracted from `segment.ms`.
    pub roll_jitter_ms: i64,
    /// Max timestamp of the records about to be appended.
    pub max_timestamp_in_messages: i64,
    /// Last offset of the records about to be appended.
    pub max_offset_in_messages: i64,
    /// Size of the records about to be appended.
    pub messages_size: u64,
    /// Current time.
    pub now_ms: i64,
}

/// Why a segment must be rolled (the four conditions of Kafka's `shouldRoll`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollReason {
    /// `size > segment.bytes - messagesSize`.
    Size,
    /// The segment is not empty and older than `segment.ms - jitter` (by the first batch's max
    /// timestamp vs the incoming max timestamp, or by wall clock since creation).
    Time,
    /// No free offset-index slot.
    OffsetIndexFull,
    /// No free time-index slot (the last is kept for the roll entry).
    TimeIndexFull,
    /// The incoming last offset does not fit 32 bits relative to the base offset.
    OffsetOverflow,
}

/// Kafka's `LogOffsetMetadata`: an offset and where in which segment its batch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffsetMetadata {
    /// The offset.
    pub message_offset: i64,
    /// Base offset of the segment.
    pub segment_base_offset: i64,
    /// Byte position in the segment.
    pub relative_position_in_segment: u64,
}

/// The result of a read (Kafka `FetchDataInfo`); `records` holds whole batches only.
#[derive(Debug, Clone)]
pub struct FetchDataInfo<'a> {
    /// Where the fetch started.
    pub fetch_offset_metadata: LogOffsetMetadata,
    /// Whole batches, borrowed from the segment's map when sealed, else copied.
    pub records: Cow<'a, [u8]>,
    /// The first batch did not fit `max_size` (and `min_one_message` was off), so `records` is
    /// empty.
    pub first_entry_incomplete: bool,
}

/// What [`LogSegment::recover`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryOutcome {
    /// Bytes of valid batches kept.
    pub valid_bytes: u64,
    /// Bytes cut from the end of the `.log` (Kafka's return value).
    pub truncated_bytes: u64,
    /// Number of valid batches.
    pub batches: u64,
    /// Last offset of the last valid batch, if any.
    pub last_offset: Option<i64>,
    /// Largest batch max timestamp and the last offset of its batch (`(-1, base)` if none).
    pub max_timestamp: TimestampOffset,
    /// Where the valid prefix ends and why: a corrupt batch (CRC, length, magic) or an
    /// incomplete trailing batch (`Truncated`). `None` when every byte was valid.
    pub truncated_at: Option<(u64, FormatError)>,
    /// The file holding the cut bytes (`<base>.log.cut-<position>` in the quarantine directory),
    /// written and synced before the `.log` was truncated.
    pub quarantine_file: Option<PathBuf>,
}

/// What [`LogSegment::recover`] calls with each valid v2 batch, in log order: the aborted
/// transactions it pushes onto the vector (cleared before each call) are appended to the
/// segment's transaction index.
pub type RecoveryVisitor<'v, E> =
    dyn FnMut(&ScannedBatch<'_>, &mut Vec<AbortedTxn>) -> std::result::Result<(), E> + 'v;

/// One segment of a partition log.
#[derive(Debug)]
pub struct LogSegment {
    base_offset: i64,
    dir: PathBuf,
    ctx: SegmentContext,
    log: FileRecords,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: TransactionIndex,
    bytes_since_last_index_entry: u64,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
    max_timestamp_so_far: TimestampOffset,
    /// While the segment is the active one: its tail as readers without a lock see it.
    tail: Option<Arc<tail::PublishedTail>>,
}

impl LogSegment {
    fn build(ctx: &SegmentContext, dir: &Path, base_offset: i64, mode: OpenMode) -> Result<Self> {
        Self::build_with(ctx, dir, base_offset, mode, false)
    }

    /// `active`: the offset and time indexes are opened at their maximum size.
    fn build_with(
        ctx: &SegmentContext,
        dir: &Path,
        base_offset: i64,
        mode: OpenMode,
        active: bool,
    ) -> Result<Self> {
        let log = FileRecords::open(
            ctx.storage.as_ref(),
            &segment_file_path(dir, base_offset, FileKind::Log),
            mode,
        )?;
        let offset_index = OffsetIndex::open_with(
            &ctx.storage,
            &ctx.lock,
            &segment_file_path(dir, base_offset, FileKind::Index),
            base_offset,
            ctx.config.max_index_size,
            true,
            active,
        )?;
        let time_index = TimeIndex::open_with(
            &ctx.storage,
            &ctx.lock,
            &segment_file_path(dir, base_offset, FileKind::TimeIndex),
            base_offset,
            ctx.config.max_index_size,
            true,
            active,
        )?;
        let txn_index = TransactionIndex::open(
            Arc::clone(&ctx.storage),
            &segment_file_path(dir, base_offset, FileKind::TxnIndex),
            base_offset,
        )?;
        let max_timestamp_so_far = time_index.last_entry();
        Ok(LogSegment {
            base_offset,
            dir: dir.to_path_buf(),
            ctx: ctx.clone(),
            log,
            offset_index,
            time_index,
            txn_index,
            bytes_since_last_index_entry: 0,
            rolling_based_timestamp: None,
            created_ms: ctx.clock.now_ms(),
            max_timestamp_so_far,
            tail: None,
        })
    }

    /// Creates a new, empty segment at `base_offset` in `dir`. Stale index files at the new
    /// names are removed first (as `LocalLog.roll` does); an existing `.log` is an error
    /// (`AlreadyExists`).
    pub fn create(ctx: &SegmentContext, dir: &Path, base_offset: i64) -> Result<Self> {
        let log = segment_file_path(dir, base_offset, FileKind::Log);
        if ctx.storage.exists(&log)? {
            return Err(SegmentError::io(
                log,
                "create",
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
        for kind in [FileKind::Index, FileKind::TimeIndex] {
            remove_file_if_exists(
                index_storage(ctx.storage.as_ref()),
                &segment_file_path(dir, base_offset, kind),
            )?;
        }
        let txn = segment_file_path(dir, base_offset, FileKind::TxnIndex);
        if ctx.storage.exists(&txn)? {
            ctx.storage.remove_file(&txn)?;
        }
        Self::build(ctx, dir, base_offset, OpenMode::CreateNew)
    }

    /// Opens the existing segment at `base_offset` in `dir`. Missing offset/time indexes are
    /// created empty (preallocated); existing ones are taken as they are (`len / entry size`
    /// entries): run [`Self::sanity_check`], and [`Self::recover`] if it fails.
    pub fn open(ctx: &SegmentContext, dir: &Path, base_offset: i64) -> Result<Self> {
        Self::build(ctx, dir, base_offset, OpenMode::ReadWrite)
    }

    /// [`Self::open`] for the segment that becomes the active one: its offset and time indexes
    /// are opened at their maximum size at once (as [`Self::resize_indexes`] would make them).
    pub(crate) fn open_active(ctx: &SegmentContext, dir: &Path, base_offset: i64) -> Result<Self> {
        Self::build_with(ctx, dir, base_offset, OpenMode::ReadWrite, true)
    }

    /// The base offset.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Size of the `.log` in bytes.
    pub fn size(&self) -> u64 {
        self.log.size()
    }
    /// The `.log`.
    pub fn log(&self) -> &FileRecords {
        &self.log
    }
    /// The offset index.
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    /// The time index.
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    /// The transaction index.
    pub fn txn_index(&self) -> &TransactionIndex {
        &self.txn_index
    }
    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Largest batch max timestamp appended so far (`-1` if none).
    pub fn max_timestamp_so_far(&self) -> i64 {
        self.max_timestamp_so_far.timestamp
    }
    /// Last offset of the batch holding [`Self::max_timestamp_so_far`].
    pub fn offset_of_max_timestamp_so_far(&self) -> i64 {
        self.max_timestamp_so_far.offset
    }
    /// When this segment object was created (ms).
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    /// Kafka's `largestTimestamp`: the max timestamp so far if known, else the creation time
    /// (Kafka uses the file's mtime; the storage seam has no mtime).
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp_so_far.timestamp >= 0 {
            self.max_timestamp_so_far.timestamp
        } else {
            self.created_ms
        }
    }

    /// Whether `offset` fits the indexes' 32-bit relative offsets.
    pub fn can_convert_to_relative_offset(&self, offset: i64) -> bool {
        self.offset_index.can_append_offset(offset)
    }

    fn ensure_offset_in_range(&self, offset: i64) -> Result<()> {
        if self.can_convert_to_relative_offset(offset) {
            Ok(())
        } else {
            Err(SegmentError::OffsetOverflow {
                path: self.log.path().to_path_buf(),
                offset,
                base_offset: self.base_offset,
            })
        }
    }
}
