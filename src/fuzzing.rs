//! Fuzzing entry points (feature `fuzzing`): functions a fuzz target calls with the fuzzer's
//! bytes, each asserting more than "no panic". A panic in one of them is a finding.
//!
//! * [`record_batch`]: the v2 batch parser and the record parser on one batch's bytes;
//! * [`log_bytes`]: the batch iterator over a `.log` file's bytes;
//! * [`partition`]: a partition built from the bytes **in memory** (the testkit's
//!   [`SimulatedFs`] behind the [`Storage`] seam, through [`Config::with_storage`]), then
//!   planned, opened (plan + apply), read, closed and reopened;
//! * [`log_dir`]: the same for a log directory of several partitions and its checkpoints.
//!
//! ```ignore
//! // fuzz/fuzz_targets/partition.rs
//! #![no_main]
//! libfuzzer_sys::fuzz_target!(|data: &[u8]| seglog::fuzzing::partition(data));
//! ```
//!
//! The in-memory partition and log directory keep every file in memory, on a fresh
//! [`SimulatedFs`] per input under a path that exists only there: `.log`, `.index`,
//! `.timeindex` (held in memory and written through the seam where the storage cannot map),
//! `.txnindex`, snapshot, checkpoint and quarantine files; the directory locks are names only
//! (`DirLock::acquire_in`). Nothing is created on the real file system. [`partition_on_disk`]
//! runs the same input on real files, the baseline the in-memory target is measured against
//! (`docs/testing.md`). [`partition_input`] and [`log_dir_input`] encode files as inputs, to
//! seed a corpus.
//!
//! Input layout of [`partition`]: byte 0 holds flags (bit 0: the log directory has a
//! clean-shutdown marker; bit 1: full recovery; bit 2: a recovery-point checkpoint, its offset in
//! byte 1); byte 1 the recovery point; then files, each a kind byte ([`FileKind`]), a big-endian
//! `u16` length and that many bytes; what is left after the last whole file is one more `.log`.
//! A `.log` is named after the base offset its first 8 bytes hold (0 when they cannot be one).
#![allow(clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

// The file-based harnesses of the project's own cargo-fuzz targets (real files in a per-process
// scratch directory on /dev/shm), also `#[path]`-included by the replay tests of each crate.
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
mod parsers;
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
mod recovery_harness;
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
mod store;

pub use parsers::{batch_iter, batch_parse, control_record};
pub use recovery_harness::{log_loader, producer_state, snapshot};
pub use store::{index_files, segment_recover};

use record_format::{
    Batches, ControlRecord, DecodeLimits, FormatError, IterEnd, LogEntry, RecordBatch,
};
use recovery::{IsolationLevel, LoadOptions, LogLoader};
use segment_store::internals::{
    FileKind as Suffix, LEADER_EPOCH_CHECKPOINT_FILE, PRODUCER_SNAPSHOT_FILE_SUFFIX,
};
use segment_store::{OpenMode, StdFs, Storage};
use testkit::{ManualClock, SimulatedFs};

use crate::{Config, Log, LogDir};

/// The decompression budget of the entry points: a fuzzer cannot exhaust memory.
pub const MAX_DECOMPRESSED_BYTES: usize = 1 << 20;

fn limits() -> DecodeLimits {
    DecodeLimits {
        max_decompressed_bytes: MAX_DECOMPRESSED_BYTES,
    }
}

/// What the batch and record parsers say about one batch's bytes, as the differential test
/// against Kafka compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchVerdict {
    /// Records decoded (all of them when `error` is `None`).
    pub records: usize,
    /// Their offsets, in order.
    pub offsets: Vec<i64>,
    /// The first error: the view, the CRC or size check, or a record.
    pub error: Option<FormatError>,
}

