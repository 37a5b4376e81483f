//! The producer state manager (Kafka: `ProducerStateManager`, `ProducerAppendInfo`,
//! `ProducerStateEntry`, `BatchMetadata`, `TxnMetadata`, `CompletedTxn`, `AppendOrigin`).
//!
//! Rules follow `kafka-storage-format.md` §7 (transaction version 0/1 marker rules; KIP-890
//! verification state and TV2 epoch-bump markers are not modelled because a [`BatchSummary`]
//! carries no transaction version).
//!
//! Two layers:
//! * the low-level Kafka API: [`ProducerStateManager::prepare_update`] →
//!   [`ProducerAppendInfo::append`] → [`ProducerStateManager::update`], then for each completed
//!   transaction [`ProducerStateManager::last_stable_offset`] and
//!   [`ProducerStateManager::complete_txn`], then [`ProducerStateManager::update_map_end_offset`];
//! * [`ProducerStateManager::apply_batches`], which does all of that for a run of batches in log
//!   order, including the KIP-1279 barrier (see [`crate::barrier`]), and is all-or-nothing: on
//!   error the manager is unchanged.

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::barrier::BarrierOutcome;
use crate::error::{InvalidControlReason, ProducerStateError, SequenceViolation};
use crate::ring::BatchRing;
use crate::summary::{BatchSummary, ControlInfo, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE};

/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;
/// Default `producer.id.expiration.ms` (1 day).
pub const DEFAULT_PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;

/// Who is appending (Kafka `AppendOrigin`, without `RAFT_LEADER`), which decides the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppendOrigin {
    /// Produce requests: epoch and sequence checks throw; duplicates are detected.
    Client,
    /// Group/transaction/mirror coordinators: epoch and coordinator-epoch checks throw; no
    /// sequence checks.
    Coordinator,
    /// Follower fetch and log recovery/rebuild: epoch and coordinator-epoch regressions are only
    /// reported as [`ProducerStateWarning`]s.
    Replication,
}

/// Kafka `DefaultRecordBatch.incrementSequence`: add with wraparound at `i32::MAX` → 0.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    let (s, i) = (i64::from(sequence), i64::from(increment));
    let max = i64::from(i32::MAX);
    let r = if s > max - i {
        i - (max - s) - 1
    } else {
        s + i
    };
    r as i32
}

/// Kafka `DefaultRecordBatch.decrementSequence`: subtract with wraparound below 0 → `i32::MAX`.
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    let (s, d) = (i64::from(sequence), i64::from(decrement));
    let r = if s < d {
        i64::from(i32::MAX) - (d - s) + 1
    } else {
        s - d
    };
    r as i32
}

/// Kafka `ProducerAppendInfo.inSequence`: `next == last + 1` (computed in i64) or the wrap
/// `last == i32::MAX && next == 0`.
pub fn in_sequence(last_sequence: i32, next_sequence: i32) -> bool {
    i64::from(next_sequence) == i64::from(last_sequence) + 1
        || (next_sequence == 0 && last_sequence == i32::MAX)
}

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
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    last_timestamp: i64,
    current_txn_first_offset: Option<i64>,
    batch_metadata: BatchRing<BatchMetadata>,
}

