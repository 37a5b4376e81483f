//! `.log`, `LogSegment` and `LocalLog` on real files in temp dirs (and the `.log` on
//! `SimulatedFs`).
//!
//! Invariants checked: re-appending Kafka-written batches reproduces the fixture `.log` byte for
//! byte; the `.index`/`.timeindex` bytes equal entries derived independently from Kafka's rules
//! (entry when more than `index.interval.bytes` were appended since the last one, keyed by the
//! batch's last offset and start position; time entries only when the max timestamp grows, plus
//! the final entry on close); recovery rebuilds the same indexes, keeps the valid prefix and
//! quarantines what it cuts; reads return whole batches only, even while another thread appends.

use std::path::Path;
use std::sync::Arc;

use record_format::{Batches, FormatErrorKind, LogEntry, RecordBatchBuilder};
use segment_store::internals::SegmentContext;
use segment_store::internals::{quarantine_file_name, segment_file_path, FileKind};
use segment_store::{
    DirLock, IndexCorruption, LocalLog, LogConfig, LogEnv, LogSegment, RollParams, RollReason,
    SegmentConfig, SegmentError, StdFs, Storage,
};
use testkit::ManualClock;

const FIXTURES: [&str; 10] = [
    "gzip",
    "headers-nulls",
    "idempotent",
    "kraft-control",
    "log-append-time",
    "lz4",
    "plain",
    "snappy",
    "transactional",
    "zstd",
];

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/kafka-clients")
        .join(format!("{name}.log"));
    std::fs::read(p).unwrap()
}

/// (position, size, last offset, max timestamp, base offset) of every batch.
#[derive(Debug, Clone, Copy)]
struct B {
    pos: u64,
    size: u64,
    base: i64,
    last: i64,
    max_ts: i64,
}

fn batches_of(log: &[u8]) -> Vec<B> {
    Batches::new(log, 0)
        .map(|e| {
            let Ok(LogEntry::V2(b)) = e else {
                panic!("{e:?}")
            };
            B {
                pos: b.position(),
                size: b.size_in_bytes() as u64,
                base: b.base_offset(),
                last: b.last_offset(),
                max_ts: b.max_timestamp(),
            }
        })
        .collect()
}

fn slice(log: &[u8], b: &B) -> Vec<u8> {
    log[b.pos as usize..(b.pos + b.size) as usize].to_vec()
}

/// Kafka's index rules computed from scratch: the trimmed `.index` and `.timeindex` bytes after
/// appending `batches` one per append and closing the segment.
fn expected_indexes(base: i64, batches: &[B], interval: u64) -> (Vec<u8>, Vec<u8>) {
    let (mut index, mut time) = (Vec::new(), Vec::new());
    let mut since = 0u64;
    let (mut max_ts, mut max_off) = (-1i64, base);
    let mut last_time_ts = -1i64;
    let push_time = |time: &mut Vec<u8>, last: &mut i64, ts: i64, off: i64| {
        if ts > *last {
            time.extend_from_slice(&ts.to_be_bytes());
            time.extend_from_slice(&((off - base) as i32).to_be_bytes());
            *last = ts;
        }
    };
    for b in batches {
        if b.max_ts > max_ts {
            (max_ts, max_off) = (b.max_ts, b.last);
        }
        if since > interval {
            index.extend_from_slice(&((b.last - base) as i32).to_be_bytes());
            index.extend_from_slice(&(b.pos as u32).to_be_bytes());
            push_time(&mut time, &mut last_time_ts, max_ts, max_off);
            since = 0;
        }
        since += b.size;
    }
    push_time(&mut time, &mut last_time_ts, max_ts, max_off);
    (index, time)
}

fn ctx(lock: &DirLock, interval: u32, max_index_size: u64) -> SegmentContext {
    SegmentContext {
        storage: Arc::new(StdFs),
        lock: lock.clone(),
        clock: Arc::new(ManualClock::new(1_000_000)),
        config: SegmentConfig {
            index_interval_bytes: interval,
            max_index_size,
            ..SegmentConfig::default()
        },
    }
}

/// A temp partition directory (canonical path) known durable to a fresh `SimulatedFs`.
fn simulated_dir() -> (tempfile::TempDir, std::path::PathBuf, testkit::SimulatedFs) {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().canonicalize().unwrap();
    let sim = testkit::SimulatedFs::new();
    sim.create_durable_dir_all(&real);
    (dir, real, sim)
}

/// A log environment writing through `sim`, with a manual clock at 0.
fn sim_env(sim: &testkit::SimulatedFs) -> LogEnv {
    LogEnv {
        storage: Arc::new(sim.clone()),
        clock: Arc::new(ManualClock::new(0)),
    }
}

fn read_file(dir: &Path, base: i64, kind: FileKind) -> Vec<u8> {
    std::fs::read(segment_file_path(dir, base, kind)).unwrap()
}

/// A batch of `n` records with 100-byte values at `offset`, timestamps from `ts`.
fn batch(offset: i64, n: i64, ts: i64) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(offset).partition_leader_epoch(0);
    for i in 0..n {
        b.append(ts + i, Some(b"key"), Some(&[7u8; 100]), &[])
            .unwrap();
    }
    b.build()
}

/// `count` batches of `per` records from offset 0, timestamps increasing by `ts_step` per batch.
fn batches(count: i64, per: i64, ts0: i64, ts_step: i64) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| batch(i * per, per, ts0 + i * ts_step))
        .collect()
}

fn append_batch(seg: &mut LogSegment, bytes: &[u8]) -> u64 {
    let b = batches_of(bytes);
    let last = b.last().unwrap();
    let max = b.iter().max_by_key(|b| b.max_ts).unwrap();
    seg.append(last.last, max.max_ts, max.last, bytes).unwrap()
}

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 200,
        max_index_size: 4096,
        ..LogConfig::default()
    }
}

fn env(clock: &Arc<ManualClock>) -> LogEnv {
    LogEnv {
        storage: Arc::new(StdFs),
        clock: clock.clone(),
    }
}

fn open_log(dir: &Path, cfg: LogConfig, clock: &Arc<ManualClock>) -> LocalLog {
    LocalLog::open_with(dir, cfg, i64::MAX, env(clock)).unwrap()
}

/// `dir` recovered by the recovery crate's loader (a `LocalLog` recovers nothing), from
/// `recovery_point` after an unclean shutdown.
fn recovered(
    dir: &Path,
    cfg: LogConfig,
    recovery_point: i64,
    clock: &Arc<ManualClock>,
) -> (recovery::PartitionLog, recovery::RecoveryReport) {
    let opts = recovery::LoadOptions {
        config: recovery::Config {
            log: recovery::PartitionLogConfig {
                log: cfg,
                ..Default::default()
            },
            env: env(clock),
            ..Default::default()
        },
        recovery_point,
        ..Default::default()
    };
    recovery::LogLoader::load(dir, &opts).unwrap()
}

/// Every batch in `bytes` is whole and CRC-valid; returns their (base, last) offsets.
fn whole_valid(bytes: &[u8]) -> Vec<(i64, i64)> {
    let mut it = Batches::new(bytes, 0).validate_crc(true);
    let out: Vec<_> = (&mut it)
        .map(|e| {
            let e = e.unwrap();
            (e.as_v2().unwrap().base_offset(), e.last_offset())
        })
        .collect();
    assert_eq!(
        it.stopped_at(),
        Some(&record_format::IterEnd::Complete),
        "partial batch in a read"
    );
    out
}

mod segment {
    use super::*;

    #[test]
    fn reappending_kafka_batches_reproduces_the_fixture_and_kafka_indexes() {
        for name in FIXTURES {
            let log = fixture(name);
            let bs = batches_of(&log);
            for interval in [0u32, 100, 1000, 4096] {
                let dir = tempfile::tempdir().unwrap();
                let lock = DirLock::acquire(dir.path()).unwrap();
                let base = bs[0].base;
                let mut seg =
                    LogSegment::create(&ctx(&lock, interval, 1 << 20), dir.path(), base).unwrap();
                for b in &bs {
                    let pos = seg
                        .append(b.last, b.max_ts, b.last, &slice(&log, b))
                        .unwrap();
                    assert_eq!(pos, b.pos);
                }
                assert_eq!(seg.read_next_offset().unwrap(), bs.last().unwrap().last + 1);
                seg.close().unwrap();
                assert_eq!(read_file(dir.path(), base, FileKind::Log), log, "{name}");
                let (index, time) = expected_indexes(base, &bs, u64::from(interval));
                assert_eq!(
                    read_file(dir.path(), base, FileKind::Index),
                    index,
                    "{name} {interval}"
                );
                assert_eq!(
                    read_file(dir.path(), base, FileKind::TimeIndex),
                    time,
                    "{name} {interval}"
                );

                // Recovery rebuilds exactly the same index files.
                let mut seg =
                    LogSegment::open(&ctx(&lock, interval, 1 << 20), dir.path(), base).unwrap();
                let mut visited = Vec::new();
                let out = seg
                    .recover(
                        &mut |b, _| {
                            visited.push(b.base_offset());
                            Ok::<_, SegmentError>(())
                        },
                        dir.path(),
                    )
                    .unwrap();
                assert_eq!(out.valid_bytes, log.len() as u64);
                assert_eq!((out.truncated_bytes, out.truncated_at), (0, None));
                assert_eq!(out.quarantine_file, None);
                assert_eq!(out.batches, bs.len() as u64);
                assert_eq!(visited, bs.iter().map(|b| b.base).collect::<Vec<_>>());
                seg.close().unwrap();
                assert_eq!(read_file(dir.path(), base, FileKind::Index), index);
                assert_eq!(read_file(dir.path(), base, FileKind::TimeIndex), time);
            }
        }
    }

