//! A real `PartitionLog` crashed at every I/O point of a mirror stop (under both policies) and of
//! a failback alignment, through the storage seam (`SimulatedFs`: only fsynced bytes and names
//! survive, and with them nothing, or a torn prefix of 7 B, 40 B or 1 MiB, of the last unsynced
//! write), reopened **without a high-watermark checkpoint** and resumed.
//!
//! Bug this guards against: the resumed stop recomputed its truncation point as the LSO bounded
//! by the high watermark, which after an unclean restart is the log start (no checkpoint) or a
//! stale checkpoint, so resuming a stop interrupted after `FeedStopped` truncated committed
//! mirrored batches — here all of them. Invariants: the stop ends in `Stopped` with exactly one
//! barrier at the stop point, in a leader epoch above every mirrored one and recorded in the
//! leader-epoch checkpoint from the barrier's offset; every committed mirrored batch below the
//! stop point is still there, byte for byte.

use std::path::Path;
use std::sync::Arc;

use record_format::{Batches, LogEntry, RecordBatchBuilder};
use recovery::{
    EpochEndOffsets, EpochHistory, LoadOptions, LogLoader, MirrorPartitionState, MirroredLog,
    PartitionLog, PartitionLogConfig, StopPolicy, MIRROR_EPOCH_FENCE,
};
use segment_store::{LogConfig, LogEnv};
use testkit::{fresh_dir, materialize};
use testkit::{ManualClock, SimulatedFs, TornWrite};

const T0: i64 = 1_700_000_000_000;
/// The mirrored data's leader epoch.
const SOURCE_EPOCH: i32 = 2;

/// Every I/O point, each with what survives of the last unsynced write: nothing, or a torn
/// prefix of 7 B, 40 B or 1 MiB (all of it).
fn crash_points(total: u64) -> impl Iterator<Item = (u64, TornWrite)> {
    (0..total).flat_map(|n| {
        [
            TornWrite::None,
            TornWrite::Prefix(7),
            TornWrite::Prefix(40),
            TornWrite::Prefix(1 << 20),
        ]
        .map(move |torn| (n, torn))
    })
}

fn config() -> PartitionLogConfig {
    PartitionLogConfig {
        log: LogConfig {
            segment_bytes: 400,
            index_interval_bytes: 128,
            max_index_size: 24 * 64,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    }
}

/// The source's batches: producer 11 (epoch 3) idempotent, six batches of two records, then
/// producer 12 opens a transaction (offset 12, never finished): stop point 12.
fn source_batches() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..6 {
        let mut b = RecordBatchBuilder::new(i * 2)
            .partition_leader_epoch(SOURCE_EPOCH)
            .producer(11, 3, (i * 2) as i32);
        for r in 0..2 {
            b.append(T0 + i * 2 + r, Some(b"k"), Some(b"mirrored"), &[])
                .unwrap();
        }
        out.push(b.build());
    }
    let mut b = RecordBatchBuilder::new(12)
        .partition_leader_epoch(SOURCE_EPOCH)
        .producer(12, 0, 0)
        .transactional(true);
    b.append(T0 + 20, Some(b"k"), Some(b"open"), &[]).unwrap();
    out.push(b.build());
    out
}

const STOP_POINT: i64 = 12;

fn open(dir: &Path, env: LogEnv) -> PartitionLog {
    let opts = LoadOptions {
        config: recovery::Config {
            log: config(),
            env,
            ..recovery::Config::default()
        },
        // No replication-offset-checkpoint: the high watermark starts at the log start.
        high_watermark: None,
        ..LoadOptions::default()
    };
    LogLoader::load(dir, &opts).unwrap().0
}

/// A mirroring partition on `sim` holding every source batch, all committed (HW = log end) and
/// flushed: whatever the stop loses, it lost itself.
fn mirrored(sim: &SimulatedFs, dir: &Path) -> PartitionLog {
    let env = LogEnv {
        storage: Arc::new(sim.clone()),
        clock: Arc::new(ManualClock::new(T0)),
    };
    let mut log = open(dir, env);
    log.start_mirroring("cluster-A", &EpochHistory::of(&log))
        .unwrap();
    for b in source_batches() {
        log.append_as_mirror(&b).unwrap();
    }
    log.set_high_watermark(log.log_end_offset());
    log.flush().unwrap();
    assert_eq!(log.last_stable_offset(), STOP_POINT);
    log
}

