//! `Log::compact` on generated logs (real files in temp dirs): plain, idempotent and
//! transactional producers, commits and aborts, tombstones and KIP-1279 `MIRROR_PID_RESET`
//! barriers, over several segments, cleaned with small and ample offset maps. Invariants:
//! * producer state rebuilt from scratch from the compacted log equals the state rebuilt from
//!   the original (epoch, last sequence, last offset, coordinator epoch, open transaction) for
//!   every producer (the cleaner keeps each producer's last batch);
//! * every key's newest record, as a `read_committed` consumer sees it, keeps its offset and
//!   value;
//! * every barrier stays, at its offset.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use seglog::record_format::{
    end_txn_marker_batch, is_mirror_pid_reset_batch, mirror_pid_reset_batch, ControlRecordType,
    RecordBatch, RecordBatchBuilder,
};
use seglog::{CleanerConfig, Config, IsolationLevel, Log};
use testkit::ManualClock;

const T0: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// Records of producer `p` (0: no producer id; 1-2 idempotent; 3-4 transactional):
    /// (key, tombstone).
    Data(u8, Vec<(u8, bool)>),
    /// Ends producer `p`'s transaction (3-4), commit or abort.
    End(u8, bool),
    /// A MIRROR_PID_RESET barrier.
    Barrier,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..5, prop::collection::vec((0u8..12, prop::bool::weighted(0.2)), 1..5))
            .prop_map(|(p, r)| Op::Data(p, r)),
        3 => (3u8..5, any::<bool>()).prop_map(|(p, c)| Op::End(p, c)),
        1 => Just(Op::Barrier),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerView {
    epoch: i16,
    last_seq: i32,
    last_data_offset: i64,
    coordinator_epoch: i32,
    txn_first_offset: Option<i64>,
}

fn producers(log: &Log) -> BTreeMap<i64, ProducerView> {
    log.producer_state()
        .unwrap()
        .active_producers()
        .into_iter()
        .map(|(pid, e)| {
            (
                pid,
                ProducerView {
                    epoch: e.producer_epoch(),
                    last_seq: e.last_seq(),
                    last_data_offset: e.last_data_offset(),
                    coordinator_epoch: e.coordinator_epoch(),
                    txn_first_offset: e.current_txn_first_offset(),
                },
            )
        })
        .collect()
}

/// Every record a consumer sees from the log start, fetch after fetch (a fetch stops at the end
/// of a segment).
fn consume_all(log: &Log, isolation: IsolationLevel) -> Vec<seglog::recovery::ConsumedRecord> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    loop {
        let fetch = log.read(offset, 1 << 24, isolation).unwrap();
        if fetch.records.is_empty() {
            return out;
        }
        out.extend(seglog::recovery::consume(&fetch).unwrap());
        offset = batch_offsets(&fetch.records).last().unwrap().1 + 1;
    }
}

/// (base offset, last offset, is a barrier) of each batch in `bytes`.
fn batch_offsets(bytes: &[u8]) -> Vec<(i64, i64, bool)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let b = RecordBatch::new(&bytes[pos..pos + 12 + len], pos as u64).unwrap();
        let barrier = is_mirror_pid_reset_batch(&b).unwrap();
        out.push((b.base_offset(), b.last_offset(), barrier));
        pos += 12 + len;
    }
    out
}

/// Each key's newest record under read_committed: (offset, value).
fn newest(log: &Log) -> BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> {
    let mut out = BTreeMap::new();
    for r in consume_all(log, IsolationLevel::ReadCommitted) {
        if let Some(k) = r.key {
            out.insert(k, (r.offset, r.value));
        }
    }
    out
}

/// Offsets of the barrier batches in the partition's `.log` files.
fn barriers(dir: &Path) -> Vec<i64> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for p in names {
        let bytes = std::fs::read(&p).unwrap();
        out.extend(
            batch_offsets(&bytes)
                .into_iter()
                .filter(|b| b.2)
                .map(|b| b.0),
        );
    }
    out
}

fn config(clock: &Arc<ManualClock>, dedupe: u64) -> Config {
    Config::default()
        .with_clock(clock.clone())
        .with_segment_bytes(1024)
        .with_cleaner(CleanerConfig {
            dedupe_buffer_size: dedupe,
            ..CleanerConfig::default()
        })
}

