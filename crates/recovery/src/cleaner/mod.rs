//! Log compaction as Kafka's log cleaner does it (`Cleaner`, `LogCleanerManager.cleanableOffsets`,
//! `MemoryRecords.filterTo`), byte for byte for uncompressed batches.
//!
//! One pass over a closed partition directory, through the [`Storage`] seam:
//! 1. [`cleanable_offsets`]: the dirty section runs from the checkpointed first dirty offset to
//!    the first uncleanable offset (the last stable offset, the active segment, the first
//!    segment younger than `min.compaction.lag.ms`).
//! 2. The offset map ([`OffsetMap`], Kafka's sizing) is built over the dirty section, newest
//!    offset per key, skipping aborted transactions; it stops where it is full (at
//!    `slots * log.cleaner.io.buffer.load.factor` keys) and the pass ends there: the rest is
//!    cleaned by the next pass, as Kafka splits it.
//! 3. Every segment below the map's end is rewritten, in groups that fit `segment.bytes`,
//!    `segment.index.bytes` and 32-bit relative offsets, into `<base>.log.cleaned` (with its
//!    `.index`, `.timeindex`, `.txnindex`), then swapped in: `.cleaned` → `.swap` (the commit
//!    point), the old segments removed, `.swap` → live name. The loader finishes a swap a crash
//!    interrupted and removes `.cleaned` leftovers.
//! 4. `cleaner-offset-checkpoint` in the log directory records where the next pass starts.
//!
//! [`plan`] runs steps 1–3 without writing anything (what each group would keep and remove).

pub mod md5;
pub mod offset_map;
pub mod schedule;
pub mod txn;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use record_format::wire::{LOG_OVERHEAD, RECORD_BATCH_OVERHEAD};
use record_format::{
    ControlRecordKey, ControlRecordType, DecodeLimits, FormatError, Header, RecordBatch,
    RecordBatchBuilder, TimestampType,
};
use segment_store::checkpoint::{OffsetCheckpointFile, TopicPartition};
use segment_store::file_name::{
    file_name, parse_file_name, FileKind, TempSuffix, CLEANER_OFFSET_CHECKPOINT_FILE,
};
use segment_store::io::{FileHandle, OpenMode, Storage};
use segment_store::ReadOnlyBytes;
use segment_store::{AbortedTxn, SegmentError};

pub use offset_map::OffsetMap;
pub use txn::CleanedTransactionMetadata;

