//! Recovery benchmarks over one generated partition directory, each next to its baseline.
//!
//! The directory (default 1 GiB of `.log`, `SEGLOG_BENCH_LOG_BYTES` to change it) is generated
//! once and cached under `<target>/bench-data/recovery-v3-<bytes>/`: batches of 10 records with
//! 100–1000-byte values from 8 idempotent producers, 4 transactional producers (COMMIT and ABORT
//! markers) and producer-less batches, with one `MIRROR_PID_RESET` barrier half way (after every
//! open transaction is closed; producers then continue at a new epoch), in 128 MiB segments.
//!
//! (a) `full_recovery`: `LogLoader::load` with `full: true` (every batch CRC-checked, the offset,
//!     time and transaction indexes rebuilt, producer state replayed, a snapshot per segment)
//!     against ONE `crc32c` pass over the same `.log` bytes from the page cache, read through a
//!     reused 1 MiB buffer or memory-mapped (two baselines; the faster one is the bar).
//! (b) `snapshot_replay`: a clean-shutdown `LogLoader::load` whose newest snapshot is at the start
//!     of the tail (the last ≥ 128 MiB of the log), so producer state = that snapshot + a replay
//!     of the tail; against a header-only walk of the same tail (`FileRecords::headers_from`,
//!     61 bytes read per batch), and against a clean load with the snapshot at the log end
//!     (no replay: the fixed cost of opening the segments).
//!
//! (c) `kafka_layout`: Kafka's default layout, ONE segment of 1 GiB (`SEGLOG_BENCH_KAFKA_BYTES`)
//!     of ~1.15 KB batches (10 records of 100-byte values) from Kafka's default producer (8
//!     idempotent producers, interleaved), cached under
//!     `<target>/bench-data/kafka-layout-idempotent-v1-<bytes>/`; with
//!     `SEGLOG_BENCH_KAFKA_PRODUCERS=transactional`, the producer mix of (a) instead, without its
//!     barrier (transactions and their markers, `kafka-layout-v1-<bytes>/`); or the partition
//!     directory `SEGLOG_BENCH_KAFKA_LAYOUT_DIR` names, e.g. one Apache Kafka wrote:
//!     `LogLoader::load(full)` with the indexes missing and with 10 MiB zero-filled indexes (what
//!     a crashed broker leaves), and the plan
//!     `seglog verify` prints (`plan_audited`, no lock: a guarded map), each paired with one mmap'd `crc32c`
//!     pass over the same `.log` (the `crc32c` crate), and the load and the plan also with one
//!     pass of the CRC-32C function seglog itself uses (`record_format::checksum`, crc-fast).
//!     `verify_plan_pread` is that plan on storage that says it cannot map (every `.log` read
//!     through `pread`), paired with `verify_plan` (`SEGLOG_BENCH_PAIRS` pairs).
//! (d) `small_partitions`: a log directory of 2,000 partitions of 512 KiB: `load_log_dir(full)`
//!     on as many threads as cores, and the planning alone, against `crc32c` over every `.log`.
//! (e) `cold_cache`: (c) with every file dropped from the page cache first (GNU `dd
//!     iflag=nocache count=0`, i.e. `posix_fadvise(DONTNEED)`), against a sequential `read` of
//!     the same files, also dropped first.
//!
//! Except in (e) the page cache is warm (each variant runs several times; nothing is dropped).
//! How warm decides the mmap baselines (a file cached in 2 MiB folios maps in few faults), so (a)
//! and (c) print, before and after their pairs, how much of the `.log` the baseline's map finds
//! resident and how much of it in 2 MiB folios (the kernel's `/proc/self/smaps`).
//! Ratios are printed as medians over `SEGLOG_BENCH_PAIRS` (default 15) back-to-back (baseline,
//! subject) pairs: the development VM is shared and its speed drifts.
//! Only the load is timed; closing the log afterwards (and deleting the snapshot the load writes
//! at the log end, for (b)) happens outside the measurement.
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use record_format::{
    end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType, RecordBatchBuilder,
};
use recovery::{LoadOptions, LogLoader, PartitionLogConfig};
use segment_store::internals::{FileKind, MmapFile, PRODUCER_SNAPSHOT_FILE_SUFFIX};
use segment_store::{DirLock, FileHandle, FileRecords, LogConfig, OpenMode, StdFs, Storage};
use testkit::XorShift;

const DEFAULT_LOG_BYTES: u64 = 1 << 30;
const SEGMENT_BYTES: u64 = 128 << 20;
/// Bytes of batches handed to one follower append while generating.
const CHUNK_BYTES: usize = 4 << 20;
const RECORDS_PER_BATCH: i64 = 10;
const IDEMPOTENT: i64 = 8;
const TRANSACTIONAL: i64 = 4;
const COMPLETE_MARKER: &str = "generation-complete";

