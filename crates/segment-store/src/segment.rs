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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{SystemTime, UNIX_EPOCH};

use record_format::batches::incomplete_batch_error;
use record_format::scan::{Piece, Regions, DEFAULT_REGION_BYTES};
use record_format::wire::NO_TIMESTAMP;
use record_format::{Batches, ChunkChain, FormatError, IterEnd, LogEntry, RecordBatch};

use crate::error::{Result, SegmentError};
use crate::file_name::{quarantine_file_name, segment_file_path, FileKind, DELETED_FILE_SUFFIX};
use crate::file_records::{whole_batches_len, FileRecords, LogOffsetPosition, TimestampAndOffset};
use crate::index::offset::ENTRY_SIZE as OFFSET_ENTRY_SIZE;
use crate::index::time::ENTRY_SIZE as TIME_ENTRY_SIZE;
use crate::index::{
    AbortedTxn, FilePosition, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset,
    TransactionIndex, TxnIndexSearchResult, DEFAULT_MAX_INDEX_SIZE,
};
use crate::io::{index_storage, partial_path, FileHandle, OpenMode, ReadBuf, Storage};
use crate::lock::DirLock;

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
    dyn FnMut(&RecordBatch<'_>, &mut Vec<AbortedTxn>) -> std::result::Result<(), E> + 'v;

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

    /// Kafka's `append`: writes `records` (whole v2 batches with offsets assigned, all
    /// `<= largest_offset`) and maintains the indexes per batch. `largest_timestamp` becomes
    /// the rolling base timestamp if the segment was empty; `(largest_timestamp,
    /// offset_of_max_timestamp)` raise the max timestamp so far if the per-batch values did not
    /// already. Returns the position the records were written at. Malformed framing is
    /// rejected before anything is written.
    pub fn append(
        &mut self,
        largest_offset: i64,
        largest_timestamp: i64,
        offset_of_max_timestamp: i64,
        records: &[u8],
    ) -> Result<u64> {
        let mut position = self.log.size();
        if records.is_empty() {
            return Ok(position);
        }
        self.ensure_offset_in_range(largest_offset)?;
        let end = position + records.len() as u64;
        if end > i32::MAX as u64 {
            return Err(SegmentError::PositionOverflow {
                path: self.log.path().to_path_buf(),
                position: end,
            });
        }
        check_framing(self.log.path(), records, position)?;
        if position == 0 {
            self.rolling_based_timestamp = Some(largest_timestamp);
        }
        let start = self.log.append(records)?;
        for h in headers_in(records, start) {
            if h.max_timestamp > self.max_timestamp_so_far.timestamp {
                self.max_timestamp_so_far = TimestampOffset {
                    timestamp: h.max_timestamp,
                    offset: h.last_offset,
                };
            }
            if self.bytes_since_last_index_entry > u64::from(self.ctx.config.index_interval_bytes) {
                self.offset_index
                    .append(h.last_offset, FilePosition(position as u32))?;
                self.time_index.maybe_append(
                    self.max_timestamp_so_far.timestamp,
                    self.max_timestamp_so_far.offset,
                    false,
                )?;
                self.bytes_since_last_index_entry = 0;
            }
            position += u64::from(h.size);
            self.bytes_since_last_index_entry += u64::from(h.size);
        }
        if largest_timestamp > self.max_timestamp_so_far.timestamp {
            self.max_timestamp_so_far = TimestampOffset {
                timestamp: largest_timestamp,
                offset: offset_of_max_timestamp,
            };
        }
        Ok(start)
    }

    /// Kafka's `translateOffset`: the batch containing `offset` (the first whose last offset is
    /// `>= offset`), searching from the index entry or `starting_position`, whichever is later.
    pub fn translate_offset(
        &self,
        offset: i64,
        starting_position: u64,
    ) -> Result<Option<LogOffsetPosition>> {
        let mapping = self.offset_index.lookup(offset);
        self.log.search_for_offset_with_size(
            offset,
            u64::from(mapping.position.0).max(starting_position),
        )
    }

    /// Kafka's `read`, cut to whole batches: from the batch containing `start_offset`, at most
    /// `max_size` bytes (at least the first batch if `min_one_message`) and not past
    /// `max_position` (default: the segment size). `None` if `start_offset` is past the
    /// segment's last batch.
    pub fn read(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: Option<u64>,
        min_one_message: bool,
    ) -> Result<Option<FetchDataInfo<'_>>> {
        let Some(mut info) =
            self.read_exact(start_offset, max_size, max_position, min_one_message)?
        else {
            return Ok(None);
        };
        let whole = whole_batches_len(&info.records);
        if whole < info.records.len() {
            info.records = match info.records {
                Cow::Borrowed(b) => Cow::Borrowed(b.get(..whole).unwrap_or_default()),
                Cow::Owned(mut v) => {
                    v.truncate(whole);
                    Cow::Owned(v)
                }
            };
        }
        Ok(Some(info))
    }

    /// Kafka's `LogSegment.read` exactly: the bytes from the batch containing `start_offset`,
    /// `min(max_position - start, max_size)` of them (`max_size` raised to the first batch's size
    /// if `min_one_message`), so the last batch may be cut short, as Kafka's fetch may end; empty
    /// when that is 0 bytes. `first_entry_incomplete` when the first batch is larger than what
    /// may be returned. `None` if `start_offset` is past the segment's last batch.
    pub fn read_exact(
        &self,
        start_offset: i64,
        max_size: usize,
        max_position: Option<u64>,
        min_one_message: bool,
    ) -> Result<Option<FetchDataInfo<'_>>> {
        let Some(start) = self.translate_offset(start_offset, 0)? else {
            return Ok(None);
        };
        let meta = LogOffsetMetadata {
            message_offset: start_offset,
            segment_base_offset: self.base_offset,
            relative_position_in_segment: start.position,
        };
        let adjusted = if min_one_message {
            max_size.max(start.size as usize)
        } else {
            max_size
        };
        let max_position = max_position.unwrap_or(self.size()).min(self.size());
        if adjusted == 0 || max_position <= start.position {
            return Ok(Some(FetchDataInfo {
                fetch_offset_metadata: meta,
                records: Cow::Borrowed(&[][..]),
                first_entry_incomplete: false,
            }));
        }
        let incomplete = adjusted < start.size as usize;
        let fetch_size = ((max_position - start.position) as usize).min(adjusted);
        Ok(Some(FetchDataInfo {
            fetch_offset_metadata: meta,
            records: self.log.read(start.position, fetch_size)?,
            first_entry_incomplete: incomplete,
        }))
    }

    /// Kafka's `LogSegment.fetchUpperBoundOffset`: the offset of the first offset-index entry at
    /// or after byte `position + fetch_size`, if any (the upper bound of the aborted
    /// transactions a fetch of `fetch_size` bytes from `position` returns).
    pub fn fetch_upper_bound_offset(
        &self,
        offset: i64,
        position: u64,
        fetch_size: usize,
    ) -> Option<i64> {
        let from = OffsetPosition {
            offset,
            position: FilePosition(u32::try_from(position).unwrap_or(u32::MAX)),
        };
        self.offset_index
            .fetch_upper_bound_offset(from, u32::try_from(fetch_size).unwrap_or(u32::MAX))
            .map(|p| p.offset)
    }

    /// Kafka's `readNextOffset`: the offset after the last batch (the base offset if empty).
    pub fn read_next_offset(&self) -> Result<i64> {
        let from = u64::from(self.offset_index.last_entry().position.0);
        let mut next = self.base_offset;
        for h in self.log.headers_from(from) {
            next = h?.next_offset();
        }
        Ok(next)
    }

    /// Kafka's `hasOverflow`: the segment holds an offset that does not fit 32 bits relative to
    /// its base (possible in segments written by old Kafka versions).
    pub fn has_overflow(&self) -> Result<bool> {
        let next = self.read_next_offset()?;
        Ok(next > self.base_offset && !self.can_convert_to_relative_offset(next - 1))
    }

    /// Kafka's `findOffsetByTimestamp`: the first record with timestamp `>= timestamp` and
    /// offset `>= starting_offset`, starting the scan from the time and offset indexes.
    pub fn find_offset_by_timestamp(
        &self,
        timestamp: i64,
        starting_offset: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let to = self.time_index.lookup(timestamp);
        let position = self
            .offset_index
            .lookup(to.offset.max(starting_offset))
            .position;
        self.log
            .search_for_timestamp(timestamp, u64::from(position.0), starting_offset)
    }

    /// Kafka's `MAX_TIMESTAMP` lookup in this segment (KIP-734): the first batch from the
    /// offset-index entry of [`Self::offset_of_max_timestamp_so_far`] whose max timestamp is
    /// [`Self::max_timestamp_so_far`], and in it the first record with that timestamp (Kafka's
    /// `offsetOfMaxTimestamp`), with the batch's leader epoch if it has one. `None` when no
    /// batch or record matches (an empty segment, a legacy batch).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        let max = self.max_timestamp_so_far();
        let from = self
            .offset_index
            .lookup(self.offset_of_max_timestamp_so_far());
        for h in self.log.headers_from(u64::from(from.position.0)) {
            let h = h?;
            if h.max_timestamp != max {
                continue;
            }
            if h.magic < 2 {
                return Ok(None);
            }
            let bytes = self.log.read(h.position, h.size as usize)?;
            let format = |error| SegmentError::Format {
                path: self.log.path().to_path_buf(),
                error,
            };
            let batch = RecordBatch::new(&bytes, h.position).map_err(format)?;
            let records = batch
                .records(&record_format::DecodeLimits::default())
                .map_err(format)?;
            for r in records.iter() {
                let r = r.map_err(format)?;
                if r.timestamp() == max {
                    return Ok(Some(TimestampAndOffset {
                        timestamp: max,
                        offset: r.offset(),
                        leader_epoch: (h.partition_leader_epoch >= 0)
                            .then_some(h.partition_leader_epoch),
                    }));
                }
            }
            return Ok(None);
        }
        Ok(None)
    }

    fn load_first_batch_timestamp(&mut self) -> Result<()> {
        if self.rolling_based_timestamp.is_none() {
            if let Some(h) = self.log.headers_from(0).next() {
                self.rolling_based_timestamp = Some(h?.max_timestamp);
            }
        }
        Ok(())
    }

    fn time_waited_for_roll(&mut self, now_ms: i64, message_timestamp: i64) -> Result<i64> {
        self.load_first_batch_timestamp()?;
        Ok(match self.rolling_based_timestamp {
            Some(ts) if ts >= 0 => message_timestamp.saturating_sub(ts),
            _ => now_ms.saturating_sub(self.created_ms),
        })
    }

    /// Kafka's `shouldRoll`, naming the first condition that holds.
    pub fn should_roll(&mut self, p: &RollParams) -> Result<Option<RollReason>> {
        let reached_roll_ms = self.time_waited_for_roll(p.now_ms, p.max_timestamp_in_messages)?
            > p.max_segment_ms.saturating_sub(p.roll_jitter_ms);
        let size = i128::from(self.size());
        Ok(
            if size > i128::from(p.max_segment_bytes) - i128::from(p.messages_size) {
                Some(RollReason::Size)
            } else if size > 0 && reached_roll_ms {
                Some(RollReason::Time)
            } else if self.offset_index.is_full() {
                Some(RollReason::OffsetIndexFull)
            } else if self.time_index.is_full() {
                Some(RollReason::TimeIndexFull)
            } else if !self.can_convert_to_relative_offset(p.max_offset_in_messages) {
                Some(RollReason::OffsetOverflow)
            } else {
                None
            },
        )
    }

    fn force_final_time_index_entry(&mut self) -> Result<()> {
        self.time_index.maybe_append(
            self.max_timestamp_so_far.timestamp,
            self.max_timestamp_so_far.offset,
            true,
        )?;
        Ok(())
    }

    /// Kafka's `onBecomeInactiveSegment`: writes the final time-index entry (the max timestamp
    /// so far), trims both indexes to their entries, and (on a real file system) maps the `.log`
    /// read-only so later reads are zero-copy.
    pub fn on_become_inactive_segment(&mut self) -> Result<()> {
        self.force_final_time_index_entry()?;
        self.offset_index.trim_to_valid_size()?;
        self.time_index.trim_to_valid_size()?;
        // The trimmed indexes durable at once (Kafka leaves them to the next flush, which skips
        // a segment already below the recovery point): a segment below the recovery point is
        // trusted after a crash, and an index that kept its preallocated length there would
        // bring back, as entries, bytes of a truncated past (found by the weak crash model).
        self.offset_index.sync()?;
        self.time_index.sync()?;
        self.map_log()
    }

    /// Maps the `.log` read-only if the storage is a real file system (a no-op otherwise).
    pub fn map_log(&mut self) -> Result<()> {
        if self.ctx.storage.supports_mmap() {
            self.log.map_read_only(&self.ctx.lock)?;
        }
        Ok(())
    }

    /// Whether an offset or time index file is longer than `max` (`segment.index.bytes`): its
    /// entries could not fit when it is resized to `max`.
    pub(crate) fn indexes_oversized(&self, max: u64) -> bool {
        self.offset_index.length() > max || self.time_index.length() > max
    }

    /// Removes every offset and time index entry (Kafka's `reset` of both, as recovery does
    /// before rebuilding them): for indexes that cannot be resized as they are.
    pub(crate) fn reset_offset_and_time_indexes(&mut self) -> Result<()> {
        self.offset_index.reset()?;
        self.time_index.reset()
    }

    /// Resizes both mapped indexes (e.g. back to `max_index_size` when a segment becomes the
    /// active one again after loading).
    pub fn resize_indexes(&mut self, size: u64) -> Result<()> {
        self.offset_index.resize(size)?;
        self.time_index.resize(size)?;
        Ok(())
    }

    /// Kafka's `updateTxnIndex` for an aborted transaction: appends it to the transaction index.
    pub fn update_txn_index(&mut self, aborted: &AbortedTxn) -> Result<()> {
        self.txn_index.append(aborted)
    }

    /// Aborted transactions overlapping `[fetch_offset, upper_bound_offset)`.
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<TxnIndexSearchResult> {
        self.txn_index
            .collect_aborted_txns(fetch_offset, upper_bound_offset)
    }

    /// Kafka's `sanityCheck`: the offset, time and transaction index checks.
    pub fn sanity_check(&self) -> Result<()> {
        self.offset_index.sanity_check()?;
        self.time_index.sanity_check()?;
        self.txn_index.sanity_check()
    }

    /// Kafka's batch-aligned `truncateTo`: removes every batch from the one containing `offset`
    /// on, truncates all three indexes to `offset`, resizes the mapped indexes back to their max
    /// size (the segment becomes the active one) and returns the bytes cut from the `.log`.
    pub fn truncate_to(&mut self, offset: i64) -> Result<u64> {
        let mapping = self.translate_offset(offset, 0)?;
        self.offset_index.truncate_to(offset);
        self.time_index.truncate_to(offset);
        self.txn_index.truncate_to(offset)?;
        let truncated = match mapping {
            Some(m) => self.log.truncate_to(m.position)?,
            None => 0,
        };
        self.become_active()?;
        // Kafka re-reads the largest timestamp after every truncation, walking the headers from
        // the last time-index entry to the end. When nothing was cut the largest timestamp cannot
        // have changed, and that walk can be the whole segment (a segment whose timestamps do not
        // grow has few time-index entries): reactivating a recovered 1 GiB segment took ~0.5 s
        // of 61-byte reads.
        if truncated > 0 && self.max_timestamp_so_far.timestamp >= 0 {
            self.max_timestamp_so_far = self.read_largest_timestamp()?;
        }
        Ok(truncated)
    }

    /// The segment becomes the active one (the end of [`Self::truncate_to`], and all of it for a
    /// segment whose scan was just installed as active): indexes at their maximum size, the
    /// `.log` unmapped, no bytes since the last index entry.
    pub(crate) fn become_active(&mut self) -> Result<()> {
        self.offset_index
            .resize(self.offset_index.max_index_size())?;
        self.time_index.resize(self.time_index.max_index_size())?;
        self.log.unmap();
        if self.log.size() == 0 {
            self.created_ms = self.ctx.clock.now_ms();
            self.rolling_based_timestamp = None;
        }
        self.bytes_since_last_index_entry = 0;
        Ok(())
    }

    fn read_largest_timestamp(&self) -> Result<TimestampOffset> {
        let last = self.time_index.last_entry();
        let position = self.offset_index.lookup(last.offset).position;
        let after = self.log.largest_timestamp_after(u64::from(position.0))?;
        Ok(if after.timestamp > last.timestamp {
            after
        } else {
            last
        })
    }

    /// Kafka's `recover`: [`scan_segment`] over the `.log` (framing and CRC of every batch,
    /// `visitor` called with each valid v2 batch in order, the offset and time index entries an
    /// uninterrupted append would have written), then [`Self::install_scan`] (indexes rebuilt,
    /// cut bytes quarantined, `.log` truncated). Legacy (magic 0/1) entries are indexed but not
    /// visited. Scanning stops at the first invalid or incomplete batch.
    ///
    /// Errors: an offset that does not fit the segment ([`SegmentError::OffsetOverflow`]),
    /// offsets that go backwards ([`SegmentError::InvalidOffset`]), I/O, or the visitor's error.
    pub fn recover<E: From<SegmentError>>(
        &mut self,
        visitor: &mut RecoveryVisitor<'_, E>,
        quarantine_dir: &Path,
    ) -> std::result::Result<RecoveryOutcome, E> {
        let was_mapped = self.log.is_mapped();
        if self.ctx.storage.supports_mmap() {
            // Zero-copy scan; a failure to map just means reading into a buffer. (Not
            // MAP_POPULATE: the page faults are taken by whichever core walks a region, in
            // parallel, instead of on this thread before any walking starts.)
            let _ = self.log.map_read_only(&self.ctx.lock);
        }
        let scan = {
            let data = self.log.batches_from(0)?;
            scan_segment(
                self.log.path(),
                data.bytes(),
                self.base_offset,
                &self.ctx.config,
                visitor,
            )?
        };
        let outcome = self.install_scan(&scan, quarantine_dir)?;
        if was_mapped {
            self.log.map_read_only(&self.ctx.lock)?;
        }
        Ok(outcome)
    }

    /// The writing half of recovery, from a [`SegmentScan`] of this segment's `.log` as it is
    /// (taken by [`scan_segment`], e.g. in a read-only recovery plan): resets the three indexes
    /// and writes the scan's entries into them, appends its aborted transactions to the
    /// transaction index, and — if the scan stopped before the end — first writes the bytes past
    /// the valid prefix to `<quarantine_dir>/<base>.log.cut-<position>` through the storage,
    /// synced (file and directory), and only then truncates the `.log`. Afterwards the indexes
    /// are trimmed (with the final time-index entry), as Kafka leaves them. The `.log` is left
    /// unmapped.
    ///
    /// A scan of other bytes than the file's (another size) is refused with
    /// [`SegmentError::Format`]-free [`SegmentError::Io`] (`InvalidInput`): recovery never cuts
    /// what it did not check.
    pub fn install_scan(
        &mut self,
        scan: &SegmentScan,
        quarantine_dir: &Path,
    ) -> Result<RecoveryOutcome> {
        self.install_scan_as(scan, quarantine_dir, false)
    }

    /// [`Self::install_scan`]; `active`: the segment stays the active one, so its indexes keep
    /// their maximum size instead of being trimmed and grown again (the bytes of every entry
    /// are the same; only the file length differs until the segment is closed or rolled).
    pub(crate) fn install_scan_as(
        &mut self,
        scan: &SegmentScan,
        quarantine_dir: &Path,
        active: bool,
    ) -> Result<RecoveryOutcome> {
        if scan.size != self.log.size() || scan.base_offset != self.base_offset {
            return Err(SegmentError::io(
                self.log.path(),
                "install recovery scan",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the file changed since it was scanned",
                ),
            ));
        }
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.txn_index.reset()?;
        self.offset_index.append_in_bulk(|index| {
            scan.offset_entries
                .iter()
                .try_for_each(|e| index.append(e.offset, e.position))
        })?;
        self.time_index.append_in_bulk(|index| {
            scan.time_entries
                .iter()
                .try_for_each(|e| index.maybe_append(e.timestamp, e.offset, false).map(|_| ()))
        })?;
        self.txn_index.append_all(&scan.aborted_txns)?;
        self.max_timestamp_so_far = scan.max_timestamp;
        let valid_bytes = scan.valid_bytes;
        let truncated_bytes = scan.truncated_bytes();
        let mut quarantine_file = None;
        if truncated_bytes > 0 {
            let path = quarantine_dir.join(quarantine_file_name(self.base_offset, valid_bytes));
            // Streamed, holes kept, under a name that does not read as a complete cut until the
            // copy is whole and durable (an `ENOSPC` or a crash leaves only `<name>.partial`).
            let partial = partial_path(&path);
            let storage = &self.ctx.storage;
            let copied =
                storage.copy_range(self.log.path(), valid_bytes, truncated_bytes, &partial)?;
            if copied != truncated_bytes {
                return Err(SegmentError::io(
                    self.log.path(),
                    "quarantine the cut bytes",
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file changed since it was scanned",
                    ),
                ));
            }
            storage.rename(&partial, &path)?;
            storage.sync_dir(quarantine_dir)?;
            quarantine_file = Some(path);
        }
        self.log.unmap();
        self.log.truncate_to(valid_bytes)?;
        self.force_final_time_index_entry()?;
        if !active {
            self.offset_index.trim_to_valid_size()?;
            self.time_index.trim_to_valid_size()?;
        }
        Ok(RecoveryOutcome {
            valid_bytes,
            truncated_bytes,
            batches: scan.batches,
            last_offset: scan.last_offset,
            max_timestamp: scan.max_timestamp,
            truncated_at: scan.truncated_at.clone(),
            quarantine_file,
        })
    }

    /// Kafka's `flush`: makes the `.log`, both mapped indexes and the transaction index durable.
    pub fn flush(&self) -> Result<()> {
        self.log.flush()?;
        self.offset_index.flush()?;
        self.time_index.flush()?;
        self.txn_index.flush()
    }

    /// Kafka's `close`: the final time-index entry, trimmed indexes, a flushed `.log`.
    pub fn close(self) -> Result<()> {
        self.close_with(true)
    }

    /// [`Self::close`]; without `sync` nothing is flushed (the caller makes the file system
    /// durable afterwards, see [`crate::io::Storage::sync_filesystem`]).
    pub(crate) fn close_with(mut self, sync: bool) -> Result<()> {
        if self.max_timestamp_so_far.timestamp >= 0 {
            self.force_final_time_index_entry()?;
        }
        if sync {
            self.log.flush()?;
            self.txn_index.flush()?;
        }
        let LogSegment {
            offset_index,
            time_index,
            ..
        } = self;
        offset_index.close()?;
        time_index.close()
    }

    /// Closes the segment's files to free their descriptors and maps, to be opened again when
    /// the log next needs the segment (see [`crate::log::LocalLog`]): the final time-index entry
    /// as [`Self::close`] writes it, indexes trimmed only where the log gave them room (an index
    /// the log neither created nor grew is left with the bytes it was found with), no flush
    /// (what was written is in the page cache; a later flush opens the files again).
    pub(crate) fn release(mut self) -> Result<()> {
        if self.max_timestamp_so_far.timestamp >= 0 {
            self.force_final_time_index_entry()?;
        }
        let LogSegment {
            offset_index,
            time_index,
            ..
        } = self;
        offset_index.close_without_room()?;
        time_index.close_without_room()
    }

    /// Deletes the segment's files: each is first renamed to `<name>.deleted` (what a loader
    /// cleans up if a crash interrupts), the directory synced, then the files removed. Mapped
    /// indexes are renamed on the real file system ([`index_storage`]).
    pub fn delete(self) -> Result<()> {
        let LogSegment {
            base_offset,
            dir,
            ctx,
            log,
            offset_index,
            time_index,
            txn_index,
            ..
        } = self;
        drop((log, offset_index, time_index, txn_index));
        let mut renamed = Vec::new();
        for kind in [FileKind::Log, FileKind::TxnIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if ctx.storage.exists(&p)? {
                let to = deleted_path(&p);
                ctx.storage.rename(&p, &to)?;
                renamed.push((true, to));
            }
        }
        let indexes = index_storage(ctx.storage.as_ref());
        for kind in [FileKind::Index, FileKind::TimeIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if indexes.exists(&p)? {
                let to = deleted_path(&p);
                indexes.rename(&p, &to)?;
                renamed.push((false, to));
            }
        }
        ctx.storage.sync_dir(&dir)?;
        for (through_storage, p) in renamed {
            if through_storage {
                ctx.storage.remove_file(&p)?;
            } else {
                indexes.remove_file(&p)?;
            }
        }
        Ok(())
    }
    /// Moves the segment's files (`.log`, `.index`, `.timeindex`, `.txnindex`, those that exist)
    /// into `to_dir` under their own names, syncing both directories. Nothing is deleted; used by
    /// a loader that sets segments aside instead of deleting them. The offset and time indexes go
    /// without the room the log gave them (trimmed to their entries if it grew them). Returns
    /// the new paths.
    pub fn move_to(self, to_dir: &Path) -> Result<Vec<PathBuf>> {
        let LogSegment {
            base_offset,
            dir,
            ctx,
            log,
            offset_index,
            time_index,
            txn_index,
            ..
        } = self;
        drop((log, txn_index));
        offset_index.close_without_room()?;
        time_index.close_without_room()?;
        ctx.storage.create_dir_all(to_dir)?;
        let mut moved = Vec::new();
        for kind in [FileKind::Log, FileKind::TxnIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if ctx.storage.exists(&p)? {
                let to = segment_file_path(to_dir, base_offset, kind);
                ctx.storage.rename(&p, &to)?;
                moved.push(to);
            }
        }
        let indexes = index_storage(ctx.storage.as_ref());
        for kind in [FileKind::Index, FileKind::TimeIndex] {
            let p = segment_file_path(&dir, base_offset, kind);
            if indexes.exists(&p)? {
                // Mapped indexes live on the real file system, whatever wraps it.
                indexes.create_dir_all(to_dir)?;
                let to = segment_file_path(to_dir, base_offset, kind);
                indexes.rename(&p, &to)?;
                moved.push(to);
            }
        }
        ctx.storage.sync_dir(to_dir)?;
        ctx.storage.sync_dir(&dir)?;
        Ok(moved)
    }
}