/// The cleaner's settings, with Kafka's names and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.dedupe.buffer.size` (128 MiB), shared by the cleaner threads.
    pub dedupe_buffer_size: u64,
    /// `log.cleaner.threads` (1): the offset map of one thread gets the buffer over this.
    pub threads: u32,
    /// `log.cleaner.io.buffer.load.factor` (0.9): how full the offset map is filled.
    pub io_buffer_load_factor: f64,
    /// `log.cleaner.io.buffer.size` (512 KiB): the read window.
    pub io_buffer_size: usize,
    /// `max.message.bytes` (1048588): the largest batch read.
    pub max_message_bytes: usize,
    /// `segment.bytes` (1 GiB): the largest group of segments cleaned into one.
    pub segment_bytes: u64,
    /// `segment.index.bytes` (10 MiB): the largest index of a group.
    pub max_index_size: u64,
    /// `index.interval.bytes` (4096).
    pub index_interval_bytes: u32,
    /// `delete.retention.ms` (1 day): how long tombstones and markers of empty transactions
    /// stay after the cleaning that set their delete horizon.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms` (0).
    pub min_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio` (0.5): a log is due when its cleanable bytes are more than
    /// this share of its bytes ([`schedule::due`]).
    pub min_cleanable_dirty_ratio: f64,
    /// `max.compaction.lag.ms` (`i64::MAX`, never): a log whose oldest dirty segment's first
    /// batch is older than this is due whatever its ratio.
    pub max_compaction_lag_ms: i64,
    /// `log.cleaner.io.max.bytes.per.second` (unlimited): the rate of the bytes a pass reads
    /// and writes ([`schedule::Throttler`]).
    pub io_max_bytes_per_second: f64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_size: 128 * 1024 * 1024,
            threads: 1,
            io_buffer_load_factor: 0.9,
            io_buffer_size: 512 * 1024,
            max_message_bytes: 1024 * 1024 + 12,
            segment_bytes: 1024 * 1024 * 1024,
            max_index_size: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            min_cleanable_dirty_ratio: 0.5,
            max_compaction_lag_ms: i64::MAX,
            io_max_bytes_per_second: f64::MAX,
        }
    }
}

/// Kafka's `LastRecord`: what producer state says of a producer's last write. The batch holding
/// it is kept (emptied if need be) so that the producer's sequence and epoch survive cleaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRecord {
    /// Last offset of its last data batch, if producer state has one.
    pub last_data_offset: Option<i64>,
    /// Its epoch.
    pub producer_epoch: i16,
}

/// What a cleaning pass needs to know of the partition besides its files.
#[derive(Debug, Clone)]
pub struct LogToClean {
    /// The partition directory.
    pub dir: PathBuf,
    /// The log start offset.
    pub log_start_offset: i64,
    /// The last stable offset (first offset of the oldest open transaction, else the high
    /// watermark).
    pub last_stable_offset: i64,
    /// The last record of each producer producer state holds.
    pub last_records: BTreeMap<i64, LastRecord>,
    /// The cleaner's clock (delete horizons, compaction lag).
    pub now_ms: i64,
}

/// Errors of a cleaning pass.
#[derive(Debug)]
pub enum CleanerError {
    /// A file could not be read or written.
    Segment(SegmentError),
    /// A batch could not be read.
    Format {
        /// The segment.
        path: PathBuf,
        /// The problem, with its position.
        source: FormatError,
    },
    /// The log holds what the cleaner does not clean (a legacy batch, a batch larger than
    /// `max.message.bytes`, a broken frame).
    Unsupported {
        /// The segment.
        path: PathBuf,
        /// Position in it.
        position: u64,
        /// What was found.
        reason: String,
    },
}

impl fmt::Display for CleanerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CleanerError::Segment(e) => write!(f, "{e}"),
            CleanerError::Format { path, source } => write!(f, "{}: {source}", path.display()),
            CleanerError::Unsupported {
                path,
                position,
                reason,
            } => write!(
                f,
                "{} at position {position}: cannot clean: {reason}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for CleanerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CleanerError::Segment(e) => Some(e),
            CleanerError::Format { source, .. } => Some(source),
            CleanerError::Unsupported { .. } => None,
        }
    }
}

impl From<SegmentError> for CleanerError {
    fn from(e: SegmentError) -> Self {
        CleanerError::Segment(e)
    }
}

type Result<T> = std::result::Result<T, CleanerError>;

/// A segment as the cleaner sees it: base offset, file sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFiles {
    /// Base offset.
    pub base_offset: i64,
    /// `.log` size.
    pub log_size: u64,
    /// `.index` size.
    pub index_size: u64,
    /// `.timeindex` size.
    pub time_index_size: u64,
}

/// The live segments of `dir`, by base offset.
pub fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegmentFiles>> {
    let mut out = Vec::new();
    for name in storage.list_dir(dir)? {
        let Ok(p) = parse_file_name(&name) else {
            continue;
        };
        if p.kind != FileKind::Log || p.temp.is_some() {
            continue;
        }
        let size = |kind| -> Result<u64> {
            let path = dir.join(file_name(p.base_offset, kind, None));
            if storage.exists(&path)? {
                Ok(storage.open(&path, OpenMode::Read)?.len()?)
            } else {
                Ok(0)
            }
        };
        out.push(SegmentFiles {
            base_offset: p.base_offset,
            log_size: size(FileKind::Log)?,
            index_size: size(FileKind::Index)?,
            time_index_size: size(FileKind::TimeIndex)?,
        });
    }
    out.sort_by_key(|s| s.base_offset);
    Ok(out)
}

/// Kafka's `LogCleanerManager.cleanableOffsets`: `(first dirty offset, first uncleanable
/// offset)`. `checkpointed` is the partition's `cleaner-offset-checkpoint` entry; one below the
/// log start or past the log end is reset to the log start. `largest_timestamps` gives each
/// non-active segment's largest timestamp (for `min.compaction.lag.ms`).
pub fn cleanable_offsets(
    log: &LogToClean,
    segments: &[SegmentFiles],
    log_end_offset: i64,
    checkpointed: Option<i64>,
    min_compaction_lag_ms: i64,
    mut largest_timestamp: impl FnMut(&SegmentFiles) -> Result<i64>,
) -> Result<(i64, i64)> {
    let first_dirty = first_dirty_offset(checkpointed, log.log_start_offset, log_end_offset).0;
    let active = segments.last().map_or(log_end_offset, |s| s.base_offset);
    let mut uncleanable = log.last_stable_offset.min(active);
    if min_compaction_lag_ms > 0 {
        let n = segments.len().saturating_sub(1);
        // Kafka's nonActiveLogSegmentsFrom(firstDirty): from the segment holding it.
        let from = segments
            .iter()
            .take(n)
            .rposition(|s| s.base_offset <= first_dirty)
            .unwrap_or(0);
        for s in segments.iter().take(n).skip(from) {
            if largest_timestamp(s)? > log.now_ms.saturating_sub(min_compaction_lag_ms) {
                uncleanable = uncleanable.min(s.base_offset);
                break;
            }
        }
    }
    Ok((first_dirty, first_dirty.max(uncleanable)))
}

/// Where a pass starts (Kafka's `cleanableOffsets`): the checkpointed offset, or the log start
/// when there is none or the checkpointed one is below the log start or past the log end (Kafka
/// logs "Resetting first dirty offset"); the second value says whether a checkpointed offset was
/// reset so. `verify` reports such a reset.
pub fn first_dirty_offset(
    checkpointed: Option<i64>,
    log_start_offset: i64,
    log_end_offset: i64,
) -> (i64, bool) {
    match checkpointed {
        None => (log_start_offset, false),
        Some(c) if c < log_start_offset || c > log_end_offset => (log_start_offset, true),
        Some(c) => (c, false),
    }
}

/// Kafka's `LogToClean.firstUncleanableOffset` (`calculateCleanableBytes`): the base offset of
/// the segment holding `uncleanable`, the active segment's if none before it does. A pass never
/// maps or cleans part of a segment the range ends in.
pub fn first_uncleanable_segment(segments: &[SegmentFiles], uncleanable: i64) -> i64 {
    let Some(active) = segments.last() else {
        return uncleanable;
    };
    if uncleanable >= active.base_offset {
        return active.base_offset;
    }
    segments
        .iter()
        .rev()
        .find(|s| s.base_offset <= uncleanable)
        .or(segments.first())
        .map_or(uncleanable, |s| s.base_offset)
}

/// The header of one batch as the cleaner reads it.
#[derive(Debug, Clone, Copy)]
struct Head {
    last_offset: i64,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    transactional: bool,
    control: bool,
}

/// Reads the batches of a `.log` through a window of at least `io_buffer_size` bytes (grown to
/// the batch size, up to `max_message_bytes`), never the whole file.
struct BatchReader<'a> {
    handle: Box<dyn FileHandle>,
    path: PathBuf,
    size: u64,
    position: u64,
    /// The read buffer: grown, never shrunk or zeroed again; `window_len` bytes of it are the
    /// file's from `window_start`.
    window: Vec<u8>,
    window_len: usize,
    window_start: u64,
    /// The whole file, mapped read-only, when the storage can map it (a [`GuardedMap`]: a
    /// truncation under it reads zeros and is reported), instead of the window; the pages
    /// behind the reader are let go as it moves on, so that it holds a window of the file.
    ///
    /// [`GuardedMap`]: segment_store::mmap::GuardedMap
    mapped: Option<ReadOnlyBytes>,
    released: u64,
    config: &'a CleanerConfig,
}

