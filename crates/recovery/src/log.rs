//! The partition log (Kafka `UnifiedLog`, producer side): a segment-store [`LocalLog`], the
//! [`ProducerStateManager`], the [`LeaderEpochFileCache`], the high watermark and the log start
//! offset, kept consistent on every append, roll, read, truncation and close.
//!
//! * Leader appends ([`PartitionLog::append_as_leader`]) validate every batch (v2 only, CRC-32C,
//!   no control batch from a client), assign offsets by rewriting `baseOffset` and
//!   `partitionLeaderEpoch` in place (both outside the CRC, so the CRC is left as it is), check
//!   producer state *before* writing (a duplicate returns the original offsets and writes
//!   nothing; an epoch or sequence error writes nothing), append, then apply producer state,
//!   write aborted transactions into the `.txnindex` and record the leader epoch.
//! * Follower appends ([`PartitionLog::append_as_follower`]) keep offsets and bytes as they came
//!   and apply producer state with `Replication` rules (warnings, not errors).
//! * The KIP-1279 barrier is applied by [`ProducerStateManager::apply_batches`] on every origin,
//!   strictly in log order (see [`crate::barrier`]).
//! * The log owns its KIP-1279 mirror state ([`crate::mirror`], restored by the loader) and
//!   enforces it: leader appends (client and coordinator) are refused while `Mirroring` or
//!   `Stopping`, the mirror feed ([`PartitionLog::append_as_mirror`]) only appends while
//!   `Mirroring`, intra-cluster follower appends work in every state; the transitions
//!   (`start_mirroring` with log alignment by leader epoch, `stop_mirroring`,
//!   `resume_mirror_stop`) are [`MirroredLog`]'s.
//! * When the active segment rolls, a producer snapshot named after the new base is written
//!   before the batches that caused the roll are applied (Kafka §6.3/§7.7).
//! * Reads are bounded by the high watermark (`ReadUncommitted`) or the last stable offset
//!   (`ReadCommitted`, with the aborted transactions of the range); [`consume`] is the consumer
//!   side that hides control batches (markers and barriers) and aborted records.
//!
//! Producer-state checks run before the bytes are written, each producer's against a copy of its
//! one entry (Kafka's `ProducerAppendInfo`); once the bytes are in, the checked update is
//! committed ([`ProducerStateManager::analyze_and_validate`], then
//! [`ProducerStateManager::apply_update`], which cannot fail). All-or-nothing, and O(batches) per
//! append whatever the number of live producers.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use record_format::batch::{set_base_offset_and_leader_epoch, set_max_timestamp_log_append_time};
use record_format::{
    is_mirror_pid_reset_batch, mirror_pid_reset_batch, Batches, ControlRecordKey,
    ControlRecordType, DecodeLimits, FormatError, IterEnd, LogEntry, RecordBatch,
};
use segment_store::{AbortedTxn, Clock, EntryType, LocalLog, LogConfig, SegmentError, Storage};

use crate::barrier::BarrierOutcome;
use crate::error::{ProducerStateError, SnapshotError};
use crate::leader_epoch::LeaderEpochFileCache;
use crate::mirror::{
    fenced_mirror_epoch, EpochEndOffsets, MirrorError, MirrorLog, MirrorPartitionState,
    MirrorStateError, MirrorStateFile, MirrorStateKind, MirrorStateStore, MirroredLog,
    MIRROR_EPOCH_FENCE,
};
use crate::producer_state::{
    AbortedTxnRecord, AppendOrigin, AppliedBatches, ExpiredProducer, ProducerStateManager,
    ProducerStateManagerConfig, ProducerStateWarning,
};
use crate::snapshot::{
    delete_snapshots_above_with, delete_snapshots_before_with, latest_snapshot_offset_with,
    oldest_snapshot_offset_with, remove_stray_snapshots_with, SnapshotFile, SnapshotLoad,
    StorageIo,
};
use crate::summary::BatchSummary;

/// How much a replay or a barrier search reads at a time.
const READ_CHUNK: usize = 1 << 20;

/// Settings of a partition log.
#[derive(Debug, Clone, Default)]
pub struct PartitionLogConfig {
    /// Segment-level settings.
    pub log: LogConfig,
    /// Producer-state settings.
    pub producer_state: ProducerStateManagerConfig,
    /// `message.timestamp.type=LogAppendTime`: leader appends stamp every batch with the
    /// broker's time (this rewrites the attributes and max timestamp, so the CRC is recomputed,
    /// as Kafka does).
    pub log_append_time: bool,
}

/// Errors of the partition log and its loader.
#[derive(Debug)]
#[non_exhaustive]
pub enum PartitionLogError {
    /// A segment-store operation failed.
    Segment(SegmentError),
    /// A producer snapshot could not be read or written.
    Snapshot(SnapshotError),
    /// Producer state refused the append (fenced epoch, out-of-order sequence, …); nothing was
    /// written.
    ProducerState(ProducerStateError),
    /// The records are not a sequence of valid v2 batches (framing, CRC, trailing bytes), or a
    /// control record could not be read. `error.position` is the byte position in the input.
    InvalidRecords(FormatError),
    /// A batch with magic 0 or 1 (only v2 is written).
    UnsupportedMagic {
        /// Byte position of the entry in the input.
        position: u64,
        /// Its magic.
        magic: i8,
    },
    /// A client tried to write a control batch.
    ControlBatchFromClient {
        /// Byte position of the batch in the input.
        position: u64,
    },
    /// An append with no batch.
    EmptyRecords,
    /// A follower append whose first offset is below the log end offset.
    OffsetBelowLogEnd {
        /// First offset of the append.
        first_offset: i64,
        /// The log end offset.
        log_end_offset: i64,
    },
    /// A truncation target inside a batch.
    NotBatchAligned {
        /// The target.
        target: i64,
        /// Base offset of the batch containing it.
        batch_base_offset: i64,
    },
    /// A negative truncation target.
    NegativeOffset(i64),
    /// A leader append in an epoch below the partition's current leader epoch (the latest of
    /// the leader-epoch cache: after a mirror stop, the epoch the library chose). Nothing was
    /// written.
    StaleLeaderEpoch {
        /// The epoch asked for.
        requested: i32,
        /// The current leader epoch.
        current: i32,
    },
    /// A mirrored batch's leader epoch leaves no destination epoch above it (`i32::MAX`
    /// reached). Nothing was written.
    MirrorEpochExhausted,
    /// A read outside `[log start, log end]`.
    OffsetOutOfRange {
        /// The offset.
        offset: i64,
        /// Log start offset.
        log_start_offset: i64,
        /// Log end offset.
        log_end_offset: i64,
    },
    /// A file operation of the loader failed.
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A client or coordinator append while the partition is mirrored (`Mirroring` or
    /// `Stopping`, KIP-1279): during mirroring every byte and every producer comes from the
    /// source. Nothing was written.
    ReadOnly {
        /// The partition's mirror state.
        state: MirrorStateKind,
    },
    /// A mirror-feed append ([`PartitionLog::append_as_mirror`]) outside `Mirroring`: once
    /// `Stopping` began, the stop point is fixed. Nothing was written.
    NotMirroring {
        /// The partition's mirror state.
        state: MirrorStateKind,
    },
    /// A mirror-feed append or alignment while a first start's full truncation is not durable
    /// yet (`Mirroring{full_truncation_pending}`): call
    /// [`start_mirroring`](crate::mirror::MirroredLog::start_mirroring) again to finish it.
    /// Nothing was written.
    MirrorTruncationPending,
    /// The partition's `mirror-state` file could not be read or written.
    MirrorState(MirrorStateError),
    /// A partition directory holds a name seglog reads or writes that it must not go through:
    /// a symlink (seglog follows none inside a log directory), or something other than the
    /// regular file or directory the name stands for (a FIFO, a device). Recovery leaves the
    /// partition untouched; a log directory takes it offline.
    Refused {
        /// The name.
        path: PathBuf,
        /// What is there.
        found: EntryType,
    },
    /// Loading one partition of a log directory failed.
    Partition {
        /// The partition directory.
        dir: PathBuf,
        /// Why.
        source: Box<PartitionLogError>,
    },
}

impl fmt::Display for PartitionLogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Segment(e) => write!(f, "{e}"),
            Self::Snapshot(e) => write!(f, "{e}"),
            Self::ProducerState(e) => write!(f, "{e}"),
            Self::InvalidRecords(e) => write!(f, "invalid records: {e}"),
            Self::UnsupportedMagic { position, magic } => {
                write!(
                    f,
                    "batch at byte {position} has magic {magic}; only v2 is written"
                )
            }
            Self::ControlBatchFromClient { position } => {
                write!(
                    f,
                    "clients may not write control batches (batch at byte {position})"
                )
            }
            Self::EmptyRecords => write!(f, "append with no batch"),
            Self::OffsetBelowLogEnd {
                first_offset,
                log_end_offset,
            } => write!(
                f,
                "follower append at offset {first_offset} is below the log end offset \
                 {log_end_offset}"
            ),
            Self::NotBatchAligned {
                target,
                batch_base_offset,
            } => write!(
                f,
                "truncation target {target} is inside the batch starting at {batch_base_offset}"
            ),
            Self::NegativeOffset(o) => write!(f, "negative offset {o}"),
            Self::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]"
            ),
            Self::Io { path, op, source } => write!(f, "{op} {}: {source}", path.display()),
            Self::StaleLeaderEpoch { requested, current } => write!(
                f,
                "leader epoch {requested} is below the partition's leader epoch {current}"
            ),
            Self::ReadOnly { state } => write!(
                f,
                "partition is read-only for clients in mirror state {state}"
            ),
            Self::MirrorEpochExhausted => {
                f.write_str("no destination leader epoch left above the mirrored batch's")
            }
            Self::NotMirroring { state } => {
                write!(f, "mirrored batches are refused in mirror state {state}")
            }
            Self::MirrorTruncationPending => f.write_str(
                "the first start of mirroring has not truncated the log yet: call \
                 start_mirroring again",
            ),
            Self::MirrorState(e) => write!(f, "{e}"),
            Self::Partition { dir, source } => {
                write!(f, "loading partition {}: {source}", dir.display())
            }
            Self::Refused { path, found } => {
                let what = match found {
                    EntryType::Symlink => {
                        "is a symlink (seglog follows no symlink inside a log directory)"
                    }
                    EntryType::Dir => "is a directory, not a regular file",
                    EntryType::File => "is a regular file, not a directory",
                    EntryType::Other => "is not a regular file (a FIFO, socket or device)",
                };
                write!(
                    f,
                    "{} {what}: refused, and the directory it is in is left untouched",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for PartitionLogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Segment(e) => Some(e),
            Self::Snapshot(e) => Some(e),
            Self::ProducerState(e) => Some(e),
            Self::InvalidRecords(e) => Some(e),
            Self::Io { source, .. } => Some(source),
            Self::MirrorState(e) => Some(e),
            Self::Partition { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<SegmentError> for PartitionLogError {
    fn from(e: SegmentError) -> Self {
        Self::Segment(e)
    }
}
impl From<SnapshotError> for PartitionLogError {
    fn from(e: SnapshotError) -> Self {
        Self::Snapshot(e)
    }
}
impl From<ProducerStateError> for PartitionLogError {
    fn from(e: ProducerStateError) -> Self {
        Self::ProducerState(e)
    }
}
impl From<MirrorStateError> for PartitionLogError {
    fn from(e: MirrorStateError) -> Self {
        Self::MirrorState(e)
    }
}
impl From<FormatError> for PartitionLogError {
    fn from(e: FormatError) -> Self {
        Self::InvalidRecords(e)
    }
}

/// What an append did (Kafka `LogAppendInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogAppendInfo {
    /// Offset of the first record (for a duplicate: of the original batch).
    pub first_offset: i64,
    /// Offset of the last record (for a duplicate: of the original batch).
    pub last_offset: i64,
    /// Largest batch max timestamp (−1 for a duplicate).
    pub max_timestamp: i64,
    /// Number of batches written (0 for a duplicate).
    pub num_batches: usize,
    /// Bytes written (0 for a duplicate).
    pub bytes: usize,
    /// The append duplicated a cached batch of its producer: nothing was written, and the
    /// offsets are the original batch's.
    pub duplicate: bool,
    /// The active segment rolled first; the new base offset (a producer snapshot was written
    /// at it).
    pub rolled_to: Option<i64>,
    /// Producer-state warnings (replication origin).
    pub warnings: Vec<ProducerStateWarning>,
    /// Barriers met, in log order.
    pub barriers: Vec<BarrierOutcome>,
    /// Aborted transactions written into the transaction index.
    pub aborted_txns: Vec<AbortedTxnRecord>,
}

/// Kafka `IsolationLevel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IsolationLevel {
    /// Everything below the high watermark.
    ReadUncommitted,
    /// Everything below the last stable offset, with the aborted transactions of the range.
    ReadCommitted,
}

/// The whole batches at the start of `bytes`, by their length fields (a fetch's last batch may be
/// cut short).
fn whole_batches(bytes: &[u8]) -> &[u8] {
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some(len) = bytes
            .get(pos + 8..pos + 12)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
        else {
            break; // a header cut short
        };
        let size = i32::from_be_bytes(len);
        let Some(end) = usize::try_from(size)
            .ok()
            .and_then(|s| s.checked_add(12))
            .and_then(|s| s.checked_add(pos))
        else {
            // Not a length: left for the batch reader to report.
            return bytes;
        };
        if end > bytes.len() {
            break; // a batch cut short
        }
        pos = end;
    }
    bytes.get(..pos).unwrap_or_default()
}

