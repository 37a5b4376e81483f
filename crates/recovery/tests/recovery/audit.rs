//! The producer-id collision audit (`seglog producers --audit`): each of the three KIP-1279 PID
//! collision scenarios, written without a barrier, produces exactly the findings that show the
//! collision; the same failover written correctly (truncated to the LSO, barrier, then the local
//! producer) produces only the informational `PidReusedAcrossBarrier`. A clean log with epoch
//! bumps, TV0/1 and TV2-style transactions and several producers produces nothing.
//!
//! Setting: producer id 5 belongs to a producer "A" on the source cluster; "B" is an unrelated
//! producer that got id 5 too (a local producer after failover, or another source).

use recovery::AuditFinding;
use recovery::AuditKind::*;
use recovery::{audit_batches, BatchSummary, ControlInfo, ProducerAudit, Severity};

use crate::common::*;

const ABORT: bool = false;
const COMMIT: bool = true;

/// `batches` with the barrier inserted at `at` and every later batch moved up one offset.
fn with_barrier_at(batches: &[BatchSummary], at: i64) -> Vec<BatchSummary> {
    let mut out: Vec<BatchSummary> = batches
        .iter()
        .map(|b| {
            let mut b = b.clone();
            if b.base_offset >= at {
                b.base_offset += 1;
                b.last_offset += 1;
            }
            b
        })
        .collect();
    out.push(barrier(at));
    out.sort_by_key(|b| b.base_offset);
    out
}

fn assert_findings(batches: &[BatchSummary], expected: &[AuditFinding]) {
    let found = audit_batches(batches);
    assert_eq!(found, expected, "\n{}", lines(&found));
}

fn lines(findings: &[AuditFinding]) -> String {
    findings
        .iter()
        .map(|f| format!("{} {f}\n", f.severity()))
        .collect()
}

/// A: pid 5, epoch 0, single-record batches with sequences 0..n at offsets 0..n.
fn source_a(epoch: i16, n: i32) -> Vec<BatchSummary> {
    (0..n).map(|i| data(5, epoch, i, i64::from(i), 1)).collect()
}

// ------------------------------------------------------------------------------------------------
// Scenario 1: same epoch, wrong sequence
// ------------------------------------------------------------------------------------------------

/// A wrote sequences 0..=9; B starts at sequence 0 in the same epoch.
fn scenario_1_restart() -> Vec<BatchSummary> {
    let mut log = source_a(0, 10);
    log.extend([
        data(5, 0, 0, 10, 1),
        data(5, 0, 1, 11, 1),
        data(5, 0, 2, 12, 1),
    ]);
    log
}

#[test]
fn scenario_1_same_epoch_sequence_restart_without_barrier() {
    let expected = [AuditFinding {
        offset: 10,
        producer_id: 5,
        kind: SequenceRestart {
            epoch: 0,
            previous_sequence: 9,
            previous_offset: 9,
        },
    }];
    assert_findings(&scenario_1_restart(), &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 10: producerId 5 epoch 0 sequence restarted at 0 after 9 (last seen at offset 9)"
    );
    assert_eq!(expected[0].severity(), Severity::Error);
}

#[test]
fn scenario_1_same_epoch_sequence_restart_with_barrier() {
    assert_findings(
        &with_barrier_at(&scenario_1_restart(), 10),
        &[AuditFinding {
            offset: 11,
            producer_id: 5,
            kind: PidReusedAcrossBarrier {
                barrier_offset: 10,
                previous_offset: 9,
            },
        }],
    );
}

/// A wrote only sequences 0..=2: B's first batch matches a cached one exactly. On the client
/// path Kafka would acknowledge it as a duplicate without writing it (silent loss).
fn scenario_1_duplicate() -> Vec<BatchSummary> {
    let mut log = source_a(0, 3);
    log.extend([data(5, 0, 0, 3, 1), data(5, 0, 1, 4, 1)]);
    log
}

#[test]
fn scenario_1_same_epoch_duplicate_without_barrier() {
    let expected = [AuditFinding {
        offset: 3,
        producer_id: 5,
        kind: Duplicate {
            epoch: 0,
            first_sequence: 0,
            last_sequence: 0,
            original_offset: 0,
        },
    }];
    assert_findings(&scenario_1_duplicate(), &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 3: producerId 5 epoch 0 sequences 0..0 duplicate the batch at offset 0"
    );
}