    #[test]
    fn truncating_nothing_keeps_the_largest_timestamp_without_reading_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        // Timestamps that do not grow: the time index gets one entry, for the first batch.
        let all: Vec<u8> = batches(20, 5, 1_000, 0).concat();
        let bs = batches_of(&all);
        let mut seg = LogSegment::create(&ctx(&lock, 300, 1 << 20), dir.path(), 0).unwrap();
        for b in &bs {
            append_batch(&mut seg, &all[b.pos as usize..(b.pos + b.size) as usize]);
        }
        let max = seg.max_timestamp_so_far();
        // A later header now claims a far larger max timestamp (headers are read without
        // their CRC, as Kafka's largestTimestampAfter reads them). Truncating at the end cuts
        // nothing, so it must not re-read the headers and pick that up.
        let b = &bs[15];
        let log_path = segment_file_path(dir.path(), 0, FileKind::Log);
        let mut bytes = std::fs::read(&log_path).unwrap();
        let at = b.pos as usize + 35; // maxTimestamp of the batch header
        bytes[at..at + 8].copy_from_slice(&i64::MAX.to_be_bytes());
        std::fs::write(&log_path, &bytes).unwrap();
        assert_eq!(seg.truncate_to(100).unwrap(), 0);
        assert_eq!(seg.max_timestamp_so_far(), max);
        // A real cut re-reads them (Kafka's truncateTo), and finds the claimed value.
        assert!(seg.truncate_to(bs[19].base).unwrap() > 0);
        assert_eq!(seg.max_timestamp_so_far(), i64::MAX);
    }

    #[test]
    fn several_batches_in_one_append_index_per_batch() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let all: Vec<u8> = batches(20, 5, 1_000, 10).concat();
        let bs = batches_of(&all);
        let mut seg = LogSegment::create(&ctx(&lock, 300, 1 << 20), dir.path(), 0).unwrap();
        seg.append(99, bs[19].max_ts, 99, &all).unwrap();
        seg.close().unwrap();
        let (index, time) = expected_indexes(0, &bs, 300);
        assert!(index.len() >= 8 * 5);
        assert_eq!(read_file(dir.path(), 0, FileKind::Index), index);
        assert_eq!(read_file(dir.path(), 0, FileKind::TimeIndex), time);
    }

    #[test]
    fn append_rejects_bad_input_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let mut seg = LogSegment::create(&ctx(&lock, 0, 1 << 20), dir.path(), 100).unwrap();
        let b = batch(100, 3, 5);
        let err = seg.append(102, 7, 102, &b[..b.len() - 1]).unwrap_err();
        // A batch short of one byte needs the whole batch (its size field is there), at 0.
        assert!(
            matches!(&err, SegmentError::Format { error, .. }
            if error.position == 0
                && error.kind == FormatErrorKind::Truncated {
                    need: b.len() as u64,
                    have: b.len() as u64 - 1,
                }),
            "{err:?}"
        );
        let err = seg
            .append(100 + i64::from(i32::MAX) + 1, 7, 0, &b)
            .unwrap_err();
        assert!(
            matches!(err, SegmentError::OffsetOverflow { offset, base_offset: 100, .. }
                if offset == 100 + i64::from(i32::MAX) + 1),
            "{err:?}"
        );
        assert_eq!(seg.size(), 0);
        let err = seg.append(99, 7, 99, &batch(99, 1, 5)).unwrap_err();
        assert!(
            matches!(err, SegmentError::OffsetOverflow { .. }),
            "{err:?}"
        );
        assert!(matches!(
            LogSegment::create(&ctx(&lock, 0, 1 << 20), dir.path(), 100),
            Err(SegmentError::Io { .. })
        ));
    }

    #[test]
    fn translate_read_and_timestamp_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let bs_bytes = batches(30, 4, 10_000, 100);
        let mut seg = LogSegment::create(&ctx(&lock, 500, 1 << 20), dir.path(), 0).unwrap();
        for b in &bs_bytes {
            append_batch(&mut seg, b);
        }
        let all = bs_bytes.concat();
        let bs = batches_of(&all);
        for (i, b) in bs.iter().enumerate() {
            for off in b.base..=b.last {
                let t = seg.translate_offset(off, 0).unwrap().unwrap();
                assert_eq!(
                    (t.position, t.base_offset, t.last_offset),
                    (b.pos, b.base, b.last)
                );
                // Read one batch at a time: exactly that batch.
                let r = seg
                    .read(off, b.size as usize, None, false)
                    .unwrap()
                    .unwrap();
                assert_eq!(&*r.records, &all[b.pos as usize..(b.pos + b.size) as usize]);
                assert_eq!(r.fetch_offset_metadata.relative_position_in_segment, b.pos);
                // One byte short: nothing, flagged incomplete; min_one_message returns it anyway.
                let r = seg
                    .read(off, b.size as usize - 1, None, false)
                    .unwrap()
                    .unwrap();
                assert!(r.records.is_empty() && r.first_entry_incomplete);
                let r = seg.read(off, 1, None, true).unwrap().unwrap();
                assert_eq!(r.records.len() as u64, b.size);
                // A size ending mid-batch is cut to whole batches.
                let r = seg
                    .read(off, (b.size * 2 + 7) as usize, None, false)
                    .unwrap()
                    .unwrap();
                let want = bs[i..].iter().take(2).map(|b| b.size).sum::<u64>();
                assert_eq!(r.records.len() as u64, want);
                whole_valid(&r.records);
            }
            // Timestamp of the batch's 3rd record.
            let ts = 10_000 + i as i64 * 100 + 2;
            let found = seg.find_offset_by_timestamp(ts, 0).unwrap().unwrap();
            assert_eq!((found.timestamp, found.offset), (ts, b.base + 2));
            assert_eq!(found.leader_epoch, Some(0));
        }
        assert!(seg.read(120, 1000, None, false).unwrap().is_none());
        assert!(seg.find_offset_by_timestamp(1 << 50, 0).unwrap().is_none());
        // The active segment's reads are copies; sealed ones borrow from the map.
        let r = seg.read(0, 100_000, None, false).unwrap().unwrap();
        assert!(matches!(r.records, std::borrow::Cow::Owned(_)));
        seg.on_become_inactive_segment().unwrap();
        let r = seg.read(0, 100_000, None, false).unwrap().unwrap();
        assert!(matches!(r.records, std::borrow::Cow::Borrowed(_)));
        assert_eq!(&*r.records, &all[..]);
        let r = seg
            .read(0, 100_000, Some(bs[3].pos + 5), false)
            .unwrap()
            .unwrap();
        assert_eq!(r.records.len() as u64, bs[3].pos);
    }

    #[test]
    fn truncate_to_every_batch_boundary() {
        let bs_bytes = batches(25, 3, 50_000, 7);
        let all = bs_bytes.concat();
        let bs = batches_of(&all);
        for k in 0..bs.len() {
            let dir = tempfile::tempdir().unwrap();
            let lock = DirLock::acquire(dir.path()).unwrap();
            let c = ctx(&lock, 300, 1 << 20);
            let mut seg = LogSegment::create(&c, dir.path(), 0).unwrap();
            for b in &bs_bytes {
                append_batch(&mut seg, b);
            }
            seg.on_become_inactive_segment().unwrap();
            let cut = seg.truncate_to(bs[k].base).unwrap();
            assert_eq!(cut, all.len() as u64 - bs[k].pos);
            assert_eq!(seg.size(), bs[k].pos);
            assert_eq!(seg.read_next_offset().unwrap(), bs[k].base);
            // Indexes hold only entries below the target, each pointing at its batch.
            let idx = seg.offset_index();
            assert_eq!(idx.max_entries(), (1 << 20) / 8, "resized back to max");
            for n in 0..idx.entries() {
                let e = idx.entry(n).unwrap();
                assert!(e.offset < bs[k].base);
                assert!(bs
                    .iter()
                    .any(|b| b.last == e.offset && b.pos == u64::from(e.position.0)));
            }
            let tidx = seg.time_index();
            for n in 0..tidx.entries() {
                assert!(tidx.entry(n).unwrap().offset < bs[k].base);
            }
            let expect_max = bs[..k].iter().map(|b| b.max_ts).max().unwrap_or(-1);
            assert_eq!(seg.max_timestamp_so_far(), expect_max);
            if k > 0 {
                let r = seg.read(0, 1 << 20, None, false).unwrap().unwrap();
                assert_eq!(&*r.records, &all[..bs[k].pos as usize]);
            }
            // Appending again continues cleanly.
            append_batch(&mut seg, &batch(bs[k].base, 3, 99_999));
            assert_eq!(seg.read_next_offset().unwrap(), bs[k].base + 3);
            seg.close().unwrap();
            assert_eq!(
                &read_file(dir.path(), 0, FileKind::Log)[..bs[k].pos as usize],
                &all[..bs[k].pos as usize]
            );
        }
    }

    #[test]
    fn should_roll_conditions() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let mut seg = LogSegment::create(&ctx(&lock, 0, 48), dir.path(), 0).unwrap();
        let b = batch(0, 2, 1_000);
        let size = b.len() as u64;
        let params = |ts: i64, off: i64, msg: u64, now: i64| RollParams {
            max_segment_bytes: 10 * size,
            max_segment_ms: 1_000,
            roll_jitter_ms: 100,
            max_timestamp_in_messages: ts,
            max_offset_in_messages: off,
            messages_size: msg,
            now_ms: now,
        };
        // Empty segment: nothing but size can roll it; time needs a non-empty segment.
        assert_eq!(
            seg.should_roll(&params(1_000_000, 1, size, 0)).unwrap(),
            None
        );
        assert_eq!(
            seg.should_roll(&params(0, 1, 10 * size + 1, 0)).unwrap(),
            Some(RollReason::Size)
        );
        append_batch(&mut seg, &b);
        // Size: current size > max - incoming.
        assert_eq!(
            seg.should_roll(&params(1_001, 3, 9 * size, 0)).unwrap(),
            None
        );
        assert_eq!(
            seg.should_roll(&params(1_001, 3, 9 * size + 1, 0)).unwrap(),
            Some(RollReason::Size)
        );
        // Time: incoming max timestamp vs the first batch's (1_000) > segment.ms - jitter (900).
        assert_eq!(seg.should_roll(&params(1_901, 3, 1, 0)).unwrap(), None);
        assert_eq!(
            seg.should_roll(&params(1_902, 3, 1, 0)).unwrap(),
            Some(RollReason::Time)
        );
        // Offset overflow.
        assert_eq!(
            seg.should_roll(&params(1_001, i64::from(i32::MAX) + 1, 1, 0))
                .unwrap(),
            Some(RollReason::OffsetOverflow)
        );
        // Offset index full: 48 bytes = 6 entries; equal timestamps keep the time index at 1.
        let mut off = 2;
        while seg.offset_index().entries() < 6 {
            append_batch(&mut seg, &batch(off, 2, 0));
            off += 2;
        }
        assert_eq!(
            seg.should_roll(&params(1_001, off, 1, 0)).unwrap(),
            Some(RollReason::OffsetIndexFull)
        );

        // Time index full: 48 bytes = 4 slots, the last reserved.
        let mut seg = LogSegment::create(&ctx(&lock, 0, 48), dir.path(), 1000).unwrap();
        let mut off = 1000;
        for ts in 0..3 {
            append_batch(&mut seg, &batch(off, 1, 10 + ts));
            off += 1;
        }
        assert_eq!(seg.time_index().entries(), 2);
        append_batch(&mut seg, &batch(off, 1, 20));
        assert_eq!(
            seg.should_roll(&params(20, off + 1, 1, 0)).unwrap(),
            Some(RollReason::TimeIndexFull)
        );

        // Without timestamps, the wall clock since creation decides.
        let clock = Arc::new(ManualClock::new(5_000));
        let c = SegmentContext {
            clock: clock.clone(),
            ..ctx(&lock, 0, 1 << 20)
        };
        let mut seg = LogSegment::create(&c, dir.path(), 5000).unwrap();
        append_batch(&mut seg, &batch(5000, 1, -1));
        assert_eq!(seg.should_roll(&params(-1, 5001, 1, 5_900)).unwrap(), None);
        assert_eq!(
            seg.should_roll(&params(-1, 5001, 1, 5_901)).unwrap(),
            Some(RollReason::Time)
        );
    }

    #[test]
    fn recover_keeps_valid_prefix_quarantines_the_rest_and_rebuilds_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let c = ctx(&lock, 400, 1 << 20);
        let bs_bytes = batches(40, 3, 7_000, 3);
        let all = bs_bytes.concat();
        let bs = batches_of(&all);
        let mut seg = LogSegment::create(&c, dir.path(), 0).unwrap();
        for b in &bs_bytes {
            append_batch(&mut seg, b);
        }
        seg.close().unwrap();

        // Flip one byte inside the records of batch 17.
        let bad = bs[17];
        let mut corrupt = all.clone();
        corrupt[(bad.pos + 70) as usize] ^= 0x40;
        std::fs::write(segment_file_path(dir.path(), 0, FileKind::Log), &corrupt).unwrap();

        let mut seg = LogSegment::open(&c, dir.path(), 0).unwrap();
        let mut seen = 0;
        let out = seg
            .recover(
                &mut |_, _| {
                    seen += 1;
                    Ok::<_, SegmentError>(())
                },
                q.path(),
            )
            .unwrap();
        assert_eq!(seen, 17);
        assert_eq!(out.valid_bytes, bad.pos);
        assert_eq!(out.truncated_bytes, all.len() as u64 - bad.pos);
        assert_eq!(out.last_offset, Some(bs[16].last));
        assert_eq!(out.max_timestamp.timestamp, bs[16].max_ts);
        let (pos, err) = out.truncated_at.clone().unwrap();
        assert_eq!((pos, err.position), (bad.pos, bad.pos));
        assert!(
            matches!(err.kind, FormatErrorKind::CrcMismatch { .. }),
            "{err:?}"
        );
        let qf = q.path().join(quarantine_file_name(0, bad.pos));
        assert_eq!(out.quarantine_file.as_deref(), Some(qf.as_path()));
        assert_eq!(std::fs::read(&qf).unwrap(), &corrupt[bad.pos as usize..]);
        assert_eq!(seg.size(), bad.pos);
        assert_eq!(seg.read_next_offset().unwrap(), bs[17].base);
        seg.close().unwrap();
        assert_eq!(
            read_file(dir.path(), 0, FileKind::Log),
            &all[..bad.pos as usize]
        );
        let (index, time) = expected_indexes(0, &bs[..17], 400);
        assert_eq!(read_file(dir.path(), 0, FileKind::Index), index);
        assert_eq!(read_file(dir.path(), 0, FileKind::TimeIndex), time);
    }

    /// A segment of several 1 MiB CRC chunks (checked by helper threads while the recovering
    /// thread applies batches in order) recovers exactly as a sequential CRC-checking scan says:
    /// same batches visited, same valid prefix, same first problem in log order (even when a
    /// later chunk's problem is found first), same indexes.
    #[test]
    fn recover_across_many_crc_chunks_matches_a_sequential_scan() {
        let bs_bytes = batches(330, 100, 7_000, 3);
        let all = bs_bytes.concat();
        let bs = batches_of(&all);
        let n = bs.len();
        assert!(all.len() > 3 * 1024 * 1024, "{}", all.len());
        let at = |i: usize, off: u64| (bs[i].pos + off) as usize;
        // (name, bytes to flip with their xor masks, length to cut the file to)
        type Case<'a> = (&'a str, Vec<(usize, u8)>, Option<usize>);
        let cases: Vec<Case<'_>> = vec![
            ("intact", vec![], None),
            ("first batch", vec![(at(0, 70), 0x40)], None),
            ("middle batch", vec![(at(n / 2, 70), 0x01)], None),
            ("last batch", vec![(at(n - 1, 500), 0x01)], None),
            (
                "two bad batches: the earlier one wins",
                vec![(at(n - 10, 70), 0x01), (at(n / 3, 70), 0x01)],
                None,
            ),
            (
                "bad CRC before a bad length",
                vec![(at(n / 4, 70), 0x01), (at(n / 2, 8), 0x80)],
                None,
            ),
            ("bad length", vec![(at(2 * n / 3, 8), 0x80)], None),
            ("bad magic", vec![(at(n / 5, 16), 0x07)], None),
            ("torn tail", vec![], Some(at(n - 3, 900))),
            (
                "torn tail after a bad CRC",
                vec![(at(n - 30, 70), 0x01)],
                Some(at(n - 3, 900)),
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let interval = 4096;
        // 1 MiB regions (the default), and regions smaller than most batches (so that most
        // regions hold no batch start and the applier walks gaps itself).
        let contexts = [1 << 20, 4000].map(|region| {
            let mut c = ctx(&lock, interval as u32, 1 << 20);
            c.config.recovery_region_bytes = region;
            c
        });
        for ((name, flips, cut), c) in cases
            .iter()
            .flat_map(|case| contexts.iter().map(move |c| (case, c)))
        {
            let mut corrupt = all.clone();
            for (i, x) in flips {
                corrupt[*i] ^= x;
            }
            if let Some(len) = cut {
                corrupt.truncate(*len);
            }
            // The reference: one sequential scan checking every CRC.
            let mut it = Batches::new(&corrupt, 0).validate_crc(true);
            let mut want_visited = Vec::new();
            let mut want_error = None;
            for e in &mut it {
                match e {
                    Ok(e) => want_visited.push(e.as_v2().unwrap().base_offset()),
                    Err(e) => want_error = Some(e),
                }
            }
            let want_end = it.valid_prefix_end();
            let kept = want_visited.len();
            for round in 0..3 {
                for kind in [FileKind::Log, FileKind::Index, FileKind::TimeIndex] {
                    let p = segment_file_path(dir.path(), 0, kind);
                    if p.exists() {
                        std::fs::remove_file(p).unwrap();
                    }
                }
                std::fs::write(segment_file_path(dir.path(), 0, FileKind::Log), &corrupt).unwrap();
                let mut seg = LogSegment::open(c, dir.path(), 0).unwrap();
                let mut visited = Vec::new();
                let out = seg
                    .recover(
                        &mut |b, _| {
                            visited.push(b.base_offset());
                            Ok::<_, SegmentError>(())
                        },
                        q.path(),
                    )
                    .unwrap();
                let region = c.config.recovery_region_bytes;
                let ctx = format!("{name}, {region}-byte regions, round {round}");
                assert_eq!(visited, want_visited, "{ctx}");
                assert_eq!(out.valid_bytes, want_end, "{ctx}");
                assert_eq!(out.batches, kept as u64, "{ctx}");
                assert_eq!(
                    out.truncated_bytes,
                    corrupt.len() as u64 - want_end,
                    "{ctx}"
                );
                match (&out.truncated_at, &want_error) {
                    (None, None) => assert_eq!(want_end, corrupt.len() as u64, "{ctx}"),
                    (Some((pos, got)), Some(want)) => {
                        assert_eq!((*pos, got), (want.position, want), "{ctx}");
                    }
                    (Some((pos, got)), None) => {
                        // The sequential scan ends on an incomplete trailing batch.
                        assert_eq!(*pos, want_end, "{ctx}");
                        assert!(
                            matches!(got.kind, FormatErrorKind::Truncated { .. }),
                            "{ctx}: {got:?}"
                        );
                    }
                    (None, Some(want)) => panic!("{ctx}: recovery missed {want:?}"),
                }
                seg.close().unwrap();
                let (index, time) = expected_indexes(0, &bs[..kept], interval);
                assert_eq!(read_file(dir.path(), 0, FileKind::Index), index, "{ctx}");
                assert_eq!(read_file(dir.path(), 0, FileKind::TimeIndex), time, "{ctx}");
                if let Some(f) = &out.quarantine_file {
                    assert_eq!(
                        std::fs::read(f).unwrap(),
                        &corrupt[want_end as usize..],
                        "{ctx}"
                    );
                    std::fs::remove_file(f).unwrap();
                }
            }
        }
    }

    #[test]
    fn recover_cuts_a_torn_tail_as_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let c = ctx(&lock, 0, 1 << 20);
        let mut seg = LogSegment::create(&c, dir.path(), 0).unwrap();
        let a = batch(0, 2, 1);
        let b = batch(2, 2, 1);
        append_batch(&mut seg, &a);
        append_batch(&mut seg, &b);
        seg.close().unwrap();
        let p = segment_file_path(dir.path(), 0, FileKind::Log);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.truncate(a.len() + 30);
        std::fs::write(&p, &bytes).unwrap();
        let mut seg = LogSegment::open(&c, dir.path(), 0).unwrap();
        let out = seg
            .recover(&mut |_, _| Ok::<_, SegmentError>(()), dir.path())
            .unwrap();
        assert_eq!((out.valid_bytes, out.truncated_bytes), (a.len() as u64, 30));
        let (_, e) = out.truncated_at.unwrap();
        assert_eq!(
            e.kind,
            FormatErrorKind::Truncated {
                need: b.len() as u64,
                have: 30
            }
        );
        assert_eq!(
            std::fs::read(out.quarantine_file.unwrap()).unwrap(),
            &b[..30]
        );
    }

    #[test]
    fn recover_appends_visitor_aborted_txns_and_propagates_visitor_errors() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let c = ctx(&lock, 0, 1 << 20);
        let mut seg = LogSegment::create(&c, dir.path(), 0).unwrap();
        for i in 0..4 {
            append_batch(&mut seg, &batch(i * 2, 2, 1));
        }
        // Batch 2 aborts one transaction; batch 6 is a barrier-like point aborting two, both
        // ending at its last offset (equal last offsets are accepted, in order).
        let mut seg_txn = |b: &record_format::internals::ScannedBatch<'_>,
                           out: &mut Vec<segment_store::AbortedTxn>| {
            let (base, last) = (b.base_offset(), b.last_offset());
            match base {
                2 => out.push(segment_store::AbortedTxn::new(7, base - 1, last, 0)),
                6 => {
                    out.push(segment_store::AbortedTxn::new(8, base - 2, last, 4));
                    out.push(segment_store::AbortedTxn::new(9, base - 1, last, 4));
                }
                _ => {}
            }
            Ok::<_, SegmentError>(())
        };
        seg.recover(&mut seg_txn, dir.path()).unwrap();
        let txns = seg.txn_index().all_aborted_txns().unwrap();
        assert_eq!(
            txns.iter()
                .map(|t| (t.producer_id, t.last_offset))
                .collect::<Vec<_>>(),
            vec![(7, 3), (8, 7), (9, 7)]
        );
        #[derive(Debug)]
        #[allow(dead_code)]
        enum MyErr {
            Seg(SegmentError),
            Stop(i64),
        }
        impl From<SegmentError> for MyErr {
            fn from(e: SegmentError) -> Self {
                MyErr::Seg(e)
            }
        }
        let r = seg.recover(
            &mut |b, _| {
                if b.base_offset() == 4 {
                    Err(MyErr::Stop(4))
                } else {
                    Ok(())
                }
            },
            dir.path(),
        );
        assert!(matches!(r, Err(MyErr::Stop(4))), "{r:?}");
    }

    #[test]
    fn corrupt_or_short_index_files_are_typed_errors_and_recover_rebuilds_them() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let c = ctx(&lock, 200, 1 << 20);
        let mut seg = LogSegment::create(&c, dir.path(), 10).unwrap();
        let mut off = 10;
        for _ in 0..12 {
            append_batch(&mut seg, &batch(off, 2, 100 + off));
            off += 2;
        }
        seg.close().unwrap();
        let good_index = read_file(dir.path(), 10, FileKind::Index);
        let good_time = read_file(dir.path(), 10, FileKind::TimeIndex);
        assert!(good_index.len() >= 16 && good_time.len() >= 24);

        // Short offset index: length not a multiple of 8.
        let ip = segment_file_path(dir.path(), 10, FileKind::Index);
        std::fs::write(&ip, &good_index[..good_index.len() - 3]).unwrap();
        let seg = LogSegment::open(&c, dir.path(), 10).unwrap();
        let err = seg.sanity_check().unwrap_err();
        assert!(
            matches!(&err, SegmentError::CorruptIndex { reason: IndexCorruption::LengthNotMultiple { entry_size: 8, .. }, path } if *path == ip),
            "{err:?}"
        );
        drop(seg);

        // Time index whose last timestamp is below the first.
        let tp = segment_file_path(dir.path(), 10, FileKind::TimeIndex);
        let mut t = good_time.clone();
        let n = t.len();
        t[n - 12..n - 4].copy_from_slice(&1i64.to_be_bytes());
        std::fs::write(&tp, &t).unwrap();
        let mut seg = LogSegment::open(&c, dir.path(), 10).unwrap();
        let err = seg.sanity_check().unwrap_err();
        assert!(
            matches!(
                &err,
                SegmentError::CorruptIndex {
                    reason: IndexCorruption::LengthNotMultiple { .. },
                    ..
                }
            ),
            "offset index still short: {err:?}"
        );
        seg.recover(&mut |_, _| Ok::<_, SegmentError>(()), dir.path())
            .unwrap();
        seg.sanity_check().unwrap();
        seg.close().unwrap();
        assert_eq!(read_file(dir.path(), 10, FileKind::Index), good_index);
        assert_eq!(read_file(dir.path(), 10, FileKind::TimeIndex), good_time);

        // Time-index-only corruption is reported as such.
        std::fs::write(&tp, &t).unwrap();
        let seg = LogSegment::open(&c, dir.path(), 10).unwrap();
        let err = seg.sanity_check().unwrap_err();
        assert!(
            matches!(
                &err,
                SegmentError::CorruptIndex {
                    reason: IndexCorruption::LastTimestampBelowFirst { last: 1, .. },
                    ..
                }
            ),
            "{err:?}"
        );
        drop(seg);

        // LocalLog refuses to open a segment whose index fails the sanity check, even below the
        // recovery point (segment 10 is below segment 100, which holds the recovery point);
        // the recovery crate's loader recovers it.
        let mut later = LogSegment::create(&c, dir.path(), 100).unwrap();
        append_batch(&mut later, &batch(100, 1, 5_000));
        later.close().unwrap();
        drop((lock, c));
        let clock = Arc::new(ManualClock::new(0));
        let err = LocalLog::open_with(dir.path(), config(1 << 30), i64::MAX, env(&clock))
            .err()
            .unwrap();
        assert!(
            matches!(&err, SegmentError::NeedsRecovery { segments, .. } if *segments == [10]),
            "{err:?}"
        );
        let (partition, report) = recovered(dir.path(), config(1 << 30), i64::MAX, &clock);
        assert_eq!(report.recovered_from, Some(10));
        let log = partition.local_log();
        assert_eq!(log.log_end_offset(), 101);
        assert!(off < 100);
        log.with_segments(|segs| {
            for s in segs {
                s.unwrap().sanity_check().unwrap();
            }
        })
        .unwrap();
    }

    #[test]
    fn delete_renames_then_removes_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        let c = ctx(&lock, 0, 1 << 20);
        let mut seg = LogSegment::create(&c, dir.path(), 0).unwrap();
        append_batch(&mut seg, &batch(0, 2, 1));
        seg.update_txn_index(&segment_store::AbortedTxn::new(1, 0, 1, 0))
            .unwrap();
        seg.on_become_inactive_segment().unwrap();
        seg.delete().unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n != ".lock")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn unflushed_log_bytes_are_lost_in_a_simulated_crash() {
        use testkit::TornWrite;
        let (_dir, real, sim) = simulated_dir();
        let lock = DirLock::acquire(&real).unwrap();
        let c = SegmentContext {
            storage: Arc::new(sim.clone()),
            ..ctx(&lock, 0, 1 << 20)
        };
        let mut seg = LogSegment::create(&c, &real, 0).unwrap();
        sim.sync_dir(&real).unwrap();
        let a = batch(0, 2, 1);
        append_batch(&mut seg, &a);
        seg.flush().unwrap();
        append_batch(&mut seg, &batch(2, 2, 1));
        drop(seg);
        let img = sim.crash(TornWrite::Prefix(20));
        let log = &img[&segment_file_path(&real, 0, FileKind::Log)];
        assert_eq!(log.len(), a.len() + 20);
        // Recovery over the crash image keeps the synced batch and quarantines the torn one.
        let mut seg = LogSegment::open(&c, &real, 0).unwrap();
        let out = seg
            .recover(&mut |_, _| Ok::<_, SegmentError>(()), &real)
            .unwrap();
        assert_eq!((out.valid_bytes, out.truncated_bytes), (a.len() as u64, 20));
        assert_eq!(
            sim.read(out.quarantine_file.as_ref().unwrap())
                .unwrap()
                .len(),
            20
        );
        assert_eq!(seg.read_next_offset().unwrap(), 2);
    }
}

