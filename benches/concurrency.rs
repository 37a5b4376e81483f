//! Readers beside a writer: what one partition's readers pay while its writer appends and
//! fsyncs. Every figure is measured next to its baseline in the same run, interleaved.
//!
//! The partition is a `seglog::Log` on a real directory (`<target>/bench-data/concurrency/`, or
//! `SEGLOG_BENCH_CONC_DIR`; the file system is printed, so that fsyncs cost what they cost, not
//! a tmpfs), 64 MiB segments, filled with `SEGLOG_BENCH_CONC_PREFILL_MIB` (default 128) of
//! ~1.15 KB batches (10 records of 100-byte values, no producer id) and flushed before timing.
//! The writer thread appends the same batches with `Log::append` as fast as it can and calls
//! `Log::flush` (fsync of the segment, then the directory's checkpoints) every
//! `SEGLOG_BENCH_CONC_FLUSH_EVERY` appends (default 100). The high watermark follows the
//! flushed log end (the default policy), so what a reader sees grows at each flush.
//!
//! 1. `fetch_latency`: per-call latency of `Log::fetch` (1 MiB max, `min_one_message`, a random
//!    offset in the readable range, `read_uncommitted` and `read_committed`), with the writer
//!    running and with no writer, alternating in `SEGLOG_BENCH_PAIRS` (default 5) rounds of
//!    `SEGLOG_BENCH_CONC_FETCHES` (default 1,000) calls per phase: p50, p90, p99, p99.9 of all
//!    calls of each condition, the ratios, the median of the per-round p99 ratios, the share of
//!    calls over 1 ms, and the reading thread's voluntary (it blocked: a lock, I/O) and
//!    involuntary (another thread took its core) context switches per 1,000 calls. Then the
//!    writer's own append and flush times beside the reader, against the writer alone for as
//!    long.
//! 2. `fetch_throughput`: fetches/s and MB/s of 1 and of 4 reader threads over
//!    `SEGLOG_BENCH_CONC_SECONDS` (default 1) each, with the writer running and with no writer,
//!    alternating in the same number of rounds; medians, per reader too.
//! 3. `append_to_visible`: the writer appends then flushes every N appends (N = 1, 10, 100); a
//!    reader thread spins on `Log::high_watermark` (and `Log::recovery_point`) and notes when
//!    each batch's last offset became readable (and durable). Latency from the start of the
//!    batch's `append` call to that moment, against the writer's own time from the start of the
//!    append to the return of the flush that made it durable (the baseline, measured on the
//!    same batches). With `HighWatermark::LogEnd` too (visible at the append, before any
//!    fsync), against the return of the append.
//!
//! The percentiles are printed; criterion's groups follow (`iter_custom` over the same calls).
//! `cargo bench --bench concurrency -- no-criterion-group` prints the figures alone; a group's
//! name as the filter runs that group only.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use record_format::RecordBatchBuilder;
use seglog::{Config, HighWatermark, IsolationLevel, Log};
use segment_store::internals::FileKind;
use testkit::XorShift;

const RECORDS: usize = 10;
const VALUE: usize = 100;
const POOL: usize = 256;
const MAX_BYTES: usize = 1 << 20;
const SEGMENT_BYTES: u64 = 64 << 20;
const ISOLATIONS: [(IsolationLevel, &str); 2] = [
    (IsolationLevel::ReadUncommitted, "read_uncommitted"),
    (IsolationLevel::ReadCommitted, "read_committed"),
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn listing_only() -> bool {
    std::env::args()
        .skip(1)
        .any(|a| a == "--list" || a == "--test")
}

/// Whether the run's filter (criterion's one positional argument) selects `group`:
/// no filter, a part of the group's name, or `no-criterion-group` (the figures alone).
fn wanted(group: &str) -> bool {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-') && a != "--bench");
    match filter {
        None => true,
        Some(f) => f == "no-criterion-group" || group.contains(&f) || f.contains(group),
    }
}

fn data_root() -> PathBuf {
    if let Some(d) = std::env::var_os("SEGLOG_BENCH_CONC_DIR") {
        return PathBuf::from(d);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-data").join("concurrency")
}

/// The file system type of the mount that holds `dir` (`/proc/mounts`, longest prefix).
fn file_system(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String, String)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(dev), Some(mnt), Some(fs)) = (f.first(), f.get(1), f.get(2)) else {
            continue;
        };
        if dir.starts_with(mnt) && best.as_ref().is_none_or(|b| mnt.len() > b.0) {
            best = Some((mnt.len(), (*fs).to_string(), format!("{dev} on {mnt}")));
        }
    }
    best.map_or_else(|| "unknown".into(), |(_, fs, on)| format!("{fs} ({on})"))
}

