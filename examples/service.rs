//! seglog as the storage of a small service: a log directory of four partitions (two topics ×
//! two), one writer thread per partition (an idempotent producer each, a flush every few
//! appends, and only then an acknowledgement), and reader threads at both isolation levels that
//! check every record they see against what was written at its offset. The service runs for a
//! fixed time with a fixed seed.
//!
//! ```text
//! cargo run --example service -- OUT [--seconds N] [--seed S]   # run, close cleanly, check
//! cargo run --example service -- OUT --check                    # reopen OUT and check
//! ```
//!
//! The log directory is `OUT/data`; each writer notes the offset its partition is flushed to in
//! `OUT/acked-<topic>-<partition>` after each flush. Kill the running service at any moment
//! (`kill -9`): `--check` reopens the directory (recovering it), and every record acknowledged
//! (below the noted offset) must be there at the same offset with the same bytes; every record
//! past it must still be one the writer wrote at that offset. CI does exactly that.
//!
//! What the program shows of the API: [`LogDir::partition`] hands out a [`Log`], a handle that
//! is `Clone + Send + Sync`; a writer thread appends and flushes through it while reader threads
//! read through clones of it, and reads never wait for the writer's appends or fsyncs.
//! Timestamps come from the configured clock (`Config::env`), as producer expiry, rolls and
//! retention do.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use seglog::record_format::RecordBatchBuilder;
use seglog::{Config, IsolationLevel, Log, LogDir, TopicPartition};
use testkit::XorShift;

const PARTITIONS: [(&str, i32); 4] = [
    ("orders", 0),
    ("orders", 1),
    ("payments", 0),
    ("payments", 1),
];