#[test]
fn only_the_last_five_batches_count_as_duplicates_the_oldest_first() {
    // Sequences 0..=6 at offsets 0..=6: batches 2..=6 are cached (Kafka keeps five). Sequence 3
    // again duplicates the batch at offset 3, and so does the next (the oldest match is named,
    // as Kafka's search from the oldest finds it); sequence 1 again (evicted) is then a gap.
    let mut log = source_a(0, 7);
    log.extend([
        data(5, 0, 3, 7, 1),
        data(5, 0, 3, 8, 1),
        data(5, 0, 1, 9, 1),
    ]);
    let duplicate = |offset| AuditFinding {
        offset,
        producer_id: 5,
        kind: Duplicate {
            epoch: 0,
            first_sequence: 3,
            last_sequence: 3,
            original_offset: 3,
        },
    };
    let expected = [
        duplicate(7),
        duplicate(8),
        AuditFinding {
            offset: 9,
            producer_id: 5,
            kind: SequenceGap {
                epoch: 0,
                first_sequence: 1,
                expected_sequence: 4,
                previous_offset: 8,
            },
        },
    ];
    assert_findings(&log, &expected);
}

#[test]
fn scenario_1_same_epoch_duplicate_with_barrier() {
    assert_findings(
        &with_barrier_at(&scenario_1_duplicate(), 3),
        &[AuditFinding {
            offset: 4,
            producer_id: 5,
            kind: PidReusedAcrossBarrier {
                barrier_offset: 3,
                previous_offset: 2,
            },
        }],
    );
}

// ------------------------------------------------------------------------------------------------
// Scenario 2: different epochs
// ------------------------------------------------------------------------------------------------

/// A at epoch 3 (sequences 0..=4), then B at epoch 1 (sequences 0..=2).
fn scenario_2() -> Vec<BatchSummary> {
    let mut log = source_a(3, 5);
    log.extend([
        data(5, 1, 0, 5, 1),
        data(5, 1, 1, 6, 1),
        data(5, 1, 2, 7, 1),
    ]);
    log
}

#[test]
fn scenario_2_different_epochs_without_barrier() {
    let expected = [AuditFinding {
        offset: 5,
        producer_id: 5,
        kind: EpochWentBackwards {
            epoch: 1,
            previous_epoch: 3,
            previous_offset: 4,
        },
    }];
    assert_findings(&scenario_2(), &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 5: producerId 5 epoch went backwards 3 -> 1 (last seen at offset 4)"
    );
}

#[test]
fn scenario_2_different_epochs_with_barrier() {
    assert_findings(
        &with_barrier_at(&scenario_2(), 5),
        &[AuditFinding {
            offset: 6,
            producer_id: 5,
            kind: PidReusedAcrossBarrier {
                barrier_offset: 5,
                previous_offset: 4,
            },
        }],
    );
}

// ------------------------------------------------------------------------------------------------
// Scenario 3: transactional interleaving
// ------------------------------------------------------------------------------------------------

/// A (epoch 2) commits a transaction at 0..=2 and opens another at 3. Failover without
/// truncation or barrier: B (epoch 0) writes into "its" transaction and commits it, which
/// commits A's open transaction too; A's own ABORT, still mirrored, then closes nothing.
fn scenario_3_without_barrier() -> Vec<BatchSummary> {
    vec![
        txn(5, 2, 0, 0, 1),
        txn(5, 2, 1, 1, 1),
        marker(5, 2, 2, COMMIT, 0),
        txn(5, 2, 2, 3, 1),
        txn(5, 0, 0, 4, 1),
        marker(5, 0, 5, COMMIT, 0),
        marker(5, 2, 6, ABORT, 0),
    ]
}

#[test]
fn scenario_3_transactional_interleaving_without_barrier() {
    let expected = [
        AuditFinding {
            offset: 4,
            producer_id: 5,
            kind: EpochWentBackwards {
                epoch: 0,
                previous_epoch: 2,
                previous_offset: 3,
            },
        },
        AuditFinding {
            offset: 5,
            producer_id: 5,
            kind: TxnClosedByLowerEpoch {
                commit: true,
                marker_epoch: 0,
                txn_first_offset: 3,
                txn_epoch: 2,
            },
        },
        AuditFinding {
            offset: 6,
            producer_id: 5,
            kind: MarkerWithoutOpenTxn {
                epoch: 2,
                commit: false,
                previous_offset: 5,
            },
        },
    ];
    assert_findings(&scenario_3_without_barrier(), &expected);
    let text: Vec<String> = expected.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "offset 4: producerId 5 epoch went backwards 2 -> 0 (last seen at offset 3)",
            "offset 5: producerId 5 COMMIT marker with epoch 0 closes the transaction opened at \
             offset 3 with epoch 2",
            "offset 6: producerId 5 ABORT marker (epoch 2) but no open transaction (last seen at \
             offset 5)",
        ]
    );
    let severities: Vec<Severity> = expected.iter().map(AuditFinding::severity).collect();
    assert_eq!(
        severities,
        [Severity::Error, Severity::Error, Severity::Warning]
    );
}

