//! A producer's entry (Kafka `ProducerStateEntry`), its batch metadata, transactions, and
//! expiry.

use super::rules::decrement_sequence;
use super::BatchRing;
use crate::summary::{BatchSummary, NO_PRODUCER_EPOCH, NO_SEQUENCE};

/// One cached batch of a producer (Kafka `BatchMetadata`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct BatchMetadata {
    /// Last sequence of the batch.
    pub last_seq: i32,
    /// Last offset of the batch.
    pub last_offset: i64,
    /// `last_offset − first_offset`.
    pub offset_delta: i32,
    /// Max timestamp of the batch.
    pub timestamp: i64,
}

impl BatchMetadata {
    /// `decrementSequence(last_seq, offset_delta)`.
    pub fn first_seq(&self) -> i32 {
        decrement_sequence(self.last_seq, self.offset_delta)
    }

    /// `last_offset − offset_delta`.
    pub fn first_offset(&self) -> i64 {
        self.last_offset.wrapping_sub(i64::from(self.offset_delta))
    }
}

/// What the manager knows about one producer id (Kafka `ProducerStateEntry`, without KIP-890
/// verification state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerStateEntry {
    pub(super) producer_id: i64,
    pub(super) producer_epoch: i16,
    pub(super) coordinator_epoch: i32,
    pub(super) last_timestamp: i64,
    pub(super) current_txn_first_offset: Option<i64>,
    pub(super) batch_metadata: BatchRing<BatchMetadata>,
}

impl ProducerStateEntry {
    /// Asks the CPU to start loading the cache lines of this entry that an append reads (its
    /// id and epoch, and its batches), without waiting for them. A hint: it reads nothing and
    /// cannot fault; a no-op off x86_64.
    #[inline]
    pub(super) fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        {
            safe_arch::prefetch_t0(&self.producer_id);
            safe_arch::prefetch_t0(&self.current_txn_first_offset);
            self.batch_metadata.prefetch();
        }
    }

    /// Kafka `ProducerStateEntry.empty(pid)`: epoch −1, coordinator epoch −1, timestamp −1.
    pub fn empty(producer_id: i64) -> Self {
        Self {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            coordinator_epoch: -1,
            last_timestamp: -1,
            current_txn_first_offset: None,
            batch_metadata: BatchRing::new(),
        }
    }

    /// Builds an entry from its parts (used when loading snapshots). At most the newest
    /// [`NUM_BATCHES_TO_RETAIN`](crate::NUM_BATCHES_TO_RETAIN) batches are kept.
    pub fn new(
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        last_timestamp: i64,
        current_txn_first_offset: Option<i64>,
        batches: impl IntoIterator<Item = BatchMetadata>,
    ) -> Self {
        let mut e = Self {
            producer_id,
            producer_epoch,
            coordinator_epoch,
            last_timestamp,
            current_txn_first_offset,
            batch_metadata: BatchRing::new(),
        };
        for b in batches {
            e.add_batch_metadata(b);
        }
        e
    }

    /// Producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    /// Current producer epoch (−1 if none).
    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }
    /// Last known transaction coordinator epoch (−1 if none).
    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }
    /// Timestamp of the last batch or marker (−1 if none).
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }
    /// First offset of the producer's open transaction.
    pub fn current_txn_first_offset(&self) -> Option<i64> {
        self.current_txn_first_offset
    }
    /// Cached batches, oldest first (at most [`NUM_BATCHES_TO_RETAIN`](crate::NUM_BATCHES_TO_RETAIN)).
    pub fn batch_metadata(&self) -> &BatchRing<BatchMetadata> {
        &self.batch_metadata
    }
    /// Kafka `isEmpty()`: no cached batch.
    pub fn is_empty(&self) -> bool {
        self.batch_metadata.is_empty()
    }
    /// First sequence of the oldest cached batch, −1 if none.
    pub fn first_seq(&self) -> i32 {
        self.batch_metadata
            .front()
            .map_or(NO_SEQUENCE, BatchMetadata::first_seq)
    }
    /// Last sequence of the newest cached batch, −1 if none.
    pub fn last_seq(&self) -> i32 {
        self.batch_metadata
            .back()
            .map_or(NO_SEQUENCE, |b| b.last_seq)
    }
    /// Last offset of the newest cached batch, −1 if none.
    pub fn last_data_offset(&self) -> i64 {
        self.batch_metadata.back().map_or(-1, |b| b.last_offset)
    }
    /// Offset delta of the newest cached batch, 0 if none.
    pub fn last_offset_delta(&self) -> i32 {
        self.batch_metadata.back().map_or(0, |b| b.offset_delta)
    }

    /// Kafka `findDuplicateBatch`: same epoch and a cached batch with identical first and last
    /// sequence.
    pub fn find_duplicate_batch(&self, batch: &BatchSummary) -> Option<BatchMetadata> {
        if batch.producer_epoch != self.producer_epoch {
            return None;
        }
        self.batch_metadata
            .iter()
            .find(|m| m.first_seq() == batch.base_sequence && m.last_seq == batch.last_sequence)
            .copied()
    }

    /// Returns whether the epoch changed (and the cache was cleared).
    pub(super) fn maybe_update_producer_epoch(&mut self, epoch: i16) -> bool {
        let changed = self.producer_epoch != epoch;
        if changed {
            self.batch_metadata.clear();
            self.producer_epoch = epoch;
        }
        changed
    }

    fn add_batch_metadata(&mut self, batch: BatchMetadata) {
        self.batch_metadata.push(batch);
    }

    pub(super) fn add_batch(&mut self, epoch: i16, batch: BatchMetadata) -> bool {
        let changed = self.maybe_update_producer_epoch(epoch);
        self.last_timestamp = batch.timestamp;
        self.add_batch_metadata(batch);
        changed
    }

    /// Kafka `ProducerStateEntry.update(next)`: maybe bump the epoch (clearing the cache), take
    /// over coordinator epoch, last timestamp and open transaction, append next's batches.
    pub(super) fn update(&mut self, next: &ProducerStateEntry) {
        self.maybe_update_producer_epoch(next.producer_epoch);
        self.coordinator_epoch = next.coordinator_epoch;
        self.last_timestamp = next.last_timestamp;
        self.current_txn_first_offset = next.current_txn_first_offset;
        for b in &next.batch_metadata {
            self.add_batch_metadata(*b);
        }
    }

    /// Copy with the same epoch/coordinator epoch/timestamp/open txn and an empty batch cache
    /// (Kafka `withProducerIdAndBatchMetadata(pid, Optional.empty())`).
    pub(super) fn without_batches(&self) -> Self {
        Self {
            batch_metadata: BatchRing::new(),
            ..self.clone()
        }
    }
}