mod local_log {
    use super::*;

    /// A closed log in `dir` of `count` one-record batches, a segment each (the last one
    /// active): the batches, and the size of one.
    fn one_batch_segments(dir: &Path, count: i64, clock: &Arc<ManualClock>) -> (Vec<Vec<u8>>, u64) {
        let bs = batches(count, 1, 1_000, 10);
        let size = bs[0].len() as u64;
        let log = open_log(dir, config(size), clock);
        for b in &bs {
            log.append(b).unwrap();
        }
        log.close().unwrap();
        (bs, size)
    }

    /// `LogConfig::max_open_inactive_segments` sets the bound: with 2, reading every segment
    /// in turn keeps at most 2 inactive ones open; with 64, reading 20 segments twice keeps
    /// all 20 open at once.
    #[test]
    fn the_open_segment_bound_is_the_configured_one() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (bs, size) = one_batch_segments(dir.path(), 20, &clock);
        for (max, most_open) in [(2usize, 3usize), (64, 20)] {
            let config = LogConfig {
                max_open_inactive_segments: max,
                ..config(size)
            };
            let log = open_log(dir.path(), config, &clock);
            let mut seen = 0;
            for _ in 0..2 {
                for (n, b) in bs.iter().enumerate() {
                    let r = log.read(n as i64, 1 << 20, false).unwrap();
                    assert_eq!(&r.records, b);
                    seen = seen.max(log.open_segments());
                    assert!(log.open_segments() <= max + 1, "{max}");
                }
            }
            assert_eq!(seen, most_open, "bound {max}");
            log.close().unwrap();
        }
    }

    /// Segments are opened when the log needs them and closed again: a reopened log of many
    /// segments holds only its active one open, and reading every segment leaves at most
    /// `MAX_OPEN_INACTIVE_SEGMENTS` inactive ones open (their descriptors counted too). Every
    /// read still returns the right batches, and the log appends on.
    #[test]
    fn segments_are_opened_lazily_and_closed_beyond_a_bound() {
        use segment_store::internals::DESCRIPTORS_PER_SEGMENT;
        use segment_store::internals::MAX_OPEN_INACTIVE_SEGMENTS;
        // The descriptors open on this test's directory (other tests of this binary open and
        // close their own meanwhile).
        let open_files = |dir: &Path| -> Option<u64> {
            let entries = std::fs::read_dir("/proc/self/fd").ok()?;
            Some(
                entries
                    .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter(|target| target.starts_with(dir))
                    .count() as u64,
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let bs = batches(60, 1, 1_000, 10);
        let size = bs[0].len() as u64;
        let log = open_log(dir.path(), config(size), &clock);
        for b in &bs {
            log.append(b).unwrap();
        }
        let segments = log.segments().unwrap().len();
        assert!(segments >= 50, "{segments}");
        assert!(log.open_segments() <= MAX_OPEN_INACTIVE_SEGMENTS + 1);
        log.close().unwrap();

        let before = open_files(dir.path());
        let log = open_log(dir.path(), config(size), &clock);
        assert_eq!(log.open_segments(), 1, "only the active segment is open");
        for (n, b) in bs.iter().enumerate() {
            let r = log.read(n as i64, 1 << 20, false).unwrap();
            assert_eq!(&r.records, b);
            assert!(log.open_segments() <= MAX_OPEN_INACTIVE_SEGMENTS + 1);
        }
        if let (Some(before), Some(after)) = (before, open_files(dir.path())) {
            // The lock, the active segment and the inactive ones kept open.
            let bound = 1 + (MAX_OPEN_INACTIVE_SEGMENTS as u64 + 1) * DESCRIPTORS_PER_SEGMENT;
            assert!(
                after <= before + bound,
                "{before} -> {after} (at most {bound} more)"
            );
            assert!(
                after > before + MAX_OPEN_INACTIVE_SEGMENTS as u64,
                "{before} -> {after}"
            );
        }
        assert_eq!(
            log.fetch_offset_by_timestamp(1_000)
                .unwrap()
                .unwrap()
                .offset,
            0
        );
        log.release_segments().unwrap();
        assert_eq!(log.open_segments(), 0);
        log.append(&batch(60, 1, 2_000)).unwrap();
        assert_eq!(log.log_end_offset(), 61);
        assert_eq!(
            log.read(60, 1 << 20, false).unwrap().records,
            batch(60, 1, 2_000)
        );
    }

    /// Beyond the bound, the cache closes the segments used least recently, not those opened
    /// first: a segment read again stays open while others come and go.
    #[test]
    fn the_segments_used_least_recently_are_closed_first() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (bs, size) = one_batch_segments(dir.path(), 12, &clock);
        let cfg = LogConfig {
            max_open_inactive_segments: 3,
            ..config(size)
        };
        let log = open_log(dir.path(), cfg, &clock);
        let active = log.active_segment_base();
        let read = |o: i64| {
            assert_eq!(log.read(o, 1 << 20, false).unwrap().records, bs[o as usize]);
        };
        for o in [0, 1, 2] {
            read(o);
        }
        assert_eq!(log.open_segment_bases(), [0, 1, 2, active]);
        // 0 read again, then 3 and 4: 1 and 2 go, 0 stays.
        read(0);
        read(3);
        assert_eq!(log.open_segment_bases(), [0, 2, 3, active]);
        read(0);
        read(4);
        assert_eq!(log.open_segment_bases(), [0, 3, 4, active]);
        // A segment read as often as the others but longest ago goes.
        for o in [5, 3, 4, 6] {
            read(o);
        }
        assert_eq!(log.open_segment_bases(), [3, 4, 6, active]);
    }

    /// A partition inside a directory whose `.lock` a log directory holds (exclusively) cannot
    /// be opened on its own, and a log directory cannot be locked while one of its partitions is
    /// open on its own (which holds that `.lock` shared).
    #[test]
    fn a_partition_and_its_log_directory_keep_each_other_out() {
        let root = tempfile::tempdir().unwrap();
        let part = root.path().join("orders-0");
        std::fs::create_dir(&part).unwrap();
        let held = DirLock::acquire(root.path()).unwrap();
        let err = LocalLog::open(&part, config(1 << 20), 0).unwrap_err();
        assert!(matches!(err, SegmentError::Locked { .. }), "{err:?}");
        drop(held);
        let log = LocalLog::open(&part, config(1 << 20), 0).unwrap();
        let err = DirLock::acquire(root.path()).unwrap_err();
        assert!(matches!(err, SegmentError::Locked { .. }), "{err:?}");
        drop(log);
        DirLock::acquire(root.path()).unwrap();
    }

    #[test]
    fn rolls_by_size_and_reads_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let bs = batches(20, 5, 1_000, 10);
        let size = bs[0].len() as u64;
        let log = open_log(dir.path(), config(3 * size), &clock);
        let mut rolls = Vec::new();
        for b in &bs {
            let out = log.append(b).unwrap();
            if let Some(r) = out.rolled {
                rolls.push(r);
            }
        }
        assert_eq!(
            rolls,
            (1..7)
                .map(|i| (i * 15, RollReason::Size))
                .collect::<Vec<_>>()
        );
        let segs = log.segments().unwrap();
        assert_eq!(
            segs.iter().map(|s| s.base_offset).collect::<Vec<_>>(),
            vec![0, 15, 30, 45, 60, 75, 90]
        );
        assert_eq!(log.log_end_offset(), 100);
        // Sealed segments' indexes are trimmed, the active one's preallocated.
        assert!(segs[0].time_index_entries >= 1);
        let all = bs.concat();
        for start in 0..100 {
            let r = log.read(start, all.len(), false).unwrap();
            let got = whole_valid(&r.records);
            // Reads stop at the end of the segment holding `start`.
            let seg_base = start - start % 15;
            assert_eq!(got.first().unwrap().0, start - start % 5);
            assert_eq!(got.last().unwrap().1, (seg_base + 14).min(99));
        }
        let r = log.read(100, 1000, false).unwrap();
        assert!(r.records.is_empty());
        assert_eq!(r.fetch_offset_metadata.message_offset, 100);
        assert!(matches!(
            log.read(101, 10, false),
            Err(SegmentError::OffsetOutOfRange {
                offset: 101,
                log_start_offset: 0,
                log_end_offset: 100
            })
        ));
        let ts = log
            .fetch_offset_by_timestamp(1_000 + 10 * 13 + 2)
            .unwrap()
            .unwrap();
        assert_eq!(ts.offset, 13 * 5 + 2);
        assert!(log.fetch_offset_by_timestamp(1 << 50).unwrap().is_none());

        // Appends must continue from the log end offset.
        let err = log.append(&batch(99, 1, 0)).unwrap_err();
        assert!(matches!(
            err,
            SegmentError::UnexpectedAppendOffset {
                first_offset: 99,
                expected: 100,
                ..
            }
        ));
        let err = log.append(&batch(100, 1, 0)[..50]).unwrap_err();
        assert!(matches!(err, SegmentError::Format { .. }), "{err:?}");

        // Reopen after a clean close (a LocalLog opens a recovered directory only): same
        // segments, same end offset, same bytes.
        log.close().unwrap();
        let log = open_log(dir.path(), config(3 * size), &clock);
        assert_eq!(log.log_end_offset(), 100);
        let mut got = Vec::new();
        let mut at = 0;
        while at < 100 {
            let r = log.read(at, 1 << 20, false).unwrap();
            at = whole_valid(&r.records).last().unwrap().1 + 1;
            got.extend_from_slice(&r.records);
        }
        assert_eq!(got, all);
    }

    #[test]
    fn rolls_by_time_index_full_and_offset_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let cfg = LogConfig {
            segment_ms: 1_000,
            index_interval_bytes: 0,
            max_index_size: 48,
            ..config(1 << 30)
        };
        let log = open_log(dir.path(), cfg, &clock);
        // Time: the incoming max timestamp is more than segment.ms after the first batch's.
        assert_eq!(log.append(&batch(0, 1, 10_000)).unwrap().rolled, None);
        assert_eq!(log.append(&batch(1, 1, 11_000)).unwrap().rolled, None);
        assert_eq!(
            log.append(&batch(2, 1, 11_001)).unwrap().rolled,
            Some((2, RollReason::Time))
        );
        // Index full: constant timestamps, 6 offset-index slots.
        let mut off = 3;
        let mut reason = None;
        while reason.is_none() {
            reason = log.append(&batch(off, 1, 11_001)).unwrap().rolled;
            off += 1;
        }
        assert_eq!(reason, Some((off - 1, RollReason::OffsetIndexFull)));
        // Offset overflow: a gap of more than i32::MAX offsets.
        let far = off + i64::from(i32::MAX) + 10;
        assert_eq!(
            log.append(&batch(far, 1, 11_001)).unwrap().rolled,
            Some((far, RollReason::OffsetOverflow))
        );
        assert_eq!(log.log_end_offset(), far + 1);
        // Explicit roll onto an existing non-empty segment fails; the empty active one is reused.
        let base = log.roll(None).unwrap();
        assert_eq!(base, far + 1);
        assert_eq!(log.roll(Some(far + 1)).unwrap(), far + 1);
        assert_eq!(log.segments().unwrap().len(), 5);
    }

    #[test]
    fn truncate_at_every_batch_boundary_across_segments() {
        let bs = batches(12, 4, 1_000, 10);
        let all = bs.concat();
        let size = bs[0].len() as u64;
        for k in (0..12).rev() {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new(0));
            let log = open_log(dir.path(), config(3 * size), &clock);
            for b in &bs {
                log.append(b).unwrap();
            }
            let target = k as i64 * 4;
            assert!(log.truncate_to(target).unwrap());
            assert_eq!(log.log_end_offset(), target);
            let segs = log.segments().unwrap();
            assert!(segs.iter().all(|s| s.base_offset <= target));
            assert_eq!(log.size(), (k as u64) * size);
            if k > 0 {
                let mut got = Vec::new();
                let mut at = 0;
                while at < target {
                    let r = log.read(at, 1 << 20, false).unwrap();
                    at = whole_valid(&r.records).last().unwrap().1 + 1;
                    got.extend_from_slice(&r.records);
                }
                assert_eq!(got, &all[..k * size as usize]);
            }
            log.with_segments(|segs| {
                for s in segs {
                    let s = s.unwrap();
                    let idx = s.offset_index();
                    for n in 0..idx.entries() {
                        let e = idx.entry(n).unwrap();
                        let t = s.translate_offset(e.offset, 0).unwrap().unwrap();
                        assert_eq!(
                            (t.last_offset, t.position),
                            (e.offset, u64::from(e.position.0))
                        );
                    }
                }
            })
            .unwrap();
            // The log continues from the target.
            log.append(&bs[k]).unwrap();
            assert_eq!(log.log_end_offset(), target + 4);
            assert!(!log.truncate_to(target + 4).unwrap());
        }
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let log = open_log(dir.path(), config(1 << 20), &clock);
        assert!(matches!(
            log.truncate_to(-1),
            Err(SegmentError::InvalidTruncation { target: -1, .. })
        ));
        log.truncate_fully_and_start_at(500).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
        assert_eq!(log.segments().unwrap().len(), 1);
        log.append(&batch(500, 2, 0)).unwrap();
        // Truncating below the first segment restarts the log there.
        assert!(log.truncate_to(100).unwrap());
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 100));
        assert_eq!(log.segments().unwrap()[0].base_offset, 100);
    }

    /// `file.delete.delay.ms`: truncation's deleted segments wait as `.deleted` until the delay
    /// passes or the log closes; with a delay of 0 they go at once.
    #[test]
    fn deleted_segment_files_wait_for_the_delay_or_the_close() {
        let bs = batches(12, 4, 1_000, 1_000);
        let size = bs[0].len() as u64;
        let deleted_names = |dir: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".deleted"))
                .collect();
            v.sort();
            v
        };
        let clock = Arc::new(ManualClock::new(1_000));
        for delay in [60_000, 0] {
            let dir = tempfile::tempdir().unwrap();
            let log = open_log(
                dir.path(),
                LogConfig {
                    file_delete_delay_ms: delay,
                    ..config(3 * size)
                },
                &clock,
            );
            for b in &bs {
                log.append(b).unwrap();
            }
            // Truncating to offset 12 deletes the segments at 24 and 36 (their every file).
            assert!(log.truncate_to(12).unwrap());
            let waiting = deleted_names(dir.path());
            if delay == 0 {
                assert_eq!(waiting, Vec::<String>::new());
                assert!(log.pending_deleted_segments().is_empty());
                continue;
            }
            assert!(
                waiting.contains(&"00000000000000000024.log.deleted".to_owned())
                    && waiting.contains(&"00000000000000000036.index.deleted".to_owned()),
                "{waiting:?}"
            );
            let mut pending = log.pending_deleted_segments();
            pending.sort_unstable();
            assert_eq!(pending, [24, 36]);
            // The log reads on without them, and closing removes them.
            assert_eq!(log.log_end_offset(), 12);
            log.close().unwrap();
            assert_eq!(deleted_names(dir.path()), Vec::<String>::new());
        }
    }

    #[test]
    fn retention_by_size_time_and_start_offset() {
        let bs = batches(12, 4, 1_000, 1_000);
        let size = bs[0].len() as u64;
        let setup = |cfg: LogConfig, clock: &Arc<ManualClock>| {
            let dir = tempfile::tempdir().unwrap();
            let log = open_log(dir.path(), cfg, clock);
            for b in &bs {
                log.append(b).unwrap();
            }
            assert_eq!(log.segments().unwrap().len(), 4);
            (dir, log)
        };
        let clock = Arc::new(ManualClock::new(0));

        // Size: 4 segments of 3 batches; keep at most 7 batches' worth → delete 1 segment
        // (deleting the second would leave only 6 < 7... Kafka deletes while size - seg >= limit).
        let (_d, log) = setup(
            LogConfig {
                retention_bytes: (7 * size) as i64,
                retention_ms: -1,
                ..config(3 * size)
            },
            &clock,
        );
        assert_eq!(log.delete_old_segments(i64::MAX).unwrap(), 1);
        assert_eq!(log.log_start_offset(), 12);
        assert_eq!(log.size(), 9 * size);
        assert!(matches!(
            log.read(11, 100, false),
            Err(SegmentError::OffsetOutOfRange {
                offset: 11,
                log_start_offset: 12,
                ..
            })
        ));
        // The high watermark holds deletion back.
        let (_d, log) = setup(
            LogConfig {
                retention_bytes: 0,
                retention_ms: -1,
                ..config(3 * size)
            },
            &clock,
        );
        assert_eq!(log.delete_old_segments(20).unwrap(), 1);
        assert_eq!(log.delete_old_segments(48).unwrap(), 3);
        // Everything went: a new empty active segment at the log end offset.
        assert_eq!(
            log.segments()
                .unwrap()
                .iter()
                .map(|s| (s.base_offset, s.size))
                .collect::<Vec<_>>(),
            vec![(48, 0)]
        );
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (48, 48));

        // Time: segment largest timestamps are 3_xxx, 6_xxx, 9_xxx, 12_xxx.
        let (_d, log) = setup(
            LogConfig {
                retention_ms: 5_000,
                ..config(3 * size)
            },
            &clock,
        );
        clock.set(10_500);
        assert_eq!(log.delete_old_segments(i64::MAX).unwrap(), 1);
        assert_eq!(log.log_start_offset(), 12);
        clock.set(0);

        // Start offset: segments wholly below it go.
        let (_d, log) = setup(config(3 * size), &clock);
        assert!(log.increment_log_start_offset(30).unwrap());
        assert!(!log.increment_log_start_offset(10).unwrap());
        assert!(matches!(
            log.increment_log_start_offset(49),
            Err(SegmentError::OffsetOutOfRange { offset: 49, .. })
        ));
        assert_eq!(log.delete_old_segments(i64::MAX).unwrap(), 2);
        assert_eq!(
            log.segments()
                .unwrap()
                .iter()
                .map(|s| s.base_offset)
                .collect::<Vec<_>>(),
            vec![24, 36]
        );
        assert_eq!(log.log_start_offset(), 30);
        let r = log.read(30, 10_000, false).unwrap();
        assert_eq!(whole_valid(&r.records)[0].0, 28);
        // Kafka's file.delete.delay.ms: the deleted segments' files wait as `.deleted` (no live
        // name left), and go once the delay has passed on the clock.
        let names = |log: &LocalLog| -> Vec<String> {
            std::fs::read_dir(log.dir())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        };
        let waiting = names(&log);
        assert!(
            waiting
                .iter()
                .filter(|n| n.starts_with("00000000000000000000")
                    || n.starts_with("00000000000000000012"))
                .all(|n| n.ends_with(".deleted")),
            "{waiting:?}"
        );
        assert!(
            waiting.contains(&"00000000000000000000.log.deleted".to_owned()),
            "{waiting:?}"
        );
        let mut pending = log.pending_deleted_segments();
        pending.sort_unstable();
        assert_eq!(pending, [0, 12]);
        clock.set(59_999);
        assert_eq!(log.delete_expired_files().unwrap(), 0);
        clock.set(60_000);
        assert_eq!(log.delete_expired_files().unwrap(), 2);
        assert!(log.pending_deleted_segments().is_empty());
        let gone = names(&log);
        assert!(
            !gone.iter().any(|n| n.starts_with("00000000000000000000")),
            "{gone:?}"
        );
        assert!(!gone.iter().any(|n| n.ends_with(".deleted")), "{gone:?}");
        clock.set(0);
    }

    #[test]
    fn flush_advances_the_recovery_point_and_open_recovers_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let bs = batches(9, 2, 1_000, 10);
        let size = bs[0].len() as u64;
        let log = open_log(dir.path(), config(3 * size), &clock);
        for b in &bs {
            log.append(b).unwrap();
        }
        // Appends move the recovery point only when they roll: a roll flushes up to the new
        // segment (segments start at 0, 6 and 12).
        assert_eq!(log.recovery_point(), 12);
        log.close().unwrap();
        let log = LocalLog::open_with(dir.path(), config(3 * size), 0, env(&clock)).unwrap();
        assert_eq!(log.recovery_point(), 0);
        log.flush(7).unwrap();
        assert_eq!(log.recovery_point(), 7);
        log.flush(100).unwrap();
        assert_eq!(log.recovery_point(), 18);
        drop(log);

        // Corrupt the middle segment: recovery (the recovery crate's loader) from offset 6 cuts
        // it and moves the later segment (nothing is deleted), the cut bytes and the later
        // segment both in the quarantine directory.
        let p = segment_file_path(dir.path(), 6, FileKind::Log);
        let mut bytes = std::fs::read(&p).unwrap();
        let at = size as usize + 80;
        bytes[at] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let (partition, report) = recovered(dir.path(), config(3 * size), 7, &clock);
        // One valid batch seen (offset 6), then the cut.
        assert_eq!(report.recovered_from, Some(6));
        assert_eq!(report.batches_scanned, 1);
        let log = partition.local_log();
        assert_eq!(log.log_end_offset(), 8);
        assert_eq!(
            log.segments()
                .unwrap()
                .iter()
                .map(|s| s.base_offset)
                .collect::<Vec<_>>(),
            vec![0, 6]
        );
        let q = report.quarantine_dir.clone().unwrap();
        let qf = q.join(quarantine_file_name(6, size));
        assert_eq!(std::fs::read(qf).unwrap(), &bytes[size as usize..]);
        assert!(segment_file_path(&q, 12, FileKind::Log).exists());
        assert!(!segment_file_path(dir.path(), 12, FileKind::Log).exists());
        partition.close().unwrap();
    }

    #[test]
    fn concurrent_readers_only_ever_see_whole_valid_batches() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let per = 3i64;
        let size = batch(0, per, 0).len() as u64;
        let log = Arc::new(open_log(dir.path(), config(40 * size), &clock));
        let total = 600i64;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|t: i64| {
                let log = Arc::clone(&log);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    let mut i = 0i64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let end = log.log_end_offset();
                        if end == 0 {
                            continue;
                        }
                        i = (i + 7 + t) % end;
                        let max = 1 + (i as usize * 131) % (5 * size as usize);
                        let r = log.read(i, max, true).unwrap();
                        let got = whole_valid(&r.records);
                        assert!(!got.is_empty());
                        assert!(got[0].0 <= i && i <= got[0].1);
                        for w in got.windows(2) {
                            assert_eq!(w[0].1 + 1, w[1].0);
                        }
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for n in 0..total {
            log.append(&batch(n * per, per, n)).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(reads > 0);
        assert_eq!(log.log_end_offset(), total * per);
        assert!(log.segments().unwrap().len() >= 10);
    }

    #[test]
    fn the_directory_is_locked_while_open() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let log = open_log(dir.path(), config(1 << 20), &clock);
        let err = LocalLog::open(dir.path(), config(1 << 20), 0).unwrap_err();
        assert!(matches!(err, SegmentError::Locked { .. }), "{err:?}");
        drop(log);
        LocalLog::open(dir.path(), config(1 << 20), 0).unwrap();
    }

    #[test]
    fn storage_is_the_only_writer_of_the_log() {
        // Every .log byte goes through the Storage seam: a SimulatedFs sees them all.
        let (_dir, real, sim) = simulated_dir();
        let log = LocalLog::open_with(&real, config(1 << 20), 0, sim_env(&sim)).unwrap();
        let b = batch(0, 3, 1);
        log.append(&b).unwrap();
        let p = segment_file_path(&real, 0, FileKind::Log);
        assert_eq!(sim.read(&p).unwrap(), b);
        assert!(!p.exists(), "the .log must not be written around the seam");
        let _: &dyn Storage = &sim;
    }

    #[test]
    fn rolls_and_truncations_leave_every_older_segment_durable_as_it_is() {
        // A roll's new segment becomes durable at the next directory sync, and recovery does not
        // look below the recovery point: the segment it seals must be durable as it stands (no
        // gap under the new segment). A truncation is durable at once: a crash cannot bring the
        // cut batches back, under a later write or under a later segment.
        let (_dir, real, sim) = simulated_dir();
        let env = sim_env(&sim);
        let log = LocalLog::open_with(&real, config(1 << 20), 0, env).unwrap();
        for b in batches(4, 2, 0, 1) {
            log.append(&b).unwrap();
        }
        let first = segment_file_path(&real, 0, FileKind::Log);
        let durable_len = |sim: &testkit::SimulatedFs| sim.durable_image()[&first].len();
        assert_eq!(durable_len(&sim), 0, "nothing flushed yet");
        assert_eq!(log.roll(None).unwrap(), 8);
        assert_eq!(log.recovery_point(), 8);
        assert_eq!(durable_len(&sim), sim.read(&first).unwrap().len());

        // Flushed bytes cut by a truncation: the recovery point stays at the log end.
        let before = durable_len(&sim);
        log.truncate_to(4).unwrap();
        assert_eq!((log.log_end_offset(), log.recovery_point()), (4, 4));
        let kept = sim.read(&first).unwrap().len();
        assert!(kept < before);
        assert_eq!(durable_len(&sim), kept);
        assert_eq!(log.roll(None).unwrap(), 4);
        assert_eq!(durable_len(&sim), kept);
        drop(log);
        let image = sim.crash(testkit::TornWrite::None);
        assert_eq!(image[&first].len(), kept);
    }

    #[test]
    fn the_active_segment_opens_with_full_size_indexes_and_closes_to_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let bs = batches(30, 2, 1_000, 10);
        let size = bs[0].len() as u64;
        let log = open_log(dir.path(), config(20 * size), &clock);
        for b in &bs {
            log.append(b).unwrap();
        }
        log.close().unwrap();
        // Segments at 0 (20 batches) and 40 (10 batches, the active one), indexes trimmed.
        let paths = |kind| segment_file_path(dir.path(), 40, kind);
        let closed: Vec<Vec<u8>> = [FileKind::Index, FileKind::TimeIndex]
            .iter()
            .map(|&k| std::fs::read(paths(k)).unwrap())
            .collect();
        assert!(closed.iter().all(|b| !b.is_empty() && b.len() < 4096));

        let log = open_log(dir.path(), config(20 * size), &clock);
        // Open: 4096 bytes for the offset index, 4092 (whole 12-byte entries) for the time index.
        assert_eq!(
            std::fs::metadata(paths(FileKind::Index)).unwrap().len(),
            4096
        );
        assert_eq!(
            std::fs::metadata(paths(FileKind::TimeIndex)).unwrap().len(),
            4092
        );
        assert_eq!(log.log_end_offset(), 60);
        // Lookups through the reopened indexes still find every batch.
        for (i, b) in bs.iter().enumerate() {
            let offset = 2 * i as i64;
            let r = log.read(offset, 1 << 20, false).unwrap();
            assert_eq!(&r.records[..b.len()], &b[..], "offset {offset}");
        }
        log.close().unwrap();
        let reopened: Vec<Vec<u8>> = [FileKind::Index, FileKind::TimeIndex]
            .iter()
            .map(|&k| std::fs::read(paths(k)).unwrap())
            .collect();
        assert_eq!(reopened, closed);
    }
}

