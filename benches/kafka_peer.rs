//! Apache Kafka as the performance peer (issue #13): in one run, on the same files, warm cache,
//! after a warm-up, Kafka 4.3.1's own code (through the harness of `tools/kafka`) against seglog.
//!
//! 1. append: Kafka's `UnifiedLog.appendAsLeader` against seglog's `PartitionLog::append_as_leader`
//!    (the same path: validation, offset assignment, producer state, segment and index writes) and
//!    `LocalLog::append` (offsets already assigned: segment and index writes only); ~1 GiB of
//!    10-record batches (100-byte values, ~1.15 KB per batch) into one 1 GiB segment, appends
//!    timed, not the final flush; both sides cycle a pool of 1,024 prebuilt batches; dirty pages
//!    are written back (`sync`) before each side starts. The same append where the disk is not
//!    the limit (a tmpfs, CPU time per batch): `benches/kafka_append.rs`.
//! 2. recovery of that 1 GiB default-layout partition (written by Kafka): Kafka's
//!    `UnifiedLog.create` with no clean shutdown and recovery point 0 (LogLoader recovers every
//!    segment; snapshots removed first) and `close`, in its JVM, against the whole
//!    `seglog recover --full` process and against seglog's library in this process
//!    (`LogLoader::load(full)` and `close`).
//! 3. recovery of a log dir of 2,000 partitions × 512 KiB (copies of one Kafka-written
//!    partition): Kafka with 2 recovery threads (as `num.recovery.threads.per.data.dir` on this
//!    2-core machine) against `seglog recover --full` on the log dir (2 threads here) and
//!    against `load_log_dir(full)` on 2 threads and `close` in this process.
//!
//! Medians of `SEGLOG_KAFKA_BENCH_ITERS` (default 5) timed runs after one warm-up run. Needs
//! `tools/kafka/fetch.sh` first; data goes to `SEGLOG_KAFKA_BENCH_DIR` (default
//! `target/kafka-bench`, ~2.2 GiB). Run: `cargo bench --bench kafka_peer`.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use record_format::RecordBatchBuilder;
use recovery::{load_log_dir, AppendOrigin, Config, LoadOptions, LogLoader};
use segment_store::{LocalLog, LogConfig};

#[path = "common/kafka.rs"]
mod kafka;
use kafka::{kafka_home, repo};

const RECORDS: usize = 10;
const VALUE: usize = 100;
const POOL: usize = 1024;
/// ~1 GiB of ~1,151-byte batches, below `segment.bytes` (1 GiB): one segment.
const BIG_BATCHES: usize = 930_000;
const WARMUP_BATCHES: usize = 100_000;
/// 512 KiB partitions.
const SMALL_BATCHES: usize = 455;
const PARTITIONS: usize = 2_000;

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
    assert!(out.status.success(), "harness {args:?} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Reads every file under `dir` (warm page cache).
fn warm(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            warm(&p);
        } else {
            std::hint::black_box(std::fs::read(&p).map(|b| b.len()).unwrap_or(0));
        }
    }
}

/// Writes back every dirty page (`sync`), so a timed append does not pay for the writeback of
/// the gigabyte the previous one left in the page cache.
fn settle() {
    let _ = Command::new("sync").status();
}

fn pool() -> Vec<Vec<u8>> {
    let mut rng = testkit::XorShift::new(7);
    let ts = 1_790_000_000_000;
    (0..POOL)
        .map(|i| {
            let mut b = RecordBatchBuilder::new(0);
            for _ in 0..RECORDS {
                let value: Vec<u8> = (0..VALUE).map(|_| rng.next_u64() as u8).collect();
                b.append(ts + i as i64, None, Some(&value), &[])
                    .expect("append");
            }
            b.build()
        })
        .collect()
}

