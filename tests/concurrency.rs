//! The concurrency model of `docs/design.md` ("Concurrency"): `Log` and `LogDir` are `Send +
//! Sync`, one writer per partition and any number of readers on other threads, reads never
//! taking the writer's lock.
//!
//! The stress test runs one writer that appends plain and transactional batches (committed and
//! aborted), flushes, rolls, applies retention, moves the log start and truncates, beside reader
//! threads at both isolation levels. Every record a reader sees must be one the writer
//! acknowledged at that offset (the writer notes each value before its append, so a reader never
//! sees a value the list lacks), and no record of an aborted transaction may reach a
//! `ReadCommitted` reader.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seglog::record_format::{end_txn_marker_batch, ControlRecordType, RecordBatchBuilder};
use seglog::segment_store::LogConfig;
use seglog::{AppendOrigin, Clock, Config, Error, IsolationLevel, Log, LogDir, TopicPartition};
use testkit::XorShift;

const T0: i64 = 1_700_000_000_000;
const TXN_PRODUCER: i64 = 1_000;

#[test]
fn log_and_log_dir_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Log>();
    send_sync::<LogDir>();
    send_sync::<seglog::RecordIter>();
    send_sync::<seglog::recovery::LogReader>();
}

/// The values acknowledged at each offset, in any generation (a truncation lets an offset be
/// written again).
#[derive(Default)]
struct Acked {
    at: Mutex<HashMap<i64, Vec<Vec<u8>>>>,
}

impl Acked {
    fn note(&self, offset: i64, value: &[u8]) {
        let mut at = self.at.lock().unwrap();
        at.entry(offset).or_default().push(value.to_vec());
    }

    fn holds(&self, offset: i64, value: &[u8]) -> bool {
        let at = self.at.lock().unwrap();
        at.get(&offset)
            .is_some_and(|vs| vs.iter().any(|v| v.as_slice() == value))
    }
}

struct Writer {
    log: Log,
    clock: Arc<testkit::ManualClock>,
    acked: Arc<Acked>,
    rng: XorShift,
    next_value: u64,
    txn_seq: i32,
    round: u32,
    deleted_segments: usize,
    truncated: usize,
}

impl Writer {
    /// One batch of `n` records, each value noted at the offset it will get.
    fn batch(&mut self, prefix: &str, n: usize, producer: Option<i32>) -> Vec<u8> {
        let base = self.log.log_end_offset();
        let mut b = RecordBatchBuilder::new(base);
        if let Some(seq) = producer {
            b = b.producer(TXN_PRODUCER, 0, seq).transactional(true);
        }
        for i in 0..n {
            self.next_value += 1;
            let value = format!("{prefix}{}", self.next_value).into_bytes();
            self.acked.note(base + i as i64, &value);
            b.append(self.clock.now_ms(), Some(b"k"), Some(&value), &[])
                .unwrap();
        }
        b.build()
    }

    fn append_plain(&mut self) {
        let n = 1 + self.rng.below(4) as usize;
        let b = self.batch("p", n, None);
        self.log.append(&b).unwrap();
    }

    /// A transaction of two batches, then its COMMIT or ABORT marker.
    fn transaction(&mut self, commit: bool) {
        let prefix = if commit { "c" } else { "a" };
        for _ in 0..2 {
            let n = 1 + self.rng.below(3) as usize;
            let b = self.batch(prefix, n, Some(self.txn_seq));
            self.txn_seq += n as i32;
            self.log.append(&b).unwrap();
        }
        let kind = if commit {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        };
        let marker = end_txn_marker_batch(0, self.clock.now_ms(), 0, TXN_PRODUCER, 0, kind, 0);
        self.log
            .append_as_leader(&marker, 0, AppendOrigin::Coordinator)
            .unwrap();
    }

