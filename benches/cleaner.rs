//! One pass of the log cleaner over a compacted topic against a plain copy of the same bytes
//! (the physical limit of a pass that reads every byte and writes what it keeps), and against
//! Apache Kafka's own cleaner on the same input when its jars are there.
//!
//! The input, built once and cached under `target/bench-cache/`: `SEGLOG_BENCH_CLEANER_RECORDS`
//! (default 100,000) one-record batches of 1 KiB values over `SEGLOG_BENCH_CLEANER_KEYS`
//! (default 10,000) keys, in segments of `SEGLOG_BENCH_CLEANER_SEGMENT_BYTES` (default 16 MiB),
//! then rolled so that everything but the empty active segment is cleanable. 1,000,000 records
//! over 100,000 keys in 1 GiB segments is Kafka's default layout at the scale (about
//! 1 GiB; set the three variables). Each timed run starts from a fresh copy of the input on the
//! same file system (under `/dev/shm` when it exists, so the disk's write-back is not what is
//! measured): `cleaner/pass` runs `recovery::internals::cleaner::clean` with a 128 MiB dedupe buffer (Kafka's
//! default), `cleaner/copy` copies the segment files. The ratio of the two medians is printed;
//! `sample_size(10)`, `SEGLOG_BENCH_PAIRS` (default 5) alternating pairs for the printed ratio.
//!
//! Kafka's cleaner (when `tools/kafka/fetch.sh` has built `target/kafka/<version>/harness.jar`;
//! skipped with one line otherwise): one JVM with Kafka's broker heap and GC settings runs the
//! harness's `compact-bench`, one `Cleaner` (one thread, a 128 MiB `SkimpyOffsetMap`, the same
//! `segment.bytes` for grouping), timed inside the JVM from `cleanableOffsets` to the
//! `cleaner-offset-checkpoint` write and on to the scheduler's deletion of the replaced segments
//! (seglog's pass deletes them itself; both figures are printed); the log's open and close are
//! not timed, nor is seglog's plan. After `SEGLOG_BENCH_KAFKA_WARMUP` (default 2) warm-up passes, of which the first is
//! checked against seglog's pass on another copy (the same files, byte for byte), the printed
//! ratios come from the same alternating rounds: seglog pass, Kafka pass, plain copy. The pass's
//! line also gives the process's CPU time over the pass.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use record_format::RecordBatchBuilder;
use recovery::internals::cleaner::{clean, CleanerConfig, LogToClean, SegmentSettings};
use recovery::{AppendOrigin, LoadOptions, LogLoader, PartitionLogConfig};
use rustix::time::{clock_gettime, ClockId};
use segment_store::internals::FileKind;
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
    log_end_offset: i64,
    now: i64,
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
        config: recovery::Config {
            log: config(),
            full_recovery: full,
            ..recovery::Config::default()
        },
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
    let now = TIMESTAMP + records as i64 + 1;
    let mut to_clean = LogToClean::from_plan(&plan, now);
    to_clean.last_stable_offset = plan.log_end_offset;
    // Cleaned in groups of up to Kafka's default `segment.bytes` (1 GiB), on both sides, though
    // the input rolled at a smaller size.
    to_clean.segments = SegmentSettings::default();
    let bytes = segment_files(&dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    Input {
        dir,
        bytes,
        to_clean,
        log_end_offset: plan.log_end_offset,
        now,
    }
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| FileKind::of_path(p).is_some_and(|k| k != FileKind::TxnIndex))
        .collect();
    out.sort();
    out
}

/// A fresh copy of the input's partition under a fresh log directory.
fn copy_of(input: &Input, root: &Path) -> PathBuf {
    copy_named(input, root, "run")
}

/// [`copy_of`] under the log directory `name`.
fn copy_named(input: &Input, root: &Path, name: &str) -> PathBuf {
    let to = root
        .join(format!("{name}-{}", std::process::id()))
        .join("topic-0");
    let _ = std::fs::remove_dir_all(to.parent().expect("parent"));
    std::fs::create_dir_all(&to).expect("mkdir");
    for f in segment_files(&input.dir) {
        std::fs::copy(&f, to.join(f.file_name().expect("name"))).expect("copy");
    }
    to
}