/// What the recovery scan of one `.log` found, without changing anything: the valid prefix,
/// where and why it ends, and everything [`LogSegment::install_scan`] writes (index entries by
/// the append rule, aborted transactions from the visitor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Size of the `.log` scanned.
    pub size: u64,
    /// Bytes of valid batches (the prefix recovery keeps).
    pub valid_bytes: u64,
    /// Number of valid batches.
    pub batches: u64,
    /// Last offset of the last valid batch, if any.
    pub last_offset: Option<i64>,
    /// Largest batch max timestamp and the last offset of its batch (`(-1, base)` if none).
    pub max_timestamp: TimestampOffset,
    /// The offset-index entries of the valid prefix.
    pub offset_entries: Vec<OffsetPosition>,
    /// The time-index entries of the valid prefix (without the final one a close adds).
    pub time_entries: Vec<TimestampOffset>,
    /// Where the valid prefix ends and why (`None`: every byte is valid).
    pub truncated_at: Option<(u64, FormatError)>,
    /// The aborted transactions the visitor returned, in order.
    pub aborted_txns: Vec<AbortedTxn>,
}

impl SegmentScan {
    /// Bytes recovery cuts (`size - valid_bytes`).
    pub fn truncated_bytes(&self) -> u64 {
        self.size.saturating_sub(self.valid_bytes)
    }
    /// The offset after the last valid batch (the base offset if there is none).
    pub fn next_offset(&self) -> i64 {
        self.last_offset
            .map_or(self.base_offset, |l| l.saturating_add(1))
    }
}

