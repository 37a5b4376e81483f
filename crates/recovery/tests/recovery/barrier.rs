//! KIP-1279 `MIRROR_PID_RESET`: the three PID-collision scenarios of the KIP at the PSM level
//! (harm without the barrier, correct behaviour with it), strict log order within one call, open
//! transactions at the barrier, and snapshots around it.
//!
//! Setting: pid 7 was used by a producer on the source cluster; its batches were mirrored into
//! this partition as REPLICATION. After failover a *local* producer is given the same pid 7.

use recovery::AppendOrigin::{Client, Coordinator, Replication};
use recovery::{
    AbortedTxnRecord, CompletedTxn, InvalidControlReason, ProducerStateError, ProducerStateManager,
    ProducerStateWarning, TxnMetadata,
};

use crate::common::*;

/// Mirrored history of pid 7, epoch `epoch`: ten single-record batches, sequences 0..=9, at
/// offsets 0..=9.
fn mirrored(epoch: i16) -> Vec<recovery::BatchSummary> {
    (0..10)
        .map(|i| data(7, epoch, i, i64::from(i), 1))
        .collect()
}

#[test]
fn scenario_1_same_epoch_wrong_sequence() {
    // Harm 1a (KIP text): two sources' pid 7 interleave under REPLICATION: silently accepted,
    // the entry is overwritten by whatever came last, no error, not even a warning.
    let mut psm = ProducerStateManager::default();
    let out = apply_ok(
        &mut psm,
        &[data(7, 0, 0, 0, 5), data(7, 0, 0, 5, 1)],
        Replication,
    );
    assert!(out.warnings.is_empty());
    assert_eq!(psm.last_entry(7).unwrap().last_seq(), 0);

    // Harm 1b: after failover without a barrier, the local producer's first batch (epoch 0,
    // sequence 0) matches a cached mirrored batch and would be acknowledged as a duplicate
    // without being written: silent data loss (the Redpanda shadow-link bug).
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &mirrored(0)[..3], Replication);
    let local_first = data(7, 0, 0, 3, 1);
    let out = apply_ok(&mut psm, std::slice::from_ref(&local_first), Client);
    assert_eq!(out.duplicates.len(), 1, "wrongly flagged as duplicate");
    assert_eq!(out.duplicates[0].original.last_offset, 0);
    assert_eq!(psm.map_end_offset(), 3, "nothing was written");

    // Harm 1c: with more mirrored history, sequence 0 is simply out of order: rejected.
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &mirrored(0), Replication);
    let local_first = data(7, 0, 0, 10, 1);
    let err = apply(&mut psm, std::slice::from_ref(&local_first), Client).unwrap_err();
    assert!(matches!(
        err,
        ProducerStateError::OutOfOrderSequence {
            producer_id: 7,
            current_last_sequence: 9,
            ..
        }
    ));

    // With the barrier: the local producer is new; its batch is appended.
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &mirrored(0), Replication);
    let out = apply_ok(&mut psm, &[barrier(10)], Coordinator);
    assert_eq!(out.barriers[0].producers_removed, 1);
    let local_first = data(7, 0, 0, 11, 1);
    let out = apply_ok(&mut psm, &[local_first], Client);
    assert!(out.duplicates.is_empty());
    let e = psm.last_entry(7).unwrap();
    assert_eq!(
        (e.batch_metadata().len(), e.last_data_offset(), e.last_seq()),
        (1, 11, 0)
    );
    assert_eq!(psm.map_end_offset(), 12);
}

#[test]
fn scenario_2_different_epochs() {
    // Mirrored producer at epoch 5; local producer at epoch 0.
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &mirrored(5), Replication);
    // Harm: a client append is fenced...
    let err = apply(&mut psm, &[data(7, 0, 0, 10, 1)], Client).unwrap_err();
    assert_eq!(
        err,
        ProducerStateError::InvalidProducerEpoch {
            producer_id: 7,
            offset: 10,
            epoch: 0,
            current_epoch: 5,
            is_marker: false
        }
    );
    // ...and under replication (a follower, or a mirror of a mixed log) both coexist with only
    // a warning.
    let mut follower = psm.clone();
    let out = apply_ok(
        &mut follower,
        &[data(7, 0, 0, 10, 1), data(7, 5, 10, 11, 1)],
        Replication,
    );
    assert!(matches!(
        out.warnings.as_slice(),
        [ProducerStateWarning::EpochRegression {
            epoch: 0,
            current_epoch: 5,
            ..
        }]
    ));

    // With the barrier: no error, no warning.
    apply_ok(&mut psm, &[barrier(10)], Coordinator);
    let out = apply_ok(&mut psm, &[data(7, 0, 0, 11, 1)], Client);
    assert!(out.warnings.is_empty());
    assert_eq!(psm.last_entry(7).unwrap().producer_epoch(), 0);
    let mut follower = ProducerStateManager::default();
    let out = apply_ok(
        &mut follower,
        &[mirrored(5), vec![barrier(10), data(7, 0, 0, 11, 1)]].concat(),
        Replication,
    );
    assert!(out.warnings.is_empty());
}