/// The quarantine copy of a cut tail: through the storage seam (`Storage::copy_range`), written
/// as `<name>.partial` and renamed once whole and synced.
mod quarantine_copy {
    use super::*;
    use segment_store::internals::partial_path;
    use segment_store::OpenMode;
    use testkit::{SimulatedFs, TornWrite};

    /// A segment of 20 batches on `sim` with 3 MiB of garbage (not all zeros, so each chunk of
    /// the copy is a write of its own) after them; returns the valid size and the whole file.
    fn cut_segment(sim: &SimulatedFs, dir: &Path, lock: &DirLock) -> (u64, Vec<u8>) {
        let c = SegmentContext {
            storage: Arc::new(sim.clone()),
            ..ctx(lock, 400, 1 << 20)
        };
        let mut seg = LogSegment::create(&c, dir, 0).unwrap();
        for b in batches(20, 2, 1_000, 1) {
            append_batch(&mut seg, &b);
        }
        seg.close().unwrap();
        let p = segment_file_path(dir, 0, FileKind::Log);
        let h = sim.open(&p, OpenMode::ReadWrite).unwrap();
        let valid = h.len().unwrap();
        let garbage: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8 | 1).collect();
        h.write_at(valid, &garbage).unwrap();
        h.sync_all().unwrap();
        sim.sync_dir(dir).unwrap();
        (valid, sim.read(&p).unwrap())
    }

    /// At every I/O point of the recovery, a failure (as `ENOSPC` would make it) and then a
    /// crash: neither what is left live after the error nor what survives the crash holds a
    /// file under the cut's name that is not the whole cut.
    #[test]
    fn an_interrupted_quarantine_copy_never_bears_the_name_of_a_complete_cut() {
        let mut completed = false;
        for n in 0..200u64 {
            let (_tmp, real, sim) = simulated_dir();
            let q = real.join("quarantine");
            sim.create_durable_dir_all(&q);
            let lock = DirLock::acquire(&real).unwrap();
            let (valid, whole) = cut_segment(&sim, &real, &lock);
            let cut = &whole[valid as usize..];
            let name = q.join(quarantine_file_name(0, valid));
            let c = SegmentContext {
                storage: Arc::new(sim.clone()),
                ..ctx(&lock, 400, 1 << 20)
            };
            let mut seg = LogSegment::open(&c, &real, 0).unwrap();
            sim.fail_after(n);
            let r = seg.recover(&mut |_, _| Ok::<_, SegmentError>(()), &q);
            let live = sim.live_image();
            if let Some(bytes) = live.get(&name) {
                assert_eq!(bytes.len(), cut.len(), "after {n} points: {r:?}");
                assert!(
                    bytes == cut,
                    "after {n} points: a cut file that is not the cut"
                );
            }
            drop(seg);
            let image = sim.crash(TornWrite::Prefix(usize::MAX));
            if let Some(bytes) = image.get(&name) {
                assert!(
                    bytes == cut,
                    "after {n} points and a crash: a wrong cut file"
                );
            }
            if r.is_ok() {
                assert!(
                    live.contains_key(&name),
                    "a completed recovery leaves the cut"
                );
                assert!(!live.contains_key(&partial_path(&name)));
                completed = true;
                break;
            }
        }
        assert!(completed, "the recovery never completed");
    }

    /// `StdFs::copy_range` of a range of a sparse file: the same bytes, and its holes stay holes
    /// (the copy's allocated blocks are those of the data, not of its length).
    #[cfg(target_os = "linux")]
    #[test]
    fn std_copy_range_keeps_the_holes_of_a_sparse_file() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("sparse");
        let f = std::fs::File::create(&from).unwrap();
        // 1 GiB: data at 4 KiB, at 512 MiB and in the last 10 bytes, holes between.
        f.set_len(1 << 30).unwrap();
        f.write_all_at(b"first data", 4096).unwrap();
        f.write_all_at(&[7u8; 100_000], 512 << 20).unwrap();
        f.write_all_at(b"last bytes", (1 << 30) - 10).unwrap();
        drop(f);
        let to = dir.path().join("copy");
        let offset = 4000;
        let len = (1u64 << 30) - offset - 5;
        assert_eq!(StdFs.copy_range(&from, offset, len, &to).unwrap(), len);
        let meta = std::fs::metadata(&to).unwrap();
        assert_eq!(meta.len(), len);
        // Allocated: a few pages of data, far below the length (a dense copy: 1 GiB).
        assert!(
            meta.blocks() * 512 < 8 << 20,
            "{} bytes allocated for a sparse copy",
            meta.blocks() * 512
        );
        let src = std::fs::File::open(&from).unwrap();
        let dst = std::fs::File::open(&to).unwrap();
        for at in [0u64, 96, 100, (512 << 20) - offset - 3, len - 10, len - 1] {
            let mut a = [0u8; 64];
            let mut b = [0u8; 64];
            let n = src.read_at(&mut a, at + offset).unwrap().min(64);
            let m = dst.read_at(&mut b, at).unwrap();
            let n = n.min(m);
            assert_eq!(a[..n], b[..n], "at {at}");
        }
        // The copy is a new file: an existing one is never written into.
        let err = StdFs.copy_range(&from, 0, 10, &to).unwrap_err();
        assert_eq!(err.io_kind(), Some(std::io::ErrorKind::AlreadyExists));
        // The same through the handles (what other storage does): holes kept as well.
        let to2 = dir.path().join("copy2");
        assert_eq!(
            segment_store::internals::copy_range_through_handles(&StdFs, &from, offset, len, &to2)
                .unwrap(),
            len
        );
        assert!(std::fs::metadata(&to2).unwrap().blocks() * 512 < 8 << 20);
        assert!(std::fs::read(&to).unwrap() == std::fs::read(&to2).unwrap());
    }
}