fn pass(input: &Input, dir: &Path) -> (Duration, Duration) {
    let cpu = process_cpu();
    let elapsed = pass_report(input, dir).0;
    (elapsed, process_cpu().saturating_sub(cpu))
}

/// The CPU time of the whole process so far (every thread, ended ones too).
fn process_cpu() -> Duration {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn pass_report(input: &Input, dir: &Path) -> (Duration, recovery::CleanReport) {
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
    (elapsed, report)
}

/// Kafka's cleaner in one JVM (the harness's `compact-bench`), one pass per request.
struct Kafka {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// One pass of Kafka's cleaner as the harness reports it.
struct KafkaPass {
    /// Until the replaced segments are deleted (seglog's pass deletes them itself).
    seconds: f64,
    /// Until `doClean` returned and the checkpoint was written (the scheduler deletes the
    /// replaced segments after).
    clean_seconds: f64,
    end: i64,
    map_keys: u64,
}

impl Kafka {
    /// The JVM, or `None` (with the reason on stderr) when Java or the harness is missing.
    fn start(input: &Input, config: &CleanerConfig) -> Option<Kafka> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let pom = std::fs::read_to_string(repo.join("tools/kafka/pom.xml")).ok()?;
        let version = pom
            .split("<kafka.version>")
            .nth(1)
            .and_then(|r| r.split('<').next())?
            .trim()
            .to_string();
        // Where tools/kafka/fetch.sh puts them, or under `CARGO_TARGET_DIR` as tests/kafka_interop
        // looks for them.
        let home = std::env::var_os("CARGO_TARGET_DIR")
            .map(|t| PathBuf::from(t).join("kafka").join(&version))
            .filter(|h| h.join("harness.jar").is_file())
            .unwrap_or_else(|| repo.join("target/kafka").join(&version));
        if !home.join("harness.jar").is_file() {
            eprintln!(
                "cleaner: Apache Kafka {version}'s cleaner skipped: no {} (run tools/kafka/fetch.sh)",
                home.join("harness.jar").display()
            );
            return None;
        }
        // Kafka's broker defaults (kafka-server-start.sh, kafka-run-class.sh).
        let spawned = Command::new("java")
            .args([
                "-Xmx1G",
                "-Xms1G",
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
            .arg("compact-bench")
            .arg(input.now.to_string())
            .arg(config.dedupe_buffer_size.to_string())
            .arg(input.to_clean.segments.segment_bytes.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                eprintln!("cleaner: Apache Kafka {version}'s cleaner skipped: java: {e}");
                return None;
            }
        };
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Some(Kafka {
            child,
            stdin,
            stdout,
        })
    }

    fn pass(&mut self, dir: &Path, log_end_offset: i64) -> KafkaPass {
        writeln!(self.stdin, "{} {log_end_offset}", dir.display()).expect("to the JVM");
        self.stdin.flush().expect("to the JVM");
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("from the JVM");
            assert!(n > 0, "the Kafka harness ended (see its stderr)");
            if line.starts_with('{') {
                break;
            }
        }
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        KafkaPass {
            seconds: v["seconds"].as_f64().expect("seconds"),
            clean_seconds: v["clean_seconds"].as_f64().expect("clean_seconds"),
            end: v["end"].as_i64().expect("end"),
            map_keys: v["map_keys"].as_u64().expect("map_keys"),
        }
    }

    /// The JVM's peak resident set (`VmHWM`), in bytes.
    fn peak_rss(&self) -> Option<u64> {
        vm_kib(&format!("/proc/{}/status", self.child.id()), "VmHWM:").map(|k| k << 10)
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin);
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// A `VmRSS:`/`VmHWM:` line of a `/proc/.../status` file, in KiB.
fn vm_kib(status: &str, field: &str) -> Option<u64> {
    std::fs::read_to_string(status)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The segment and index files of a cleaned partition, by name.
fn cleaned_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| FileKind::of_path(p).is_some_and(|k| k != FileKind::Snapshot))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

/// Panics unless both cleaned partitions hold the same segment and index files, byte for byte.
fn same_output(seglog: &Path, kafka: &Path) -> usize {
    let (s, k) = (cleaned_files(seglog), cleaned_files(kafka));
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&s), names(&k), "seglog and Kafka left other files");
    for ((name, a), (_, b)) in s.iter().zip(&k) {
        let at = a.iter().zip(b).position(|(x, y)| x != y);
        assert!(
            a.len() == b.len() && at.is_none(),
            "{name}: seglog's {} bytes and Kafka's {} differ (first at {at:?})",
            a.len(),
            b.len()
        );
    }
    s.len()
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

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1048576.0
}

