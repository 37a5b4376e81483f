//! Segment-store benchmarks, each with its baselines measured in the same run.
//!
//! (a) `append`: 2000 batches of 10 records (100-byte values, short keys), appended one batch
//!     per call to a fresh `LocalLog` (roll checks, index maintenance, `RwLock`) and to a bare
//!     `LogSegment`, against a raw `File::write_all` of the same bytes per batch (the physical
//!     floor) and the `commitlog` crate 0.2 appending the same records (key as metadata, value
//!     as payload, one `MessageBuf` of 10 messages per call). Opening the log/file is setup,
//!     not measured; nothing is fsynced in any variant.
//! (b) `offset_lookup` / `time_lookup`: 1024 random lookups in a full 10 MiB `OffsetIndex`
//!     (1,310,720 entries) and `TimeIndex` (873,812 entries), against `partition_point` over a
//!     plain in-memory `Vec` of the same entries.
use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use commitlog::message::MessageBuf;
use commitlog::{CommitLog, LogOptions};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use record_format::RecordBatchBuilder;
use segment_store::internals::{FilePosition, SegmentContext};
use segment_store::{
    DirLock, LocalLog, LogConfig, LogSegment, OffsetIndex, SegmentConfig, StdFs, TimeIndex,
};
use testkit::ManualClock;

const BATCHES: i64 = 2000;
const RECORDS: i64 = 10;
const MAX_INDEX: u64 = 10 * 1024 * 1024;

fn key(o: i64) -> String {
    format!("key-{o:08}")
}

fn sample_batches() -> Vec<Vec<u8>> {
    let value = [0x5au8; 100];
    (0..BATCHES)
        .map(|i| {
            let base = i * RECORDS;
            let mut b = RecordBatchBuilder::new(base).partition_leader_epoch(1);
            for r in 0..RECORDS {
                b.append(
                    1_700_000_000_000 + base + r,
                    Some(key(base + r).as_bytes()),
                    Some(&value),
                    &[],
                )
                .expect("append");
            }
            b.build()
        })
        .collect()
}

fn commitlog_bufs() -> Vec<MessageBuf> {
    let value = [0x5au8; 100];
    (0..BATCHES)
        .map(|i| {
            let mut buf = MessageBuf::default();
            for r in 0..RECORDS {
                buf.push_with_metadata(key(i * RECORDS + r).as_bytes(), value)
                    .expect("push");
            }
            buf
        })
        .collect()
}

