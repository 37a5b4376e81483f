//! Reads: fetches bounded by the high watermark or the last stable offset, offsets by
//! timestamp and by leader epoch, the aborted transactions of a range.

use record_format::Batches;
use segment_store::{AbortedTxn, FileSlice};

use super::consumer::RecordIter;
use super::error::PartitionLogError;
use super::PartitionLog;

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
pub(super) fn whole_batches(bytes: &[u8]) -> &[u8] {
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

/// The isolation level a fetch at `isolation` reports (a follower's reads uncommitted).
fn isolation_level(isolation: FetchIsolation) -> IsolationLevel {
    match isolation {
        FetchIsolation::TxnCommitted => IsolationLevel::ReadCommitted,
        _ => IsolationLevel::ReadUncommitted,
    }
}

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

/// [`PartitionLog::fetch_slices`]'s answer: [`FetchResult`] of [`PartitionLog::fetch`] with the
/// bytes left in the segment's `.log` as a [`FileSlice`], for a server that hands file regions
/// to `sendfile` (Kafka's fetch answers with a `FileRecords` slice).
///
/// The slice holds the `.log`'s open file, not a copy and not a map: it reads the bytes it
/// names while it is held, after retention deleted the segment or the log was closed; after a
/// truncation below its end a read of it is short ([`FileSlice::to_vec`] fails with
/// `SliceTruncated`), never a fault. See `segment_store::file_slice`.
#[derive(Debug, Clone)]
pub struct FetchSlices {
    /// The offset asked for.
    pub fetch_offset: i64,
    /// The isolation level of the read.
    pub isolation: IsolationLevel,
    /// The bytes [`PartitionLog::fetch`] returns for the same call (the last batch may be cut
    /// short), as one range of the `.log` of the segment holding them; `None` when it returns
    /// none.
    pub slice: Option<FileSlice>,
    /// Kafka's `firstEntryIncomplete`, as in [`FetchResult::first_entry_incomplete`].
    pub first_entry_incomplete: bool,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
    /// Last stable offset at the time of the read.
    pub last_stable_offset: i64,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// `TxnCommitted`: the aborted transactions [`PartitionLog::fetch`] returns with the bytes.
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
}

impl FetchSlices {
    /// [`FetchResult::next_fetch_offset`]: one past the last offset of the last whole batch in
    /// the slice, `fetch_offset` when it holds none. Found when asked, not by the fetch: it
    /// reads the headers of the slice's last batches (a few KiB from an offset-index entry
    /// before the slice's end, [`FileSlice::next_offset`]), which a server that hands the slice
    /// to `sendfile` does not need. Fails only as a read of the slice fails (after a truncation
    /// below its end, `SliceTruncated`).
    pub fn next_fetch_offset(&self) -> Result<i64, PartitionLogError> {
        let next = match &self.slice {
            Some(s) => s.next_offset()?,
            None => None,
        };
        Ok(next.unwrap_or(self.fetch_offset))
    }

    /// The slice's length in bytes (0 without one).
    pub fn len(&self) -> u64 {
        self.slice.as_ref().map_or(0, FileSlice::len)
    }

    /// Whether the answer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a fetch found besides its bytes: the parts [`FetchResult`] and [`FetchSlices`] share.
struct FetchParts<T> {
    data: T,
    first_entry_incomplete: bool,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    aborted_transactions: Option<Vec<AbortedTxn>>,
}

/// What a read of Kafka's exact fetch bounds returned ([`segment_store::ExactFetch`] or
/// [`segment_store::ExactSlice`]): its bytes, `first_entry_incomplete`, the upper bound of its
/// aborted transactions.
type ExactParts<T> = Option<(T, bool, i64)>;

/// How many times a `ReadCommitted` read is tried while the segments change under it.
const CONSISTENT_READ_ATTEMPTS: usize = 16;

/// A partition's reads at given bounds: the one implementation behind [`PartitionLog`]'s reads
/// (its bounds as they are) and [`LogReader`](super::LogReader)'s (the bounds last published).
pub(crate) struct View<'a> {
    pub(crate) local: &'a segment_store::LocalLog,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable_offset: i64,
    pub(crate) epochs: &'a [segment_store::EpochEntry],
}

impl View<'_> {
    /// The end of what a fetch at `isolation` returns.
    pub(crate) fn bound(&self, isolation: FetchIsolation) -> i64 {
        match isolation {
            FetchIsolation::LogEnd => self.local.log_end_offset(),
            FetchIsolation::HighWatermark => self.high_watermark,
            FetchIsolation::TxnCommitted => self.last_stable_offset,
        }
    }

    /// Runs `read` until no segment was removed, replaced or truncated while it ran (a roll does
    /// not count), for a `ReadCommitted` read: its bytes and its aborted transactions are two
    /// reads of the segments, and a deletion or truncation between them (the writer goes on beside readers)
    /// could take away the transaction index entry of an ABORT marker whose records the bytes
    /// hold. After [`CONSISTENT_READ_ATTEMPTS`] changed layouts the read fails as out of range
    /// (a reader asks again, as after a deletion).
    fn consistent<R>(
        &self,
        committed: bool,
        offset: i64,
        read: impl Fn() -> Result<R, PartitionLogError>,
    ) -> Result<R, PartitionLogError> {
        if !committed {
            return read();
        }
        for _ in 0..CONSISTENT_READ_ATTEMPTS {
            let generation = self.local.generation();
            let r = read()?;
            if self.local.generation() == generation {
                return Ok(r);
            }
        }
        Err(PartitionLogError::OffsetOutOfRange {
            offset,
            log_start_offset: self.local.log_start_offset(),
            log_end_offset: self.local.log_end_offset(),
        })
    }

    /// See [`PartitionLog::read`].
    pub(crate) fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<FetchResult, PartitionLogError> {
        self.consistent(
            isolation == IsolationLevel::ReadCommitted,
            start_offset,
            || self.read_once(start_offset, max_bytes, isolation),
        )
    }

    fn read_once(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<FetchResult, PartitionLogError> {
        let log_start_offset = self.check_in_range(start_offset)?;
        let high_watermark = self.high_watermark;
        let last_stable_offset = self.last_stable_offset;
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
    pub(crate) fn check_in_range(&self, offset: i64) -> Result<i64, PartitionLogError> {
        let (log_start_offset, log_end_offset) =
            (self.local.log_start_offset(), self.local.log_end_offset());
        if offset < log_start_offset || offset > log_end_offset {
            return Err(PartitionLogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            });
        }
        Ok(log_start_offset)
    }

    /// See [`PartitionLog::fetch`].
    pub(crate) fn fetch(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchResult, PartitionLogError> {
        self.consistent(
            isolation == FetchIsolation::TxnCommitted,
            start_offset,
            || self.fetch_once(start_offset, max_bytes, isolation, min_one_message),
        )
    }

    fn fetch_once(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchResult, PartitionLogError> {
        let parts = self.fetch_parts(start_offset, isolation, |bound, committed| {
            let exact = self.local.read_exact(
                start_offset,
                max_bytes,
                min_one_message,
                bound,
                committed,
            )?;
            Ok(exact.map(|e| {
                let d = e.data;
                (d.records, d.first_entry_incomplete, e.upper_bound_offset)
            }))
        })?;
        let records = parts.data;
        let mut next_fetch_offset = start_offset;
        for entry in Batches::new(&records, 0) {
            match entry {
                Ok(e) => next_fetch_offset = e.last_offset().saturating_add(1),
                Err(_) => break,
            }
        }
        Ok(FetchResult {
            fetch_offset: start_offset,
            isolation: isolation_level(isolation),
            records,
            first_entry_incomplete: parts.first_entry_incomplete,
            high_watermark: parts.high_watermark,
            last_stable_offset: parts.last_stable_offset,
            log_start_offset: parts.log_start_offset,
            aborted_transactions: parts.aborted_transactions,
            next_fetch_offset,
        })
    }

    /// See [`PartitionLog::fetch_slices`].
    pub(crate) fn fetch_slices(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchSlices, PartitionLogError> {
        self.consistent(
            isolation == FetchIsolation::TxnCommitted,
            start_offset,
            || {
                let parts = self.fetch_parts(start_offset, isolation, |bound, committed| {
                    let exact = self.local.slice_exact(
                        start_offset,
                        max_bytes,
                        min_one_message,
                        bound,
                        committed,
                    )?;
                    Ok(exact.map(|e| {
                        (
                            Some(e.slice),
                            e.first_entry_incomplete,
                            e.upper_bound_offset,
                        )
                    }))
                })?;
                let slice = parts.data.flatten();
                Ok(FetchSlices {
                    fetch_offset: start_offset,
                    isolation: isolation_level(isolation),
                    slice,
                    first_entry_incomplete: parts.first_entry_incomplete,
                    high_watermark: parts.high_watermark,
                    last_stable_offset: parts.last_stable_offset,
                    log_start_offset: parts.log_start_offset,
                    aborted_transactions: parts.aborted_transactions,
                })
            },
        )
    }

    /// The one fetch behind [`Self::fetch`] and [`Self::fetch_slices`]: the bound of
    /// `isolation`, Kafka's exact bytes up to it as `read` gives them (read or sliced; told
    /// whether the aborted transactions' range is wanted, `read_committed` only), and the
    /// aborted transactions that go with them.
    fn fetch_parts<T: Default>(
        &self,
        start_offset: i64,
        isolation: FetchIsolation,
        read: impl FnOnce(i64, bool) -> Result<ExactParts<T>, PartitionLogError>,
    ) -> Result<FetchParts<T>, PartitionLogError> {
        let high_watermark = self.high_watermark;
        let last_stable_offset = self.last_stable_offset;
        let log_start_offset = self.check_in_range(start_offset)?;
        let bound = match isolation {
            FetchIsolation::LogEnd => self.local.log_end_offset(),
            FetchIsolation::HighWatermark => high_watermark,
            FetchIsolation::TxnCommitted => last_stable_offset,
        };
        let committed = isolation == FetchIsolation::TxnCommitted;
        let (data, first_entry_incomplete, aborted_transactions) = match read(bound, committed)? {
            // No segment holds a batch at or after the offset: no records, no list.
            None => (T::default(), false, None),
            Some((data, incomplete, upper_bound_offset)) => {
                let aborted = if !committed {
                    None
                } else if start_offset >= bound {
                    Some(Vec::new())
                } else {
                    Some(self.collect_aborted_transactions(start_offset, upper_bound_offset)?)
                };
                (data, incomplete, aborted)
            }
        };
        Ok(FetchParts {
            data,
            first_entry_incomplete,
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted_transactions,
        })
    }

    /// See [`PartitionLog::fetch_offset_by_timestamp`].
    pub(crate) fn fetch_offset_by_timestamp(
        &self,
        target: i64,
    ) -> Result<Option<segment_store::TimestampAndOffset>, PartitionLogError> {
        use segment_store::TimestampAndOffset;
        let special = |offset: i64, leader_epoch: Option<i32>| {
            Some(TimestampAndOffset {
                timestamp: -1,
                offset,
                leader_epoch,
            })
        };
        Ok(match target {
            EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
                let start = self.local.log_start_offset();
                let epoch = self
                    .epochs
                    .first()
                    .filter(|e| e.start_offset <= start)
                    .map(|e| e.epoch);
                special(start, epoch)
            }
            LATEST_TIMESTAMP => special(
                self.local.log_end_offset(),
                self.epochs.last().map(|e| e.epoch),
            ),
            LATEST_TIERED_TIMESTAMP | EARLIEST_PENDING_UPLOAD_TIMESTAMP => special(-1, Some(-1)),
            MAX_TIMESTAMP => self.local.offset_of_max_timestamp()?,
            t => self.local.fetch_offset_by_timestamp(t)?,
        })
    }

    /// See [`PartitionLog::end_offset_for_leader_epoch`].
    pub(crate) fn end_offset_for_leader_epoch(&self, leader_epoch: i32) -> Option<(i32, i64)> {
        let (epoch, offset) = crate::leader_epoch::end_offset_for(
            self.epochs,
            leader_epoch,
            self.local.log_end_offset(),
        );
        (offset != crate::leader_epoch::UNDEFINED_EPOCH_OFFSET).then_some((epoch, offset))
    }

    /// See [`PartitionLog::collect_aborted_transactions`].
    pub(crate) fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<Vec<AbortedTxn>, PartitionLogError> {
        // As Kafka's `LocalLog.collectAbortedTransactions`: no stop at the upper bound's
        // segment, because an aborted transaction is indexed in the segment holding its ABORT
        // marker, which may be any later segment.
        Ok(self
            .local
            .collect_aborted_txns(start_offset, upper_bound_offset)?)
    }
}

impl PartitionLog {
    /// Its reads at its bounds as they are now.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            local: &self.local,
            high_watermark: self.high_watermark,
            last_stable_offset: self.last_stable_offset(),
            epochs: self.epochs.entries(),
        }
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
        self.view().read(start_offset, max_bytes, isolation)
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
        self.view()
            .fetch(start_offset, max_bytes, isolation, min_one_message)
    }

    /// [`Self::fetch`] with the bytes left in the file: the same bound, the same aborted
    /// transactions and the same consistency retries, the bytes as one [`FileSlice`] of the
    /// `.log` holding them (Kafka's `FileRecords` slice), equal to [`FetchResult::records`] of
    /// the same call. See [`FetchSlices`] for what a held slice reads.
    pub fn fetch_slices(
        &self,
        start_offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchSlices, PartitionLogError> {
        self.view()
            .fetch_slices(start_offset, max_bytes, isolation, min_one_message)
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
    ) -> Result<Option<segment_store::TimestampAndOffset>, PartitionLogError> {
        self.view().fetch_offset_by_timestamp(target)
    }

    /// Kafka's `UnifiedLog.endOffsetForEpoch` (what the leader answers to
    /// `OffsetsForLeaderEpoch`): `(epoch, end offset)` for the largest epoch at or below
    /// `leader_epoch`, its end the start of the next epoch or the log end; `None` when it is
    /// undefined (no epoch at all, or `leader_epoch` above the latest one).
    pub fn end_offset_for_leader_epoch(&self, leader_epoch: i32) -> Option<(i32, i64)> {
        self.view().end_offset_for_leader_epoch(leader_epoch)
    }

    /// Kafka `collectAbortedTransactions(startOffset, upperBoundOffset)`: from the segment
    /// containing `start_offset` on, until a segment's search is complete.
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<Vec<AbortedTxn>, PartitionLogError> {
        self.view()
            .collect_aborted_transactions(start_offset, upper_bound_offset)
    }

    /// The records from `offset` on as a consumer at `isolation` sees them, across segments:
    /// Kafka's fetch loop, reading 1 MiB at a time from the batch holding `offset` and going on
    /// at each fetch's [`FetchResult::next_fetch_offset`], each fetch read by a
    /// [`ConsumerReader`](crate::ConsumerReader) (control batches hidden; under `ReadCommitted`, the records of aborted
    /// transactions skipped, including a transaction whose batches span several segments, since
    /// each fetch carries the aborted transactions that overlap it). Records below `offset` in
    /// the first batch are skipped.
    ///
    /// The iterator stops at the bound of `isolation` when it was created: the high watermark
    /// (`ReadUncommitted`) or the last stable offset (`ReadCommitted`). It holds its own
    /// [`LogReader`](super::LogReader): it does not follow the tail, and a truncation below its
    /// bound while it lives ends it with an error or shows the batches written since; once the
    /// log is closed it ends with a `Closed` error. Memory is one fetch's window, whatever the
    /// log's size.
    /// [`PartitionLogError::OffsetOutOfRange`] for an `offset` outside `[log start, log end]`.
    pub fn iter_from(
        &self,
        offset: i64,
        isolation: IsolationLevel,
    ) -> Result<RecordIter, PartitionLogError> {
        let view = self.view();
        view.check_in_range(offset)?;
        let bound = view.bound(isolation.into());
        // A reader of its own, at the bounds of now (published or not).
        let reader = super::LogReader {
            state: std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(
                self.read_state(&self.published.load()),
            )),
            ..self.reader()
        };
        Ok(RecordIter::new(reader, offset, isolation, bound))
    }
}
