//! Fuzz harnesses for `recovery`, shared by the cargo-fuzz targets `snapshot`, `producer_state`
//! and `log_loader` and by the stable replay test module
//! `crates/recovery/tests/recovery/fuzz_replay.rs`. `snapshot` checks the decoder against the
//! format's exact acceptance rule and a byte-exact re-encoding; `producer_state` runs the producer
//! state manager against a reference model; `log_loader` runs recovery's one engine
//! (`LogLoader::plan`, then `LogLoader::apply`) on a damaged partition.
#![allow(
    dead_code,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

#[path = "input.rs"]
mod input;
#[path = "scratch.rs"]
mod scratch_dir;

use input::Input;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use record_format::{mirror_pid_reset_batch, RecordBatchBuilder};
use recovery::plan::{tree_image, LeftoverAction, SnapshotOp};
use recovery::snapshot::{decode_snapshot, encode_snapshot};
use recovery::{
    AbortedTxnRecord, AppendOrigin, BatchMetadata, BatchSummary, ControlInfo, LoadOptions,
    LogLoader, PartitionLogConfig, ProducerStateManager, ProducerStateWarning, SnapshotEntry,
};
use segment_store::LogConfig;

/// `snapshot`: `decode_snapshot` on arbitrary bytes.
///
/// * It accepts exactly the files the version-1 layout allows: version 1, CRC-32C of bytes
///   `[6, EOF)` equal to the stored one, a non-negative count and exactly `10 + 46 * count` bytes;
/// * what it accepts re-encodes to the same bytes (`encode_snapshot` keeps the entry order, so
///   this is byte equality, not just equal entries);
/// * loading the entries into a manager (Kafka `loadProducerEntry`) and taking the snapshot
///   entries back gives each producer's last entry, in producer-id order, with the fields Kafka
///   drops for an entry without a cached batch (`last_offset < 0`) reset to their defaults; the
///   open transactions are those of the loaded entries.
pub fn snapshot(data: &[u8]) {
    let decoded = decode_snapshot(data);
    let accept = data.len() >= 10
        && i16::from_be_bytes([data[0], data[1]]) == 1
        && u32::from_be_bytes(data[2..6].try_into().unwrap()) == crc32c::crc32c(&data[6..])
        && i32::from_be_bytes(data[6..10].try_into().unwrap())
            .try_into()
            .is_ok_and(|n: usize| {
                n.checked_mul(46).and_then(|b| b.checked_add(10)) == Some(data.len())
            });
    let entries = match decoded {
        Ok(entries) => entries,
        Err((reason, position)) => {
            assert!(
                !accept,
                "rejected a well-formed snapshot: {reason:?} at {position}"
            );
            assert!(position <= data.len() as u64, "error position past the end");
            return;
        }
    };
    assert!(accept, "accepted a malformed snapshot");
    assert_eq!(entries.len(), (data.len() - 10) / 46);
    assert_eq!(encode_snapshot(&entries), data, "encode(decode(x)) != x");

    let mut psm = ProducerStateManager::default();
    let mut want: BTreeMap<i64, SnapshotEntry> = BTreeMap::new();
    let mut ongoing: BTreeMap<i64, i64> = BTreeMap::new();
    for e in &entries {
        psm.load_producer_entry(e.to_entry());
        let mut n = *e;
        if n.last_offset < 0 {
            n.last_sequence = -1;
            n.last_offset = -1;
            n.offset_delta = 0;
        }
        want.insert(e.producer_id, n);
        if e.current_txn_first_offset != -1 {
            ongoing.insert(e.current_txn_first_offset, e.producer_id);
        }
    }
    assert_eq!(
        psm.snapshot_entries(),
        want.into_values().collect::<Vec<_>>()
    );
    let got: BTreeMap<i64, i64> = psm
        .ongoing_txns()
        .iter()
        .map(|(k, t)| (*k, t.producer_id))
        .collect();
    assert_eq!(got, ongoing);
}

// ---------------------------------------------------------------------------------------------
// producer_state

#[derive(Debug, Clone, PartialEq, Eq)]
struct MEntry {
    epoch: i16,
    coordinator_epoch: i32,
    last_timestamp: i64,
    txn: Option<i64>,
    batches: VecDeque<BatchMetadata>,
}

impl MEntry {
    fn empty() -> Self {
        MEntry {
            epoch: -1,
            coordinator_epoch: -1,
            last_timestamp: -1,
            txn: None,
            batches: VecDeque::new(),
        }
    }
    fn last_seq(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }
    fn set_epoch(&mut self, epoch: i16) {
        if self.epoch != epoch {
            self.batches.clear();
            self.epoch = epoch;
        }
    }
}