/// Kafka's `ListOffsetsRequest.LATEST_TIMESTAMP`: [`PartitionLog::fetch_offset_by_timestamp`]
/// answers the log end offset.
pub const LATEST_TIMESTAMP: i64 = -1;
/// Kafka's `ListOffsetsRequest.EARLIEST_TIMESTAMP`: the log start offset.
pub const EARLIEST_TIMESTAMP: i64 = -2;
/// Kafka's `ListOffsetsRequest.MAX_TIMESTAMP` (KIP-734): the first record with the largest
/// timestamp.
pub const MAX_TIMESTAMP: i64 = -3;
/// Kafka's `ListOffsetsRequest.EARLIEST_LOCAL_TIMESTAMP`: the local log start offset (the log
/// start offset: seglog has no tiered storage).
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
/// Kafka's `ListOffsetsRequest.LATEST_TIERED_TIMESTAMP` (no tiered storage: offset -1).
pub const LATEST_TIERED_TIMESTAMP: i64 = -5;
/// Kafka's `ListOffsetsRequest.EARLIEST_PENDING_UPLOAD_TIMESTAMP` (no tiered storage: offset -1).
pub const EARLIEST_PENDING_UPLOAD_TIMESTAMP: i64 = -6;

/// Kafka `FetchIsolation`: the bound of a fetch ([`PartitionLog::fetch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FetchIsolation {
    /// Up to the log end offset (a follower's fetch).
    LogEnd,
    /// Up to the high watermark (a `read_uncommitted` consumer).
    HighWatermark,
    /// Up to the last stable offset, with the aborted transactions (a `read_committed`
    /// consumer).
    TxnCommitted,
}

impl From<IsolationLevel> for FetchIsolation {
    fn from(i: IsolationLevel) -> Self {
        match i {
            IsolationLevel::ReadUncommitted => FetchIsolation::HighWatermark,
            IsolationLevel::ReadCommitted => FetchIsolation::TxnCommitted,
        }
    }
}

/// An owned fetch result (Kafka `FetchDataInfo` plus the partition's offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResult {
    /// The offset asked for.
    pub fetch_offset: i64,
    /// The isolation level of the read.
    pub isolation: IsolationLevel,
    /// The batches, all below the bound of the isolation level: whole ones from
    /// [`PartitionLog::read`]; from [`PartitionLog::fetch`] Kafka's bytes exactly, whose last
    /// batch may be cut short by `max_bytes` (a reader stops at a batch that is not whole).
    pub records: Vec<u8>,
    /// Kafka's `firstEntryIncomplete`: the first batch is larger than `max_bytes` and
    /// `min_one_message` was not asked for.
    pub first_entry_incomplete: bool,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
    /// Last stable offset at the time of the read.
    pub last_stable_offset: i64,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// `ReadCommitted`: aborted transactions overlapping the returned batches.
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
    /// The offset the next fetch asks for: one past the last offset of the last batch returned
    /// (reads return whole batches only), or `fetch_offset` when nothing was returned. Fetching
    /// from it goes on across segments.
    pub next_fetch_offset: i64,
}

/// One record as an application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Offset.
    pub offset: i64,
    /// Timestamp.
    pub timestamp: i64,
    /// Key.
    pub key: Option<Vec<u8>>,
    /// Value.
    pub value: Option<Vec<u8>>,
    /// Headers, as `(key, value)`.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// The consumer's view of fetched batches (Kafka `CompletedFetch.nextFetchedRecord`): control
/// batches (COMMIT/ABORT markers, the `MIRROR_PID_RESET` barrier, anything else) are never
/// returned; under `ReadCommitted`, records of aborted transactions are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerReader {
    isolation: IsolationLevel,
}

impl ConsumerReader {
    /// A reader at `isolation`.
    pub fn new(isolation: IsolationLevel) -> Self {
        Self { isolation }
    }

