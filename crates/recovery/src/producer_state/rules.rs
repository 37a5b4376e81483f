//! The producer-state rules: sequence arithmetic, epoch, coordinator-epoch and transaction
//! checks, and end-transaction markers.

use super::append_info::ProducerStateWarning;
use super::entry::ProducerStateEntry;
use super::AppendOrigin;
use crate::error::{InvalidControlReason, ProducerStateError};
use crate::summary::{BatchSummary, ControlInfo};

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

// ------------------------------------------------------------------------------------------------
// The rules, once: both ProducerAppendInfo (any origin, on a copy of the entry) and
// ProducerStateManager::apply_replicated_batch (replication, in place) call these.

/// What a producer-owned control batch is: `None` for an empty one (a no-op), the marker's
/// `(commit, coordinator epoch)` for an ABORT/COMMIT; any other control batch (including
/// `MIRROR_PID_RESET`, which must be routed to the barrier before reaching per-producer state)
/// is [`ProducerStateError::InvalidControlBatch`], as `EndTransactionMarker.deserialize` throws.
pub(super) fn end_txn_marker_of(
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
pub(super) fn check_epoch(
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
pub(super) fn check_coordinator_epoch(
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
pub(super) fn check_txn_state(
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
pub(super) fn apply_end_txn_marker_to(
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
