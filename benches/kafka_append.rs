//! The append path against Apache Kafka's where the disk is not the limit: CPU time per batch of
//! Kafka 4.3.1's `UnifiedLog.appendAsLeader` (through the harness of `tools/kafka`, subcommand
//! `bench-append`) and of seglog's `PartitionLog::append_as_leader`, both into an empty partition
//! on a tmpfs (`/dev/shm`, or `SEGLOG_KAFKA_APPEND_DIR`), neither fsyncing.
//!
//! Both sides append the same bytes: `SEGLOG_KAFKA_APPEND_BATCHES` (default 930,000, ~1 GiB, one
//! segment of Kafka's default 1 GiB) uncompressed v2 batches of 10 records (100-byte random
//! values, null keys, ~1.15 KB per batch) from `SEGLOG_KAFKA_APPEND_PRODUCERS` (default 8)
//! idempotent producers in turn (producer ids 1000.., epoch 0, sequences as each producer numbers
//! them), built here once and written to a file the JVM reads. Each pass is a new partition
//! directory: open it empty, append every batch one call per batch (leader epoch 0, client
//! origin), close it (not timed), delete it. The first pass of each side is checked to have
//! written the same segment bytes.
//!
//! Per pass and side: the appending thread's CPU time (Kafka: `ThreadMXBean`; seglog:
//! `CLOCK_THREAD_CPUTIME_ID`), the process's CPU time (for Kafka every JVM thread: JIT, GC) and
//! the wall time, each divided by the number of batches. The JVM warms up on
//! `SEGLOG_KAFKA_APPEND_WARMUP` (default 3) whole passes first, seglog on one; then
//! `SEGLOG_KAFKA_APPEND_ROUNDS` (default 7) rounds of one pass each, in alternating order. The
//! ratios (Kafka / seglog) are per round; printed are their medians with min–max.
//!
//! `SEGLOG_KAFKA_APPEND_PROFILE=N` runs N passes of seglog's side alone (no Java), for a profiler.
//!
//! Needs Java and `tools/kafka/fetch.sh` first (`SEGLOG_KAFKA_HOME` points at another build of the
//! jars and the harness). Run: `cargo bench --bench kafka_append`.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use record_format::RecordBatchBuilder;
use recovery::{AppendOrigin, LoadOptions, LogLoader};
use rustix::time::{clock_gettime, ClockId};

#[path = "common/kafka.rs"]
mod kafka;
use kafka::kafka_home;

const RECORDS: usize = 10;
const VALUE: usize = 100;
const SEGMENT_BYTES: u64 = 1 << 30;
const FIRST_PRODUCER_ID: i64 = 1000;
const TIMESTAMP: i64 = 1_790_000_000_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `batches` batches, batch `i` from producer `i % producers`, concatenated; and where each
/// one starts and ends.
fn input(batches: usize, producers: usize) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut rng = testkit::XorShift::new(7);
    let mut sequences = vec![0i32; producers];
    let mut bytes = Vec::new();
    let mut spans = Vec::with_capacity(batches);
    for i in 0..batches {
        let p = i % producers;
        let mut b =
            RecordBatchBuilder::new(0).producer(FIRST_PRODUCER_ID + p as i64, 0, sequences[p]);
        for _ in 0..RECORDS {
            let value: Vec<u8> = (0..VALUE).map(|_| rng.next_u64() as u8).collect();
            b.append(TIMESTAMP + i as i64, None, Some(&value), &[])
                .expect("append");
        }
        sequences[p] += RECORDS as i32;
        let start = bytes.len();
        bytes.extend_from_slice(&b.build());
        spans.push((start, bytes.len()));
    }
    (bytes, spans)
}

/// One side's pass: totals over every batch.
#[derive(Debug, Clone, Copy)]
struct Pass {
    thread_cpu: Duration,
    process_cpu: Duration,
    wall: Duration,
}

/// One of a pass's totals.
type Metric = fn(&Pass) -> Duration;