fn pool() -> Arc<Vec<Vec<u8>>> {
    let mut rng = XorShift::new(7);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    Arc::new(
        (0..POOL)
            .map(|_| {
                let mut b = RecordBatchBuilder::new(0);
                for _ in 0..RECORDS {
                    let value: Vec<u8> = (0..VALUE).map(|_| rng.next_u64() as u8).collect();
                    b.append(ts, None, Some(&value), &[]).expect("record");
                }
                b.build()
            })
            .collect(),
    )
}

/// A partition in a log directory of its own under the data root, filled and flushed.
struct Partition {
    log: Log,
    pool: Arc<Vec<Vec<u8>>>,
    root: PathBuf,
}

impl Partition {
    fn new(name: &str, policy: HighWatermark, prefill_bytes: usize) -> Partition {
        let root = data_root().join(name);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("mkdir");
        let config = Config::default()
            .with_segment_bytes(SEGMENT_BYTES)
            .with_high_watermark(policy);
        let log = Log::open(root.join("conc-0"), config).expect("open");
        let pool = pool();
        let batches = prefill_bytes / pool[0].len();
        for i in 0..batches {
            log.append(&pool[i % POOL]).expect("append");
        }
        log.flush().expect("flush");
        Partition { log, pool, root }
    }

    fn close(self) {
        self.log.close().expect("close");
        let _ = std::fs::remove_dir_all(&self.root);
    }

    fn writer(&self, flush_every: usize) -> Writer {
        Writer::start(&self.log, &self.pool, flush_every)
    }
}

/// The writer thread: appends and flushes every `flush_every` appends until stopped.
struct Writer {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<WriterStats>,
}

#[derive(Default)]
struct WriterStats {
    appends: u64,
    /// Each `Log::append` call's time.
    append_times: Vec<Duration>,
    flushes: Vec<Duration>,
    elapsed: Duration,
}

impl WriterStats {
    fn add(&mut self, other: WriterStats) {
        self.appends += other.appends;
        self.append_times.extend(other.append_times);
        self.flushes.extend(other.flushes);
        self.elapsed += other.elapsed;
    }
}

impl Writer {
    fn start(log: &Log, pool: &Arc<Vec<Vec<u8>>>, flush_every: usize) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let (log, pool, until) = (log.clone(), Arc::clone(pool), Arc::clone(&stop));
        let flush_every = flush_every.max(1) as u64;
        let handle = thread::spawn(move || {
            let started = Instant::now();
            let mut stats = WriterStats::default();
            while !until.load(Ordering::Relaxed) {
                let t = Instant::now();
                log.append(&pool[stats.appends as usize % POOL])
                    .expect("append");
                stats.append_times.push(t.elapsed());
                stats.appends += 1;
                if stats.appends % flush_every == 0 {
                    let t = Instant::now();
                    log.flush().expect("flush");
                    stats.flushes.push(t.elapsed());
                }
            }
            stats.elapsed = started.elapsed();
            stats
        });
        // Let it get going before the readers start.
        thread::sleep(Duration::from_millis(20));
        Writer { stop, handle }
    }

    fn stop(self) -> WriterStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("writer thread")
    }
}