/// The reference model: Kafka's producer-state rules written out plainly, one batch at a time.
#[derive(Debug, Clone, Default)]
struct Model {
    producers: BTreeMap<i64, MEntry>,
    /// Open transactions: first offset → producer.
    ongoing: BTreeMap<i64, i64>,
    /// Completed transactions waiting for the high watermark: first offset → (producer, marker).
    unreplicated: BTreeMap<i64, (i64, i64)>,
    map_end: i64,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Step {
    aborted: Vec<AbortedTxnRecord>,
    warnings: Vec<ProducerStateWarning>,
    duplicate: bool,
}

fn first_seq(m: &BatchMetadata) -> i32 {
    recovery::producer_state::decrement_sequence(m.last_seq, m.offset_delta)
}

impl Model {
    /// Kafka `lastStableOffset(completedTxn)`: the earliest open transaction of another producer,
    /// else the marker's offset + 1.
    fn lso(&self, pid: i64, last: i64) -> i64 {
        self.ongoing
            .iter()
            .find(|(_, &p)| p != pid)
            .map_or(last.saturating_add(1), |(&f, _)| f)
    }

    /// Applies one batch; `Err(())` when Kafka rejects it (the model is then unchanged).
    fn apply(&mut self, b: &BatchSummary, origin: AppendOrigin) -> Result<Step, ()> {
        let delta = b.last_offset.checked_sub(b.base_offset).ok_or(())?;
        if b.base_offset < 0 || delta < 0 || delta > i64::from(i32::MAX) {
            return Err(());
        }
        let mut step = Step::default();
        if b.is_control && matches!(b.control, Some(ControlInfo::MirrorPidReset { .. })) {
            // The barrier: abort what is open (in first-offset order), forget every producer.
            while let Some((&first, &pid)) = self.ongoing.iter().next() {
                let lso = self.lso(pid, b.base_offset);
                self.ongoing.remove(&first);
                self.unreplicated.insert(first, (pid, b.base_offset));
                step.aborted.push(AbortedTxnRecord {
                    producer_id: pid,
                    first_offset: first,
                    last_offset: b.base_offset,
                    last_stable_offset: lso,
                });
            }
            self.producers.clear();
            self.map_end = b.last_offset.max(b.base_offset).saturating_add(1);
            return Ok(step);
        }
        let strict = origin != AppendOrigin::Replication;
        if b.producer_id >= 0 {
            let pid = b.producer_id;
            let cur = self
                .producers
                .get(&pid)
                .cloned()
                .unwrap_or_else(MEntry::empty);
            if origin == AppendOrigin::Client
                && b.producer_epoch == cur.epoch
                && cur
                    .batches
                    .iter()
                    .any(|m| first_seq(m) == b.base_sequence && m.last_seq == b.last_sequence)
            {
                step.duplicate = true;
                return Ok(step);
            }
            let mut e = cur.clone();
            let is_marker = b.is_control;
            let epoch_check = |step: &mut Step| -> Result<(), ()> {
                if b.producer_epoch < cur.epoch {
                    if strict {
                        return Err(());
                    }
                    step.warnings.push(ProducerStateWarning::EpochRegression {
                        producer_id: pid,
                        offset: b.base_offset,
                        epoch: b.producer_epoch,
                        current_epoch: cur.epoch,
                        is_marker,
                    });
                }
                Ok(())
            };
            let mut completed = None;
            match (&b.control, b.is_control) {
                (None, true) if b.records_count <= 0 => {}
                (
                    Some(ControlInfo::EndTxn {
                        commit,
                        coordinator_epoch,
                    }),
                    true,
                ) => {
                    epoch_check(&mut step)?;
                    if cur.coordinator_epoch > *coordinator_epoch {
                        if strict {
                            return Err(());
                        }
                        step.warnings
                            .push(ProducerStateWarning::CoordinatorEpochRegression {
                                producer_id: pid,
                                offset: b.base_offset,
                                coordinator_epoch: *coordinator_epoch,
                                current_coordinator_epoch: cur.coordinator_epoch,
                            });
                    }
                    completed = cur.txn.map(|first| (first, !commit));
                    if let Some((first, _)) = completed {
                        if !self.ongoing.contains_key(&first) {
                            return Err(());
                        }
                    }
                    e.set_epoch(b.producer_epoch);
                    e.txn = None;
                    e.coordinator_epoch = *coordinator_epoch;
                    e.last_timestamp = b.max_timestamp;
                }
                (_, true) => return Err(()),
                (_, false) => {
                    epoch_check(&mut step)?;
                    if origin == AppendOrigin::Client {
                        if b.producer_epoch != cur.epoch {
                            if b.base_sequence != 0 && cur.epoch != -1 {
                                return Err(());
                            }
                        } else if !(cur.epoch == -1
                            || recovery::producer_state::in_sequence(
                                cur.last_seq(),
                                b.base_sequence,
                            ))
                        {
                            return Err(());
                        }
                    }
                    if cur.txn.is_some() && !b.is_transactional {
                        return Err(());
                    }
                    e.set_epoch(b.producer_epoch);
                    e.last_timestamp = b.max_timestamp;
                    if e.batches.len() >= 5 {
                        e.batches.pop_front();
                    }
                    e.batches.push_back(BatchMetadata {
                        last_seq: b.last_sequence,
                        last_offset: b.last_offset,
                        offset_delta: delta as i32,
                        timestamp: b.max_timestamp,
                    });
                    if cur.txn.is_none() && b.is_transactional {
                        e.txn = Some(b.base_offset);
                        self.ongoing.insert(b.base_offset, pid);
                    }
                }
            }
            self.producers.insert(pid, e);
            if let Some((first, aborted)) = completed {
                let lso = self.lso(pid, b.base_offset);
                self.ongoing.remove(&first);
                self.unreplicated.insert(first, (pid, b.base_offset));
                if aborted {
                    step.aborted.push(AbortedTxnRecord {
                        producer_id: pid,
                        first_offset: first,
                        last_offset: b.base_offset,
                        last_stable_offset: lso,
                    });
                }
            }
        }
        self.map_end = b.last_offset.saturating_add(1);
        Ok(step)
    }