#[test]
fn scenario_3_transactional_interleaving() {
    // Mirrored pid 7 has a transaction open from offset 0 (the source never decided it here).
    let mirrored_txn = [txn(7, 0, 0, 0, 3)];
    // Harm: without a barrier, the local producer's COMMIT closes the mirrored transaction
    // (committing the mirrored records at 0..=2), and its own first transactional batch is
    // folded into it.
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &mirrored_txn, Replication);
    let out = apply_ok(
        &mut psm,
        &[txn(7, 0, 3, 5, 1), marker(7, 0, 6, true, 0)],
        Replication,
    );
    assert_eq!(
        out.completed_txns,
        vec![CompletedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 6,
            is_aborted: false
        }]
    );
    // ...and a local non-transactional batch is refused.
    let mut psm2 = ProducerStateManager::default();
    apply_ok(&mut psm2, &mirrored_txn, Replication);
    assert!(matches!(
        apply(&mut psm2, &[data(7, 0, 3, 5, 1)], Client).unwrap_err(),
        ProducerStateError::InvalidTxnState {
            txn_first_offset: 0,
            ..
        }
    ));

    // With the barrier at 3: the mirrored transaction is aborted at 3; the local transaction is
    // tracked on its own from 5 and its commit completes only it.
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &mirrored_txn, Replication);
    let out = apply_ok(&mut psm, &[barrier(3)], Coordinator);
    assert_eq!(
        out.aborted_txns,
        vec![AbortedTxnRecord {
            producer_id: 7,
            first_offset: 0,
            last_offset: 3,
            last_stable_offset: 4
        }]
    );
    assert_eq!(psm.first_undecided_offset(), None);
    let out = apply_ok(
        &mut psm,
        &[txn(7, 0, 0, 5, 1), marker(7, 0, 6, true, 0)],
        Client,
    );
    assert_eq!(
        out.completed_txns,
        vec![CompletedTxn {
            producer_id: 7,
            first_offset: 5,
            last_offset: 6,
            is_aborted: false
        }]
    );
    psm.on_high_watermark_updated(7);
    assert_eq!(psm.first_unstable_offset(), None);
}

#[test]
fn barrier_applies_strictly_in_log_order_within_one_call() {
    // The fork buffers per-producer updates of a chunk and applies them after the loop, so pids 1
    // and 2 would survive the barrier. Here they do not; pid 3 (after it) does.
    let mut psm = ProducerStateManager::default();
    let out = apply_ok(
        &mut psm,
        &[
            data(1, 0, 0, 0, 1),
            data(2, 0, 0, 1, 1),
            barrier(2),
            data(3, 0, 0, 3, 1),
        ],
        Replication,
    );
    assert_eq!(
        psm.active_producers().keys().copied().collect::<Vec<_>>(),
        vec![3]
    );
    assert_eq!(out.barriers.len(), 1);
    assert_eq!(
        (out.barriers[0].offset, out.barriers[0].producers_removed),
        (2, 2)
    );
    assert_eq!(out.barriers[0].source_cluster_id, "abc");
    assert_eq!(psm.map_end_offset(), 4);

    // Pid 1 after the barrier in the same call starts from nothing: its resent pre-barrier batch
    // is not a duplicate, and is appended.
    let mut psm = ProducerStateManager::default();
    let b0 = data(1, 0, 0, 0, 1);
    let mut again = b0.clone();
    again.base_offset = 2;
    again.last_offset = 2;
    let out = apply_ok(
        &mut psm,
        &[b0, barrier(1), again, data(1, 0, 1, 3, 1)],
        Client,
    );
    assert!(out.duplicates.is_empty());
    assert_eq!(psm.last_entry(1).unwrap().batch_metadata().len(), 2);

    // Two barriers in one call.
    let mut psm = ProducerStateManager::default();
    let out = apply_ok(
        &mut psm,
        &[
            data(1, 0, 0, 0, 1),
            barrier(1),
            data(2, 0, 0, 2, 1),
            barrier(3),
            data(3, 0, 0, 4, 1),
        ],
        Replication,
    );
    assert_eq!(
        out.barriers
            .iter()
            .map(|b| b.producers_removed)
            .collect::<Vec<_>>(),
        vec![1, 1]
    );
    assert_eq!(
        psm.active_producers().keys().copied().collect::<Vec<_>>(),
        vec![3]
    );
}

#[test]
fn barrier_resets_in_every_origin() {
    for origin in [Client, Coordinator, Replication] {
        let mut psm = ProducerStateManager::default();
        apply_ok(&mut psm, &[data(1, 0, 0, 0, 1)], Replication);
        apply_ok(&mut psm, &[barrier(1)], origin);
        assert!(psm.active_producers().is_empty(), "{origin:?}");
        assert_eq!(psm.map_end_offset(), 2);
    }
}