impl ProducerStateEntry {
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
    /// [`NUM_BATCHES_TO_RETAIN`] batches are kept.
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
    /// Cached batches, oldest first (at most [`NUM_BATCHES_TO_RETAIN`]).
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
    fn maybe_update_producer_epoch(&mut self, epoch: i16) -> bool {
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

    fn add_batch(&mut self, epoch: i16, batch: BatchMetadata) -> bool {
        let changed = self.maybe_update_producer_epoch(epoch);
        self.last_timestamp = batch.timestamp;
        self.add_batch_metadata(batch);
        changed
    }

    /// Kafka `ProducerStateEntry.update(next)`: maybe bump the epoch (clearing the cache), take
    /// over coordinator epoch, last timestamp and open transaction, append next's batches.
    fn update(&mut self, next: &ProducerStateEntry) {
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
    fn without_batches(&self) -> Self {
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

/// Something Kafka only logs (for `AppendOrigin::Replication`), collected so callers and tests
/// can see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProducerStateWarning {
    /// A batch or marker with an epoch older than the producer's, accepted under replication.
    EpochRegression {
        /// Producer id.
        producer_id: i64,
        /// First offset of the batch.
        offset: i64,
        /// Epoch in the batch.
        epoch: i16,
        /// Epoch the state held.
        current_epoch: i16,
        /// Whether the batch was a marker.
        is_marker: bool,
    },
    /// A marker with an older coordinator epoch, accepted under replication.
    CoordinatorEpochRegression {
        /// Producer id.
        producer_id: i64,
        /// Offset of the marker.
        offset: i64,
        /// Coordinator epoch in the marker.
        coordinator_epoch: i32,
        /// Coordinator epoch the state held.
        current_coordinator_epoch: i32,
    },
}

/// The pending update for one producer within one append (Kafka `ProducerAppendInfo`).
///
/// Each [`append`](Self::append) is all-or-nothing: on error the info is unchanged.
#[derive(Debug, Clone)]
pub struct ProducerAppendInfo {
    producer_id: i64,
    origin: AppendOrigin,
    current_entry: ProducerStateEntry,
    updated_entry: ProducerStateEntry,
    started_transactions: Vec<TxnMetadata>,
    warnings: Vec<ProducerStateWarning>,
    /// The epoch changed at least once during this update, so the current entry's cached batches
    /// belong to an older epoch even if the final epoch equals the current one.
    epoch_changed: bool,
}

// ------------------------------------------------------------------------------------------------
// The rules, once: both ProducerAppendInfo (any origin, on a copy of the entry) and
// ProducerStateManager::apply_replicated_batch (replication, in place) call these.

/// What a producer-owned control batch is: `None` for an empty one (a no-op), the marker's
/// `(commit, coordinator epoch)` for an ABORT/COMMIT; any other control batch (including
/// `MIRROR_PID_RESET`, which must be routed to the barrier before reaching per-producer state)
/// is [`ProducerStateError::InvalidControlBatch`], as `EndTransactionMarker.deserialize` throws.
fn end_txn_marker_of(
    producer_id: i64,
    batch: &BatchSummary,
) -> Result<Option<(bool, i32)>, ProducerStateError> {
    let invalid = |reason| ProducerStateError::InvalidControlBatch {
        producer_id,
        offset: batch.base_offset,
        reason,
    };
    match &batch.control {
        None if batch.records_count <= 0 => Ok(None),
        None => Err(invalid(InvalidControlReason::MissingControlRecord)),
        Some(ControlInfo::EndTxn {
            commit,
            coordinator_epoch,
        }) => Ok(Some((*commit, *coordinator_epoch))),
        Some(ControlInfo::MirrorPidReset { .. }) => {
            Err(invalid(InvalidControlReason::NotAnEndTxnMarker(7)))
        }
        Some(ControlInfo::Other(t)) => Err(invalid(InvalidControlReason::NotAnEndTxnMarker(*t))),
    }
}

/// Kafka `checkProducerEpoch`: an epoch below the current one is an error, or under
/// [`AppendOrigin::Replication`] a warning.
fn check_epoch(
    origin: AppendOrigin,
    producer_id: i64,
    epoch: i16,
    current_epoch: i16,
    offset: i64,
    is_marker: bool,
) -> Result<Option<ProducerStateWarning>, ProducerStateError> {
    if epoch >= current_epoch {
        return Ok(None);
    }
    if origin == AppendOrigin::Replication {
        Ok(Some(ProducerStateWarning::EpochRegression {
            producer_id,
            offset,
            epoch,
            current_epoch,
            is_marker,
        }))
    } else {
        Err(ProducerStateError::InvalidProducerEpoch {
            producer_id,
            offset,
            epoch,
            current_epoch,
            is_marker,
        })
    }
}

/// Kafka `checkCoordinatorEpoch` of a marker: a coordinator epoch below the current one is
/// fencing, or under [`AppendOrigin::Replication`] a warning.
fn check_coordinator_epoch(
    origin: AppendOrigin,
    producer_id: i64,
    coordinator_epoch: i32,
    current_coordinator_epoch: i32,
    offset: i64,
) -> Result<Option<ProducerStateWarning>, ProducerStateError> {
    if current_coordinator_epoch <= coordinator_epoch {
        return Ok(None);
    }
    if origin == AppendOrigin::Replication {
        Ok(Some(ProducerStateWarning::CoordinatorEpochRegression {
            producer_id,
            offset,
            coordinator_epoch,
            current_coordinator_epoch,
        }))
    } else {
        Err(ProducerStateError::TransactionCoordinatorFenced {
            producer_id,
            offset,
            coordinator_epoch,
            current_coordinator_epoch,
        })
    }
}

/// A non-transactional data batch while the producer has a transaction open is
/// [`ProducerStateError::InvalidTxnState`].
fn check_txn_state(
    producer_id: i64,
    offset: i64,
    txn_first_offset: Option<i64>,
    is_transactional: bool,
) -> Result<(), ProducerStateError> {
    match (txn_first_offset, is_transactional) {
        (Some(txn_first_offset), false) => Err(ProducerStateError::InvalidTxnState {
            producer_id,
            offset,
            txn_first_offset,
        }),
        _ => Ok(()),
    }
}

/// What a marker does to its producer's entry: the epoch (if higher), no open transaction, the
/// marker's coordinator epoch and timestamp. Returns whether the epoch changed.
fn apply_end_txn_marker_to(
    e: &mut ProducerStateEntry,
    producer_epoch: i16,
    coordinator_epoch: i32,
    timestamp: i64,
) -> bool {
    let changed = e.maybe_update_producer_epoch(producer_epoch);
    e.current_txn_first_offset = None;
    e.coordinator_epoch = coordinator_epoch;
    e.last_timestamp = timestamp;
    changed
}

impl ProducerAppendInfo {
    /// Starts an update from `current_entry` (the manager's entry, or `ProducerStateEntry::empty`).
    pub fn new(producer_id: i64, current_entry: ProducerStateEntry, origin: AppendOrigin) -> Self {
        let mut updated_entry = current_entry.without_batches();
        updated_entry.producer_id = producer_id;
        Self {
            producer_id,
            origin,
            current_entry,
            updated_entry,
            started_transactions: Vec::new(),
            warnings: Vec::new(),
            epoch_changed: false,
        }
    }

    /// Producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    /// Origin the checks are run for.
    pub fn origin(&self) -> AppendOrigin {
        self.origin
    }
    /// The entry this update will merge into the manager.
    pub fn updated_entry(&self) -> &ProducerStateEntry {
        &self.updated_entry
    }
    /// Transactions begun by this update.
    pub fn started_transactions(&self) -> &[TxnMetadata] {
        &self.started_transactions
    }
    /// Warnings raised so far (replication only).
    pub fn warnings(&self) -> &[ProducerStateWarning] {
        &self.warnings
    }

    /// Kafka `ProducerAppendInfo.append(batch)`: a data batch or an ABORT/COMMIT marker of this
    /// producer. Returns the transaction a marker completed. An empty control batch is a no-op.
    /// A producer-owned control batch of any other type (including `MIRROR_PID_RESET`, which must
    /// be routed to the barrier before reaching per-producer state) is
    /// [`ProducerStateError::InvalidControlBatch`], as `EndTransactionMarker.deserialize` throws.
    pub fn append(
        &mut self,
        batch: &BatchSummary,
    ) -> Result<Option<CompletedTxn>, ProducerStateError> {
        let offset_delta = batch.offset_delta()?;
        if batch.is_control {
            match end_txn_marker_of(self.producer_id, batch)? {
                None => Ok(None),
                Some((commit, coordinator_epoch)) => self.append_end_txn_marker(
                    commit,
                    coordinator_epoch,
                    batch.producer_epoch,
                    batch.base_offset,
                    batch.max_timestamp,
                ),
            }
        } else {
            self.append_data_batch(
                batch.producer_epoch,
                batch.base_sequence,
                batch.last_sequence,
                batch.max_timestamp,
                batch.base_offset,
                batch.last_offset,
                offset_delta,
                batch.is_transactional,
            )?;
            Ok(None)
        }
    }

    fn check_producer_epoch(
        &self,
        epoch: i16,
        offset: i64,
        is_marker: bool,
        warnings: &mut Vec<ProducerStateWarning>,
    ) -> Result<(), ProducerStateError> {
        warnings.extend(check_epoch(
            self.origin,
            self.producer_id,
            epoch,
            self.updated_entry.producer_epoch,
            offset,
            is_marker,
        )?);
        Ok(())
    }

    fn check_sequence(
        &self,
        epoch: i16,
        first_seq: i32,
        offset: i64,
    ) -> Result<(), ProducerStateError> {
        let updated_epoch = self.updated_entry.producer_epoch;
        let err = |current_last_sequence, violation| ProducerStateError::OutOfOrderSequence {
            producer_id: self.producer_id,
            offset,
            epoch,
            current_epoch: updated_epoch,
            first_sequence: first_seq,
            current_last_sequence,
            violation,
        };
        if epoch != updated_epoch {
            if first_seq != 0 && updated_epoch != NO_PRODUCER_EPOCH {
                return Err(err(NO_SEQUENCE, SequenceViolation::NewEpochNotZero));
            }
        } else {
            let current_last_seq = if !self.updated_entry.is_empty() {
                self.updated_entry.last_seq()
            } else if epoch == self.current_entry.producer_epoch {
                self.current_entry.last_seq()
            } else {
                NO_SEQUENCE
            };
            // No current epoch (state lost to retention/DeleteRecords): any sequence is accepted.
            if !(self.current_entry.producer_epoch == NO_PRODUCER_EPOCH
                || in_sequence(current_last_seq, first_seq))
            {
                return Err(err(current_last_seq, SequenceViolation::Gap));
            }
        }
        Ok(())
    }

    /// Kafka `appendDataBatch`.
    #[allow(clippy::too_many_arguments)]
    fn append_data_batch(
        &mut self,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        last_timestamp: i64,
        first_offset: i64,
        last_offset: i64,
        offset_delta: i32,
        is_transactional: bool,
    ) -> Result<(), ProducerStateError> {
        let mut warnings = Vec::new();
        self.check_producer_epoch(epoch, first_offset, false, &mut warnings)?;
        if self.origin == AppendOrigin::Client {
            self.check_sequence(epoch, first_seq, first_offset)?;
        }
        // Checked before `add_batch` (Kafka checks after, then discards the whole append info on
        // the exception; checking first keeps this info usable).
        let txn = self.updated_entry.current_txn_first_offset;
        check_txn_state(self.producer_id, first_offset, txn, is_transactional)?;
        self.epoch_changed |= self.updated_entry.add_batch(
            epoch,
            BatchMetadata {
                last_seq,
                last_offset,
                offset_delta,
                timestamp: last_timestamp,
            },
        );
        if txn.is_none() && is_transactional {
            self.updated_entry.current_txn_first_offset = Some(first_offset);
            self.started_transactions.push(TxnMetadata {
                producer_id: self.producer_id,
                first_offset,
                last_offset: None,
            });
        }
        self.warnings.append(&mut warnings);
        Ok(())
    }

    /// Kafka `currentEntry.update(updatedEntry)`, with one deliberate difference: if the epoch
    /// changed during this update, the current entry's cached batches are dropped even when the
    /// final epoch equals the current one. Kafka compares only the final epochs, so an epoch
    /// bump followed by a regression within one append (possible only under REPLICATION, i.e.
    /// with colliding producer ids) would keep stale batches there while batch-by-batch recovery
    /// would not; here both agree.
    fn merge_into(&self, current: &mut ProducerStateEntry) {
        if self.epoch_changed {
            current.batch_metadata.clear();
        }
        current.update(&self.updated_entry);
    }

    /// Kafka `appendEndTxnMarker` (transaction version 0/1 rules).
    pub fn append_end_txn_marker(
        &mut self,
        commit: bool,
        coordinator_epoch: i32,
        producer_epoch: i16,
        offset: i64,
        timestamp: i64,
    ) -> Result<Option<CompletedTxn>, ProducerStateError> {
        let mut warnings = Vec::new();
        self.check_producer_epoch(producer_epoch, offset, true, &mut warnings)?;
        warnings.extend(check_coordinator_epoch(
            self.origin,
            self.producer_id,
            coordinator_epoch,
            self.updated_entry.coordinator_epoch,
            offset,
        )?);
        let completed = self
            .updated_entry
            .current_txn_first_offset
            .map(|first_offset| CompletedTxn {
                producer_id: self.producer_id,
                first_offset,
                last_offset: offset,
                is_aborted: !commit,
            });
        self.epoch_changed |= apply_end_txn_marker_to(
            &mut self.updated_entry,
            producer_epoch,
            coordinator_epoch,
            timestamp,
        );
        self.warnings.append(&mut warnings);
        Ok(completed)
    }
}

/// Settings of the manager (Kafka `ProducerStateManagerConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStateManagerConfig {
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
}

impl Default for ProducerStateManagerConfig {
    fn default() -> Self {
        Self {
            producer_id_expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        }
    }
}

/// A batch that [`ProducerStateManager::apply_batches`] found to be a duplicate (client origin):
/// nothing was applied for it; the log returns `original`'s offsets and writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateBatch {
    /// Index of the batch in the input.
    pub index: usize,
    /// Producer id.
    pub producer_id: i64,
    /// The cached batch it duplicates.
    pub original: BatchMetadata,
}

/// What [`ProducerStateManager::apply_batches`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedBatches {
    /// Every completed transaction (markers and barrier aborts), in log order.
    pub completed_txns: Vec<CompletedTxn>,
    /// The aborted ones, with the LSO to write into the transaction index, in log order. Barrier
    /// aborts share the barrier's offset as `last_offset`.
    pub aborted_txns: Vec<AbortedTxnRecord>,
    /// Batches recognised as duplicates (client origin only) and skipped.
    pub duplicates: Vec<DuplicateBatch>,
    /// Warnings (replication origin only).
    pub warnings: Vec<ProducerStateWarning>,
    /// The barriers met, in log order.
    pub barriers: Vec<BarrierOutcome>,
}

