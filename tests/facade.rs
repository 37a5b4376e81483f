//! The library facade, `seglog::Log` and `seglog::LogDir`, on real files in temp dirs: open or
//! create, recovery only after an unclean shutdown, the high-watermark policies, transactions,
//! partitions created and deleted at run time, producers expired at load.

use std::path::Path;
use std::sync::Arc;

use seglog::record_format::{end_txn_marker_batch, ControlRecordType, RecordBatchBuilder};
use seglog::{
    AppendOrigin, Config, Error, HighWatermark, IsolationLevel, Log, LogDir, TopicPartition,
};
use testkit::ManualClock;

const T0: i64 = 1_700_000_000_000;

fn config() -> (Config, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (Config::default().with_clock(clock.clone()), clock)
}

fn batch(producer_id: i64, sequence: i32, values: &[&[u8]]) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0).producer(producer_id, 0, sequence);
    for v in values {
        b.append(T0, None, Some(v), &[]).unwrap();
    }
    b.build()
}

fn txn_batch(producer_id: i64, sequence: i32, value: &[u8]) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0)
        .producer(producer_id, 0, sequence)
        .transactional(true);
    b.append(T0, None, Some(value), &[]).unwrap();
    b.build()
}

fn values(log: &Log, isolation: IsolationLevel) -> Vec<Vec<u8>> {
    log.consume(log.log_start_offset(), 1 << 20, isolation)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.value)
        .collect()
}

fn checkpoint_text(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[test]
fn clean_close_means_no_recovery_and_a_drop_means_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("events-3");
    let (config, _) = config();

    let log = Log::open(&dir, config.clone()).unwrap();
    assert!(dir.is_dir(), "open creates the partition directory");
    assert_eq!(log.topic_partition(), &TopicPartition::new("events", 3));
    log.append(&batch(1, 0, &[b"a", b"b"])).unwrap();
    log.close().unwrap();

    let log = Log::open(&dir, config.clone()).unwrap();
    let report = log.recovery_report().clone();
    assert!(report.had_clean_shutdown);
    assert_eq!(report.segments_scanned, 0, "{report}");
    assert_eq!(log.log_end_offset(), 2);
    log.append(&batch(1, 2, &[b"c"])).unwrap();
    log.flush().unwrap();
    drop(log); // no close: an unclean shutdown

    let log = Log::open(&dir, config).unwrap();
    let report = log.recovery_report();
    assert!(!report.had_clean_shutdown);
    assert!(report.segments_scanned >= 1, "{report}");
    assert!(report.cut.is_empty(), "{report}");
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(
        values(&log, IsolationLevel::ReadUncommitted),
        [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    assert_eq!(
        log.producer_state()
            .unwrap()
            .last_entry(1)
            .map(|e| e.last_seq()),
        Some(2)
    );
}

#[test]
fn the_readable_range_follows_the_configured_high_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();

    let flushed = Log::open(tmp.path().join("a/t-0"), config.clone()).unwrap();
    flushed.append(&batch(1, 0, &[b"x"])).unwrap();
    assert_eq!(
        flushed.readable_range(IsolationLevel::ReadUncommitted),
        0..0
    );
    flushed.flush().unwrap();
    assert_eq!(
        flushed.readable_range(IsolationLevel::ReadUncommitted),
        0..1
    );

    let at_end = Log::open(
        tmp.path().join("b/t-0"),
        config.clone().with_high_watermark(HighWatermark::LogEnd),
    )
    .unwrap();
    at_end.append(&batch(1, 0, &[b"x"])).unwrap();
    assert_eq!(at_end.readable_range(IsolationLevel::ReadUncommitted), 0..1);

    let manual = Log::open(
        tmp.path().join("c/t-0"),
        config.with_high_watermark(HighWatermark::Manual),
    )
    .unwrap();
    manual.append(&batch(1, 0, &[b"x"])).unwrap();
    manual.flush().unwrap();
    assert!(values(&manual, IsolationLevel::ReadUncommitted).is_empty());
    assert_eq!(manual.set_high_watermark(1).unwrap(), 1);
    assert_eq!(
        values(&manual, IsolationLevel::ReadUncommitted),
        [b"x".to_vec()]
    );
}

#[test]
fn read_committed_stops_at_an_open_transaction_and_hides_aborted_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();
    let log = Log::open(
        tmp.path().join("d/t-0"),
        config.with_high_watermark(HighWatermark::LogEnd),
    )
    .unwrap();
    log.append(&txn_batch(9, 0, b"aborted")).unwrap();
    log.append(&batch(1, 0, &[b"plain"])).unwrap();
    assert_eq!(
        log.last_stable_offset(),
        0,
        "the open transaction holds the LSO"
    );
    assert!(values(&log, IsolationLevel::ReadCommitted).is_empty());
    let abort = end_txn_marker_batch(0, T0, 0, 9, 0, ControlRecordType::Abort, 0);
    log.append_as_leader(&abort, 0, AppendOrigin::Coordinator)
        .unwrap();
    log.append(&txn_batch(9, 1, b"committed")).unwrap();
    let commit = end_txn_marker_batch(0, T0, 0, 9, 0, ControlRecordType::Commit, 0);
    log.append_as_leader(&commit, 0, AppendOrigin::Coordinator)
        .unwrap();
    assert_eq!(
        values(&log, IsolationLevel::ReadCommitted),
        [b"plain".to_vec(), b"committed".to_vec()]
    );
    assert_eq!(
        values(&log, IsolationLevel::ReadUncommitted),
        [
            b"aborted".to_vec(),
            b"plain".to_vec(),
            b"committed".to_vec()
        ]
    );
    // The same records through the iterator, after a roll put them in two segments.
    log.roll().unwrap();
    log.append(&batch(1, 1, &[b"later"])).unwrap();
    let iterated: Vec<Vec<u8>> = log
        .iter_from(0, IsolationLevel::ReadCommitted)
        .unwrap()
        .map(|r| r.unwrap().value.unwrap())
        .collect();
    assert_eq!(
        iterated,
        [b"plain".to_vec(), b"committed".to_vec(), b"later".to_vec()]
    );
}