impl<'a> BatchReader<'a> {
    fn open(storage: &dyn Storage, path: &Path, config: &'a CleanerConfig) -> Result<Self> {
        let handle = storage.open(path, OpenMode::Read)?;
        let size = handle.len()?;
        // Where no map can be made the file is read through the window.
        let mapped = ReadOnlyBytes::map_guarded(storage, path, size)
            .unwrap_or(None)
            .filter(|m| m.bytes().len() as u64 == size);
        Ok(BatchReader {
            handle,
            path: path.to_path_buf(),
            size,
            position: 0,
            window: Vec::new(),
            window_len: 0,
            window_start: 0,
            mapped,
            released: 0,
            config,
        })
    }

    fn unsupported(&self, reason: impl Into<String>) -> CleanerError {
        CleanerError::Unsupported {
            path: self.path.clone(),
            position: self.position,
            reason: reason.into(),
        }
    }

    /// The window's bytes read from the file.
    fn valid(&self) -> &[u8] {
        match &self.mapped {
            Some(m) => m.bytes(),
            None => self.window.get(..self.window_len).unwrap_or(&[]),
        }
    }

    /// An error if the mapped file was truncated while it was read.
    fn check_mapped(&self) -> Result<()> {
        match &self.mapped {
            Some(m) if m.was_truncated() => {
                Err(self.unsupported("the segment was truncated while it was read"))
            }
            _ => Ok(()),
        }
    }

    /// Ensures bytes `[position, position + len)` are in the window.
    fn fill(&mut self, len: u64) -> Result<()> {
        let end = self.position + len;
        if self.mapped.is_some() {
            // The whole file is there; let go of what lies a read buffer behind.
            if let Some(m) = &self.mapped {
                let behind = self
                    .position
                    .saturating_sub(self.config.io_buffer_size as u64);
                if behind >= self.released + (1 << 20) {
                    m.release(self.released as usize, behind as usize);
                    self.released = behind;
                }
            }
            if end > self.size {
                return Err(self.unsupported("the segment ends inside a batch"));
            }
            return Ok(());
        }
        let window_end = self.window_start + self.window_len as u64;
        if self.position >= self.window_start && end <= window_end {
            return Ok(());
        }
        let want = (self.config.io_buffer_size as u64)
            .max(len)
            .min(self.size - self.position);
        let want = usize::try_from(want).map_err(|_| self.unsupported("window too large"))?;
        if self.window.len() < want {
            self.window.resize(want, 0);
        }
        self.window_len = 0;
        let buf = self
            .window
            .get_mut(..want)
            .ok_or_else(|| CleanerError::Unsupported {
                path: self.path.clone(),
                position: self.position,
                reason: "window too large".into(),
            })?;
        let n = self.handle.read_at(self.position, buf)?.min(want);
        self.window_len = n;
        self.window_start = self.position;
        if (n as u64) < len {
            return Err(self.unsupported("the segment ends inside a batch"));
        }
        Ok(())
    }

    /// The next batch and its position, `None` at the end of the file.
    fn next_batch(&mut self) -> Result<Option<(u64, RecordBatch<'_>)>> {
        if self.position >= self.size {
            self.check_mapped()?;
            return Ok(None);
        }
        if self.size - self.position < LOG_OVERHEAD as u64 {
            return Err(self.unsupported("a partial batch header at the end of the segment"));
        }
        self.fill(LOG_OVERHEAD as u64)?;
        let at = (self.position - self.window_start) as usize;
        let len_bytes: [u8; 4] = self
            .valid()
            .get(at + 8..at + 12)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| self.unsupported("short read"))?;
        let length = i32::from_be_bytes(len_bytes);
        let total = u64::try_from(length)
            .ok()
            .map(|l| l + LOG_OVERHEAD as u64)
            .filter(|t| *t >= RECORD_BATCH_OVERHEAD as u64)
            .ok_or_else(|| self.unsupported(format!("batch length {length}")))?;
        if total
            > self
                .config
                .max_message_bytes
                .max(self.config.io_buffer_size) as u64
                + 12
        {
            return Err(
                self.unsupported(format!("a batch of {total} bytes, above max.message.bytes"))
            );
        }
        self.fill(total)?;
        let position = self.position;
        self.position += total;
        let at = (position - self.window_start) as usize;
        let bytes =
            self.valid()
                .get(at..at + total as usize)
                .ok_or_else(|| CleanerError::Unsupported {
                    path: self.path.clone(),
                    position,
                    reason: "short read".into(),
                })?;
        let batch = RecordBatch::new(bytes, position).map_err(|source| CleanerError::Format {
            path: self.path.clone(),
            source,
        })?;
        if batch.magic() < 2 {
            return Err(CleanerError::Unsupported {
                path: self.path.clone(),
                position,
                reason: format!("a magic v{} batch (only v2 is cleaned)", batch.magic()),
            });
        }
        if let Err(source) = batch.validate() {
            self.check_mapped()?;
            return Err(CleanerError::Format {
                path: self.path.clone(),
                source,
            });
        }
        Ok(Some((position, batch)))
    }
}

fn head(b: &RecordBatch<'_>) -> Head {
    Head {
        last_offset: b.last_offset(),
        max_timestamp: b.max_timestamp(),
        producer_id: b.producer_id(),
        producer_epoch: b.producer_epoch(),
        transactional: b.is_transactional(),
        control: b.is_control(),
    }
}

fn format_err(path: &Path, source: FormatError) -> CleanerError {
    CleanerError::Format {
        path: path.to_path_buf(),
        source,
    }
}