fn cpu(id: ClockId) -> Duration {
    let t = clock_gettime(id);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// seglog's pass: `PartitionLog::append_as_leader` of every batch into a new partition `dir`.
fn seglog_pass(dir: &Path, input: &[u8], spans: &[(usize, usize)]) -> Pass {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut opts = LoadOptions::default();
    opts.config.log.log.segment_bytes = SEGMENT_BYTES;
    let (mut log, _) = LogLoader::load(dir, &opts).expect("load");
    let (thread0, process0, t0) = (
        cpu(ClockId::ThreadCPUTime),
        cpu(ClockId::ProcessCPUTime),
        Instant::now(),
    );
    for &(start, end) in spans {
        log.append_as_leader(&input[start..end], 0, AppendOrigin::Client)
            .expect("append");
    }
    let wall = t0.elapsed();
    let process_cpu = cpu(ClockId::ProcessCPUTime) - process0;
    let thread_cpu = cpu(ClockId::ThreadCPUTime) - thread0;
    assert_eq!(log.log_end_offset(), (spans.len() * RECORDS) as i64);
    log.close().expect("close");
    Pass {
        thread_cpu,
        process_cpu,
        wall,
    }
}

/// Kafka's `appendAsLeader` in one JVM (the harness's `bench-append`), one pass per request.
struct Kafka {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Kafka {
    fn start(home: &Path, input: &Path) -> Kafka {
        // Kafka's broker settings (kafka-server-start.sh, kafka-run-class.sh) but a heap that
        // holds the input (~1 GiB) beside the broker's 1 GiB.
        let mut child = Command::new("java")
            .args([
                "-Xmx3G",
                "-server",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35",
                "-XX:+ExplicitGCInvokesConcurrent",
                "-XX:MaxInlineLevel=15",
                "-cp",
            ])
            .arg(format!(
                "{}/lib/*:{}",
                home.display(),
                home.join("harness.jar").display()
            ))
            .arg("seglog.kafka.Harness")
            .arg("bench-append")
            .arg(input)
            .arg(SEGMENT_BYTES.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("java");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut k = Kafka {
            child,
            stdin,
            stdout,
        };
        let ready = k.line();
        assert_eq!(ready["ready"].as_bool(), Some(true), "{ready}");
        k
    }

    fn line(&mut self) -> serde_json::Value {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("from the JVM");
            assert!(n > 0, "the Kafka harness ended (see its stderr)");
            if line.starts_with('{') {
                return serde_json::from_str(&line).expect("json");
            }
        }
    }

    fn pass(&mut self, dir: &Path, batches: usize) -> Pass {
        writeln!(self.stdin, "{}", dir.display()).expect("to the JVM");
        self.stdin.flush().expect("to the JVM");
        let v = self.line();
        assert_eq!(
            v["log_end_offset"].as_i64(),
            Some((batches * RECORDS) as i64)
        );
        let ns = |k: &str| Duration::from_nanos(v[k].as_u64().expect(k));
        Pass {
            thread_cpu: ns("thread_cpu_ns"),
            process_cpu: ns("process_cpu_ns"),
            wall: ns("wall_ns"),
        }
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin);
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

fn segment(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("00000000000000000000.log")).expect("segment")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn per_batch_us(d: Duration, batches: usize) -> f64 {
    d.as_secs_f64() * 1e6 / batches as f64
}

/// The file system of `dir`: size and free space, in GiB.
fn fs_size(dir: &Path) -> (f64, f64) {
    let s = rustix::fs::statvfs(dir).expect("statvfs");
    let gib = |blocks: u64| (blocks * s.f_frsize) as f64 / f64::from(1u32 << 30);
    (gib(s.f_blocks), gib(s.f_bavail))
}

fn main() {
    let home = kafka_home();
    let batches = env_usize("SEGLOG_KAFKA_APPEND_BATCHES", 930_000).max(1);
    let producers = env_usize("SEGLOG_KAFKA_APPEND_PRODUCERS", 8).max(1);
    let warmup = env_usize("SEGLOG_KAFKA_APPEND_WARMUP", 3);
    let rounds = env_usize("SEGLOG_KAFKA_APPEND_ROUNDS", 7).max(1);
    let root = std::env::var_os("SEGLOG_KAFKA_APPEND_DIR").map_or_else(
        || PathBuf::from("/dev/shm").join(format!("seglog-kafka-append-{}", std::process::id())),
        PathBuf::from,
    );
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("mkdir");
    let (size, free) = fs_size(&root);

    let (bytes, spans) = input(batches, producers);
    if let Some(passes) = std::env::var("SEGLOG_KAFKA_APPEND_PROFILE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        // seglog's side alone, for a profiler: passes without Java.
        for i in 0..passes {
            let p = seglog_pass(&root.join(format!("seglog-{i}")), &bytes, &spans);
            std::fs::remove_dir_all(root.join(format!("seglog-{i}"))).expect("rm");
            eprintln!(
                "seglog pass {i}: thread CPU per batch {:.3} µs, wall {:.3} µs",
                per_batch_us(p.thread_cpu, batches),
                per_batch_us(p.wall, batches)
            );
        }
        let _ = std::fs::remove_dir_all(&root);
        return;
    }
    let file = root.join("input.batches");
    std::fs::write(&file, &bytes).expect("write input");
    eprintln!(
        "{batches} batches ({} bytes, {} per batch) from {producers} idempotent producers; \
         {} ({size:.1} GiB, {free:.1} GiB free); JVM warm-up {warmup} passes, {rounds} rounds",
        bytes.len(),
        bytes.len() / batches,
        root.display()
    );
    let mut kafka = Kafka::start(&home, &file);
    std::fs::remove_file(&file).expect("rm input");

    // Warm-up, and the check that both sides wrote the same bytes.
    let kafka_dir = |i: usize| root.join(format!("kafka-{i}"));
    let seglog_dir = |i: usize| root.join(format!("seglog-{i}"));
    for w in 0..warmup.max(1) {
        kafka.pass(&kafka_dir(w), batches);
        if w > 0 {
            std::fs::remove_dir_all(kafka_dir(w)).expect("rm");
        }
    }
    seglog_pass(&seglog_dir(0), &bytes, &spans);
    assert!(
        segment(&kafka_dir(0)) == segment(&seglog_dir(0)),
        "Kafka and seglog wrote different segments"
    );
    std::fs::remove_dir_all(kafka_dir(0)).expect("rm");
    std::fs::remove_dir_all(seglog_dir(0)).expect("rm");

    let (mut k, mut s) = (Vec::new(), Vec::new());
    for r in 1..=rounds {
        let kafka_first = r % 2 == 1;
        for side in 0..2 {
            if (side == 0) == kafka_first {
                k.push(kafka.pass(&kafka_dir(r), batches));
                std::fs::remove_dir_all(kafka_dir(r)).expect("rm");
            } else {
                s.push(seglog_pass(&seglog_dir(r), &bytes, &spans));
                std::fs::remove_dir_all(seglog_dir(r)).expect("rm");
            }
        }
        let (kp, sp) = (k[k.len() - 1], s[s.len() - 1]);
        eprintln!(
            "round {r}: thread CPU per batch Kafka {:.3} µs, seglog {:.3} µs ({:.2}×); wall {:.3} / {:.3} µs",
            per_batch_us(kp.thread_cpu, batches),
            per_batch_us(sp.thread_cpu, batches),
            kp.thread_cpu.as_secs_f64() / sp.thread_cpu.as_secs_f64(),
            per_batch_us(kp.wall, batches),
            per_batch_us(sp.wall, batches),
        );
    }
    drop(kafka);
    let _ = std::fs::remove_dir_all(&root);

    println!(
        "| per batch ({batches} batches, {rounds} rounds) | Apache Kafka 4.3.1 (median) | seglog (median) | Kafka / seglog (median of rounds, min–max) |"
    );
    println!("| --- | --- | --- | --- |");
    let metrics: [(&str, Metric); 3] = [
        ("appending thread's CPU time", |p| p.thread_cpu),
        ("process CPU time", |p| p.process_cpu),
        ("wall time", |p| p.wall),
    ];
    for (what, f) in metrics {
        let kv: Vec<f64> = k.iter().map(|p| per_batch_us(f(p), batches)).collect();
        let sv: Vec<f64> = s.iter().map(|p| per_batch_us(f(p), batches)).collect();
        let ratios: Vec<f64> = kv.iter().zip(&sv).map(|(a, b)| a / b).collect();
        let (lo, hi) = min_max(&ratios);
        println!(
            "| {what} | {:.3} µs | {:.3} µs | **{:.2}×** ({lo:.2}–{hi:.2}) |",
            median(kv),
            median(sv),
            median(ratios.clone()),
        );
    }
}
