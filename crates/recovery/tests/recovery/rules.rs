//! Kafka's producer state rules (reference §7.2–7.6, 7.9), one test per rule, asserting exact
//! error kinds and the numbers they carry.

use recovery::internals::{decrement_sequence, in_sequence, increment_sequence};
use recovery::AppendOrigin::{Client, Coordinator, Replication};
use recovery::{
    AbortedTxnRecord, BatchMetadata, CompletedTxn, ControlInfo, InvalidBatchReason,
    InvalidControlReason, ProducerStateError, ProducerStateManager, ProducerStateManagerConfig,
    ProducerStateWarning, SequenceViolation, TxnMetadata,
};

use crate::common::*;

// ---- epochs (§7.2, §7.3 step 1) ----

#[test]
fn older_epoch_is_fenced_for_client_and_coordinator() {
    for origin in [Client, Coordinator] {
        let mut psm = ProducerStateManager::default();
        apply_ok(&mut psm, &[data(7, 5, 0, 0, 1)], origin);
        let before = psm.snapshot_entries();
        let err = apply(&mut psm, &[data(7, 4, 0, 1, 1)], origin).unwrap_err();
        assert_eq!(
            err,
            ProducerStateError::InvalidProducerEpoch {
                producer_id: 7,
                offset: 1,
                epoch: 4,
                current_epoch: 5,
                is_marker: false
            },
            "{origin:?}"
        );
        assert_eq!(
            psm.snapshot_entries(),
            before,
            "a refused append changes nothing"
        );
        assert_eq!(psm.map_end_offset(), 1);
    }
}

#[test]
fn older_epoch_only_warns_under_replication_and_regresses_the_entry() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(7, 5, 0, 0, 3)], Replication);
    let out = apply_ok(&mut psm, &[data(7, 4, 9, 3, 1)], Replication);
    assert_eq!(
        out.warnings,
        vec![ProducerStateWarning::EpochRegression {
            producer_id: 7,
            offset: 3,
            epoch: 4,
            current_epoch: 5,
            is_marker: false
        }]
    );
    let e = psm.last_entry(7).unwrap();
    assert_eq!(
        e.producer_epoch(),
        4,
        "Kafka's addBatch takes the batch's epoch"
    );
    assert_eq!(e.batch_metadata().len(), 1, "epoch change clears the cache");
    assert_eq!(e.last_seq(), 9);
}

#[test]
fn marker_with_older_epoch_is_fenced_or_warned() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[txn(7, 3, 0, 0, 1)], Client);
    let err = apply(&mut psm, &[marker(7, 2, 1, true, 0)], Coordinator).unwrap_err();
    assert_eq!(
        err,
        ProducerStateError::InvalidProducerEpoch {
            producer_id: 7,
            offset: 1,
            epoch: 2,
            current_epoch: 3,
            is_marker: true
        }
    );
    let out = apply_ok(&mut psm, &[marker(7, 2, 1, true, 0)], Replication);
    assert!(matches!(
        out.warnings.as_slice(),
        [ProducerStateWarning::EpochRegression {
            is_marker: true,
            epoch: 2,
            current_epoch: 3,
            ..
        }]
    ));
    assert_eq!(out.completed_txns.len(), 1);
}

// ---- sequences (§7.3 step 2, CLIENT only) ----

#[test]
fn in_order_sequences_are_accepted() {
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[data(1, 0, 0, 0, 5), data(1, 0, 5, 5, 5)],
        Client,
    );
    apply_ok(&mut psm, &[data(1, 0, 10, 10, 1)], Client);
    let e = psm.last_entry(1).unwrap();
    assert_eq!(
        (e.first_seq(), e.last_seq(), e.last_data_offset()),
        (0, 10, 10)
    );
}

#[test]
fn sequence_gap_is_out_of_order() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 5)], Client);
    let err = apply(&mut psm, &[data(1, 0, 6, 5, 1)], Client).unwrap_err();
    assert_eq!(
        err,
        ProducerStateError::OutOfOrderSequence {
            producer_id: 1,
            offset: 5,
            epoch: 0,
            current_epoch: 0,
            first_sequence: 6,
            current_last_sequence: 4,
            violation: SequenceViolation::Gap
        }
    );
    // Also within one append: the second batch is checked against the first.
    let err = apply(
        &mut psm,
        &[data(1, 0, 5, 5, 2), data(1, 0, 8, 7, 1)],
        Client,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::OutOfOrderSequence {
            current_last_sequence: 6,
            first_sequence: 8,
            ..
        }
    ));
    // Coordinator and replication appends skip sequence checks.
    apply_ok(&mut psm, &[data(1, 0, 100, 5, 1)], Coordinator);
    apply_ok(&mut psm, &[data(1, 0, 3, 6, 1)], Replication);
    assert_eq!(psm.last_entry(1).unwrap().last_seq(), 3);
}