#[test]
fn scenario_3_transactional_interleaving_with_barrier() {
    // The correct failover: truncated to the LSO (3, A's open transaction is gone), barrier at
    // 3, then B's transaction.
    let log = vec![
        txn(5, 2, 0, 0, 1),
        txn(5, 2, 1, 1, 1),
        marker(5, 2, 2, COMMIT, 0),
        barrier(3),
        txn(5, 0, 0, 4, 1),
        marker(5, 0, 5, COMMIT, 0),
    ];
    let expected = [AuditFinding {
        offset: 4,
        producer_id: 5,
        kind: PidReusedAcrossBarrier {
            barrier_offset: 3,
            previous_offset: 2,
        },
    }];
    assert_findings(&log, &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 4: producerId 5 reused across the MIRROR_PID_RESET barrier at offset 3 (last seen \
         before it at offset 2)"
    );
    assert_eq!(expected[0].severity(), Severity::Info);
}

#[test]
fn transactions_open_at_a_barrier_are_reported_by_producer_id() {
    // Seen in another order than their ids (the audit keeps its producers in a hash map).
    let ids = [900, 7, 42, 3, 1 << 40, 64];
    let mut log: Vec<BatchSummary> = ids
        .iter()
        .zip(0..)
        .map(|(&pid, offset)| txn(pid, 0, 0, offset, 1))
        .collect();
    log.push(barrier(6));
    let mut sorted = ids;
    sorted.sort_unstable();
    let expected: Vec<AuditFinding> = sorted
        .iter()
        .map(|&pid| AuditFinding {
            offset: 6,
            producer_id: pid,
            kind: OpenTxnAtBarrier {
                txn_first_offset: ids.iter().position(|&p| p == pid).unwrap() as i64,
            },
        })
        .collect();
    assert_findings(&log, &expected);
}

#[test]
fn barrier_without_truncation_reports_the_open_transaction() {
    // Same as scenario 3 but the barrier was written without truncating to the LSO first.
    let log = with_barrier_at(&scenario_3_without_barrier()[..4], 4)
        .into_iter()
        .chain([txn(5, 0, 0, 5, 1), marker(5, 0, 6, COMMIT, 0)])
        .collect::<Vec<_>>();
    let expected = [
        AuditFinding {
            offset: 4,
            producer_id: 5,
            kind: OpenTxnAtBarrier {
                txn_first_offset: 3,
            },
        },
        AuditFinding {
            offset: 5,
            producer_id: 5,
            kind: PidReusedAcrossBarrier {
                barrier_offset: 4,
                previous_offset: 3,
            },
        },
    ];
    assert_findings(&log, &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 4: producerId 5 transaction open since offset 3 is still open at the \
         MIRROR_PID_RESET barrier"
    );
    assert_eq!(expected[0].severity(), Severity::Warning);
}

// ------------------------------------------------------------------------------------------------
// Interleaved sources, the remaining checks, and clean logs
// ------------------------------------------------------------------------------------------------