    fn snapshot_entries(&self) -> Vec<SnapshotEntry> {
        self.producers
            .iter()
            .map(|(&pid, e)| SnapshotEntry {
                producer_id: pid,
                producer_epoch: e.epoch,
                last_sequence: e.last_seq(),
                last_offset: e.batches.back().map_or(-1, |b| b.last_offset),
                offset_delta: e.batches.back().map_or(0, |b| b.offset_delta),
                timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_first_offset: e.txn.unwrap_or(-1),
            })
            .collect()
    }
}

/// The manager's state in the model's terms.
fn observe(psm: &ProducerStateManager) -> (Model, Vec<SnapshotEntry>) {
    let producers = psm
        .active_producers()
        .iter()
        .map(|(&pid, e)| {
            (
                pid,
                MEntry {
                    epoch: e.producer_epoch(),
                    coordinator_epoch: e.coordinator_epoch(),
                    last_timestamp: e.last_timestamp(),
                    txn: e.current_txn_first_offset(),
                    batches: e.batch_metadata().iter().copied().collect(),
                },
            )
        })
        .collect();
    let ongoing = psm
        .ongoing_txns()
        .iter()
        .map(|(&f, t)| {
            assert_eq!(f, t.first_offset);
            assert_eq!(t.last_offset, None);
            (f, t.producer_id)
        })
        .collect();
    let unreplicated = psm
        .unreplicated_txns()
        .iter()
        .map(|(&f, t)| {
            (
                f,
                (
                    t.producer_id,
                    t.last_offset.expect("completed txn has a marker"),
                ),
            )
        })
        .collect();
    let m = Model {
        producers,
        ongoing,
        unreplicated,
        map_end: psm.map_end_offset(),
    };
    (m, psm.snapshot_entries())
}

fn assert_same(psm: &ProducerStateManager, model: &Model, what: &str) {
    let (got, entries) = observe(psm);
    assert_eq!(got.producers, model.producers, "{what}: producers");
    assert_eq!(got.ongoing, model.ongoing, "{what}: ongoing transactions");
    assert_eq!(
        got.unreplicated, model.unreplicated,
        "{what}: unreplicated transactions"
    );
    assert_eq!(got.map_end, model.map_end, "{what}: map end offset");
    assert_eq!(
        entries,
        model.snapshot_entries(),
        "{what}: snapshot entries"
    );
    assert_eq!(
        psm.first_undecided_offset(),
        model.ongoing.keys().next().copied(),
        "{what}: first undecided offset (LSO bound)"
    );
}

const PIDS: [i64; 4] = [0, 1, 2, 1 << 40];

/// Decodes one `(origin, batch)` from the input; offsets increase from `next`.
fn next_batch(
    r: &mut Input<'_>,
    model: &Model,
    next: &mut i64,
    ts: &mut i64,
) -> (AppendOrigin, BatchSummary) {
    let k = r.u8();
    let origin = match k & 3 {
        0 | 1 => AppendOrigin::Replication,
        2 => AppendOrigin::Coordinator,
        _ => AppendOrigin::Client,
    };
    let kind = (k >> 2) & 7;
    let p = r.u8();
    let producer_id = if p & 0x80 != 0 {
        -1
    } else {
        PIDS[usize::from(p & 3)]
    };
    let producer_epoch = match (p >> 2) & 7 {
        7 => -1,
        e => i16::from(e / 2),
    };
    let s = r.u8();
    let expected_seq = model
        .producers
        .get(&producer_id)
        .map_or(0, |e| e.last_seq().wrapping_add(1).max(0));
    let base_sequence = match s >> 5 {
        0..=4 => expected_seq,
        5 => 0,
        6 => i32::MAX - i32::from(s & 3),
        _ => i32::from(s & 31) - 1,
    };
    let records = 1 + i64::from(s & 3);
    let base_offset = *next + i64::from((k >> 5) & 1);
    let last_offset = base_offset + records - 1;
    *ts += i64::from(r.u8() % 16) - 4;
    let flags = r.u8();
    let coordinator_epoch = i32::from(flags & 3);
    let mut b = BatchSummary {
        base_offset,
        last_offset,
        producer_id,
        producer_epoch,
        base_sequence,
        last_sequence: recovery::producer_state::increment_sequence(
            base_sequence,
            (records - 1) as i32,
        ),
        max_timestamp: *ts,
        is_transactional: flags & 4 != 0,
        is_control: false,
        records_count: records as i32,
        control: None,
        size_in_bytes: 100,
    };
    let control = |b: &mut BatchSummary, c: Option<ControlInfo>| {
        b.is_control = true;
        b.last_offset = b.base_offset;
        b.records_count = i32::from(c.is_some());
        b.control = c;
        b.base_sequence = -1;
        b.last_sequence = -1;
    };
    match kind {
        0..=2 => {}
        3 => b.is_transactional = true,
        4 | 5 => control(
            &mut b,
            Some(ControlInfo::EndTxn {
                commit: kind == 4,
                coordinator_epoch,
            }),
        ),
        6 => {
            control(
                &mut b,
                Some(ControlInfo::MirrorPidReset {
                    source_cluster_id: "src".into(),
                }),
            );
            if flags & 8 == 0 {
                b.producer_id = -1;
                b.producer_epoch = -1;
            }
        }
        _ => match flags >> 6 {
            0 => control(&mut b, None),
            1 => control(&mut b, Some(ControlInfo::Other(2))),
            2 => b.base_offset = -1,
            _ => b.producer_id = -1,
        },
    }
    if b.base_offset >= 0 {
        *next = b.last_offset + 1;
    }
    (origin, b)
}

/// `producer_state`: a sequence of batches (data, transactional data, COMMIT/ABORT markers,
/// `MIRROR_PID_RESET` barriers, empty/unknown control batches, the odd invalid one) for four
/// producer ids, each appended with a chosen origin. After every step the manager must match the
/// reference model: the producers (epoch, coordinator epoch, timestamp, open transaction, cached
/// batches), `snapshot_entries()`, the open and unreplicated transactions, the first undecided
/// offset, the map end offset; the step's aborted transactions (with their LSO), warnings and
/// duplicate must be the model's too, and a rejected batch must leave the manager unchanged.
///
/// Then the accepted batches, re-applied with one `apply_batches` call per run of equal origin,
/// must reach the same state, and a snapshot taken, written and loaded back holds the same
/// entries and open transactions.
pub fn producer_state(data: &[u8]) {
    let mut r = Input(data);
    let mut psm = ProducerStateManager::default();
    let mut model = Model::default();
    let mut accepted: Vec<(AppendOrigin, BatchSummary)> = Vec::new();
    let mut aborted_one_by_one = Vec::new();
    let (mut next, mut ts) = (0i64, 1_000i64);
    for step in 0..64 {
        if r.0.is_empty() {
            break;
        }
        let (origin, batch) = next_batch(&mut r, &model, &mut next, &mut ts);
        let before = psm.clone();
        let want = model.apply(&batch, origin);
        let got = psm.apply_batches([&batch], origin);
        let what = format!("step {step} {origin:?} {batch:?}");
        match (got, want) {
            (Ok(out), Ok(want)) => {
                assert_eq!(out.aborted_txns, want.aborted, "{what}: aborted txns");
                assert_eq!(out.warnings, want.warnings, "{what}: warnings");
                assert_eq!(
                    out.duplicates.len(),
                    usize::from(want.duplicate),
                    "{what}: duplicate"
                );
                assert_eq!(out.barriers.len(), usize::from(batch.is_mirror_pid_reset()));
                aborted_one_by_one.extend(
                    out.aborted_txns
                        .iter()
                        .map(|a| (a.producer_id, a.first_offset, a.last_offset)),
                );
                accepted.push((origin, batch));
            }
            (Err(e), Err(())) => {
                let (a, _) = observe(&before);
                let (b, _) = observe(&psm);
                assert_eq!(
                    a.producers, b.producers,
                    "{what}: rejected batch changed state ({e})"
                );
                assert_eq!(
                    (a.ongoing, a.unreplicated, a.map_end),
                    (b.ongoing, b.unreplicated, b.map_end)
                );
            }
            (got, want) => panic!("{what}: manager {got:?}, model {want:?}"),
        }
        assert_same(&psm, &model, &what);
    }

    // The same batches in as few calls as the origins allow.
    let mut whole = ProducerStateManager::default();
    let mut aborted_whole = Vec::new();
    for run in accepted.chunk_by(|a, b| a.0 == b.0) {
        let out = whole
            .apply_batches(run.iter().map(|(_, b)| b), run[0].0)
            .unwrap_or_else(|e| panic!("one call rejected batches accepted one by one: {e}"));
        aborted_whole.extend(
            out.aborted_txns
                .iter()
                .map(|a| (a.producer_id, a.first_offset, a.last_offset)),
        );
    }
    assert_same(&whole, &model, "one call per origin run");
    assert_eq!(
        aborted_whole, aborted_one_by_one,
        "aborted transactions, one call vs one by one"
    );

    // Snapshot round trip through a file, as Kafka's takeSnapshot / loadFromSnapshot.
    if psm.map_end_offset() > 0 {
        let dir = snapshot_dir();
        for e in std::fs::read_dir(dir).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        let path = psm
            .take_snapshot(dir)
            .unwrap()
            .expect("a snapshot is written");
        assert_eq!(
            decode_snapshot(&std::fs::read(&path).unwrap()).unwrap(),
            psm.snapshot_entries()
        );
        let mut loaded = ProducerStateManager::default();
        let load = loaded
            .load_from_snapshot(dir, 0, i64::MAX, i64::MIN)
            .unwrap();
        assert!(load.loaded.is_some() && load.expired_producers.is_empty());
        assert_eq!(loaded.snapshot_entries(), psm.snapshot_entries());
        assert_eq!(loaded.ongoing_txns(), psm.ongoing_txns());
        assert_eq!(loaded.map_end_offset(), psm.map_end_offset());
    }
}

/// Temporary directory for snapshots, one per process (on `/dev/shm` when it exists).
pub fn snapshot_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| scratch_dir::per_process_dir("seglog-fuzz-snap"))
}