/// One fetch at a random offset of the readable range; returns the bytes fetched.
fn fetch_once(log: &Log, rng: &mut XorShift, isolation: IsolationLevel) -> usize {
    let range = log.readable_range(isolation);
    let span = u64::try_from(range.end - range.start).unwrap_or(0).max(1);
    let offset = range.start + i64::try_from(rng.next_u64() % span).unwrap_or(0);
    let r = log
        .fetch(offset, MAX_BYTES, isolation.into(), true)
        .expect("fetch");
    std::hint::black_box(r.records.len())
}

/// `n` fetches, each timed.
fn timed_fetches(
    log: &Log,
    rng: &mut XorShift,
    isolation: IsolationLevel,
    n: usize,
) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            fetch_once(log, rng, isolation);
            t.elapsed()
        })
        .collect()
}

/// The reading thread's context switches so far: (voluntary, involuntary).
fn context_switches() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// One phase of timed fetches on this thread, with its context switches.
#[derive(Default)]
struct Phase {
    latencies: Vec<Duration>,
    voluntary: u64,
    involuntary: u64,
}

impl Phase {
    fn run(log: &Log, rng: &mut XorShift, isolation: IsolationLevel, n: usize) -> Phase {
        let (v0, i0) = context_switches();
        let latencies = timed_fetches(log, rng, isolation, n);
        let (v1, i1) = context_switches();
        Phase {
            latencies,
            voluntary: v1.saturating_sub(v0),
            involuntary: i1.saturating_sub(i0),
        }
    }

    fn add(&mut self, other: Phase) {
        self.latencies.extend(other.latencies);
        self.voluntary += other.voluntary;
        self.involuntary += other.involuntary;
    }
}

