//! Leader epochs across two clusters (KIP-1279 failover, failback, chains) on real partition
//! logs: the destination's barrier opens an epoch no source batch can have, even when the
//! source had a leader election the destination never saw, so alignment by leader epoch (and by
//! the Last Mirror Epoch) truncates every node exactly at the barrier; a node whose retention
//! passed the barrier's offset truncates fully and starts there.

use std::path::Path;

use record_format::{Batches, LogEntry};
use recovery::{
    AppendOrigin, EpochEndOffsets, EpochHistory, MirrorPartitionState, MirroredLog, PartitionLog,
    PartitionLogError, StopOutcome, StopPolicy,
};

use super::log::{batch, open, open_with, small_segments};

/// `(base offset, leader epoch, bytes)` of every batch from `from`.
fn raw_from(log: &PartitionLog, from: i64) -> Vec<(i64, i32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = from.max(log.log_start_offset());
    while offset < log.log_end_offset() {
        let data = log.local_log().read(offset, 1 << 20, true).unwrap();
        let mut next = offset;
        for e in Batches::new(&data.records, 0) {
            let LogEntry::V2(b) = e.unwrap() else {
                panic!("legacy batch")
            };
            if b.base_offset() >= from {
                out.push((
                    b.base_offset(),
                    b.partition_leader_epoch(),
                    b.as_bytes().to_vec(),
                ));
            }
            next = b.next_offset();
        }
        assert!(next > offset);
        offset = next;
    }
    out
}

/// Mirrors every batch of `source` from `to`'s log end.
fn fetch(to: &mut PartitionLog, source: &PartitionLog) {
    for (_, _, bytes) in raw_from(source, to.log_end_offset()) {
        to.append_as_mirror(&bytes).unwrap();
    }
}

fn leader_append(log: &mut PartitionLog, pid: i64, seq: i32, n: i32, txn: bool, epoch: i32) {
    log.append_as_leader(&batch(pid, 0, seq, n, txn), epoch, AppendOrigin::Client)
        .unwrap();
}

/// A: five batches of two records in epoch 0 (offsets 0..10).
fn source_a(dir: &Path) -> PartitionLog {
    let mut a = open_with(dir, small_segments(300));
    for i in 0..5 {
        leader_append(&mut a, 1, i * 2, 2, false, 0);
    }
    a
}

fn new_dir(root: &Path, name: &str) -> std::path::PathBuf {
    let d = root.join(name);
    std::fs::create_dir(&d).unwrap();
    d
}

fn stop(log: &mut PartitionLog) -> i64 {
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    log.stop_mirroring().unwrap()
}

fn assert_same_log(a: &PartitionLog, b: &PartitionLog, ctx: &str) {
    let start = a.log_start_offset().max(b.log_start_offset());
    assert_eq!(raw_from(a, start), raw_from(b, start), "{ctx}");
    assert_eq!(a.log_end_offset(), b.log_end_offset(), "{ctx}");
}