/// The type of a control batch's first record (`None` when it has none).
fn first_control_type(path: &Path, b: &RecordBatch<'_>) -> Result<Option<ControlRecordType>> {
    let records = b
        .records(&DecodeLimits::default())
        .map_err(|e| format_err(path, e))?;
    let mut it = records.iter();
    match it.next() {
        None => Ok(None),
        Some(r) => {
            let r = r.map_err(|e| format_err(path, e))?;
            let key = r.key().unwrap_or(&[]);
            let (_, t) =
                ControlRecordKey::parse(key, r.key_position()).map_err(|e| format_err(path, e))?;
            Ok(Some(t))
        }
    }
}

/// All aborted transactions of the `.txnindex` files, per segment base offset.
fn read_txn_indexes(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[SegmentFiles],
) -> Result<BTreeMap<i64, Vec<AbortedTxn>>> {
    use segment_store::index::txn::ENTRY_SIZE;
    let mut out = BTreeMap::new();
    for s in segments {
        let path = dir.join(file_name(s.base_offset, FileKind::TxnIndex, None));
        if !storage.exists(&path)? {
            continue;
        }
        let bytes = storage.read_capped(&path, 1 << 30)?;
        let txns = bytes
            .chunks_exact(ENTRY_SIZE)
            .filter_map(|c| <&[u8; ENTRY_SIZE]>::try_from(c).ok())
            .map(AbortedTxn::from_bytes)
            .collect();
        out.insert(s.base_offset, txns);
    }
    Ok(out)
}

/// Kafka's `collectAbortedTransactions(start, upper)`: from the segment holding `start` on, the
/// aborted transactions overlapping `[start, upper)`, stopping after the first whose last stable
/// offset reaches `upper`.
fn collect_aborted(
    txns: &BTreeMap<i64, Vec<AbortedTxn>>,
    start: i64,
    upper: i64,
) -> Vec<AbortedTxn> {
    let from = txns
        .range(..=start)
        .next_back()
        .map_or(i64::MIN, |(b, _)| *b);
    let mut out = Vec::new();
    for list in txns.range(from..).map(|(_, l)| l) {
        for t in list {
            if t.last_offset >= start && t.first_offset < upper {
                out.push(*t);
            }
            if t.last_stable_offset >= upper {
                return out;
            }
        }
    }
    out
}

fn segment_path(dir: &Path, base: i64, kind: FileKind, temp: Option<TempSuffix>) -> PathBuf {
    dir.join(file_name(base, kind, temp))
}

/// Kafka's `Cleaner.buildOffsetMap` over `[start, end)`: returns whether the map filled up.
#[allow(clippy::too_many_arguments)]
fn build_offset_map(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[SegmentFiles],
    txns: &BTreeMap<i64, Vec<AbortedTxn>>,
    start: i64,
    end: i64,
    map: &mut OffsetMap,
    config: &CleanerConfig,
) -> Result<bool> {
    map.clear();
    let dirty: Vec<&SegmentFiles> = segments_in(segments, start, end);
    let mut meta = CleanedTransactionMetadata::default();
    meta.add_aborted_transactions(collect_aborted(txns, start, end));
    let max_desired = (map.slots() as f64 * config.io_buffer_load_factor) as usize;
    for (i, seg) in dirty.iter().enumerate() {
        let next_start = dirty.get(i + 1).map_or(end, |s| s.base_offset);
        let path = segment_path(dir, seg.base_offset, FileKind::Log, None);
        let mut reader = BatchReader::open(storage, &path, config)?;
        while let Some((_, b)) = reader.next_batch()? {
            let h = head(&b);
            if h.control {
                let t = first_control_type(&path, &b)?;
                meta.on_control_batch_read(h.last_offset, h.producer_id, t);
            } else if !meta.on_batch_read(h.last_offset, h.producer_id, h.transactional) {
                let records = b
                    .records(&DecodeLimits::default())
                    .map_err(|e| format_err(&path, e))?;
                for r in records.iter() {
                    let r = r.map_err(|e| format_err(&path, e))?;
                    if let Some(key) = r.key() {
                        if r.offset() >= start {
                            if map.size() < max_desired {
                                map.put(key, r.offset());
                            } else {
                                return Ok(true);
                            }
                        }
                    }
                }
            }
            if h.last_offset >= start {
                map.update_latest_offset(h.last_offset);
            }
        }
        map.update_latest_offset(next_start - 1);
    }
    Ok(false)
}

/// Kafka's `logSegments(from, to)`: the segment holding `from` and those after it below `to`.
fn segments_in(segments: &[SegmentFiles], from: i64, to: i64) -> Vec<&SegmentFiles> {
    let first = segments
        .iter()
        .rposition(|s| s.base_offset <= from)
        .unwrap_or(0);
    segments
        .iter()
        .skip(first)
        .filter(|s| s.base_offset < to)
        .collect()
}

/// Kafka's `groupSegmentsBySize`.
fn group_segments_by_size<'s>(
    segments: &[&'s SegmentFiles],
    max_size: u64,
    max_index_size: u64,
    first_uncleanable: i64,
) -> Vec<Vec<&'s SegmentFiles>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while let Some(&first) = segments.get(i) {
        let mut group = vec![first];
        let (mut log, mut index, mut time) =
            (first.log_size, first.index_size, first.time_index_size);
        i += 1;
        while let Some(&next) = segments.get(i) {
            let last_offset_of_next = match segments.get(i + 1) {
                Some(after) => after.base_offset - 1,
                None => first_uncleanable - 1,
            };
            let last_base = group.last().map_or(next.base_offset, |s| s.base_offset);
            let fits = log + next.log_size <= max_size
                && index + next.index_size <= max_index_size
                && time + next.time_index_size <= max_index_size
                && (next.log_size == 0 || last_offset_of_next - last_base <= i64::from(i32::MAX));
            if !fits {
                break;
            }
            group.push(next);
            log += next.log_size;
            index += next.index_size;
            time += next.time_index_size;
            i += 1;
        }
        groups.push(group);
    }
    groups
}