/// Removes [`snapshot_dir`] (the replay test calls it at the end).
pub fn remove_snapshot_dir() {
    let _ = std::fs::remove_dir_all(snapshot_dir());
}

// ------------------------------------------------------------------------------------------------
// log_loader
// ------------------------------------------------------------------------------------------------

/// Segments of at most this many bytes: the pristine log spans several.
const SEGMENT_BYTES: u64 = 700;

fn config() -> PartitionLogConfig {
    PartitionLogConfig {
        log: LogConfig {
            segment_bytes: SEGMENT_BYTES,
            index_interval_bytes: 1,
            ..LogConfig::default()
        },
        ..PartitionLogConfig::default()
    }
}

/// A scratch directory of this process, in memory where the system has `/dev/shm`.
fn scratch() -> &'static Mutex<PathBuf> {
    static DIR: OnceLock<Mutex<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| Mutex::new(scratch_dir::per_process_dir("seglog-fuzz-loader")))
}

/// Removes this process's scratch directory (the replay test calls it when done).
pub fn remove_scratch() {
    let dir = scratch().lock().unwrap_or_else(|e| e.into_inner());
    let _ = std::fs::remove_dir_all(&*dir);
}

fn batch(pid: i64, seq: i32, n: i32, txn: bool, ts: i64) -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(0).transactional(txn);
    if pid >= 0 {
        b = b.producer(pid, 0, seq);
    }
    for i in 0..n {
        b.append(ts + i64::from(i), Some(b"k"), Some(b"value"), &[])
            .unwrap();
    }
    b.build()
}