#[test]
fn a_log_refuses_a_shared_log_directory_and_a_badly_named_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();
    Log::open(tmp.path().join("t-0"), config.clone())
        .unwrap()
        .close()
        .unwrap();
    match Log::open(tmp.path().join("t-1"), config.clone()) {
        Err(Error::SharedLogDir { others, .. }) => {
            assert_eq!(others, [TopicPartition::new("t", 0)]);
        }
        other => panic!("expected SharedLogDir, got {other:?}"),
    }
    assert!(matches!(
        Log::open(tmp.path().join("nodash"), config),
        Err(Error::NotAPartitionDir { .. })
    ));
}

#[test]
fn log_dir_creates_and_deletes_partitions_at_run_time() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();
    let (a, b) = (
        TopicPartition::new("orders", 0),
        TopicPartition::new("orders", 1),
    );
    let mut dir = LogDir::open(tmp.path(), config.clone()).unwrap();
    dir.create_partition(a.clone()).unwrap();
    dir.create_partition(b.clone())
        .unwrap()
        .append_as_leader(&batch(1, 0, &[b"v"]), 0, AppendOrigin::Client)
        .unwrap();
    assert!(matches!(
        dir.create_partition(a.clone()),
        Err(Error::PartitionExists(_))
    ));
    dir.flush().unwrap();
    assert!(checkpoint_text(tmp.path(), "recovery-point-offset-checkpoint").contains("orders 1 1"));
    assert!(dir.delete_partition(&b).unwrap());
    assert!(!dir.delete_partition(&b).unwrap());
    assert!(!tmp.path().join("orders-1").exists());
    dir.close().unwrap();
    assert!(!checkpoint_text(tmp.path(), "recovery-point-offset-checkpoint").contains("orders 1"));

    let dir = LogDir::open(tmp.path(), config).unwrap();
    assert!(dir.had_clean_shutdown());
    assert_eq!(dir.partitions().collect::<Vec<_>>(), [&a]);
    assert!(dir.skipped().is_empty());
}

