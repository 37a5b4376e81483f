//! One pass of the log cleaner over a compacted topic against a plain copy of the same bytes
//! (the physical limit of a pass that reads every byte and writes what it keeps).
//!
//! The input, built once and cached under `target/bench-cache/`: `SEGLOG_BENCH_CLEANER_RECORDS`
//! (default 100,000) one-record batches of 1 KiB values over `SEGLOG_BENCH_CLEANER_KEYS`
//! (default 10,000) keys, in segments of `SEGLOG_BENCH_CLEANER_SEGMENT_BYTES` (default 16 MiB),
//! then rolled so that everything but the empty active segment is cleanable. 1,000,000 records
//! over 100,000 keys in 1 GiB segments is Kafka's default layout at the scale (about
//! 1 GiB; set the three variables). Each timed run starts from a fresh copy of the input on the
//! same file system (under `/dev/shm` when it exists, so the disk's write-back is not what is
//! measured): `cleaner/pass` runs `recovery::cleaner::clean` with a 128 MiB dedupe buffer (Kafka's
//! default), `cleaner/copy` copies the segment files. The ratio of the two medians is printed;
//! `sample_size(10)`, `SEGLOG_BENCH_PAIRS` (default 5) alternating pairs for the printed ratio.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use record_format::RecordBatchBuilder;
use recovery::cleaner::{clean, CleanerConfig, LogToClean};
use recovery::{AppendOrigin, LoadOptions, LogLoader, PartitionLogConfig};
use segment_store::{LogConfig, StdFs, Storage, TopicPartition};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn scratch_root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

struct Input {
    dir: PathBuf,
    bytes: u64,
    to_clean: LogToClean,
}

const TIMESTAMP: i64 = 1_700_000_000_000;

fn input() -> Input {
    let records = env_usize("SEGLOG_BENCH_CLEANER_RECORDS", 100_000);
    let keys = env_usize("SEGLOG_BENCH_CLEANER_KEYS", 10_000).max(1);
    let segment_bytes = env_usize("SEGLOG_BENCH_CLEANER_SEGMENT_BYTES", 16 << 20) as u64;
    let cache = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-cache")
        .join(format!("cleaner-{records}-{keys}-{segment_bytes}"));
    let dir = cache.join("topic-0");
    let config = || PartitionLogConfig {
        log: LogConfig {
            segment_bytes,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    };
    let opts = |full| LoadOptions {
        config: config(),
        full,
        ..LoadOptions::default()
    };
    if !cache.join("done").exists() {
        let _ = std::fs::remove_dir_all(&cache);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (mut log, _) = LogLoader::load(&dir, &opts(true)).expect("load");
        let value = vec![b'v'; 1024];
        for i in 0..records {
            let mut b = RecordBatchBuilder::new(0);
            let key = format!("key-{:08}", i % keys);
            b.append(
                TIMESTAMP + i as i64,
                Some(key.as_bytes()),
                Some(&value),
                &[],
            )
            .expect("append");
            log.append_as_leader(&b.build(), 0, AppendOrigin::Client)
                .expect("append");
        }
        log.roll().expect("roll");
        let end = log.log_end_offset();
        log.set_high_watermark(end);
        log.close().expect("close");
        std::fs::write(cache.join("done"), b"").expect("marker");
    }
    let plan = LogLoader::plan(&dir, &opts(false)).expect("plan");
    let mut to_clean = LogToClean::from_plan(&plan, TIMESTAMP + records as i64 + 1);
    to_clean.last_stable_offset = plan.log_end_offset;
    let bytes = segment_files(&dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    Input {
        dir,
        bytes,
        to_clean,
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "log" || e == "index" || e == "timeindex" || e == "snapshot")
        })
        .collect();
    out.sort();
    out
}

/// A fresh copy of the input's partition under a fresh log directory.
fn copy_of(input: &Input, root: &Path) -> PathBuf {
    let to = root
        .join(format!("run-{}", std::process::id()))
        .join("topic-0");
    let _ = std::fs::remove_dir_all(to.parent().expect("parent"));
    std::fs::create_dir_all(&to).expect("mkdir");
    for f in segment_files(&input.dir) {
        std::fs::copy(&f, to.join(f.file_name().expect("name"))).expect("copy");
    }
    to
}

fn pass(input: &Input, dir: &Path) -> Duration {
    let storage: Arc<dyn Storage> = Arc::new(StdFs);
    let to_clean = LogToClean {
        dir: dir.to_path_buf(),
        ..input.to_clean.clone()
    };
    let config = CleanerConfig::default();
    let tp = TopicPartition::new("topic", 0);
    let t = Instant::now();
    let report = clean(&storage, &to_clean, &tp, &config).expect("clean");
    let elapsed = t.elapsed();
    assert!(!report.groups.is_empty(), "nothing was cleaned");
    elapsed
}

fn copy(input: &Input, root: &Path) -> Duration {
    let t = Instant::now();
    let dir = copy_of(input, root);
    let elapsed = t.elapsed();
    let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    elapsed
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let input = input();
    let scratch = tempfile::tempdir_in(scratch_root()).expect("tempdir");
    let root = scratch.path();
    let pairs = env_usize("SEGLOG_BENCH_PAIRS", 5).max(1);
    let (mut p, mut q) = (Vec::new(), Vec::new());
    for _ in 0..pairs {
        let dir = copy_of(&input, root);
        p.push(pass(&input, &dir).as_secs_f64());
        q.push(copy(&input, root).as_secs_f64());
    }
    let (mp, mq) = (median(p), median(q));
    println!(
        "cleaner: {:.1} MiB, pass {:.3} s ({:.0} MiB/s), plain copy {:.3} s ({:.0} MiB/s): \
         pass/copy {:.2}x (medians of {pairs} alternating pairs)",
        input.bytes as f64 / 1048576.0,
        mp,
        input.bytes as f64 / 1048576.0 / mp,
        mq,
        input.bytes as f64 / 1048576.0 / mq,
        mp / mq
    );
    let mut g = c.benchmark_group("cleaner");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .throughput(Throughput::Bytes(input.bytes));
    g.bench_function("pass", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let dir = copy_of(&input, root);
                    pass(&input, &dir)
                })
                .sum()
        })
    });
    g.bench_function("copy", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| copy(&input, root)).sum())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