fn bench(c: &mut Criterion) {
    let input = input();
    let scratch = tempfile::tempdir_in(scratch_root()).expect("tempdir");
    let root = scratch.path();
    let pairs = env_usize("SEGLOG_BENCH_PAIRS", 5).max(1);
    let config = CleanerConfig::default();
    let mut kafka = Kafka::start(&input, &config);
    if let Some(k) = kafka.as_mut() {
        // The first warm-up pass of each side on its own copy: the same files, and seglog's
        // peak resident set over the pass.
        let dir = copy_named(&input, root, "seglog");
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let before = vm_kib("/proc/self/status", "VmRSS:").unwrap_or(0);
        let (_, report) = pass_report(&input, &dir);
        let peak = vm_kib("/proc/self/status", "VmHWM:").unwrap_or(0);
        let kdir = copy_named(&input, root, "kafka");
        let kp = k.pass(&kdir, input.log_end_offset);
        assert_eq!(kp.end, report.end_offset, "the passes end elsewhere");
        assert_eq!(kp.map_keys, report.map_keys as u64, "the maps differ");
        let files = same_output(&dir, &kdir);
        println!(
            "cleaner: seglog and Kafka left the same {files} segment and index files, byte for \
             byte ({} keys mapped, cleaned up to offset {}); seglog's pass grew the resident set \
             by {:.1} MiB at its peak (the offset map: {:.1} MiB)",
            report.map_keys,
            report.end_offset,
            peak.saturating_sub(before) as f64 / 1024.0,
            mib(report.map_slots as u64 * 24)
        );
        for d in [&dir, &kdir] {
            let _ = std::fs::remove_dir_all(d.parent().expect("parent"));
        }
        for _ in 1..env_usize("SEGLOG_BENCH_KAFKA_WARMUP", 2) {
            let kdir = copy_named(&input, root, "kafka");
            k.pass(&kdir, input.log_end_offset);
            let _ = std::fs::remove_dir_all(kdir.parent().expect("parent"));
        }
    }
    let (mut p, mut kp, mut kc, mut q) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut cpu = Vec::new();
    for _ in 0..pairs {
        let dir = copy_of(&input, root);
        let (elapsed, used) = pass(&input, &dir);
        p.push(elapsed.as_secs_f64());
        cpu.push(used.as_secs_f64());
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
        if let Some(k) = kafka.as_mut() {
            let kdir = copy_named(&input, root, "kafka");
            let r = k.pass(&kdir, input.log_end_offset);
            kp.push(r.seconds);
            kc.push(r.clean_seconds);
            let _ = std::fs::remove_dir_all(kdir.parent().expect("parent"));
        }
        q.push(copy(&input, root).as_secs_f64());
    }
    let (mp, mq) = (median(p), median(q));
    let size = mib(input.bytes);
    println!(
        "cleaner: {size:.1} MiB, pass {mp:.3} s ({:.0} MiB/s; CPU time {:.3} s), plain copy \
         {mq:.3} s ({:.0} MiB/s): pass/copy {:.2}x (medians of {pairs} alternating rounds)",
        size / mp,
        median(cpu),
        size / mq,
        mp / mq
    );
    if let Some(k) = kafka.take() {
        let (mk, mc) = (median(kp), median(kc));
        println!(
            "cleaner: Kafka's cleaner {mk:.3} s ({:.0} MiB/s) with the deletion of the replaced \
             segments, {mc:.3} s without; Kafka/copy {:.2}x; Kafka/seglog {:.2}x ({:.2}x \
             without the deletion); the JVM's peak resident set {:.0} MiB",
            size / mk,
            mk / mq,
            mk / mp,
            mc / mp,
            k.peak_rss().map_or(f64::NAN, mib)
        );
    }
    let mut g = c.benchmark_group("cleaner");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .throughput(Throughput::Bytes(input.bytes));
    g.bench_function("pass", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let dir = copy_of(&input, root);
                    pass(&input, &dir).0
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