#[test]
fn producers_expired_at_load_are_reported_with_the_configured_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p-0");
    let (config, clock) = config();
    let log = Log::open(&dir, config.clone().with_producer_id_expiration_ms(60_000)).unwrap();
    log.append(&batch(42, 0, &[b"v"])).unwrap();
    log.close().unwrap();

    clock.set(T0 + 59_999);
    let log = Log::open(&dir, config.clone().with_producer_id_expiration_ms(60_000)).unwrap();
    assert!(log.expired_producers().is_empty());
    assert!(log.producer_state().unwrap().last_entry(42).is_some());
    log.close().unwrap();

    clock.set(T0 + 60_000);
    let log = Log::open(&dir, config.with_producer_id_expiration_ms(60_000)).unwrap();
    let expired = log.expired_producers();
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (
            expired[0].producer_id,
            expired[0].last_timestamp,
            expired[0].idle_ms()
        ),
        (42, T0, 60_000)
    );
    assert!(log.producer_state().unwrap().last_entry(42).is_none());
    assert!(log
        .recovery_report()
        .to_string()
        .contains("1 expired at load"));
}

fn batch_at(producer_id: i64, sequence: i32, timestamp: i64) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0).producer(producer_id, 0, sequence);
    b.append(timestamp, None, Some(b"v"), &[]).unwrap();
    b.build()
}

/// Kafka's `PeriodicProducerExpirationCheck` while the log runs, on the configured clock: once
/// `producer.id.expiration.check.interval.ms` passed since the last check, a write drops the
/// producers idle for `producer.id.expiration.ms`, but not one with an open transaction; between
/// two checks nothing expires. An expired producer's next batch is not checked against its old
/// sequence (Kafka's behaviour).
#[test]
fn producers_expire_while_the_log_runs_at_each_check_interval() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p-0");
    let (config, clock) = config();
    let config = config
        .with_producer_id_expiration_ms(60_000)
        .with_producer_id_expiration_check_interval_ms(10_000);
    let log = Log::open(&dir, config).unwrap();
    log.append(&batch_at(1, 0, T0)).unwrap();
    log.append(&txn_batch(2, 0, b"open")).unwrap();

    // A check runs (55 s since the open), but nobody is 60 s idle yet.
    clock.set(T0 + 55_000);
    log.append(&batch_at(3, 0, T0 + 55_000)).unwrap();
    assert!(log.producer_state().unwrap().last_entry(1).is_some());

    // Producer 1 is 60 s idle, but the last check was 5 s ago: it stays, and a gap in its
    // sequence is refused.
    clock.set(T0 + 60_000);
    log.append(&batch_at(3, 1, T0 + 60_000)).unwrap();
    assert!(log.producer_state().unwrap().last_entry(1).is_some());
    assert!(log.append(&batch_at(1, 5, T0 + 60_000)).is_err());

    // 10 s after the last check: producer 1 goes; 2 has an open transaction, 3 wrote lately.
    clock.set(T0 + 65_000);
    log.append(&batch_at(3, 2, T0 + 65_000)).unwrap();
    let live: Vec<i64> = log
        .producer_state()
        .unwrap()
        .active_producers()
        .keys()
        .copied()
        .collect();
    assert_eq!(live, [2, 3]);
    log.append(&batch_at(1, 5, T0 + 65_000)).unwrap();

    // The explicit check reports whom it dropped.
    clock.set(T0 + 125_000);
    let expired = log.maybe_remove_expired_producers().unwrap();
    let expired: Vec<(i64, i64)> = expired
        .iter()
        .map(|e| (e.producer_id, e.idle_ms()))
        .collect();
    assert_eq!(expired, [(1, 60_000), (3, 60_000)]);
    assert!(log.maybe_remove_expired_producers().unwrap().is_empty());
    assert_eq!(
        log.producer_state()
            .unwrap()
            .active_producers()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        [2]
    );
}

// ------------------------------------------------------------------------------------------------
// KIP-1279 stop after an unclean restart; the high-watermark checkpoint timer
// ------------------------------------------------------------------------------------------------

/// Twelve committed records mirrored from "cluster-A": six batches of two, leader epoch 2.
fn mirror_twelve(log: &mut Log) {
    let source = log
        .with_partition(|p| seglog::recovery::EpochHistory::of(p))
        .unwrap();
    log.start_mirroring("cluster-A", &source).unwrap();
    for i in 0..6_i64 {
        let mut b = RecordBatchBuilder::new(i * 2)
            .partition_leader_epoch(2)
            .producer(11, 0, i32::try_from(i * 2).unwrap());
        b.append(T0, None, Some(b"m1"), &[]).unwrap();
        b.append(T0, None, Some(b"m2"), &[]).unwrap();
        log.append_as_mirror(&b.build()).unwrap();
    }
    assert_eq!(log.log_end_offset(), 12);
}