/// The files of a partition written through `PartitionLog` and closed cleanly: three idempotent
/// producers, a producer-less batch, an open transaction and a `MIRROR_PID_RESET` barrier half
/// way, in segments of [`SEGMENT_BYTES`] (with their indexes, `.txnindex`, snapshots and the
/// leader-epoch checkpoint). Built once per process; timestamps are the wall clock's, so that no
/// producer expires when the copy is loaded.
fn pristine() -> &'static BTreeMap<String, Vec<u8>> {
    static FILES: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let dir = scratch().lock().unwrap().join("pristine-0");
        let _ = std::fs::remove_dir_all(&dir);
        let opts = LoadOptions {
            config: config(),
            ..LoadOptions::default()
        };
        let (mut log, _) = LogLoader::load(&dir, &opts).unwrap();
        let mut seqs = [0i32; 4];
        for i in 0..14usize {
            if i == 7 {
                let barrier = mirror_pid_reset_batch(0, ts, 0, "src");
                log.append_as_leader(&barrier, 0, AppendOrigin::Coordinator)
                    .unwrap();
            }
            let pid = i % 4;
            let txn = pid == 3 && i >= 12;
            let pid_field = if pid == 0 { -1 } else { pid as i64 };
            let b = batch(pid_field, seqs[pid], 2, txn, ts);
            log.append_as_leader(&b, 0, AppendOrigin::Client).unwrap();
            seqs[pid] += 2;
        }
        log.close().unwrap();
        let mut files = BTreeMap::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name != ".lock" {
                files.insert(name, std::fs::read(e.path()).unwrap());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        files
    })
}