    /// The records of `fetch` an application would see, from `fetch.fetch_offset` on.
    ///
    /// Kafka's algorithm: aborted transactions are taken in first-offset order; before each
    /// batch with a producer id, every aborted transaction starting at or before the batch's
    /// last offset adds its producer id to the aborted set; an ABORT marker removes its
    /// producer id from the set; a transactional batch of a producer in the set is skipped. A
    /// `MIRROR_PID_RESET` barrier (any control batch whose first record has type 7, as producer
    /// state decides) empties the set: it aborted every open transaction and reset every
    /// producer. That is the one step Kafka's consumer does not have; it matters only for a log
    /// whose barrier met open transactions (`docs/barrier.md`, "Consumers").
    pub fn read(&self, fetch: &FetchResult) -> Result<Vec<ConsumedRecord>, PartitionLogError> {
        let read_committed = self.isolation == IsolationLevel::ReadCommitted;
        let mut pending: Vec<AbortedTxn> = fetch.aborted_transactions.clone().unwrap_or_default();
        pending.sort_by_key(|t| std::cmp::Reverse(t.first_offset));
        let mut aborted_pids = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        let limits = DecodeLimits::default();
        // A fetch may end in a batch cut short (Kafka's bytes, `PartitionLog::fetch`): the
        // reader stops before it, as Kafka's consumer does.
        let whole = whole_batches(&fetch.records);
        for entry in Batches::new(whole, 0).validate_crc(true) {
            let LogEntry::V2(batch) = entry? else {
                continue;
            };
            // A barrier is any control batch whose first record is of type 7, with or without a
            // producer id: the same test producer state applies (`BatchSummary`,
            // `is_mirror_pid_reset_batch`).
            if read_committed && is_mirror_pid_reset_batch(&batch)? {
                // The barrier completes every transaction still open as aborted (their
                // aborted-transaction entries end at the barrier's offset) and forgets every
                // producer: no producer id stays in the aborted set past it, so a local producer
                // that reuses an id after the failover is not hidden (docs/barrier.md).
                while pending
                    .last()
                    .is_some_and(|t| t.first_offset <= batch.last_offset())
                {
                    pending.pop();
                }
                aborted_pids.clear();
            }
            if read_committed && batch.has_producer_id() {
                while pending
                    .last()
                    .is_some_and(|t| t.first_offset <= batch.last_offset())
                {
                    if let Some(t) = pending.pop() {
                        aborted_pids.insert(t.producer_id);
                    }
                }
                let pid = batch.producer_id();
                if batch.is_control() {
                    if first_control_type(&batch)? == Some(ControlRecordType::Abort) {
                        aborted_pids.remove(&pid);
                    }
                } else if batch.is_transactional() && aborted_pids.contains(&pid) {
                    continue;
                }
            }
            if batch.is_control() {
                continue;
            }
            let records = batch.records(&limits)?;
            for r in records.iter() {
                let r = r?;
                if r.offset() < fetch.fetch_offset {
                    continue;
                }
                out.push(ConsumedRecord {
                    offset: r.offset(),
                    timestamp: r.timestamp(),
                    key: r.key().map(<[u8]>::to_vec),
                    value: r.value().map(<[u8]>::to_vec),
                    headers: r
                        .headers()
                        .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                        .collect(),
                });
            }
        }
        Ok(out)
    }
}

/// The records of a [`PartitionLog`] from an offset on, across segments
/// ([`PartitionLog::iter_from`]).
#[derive(Debug)]
pub struct RecordIter<'a> {
    log: &'a PartitionLog,
    isolation: IsolationLevel,
    next_offset: i64,
    bound: i64,
    pending: std::collections::VecDeque<ConsumedRecord>,
    done: bool,
}

impl RecordIter<'_> {
    /// Where the next fetch starts (the end once the iterator is exhausted).
    pub fn next_fetch_offset(&self) -> i64 {
        self.next_offset
    }

    /// The offset it stops at: the high watermark or last stable offset when it was created.
    pub fn bound(&self) -> i64 {
        self.bound
    }
}

impl Iterator for RecordIter<'_> {
    type Item = Result<ConsumedRecord, PartitionLogError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Some(Ok(r));
            }
            if self.done || self.next_offset >= self.bound {
                return None;
            }
            let fetched = self
                .log
                .read(self.next_offset, READ_CHUNK, self.isolation)
                .and_then(|f| Ok((ConsumerReader::new(self.isolation).read(&f)?, f)));
            let (records, fetch) = match fetched {
                Ok(x) => x,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if fetch.next_fetch_offset <= self.next_offset {
                // Nothing readable from here (cannot happen below the bound of a log the
                // iterator borrows; stop rather than spin).
                self.done = true;
                return None;
            }
            self.next_offset = fetch.next_fetch_offset;
            let bound = self.bound;
            self.pending
                .extend(records.into_iter().filter(|r| r.offset < bound));
        }
    }
}

/// [`ConsumerReader::read`] at the fetch's own isolation level.
pub fn consume(fetch: &FetchResult) -> Result<Vec<ConsumedRecord>, PartitionLogError> {
    ConsumerReader::new(fetch.isolation).read(fetch)
}

fn first_control_type(
    batch: &RecordBatch<'_>,
) -> Result<Option<ControlRecordType>, PartitionLogError> {
    if batch.records_count() <= 0 {
        return Ok(None);
    }
    let records = batch.records(&DecodeLimits::default())?;
    let Some(first) = records.iter().next() else {
        return Ok(None);
    };
    let first = first?;
    let (_, t) = ControlRecordKey::parse(first.key().unwrap_or(&[]), first.key_position())?;
    Ok(Some(t))
}

/// One validated batch of an append: where it is in the input and its leader epoch.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
    position: u64,
}

/// Splits `records` into whole, CRC-valid v2 batches. Control batches are refused unless
/// `allow_control`.
fn validate_batches(records: &[u8], allow_control: bool) -> Result<Vec<Span>, PartitionLogError> {
    let mut spans = Vec::new();
    let mut it = Batches::new(records, 0).validate_crc(true);
    for entry in &mut it {
        let entry = entry?;
        let position = entry.position();
        let batch = match entry {
            LogEntry::V2(b) => b,
            LogEntry::Legacy(l) => {
                return Err(PartitionLogError::UnsupportedMagic {
                    position,
                    magic: l.magic(),
                })
            }
        };
        if batch.is_control() && !allow_control {
            return Err(PartitionLogError::ControlBatchFromClient { position });
        }
        spans.push(Span {
            start: usize::try_from(position).unwrap_or(usize::MAX),
            len: batch.size_in_bytes(),
            position,
        });
    }
    if let Some(e) = it.incomplete_error() {
        return Err(PartitionLogError::InvalidRecords(e));
    }
    if let Some(IterEnd::Error(e)) = it.stopped_at() {
        return Err(PartitionLogError::InvalidRecords(e.clone()));
    }
    if spans.is_empty() {
        return Err(PartitionLogError::EmptyRecords);
    }
    Ok(spans)
}

fn batch_at(bytes: &[u8], span: Span) -> Result<RecordBatch<'_>, PartitionLogError> {
    let slice = bytes
        .get(span.start..span.start.saturating_add(span.len))
        .unwrap_or_default();
    Ok(RecordBatch::new(slice, span.position)?)
}

/// The value [`PartitionLog::high_watermark_cell`] holds while the high watermark is not known.
pub const UNKNOWN_HIGH_WATERMARK: i64 = -1;

/// The partition log. See the module docs.
#[derive(Debug)]
pub struct PartitionLog {
    pub(crate) dir: PathBuf,
    pub(crate) local: LocalLog,
    pub(crate) psm: ProducerStateManager,
    pub(crate) epochs: LeaderEpochFileCache,
    pub(crate) high_watermark: i64,
    pub(crate) config: PartitionLogConfig,
    pub(crate) clock: Arc<dyn Clock>,
    /// The storage the segments are written through; producer snapshots go through it too.
    pub(crate) io: StorageIo,
    /// The KIP-1279 mirror state, as persisted in the `mirror-state` file.
    pub(crate) mirror: MirrorPartitionState,
    /// The high watermark as others may observe it, and whether it is known.
    pub(crate) hw_state: HighWatermarkState,
}

/// Who moves the high watermark, the end of what readers may see, and what an open after an
/// unclean shutdown re-establishes ([`PartitionLog::reestablish_high_watermark`], which
/// [`load_log_dir`](crate::load_log_dir) applies to every partition it recovers).
///
/// Kafka's leader moves it as followers acknowledge; a storage engine embedded in a single
/// process has no followers, so it can let the high watermark follow the log end itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HighWatermark {
    /// Follows the flushed log end (the recovery point): after every flush, roll and at open,
    /// the high watermark is set to the offset below which everything is on disk. Readers see
    /// only data that survives a crash. After an unclean open: the recovered log end, once
    /// fsynced. The default.
    #[default]
    FlushedLogEnd,
    /// Follows the log end after every append: everything appended is readable at once, before
    /// it is durable (a crash can lose what a reader has seen). After an unclean open: the log
    /// end.
    LogEnd,
    /// Kafka's replication: nothing moves it but
    /// [`PartitionLog::set_high_watermark`] (and, at open, the
    /// `replication-offset-checkpoint`). Until then reads return nothing. After an unclean
    /// open the checkpoint's value may be stale or missing (and after a clean one an entry may
    /// be missing): it is marked unknown, a mirror stop refuses until the caller sets it
    /// ([`MirrorError::HighWatermarkUnknown`]), and no checkpoint gets an entry for it.
    Manual,
}

/// The high watermark's published copy (read by a checkpoint timer on another thread) and
/// whether it is known: after an unclean restart a high watermark owned by the caller
/// (replication) comes from a checkpoint that may be stale or missing, and a mirror stop must
/// not take a stop point from it.
#[derive(Debug, Clone)]
pub(crate) struct HighWatermarkState {
    published: Arc<AtomicI64>,
    known: bool,
}

impl Default for HighWatermarkState {
    fn default() -> Self {
        Self {
            published: Arc::new(AtomicI64::new(0)),
            known: true,
        }
    }
}

