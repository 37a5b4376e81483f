//! Partitions on real files for `verify`, `recover` and `producers`: built with the library's own
//! write path (`PartitionLog` leader appends, small segments, dense indexes, a clean close), with
//! a record of every batch written so the tests can compute what the commands must print; plus
//! in-process runners and a byte-for-byte picture of a directory tree.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use record_format::{end_txn_marker_batch, Batches, ControlRecordType, RecordBatchBuilder};
use recovery::{AppendOrigin, LoadOptions, LogLoader, PartitionLogConfig};
use segment_store::{LogConfig, LogEnv, StdFs};
use testkit::ManualClock;

use super::common::Output;

/// Timestamp of the first batch (and the fixed clock).
pub const T: i64 = 1_700_000_000_000;

/// One append: what the test wrote and where the log put it.
#[derive(Debug, Clone)]
pub struct Written {
    pub pid: i64,
    pub epoch: i16,
    pub base_seq: i32,
    pub count: i32,
    pub txn: bool,
    /// `Some((commit, coordinator epoch))` for a marker.
    pub marker: Option<(bool, i32)>,
    pub first_offset: i64,
    pub last_offset: i64,
    /// Max timestamp of the batch.
    pub max_ts: i64,
}

/// Small segments (350 bytes) and an index entry every 100 bytes; a fixed clock.
pub fn options() -> LoadOptions {
    LoadOptions {
        config: recovery::Config {
            log: PartitionLogConfig {
                log: LogConfig {
                    segment_bytes: 350,
                    index_interval_bytes: 100,
                    ..LogConfig::default()
                },
                ..PartitionLogConfig::default()
            },
            env: LogEnv {
                storage: Arc::new(StdFs),
                clock: Arc::new(ManualClock::new(T)),
            },
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    }
}

/// What [`build_orders`] appends: (pid, kind) with kind `D` idempotent data, `T` transactional
/// data, `C`/`A` COMMIT/ABORT. Producer 7's transaction stays open.
pub const PLAN: [(i64, char); 10] = [
    (5, 'D'),
    (5, 'D'),
    (6, 'T'),
    (7, 'T'),
    (5, 'D'),
    (6, 'T'),
    (8, 'T'),
    (8, 'A'),
    (6, 'C'),
    (5, 'D'),
];

/// Builds `root/<name>` from [`PLAN`] (three records per data batch), closes it cleanly and
/// returns the directory and what was written.
pub fn build_partition(root: &Path, name: &str) -> (PathBuf, Vec<Written>) {
    let dir = root.join(name);
    let (mut log, _) = LogLoader::load(&dir, &options()).expect("open");
    let mut seqs: BTreeMap<i64, i32> = BTreeMap::new();
    let mut written = Vec::new();
    for (n, &(pid, kind)) in PLAN.iter().enumerate() {
        let ts = T + 10 * n as i64;
        let (bytes, origin, count, marker) = match kind {
            'D' | 'T' => {
                let seq = *seqs.get(&pid).unwrap_or(&0);
                let mut b = RecordBatchBuilder::new(0)
                    .producer(pid, 0, seq)
                    .transactional(kind == 'T');
                for i in 0..3 {
                    let v = format!("v-{n}-{i}");
                    b.append(ts + i, Some(b"k"), Some(v.as_bytes()), &[])
                        .expect("append");
                }
                (b.build(), AppendOrigin::Client, 3, None)
            }
            _ => {
                let (t, coord) = if kind == 'C' {
                    (ControlRecordType::Commit, 4)
                } else {
                    (ControlRecordType::Abort, 2)
                };
                let bytes = end_txn_marker_batch(0, ts, 0, pid, 0, t, coord);
                (
                    bytes,
                    AppendOrigin::Coordinator,
                    1,
                    Some((kind == 'C', coord)),
                )
            }
        };
        let seq = *seqs.get(&pid).unwrap_or(&0);
        let info = log.append_as_leader(&bytes, 0, origin).expect("append");
        written.push(Written {
            pid,
            epoch: 0,
            base_seq: if marker.is_some() { -1 } else { seq },
            count,
            txn: kind != 'D',
            marker,
            first_offset: info.first_offset,
            last_offset: info.last_offset,
            max_ts: if marker.is_some() {
                ts
            } else {
                ts + i64::from(count) - 1
            },
        });
        if marker.is_none() {
            seqs.insert(pid, seq + count);
        }
    }
    log.close().expect("close");
    (dir, written)
}

/// `(base offset, path)` of every file of `dir` ending in `suffix`, sorted.
pub fn files(dir: &Path, suffix: &str) -> Vec<(i64, PathBuf)> {
    let mut out: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            let base = name
                .split('.')
                .next()
                .expect("base")
                .parse()
                .expect("offset");
            (base, p)
        })
        .collect();
    out.sort();
    out
}