/// Appends between two flushes (and acknowledgements).
const FLUSH_EVERY: u32 = 8;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// The value the writer of `tp` puts at `offset`: readers and the check recompute it.
fn value_at(seed: u64, tp: &TopicPartition, offset: i64) -> Vec<u8> {
    // FNV-1a over the seed, the partition and the offset: different for every record.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let name = tp.to_string();
    for b in seed
        .to_be_bytes()
        .iter()
        .chain(name.as_bytes())
        .chain(&offset.to_be_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{name}@{offset}:{h:016x}").into_bytes()
}

fn acked_path(out: &Path, tp: &TopicPartition) -> PathBuf {
    out.join(format!("acked-{tp}"))
}

/// Notes that `tp` is durable below `offset` (written to a temporary file, then renamed, so
/// that a kill leaves the old note or the new one).
fn acknowledge(out: &Path, tp: &TopicPartition, offset: i64) -> Res<()> {
    let path = acked_path(out, tp);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, offset.to_string())?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

fn acknowledged(out: &Path, tp: &TopicPartition) -> Res<i64> {
    match std::fs::read_to_string(acked_path(out, tp)) {
        Ok(s) => Ok(s.trim().parse()?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// One partition's writer: batches of 1 to 8 records from idempotent producer `pid`, a flush
/// every [`FLUSH_EVERY`] appends, then the acknowledgement.
fn write(out: &Path, log: &Log, seed: u64, pid: i64, until: Instant) -> Res<u64> {
    let tp = log.topic_partition().clone();
    let mut rng = XorShift::new(seed ^ pid.unsigned_abs());
    let mut seq = 0i32;
    let mut appends = 0u32;
    let mut records = 0u64;
    while Instant::now() < until {
        let base = log.log_end_offset();
        let n = 1 + rng.below(8) as i64;
        let mut b = RecordBatchBuilder::new(base).producer(pid, 0, seq);
        let now = log.config().env.clock.now_ms();
        for offset in base..base + n {
            b.append(now, Some(b"key"), Some(&value_at(seed, &tp, offset)), &[])?;
        }
        let info = log.append(&b.build())?;
        if info.first_offset != base {
            return Err(format!("{tp}: batch at {} instead of {base}", info.first_offset).into());
        }
        seq += n as i32;
        records += n as u64;
        appends += 1;
        if appends.is_multiple_of(FLUSH_EVERY) {
            log.flush()?;
            acknowledge(out, &tp, log.log_end_offset())?;
        }
    }
    log.flush()?;
    acknowledge(out, &tp, log.log_end_offset())?;
    Ok(records)
}

/// Reads the partitions in turn from random offsets and checks every record.
fn read(
    logs: &[Log],
    seed: u64,
    isolation: IsolationLevel,
    stop: &AtomicBool,
    seen: &AtomicU64,
) -> Res<()> {
    let mut rng = XorShift::new(seed.rotate_left(17) ^ 0x5eed);
    while !stop.load(Ordering::Relaxed) {
        for log in logs {
            let range = log.readable_range(isolation);
            if range.is_empty() {
                continue;
            }
            let from = range.start + rng.below((range.end - range.start) as u64) as i64;
            for r in log.iter_from(from, isolation)?.take(500) {
                let r = r?;
                let expected = value_at(seed, log.topic_partition(), r.offset);
                if r.value.as_deref() != Some(&expected[..]) {
                    return Err(format!(
                        "{}: offset {} holds {:?}, the writer wrote {:?}",
                        log.topic_partition(),
                        r.offset,
                        r.value.as_deref().map(String::from_utf8_lossy),
                        String::from_utf8_lossy(&expected)
                    )
                    .into());
                }
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(())
}

/// Every acknowledged record is readable at its offset with its bytes; every record after it is
/// one the writer wrote there. Returns (acknowledged records, records past the acknowledgement).
fn check(out: &Path, dir: &LogDir, seed: u64) -> Res<(u64, u64)> {
    let (mut acked_total, mut extra) = (0u64, 0u64);
    for (topic, partition) in PARTITIONS {
        let tp = TopicPartition::new(topic, partition);
        let log = dir.partition(&tp).ok_or(format!("{tp} missing"))?;
        let acked = acknowledged(out, &tp)?;
        let mut next = log.log_start_offset();
        for r in log.iter_from(next, IsolationLevel::ReadUncommitted)? {
            let r = r?;
            if r.offset != next {
                return Err(format!("{tp}: offset {} follows {}", r.offset, next - 1).into());
            }
            if r.value.as_deref() != Some(&value_at(seed, &tp, r.offset)[..]) {
                return Err(
                    format!("{tp}: offset {} does not hold what was written", r.offset).into(),
                );
            }
            next += 1;
        }
        if next < acked {
            return Err(format!("{tp}: acknowledged up to {acked}, readable up to {next}").into());
        }
        acked_total += acked as u64;
        extra += (next - acked) as u64;
        println!(
            "{tp}: {acked} acknowledged records readable, {} more",
            next - acked
        );
    }
    Ok((acked_total, extra))
}

fn run(out: &Path, seconds: u64, seed: u64) -> Res<()> {
    let data = out.join("data");
    let config = Config::default();
    let mut dir = LogDir::open(&data, config)?;
    let mut logs = Vec::new();
    for (topic, partition) in PARTITIONS {
        let tp = TopicPartition::new(topic, partition);
        logs.push(match dir.partition(&tp) {
            Some(log) => log,
            None => dir.create_partition(tp)?,
        });
    }
    if logs.iter().any(|l| l.log_end_offset() > 0) {
        return Err(format!(
            "{} holds data: run on a fresh OUT, or use --check",
            data.display()
        )
        .into());
    }
    let until = Instant::now() + Duration::from_secs(seconds);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = [
        IsolationLevel::ReadCommitted,
        IsolationLevel::ReadUncommitted,
    ]
    .into_iter()
    .map(|isolation| {
        let (logs, stop, seen) = (logs.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || read(&logs, seed, isolation, &stop, &seen))
    })
    .collect();
    let writers: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(i, log)| {
            let (log, out) = (log.clone(), out.to_path_buf());
            std::thread::spawn(move || write(&out, &log, seed, i as i64 + 1, until))
        })
        .collect();
    let mut written = 0;
    for w in writers {
        written += w.join().map_err(|_| "a writer panicked")??;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().map_err(|_| "a reader panicked")??;
    }
    println!(
        "{written} records written by {} writers in {seconds} s; readers checked {} records",
        logs.len(),
        seen.load(Ordering::Relaxed)
    );
    dir.close()?;
    let dir = LogDir::open(&data, Config::default())?;
    let (acked, _) = check(out, &dir, seed)?;
    println!("closed and reopened: all {acked} acknowledged records readable");
    dir.close()?;
    Ok(())
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let mut out = None;
    let (mut seconds, mut seed, mut check_only) = (5u64, 42u64, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => seconds = args.next().ok_or("--seconds N")?.parse()?,
            "--seed" => seed = args.next().ok_or("--seed S")?.parse()?,
            "--check" => check_only = true,
            _ => out = Some(PathBuf::from(a)),
        }
    }
    let out = out.ok_or("usage: service OUT [--seconds N] [--seed S] [--check]")?;
    if !check_only {
        return run(&out, seconds, seed);
    }
    let dir = LogDir::open(out.join("data"), Config::default())?;
    for r in dir.recovery_reports() {
        if !r.had_clean_shutdown {
            println!("recovered {}", r);
        }
    }
    let (acked, extra) = check(&out, &dir, seed)?;
    println!("reopened: all {acked} acknowledged records readable at their offsets ({extra} more written before the end)");
    dir.close()?;
    Ok(())
}