/// A cleaned segment being written: the `.log` streamed to `<base>.log.cleaned`, the indexes
/// held until the end (bounded by `segment.index.bytes`). With no storage it only counts
/// (a dry run).
struct CleanedSegment {
    base_offset: i64,
    log: Option<Box<dyn FileHandle>>,
    size: u64,
    /// Retained batches not yet written, at most `write_buffer_size` bytes (Kafka's cleaner
    /// writes its write buffer, not each batch).
    pending: Vec<u8>,
    write_buffer_size: usize,
    offset_index: Vec<u8>,
    time_index: Vec<u8>,
    last_time_entry: (i64, i64),
    max_timestamp_so_far: (i64, i64),
    bytes_since_last_index_entry: u64,
    index_interval_bytes: u64,
    txn_index: Vec<AbortedTxn>,
}

impl CleanedSegment {
    fn new(
        log: Option<Box<dyn FileHandle>>,
        base_offset: i64,
        index_interval_bytes: u32,
        write_buffer_size: usize,
    ) -> Self {
        CleanedSegment {
            base_offset,
            log,
            size: 0,
            pending: Vec::new(),
            write_buffer_size,
            offset_index: Vec::new(),
            time_index: Vec::new(),
            last_time_entry: (-1, base_offset),
            max_timestamp_so_far: (-1, base_offset),
            bytes_since_last_index_entry: 0,
            index_interval_bytes: u64::from(index_interval_bytes),
            txn_index: Vec::new(),
        }
    }

    fn time_index_maybe_append(&mut self, ts: i64, offset: i64) {
        if ts > self.last_time_entry.0 {
            self.time_index.extend_from_slice(&ts.to_be_bytes());
            let rel = (offset - self.base_offset) as i32;
            self.time_index.extend_from_slice(&rel.to_be_bytes());
            self.last_time_entry = (ts, offset);
        }
    }

    /// Kafka's `LogSegment.append` of one retained batch.
    fn append(&mut self, bytes: &[u8], last_offset: i64, max_timestamp: i64) -> Result<()> {
        if max_timestamp > self.max_timestamp_so_far.0 {
            self.max_timestamp_so_far = (max_timestamp, last_offset);
        }
        if self.bytes_since_last_index_entry > self.index_interval_bytes {
            let rel = (last_offset - self.base_offset) as i32;
            self.offset_index.extend_from_slice(&rel.to_be_bytes());
            self.offset_index
                .extend_from_slice(&(self.size as u32).to_be_bytes());
            let (ts, off) = self.max_timestamp_so_far;
            self.time_index_maybe_append(ts, off);
            self.bytes_since_last_index_entry = 0;
        }
        if self.log.is_some() {
            if self.pending.len() + bytes.len() > self.write_buffer_size {
                self.flush_pending()?;
            }
            match &self.log {
                Some(h) if bytes.len() > self.write_buffer_size => h.write_at(self.size, bytes)?,
                _ => self.pending.extend_from_slice(bytes),
            }
        }
        self.size += bytes.len() as u64;
        self.bytes_since_last_index_entry += bytes.len() as u64;
        Ok(())
    }

    /// Writes the pending batches, which end at `size`.
    fn flush_pending(&mut self) -> Result<()> {
        if let (Some(h), false) = (&self.log, self.pending.is_empty()) {
            h.write_at(self.size - self.pending.len() as u64, &self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }

    /// Kafka's `onBecomeInactiveSegment` and `flush`: the last time-index entry, the index files
    /// written at their valid size, everything synced.
    fn finish(mut self, storage: &dyn Storage, dir: &Path) -> Result<u64> {
        let (ts, off) = self.max_timestamp_so_far;
        self.time_index_maybe_append(ts, off);
        self.flush_pending()?;
        let Some(log) = self.log.take() else {
            return Ok(self.size);
        };
        log.sync_all()?;
        let base = self.base_offset;
        let cleaned = Some(TempSuffix::Cleaned);
        let mut files = vec![
            (FileKind::Index, std::mem::take(&mut self.offset_index)),
            (FileKind::TimeIndex, std::mem::take(&mut self.time_index)),
        ];
        if !self.txn_index.is_empty() {
            let bytes = self.txn_index.iter().flat_map(|t| t.to_bytes()).collect();
            files.push((FileKind::TxnIndex, bytes));
        }
        for (kind, bytes) in files {
            let h = storage.open(
                &segment_path(dir, base, kind, cleaned),
                OpenMode::CreateTruncate,
            )?;
            h.write_at(0, &bytes)?;
            h.sync_all()?;
        }
        Ok(self.size)
    }
}

/// Writes Kafka's `writeEmptyHeader` batch for `b`: its offsets, producer, epoch, sequence and
/// max timestamp, no records, uncompressed, no delete horizon.
fn empty_batch(b: &RecordBatch<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_BATCH_OVERHEAD);
    let attributes = record_format::batch::compute_attributes(
        record_format::CompressionType::None,
        b.timestamp_type(),
        b.is_transactional(),
        b.is_control(),
        false,
    );
    out.extend_from_slice(&b.base_offset().to_be_bytes());
    out.extend_from_slice(&((RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32).to_be_bytes());
    out.extend_from_slice(&b.partition_leader_epoch().to_be_bytes());
    out.push(2);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&b.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&b.max_timestamp().to_be_bytes());
    out.extend_from_slice(&b.producer_id().to_be_bytes());
    out.extend_from_slice(&b.producer_epoch().to_be_bytes());
    out.extend_from_slice(&b.base_sequence().to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    let crc = record_format::checksum::crc32c(out.get(21..).unwrap_or(&[]));
    if let Some(dst) = out.get_mut(17..21) {
        dst.copy_from_slice(&crc.to_be_bytes());
    }
    out
}

/// What one group's cleaning did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupReport {
    /// Base offsets of the segments cleaned into one.
    pub segments: Vec<i64>,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes of the cleaned segment.
    pub bytes_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Records kept.
    pub records_retained: u64,
    /// Batches removed whole.
    pub batches_removed: u64,
}

/// What a pass did (or would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// First dirty offset.
    pub first_dirty_offset: i64,
    /// First uncleanable offset.
    pub first_uncleanable_offset: i64,
    /// The offset the pass cleaned up to (the map's end); the next pass starts here.
    pub end_offset: i64,
    /// Slots of the offset map.
    pub map_slots: usize,
    /// Keys in the offset map.
    pub map_keys: usize,
    /// Each group cleaned.
    pub groups: Vec<GroupReport>,
}