impl AppliedBatches {
    /// Records an applied barrier: its aborts as completed and aborted transactions, then the
    /// barrier itself.
    fn push_barrier(&mut self, outcome: BarrierOutcome) {
        self.completed_txns
            .extend(outcome.aborted_txns.iter().map(|a| CompletedTxn {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
                is_aborted: true,
            }));
        self.aborted_txns.extend_from_slice(&outcome.aborted_txns);
        self.barriers.push(outcome);
    }

    /// Empties every list, keeping their allocations (for a caller that reuses one value).
    pub fn clear(&mut self) {
        self.completed_txns.clear();
        self.aborted_txns.clear();
        self.duplicates.clear();
        self.warnings.clear();
        self.barriers.clear();
    }
}

/// Kafka's per-partition producer state: producers, open and unreplicated transactions, and the
/// offsets of the map end and of the last snapshot.
#[derive(Debug, Clone)]
pub struct ProducerStateManager {
    pub(crate) config: ProducerStateManagerConfig,
    /// By producer id, hashed: each batch looks its producer up, and a search of ordered keys
    /// mispredicts its way to an id that interleaved producers make random. Everything that
    /// shows the producers orders them by id ([`Self::active_producers`]).
    pub(crate) producers: FxHashMap<i64, ProducerStateEntry>,
    pub(crate) ongoing_txns: BTreeMap<i64, TxnMetadata>,
    pub(crate) unreplicated_txns: BTreeMap<i64, TxnMetadata>,
    pub(crate) last_map_offset: i64,
    pub(crate) last_snap_offset: i64,
}