/// The verdict of the batch and record parsers on `data`, one v2 batch (with its 12-byte log
/// overhead): the view, [`RecordBatch::validate`] (size, CRC), then every record decoded with a
/// [`MAX_DECOMPRESSED_BYTES`] budget. Kafka's counterpart: `DefaultRecordBatch.ensureValid`,
/// then its record iterator.
pub fn batch_verdict(data: &[u8]) -> BatchVerdict {
    let mut v = BatchVerdict {
        records: 0,
        offsets: Vec::new(),
        error: None,
    };
    let batch = match RecordBatch::new(data, 0) {
        Ok(b) => b,
        Err(e) => {
            v.error = Some(e);
            return v;
        }
    };
    if let Err(e) = batch.validate() {
        v.error = Some(e);
        return v;
    }
    let records = match batch.records(&limits()) {
        Ok(r) => r,
        Err(e) => {
            v.error = Some(e);
            return v;
        }
    };
    for r in records.iter() {
        match r {
            Ok(r) => {
                v.records += 1;
                v.offsets.push(r.offset());
            }
            Err(e) => {
                v.error = Some(e);
                return v;
            }
        }
    }
    v
}

/// Entry point: the batch parser and the record parser on one batch's bytes. Every accessor of a
/// view is total; `validate` agrees with `is_valid`; an error's position lies inside the input;
/// a batch whose records all decode has as many as it declares, and the first record of a valid
/// control batch parses as a control record or fails with a typed error.
pub fn record_batch(data: &[u8]) {
    let v = batch_verdict(data);
    if let Some(e) = &v.error {
        assert!(
            e.position <= data.len() as u64,
            "error past the end: {e:?} ({} bytes)",
            data.len()
        );
    }
    let Ok(batch) = RecordBatch::new(data, 0) else {
        return;
    };
    std::hint::black_box((
        batch.last_offset(),
        batch.next_offset(),
        batch.last_sequence(),
        batch.delete_horizon_ms(),
        batch.compression().is_ok(),
    ));
    assert_eq!(batch.validate().is_ok(), batch.is_valid());
    if v.error.is_none() {
        assert_eq!(v.records, batch.records_count().max(0) as usize);
        if batch.is_control() {
            if let Ok(records) = batch.records(&limits()) {
                if let Some(Ok(r)) = records.iter().next() {
                    std::hint::black_box(ControlRecord::parse(&r).is_ok());
                }
            }
        }
    }
}

/// Entry point: the CRC-checking batch iterator over a `.log` file's bytes. Batches are
/// contiguous from 0; an error is reported at the end of the valid prefix; the valid prefix
/// re-parses alone to the same batches and ends `Complete`.
pub fn log_bytes(data: &[u8]) {
    let mut it = Batches::new(data, 0).validate_crc(true);
    let mut seen = Vec::new();
    let mut end = 0u64;
    for e in &mut it {
        match e {
            Ok(entry) => {
                assert_eq!(entry.position(), end, "batches are contiguous");
                end += entry.size_in_bytes() as u64;
                seen.push((entry.position(), entry.last_offset()));
                if let LogEntry::V2(b) = entry {
                    if let Ok(records) = b.records(&limits()) {
                        for r in records.iter() {
                            if r.is_err() {
                                break;
                            }
                        }
                    }
                }
            }
            Err(err) => assert_eq!(err.position, end, "error at the end of the valid prefix"),
        }
    }
    assert_eq!(it.valid_prefix_end(), end);
    let prefix = &data[..end as usize];
    let mut again = Batches::new(prefix, 0).validate_crc(true);
    let mut seen2 = Vec::new();
    for e in &mut again {
        let e = e.expect("the valid prefix re-parses");
        seen2.push((e.position(), e.last_offset()));
    }
    assert_eq!(seen, seen2);
    assert_eq!(again.stopped_at(), Some(&IterEnd::Complete));
}

/// What a file of a [`partition`] input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FileKind {
    /// A `.log` segment, named after the base offset in its first 8 bytes.
    Log = 0,
    /// A producer snapshot `<offset>.snapshot` (offset: the next byte, then the rest).
    Snapshot = 1,
    /// `leader-epoch-checkpoint`.
    LeaderEpochCheckpoint = 2,
    /// The first segment's `.txnindex`.
    TxnIndex = 3,
    /// The first segment's `.index`.
    OffsetIndex = 4,
    /// The first segment's `.timeindex`.
    TimeIndex = 5,
}