fn log_bytes() -> u64 {
    std::env::var("SEGLOG_BENCH_LOG_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_LOG_BYTES)
}

fn config() -> PartitionLogConfig {
    PartitionLogConfig {
        log: LogConfig {
            segment_bytes: SEGMENT_BYTES,
            retention_ms: -1,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    }
}

fn bench_dir(bytes: u64) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    // Bump the version when the generator changes, so that a stale cache is not reused.
    target
        .join("bench-data")
        .join(format!("recovery-v3-{bytes}"))
}

/// Producer ids: idempotent 1..=8, transactional 100..=103.
struct Generator {
    rng: XorShift,
    next_offset: i64,
    epoch: i16,
    idem_seq: [i32; IDEMPOTENT as usize],
    txn_seq: [i32; TRANSACTIONAL as usize],
    /// Data batches written in the open transaction of each transactional producer.
    txn_open: [u32; TRANSACTIONAL as usize],
    values: Vec<u8>,
    now: i64,
    /// Every value this long (Kafka's default layout); `None`: 100–1000 bytes.
    value_len: Option<usize>,
    /// The producers batches come from ([`Producers`]).
    producers: Producers,
}

/// Who writes the batches of a generated partition.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Producers {
    /// Kafka's default producer since 3.0 (`enable.idempotence=true`, no transactional id):
    /// every batch from one of 8 idempotent producers, interleaved.
    Idempotent,
    /// The stress mix: 60 % idempotent, 30 % transactional (COMMIT and ABORT markers), 10 %
    /// without producer id ([`Generator::next_batch`]).
    Transactional,
}

impl Generator {
    fn new() -> Self {
        let mut rng = XorShift::new(0x9E37_79B9_7F4A_7C15);
        let values = (0..4096).map(|_| rng.next_u64() as u8).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Self {
            rng,
            next_offset: 0,
            epoch: 0,
            idem_seq: [0; IDEMPOTENT as usize],
            txn_seq: [0; TRANSACTIONAL as usize],
            txn_open: [0; TRANSACTIONAL as usize],
            values,
            now,
            value_len: None,
            producers: Producers::Transactional,
        }
    }

    fn data_batch(&mut self, producer: Option<(i64, i32)>, transactional: bool) -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(self.next_offset)
            .partition_leader_epoch(1)
            .transactional(transactional);
        if let Some((pid, seq)) = producer {
            b = b.producer(pid, self.epoch, seq);
        }
        for r in 0..RECORDS_PER_BATCH {
            let len = self
                .value_len
                .unwrap_or_else(|| 100 + self.rng.below(901) as usize);
            let start = self.rng.below((self.values.len() - len) as u64) as usize;
            let key = (self.next_offset + r).to_be_bytes();
            // Timestamps grow with the offset (1 ms each), so the time index gets entries.
            b.append(
                self.now + self.next_offset + r,
                Some(&key),
                Some(&self.values[start..start + len]),
                &[],
            )
            .expect("append a record");
        }
        self.next_offset += RECORDS_PER_BATCH;
        b.build()
    }

    fn marker(&mut self, pid: i64, commit: bool) -> Vec<u8> {
        let t = if commit {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        };
        let ts = self.now + self.next_offset;
        let m = end_txn_marker_batch(self.next_offset, ts, 1, pid, self.epoch, t, 0);
        self.next_offset += 1;
        m
    }

    /// One batch: with [`Producers::Idempotent`] always idempotent; otherwise 60 % idempotent,
    /// 30 % transactional (a marker after 3 data batches, every fifth an ABORT), 10 % without
    /// producer id.
    fn next_batch(&mut self) -> Vec<u8> {
        let roll = match self.producers {
            Producers::Idempotent => 0,
            Producers::Transactional => self.rng.below(10),
        };
        if roll < 6 {
            let p = self.rng.below(IDEMPOTENT as u64) as usize;
            let seq = self.idem_seq[p];
            self.idem_seq[p] += RECORDS_PER_BATCH as i32;
            self.data_batch(Some((1 + p as i64, seq)), false)
        } else if roll < 9 {
            let p = self.rng.below(TRANSACTIONAL as u64) as usize;
            let pid = 100 + p as i64;
            if self.txn_open[p] == 3 {
                self.txn_open[p] = 0;
                let commit = self.rng.below(5) != 0;
                self.marker(pid, commit)
            } else {
                self.txn_open[p] += 1;
                let seq = self.txn_seq[p];
                self.txn_seq[p] += RECORDS_PER_BATCH as i32;
                self.data_batch(Some((pid, seq)), true)
            }
        } else {
            self.data_batch(None, false)
        }
    }

    /// Commits every open transaction, writes the barrier, and moves every producer to a new
    /// epoch (sequences restart at 0).
    fn barrier(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        for p in 0..TRANSACTIONAL as usize {
            if self.txn_open[p] > 0 {
                self.txn_open[p] = 0;
                out.extend(self.marker(100 + p as i64, true));
            }
        }
        out.extend(mirror_pid_reset_batch(
            self.next_offset,
            self.now + self.next_offset,
            1,
            "bench-source-cluster",
        ));
        self.next_offset += 1;
        self.epoch += 1;
        self.idem_seq = [0; IDEMPOTENT as usize];
        self.txn_seq = [0; TRANSACTIONAL as usize];
        out
    }
}