#[test]
fn sequence_wraps_from_i32_max_to_zero() {
    assert_eq!(increment_sequence(i32::MAX, 1), 0);
    assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
    assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
    assert!(in_sequence(i32::MAX, 0));
    assert!(!in_sequence(i32::MAX, 1));
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, i32::MAX - 1, 0, 2)], Client);
    assert_eq!(psm.last_entry(1).unwrap().last_seq(), i32::MAX);
    apply_ok(&mut psm, &[data(1, 0, 0, 2, 1)], Client);
    // A batch spanning the wrap: first seq MAX, last seq 1.
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, i32::MAX, 0, 3)], Client);
    let e = psm.last_entry(1).unwrap();
    assert_eq!((e.first_seq(), e.last_seq()), (i32::MAX, 1));
    apply_ok(&mut psm, &[data(1, 0, 2, 3, 1)], Client);
    let err = apply(&mut psm, &[data(1, 0, 0, 4, 1)], Client).unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::OutOfOrderSequence {
            violation: SequenceViolation::Gap,
            ..
        }
    ));
}

#[test]
fn new_epoch_must_start_at_sequence_zero() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 5)], Client);
    let err = apply(&mut psm, &[data(1, 1, 5, 5, 1)], Client).unwrap_err();
    assert_eq!(
        err,
        ProducerStateError::OutOfOrderSequence {
            producer_id: 1,
            offset: 5,
            epoch: 1,
            current_epoch: 0,
            first_sequence: 5,
            current_last_sequence: -1,
            violation: SequenceViolation::NewEpochNotZero
        }
    );
    apply_ok(&mut psm, &[data(1, 1, 0, 5, 1)], Client);
    assert_eq!(psm.last_entry(1).unwrap().producer_epoch(), 1);
}

#[test]
fn unknown_producer_may_start_at_any_sequence() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(9, 3, 42, 0, 1)], Client);
    apply_ok(&mut psm, &[data(9, 3, 43, 1, 1)], Client);
    // Also after its state expired.
    psm.remove_expired_producers(i64::MAX);
    assert!(psm.last_entry(9).is_none());
    apply_ok(&mut psm, &[data(9, 3, 1000, 2, 1)], Client);
}

// ---- duplicates (§7.1) ----

#[test]
fn duplicates_are_found_among_the_last_five_batches_only() {
    let mut psm = ProducerStateManager::default();
    let batches: Vec<_> = (0..6)
        .map(|i| data(1, 0, i * 2, i64::from(i) * 2, 2))
        .collect();
    apply_ok(&mut psm, &batches, Client);
    assert_eq!(psm.last_entry(1).unwrap().batch_metadata().len(), 5);
    for b in &batches[1..] {
        let d = psm.check_duplicate(b).expect("cached batch is a duplicate");
        assert_eq!(
            (d.first_offset(), d.last_offset, d.first_seq(), d.last_seq),
            (
                b.base_offset,
                b.last_offset,
                b.base_sequence,
                b.last_sequence
            )
        );
    }
    assert_eq!(
        psm.check_duplicate(&batches[0]),
        None,
        "the 6th-oldest batch is no longer cached"
    );
    // Different epoch: not a duplicate.
    let mut other_epoch = batches[5].clone();
    other_epoch.producer_epoch = 1;
    assert_eq!(psm.check_duplicate(&other_epoch), None);

    // apply_batches skips duplicates (writes nothing, reports the original).
    let before = psm.snapshot_entries();
    let mut resend = batches[3].clone();
    resend.base_offset = 100;
    resend.last_offset = 101;
    let out = apply_ok(&mut psm, &[resend], Client);
    assert_eq!(out.duplicates.len(), 1);
    assert_eq!(
        out.duplicates[0].original,
        BatchMetadata {
            last_seq: 7,
            last_offset: 7,
            offset_delta: 1,
            timestamp: 1_006
        }
    );
    assert_eq!(psm.snapshot_entries(), before);
    assert_eq!(
        psm.map_end_offset(),
        12,
        "nothing written, map end unchanged"
    );
    // The evicted batch, resent, is out of order.
    let mut old = batches[0].clone();
    old.base_offset = 12;
    old.last_offset = 13;
    let err = apply(&mut psm, &[old], Client).unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::OutOfOrderSequence {
            first_sequence: 0,
            current_last_sequence: 11,
            ..
        }
    ));
}