impl FileKind {
    fn of(b: u8) -> FileKind {
        match b % 6 {
            0 => FileKind::Log,
            1 => FileKind::Snapshot,
            2 => FileKind::LeaderEpochCheckpoint,
            3 => FileKind::TxnIndex,
            4 => FileKind::OffsetIndex,
            _ => FileKind::TimeIndex,
        }
    }
}

/// A partition decoded from an input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PartitionFiles {
    clean_shutdown: bool,
    full: bool,
    recovery_point: Option<i64>,
    /// File name → bytes.
    files: BTreeMap<String, Vec<u8>>,
}

fn segment_name(offset: i64, suffix: &str) -> String {
    format!("{offset:020}{suffix}")
}

fn base_offset_of(bytes: &[u8]) -> i64 {
    bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .filter(|o| (0..1 << 40).contains(o))
        .unwrap_or(0)
}

fn decode_partition(data: &[u8]) -> PartitionFiles {
    let flags = data.first().copied().unwrap_or(0);
    let rp = data.get(1).copied().unwrap_or(0);
    let mut p = PartitionFiles {
        clean_shutdown: flags & 1 != 0,
        full: flags & 2 != 0,
        recovery_point: (flags & 4 != 0).then_some(i64::from(rp)),
        files: BTreeMap::new(),
    };
    let mut rest = data.get(2..).unwrap_or_default();
    let mut first_log: Option<i64> = None;
    let add_log = |p: &mut PartitionFiles, bytes: &[u8], first: &mut Option<i64>| {
        let base = base_offset_of(bytes);
        first.get_or_insert(base);
        p.files
            .insert(segment_name(base, Suffix::Log.suffix()), bytes.to_vec());
    };
    while rest.len() >= 3 {
        let kind = FileKind::of(rest[0]);
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        if rest.len() < 3 + len {
            break;
        }
        let bytes = &rest[3..3 + len];
        rest = &rest[3 + len..];
        let first = first_log.unwrap_or(0);
        match kind {
            FileKind::Log => add_log(&mut p, bytes, &mut first_log),
            FileKind::Snapshot => {
                let (off, body) = bytes.split_first().map_or((0, &[][..]), |(o, b)| (*o, b));
                p.files.insert(
                    segment_name(i64::from(off), PRODUCER_SNAPSHOT_FILE_SUFFIX),
                    body.to_vec(),
                );
            }
            FileKind::LeaderEpochCheckpoint => {
                p.files
                    .insert(LEADER_EPOCH_CHECKPOINT_FILE.into(), bytes.to_vec());
            }
            FileKind::TxnIndex => {
                p.files.insert(
                    segment_name(first, Suffix::TxnIndex.suffix()),
                    bytes.to_vec(),
                );
            }
            FileKind::OffsetIndex => {
                p.files
                    .insert(segment_name(first, Suffix::Index.suffix()), bytes.to_vec());
            }
            FileKind::TimeIndex => {
                p.files.insert(
                    segment_name(first, Suffix::TimeIndex.suffix()),
                    bytes.to_vec(),
                );
            }
        }
    }
    if !rest.is_empty() || first_log.is_none() {
        add_log(&mut p, rest, &mut first_log);
    }
    p
}

/// Encodes a partition's files as a [`partition`] input (to seed a corpus): `files` in order,
/// each with its kind; `flags` as in the module docs. The last file is written whole too.
pub fn partition_input(flags: u8, recovery_point: u8, files: &[(FileKind, &[u8])]) -> Vec<u8> {
    let mut out = vec![flags, recovery_point];
    for (kind, bytes) in files {
        let n = bytes.len().min(usize::from(u16::MAX));
        out.push(*kind as u8);
        out.extend_from_slice(&(n as u16).to_be_bytes());
        out.extend_from_slice(&bytes[..n]);
    }
    out
}