/// Whether the pass writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    DryRun,
    Apply,
}

/// Kafka's `cleanInto` over one source segment.
#[allow(clippy::too_many_arguments)]
fn clean_into(
    storage: &dyn Storage,
    path: &Path,
    dest: &mut CleanedSegment,
    map: &OffsetMap,
    meta: &mut CleanedTransactionMetadata,
    last_records: &BTreeMap<i64, LastRecord>,
    upper_bound: i64,
    log: &LogToClean,
    config: &CleanerConfig,
    report: &mut GroupReport,
) -> Result<()> {
    let now = log.now_ms;
    let mut reader = BatchReader::open(storage, path, config)?;
    while let Some((_, b)) = reader.next_batch()? {
        let h = head(&b);
        report.bytes_read += b.size_in_bytes() as u64;
        let first = if h.control {
            first_control_type(path, &b)?
        } else {
            None
        };
        // checkBatchRetention
        let can_discard = if h.control {
            meta.on_control_batch_read(h.last_offset, h.producer_id, first)
        } else {
            meta.on_batch_read(h.last_offset, h.producer_id, h.transactional)
        };
        let horizon = b.delete_horizon_ms();
        let discard_records = if h.control {
            can_discard && horizon.is_some_and(|d| d <= now)
        } else {
            can_discard
        };
        let is_last_of_producer =
            last_records
                .get(&h.producer_id)
                .is_some_and(|l| match l.last_data_offset {
                    Some(o) => h.last_offset == o,
                    None => h.control && h.producer_epoch == l.producer_epoch,
                });
        #[derive(PartialEq)]
        enum Retention {
            RetainEmpty,
            Delete,
            DeleteEmpty,
        }
        // The last batch of a producer keeps its sequence and epoch; the last batch of the
        // round keeps the round's last offset.
        let retain_empty =
            (b.has_producer_id() && is_last_of_producer) || h.last_offset + 1 == upper_bound;
        let retention = if retain_empty {
            Retention::RetainEmpty
        } else if discard_records {
            Retention::Delete
        } else {
            Retention::DeleteEmpty
        };
        let contains_marker_for_empty_txn = can_discard && h.control;
        if retention == Retention::Delete {
            report.batches_removed += 1;
            report.records_read += b.records_count().max(0) as u64;
            continue;
        }
        // filterBatch
        let records = b
            .records(&DecodeLimits::default())
            .map_err(|e| format_err(path, e))?;
        let mut retained = Vec::new();
        let mut all_retained = true;
        let mut contains_tombstones = false;
        for r in records.iter() {
            let r = r.map_err(|e| format_err(path, e))?;
            report.records_read += 1;
            let keep = if discard_records {
                false
            } else if h.control || r.offset() > map.latest_offset() {
                // Markers stay with their batch; records past the map were not looked at.
                true
            } else if let Some(key) = r.key() {
                let newest = r.offset() >= map.get(key);
                let keep_deletes = horizon.is_none_or(|d| now < d);
                newest && (r.value().is_some() || keep_deletes)
            } else {
                false
            };
            if keep {
                if r.value().is_none() {
                    contains_tombstones = true;
                }
                retained.push(r);
            } else {
                all_retained = false;
            }
        }
        if !retained.is_empty() {
            report.records_retained += retained.len() as u64;
            let set_horizon =
                (contains_tombstones || contains_marker_for_empty_txn) && horizon.is_none();
            if all_retained && !set_horizon {
                dest.append(b.as_bytes(), h.last_offset, h.max_timestamp)?;
                continue;
            }
            let new_horizon = if set_horizon {
                Some(now.saturating_add(log_delete_retention(config)))
            } else {
                horizon
            };
            let mut builder = RecordBatchBuilder::new(b.base_offset())
                .partition_leader_epoch(b.partition_leader_epoch())
                .compression(b.compression().map_err(|e| format_err(path, e))?)
                .producer(b.producer_id(), b.producer_epoch(), b.base_sequence())
                .transactional(b.is_transactional())
                .control(b.is_control())
                .delete_horizon_ms(new_horizon);
            if b.timestamp_type() == TimestampType::LogAppendTime {
                builder = builder.log_append_time(b.max_timestamp());
            }
            for r in &retained {
                let headers: Vec<Header<'_>> = r.headers().collect();
                builder
                    .append_record_with_offset(
                        r.offset(),
                        r.timestamp(),
                        r.key(),
                        r.value(),
                        &headers,
                    )
                    .map_err(|e| format_err(path, e))?;
            }
            builder
                .override_last_offset(b.last_offset())
                .map_err(|e| format_err(path, e))?;
            let bytes = builder.build();
            let rebuilt = RecordBatch::new(&bytes, 0).map_err(|e| format_err(path, e))?;
            dest.append(&bytes, rebuilt.last_offset(), rebuilt.max_timestamp())?;
        } else if retention == Retention::RetainEmpty {
            let bytes = empty_batch(&b);
            dest.append(&bytes, h.last_offset, h.max_timestamp)?;
        } else {
            report.batches_removed += 1;
        }
    }
    Ok(())
}

fn log_delete_retention(config: &CleanerConfig) -> i64 {
    config.delete_retention_ms
}