#[test]
fn duplicate_of_a_batch_earlier_in_the_same_call_is_found() {
    let mut psm = ProducerStateManager::default();
    let b = data(1, 0, 0, 0, 1);
    let mut again = b.clone();
    again.base_offset = 1;
    again.last_offset = 1;
    let out = apply_ok(&mut psm, &[b, again], Client);
    assert_eq!(out.duplicates.len(), 1);
    assert_eq!(out.duplicates[0].index, 1);
    assert_eq!(psm.map_end_offset(), 1);
}

// ---- transactions (§7.3 step 4, §7.4, §7.6) ----

#[test]
fn non_transactional_batch_inside_open_txn_is_invalid_txn_state() {
    for origin in [Client, Coordinator, Replication] {
        let mut psm = ProducerStateManager::default();
        apply_ok(&mut psm, &[txn(1, 0, 0, 0, 2)], origin);
        let err = apply(&mut psm, &[data(1, 0, 2, 2, 1)], origin).unwrap_err();
        assert_eq!(
            err,
            ProducerStateError::InvalidTxnState {
                producer_id: 1,
                offset: 2,
                txn_first_offset: 0
            },
            "{origin:?}"
        );
    }
}

#[test]
fn lso_with_two_producers_open_txns_and_completion() {
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[
            txn(1, 0, 0, 0, 2),
            plain(2, 3),
            txn(2, 0, 0, 5, 2),
            txn(1, 0, 2, 7, 1),
        ],
        Client,
    );
    assert_eq!(psm.first_unstable_offset(), Some(0));
    assert_eq!(psm.first_undecided_offset(), Some(0));
    assert_eq!(
        psm.ongoing_txns().values().copied().collect::<Vec<_>>(),
        vec![
            TxnMetadata {
                producer_id: 1,
                first_offset: 0,
                last_offset: None
            },
            TxnMetadata {
                producer_id: 2,
                first_offset: 5,
                last_offset: None
            }
        ]
    );
    // Producer 1 aborts at 8: the LSO is producer 2's first offset.
    let out = apply_ok(&mut psm, &[marker(1, 0, 8, false, 0)], Coordinator);
    assert_eq!(
        out.completed_txns,
        vec![CompletedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 8,
            is_aborted: true
        }]
    );
    assert_eq!(
        out.aborted_txns,
        vec![AbortedTxnRecord {
            producer_id: 1,
            first_offset: 0,
            last_offset: 8,
            last_stable_offset: 5
        }]
    );
    assert_eq!(psm.first_undecided_offset(), Some(5));
    assert_eq!(
        psm.first_unstable_offset(),
        Some(0),
        "aborted txn unreplicated until HW passes 8"
    );
    // Producer 2 commits at 9: no aborted record; LSO would be 10.
    let commit = CompletedTxn {
        producer_id: 2,
        first_offset: 5,
        last_offset: 9,
        is_aborted: false,
    };
    assert_eq!(psm.last_stable_offset(&commit), 10);
    let out = apply_ok(&mut psm, &[marker(2, 0, 9, true, 0)], Coordinator);
    assert_eq!(out.completed_txns, vec![commit]);
    assert!(out.aborted_txns.is_empty());
    assert!(psm.ongoing_txns().is_empty());
    assert_eq!(psm.unreplicated_txns().len(), 2);
    assert_eq!(psm.last_entry(1).unwrap().current_txn_first_offset(), None);
}

#[test]
fn aborted_txn_lso_is_own_marker_plus_one_when_alone() {
    let mut psm = ProducerStateManager::default();
    let out = apply_ok(
        &mut psm,
        &[txn(1, 0, 0, 10, 3), marker(1, 0, 13, false, 4)],
        Replication,
    );
    assert_eq!(
        out.aborted_txns,
        vec![AbortedTxnRecord {
            producer_id: 1,
            first_offset: 10,
            last_offset: 13,
            last_stable_offset: 14
        }]
    );
    assert_eq!(psm.last_entry(1).unwrap().coordinator_epoch(), 4);
}