/// Names a damaged directory may gain: leftovers of interrupted deletions, cleanings and swaps,
/// and files named as Kafka names segments, snapshots and indexes.
const SUFFIXES: [&str; 9] = [
    ".log",
    ".index",
    ".timeindex",
    ".txnindex",
    ".snapshot",
    ".log.swap",
    ".log.deleted",
    ".log.cleaned",
    ".index.swap",
];

/// Damages the partition directory `dir` as the input says: up to 8 operations, each on one of
/// the files there (by index, sorted by name): flip a byte, cut the file, append bytes, overwrite
/// bytes, delete it, extend it with zeros (a preallocated index), copy it under a leftover name,
/// or write a new file of the input's bytes under a Kafka-like name at an offset the input says.
fn damage(dir: &Path, inp: &mut Input<'_>) {
    for _ in 0..8 {
        if inp.is_empty() {
            return;
        }
        let op = inp.u8();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().is_some_and(|n| n != ".lock"))
            .collect();
        files.sort();
        if files.is_empty() {
            return;
        }
        let file = files[usize::from(inp.u8()) % files.len()].clone();
        let mut bytes = std::fs::read(&file).unwrap_or_default();
        let at = usize::from(inp.u16());
        match op % 8 {
            0 if !bytes.is_empty() => {
                let i = at % bytes.len();
                bytes[i] ^= inp.u8() | 1;
            }
            1 => bytes.truncate(at % (bytes.len() + 1)),
            2 => {
                let n = usize::from(inp.u8());
                bytes.extend(inp.take(n));
            }
            3 if !bytes.is_empty() => {
                let i = at % bytes.len();
                let n = usize::from(inp.u8() % 32).min(bytes.len() - i);
                let src = inp.take(n);
                bytes[i..i + src.len()].copy_from_slice(src);
            }
            4 => {
                std::fs::remove_file(&file).unwrap();
                continue;
            }
            5 => bytes.resize(bytes.len() + 12 * (at % 256), 0),
            6 => {
                let suffix = SUFFIXES[usize::from(inp.u8()) % SUFFIXES.len()];
                let stem = file.file_name().unwrap().to_string_lossy();
                let stem = stem.split('.').next().unwrap_or_default().to_string();
                std::fs::write(dir.join(format!("{stem}{suffix}")), &bytes).unwrap();
                continue;
            }
            7 => {
                let suffix = SUFFIXES[usize::from(inp.u8()) % SUFFIXES.len()];
                let offset = at % 64;
                let n = usize::from(inp.u8());
                let name = format!("{offset:020}{suffix}");
                std::fs::write(dir.join(name), inp.take(n)).unwrap();
                continue;
            }
            _ => continue,
        }
        std::fs::write(&file, &bytes).unwrap();
    }
}

/// Every file under `dir` with its bytes.
fn files_of(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    tree_image(dir).unwrap()
}