/// `(base offset, leader epoch, is barrier, bytes)` of every batch (a read returns one
/// segment's batches at most).
fn batches(log: &PartitionLog) -> Vec<(i64, i32, bool, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log.local_log().read(offset, 1 << 20, true).unwrap();
        for e in Batches::new(&data.records, 0) {
            let LogEntry::V2(b) = e.unwrap() else {
                panic!("legacy batch")
            };
            out.push((
                b.base_offset(),
                b.partition_leader_epoch(),
                record_format::is_mirror_pid_reset_batch(&b).unwrap(),
                b.as_bytes().to_vec(),
            ));
            offset = b.next_offset();
        }
    }
    out
}

#[test]
fn a_stop_crashed_at_every_io_point_resumes_without_losing_a_committed_batch() {
    let scratch = tempfile::tempdir().unwrap();
    let expected_data: Vec<Vec<u8>> = source_batches().into_iter().take(6).collect();

    // The I/O points of an uninterrupted stop.
    let total = {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "clean").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut log = mirrored(&sim, &dir);
        let before = sim.stats().io_points;
        assert_eq!(log.stop_mirroring().unwrap(), STOP_POINT);
        sim.stats().io_points - before
    };
    assert!(total > 8, "{total} I/O points");

    let mut resumed_from_stopping = 0;
    for (n, torn) in crash_points(total) {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "run").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut log = mirrored(&sim, &dir);
        sim.fail_after(n);
        assert!(
            log.stop_mirroring().is_err(),
            "I/O point {n} ({torn:?}) did not fail"
        );
        drop(log);
        let image = sim.crash(torn);

        // Reopen the surviving files from disk, with no high-watermark checkpoint.
        let disk = fresh_dir(scratch.path(), "disk").unwrap();
        materialize(&image, &dir, &disk).unwrap();
        let mut log = open(&disk, LogEnv::default());
        assert_eq!(log.high_watermark(), 0, "no high-watermark checkpoint");
        match log.mirror_state().clone() {
            MirrorPartitionState::Stopping { lso, .. } => {
                assert_eq!(lso, STOP_POINT, "I/O point {n} ({torn:?})");
                resumed_from_stopping += 1;
                log.resume_mirror_stop().unwrap();
            }
            MirrorPartitionState::Mirroring { .. } => {
                // The stop never persisted its first step: the coordinator stops again once
                // the partition knows its high watermark again.
                assert!(!log.accepts_client_appends());
                log.set_high_watermark(log.log_end_offset());
                log.stop_mirroring().unwrap();
            }
            other => panic!("I/O point {n} ({torn:?}): {other:?} after the crash"),
        }
        assert_eq!(
            log.mirror_state(),
            &MirrorPartitionState::Stopped {
                barrier_offset: STOP_POINT,
                last_mirror_epoch: SOURCE_EPOCH,
            },
            "I/O point {n} ({torn:?})"
        );
        let all = batches(&log);
        let data: Vec<Vec<u8>> = all.iter().filter(|b| !b.2).map(|b| b.3.clone()).collect();
        assert_eq!(
            data, expected_data,
            "I/O point {n} ({torn:?}): committed mirrored batches"
        );
        let barriers: Vec<(i64, i32)> = all.iter().filter(|b| b.2).map(|b| (b.0, b.1)).collect();
        assert_eq!(
            barriers,
            [(STOP_POINT, SOURCE_EPOCH + MIRROR_EPOCH_FENCE)],
            "I/O point {n} ({torn:?}): one barrier, in the new epoch"
        );
        assert_eq!(
            std::fs::read_to_string(disk.join("leader-epoch-checkpoint")).unwrap(),
            format!(
                "0\n2\n{SOURCE_EPOCH} 0\n{} {STOP_POINT}\n",
                SOURCE_EPOCH + MIRROR_EPOCH_FENCE
            ),
            "I/O point {n} ({torn:?})"
        );
        assert!(log.producer_state().active_producers().is_empty());
        assert_eq!(
            log.recovery_point(),
            STOP_POINT + 1,
            "the barrier is durable"
        );
    }
    assert!(resumed_from_stopping > 3, "{resumed_from_stopping} resumes");
}