/// An open (or completed but unreplicated) transaction (Kafka `TxnMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxnMetadata {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction.
    pub first_offset: i64,
    /// Offset of the marker that completed it, once completed.
    pub last_offset: Option<i64>,
}

/// A transaction ended by a marker (or by the KIP-1279 barrier) (Kafka `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CompletedTxn {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction.
    pub first_offset: i64,
    /// Offset of the marker (for a barrier abort: the barrier's offset).
    pub last_offset: i64,
    /// ABORT (or barrier) rather than COMMIT.
    pub is_aborted: bool,
}

/// An aborted transaction as it goes into the `.txnindex` (Kafka `AbortedTxn`, version 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AbortedTxnRecord {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the aborted transaction.
    pub first_offset: i64,
    /// Offset of the ABORT marker (or of the barrier).
    pub last_offset: i64,
    /// `ProducerStateManager::last_stable_offset` computed before completing the transaction.
    pub last_stable_offset: i64,
}

/// A producer dropped from producer state because it expired (Kafka
/// `producer.id.expiration.ms`): no open transaction, and its last write at least the
/// expiration older than the clock. Kafka drops these silently, at load and periodically; a
/// later batch of the producer is then not checked against its old sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredProducer {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The timestamp of its last write (ms since the Unix epoch).
    pub last_timestamp: i64,
    /// The clock's time when it was dropped.
    pub now_ms: i64,
    /// `producer.id.expiration.ms` in force.
    pub expiration_ms: i64,
}

impl ExpiredProducer {
    pub(crate) fn of(e: &ProducerStateEntry, now_ms: i64, expiration_ms: i64) -> Self {
        ExpiredProducer {
            producer_id: e.producer_id(),
            producer_epoch: e.producer_epoch(),
            last_timestamp: e.last_timestamp(),
            now_ms,
            expiration_ms,
        }
    }

    /// How long the producer had been idle: `now_ms - last_timestamp`.
    pub fn idle_ms(&self) -> i64 {
        self.now_ms.saturating_sub(self.last_timestamp)
    }
}

impl std::fmt::Display for ExpiredProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "producer {} (epoch {}) expired: last write at {} ms, idle {} ms at clock {} ms >= producer.id.expiration.ms {}",
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            self.idle_ms(),
            self.now_ms,
            self.expiration_ms
        )
    }
}

pub(crate) fn is_producer_expired(e: &ProducerStateEntry, now_ms: i64, expiration_ms: i64) -> bool {
    e.current_txn_first_offset.is_none() && now_ms.saturating_sub(e.last_timestamp) >= expiration_ms
}