/// `log_loader`: the pristine partition, damaged as the input says, loaded with the options the
/// input picks (clean shutdown or not, `full`, a recovery point and a log start offset). Then:
///
/// * planning changes no byte and no name in the directory, with or without the audit `verify`
///   runs (`plan_audited`), and neither panics;
/// * a plan refused is refused by `LogLoader::load` on a copy with the same error;
/// * applying the plan reports exactly what the plan predicted, and leaves the producer state,
///   LSO and log end offset the plan computed;
/// * the cut bytes are in the quarantine files the plan named, byte for byte, and every file
///   moved to quarantine keeps its bytes: the bytes it was found with (a renamed `.swap`'s for
///   its live name), or those recovery wrote to it before (a snapshot taken after a recovered
///   segment, an index created empty when the log opened); a segment recovered and then
///   quarantined whole (log start past the log end) is checked as prefix plus cut tail;
/// * no byte of a live `.log` is lost without a report: it is still there or in quarantine (as
///   its valid prefix with the rest in the cut's file), or it was removed as a segment a valid
///   swap replaced (reported as handled);
/// * `LogLoader::load` (planning under the lock, then applying) of a copy of the damaged
///   directory reports the same as the plan and leaves the same state.
pub fn log_loader(data: &[u8]) {
    let mut inp = Input(data);
    let flags = inp.u8();
    let recovery_point = i64::from(inp.u8() % 40);
    let log_start = i64::from(inp.u8() % 40);
    let opts = LoadOptions {
        config: config(),
        had_clean_shutdown: flags & 1 != 0,
        full: flags & 2 != 0,
        recovery_point: if flags & 4 != 0 { recovery_point } else { 0 },
        log_start_offset: if flags & 8 != 0 { log_start } else { 0 },
        ..LoadOptions::default()
    };
    let pristine = pristine();
    let root = scratch().lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = (root.join("a"), root.join("b"));
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
    let dir = a.join("orders-0");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in pristine {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    damage(&dir, &mut inp);
    let copy = b.join("orders-0");
    std::fs::create_dir_all(&copy).unwrap();
    for (path, bytes) in files_of(&dir) {
        let to = copy.join(path.strip_prefix(&dir).unwrap());
        match bytes {
            Some(bytes) => std::fs::write(to, bytes).unwrap(),
            None => std::fs::create_dir_all(to).unwrap(),
        }
    }
    let same = |s: String| s.replace(b.to_str().unwrap(), a.to_str().unwrap());

    let before = files_of(&dir);
    let audited = LogLoader::plan_audited(&dir, &opts).map(|p| p.log_end_offset);
    let plan = LogLoader::plan(&dir, &opts);
    assert!(files_of(&dir) == before, "planning changed the directory");
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            assert!(
                audited.is_err(),
                "plan refused what plan_audited accepted: {e}"
            );
            let loaded = LogLoader::load(&copy, &opts).map(|_| ());
            assert_eq!(
                loaded.map_err(|e| same(e.to_string())),
                Err(e.to_string()),
                "the loader and the plan disagree"
            );
            return;
        }
    };
    assert_eq!(
        audited.as_ref().ok(),
        Some(&plan.log_end_offset),
        "plan_audited and plan disagree: {audited:?}"
    );
    let predicted = plan.report();
    // Segments recovered and then quarantined whole (a log start offset past the recovered log
    // end): their `.log` is the valid prefix (checked below with its cut tail), their indexes
    // the rebuilt ones.
    // Recovery takes a snapshot after each recovered segment as Kafka does, over a file of the
    // same name if there is one; one it then quarantines (beyond the log end) holds those bytes.
    let mut written: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    let mut quarantined_snapshots: BTreeMap<PathBuf, Option<Vec<u8>>> = BTreeMap::new();
    for (_, op) in &plan.snapshot_ops {
        match op {
            SnapshotOp::Write { path, bytes } => {
                written.insert(path.clone(), bytes.clone());
            }
            SnapshotOp::Quarantine { from, to } => {
                let had = written
                    .get(from)
                    .cloned()
                    .or_else(|| before.get(from).cloned().flatten());
                quarantined_snapshots.insert(to.clone(), had);
            }
            _ => {}
        }
    }
    // A `.swap` renamed into place: the live name's bytes are the swap's.
    let renamed_into: BTreeMap<PathBuf, PathBuf> = plan
        .leftovers
        .iter()
        .filter_map(|a| match a {
            LeftoverAction::Rename { from, to, .. } => Some((to.clone(), from.clone())),
            _ => None,
        })
        .collect();
    let removed: Vec<PathBuf> = plan
        .leftovers
        .iter()
        .filter_map(|a| match a {
            LeftoverAction::Remove { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    let recovered_then_quarantined: Vec<i64> = if plan.start_at_checkpoint {
        plan.scans.iter().map(|s| s.base_offset).collect()
    } else {
        Vec::new()
    };
    let state = (
        plan.producers.snapshot_entries(),
        plan.last_stable_offset,
        plan.log_end_offset,
    );
    let cut_tails: Vec<(PathBuf, Vec<u8>)> = predicted
        .cut
        .iter()
        .map(|c| {
            let seg = plan
                .segments
                .iter()
                .find(|s| s.base_offset == c.segment)
                .expect("a cut names a planned segment");
            // A `.swap` renamed into place first: the segment's bytes are the swap's.
            let log_path = seg.log_path(&plan.dir);
            let source = plan
                .leftovers
                .iter()
                .find_map(|a| match a {
                    LeftoverAction::Rename { from, to, .. } if *to == log_path => Some(from),
                    _ => None,
                })
                .unwrap_or(&log_path);
            let bytes = std::fs::read(source).unwrap();
            (
                c.quarantined_to.clone(),
                bytes[c.position as usize..].to_vec(),
            )
        })
        .collect();
    let (log, report) = LogLoader::apply(plan).unwrap_or_else(|e| panic!("apply failed: {e}"));
    assert_eq!(format!("{report:?}"), format!("{predicted:?}"));
    assert_eq!(
        (
            log.producer_state().snapshot_entries(),
            log.last_stable_offset(),
            log.log_end_offset()
        ),
        state
    );
    for (path, tail) in &cut_tails {
        let got = std::fs::read(path).unwrap();
        assert!(
            &got == tail,
            "{}: {} bytes quarantined, {} cut",
            path.display(),
            got.len(),
            tail.len()
        );
    }
    for p in &report.quarantined_segments {
        // A live file a swap replaced is set aside as `<name>.replaced`; a quarantined segment
        // file that had a `.swap` holds the swap's bytes (renamed into place first).
        let name = p.file_name().unwrap().to_str().unwrap();
        let segment_file = [".log", ".index", ".timeindex", ".txnindex"]
            .iter()
            .any(|e| name.ends_with(e));
        let base: i64 = name.get(..20).and_then(|b| b.parse().ok()).unwrap_or(-1);
        if segment_file && recovered_then_quarantined.contains(&base) {
            continue;
        }
        let had = if let Some(had) = quarantined_snapshots.get(p) {
            had.clone()
        } else {
            match name.strip_suffix(".replaced") {
                Some(live) => before.get(&dir.join(live)).cloned().flatten(),
                None => {
                    let live = dir.join(name);
                    match renamed_into.get(&live) {
                        Some(swap) => before.get(swap).cloned().flatten(),
                        // Removed first (a segment a valid swap replaced): not the same file.
                        None if removed.contains(&live) => None,
                        None => before.get(&live).cloned().flatten(),
                    }
                }
            }
        };
        // A missing offset or time index is created empty when the log opens (Kafka's
        // `AbstractIndex` does the same), and goes with its segment.
        let created = (name.ends_with(".index") || name.ends_with(".timeindex")) && had.is_none();
        let had = if created { Some(Vec::new()) } else { had };
        let got = std::fs::read(p).ok();
        assert!(
            got == had,
            "{} changed when quarantined: {:?} bytes, had {:?}",
            p.display(),
            got.map(|b| b.len()),
            had.map(|b| b.len())
        );
    }
    log.close().unwrap();
    // No byte of a live `.log` is lost unreported: each one is still there or in quarantine
    // under its own name (whole, or its valid prefix with the cut tail in the cut's file), or
    // it was removed as a segment a valid swap replaced (Kafka's rule, reported as handled).
    for (path, bytes) in &before {
        let (Some(bytes), Some(name)) = (bytes, path.file_name().and_then(|n| n.to_str())) else {
            continue;
        };
        if !name.ends_with(".log") || report.temp_files_handled.contains(path) {
            continue;
        }
        let base: i64 = name.trim_end_matches(".log").parse().unwrap_or(-1);
        let cut = report.cut.iter().find(|c| c.segment == base);
        let kept = |f: &Vec<u8>| {
            bytes.starts_with(f)
                && (f.len() == bytes.len()
                    || cut.is_some_and(|c| {
                        c.position == f.len() as u64
                            && std::fs::read(&c.quarantined_to).ok().as_deref()
                                == Some(&bytes[f.len()..])
                    }))
        };
        let replaced = format!("{name}.replaced");
        let in_quarantine = report
            .quarantined_segments
            .iter()
            .filter(|q| {
                let n = q.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                n == name || n == replaced
            })
            .filter_map(|q| std::fs::read(q).ok());
        // An empty prefix stands for a segment cut at its first byte and then removed (empty).
        let here = std::fs::read(path).ok().into_iter().chain([Vec::new()]);
        assert!(
            here.chain(in_quarantine).any(|f| kept(&f)),
            "{name}: {} bytes lost without a report",
            bytes.len()
        );
    }

    let (loaded, loaded_report) =
        LogLoader::load(&copy, &opts).unwrap_or_else(|e| panic!("load failed: {e}"));
    assert_eq!(
        same(format!("{loaded_report:?}")),
        format!("{predicted:?}"),
        "load and plan + apply differ"
    );
    assert_eq!(
        (
            loaded.producer_state().snapshot_entries(),
            loaded.last_stable_offset(),
            loaded.log_end_offset()
        ),
        state
    );
    loaded.close().unwrap();
}
