//! Fetches against Apache Kafka's read path: the same random sequence of fetches through
//! seglog's `Log::fetch` and through Kafka 4.3.1's `UnifiedLog.read` (the harness of
//! `tools/kafka`, mode `bench-read`, timed inside the JVM after warm-up passes), on the same
//! partition directory, warm page cache, one reader, no writer.
//!
//! The partition is written by seglog (`Log::append`, 64 MiB segments,
//! `SEGLOG_KAFKA_BENCH_READ_MIB` of ~1.15 KB batches, default 128) and closed cleanly, so both
//! sides open it without recovery. The requests: `SEGLOG_KAFKA_BENCH_FETCHES` (default 2,000)
//! offsets drawn uniformly from the partition, 1 MiB max, `minOneMessage`, once with
//! `read_uncommitted` (Kafka's `HIGH_WATERMARK`) and once with `read_committed`
//! (`TXN_COMMITTED`), the high watermark at the log end. Each side makes 2 untimed passes over
//! the sequence, then `SEGLOG_KAFKA_BENCH_ITERS` (default 6) timed passes: seglog's before and
//! after Kafka's JVM runs, Kafka's alternating two ways of taking the answer: `copy` reads the
//! bytes `read` returns into a reused direct buffer, one copy out of the page cache (seglog's
//! fetch returns the bytes copied into a buffer of its own, so this is like for like), `slice`
//! keeps the `FileRecords` slice (what a broker hands to `sendfile`; no byte of the log is
//! read). Medians of fetches/s per pass. seglog's side is timed three ways: `Log::fetch` (the
//! answer copied into a new buffer of its own), `Log::fetch_slices` with the slice read into one
//! reused buffer (Kafka's `copy`, like for like), and `fetch_slices` alone (Kafka's `slice`).
//! `memcpy` is the same answers' bytes copied out of the segment files held in memory into a
//! reused buffer: what copying the bytes alone costs.
//!
//! Then the fetches beside a writer, 1 and 4 reader threads: each side's readers fetch at random
//! offsets of the readable range while its own writer appends and flushes every 100 appends,
//! each answer read into the reader's buffer (`copy`) or kept as the slice it is (`slice`),
//! rounds with and without the writer alternating (harness `bench-read-writer`; see
//! [`seglog_beside_writer`]). Each is run twice: with each side's writer as fast as it can (so
//! the faster writer takes more of the machine from its readers), then with both writers kept
//! to the same pace, `SEGLOG_KAFKA_BENCH_WRITER_RATE` appends a second (default 20,000, about
//! 23 MB/s: the same work beside both sides' readers). `SEGLOG_KAFKA_BENCH_WRITER_ROUNDS` (default 5) rounds of
//! `SEGLOG_KAFKA_BENCH_WRITER_SECONDS` (default 1) per condition; `SEGLOG_BENCH_MAX_OPEN_SEGMENTS`
//! sets seglog's `LogConfig::max_open_inactive_segments` for every read; `SEGLOG_KAFKA_BENCH_NO_WRITER`
//! skips them.
//!
//! Needs Java and `tools/kafka/fetch.sh` first (`SEGLOG_KAFKA_HOME` points at another build of
//! the jars and the harness). Run: `cargo bench --bench kafka_reads`.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use record_format::RecordBatchBuilder;
use seglog::{Config, IsolationLevel, Log};
use testkit::XorShift;

#[path = "common/kafka.rs"]
mod kafka;
use kafka::{kafka_home, repo};

const RECORDS: usize = 10;
const VALUE: usize = 100;
const POOL: usize = 256;
const MAX_BYTES: usize = 1 << 20;
const WARMUP_PASSES: usize = 2;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn harness(home: &Path, args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new("java")
        .args(["-Xmx1g", "-XX:+UseParallelGC", "-cp"])
        .arg(format!(
            "{}/lib/*:{}",
            home.display(),
            home.join("harness.jar").display()
        ))
        .arg("seglog.kafka.Harness")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "harness {args:?} failed (a harness.jar without `bench-read`: run tools/kafka/fetch.sh)"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The config seglog's side reopens the partition with: 64 MiB segments, and
/// `LogConfig::max_open_inactive_segments` from `SEGLOG_BENCH_MAX_OPEN_SEGMENTS` (default: the
/// library's default).
fn reader_config() -> Config {
    let config = Config::default().with_segment_bytes(64 << 20);
    match std::env::var("SEGLOG_BENCH_MAX_OPEN_SEGMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => config.with_max_open_inactive_segments(n),
        None => config,
    }
}

/// [`POOL`] batches of [`RECORDS`] records with [`VALUE`] random bytes each, timestamped now.
fn batch_pool() -> Vec<Vec<u8>> {
    let mut rng = XorShift::new(7);
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(0));
    (0..POOL)
        .map(|_| {
            let mut b = RecordBatchBuilder::new(0);
            for _ in 0..RECORDS {
                let value: Vec<u8> = (0..VALUE).map(|_| rng.next_u64() as u8).collect();
                b.append(ts, None, Some(&value), &[]).expect("record");
            }
            b.build()
        })
        .collect()
}