/// The `q` quantile (0..=1) of `v`, sorted here.
fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort_unstable();
    if v.is_empty() {
        return Duration::ZERO;
    }
    let i = ((v.len() as f64 * q) as usize).min(v.len() - 1);
    v[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn print_setup(part: &Partition, flush_every: usize) {
    let dir = part.root.join("conc-0");
    eprintln!(
        "load average now: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    eprintln!(
        "partition {} on {}; {} cores seen; {} MiB readable before timing ({} segments of \
         64 MiB); batch {} bytes; writer flushes every {flush_every} appends",
        dir.display(),
        file_system(&dir),
        thread::available_parallelism().map_or(0, |n| n.get()),
        (part.log.log_end_offset() as usize / RECORDS * part.pool[0].len()) >> 20,
        std::fs::read_dir(&dir)
            .map(|d| d
                .filter(|e| e
                    .as_ref()
                    .is_ok_and(|e| FileKind::of_path(&e.path()) == Some(FileKind::Log)))
                .count())
            .unwrap_or(0),
        part.pool[0].len(),
    );
}

fn print_writer(what: &str, w: &mut WriterStats, batch_bytes: usize) {
    let secs = w.elapsed.as_secs_f64().max(1e-9);
    let (p50, p99) = (
        quantile(&mut w.flushes, 0.5),
        quantile(&mut w.flushes, 0.99),
    );
    eprintln!(
        "{what}: writer {:.0} appends/s ({:.1} MB/s), {} flushes, flush p50 {:.0} us, p99 {:.0} \
         us, append p50 {:.1} us, p99 {:.1} us",
        w.appends as f64 / secs,
        w.appends as f64 * batch_bytes as f64 / secs / 1e6,
        w.flushes.len(),
        us(p50),
        us(p99),
        us(quantile(&mut w.append_times, 0.5)),
        us(quantile(&mut w.append_times, 0.99)),
    );
}

fn fetch_latency(c: &mut Criterion) {
    const GROUP: &str = "fetch_latency";
    if !wanted(GROUP) {
        return;
    }
    let rounds = env_usize("SEGLOG_BENCH_PAIRS", 5).max(1);
    let fetches = env_usize("SEGLOG_BENCH_CONC_FETCHES", 1000).max(1);
    let flush_every = env_usize("SEGLOG_BENCH_CONC_FLUSH_EVERY", 100).max(1);
    let prefill = env_usize("SEGLOG_BENCH_CONC_PREFILL_MIB", 128) << 20;
    let part = Partition::new(GROUP, HighWatermark::FlushedLogEnd, prefill);
    let log = &part.log;
    let mut rng = XorShift::new(11);
    if !listing_only() {
        print_setup(&part, flush_every);
        // Warm-up: page cache, allocator.
        for (iso, _) in ISOLATIONS {
            timed_fetches(log, &mut rng, iso, fetches / 4);
        }
        // [isolation][with writer]
        let mut phases: [[Phase; 2]; 2] = Default::default();
        let mut p99_ratios: [Vec<f64>; 2] = Default::default();
        let mut writer = WriterStats::default();
        let mut alone = WriterStats::default();
        for _ in 0..rounds {
            for (i, (iso, _)) in ISOLATIONS.into_iter().enumerate() {
                let mut a = Phase::run(log, &mut rng, iso, fetches);
                let w = part.writer(flush_every);
                let t = Instant::now();
                let mut b = Phase::run(log, &mut rng, iso, fetches);
                let took = t.elapsed();
                writer.add(w.stop());
                // The writer's own baseline: as long again with no reader.
                let w = part.writer(flush_every);
                thread::sleep(took);
                alone.add(w.stop());
                p99_ratios[i].push(
                    us(quantile(&mut b.latencies, 0.99)) / us(quantile(&mut a.latencies, 0.99)),
                );
                phases[i][0].add(a);
                phases[i][1].add(b);
            }
        }
        print_writer(
            "fetch_latency, beside the reader",
            &mut writer,
            part.pool[0].len(),
        );
        print_writer("fetch_latency, alone", &mut alone, part.pool[0].len());
        eprintln!(
            "fetch_latency: {rounds} rounds x {fetches} fetches per condition (1 MiB max, \
             random offset in the readable range); context switches of the reading thread per \
             1,000 fetches (/proc/thread-self/status)"
        );
        eprintln!(
            "| isolation | writer | p50 / p90 / p99 / p99.9 | over 1 ms | voluntary / \
             involuntary switches | p50, p90, p99 ratio | per-round p99 ratio: median (min-max) |"
        );
        for (i, (_, name)) in ISOLATIONS.into_iter().enumerate() {
            let qs = [0.5, 0.9, 0.99, 0.999];
            let mut q = [[0.0; 4]; 2];
            for (w, phase) in phases[i].iter_mut().enumerate() {
                for (k, &x) in qs.iter().enumerate() {
                    q[w][k] = us(quantile(&mut phase.latencies, x));
                }
                let n = phase.latencies.len().max(1) as f64;
                let slow = phase
                    .latencies
                    .iter()
                    .filter(|d| **d > Duration::from_millis(1))
                    .count();
                let ratios = if w == 1 {
                    let (lo, hi) = min_max(&p99_ratios[i]);
                    format!(
                        "{:.2}x, {:.2}x, {:.2}x | {:.2}x ({lo:.2}-{hi:.2})",
                        q[1][0] / q[0][0],
                        q[1][1] / q[0][1],
                        q[1][2] / q[0][2],
                        median(p99_ratios[i].clone())
                    )
                } else {
                    " | ".to_string()
                };
                eprintln!(
                    "| {name} | {} | {:.0} / {:.0} / {:.0} / {:.0} us | {:.2}% | {:.1} / {:.1} | \
                     {ratios} |",
                    if w == 1 { "appending" } else { "none" },
                    q[w][0],
                    q[w][1],
                    q[w][2],
                    q[w][3],
                    slow as f64 * 100.0 / n,
                    phase.voluntary as f64 * 1000.0 / n,
                    phase.involuntary as f64 * 1000.0 / n,
                );
            }
        }
    }

    let mut g = c.benchmark_group(GROUP);
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(1));
    for (iso, name) in ISOLATIONS {
        for with_writer in [false, true] {
            let id = BenchmarkId::new(name, if with_writer { "writer" } else { "no_writer" });
            let w = with_writer.then(|| part.writer(flush_every));
            g.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let n = usize::try_from(iters).unwrap_or(usize::MAX);
                    timed_fetches(log, &mut rng, iso, n).into_iter().sum()
                })
            });
            if let Some(w) = w {
                w.stop();
            }
        }
    }
    g.finish();
    part.close();
}