    fn run(&mut self, rounds: u32) {
        for _ in 0..rounds {
            self.round += 1;
            let round = self.round;
            self.clock.advance(1_000);
            for _ in 0..4 {
                self.append_plain();
            }
            self.transaction(!round.is_multiple_of(3));
            // Plain batches after the marker: the ones a truncation may take back.
            let safe = self.log.log_end_offset();
            for _ in 0..3 {
                self.append_plain();
            }
            self.deleted_segments += self.log.apply_retention().unwrap();
            match round % 8 {
                1 | 5 => self.log.flush().unwrap(),
                2 => {
                    self.log.roll().unwrap();
                }
                3 | 7 => {
                    self.log.flush().unwrap();
                    self.deleted_segments += self.log.apply_retention().unwrap();
                }
                4 => {
                    // Readers may have seen these records: the offsets get new values.
                    let truncated = self.log.truncate_to(safe).unwrap();
                    self.truncated += usize::from(truncated);
                }
                6 => {
                    let hw = self.log.high_watermark();
                    let start = self.log.log_start_offset();
                    self.log
                        .delete_records_before(start + (hw - start) / 4)
                        .unwrap();
                }
                _ => {}
            }
        }
        self.log.flush().unwrap();
    }
}

#[derive(Default)]
struct ReaderStats {
    records: AtomicU64,
    reads: AtomicU64,
    out_of_range: AtomicU64,
    violations: Mutex<Vec<String>>,
}