#[test]
fn marker_from_producer_without_open_txn_completes_nothing() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 1)], Client);
    let out = apply_ok(&mut psm, &[marker(1, 0, 1, false, 3)], Coordinator);
    assert!(out.completed_txns.is_empty());
    assert!(out.aborted_txns.is_empty());
    let e = psm.last_entry(1).unwrap();
    assert_eq!(
        (
            e.coordinator_epoch(),
            e.last_timestamp(),
            e.batch_metadata().len()
        ),
        (3, 1_001, 1)
    );
    // A marker from a producer never seen creates its entry.
    apply_ok(&mut psm, &[marker(2, 4, 2, true, 1)], Coordinator);
    assert_eq!(psm.last_entry(2).unwrap().producer_epoch(), 4);
}

#[test]
fn older_coordinator_epoch_is_fenced_or_warned() {
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[
            txn(1, 0, 0, 0, 1),
            marker(1, 0, 1, true, 3),
            txn(1, 0, 1, 2, 1),
        ],
        Replication,
    );
    let err = apply(&mut psm, &[marker(1, 0, 3, true, 2)], Coordinator).unwrap_err();
    assert_eq!(
        err,
        ProducerStateError::TransactionCoordinatorFenced {
            producer_id: 1,
            offset: 3,
            coordinator_epoch: 2,
            current_coordinator_epoch: 3
        }
    );
    let out = apply_ok(&mut psm, &[marker(1, 0, 3, true, 2)], Replication);
    assert_eq!(
        out.warnings,
        vec![ProducerStateWarning::CoordinatorEpochRegression {
            producer_id: 1,
            offset: 3,
            coordinator_epoch: 2,
            current_coordinator_epoch: 3
        }]
    );
    assert_eq!(out.completed_txns.len(), 1);
    assert_eq!(psm.last_entry(1).unwrap().coordinator_epoch(), 2);
}

#[test]
fn unreplicated_txns_hold_the_lso_until_the_high_watermark_passes_the_marker() {
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[plain(0, 2), txn(1, 0, 0, 2, 2), marker(1, 0, 4, true, 0)],
        Replication,
    );
    assert_eq!(psm.first_undecided_offset(), None);
    assert_eq!(psm.first_unstable_offset(), Some(2));
    assert_eq!(psm.last_stable_offset_for(5, 0), 2);
    psm.on_high_watermark_updated(4);
    assert_eq!(
        psm.first_unstable_offset(),
        Some(2),
        "marker at 4 is not below HW 4"
    );
    psm.on_high_watermark_updated(5);
    assert_eq!(psm.first_unstable_offset(), None);
    assert_eq!(psm.last_stable_offset_for(5, 0), 5);
    assert_eq!(psm.map_end_offset(), 5);
}

#[test]
fn complete_txn_of_unknown_txn_is_an_error() {
    let mut psm = ProducerStateManager::default();
    let t = CompletedTxn {
        producer_id: 1,
        first_offset: 3,
        last_offset: 5,
        is_aborted: true,
    };
    assert_eq!(
        psm.complete_txn(&t),
        Err(ProducerStateError::TxnNotStarted {
            producer_id: 1,
            first_offset: 3,
            last_offset: 5
        })
    );
}

// ---- expiry (§7.9) ----

#[test]
fn producers_expire_after_expiration_ms_unless_a_txn_is_open() {
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[
            data(1, 0, 0, 0, 1),
            txn(2, 0, 0, 1, 1),
            data(3, 0, 0, 100, 1),
        ],
        Replication,
    );
    // ts: pid1 1000, pid2 1001, pid3 1100
    assert!(psm
        .remove_expired_producers(1_000 + 86_400_000 - 1)
        .is_empty());
    assert_eq!(psm.remove_expired_producers(1_000 + 86_400_000), vec![1]);
    assert_eq!(psm.remove_expired_producers(i64::MAX), vec![3]);
    assert!(
        psm.last_entry(2).is_some(),
        "open transaction keeps the producer"
    );
    let mut short = ProducerStateManager::new(ProducerStateManagerConfig {
        producer_id_expiration_ms: 10,
    });
    apply_ok(&mut short, &[data(1, 0, 0, 0, 1)], Client);
    assert_eq!(short.remove_expired_producers(1_010), vec![1]);
}

// ---- control batches and bad input ----