/// The max timestamp of the first batch of the `.log` at `path` (Kafka's
/// `getFirstBatchTimestamp`, the segment's rolling-based timestamp), if it holds one.
fn read_first_batch_timestamp(storage: &dyn Storage, path: &Path) -> Result<Option<i64>> {
    let config = CleanerConfig::default();
    let mut reader = BatchReader::open(storage, path, &config)?;
    Ok(reader.next_batch()?.map(|(_, b)| b.max_timestamp()))
}

/// Reads the partition's entry of `cleaner-offset-checkpoint` in the log directory (the parent
/// of `dir`), if any.
pub fn read_cleaner_checkpoint(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    tp: &TopicPartition,
) -> Result<Option<i64>> {
    let Some(parent) = dir.parent() else {
        return Ok(None);
    };
    let path = parent.join(CLEANER_OFFSET_CHECKPOINT_FILE);
    if !storage.exists(&path)? {
        return Ok(None);
    }
    let entries = OffsetCheckpointFile::new(Arc::clone(storage), &path).read()?;
    Ok(entries.into_iter().find(|(t, _)| t == tp).map(|(_, o)| o))
}

/// Sets the partition's entry of `cleaner-offset-checkpoint` (written atomically, others kept).
pub fn write_cleaner_checkpoint(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    tp: &TopicPartition,
    offset: i64,
) -> Result<()> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    let path = parent.join(CLEANER_OFFSET_CHECKPOINT_FILE);
    // One read-modify-write at a time: the cleaner threads of one log directory share the file.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let file = OffsetCheckpointFile::new(Arc::clone(storage), &path);
    let mut entries: BTreeMap<TopicPartition, i64> = if storage.exists(&path)? {
        file.read()?.into_iter().collect()
    } else {
        BTreeMap::new()
    };
    entries.insert(tp.clone(), offset);
    let list: Vec<(TopicPartition, i64)> = entries.into_iter().collect();
    file.write(&list)?;
    Ok(())
}

/// The largest timestamp of a segment: its time index's last entry if any, else the max
/// timestamp of its batches (Kafka's `largestTimestamp` falls back to the file's mtime, which
/// the storage seam does not have).
fn largest_timestamp(
    storage: &dyn Storage,
    dir: &Path,
    s: &SegmentFiles,
    config: &CleanerConfig,
) -> Result<i64> {
    let mut max = -1;
    let path = segment_path(dir, s.base_offset, FileKind::Log, None);
    let mut reader = BatchReader::open(storage, &path, config)?;
    while let Some((_, b)) = reader.next_batch()? {
        max = max.max(b.max_timestamp());
    }
    Ok(max)
}

/// One cleaning pass from `first_dirty` (see the module docs). The checkpoint is not written:
/// [`clean`] does that.
fn run_pass(
    storage: &dyn Storage,
    log: &LogToClean,
    first_dirty: i64,
    first_uncleanable: i64,
    config: &CleanerConfig,
    mode: Mode,
) -> Result<CleanReport> {
    let dir = &log.dir;
    let segments = list_segments(storage, dir)?;
    let txns = read_txn_indexes(storage, dir, &segments)?;
    let mut map = OffsetMap::new(OffsetMap::memory_for(
        config.dedupe_buffer_size,
        config.threads,
    ));
    build_offset_map(
        storage,
        dir,
        &segments,
        &txns,
        first_dirty,
        first_uncleanable,
        &mut map,
        config,
    )?;
    let end_offset = map.latest_offset() + 1;
    let mut report = CleanReport {
        first_dirty_offset: first_dirty,
        first_uncleanable_offset: first_uncleanable,
        end_offset,
        map_slots: map.slots(),
        map_keys: map.size(),
        groups: Vec::new(),
    };
    let to_clean: Vec<&SegmentFiles> = segments
        .iter()
        .filter(|s| s.base_offset < end_offset)
        .collect();
    let groups = group_segments_by_size(
        &to_clean,
        config.segment_bytes,
        config.max_index_size,
        first_uncleanable,
    );
    let mut meta = CleanedTransactionMetadata::default();
    for group in groups {
        let base = group.first().map_or(0, |s| s.base_offset);
        let handle = match mode {
            Mode::DryRun => None,
            Mode::Apply => Some(storage.open(
                &segment_path(dir, base, FileKind::Log, Some(TempSuffix::Cleaned)),
                OpenMode::CreateTruncate,
            )?),
        };
        let mut dest = CleanedSegment::new(
            handle,
            base,
            config.index_interval_bytes,
            config.io_buffer_size / 2,
        );
        let mut g = GroupReport {
            segments: group.iter().map(|s| s.base_offset).collect(),
            ..GroupReport::default()
        };
        meta.retained_aborted.clear();
        for (i, seg) in group.iter().enumerate() {
            let path = segment_path(dir, seg.base_offset, FileKind::Log, None);
            let upper = match group.get(i + 1) {
                Some(n) => n.base_offset,
                None => read_next_offset(storage, &path, seg.base_offset, config)?,
            };
            meta.add_aborted_transactions(collect_aborted(&txns, seg.base_offset, upper));
            clean_into(
                storage,
                &path,
                &mut dest,
                &map,
                &mut meta,
                &log.last_records,
                first_uncleanable,
                log,
                config,
                &mut g,
            )?;
        }
        dest.txn_index = std::mem::take(&mut meta.retained_aborted);
        g.bytes_written = dest.finish(storage, dir)?;
        if mode == Mode::Apply {
            swap_in(storage, dir, base, &g.segments)?;
        }
        report.groups.push(g);
    }
    Ok(report)
}

/// The next offset of a segment (its base when empty).
fn read_next_offset(
    storage: &dyn Storage,
    path: &Path,
    base: i64,
    config: &CleanerConfig,
) -> Result<i64> {
    let mut next = base;
    let mut reader = BatchReader::open(storage, path, config)?;
    while let Some((_, b)) = reader.next_batch()? {
        next = b.last_offset() + 1;
    }
    Ok(next)
}

