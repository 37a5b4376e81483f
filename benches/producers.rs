//! Append cost against the number of live producers: `PartitionLog::append_as_leader` of
//! one-record batches from idempotent producers (client origin: epoch, sequence and duplicate
//! checks), appended round-robin over ALL the live producers, so that every append looks up,
//! checks and updates a different producer's entry. Producer state costs O(1) per append in
//! the number of producers (Kafka's `ProducerAppendInfo`: one entry copied, checked, committed),
//! so the time per append with `SEGLOG_BENCH_PRODUCERS` (default 100,000) live producers should
//! stay within 1.2× of the time with 1 (goal).
//!
//! Each log is created empty (under `/dev/shm`, a tmpfs, when it exists, so the disk is not what
//! is measured), then every producer appends one batch before timing starts. Segments are 1 GiB,
//! so no append of the timed runs rolls: the roll-time producer snapshot (O(producers), once per
//! segment) is not in the figure. Batches are built before each timed run; the time is that of
//! the appends alone (no flush, no fsync).
//!
//! The ratio is measured in one run: `SEGLOG_BENCH_PAIRS` (default 15) back-to-back pairs of
//! `SEGLOG_BENCH_APPENDS` (default 20,000) appends, first with 1 producer, then with many,
//! printed as the median of `(time per append with many) / (time per append with 1)`, with min,
//! max and the two medians; criterion's own group follows (`producer_state_append/<producers>`,
//! elements = appends).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use record_format::RecordBatchBuilder;
use recovery::{AppendOrigin, LoadOptions, LogLoader, PartitionLog, PartitionLogConfig};
use segment_store::LogConfig;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

/// A log with `producers` live idempotent producers, and the next batch each one sends.
struct Producers {
    _tmp: tempfile::TempDir,
    log: PartitionLog,
    next_seq: Vec<i32>,
    cursor: usize,
    timestamp: i64,
}

impl Producers {
    fn new(producers: usize) -> Self {
        let tmp = tempfile::tempdir_in(root()).expect("tempdir");
        let dir = tmp.path().join("producers-0");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let opts = LoadOptions {
            config: recovery::Config {
                log: PartitionLogConfig {
                    log: LogConfig {
                        segment_bytes: 1 << 30,
                        ..LogConfig::default()
                    },
                    ..PartitionLogConfig::default()
                },
                ..recovery::Config::default()
            },
            ..LoadOptions::default()
        };
        let (log, _) = LogLoader::load(&dir, &opts).expect("load");
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
        let mut p = Producers {
            _tmp: tmp,
            log,
            next_seq: vec![0; producers],
            cursor: 0,
            timestamp,
        };
        // Every producer live before timing starts.
        for batch in p.batches(producers) {
            p.append(&batch);
        }
        assert_eq!(p.log.producer_state().producer_count(), producers);
        p
    }

    /// The next `n` batches, round-robin over every producer.
    fn batches(&mut self, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|_| {
                let pid = self.cursor;
                self.cursor = (self.cursor + 1) % self.next_seq.len();
                let seq = self.next_seq[pid];
                self.next_seq[pid] = seq.wrapping_add(1) & i32::MAX;
                let mut b = RecordBatchBuilder::new(0).producer(pid as i64, 0, seq);
                b.append(
                    self.timestamp,
                    Some(b"key"),
                    Some(b"value-of-some-bytes"),
                    &[],
                )
                .expect("record");
                b.build()
            })
            .collect()
    }

    fn append(&mut self, batch: &[u8]) {
        let info = self
            .log
            .append_as_leader(batch, 0, AppendOrigin::Client)
            .expect("append");
        assert!(!info.duplicate && info.rolled_to.is_none());
    }

    /// Time of appending `n` fresh batches.
    fn run(&mut self, n: usize) -> Duration {
        let batches = self.batches(n);
        let started = Instant::now();
        for b in &batches {
            self.append(b);
        }
        started.elapsed()
    }
}

fn listing_only() -> bool {
    std::env::args()
        .skip(1)
        .any(|a| a == "--list" || a == "--test")
}

fn producer_state_append(c: &mut Criterion) {
    let many = env_usize("SEGLOG_BENCH_PRODUCERS", 100_000).max(2);
    let appends = env_usize("SEGLOG_BENCH_APPENDS", 20_000).max(1);
    let pairs = env_usize("SEGLOG_BENCH_PAIRS", 15).max(1);
    let started = Instant::now();
    let mut one = Producers::new(1);
    let mut lots = Producers::new(many);
    eprintln!(
        "logs with 1 and {many} live producers ready in {:.1?}",
        started.elapsed()
    );
    if !listing_only() {
        // Warm both up (allocations, page cache of the tmpfs) before the pairs.
        one.run(appends);
        lots.run(appends);
        let mut ratios = Vec::new();
        let (mut one_us, mut lots_us) = (Vec::new(), Vec::new());
        for _ in 0..pairs {
            let a = one.run(appends).as_secs_f64() * 1e6 / appends as f64;
            let b = lots.run(appends).as_secs_f64() * 1e6 / appends as f64;
            one_us.push(a);
            lots_us.push(b);
            ratios.push(b / a);
        }
        for v in [&mut ratios, &mut one_us, &mut lots_us] {
            v.sort_by(f64::total_cmp);
        }
        let m = ratios.len() / 2;
        eprintln!(
            "append with {many} live producers / with 1: median {:.2} over {pairs} \
             back-to-back pairs of {appends} appends (min {:.2}, max {:.2}; medians {:.2} us \
             and {:.2} us per append)",
            ratios[m],
            ratios[0],
            ratios[ratios.len() - 1],
            lots_us[m],
            one_us[m]
        );
    }

    let mut g = c.benchmark_group("producer_state_append");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for (n, log) in [(1, &mut one), (many, &mut lots)] {
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| log.run(usize::try_from(iters).unwrap_or(usize::MAX)))
        });
    }
    g.finish();
}

criterion_group!(benches, producer_state_append);
criterion_main!(benches);