/// Generates the partition in `dir` (through `PartitionLog::append_as_follower`, so producer
/// state, snapshots and indexes are the library's own) and closes it cleanly.
fn generate(dir: &Path, bytes: u64) {
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create bench dir");
    let opts = LoadOptions {
        config: recovery::Config {
            log: config(),
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let (mut log, _) = LogLoader::load(dir, &opts).expect("open new log");
    let mut g = Generator::new();
    let mut written = 0u64;
    let mut barrier_written = false;
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + 64 * 1024);
    while written < bytes {
        if !barrier_written && written >= bytes / 2 {
            chunk.extend(g.barrier());
            barrier_written = true;
        }
        while chunk.len() < CHUNK_BYTES {
            chunk.extend(g.next_batch());
        }
        log.append_as_follower(&chunk).expect("append");
        written += chunk.len() as u64;
        chunk.clear();
    }
    // Leave no transaction open: the log ends stable.
    for p in 0..TRANSACTIONAL as usize {
        if g.txn_open[p] > 0 {
            chunk.extend(g.marker(100 + p as i64, true));
        }
    }
    if !chunk.is_empty() {
        log.append_as_follower(&chunk).expect("append");
    }
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    log.close().expect("close");
    std::fs::write(dir.join(COMPLETE_MARKER), format!("{end}\n")).expect("marker");
    eprintln!(
        "generated {} ({} MiB, {} offsets) in {:.1?}",
        dir.display(),
        written >> 20,
        end,
        started.elapsed()
    );
}

/// The `.log` files of `dir` in offset order, with their base offsets.
fn segments(dir: &Path) -> Vec<(i64, PathBuf)> {
    let mut v: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .expect("read bench dir")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let base = p
                .file_name()?
                .to_str()?
                .strip_suffix(".log")?
                .parse()
                .ok()?;
            Some((base, p))
        })
        .collect();
    v.sort();
    v
}

fn snapshots(dir: &Path) -> Vec<(i64, PathBuf)> {
    let mut v: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .expect("read bench dir")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let off = p
                .file_name()?
                .to_str()?
                .strip_suffix(PRODUCER_SNAPSHOT_FILE_SUFFIX)?
                .parse()
                .ok()?;
            Some((off, p))
        })
        .collect();
    v.sort();
    v
}

fn prepare() -> PathBuf {
    let bytes = log_bytes();
    let dir = bench_dir(bytes);
    if !dir.join(COMPLETE_MARKER).exists() {
        generate(&dir, bytes);
    }
    dir
}

/// One `crc32c` pass over every `.log`, read through a reused 1 MiB buffer (which stays in the
/// CPU cache: the cheapest way to get the bytes out of the page cache with `read`).
fn crc_pass_read(files: &[PathBuf], buf: &mut [u8]) -> u32 {
    let mut acc = 0u32;
    for f in files {
        let mut h = std::fs::File::open(f).expect("open .log");
        let mut crc = 0u32;
        loop {
            let n = h.read(buf).expect("read .log");
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
        }
        acc ^= crc;
    }
    acc
}

/// One `crc32c` pass over every `.log`, memory-mapped read-only (segment-store's `MmapFile`,
/// under the directory lock, as recovery maps them).
fn crc_pass_mmap(dir: &Path, files: &[PathBuf]) -> u32 {
    crc_pass_mmap_with(dir, files, crc32c::crc32c)
}

/// [`crc_pass_mmap`] with another CRC-32C function (seglog's own, `record_format::checksum`).
fn crc_pass_mmap_with(dir: &Path, files: &[PathBuf], crc: fn(&[u8]) -> u32) -> u32 {
    let lock = DirLock::acquire(dir).expect("lock bench dir");
    let mut acc = 0u32;
    for f in files {
        let map = MmapFile::open(&lock, f, false).expect("map .log");
        acc ^= crc(map.as_slice());
    }
    acc
}

