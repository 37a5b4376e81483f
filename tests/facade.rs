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

    let mut log = Log::open(&dir, config.clone()).unwrap();
    assert!(dir.is_dir(), "open creates the partition directory");
    assert_eq!(log.topic_partition(), &TopicPartition::new("events", 3));
    log.append(&batch(1, 0, &[b"a", b"b"])).unwrap();
    log.close().unwrap();

    let mut log = Log::open(&dir, config.clone()).unwrap();
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
        log.producer_state().last_entry(1).map(|e| e.last_seq()),
        Some(2)
    );
}

#[test]
fn the_readable_range_follows_the_configured_high_watermark() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();

    let mut flushed = Log::open(tmp.path().join("a/t-0"), config.clone()).unwrap();
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

    let mut at_end = Log::open(
        tmp.path().join("b/t-0"),
        config.clone().with_high_watermark(HighWatermark::LogEnd),
    )
    .unwrap();
    at_end.append(&batch(1, 0, &[b"x"])).unwrap();
    assert_eq!(at_end.readable_range(IsolationLevel::ReadUncommitted), 0..1);

    let mut manual = Log::open(
        tmp.path().join("c/t-0"),
        config.with_high_watermark(HighWatermark::Manual),
    )
    .unwrap();
    manual.append(&batch(1, 0, &[b"x"])).unwrap();
    manual.flush().unwrap();
    assert!(values(&manual, IsolationLevel::ReadUncommitted).is_empty());
    assert_eq!(manual.set_high_watermark(1), 1);
    assert_eq!(
        values(&manual, IsolationLevel::ReadUncommitted),
        [b"x".to_vec()]
    );
}

#[test]
fn read_committed_stops_at_an_open_transaction_and_hides_aborted_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (config, _) = config();
    let mut log = Log::open(
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
    let mut log = Log::open(&dir, config.clone().with_producer_id_expiration_ms(60_000)).unwrap();
    log.append(&batch(42, 0, &[b"v"])).unwrap();
    log.close().unwrap();

    clock.set(T0 + 59_999);
    let log = Log::open(&dir, config.clone().with_producer_id_expiration_ms(60_000)).unwrap();
    assert!(log.expired_producers().is_empty());
    assert!(log.producer_state().last_entry(42).is_some());
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
    assert!(log.producer_state().last_entry(42).is_none());
    assert!(log
        .recovery_report()
        .to_string()
        .contains("1 expired at load"));
}