/// Recovery's scan of the bytes of one `.log` (`path` only names it in errors), read-only:
/// [`SegmentScanner`] over all of `bytes` at once.
///
/// Errors: an offset that does not fit the segment ([`SegmentError::OffsetOverflow`]), indexed
/// offsets that go backwards ([`SegmentError::InvalidOffset`]), more entries than the
/// configured index size holds ([`SegmentError::IndexFull`]), or the visitor's error.
pub fn scan_segment<E: From<SegmentError>>(
    path: &Path,
    bytes: &[u8],
    base_offset: i64,
    config: &SegmentConfig,
    visitor: &mut RecoveryVisitor<'_, E>,
) -> std::result::Result<SegmentScan, E> {
    let mut scanner = SegmentScanner::new(path, base_offset, bytes.len() as u64, config);
    scanner.scan(bytes, 0, visitor)?;
    Ok(scanner.finish())
}

/// Recovery's scan of one `.log`, fed window by window (so that a reader without a map needs
/// memory for one window, not the segment): framing and CRC-32C of every batch on every core,
/// region by region, while this thread applies the entries strictly in order (see
/// `record_format::scan`): offset range checks, the max timestamp, the offset and time index
/// entries by Kafka's append rule (`index.interval.bytes` from the config), and the visitor with
/// each valid v2 batch (the aborted transactions it pushes are collected). Stops at the first
/// invalid batch, or at an incomplete one at the end of the file.
#[derive(Debug)]
pub struct SegmentScanner {
    path: PathBuf,
    size: u64,
    interval: u64,
    region_bytes: usize,
    max_offset_entries: usize,
    max_time_entries: usize,
    last_time_ts: i64,
    last_index_entry: u64,
    chunk_checks: ChunkChecks,
    scan: SegmentScan,
}