fn full_recovery(c: &mut Criterion) {
    if !group_selected("full_recovery") {
        return;
    }
    let dir = prepare();
    let files: Vec<PathBuf> = segments(&dir).into_iter().map(|(_, p)| p).collect();
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let mut g = c.benchmark_group("full_recovery");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Bytes(total));

    let mut buf = vec![0u8; 1 << 20];
    g.bench_function("crc32c_one_pass_read", |b| {
        b.iter(|| black_box(crc_pass_read(&files, &mut buf)))
    });
    g.bench_function("crc32c_one_pass_mmap", |b| {
        b.iter(|| black_box(crc_pass_mmap(&dir, &files)))
    });

    let opts = LoadOptions {
        config: recovery::Config {
            log: config(),
            full_recovery: true,
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let load = || {
        let t = Instant::now();
        let (log, report) = LogLoader::load(&dir, &opts).expect("full recovery");
        let spent = t.elapsed();
        assert!(report.cut.is_empty(), "{report}");
        assert_eq!(report.bytes_scanned, total);
        black_box(report.producers);
        log.close().expect("close");
        spent
    };
    g.bench_function("log_loader_full", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load()).sum())
    });
    g.finish();
    let ids = [
        "full_recovery/crc32c_one_pass_mmap",
        "full_recovery/log_loader_full",
    ];
    if pairs_wanted(&ids) {
        eprintln!("full_recovery: {}", page_cache_state(&dir, &files));
    }
    paired_ratio(
        "full_recovery: mmap crc32c pass / LogLoader::load(full)",
        &ids,
        || {
            let t = Instant::now();
            black_box(crc_pass_mmap(&dir, &files));
            t.elapsed()
        },
        load,
    );
}

/// The groups of this file, as criterion names them.
const GROUPS: [&str; 5] = [
    "full_recovery",
    "snapshot_replay",
    "kafka_layout",
    "small_partitions",
    "cold_cache",
];

/// Whether `group` can match the filters on the command line: a group is skipped (its data not
/// generated) only when every filter starts with the name of another group.
fn group_selected(group: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| f.starts_with(group) || !GROUPS.iter().any(|g| f.starts_with(g)))
}

/// Pairs run back to back (baseline, then subject), so that both see the same machine: prints
/// the median of `baseline / subject` over the pairs (above 1: the subject is faster). Criterion's
/// groups run each function for seconds at a time, and this VM's speed drifts between them.
/// Skipped when criterion only lists or tests, or when a filter on the command line matches
/// neither of the two benchmarks (`ids`).
fn paired_ratio(
    name: &str,
    ids: &[&str],
    mut baseline: impl FnMut() -> Duration,
    mut subject: impl FnMut() -> Duration,
) {
    if !pairs_wanted(ids) {
        return;
    }
    let pairs: usize = std::env::var("SEGLOG_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let mut times: Vec<(f64, f64)> = (0..pairs.max(1))
        .map(|_| {
            let b = baseline();
            let s = subject();
            (b.as_secs_f64(), s.as_secs_f64())
        })
        .collect();
    let mut ratios: Vec<f64> = times.iter().map(|&(b, s)| b / s).collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median_ms = |times: &mut Vec<(f64, f64)>, key: fn(&(f64, f64)) -> f64| {
        times.sort_by(|x, y| key(x).total_cmp(&key(y)));
        key(&times[n / 2]) * 1e3
    };
    let baseline_ms = median_ms(&mut times, |t| t.0);
    let subject_ms = median_ms(&mut times, |t| t.1);
    eprintln!(
        "{name}: median ratio over {n} back-to-back pairs {:.2} (min {:.2}, max {:.2}; \
         medians {baseline_ms:.1} ms against {subject_ms:.1} ms)",
        ratios[n / 2],
        ratios[0],
        ratios[n - 1]
    );
}

/// Whether [`paired_ratio`] runs for benchmarks `ids`: not when criterion only lists or tests,
/// nor when a filter on the command line matches none of them.
fn pairs_wanted(ids: &[&str]) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return false;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| ids.iter().any(|id| id.contains(f.as_str())))
}

/// How the page cache holds `files`, which decides the mmap baselines (see docs/benchmarks.md):
/// each file mapped as the baseline maps it and every page touched, then the kernel's
/// `/proc/self/smaps` entry of that map read for how much of it is resident and how much of
/// that is mapped in PMD-size (2 MiB on x86-64) pages, i.e. cached in folios that large.
/// Linux only; "unknown" elsewhere.
fn page_cache_state(dir: &Path, files: &[PathBuf]) -> String {
    let lock = DirLock::acquire(dir).expect("lock bench dir");
    let (mut rss_kb, mut pmd_kb, mut len) = (0u64, 0u64, 0u64);
    for f in files {
        let map = MmapFile::open(&lock, f, false).expect("map .log");
        let bytes = map.as_slice();
        len += bytes.len() as u64;
        black_box(bytes.iter().step_by(4096).fold(0u8, |a, &b| a ^ b));
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return "page cache: unknown (no /proc/self/smaps)".into();
        };
        let name = std::fs::canonicalize(f).unwrap_or_else(|_| f.clone());
        let name = name.to_string_lossy();
        let mut in_map = false;
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or_default();
            if !first.ends_with(':') {
                // A mapping's header line: `start-end perms offset dev inode path`.
                in_map = line.ends_with(name.as_ref());
                continue;
            }
            let kb: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
            match first {
                "Rss:" if in_map => rss_kb += kb,
                "FilePmdMapped:" if in_map => pmd_kb += kb,
                _ => {}
            }
        }
    }
    format!(
        "page cache: {} of {} MiB of .log resident, {} MiB of it in 2 MiB folios",
        rss_kb >> 10,
        len >> 20,
        pmd_kb >> 10
    )
}