/// Writes the partition and closes it; returns its log end offset and size in bytes.
fn write_partition(dir: &Path, bytes: usize) -> (i64, usize) {
    let config = Config::default().with_segment_bytes(64 << 20);
    let log = Log::open(dir, config).expect("open");
    let pool = batch_pool();
    let batches = bytes / pool[0].len();
    for i in 0..batches {
        log.append(&pool[i % POOL]).expect("append");
    }
    log.flush().expect("flush");
    let end = log.log_end_offset();
    log.close().expect("close");
    (end, batches * pool[0].len())
}

/// How seglog's side takes each answer.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `Log::fetch`: the bytes copied into a new buffer of the answer's own.
    Fetch,
    /// `Log::fetch_slices`, the slice read into one reused buffer (like Kafka's `copy`).
    SliceRead,
    /// `Log::fetch_slices` alone: a file slice of the answer, no byte read (what Kafka's
    /// `UnifiedLog.read` returns).
    Slice,
}

/// Fetches/s of `passes` timed passes of seglog over `offsets` (after the warm-up passes).
fn seglog_passes(
    dir: &Path,
    offsets: &[i64],
    isolation: IsolationLevel,
    passes: usize,
    mode: Mode,
) -> Vec<f64> {
    let log = Log::open(dir, reader_config()).expect("open");
    let mut buf = vec![0u8; MAX_BYTES];
    let rates = timed_passes(passes, offsets.len(), || {
        let mut bytes = 0;
        for &o in offsets {
            bytes += match mode {
                Mode::Fetch => {
                    let r = log
                        .fetch(o, MAX_BYTES, isolation.into(), true)
                        .expect("fetch");
                    std::hint::black_box(r.records.len())
                }
                Mode::SliceRead | Mode::Slice => {
                    let r = log
                        .fetch_slices(o, MAX_BYTES, isolation.into(), true)
                        .expect("fetch_slices");
                    match (&r.slice, mode) {
                        (Some(s), Mode::SliceRead) => {
                            let n = s.read_into(&mut buf).expect("read");
                            std::hint::black_box(&buf[..n]).len()
                        }
                        _ => std::hint::black_box(usize::try_from(r.len()).unwrap_or(usize::MAX)),
                    }
                }
            };
        }
        assert!(bytes > 0);
    });
    log.close().expect("close");
    rates
}

/// Runs `pass` [`WARMUP_PASSES`] times, then `passes` times timed: fetches/s of each timed pass
/// of `fetches` fetches.
fn timed_passes(passes: usize, fetches: usize, mut pass: impl FnMut()) -> Vec<f64> {
    for _ in 0..WARMUP_PASSES {
        pass();
    }
    (0..passes)
        .map(|_| {
            let t = Instant::now();
            pass();
            fetches as f64 / t.elapsed().as_secs_f64()
        })
        .collect()
}