impl PartitionLog {
    /// The partition directory (also where producer snapshots live).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The segments.
    pub fn local_log(&self) -> &LocalLog {
        &self.local
    }
    /// Producer state.
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.psm
    }
    /// The leader-epoch cache.
    pub fn leader_epoch_cache(&self) -> &LeaderEpochFileCache {
        &self.epochs
    }
    /// Settings.
    pub fn config(&self) -> &PartitionLogConfig {
        &self.config
    }
    /// The storage the segments, producer snapshots and checkpoints are written through.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.io.0
    }
    /// The partition's `mirror-state` file, through the same storage as the log.
    pub fn mirror_state_file(&self) -> MirrorStateFile<StorageIo> {
        MirrorStateFile::with_io(&self.dir, self.io.clone())
    }
    /// The KIP-1279 mirror state (restored by the loader; changed only by the
    /// [`MirroredLog`] transitions, which persist it first).
    pub fn mirror_state(&self) -> &MirrorPartitionState {
        &self.mirror
    }
    /// The current leader epoch. While `Mirroring`: the destination's own epoch, which the
    /// library keeps above every source epoch it mirrors (persisted in the `mirror-state`
    /// file; the mirrored batches, and the leader-epoch cache, keep the source's epochs).
    /// Otherwise the latest of the leader-epoch cache (after a mirror stop, the epoch the stop
    /// chose), or 0 for a log that has none. The caller's metadata follows it.
    pub fn leader_epoch(&self) -> i32 {
        let cached = self.epochs.latest_epoch().unwrap_or(0).max(0);
        match self.mirror {
            MirrorPartitionState::Mirroring { leader_epoch, .. } if leader_epoch >= 0 => {
                leader_epoch
            }
            // A mirror-state file from before the destination's epoch was kept: fenced from
            // the cache until the next mirrored append persists one.
            MirrorPartitionState::Mirroring { .. } => cached.saturating_add(MIRROR_EPOCH_FENCE),
            _ => cached,
        }
    }

    /// The caller's leader epoch for a `Mirroring` partition (its metadata changed, e.g. a
    /// leader election on the destination cluster): one below [`leader_epoch`](Self::leader_epoch)
    /// is refused ([`PartitionLogError::StaleLeaderEpoch`]); a higher one is persisted in the
    /// `mirror-state` file and used from then on (the library still bumps it when a source
    /// epoch comes near). Returns the epoch in use. [`PartitionLogError::NotMirroring`] in
    /// other states (there, [`append_as_leader`](Self::append_as_leader) refuses a lower
    /// epoch).
    pub fn set_mirror_leader_epoch(&mut self, requested: i32) -> Result<i32, PartitionLogError> {
        let MirrorPartitionState::Mirroring {
            source_cluster_id,
            full_truncation_pending,
            ..
        } = &self.mirror
        else {
            return Err(PartitionLogError::NotMirroring {
                state: self.mirror.kind(),
            });
        };
        let current = self.leader_epoch();
        if requested < current {
            return Err(PartitionLogError::StaleLeaderEpoch { requested, current });
        }
        if requested > current || !self.mirror_epoch_persisted() {
            let next = MirrorPartitionState::Mirroring {
                source_cluster_id: source_cluster_id.clone(),
                leader_epoch: requested,
                full_truncation_pending: *full_truncation_pending,
            };
            self.persist_mirror_state(next)?;
        }
        Ok(requested)
    }

    fn mirror_epoch_persisted(&self) -> bool {
        matches!(self.mirror, MirrorPartitionState::Mirroring { leader_epoch, .. } if leader_epoch >= 0)
    }
    /// The offset the next batch gets.
    pub fn log_end_offset(&self) -> i64 {
        self.local.log_end_offset()
    }
    /// The first readable offset.
    pub fn log_start_offset(&self) -> i64 {
        self.local.log_start_offset()
    }
    /// Everything below it is durable.
    pub fn recovery_point(&self) -> i64 {
        self.local.recovery_point()
    }
    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Sets the high watermark, clamped to `[log start, log end]`, and lets producer state
    /// forget transactions completed below it. Returns the value set.
    pub fn set_high_watermark(&mut self, high_watermark: i64) -> i64 {
        let hw = high_watermark
            .min(self.log_end_offset())
            .max(self.log_start_offset());
        self.hw_state.known = true;
        self.store_high_watermark(hw);
        self.psm.on_high_watermark_updated(hw);
        hw
    }

    fn store_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw;
        let published = if self.hw_state.known {
            hw
        } else {
            UNKNOWN_HIGH_WATERMARK
        };
        self.hw_state.published.store(published, Ordering::Release);
    }

    /// The high watermark as another thread sees it: a shared cell the log updates whenever
    /// its high watermark changes (what a periodic `replication-offset-checkpoint` writer
    /// reads without holding the log). It holds [`UNKNOWN_HIGH_WATERMARK`] (−1) while the
    /// high watermark is not known: such a value must not be checkpointed.
    pub fn high_watermark_cell(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.hw_state.published)
    }

    /// The high watermark to write in `replication-offset-checkpoint`: `None` while it is not
    /// known (see [`mark_high_watermark_unknown`](Self::mark_high_watermark_unknown)), so that
    /// a stale or missing value is never written as if it were re-established (the entry is
    /// left out, and a load that finds no entry re-establishes it, see
    /// [`load_log_dir`](crate::load_log_dir)).
    pub fn checkpointable_high_watermark(&self) -> Option<i64> {
        self.hw_state.known.then_some(self.high_watermark)
    }

    /// Marks the high watermark as not known: after an unclean restart, a high watermark the
    /// caller owns (replication) comes from a checkpoint that may be stale or missing. Until
    /// [`set_high_watermark`](Self::set_high_watermark) is called, a mirror stop refuses to
    /// take its stop point ([`MirrorError::HighWatermarkUnknown`]), and no checkpoint of the
    /// log directory holds an entry for it.
    pub fn mark_high_watermark_unknown(&mut self) {
        self.hw_state.known = false;
        self.store_high_watermark(self.high_watermark);
    }

    /// After an unclean shutdown, the high watermark as `policy` re-establishes it (see
    /// [`HighWatermark`]): the recovered log end once fsynced, the log end, or (`Manual`)
    /// nothing: the loaded value is marked unknown until the caller sets it. The one place
    /// this rule lives; [`load_log_dir`](crate::load_log_dir) applies it to every partition
    /// after an unclean shutdown.
    pub fn reestablish_high_watermark(
        &mut self,
        policy: HighWatermark,
    ) -> Result<(), PartitionLogError> {
        match policy {
            HighWatermark::FlushedLogEnd => {
                // The recovered log end, once it is durable.
                self.flush()?;
                let end = self.log_end_offset();
                self.set_high_watermark(end);
            }
            HighWatermark::LogEnd => {
                let end = self.log_end_offset();
                self.set_high_watermark(end);
            }
            HighWatermark::Manual => self.mark_high_watermark_unknown(),
        }
        Ok(())
    }

    /// Moves the high watermark as `policy` says, after a load, flush or append: up to the
    /// recovery point (`FlushedLogEnd`), to the log end (`LogEnd`), or not at all (`Manual`).
    pub fn follow_high_watermark_policy(&mut self, policy: HighWatermark) {
        match policy {
            HighWatermark::FlushedLogEnd => {
                let flushed = self.recovery_point();
                if flushed > self.high_watermark() {
                    self.set_high_watermark(flushed);
                }
            }
            HighWatermark::LogEnd => {
                let end = self.log_end_offset();
                self.set_high_watermark(end);
            }
            HighWatermark::Manual => {}
        }
    }

    /// Whether the high watermark is known (see
    /// [`mark_high_watermark_unknown`](Self::mark_high_watermark_unknown)).
    pub fn high_watermark_known(&self) -> bool {
        self.hw_state.known
    }

    /// The partition's last stable offset: `min(first unstable offset, high watermark)`.
    pub fn last_stable_offset(&self) -> i64 {
        self.psm
            .last_stable_offset_for(self.high_watermark, self.log_start_offset())
    }

    /// Kafka `appendAsLeader`. See the module docs. `origin` is `Client` for produce requests
    /// (control batches refused, duplicates detected) or `Coordinator` (markers, barriers).
    /// Refused with [`PartitionLogError::ReadOnly`] while the partition is `Mirroring` or
    /// `Stopping` (KIP-1279): nothing local may enter a mirrored log; and with
    /// [`PartitionLogError::StaleLeaderEpoch`] in an epoch below the current one
    /// ([`leader_epoch`](Self::leader_epoch), after a mirror stop the epoch the stop chose).
    pub fn append_as_leader(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        if !self.mirror.accepts_client_appends() {
            return Err(PartitionLogError::ReadOnly {
                state: self.mirror.kind(),
            });
        }
        if let Some(current) = self.epochs.latest_epoch() {
            if leader_epoch < current {
                return Err(PartitionLogError::StaleLeaderEpoch {
                    requested: leader_epoch,
                    current,
                });
            }
        }
        self.append_as_leader_unchecked(records, leader_epoch, origin)
    }

    /// The leader append itself, past the mirror-state check (the barrier of a stop).
    fn append_as_leader_unchecked(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        let spans = validate_batches(records, origin != AppendOrigin::Client)?;
        let mut bytes = records.to_vec();
        let mut next = self.log_end_offset();
        let now = self.clock.now_ms();
        for span in &spans {
            let end = span.start.saturating_add(span.len);
            let Some(buf) = bytes.get_mut(span.start..end) else {
                return Err(PartitionLogError::EmptyRecords);
            };
            set_base_offset_and_leader_epoch(buf, next, leader_epoch)
                .map_err(|e| e.offset_by(span.position))?;
            if self.config.log_append_time {
                set_max_timestamp_log_append_time(buf, now)
                    .map_err(|e| e.offset_by(span.position))?;
            }
            next = RecordBatch::new(buf, span.position)?.next_offset();
        }
        self.append_validated(bytes, &spans, origin)
    }

    /// The KIP-1279 mirror fetcher's append: as [`append_as_follower`](Self::append_as_follower)
    /// (the source's batches keep their offsets, leader epochs and bytes), but only while the
    /// partition is `Mirroring` ([`PartitionLogError::NotMirroring`] otherwise: once `Stopping`
    /// began, nothing may land above the stop point).
    ///
    /// Before the batches are appended, the destination's own leader epoch
    /// ([`leader_epoch`](Self::leader_epoch)) is bumped and persisted if their source epoch
    /// comes within [`MIRROR_EPOCH_MARGIN`](crate::mirror::MIRROR_EPOCH_MARGIN) of it
    /// ([`fenced_mirror_epoch`]): the destination's epoch stays above every source epoch it
    /// has mirrored, even across a crash right after the append.
    pub fn append_as_mirror(&mut self, records: &[u8]) -> Result<LogAppendInfo, PartitionLogError> {
        let MirrorPartitionState::Mirroring {
            source_cluster_id,
            full_truncation_pending,
            ..
        } = &self.mirror
        else {
            return Err(PartitionLogError::NotMirroring {
                state: self.mirror.kind(),
            });
        };
        if *full_truncation_pending {
            return Err(PartitionLogError::MirrorTruncationPending);
        }
        // The batches' largest epoch, from their headers; a malformed input is refused below by
        // the append's own validation.
        let source_epoch = Batches::new(records, 0)
            .filter_map(|e| match e {
                Ok(LogEntry::V2(b)) => Some(b.partition_leader_epoch()),
                _ => None,
            })
            .max();
        if let Some(source_epoch) = source_epoch {
            let current = self.leader_epoch();
            let next = fenced_mirror_epoch(current, source_epoch)
                .ok_or(PartitionLogError::MirrorEpochExhausted)?;
            if next != current || !self.mirror_epoch_persisted() {
                let state = MirrorPartitionState::Mirroring {
                    source_cluster_id: source_cluster_id.clone(),
                    leader_epoch: next,
                    full_truncation_pending: false,
                };
                self.persist_mirror_state(state)?;
            }
        }
        self.append_as_follower(records)
    }

    /// Truncates a mirroring partition to where it diverges from `source` (the mirror fetcher's
    /// `OffsetsForLeaderEpoch` exchange, [`crate::mirror::alignment_point`]) and returns the new
    /// log end if anything was removed. Used when the source's log may have changed under the
    /// fetcher (the source failed over and truncated, as in a chain).
    pub fn align_to_source(
        &mut self,
        source: &dyn EpochEndOffsets,
    ) -> Result<Option<i64>, PartitionLogError> {
        match self.mirror {
            MirrorPartitionState::Mirroring {
                full_truncation_pending: false,
                ..
            } => {}
            MirrorPartitionState::Mirroring { .. } => {
                return Err(PartitionLogError::MirrorTruncationPending)
            }
            _ => {
                return Err(PartitionLogError::NotMirroring {
                    state: self.mirror.kind(),
                })
            }
        }
        let point = crate::mirror::alignment_point(self, source);
        if point < self.log_start_offset() {
            // Retention passed the point where the logs diverge: start over there.
            self.truncate_fully_and_start_at(point)?;
            self.flush()?;
            return Ok(Some(point));
        }
        if point < self.log_end_offset() && self.truncate_to(point)? {
            self.flush()?;
            return Ok(Some(point));
        }
        Ok(None)
    }

    /// Kafka `appendAsFollower` (intra-cluster replication): the batches keep their offsets,
    /// leader epochs and bytes; their first offset must be at or above the log end offset and
    /// offsets must increase. Producer state applies `Replication` rules. Allowed in every
    /// mirror state but `Stopping` ([`PartitionLogError::ReadOnly`]): from the persisted stop
    /// point until the barrier is written, nothing but the barrier may land in the log.
    pub fn append_as_follower(
        &mut self,
        records: &[u8],
    ) -> Result<LogAppendInfo, PartitionLogError> {
        if matches!(self.mirror, MirrorPartitionState::Stopping { .. }) {
            return Err(PartitionLogError::ReadOnly {
                state: self.mirror.kind(),
            });
        }
        let spans = validate_batches(records, true)?;
        if let Some(first) = spans.first() {
            let first_offset = batch_at(records, *first)?.base_offset();
            let log_end_offset = self.log_end_offset();
            if first_offset < log_end_offset {
                return Err(PartitionLogError::OffsetBelowLogEnd {
                    first_offset,
                    log_end_offset,
                });
            }
        }
        self.append_validated(records.to_vec(), &spans, AppendOrigin::Replication)
    }

    fn append_validated(
        &mut self,
        bytes: Vec<u8>,
        spans: &[Span],
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        let mut summaries = Vec::with_capacity(spans.len());
        let mut epochs = Vec::with_capacity(spans.len());
        for span in spans {
            let batch = batch_at(&bytes, *span)?;
            summaries.push(BatchSummary::from_batch(&batch)?);
            epochs.push((batch.partition_leader_epoch(), batch.base_offset()));
        }
        // Producer state first, checked against copies of the entries of the batches'
        // producers only: nothing is written if it refuses.
        let update = self.psm.analyze_and_validate(summaries.iter(), origin)?;
        if let Some(dup) = update.duplicates().first() {
            return Ok(LogAppendInfo {
                first_offset: dup.original.first_offset(),
                last_offset: dup.original.last_offset,
                max_timestamp: -1,
                num_batches: 0,
                bytes: 0,
                duplicate: true,
                rolled_to: None,
                warnings: Vec::new(),
                barriers: Vec::new(),
                aborted_txns: Vec::new(),
            });
        }
        let outcome = self.local.append(&bytes)?;
        let mut snapshot_result = Ok(());
        if let Some((base, _)) = outcome.rolled {
            // Kafka's roll: snapshot of the state before this append, named after the new base.
            let map_end = self.psm.map_end_offset();
            self.psm.update_map_end_offset(base);
            snapshot_result = self.psm.take_snapshot_with(&self.io, &self.dir).map(|_| ());
            self.psm.update_map_end_offset(map_end);
        }
        let applied = self.psm.apply_update(update);
        let txns = txn_index_entries(&applied.aborted_txns);
        self.local.append_aborted_txns(&txns)?;
        for (epoch, base) in epochs {
            self.maybe_assign_epoch(epoch, base)?;
        }
        snapshot_result?;
        Ok(LogAppendInfo {
            first_offset: outcome.first_offset,
            last_offset: outcome.last_offset,
            max_timestamp: outcome.max_timestamp,
            num_batches: spans.len(),
            bytes: bytes.len(),
            duplicate: false,
            rolled_to: outcome.rolled.map(|(b, _)| b),
            warnings: applied.warnings,
            barriers: applied.barriers,
            aborted_txns: applied.aborted_txns,
        })
    }

    fn maybe_assign_epoch(&mut self, epoch: i32, base: i64) -> Result<(), PartitionLogError> {
        if epoch >= 0 && self.epochs.latest_epoch().is_none_or(|l| epoch > l) {
            self.epochs.assign(epoch, base)?;
        }
        Ok(())
    }

    /// Reads whole batches from the one containing `start_offset`, at most `max_bytes` (at least
    /// one batch), below the high watermark (`ReadUncommitted`) or the last stable offset
    /// (`ReadCommitted`, which also returns the aborted transactions overlapping the batches).
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<FetchResult, PartitionLogError> {
        let log_start_offset = self.check_in_range(start_offset)?;
        let high_watermark = self.high_watermark;
        let last_stable_offset = self.last_stable_offset();
        let bound = match isolation {
            IsolationLevel::ReadUncommitted => high_watermark,
            IsolationLevel::ReadCommitted => last_stable_offset,
        };
        let mut records = Vec::new();
        let mut upper = start_offset;
        if start_offset < bound {
            let data = self.local.read(start_offset, max_bytes, true)?;
            let mut keep = 0usize;
            for entry in Batches::new(&data.records, 0) {
                let entry = entry?;
                if entry.last_offset() >= bound {
                    break;
                }
                keep = usize::try_from(entry.position())
                    .unwrap_or(usize::MAX)
                    .saturating_add(entry.size_in_bytes());
                upper = entry.last_offset().saturating_add(1);
            }
            records = data.records;
            records.truncate(keep);
        }
        let aborted_transactions = match isolation {
            IsolationLevel::ReadUncommitted => None,
            IsolationLevel::ReadCommitted => Some(if upper > start_offset {
                self.collect_aborted_transactions(start_offset, upper)?
            } else {
                Vec::new()
            }),
        };
        Ok(FetchResult {
            fetch_offset: start_offset,
            isolation,
            records,
            first_entry_incomplete: false,
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted_transactions,
            next_fetch_offset: upper,
        })
    }

    /// [`PartitionLogError::OffsetOutOfRange`] unless `offset` lies in `[log start, log end]`;
    /// the log start offset otherwise.
    fn check_in_range(&self, offset: i64) -> Result<i64, PartitionLogError> {
        let (log_start_offset, log_end_offset) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start_offset || offset > log_end_offset {
            return Err(PartitionLogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            });
        }
        Ok(log_start_offset)
    }

    /// Kafka's `UnifiedLog.read(startOffset, maxLength, isolation, minOneMessage)` exactly: the
    /// bytes from the batch holding `start_offset` in the first segment that has one, up to the
    /// byte position of the batch holding the bound of `isolation` (log end, high watermark or
    /// last stable offset), at most `max_bytes` (raised to the first batch's size with
    /// `min_one_message`); the last batch may be cut short, as Kafka's fetch may end (a server
    /// hands these bytes on; a reader stops at the first batch that is not whole). With
    /// [`FetchIsolation::TxnCommitted`], the aborted transactions Kafka's
    /// `addAbortedTransactions` returns: those overlapping the fetch offset up to the first
    /// offset-index entry past the bytes returned (else the next segment's base, else the log
    /// end). `next_fetch_offset` is one past the last whole batch returned. Compared with Kafka
    /// 4.3.1's own `UnifiedLog.read` on broker-written logs in `kafka_interop`.
    pub fn fetch(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchResult, PartitionLogError> {
        let high_watermark = self.high_watermark;
        let last_stable_offset = self.last_stable_offset();
        let log_start_offset = self.check_in_range(start_offset)?;
        let bound = match isolation {
            FetchIsolation::LogEnd => self.log_end_offset(),
            FetchIsolation::HighWatermark => high_watermark,
            FetchIsolation::TxnCommitted => last_stable_offset,
        };
        let committed = isolation == FetchIsolation::TxnCommitted;
        let exact = self
            .local
            .read_exact(start_offset, max_bytes, min_one_message, bound)?;
        let (records, first_entry_incomplete, aborted_transactions) = match exact {
            // No segment holds a batch at or after the offset: no records, no list.
            None => (Vec::new(), false, None),
            Some(e) => {
                let aborted = if !committed {
                    None
                } else if start_offset >= bound {
                    Some(Vec::new())
                } else {
                    Some(self.collect_aborted_transactions(start_offset, e.upper_bound_offset)?)
                };
                (e.data.records, e.data.first_entry_incomplete, aborted)
            }
        };
        let mut next_fetch_offset = start_offset;
        for entry in Batches::new(&records, 0) {
            match entry {
                Ok(e) => next_fetch_offset = e.last_offset().saturating_add(1),
                Err(_) => break,
            }
        }
        Ok(FetchResult {
            fetch_offset: start_offset,
            isolation: match isolation {
                FetchIsolation::TxnCommitted => IsolationLevel::ReadCommitted,
                _ => IsolationLevel::ReadUncommitted,
            },
            records,
            first_entry_incomplete,
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted_transactions,
            next_fetch_offset,
        })
    }

    /// Kafka's `UnifiedLog.fetchOffsetByTimestamp` (what the leader answers to `ListOffsets`,
    /// before the broker bounds `latest` by the isolation level): for
    /// [`EARLIEST_TIMESTAMP`]/[`EARLIEST_LOCAL_TIMESTAMP`] the log start offset (with the first
    /// cached leader epoch if it starts at or below it), for [`LATEST_TIMESTAMP`] the log end
    /// offset and the latest epoch, for [`MAX_TIMESTAMP`] the first record with the largest
    /// timestamp (KIP-734), for [`LATEST_TIERED_TIMESTAMP`] and
    /// [`EARLIEST_PENDING_UPLOAD_TIMESTAMP`] offset -1 and epoch -1 (no tiered storage), and for a
    /// real timestamp the first record at or after it from the log start on (`None` if none).
    /// The timestamp of the special answers is -1. Compared with Kafka 4.3.1's own on
    /// broker-written logs (`kafka_interop`, `reads`).
    pub fn fetch_offset_by_timestamp(
        &self,
        target: i64,
    ) -> Result<Option<segment_store::file_records::TimestampAndOffset>, PartitionLogError> {
        use segment_store::file_records::TimestampAndOffset;
        let special = |offset: i64, leader_epoch: Option<i32>| {
            Some(TimestampAndOffset {
                timestamp: -1,
                offset,
                leader_epoch,
            })
        };
        Ok(match target {
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
                let start = self.log_start_offset();
                let epoch = self
                    .epochs
                    .earliest_entry()
                    .filter(|e| e.start_offset <= start)
                    .map(|e| e.epoch);
                special(start, epoch)
            }
            LATEST_TIMESTAMP => special(self.log_end_offset(), self.epochs.latest_epoch()),
            LATEST_TIERED_TIMESTAMP | EARLIEST_PENDING_UPLOAD_TIMESTAMP => special(-1, Some(-1)),
            MAX_TIMESTAMP => self.local.offset_of_max_timestamp()?,
            t => self.local.fetch_offset_by_timestamp(t)?,
        })
    }

    /// Kafka's `UnifiedLog.endOffsetForEpoch` (what the leader answers to
    /// `OffsetsForLeaderEpoch`): `(epoch, end offset)` for the largest epoch at or below
    /// `leader_epoch`, its end the start of the next epoch or the log end; `None` when it is
    /// undefined (no epoch at all, or `leader_epoch` above the latest one).
    pub fn end_offset_for_leader_epoch(&self, leader_epoch: i32) -> Option<(i32, i64)> {
        let (epoch, offset) = self
            .epochs
            .end_offset_for(leader_epoch, self.log_end_offset());
        (offset != crate::leader_epoch::UNDEFINED_EPOCH_OFFSET).then_some((epoch, offset))
    }

    /// The records from `offset` on as a consumer at `isolation` sees them, across segments:
    /// Kafka's fetch loop, reading 1 MiB at a time from the batch holding `offset` and going on
    /// at each fetch's [`FetchResult::next_fetch_offset`], each fetch read by a
    /// [`ConsumerReader`] (control batches hidden; under `ReadCommitted`, the records of aborted
    /// transactions skipped, including a transaction whose batches span several segments, since
    /// each fetch carries the aborted transactions that overlap it). Records below `offset` in
    /// the first batch are skipped.
    ///
    /// The iterator stops at the bound of `isolation` when it was created: the high watermark
    /// (`ReadUncommitted`) or the last stable offset (`ReadCommitted`). It borrows the log, so
    /// nothing can be appended, truncated or deleted while it lives; it does not follow the
    /// tail. Memory is one fetch's window, whatever the log's size.
    /// [`PartitionLogError::OffsetOutOfRange`] for an `offset` outside `[log start, log end]`.
    pub fn iter_from(
        &self,
        offset: i64,
        isolation: IsolationLevel,
    ) -> Result<RecordIter<'_>, PartitionLogError> {
        self.check_in_range(offset)?;
        let bound = match isolation {
            IsolationLevel::ReadUncommitted => self.high_watermark,
            IsolationLevel::ReadCommitted => self.last_stable_offset(),
        };
        Ok(RecordIter {
            log: self,
            isolation,
            next_offset: offset,
            bound,
            pending: std::collections::VecDeque::new(),
            done: false,
        })
    }

    /// Kafka `collectAbortedTransactions(startOffset, upperBoundOffset)`: from the segment
    /// containing `start_offset` on, until a segment's search is complete.
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<Vec<AbortedTxn>, PartitionLogError> {
        // As Kafka's `LocalLog.collectAbortedTransactions`: no stop at the upper bound's
        // segment, because an aborted transaction is indexed in the segment holding its ABORT
        // marker, which may be any later segment.
        self.local.with_segments_from(start_offset, |segments| {
            let mut out = Vec::new();
            for seg in segments {
                let found = seg?.collect_aborted_txns(start_offset, upper_bound_offset)?;
                out.extend(found.aborted_transactions);
                if found.is_complete {
                    break;
                }
            }
            Ok(out)
        })?
    }

    /// Kafka `truncateTo(target)`: removes every batch at or above `target` (which must be a
    /// batch boundary), truncates the leader-epoch cache from the end, and rebuilds producer
    /// state from the newest snapshot at or below `target` by replaying the log (barriers
    /// included). A target at or past the log end is a no-op. Returns whether anything was
    /// removed.
    pub fn truncate_to(&mut self, target: i64) -> Result<bool, PartitionLogError> {
        if target < 0 {
            return Err(PartitionLogError::NegativeOffset(target));
        }
        let log_end_offset = self.log_end_offset();
        if target >= log_end_offset {
            self.epochs.truncate_from_end(log_end_offset)?;
            return Ok(false);
        }
        if target > self.log_start_offset() {
            let data = self.local.read(target, 1, true)?;
            if let Some(Ok(entry)) = Batches::new(&data.records, 0).next() {
                let base = match &entry {
                    LogEntry::V2(b) => b.base_offset(),
                    LogEntry::Legacy(l) => l.offset(),
                };
                if base < target {
                    return Err(PartitionLogError::NotBatchAligned {
                        target,
                        batch_base_offset: base,
                    });
                }
            }
        }
        self.local.truncate_to(target)?;
        self.epochs.truncate_from_end(target)?;
        self.store_high_watermark(self.high_watermark.min(target));
        self.rebuild_producer_state(target)?;
        Ok(true)
    }

    /// Kafka `truncateFullyAndStartAt(newOffset)`: deletes every segment and snapshot, clears
    /// the leader-epoch cache and producer state, and starts empty at `new_offset`.
    pub fn truncate_fully_and_start_at(
        &mut self,
        new_offset: i64,
    ) -> Result<(), PartitionLogError> {
        if new_offset < 0 {
            return Err(PartitionLogError::NegativeOffset(new_offset));
        }
        self.local.truncate_fully_and_start_at(new_offset)?;
        self.epochs.clear()?;
        self.psm.truncate_fully_and_start_at(new_offset);
        delete_snapshots_above_with(&self.io, &self.dir, -1)?;
        // An empty log has only one possible high watermark.
        self.hw_state.known = true;
        self.store_high_watermark(new_offset);
        Ok(())
    }

    /// Kafka `rebuildProducerState(lastOffset)` (§7.8, without the clean-shutdown shortcut):
    /// reload the newest valid snapshot at or below `last_offset` (unless the state already ends
    /// there), replay the log from its offset to `last_offset` with `Replication` rules, then
    /// snapshot.
    pub(crate) fn rebuild_producer_state(
        &mut self,
        last_offset: i64,
    ) -> Result<SnapshotLoad, PartitionLogError> {
        let now = self.clock.now_ms();
        let log_start = self.log_start_offset();
        let load =
            self.psm
                .truncate_and_reload_with(&self.io, &self.dir, log_start, last_offset, now)?;
        let from = self.psm.map_end_offset().max(log_start);
        if last_offset > from {
            replay(&self.local, &mut self.psm, from, last_offset)?;
        }
        self.psm.update_map_end_offset(last_offset);
        self.psm.take_snapshot_with(&self.io, &self.dir)?;
        Ok(load)
    }

    /// Finds the first `MIRROR_PID_RESET` batch at offset `>= from`.
    pub fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, PartitionLogError> {
        let end = self.log_end_offset();
        let mut offset = from.max(self.log_start_offset());
        while offset < end {
            let data = self.local.read(offset, READ_CHUNK, true)?;
            let mut next = None;
            for entry in Batches::new(&data.records, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                if batch.last_offset() >= from && is_mirror_pid_reset_batch(&batch)? {
                    return Ok(Some(batch.base_offset()));
                }
                next = Some(batch.next_offset());
            }
            match next {
                Some(n) if n > offset => offset = n,
                _ => break,
            }
        }
        Ok(None)
    }

    /// The largest partition leader epoch of any batch in the log (`None`: no batch carries
    /// one). Reads every batch header from the log start: the leader-epoch cache may have lost
    /// entries (a lost or stale `leader-epoch-checkpoint`; segments loaded without recovery are
    /// not scanned for epochs), so it cannot answer this alone.
    pub fn max_batch_epoch(&self) -> Result<Option<i32>, PartitionLogError> {
        let end = self.log_end_offset();
        let mut offset = self.log_start_offset();
        let mut max: Option<i32> = None;
        while offset < end {
            let data = self.local.read(offset, READ_CHUNK, true)?;
            let mut next = None;
            for entry in Batches::new(&data.records, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                let epoch = batch.partition_leader_epoch();
                if epoch >= 0 && max.is_none_or(|m| epoch > m) {
                    max = Some(epoch);
                }
                next = Some(batch.next_offset());
            }
            match next {
                Some(n) if n > offset => offset = n,
                _ => break,
            }
        }
        Ok(max)
    }

    /// Kafka `UnifiedLog.roll`: flushes the log up to its end, seals the active segment and
    /// starts a new one at the log end offset, with a producer snapshot named after its base
    /// (as at a roll caused by an append). Returns the new base offset.
    pub fn roll(&mut self) -> Result<i64, PartitionLogError> {
        let base = self.local.roll(None)?;
        self.psm.update_map_end_offset(base);
        self.psm.take_snapshot_with(&self.io, &self.dir)?;
        Ok(base)
    }

    /// Kafka `takeProducerSnapshot`: writes a producer snapshot at the log end offset now
    /// (atomically; Kafka otherwise snapshots only at rolls and at close). The log itself is not
    /// flushed: after a crash that loses the unflushed tail, the snapshot is "from the future"
    /// and loading discards it. Returns its path, or `None` if one exists at that offset.
    pub fn take_producer_snapshot(&mut self) -> Result<Option<PathBuf>, PartitionLogError> {
        let end = self.log_end_offset();
        self.psm.update_map_end_offset(end);
        Ok(self.psm.take_snapshot_with(&self.io, &self.dir)?)
    }

    /// Kafka `UnifiedLog.removeExpiredProducers`, what its `PeriodicProducerExpirationCheck`
    /// task runs every `producer.id.expiration.check.interval.ms`: drops the producers with no
    /// open transaction whose last write is at least `producer.id.expiration.ms` older than the
    /// log's clock now, and returns them (by producer id). A later batch of such a producer is
    /// not checked against its old sequence, as in Kafka. O(producers).
    pub fn remove_expired_producers(&mut self) -> Vec<ExpiredProducer> {
        let now = self.clock.now_ms();
        self.psm.remove_expired_producer_entries(now)
    }

    /// Kafka `ProducerStateManager.latestSnapshotOffset`: the offset of the newest producer
    /// snapshot file in the partition directory, if any.
    pub fn latest_snapshot_offset(&self) -> Result<Option<i64>, PartitionLogError> {
        Ok(latest_snapshot_offset_with(&self.io, &self.dir)?)
    }

    /// Kafka `ProducerStateManager.oldestSnapshotOffset`: the offset of the oldest producer
    /// snapshot file in the partition directory, if any.
    pub fn oldest_snapshot_offset(&self) -> Result<Option<i64>, PartitionLogError> {
        Ok(oldest_snapshot_offset_with(&self.io, &self.dir)?)
    }

    /// Kafka `ProducerStateManager.deleteSnapshotsBefore`: deletes the producer snapshot files
    /// with offset `< offset` and returns them (the deletions are reported, not silent).
    ///
    /// A snapshot is derived state: one at or above the log start can be taken again from the
    /// log, one below it describes producers of segments already deleted. Kafka deletes those
    /// as the log start moves (retention does it here too, keeping the snapshot at the oldest
    /// segment's base); this is the same deletion on demand, as a live broker does it, not a
    /// recovery step, so nothing is quarantined. The in-memory producer state is unchanged.
    pub fn delete_snapshots_before(
        &mut self,
        offset: i64,
    ) -> Result<Vec<SnapshotFile>, PartitionLogError> {
        Ok(delete_snapshots_before_with(&self.io, &self.dir, offset)?)
    }

    /// Kafka `ProducerStateManager.removeStraySnapshots` with this log's segment bases: deletes
    /// every producer snapshot file not at a segment's base offset, except the newest of them
    /// when it is at or above the active segment's base (the snapshot a clean close writes at
    /// the log end), and returns the deleted files
    /// ([`stray_snapshots`](crate::snapshot::stray_snapshots) says which). As
    /// [`Self::delete_snapshots_before`], Kafka's own housekeeping of derived state: reported,
    /// not quarantined. The in-memory producer state is unchanged.
    pub fn remove_stray_snapshots(&mut self) -> Result<Vec<SnapshotFile>, PartitionLogError> {
        let bases = self.local.segment_bases();
        Ok(remove_stray_snapshots_with(&self.io, &self.dir, &bases)?)
    }

    /// Kafka `deleteRecords` (`maybeIncrementLogStartOffset`, reason `ClientRecordDeletion`):
    /// raises the log start offset to `new_start`, which must not pass the high watermark
    /// ([`PartitionLogError::OffsetOutOfRange`] otherwise; a lower value is a no-op) and trims
    /// the leader-epoch cache and producer state. The segments now wholly below the log start go
    /// at the next [`Self::delete_old_segments`]. Returns whether the log start moved.
    pub fn delete_records_before(&mut self, new_start: i64) -> Result<bool, PartitionLogError> {
        if new_start > self.high_watermark {
            return Err(PartitionLogError::OffsetOutOfRange {
                offset: new_start,
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.high_watermark,
            });
        }
        if !self.local.increment_log_start_offset(new_start)? {
            return Ok(false);
        }
        self.on_log_start_offset_incremented()?;
        Ok(true)
    }

    /// Kafka `deleteOldSegments`: deletes, oldest first, the segments that breach `retention.ms`
    /// (by their newest timestamp), `retention.bytes`, or lie wholly below the log start offset,
    /// never past the high watermark (see [`LocalLog::delete_old_segments`]; each segment's
    /// files are renamed to `*.deleted`, the directory synced, then removed). The log start
    /// offset moves up to the first remaining segment; the snapshots of the deleted segments
    /// are deleted, the one at the new log start is kept (when every segment goes, a new empty
    /// one is rolled first and gets its snapshot, as at any roll). Returns the number of
    /// segments deleted.
    pub fn delete_old_segments(&mut self) -> Result<usize, PartitionLogError> {
        let (psm, io, dir) = (&mut self.psm, &self.io, &self.dir);
        // If every segment goes, the new empty one gets its snapshot before any is deleted, as
        // at any roll: the producers of the deleted segments survive a crash.
        let deleted = self
            .local
            .delete_old_segments_with(self.high_watermark, &mut |base| {
                psm.update_map_end_offset(base);
                psm.take_snapshot_with(io, dir)?;
                Ok::<(), PartitionLogError>(())
            })?;
        if deleted > 0 {
            self.on_log_start_offset_incremented()?;
        }
        Ok(deleted)
    }

    fn on_log_start_offset_incremented(&mut self) -> Result<(), PartitionLogError> {
        let start = self.log_start_offset();
        let oldest_base = self.local.first_segment_base().unwrap_or(start);
        self.epochs.truncate_from_start(start)?;
        self.psm
            .on_log_start_offset_incremented_with(&self.io, &self.dir, start, oldest_base)?;
        self.store_high_watermark(self.high_watermark.max(start));
        Ok(())
    }

    /// Flushes the segments up to the log end offset (the recovery point moves there).
    pub fn flush(&mut self) -> Result<(), PartitionLogError> {
        let end = self.log_end_offset();
        self.local.flush(end)?;
        Ok(())
    }

    /// Kafka `UnifiedLog.close()` on a clean shutdown: flush everything, take a producer
    /// snapshot at the log end offset, write the leader-epoch checkpoint, close the segments.
    pub fn close(self) -> Result<ClosedLog, PartitionLogError> {
        self.close_with(true)
    }

    /// [`Self::close`]; without `sync` the segments are not flushed: for a log directory that
    /// closes many partitions and then makes its whole file system durable with one
    /// [`segment_store::io::Storage::sync_filesystem`] before it writes its checkpoints. (The
    /// producer snapshot and the leader-epoch checkpoint are still written atomically.)
    pub(crate) fn close_with(mut self, sync: bool) -> Result<ClosedLog, PartitionLogError> {
        if sync {
            self.flush()?;
        }
        let end = self.log_end_offset();
        self.psm.update_map_end_offset(end);
        self.psm.take_snapshot_with(&self.io, &self.dir)?;
        self.epochs.flush()?;
        let closed = ClosedLog {
            dir: self.dir.clone(),
            log_start_offset: self.log_start_offset(),
            log_end_offset: end,
            high_watermark: self.checkpointable_high_watermark(),
        };
        if sync {
            self.local.close()?;
        } else {
            self.local.close_unsynced()?;
        }
        Ok(closed)
    }
}