/// Which thread of [`SegmentScanner::scan_file`] checks the CRCs of the batches that lie whole
/// in a chunk (those across a chunk boundary are always checked by the scanning thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkChecks {
    /// The reading thread while the scanning thread has a chunk to work on, else the scanning
    /// thread: the work balances between the two, whichever of reading and applying is slower.
    #[default]
    Balanced,
    /// Always the reading thread.
    Reader,
    /// Always the scanning thread.
    Scanner,
}

impl SegmentScanner {
    /// A scanner of the `.log` at `path` of `size` bytes, with base offset `base_offset`.
    pub fn new(path: &Path, base_offset: i64, size: u64, config: &SegmentConfig) -> Self {
        let interval = u64::from(config.index_interval_bytes);
        let max_offset_entries =
            usize::try_from(config.max_index_size / OFFSET_ENTRY_SIZE as u64).unwrap_or(usize::MAX);
        let max_time_entries =
            usize::try_from(config.max_index_size / TIME_ENTRY_SIZE as u64).unwrap_or(usize::MAX);
        // At most one entry per `interval` bytes: reserved once (address space only until the
        // entries are written) instead of grown, which copies them each time it doubles.
        let expected = usize::try_from(size / interval.max(1)).unwrap_or(usize::MAX);
        Self {
            path: path.to_path_buf(),
            size,
            interval,
            region_bytes: config.recovery_region_bytes,
            max_offset_entries,
            max_time_entries,
            last_time_ts: NO_TIMESTAMP,
            last_index_entry: 0,
            chunk_checks: ChunkChecks::default(),
            scan: SegmentScan {
                base_offset,
                size,
                valid_bytes: 0,
                batches: 0,
                last_offset: None,
                max_timestamp: TimestampOffset {
                    timestamp: NO_TIMESTAMP,
                    offset: base_offset,
                },
                offset_entries: Vec::with_capacity(expected.min(max_offset_entries)),
                time_entries: Vec::with_capacity(expected.min(max_time_entries)),
                truncated_at: None,
                aborted_txns: Vec::new(),
            },
        }
    }