/// `LocalLog::slice_exact` hands out Kafka's fetch answer as a range of the segment's `.log`
/// instead of its bytes. Invariants: the slice names exactly the bytes `read_exact` copies for
/// the same call, with the same metadata and upper bound, on real files and on `SimulatedFs`;
/// the descriptor of a real file reads those bytes; a slice keeps reading its bytes after its
/// segment is deleted, and after a truncation below its end it gives a short read and a typed
/// error, not a fault.
mod file_slice {
    use super::*;
    use segment_store::FileSlice;

    /// A log of ~15 segments of 1-record batches, on `env`.
    fn sliced_log(dir: &Path, env: LogEnv) -> (LocalLog, Vec<Vec<u8>>) {
        let bs = batches(45, 1, 1_000, 10);
        let size = bs[0].len() as u64;
        let log = LocalLog::open_with(dir, config(3 * size), i64::MAX, env).unwrap();
        for b in &bs {
            log.append(b).unwrap();
        }
        assert!(log.segments().unwrap().len() >= 14);
        (log, bs)
    }

    fn bytes_of(slice: &Option<FileSlice>) -> Vec<u8> {
        slice
            .as_ref()
            .map_or_else(Vec::new, |s| s.to_vec().unwrap())
    }

    /// Every start offset, byte limit (0, inside a batch, whole batches, more than a segment),
    /// bound and `min_one_message`: the slice's bytes and metadata are `read_exact`'s.
    fn assert_slices_equal_reads(log: &LocalLog, batch_len: usize) {
        let end = log.log_end_offset();
        let limits = [0, 1, batch_len - 1, batch_len, 2 * batch_len + 7, 1 << 20];
        let (mut non_empty, mut nones) = (0, 0);
        for start in 0..=end {
            for max_offset in [start, start + 1, (start + 5).min(end), end] {
                for &max_bytes in &limits {
                    for min_one in [false, true] {
                        let read = log
                            .read_exact(start, max_bytes, min_one, max_offset, true)
                            .unwrap();
                        let slice = log
                            .slice_exact(start, max_bytes, min_one, max_offset, true)
                            .unwrap();
                        let ctx = format!("{start} {max_bytes} {min_one} {max_offset}");
                        let (read, slice) = match (read, slice) {
                            (Some(read), Some(slice)) => (read, slice),
                            (None, None) => {
                                nones += 1;
                                continue;
                            }
                            (r, s) => panic!("{ctx}: {r:?} vs {s:?}"),
                        };
                        let bytes = bytes_of(&slice.slice);
                        assert!(bytes == read.data.records, "{ctx}: {} bytes", bytes.len());
                        assert!(slice.slice.as_ref().is_none_or(|s| !s.is_empty()), "{ctx}");
                        assert_eq!(
                            slice.fetch_offset_metadata, read.data.fetch_offset_metadata,
                            "{ctx}"
                        );
                        assert_eq!(
                            slice.first_entry_incomplete, read.data.first_entry_incomplete,
                            "{ctx}"
                        );
                        assert_eq!(slice.upper_bound_offset, read.upper_bound_offset, "{ctx}");
                        // Without the aborted range: the same answer, an empty range.
                        let plain = log
                            .slice_exact(start, max_bytes, min_one, max_offset, false)
                            .unwrap()
                            .unwrap();
                        let plain_read = log
                            .read_exact(start, max_bytes, min_one, max_offset, false)
                            .unwrap()
                            .unwrap();
                        assert!(bytes_of(&plain.slice) == bytes, "{ctx}");
                        assert!(plain_read.data == read.data, "{ctx}");
                        assert_eq!(plain.fetch_offset_metadata, slice.fetch_offset_metadata);
                        assert_eq!(plain.first_entry_incomplete, slice.first_entry_incomplete);
                        assert_eq!(
                            (plain.upper_bound_offset, plain_read.upper_bound_offset),
                            (start, start),
                            "{ctx}"
                        );
                        let next = Batches::new(&read.data.records, 0)
                            .map_while(Result::ok)
                            .last()
                            .map_or(start, |e| e.last_offset() + 1);
                        assert_eq!(slice.next_fetch_offset().unwrap(), next, "{ctx}");
                        non_empty += usize::from(!read.data.records.is_empty());
                    }
                }
            }
        }
        assert!(non_empty > 100, "{non_empty} non-empty answers");
        // At the log end with a bound past it: no segment holds a batch there.
        assert!(nones > 0);
    }