#[test]
fn producer_owned_control_batch_of_other_type_is_invalid() {
    let mut psm = ProducerStateManager::default();
    let mut b = marker(1, 0, 0, true, 0);
    b.control = Some(ControlInfo::Other(2));
    assert_eq!(
        apply(&mut psm, &[b.clone()], Replication).unwrap_err(),
        ProducerStateError::InvalidControlBatch {
            producer_id: 1,
            offset: 0,
            reason: InvalidControlReason::NotAnEndTxnMarker(2)
        }
    );
    b.control = None;
    assert!(matches!(
        apply(&mut psm, &[b.clone()], Replication).unwrap_err(),
        ProducerStateError::InvalidControlBatch {
            reason: InvalidControlReason::MissingControlRecord,
            ..
        }
    ));
    // Empty control batch (compacted away): no-op apart from creating an empty entry.
    b.records_count = 0;
    apply_ok(&mut psm, &[b], Replication);
    let e = psm.last_entry(1).unwrap();
    assert_eq!((e.producer_epoch(), e.is_empty()), (-1, true));
}

#[test]
fn impossible_offsets_are_typed_errors_not_panics() {
    let mut psm = ProducerStateManager::default();
    let mut b = data(1, 0, 0, 5, 1);
    b.last_offset = 4;
    assert_eq!(
        apply(&mut psm, &[b.clone()], Client).unwrap_err(),
        ProducerStateError::InvalidBatch {
            base_offset: 5,
            last_offset: 4,
            reason: InvalidBatchReason::LastOffsetBeforeBase
        }
    );
    b.base_offset = -3;
    assert!(matches!(
        apply(&mut psm, &[b.clone()], Client).unwrap_err(),
        ProducerStateError::InvalidBatch {
            reason: InvalidBatchReason::NegativeBaseOffset,
            ..
        }
    ));
    b.base_offset = 0;
    b.last_offset = i64::MAX;
    assert!(matches!(
        apply(&mut psm, &[b], Client).unwrap_err(),
        ProducerStateError::InvalidBatch {
            reason: InvalidBatchReason::OffsetDeltaTooLarge,
            ..
        }
    ));
    let mut extreme = data(1, i16::MIN, i32::MIN, i64::MAX, 1);
    extreme.last_sequence = i32::MAX;
    extreme.max_timestamp = i64::MIN;
    let err = apply(&mut psm, std::slice::from_ref(&extreme), Client).unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::InvalidProducerEpoch {
            epoch: i16::MIN,
            current_epoch: -1,
            ..
        }
    ));
    let out = apply_ok(&mut psm, &[extreme], Replication);
    assert_eq!(out.warnings.len(), 1);
    assert_eq!(psm.map_end_offset(), i64::MAX);
    psm.remove_expired_producers(i64::MAX);
    assert!(psm.active_producers().is_empty());
}

#[test]
fn apply_batches_is_all_or_nothing() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 2, 0, 0, 1)], Client);
    let before = (psm.snapshot_entries(), psm.map_end_offset());
    let err = apply(
        &mut psm,
        &[
            data(2, 0, 0, 1, 1),
            txn(3, 0, 0, 2, 1),
            barrier(3),
            data(1, 1, 0, 4, 1),
            data(5, 3, 0, 5, 1),
            data(5, 2, 0, 6, 1),
        ],
        Client,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::InvalidProducerEpoch {
            producer_id: 5,
            epoch: 2,
            current_epoch: 3,
            ..
        }
    ));
    assert_eq!((psm.snapshot_entries(), psm.map_end_offset()), before);
    assert!(psm.ongoing_txns().is_empty());
}