/// Encodes a [`log_dir`] input from [`partition_input`]s: byte 0 flags (bit 0: clean-shutdown
/// marker), then each partition as a big-endian `u16` length and its input.
pub fn log_dir_input(flags: u8, partitions: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![flags];
    for p in partitions {
        let n = p.len().min(usize::from(u16::MAX));
        out.extend_from_slice(&(n as u16).to_be_bytes());
        out.extend_from_slice(&p[..n]);
    }
    out
}

/// Removes the scratch directories the file-based harnesses of this process made (under
/// `/dev/shm` or the temp dir, named `seglog-fuzz*-<pid>`); a test calls it when done, a fuzzer
/// process leaves them. They are created again when called after. [`partition`] and
/// [`log_dir`] make none.
pub fn remove_scratch_dirs() {
    recovery_harness::remove_scratch();
    recovery_harness::remove_snapshot_dir();
    store::remove_temp_root();
}

/// Where [`partition`] and [`log_dir`] lay out their log directory: a path on their
/// [`SimulatedFs`] only.
const MEMORY_ROOT: &str = "/seglog-fuzzing";

const TOPIC: &str = "fuzz";

fn config(storage: Arc<dyn Storage>) -> Config {
    let mut config = Config::default()
        .with_storage(storage)
        .with_clock(Arc::new(ManualClock::new(1_700_000_000_000)))
        .with_segment_bytes(4096)
        .with_recovery_threads(1)
        // No timer thread per open.
        .without_background_tasks();
    // Index files are preallocated (mapped on disk) at this size for every input: 64 KiB, not
    // 10 MiB.
    config.log.log.max_index_size = 64 * 1024;
    config
}

fn write_file(storage: &dyn Storage, path: &Path, bytes: &[u8]) {
    let f = storage
        .open(path, OpenMode::CreateTruncate)
        .expect("create an input file");
    f.write_at(0, bytes).expect("write an input file");
    f.sync_all().expect("sync an input file");
}

fn write_checkpoint(storage: &dyn Storage, path: &Path, entries: &[(String, i64)]) {
    let mut text = format!("0\n{}\n", entries.len());
    for (tp, offset) in entries {
        let (topic, partition) = tp.rsplit_once('-').unwrap_or((tp, "0"));
        text.push_str(&format!("{topic} {partition} {offset}\n"));
    }
    write_file(storage, path, text.as_bytes());
}

/// Writes a log directory of `partitions` (folder name → files) under `root`, every file
/// through `storage` (the offset and time indexes too).
fn lay_out(storage: &dyn Storage, root: &Path, parts: &[(String, PartitionFiles)], clean: bool) {
    let mut recovery_points = Vec::new();
    for (name, p) in parts {
        let dir = root.join(name);
        storage
            .create_dir_all(&dir)
            .expect("create a partition dir");
        for (file, bytes) in &p.files {
            write_file(storage, &dir.join(file), bytes);
        }
        storage.sync_dir(&dir).expect("sync a partition dir");
        if let Some(rp) = p.recovery_point {
            recovery_points.push((name.clone(), rp));
        }
    }
    if !recovery_points.is_empty() {
        write_checkpoint(
            storage,
            &root.join("recovery-point-offset-checkpoint"),
            &recovery_points,
        );
    }
    if clean {
        write_file(storage, &root.join(".kafka_cleanshutdown"), b"");
    }
    storage.sync_dir(root).expect("sync the log dir");
}

/// Every record offset a consumer reads at `isolation`, from the log start to the end of the
/// readable range, 64 KiB at a time; every offset inside the readable range and increasing.
fn read_all(log: &Log, isolation: IsolationLevel) -> Vec<i64> {
    let range = log.readable_range(isolation);
    let mut out: Vec<i64> = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let fetch = match log.read(at, 64 * 1024, isolation) {
            Ok(f) => f,
            Err(_) => break,
        };
        let Ok(records) = crate::recovery::consume(&fetch) else {
            break;
        };
        let next = fetch_next_offset(&fetch.records).unwrap_or(at + 1);
        for r in records {
            assert!(
                out.last().is_none_or(|l| r.offset > *l),
                "offsets increase: {} after {:?}",
                r.offset,
                out.last()
            );
            out.push(r.offset);
        }
        if next <= at {
            break;
        }
        at = next;
    }
    out
}