/// What a clean close leaves behind, for the log directory's checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedLog {
    /// The partition directory.
    pub dir: PathBuf,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Log end offset (also the recovery point: everything was flushed).
    pub log_end_offset: i64,
    /// High watermark; `None` when it is not known (a caller-owned high watermark after an
    /// unclean restart that the caller has not set): it gets no checkpoint entry.
    pub high_watermark: Option<i64>,
}

/// Transaction-index entries for `aborted`, in order. Barrier aborts share the barrier's offset
/// as last offset (the index accepts equal last offsets for them; see `docs/barrier.md`).
pub(crate) fn txn_index_entries(aborted: &[AbortedTxnRecord]) -> Vec<AbortedTxn> {
    aborted
        .iter()
        .map(|a| {
            AbortedTxn::new(
                a.producer_id,
                a.first_offset,
                a.last_offset,
                a.last_stable_offset,
            )
        })
        .collect()
}

/// Replays the batches of `local` in `[from, to)` into `psm` with `Replication` rules (Kafka
/// `loadProducersFromRecords`; the transaction index is not rewritten).
pub(crate) fn replay(
    local: &LocalLog,
    psm: &mut ProducerStateManager,
    from: i64,
    to: i64,
) -> Result<(), PartitionLogError> {
    let mut offset = from;
    // Batch by batch, in place (the state equals applying each fetch in one call, as Kafka's
    // `loadProducersFromRecords` does: the property tests check both).
    let mut applied = AppliedBatches::default();
    while offset < to && offset < local.log_end_offset() {
        // Zero-copy from the sealed segments' maps (only the headers are read). The read walks
        // the window's headers once to cut it at a batch boundary; a window that fits in the
        // cache keeps them there for this walk (measured: 1 MiB windows 21 ms for the bench's
        // 156 MiB tail, 16 MiB 33 ms, 64 MiB 59 ms).
        let next = local.read_with(offset, READ_CHUNK, true, |data| {
            let mut next = None;
            for entry in Batches::new(&data.records, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                if batch.last_offset() >= to {
                    next = Some(to);
                    break;
                }
                next = Some(batch.next_offset());
                if batch.base_offset() >= from {
                    psm.apply_replicated_batch(&BatchSummary::from_batch(&batch)?, &mut applied)?;
                    applied.clear();
                }
            }
            Ok::<_, PartitionLogError>(next)
        })??;
        match next {
            Some(n) if n > offset => offset = n,
            _ => break,
        }
    }
    Ok(())
}