#[test]
fn two_sources_interleaved_into_one_partition() {
    // Fan-in into the same partition (what PID mapping was meant for): every switch shows.
    let log = [
        data(5, 3, 0, 0, 2), // A: epoch 3, sequences 0..=1 at 0..=1
        data(5, 1, 0, 2, 1), // B: epoch 1
        data(5, 3, 2, 3, 1), // A again: epoch 1 -> 3 with sequence 2
        data(5, 3, 7, 4, 1), // forward gap (as if batches 3..=6 were compacted away)
        data(5, 3, 1, 5, 1), // backward, not a cached batch
        data(5, 3, 0, 6, 2), // back to 0 (sequences 0..=1 at 6..=7)
        data(5, 3, 0, 8, 2), // exactly the batch at 6 again
    ];
    let expected = [
        AuditFinding {
            offset: 2,
            producer_id: 5,
            kind: EpochWentBackwards {
                epoch: 1,
                previous_epoch: 3,
                previous_offset: 1,
            },
        },
        AuditFinding {
            offset: 3,
            producer_id: 5,
            kind: NewEpochSequenceNotZero {
                epoch: 3,
                previous_epoch: 1,
                first_sequence: 2,
                previous_offset: 2,
            },
        },
        AuditFinding {
            offset: 4,
            producer_id: 5,
            kind: SequenceGap {
                epoch: 3,
                first_sequence: 7,
                expected_sequence: 3,
                previous_offset: 3,
            },
        },
        AuditFinding {
            offset: 5,
            producer_id: 5,
            kind: SequenceGap {
                epoch: 3,
                first_sequence: 1,
                expected_sequence: 8,
                previous_offset: 4,
            },
        },
        AuditFinding {
            offset: 6,
            producer_id: 5,
            kind: SequenceRestart {
                epoch: 3,
                previous_sequence: 1,
                previous_offset: 5,
            },
        },
        AuditFinding {
            offset: 8,
            producer_id: 5,
            kind: Duplicate {
                epoch: 3,
                first_sequence: 0,
                last_sequence: 1,
                original_offset: 6,
            },
        },
    ];
    assert_findings(&log, &expected);
    assert_eq!(
        expected[1].to_string(),
        "offset 3: producerId 5 new epoch 3 (was 1) starts at sequence 2, not 0 (last seen at \
         offset 2)"
    );
    assert_eq!(
        expected[2].to_string(),
        "offset 4: producerId 5 epoch 3 sequence 7, expected 3 (last seen at offset 3)"
    );
    assert_eq!(expected[2].severity(), Severity::Warning, "forward gap");
    assert_eq!(expected[3].severity(), Severity::Error, "backward gap");
}

#[test]
fn duplicate_of_a_multi_record_batch() {
    let log = [
        data(9, 0, 0, 100, 5),
        data(9, 0, 5, 105, 5),
        data(9, 0, 0, 110, 5),
    ];
    assert_findings(
        &log,
        &[AuditFinding {
            offset: 110,
            producer_id: 9,
            kind: Duplicate {
                epoch: 0,
                first_sequence: 0,
                last_sequence: 4,
                original_offset: 100,
            },
        }],
    );
}

#[test]
fn non_transactional_batch_inside_a_transaction() {
    let log = [txn(5, 0, 0, 0, 1), data(5, 0, 1, 1, 1)];
    let expected = [AuditFinding {
        offset: 1,
        producer_id: 5,
        kind: NonTransactionalInTxn {
            txn_first_offset: 0,
        },
    }];
    assert_findings(&log, &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 1: producerId 5 non-transactional batch inside its transaction open since offset 0"
    );
}

/// KIP-1279 scenario 3 with a higher local epoch: A (pid 5, epoch 0) has a mirrored transaction
/// open at offsets 0..=1; after a failover without truncation or barrier, B (pid 5 too, epoch 3)
/// writes a transaction and commits it. Kafka's PSM takes the higher epoch and keeps the open
/// transaction's first offset, so B's COMMIT commits A's unfinished records.
#[test]
fn a_higher_epoch_writing_into_an_open_transaction_is_reported() {
    let log = [
        txn(5, 0, 0, 0, 1),
        txn(5, 0, 1, 1, 1),
        txn(5, 3, 0, 2, 2),
        marker(5, 3, 4, COMMIT, 0),
    ];
    let expected = [AuditFinding {
        offset: 2,
        producer_id: 5,
        kind: NewEpochInOpenTxn {
            epoch: 3,
            txn_first_offset: 0,
            txn_epoch: 0,
        },
    }];
    assert_findings(&log, &expected);
    assert_eq!(
        expected[0].to_string(),
        "offset 2: producerId 5 epoch 3 writes into the transaction opened at offset 0 with \
         epoch 0, no marker in between"
    );
    assert_eq!(expected[0].severity(), Severity::Error);
    // With the marker (TV2: it bumps the epoch) or a barrier in between there is nothing to
    // report but the reuse across the barrier.
    assert_findings(
        &[
            txn(5, 0, 0, 0, 1),
            marker(5, 1, 1, ABORT, 0),
            txn(5, 1, 0, 2, 2),
            marker(5, 2, 4, COMMIT, 0),
        ],
        &[],
    );
    assert_findings(
        &[
            txn(5, 0, 0, 0, 1),
            marker(5, 0, 1, ABORT, 0),
            barrier(2),
            txn(5, 3, 0, 3, 2),
            marker(5, 3, 5, COMMIT, 0),
        ],
        &[AuditFinding {
            offset: 3,
            producer_id: 5,
            kind: PidReusedAcrossBarrier {
                barrier_offset: 2,
                previous_offset: 1,
            },
        }],
    );
}