    /// A fetch bounded below the log end (by a high watermark) stops before the batch holding
    /// the bound, and the log keeps where that batch lies for the next fetch with the same bound:
    /// after a truncation below it and appends of other batches, the same bound lies elsewhere,
    /// and the answer must follow the batches now there.
    #[test]
    fn the_same_bound_after_a_truncation_stops_at_the_batch_now_holding_it() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let log = open_log(dir.path(), config(1 << 20), &clock);
        let ones = batches(20, 1, 1_000, 10);
        for b in &ones {
            log.append(b).unwrap();
        }
        let bound = 15;
        let fetch = |log: &LocalLog| {
            let s = log
                .slice_exact(0, 1 << 20, true, bound, true)
                .unwrap()
                .unwrap();
            bytes_of(&s.slice)
        };
        for _ in 0..2 {
            assert!(fetch(&log) == ones[..15].concat());
        }
        assert!(log.truncate_to(10).unwrap());
        // Batches of 3 records from offset 10: offset 15 is now in the batch from 13.
        let threes: Vec<Vec<u8>> = (0..4).map(|i| batch(10 + 3 * i, 3, 2_000)).collect();
        for b in &threes {
            log.append(b).unwrap();
        }
        let expected = [ones[..10].concat(), threes[..1].concat()].concat();
        assert!(fetch(&log) == expected, "{} bytes", fetch(&log).len());
        // The next segment: the bound in a sealed one, then in the active one again.
        log.roll(None).unwrap();
        assert!(fetch(&log) == expected);
    }

    #[test]
    fn a_slice_holds_the_bytes_read_exact_copies_on_real_files() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (log, bs) = sliced_log(dir.path(), env(&clock));
        assert_slices_equal_reads(&log, bs[0].len());
    }

    #[test]
    fn a_slice_holds_the_bytes_read_exact_copies_on_simulated_storage() {
        let (_dir, real, sim) = simulated_dir();
        let (log, bs) = sliced_log(&real, sim_env(&sim));
        assert_slices_equal_reads(&log, bs[0].len());
        let s = log
            .slice_exact(0, 1 << 20, true, i64::MAX, true)
            .unwrap()
            .unwrap();
        #[cfg(unix)]
        assert!(
            s.slice.unwrap().as_fd().is_none(),
            "no descriptor of a simulated file"
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_descriptor_of_a_slice_reads_its_bytes() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (log, bs) = sliced_log(dir.path(), env(&clock));
        let s = log
            .slice_exact(4, 1 << 20, true, i64::MAX, true)
            .unwrap()
            .unwrap();
        let slice = s.slice.unwrap();
        let fd = slice.as_fd().unwrap().try_clone_to_owned().unwrap();
        let mut buf = vec![0u8; slice.len() as usize];
        std::fs::File::from(fd)
            .read_exact_at(&mut buf, slice.position())
            .unwrap();
        // Offsets 3..=5 share one segment: the slice holds 4 and 5.
        assert_eq!(buf, [bs[4].clone(), bs[5].clone()].concat());
    }

    #[test]
    fn a_slice_reads_its_bytes_after_its_segment_is_deleted_and_the_log_closed() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (log, bs) = sliced_log(dir.path(), env(&clock));
        let slice = log
            .slice_exact(0, 1 << 20, true, i64::MAX, true)
            .unwrap()
            .unwrap();
        let slice = slice.slice.unwrap();
        let path = slice.path().to_path_buf();
        assert!(log.increment_log_start_offset(20).unwrap());
        assert!(log.delete_old_segments(20).unwrap() > 0);
        assert!(!path.exists(), "{} still there", path.display());
        log.close().unwrap();
        assert_eq!(slice.to_vec().unwrap(), bs[..3].concat());
    }

    #[test]
    fn a_truncation_below_a_slice_gives_a_short_read_and_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(0));
        let (log, bs) = sliced_log(dir.path(), env(&clock));
        let end = log.log_end_offset();
        let s = log
            .slice_exact(end - 3, 1 << 20, true, end, true)
            .unwrap()
            .unwrap();
        let slice = s.slice.unwrap();
        assert_eq!(slice.to_vec().unwrap(), bs[bs.len() - 3..].concat());
        assert!(log.truncate_to(end - 2).unwrap());
        let mut buf = vec![0u8; slice.len() as usize];
        assert_eq!(
            slice.read_into(&mut buf).unwrap(),
            bs[0].len(),
            "one batch left"
        );
        assert_eq!(buf[..bs[0].len()], bs[bs.len() - 3][..]);
        let err = slice.to_vec().unwrap_err();
        let SegmentError::SliceTruncated {
            position,
            len,
            read,
            ..
        } = err
        else {
            panic!("{err}");
        };
        assert_eq!(
            (position, len, read),
            (slice.position(), slice.len(), bs[0].len() as u64)
        );
    }
}