/// The two halves of an append (`analyze_and_validate` before the bytes are written,
/// `apply_update` after): the analysis changes nothing and holds one append info per producer of
/// the batches (not per live producer); applying it gives what `apply_batches` gives.
#[test]
fn an_update_copies_only_its_producers_entries_and_applies_as_apply_batches() {
    let mut psm = ProducerStateManager::default();
    let live: Vec<_> = (0..1_000).map(|pid| data(pid, 0, 0, pid, 1)).collect();
    apply_ok(&mut psm, &live, Client);
    let mut reference = psm.clone();
    let batches = [
        data(7, 0, 1, 1_000, 1),
        txn(2_000, 0, 0, 1_001, 2),
        data(7, 0, 2, 1_003, 1),
        // Producer 3's batch at offset 3 again: a duplicate.
        data(3, 0, 0, 1_004, 1),
    ];
    let before = (
        psm.snapshot_entries(),
        psm.map_end_offset(),
        psm.ongoing_txns().clone(),
    );
    let update = psm.analyze_and_validate(&batches, Client).unwrap();
    assert_eq!(update.producer_count(), 2, "producers 7 and 2000 only");
    assert_eq!(update.duplicates().len(), 1);
    assert_eq!(update.duplicates()[0].producer_id, 3);
    assert_eq!(
        (
            psm.snapshot_entries(),
            psm.map_end_offset(),
            psm.ongoing_txns().clone()
        ),
        before,
        "the analysis changes nothing"
    );
    let got = psm.apply_update(update);
    let want = reference.apply_batches(&batches, Client).unwrap();
    assert_eq!(got, want);
    assert_eq!(psm.snapshot_entries(), reference.snapshot_entries());
    assert_eq!(psm.ongoing_txns(), reference.ongoing_txns());
    // The skipped duplicate does not move the map end (a log writes nothing for it).
    assert_eq!(psm.map_end_offset(), 1_004);
    assert_eq!(psm.last_entry(7).map(|e| e.last_seq()), Some(2));

    // A refused update leaves nothing behind either.
    let err = psm
        .analyze_and_validate(&[data(7, 0, 9, 1_005, 1)], Client)
        .unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::OutOfOrderSequence { producer_id: 7, .. }
    ));
    assert_eq!(psm.snapshot_entries(), reference.snapshot_entries());
}

#[test]
fn low_level_api_matches_apply_batches() {
    let batches = [
        txn(1, 0, 0, 0, 2),
        data(2, 0, 0, 2, 1),
        txn(1, 0, 2, 3, 1),
        marker(1, 0, 4, false, 0),
    ];
    let mut a = ProducerStateManager::default();
    apply_ok(&mut a, &batches, Replication);

    let mut b = ProducerStateManager::default();
    let mut infos: Vec<recovery::ProducerAppendInfo> = Vec::new();
    let mut completed = Vec::new();
    for batch in &batches {
        let i = match infos
            .iter()
            .position(|i| i.producer_id() == batch.producer_id)
        {
            Some(i) => i,
            None => {
                infos.push(b.prepare_update(batch.producer_id, Replication));
                infos.len() - 1
            }
        };
        completed.extend(infos[i].append(batch).unwrap());
    }
    for info in infos {
        b.update(info).unwrap();
    }
    for t in &completed {
        assert_eq!(b.last_stable_offset(t), 5);
        b.complete_txn(t).unwrap();
    }
    b.update_map_end_offset(5);
    assert_eq!(a.snapshot_entries(), b.snapshot_entries());
    assert_eq!(a.unreplicated_txns(), b.unreplicated_txns());
    assert_eq!(a.map_end_offset(), b.map_end_offset());
}

#[test]
fn map_end_advances_over_batches_without_producer_id() {
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[plain(0, 10)], Client);
    assert_eq!(psm.map_end_offset(), 10);
    assert!(psm.active_producers().is_empty());
}

#[test]
fn truncate_fully_forgets_everything() {
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[
            txn(1, 0, 0, 0, 1),
            txn(2, 0, 0, 1, 1),
            marker(2, 0, 2, true, 0),
        ],
        Replication,
    );
    psm.truncate_fully_and_start_at(50);
    assert!(psm.is_empty());
    assert!(psm.unreplicated_txns().is_empty());
    assert_eq!(
        (
            psm.map_end_offset(),
            psm.last_snapshot_offset(),
            psm.first_unstable_offset()
        ),
        (50, 0, None)
    );
}

/// Found by the property test: Kafka's merge compares only the final epochs, so an epoch bump
/// followed by a regression inside one replicated append kept the older epoch's cached batch,
/// while batch-by-batch replay dropped it. Here both drop it.
#[test]
fn epoch_bump_and_regression_within_one_append_drops_stale_batches() {
    let mut one_call = ProducerStateManager::default();
    apply_ok(&mut one_call, &[data(2, 1, 0, 0, 1)], Replication);
    let mut by_batch = one_call.clone();
    let rest = [data(2, 2, 0, 1, 1), marker(2, 1, 2, false, 0)];
    apply_ok(&mut one_call, &rest, Replication);
    for b in &rest {
        apply_ok(&mut by_batch, std::slice::from_ref(b), Replication);
    }
    assert!(one_call.last_entry(2).unwrap().is_empty());
    assert_eq!(one_call.snapshot_entries(), by_batch.snapshot_entries());
}