impl Default for ProducerStateManager {
    fn default() -> Self {
        Self::new(ProducerStateManagerConfig::default())
    }
}

/// The producer-state half of an append, checked but not applied: what
/// [`ProducerStateManager::analyze_and_validate`] returns and
/// [`ProducerStateManager::apply_update`] commits. Holds one [`ProducerAppendInfo`] (a copy of
/// one entry) per producer of the batches, never a copy of the manager.
#[derive(Debug)]
pub struct ProducerStateUpdate<'a> {
    groups: Vec<(Group, Option<&'a BatchSummary>)>,
    out: AppliedBatches,
}

impl ProducerStateUpdate<'_> {
    /// Batches found to be duplicates of a cached batch of their producer (client origin):
    /// nothing is applied for them.
    pub fn duplicates(&self) -> &[DuplicateBatch] {
        &self.out.duplicates
    }

    /// How many producers the update touches (one [`ProducerAppendInfo`] each, per run between
    /// barriers).
    pub fn producer_count(&self) -> usize {
        self.groups.iter().map(|(g, _)| g.infos.len()).sum()
    }
}

/// The updates of one run of batches between barriers, analysed but not applied.
#[derive(Debug, Default)]
struct Group {
    infos: Vec<ProducerAppendInfo>,
    by_pid: BTreeMap<i64, usize>,
    completed: Vec<CompletedTxn>,
    last_offset: Option<i64>,
}

impl ProducerStateManager {
    /// An empty manager with map end offset 0.
    pub fn new(config: ProducerStateManagerConfig) -> Self {
        Self {
            config,
            producers: FxHashMap::default(),
            ongoing_txns: BTreeMap::new(),
            unreplicated_txns: BTreeMap::new(),
            last_map_offset: 0,
            last_snap_offset: 0,
        }
    }