/// Fetches/s of the bare copy of each answer's bytes (the same file ranges `fetch_slices`
/// names), copied with `memcpy` into one reused buffer out of the segment files read into memory
/// beforehand: no lookup, no system call, what copying the bytes alone costs.
fn memcpy_passes(
    dir: &Path,
    offsets: &[i64],
    isolation: IsolationLevel,
    passes: usize,
) -> Vec<f64> {
    let log = Log::open(dir, reader_config()).expect("open");
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let mut ranges = Vec::with_capacity(offsets.len());
    for &o in offsets {
        let r = log
            .fetch_slices(o, MAX_BYTES, isolation.into(), true)
            .expect("fetch_slices");
        let Some(s) = r.slice else { continue };
        let file = match files.iter().position(|(p, _)| p == s.path()) {
            Some(i) => i,
            None => {
                files.push((
                    s.path().to_path_buf(),
                    std::fs::read(s.path()).expect("read"),
                ));
                files.len() - 1
            }
        };
        let start = usize::try_from(s.position()).expect("position");
        ranges.push((file, start, start + usize::try_from(s.len()).expect("len")));
    }
    log.close().expect("close");
    let mut buf = vec![0u8; MAX_BYTES];
    timed_passes(passes, offsets.len(), || {
        for &(file, start, end) in &ranges {
            buf[..end - start].copy_from_slice(&files[file].1[start..end]);
            std::hint::black_box(&buf);
        }
    })
}

/// One round beside (or without) a writer: fetches and appends in `seconds`.
struct Round {
    writer: bool,
    fetches: u64,
    seconds: f64,
    appends: u64,
}

/// seglog's side of `bench-read-writer` (see `ReadHarness.benchReadWriter`): one untimed round
/// with the writer, then `2 * rounds` rounds alternating with and without it. `readers` threads
/// fetch at offsets drawn uniformly from the readable range (`read_uncommitted`), 1 MiB at most,
/// `min_one_message`, each answer's slice read into the thread's reused buffer (Kafka's `copy`)
/// when `copy`, else kept unread (Kafka's `slice`: what a server hands to `sendfile`); the writer appends the pool's batches with `Log::append` and calls `Log::flush` every
/// `flush_every` appends (the high watermark follows the flushed log end, the default policy).
fn seglog_beside_writer(
    dir: &Path,
    readers: usize,
    rounds: usize,
    seconds: f64,
    flush_every: u64,
    copy: bool,
    rate: Option<f64>,
) -> Vec<Round> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let log = Log::open(dir, reader_config()).expect("open");
    let pool = batch_pool();
    let mut out = Vec::new();
    for round in -1..2 * rounds as i64 {
        let writing = round < 0 || round % 2 == 0;
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + std::time::Duration::from_secs_f64(seconds);
        let (fetches, secs, appends) = std::thread::scope(|scope| {
            let writer = writing.then(|| {
                scope.spawn(|| {
                    let started = Instant::now();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        log.append(&pool[(n % POOL as u64) as usize])
                            .expect("append");
                        n += 1;
                        if n.is_multiple_of(flush_every) {
                            log.flush().expect("flush");
                            if let Some(rate) = rate {
                                pace(started, n, rate);
                            }
                        }
                    }
                    n
                })
            });
            let t = Instant::now();
            let handles: Vec<_> = (0..readers)
                .map(|r| {
                    let log = &log;
                    scope.spawn(move || {
                        let mut rng = XorShift::new(1 + r as u64);
                        let mut buf = vec![0u8; 4 << 20];
                        let mut fetches = 0u64;
                        while Instant::now() < deadline {
                            let range = log.readable_range(IsolationLevel::ReadUncommitted);
                            let span = u64::try_from(range.end - range.start).unwrap_or(0).max(1);
                            let o = range.start + i64::try_from(rng.next_u64() % span).unwrap_or(0);
                            let a = log
                                .fetch_slices(
                                    o,
                                    MAX_BYTES,
                                    IsolationLevel::ReadUncommitted.into(),
                                    true,
                                )
                                .expect("fetch_slices");
                            match &a.slice {
                                Some(s) if copy => {
                                    std::hint::black_box(s.read_into(&mut buf).expect("read"));
                                }
                                _ => {
                                    std::hint::black_box(&a);
                                }
                            }
                            fetches += 1;
                        }
                        fetches
                    })
                })
                .collect();
            let fetches: u64 = handles.into_iter().map(|h| h.join().expect("reader")).sum();
            let secs = t.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            let appends = writer.map_or(0, |w| w.join().expect("writer"));
            (fetches, secs, appends)
        });
        if round >= 0 {
            out.push(Round {
                writer: writing,
                fetches,
                seconds: secs,
                appends,
            });
        }
    }
    log.close().expect("close");
    out
}