/// A log at `dir` with `ops` written and its segment rolled, so the cleaner may take all of
/// it; still open, with its log end offset.
fn written(dir: &Path, clock: &Arc<ManualClock>, ops: &[Op]) -> (Log, i64) {
    let mut log = Log::open(dir, config(clock, 1 << 20)).unwrap();
    write(&mut log, ops);
    log.roll().unwrap();
    let end = log.log_end_offset();
    (log, end)
}

fn write(log: &mut Log, ops: &[Op]) {
    let mut seq = [0i32; 5];
    let mut in_txn = [false; 5];
    let mut ts = T0;
    for op in ops {
        ts += 1;
        let offset = log.log_end_offset();
        let bytes = match op {
            Op::Data(p, recs) => {
                let p = usize::from(*p);
                let mut b = RecordBatchBuilder::new(offset);
                if p > 0 {
                    b = b.producer(100 + p as i64, 0, seq[p]).transactional(p >= 3);
                    seq[p] += recs.len() as i32;
                    in_txn[p] |= p >= 3;
                }
                for (k, tomb) in recs {
                    let key = format!("k{k}");
                    let value = format!("v{offset}-{k}");
                    let v = if *tomb { None } else { Some(value.as_bytes()) };
                    b.append(ts, Some(key.as_bytes()), v, &[]).unwrap();
                }
                b.build()
            }
            Op::End(p, commit) => {
                let p = usize::from(*p);
                if !in_txn[p] {
                    continue;
                }
                in_txn[p] = false;
                let t = if *commit {
                    ControlRecordType::Commit
                } else {
                    ControlRecordType::Abort
                };
                end_txn_marker_batch(offset, ts, 0, 100 + p as i64, 0, t, 5)
            }
            Op::Barrier => {
                // Kafka's rule: no barrier while a transaction is open.
                if in_txn.iter().any(|t| *t) {
                    continue;
                }
                seq = [0; 5];
                mirror_pid_reset_batch(offset, ts, 0, "source-cluster")
            }
        };
        log.append_as_follower(&bytes).unwrap();
    }
}

fn check(ops: &[Op], dedupe: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("table-0");
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let mut log = Log::open(&dir, config(&clock, dedupe)).unwrap();
    write(&mut log, ops);
    log.roll().unwrap();
    let end = log.log_end_offset();
    log.set_high_watermark(end).unwrap();
    let before_producers = producers(&log);
    let before_newest = newest(&log);
    let before_barriers = barriers(&dir);

    // Pass after pass until the cleaner has been through the whole log.
    let mut passes = 0;
    loop {
        let report = log.compact().unwrap();
        passes += 1;
        if report.groups.is_empty() || report.end_offset >= end || passes > 50 {
            break;
        }
    }
    assert_eq!(newest(&log), before_newest, "newest value of every key");
    assert_eq!(barriers(&dir), before_barriers, "barriers kept in place");
    log.close().unwrap();

    // Producer state from every snapshot: each one alone (those after it removed), the
    // compacted log replayed from it to the end.
    let snapshots: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    assert!(!snapshots.is_empty(), "no snapshot to load from");
    for snapshot in &snapshots {
        let copy = tmp.path().join("from-snapshot");
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(&tmp.path().join("data"), &copy);
        let copied = copy.join("table-0");
        for other in &snapshots {
            if other.file_name() > snapshot.file_name() {
                std::fs::remove_file(copied.join(other.file_name().unwrap())).unwrap();
            }
        }
        let log = Log::open(&copied, config(&clock, dedupe)).unwrap();
        assert_eq!(
            producers(&log),
            before_producers,
            "producer state from {}",
            snapshot.display()
        );
        log.close().unwrap();
    }

    // Producer state from scratch: no snapshot, every segment replayed.
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let mut cfg = config(&clock, dedupe);
    cfg.full_recovery = true;
    let log = Log::open(&dir, cfg).unwrap();
    assert_eq!(
        producers(&log),
        before_producers,
        "producer state from scratch"
    );
    assert_eq!(log.log_end_offset(), end, "log end offset");
    log.close().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn compaction_keeps_producers_newest_values_and_barriers(
        ops in prop::collection::vec(op(), 20..120),
        small_map in any::<bool>(),
    ) {
        // 8 slots (7 keys a pass: several passes) or ample.
        check(&ops, if small_map { 24 * 8 } else { 1 << 20 });
    }
}