    /// Which thread of [`Self::scan_file`] checks the CRCs of the batches whole in a chunk
    /// (default [`ChunkChecks::Balanced`]; the result is the same whichever does).
    #[must_use]
    pub fn chunk_checks(mut self, checks: ChunkChecks) -> Self {
        self.chunk_checks = checks;
        self
    }

    /// Scans `bytes`, the file's bytes from `position` (where the previous window asked to
    /// continue, 0 for the first). Returns where the next window must start — the first byte of
    /// a batch the window ends inside (the same position again: the window must grow), or the
    /// window's end — or `None` when the scan is over (an invalid batch, or the end of the
    /// file).
    pub fn scan<E: From<SegmentError>>(
        &mut self,
        bytes: &[u8],
        position: u64,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<Option<u64>, E> {
        let mut aborted = Vec::new();
        let regions = Regions::new(bytes, position, self.region_bytes);
        let (applied, framing_end) = regions.follow_chain(helper_threads(), |reader| {
            let mut apply = || -> std::result::Result<(), E> {
                while let Piece::Entries(entries) = reader.next_piece() {
                    for entry in entries.iter() {
                        self.apply_entry(entry, visitor, &mut aborted)?;
                    }
                    reader.recycle(entries);
                }
                Ok(())
            };
            (apply(), reader.end())
        });
        applied?;
        Ok(self.window_end(framing_end, bytes, position))
    }

    /// [`Self::scan`] on this thread alone, one entry after the other, without checking again
    /// the CRCs of `checked`: absolute positions of a chain of whole entries whose CRCs another
    /// thread checked in these same bytes ([`ChunkChain`]). They are trusted only once this walk's
    /// own chain arrives exactly at the range's start.
    fn scan_here<E: From<SegmentError>>(
        &mut self,
        bytes: &[u8],
        position: u64,
        visitor: &mut RecoveryVisitor<'_, E>,
        checked: Option<std::ops::Range<u64>>,
    ) -> std::result::Result<Option<u64>, E> {
        let mut aborted = Vec::new();
        let mut it = Batches::new(bytes, position).validate_crc(true);
        let mut trusted = false;
        loop {
            if let Some(c) = &checked {
                let at = it.valid_prefix_end();
                trusted |= at == c.start;
                it.set_validate_crc(!(trusted && at < c.end));
            }
            match it.next() {
                Some(Ok(entry)) => self.apply_entry(&entry, visitor, &mut aborted)?,
                Some(Err(_)) | None => break,
            }
        }
        Ok(self.window_end(it.stopped_at().cloned(), bytes, position))
    }

    /// Applies one valid entry, in order: its offset range, the max timestamp, the index
    /// entries by the append rule, the counts, and the visitor (v2 batches).
    fn apply_entry<E: From<SegmentError>>(
        &mut self,
        entry: &LogEntry<'_>,
        visitor: &mut RecoveryVisitor<'_, E>,
        aborted: &mut Vec<AbortedTxn>,
    ) -> std::result::Result<(), E> {
        let base_offset = self.scan.base_offset;
        let last = entry.last_offset();
        let fits = last
            .checked_sub(base_offset)
            .is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r));
        if !fits {
            return Err(SegmentError::OffsetOverflow {
                path: self.path.clone(),
                offset: last,
                base_offset,
            }
            .into());
        }
        let batch_max_ts = match entry {
            LogEntry::V2(b) => b.max_timestamp(),
            LogEntry::Legacy(_) => headers_in(entry.as_bytes(), entry.position())
                .next()
                .map_or(NO_TIMESTAMP, |h| h.max_timestamp),
        };
        let s = &mut self.scan;
        if batch_max_ts > s.max_timestamp.timestamp {
            s.max_timestamp = TimestampOffset {
                timestamp: batch_max_ts,
                offset: last,
            };
        }
        if s.valid_bytes - self.last_index_entry > self.interval {
            self.index_entries(last)?;
        }
        let s = &mut self.scan;
        s.valid_bytes += entry.size_in_bytes() as u64;
        s.batches += 1;
        s.last_offset = Some(last);
        if let LogEntry::V2(batch) = entry {
            aborted.clear();
            visitor(batch, aborted)?;
            s.aborted_txns.append(aborted);
        }
        Ok(())
    }

    /// Adds the offset-index entry (and the time-index entry if the max timestamp grew) at the
    /// current valid end for a batch ending at `last`, with `OffsetIndex::append`'s and
    /// `TimeIndex::maybe_append`'s checks, so that the plan fails where the install would.
    fn index_entries(&mut self, last: i64) -> Result<()> {
        let s = &mut self.scan;
        if s.offset_entries.len() >= self.max_offset_entries {
            return Err(SegmentError::IndexFull {
                path: self.path.with_extension("index"),
                entries: s.offset_entries.len(),
            });
        }
        if let Some(prev) = s.offset_entries.last() {
            if last <= prev.offset {
                return Err(SegmentError::InvalidOffset {
                    path: self.path.with_extension("index"),
                    offset: last,
                    last_offset: prev.offset,
                });
            }
        }
        s.offset_entries.push(OffsetPosition {
            offset: last,
            position: FilePosition(s.valid_bytes as u32),
        });
        // TimeIndex::maybe_append: only a larger timestamp is written.
        if s.max_timestamp.timestamp > self.last_time_ts {
            if s.time_entries.len() + 1 >= self.max_time_entries {
                return Err(SegmentError::IndexFull {
                    path: self.path.with_extension("timeindex"),
                    entries: s.time_entries.len(),
                });
            }
            s.time_entries.push(s.max_timestamp);
            self.last_time_ts = s.max_timestamp.timestamp;
        }
        self.last_index_entry = s.valid_bytes;
        Ok(())
    }

    /// Where the next window starts after the window `bytes` read at `position` ended with
    /// `framing_end` (see [`Self::scan`]); records where and why the valid prefix ends.
    fn window_end(
        &mut self,
        framing_end: Option<IterEnd>,
        bytes: &[u8],
        position: u64,
    ) -> Option<u64> {
        let window_end = position + bytes.len() as u64;
        let at_file_end = window_end >= self.size;
        let s = &mut self.scan;
        match framing_end {
            Some(IterEnd::Error(e)) => {
                s.truncated_at = Some((e.position, e));
                None
            }
            Some(IterEnd::IncompleteTrailing { position: at, .. }) if !at_file_end => Some(at),
            Some(IterEnd::IncompleteTrailing {
                position: at,
                bytes: n,
            }) => {
                let rest = bytes
                    .get(usize::try_from(at - position).unwrap_or(usize::MAX)..)
                    .unwrap_or_default();
                s.truncated_at = Some((at, incomplete_batch_error(rest, at, n)));
                None
            }
            _ if at_file_end => None,
            _ => Some(window_end),
        }
    }

    /// The whole scan of the file behind `handle` (of the size given to [`Self::new`]), read
    /// through the file handle instead of a map. Safe without the directory lock (a map of a file
    /// a broker truncates raises `SIGBUS` at the next access), and faster than a fresh map where
    /// the page cache holds the file in small pages, as a writer leaves it: there each page of a
    /// map costs a fault and its unmapping more than copying it (docs/benchmarks.md).
    ///
    /// The file is read in chunks of [`READ_CHUNK_BYTES`] by a helper thread, a few chunks
    /// ahead of this thread, which frames and applies each chunk while it is still in the cache
    /// the read left it in (a copy into a buffer larger than the CPU's caches costs as much again
    /// as the copy). The CRCs of the batches that lie whole in a chunk are checked by the helper
    /// when this thread has another chunk to work on ([`ChunkChain`]), else here; every other
    /// CRC is checked here. A batch a chunk ends inside is carried into the next chunk's
    /// headroom, or — longer than that — gathered until it is whole. Memory: a few chunks and the
    /// longest batch.
    pub fn scan_file<E: From<SegmentError>>(
        &mut self,
        handle: &dyn FileHandle,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        if helper_threads() == 0 || self.size <= READ_CHUNK_BYTES as u64 {
            return self.scan_file_here(handle, visitor);
        }
        let (size, checks) = (self.size, self.chunk_checks);
        let (free_tx, free_rx) = mpsc::sync_channel::<ReadBuf>(READ_AHEAD_CHUNKS);
        let (full_tx, full_rx) = mpsc::sync_channel::<Result<ReadChunk>>(READ_AHEAD_CHUNKS);
        // Chunks sent and not yet taken by the scan.
        let queued = &AtomicUsize::new(0);
        for _ in 0..READ_AHEAD_CHUNKS {
            // Cannot fail: the channel holds as many buffers and its receiver is alive.
            let _ = free_tx.send(ReadBuf::zeroed(CHUNK_HEADROOM + READ_CHUNK_BYTES));
        }
        std::thread::scope(|scope| {
            let reader = std::thread::Builder::new()
                .name("seglog-read".into())
                .spawn_scoped(scope, move || {
                    let (mut at, mut chain) = (0u64, ChunkChain::new());
                    while at < size {
                        // The scan is over (or failed) once it dropped its ends of the channels.
                        let Ok(mut buf) = recv_spinning(&free_rx) else {
                            return;
                        };
                        let n = (size - at).min(READ_CHUNK_BYTES as u64);
                        let end = CHUNK_HEADROOM + n as usize;
                        let read = buf
                            .as_mut_slice()
                            .get_mut(CHUNK_HEADROOM..end)
                            .map_or(Ok(()), |b| handle.read_exact_at(at, b));
                        let chunk = read.map(|()| {
                            let data = buf.as_slice().get(CHUNK_HEADROOM..end).unwrap_or_default();
                            // Balanced: the CRCs are checked here only while the scan has a
                            // chunk to work on; a scan waiting for this one gets it at once and
                            // checks them itself.
                            let here = match checks {
                                ChunkChecks::Balanced => queued.load(Ordering::Acquire) > 0,
                                ChunkChecks::Reader => true,
                                ChunkChecks::Scanner => false,
                            };
                            let checked = if here {
                                chain.check(at, data)
                            } else {
                                chain.follow(at, data);
                                None
                            };
                            ReadChunk { at, buf, checked }
                        });
                        queued.fetch_add(1, Ordering::AcqRel);
                        if full_tx.send(chunk).is_err() {
                            return;
                        }
                        at += n;
                    }
                });
            if reader.is_err() {
                drop((free_tx, full_rx));
                return self.scan_file_here(handle, visitor);
            }
            let scanned = self.scan_chunks(&full_rx, &free_tx, queued, visitor);
            // Ends the reader: it stops at its next send or wait for a buffer.
            drop((free_tx, full_rx));
            scanned
        })
    }

    /// The consuming side of [`Self::scan_file`]: the chunks in file order.
    fn scan_chunks<E: From<SegmentError>>(
        &mut self,
        full: &mpsc::Receiver<Result<ReadChunk>>,
        free: &mpsc::SyncSender<ReadBuf>,
        queued: &AtomicUsize,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        // The bytes from `position` up to the next chunk, not yet scanned.
        let (mut position, mut carry) = (0u64, Vec::new());
        // Ends when the reader has sent the last chunk: the scan of that one returns `None`.
        while let Ok(read) = recv_spinning(full) {
            queued.fetch_sub(1, Ordering::AcqRel);
            let ReadChunk {
                at,
                mut buf,
                checked,
            } = read?;
            let n = usize::try_from((self.size - at).min(READ_CHUNK_BYTES as u64))
                .unwrap_or(READ_CHUNK_BYTES);
            let next = if carry.len() <= CHUNK_HEADROOM {
                let from = CHUNK_HEADROOM - carry.len();
                if let Some(head) = buf.as_mut_slice().get_mut(from..CHUNK_HEADROOM) {
                    head.copy_from_slice(&carry);
                }
                let bytes = buf
                    .as_slice()
                    .get(from..CHUNK_HEADROOM + n)
                    .unwrap_or_default();
                let next = self.scan_here(bytes, position, visitor, checked)?;
                carry.clear();
                if let Some(next) = next {
                    let rest = usize::try_from(next - position).unwrap_or(usize::MAX);
                    carry.extend_from_slice(bytes.get(rest..).unwrap_or_default());
                }
                next
            } else {
                carry.extend_from_slice(
                    buf.as_slice()
                        .get(CHUNK_HEADROOM..CHUNK_HEADROOM + n)
                        .unwrap_or_default(),
                );
                // Other bytes than the ones the reader checked: every CRC is checked here.
                let next = self.scan_here(&carry, position, visitor, None)?;
                if let Some(next) = next {
                    let rest = usize::try_from(next - position).unwrap_or(usize::MAX);
                    carry.drain(..rest.min(carry.len()));
                }
                next
            };
            match next {
                Some(next) => position = next,
                None => return Ok(()),
            }
            // The reader may be done already: then the buffer is simply dropped.
            let _ = free.send(buf);
        }
        Ok(())
    }

    /// [`Self::scan_file`] on this thread alone: one window of [`SCAN_WINDOW_BYTES`] at a time
    /// (grown for a longer batch), each checked on the helper threads.
    fn scan_file_here<E: From<SegmentError>>(
        &mut self,
        handle: &dyn FileHandle,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        let size = self.size;
        let mut buf = ReadBuf::default();
        let (mut position, mut window) = (0u64, SCAN_WINDOW_BYTES);
        loop {
            let len = window.min(size.saturating_sub(position));
            buf.set_len(usize::try_from(len).unwrap_or(usize::MAX));
            handle.read_exact_at(position, buf.as_mut_slice())?;
            match self.scan(buf.as_slice(), position, visitor)? {
                None => return Ok(()),
                Some(next) if next == position => window = window.saturating_mul(2),
                Some(next) => {
                    position = next;
                    window = SCAN_WINDOW_BYTES;
                }
            }
        }
    }

    /// The scan so far (the whole scan once [`Self::scan`] returned `None`).
    pub fn finish(self) -> SegmentScan {
        self.scan
    }
}