/// Kafka's `replaceSegments`: every `.cleaned` file of `base` renamed to `.swap` (the commit
/// point, once the directory is synced), the replaced segments' files removed, the `.swap`
/// files renamed to their live names.
fn swap_in(storage: &dyn Storage, dir: &Path, base: i64, replaced: &[i64]) -> Result<()> {
    const KINDS: [FileKind; 4] = [
        FileKind::TxnIndex,
        FileKind::TimeIndex,
        FileKind::Index,
        FileKind::Log,
    ];
    let mut swapped = Vec::new();
    // The `.log` last: a `.log.swap` present means its indexes are there too.
    for kind in KINDS {
        let cleaned = segment_path(dir, base, kind, Some(TempSuffix::Cleaned));
        if storage.exists(&cleaned)? {
            storage.rename(
                &cleaned,
                &segment_path(dir, base, kind, Some(TempSuffix::Swap)),
            )?;
            swapped.push(kind);
        }
    }
    storage.sync_dir(dir)?;
    for &old in replaced {
        for kind in KINDS {
            let live = segment_path(dir, old, kind, None);
            if storage.exists(&live)? {
                storage.remove_file(&live)?;
            }
        }
    }
    storage.sync_dir(dir)?;
    for kind in KINDS.iter().rev().filter(|k| swapped.contains(k)) {
        storage.rename(
            &segment_path(dir, base, *kind, Some(TempSuffix::Swap)),
            &segment_path(dir, base, *kind, None),
        )?;
    }
    storage.sync_dir(dir)?;
    Ok(())
}

/// The range a pass would clean: `(first dirty, first uncleanable)`, the latter the base offset
/// of the segment it falls in.
fn range(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<(i64, i64)> {
    let segments = list_segments(storage.as_ref(), &log.dir)?;
    let log_end = match segments.last() {
        Some(s) => read_next_offset(
            storage.as_ref(),
            &segment_path(&log.dir, s.base_offset, FileKind::Log, None),
            s.base_offset,
            config,
        )?,
        None => log.log_start_offset,
    };
    let checkpointed = read_cleaner_checkpoint(storage, &log.dir, tp)?;
    let (dirty, uncleanable) = cleanable_offsets(
        log,
        &segments,
        log_end,
        checkpointed,
        config.min_compaction_lag_ms,
        |s| largest_timestamp(storage.as_ref(), &log.dir, s, config),
    )?;
    Ok((dirty, first_uncleanable_segment(&segments, uncleanable)))
}

/// What one cleaning pass would do, writing nothing.
pub fn plan(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanReport> {
    let (dirty, uncleanable) = range(storage, log, tp, config)?;
    if dirty >= uncleanable {
        return Ok(CleanReport {
            first_dirty_offset: dirty,
            first_uncleanable_offset: uncleanable,
            end_offset: dirty,
            ..CleanReport::default()
        });
    }
    run_pass(
        storage.as_ref(),
        log,
        dirty,
        uncleanable,
        config,
        Mode::DryRun,
    )
}

/// One cleaning pass of the closed partition in `log.dir`, then its `cleaner-offset-checkpoint`
/// entry set to where the pass ended. Nothing to clean (the dirty section is empty) is a report
/// with no group. With `log.cleaner.io.max.bytes.per.second` set, the pass's reads and writes are
/// throttled to it on the system clock ([`clean_throttled`] takes a throttler of its own).
pub fn clean(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanReport> {
    if config.io_max_bytes_per_second < f64::MAX {
        let throttler = Arc::new(schedule::Throttler::new(
            config.io_max_bytes_per_second,
            Arc::new(segment_store::SystemClock),
            Arc::new(schedule::ThreadSleeper),
        ));
        return clean_throttled(storage, log, tp, config, throttler);
    }
    clean_unthrottled(storage, log, tp, config)
}

/// [`clean`] with every byte the pass reads or writes counted by `throttler` (shared by the
/// passes of one cleaner: Kafka's throttler is one per cleaner, over its threads).
pub fn clean_throttled(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
    throttler: Arc<schedule::Throttler>,
) -> Result<CleanReport> {
    let throttled: Arc<dyn Storage> = Arc::new(schedule::ThrottledStorage::new(
        Arc::clone(storage),
        throttler,
    ));
    clean_unthrottled(&throttled, log, tp, config)
}

fn clean_unthrottled(
    storage: &Arc<dyn Storage>,
    log: &LogToClean,
    tp: &TopicPartition,
    config: &CleanerConfig,
) -> Result<CleanReport> {
    let (dirty, uncleanable) = range(storage, log, tp, config)?;
    if dirty >= uncleanable {
        return Ok(CleanReport {
            first_dirty_offset: dirty,
            first_uncleanable_offset: uncleanable,
            end_offset: dirty,
            ..CleanReport::default()
        });
    }
    let report = run_pass(
        storage.as_ref(),
        log,
        dirty,
        uncleanable,
        config,
        Mode::Apply,
    )?;
    write_cleaner_checkpoint(storage, &log.dir, tp, report.end_offset)?;
    Ok(report)
}

/// Kafka's `lastRecordsOfActiveProducers`: each producer's last data offset (if producer state
/// has one) and epoch.
pub fn last_records(
    producers: &crate::producer_state::ProducerStateManager,
) -> BTreeMap<i64, LastRecord> {
    producers
        .active_producers()
        .into_iter()
        .map(|(pid, e)| {
            let last = e.last_data_offset();
            (
                pid,
                LastRecord {
                    last_data_offset: (last >= 0).then_some(last),
                    producer_epoch: e.producer_epoch(),
                },
            )
        })
        .collect()
}

impl LogToClean {
    /// What a recovery plan says of the partition (read only: a dry run plans from it).
    pub fn from_plan(plan: &crate::plan::RecoveryPlan, now_ms: i64) -> Self {
        LogToClean {
            dir: plan.dir.clone(),
            log_start_offset: plan.log_start_offset,
            last_stable_offset: plan.last_stable_offset,
            last_records: last_records(&plan.producers),
            now_ms,
        }
    }
}
