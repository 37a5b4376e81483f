//! The consumer side of a fetch: control batches (markers and barriers) and aborted records
//! hidden.

use record_format::{
    is_mirror_pid_reset_batch, Batches, ControlRecordKey, ControlRecordType, DecodeLimits,
    LogEntry, RecordBatch,
};
use segment_store::AbortedTxn;

use super::error::PartitionLogError;
use super::fetch::{whole_batches, FetchResult, IsolationLevel};
use super::READ_CHUNK;

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

/// The records of a partition from an offset on, across segments
/// ([`PartitionLog::iter_from`](super::PartitionLog::iter_from),
/// [`LogReader::iter_from`](super::LogReader::iter_from)).
#[derive(Debug)]
pub struct RecordIter {
    reader: super::LogReader,
    isolation: IsolationLevel,
    next_offset: i64,
    bound: i64,
    pending: std::collections::VecDeque<ConsumedRecord>,
    done: bool,
}

impl RecordIter {
    pub(super) fn new(
        reader: super::LogReader,
        offset: i64,
        isolation: IsolationLevel,
        bound: i64,
    ) -> Self {
        RecordIter {
            reader,
            isolation,
            next_offset: offset,
            bound,
            pending: std::collections::VecDeque::new(),
            done: false,
        }
    }

    /// Where the next fetch starts (the end once the iterator is exhausted).
    pub fn next_fetch_offset(&self) -> i64 {
        self.next_offset
    }

    /// The offset it stops at: the high watermark or last stable offset when it was created.
    pub fn bound(&self) -> i64 {
        self.bound
    }
}

impl Iterator for RecordIter {
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
                .reader
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
                // Nothing readable from here (a truncation below the bound since the iterator
                // was made): stop rather than spin.
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