    /// Settings.
    pub fn config(&self) -> &ProducerStateManagerConfig {
        &self.config
    }
    /// The entry of `producer_id`.
    pub fn last_entry(&self, producer_id: i64) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }
    /// All producers, by id (an ordered view made for the call: [`Self::producer_count`] and
    /// [`Self::last_entry`] do not need one).
    pub fn active_producers(&self) -> BTreeMap<i64, &ProducerStateEntry> {
        self.producers.iter().map(|(&pid, e)| (pid, e)).collect()
    }
    /// How many producers there are.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }
    /// Open transactions by first offset.
    pub fn ongoing_txns(&self) -> &BTreeMap<i64, TxnMetadata> {
        &self.ongoing_txns
    }
    /// Completed transactions whose marker is not yet below the high watermark.
    pub fn unreplicated_txns(&self) -> &BTreeMap<i64, TxnMetadata> {
        &self.unreplicated_txns
    }
    /// No producers and no open transactions.
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty() && self.ongoing_txns.is_empty()
    }
    /// Exclusive end offset of what the state covers (Kafka `mapEndOffset`).
    pub fn map_end_offset(&self) -> i64 {
        self.last_map_offset
    }
    /// Offset of the last snapshot taken or loaded.
    pub fn last_snapshot_offset(&self) -> i64 {
        self.last_snap_offset
    }
    /// Kafka `updateMapEndOffset`.
    pub fn update_map_end_offset(&mut self, offset: i64) {
        self.last_map_offset = offset;
    }

    /// Kafka `prepareUpdate`: an append info starting from the current entry (or an empty one).
    pub fn prepare_update(&self, producer_id: i64, origin: AppendOrigin) -> ProducerAppendInfo {
        let current = self
            .producers
            .get(&producer_id)
            .cloned()
            .unwrap_or_else(|| ProducerStateEntry::empty(producer_id));
        ProducerAppendInfo::new(producer_id, current, origin)
    }

    /// Kafka `update(appendInfo)`: merge the entry and record the transactions it started.
    pub fn update(&mut self, info: ProducerAppendInfo) -> Result<(), ProducerStateError> {
        if info.producer_id == NO_PRODUCER_ID {
            return Err(ProducerStateError::NoProducerId);
        }
        self.commit_append_info(info);
        Ok(())
    }

    /// The commit of [`Self::update`] once the producer id is known to be one: the one entry
    /// merged (or inserted), the transactions it started recorded. O(1) in the number of
    /// producers.
    fn commit_append_info(&mut self, info: ProducerAppendInfo) {
        match self.producers.get_mut(&info.producer_id) {
            Some(current) => info.merge_into(current),
            None => {
                self.producers.insert(info.producer_id, info.updated_entry);
            }
        }
        for txn in info.started_transactions {
            self.ongoing_txns.insert(txn.first_offset, txn);
        }
    }

    /// Kafka `lastStableOffset(completedTxn)`: first offset of the earliest open transaction of
    /// another producer, else `completed.last_offset + 1`. Call before [`Self::complete_txn`].
    pub fn last_stable_offset(&self, completed: &CompletedTxn) -> i64 {
        self.ongoing_txns
            .values()
            .find(|t| t.producer_id != completed.producer_id)
            .map_or(completed.last_offset.saturating_add(1), |t| t.first_offset)
    }

    /// Kafka `completeTxn`: move the transaction from ongoing to unreplicated.
    pub fn complete_txn(&mut self, completed: &CompletedTxn) -> Result<(), ProducerStateError> {
        let mut txn = self.ongoing_txns.remove(&completed.first_offset).ok_or(
            ProducerStateError::TxnNotStarted {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: completed.last_offset,
            },
        )?;
        txn.last_offset = Some(completed.last_offset);
        self.unreplicated_txns.insert(completed.first_offset, txn);
        Ok(())
    }

    /// [`Self::complete_txn`] for a completion the analysis of an update already checked
    /// (it names an open transaction): cannot fail.
    fn complete_checked_txn(&mut self, completed: &CompletedTxn) {
        let txn = self
            .ongoing_txns
            .remove(&completed.first_offset)
            .unwrap_or(TxnMetadata {
                producer_id: completed.producer_id,
                first_offset: completed.first_offset,
                last_offset: None,
            });
        self.unreplicated_txns.insert(
            completed.first_offset,
            TxnMetadata {
                last_offset: Some(completed.last_offset),
                ..txn
            },
        );
    }

    /// Kafka `firstUnstableOffset`: the earliest first offset of an ongoing or unreplicated
    /// transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let ongoing = self.ongoing_txns.keys().next().copied();
        let unreplicated = self.unreplicated_txns.keys().next().copied();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Kafka `firstUndecidedOffset`: the earliest first offset of an ongoing transaction.
    pub fn first_undecided_offset(&self) -> Option<i64> {
        self.ongoing_txns.keys().next().copied()
    }

    /// The partition's last stable offset as UnifiedLog derives it:
    /// `min(max(first_unstable_offset, log_start_offset), high_watermark)`, or the high watermark
    /// when nothing is unstable.
    pub fn last_stable_offset_for(&self, high_watermark: i64, log_start_offset: i64) -> i64 {
        self.first_unstable_offset().map_or(high_watermark, |o| {
            o.max(log_start_offset).min(high_watermark)
        })
    }

    /// Kafka `onHighWatermarkUpdated`: forget unreplicated transactions whose marker is below
    /// the high watermark.
    pub fn on_high_watermark_updated(&mut self, high_watermark: i64) {
        let replicated = |t: &TxnMetadata| t.last_offset.is_some_and(|l| l < high_watermark);
        // A recovery can leave tens of thousands of them, usually all below the new high
        // watermark or all above it: looking first is much cheaper than `retain`, which
        // visits (and removes) them one by one.
        if !self.unreplicated_txns.values().any(replicated) {
            return;
        }
        if self.unreplicated_txns.values().all(replicated) {
            self.unreplicated_txns.clear();
        } else {
            self.unreplicated_txns.retain(|_, t| !replicated(t));
        }
    }

    /// Kafka `findDuplicateBatch` against the current entry of the batch's producer.
    pub fn check_duplicate(&self, batch: &BatchSummary) -> Option<BatchMetadata> {
        if !batch.has_producer_id() {
            return None;
        }
        self.producers
            .get(&batch.producer_id)?
            .find_duplicate_batch(batch)
    }

    /// Kafka `removeExpiredProducers`: drop producers with no open transaction whose last
    /// timestamp is at least `producer.id.expiration.ms` old. Returns the removed ids.
    pub fn remove_expired_producers(&mut self, now_ms: i64) -> Vec<i64> {
        self.remove_expired_producer_entries(now_ms)
            .into_iter()
            .map(|e| e.producer_id)
            .collect()
    }

    /// [`Self::remove_expired_producers`], saying for each removed producer when and why, by
    /// producer id. O(producers): a periodic task's work, never an append's.
    pub fn remove_expired_producer_entries(&mut self, now_ms: i64) -> Vec<ExpiredProducer> {
        let expiration = self.config.producer_id_expiration_ms;
        let mut removed = Vec::new();
        self.producers.retain(|_, e| {
            let expired = is_producer_expired(e, now_ms, expiration);
            if expired {
                removed.push(ExpiredProducer::of(e, now_ms, expiration));
            }
            !expired
        });
        removed.sort_unstable_by_key(|e| e.producer_id);
        removed
    }

    /// Kafka `truncateFullyAndStartAt` (in-memory part): forget everything, map end = `offset`,
    /// last snapshot offset = 0. Deleting the snapshot files is the caller's job
    /// ([`crate::snapshot::delete_snapshots_above`] with −1 deletes them all).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) {
        self.producers.clear();
        self.ongoing_txns.clear();
        self.unreplicated_txns.clear();
        self.last_snap_offset = 0;
        self.last_map_offset = offset;
    }

    /// Kafka `loadProducerEntry`: insert an entry and, if it has an open transaction, record it.
    pub fn load_producer_entry(&mut self, entry: ProducerStateEntry) {
        if let Some(first_offset) = entry.current_txn_first_offset {
            self.ongoing_txns.insert(
                first_offset,
                TxnMetadata {
                    producer_id: entry.producer_id,
                    first_offset,
                    last_offset: None,
                },
            );
        }
        self.producers.insert(entry.producer_id, entry);
    }

    /// Applies `batches` strictly in log order with `origin`'s checks, as UnifiedLog's append
    /// does (all producer updates of a run, then completed transactions with their LSOs, then the
    /// map end offset), except that a `MIRROR_PID_RESET` barrier closes the run: the batches
    /// before it are applied first, then the barrier (see [`crate::barrier`]), then the batches
    /// after it start from empty producer state.
    ///
    /// All-or-nothing: every batch is checked before anything is applied; on error the manager
    /// is unchanged. For [`AppendOrigin::Client`], a batch that duplicates a cached batch of its
    /// producer (as the state stands just before it) is skipped and reported.
    pub fn apply_batches<'a>(
        &mut self,
        batches: impl IntoIterator<Item = &'a BatchSummary>,
        origin: AppendOrigin,
    ) -> Result<AppliedBatches, ProducerStateError> {
        let update = self.analyze_and_validate(batches, origin)?;
        Ok(self.apply_update(update))
    }

    /// The first half of [`Self::apply_batches`] (Kafka `UnifiedLog.analyzeAndValidateProducerState`):
    /// every check of every batch, made against a copy of the one entry each producer of the
    /// batches has ([`ProducerAppendInfo`]), without changing the manager. Costs O(batches),
    /// whatever the number of live producers. A log calls this before it writes, then
    /// [`Self::apply_update`] once the bytes are in: the refused append writes nothing and the
    /// written one cannot fail to apply. Duplicates (client origin) are in
    /// [`ProducerStateUpdate::duplicates`].
    pub fn analyze_and_validate<'a>(
        &self,
        batches: impl IntoIterator<Item = &'a BatchSummary>,
        origin: AppendOrigin,
    ) -> Result<ProducerStateUpdate<'a>, ProducerStateError> {
        let mut out = AppliedBatches::default();
        let groups = self.analyse_batches(batches, origin, &mut out)?;
        Ok(ProducerStateUpdate { groups, out })
    }

    /// The second half of [`Self::apply_batches`] (Kafka `ProducerStateManager.update` of each
    /// append info, then `completeTxn` and `updateMapEndOffset`): commits an update
    /// [`Self::analyze_and_validate`] made against this manager, unchanged since. Cannot fail;
    /// costs O(batches) except at a `MIRROR_PID_RESET` barrier, which forgets every producer.
    pub fn apply_update(&mut self, update: ProducerStateUpdate<'_>) -> AppliedBatches {
        let ProducerStateUpdate { groups, mut out } = update;
        self.apply_groups(groups, &mut out);
        out
    }

    /// The analysis of [`Self::apply_batches`], without changing `self`: the batches grouped into
    /// runs between barriers, each with its producers' updates and completed transactions
    /// (duplicates skipped and reported in `out`), every check already made.
    fn analyse_batches<'a>(
        &self,
        batches: impl IntoIterator<Item = &'a BatchSummary>,
        origin: AppendOrigin,
        out: &mut AppliedBatches,
    ) -> Result<Vec<(Group, Option<&'a BatchSummary>)>, ProducerStateError> {
        let mut groups: Vec<(Group, Option<&'a BatchSummary>)> = Vec::new();
        let mut group = Group::default();
        let mut after_barrier = false;
        for (index, batch) in batches.into_iter().enumerate() {
            batch.offset_delta()?;
            if batch.is_mirror_pid_reset() {
                let done = std::mem::take(&mut group);
                groups.push((done, Some(batch)));
                after_barrier = true;
                continue;
            }
            if batch.has_producer_id() {
                let pid = batch.producer_id;
                let base = if after_barrier {
                    None
                } else {
                    self.producers.get(&pid)
                };
                let slot = group.by_pid.get(&pid).copied();
                if origin == AppendOrigin::Client {
                    let pending = slot.and_then(|i| group.infos.get(i));
                    let dup = match pending {
                        None => base.and_then(|e| e.find_duplicate_batch(batch)),
                        Some(info) => {
                            let mut e = base
                                .cloned()
                                .unwrap_or_else(|| ProducerStateEntry::empty(pid));
                            info.merge_into(&mut e);
                            e.find_duplicate_batch(batch)
                        }
                    };
                    if let Some(original) = dup {
                        out.duplicates.push(DuplicateBatch {
                            index,
                            producer_id: pid,
                            original,
                        });
                        continue;
                    }
                }
                let i = match slot {
                    Some(i) => i,
                    None => {
                        let current = base
                            .cloned()
                            .unwrap_or_else(|| ProducerStateEntry::empty(pid));
                        group
                            .infos
                            .push(ProducerAppendInfo::new(pid, current, origin));
                        let i = group.infos.len() - 1;
                        group.by_pid.insert(pid, i);
                        i
                    }
                };
                if let Some(info) = group.infos.get_mut(i) {
                    if let Some(txn) = info.append(batch)? {
                        group.completed.push(txn);
                    }
                }
            }
            group.last_offset = Some(batch.last_offset);
        }
        groups.push((group, None));
        // A completion must name an open transaction; check now so that applying cannot fail.
        // Only the run before the first barrier sees the manager's open transactions: a barrier
        // aborts them all.
        for (i, (group, _)) in groups.iter().enumerate() {
            for txn in &group.completed {
                let started_here = group
                    .infos
                    .iter()
                    .flat_map(|i| i.started_transactions.iter())
                    .any(|t| t.first_offset == txn.first_offset);
                let open_before = i == 0 && self.ongoing_txns.contains_key(&txn.first_offset);
                if !started_here && !open_before {
                    return Err(ProducerStateError::TxnNotStarted {
                        producer_id: txn.producer_id,
                        first_offset: txn.first_offset,
                        last_offset: txn.last_offset,
                    });
                }
            }
        }
        Ok(groups)
    }

    /// The application of [`Self::apply_batches`]: the analysed groups, strictly in log order.
    fn apply_groups(
        &mut self,
        groups: Vec<(Group, Option<&BatchSummary>)>,
        out: &mut AppliedBatches,
    ) {
        for (group, barrier) in groups {
            for info in group.infos {
                out.warnings.extend_from_slice(&info.warnings);
                // The analysis made an info only for a batch with a producer id.
                self.commit_append_info(info);
            }
            for txn in group.completed {
                let lso = self.last_stable_offset(&txn);
                self.complete_checked_txn(&txn);
                if txn.is_aborted {
                    out.aborted_txns.push(AbortedTxnRecord {
                        producer_id: txn.producer_id,
                        first_offset: txn.first_offset,
                        last_offset: txn.last_offset,
                        last_stable_offset: lso,
                    });
                }
                out.completed_txns.push(txn);
            }
            if let Some(last) = group.last_offset {
                self.update_map_end_offset(last.saturating_add(1));
            }
            if let Some(b) = barrier {
                out.push_barrier(self.apply_barrier(b));
            }
        }
    }
}