/// Defect: B's barrier took "B's largest epoch + 1" = 1, the epoch A's election had just
/// opened. On failback A asked B for epoch 1, B answered its own log end, and A kept its own
/// epoch-1 batches where B has the barrier and local data: A never received the barrier.
#[test]
fn failback_after_a_source_election_truncates_the_old_source_at_the_barrier() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = source_a(&new_dir(tmp.path(), "a-0"));
    let mut b = open(&new_dir(tmp.path(), "b-0"));
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    fetch(&mut b, &a);
    // A's leader election (epoch 0 -> 1) and writes B never fetches; then A is lost.
    leader_append(&mut a, 1, 10, 2, false, 1);
    leader_append(&mut a, 1, 12, 2, false, 1);
    assert_eq!(a.log_end_offset(), 14);

    let end = b.log_end_offset();
    b.set_high_watermark(end);
    let outcome = MirroredLog::stop_mirroring_outcome(&mut b, StopPolicy::default()).unwrap();
    assert_eq!(
        outcome,
        StopOutcome {
            barrier_offset: 10,
            leader_epoch: 10
        },
        "the epoch the library chose is returned"
    );
    let epoch = b.leader_epoch();
    assert_eq!(epoch, outcome.leader_epoch);
    // The caller's metadata must follow the epoch the stop chose: a lower one is refused.
    let stale = b.append_as_leader(&batch(7, 0, 0, 3, false), 1, AppendOrigin::Client);
    assert!(
        matches!(
            stale,
            Err(PartitionLogError::StaleLeaderEpoch {
                requested: 1,
                current: 10
            })
        ),
        "{stale:?}"
    );
    leader_append(&mut b, 7, 0, 3, false, epoch);

    // Failback: A mirrors B.
    a.start_mirroring("cluster-B", &b).unwrap();
    assert_eq!(a.log_end_offset(), 10, "A's own epoch-1 batches are gone");
    assert_eq!(
        epoch, 10,
        "the stop's epoch: 10 above every epoch B saw (0)"
    );
    fetch(&mut a, &b);
    assert_same_log(&a, &b, "failback");
    assert!(a.find_barrier_from(10).unwrap() == Some(10));
}

/// The chain A→B→C: B mirrors A's election (epoch 1) inside a transaction still open when B
/// fails over, so B's stop truncates the epoch-1 batches away. C had mirrored them from B.
/// Defect: B's barrier went into epoch 1 again (the largest epoch left after truncation + 1),
/// C found epoch 1 in B's log ending at B's log end and kept its epoch-1 batches.
#[test]
fn a_chain_truncates_at_the_barrier_after_a_source_election() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = source_a(&new_dir(tmp.path(), "a-0"));
    leader_append(&mut a, 2, 0, 2, true, 1); // A's election, an open transaction at 10..12
    let mut b = open(&new_dir(tmp.path(), "b-0"));
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    fetch(&mut b, &a);
    let mut c = open(&new_dir(tmp.path(), "c-0"));
    c.start_mirroring("cluster-B", &EpochHistory::of(&c))
        .unwrap();
    fetch(&mut c, &b);
    assert_eq!(c.log_end_offset(), 12);

    assert_eq!(stop(&mut b), 10);
    let epoch = b.leader_epoch();
    leader_append(&mut b, 7, 0, 3, false, epoch);

    assert_eq!(c.align_to_source(&b).unwrap(), Some(10));
    fetch(&mut c, &b);
    assert_same_log(&b, &c, "chain");
    assert!(matches!(
        c.mirror_state(),
        MirrorPartitionState::Mirroring { .. }
    ));
}

/// Defect: when retention on the failback side (A) had moved A's log start past B's barrier,
/// alignment was clamped to A's log start: A kept its own batches from there and never held
/// the barrier or B's records in between. Kafka truncates fully and starts at the target.
#[test]
fn failback_truncates_fully_when_retention_passed_the_barrier() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = source_a(&new_dir(tmp.path(), "a-0"));
    let mut b = open(&new_dir(tmp.path(), "b-0"));
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    fetch(&mut b, &a);
    for i in 0..5 {
        leader_append(&mut a, 1, 10 + i * 2, 2, false, 1);
    }
    let end = a.log_end_offset();
    a.set_high_watermark(end);
    assert!(a.delete_records_before(15).unwrap());
    a.delete_old_segments().unwrap();
    assert_eq!(a.log_start_offset(), 15);

    assert_eq!(stop(&mut b), 10);
    let epoch = b.leader_epoch();
    leader_append(&mut b, 7, 0, 3, false, epoch);

    a.start_mirroring("cluster-B", &b).unwrap();
    assert_eq!(
        (a.log_start_offset(), a.log_end_offset()),
        (10, 10),
        "truncated fully, started at the barrier"
    );
    fetch(&mut a, &b);
    assert_same_log(&a, &b, "failback after retention");
    assert_eq!(a.find_barrier_from(10).unwrap(), Some(10));
}