#[test]
fn compaction_removes_superseded_values() {
    let ops: Vec<Op> = (0..40)
        .map(|i| Op::Data((i % 3) as u8, vec![((i % 4) as u8, false)]))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("table-0");
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let (log, end) = written(&dir, &clock, &ops);
    log.set_high_watermark(end).unwrap();
    let report = log.compact().unwrap();
    assert_eq!(report.end_offset, end);
    let kept = consume_all(&log, IsolationLevel::ReadUncommitted);
    // 4 keys: the newest of each, nothing else (empty batches keep producers' last batches).
    let offsets: Vec<i64> = kept.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![36, 37, 38, 39]);
    log.close().unwrap();
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// `seglog compact --dry-run DIR` with the cleaner's defaults, the clock at `T0 + 10 s` and
/// `segment_bytes` for grouping.
fn compact_args(dir: &Path, segment_bytes: u64) -> seglog::cli::compact::CompactArgs {
    seglog::cli::compact::CompactArgs {
        dir: dir.to_path_buf(),
        dry_run: true,
        now_ms: Some(T0 + 10_000),
        dedupe_buffer_size: 1 << 20,
        delete_retention_ms: 86_400_000,
        min_compaction_lag_ms: 0,
        segment_bytes,
        topic: Vec::new(),
        all_topics: false,
        due: false,
        min_cleanable_dirty_ratio: 0.5,
        max_compaction_lag_ms: i64::MAX,
        threads: 1,
        io_max_bytes_per_second: None,
    }
}

#[test]
fn seglog_compact_dry_run_writes_nothing_and_the_run_does_what_it_planned() {
    use seglog::cli::compact::{run, CompactArgs};
    use seglog::cli::Status;
    let ops: Vec<Op> = (0..60)
        .map(|i| Op::Data((i % 5) as u8, vec![((i % 6) as u8, i % 7 == 0)]))
        .chain([Op::End(3, true), Op::End(4, false)])
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("table-0");
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let (log, _) = written(&dir, &clock, &ops);
    log.close().unwrap();
    let args = compact_args(&dir, 1024);
    let before = tree(tmp.path());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run(&args, &mut out, &mut err), Status::Success);
    assert_eq!(tree(tmp.path()), before, "the dry run changed files");
    let planned = String::from_utf8(out).unwrap();
    assert!(planned.contains("would clean up to offset"), "{planned}");

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let args = CompactArgs {
        dry_run: false,
        ..args
    };
    assert_eq!(run(&args, &mut out, &mut err), Status::Success);
    let done = String::from_utf8(out).unwrap();
    assert_eq!(
        done.replace("cleaned", "CLEANED")
            .lines()
            .filter(|l| !l.contains("cleaner-offset-checkpoint"))
            .collect::<Vec<_>>(),
        planned
            .replace("would clean", "CLEANED")
            .replace("would write", "wrote")
            .lines()
            .collect::<Vec<_>>(),
        "the run did what the dry run planned"
    );
    assert_ne!(tree(tmp.path()), before, "the run changed the log");
    let checkpoint = std::fs::read_to_string(tmp.path().join("data/cleaner-offset-checkpoint"));
    assert!(
        checkpoint.unwrap().contains("table 0 "),
        "checkpoint written"
    );
}

/// The real file system, refusing every mutation from the `fail_at`-th on (an I/O error where a
/// crash would stop the pass): what is on disk then is what a crash there leaves, minus page
/// cache losses.
#[derive(Debug)]
struct FailingFs {
    ops: std::sync::atomic::AtomicU64,
    fail_at: u64,
}

impl FailingFs {
    fn step(&self, path: &Path) -> seglog::segment_store::Result<()> {
        let n = self.ops.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if n >= self.fail_at {
            return Err(seglog::segment_store::SegmentError::io(
                path,
                "injected",
                std::io::Error::other("injected failure"),
            ));
        }
        Ok(())
    }
}