/// Defect: the barrier's epoch came from the leader-epoch cache alone. With the
/// `leader-epoch-checkpoint` lost (a clean open does not scan segments for epochs) the cache is
/// empty and the barrier went into epoch 0, below the mirrored batches' epoch: a node aligning
/// by leader epoch would not see it open a new epoch. The epoch is now above every epoch in the
/// log's batches as well.
#[test]
fn barrier_epoch_is_above_every_batch_epoch_when_the_leader_epoch_checkpoint_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    std::fs::create_dir(&dir).unwrap();
    let env = || LogEnv {
        storage: Arc::new(segment_store::StdFs),
        clock: Arc::new(ManualClock::new(T0)),
    };
    let mut log = open(&dir, env());
    log.start_mirroring("cluster-A", &EpochHistory::of(&log))
        .unwrap();
    for b in source_batches() {
        log.append_as_mirror(&b).unwrap();
    }
    log.close().unwrap();
    std::fs::remove_file(dir.join("leader-epoch-checkpoint")).unwrap();

    let opts = LoadOptions {
        config: recovery::Config {
            log: config(),
            env: env(),
            ..recovery::Config::default()
        },
        had_clean_shutdown: true,
        recovery_point: 13,
        high_watermark: Some(13),
        ..LoadOptions::default()
    };
    let mut log = LogLoader::load(&dir, &opts).unwrap().0;
    assert_eq!(log.leader_epoch_cache().latest_epoch(), None, "lost");
    assert_eq!(log.stop_mirroring().unwrap(), STOP_POINT);
    let barriers: Vec<(i64, i32)> = batches(&log)
        .iter()
        .filter(|b| b.2)
        .map(|b| (b.0, b.1))
        .collect();
    assert_eq!(barriers, [(STOP_POINT, SOURCE_EPOCH + MIRROR_EPOCH_FENCE)]);
    assert_eq!(
        log.leader_epoch_cache().latest_epoch(),
        Some(SOURCE_EPOCH + MIRROR_EPOCH_FENCE)
    );
    // The Last Mirror Epoch is the epoch of the last mirrored batch kept, not "unknown" (-1)
    // because the cache lost it.
    assert_eq!(
        log.mirror_state(),
        &MirrorPartitionState::Stopped {
            barrier_offset: STOP_POINT,
            last_mirror_epoch: SOURCE_EPOCH,
        }
    );
}

/// The `AbortOpenTransactions` stop crashed at every I/O point, reopened without a
/// high-watermark checkpoint and resumed: nothing is cut, exactly one ABORT marker (producer 12,
/// epoch 0, in the new epoch) right at the old log end and exactly one barrier after it, every
/// mirrored batch byte for byte, no transaction open.
#[test]
fn an_abort_stop_crashed_at_every_io_point_writes_one_marker_and_one_barrier() {
    let scratch = tempfile::tempdir().unwrap();
    let expected_data: Vec<Vec<u8>> = source_batches();
    let end = STOP_POINT + 1;
    let total = {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "clean").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut log = mirrored(&sim, &dir);
        let before = sim.stats().io_points;
        assert_eq!(
            log.stop_mirroring_with(StopPolicy::AbortOpenTransactions)
                .unwrap(),
            end + 1
        );
        sim.stats().io_points - before
    };
    assert!(total > 8, "{total} I/O points");
    let new_epoch = SOURCE_EPOCH + MIRROR_EPOCH_FENCE;
    for (n, torn) in crash_points(total) {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "run").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut log = mirrored(&sim, &dir);
        sim.fail_after(n);
        assert!(
            log.stop_mirroring_with(StopPolicy::AbortOpenTransactions)
                .is_err(),
            "I/O point {n} ({torn:?}) did not fail"
        );
        drop(log);
        let image = sim.crash(torn);
        let disk = fresh_dir(scratch.path(), "disk").unwrap();
        materialize(&image, &dir, &disk).unwrap();
        let mut log = open(&disk, LogEnv::default());
        match log.mirror_state().clone() {
            MirrorPartitionState::Stopping { policy, .. } => {
                assert_eq!(
                    policy,
                    StopPolicy::AbortOpenTransactions,
                    "I/O point {n} ({torn:?})"
                );
                log.resume_mirror_stop().unwrap();
            }
            MirrorPartitionState::Mirroring { .. } => {
                log.stop_mirroring_with(StopPolicy::AbortOpenTransactions)
                    .unwrap();
            }
            other => panic!("I/O point {n} ({torn:?}): {other:?} after the crash"),
        }
        assert_eq!(
            log.mirror_state(),
            &MirrorPartitionState::Stopped {
                barrier_offset: end + 1,
                last_mirror_epoch: SOURCE_EPOCH,
            },
            "I/O point {n} ({torn:?})"
        );
        let all = batches(&log);
        let data: Vec<Vec<u8>> = all
            .iter()
            .filter(|b| b.0 < end)
            .map(|b| b.3.clone())
            .collect();
        assert_eq!(
            data, expected_data,
            "I/O point {n} ({torn:?}): every mirrored batch"
        );
        let tail: Vec<(i64, i32, bool)> = all
            .iter()
            .filter(|b| b.0 >= end)
            .map(|b| (b.0, b.1, b.2))
            .collect();
        assert_eq!(
            tail,
            [(end, new_epoch, false), (end + 1, new_epoch, true)],
            "I/O point {n} ({torn:?}): one marker, one barrier"
        );
        assert!(
            log.producer_state().ongoing_txns().is_empty(),
            "I/O point {n} ({torn:?})"
        );
        let aborted = log.collect_aborted_transactions(0, end + 2).unwrap();
        assert_eq!(
            aborted
                .iter()
                .map(|a| (a.producer_id, a.first_offset, a.last_offset))
                .collect::<Vec<_>>(),
            [(12, STOP_POINT, end)],
            "I/O point {n} ({torn:?})"
        );
    }
}