#[test]
fn a_marker_with_a_lower_epoch_reports_the_epoch_only() {
    let log = [txn(5, 2, 0, 0, 1), marker(5, 1, 1, ABORT, 0)];
    assert_findings(
        &log,
        &[AuditFinding {
            offset: 1,
            producer_id: 5,
            kind: EpochWentBackwards {
                epoch: 1,
                previous_epoch: 2,
                previous_offset: 0,
            },
        }],
    );
}

#[test]
fn clean_logs_have_no_findings() {
    let log = vec![
        plain(0, 3),
        // Idempotent producer 1: two batches, epoch bump (KIP-360) back to sequence 0.
        data(1, 0, 0, 3, 2),
        data(1, 0, 2, 5, 3),
        data(1, 1, 0, 8, 1),
        // Transactional producer 2, TV0/1: sequences continue across transactions.
        txn(2, 4, 0, 9, 2),
        data(1, 1, 1, 11, 1),
        marker(2, 4, 12, COMMIT, 7),
        txn(2, 4, 2, 13, 1),
        marker(2, 4, 14, ABORT, 7),
        // Transactional producer 3, TV2: each marker bumps the epoch, sequences restart at 0.
        txn(3, 0, 0, 15, 1),
        marker(3, 1, 16, COMMIT, 0),
        txn(3, 1, 0, 17, 3),
        marker(3, 2, 20, COMMIT, 0),
        // A marker for a producer never seen (its data is before the audited range).
        marker(4, 0, 21, ABORT, 0),
        // Sequence wraparound.
        data(6, 0, i32::MAX - 1, 22, 2),
        data(6, 0, 0, 24, 1),
        // An empty control batch and a non-transactional control type are ignored.
        BatchSummary {
            control: None,
            records_count: 0,
            ..marker(1, 0, 25, COMMIT, 0)
        },
        BatchSummary {
            control: Some(ControlInfo::Other(3)),
            ..marker(1, 0, 26, COMMIT, 0)
        },
    ];
    assert_findings(&log, &[]);
}

#[test]
fn barrier_resets_tracking_for_every_producer() {
    // After the barrier, the same ids come back with lower epochs and sequence 0: only reuse.
    let log = [
        data(1, 5, 0, 0, 3),
        txn(2, 5, 0, 3, 1),
        marker(2, 5, 4, COMMIT, 0),
        barrier(5),
        data(2, 0, 0, 6, 1),
        data(1, 0, 0, 7, 1),
        data(1, 0, 1, 8, 1),
        data(7, 0, 0, 9, 1),
    ];
    assert_findings(
        &log,
        &[
            AuditFinding {
                offset: 6,
                producer_id: 2,
                kind: PidReusedAcrossBarrier {
                    barrier_offset: 5,
                    previous_offset: 4,
                },
            },
            AuditFinding {
                offset: 7,
                producer_id: 1,
                kind: PidReusedAcrossBarrier {
                    barrier_offset: 5,
                    previous_offset: 2,
                },
            },
        ],
    );
}

#[test]
fn reuse_is_reported_once_against_the_latest_barrier() {
    // Chain A→B→here: a propagated barrier at 1, our own at 3. Pid 5 seen at 0, then at 4.
    let log = [
        data(5, 0, 0, 0, 1),
        barrier(1),
        data(8, 0, 0, 2, 1),
        barrier(3),
        data(5, 0, 0, 4, 1),
        data(5, 0, 1, 5, 1),
        data(8, 0, 0, 6, 1),
    ];
    assert_findings(
        &log,
        &[
            AuditFinding {
                offset: 4,
                producer_id: 5,
                kind: PidReusedAcrossBarrier {
                    barrier_offset: 3,
                    previous_offset: 0,
                },
            },
            AuditFinding {
                offset: 6,
                producer_id: 8,
                kind: PidReusedAcrossBarrier {
                    barrier_offset: 3,
                    previous_offset: 2,
                },
            },
        ],
    );
}

#[test]
fn observe_returns_the_findings_of_each_batch() {
    let mut audit = ProducerAudit::new();
    let log = scenario_2();
    let per_batch: Vec<usize> = log.iter().map(|b| audit.observe(b).len()).collect();
    assert_eq!(per_batch, [0, 0, 0, 0, 0, 1, 0, 0]);
    assert_eq!(audit.findings().len(), 1);
    assert_eq!(audit.findings()[0].offset, 5);
    assert_eq!(audit.findings()[0].producer_id, 5);
    assert_eq!(audit.into_findings(), audit_batches(&log));
}