impl seglog::segment_store::Storage for FailingFs {
    fn open(
        &self,
        path: &Path,
        mode: seglog::segment_store::OpenMode,
    ) -> seglog::segment_store::Result<Box<dyn seglog::segment_store::FileHandle>> {
        if mode.writable() {
            self.step(path)?;
        }
        seglog::segment_store::StdFs.open(path, mode)
    }
    fn exists(&self, path: &Path) -> seglog::segment_store::Result<bool> {
        seglog::segment_store::StdFs.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> seglog::segment_store::Result<()> {
        self.step(from)?;
        seglog::segment_store::StdFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> seglog::segment_store::Result<()> {
        self.step(path)?;
        seglog::segment_store::StdFs.remove_file(path)
    }
    fn list_dir(&self, dir: &Path) -> seglog::segment_store::Result<Vec<std::ffi::OsString>> {
        seglog::segment_store::StdFs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> seglog::segment_store::Result<()> {
        self.step(dir)?;
        seglog::segment_store::StdFs.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> seglog::segment_store::Result<()> {
        self.step(dir)?;
        seglog::segment_store::StdFs.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> seglog::segment_store::Result<()> {
        self.step(dir)?;
        seglog::segment_store::StdFs.sync_dir(dir)
    }
}

/// A pass stopped at each of its file-system mutations in turn: the next open (the loader
/// deleting `.cleaned` leftovers before the commit point, completing the `.swap` after it) has
/// the newest value of every key and the producer state of the original log, and the log end.
#[test]
fn a_pass_stopped_at_any_mutation_loses_nothing() {
    use seglog::recovery::internals::cleaner::{clean, last_records, LogToClean, SegmentSettings};
    let ops: Vec<Op> = (0..80)
        .map(|i| Op::Data((i % 5) as u8, vec![((i % 9) as u8, i % 11 == 0)]))
        .chain([Op::End(3, true), Op::End(4, false)])
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base").join("table-0");
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let (log, end) = written(&base, &clock, &ops);
    log.set_high_watermark(end).unwrap();
    let (want_newest, want_producers) = (newest(&log), producers(&log));
    let to_clean = |dir: &Path, log: &Log| LogToClean {
        dir: dir.to_path_buf(),
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        last_stable_offset: log.last_stable_offset(),
        last_records: last_records(&log.producer_state().unwrap()),
        now_ms: T0 + 10_000,
        segments: SegmentSettings::of(&config(&clock, 1 << 20).log.log),
    };
    let template = to_clean(&base, &log);
    log.close().unwrap();
    let cleaner = config(&clock, 1 << 20).cleaner;
    let tp = seglog::TopicPartition::new("table", 0);
    let mut fail_at = 1;
    loop {
        let case = tmp.path().join(format!("case-{fail_at}"));
        copy_dir(&tmp.path().join("base"), &case);
        let dir = case.join("table-0");
        let storage: Arc<dyn seglog::segment_store::Storage> = Arc::new(FailingFs {
            ops: std::sync::atomic::AtomicU64::new(0),
            fail_at,
        });
        let input = LogToClean {
            dir: dir.clone(),
            ..template.clone()
        };
        let finished = clean(&storage, &input, &tp, &cleaner).is_ok();
        let log = Log::open(&dir, config(&clock, 1 << 20)).unwrap();
        assert_eq!(newest(&log), want_newest, "stopped at mutation {fail_at}");
        assert_eq!(
            producers(&log),
            want_producers,
            "stopped at mutation {fail_at}"
        );
        assert_eq!(log.log_end_offset(), end, "stopped at mutation {fail_at}");
        log.close().unwrap();
        if finished {
            break;
        }
        fail_at += 1;
    }
    assert!(fail_at > 10, "the pass made only {fail_at} mutations");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let t = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &t);
        } else {
            std::fs::copy(&p, &t).unwrap();
        }
    }
}

/// `verify` names a compacted partition's cleaner leftovers (a `.cleaned` pass output, a
/// `.deleted` segment) and a `cleaner-offset-checkpoint` entry past the log end, each with what
/// recovery or the cleaner then does; recovery then does it and keeps every record.
#[test]
fn verify_reports_cleaner_leftovers_and_a_cleaner_checkpoint_past_the_end() {
    use seglog::cli::verify::check_partition;
    let ops: Vec<Op> = (0..40)
        .map(|i| Op::Data((i % 3) as u8, vec![((i % 4) as u8, false)]))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("table-0");
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let (log, end) = written(&dir, &clock, &ops);
    let want = consume_all(&log, IsolationLevel::ReadUncommitted);
    log.close().unwrap();

    let kinds = |dir: &Path| -> Vec<(String, String)> {
        check_partition(dir)
            .unwrap()
            .findings
            .into_iter()
            .map(|f| (f.kind.to_owned(), f.file))
            .collect()
    };
    assert_eq!(kinds(&dir), Vec::new(), "a clean partition");

    let first = dir.join("00000000000000000000.log");
    std::fs::copy(&first, dir.join("00000000000000000000.log.cleaned")).unwrap();
    std::fs::copy(&first, dir.join("00000000000000000000.timeindex.deleted")).unwrap();
    let checkpoint = tmp.path().join("data").join("cleaner-offset-checkpoint");
    std::fs::write(&checkpoint, format!("0\n1\ntable 0 {}\n", end + 100)).unwrap();
    let found = kinds(&dir);
    for (kind, file) in [
        ("cleanerLeftover", "00000000000000000000.log.cleaned"),
        ("deletedLeftover", "00000000000000000000.timeindex.deleted"),
        ("cleanerCheckpointOutOfRange", "cleaner-offset-checkpoint"),
    ] {
        assert!(
            found.contains(&(kind.to_owned(), file.to_owned())),
            "{kind} {file} not in {found:?}"
        );
    }

    // Recovery does what verify said, and the cleaner starts again from the log start.
    let log = Log::open(&dir, config(&clock, 1 << 20)).unwrap();
    assert!(!dir.join("00000000000000000000.log.cleaned").exists());
    assert!(!dir.join("00000000000000000000.timeindex.deleted").exists());
    assert_eq!(consume_all(&log, IsolationLevel::ReadUncommitted), want);
    let report = log.compact().unwrap();
    assert_eq!(report.first_dirty_offset, 0, "{report:?}");
    log.close().unwrap();
}

/// `seglog compact` on a log directory cleans the partitions of the topics named (`--topic`)
/// and leaves the others; without `--topic` or `--all-topics` it refuses, naming why; and a
/// partition of a log directory shared with other partitions is cleaned on its own.
#[test]
fn seglog_compact_on_a_log_directory_cleans_the_topics_named() {
    use seglog::cli::compact::{run, CompactArgs};
    use seglog::cli::Status;
    let ops: Vec<Op> = (0..40)
        .map(|i| Op::Data((i % 3) as u8, vec![((i % 4) as u8, false)]))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    for name in ["table-0", "table-1", "other-0"] {
        let alone = tmp.path().join(format!("alone-{name}")).join(name);
        let (log, _) = written(&alone, &clock, &ops);
        log.close().unwrap();
        std::fs::rename(&alone, data.join(name)).unwrap();
    }
    let logs = |name: &str| -> usize {
        std::fs::read_dir(data.join(name))
            .unwrap()
            .filter(|e| {
                let p = e.as_ref().unwrap().path();
                p.extension().is_some_and(|x| x == "log")
            })
            .count()
    };
    let other_before = tree(&data.join("other-0"));
    let segments_before = logs("table-0");
    assert!(segments_before > 2, "{segments_before} segments");
    let args = CompactArgs {
        dry_run: false,
        ..compact_args(&data, 1 << 20)
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run(&args, &mut out, &mut err), Status::Usage);
    let msg = String::from_utf8(err).unwrap();
    assert!(msg.contains("--topic"), "{msg}");

    let args = CompactArgs {
        topic: vec!["table".to_owned()],
        ..args
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        run(&args, &mut out, &mut err),
        Status::Success,
        "{}",
        String::from_utf8_lossy(&err)
    );
    let done = String::from_utf8(out).unwrap();
    assert!(
        done.contains("table-0: cleaned") && done.contains("table-1: cleaned"),
        "{done}"
    );
    assert!(!done.contains("other-0"), "{done}");
    // One group of segment.bytes 1 MiB: the cleaned segments are one, plus the active one.
    assert_eq!(logs("table-0"), 2);
    assert_eq!(logs("table-1"), 2);
    assert_eq!(
        tree(&data.join("other-0")).keys().count(),
        other_before.keys().count()
    );
    assert_eq!(logs("other-0"), segments_before);

    // A partition of that shared log directory on its own.
    let args = CompactArgs {
        dir: data.join("other-0"),
        topic: Vec::new(),
        ..args
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        run(&args, &mut out, &mut err),
        Status::Success,
        "{}",
        String::from_utf8_lossy(&err)
    );
    assert_eq!(logs("other-0"), 2);
    assert_eq!(logs("table-0"), 2);
}

/// `LogDir::compact_due` cleans what Kafka's cleaner manager would pick: a log whose dirty
/// section is more than `min.cleanable.dirty.ratio` of it, not one whose dirty section is
/// small, unless its oldest dirty segment is past `max.compaction.lag.ms`; on two cleaner
/// threads, the I/O throttled.
#[test]
fn compact_due_cleans_the_logs_kafkas_cleaner_manager_would_pick() {
    use seglog::{LogDir, TopicPartition};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let many: Vec<Op> = (0..60)
        .map(|i| Op::Data((i % 3) as u8, vec![((i % 4) as u8, false)]))
        .collect();
    let few: Vec<Op> = (0..4)
        .map(|i| Op::Data(0, vec![(i as u8, false)]))
        .collect();
    let mut entries: Vec<String> = Vec::new();
    // Each partition written and cleaned once alone, then given more: `big` 60 batches (its
    // dirty section ~0.9 of it), `small` 4 (below the default min.cleanable.dirty.ratio 0.5).
    for (name, more) in [("big-0", &many), ("small-0", &few)] {
        let alone = tmp.path().join(format!("alone-{name}")).join(name);
        let (mut log, end) = written(&alone, &clock, &many);
        log.set_high_watermark(end).unwrap();
        log.compact().unwrap();
        write(&mut log, more);
        log.roll().unwrap();
        let end = log.log_end_offset();
        log.set_high_watermark(end).unwrap();
        log.close().unwrap();
        std::fs::rename(&alone, data.join(name)).unwrap();
        let checkpoint = alone.parent().unwrap().join("cleaner-offset-checkpoint");
        let text = std::fs::read_to_string(checkpoint).unwrap();
        entries.extend(text.lines().skip(2).map(str::to_owned));
    }
    // The partitions' cleaner checkpoints, moved with them.
    std::fs::write(
        data.join("cleaner-offset-checkpoint"),
        format!("0\n{}\n{}\n", entries.len(), entries.join("\n")),
    )
    .unwrap();
    // The CLI's read-only weighing says the same.
    {
        use seglog::cli::compact::{run, CompactArgs};
        let args = CompactArgs {
            dir: data.clone(),
            dry_run: true,
            now_ms: Some(T0 + 10_000),
            dedupe_buffer_size: 1 << 20,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            segment_bytes: 1024,
            topic: Vec::new(),
            all_topics: true,
            due: true,
            min_cleanable_dirty_ratio: 0.5,
            max_compaction_lag_ms: i64::MAX,
            threads: 1,
            io_max_bytes_per_second: None,
        };
        let before = tree(&data);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run(&args, &mut out, &mut err), seglog::cli::Status::Success);
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.lines()
                .any(|l| l.starts_with("big-0: cleanable ratio") && l.ends_with(": due")),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("small-0: cleanable ratio") && l.ends_with("not due")),
            "{out}"
        );
        assert_eq!(tree(&data), before, "the dry run changed files");
    }
    let mut cfg = config(&clock, 1 << 20);
    cfg.cleaner.threads = 2;
    cfg.cleaner.io_max_bytes_per_second = 1e9;
    let dir = LogDir::open(&data, cfg.clone()).unwrap();
    let reports = dir.compact_due(|_| true).unwrap();
    let cleaned: Vec<String> = reports.iter().map(|(tp, _)| tp.to_string()).collect();
    assert_eq!(cleaned, ["big-0"], "only the filthy log is due");
    assert!(!reports[0].1.groups.is_empty());
    dir.close().unwrap();

    // Past max.compaction.lag.ms the small one is due too (its records are from T0 on).
    cfg.cleaner.max_compaction_lag_ms = 1_000;
    let dir = LogDir::open(&data, cfg.clone()).unwrap();
    let reports = dir
        .compact_due(|tp| tp == &TopicPartition::new("small", 0))
        .unwrap();
    let cleaned: Vec<String> = reports.iter().map(|(tp, _)| tp.to_string()).collect();
    assert_eq!(cleaned, ["small-0"], "overdue");
    dir.close().unwrap();
}