/// Defect: after an unclean restart the stop point (the LSO, bounded by the high watermark)
/// came from a missing or stale `replication-offset-checkpoint`: with none, the stop cut all
/// twelve committed mirrored records; with a stale one, down to it. With the high watermark
/// owned by the caller (`Manual`), the stop now refuses until the caller sets it, then keeps
/// every committed record.
#[test]
fn a_stop_after_an_unclean_restart_waits_for_a_caller_owned_high_watermark() {
    for stale in [None, Some(4)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data").join("mirror-0");
        let config = config().0.with_high_watermark(HighWatermark::Manual);
        let mut log = Log::open(&dir, config.clone()).unwrap();
        mirror_twelve(&mut log);
        log.set_high_watermark(12).unwrap();
        log.flush().unwrap();
        drop(log); // an unclean shutdown
        let checkpoint = tmp
            .path()
            .join("data")
            .join("replication-offset-checkpoint");
        match stale {
            // No checkpoint (a flush writes none; the timer has not run on the manual clock).
            None => assert!(!checkpoint.exists()),
            Some(hw) => std::fs::write(&checkpoint, format!("0\n1\nmirror 0 {hw}\n")).unwrap(),
        }

        let log = Log::open(&dir, config).unwrap();
        assert!(!log.recovery_report().had_clean_shutdown);
        assert_eq!(log.high_watermark(), stale.unwrap_or(0), "{stale:?}");
        let refused = log.stop_mirroring();
        assert!(
            matches!(
                refused,
                Err(Error::Mirror(
                    seglog::recovery::MirrorError::HighWatermarkUnknown
                ))
            ),
            "{stale:?}: {refused:?}"
        );
        assert_eq!(log.log_end_offset(), 12, "{stale:?}: nothing cut");
        assert!(matches!(
            log.mirror_state().unwrap(),
            seglog::recovery::MirrorPartitionState::Mirroring { .. }
        ));

        log.set_high_watermark(12).unwrap();
        assert_eq!(log.stop_mirroring().unwrap(), 12, "{stale:?}");
        assert_eq!(values(&log, IsolationLevel::ReadCommitted).len(), 12);
    }
}

/// A `Log` closed after an unclean open, before the caller set its (caller-owned) high
/// watermark, leaves it out of `replication-offset-checkpoint`: the close writes the
/// clean-shutdown marker, so a stale entry would be trusted by the next open. Before: the close
/// wrote the stale 4 and the next open's stop cut the committed records 4..12.
#[test]
fn a_close_after_an_unclean_open_does_not_launder_a_caller_owned_high_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let dir = data.join("mirror-0");
    let config = config().0.with_high_watermark(HighWatermark::Manual);
    let mut log = Log::open(&dir, config.clone()).unwrap();
    mirror_twelve(&mut log);
    log.set_high_watermark(12).unwrap();
    log.flush().unwrap();
    drop(log); // an unclean shutdown
    let checkpoint = data.join("replication-offset-checkpoint");
    std::fs::write(&checkpoint, "0\n1\nmirror 0 4\n").unwrap();

    let log = Log::open(&dir, config.clone()).unwrap();
    assert!(!log.recovery_report().had_clean_shutdown);
    log.close().unwrap();
    assert!(data.join(".kafka_cleanshutdown").exists());
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), "0\n0\n");

    let log = Log::open(&dir, config).unwrap();
    assert!(log.recovery_report().had_clean_shutdown);
    let refused = log.stop_mirroring();
    assert!(
        matches!(
            refused,
            Err(Error::Mirror(
                seglog::recovery::MirrorError::HighWatermarkUnknown
            ))
        ),
        "{refused:?}"
    );
    assert_eq!(log.log_end_offset(), 12, "nothing cut");
}