impl EpochEndOffsets for PartitionLog {
    /// Kafka `UnifiedLog.endOffsetForEpoch` (what the leader answers to `OffsetsForLeaderEpoch`).
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        self.epochs.end_offset_for(requested, self.log_end_offset())
    }

    /// The LME persisted by this log's stop, while it is `Stopped`.
    fn last_mirror_epoch(&self) -> Option<crate::mirror::LastMirrorEpoch> {
        crate::mirror::last_mirror_epoch_of(&self.mirror, self, self.epochs.latest_epoch())
    }
}

impl MirrorLog for PartitionLog {
    type Error = PartitionLogError;

    fn last_stable_offset(&self) -> i64 {
        PartitionLog::last_stable_offset(self)
    }

    fn log_start_offset(&self) -> i64 {
        PartitionLog::log_start_offset(self)
    }

    fn log_end_offset(&self) -> i64 {
        PartitionLog::log_end_offset(self)
    }

    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    fn high_watermark_known(&self) -> bool {
        PartitionLog::high_watermark_known(self)
    }

    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Self::Error> {
        if self.epochs.latest_epoch() != Some(epoch) {
            self.epochs.assign(epoch, start_offset)?;
        }
        Ok(())
    }

    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error> {
        PartitionLog::truncate_to(self, offset).map(|_| ())
    }

    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Self::Error> {
        PartitionLog::truncate_fully_and_start_at(self, offset)
    }

    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error> {
        PartitionLog::find_barrier_from(self, from)
    }