/// The source's epoch can still collide with the stop's (its controller jumped ten epochs, or
/// it had that many elections B never saw): here A's election opens epoch 10, B's stop epoch
/// too. By epoch alone A finds epoch 10 in both logs and keeps its own batches; the Last Mirror
/// Epoch B persisted (epoch 0, ending at the barrier) cuts A at the barrier all the same.
#[test]
fn failback_uses_the_last_mirror_epoch_when_the_epochs_collide() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = source_a(&new_dir(tmp.path(), "a-0"));
    let mut b = open(&new_dir(tmp.path(), "b-0"));
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    fetch(&mut b, &a);
    leader_append(&mut a, 1, 10, 2, false, 10);
    leader_append(&mut a, 1, 12, 2, false, 10);

    assert_eq!(stop(&mut b), 10);
    let epoch = b.leader_epoch();
    assert_eq!(epoch, 10, "the collision");
    leader_append(&mut b, 7, 0, 3, false, epoch);
    assert_eq!(
        b.mirror_state(),
        &MirrorPartitionState::Stopped {
            barrier_offset: 10,
            last_mirror_epoch: 0
        }
    );

    a.start_mirroring("cluster-B", &b).unwrap();
    assert_eq!(a.log_end_offset(), 10);
    fetch(&mut a, &b);
    assert_same_log(&a, &b, "failback across colliding epochs");
}

/// While mirroring, the destination's own leader epoch stays above every source epoch it
/// mirrors: a source election whose epoch comes within 3 of it makes it bump, to 10 above the
/// larger of the two, persisted before the batch lands. The mirrored batches and the
/// leader-epoch cache keep the source's epochs (what OffsetsForLeaderEpoch answers from).
#[test]
fn a_source_election_while_mirroring_bumps_the_destinations_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = source_a(&new_dir(tmp.path(), "a-0"));
    let b_dir = new_dir(tmp.path(), "b-0");
    let mut b = open(&b_dir);
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    assert_eq!(b.leader_epoch(), 10, "10 above the empty log's epoch 0");
    fetch(&mut b, &a);
    assert_eq!(b.leader_epoch(), 10, "source epoch 0 is far below");
    // Elections on A: epoch 6 stays more than 3 below B's 10; epoch 7 comes within 3.
    leader_append(&mut a, 1, 10, 2, false, 6);
    fetch(&mut b, &a);
    assert_eq!(b.leader_epoch(), 10);
    leader_append(&mut a, 1, 12, 2, false, 7);
    fetch(&mut b, &a);
    assert_eq!(b.leader_epoch(), 20, "bumped: 10 above B's 10");
    assert_eq!(b.leader_epoch_cache().latest_epoch(), Some(7));
    // An election on A that jumps past B's epoch: B goes 10 above the source's.
    leader_append(&mut a, 1, 14, 2, false, 25);
    fetch(&mut b, &a);
    assert_eq!(b.leader_epoch(), 35);
    assert_eq!(b.leader_epoch_cache().latest_epoch(), Some(25));
    assert_eq!(
        b.mirror_state(),
        &MirrorPartitionState::Mirroring {
            source_cluster_id: "cluster-A".into(),
            leader_epoch: 35,
            full_truncation_pending: false,
        }
    );
    assert_same_log(&a, &b, "mirrored as they are");
    // The stop's epoch is never below the one the caller's metadata holds.
    let end = b.log_end_offset();
    b.set_high_watermark(end);
    let outcome = MirroredLog::stop_mirroring_outcome(&mut b, StopPolicy::default()).unwrap();
    assert_eq!(outcome.leader_epoch, 35);
    assert_eq!(b.leader_epoch(), 35);
}