fn snapshot_replay(c: &mut Criterion) {
    if !group_selected("snapshot_replay") {
        return;
    }
    let dir = prepare();
    let segs = segments(&dir);
    let sizes: Vec<u64> = segs
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect();
    // The tail: the shortest suffix of whole segments holding at least one segment's worth,
    // never the whole log (a clean load without any snapshot at or below the end takes Kafka's
    // upgrade shortcut and replays nothing).
    assert!(segs.len() > 1, "the log needs two segments or more");
    let mut tail_from = segs.len() - 1;
    let mut tail_bytes = sizes[tail_from];
    while tail_bytes < SEGMENT_BYTES && tail_from > 1 {
        tail_from -= 1;
        tail_bytes += sizes[tail_from];
    }
    let tail_start = segs[tail_from].0;
    let end: i64 = std::fs::read_to_string(dir.join(COMPLETE_MARKER))
        .expect("marker")
        .trim()
        .parse()
        .expect("end offset");
    let has_snapshot = |o: i64| snapshots(&dir).iter().any(|(s, _)| *s == o);
    assert!(has_snapshot(tail_start), "no snapshot at {tail_start}");
    let tail_files: Vec<PathBuf> = segs[tail_from..].iter().map(|(_, p)| p.clone()).collect();

    let clean = LoadOptions {
        config: recovery::Config {
            log: config(),
            ..recovery::Config::default()
        },
        had_clean_shutdown: true,
        recovery_point: end,
        high_watermark: Some(end),
        ..LoadOptions::default()
    };
    let mut g = c.benchmark_group("snapshot_replay");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(tail_bytes));

    let header_scan = || {
        let mut batches = 0u64;
        for f in &tail_files {
            let records = FileRecords::open(&StdFs, f, OpenMode::Read).expect("open .log");
            for h in records.headers_from(0) {
                let h = h.expect("header");
                batches += u64::from(h.size > 0);
            }
        }
        black_box(batches)
    };
    g.bench_function("header_scan_tail", |b| b.iter(header_scan));

    let load = |keep_up_to: i64| {
        for (o, p) in snapshots(&dir) {
            if o > keep_up_to {
                std::fs::remove_file(p).expect("remove snapshot");
            }
        }
        let t = Instant::now();
        let (log, report) = LogLoader::load(&dir, &clean).expect("clean load");
        let spent = t.elapsed();
        assert_eq!(report.segments_scanned, 0);
        // The generated log ends with all 12 producers active (none started empty).
        assert_eq!(log.producer_state().active_producers().len(), 12);
        log.close().expect("close");
        spent
    };
    g.bench_function("snapshot_plus_tail_replay", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load(tail_start)).sum())
    });
    g.bench_function("snapshot_at_end_no_replay", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load(end)).sum())
    });
    g.finish();
    paired_ratio(
        "snapshot_replay: header-only scan of the tail / snapshot + tail replay",
        &[
            "snapshot_replay/header_scan_tail",
            "snapshot_replay/snapshot_plus_tail_replay",
        ],
        || {
            let t = Instant::now();
            header_scan();
            t.elapsed()
        },
        || load(tail_start),
    );
}

// ------------------------------------------------------------------------------------------------
// Kafka's default layout: one 1 GiB segment of ~1.15 KB batches; a log directory of many small
// partitions; a cold page cache.
// ------------------------------------------------------------------------------------------------

const KAFKA_SEGMENT_BYTES: u64 = 1 << 30;
const SMALL_PARTITIONS: usize = 2_000;
const SMALL_PARTITION_BYTES: u64 = 512 << 10;

fn kafka_config() -> PartitionLogConfig {
    PartitionLogConfig {
        log: LogConfig {
            segment_bytes: KAFKA_SEGMENT_BYTES,
            retention_ms: -1,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    }
}

/// The producers of the generated partitions of `kafka_layout`, `small_partitions` and
/// `cold_cache`: `SEGLOG_BENCH_KAFKA_PRODUCERS=transactional` for the stress mix, otherwise
/// Kafka's default producer.
fn kafka_producers() -> Producers {
    match std::env::var("SEGLOG_BENCH_KAFKA_PRODUCERS").as_deref() {
        Ok("transactional") => Producers::Transactional,
        _ => Producers::Idempotent,
    }
}

/// The name part of a generated partition's cache directory for `producers` (the transactional
/// mix keeps the name it was first generated under).
fn producers_tag(producers: Producers) -> &'static str {
    match producers {
        Producers::Idempotent => "idempotent-",
        Producers::Transactional => "",
    }
}