/// The offset after the last whole batch of a fetch's bytes.
fn fetch_next_offset(bytes: &[u8]) -> Option<i64> {
    let mut next = None;
    for e in Batches::new(bytes, 0) {
        match e {
            Ok(e) => next = Some(e.last_offset() + 1),
            Err(_) => break,
        }
    }
    next
}

/// What an open partition looks like, for "reopening after a clean close changes nothing".
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    log_start: i64,
    log_end: i64,
    records: Vec<i64>,
}

fn observe(log: &Log) -> Seen {
    Seen {
        log_start: log.log_start_offset(),
        log_end: log.log_end_offset(),
        records: read_all(log, IsolationLevel::ReadUncommitted),
    }
}

/// What [`partition`] found: whether the partition opened, and then its log end and how many
/// records a `read_uncommitted` consumer read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOutcome {
    /// `Log::open` succeeded.
    pub opened: bool,
    /// The log end offset after the open (0 when it failed).
    pub log_end_offset: i64,
    /// Records read from the log start to the high watermark.
    pub records: usize,
}

/// Runs the partition steps on `storage` whose log directory is `root` (already laid out).
fn run_partition(storage: Arc<dyn Storage>, root: &Path, p: &PartitionFiles) -> PartitionOutcome {
    let dir = root.join(format!("{TOPIC}-0"));
    // Plan (read only).
    let opts = LoadOptions {
        config: config(Arc::clone(&storage)).with_full_recovery(p.full),
        had_clean_shutdown: p.clean_shutdown && !p.full,
        recovery_point: if p.full {
            0
        } else {
            p.recovery_point.unwrap_or(0)
        },
        ..LoadOptions::default()
    };
    let before = list_files(&*storage, root);
    let plan = LogLoader::plan(&dir, &opts);
    assert!(
        list_files(&*storage, root) == before,
        "planning changed the directory"
    );
    let planned_end = plan.as_ref().ok().map(|p| p.log_end_offset);
    // Open (plan + apply), read, close.
    let mut cfg = config(Arc::clone(&storage));
    cfg.full_recovery = p.full;
    let log = match Log::open(&dir, cfg.clone()) {
        Ok(log) => log,
        Err(_) => {
            return PartitionOutcome {
                opened: false,
                log_end_offset: 0,
                records: 0,
            }
        }
    };
    if let Some(end) = planned_end {
        assert_eq!(log.log_end_offset(), end, "the open log ends where planned");
    }
    let first = observe(&log);
    let committed = read_all(&log, IsolationLevel::ReadCommitted);
    assert!(
        committed.iter().all(|o| first.records.contains(o)),
        "read_committed returns a record read_uncommitted does not"
    );
    log.close().expect("close");
    // Reopened after the clean close: nothing to recover, the same log.
    let log = Log::open(&dir, cfg).expect("reopen after a clean close");
    assert!(
        log.recovery_report().cut.is_empty(),
        "recovery after a clean close cut bytes"
    );
    let again = observe(&log);
    assert_eq!(again.log_start, first.log_start);
    assert_eq!(again.log_end, first.log_end);
    assert!(
        again.records.starts_with(&first.records) || first.records.starts_with(&again.records),
        "records differ after a clean reopen: {:?} vs {:?}",
        first.records,
        again.records
    );
    log.close().expect("close after reopen");
    PartitionOutcome {
        opened: true,
        log_end_offset: first.log_end,
        records: first.records.len(),
    }
}