impl ProducerStateManager {
    /// Kafka `LogSegment.updateProducerState` for ONE batch under [`AppendOrigin::Replication`]
    /// (what recovery does for every batch it scans), updating the entry in place.
    ///
    /// Same result as `apply_batches([batch], AppendOrigin::Replication)` (state, outputs and
    /// errors; a property test compares the two), without that call's per-append bookkeeping
    /// (grouping, cloned entries, fresh output vectors): the outputs are appended to `out`, which
    /// the caller clears when it wants. All-or-nothing: on error nothing changed.
    pub fn apply_replicated_batch(
        &mut self,
        batch: &BatchSummary,
        out: &mut AppliedBatches,
    ) -> Result<(), ProducerStateError> {
        let offset_delta = batch.offset_delta()?;
        if batch.is_mirror_pid_reset() {
            out.push_barrier(self.apply_barrier(batch));
            return Ok(());
        }
        if batch.has_producer_id() {
            if batch.is_control {
                self.apply_replicated_control(batch, out)?;
            } else {
                self.apply_replicated_data(batch, offset_delta, out)?;
            }
        }
        self.update_map_end_offset(batch.last_offset.saturating_add(1));
        Ok(())
    }

    /// [`Self::apply_replicated_batch`] for a control batch of a producer.
    fn apply_replicated_control(
        &mut self,
        batch: &BatchSummary,
        out: &mut AppliedBatches,
    ) -> Result<(), ProducerStateError> {
        let pid = batch.producer_id;
        let current = self
            .producers
            .get(&pid)
            .map_or((NO_PRODUCER_EPOCH, -1, None), |e| {
                (
                    e.producer_epoch,
                    e.coordinator_epoch,
                    e.current_txn_first_offset,
                )
            });
        if let Some((commit, coordinator_epoch)) = end_txn_marker_of(pid, batch)? {
            self.apply_replicated_marker(batch, commit, coordinator_epoch, current, out)?;
        } else {
            // An empty control batch: a no-op for an existing producer; a new one gets an
            // empty entry.
            self.producers
                .entry(pid)
                .or_insert_with(|| ProducerStateEntry::empty(pid));
        }
        Ok(())
    }