/// The directory's own checkpoint timer does not write a caller-owned high watermark an
/// unclean open could not re-establish either: it writes the partition whose high watermark the
/// caller set, and leaves the other one out (before: it wrote the stale 4 back).
#[test]
fn the_checkpoint_timer_leaves_out_a_high_watermark_that_is_not_known() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (config, clock) = config();
    let config = config.with_high_watermark(HighWatermark::Manual);
    let mut log = Log::open(data.join("mirror-0"), config.clone()).unwrap();
    mirror_twelve(&mut log);
    log.flush().unwrap();
    drop(log); // an unclean shutdown
    let checkpoint = data.join("replication-offset-checkpoint");
    std::fs::write(&checkpoint, "0\n1\nmirror 0 4\n").unwrap();
    std::fs::create_dir(data.join("other-0")).unwrap();

    let dir = LogDir::open(&data, config).unwrap();
    assert!(!dir.had_clean_shutdown());
    dir.partition(&TopicPartition::new("other", 0))
        .unwrap()
        .set_high_watermark(0)
        .unwrap();
    clock.set(T0 + 5_000);
    let mut text = String::new();
    for _ in 0..600 {
        text = std::fs::read_to_string(&checkpoint).unwrap();
        if text.contains("other") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        text,
        "0\n1\nother 0 0\n",
        "{:?}",
        dir.high_watermark_checkpoint_error()
    );
    drop(dir);
}

/// Defect: with the high watermark following the flushed log end, an unclean open set it to
/// the recovery point of the checkpoint (missing here: the log start), so a stop taken on the
/// partition log right after the open cut every committed mirrored record. The open now fsyncs
/// the recovered log and takes its end.
#[test]
fn an_unclean_open_reestablishes_a_flushed_log_end_high_watermark_before_a_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("mirror-0");
    let (config, _) = config();
    let mut log = Log::open(&dir, config.clone()).unwrap();
    mirror_twelve(&mut log);
    log.with_partition(|p| p.flush()).unwrap().unwrap(); // durable, but no checkpoint says so
    drop(log);
    for name in [
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
    ] {
        let _ = std::fs::remove_file(tmp.path().join("data").join(name));
    }

    let dir_log = LogDir::open(tmp.path().join("data"), config).unwrap();
    assert!(!dir_log.had_clean_shutdown());
    let tp = TopicPartition::new("mirror", 0);
    let partition = dir_log.partition(&tp).unwrap();
    assert_eq!(partition.high_watermark(), 12);
    let stop = partition.with_partition(|p| p.stop_mirroring()).unwrap();
    assert_eq!(stop.unwrap(), 12);
    assert_eq!(
        partition.log_end_offset(),
        13,
        "twelve records and the barrier"
    );
}

/// The directory writes `replication-offset-checkpoint` on its own timer
/// (`replica.high.watermark.checkpoint.interval.ms`): after the last call the partition stays
/// idle, the clock passes the interval, and the checkpoint appears with no further call.
#[test]
fn the_high_watermark_checkpoint_appears_on_an_idle_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (config, clock) = config();
    let config = config.with_high_watermark(HighWatermark::LogEnd);
    let checkpoint = data.join("replication-offset-checkpoint");
    let log = Log::open(data.join("idle-0"), config).unwrap();
    log.append(&batch(1, 0, &[b"a", b"b", b"c"])).unwrap();
    assert_eq!(log.high_watermark(), 3);
    assert!(
        !checkpoint.exists(),
        "no flush, no close, no checkpoint call"
    );

    clock.set(T0 + 5_000);
    // No call on the log from here on: wait (bounded) for the timer thread.
    let mut text = String::new();
    for _ in 0..600 {
        if let Ok(t) = std::fs::read_to_string(&checkpoint) {
            text = t;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(text, "0\n1\nidle 0 3\n");
    drop(log);
}

/// Kafka's `kafka-log-flusher` and `kafka-recovery-point-checkpoint` tasks run on the log
/// directory's own thread: with `Config::flush_interval_ms` an append becomes durable (and,
/// under the default high-watermark policy, readable) with no call, and the recovery point it
/// reached is checkpointed, so a crash afterwards recovers nothing below it.
#[test]
fn background_flushes_make_appends_readable_and_checkpoint_the_recovery_point() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (config, clock) = config();
    let mut config = config.with_flush_interval_ms(1_000);
    config.recovery_point_checkpoint_interval_ms = 2_000;
    let mut dir = LogDir::open(&data, config.clone()).unwrap();
    let log = dir.create_partition(TopicPartition::new("bg", 0)).unwrap();
    log.append(&batch(1, 0, &[b"a", b"b", b"c"])).unwrap();
    assert!(log.readable_range(IsolationLevel::ReadCommitted).is_empty());
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        for _ in 0..600 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        panic!("{what} never happened");
    };
    clock.set(T0 + 1_000);
    // No call on the log or the directory from here on.
    wait_for("the background flush", &|| {
        log.readable_range(IsolationLevel::ReadCommitted) == (0..3)
    });
    assert_eq!(log.recovery_point(), 3);
    let checkpoint = data.join("recovery-point-offset-checkpoint");
    clock.set(T0 + 2_000);
    wait_for("the recovery-point checkpoint", &|| {
        std::fs::read_to_string(&checkpoint).is_ok_and(|t| t == "0\n1\nbg 0 3\n")
    });
    log.append(&batch(1, 3, &[b"d"])).unwrap();
    drop((log, dir)); // a crash: no close

    let dir = LogDir::open(&data, config.without_background_tasks()).unwrap();
    let report = &dir.recovery_reports()[0];
    assert!(!report.had_clean_shutdown);
    assert_eq!(
        report.recovery_point, 3,
        "recovery starts at the checkpointed point"
    );
    assert_eq!(report.log_end_offset, 4);
}