/// `readers` threads fetching (`read_uncommitted`) for `secs`; returns (fetches, bytes, wall).
fn run_readers(log: &Log, readers: usize, secs: f64) -> (u64, u64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(readers + 1));
    let handles: Vec<_> = (0..readers)
        .map(|r| {
            let (log, stop, start) = (log.clone(), Arc::clone(&stop), Arc::clone(&start));
            thread::spawn(move || {
                let mut rng = XorShift::new(100 + r as u64);
                let (mut n, mut bytes) = (0u64, 0u64);
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    bytes += fetch_once(&log, &mut rng, IsolationLevel::ReadUncommitted) as u64;
                    n += 1;
                }
                (n, bytes)
            })
        })
        .collect();
    start.wait();
    let t = Instant::now();
    thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let (mut n, mut bytes) = (0, 0);
    for h in handles {
        let (a, b) = h.join().expect("reader thread");
        n += a;
        bytes += b;
    }
    (n, bytes, t.elapsed().as_secs_f64())
}

fn fetch_throughput(c: &mut Criterion) {
    const GROUP: &str = "fetch_throughput";
    if !wanted(GROUP) {
        return;
    }
    let rounds = env_usize("SEGLOG_BENCH_PAIRS", 5).max(1);
    let secs = env_usize("SEGLOG_BENCH_CONC_SECONDS", 1).max(1) as f64;
    let flush_every = env_usize("SEGLOG_BENCH_CONC_FLUSH_EVERY", 100).max(1);
    let prefill = env_usize("SEGLOG_BENCH_CONC_PREFILL_MIB", 128) << 20;
    let part = Partition::new(GROUP, HighWatermark::FlushedLogEnd, prefill);
    let log = &part.log;
    if !listing_only() {
        print_setup(&part, flush_every);
        run_readers(log, 2, secs / 2.0);
        // [readers][with writer] -> (fetches/s, MB/s) per round.
        let mut fps: [[Vec<f64>; 2]; 2] = Default::default();
        let mut mbps: [[Vec<f64>; 2]; 2] = Default::default();
        let mut writer = WriterStats::default();
        for _ in 0..rounds {
            for (r, readers) in [1, 4].into_iter().enumerate() {
                for with_writer in [false, true] {
                    let w = with_writer.then(|| part.writer(flush_every));
                    let (n, bytes, wall) = run_readers(log, readers, secs);
                    if let Some(w) = w {
                        writer.add(w.stop());
                    }
                    fps[r][usize::from(with_writer)].push(n as f64 / wall);
                    mbps[r][usize::from(with_writer)].push(bytes as f64 / wall / 1e6);
                }
            }
        }
        print_writer("fetch_throughput", &mut writer, part.pool[0].len());
        eprintln!(
            "fetch_throughput: read_uncommitted, 1 MiB max, {rounds} rounds of {secs} s per \
             condition, medians"
        );
        eprintln!(
            "| readers | writer | fetches/s | MB/s | per reader fetches/s | per reader MB/s | \
             with writer / without |"
        );
        for (r, readers) in [1usize, 4].into_iter().enumerate() {
            for w in 0..2 {
                let f = median(fps[r][w].clone());
                let m = median(mbps[r][w].clone());
                let ratio = if w == 1 {
                    format!("{:.2}x", f / median(fps[r][0].clone()))
                } else {
                    String::new()
                };
                eprintln!(
                    "| {readers} | {} | {f:.0} | {m:.0} | {:.0} | {:.0} | {ratio} |",
                    if w == 1 { "appending" } else { "none" },
                    f / readers as f64,
                    m / readers as f64
                );
            }
        }
    }

    let mut g = c.benchmark_group(GROUP);
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(1));
    for readers in [1usize, 4] {
        let w = part.writer(flush_every);
        g.bench_function(
            BenchmarkId::new("writer", format!("{readers}_readers")),
            |b| {
                b.iter_custom(|iters| {
                    let per = usize::try_from(iters)
                        .unwrap_or(usize::MAX)
                        .div_ceil(readers);
                    let t = Instant::now();
                    thread::scope(|s| {
                        for r in 0..readers {
                            s.spawn(move || {
                                let mut rng = XorShift::new(200 + r as u64);
                                for _ in 0..per {
                                    fetch_once(log, &mut rng, IsolationLevel::ReadUncommitted);
                                }
                            });
                        }
                    });
                    t.elapsed()
                })
            },
        );
        w.stop();
    }
    g.finish();
    part.close();
}