    fn max_batch_epoch(&self) -> Result<Option<i32>, Self::Error> {
        PartitionLog::max_batch_epoch(self)
    }

    fn append_barrier(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
    ) -> Result<i64, Self::Error> {
        let bytes = mirror_pid_reset_batch(0, self.clock.now_ms(), leader_epoch, source_cluster_id);
        let info =
            self.append_as_leader_unchecked(&bytes, leader_epoch, AppendOrigin::Coordinator)?;
        Ok(info.first_offset)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        PartitionLog::flush(self)
    }

    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, Self::Error> {
        // In first-offset order; each producer id has at most one open transaction.
        let open: Vec<(i64, i16, i32)> = self
            .psm
            .ongoing_txns()
            .values()
            .map(|txn| {
                let entry = self.psm.last_entry(txn.producer_id);
                (
                    txn.producer_id,
                    entry.map_or(0, |e| e.producer_epoch()),
                    entry.map_or(-1, |e| e.coordinator_epoch()),
                )
            })
            .collect();
        for &(producer_id, producer_epoch, coordinator_epoch) in &open {
            let bytes = record_format::end_txn_marker_batch(
                0,
                self.clock.now_ms(),
                leader_epoch,
                producer_id,
                producer_epoch,
                ControlRecordType::Abort,
                coordinator_epoch,
            );
            self.append_as_leader_unchecked(&bytes, leader_epoch, AppendOrigin::Coordinator)?;
        }
        Ok(open.len())
    }
}