/// A's own history for a failback: the source batches it wrote itself (offsets 0..12, epoch 2,
/// the same bytes B mirrored), then, after an election B never saw, its own batches in epoch 3
/// at 12..16; flushed, local.
fn old_source(sim: &SimulatedFs, dir: &Path) -> PartitionLog {
    let env = LogEnv {
        storage: Arc::new(sim.clone()),
        clock: Arc::new(ManualClock::new(T0)),
    };
    let mut log = open(dir, env);
    for b in source_batches().into_iter().take(6) {
        log.append_as_follower(&b).unwrap();
    }
    for i in 0..2 {
        let mut b = RecordBatchBuilder::new(0).producer(40, 0, i * 2);
        b.append(T0, Some(b"k"), Some(b"own"), &[]).unwrap();
        b.append(T0, Some(b"k"), Some(b"own"), &[]).unwrap();
        log.append_as_leader(&b.build(), SOURCE_EPOCH + 1, recovery::AppendOrigin::Client)
            .unwrap();
    }
    log.flush().unwrap();
    assert_eq!(log.log_end_offset(), 16);
    log
}

/// Failback alignment crashed at every I/O point: the old source A starts mirroring the
/// promoted B. After any crash A is either writable with its log untouched (nothing was cut
/// while it could accept writes) or read-only (`Mirroring`), and then calling
/// `start_mirroring` again aligns it to B's barrier, which its next fetch brings.
#[test]
fn failback_alignment_crashed_at_every_io_point() {
    let scratch = tempfile::tempdir().unwrap();
    let b_dir = scratch.path().join("b-0");
    std::fs::create_dir(&b_dir).unwrap();
    let mut b = open(&b_dir, LogEnv::default());
    b.start_mirroring("cluster-A", &EpochHistory::of(&b))
        .unwrap();
    for batch in source_batches() {
        b.append_as_mirror(&batch).unwrap();
    }
    b.set_high_watermark(b.log_end_offset());
    assert_eq!(b.stop_mirroring().unwrap(), STOP_POINT);

    let total = {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "clean").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut a = old_source(&sim, &dir);
        let before = sim.stats().io_points;
        a.start_mirroring("cluster-B", &b).unwrap();
        assert_eq!(a.log_end_offset(), STOP_POINT);
        sim.stats().io_points - before
    };
    assert!(total >= 3, "{total} I/O points");
    for (n, torn) in crash_points(total) {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "run").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut a = old_source(&sim, &dir);
        let original = batches(&a);
        sim.fail_after(n);
        assert!(
            a.start_mirroring("cluster-B", &b).is_err(),
            "I/O point {n} ({torn:?}) did not fail"
        );
        drop(a);
        let image = sim.crash(torn);
        let disk = fresh_dir(scratch.path(), "disk").unwrap();
        materialize(&image, &dir, &disk).unwrap();
        let mut a = open(&disk, LogEnv::default());
        if a.accepts_client_appends() {
            assert_eq!(
                batches(&a),
                original,
                "I/O point {n} ({torn:?}): cut while writable"
            );
        }
        a.start_mirroring("cluster-B", &b).unwrap();
        assert!(!a.accepts_client_appends(), "I/O point {n} ({torn:?})");
        assert_eq!(a.log_end_offset(), STOP_POINT, "I/O point {n} ({torn:?})");
        for (_, _, _, bytes) in batches(&b).into_iter().filter(|x| x.0 >= STOP_POINT) {
            a.append_as_mirror(&bytes).unwrap();
        }
        assert_eq!(
            a.find_barrier_from(0).unwrap(),
            Some(STOP_POINT),
            "I/O point {n} ({torn:?})"
        );
        assert_eq!(batches(&a), batches(&b), "I/O point {n} ({torn:?})");
    }
}