    /// [`Self::apply_replicated_batch`] for an ABORT/COMMIT marker; `current` is the producer's
    /// (epoch, coordinator epoch, open transaction) before it.
    fn apply_replicated_marker(
        &mut self,
        batch: &BatchSummary,
        commit: bool,
        marker_coordinator_epoch: i32,
        current: (i16, i32, Option<i64>),
        out: &mut AppliedBatches,
    ) -> Result<(), ProducerStateError> {
        let (epoch, coordinator_epoch, txn_first_offset) = current;
        let (pid, origin) = (batch.producer_id, AppendOrigin::Replication);
        let offset = batch.base_offset;
        let completed = txn_first_offset.map(|first_offset| CompletedTxn {
            producer_id: pid,
            first_offset,
            last_offset: offset,
            is_aborted: !commit,
        });
        if let Some(txn) = &completed {
            if !self.ongoing_txns.contains_key(&txn.first_offset) {
                return Err(ProducerStateError::TxnNotStarted {
                    producer_id: pid,
                    first_offset: txn.first_offset,
                    last_offset: txn.last_offset,
                });
            }
        }
        let epoch_warning = check_epoch(origin, pid, batch.producer_epoch, epoch, offset, true)?;
        let coordinator_warning = check_coordinator_epoch(
            origin,
            pid,
            marker_coordinator_epoch,
            coordinator_epoch,
            offset,
        )?;
        // Checks passed: apply.
        out.warnings.extend(epoch_warning);
        out.warnings.extend(coordinator_warning);
        let e = self
            .producers
            .entry(pid)
            .or_insert_with(|| ProducerStateEntry::empty(pid));
        apply_end_txn_marker_to(
            e,
            batch.producer_epoch,
            marker_coordinator_epoch,
            batch.max_timestamp,
        );
        if let Some(txn) = completed {
            let lso = self.last_stable_offset(&txn);
            self.complete_txn(&txn)?;
            if txn.is_aborted {
                out.aborted_txns.push(AbortedTxnRecord {
                    producer_id: pid,
                    first_offset: txn.first_offset,
                    last_offset: txn.last_offset,
                    last_stable_offset: lso,
                });
            }
            out.completed_txns.push(txn);
        }
        Ok(())
    }