/// Seconds to `LocalLog::append` `n` batches (offsets assigned by the caller) into `dir`.
fn seglog_local_log_append(dir: &Path, pool: &mut [Vec<u8>], n: usize) -> f64 {
    std::fs::create_dir_all(dir).expect("mkdir");
    let log = LocalLog::open(
        dir,
        LogConfig {
            retention_ms: -1,
            ..LogConfig::default()
        },
        0,
    )
    .expect("open");
    let t0 = Instant::now();
    for i in 0..n {
        let b = &mut pool[i % POOL];
        let base = (i * RECORDS) as i64;
        b[..8].copy_from_slice(&base.to_be_bytes());
        log.append(b).expect("append");
    }
    let secs = t0.elapsed().as_secs_f64();
    log.close().expect("close");
    secs
}

/// Seconds to `PartitionLog::append_as_leader` `n` batches into a new partition `dir`.
fn seglog_append_as_leader(dir: &Path, pool: &mut [Vec<u8>], n: usize) -> f64 {
    std::fs::create_dir_all(dir).expect("mkdir");
    let (mut log, _) = LogLoader::load(dir, &LoadOptions::default()).expect("load");
    let t0 = Instant::now();
    for i in 0..n {
        let b = &mut pool[i % POOL];
        b[..8].copy_from_slice(&0i64.to_be_bytes());
        log.append_as_leader(b, 0, AppendOrigin::Client)
            .expect("append");
    }
    let secs = t0.elapsed().as_secs_f64();
    log.close().expect("close");
    secs
}

fn seglog_recover(dir: &Path) -> f64 {
    let t0 = Instant::now();
    let st = Command::new(env!("CARGO_BIN_EXE_seglog"))
        .args(["recover", "--full"])
        .arg(dir)
        .stdout(Stdio::null())
        .status()
        .expect("seglog");
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        st.success(),
        "seglog recover --full {} failed",
        dir.display()
    );
    secs
}

/// seglog's library in this process, as Kafka's side runs in its JVM: `LogLoader::load(full)`
/// and `close`, the work Kafka's `UnifiedLog.create` + `close` does.
fn seglog_load(dir: &Path) -> f64 {
    let opts = LoadOptions {
        config: recovery::Config {
            full_recovery: true,
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let t0 = Instant::now();
    let (log, _) = LogLoader::load(dir, &opts).expect("LogLoader::load");
    log.close().expect("close");
    t0.elapsed().as_secs_f64()
}

/// [`seglog_load`] for a log directory: `load_log_dir(full)` on `threads` threads and `close`.
fn seglog_load_dir(dir: &Path, threads: usize) -> f64 {
    let opts = Config {
        recovery_threads: threads,
        full_recovery: true,
        ..Config::default()
    };
    let t0 = Instant::now();
    let loaded = load_log_dir(dir, &opts).expect("load_log_dir");
    loaded.close().expect("close");
    t0.elapsed().as_secs_f64()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
        }
    }
}

fn row(what: &str, kafka: f64, seglog: f64, bytes: f64) {
    println!(
        "| {what} | {kafka:.3} s ({:.0} MB/s) | {seglog:.3} s ({:.0} MB/s) | {:.2}× |",
        bytes / kafka / 1e6,
        bytes / seglog / 1e6,
        kafka / seglog
    );
}

