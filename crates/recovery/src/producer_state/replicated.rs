//! Replicated batches applied in place, one at a time (what recovery does for every batch it
//! scans).

use hashbrown::hash_table::Entry;

use super::entry::{
    AbortedTxnRecord, BatchMetadata, CompletedTxn, ProducerStateEntry, TxnMetadata,
};
use super::manager::{AppliedBatches, ProducerStateManager};
use super::rules::{
    apply_end_txn_marker_to, check_coordinator_epoch, check_epoch, check_txn_state,
    end_txn_marker_of,
};
use super::AppendOrigin;
use crate::error::ProducerStateError;
use crate::summary::{BatchSummary, NO_PRODUCER_EPOCH};

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
            .get(pid)
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
            self.producers.get_or_insert_empty(pid);
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
        let e = self.producers.get_or_insert_empty(pid);
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
        let e = slot
            .or_insert_with(|| ProducerStateEntry::empty(pid))
            .into_mut();
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