/// The segment and index files of a partition directory, by name.
fn segment_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    tree(dir)
        .into_iter()
        .filter(|(p, _)| {
            p.extension()
                .is_some_and(|e| e == "log" || e == "index" || e == "timeindex" || e == "txnindex")
        })
        .map(|(p, b)| (p.file_name().unwrap().to_string_lossy().into_owned(), b))
        .collect()
}

/// Segments of 1 MiB or more are mapped by an unthrottled pass and read through the window by a
/// throttled one: both leave the same files, byte for byte.
#[test]
fn a_pass_over_mapped_segments_writes_what_a_pass_reading_them_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0 + 100_000));
    let config = |rate: f64| {
        Config::default()
            .with_clock(clock.clone())
            .with_segment_bytes(2 << 20)
            .with_cleaner(CleanerConfig {
                io_max_bytes_per_second: rate,
                ..CleanerConfig::default()
            })
    };
    let ops: Vec<Op> = (0..24_000u32)
        .map(|i| {
            let recs = (0..6u32)
                .map(|j| (((i * 7 + j * 13) % 251) as u8, (i + j) % 17 == 0))
                .collect();
            Op::Data((i % 3) as u8, recs)
        })
        .collect();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let mut log = Log::open(a.join("table-0"), config(f64::MAX)).unwrap();
    write(&mut log, &ops);
    log.roll().unwrap();
    let end = log.log_end_offset();
    log.set_high_watermark(end).unwrap();
    log.close().unwrap();
    copy_dir(&a, &b);
    let mapped = segment_files(&a.join("table-0"))
        .iter()
        .filter(|(n, bytes)| n.ends_with(".log") && bytes.len() >= 1 << 20)
        .count();
    assert!(mapped >= 2, "{mapped} segments of 1 MiB or more");
    for (root, rate) in [(&a, f64::MAX), (&b, 1e15)] {
        let log = Log::open(root.join("table-0"), config(rate)).unwrap();
        let report = log.compact().unwrap();
        assert_eq!(report.end_offset, end);
        log.close().unwrap();
    }
    let (sa, sb) = (
        segment_files(&a.join("table-0")),
        segment_files(&b.join("table-0")),
    );
    assert_eq!(sa.keys().collect::<Vec<_>>(), sb.keys().collect::<Vec<_>>());
    for (name, bytes) in &sa {
        assert!(bytes == &sb[name], "{name} differs");
    }
}