/// Sleeps until `n` appends from `started` on are at `rate` appends per second (the writer of a
/// paced round: the same work on both sides, whatever each writer's speed).
fn pace(started: Instant, n: u64, rate: f64) {
    let due = started + std::time::Duration::from_secs_f64(n as f64 / rate);
    if let Some(wait) = due.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
}

/// Fetches/s and appends/s, medians over the rounds of one condition.
fn rates(rounds: &[Round], writer: bool) -> (f64, f64) {
    let of = |f: &dyn Fn(&Round) -> f64| {
        median(
            rounds
                .iter()
                .filter(|r| r.writer == writer)
                .map(f)
                .collect(),
        )
    };
    (
        of(&|r| r.fetches as f64 / r.seconds),
        of(&|r| r.appends as f64 / r.seconds),
    )
}

/// A copy of the partition directory `dir` (its parent's files too), under `<parent>-run`, in
/// place of the last one.
fn fresh_copy(dir: &Path) -> PathBuf {
    let parent = dir.parent().expect("parent");
    let to_parent = parent.with_file_name(format!(
        "{}-run",
        parent.file_name().expect("name").to_string_lossy()
    ));
    let _ = std::fs::remove_dir_all(&to_parent);
    let to = to_parent.join(dir.file_name().expect("name"));
    std::fs::create_dir_all(&to).expect("mkdir");
    for (from, into) in [(parent, &to_parent), (dir, &to)] {
        for e in std::fs::read_dir(from).expect("read_dir") {
            let e = e.expect("entry");
            if e.file_type().expect("type").is_file() {
                std::fs::copy(e.path(), into.join(e.file_name())).expect("copy");
            }
        }
    }
    to
}