/// Readers of the published segment list beside a writer that appends, rolls, truncates into
/// sealed segments and deletes old ones by retention, with at most two inactive segments open:
/// readers open and close segments all the time, meet segments the writer is taking from them,
/// and reopen segments whose files another reader's object still holds (the slots of
/// `log/list.rs`). Every record a reader accepts carries, in its value, the offset it was
/// written at; every read of a batch holds whole batches with valid CRCs from the batch holding
/// the offset asked for; the only error is an offset out of range (the log moved under the
/// reader). The truncation-count rule for the active segment's bytes is checked where it can be
/// made to fail: segment-store's `publish_tests` and `tests/loom_publish.rs`.
mod readers_beside_the_writer {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    fn batch(base: i64, generation: u64) -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(0);
        for i in 0..3 {
            let offset = base + i;
            let mut value = offset.to_be_bytes().to_vec();
            value.extend_from_slice(&generation.to_be_bytes());
            value.resize(120, 0xab);
            b.append(1_000 + offset, Some(b"k"), Some(&value), &[])
                .unwrap();
        }
        b.build()
    }

    fn check(bytes: &[u8], offset: i64) {
        let mut first = true;
        let mut next_base = i64::MIN;
        for e in Batches::new(bytes, 0) {
            let Ok(LogEntry::V2(b)) = e else {
                panic!("not a whole v2 batch at offset {offset}: {e:?}")
            };
            b.validate().expect("a batch with its CRC");
            assert!(b.base_offset() >= next_base, "batches in offset order");
            if first {
                assert!(b.last_offset() >= offset, "the batch holding {offset}");
                first = false;
            }
            next_base = b.last_offset() + 1;
            let records = b
                .records(&record_format::DecodeLimits::default())
                .expect("records");
            for r in records.iter() {
                let r = r.expect("record");
                let value = r.value().expect("a value");
                let written_at = i64::from_be_bytes(value[..8].try_into().unwrap());
                assert_eq!(written_at, r.offset(), "a record read where it was written");
            }
        }
    }

    #[test]
    fn every_read_returns_what_was_written_at_its_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            segment_bytes: 4_096,
            index_interval_bytes: 512,
            retention_ms: -1,
            retention_bytes: 160_000,
            max_open_inactive_segments: 2,
            file_delete_delay_ms: 0,
            ..LogConfig::default()
        };
        let log = Arc::new(LocalLog::open(dir.path(), config, 0).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let readers: Vec<_> = (0..3u64)
            .map(|seed| {
                let (log, stop, accepted) = (log.clone(), stop.clone(), accepted.clone());
                std::thread::spawn(move || {
                    let mut x = seed * 7_919 + 1;
                    while !stop.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let (start, end) = (log.log_start_offset(), log.log_end_offset());
                        if end <= start {
                            continue;
                        }
                        let offset = start + (x % (end - start) as u64) as i64;
                        let r = match x % 4 {
                            0 => log.read(offset, 2_000, true).map(|d| d.records),
                            // The last batch may be cut short: `check` reads whole ones.
                            1 => log
                                .read_exact(offset, 2_000, true, end, true)
                                .map(|e| e.map(|e| e.data.records).unwrap_or_default()),
                            2 => log
                                .fetch_offset_by_timestamp(1_000 + offset)
                                .map(|_| Vec::new()),
                            _ => log.collect_aborted_txns(offset, end).map(|_| Vec::new()),
                        };
                        match r {
                            Ok(bytes) => {
                                check(&bytes, offset);
                                accepted.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(SegmentError::OffsetOutOfRange { .. }) => {}
                            Err(e) => panic!("read at {offset}: {e}"),
                        }
                    }
                })
            })
            .collect();
        let mut generation = 0u64;
        let mut x = 99u64;
        for step in 0..3_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let end = log.log_end_offset();
            match step % 50 {
                // Into an older segment now and then (a follower's truncation), by batches.
                17 => {
                    let back = 3 * (1 + (x % 30) as i64);
                    let target = (end - back).max(log.log_start_offset());
                    let target = target - (target % 3);
                    if target >= log.log_start_offset() {
                        log.truncate_to(target).unwrap();
                        generation += 1;
                    }
                }
                33 => {
                    log.delete_old_segments(end).unwrap();
                }
                _ => {
                    log.append(&batch(end, generation)).unwrap();
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("a reader");
        }
        assert!(log.segment_bases().len() > 3, "{:?}", log.segment_bases());
        assert!(log.log_start_offset() > 0, "retention deleted segments");
        assert!(accepted.load(Ordering::Relaxed) > 100);
    }
}
