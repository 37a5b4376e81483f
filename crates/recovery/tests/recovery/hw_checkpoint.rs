//! The high watermark is checkpointed as Kafka does (`replication-offset-checkpoint`, written by
//! `ReplicaManager` every `replica.high.watermark.checkpoint.interval.ms` and here also at every
//! flush of the log directory), not only at a clean close: after an unclean restart the loaded
//! high watermark is the last checkpoint, not the log start offset.

use std::sync::Arc;

use recovery::{load_log_dir, AppendOrigin, Config};
use segment_store::{LogEnv, StdFs, TopicPartition};
use testkit::ManualClock;

use super::log::{batch, batch_at};

const T0: i64 = 1_700_000_000_000;

#[test]
fn high_watermarks_are_checkpointed_periodically_and_at_flush() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("t-0")).unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let opts = Config {
        env: LogEnv {
            storage: Arc::new(StdFs),
            clock: clock.clone(),
        },
        ..Config::default()
    };
    let checkpoint = root.path().join("replication-offset-checkpoint");
    let tp = TopicPartition::new("t", 0);
    let mut ld = load_log_dir(root.path(), &opts).unwrap();
    let log = ld.partitions.get_mut(&tp).unwrap();
    for seq in [0, 2, 4] {
        log.append_as_leader(&batch(5, 0, seq, 2, false), 0, AppendOrigin::Client)
            .unwrap();
    }
    log.set_high_watermark(4);

    // Not yet: the interval (5 s, Kafka's default) has not passed.
    clock.set(T0 + 4_999);
    assert!(!ld.maybe_checkpoint_high_watermarks().unwrap());
    assert!(!checkpoint.exists());
    clock.set(T0 + 5_000);
    assert!(ld.maybe_checkpoint_high_watermarks().unwrap());
    assert_eq!(
        std::fs::read_to_string(&checkpoint).unwrap(),
        "0\n1\nt 0 4\n"
    );
    assert!(
        !ld.maybe_checkpoint_high_watermarks().unwrap(),
        "just written"
    );

    // A flush checkpoints the recovery points and the high watermarks.
    ld.partitions.get_mut(&tp).unwrap().set_high_watermark(6);
    ld.flush().unwrap();
    assert_eq!(
        std::fs::read_to_string(&checkpoint).unwrap(),
        "0\n1\nt 0 6\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.path().join("recovery-point-offset-checkpoint")).unwrap(),
        "0\n1\nt 0 6\n"
    );

    // Crash (no clean close): the high watermark comes back from the checkpoint.
    drop(ld);
    let ld = load_log_dir(root.path(), &opts).unwrap();
    assert!(!ld.had_clean_shutdown);
    let log = &ld.partitions[&tp];
    assert_eq!((log.log_end_offset(), log.high_watermark()), (6, 6));
}

/// A mirroring partition of a log directory with 12 mirrored records (6 batches of 2, offsets
/// 0..12) made durable by the partition, with no `replication-offset-checkpoint`; then a crash.
fn mirrored_then_crashed(root: &std::path::Path, opts: &Config) {
    std::fs::create_dir(root.join("t-0")).unwrap();
    let mut ld = load_log_dir(root, opts).unwrap();
    let log = ld.partitions.get_mut(&TopicPartition::new("t", 0)).unwrap();
    log.start_mirroring("cluster-A", &recovery::EpochHistory::of(log))
        .unwrap();
    for i in 0..6 {
        let b = batch_at(i64::from(i) * 2, 5, 0, i * 2, 2, false, 0);
        log.append_as_mirror(&b).unwrap();
    }
    log.flush().unwrap();
    assert!(!root.join("replication-offset-checkpoint").exists());
    drop(ld);
}

/// The engine, not only the `seglog::LogDir` facade, re-establishes the high watermark after
/// an unclean open. Default (the flushed log end): the recovered log end, so a stop right after
/// the restart keeps the 12 committed mirrored records (before: the missing checkpoint made the
/// high watermark, and the stop point, 0).
#[test]
fn an_unclean_load_log_dir_takes_the_recovered_log_end_as_high_watermark() {
    let root = tempfile::tempdir().unwrap();
    let opts = Config::default();
    mirrored_then_crashed(root.path(), &opts);
    let mut ld = load_log_dir(root.path(), &opts).unwrap();
    assert!(!ld.had_clean_shutdown);
    let log = ld.partitions.get_mut(&TopicPartition::new("t", 0)).unwrap();
    assert_eq!((log.log_end_offset(), log.high_watermark()), (12, 12));
    assert!(log.high_watermark_known());
    assert_eq!(
        log.stop_mirroring().unwrap(),
        12,
        "nothing committed is cut"
    );
}