fn read_loop(
    log: Log,
    isolation: IsolationLevel,
    iterate: bool,
    seed: u64,
    stop: Arc<AtomicBool>,
    acked: Arc<Acked>,
    stats: Arc<ReaderStats>,
) {
    let mut rng = XorShift::new(seed);
    while !stop.load(Ordering::Relaxed) {
        let range = log.readable_range(isolation);
        if range.is_empty() {
            std::thread::yield_now();
            continue;
        }
        // Half the reads near the log start, where retention races them.
        let span = (range.end - range.start) as u64;
        let span = if rng.below(2) == 0 {
            span.min(64)
        } else {
            span
        };
        let from = range.start + rng.below(span) as i64;
        let records = if iterate {
            match log.iter_from(from, isolation) {
                Ok(it) => it
                    .take(200)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(Error::from),
                Err(e) => Err(e),
            }
        } else {
            let max_bytes = 64 + rng.below(16 * 1024) as usize;
            log.consume(from, max_bytes, isolation)
        };
        stats.reads.fetch_add(1, Ordering::Relaxed);
        let records = match records {
            Ok(r) => r,
            // Retention, `delete_records_before` or a truncation moved a bound past the offset
            // between the range and the read: what Kafka answers too.
            Err(Error::Log(seglog::recovery::PartitionLogError::OffsetOutOfRange { .. })) => {
                stats.out_of_range.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => {
                stats
                    .violations
                    .lock()
                    .unwrap()
                    .push(format!("read at {from}: {e}"));
                continue;
            }
        };
        let mut last = i64::MIN;
        for r in &records {
            let value = r.value.clone().unwrap_or_default();
            if r.offset <= last {
                stats
                    .violations
                    .lock()
                    .unwrap()
                    .push(format!("offset {} after {last}", r.offset));
            }
            last = r.offset;
            if !acked.holds(r.offset, &value) {
                stats.violations.lock().unwrap().push(format!(
                    "{isolation:?}: offset {} holds {:?}, never acknowledged there",
                    r.offset,
                    String::from_utf8_lossy(&value)
                ));
            }
            if isolation == IsolationLevel::ReadCommitted && value.first() == Some(&b'a') {
                stats.violations.lock().unwrap().push(format!(
                    "ReadCommitted saw aborted record {:?} at {} (read from {from})",
                    String::from_utf8_lossy(&value),
                    r.offset
                ));
            }
        }
        stats
            .records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
    }
}

#[test]
fn readers_at_both_isolation_levels_see_only_acknowledged_records_beside_a_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let log_config = LogConfig {
        segment_bytes: 8 * 1024,
        retention_bytes: 64 * 1024,
        // The writer's clock moves a second per round: retention by time deletes segments all
        // the time, by size now and then.
        retention_ms: 4_000,
        index_interval_bytes: 256,
        max_index_size: 4096,
        ..LogConfig::default()
    };
    let clock = Arc::new(testkit::ManualClock::new(T0));
    let config = Config::default()
        .with_log_config(log_config)
        .with_clock(clock.clone());
    let log = Log::open(tmp.path().join("stress-0"), config).unwrap();
    let acked = Arc::new(Acked::default());
    let stop = Arc::new(AtomicBool::new(false));
    let kinds = [
        (IsolationLevel::ReadCommitted, false),
        (IsolationLevel::ReadUncommitted, false),
        (IsolationLevel::ReadCommitted, true),
        (IsolationLevel::ReadUncommitted, true),
    ];
    let stats: Vec<Arc<ReaderStats>> = kinds.iter().map(|_| Arc::default()).collect();
    let readers: Vec<_> = kinds
        .iter()
        .zip(&stats)
        .enumerate()
        .map(|(i, (&(isolation, iterate), stats))| {
            let (log, stop, acked, stats) =
                (log.clone(), stop.clone(), acked.clone(), stats.clone());
            std::thread::spawn(move || {
                read_loop(log, isolation, iterate, 7 + i as u64, stop, acked, stats)
            })
        })
        .collect();
    let mut writer = Writer {
        log: log.clone(),
        clock,
        acked: acked.clone(),
        rng: XorShift::new(3),
        next_value: 0,
        txn_seq: 0,
        round: 0,
        deleted_segments: 0,
        truncated: 0,
    };
    let started = Instant::now();
    let mut rounds = 0;
    // Enough rounds for many rolls, retentions and truncations, and time for the readers.
    while rounds < 400 || started.elapsed() < Duration::from_secs(2) {
        writer.run(8);
        rounds += 8;
        if rounds >= 4_000 {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    for ((isolation, iterate), s) in kinds.iter().zip(&stats) {
        let violations = s.violations.lock().unwrap();
        assert!(
            violations.is_empty(),
            "{isolation:?} iterate={iterate}: {violations:#?}"
        );
        let records = s.records.load(Ordering::Relaxed);
        assert!(
            records > 1_000,
            "{isolation:?} iterate={iterate}: only {records} records checked in {} reads",
            s.reads.load(Ordering::Relaxed)
        );
    }
    // The writer did what the test is about.
    assert!(
        writer.deleted_segments > 20,
        "retention deleted {} segments",
        writer.deleted_segments
    );
    assert!(writer.truncated > 10, "{} truncations", writer.truncated);
    log.close().unwrap();
}

/// A `LogDir`'s partitions are written by one thread each while others read them; closing the
/// directory closes every handle: writes fail with `Error::Closed`, reads with a closed log.
#[test]
fn a_log_dir_s_handles_work_from_other_threads_and_close_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = LogDir::open(tmp.path(), Config::default()).unwrap();
    let tps: Vec<TopicPartition> = (0..3).map(|p| TopicPartition::new("t", p)).collect();
    for tp in &tps {
        dir.create_partition(tp.clone()).unwrap();
    }
    let writers: Vec<_> = tps
        .iter()
        .map(|tp| {
            let log = dir.partition(tp).unwrap();
            std::thread::spawn(move || {
                for i in 0..50 {
                    let mut b = RecordBatchBuilder::new(0);
                    b.append(T0, None, Some(format!("{i}").as_bytes()), &[])
                        .unwrap();
                    log.append(&b.build()).unwrap();
                    if i % 10 == 9 {
                        log.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    dir.flush().unwrap();
    for tp in &tps {
        let log = dir.partition(tp).unwrap();
        let reader =
            std::thread::spawn(move || log.consume(0, 1 << 20, IsolationLevel::ReadCommitted));
        let records = reader.join().unwrap().unwrap();
        let values: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
            .collect();
        let expected: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        assert_eq!(values, expected, "{tp}");
    }
    let kept = dir.partition(&tps[0]).unwrap();
    dir.close().unwrap();
    let mut b = RecordBatchBuilder::new(0);
    b.append(T0, None, Some(b"late"), &[]).unwrap();
    assert!(matches!(kept.append(&b.build()), Err(Error::Closed(_))));
    assert!(kept.read(0, 1024, IsolationLevel::ReadUncommitted).is_err());
}

/// Kafka's cleaner beside a live log: a writer keeps appending keyed records (and rolling),
/// readers at both isolation levels keep reading, and cleaning passes run meanwhile. Every record
/// a reader sees is the one written at its offset (a pass removes records, never moves or
/// changes one), and at the end each key's newest value is the last one written for it.
#[test]
fn cleaning_passes_run_beside_a_writer_and_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(testkit::ManualClock::new(T0));
    let config = Config::default()
        .with_clock(clock.clone())
        .with_segment_bytes(4 * 1024)
        .with_high_watermark(seglog::HighWatermark::LogEnd)
        .with_cleaner(seglog::CleanerConfig::default());
    let log = Log::open(tmp.path().join("table-0"), config).unwrap();
    let acked = Arc::new(Acked::default());
    let stop = Arc::new(AtomicBool::new(false));
    const KEYS: u64 = 50;
    let writer = {
        let (log, acked, stop) = (log.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut last = HashMap::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) || n < 3_000 {
                let base = log.log_end_offset();
                let mut b = RecordBatchBuilder::new(base);
                for i in 0..4 {
                    n += 1;
                    let key = format!("k{}", (n * 7) % KEYS);
                    let value = format!("{key}=v{n}").into_bytes();
                    acked.note(base + i, &value);
                    b.append(T0 + n as i64, Some(key.as_bytes()), Some(&value), &[])
                        .unwrap();
                    last.insert(key, value);
                }
                log.append(&b.build()).unwrap();
                if n.is_multiple_of(400) {
                    log.flush().unwrap();
                }
            }
            last
        })
    };
    let stats: Vec<Arc<ReaderStats>> = (0..2).map(|_| Arc::default()).collect();
    let readers: Vec<_> = [
        IsolationLevel::ReadCommitted,
        IsolationLevel::ReadUncommitted,
    ]
    .into_iter()
    .zip(&stats)
    .enumerate()
    .map(|(i, (isolation, stats))| {
        let (log, stop, acked, stats) = (log.clone(), stop.clone(), acked.clone(), stats.clone());
        std::thread::spawn(move || {
            read_loop(log, isolation, i == 1, 11 + i as u64, stop, acked, stats)
        })
    })
    .collect();
    let mut removed = 0u64;
    let mut passes = 0;
    while passes < 12 {
        std::thread::sleep(Duration::from_millis(30));
        let report = log.compact().unwrap();
        removed += report
            .groups
            .iter()
            .map(|g| g.records_read - g.records_retained)
            .sum::<u64>();
        passes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let last = writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    for s in &stats {
        let violations = s.violations.lock().unwrap();
        assert!(violations.is_empty(), "{violations:#?}");
        assert!(s.records.load(Ordering::Relaxed) > 1_000);
    }
    assert!(removed > 1_000, "the passes removed {removed} records");
    // Each key's newest value, read back: the last written.
    log.roll().unwrap();
    log.compact().unwrap();
    let mut newest = HashMap::new();
    for r in log
        .iter_from(log.log_start_offset(), IsolationLevel::ReadUncommitted)
        .unwrap()
    {
        let r = r.unwrap();
        assert!(acked.holds(r.offset, r.value.as_deref().unwrap()));
        newest.insert(String::from_utf8(r.key.unwrap()).unwrap(), r.value.unwrap());
    }
    assert_eq!(newest.len(), last.len());
    for (k, v) in &last {
        assert_eq!(newest.get(k), Some(v), "{k}");
    }
    log.close().unwrap();
}

/// A `read_committed` read beside a writer that rolls a segment every few appends never fails:
/// a roll adds a segment and takes nothing away, so the read's check that no segment went
/// between its bytes and its aborted transactions (`LocalLog::generation`) does not count it.
/// Counted, the read failed as out of range once 16 attempts in a row saw a roll.
#[test]
fn read_committed_reads_beside_a_rolling_writer_do_not_fail() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::default().with_log_config(LogConfig {
        segment_bytes: 600,
        ..LogConfig::default()
    });
    let log = Log::open(dir.path().join("rolls-0"), config.clone()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (log, stop) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let range = log.readable_range(IsolationLevel::ReadCommitted);
                for offset in [range.start, range.end.saturating_sub(1).max(range.start)] {
                    log.read(offset, 1 << 16, IsolationLevel::ReadCommitted)
                        .expect("a read_committed read beside rolls");
                    reads += 1;
                }
            }
            reads
        })
    };
    let now = config.env.clock.now_ms();
    for n in 0..3_000i64 {
        let mut b = RecordBatchBuilder::new(log.log_end_offset());
        b.append(now, Some(b"k"), Some(&[n as u8; 200]), &[])
            .unwrap();
        log.append(&b.build()).unwrap();
        if n % 10 == 0 {
            log.flush().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().expect("the reader") > 0);
}
