//! The `producer_state` harness: the producer state manager against a reference model.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::input::Input;
use super::scratch_dir;
use recovery::internals::decode_snapshot;
use recovery::{
    AbortedTxnRecord, AppendOrigin, BatchMetadata, BatchSummary, ControlInfo, ProducerStateManager,
    ProducerStateWarning, SnapshotEntry,
};

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
    recovery::internals::decrement_sequence(m.last_seq, m.offset_delta)
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
                            || recovery::internals::in_sequence(cur.last_seq(), b.base_sequence))
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
        last_sequence: recovery::internals::increment_sequence(base_sequence, (records - 1) as i32),
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