/// `(position, size, last offset)` of every batch of a `.log`.
pub fn batches(log: &[u8]) -> Vec<(u64, u64, i64)> {
    Batches::new(log, 0)
        .map(|e| {
            let e = e.expect("valid batch");
            (e.position(), e.size_in_bytes() as u64, e.last_offset())
        })
        .collect()
}

/// Every file under `dir` (relative path → bytes), recursively.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).expect("under base").to_path_buf();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn run_with<A: Parser>(
    name: &str,
    argv: &[&OsStr],
    run: impl FnOnce(&A, &mut Vec<u8>, &mut Vec<u8>) -> seglog::cli::Status,
) -> Output {
    let mut full: Vec<&OsStr> = vec![OsStr::new(name)];
    full.extend_from_slice(argv);
    let args = A::try_parse_from(full).unwrap_or_else(|e| panic!("bad test argv: {e}"));
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = run(&args, &mut out, &mut err);
    Output {
        stdout: String::from_utf8(out).expect("UTF-8 stdout"),
        stderr: String::from_utf8(err).expect("UTF-8 stderr"),
        status,
    }
}

/// `seglog verify <argv>` in-process.
pub fn verify(argv: &[&OsStr]) -> Output {
    run_with("verify", argv, seglog::cli::verify::run)
}

/// `seglog recover <argv>` in-process.
pub fn recover(argv: &[&OsStr]) -> Output {
    run_with("recover", argv, seglog::cli::recover::run)
}

/// `seglog producers <argv>` in-process.
pub fn producers(argv: &[&OsStr]) -> Output {
    run_with("producers", argv, seglog::cli::producers::run)
}

/// The four damages the verify and recover tests share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// One byte flipped in the second batch of the second segment.
    FlippedByte,
    /// The last batch of the last segment cut in the middle.
    TornTail,
    /// The first `.index` entry of the first segment pointing past its `.log`.
    IndexPastLog,
    /// One byte flipped in the newest producer snapshot.
    CorruptSnapshot,
}

/// Where a damage was made.
#[derive(Debug, Clone)]
pub struct Damaged {
    /// The file changed.
    pub file: PathBuf,
    /// Its bytes before.
    pub original: Vec<u8>,
    /// Byte position of the damaged batch (or index entry / snapshot byte).
    pub position: u64,
}

/// Applies `damage` to the partition in `dir`.
pub fn damage(dir: &Path, damage: Damage) -> Damaged {
    match damage {
        Damage::FlippedByte => {
            let logs = files(dir, ".log");
            assert!(logs.len() >= 3, "need a middle segment: {logs:?}");
            let file = logs[1].1.clone();
            let original = std::fs::read(&file).expect("read");
            let b = batches(&original);
            assert!(b.len() >= 2, "need two batches in the middle segment");
            let (position, size, _) = b[1];
            let mut bytes = original.clone();
            bytes[(position + size - 2) as usize] ^= 0x40;
            std::fs::write(&file, &bytes).expect("write");
            Damaged {
                file,
                original,
                position,
            }
        }
        Damage::TornTail => {
            let file = files(dir, ".log").last().expect("a segment").1.clone();
            let original = std::fs::read(&file).expect("read");
            let &(position, _, _) = batches(&original).last().expect("a batch");
            std::fs::write(&file, &original[..position as usize + 20]).expect("write");
            Damaged {
                file,
                original,
                position,
            }
        }
        Damage::IndexPastLog => {
            let file = files(dir, ".index")[0].1.clone();
            let original = std::fs::read(&file).expect("read");
            assert!(
                original.len() >= 8,
                "the first segment needs an index entry"
            );
            let log_len = std::fs::metadata(&files(dir, ".log")[0].1)
                .expect("log")
                .len();
            let mut bytes = original.clone();
            let past = u32::try_from(log_len + 100).expect("small");
            bytes[4..8].copy_from_slice(&past.to_be_bytes());
            std::fs::write(&file, &bytes).expect("write");
            Damaged {
                file,
                original,
                position: 0,
            }
        }
        Damage::CorruptSnapshot => {
            let file = files(dir, ".snapshot")
                .last()
                .expect("a snapshot")
                .1
                .clone();
            let original = std::fs::read(&file).expect("read");
            let mut bytes = original.clone();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x01;
            std::fs::write(&file, &bytes).expect("write");
            Damaged {
                file,
                original,
                position: last as u64,
            }
        }
    }
}