fn main() {
    let home = kafka_home();
    let iters: usize = std::env::var("SEGLOG_KAFKA_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(1);
    let work = std::env::var_os("SEGLOG_KAFKA_BENCH_DIR")
        .map_or_else(|| repo().join("target/kafka-bench"), PathBuf::from);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("mkdir work");
    let mut pool = pool();
    let batch_bytes = pool[0].len();
    eprintln!("batch size {batch_bytes} bytes; {iters} timed runs after one warm-up");

    // 1. Append.
    let big = work.join("big").join("big-0");
    std::fs::create_dir_all(big.parent().expect("parent")).expect("mkdir");
    let (n, r, v) = (
        BIG_BATCHES.to_string(),
        RECORDS.to_string(),
        VALUE.to_string(),
    );
    settle();
    let k = harness(
        &home,
        &[
            "bench-write",
            &big.display().to_string(),
            &n,
            &r,
            &v,
            "1073741824",
            &WARMUP_BATCHES.to_string(),
        ],
    );
    let kafka_append = k[0]["seconds"].as_f64().expect("seconds");
    let append_bytes = k[0]["bytes"].as_f64().expect("bytes");
    let scratch = work.join("seglog-append");
    settle();
    seglog_local_log_append(&scratch.join("warm-0"), &mut pool, WARMUP_BATCHES);
    let local_append = seglog_local_log_append(&scratch.join("local-0"), &mut pool, BIG_BATCHES);
    settle();
    seglog_append_as_leader(&scratch.join("warm-1"), &mut pool, WARMUP_BATCHES);
    let leader_append = seglog_append_as_leader(&scratch.join("leader-0"), &mut pool, BIG_BATCHES);
    let _ = std::fs::remove_dir_all(&scratch);

    // 2. Recovery of the 1 GiB partition Kafka wrote.
    let big_bytes = std::fs::metadata(big.join("00000000000000000000.log"))
        .expect("big segment")
        .len() as f64;
    warm(&big);
    let k = harness(
        &home,
        &[
            "bench-recover",
            &(iters + 1).to_string(),
            "1",
            &big.display().to_string(),
        ],
    );
    let kafka_big = median(
        k.iter()
            .skip(1)
            .map(|x| x["seconds"].as_f64().expect("s"))
            .collect(),
    );
    seglog_recover(&big);
    let seglog_big = median((0..iters).map(|_| seglog_recover(&big)).collect());
    seglog_load(&big);
    let seglog_big_lib = median((0..iters).map(|_| seglog_load(&big)).collect());

    // 3. 2,000 partitions × 512 KiB.
    let src = work.join("src").join("many-0");
    std::fs::create_dir_all(src.parent().expect("parent")).expect("mkdir");
    harness(
        &home,
        &[
            "bench-write",
            &src.display().to_string(),
            &SMALL_BATCHES.to_string(),
            &r,
            &v,
            "1073741824",
            "0",
        ],
    );
    let many = work.join("many");
    for p in 0..PARTITIONS {
        copy_dir(&src, &many.join(format!("many-{p}")));
    }
    let many_bytes = PARTITIONS as f64
        * std::fs::metadata(src.join("00000000000000000000.log"))
            .expect("small segment")
            .len() as f64;
    warm(&many);
    let k = harness(
        &home,
        &[
            "bench-recover",
            &(iters + 1).to_string(),
            "2",
            &many.display().to_string(),
        ],
    );
    let kafka_many = median(
        k.iter()
            .skip(1)
            .map(|x| x["seconds"].as_f64().expect("s"))
            .collect(),
    );
    seglog_recover(&many);
    let seglog_many = median((0..iters).map(|_| seglog_recover(&many)).collect());
    seglog_load_dir(&many, 2);
    let seglog_many_lib = median((0..iters).map(|_| seglog_load_dir(&many, 2)).collect());

    println!("| what | Apache Kafka 4.3.1 | seglog | Kafka / seglog |");
    println!("| --- | --- | --- | --- |");
    row(
        &format!("append ~1 GiB ({BIG_BATCHES} batches): appendAsLeader vs PartitionLog::append_as_leader"),
        kafka_append,
        leader_append,
        append_bytes,
    );
    row(
        "append ~1 GiB: appendAsLeader vs LocalLog::append (offsets pre-assigned)",
        kafka_append,
        local_append,
        append_bytes,
    );
    row(
        "recover 1 partition, one ~1 GiB segment (seglog: whole process, --full)",
        kafka_big,
        seglog_big,
        big_bytes,
    );
    row(
        "recover 1 partition, one ~1 GiB segment (seglog: LogLoader::load(full) + close in-process)",
        kafka_big,
        seglog_big_lib,
        big_bytes,
    );
    row(
        &format!(
            "recover {PARTITIONS} partitions × 512 KiB, 2 threads (seglog: whole process, --full)"
        ),
        kafka_many,
        seglog_many,
        many_bytes,
    );
    row(
        &format!(
            "recover {PARTITIONS} partitions × 512 KiB, 2 threads (seglog: load_log_dir(full) + close in-process)"
        ),
        kafka_many,
        seglog_many_lib,
        many_bytes,
    );
    if std::env::var_os("SEGLOG_KAFKA_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&work);
    }
}