fn deleted_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(DELETED_FILE_SUFFIX);
    PathBuf::from(s)
}

/// Removes the file `p` of `storage` if there is one (a lookup first where the storage is not the
/// real file system: a simulated removal of nothing would still be an I/O point).
fn remove_file_if_exists(storage: &dyn Storage, p: &Path) -> Result<()> {
    if !storage.supports_mmap() && !storage.exists(p)? {
        return Ok(());
    }
    match storage.remove_file(p) {
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => Ok(()),
        r => r,
    }
}

/// Checks that `records` is a sequence of whole batches with readable headers.
fn check_framing(path: &Path, records: &[u8], position: u64) -> Result<()> {
    let mut it = Batches::new(records, position);
    for e in &mut it {
        if let Err(error) = e {
            return Err(SegmentError::Format {
                path: path.to_path_buf(),
                error,
            });
        }
    }
    match it.incomplete_error() {
        Some(error) => Err(SegmentError::Format {
            path: path.to_path_buf(),
            error,
        }),
        None => Ok(()),
    }
}

/// Headers of the (already checked) batches in `records`, positions starting at `start`.
pub(crate) fn headers_in(
    records: &[u8],
    start: u64,
) -> impl Iterator<Item = crate::file_records::BatchHeader> + '_ {
    Batches::new(records, start).map_while(|e| {
        let e = e.ok()?;
        let (max_timestamp, partition_leader_epoch, base_offset) = match &e {
            LogEntry::V2(b) => (
                b.max_timestamp(),
                b.partition_leader_epoch(),
                b.base_offset(),
            ),
            LogEntry::Legacy(l) => {
                let ts = if l.magic() == 1 {
                    l.as_bytes()
                        .get(18..26)
                        .and_then(|s| <[u8; 8]>::try_from(s).ok())
                        .map_or(NO_TIMESTAMP, i64::from_be_bytes)
                } else {
                    NO_TIMESTAMP
                };
                (ts, -1, l.offset())
            }
        };
        Some(crate::file_records::BatchHeader {
            position: e.position(),
            size: e.size_in_bytes() as u32,
            magic: e.magic(),
            base_offset,
            last_offset: e.last_offset(),
            max_timestamp,
            partition_leader_epoch,
        })
    })
}

