//! The checks of one producer's batches against a copy of its entry (Kafka
//! `ProducerAppendInfo`), and the warnings they give.

use super::entry::{BatchMetadata, CompletedTxn, ProducerStateEntry, TxnMetadata};
use super::rules::{
    apply_end_txn_marker_to, check_coordinator_epoch, check_epoch, check_txn_state,
    end_txn_marker_of, in_sequence,
};
use super::AppendOrigin;
use crate::error::{ProducerStateError, SequenceViolation};
use crate::summary::{BatchSummary, NO_PRODUCER_EPOCH, NO_SEQUENCE};

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
    pub(super) producer_id: i64,
    origin: AppendOrigin,
    current_entry: ProducerStateEntry,
    pub(super) updated_entry: ProducerStateEntry,
    pub(super) started_transactions: Vec<TxnMetadata>,
    pub(super) warnings: Vec<ProducerStateWarning>,
    /// The epoch changed at least once during this update, so the current entry's cached batches
    /// belong to an older epoch even if the final epoch equals the current one.
    epoch_changed: bool,
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
    pub(super) fn merge_into(&self, current: &mut ProducerStateEntry) {
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