/// Latencies of `appends` batches from the start of their append: (visible to a reader thread
/// polling the high watermark, the writer's own baseline: the return of the flush that made the
/// batch durable, or of the append itself when `at_append`).
fn visibility(part: &Partition, flush_every: usize, appends: usize, at_append: bool) -> Latencies {
    let log = &part.log;
    let target = Arc::new(AtomicI64::new(i64::MAX));
    let first = log.high_watermark();
    let reader = {
        let (log, target) = (log.clone(), Arc::clone(&target));
        thread::spawn(move || {
            // High-watermark moves, and recovery-point moves (the segments' fsync done).
            let mut seen: Vec<(i64, Instant)> = Vec::new();
            let mut synced: Vec<(i64, Instant)> = Vec::new();
            let (mut last, mut last_rp) = (first, log.recovery_point());
            while last < target.load(Ordering::Acquire) {
                let hw = log.high_watermark();
                let rp = if at_append {
                    last_rp
                } else {
                    log.recovery_point()
                };
                let now = Instant::now();
                if rp > last_rp {
                    synced.push((rp, now));
                    last_rp = rp;
                }
                if hw > last {
                    seen.push((hw, now));
                    last = hw;
                } else {
                    std::hint::spin_loop();
                }
            }
            (seen, synced)
        })
    };
    let mut starts = Vec::with_capacity(appends);
    let mut baseline = Vec::with_capacity(appends);
    let mut pending = 0;
    for i in 0..appends {
        let t = Instant::now();
        let info = log.append(&part.pool[i % POOL]).expect("append");
        starts.push((info.last_offset, t));
        if at_append {
            baseline.push(t.elapsed());
        }
        pending += 1;
        if pending == flush_every || i + 1 == appends {
            log.flush().expect("flush");
            let done = Instant::now();
            if !at_append {
                baseline.extend(
                    starts[starts.len() - pending..]
                        .iter()
                        .map(|(_, s)| done - *s),
                );
            }
            pending = 0;
        }
    }
    target.store(log.log_end_offset(), Ordering::Release);
    let (seen, synced) = reader.join().expect("reader thread");
    // When each batch's last offset first lay below a bound that `moves` recorded.
    let passed = |moves: &[(i64, Instant)]| -> Vec<Duration> {
        starts
            .iter()
            .filter_map(|&(last, t)| {
                let i = moves.partition_point(|&(bound, _)| bound <= last);
                moves.get(i).map(|&(_, at)| at.saturating_duration_since(t))
            })
            .collect()
    };
    let visible = passed(&seen);
    let durable = passed(&synced);
    let moves = if at_append {
        appends
    } else {
        appends.div_ceil(flush_every)
    };
    Latencies {
        visible,
        durable,
        baseline,
        moves,
        seen: seen.len(),
    }
}

