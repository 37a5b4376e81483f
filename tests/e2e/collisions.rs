//! The three producer-id collision scenarios of KIP-1279, end to end: cluster A's partition is
//! mirrored byte for byte into cluster B; A is lost; B fails over and a local producer on B is
//! given producer id 5, which A's producer already used in the mirrored data.
//!
//! Each test first shows the harm of a failover **without** a barrier (the local producer's batch
//! is answered as a duplicate and silently not written, or it is fenced, or its COMMIT commits the
//! mirrored producer's unfinished transaction), then the correct behaviour of a failover through
//! `MirrorPartition::stop` (truncate to the LSO, `MIRROR_PID_RESET` barrier, writable): the local
//! producer's batches are written and readable, read_committed shows exactly the expected records,
//! and the barrier is never shown to a consumer. Finally the barrier node is crashed and reopened
//! three ways (recovery from scratch, clean reopen, older snapshot + replay across the barrier),
//! all of which must reach the live producer state.
//!
//! The last section runs the three scenarios end to end on a downstream mirror C of B, where
//! the batches arrive under REPLICATION rules: without the barrier the collisions are silent
//! there (no error; in scenario 2 one warning), with it C's producer state is B's.

use recovery::{
    IsolationLevel, MirrorLog, PartitionLogError, ProducerStateError, SequenceViolation,
};
use segment_store::AbortedTxn;

use crate::common::{
    assert_recovery_agrees, assert_same_bytes, barriers, batches, committed_values, consumed, idem,
    txn, values, Node,
};

/// Asserts the append was refused by producer state and returns the error.
fn refused(r: Result<recovery::LogAppendInfo, PartitionLogError>) -> ProducerStateError {
    match r {
        Err(PartitionLogError::ProducerState(e)) => e,
        other => panic!("expected a producer-state refusal, got {other:?}"),
    }
}