/// A first start of mirroring crashed at every I/O point: D never mirrored and holds its own
/// batches (the old source's local history, in epochs the source cluster also uses); the source
/// is a partition that tells no Last Mirror Epoch. After any crash D is either writable with
/// its log untouched, or read-only, and calling `start_mirroring` again leaves it empty at 0,
/// so the fetch brings the source's log byte for byte.
///
/// Defect guarded (with the full truncation itself): a crash after the `Mirroring` state was
/// persisted and before the truncation left a read-only log whose retry aligned by leader epoch
/// and kept D's own batches where the source has different ones; the state now marks the
/// truncation pending until it is durable.
#[test]
fn first_start_of_mirroring_crashed_at_every_io_point_keeps_none_of_its_own_batches() {
    let scratch = tempfile::tempdir().unwrap();
    let src_dir = scratch.path().join("src-0");
    std::fs::create_dir(&src_dir).unwrap();
    let mut source = open(&src_dir, LogEnv::default());
    for batch in source_batches() {
        source.append_as_follower(&batch).unwrap();
    }
    assert_eq!(
        source.last_mirror_epoch(),
        None,
        "a source that never mirrored"
    );

    let total = {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "clean").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut d = old_source(&sim, &dir);
        let before = sim.stats().io_points;
        d.start_mirroring("cluster-S", &source).unwrap();
        assert_eq!(d.log_end_offset(), 0);
        sim.stats().io_points - before
    };
    assert!(total >= 3, "{total} I/O points");
    for (n, torn) in crash_points(total) {
        let sim = SimulatedFs::new();
        let dir = fresh_dir(scratch.path(), "run").unwrap();
        sim.create_durable_dir_all(&dir);
        let mut d = old_source(&sim, &dir);
        let original = batches(&d);
        sim.fail_after(n);
        assert!(
            d.start_mirroring("cluster-S", &source).is_err(),
            "I/O point {n} ({torn:?}) did not fail"
        );
        drop(d);
        let image = sim.crash(torn);
        let disk = fresh_dir(scratch.path(), "disk").unwrap();
        materialize(&image, &dir, &disk).unwrap();
        let mut d = open(&disk, LogEnv::default());
        if d.accepts_client_appends() {
            assert_eq!(
                batches(&d),
                original,
                "I/O point {n} ({torn:?}): cut while writable"
            );
        } else if d.log_end_offset() > 0 {
            // Read-only with its own batches still there: nothing may be mirrored on top.
            let first = source_batches().remove(0);
            assert!(
                d.append_as_mirror(&first).is_err(),
                "I/O point {n} ({torn:?}): mirrored onto its own batches"
            );
        }
        d.start_mirroring("cluster-S", &source).unwrap();
        assert!(!d.accepts_client_appends(), "I/O point {n} ({torn:?})");
        assert_eq!(d.log_end_offset(), 0, "I/O point {n} ({torn:?})");
        for (_, _, _, bytes) in batches(&source) {
            d.append_as_mirror(&bytes).unwrap();
        }
        assert_eq!(batches(&d), batches(&source), "I/O point {n} ({torn:?})");
        // And it survives a reopen as it is.
        drop(d);
        let d = open(&disk, LogEnv::default());
        assert_eq!(batches(&d), batches(&source), "I/O point {n} ({torn:?})");
    }
}