/// Kafka's `file.delete.delay.ms`: the segments a truncation removes wait as `.deleted` files
/// (a reader holding one reads on), and the log directory's own thread removes them once the
/// delay passed on the clock, with no call.
#[test]
fn the_directory_thread_removes_deleted_segment_files_after_the_delay() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (config, clock) = config();
    let mut dir = LogDir::open(&data, config).unwrap();
    let log = dir.create_partition(TopicPartition::new("del", 0)).unwrap();
    for seq in 0..3 {
        log.append(&batch(1, seq, &[b"a"])).unwrap();
        log.roll().unwrap();
    }
    assert!(log.truncate_to(1).unwrap());
    let part = data.join("del-0");
    let deleted = || -> Vec<String> {
        std::fs::read_dir(&part)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".deleted"))
            .collect()
    };
    let waiting = deleted();
    assert!(
        waiting.contains(&"00000000000000000002.log.deleted".to_owned()),
        "{waiting:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(deleted(), waiting, "removed before the delay passed");
    clock.set(T0 + 60_000);
    for _ in 0..600 {
        if deleted().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    assert_eq!(deleted(), Vec::<String>::new());
    assert_eq!(log.log_end_offset(), 1);
}

/// `Log::verify` is the read-only plan on the live partition: nothing to change on a sound log;
/// bytes that are not a batch at the end of the active segment are a cut it reports, without
/// touching the file.
#[test]
fn verify_plans_recovery_of_the_live_partition_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("checked-0");
    let log = Log::open(&dir, config().0).unwrap();
    log.append(&batch(1, 0, &[b"a", b"b"])).unwrap();
    log.flush().unwrap();
    let plan = log.verify().unwrap();
    assert!(!plan.changes_data(), "{:?}", plan.cuts());
    assert_eq!(plan.log_end_offset, 2);

    let segment = dir.join("00000000000000000000.log");
    let size = std::fs::metadata(&segment).unwrap().len();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    std::io::Write::write_all(&mut file, &[0xAB; 40]).unwrap();
    let plan = log.verify().unwrap();
    let cuts = plan.cuts();
    assert_eq!(cuts.len(), 1, "{cuts:?}");
    assert_eq!(cuts[0].bytes, 40);
    assert_eq!(
        std::fs::metadata(&segment).unwrap().len(),
        size + 40,
        "nothing changed"
    );
}

/// `Config::mirror_stop_policy` chooses what the facade's stop does with a transaction open at
/// the stop: truncate it away (the default) or abort it with a marker and keep everything.
#[test]
fn the_configured_stop_policy_decides_the_fate_of_an_open_transaction() {
    for (policy, barrier, end) in [
        (seglog::StopPolicy::TruncateToLastStable, 12, 13),
        (seglog::StopPolicy::AbortOpenTransactions, 14, 15),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data").join("mirror-0");
        let config = config().0.with_mirror_stop_policy(policy);
        let mut log = Log::open(&dir, config).unwrap();
        mirror_twelve(&mut log);
        let mut b = RecordBatchBuilder::new(12)
            .partition_leader_epoch(2)
            .producer(12, 0, 0)
            .transactional(true);
        b.append(T0, None, Some(b"open"), &[]).unwrap();
        log.append_as_mirror(&b.build()).unwrap();
        assert_eq!(log.stop_mirroring().unwrap(), barrier, "{policy:?}");
        assert_eq!(log.log_end_offset(), end, "{policy:?}");
        assert_eq!(
            values(&log, IsolationLevel::ReadCommitted).len(),
            12,
            "{policy:?}"
        );
    }
}