/// A chunk [`SegmentScanner::scan_file`]'s reader sends: the file's bytes from `at` in `buf`
/// after [`CHUNK_HEADROOM`], and the entries in them whose CRCs it checked.
struct ReadChunk {
    at: u64,
    buf: ReadBuf,
    checked: Option<std::ops::Range<u64>>,
}

/// Bytes [`SegmentScanner::scan_file`] reads at a time: small enough that a chunk is still in
/// the core's cache when it is checked.
pub const READ_CHUNK_BYTES: usize = 1 << 20;

/// Room before each chunk for the end of a batch the previous chunk ended inside: a whole number
/// of pages, so that the chunk the reader fills starts on one (see [`ReadBuf`]).
const CHUNK_HEADROOM: usize = 64 << 10;
const _: () = assert!(CHUNK_HEADROOM.is_multiple_of(ReadBuf::ALIGN));

/// Chunks read ahead of the scan.
const READ_AHEAD_CHUNKS: usize = 4;

/// The window of [`SegmentScanner::scan_file`] on one thread: read, scanned, reused.
pub const SCAN_WINDOW_BYTES: u64 = 32 << 20;

/// How long a thread of [`SegmentScanner::scan_file`] spins waiting for the other before it
/// parks: a little more than the time a chunk takes to check. Waking a parked thread costs the
/// waker a system call and both cores a context switch, each chunk (measured on the 1 GiB
/// segment: 116 ms without spinning, 107 ms with).
const SPIN_BEFORE_PARKING: std::time::Duration = std::time::Duration::from_micros(200);

/// The next item of `rx`: spinning for at most [`SPIN_BEFORE_PARKING`], then parked.
fn recv_spinning<T>(rx: &mpsc::Receiver<T>) -> std::result::Result<T, mpsc::RecvError> {
    let start = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Ok(item) => return Ok(item),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvError),
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN_BEFORE_PARKING => {
                std::hint::spin_loop();
            }
            Err(mpsc::TryRecvError::Empty) => return rx.recv(),
        }
    }
}

/// Helper threads for recovery's CRC checks: every other core, at most three.
fn helper_threads() -> usize {
    // Asked once per process: `available_parallelism` reads the cgroup files each time.
    static HELPERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *HELPERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .min(3)
    })
}