#[derive(Default)]
struct Latencies {
    visible: Vec<Duration>,
    /// When the reader saw the recovery point pass the batch (FlushedLogEnd only).
    durable: Vec<Duration>,
    baseline: Vec<Duration>,
    /// High-watermark moves the writer made, and how many of them the reader saw one by one.
    moves: usize,
    seen: usize,
}

fn append_to_visible(c: &mut Criterion) {
    const GROUP: &str = "append_to_visible";
    if !wanted(GROUP) {
        return;
    }
    let rounds = env_usize("SEGLOG_BENCH_PAIRS", 5).max(1);
    let flushes = env_usize("SEGLOG_BENCH_CONC_VISIBLE_FLUSHES", 100).max(1);
    let flushed = Partition::new(GROUP, HighWatermark::FlushedLogEnd, 1 << 20);
    let log_end = Partition::new("append_to_visible_log_end", HighWatermark::LogEnd, 1 << 20);
    let every = [1usize, 10, 100];
    if !listing_only() {
        print_setup(&flushed, 1);
        visibility(&flushed, 10, 200, false);
        visibility(&log_end, 10, 200, true);
        // [flush_every][policy]
        let mut all: Vec<[Latencies; 2]> = every.iter().map(|_| Default::default()).collect();
        for _ in 0..rounds {
            for (k, &n) in every.iter().enumerate() {
                let per_round = (flushes * n).div_ceil(rounds);
                let a = visibility(&flushed, n, per_round, false);
                let b = visibility(&log_end, n, per_round, true);
                for (slot, l) in all[k].iter_mut().zip([a, b]) {
                    slot.visible.extend(l.visible);
                    slot.baseline.extend(l.baseline);
                    slot.durable.extend(l.durable);
                    slot.moves += l.moves;
                    slot.seen += l.seen;
                }
            }
        }
        eprintln!(
            "append_to_visible: from the start of the append to the moment a spinning reader \
             sees the batch under the high watermark; baseline: the writer's own time to the \
             return of the flush (FlushedLogEnd) or of the append (LogEnd); {flushes} flushes \
             per row in {rounds} rounds"
        );
        eprintln!(
            "| policy | flush every | visible p50 / p99 | recovery point passed p50 / p99 | \
             baseline p50 / p99 | visible / baseline p50, p99 | moves seen / made |"
        );
        for (k, &n) in every.iter().enumerate() {
            for (p, name) in ["FlushedLogEnd", "LogEnd"].into_iter().enumerate() {
                let l = &mut all[k][p];
                let (v50, v99) = (
                    us(quantile(&mut l.visible, 0.5)),
                    us(quantile(&mut l.visible, 0.99)),
                );
                let (b50, b99) = (
                    us(quantile(&mut l.baseline, 0.5)),
                    us(quantile(&mut l.baseline, 0.99)),
                );
                let durable = if l.durable.is_empty() {
                    "-".to_string()
                } else {
                    format!(
                        "{:.1} / {:.1} us",
                        us(quantile(&mut l.durable, 0.5)),
                        us(quantile(&mut l.durable, 0.99))
                    )
                };
                eprintln!(
                    "| {name} | {n} | {v50:.1} / {v99:.1} us | {durable} | {b50:.1} / {b99:.1} \
                     us | {:.2}x, {:.2}x | {} / {} |",
                    v50 / b50,
                    v99 / b99,
                    l.seen,
                    l.moves
                );
            }
        }
    }

    let mut g = c.benchmark_group(GROUP);
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1));
    g.bench_function("flushed_log_end/flush_every_1", |b| {
        b.iter_custom(|iters| {
            let n = usize::try_from(iters).unwrap_or(usize::MAX);
            visibility(&flushed, 1, n, false).visible.into_iter().sum()
        })
    });
    g.finish();
    flushed.close();
    log_end.close();
}

criterion_group!(benches, fetch_latency, fetch_throughput, append_to_visible);
criterion_main!(benches);