impl MirroredLog for PartitionLog {
    fn mirror_state(&self) -> &MirrorPartitionState {
        &self.mirror
    }

    /// Writes the `mirror-state` file atomically through the log's storage seam, then takes the
    /// state.
    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError> {
        self.mirror_state_file().store(&next)?;
        self.mirror = next;
        Ok(())
    }
}

impl PartitionLog {
    /// [`MirroredLog::start_mirroring`]: aligns this log to `source` by leader epoch, then
    /// `Mirroring`.
    pub fn start_mirroring(
        &mut self,
        source_cluster_id: &str,
        source: &dyn EpochEndOffsets,
    ) -> Result<(), MirrorError<PartitionLogError>> {
        MirroredLog::start_mirroring(self, source_cluster_id, source)
    }

    /// [`MirroredLog::stop_mirroring`]: the `Stopping` steps; returns the barrier's offset.
    pub fn stop_mirroring(&mut self) -> Result<i64, MirrorError<PartitionLogError>> {
        MirroredLog::stop_mirroring(self)
    }

    /// [`MirroredLog::stop_mirroring_with`]: the `Stopping` steps under `policy`; returns the
    /// barrier's offset.
    pub fn stop_mirroring_with(
        &mut self,
        policy: crate::mirror::StopPolicy,
    ) -> Result<i64, MirrorError<PartitionLogError>> {
        MirroredLog::stop_mirroring_with(self, policy)
    }

    /// [`MirroredLog::resume_mirror_stop`]: finishes an interrupted stop.
    pub fn resume_mirror_stop(
        &mut self,
    ) -> Result<&MirrorPartitionState, MirrorError<PartitionLogError>> {
        MirroredLog::resume_mirror_stop(self)
    }
}