/// `Log::fetch` returns Kafka's bytes: a fetch may end in a batch cut short by `max_bytes`, which
/// `consume` leaves for the next fetch; fetching from each `next_fetch_offset` reads every record
/// once, in order; without `min_one_message` a first batch larger than `max_bytes` comes back
/// as its first bytes only, `first_entry_incomplete`, and nothing to consume.
#[test]
fn fetches_may_end_in_a_batch_cut_short_and_the_next_fetch_goes_on_from_it() {
    use seglog::FetchIsolation;
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();
    let log = Log::open(tmp.path().join("d/t-0"), config).unwrap();
    for i in 0..10 {
        log.append(&batch(
            1,
            i * 3,
            &[b"aaaaaaaaaa", b"bbbbbbbbbb", b"cccccccccc"],
        ))
        .unwrap();
    }
    log.flush().unwrap();
    let batch_len = batch(1, 0, &[b"aaaaaaaaaa", b"bbbbbbbbbb", b"cccccccccc"]).len();

    let cut = log
        .fetch(0, batch_len + 20, FetchIsolation::HighWatermark, true)
        .unwrap();
    assert_eq!(
        cut.records.len(),
        batch_len + 20,
        "Kafka's bytes: one batch and 20 more"
    );
    assert_eq!(cut.next_fetch_offset, 3);
    let records = seglog::recovery::consume(&cut).unwrap();
    assert_eq!(
        records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0, 1, 2]
    );

    let mut offsets = Vec::new();
    let mut next = 0;
    while next < log.log_end_offset() {
        let f = log
            .fetch(next, batch_len / 2, FetchIsolation::HighWatermark, true)
            .unwrap();
        offsets.extend(
            seglog::recovery::consume(&f)
                .unwrap()
                .iter()
                .map(|r| r.offset),
        );
        assert!(f.next_fetch_offset > next, "no progress at {next}");
        next = f.next_fetch_offset;
    }
    assert_eq!(offsets, (0..30).collect::<Vec<i64>>());

    let short = log
        .fetch(3, 10, FetchIsolation::HighWatermark, false)
        .unwrap();
    assert_eq!(short.records.len(), 10);
    assert!(short.first_entry_incomplete);
    assert_eq!(short.next_fetch_offset, 3);
    assert!(seglog::recovery::consume(&short).unwrap().is_empty());
    log.close().unwrap();
}

/// A torn tail in the active segment after a clean shutdown (bytes of a batch cut short, as a
/// copy or a hand edit leaves them): the open recovers the segment, cutting the torn bytes into
/// quarantine and reporting them, instead of taking the segment's end from its last index entry
/// (which, when that entry's batch is the torn one, is the segment's base offset) and appending
/// after the torn bytes.
#[test]
fn a_torn_active_segment_after_a_clean_shutdown_is_recovered() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("torn-0");
    let (config, _) = config();
    let log = Log::open(&dir, config.clone()).unwrap();
    let value = [7u8; 1_000];
    for i in 0..20 {
        log.append(&batch(1, i, &[&value])).unwrap();
    }
    log.close().unwrap();
    let segment = dir.join("00000000000000000000.log");
    let size = std::fs::metadata(&segment).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(size - 500).unwrap();
    drop(file);

    let log = Log::open(&dir, config).unwrap();
    let report = log.recovery_report().clone();
    assert!(report.had_clean_shutdown);
    assert_eq!(report.cut.len(), 1, "{report}");
    assert!(report.quarantine_dir.is_some(), "{report}");
    assert_eq!(log.log_end_offset(), 19, "the 19 whole batches");
    log.append(&batch(1, 19, &[b"after"])).unwrap();
    log.flush().unwrap();
    let values = values(&log, IsolationLevel::ReadUncommitted);
    assert_eq!(values.len(), 20);
    assert_eq!(
        values[19],
        b"after".to_vec(),
        "read back where it was written"
    );
    log.close().unwrap();
}