/// The offsets a read_committed consumer sees.
fn committed_offsets(node: &Node) -> Vec<i64> {
    consumed(node.log(), IsolationLevel::ReadCommitted)
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

/// Asserts the barrier at `at` is in the raw fetch (a control batch without producer id) but no
/// consumer, at either isolation level, sees a record at its offset.
fn assert_barrier_invisible(node: &Node, at: i64) {
    let all = batches(node.log());
    let b = all.iter().find(|b| b.base_offset == at).unwrap();
    assert_eq!(b.barrier_source().as_deref(), Some("cluster-A"));
    assert!(b.view().is_control() && !b.view().has_producer_id());
    for iso in [
        IsolationLevel::ReadCommitted,
        IsolationLevel::ReadUncommitted,
    ] {
        assert!(
            consumed(node.log(), iso).iter().all(|(o, _)| *o != at),
            "{iso:?} consumer saw the barrier"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (a) Same epoch, wrong sequence
// ---------------------------------------------------------------------------------------------

/// A: idempotent producer 5 (epoch 0) writes sequences 0..=19 in two batches, producer 9
/// between them. Offsets: a5-0 0..=9, a9-0 10..=19, a5-1 20..=29.
fn source_same_epoch() -> Node {
    let mut a = Node::new("A");
    a.produce(&idem(5, 0, 0, 10, "a5-0")).unwrap();
    a.produce(&idem(9, 0, 0, 10, "a9-0")).unwrap();
    a.produce(&idem(5, 0, 10, 10, "a5-1")).unwrap();
    assert_eq!(a.leo(), 30);
    a
}

#[test]
fn same_epoch_without_barrier_a_local_batch_is_taken_for_a_duplicate_and_dropped() {
    let a = source_same_epoch();
    let mut b = Node::mirror_of("B", &a);
    assert_same_bytes(&a, &b, 30);
    b.failover_without_barrier(true);

    // B's local producer was assigned pid 5 (epoch 0) and sends its first batch, sequences
    // 0..=9: B answers with the offsets of A's mirrored batch and writes nothing.
    let before = committed_values(b.log());
    let info = b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    assert!(info.duplicate, "{info:?}");
    assert_eq!((info.first_offset, info.last_offset), (0, 9));
    assert_eq!((info.num_batches, info.bytes), (0, 0));
    assert_eq!(b.leo(), 30, "nothing was written");
    assert_eq!(committed_values(b.log()), before);
    assert!(before.iter().all(|v| !v.starts_with("b5")));

    // Its next batch (sequences 10..=14) does not match a cached batch: it is refused as out of
    // order against A's producer's sequence 19.
    let e = refused(b.produce(&idem(5, 0, 10, 5, "b5-1")));
    assert!(
        matches!(
            e,
            ProducerStateError::OutOfOrderSequence {
                producer_id: 5,
                first_sequence: 10,
                current_last_sequence: 19,
                violation: SequenceViolation::Gap,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(b.leo(), 30);
}

#[test]
fn same_epoch_with_barrier_the_local_producer_is_written_and_recovery_agrees() {
    let a = source_same_epoch();
    let mut b = Node::mirror_of("B", &a);
    assert_same_bytes(&a, &b, 30);
    let barrier = b.stop();
    assert_eq!(barrier, 30);
    assert_eq!(barriers(b.log()), [(30, "cluster-A".to_owned())]);
    assert!(b.log().producer_state().active_producers().is_empty());

    let first = b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    assert!(!first.duplicate);
    assert_eq!((first.first_offset, first.last_offset), (31, 40));
    let second = b.produce(&idem(5, 0, 10, 5, "b5-1")).unwrap();
    assert_eq!((second.first_offset, second.last_offset), (41, 45));
    // The local producer's own retry is still deduplicated: against its own batch.
    let retry = b.produce(&idem(5, 0, 10, 5, "b5-1")).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.first_offset, retry.last_offset), (41, 45));
    assert_eq!(b.leo(), 46);

    let expect: Vec<String> = [
        values("a5-0", 10),
        values("a9-0", 10),
        values("a5-1", 10),
        values("b5-0", 10),
        values("b5-1", 5),
    ]
    .concat();
    assert_eq!(committed_values(b.log()), expect);
    let offsets: Vec<i64> = (0..30).chain(31..46).collect();
    assert_eq!(committed_offsets(&b), offsets);
    assert_barrier_invisible(&b, 30);

    let psm = b.log().producer_state();
    let pids: Vec<i64> = psm.active_producers().keys().copied().collect();
    assert_eq!(pids, [5], "producer 9 was A's: forgotten at the barrier");
    let e = psm.last_entry(5).unwrap();
    assert_eq!(
        (e.producer_epoch(), e.last_seq(), e.last_data_offset()),
        (0, 14, 45)
    );
    assert_eq!(e.batch_metadata().len(), 2, "only B's batches are cached");
    assert_recovery_agrees(b, barrier);
}

// ---------------------------------------------------------------------------------------------
// (b) Different epochs
// ---------------------------------------------------------------------------------------------

/// A: producer 5 at epoch 3 (after three restarts), producer 9 at epoch 0.
fn source_epoch_3() -> Node {
    let mut a = Node::new("A");
    a.produce(&idem(5, 3, 0, 10, "a5-0")).unwrap();
    a.produce(&idem(9, 0, 0, 10, "a9-0")).unwrap();
    a.produce(&idem(5, 3, 10, 10, "a5-1")).unwrap();
    a
}

#[test]
fn different_epochs_without_barrier_the_local_producer_is_fenced() {
    let a = source_epoch_3();
    let mut b = Node::mirror_of("B", &a);
    b.failover_without_barrier(true);
    let e = refused(b.produce(&idem(5, 0, 0, 10, "b5-0")));
    assert!(
        matches!(
            e,
            ProducerStateError::InvalidProducerEpoch {
                producer_id: 5,
                epoch: 0,
                current_epoch: 3,
                is_marker: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(b.leo(), 30, "nothing was written");
    // And a producer that happens to get a higher epoch silently continues A's entry: its
    // state is a mix of both producers (A's coordinator epoch, B's sequences).
    let info = b.produce(&idem(5, 4, 0, 10, "b5-0")).unwrap();
    assert!(!info.duplicate);
    assert_eq!(b.log().producer_state().active_producers().len(), 2);
}

#[test]
fn different_epochs_with_barrier_the_local_producer_starts_fresh_and_recovery_agrees() {
    let a = source_epoch_3();
    let mut b = Node::mirror_of("B", &a);
    assert_same_bytes(&a, &b, 30);
    let barrier = b.stop();
    assert_eq!(barrier, 30);
    let info = b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    assert!(!info.duplicate && info.warnings.is_empty());
    assert_eq!((info.first_offset, info.last_offset), (31, 40));
    let info = b.produce(&idem(5, 0, 10, 10, "b5-1")).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (41, 50));
    // The old epoch of A's producer means nothing on B any more: a batch at epoch 3 would be a
    // new epoch for B's producer 5 (sequence must restart at 0), not a fenced zombie.
    let e = refused(b.produce(&idem(5, 3, 20, 1, "zombie")));
    assert!(
        matches!(
            e,
            ProducerStateError::OutOfOrderSequence {
                violation: SequenceViolation::NewEpochNotZero,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        committed_values(b.log()),
        [
            values("a5-0", 10),
            values("a9-0", 10),
            values("a5-1", 10),
            values("b5-0", 10),
            values("b5-1", 10)
        ]
        .concat()
    );
    assert_barrier_invisible(&b, 30);
    let e = b.log().producer_state().last_entry(5).unwrap();
    assert_eq!(
        (e.producer_epoch(), e.last_seq(), e.last_data_offset()),
        (0, 19, 50)
    );
    assert_eq!(b.log().producer_state().active_producers().len(), 1);
    assert_recovery_agrees(b, barrier);
}

// ---------------------------------------------------------------------------------------------
// (c) Transactional interleaving
// ---------------------------------------------------------------------------------------------

/// A: transactional producer 5 (epoch 0) commits `a5-t1` (0..=9, COMMIT at 10), then starts
/// `a5-t2` (11..=20) and A is lost before its marker; idempotent producer 9 writes 21..=30.
/// LSO = 11.
fn source_open_txn() -> Node {
    let mut a = Node::new("A");
    a.produce(&txn(5, 0, 0, 10, "a5-t1")).unwrap();
    a.write_marker(5, 0, true).unwrap();
    a.produce(&txn(5, 0, 10, 10, "a5-t2")).unwrap();
    a.produce(&idem(9, 0, 0, 10, "a9-0")).unwrap();
    assert_eq!((a.leo(), a.log().last_stable_offset()), (31, 11));
    a
}

#[test]
fn txn_without_barrier_or_truncation_a_local_commit_commits_the_mirrored_open_transaction() {
    let a = source_open_txn();
    let mut b = Node::mirror_of("B", &a);
    assert_same_bytes(&a, &b, 31);
    assert_eq!(b.log().last_stable_offset(), 11);
    // A failover that neither truncates nor writes a barrier.
    b.failover_without_barrier(false);

    // B's transactional producer got pid 5 at epoch 1: its batch is accepted as an epoch bump,
    // but it joins the transaction A's producer opened at offset 11.
    let info = b.produce(&txn(5, 1, 0, 10, "b5-t1")).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (31, 40));
    let ongoing: Vec<i64> = b
        .log()
        .producer_state()
        .ongoing_txns()
        .keys()
        .copied()
        .collect();
    assert_eq!(ongoing, [11], "B's transaction is recorded as A's");
    // B's coordinator commits B's transaction: the COMMIT closes [11, 41] and A's never
    // committed records become visible to read_committed consumers.
    let info = b.write_marker(5, 1, true).unwrap();
    assert_eq!(info.first_offset, 41);
    let seen = committed_values(b.log());
    assert!(
        seen.contains(&"a5-t2-0".to_owned()),
        "A's unfinished transaction is now committed: {seen:?}"
    );
    assert!(b.log().producer_state().ongoing_txns().is_empty());
}

#[test]
fn txn_without_barrier_but_truncated_the_local_transactional_producer_is_rejected() {
    let a = source_open_txn();
    let mut b = Node::mirror_of("B", &a);
    b.failover_without_barrier(true);
    assert_eq!(b.leo(), 11, "truncated to the LSO");
    // A's producer 5 (epoch 0, last sequence 9, committed) is still in producer state.
    let e = refused(b.produce(&txn(5, 0, 0, 5, "b5-t1")));
    assert!(
        matches!(
            e,
            ProducerStateError::OutOfOrderSequence {
                producer_id: 5,
                current_last_sequence: 9,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(b.leo(), 11);
}

#[test]
fn txn_with_barrier_only_the_local_transaction_commits_and_recovery_agrees() {
    let a = source_open_txn();
    let mut b = Node::mirror_of("B", &a);
    assert_same_bytes(&a, &b, 31);
    let barrier = b.stop();
    assert_eq!(barrier, 11, "truncated to the LSO, then the barrier");
    assert!(b.log().producer_state().is_empty());

    let info = b.produce(&txn(5, 0, 0, 10, "b5-t1")).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (12, 21));
    let ongoing: Vec<i64> = b
        .log()
        .producer_state()
        .ongoing_txns()
        .keys()
        .copied()
        .collect();
    assert_eq!(ongoing, [12], "B's own transaction");
    assert_eq!(b.log().last_stable_offset(), 12);
    assert!(committed_values(b.log())
        .iter()
        .all(|v| !v.starts_with("b5")));
    let info = b.write_marker(5, 0, true).unwrap();
    assert_eq!(info.first_offset, 22);
    assert_eq!(b.log().last_stable_offset(), 23);
    assert_eq!(
        committed_values(b.log()),
        [values("a5-t1", 10), values("b5-t1", 10)].concat()
    );
    let offsets: Vec<i64> = (0..10).chain(12..22).collect();
    assert_eq!(committed_offsets(&b), offsets);
    assert_barrier_invisible(&b, 11);
    assert_recovery_agrees(b, barrier);
}

/// A writer that skips the truncation and appends the barrier right after the open mirrored
/// transaction (`docs/barrier.md` §5): the barrier completes that transaction as aborted at its
/// own offset, so B's later COMMIT only commits B's transaction.
#[test]
fn txn_barrier_without_truncation_aborts_the_mirrored_transaction_and_recovery_agrees() {
    let a = source_open_txn();
    let mut b = Node::mirror_of("B", &a);
    b.failover_without_barrier(false);
    let barrier = b.with_log(|l| {
        let at = MirrorLog::append_barrier(l, "cluster-A", l.leader_epoch()).unwrap();
        l.set_high_watermark(l.log_end_offset());
        at
    });
    assert_eq!(barrier, 31);
    assert!(b.log().producer_state().is_empty());
    let aborted = b.log().collect_aborted_transactions(0, b.leo()).unwrap();
    assert_eq!(aborted, [AbortedTxn::new(5, 11, 31, 32)]);
    assert_eq!(b.log().last_stable_offset(), 32);
    assert_eq!(
        committed_values(b.log()),
        [values("a5-t1", 10), values("a9-0", 10)].concat()
    );

    let info = b.produce(&txn(5, 1, 0, 10, "b5-t1")).unwrap();
    assert_eq!((info.first_offset, info.last_offset), (32, 41));
    b.write_marker(5, 1, true).unwrap();
    assert_eq!(b.log().last_stable_offset(), 43);
    // A consumer fetching from after the barrier sees B's committed transaction.
    let fetch = b
        .log()
        .read(32, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    let seen: Vec<String> = recovery::consume(&fetch)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
        .collect();
    assert_eq!(seen, values("b5-t1", 10));
    assert_recovery_agrees(b, barrier);
}

// ---------------------------------------------------------------------------------------------
// Downstream, under REPLICATION: the KIP's three scenarios where they are silent
// ---------------------------------------------------------------------------------------------
//
// A failover that forgets producer state without a record in the log (B restarts cleanly with
// no producer snapshot, which Kafka loads as empty state) lets B's leader accept its local
// producer's reused id. C mirrors B (the mirror feed appends with REPLICATION rules, as any
// follower of B would): nothing in B's log tells C to forget A's producers, so C merges the two
// producers under one id with no error — at most a warning — and C's producer state is no longer
// B's. B's own recovery from scratch merges them too. With the barrier, C's producer state is
// B's, batch for batch.

/// C, a new cluster mirroring B's partition from its first offset.
fn downstream(b: &Node) -> Node {
    Node::mirror_of("C", b)
}

/// The audit of `seglog producers --audit` over `node`'s log: its error findings.
fn audit_errors(node: &Node) -> Vec<recovery::AuditFinding> {
    let summaries: Vec<recovery::BatchSummary> = batches(node.log())
        .iter()
        .map(|b| recovery::BatchSummary::from_batch(&b.view()).unwrap())
        .collect();
    recovery::audit_batches(&summaries)
        .into_iter()
        .filter(|f| f.severity() == recovery::Severity::Error)
        .collect()
}

/// Every producer with every cached batch, open transactions and the LSO of `node`.
fn producer_view(node: &Node) -> (Vec<String>, Vec<i64>, i64) {
    let psm = node.log().producer_state();
    let producers = psm
        .active_producers()
        .values()
        .map(|e| {
            format!(
                "pid {} epoch {} txn {:?} batches {:?}",
                e.producer_id(),
                e.producer_epoch(),
                e.current_txn_first_offset(),
                e.batch_metadata()
                    .iter()
                    .map(|m| (m.first_seq(), m.last_seq, m.first_offset(), m.last_offset))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    let open = psm.ongoing_txns().keys().copied().collect();
    (producers, open, node.log().last_stable_offset())
}

/// The last offsets of producer 5's cached batches.
fn cached_5(node: &Node) -> Vec<i64> {
    node.log()
        .producer_state()
        .last_entry(5)
        .map(|e| e.batch_metadata().iter().map(|m| m.last_offset).collect())
        .unwrap_or_default()
}

/// Recovers a copy of `node`'s directory from scratch and returns producer 5's cached batches.
fn recovered_cached_5(node: &Node) -> Vec<i64> {
    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&node.dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        if e.file_type().unwrap().is_file() && name != ".lock" {
            std::fs::copy(e.path(), copy.path().join(name)).unwrap();
        }
    }
    let log = crate::common::open_log(copy.path());
    log.producer_state()
        .last_entry(5)
        .map(|e| e.batch_metadata().iter().map(|m| m.last_offset).collect())
        .unwrap_or_default()
}

#[test]
fn downstream_same_epoch_without_barrier_merges_two_producers_silently() {
    let a = source_same_epoch();
    let mut b = Node::mirror_of("B", &a);
    b.failover_forgetting_producers_without_barrier(true);
    // B's local producer gets pid 5, epoch 0, and is accepted from sequence 0.
    let first = b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    assert!(!first.duplicate);
    assert_eq!((first.first_offset, first.last_offset), (30, 39));
    b.produce(&idem(5, 0, 10, 5, "b5-1")).unwrap();
    assert_eq!(cached_5(&b), [39, 44], "B: only its own producer");

    let c = downstream(&b);
    assert_same_bytes(&b, &c, b.leo());
    assert!(c.mirror_warnings.is_empty(), "{:?}", c.mirror_warnings);
    // Same epoch, sequence back to 0: accepted silently, A's and B's batches under one entry.
    assert_eq!(cached_5(&c), [9, 29, 39, 44]);
    assert_ne!(producer_view(&c), producer_view(&b));
    // B's own recovery reads the same log and merges them too.
    assert_eq!(recovered_cached_5(&b), [9, 29, 39, 44]);
    let errors = audit_errors(&c);
    assert!(
        errors.iter().any(|f| matches!(
            f,
            recovery::AuditFinding {
                producer_id: 5,
                kind: recovery::AuditKind::Duplicate { .. },
                ..
            }
        )),
        "{errors:?}"
    );
}

#[test]
fn downstream_same_epoch_with_barrier_keeps_the_producers_apart() {
    let a = source_same_epoch();
    let mut b = Node::mirror_of("B", &a);
    let barrier = b.stop();
    b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    b.produce(&idem(5, 0, 10, 5, "b5-1")).unwrap();
    let c = downstream(&b);
    assert_same_bytes(&b, &c, b.leo());
    assert!(c.mirror_warnings.is_empty());
    assert_eq!(cached_5(&c), [40, 45]);
    assert_eq!(producer_view(&c), producer_view(&b));
    assert_eq!(recovered_cached_5(&b), [40, 45]);
    assert!(audit_errors(&c).is_empty());
    assert_eq!(barriers(c.log()), [(barrier, "cluster-A".to_owned())]);
}

#[test]
fn downstream_different_epochs_without_barrier_only_warns() {
    let a = source_epoch_3();
    let mut b = Node::mirror_of("B", &a);
    b.failover_forgetting_producers_without_barrier(true);
    b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    let c = downstream(&b);
    assert_same_bytes(&b, &c, b.leo());
    // The lower epoch is accepted under replication: one warning, no error.
    assert_eq!(c.mirror_warnings.len(), 1, "{:?}", c.mirror_warnings);
    assert!(matches!(
        c.mirror_warnings[0],
        recovery::ProducerStateWarning::EpochRegression {
            producer_id: 5,
            epoch: 0,
            current_epoch: 3,
            ..
        }
    ));
    assert_eq!(
        c.log()
            .producer_state()
            .last_entry(5)
            .unwrap()
            .producer_epoch(),
        0
    );
    let errors = audit_errors(&c);
    assert!(
        errors.iter().any(|f| matches!(
            f,
            recovery::AuditFinding {
                producer_id: 5,
                kind: recovery::AuditKind::EpochWentBackwards { .. },
                ..
            }
        )),
        "{errors:?}"
    );
}

#[test]
fn downstream_different_epochs_with_barrier_has_no_warning() {
    let a = source_epoch_3();
    let mut b = Node::mirror_of("B", &a);
    b.stop();
    b.produce(&idem(5, 0, 0, 10, "b5-0")).unwrap();
    let c = downstream(&b);
    assert!(c.mirror_warnings.is_empty(), "{:?}", c.mirror_warnings);
    assert_eq!(producer_view(&c), producer_view(&b));
    assert!(audit_errors(&c).is_empty());
}

#[test]
fn downstream_txn_without_barrier_a_local_commit_commits_the_mirrored_transaction() {
    let a = source_open_txn();
    let mut b = Node::mirror_of("B", &a);
    // Neither truncation nor barrier; B forgets its producers.
    b.failover_forgetting_producers_without_barrier(false);
    assert_eq!(b.leo(), 31);
    b.produce(&txn(5, 0, 0, 10, "b5-t1")).unwrap();
    let mut c = downstream(&b);
    // Before the COMMIT: B's transaction is B's own (from 31); at C it is A's, open since 11.
    assert_eq!(
        b.log()
            .producer_state()
            .ongoing_txns()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [31]
    );
    assert_eq!(
        c.log()
            .producer_state()
            .ongoing_txns()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [11]
    );
    assert_eq!(c.log().last_stable_offset(), 11);
    b.write_marker(5, 0, true).unwrap();
    c.mirror_from(&b);
    assert!(c.mirror_warnings.is_empty(), "{:?}", c.mirror_warnings);
    // B's COMMIT closed A's transaction at C: A's never-committed records are committed there.
    let seen = committed_values(c.log());
    assert!(seen.contains(&"a5-t2-0".to_owned()), "{seen:?}");
    assert!(c.log().producer_state().ongoing_txns().is_empty());
    assert!(!audit_errors(&c).is_empty());
}

#[test]
fn downstream_txn_with_barrier_commits_only_the_local_transaction() {
    let a = source_open_txn();
    let mut b = Node::mirror_of("B", &a);
    let barrier = b.stop();
    assert_eq!(barrier, 11);
    b.produce(&txn(5, 0, 0, 10, "b5-t1")).unwrap();
    let mut c = downstream(&b);
    assert_eq!(producer_view(&c), producer_view(&b));
    assert_eq!(
        c.log()
            .producer_state()
            .ongoing_txns()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [12]
    );
    b.write_marker(5, 0, true).unwrap();
    c.mirror_from(&b);
    assert!(c.mirror_warnings.is_empty());
    assert_eq!(producer_view(&c), producer_view(&b));
    assert_eq!(
        committed_values(c.log()),
        [values("a5-t1", 10), values("b5-t1", 10)].concat()
    );
    assert!(audit_errors(&c).is_empty());
}