/// The fetches beside a writer, seglog against Kafka, 1 and 4 readers.
fn beside_writer(home: &Path, dir: &Path) {
    let rounds = env_usize("SEGLOG_KAFKA_BENCH_WRITER_ROUNDS", 5).max(1);
    let seconds = std::env::var("SEGLOG_KAFKA_BENCH_WRITER_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0f64);
    let flush_every = 100u64;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    eprintln!(
        "beside a writer: rounds per condition and side {rounds}, {seconds} s each, flush every \
         {flush_every} appends, {cores} cores"
    );
    println!();
    println!(
        "| answer | readers | writer | seglog fetches/s | Kafka fetches/s | seglog / Kafka | \
         per reader: seglog / Kafka fetches/s | appends/s: seglog / Kafka |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    let paced = std::env::var("SEGLOG_KAFKA_BENCH_WRITER_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000.0f64);
    for (answer, readers) in [("copy", 1usize), ("copy", 4), ("slice", 1), ("slice", 4)] {
        let copy = answer == "copy";
        // The writers as fast as each can, then both at the same pace.
        for rate in [None, Some(paced)] {
            // Each side starts from a copy of the partition as written: the writers grow it (by
            // up to about 150 MB a second), and neither side reads what the other appended.
            let ours = seglog_beside_writer(
                &fresh_copy(dir),
                readers,
                rounds,
                seconds,
                flush_every,
                copy,
                rate,
            );
            let theirs_dir = fresh_copy(dir);
            let k = harness(
                home,
                &[
                    "bench-read-writer",
                    &theirs_dir.display().to_string(),
                    &readers.to_string(),
                    &rounds.to_string(),
                    &seconds.to_string(),
                    &flush_every.to_string(),
                    answer,
                    &rate.unwrap_or(0.0).to_string(),
                ],
            );
            let theirs: Vec<Round> = k
                .iter()
                .map(|x| Round {
                    writer: x["writer"].as_bool().expect("writer"),
                    fetches: x["fetches"].as_u64().expect("fetches"),
                    seconds: x["seconds"].as_f64().expect("seconds"),
                    appends: x["appends"].as_u64().expect("appends"),
                })
                .collect();
            // The rounds without the writer are the same condition in both runs: shown once.
            let conditions: &[bool] = if rate.is_none() {
                &[true, false]
            } else {
                &[true]
            };
            for &writer in conditions {
                let (f, a) = rates(&ours, writer);
                let (kf, ka) = rates(&theirs, writer);
                let n = readers as f64;
                let appends = if writer {
                    format!("{a:.0} / {ka:.0}")
                } else {
                    String::new()
                };
                let label = match (writer, rate) {
                    (false, _) => "none".to_string(),
                    (true, None) => "as fast as it can".to_string(),
                    (true, Some(r)) => format!("{r:.0} appends/s"),
                };
                println!(
                    "| {answer} | {readers} | {label} | {f:.0} | {kf:.0} | **{:.2}x** | {:.0} / {:.0} | \
                     {appends} |",
                    f / kf,
                    f / n,
                    kf / n,
                );
            }
        }
    }
}

fn main() {
    let home = kafka_home();
    let iters = env_usize("SEGLOG_KAFKA_BENCH_ITERS", 6).max(2);
    let fetches = env_usize("SEGLOG_KAFKA_BENCH_FETCHES", 2000).max(1);
    let mib = env_usize("SEGLOG_KAFKA_BENCH_READ_MIB", 128).max(1);
    let work = std::env::var_os("SEGLOG_KAFKA_BENCH_DIR")
        .map_or_else(|| repo().join("target/kafka-bench-reads"), PathBuf::from);
    let _ = std::fs::remove_dir_all(&work);
    let dir = work.join("reads").join("reads-0");
    let (end, bytes) = write_partition(&dir, mib << 20);
    let mut rng = XorShift::new(42);
    let offsets: Vec<i64> = (0..fetches)
        .map(|_| i64::try_from(rng.next_u64() % u64::try_from(end).unwrap_or(1)).unwrap_or(0))
        .collect();
    eprintln!(
        "partition of {} MiB, {end} offsets; {fetches} random fetches of at most 1 MiB, \
         {WARMUP_PASSES} warm-up passes then {iters} timed passes per side",
        bytes >> 20
    );
    println!(
        "| isolation | seglog `fetch` | seglog slice read into a reused buffer | Kafka `copy` | \
         memcpy | seglog `fetch` / Kafka | seglog slice read / Kafka | memcpy / Kafka | \
         seglog slice | Kafka slice | seglog / Kafka, slice |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (isolation, kafka_name, name) in [
        (
            IsolationLevel::ReadUncommitted,
            "high_watermark",
            "read_uncommitted",
        ),
        (
            IsolationLevel::ReadCommitted,
            "txn_committed",
            "read_committed",
        ),
    ] {
        let requests = work.join(format!("requests-{name}"));
        let lines: String = offsets
            .iter()
            .map(|o| format!("{o} {MAX_BYTES} {kafka_name}\n"))
            .collect();
        std::fs::write(&requests, lines).expect("requests");
        let modes = [Mode::Fetch, Mode::SliceRead, Mode::Slice];
        let mut ours: Vec<Vec<f64>> = modes
            .iter()
            .map(|&m| seglog_passes(&dir, &offsets, isolation, iters / 2, m))
            .collect();
        let mut bare = memcpy_passes(&dir, &offsets, isolation, iters / 2);
        let k = harness(
            &home,
            &[
                "bench-read",
                &dir.display().to_string(),
                "-1",
                &requests.display().to_string(),
                &WARMUP_PASSES.to_string(),
                &iters.to_string(),
            ],
        );
        for (rates, &m) in ours.iter_mut().zip(&modes) {
            rates.extend(seglog_passes(
                &dir,
                &offsets,
                isolation,
                iters - iters / 2,
                m,
            ));
        }
        bare.extend(memcpy_passes(&dir, &offsets, isolation, iters - iters / 2));
        let rate = |mode: &str| {
            median(
                k.iter()
                    .filter(|x| x["mode"] == mode)
                    .map(|x| {
                        x["fetches"].as_f64().expect("fetches") / x["seconds"].as_f64().expect("s")
                    })
                    .collect(),
            )
        };
        let (copy, slice) = (rate("copy"), rate("slice"));
        let [fetch, slice_read, sliced] = [0, 1, 2].map(|i| median(ours[i].clone()));
        let bare = median(bare);
        println!(
            "| {name} | {fetch:.0} | {slice_read:.0} | {copy:.0} | {bare:.0} | {:.2}x | {:.2}x | \
             {:.2}x | {sliced:.0} | {slice:.0} | {:.2}x |",
            fetch / copy,
            slice_read / copy,
            bare / copy,
            sliced / slice
        );
    }
    if std::env::var_os("SEGLOG_KAFKA_BENCH_NO_WRITER").is_none() {
        beside_writer(&home, &dir);
    }
    if std::env::var_os("SEGLOG_KAFKA_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
}