    /// [`Self::apply_replicated_batch`] for a data batch: one search of the producer map (the
    /// entry is created only once every check passed).
    fn apply_replicated_data(
        &mut self,
        batch: &BatchSummary,
        offset_delta: i32,
        out: &mut AppliedBatches,
    ) -> Result<(), ProducerStateError> {
        let (pid, origin) = (batch.producer_id, AppendOrigin::Replication);
        let slot = self.producers.entry(pid);
        let (epoch, txn_first_offset) = match &slot {
            Entry::Occupied(o) => (o.get().producer_epoch, o.get().current_txn_first_offset),
            Entry::Vacant(_) => (NO_PRODUCER_EPOCH, None),
        };
        check_txn_state(
            pid,
            batch.base_offset,
            txn_first_offset,
            batch.is_transactional,
        )?;
        let epoch_warning = check_epoch(
            origin,
            pid,
            batch.producer_epoch,
            epoch,
            batch.base_offset,
            false,
        )?;
        out.warnings.extend(epoch_warning);
        let e = slot.or_insert_with(|| ProducerStateEntry::empty(pid));
        e.add_batch(
            batch.producer_epoch,
            BatchMetadata {
                last_seq: batch.last_sequence,
                last_offset: batch.last_offset,
                offset_delta,
                timestamp: batch.max_timestamp,
            },
        );
        if txn_first_offset.is_none() && batch.is_transactional {
            e.current_txn_first_offset = Some(batch.base_offset);
            self.ongoing_txns.insert(
                batch.base_offset,
                TxnMetadata {
                    producer_id: pid,
                    first_offset: batch.base_offset,
                    last_offset: None,
                },
            );
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producers_come_out_by_id_whatever_order_they_came_in() {
        let mut psm = ProducerStateManager::default();
        // Ids in a scrambled order, spread as real ones are; every third one idle long enough
        // to expire.
        let ids: Vec<i64> = (0..500i64)
            .map(|i| (i * 7919) % 500 * 1_000_003 + 17)
            .collect();
        let expiration = psm.config().producer_id_expiration_ms;
        for &pid in &ids {
            let last_timestamp = if pid % 3 == 0 { 0 } else { expiration };
            psm.load_producer_entry(ProducerStateEntry::new(
                pid,
                0,
                -1,
                last_timestamp,
                None,
                [],
            ));
        }
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let shown: Vec<i64> = psm.active_producers().keys().copied().collect();
        assert_eq!(shown, sorted);
        let in_snapshot: Vec<i64> = psm
            .snapshot_entries()
            .iter()
            .map(|e| e.producer_id)
            .collect();
        assert_eq!(in_snapshot, sorted, "a snapshot lists its producers by id");
        assert_eq!(psm.producer_count(), ids.len());
        let removed = psm.remove_expired_producers(expiration);
        let expected: Vec<i64> = sorted.iter().copied().filter(|p| p % 3 == 0).collect();
        assert_eq!(removed, expected, "expired producers are reported by id");
        assert_eq!(psm.producer_count(), ids.len() - expected.len());
    }

    #[test]
    fn sequence_arithmetic_matches_kafka_and_never_overflows() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 0), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX - 2, 5), 2);
        assert_eq!(decrement_sequence(8, 3), 5);
        assert_eq!(decrement_sequence(2, 5), i32::MAX - 2);
        for (a, b) in [
            (i32::MIN, i32::MAX),
            (i32::MAX, i32::MIN),
            (i32::MIN, i32::MIN),
        ] {
            let _ = increment_sequence(a, b);
            let _ = decrement_sequence(a, b);
            let _ = in_sequence(a, b);
        }
        assert!(
            !in_sequence(i32::MAX, i32::MIN),
            "computed in i64: no wrap to MIN"
        );
    }

    #[test]
    fn entry_keeps_at_most_five_batches_and_clears_on_epoch_change() {
        let b = |i: i64| BatchMetadata {
            last_seq: i as i32,
            last_offset: i,
            offset_delta: 0,
            timestamp: i,
        };
        let mut e = ProducerStateEntry::new(1, 0, -1, -1, None, (0..7).map(b));
        assert_eq!(e.batch_metadata().len(), NUM_BATCHES_TO_RETAIN);
        assert_eq!((e.first_seq(), e.last_seq()), (2, 6));
        assert!(e.add_batch(1, b(7)));
        assert_eq!(e.batch_metadata().len(), 1);
        assert!(!e.add_batch(1, b(8)));
        assert_eq!(e.last_timestamp(), 8);
    }
}