/// With a caller-owned high watermark, `load_log_dir` after an unclean shutdown marks it
/// unknown: the stop refuses (cutting nothing) until the caller sets it.
#[test]
fn an_unclean_load_log_dir_marks_a_caller_owned_high_watermark_unknown() {
    let root = tempfile::tempdir().unwrap();
    let opts = Config {
        high_watermark: recovery::HighWatermark::Manual,
        ..Config::default()
    };
    mirrored_then_crashed(root.path(), &opts);
    let mut ld = load_log_dir(root.path(), &opts).unwrap();
    assert!(!ld.had_clean_shutdown);
    let log = ld.partitions.get_mut(&TopicPartition::new("t", 0)).unwrap();
    assert!(!log.high_watermark_known());
    let refused = log.stop_mirroring();
    assert!(
        matches!(refused, Err(recovery::MirrorError::HighWatermarkUnknown)),
        "{refused:?}"
    );
    assert_eq!(log.log_end_offset(), 12, "the refused stop cut nothing");
    log.set_high_watermark(12);
    assert_eq!(log.stop_mirroring().unwrap(), 12);
}

/// A caller-owned high watermark that an unclean open could not re-establish is not laundered
/// by a clean close: the close leaves it out of `replication-offset-checkpoint` (with the
/// clean-shutdown marker written), so the next, clean, open still does not know it and the stop
/// still refuses. Before: the close wrote the stale checkpoint value (4) and the marker, the
/// next open trusted it and the stop cut the committed mirrored records 4..12.
#[test]
fn a_clean_close_does_not_launder_a_caller_owned_high_watermark_it_does_not_know() {
    let root = tempfile::tempdir().unwrap();
    let opts = Config {
        high_watermark: recovery::HighWatermark::Manual,
        ..Config::default()
    };
    mirrored_then_crashed(root.path(), &opts);
    let checkpoint = root.path().join("replication-offset-checkpoint");
    // A stale checkpoint: the high watermark was 4 when it was written.
    std::fs::write(&checkpoint, "0\n1\nt 0 4\n").unwrap();
    let tp = TopicPartition::new("t", 0);

    let mut ld = load_log_dir(root.path(), &opts).unwrap();
    assert!(!ld.had_clean_shutdown);
    assert!(!ld.partitions[&tp].high_watermark_known());
    // Neither a flush nor a checkpoint writes the value it does not know.
    ld.flush().unwrap();
    ld.checkpoint_high_watermarks().unwrap();
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), "0\n0\n");
    ld.close().unwrap();
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), "0\n0\n");

    let mut ld = load_log_dir(root.path(), &opts).unwrap();
    assert!(ld.had_clean_shutdown);
    let log = ld.partitions.get_mut(&tp).unwrap();
    assert!(!log.high_watermark_known(), "no entry: still unknown");
    let refused = log.stop_mirroring();
    assert!(
        matches!(refused, Err(recovery::MirrorError::HighWatermarkUnknown)),
        "{refused:?}"
    );
    assert_eq!(log.log_end_offset(), 12, "the refused stop cut nothing");

    // Once the caller sets it, it is checkpointed and the next clean open knows it.
    log.set_high_watermark(12);
    ld.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(&checkpoint).unwrap(),
        "0\n1\nt 0 12\n"
    );
    let mut ld = load_log_dir(root.path(), &opts).unwrap();
    let log = ld.partitions.get_mut(&tp).unwrap();
    assert!(log.high_watermark_known());
    assert_eq!(log.stop_mirroring().unwrap(), 12);
}

/// The engine's own single-partition load (`LogLoader::load`, not through `load_log_dir`)
/// after an unclean shutdown does not take the checkpoint's high watermark (stale, 4) or its
/// absence (the log start) as known: the stop refuses instead of cutting the committed mirrored
/// records down to it. Before: the stop cut to 4, or everything.
#[test]
fn an_unclean_partition_load_does_not_trust_a_stale_or_missing_high_watermark() {
    for stale in [None, Some(4)] {
        let root = tempfile::tempdir().unwrap();
        let opts = Config::default();
        mirrored_then_crashed(root.path(), &opts);
        let dir = root.path().join("t-0");
        let load = recovery::LoadOptions {
            high_watermark: stale,
            ..recovery::LoadOptions::default()
        };
        let (mut log, _) = recovery::LogLoader::load(&dir, &load).unwrap();
        assert_eq!(log.log_end_offset(), 12);
        assert!(!log.high_watermark_known(), "{stale:?}");
        let refused = log.stop_mirroring();
        assert!(
            matches!(refused, Err(recovery::MirrorError::HighWatermarkUnknown)),
            "{stale:?}: {refused:?}"
        );
        assert_eq!(log.log_end_offset(), 12, "{stale:?}: nothing cut");
        log.set_high_watermark(12);
        assert_eq!(log.stop_mirroring().unwrap(), 12, "{stale:?}");
    }
}