fn log_config() -> LogConfig {
    LogConfig {
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn append_benches(c: &mut Criterion) {
    let batches = sample_batches();
    let total: u64 = batches.iter().map(|b| b.len() as u64).sum();
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Bytes(total));
    g.sample_size(30);

    g.bench_function("baseline_raw_write", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let f = File::create(dir.path().join("raw.log")).expect("create");
                (dir, f)
            },
            |(dir, mut f)| {
                for batch in &batches {
                    f.write_all(batch).expect("write");
                }
                (dir, f)
            },
            BatchSize::PerIteration,
        )
    });

    g.bench_function("seglog_log_segment", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let lock = DirLock::acquire(dir.path()).expect("lock");
                let ctx = SegmentContext {
                    storage: Arc::new(StdFs),
                    lock,
                    clock: Arc::new(ManualClock::new(0)),
                    config: SegmentConfig::default(),
                };
                let seg = LogSegment::create(&ctx, dir.path(), 0).expect("segment");
                (dir, seg)
            },
            |(dir, mut seg)| {
                for (i, batch) in batches.iter().enumerate() {
                    let last = i as i64 * RECORDS + RECORDS - 1;
                    seg.append(last, 1_700_000_000_000 + last, last, batch)
                        .expect("append");
                }
                (dir, seg)
            },
            BatchSize::PerIteration,
        )
    });

    g.bench_function("seglog_local_log", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let log = LocalLog::open(dir.path(), log_config(), 0).expect("open");
                (dir, log)
            },
            |(dir, log)| {
                for batch in &batches {
                    log.append(batch).expect("append");
                }
                (dir, log)
            },
            BatchSize::PerIteration,
        )
    });

    g.bench_function("baseline_commitlog_0_2", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("tempdir");
                let log = CommitLog::new(LogOptions::new(dir.path())).expect("commitlog");
                (dir, log, commitlog_bufs())
            },
            |(dir, mut log, mut bufs)| {
                for buf in &mut bufs {
                    log.append(buf).expect("append");
                }
                (dir, log)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// Deterministic targets from the testkit's xorshift64 generator.
fn targets(n: usize, max: i64) -> Vec<i64> {
    let mut rng = testkit::XorShift::new(0);
    (0..n).map(|_| rng.below(max as u64) as i64).collect()
}

fn lookup_benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = DirLock::acquire(dir.path()).expect("lock");

    // Offset index: offsets 10*i, positions 1000*i.
    let path: PathBuf = dir.path().join("00000000000000000000.index");
    let mut idx = OffsetIndex::open(&lock, &path, 0, MAX_INDEX, true).expect("index");
    let mut plain: Vec<(i64, u32)> = Vec::with_capacity(idx.max_entries());
    for i in 0..idx.max_entries() as i64 {
        idx.append(i * 10, FilePosition((i * 1000) as u32))
            .expect("append");
        plain.push((i * 10, (i * 1000) as u32));
    }
    assert!(idx.is_full());
    let ts = targets(1024, plain.len() as i64 * 10);
    for &t in &ts {
        let want = plain[plain.partition_point(|e| e.0 <= t) - 1];
        let got = idx.lookup(t);
        assert_eq!((got.offset, got.position.0), want);
    }
    let mut g = c.benchmark_group("offset_lookup");
    g.throughput(Throughput::Elements(ts.len() as u64));
    g.bench_function("baseline_vec_binary_search", |b| {
        b.iter(|| {
            let mut s = 0u64;
            for &t in &ts {
                let i = plain.partition_point(|e| e.0 <= black_box(t));
                s = s.wrapping_add(u64::from(plain.get(i.wrapping_sub(1)).map_or(0, |e| e.1)));
            }
            s
        })
    });
    g.bench_function("seglog_offset_index_10mib", |b| {
        b.iter(|| {
            let mut s = 0u64;
            for &t in &ts {
                s = s.wrapping_add(u64::from(idx.lookup(black_box(t)).position.0));
            }
            s
        })
    });
    g.finish();

    // Time index: timestamps 1e12 + 7*i at offsets 3*i.
    let path = dir.path().join("00000000000000000000.timeindex");
    let mut tidx = TimeIndex::open(&lock, &path, 0, MAX_INDEX, true).expect("timeindex");
    let mut tplain: Vec<(i64, i64)> = Vec::with_capacity(tidx.max_entries());
    let mut i = 0i64;
    while !tidx.is_full() {
        let t = 1_000_000_000_000 + 7 * i;
        tidx.maybe_append(t, 3 * i, false).expect("append");
        tplain.push((t, 3 * i));
        i += 1;
    }
    let ts: Vec<i64> = targets(1024, tplain.len() as i64 * 7)
        .into_iter()
        .map(|t| t + 1_000_000_000_000)
        .collect();
    for &t in &ts {
        let want = tplain[tplain.partition_point(|e| e.0 <= t) - 1];
        let got = tidx.lookup(t);
        assert_eq!((got.timestamp, got.offset), want);
    }
    let mut g = c.benchmark_group("time_lookup");
    g.throughput(Throughput::Elements(ts.len() as u64));
    g.bench_function("baseline_vec_binary_search", |b| {
        b.iter(|| {
            let mut s = 0i64;
            for &t in &ts {
                let i = tplain.partition_point(|e| e.0 <= black_box(t));
                s = s.wrapping_add(tplain.get(i.wrapping_sub(1)).map_or(0, |e| e.1));
            }
            s
        })
    });
    g.bench_function("seglog_time_index_10mib", |b| {
        b.iter(|| {
            let mut s = 0i64;
            for &t in &ts {
                s = s.wrapping_add(tidx.lookup(black_box(t)).offset);
            }
            s
        })
    });
    g.finish();
}

criterion_group!(segment_store_benches, append_benches, lookup_benches);
criterion_main!(segment_store_benches);