/// One partition of `bytes` of batches of 10 records of 100-byte values (~1.15 KB each) from
/// `producers`, in one segment (`SEGLOG_BENCH_KAFKA_BYTES` changes the 1 GiB).
fn generate_kafka(dir: &Path, bytes: u64, chunk: usize, producers: Producers) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create bench dir");
    let opts = LoadOptions {
        config: recovery::Config {
            log: kafka_config(),
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let (mut log, _) = LogLoader::load(dir, &opts).expect("open new log");
    let mut g = Generator::new();
    g.value_len = Some(100);
    g.producers = producers;
    let mut written = 0u64;
    let mut out = Vec::with_capacity(chunk + 4096);
    // Below the segment size: one segment.
    while written + chunk as u64 <= bytes.min(KAFKA_SEGMENT_BYTES - (1 << 20)) {
        while out.len() < chunk {
            out.extend(g.next_batch());
        }
        log.append_as_follower(&out).expect("append");
        written += out.len() as u64;
        out.clear();
    }
    for p in 0..TRANSACTIONAL as usize {
        if g.txn_open[p] > 0 {
            out.extend(g.marker(100 + p as i64, true));
        }
    }
    if !out.is_empty() {
        log.append_as_follower(&out).expect("append");
    }
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    log.close().expect("close");
}

fn kafka_dir() -> PathBuf {
    // A partition written elsewhere instead, e.g. by Apache Kafka itself (`kafka_peer` with
    // `SEGLOG_KAFKA_BENCH_KEEP=1` leaves `target/kafka-bench/big/big-0`): its page cache holds
    // the file as a broker's small appends left it, the generator's holds it as large writes do.
    if let Some(dir) = std::env::var_os("SEGLOG_BENCH_KAFKA_LAYOUT_DIR") {
        return PathBuf::from(dir);
    }
    let bytes = std::env::var("SEGLOG_BENCH_KAFKA_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KAFKA_SEGMENT_BYTES);
    let producers = kafka_producers();
    let tag = producers_tag(producers);
    let dir = bench_dir(bytes)
        .with_file_name(format!("kafka-layout-{tag}v1-{bytes}"))
        .join("topic-0");
    if !dir.with_file_name(COMPLETE_MARKER).exists() {
        let t = Instant::now();
        generate_kafka(&dir, bytes, CHUNK_BYTES, producers);
        std::fs::write(dir.with_file_name(COMPLETE_MARKER), "").expect("marker");
        eprintln!("generated {} in {:.1?}", dir.display(), t.elapsed());
    }
    dir
}

fn small_partitions_dir() -> PathBuf {
    let producers = kafka_producers();
    let tag = producers_tag(producers);
    let root = bench_dir(0).with_file_name(format!(
        "small-partitions-{tag}v1-{SMALL_PARTITIONS}x{SMALL_PARTITION_BYTES}"
    ));
    if !root.join(COMPLETE_MARKER).exists() {
        let t = Instant::now();
        let _ = std::fs::remove_dir_all(&root);
        for p in 0..SMALL_PARTITIONS {
            generate_kafka(
                &root.join(format!("topic-{p}")),
                SMALL_PARTITION_BYTES,
                64 << 10,
                producers,
            );
        }
        std::fs::write(root.join(COMPLETE_MARKER), "").expect("marker");
        eprintln!("generated {} in {:.1?}", root.display(), t.elapsed());
    }
    root
}

/// The crash's index files: none, or preallocated to 10 MiB of zeros (what a broker that died
/// leaves for the active segment).
#[derive(Clone, Copy)]
enum Indexes {
    Missing,
    ZeroFilled,
    /// As the run before left them (a load or `recover` rebuilds them as Kafka writes them).
    Kept,
}

fn set_indexes(dir: &Path, how: Indexes) {
    if let Indexes::Kept = how {
        return;
    }
    for (base, _) in segments(dir) {
        for ext in ["index", "timeindex"] {
            let p = dir.join(format!("{base:020}.{ext}"));
            let _ = std::fs::remove_file(&p);
            if let Indexes::ZeroFilled = how {
                let f = std::fs::File::create(&p).expect("create index");
                f.set_len(10 << 20).expect("preallocate index");
            }
        }
    }
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` on `f` through GNU `dd` (`iflag=nocache count=0`), so
/// that the next read comes from the disk.
fn drop_from_cache(f: &Path) {
    let status = std::process::Command::new("dd")
        .arg(format!("if={}", f.display()))
        .args(["iflag=nocache", "count=0", "status=none"])
        .status()
        .expect("run dd");
    assert!(status.success(), "dd nocache {}", f.display());
}

fn all_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One 1 GiB segment: `LogLoader::load(full)` with its indexes missing and zero-filled, and
/// `LogLoader::plan_audited(full)` without the lock (what `seglog verify` runs: windows read
/// through a handle), each against one mmap'd `crc32c` pass over the same `.log`.
fn kafka_layout(c: &mut Criterion) {
    let dir = kafka_dir();
    let files: Vec<PathBuf> = segments(&dir).into_iter().map(|(_, p)| p).collect();
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let opts = LoadOptions {
        config: recovery::Config {
            log: kafka_config(),
            full_recovery: true,
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let load = |how: Indexes| {
        set_indexes(&dir, how);
        let t = Instant::now();
        let (log, report) = LogLoader::load(&dir, &opts).expect("full recovery");
        let spent = t.elapsed();
        assert!(report.cut.is_empty(), "{report}");
        assert_eq!(report.bytes_scanned, total);
        log.close().expect("close");
        spent
    };
    let verify_with = |opts: &LoadOptions| {
        let t = Instant::now();
        let plan = LogLoader::plan_audited(&dir, opts).expect("plan");
        let spent = t.elapsed();
        assert!(plan.cuts().is_empty());
        black_box(plan.log_end_offset);
        spent
    };
    let verify = || verify_with(&opts);
    // The same plan on storage that says it cannot map: the `.log` read through `pread` in chunks
    // (`record_format::internals::scan_file`) instead of a guarded map.
    let mut read_opts = opts.clone();
    read_opts.config.env.storage = std::sync::Arc::new(NoMmap);
    let verify_pread = || verify_with(&read_opts);
    let crc = || {
        let t = Instant::now();
        black_box(crc_pass_mmap(&dir, &files));
        t.elapsed()
    };
    let mut g = c.benchmark_group("kafka_layout");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(total));
    g.bench_function("crc32c_one_pass_mmap", |b| {
        b.iter(|| black_box(crc_pass_mmap(&dir, &files)))
    });
    g.bench_function("crc32c_fast_one_pass_mmap", |b| {
        b.iter(|| {
            black_box(crc_pass_mmap_with(
                &dir,
                &files,
                record_format::internals::crc32c,
            ))
        })
    });
    g.bench_function("recover_full_indexes_missing", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load(Indexes::Missing)).sum())
    });
    g.bench_function("recover_full_indexes_zero_filled", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load(Indexes::ZeroFilled)).sum())
    });
    g.bench_function("verify_plan", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| verify()).sum())
    });
    g.bench_function("verify_plan_pread", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| verify_pread()).sum())
    });
    g.finish();
    paired_ratio(
        "kafka_layout: plan_audited (verify) through pread / through a guarded map",
        &["kafka_layout/verify_plan_pread"],
        verify_pread,
        verify,
    );
    let ids = [
        "kafka_layout/crc32c_one_pass_mmap",
        "kafka_layout/recover_full",
        "kafka_layout/verify_plan",
    ];
    if pairs_wanted(&ids) {
        eprintln!(
            "kafka_layout: {}; before the pairs, {}",
            dir.display(),
            page_cache_state(&dir, &files)
        );
    }
    paired_ratio(
        "kafka_layout: mmap crc32c pass / load(full), indexes missing",
        &ids,
        crc,
        || load(Indexes::Missing),
    );
    paired_ratio(
        "kafka_layout: mmap crc32c pass / load(full), indexes zero-filled",
        &ids,
        crc,
        || load(Indexes::ZeroFilled),
    );
    paired_ratio(
        "kafka_layout: mmap crc32c pass / plan_audited(full) without the lock (verify)",
        &ids,
        crc,
        verify,
    );
    // Whole `seglog` processes (start, plan, apply, report, exit) against the same baseline.
    let seglog = |args: &[&str], how: Indexes| {
        set_indexes(&dir, how);
        let t = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_seglog"))
            .args(args)
            .arg(&dir)
            .output()
            .expect("run seglog");
        let spent = t.elapsed();
        assert!(out.status.success(), "seglog {args:?}: {out:?}");
        spent
    };
    paired_ratio(
        "kafka_layout: mmap crc32c pass / whole `seglog recover --full`, indexes missing",
        &ids,
        crc,
        || seglog(&["recover", "--full"], Indexes::Missing),
    );
    paired_ratio(
        "kafka_layout: mmap crc32c pass / whole `seglog verify`",
        &ids,
        crc,
        || seglog(&["verify"], Indexes::Kept),
    );
    // The same against one call of the CRC-32C function recovery itself uses (crc-fast).
    let fast = || {
        let t = Instant::now();
        black_box(crc_pass_mmap_with(
            &dir,
            &files,
            record_format::internals::crc32c,
        ));
        t.elapsed()
    };
    paired_ratio(
        "kafka_layout: mmap pass of seglog's crc32c (crc-fast) / load(full), indexes missing",
        &ids,
        fast,
        || load(Indexes::Missing),
    );
    paired_ratio(
        "kafka_layout: mmap pass of seglog's crc32c (crc-fast) / plan_audited(full) (verify)",
        &ids,
        fast,
        verify,
    );
    if pairs_wanted(&ids) {
        eprintln!(
            "kafka_layout: after the pairs, {}",
            page_cache_state(&dir, &files)
        );
    }
}

/// The real file system, but one that says it cannot map files: a plan then reads each `.log`.
#[derive(Debug)]
struct NoMmap;

impl Storage for NoMmap {
    fn open(&self, path: &Path, mode: OpenMode) -> segment_store::Result<Box<dyn FileHandle>> {
        StdFs.open(path, mode)
    }
    fn exists(&self, path: &Path) -> segment_store::Result<bool> {
        StdFs.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> segment_store::Result<()> {
        StdFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> segment_store::Result<()> {
        StdFs.remove_file(path)
    }
    fn list_dir(&self, dir: &Path) -> segment_store::Result<Vec<std::ffi::OsString>> {
        StdFs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> segment_store::Result<()> {
        StdFs.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> segment_store::Result<()> {
        StdFs.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> segment_store::Result<()> {
        StdFs.sync_dir(dir)
    }
    fn supports_mmap(&self) -> bool {
        false
    }
}

/// 2,000 partitions of 512 KiB in one log directory: `load_log_dir(full)` on as many threads as
/// cores (Kafka's `num.recovery.threads.per.data.dir` idea), against one mmap'd `crc32c` pass
/// over every `.log`; and the same planning only (no writes), to say where the time goes.
fn small_partitions(c: &mut Criterion) {
    if !group_selected("small_partitions") {
        return;
    }
    let root = small_partitions_dir();
    let logs: Vec<PathBuf> = all_files(&root)
        .into_iter()
        .filter(|p| FileKind::of_path(p) == Some(FileKind::Log))
        .collect();
    let total: u64 = logs
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir_opts = recovery::Config {
        recovery_threads: threads,
        full_recovery: true,
        log: kafka_config(),
        ..recovery::Config::default()
    };
    let crc = || {
        let t = Instant::now();
        let mut acc = 0u32;
        for f in &logs {
            let bytes = std::fs::read(f).expect("read .log");
            acc ^= crc32c::crc32c(&bytes);
        }
        black_box(acc);
        t.elapsed()
    };
    let load = || {
        let t = Instant::now();
        let loaded = recovery::load_log_dir(&root, &dir_opts).expect("load log dir");
        let spent = t.elapsed();
        assert_eq!(loaded.partitions.len(), SMALL_PARTITIONS);
        loaded.close().expect("close");
        spent
    };
    let plan_only = || {
        let t = Instant::now();
        let opts = LoadOptions {
            config: recovery::Config {
                log: kafka_config(),
                full_recovery: true,
                ..recovery::Config::default()
            },
            ..LoadOptions::default()
        };
        let dirs: Vec<PathBuf> = (0..SMALL_PARTITIONS)
            .map(|p| root.join(format!("topic-{p}")))
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(d) = dirs.get(i) else { break };
                    black_box(LogLoader::plan(d, &opts).expect("plan").log_end_offset);
                });
            }
        });
        t.elapsed()
    };
    let mut g = c.benchmark_group("small_partitions");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Bytes(total));
    g.bench_function("crc32c_read_every_log", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| crc()).sum())
    });
    g.bench_function("load_log_dir_full", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| load()).sum())
    });
    g.bench_function("plan_every_partition", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| plan_only()).sum())
    });
    g.finish();
    let ids = ["small_partitions/"];
    paired_ratio(
        "small_partitions: crc32c over every .log / load_log_dir(full) incl. close",
        &ids,
        crc,
        load,
    );
    paired_ratio(
        "small_partitions: crc32c over every .log / plan of every partition",
        &ids,
        crc,
        plan_only,
    );
}

/// Cold page cache: every file of the one-segment partition dropped from the cache before each
/// run; `LogLoader::load(full)` (indexes missing) against a sequential `read` of the same files
/// (1 MiB buffer).
fn cold_cache(_c: &mut Criterion) {
    let dir = kafka_dir();
    let ids = ["cold_cache/"];
    let drop_all = || {
        for f in all_files(&dir) {
            drop_from_cache(&f);
        }
    };
    let opts = LoadOptions {
        config: recovery::Config {
            log: kafka_config(),
            full_recovery: true,
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let mut buf = vec![0u8; 1 << 20];
    let read = || {
        set_indexes(&dir, Indexes::Missing);
        drop_all();
        let t = Instant::now();
        let mut n = 0usize;
        for f in all_files(&dir) {
            let mut h = std::fs::File::open(&f).expect("open");
            loop {
                let k = h.read(&mut buf).expect("read");
                if k == 0 {
                    break;
                }
                n += k;
            }
        }
        black_box(n);
        t.elapsed()
    };
    let load = || {
        set_indexes(&dir, Indexes::Missing);
        drop_all();
        let t = Instant::now();
        let (log, _) = LogLoader::load(&dir, &opts).expect("full recovery");
        let spent = t.elapsed();
        log.close().expect("close");
        spent
    };
    paired_ratio(
        "cold_cache: sequential read of every file / load(full)",
        &ids,
        read,
        load,
    );
}

criterion_group!(
    benches,
    full_recovery,
    snapshot_replay,
    kafka_layout,
    small_partitions,
    cold_cache
);
criterion_main!(benches);