/// Every file under `root` with its bytes, through `storage`.
fn list_files(storage: &dyn Storage, root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = storage.list_dir_typed(&d) else {
            continue;
        };
        for (name, t) in entries {
            let p = d.join(&name);
            if name == ".lock" {
                continue;
            }
            match t {
                segment_store::EntryType::Dir => stack.push(p),
                _ => {
                    let bytes = storage.read(&p).unwrap_or_default();
                    out.insert(p, bytes);
                }
            }
        }
    }
    out
}

/// Entry point: a partition built from `data` (module docs) in memory, then: planning changes
/// nothing; `Log::open` (plan + apply) either refuses with an error or opens a log that ends
/// where the plan said; reads from the log start to the high watermark and to the last stable
/// offset return increasing offsets, the committed ones a subset; a clean close and reopen
/// recovers nothing and keeps the log start, end and records.
pub fn partition(data: &[u8]) -> PartitionOutcome {
    let p = decode_partition(data);
    let log_dir = Path::new(MEMORY_ROOT).join("mem");
    let fs = Arc::new(SimulatedFs::new());
    fs.create_durable_dir_all(&log_dir);
    let storage: Arc<dyn Storage> = fs;
    lay_out(
        &*storage,
        &log_dir,
        &[(format!("{TOPIC}-0"), p.clone())],
        p.clean_shutdown,
    );
    run_partition(storage, &log_dir, &p)
}

/// The baseline of [`partition`]: the same input on real files under `scratch` (emptied first),
/// through the real file system. What the fuzz targets did before the in-memory entry points.
pub fn partition_on_disk(data: &[u8], scratch: &Path) -> PartitionOutcome {
    let p = decode_partition(data);
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).expect("scratch directory");
    let storage: Arc<dyn Storage> = Arc::new(StdFs);
    lay_out(
        &*storage,
        scratch,
        &[(format!("{TOPIC}-0"), p.clone())],
        p.clean_shutdown,
    );
    run_partition(storage, scratch, &p)
}

/// Entry point: a log directory of up to 4 partitions built from `data` in memory (byte 0: bit
/// 0 a clean-shutdown marker; then partitions as [`log_dir_input`] lays them out), opened as a
/// [`LogDir`]: every partition loaded or listed offline, each one read from its log start, the
/// directory closed and reopened with the same partitions and log ends. Returns how many
/// partitions loaded.
pub fn log_dir(data: &[u8]) -> usize {
    let flags = data.first().copied().unwrap_or(0);
    let mut rest = data.get(1..).unwrap_or_default();
    let mut parts = Vec::new();
    while rest.len() >= 2 && parts.len() < 4 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let p = decode_partition(&rest[2..2 + n]);
        parts.push((format!("{TOPIC}-{}", parts.len()), p));
        rest = &rest[2 + n..];
    }
    let log_dir = Path::new(MEMORY_ROOT).join("dir");
    let fs = Arc::new(SimulatedFs::new());
    fs.create_durable_dir_all(&log_dir);
    let storage: Arc<dyn Storage> = fs;
    lay_out(&*storage, &log_dir, &parts, flags & 1 != 0);
    let cfg = config(Arc::clone(&storage));
    let Ok(dir) = LogDir::open(&log_dir, cfg.clone()) else {
        return 0;
    };
    let mut ends = BTreeMap::new();
    for tp in dir.partitions() {
        let log = dir.partition(tp).expect("listed partition");
        assert!(log.log_start_offset() <= log.log_end_offset());
        ends.insert(tp.clone(), (log.log_start_offset(), log.log_end_offset()));
    }
    assert!(
        ends.len() + dir.offline_partitions().len() >= parts.len().min(1),
        "partitions vanished"
    );
    dir.close().expect("close the log dir");
    let dir = LogDir::open(&log_dir, cfg).expect("reopen after a clean close");
    let mut again = BTreeMap::new();
    for tp in dir.partitions() {
        let log = dir.partition(tp).expect("listed partition");
        again.insert(tp.clone(), (log.log_start_offset(), log.log_end_offset()));
    }
    assert_eq!(again, ends, "a clean reopen changed the partitions");
    dir.close().expect("close after reopen");
    ends.len()
}