#[test]
fn barrier_is_recognised_by_type_even_with_a_producer_id() {
    let mut b = barrier(1);
    b.producer_id = 4;
    b.producer_epoch = 0;
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 1), b.clone()], Replication);
    assert!(psm.active_producers().is_empty());
    // The per-producer path refuses it as Kafka's EndTransactionMarker.deserialize would.
    let mut info = psm.prepare_update(4, Replication);
    assert_eq!(
        info.append(&b).unwrap_err(),
        ProducerStateError::InvalidControlBatch {
            producer_id: 4,
            offset: 1,
            reason: InvalidControlReason::NotAnEndTxnMarker(7)
        }
    );
}

#[test]
fn open_txns_at_the_barrier_are_aborted_at_its_offset() {
    let mut psm = ProducerStateManager::default();
    let out = apply_ok(
        &mut psm,
        &[
            txn(1, 0, 0, 0, 1),
            txn(2, 0, 0, 1, 1),
            txn(3, 0, 0, 2, 1),
            marker(3, 0, 3, true, 0),
            barrier(4),
        ],
        Replication,
    );
    assert_eq!(
        out.aborted_txns,
        vec![
            AbortedTxnRecord {
                producer_id: 1,
                first_offset: 0,
                last_offset: 4,
                last_stable_offset: 1
            },
            AbortedTxnRecord {
                producer_id: 2,
                first_offset: 1,
                last_offset: 4,
                last_stable_offset: 5
            },
        ]
    );
    assert_eq!(
        out.completed_txns.len(),
        3,
        "the commit of pid 3 plus two barrier aborts"
    );
    assert_eq!(out.barriers[0].aborted_txns, out.aborted_txns);
    assert!(psm.ongoing_txns().is_empty());
    assert_eq!(
        psm.unreplicated_txns()
            .values()
            .copied()
            .collect::<Vec<_>>(),
        vec![
            TxnMetadata {
                producer_id: 1,
                first_offset: 0,
                last_offset: Some(4)
            },
            TxnMetadata {
                producer_id: 2,
                first_offset: 1,
                last_offset: Some(4)
            },
            TxnMetadata {
                producer_id: 3,
                first_offset: 2,
                last_offset: Some(3)
            },
        ]
    );
    // The LSO does not stall: it is held only until the high watermark passes the barrier.
    assert_eq!(psm.last_stable_offset_for(5, 0), 0);
    psm.on_high_watermark_updated(5);
    assert_eq!(psm.first_unstable_offset(), None);
    assert_eq!(psm.last_stable_offset_for(5, 0), 5);
    // A later marker from an aborted producer completes nothing.
    let out = apply_ok(&mut psm, &[marker(1, 0, 5, true, 0)], Coordinator);
    assert!(out.completed_txns.is_empty());
}

#[test]
fn snapshot_after_barrier_has_no_pre_barrier_producer() {
    let dir = tempfile::tempdir().unwrap();
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[
            data(1, 0, 0, 0, 1),
            txn(2, 0, 0, 1, 1),
            barrier(2),
            data(3, 0, 0, 3, 1),
        ],
        Replication,
    );
    let path = psm.take_snapshot(dir.path()).unwrap().unwrap();
    assert!(path.ends_with("00000000000000000004.snapshot"));
    let entries = recovery::read_snapshot(&path).unwrap();
    assert_eq!(
        entries.iter().map(|e| e.producer_id).collect::<Vec<_>>(),
        vec![3]
    );
}

#[test]
fn replay_across_the_barrier_from_an_older_snapshot_matches_live_state() {
    let dir = tempfile::tempdir().unwrap();
    let before = [data(1, 0, 0, 0, 1), txn(2, 0, 0, 1, 1)];
    let after = [data(1, 0, 1, 2, 1), barrier(3), data(3, 0, 0, 4, 1)];
    let mut live = ProducerStateManager::default();
    apply_ok(&mut live, &before, Replication);
    live.take_snapshot(dir.path()).unwrap();
    apply_ok(&mut live, &after, Replication);

    let mut reloaded = ProducerStateManager::default();
    let load = reloaded.load_from_snapshot(dir.path(), 0, 5, 0).unwrap();
    assert_eq!(load.loaded.unwrap().offset, 2);
    assert_eq!(
        reloaded.first_undecided_offset(),
        Some(1),
        "open txn restored from the snapshot"
    );
    let out = apply_ok(&mut reloaded, &after, Replication);
    assert_eq!(
        out.aborted_txns,
        vec![AbortedTxnRecord {
            producer_id: 2,
            first_offset: 1,
            last_offset: 3,
            last_stable_offset: 4
        }]
    );
    assert_eq!(reloaded.snapshot_entries(), live.snapshot_entries());
    assert_eq!(reloaded.ongoing_txns(), live.ongoing_txns());
    assert_eq!(reloaded.map_end_offset(), live.map_end_offset());
}