/// The caller's metadata follows the destination's epoch: a lower epoch from the caller is
/// refused while mirroring, a higher one (a leader election on the destination) is taken and
/// persisted.
#[test]
fn a_lower_leader_epoch_from_the_caller_is_refused_while_mirroring() {
    let tmp = tempfile::tempdir().unwrap();
    let a = source_a(&new_dir(tmp.path(), "a-0"));
    let b_dir = new_dir(tmp.path(), "b-0");
    let mut b = open(&b_dir);
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    fetch(&mut b, &a);
    let stale = b.set_mirror_leader_epoch(3);
    assert!(
        matches!(
            stale,
            Err(PartitionLogError::StaleLeaderEpoch {
                requested: 3,
                current: 10
            })
        ),
        "{stale:?}"
    );
    assert_eq!(b.leader_epoch(), 10, "unchanged");
    assert_eq!(b.set_mirror_leader_epoch(10).unwrap(), 10);
    assert_eq!(b.set_mirror_leader_epoch(12).unwrap(), 12);
    drop(b);
    let mut b = open(&b_dir);
    assert_eq!(b.leader_epoch(), 12, "persisted");
    assert!(b.set_mirror_leader_epoch(11).is_err());
}

/// The destination's epoch is in the `mirror-state` file: a reopen (clean or not) keeps it, and
/// the stop after it is not below it. (Before, the epoch was the cache's latest, the source's.)
#[test]
fn the_destinations_mirroring_epoch_survives_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = source_a(&new_dir(tmp.path(), "a-0"));
    let b_dir = new_dir(tmp.path(), "b-0");
    let mut b = open(&b_dir);
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    leader_append(&mut a, 1, 10, 2, false, 8);
    fetch(&mut b, &a);
    assert_eq!(b.leader_epoch(), 20);
    b.flush().unwrap();
    drop(b); // no clean close
    let mut b = open(&b_dir);
    assert_eq!(b.leader_epoch(), 20);
    assert!(std::fs::read_to_string(b_dir.join("mirror-state"))
        .unwrap()
        .contains("\nleader_epoch=20\n"));
    // A's next election (9) stays more than 3 below 20: no bump.
    leader_append(&mut a, 1, 12, 2, false, 9);
    fetch(&mut b, &a);
    assert_eq!(b.leader_epoch(), 20);
    let end = b.log_end_offset();
    b.set_high_watermark(end);
    let outcome = MirroredLog::stop_mirroring_outcome(&mut b, StopPolicy::default()).unwrap();
    assert_eq!(outcome.leader_epoch, 20, "max(9 + 10, 20)");
}

/// Defect: a partition with data of its own that starts mirroring for the first time (from
/// `Local`, the source telling no Last Mirror Epoch) was aligned by leader epoch. Both clusters
/// numbered their epochs from 0, so B found epoch 0 in A's log, kept its own epoch-0 batches up
/// to A's end of that epoch, and then mirrored A's batches after them: B diverged from A. None
/// of B's batches can be in A; B now truncates fully and starts at 0.
#[test]
fn a_first_start_of_mirroring_keeps_none_of_the_partitions_own_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let a = source_a(&new_dir(tmp.path(), "a-0"));
    let mut b = open_with(&new_dir(tmp.path(), "b-0"), small_segments(300));
    for i in 0..3 {
        leader_append(&mut b, 9, i * 2, 2, false, 0);
    }
    assert_eq!(b.log_end_offset(), 6);
    assert_eq!(a.last_mirror_epoch(), None);

    b.start_mirroring("cluster-A", &a).unwrap();
    assert_eq!(b.log_end_offset(), 0, "B's own batches are gone");
    assert_eq!(b.log_start_offset(), 0);
    assert!(
        b.producer_state().last_entry(9).is_none(),
        "B's own producer is forgotten"
    );
    fetch(&mut b, &a);
    assert_same_log(&a, &b, "first start");

    // The same from an empty log of its own at offset 0 changes nothing and keeps aligning
    // by epoch (a new mirror partition).
    let mut c = open(&new_dir(tmp.path(), "c-0"));
    c.start_mirroring("cluster-A", &a).unwrap();
    fetch(&mut c, &a);
    assert_same_log(&a, &c, "empty first start");
}