/// The `.log` file and position of the batch based at `base`, and its size.
fn find_batch(dir: &Path, base: i64) -> (std::path::PathBuf, usize, usize) {
    for (name, bytes) in segment_files(dir) {
        if !name.ends_with(".log") {
            continue;
        }
        let mut at = 0usize;
        while at + 12 <= bytes.len() {
            let len = i32::from_be_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
            let b = RecordBatch::new(&bytes[at..at + 12 + len], at as u64).unwrap();
            if b.base_offset() == base {
                return (dir.join(name), at, 12 + len);
            }
            at += 12 + len;
        }
    }
    panic!("no batch at {base}");
}

/// The cleaner CRC-checks every batch whose bytes it writes: a corrupt value in a batch it
/// keeps fails the pass at that batch's CRC and leaves its segment as it was. A batch all of
/// whose records have a newer version is removed unread, as Kafka's cleaner removes it: a
/// corrupt value there is removed with it, and the kept records are those of the sound log.
#[test]
fn a_corrupt_batch_is_never_written_by_the_cleaner() {
    use seglog::record_format::FormatErrorKind;
    let ops: Vec<Op> = (0..40)
        .map(|i| Op::Data(0, vec![((i % 4) as u8, false)]))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let dir = tmp.path().join("sound").join("table-0");
    let (log, end) = written(&dir, &clock, &ops);
    log.set_high_watermark(end).unwrap();
    log.close().unwrap();
    let copy = |name: &str| {
        let to = tmp.path().join(name);
        copy_dir(&tmp.path().join("sound"), &to);
        to.join("table-0")
    };
    let corrupt = |dir: &Path, base: i64| {
        let (path, at, size) = find_batch(dir, base);
        let mut bytes = std::fs::read(&path).unwrap();
        // A byte of the value (the record ends with the value and a header count of 0).
        bytes[at + size - 2] ^= 0x55;
        std::fs::write(&path, &bytes).unwrap();
        (path, at as u64)
    };
    let (kept, removed) = (copy("kept"), copy("removed"));

    // Offset 38 holds the newest value of its key: the pass fails at its CRC.
    let (path, at) = corrupt(&kept, 38);
    let before = std::fs::read(&path).unwrap();
    let log = Log::open(&kept, config(&clock, 1 << 20)).unwrap();
    match log.compact() {
        Err(seglog::Error::Cleaner(seglog::recovery::CleanerError::Format { source, .. })) => {
            assert!(
                matches!(source.kind, FormatErrorKind::CrcMismatch { .. }),
                "{source:?}"
            );
            assert_eq!(
                source.position,
                at + seglog::record_format::internals::CRC_OFFSET as u64
            );
        }
        other => panic!("a corrupt kept batch: {other:?}"),
    }
    log.close().unwrap();
    // Groups before the corrupt batch's may be cleaned; its segment is as it was.
    assert!(std::fs::read(&path).unwrap() == before, "{path:?} changed");

    // Offset 5 has a newer version of its key: it goes, and the pass keeps what it keeps of
    // the sound log.
    corrupt(&removed, 5);
    for dir in [&dir, &removed] {
        let log = Log::open(dir, config(&clock, 1 << 20)).unwrap();
        assert_eq!(log.compact().unwrap().end_offset, end);
        log.close().unwrap();
    }
    let (sound, cleaned) = (segment_files(&dir), segment_files(&removed));
    assert_eq!(
        sound.keys().collect::<Vec<_>>(),
        cleaned.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &sound {
        assert!(bytes == &cleaned[name], "{name} differs");
    }
}

/// The cleaner never reads the active segment: a torn tail there (bytes of a batch a crash cut
/// short, after a clean shutdown's marker) stops neither the dry run of `seglog compact` nor
/// `Log::compact`, which clean the sealed segments below it; the log end is the loaded log's.
#[test]
fn a_torn_active_segment_does_not_stop_compaction() {
    use seglog::cli::compact::run;
    use seglog::cli::Status;
    let ops: Vec<Op> = (0..60)
        .map(|i| Op::Data(0, vec![((i % 6) as u8, false)]))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data").join("table-0");
    let clock = Arc::new(ManualClock::new(T0 + 10_000));
    let (log, end) = written(&dir, &clock, &ops);
    log.close().unwrap();
    let active = segment_files(&dir)
        .into_keys()
        .filter(|n| n.ends_with(".log"))
        .max()
        .unwrap();
    // A batch header claiming more bytes than follow.
    let mut torn = std::fs::read(dir.join(&active)).unwrap();
    torn.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 1, 0, 0, 0]);
    std::fs::write(dir.join(&active), &torn).unwrap();
    let args = compact_args(&dir, 1024);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = run(&args, &mut out, &mut err);
    let (out, err) = (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    );
    assert_eq!(status, Status::Success, "{err}");
    assert!(
        out.contains(&format!("would clean up to offset {end}")),
        "{out}"
    );
    let log = Log::open(&dir, config(&clock, 1 << 20)).unwrap();
    log.set_high_watermark(end).unwrap();
    assert_eq!(log.compact().unwrap().end_offset, end);
    let kept: Vec<i64> = consume_all(&log, IsolationLevel::ReadUncommitted)
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(kept, (end - 6..end).collect::<Vec<_>>());
    log.close().unwrap();
}
