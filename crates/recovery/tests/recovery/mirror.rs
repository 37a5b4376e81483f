//! KIP-1279 mirror partition states: the STOPPING steps are durable one by one, and a crash at
//! any of them, followed by a reopen and `resume`, ends in `Stopped` with **exactly one** barrier
//! at the stop point, written in a leader epoch above every epoch of the log and recorded in the
//! leader-epoch cache from the barrier's offset; the partition never accepts client appends
//! before that barrier is durable, and a resume truncates to the persisted stop point even when
//! the log's high watermark (and so its LSO) was lost in the crash. Also the `mirror-state` file
//! format (golden bytes, malformed files with line numbers, write faults) and `start_mirroring`'s
//! log alignment by leader epoch for failback.
//!
//! The fake log is a vector of batches (one offset each) with a live and a durable image, like
//! redb's `CrashBackend`: `flush` copies live to durable, and a crash keeps either image (an
//! unlucky crash loses everything unflushed; a lucky one loses nothing). Its leader-epoch cache
//! is written atomically on every change, as the real checkpoint is, and a reopen drops entries
//! at or past the log end, as the loader does. A crash also loses the high watermark (no
//! checkpoint: the LSO drops to 0). Every mutating operation of the log and of the state store
//! is numbered; `crash_at = n` makes operation `n` and all later ones fail without effect.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::path::Path;
use std::rc::Rc;

use recovery::internals::{
    decode_mirror_state, encode_mirror_state, MalformedReason, MirrorOp, MIRROR_STATE_FILE,
};
use recovery::{
    EpochEndOffsets, EpochHistory, MirrorError, MirrorLog, MirrorPartitionState, MirrorStateError,
    MirrorStateFile, MirrorStateKind, MirrorStateStore, MirroredLog, SnapshotIo, StdIo, StopPolicy,
    StoppingStep, MIRROR_EPOCH_FENCE, UNDEFINED_EPOCH,
};
use segment_store::EpochEntry;
use testkit::MirrorPartition;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Batch {
    /// A data batch; `stable == false` means part of an open transaction (LSO stops there).
    Data { stable: bool },
    /// A `MIRROR_PID_RESET` barrier with its source cluster id.
    Barrier(String),
    /// An ABORT marker closing every open transaction before it (the fake has one producer).
    Abort,
}

use Batch::{Barrier, Data};

const STABLE: Batch = Data { stable: true };
const OPEN: Batch = Data { stable: false };

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CrashImage {
    /// Only what was flushed survives.
    Durable,
    /// Everything written survives.
    Live,
}

#[derive(Debug)]
struct World {
    live: Vec<Batch>,
    durable: Vec<Batch>,
    /// The leader-epoch cache, `(epoch, start offset)`, durable on every change.
    epochs: Vec<(i32, i64)>,
    /// The high watermark bounding the LSO (lost in a crash: 0).
    high_watermark: i64,
    /// The persisted mirror state (the fake store writes atomically and durably).
    state: MirrorPartitionState,
    ops: usize,
    crash_at: Option<usize>,
    crashed: bool,
    /// The leader epoch of every successful `append_barrier` call.
    barrier_appends: Vec<i32>,
}

impl World {
    fn op(&mut self, what: &'static str) -> Result<(), Crash> {
        self.ops += 1;
        if self.crashed || self.crash_at == Some(self.ops) {
            self.crashed = true;
            return Err(Crash { op: self.ops, what });
        }
        Ok(())
    }

    /// The machine crashes: keep one image, forget the injected fault and the high watermark;
    /// the reopen drops epochs at or past the log end.
    fn crash(&mut self, image: CrashImage) {
        match image {
            CrashImage::Durable => self.live = self.durable.clone(),
            CrashImage::Live => self.durable = self.live.clone(),
        }
        let end = offset(self.live.len());
        self.epochs.retain(|&(_, start)| start < end);
        self.high_watermark = 0;
        self.crashed = false;
        self.crash_at = None;
    }

    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.last().map(|&(e, _)| e)
    }
}

type Shared = Rc<RefCell<World>>;

/// A log in leader epochs 0 (from offset 0) and 1 (from offset 2).
fn world(log: Vec<Batch>, state: MirrorPartitionState) -> Shared {
    let epochs = match log.len() {
        0 => vec![],
        1 | 2 => vec![(0, 0)],
        _ => vec![(0, 0), (1, 2)],
    };
    Rc::new(RefCell::new(World {
        durable: log.clone(),
        live: log,
        epochs,
        high_watermark: i64::MAX,
        state,
        ops: 0,
        crash_at: None,
        crashed: false,
        barrier_appends: Vec::new(),
    }))
}

#[derive(Debug)]
struct Crash {
    op: usize,
    what: &'static str,
}

impl fmt::Display for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash injected at operation {} ({})", self.op, self.what)
    }
}

impl std::error::Error for Crash {}

#[derive(Debug)]
struct FakeLog(Shared);

fn offset(i: usize) -> i64 {
    i64::try_from(i).unwrap()
}

fn history(w: &World) -> EpochHistory {
    EpochHistory {
        entries: w
            .epochs
            .iter()
            .map(|&(epoch, start_offset)| EpochEntry {
                epoch,
                start_offset,
            })
            .collect(),
        log_end_offset: offset(w.live.len()),
    }
}

/// A source that holds exactly this log's history (alignment keeps everything).
fn same_history(w: &Shared) -> EpochHistory {
    history(&w.borrow())
}

impl EpochEndOffsets for FakeLog {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        history(&self.0.borrow()).end_offset_for_epoch(requested)
    }
}

impl MirrorLog for FakeLog {
    type Error = Crash;

    fn last_stable_offset(&self) -> i64 {
        let w = self.0.borrow();
        let closed = w.live.iter().rposition(|b| *b == Batch::Abort);
        offset(
            w.live
                .iter()
                .enumerate()
                .position(|(i, b)| *b == OPEN && closed.is_none_or(|c| i > c))
                .unwrap_or(w.live.len()),
        )
        .min(w.high_watermark)
    }

    fn log_start_offset(&self) -> i64 {
        0
    }

    fn log_end_offset(&self) -> i64 {
        offset(self.0.borrow().live.len())
    }

    fn latest_epoch(&self) -> Option<i32> {
        self.0.borrow().latest_epoch()
    }

    fn high_watermark_known(&self) -> bool {
        true
    }

    fn truncate_to(&mut self, to: i64) -> Result<(), Crash> {
        let mut w = self.0.borrow_mut();
        w.op("truncate")?;
        w.live.truncate(usize::try_from(to).unwrap());
        let end = offset(w.live.len());
        w.epochs.retain(|&(_, start)| start < end);
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, to: i64) -> Result<(), Crash> {
        // The fake's log always starts at 0: only a start at 0 is possible.
        assert_eq!(to, 0, "the fake log starts at 0");
        self.truncate_to(0)
    }

    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Crash> {
        let mut w = self.0.borrow_mut();
        w.op("assign epoch")?;
        if w.latest_epoch().is_none_or(|l| epoch > l) {
            w.epochs.push((epoch, start_offset));
        }
        Ok(())
    }

    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Crash> {
        let w = self.0.borrow();
        let from = usize::try_from(from).unwrap();
        Ok(w.live
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, b)| matches!(b, Barrier(_)))
            .map(|(i, _)| offset(i)))
    }

    fn max_batch_epoch(&self) -> Result<Option<i32>, Crash> {
        // The fake's batches carry the epochs of its leader-epoch cache.
        Ok(self.0.borrow().latest_epoch())
    }

    fn append_barrier(&mut self, source_cluster_id: &str, epoch: i32) -> Result<i64, Crash> {
        let mut w = self.0.borrow_mut();
        w.op("append barrier")?;
        let at = offset(w.live.len());
        w.live.push(Barrier(source_cluster_id.to_owned()));
        if w.latest_epoch().is_none_or(|l| epoch > l) {
            w.epochs.push((epoch, at));
        }
        w.barrier_appends.push(epoch);
        Ok(at)
    }

    fn flush(&mut self) -> Result<(), Crash> {
        let mut w = self.0.borrow_mut();
        w.op("flush")?;
        w.durable = w.live.clone();
        Ok(())
    }

    fn abort_open_transactions(&mut self, _leader_epoch: i32) -> Result<usize, Crash> {
        let open = self.last_stable_offset() < self.log_end_offset();
        let mut w = self.0.borrow_mut();
        if !open
            || w.live
                .iter()
                .skip_while(|b| **b != OPEN)
                .any(|b| *b == Batch::Abort)
        {
            return Ok(0);
        }
        w.op("append abort marker")?;
        w.live.push(Batch::Abort);
        Ok(1)
    }
}

/// An atomic, durable state store that checks the driver's ordering on every write.
#[derive(Debug)]
struct FakeStore(Shared);

impl MirrorStateStore for FakeStore {
    fn load(&self) -> Result<MirrorPartitionState, MirrorStateError> {
        Ok(self.0.borrow().state.clone())
    }

    fn store(&mut self, state: &MirrorPartitionState) -> Result<(), MirrorStateError> {
        let mut w = self.0.borrow_mut();
        w.op("store state").map_err(|c| MirrorStateError::Io {
            path: MIRROR_STATE_FILE.into(),
            op: "writing mirror state",
            source: io::Error::other(c),
        })?;
        match state {
            MirrorPartitionState::Stopped { barrier_offset, .. } => {
                let at = usize::try_from(*barrier_offset).unwrap();
                assert!(
                    matches!(w.durable.get(at), Some(Barrier(_))),
                    "Stopped persisted before the barrier at {at} is durable: {:?}",
                    w.durable
                );
            }
            MirrorPartitionState::Stopping {
                step: StoppingStep::FeedStopped,
                lso,
                ..
            } => assert!(
                offset(w.durable.len()) >= *lso,
                "FeedStopped persisted before the stop point {lso} is durable"
            ),
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                last_mirrored_offset: Some(point),
                last_mirrored_epoch: Some(epoch),
                ..
            } => {
                assert_eq!(
                    offset(w.durable.len()),
                    *point,
                    "Truncated persisted before the truncation is durable"
                );
                assert_eq!(w.latest_epoch().unwrap_or(UNDEFINED_EPOCH), *epoch);
            }
            _ => {}
        }
        w.state = state.clone();
        Ok(())
    }
}

fn open(w: &Shared) -> MirrorPartition<FakeLog, FakeStore> {
    MirrorPartition::open(FakeLog(w.clone()), FakeStore(w.clone())).unwrap()
}

fn barriers(log: &[Batch], source: &str) -> usize {
    log.iter()
        .filter(|b| **b == Barrier(source.to_owned()))
        .count()
}

/// A mirrored log: stable data, a barrier propagated from upstream (chain A→B→here) at offset 2
/// opening epoch 1, more stable data up to offset 5, then an open transaction at 6..=7. LSO = 6.
fn mirrored_log() -> Vec<Batch> {
    vec![
        STABLE,
        STABLE,
        Barrier("Z".into()),
        STABLE,
        STABLE,
        STABLE,
        OPEN,
        OPEN,
    ]
}

/// `Mirroring` with the destination's epoch the start chose.
fn mirroring_in(source: &str, leader_epoch: i32) -> MirrorPartitionState {
    MirrorPartitionState::Mirroring {
        source_cluster_id: source.into(),
        leader_epoch,
        full_truncation_pending: false,
    }
}

/// A partition that stopped mirroring before (no barrier in the fake log: the driver does not
/// look for it when starting).
fn stopped_earlier() -> MirrorPartitionState {
    MirrorPartitionState::Stopped {
        barrier_offset: 0,
        last_mirror_epoch: UNDEFINED_EPOCH,
    }
}

fn mirroring(source: &str) -> MirrorPartitionState {
    MirrorPartitionState::Mirroring {
        source_cluster_id: source.into(),
        // Not chosen (a state written before the destination's epoch was kept): the stop
        // fences from the log alone.
        leader_epoch: -1,
        full_truncation_pending: false,
    }
}

/// What every completed stop of [`mirrored_log`] must leave: truncated to 6, one barrier at 6,
/// all of it durable.
fn expected_after_stop() -> Vec<Batch> {
    let mut log = mirrored_log();
    log.truncate(6);
    log.push(Barrier("A".into()));
    log
}

fn assert_stopped_cleanly(w: &Shared, p: &MirrorPartition<FakeLog, FakeStore>, ctx: &str) {
    assert_eq!(
        *p.state(),
        MirrorPartitionState::Stopped {
            barrier_offset: 6,
            last_mirror_epoch: 1,
        },
        "{ctx}"
    );
    assert!(p.accepts_client_appends(), "{ctx}");
    let w = w.borrow();
    assert_eq!(w.live, expected_after_stop(), "{ctx}");
    assert_eq!(w.durable, w.live, "{ctx}: not durable");
    assert_eq!(barriers(&w.durable, "A"), 1, "{ctx}");
    assert_eq!(
        w.state,
        MirrorPartitionState::Stopped {
            barrier_offset: 6,
            last_mirror_epoch: 1,
        }
    );
    // The barrier opens epoch 11, MIRROR_EPOCH_FENCE above every epoch of the log, from its
    // own offset.
    assert_eq!(MIRROR_EPOCH_FENCE, 10);
    assert_eq!(w.epochs, [(0, 0), (1, 2), (11, 6)], "{ctx}");
    assert_eq!(w.barrier_appends.last(), Some(&11), "{ctx}: barrier epoch");
    assert!(w.barrier_appends.iter().all(|&e| e == 11), "{ctx}");
}

/// Number of mutating operations of an uninterrupted stop of [`mirrored_log`].
fn clean_stop_ops() -> usize {
    let w = world(mirrored_log(), mirroring("A"));
    let mut p = open(&w);
    assert_eq!(p.stop().unwrap(), 6);
    assert_stopped_cleanly(&w, &p, "clean stop");
    let ops = w.borrow().ops;
    ops
}

#[test]
fn clean_stop_performs_the_steps_in_order() {
    // flush, store FeedStopped, truncate, flush, store Truncated, store EpochBumped, assign
    // epoch, append, flush, store Stopped.
    assert_eq!(clean_stop_ops(), 10);
    // Every intermediate state, as persisted (a stop interrupted right after each store): the
    // stop point and the new epoch (chosen before truncation), then the last mirrored offset
    // and epoch.
    let mut seen = Vec::new();
    for crash_at in [3, 6, 7] {
        let w = world(mirrored_log(), mirroring("A"));
        w.borrow_mut().crash_at = Some(crash_at);
        open(&w).stop().unwrap_err();
        seen.push(w.borrow().state.clone());
    }
    let stopping = |step, last: Option<(i64, i32)>, leader_epoch| MirrorPartitionState::Stopping {
        step,
        source_cluster_id: "A".into(),
        lso: 6,
        last_mirrored_offset: last.map(|l| l.0),
        last_mirrored_epoch: last.map(|l| l.1),
        leader_epoch,
        policy: StopPolicy::TruncateToLastStable,
    };
    assert_eq!(
        seen,
        [
            stopping(StoppingStep::FeedStopped, None, Some(11)),
            stopping(StoppingStep::Truncated, Some((6, 1)), Some(11)),
            stopping(StoppingStep::EpochBumped, Some((6, 1)), Some(11)),
        ]
    );
}

/// The state after a crash must never be writable without a durable barrier, and the in-memory
/// state must match what was persisted.
fn assert_read_only_unless_stopped(w: &Shared, p: &MirrorPartition<FakeLog, FakeStore>) {
    let persisted = w.borrow().state.clone();
    assert_eq!(*p.state(), persisted);
    match persisted {
        MirrorPartitionState::Stopped { barrier_offset, .. } => {
            let at = usize::try_from(barrier_offset).unwrap();
            assert!(matches!(w.borrow().durable.get(at), Some(Barrier(_))));
            assert!(p.accepts_client_appends());
        }
        other => {
            assert!(!p.accepts_client_appends());
            let err = p.check_client_append().unwrap_err();
            assert!(
                matches!(err, MirrorError::ReadOnly { state } if state == other.kind()),
                "{err:?}"
            );
        }
    }
}

/// Reopen after a crash as the coordinator does: `resume` finishes a persisted `Stopping` (with
/// the high watermark still lost); a stop that never persisted its first step left `Mirroring`,
/// and the coordinator issues `stop` again once the partition knows its high watermark.
fn reopen_and_finish(w: &Shared, ctx: &str) -> MirrorPartition<FakeLog, FakeStore> {
    let mut p = open(w);
    assert_read_only_unless_stopped(w, &p);
    let survived = barriers(&w.borrow().live, "A") == 1;
    let appends = w.borrow().barrier_appends.len();
    let before = p.state().kind();
    let after = p.resume().unwrap().kind();
    match before {
        MirrorStateKind::Mirroring => {
            assert_eq!(after, MirrorStateKind::Mirroring, "{ctx}");
            w.borrow_mut().high_watermark = i64::MAX;
            assert_eq!(p.stop().unwrap(), 6, "{ctx}");
        }
        _ => assert_eq!(after, MirrorStateKind::Stopped, "{ctx}"),
    }
    if survived {
        assert_eq!(
            w.borrow().barrier_appends.len(),
            appends,
            "{ctx}: a barrier that survived the crash was written again"
        );
    }
    p
}

#[test]
fn crash_at_every_step_of_stopping_then_resume_writes_exactly_one_barrier() {
    let total = clean_stop_ops();
    for crash_at in 1..=total {
        for image in [CrashImage::Durable, CrashImage::Live] {
            let ctx = format!("crash at op {crash_at}, {image:?} image");
            let w = world(mirrored_log(), mirroring("A"));
            w.borrow_mut().crash_at = Some(crash_at);
            let mut p = open(&w);
            let err = p.stop().unwrap_err();
            assert!(
                matches!(err, MirrorError::Log(_) | MirrorError::State(_)),
                "{ctx}: {err:?}"
            );
            assert_read_only_unless_stopped(&w, &p);
            drop(p);

            w.borrow_mut().crash(image);
            let p = reopen_and_finish(&w, &ctx);
            assert_stopped_cleanly(&w, &p, &ctx);
        }
    }
}

#[test]
fn crash_during_stop_and_again_during_resume() {
    let total = clean_stop_ops();
    for first in 1..=total {
        for second in 1..=total {
            for image in [CrashImage::Durable, CrashImage::Live] {
                let ctx = format!("crash at op {first}, then at resume op {second}, {image:?}");
                let w = world(mirrored_log(), mirroring("A"));
                w.borrow_mut().crash_at = Some(first);
                open(&w).stop().unwrap_err();
                w.borrow_mut().crash(image);

                let mut p = open(&w);
                let ops_before = w.borrow().ops;
                w.borrow_mut().crash_at = Some(ops_before + second);
                let second_crashed = p.resume().is_err() || {
                    w.borrow_mut().high_watermark = i64::MAX;
                    p.stop().is_err()
                };
                assert_read_only_unless_stopped(&w, &p);
                drop(p);
                if second_crashed {
                    w.borrow_mut().crash(image);
                }

                let p = reopen_and_finish(&w, &ctx);
                assert_stopped_cleanly(&w, &p, &ctx);
            }
        }
    }
}

#[test]
fn retrying_stop_in_process_after_an_error_does_not_duplicate_the_barrier() {
    // The barrier is appended but the flush fails: the barrier is in the live log only. Calling
    // stop() again (no crash) must find it and flush it, not append a second one.
    let w = world(mirrored_log(), mirroring("A"));
    w.borrow_mut().crash_at = Some(9);
    let mut p = open(&w);
    p.stop().unwrap_err();
    assert_eq!(barriers(&w.borrow().live, "A"), 1);
    assert_eq!(barriers(&w.borrow().durable, "A"), 0);
    assert!(!p.accepts_client_appends());
    {
        let mut w = w.borrow_mut();
        w.crashed = false;
        w.crash_at = None;
    }
    assert_eq!(p.stop().unwrap(), 6);
    assert_stopped_cleanly(&w, &p, "retry");
    assert_eq!(
        w.borrow().barrier_appends.len(),
        1,
        "the live barrier was not rewritten"
    );
}

/// Defect: the resumed stop recomputed its truncation point as the LSO bounded by the high
/// watermark, which an unclean restart resets (no checkpoint, or a stale one): the resume cut
/// committed mirrored batches, here the whole log. The stop point persisted at `FeedStopped` is
/// used instead.
#[test]
fn resume_truncates_to_the_persisted_stop_point_not_a_recomputed_lso() {
    let w = world(vec![STABLE; 10], mirroring("A"));
    // The log is not durable yet: the stop makes it durable before persisting its point.
    w.borrow_mut().durable.truncate(5);
    w.borrow_mut().crash_at = Some(3);
    open(&w).stop().unwrap_err();
    assert_eq!(
        w.borrow().state,
        MirrorPartitionState::Stopping {
            step: StoppingStep::FeedStopped,
            source_cluster_id: "A".into(),
            lso: 10,
            last_mirrored_offset: None,
            last_mirrored_epoch: None,
            leader_epoch: Some(11),
            policy: StopPolicy::TruncateToLastStable,
        }
    );
    w.borrow_mut().crash(CrashImage::Durable);
    assert_eq!(FakeLog(w.clone()).last_stable_offset(), 0, "HW lost");
    let mut p = open(&w);
    p.resume().unwrap();
    assert_eq!(
        *p.state(),
        MirrorPartitionState::Stopped {
            barrier_offset: 10,
            last_mirror_epoch: 1,
        }
    );
    let mut expected = vec![STABLE; 10];
    expected.push(Barrier("A".into()));
    assert_eq!(w.borrow().durable, expected);
    assert_eq!(w.borrow().epochs, [(0, 0), (1, 2), (11, 10)]);
}

#[test]
fn a_propagated_barrier_below_the_lso_does_not_replace_our_own() {
    let w = world(mirrored_log(), mirroring("A"));
    let mut p = open(&w);
    assert_eq!(p.stop().unwrap(), 6);
    let log = w.borrow().durable.clone();
    assert_eq!(barriers(&log, "Z"), 1);
    assert_eq!(barriers(&log, "A"), 1);
}

#[test]
fn stop_is_idempotent_once_stopped() {
    let w = world(mirrored_log(), mirroring("A"));
    let mut p = open(&w);
    assert_eq!(p.stop().unwrap(), 6);
    let ops = w.borrow().ops;
    assert_eq!(p.stop().unwrap(), 6);
    assert_eq!(
        p.resume().unwrap(),
        &MirrorPartitionState::Stopped {
            barrier_offset: 6,
            last_mirror_epoch: 1,
        }
    );
    assert_eq!(w.borrow().ops, ops, "no further writes");
}

#[test]
fn read_only_while_mirroring_and_stopping() {
    let w = world(mirrored_log(), mirroring("A"));
    let p = open(&w);
    assert!(p.accepts_mirrored_appends());
    let err = p.check_client_append().unwrap_err();
    assert!(matches!(
        err,
        MirrorError::ReadOnly {
            state: MirrorStateKind::Mirroring
        }
    ));
    assert_eq!(
        err.to_string(),
        "partition is read-only for clients in mirror state MIRRORING"
    );

    let w = world(mirrored_log(), mirroring("A"));
    w.borrow_mut().crash_at = Some(3);
    let mut p = open(&w);
    p.stop().unwrap_err();
    assert_eq!(p.state().kind(), MirrorStateKind::Stopping);
    assert!(!p.accepts_mirrored_appends());
    assert!(matches!(
        p.check_client_append(),
        Err(MirrorError::ReadOnly {
            state: MirrorStateKind::Stopping
        })
    ));
}

#[test]
fn local_partition_is_writable_and_cannot_stop() {
    let w = world(vec![STABLE], MirrorPartitionState::Local);
    let mut p = open(&w);
    assert!(p.accepts_client_appends());
    assert!(p.check_client_append().is_ok());
    assert!(!p.accepts_mirrored_appends());
    let err = p.stop().unwrap_err();
    assert!(matches!(
        err,
        MirrorError::InvalidTransition {
            from: MirrorStateKind::Local,
            op: MirrorOp::Stop
        }
    ));
    assert_eq!(
        err.to_string(),
        "cannot stop mirroring in mirror state LOCAL"
    );
    assert_eq!(w.borrow().ops, 0);
}

fn source(epochs: &[(i32, i64)], log_end_offset: i64) -> EpochHistory {
    EpochHistory {
        entries: epochs
            .iter()
            .map(|&(epoch, start_offset)| EpochEntry {
                epoch,
                start_offset,
            })
            .collect(),
        log_end_offset,
    }
}

#[test]
fn start_mirroring_aligns_by_leader_epoch() {
    // A partition that stopped mirroring earlier (so it holds mirrored history; a `Local` one
    // holds none and is truncated fully): epoch 0 at 0..=1, epoch 1 from 2 (its own writes).
    // The source never saw epoch 1: it has epoch 0 up to 3 (exclusive) and then its own epoch
    // 2. Kafka's rule: ask for our latest epoch 1 -> the source answers (0, 3); our end of
    // epoch 0 is 2; keep min = 2.
    let w = world(
        vec![STABLE, STABLE, STABLE, OPEN, STABLE],
        stopped_earlier(),
    );
    let mut p = open(&w);
    p.start_mirroring("A", &source(&[(0, 0), (2, 3)], 9))
        .unwrap();
    // The destination's own epoch: 10 above the largest epoch the log held (1).
    assert_eq!(*p.state(), mirroring_in("A", 11));
    assert!(!p.accepts_client_appends());
    assert!(p.accepts_mirrored_appends());
    let w = w.borrow();
    assert_eq!(w.durable, vec![STABLE, STABLE]);
    assert_eq!(w.epochs, [(0, 0)]);
    assert_eq!(w.state, mirroring_in("A", 11));
}

#[test]
fn alignment_follows_kafkas_offsets_for_leader_epoch_rule() {
    let local = |epochs: &[(i32, i64)], len: usize| {
        let w = world(vec![STABLE; len], MirrorPartitionState::Local);
        w.borrow_mut().epochs = epochs.to_vec();
        FakeLog(w)
    };
    let point = |l: &FakeLog, s: &EpochHistory| recovery::alignment_point(l, s);
    // Same history: nothing to cut.
    let l = local(&[(0, 0), (3, 5)], 8);
    assert_eq!(point(&l, &source(&[(0, 0), (3, 5)], 8)), 8);
    // The source went further in our latest epoch: keep all of ours.
    assert_eq!(point(&l, &source(&[(0, 0), (3, 5)], 20)), 8);
    // The source left our latest epoch earlier and went on in a newer one (it failed over at 6
    // and wrote its barrier there in epoch 4): cut at 6, where the barrier comes from.
    assert_eq!(point(&l, &source(&[(0, 0), (3, 5), (4, 6)], 9)), 6);
    // The source never had epoch 3 (its latest is 2): our epoch-3 data (from 5) cannot be in
    // it; asked about epoch 0 it answers (0, 4): cut at 4.
    assert_eq!(point(&l, &source(&[(0, 0), (2, 4)], 9)), 4);
    // The source answers with epoch 1, which we do not know: cut at our end of the largest
    // epoch below it (0 -> 5), ask again with 0, and keep min(5, its end of 0 = 2).
    let l = local(&[(0, 0), (3, 5)], 8);
    assert_eq!(point(&l, &source(&[(0, 0), (1, 2), (5, 7)], 9)), 2);
    // The source knows none of our epochs (all above its latest): nothing is kept.
    let l = local(&[(0, 0), (3, 5), (7, 6)], 8);
    assert_eq!(
        point(&l, &source(&[(0, 0), (3, 5)], 9)),
        6,
        "epoch 7 unknown"
    );
    let l = local(&[(6, 0)], 4);
    assert_eq!(point(&l, &source(&[(0, 0)], 9)), 0);
    // The source's epochs all start above ours: it answers (ours, its first start).
    let l = local(&[(1, 0)], 4);
    assert_eq!(point(&l, &source(&[(2, 3)], 9)), 3);
    // An empty log is aligned; a log without epochs keeps nothing.
    assert_eq!(point(&local(&[], 0), &source(&[(0, 0)], 9)), 0);
    assert_eq!(point(&local(&[], 3), &source(&[(0, 0)], 9)), 0);
}

/// Defect: `start_mirroring` truncated while the partition was still writable and persisted
/// `Mirroring` afterwards: a crash in between left a writable partition with a truncated log, so
/// a write acknowledged after the restart was cut by the retry. Now the read-only state is
/// persisted first: after a crash at any operation the partition is either writable with its
/// log untouched or read-only, and the retry aligns it.
#[test]
fn start_mirroring_is_read_only_before_it_truncates() {
    let original = vec![STABLE, STABLE, OPEN];
    let clean_ops = {
        let w = world(original.clone(), stopped_earlier());
        open(&w)
            .start_mirroring("A", &source(&[(0, 0)], 1))
            .unwrap();
        assert_eq!(w.borrow().durable, vec![STABLE]);
        let ops = w.borrow().ops;
        ops
    };
    assert_eq!(clean_ops, 3, "store, truncate, flush");
    for crash_at in 1..=clean_ops {
        let w = world(original.clone(), stopped_earlier());
        w.borrow_mut().crash_at = Some(crash_at);
        let mut p = open(&w);
        p.start_mirroring("A", &source(&[(0, 0)], 1)).unwrap_err();
        for image in [CrashImage::Durable, CrashImage::Live] {
            let w2 = Rc::new(RefCell::new(World {
                live: w.borrow().live.clone(),
                durable: w.borrow().durable.clone(),
                epochs: w.borrow().epochs.clone(),
                high_watermark: 0,
                state: w.borrow().state.clone(),
                ops: 0,
                crash_at: None,
                crashed: false,
                barrier_appends: Vec::new(),
            }));
            w2.borrow_mut().crash(image);
            let mut p = open(&w2);
            if p.accepts_client_appends() {
                assert_eq!(
                    w2.borrow().durable,
                    original,
                    "crash at {crash_at}: writable with a truncated log"
                );
            }
            p.start_mirroring("A", &source(&[(0, 0)], 1)).unwrap();
            assert_eq!(w2.borrow().durable, vec![STABLE], "crash at {crash_at}");
            assert!(!p.accepts_client_appends());
        }
    }
}

/// Defect: a stop resumed from `TRUNCATED` or `EPOCH_BUMPED` did not repeat the truncation, so
/// a batch that landed past the stop point after it (a follower append, accepted while
/// stopping) stayed, and the barrier went after it. The resume now cuts everything past the
/// stop point but its own barrier.
#[test]
fn a_resumed_stop_repeats_the_truncation() {
    for step in [StoppingStep::Truncated, StoppingStep::EpochBumped] {
        let mut log = mirrored_log();
        log.truncate(6);
        log.extend([STABLE, STABLE]); // landed after the truncation
        let w = world(
            log,
            MirrorPartitionState::Stopping {
                step,
                source_cluster_id: "A".into(),
                lso: 6,
                last_mirrored_offset: Some(6),
                last_mirrored_epoch: Some(1),
                leader_epoch: Some(11),
                policy: StopPolicy::TruncateToLastStable,
            },
        );
        let mut p = open(&w);
        p.resume().unwrap();
        assert_eq!(
            *p.state(),
            MirrorPartitionState::Stopped {
                barrier_offset: 6,
                last_mirror_epoch: 1,
            },
            "{step:?}"
        );
        assert_eq!(w.borrow().durable, expected_after_stop(), "{step:?}");
    }
}

#[test]
fn start_mirroring_transitions() {
    let w = world(vec![], mirroring("A"));
    let mut p = open(&w);
    let empty = source(&[], 0);
    p.start_mirroring("A", &empty).unwrap();
    assert_eq!(w.borrow().ops, 0, "same source: nothing to do");
    let err = p.start_mirroring("B", &empty).unwrap_err();
    assert!(
        matches!(&err, MirrorError::SourceMismatch { current, requested }
            if current == "A" && requested == "B"),
        "{err:?}"
    );
    for bad in ["", "a\nb", "\t"] {
        assert!(matches!(
            p.start_mirroring(bad, &empty),
            Err(MirrorError::InvalidSourceClusterId(ref id)) if id == bad
        ));
    }

    let w = world(mirrored_log(), mirroring("A"));
    w.borrow_mut().crash_at = Some(3);
    let mut p = open(&w);
    p.stop().unwrap_err();
    {
        let mut w = w.borrow_mut();
        w.crashed = false;
        w.crash_at = None;
    }
    assert!(matches!(
        p.start_mirroring("A", &empty),
        Err(MirrorError::InvalidTransition {
            from: MirrorStateKind::Stopping,
            op: MirrorOp::StartMirroring
        })
    ));
}

#[test]
fn failback_cycle_writes_one_barrier_per_stop_each_in_a_new_epoch() {
    // B mirrors A, fails over (barrier "A" in epoch 11), takes local writes in epoch 11; later
    // B mirrors again from the promoted side, which holds B's history up to offset 4 (B's own
    // open transaction at 4 never reached it), and stops again (barrier "A" in epoch 21).
    let w = world(vec![], MirrorPartitionState::Local);
    let mut p = open(&w);
    p.start_mirroring("A", &source(&[], 0)).unwrap();
    w.borrow_mut().live.extend([STABLE, STABLE, OPEN]);
    w.borrow_mut().epochs = vec![(0, 0), (1, 1)];
    assert_eq!(p.stop().unwrap(), 2);
    assert!(p.accepts_client_appends());
    assert_eq!(w.borrow().epochs, [(0, 0), (1, 1), (11, 2)]);
    w.borrow_mut().live.extend([STABLE, OPEN]); // local writes after failover, epoch 11
    p.start_mirroring("A", &source(&[(0, 0), (1, 1), (11, 2)], 4))
        .unwrap();
    assert_eq!(w.borrow().durable.len(), 4, "aligned to the source's end");
    w.borrow_mut().live.extend([STABLE]);
    assert_eq!(p.stop().unwrap(), 5);
    let w = w.borrow();
    assert_eq!(
        w.durable,
        vec![
            STABLE,
            STABLE,
            Barrier("A".into()),
            STABLE,
            STABLE,
            Barrier("A".into())
        ]
    );
    assert_eq!(w.barrier_appends, [11, 21]);
    assert_eq!(w.epochs, [(0, 0), (1, 1), (11, 2), (21, 5)]);
}

// ------------------------------------------------------------------------------------------------
// The mirror-state file
// ------------------------------------------------------------------------------------------------

/// Version 1 files (no LME, no early leader epoch) are still read.
#[test]
fn version_1_files_are_read() {
    assert_eq!(
        decode_mirror_state(b"1\nSTOPPED\nbarrier_offset=5\n"),
        Ok(MirrorPartitionState::Stopped {
            barrier_offset: 5,
            last_mirror_epoch: UNDEFINED_EPOCH,
        })
    );
    assert_eq!(
        decode_mirror_state(b"1\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=3\n"),
        Ok(MirrorPartitionState::Stopping {
            step: StoppingStep::FeedStopped,
            source_cluster_id: "A".into(),
            lso: 3,
            last_mirrored_offset: None,
            last_mirrored_epoch: None,
            leader_epoch: None,
            policy: StopPolicy::TruncateToLastStable,
        })
    );
    assert!(decode_mirror_state(b"2\nSTOPPED\nbarrier_offset=5\n").is_err());
}

#[test]
fn file_golden_bytes() {
    let cases = [
        (MirrorPartitionState::Local, "2\nLOCAL\n"),
        (mirroring("lkc-9x8Q"), "2\nMIRRORING\nsource=lkc-9x8Q\n"),
        (
            MirrorPartitionState::Stopping {
                step: StoppingStep::FeedStopped,
                source_cluster_id: "A".into(),
                lso: 120,
                last_mirrored_offset: None,
                last_mirrored_epoch: None,
                leader_epoch: None,
                policy: StopPolicy::TruncateToLastStable,
            },
            "2\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=120\npolicy=TRUNCATE_TO_LAST_STABLE\n",
        ),
        (
            MirrorPartitionState::Stopping {
                step: StoppingStep::FeedStopped,
                source_cluster_id: "A".into(),
                lso: 120,
                last_mirrored_offset: None,
                last_mirrored_epoch: None,
                leader_epoch: Some(14),
                policy: StopPolicy::AbortOpenTransactions,
            },
            "2\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=120\npolicy=ABORT_OPEN_TRANSACTIONS\nleader_epoch=14\n",
        ),
        (
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: "A".into(),
                lso: 120,
                last_mirrored_offset: Some(118),
                last_mirrored_epoch: Some(-1),
                leader_epoch: None,
                policy: StopPolicy::TruncateToLastStable,
            },
            "2\nSTOPPING\nstep=TRUNCATED\nsource=A\nlso=120\npolicy=TRUNCATE_TO_LAST_STABLE\nlast_mirrored_offset=118\n\
             last_mirrored_epoch=-1\n",
        ),
        (
            MirrorPartitionState::Stopping {
                step: StoppingStep::EpochBumped,
                source_cluster_id: "A".into(),
                lso: 120,
                last_mirrored_offset: Some(118),
                last_mirrored_epoch: Some(4),
                leader_epoch: Some(5),
                policy: StopPolicy::TruncateToLastStable,
            },
            "2\nSTOPPING\nstep=EPOCH_BUMPED\nsource=A\nlso=120\npolicy=TRUNCATE_TO_LAST_STABLE\nlast_mirrored_offset=118\n\
             last_mirrored_epoch=4\nleader_epoch=5\n",
        ),
        (
            MirrorPartitionState::Stopped {
                barrier_offset: 118,
                last_mirror_epoch: 4,
            },
            "2\nSTOPPED\nbarrier_offset=118\nlast_mirror_epoch=4\n",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (state, text) in cases {
        assert_eq!(encode_mirror_state(&state).unwrap(), text);
        let mut file = MirrorStateFile::in_dir(dir.path());
        file.store(&state).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(MIRROR_STATE_FILE)).unwrap(),
            text
        );
        assert_eq!(file.load().unwrap(), state);
        assert_eq!(MirrorStateFile::in_dir(dir.path()).load().unwrap(), state);
    }
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![MIRROR_STATE_FILE], "no temporary file left");
}

#[test]
fn missing_file_is_local() {
    let dir = tempfile::tempdir().unwrap();
    let file = MirrorStateFile::in_dir(dir.path());
    assert_eq!(file.path(), dir.path().join(MIRROR_STATE_FILE));
    assert_eq!(file.load().unwrap(), MirrorPartitionState::Local);
}

#[test]
fn malformed_files_report_the_line() {
    use MalformedReason::*;
    let cases: Vec<(&[u8], usize, MalformedReason)> = vec![
        (b"", 1, MissingLine("version")),
        (b"1", 1, MissingLine("version")),
        (b"0\nLOCAL\n", 1, UnsupportedVersion("0".into())),
        (b"3\nLOCAL\n", 1, UnsupportedVersion("3".into())),
        (b"00\nLOCAL\n", 1, UnsupportedVersion("00".into())),
        (b"1\n", 2, MissingLine("state")),
        (b"1\nPAUSED\n", 2, UnknownState("PAUSED".into())),
        (b"1\nlocal\n", 2, UnknownState("local".into())),
        (b"1\nMIRRORING\n", 3, MissingLine("source")),
        (b"1\nMIRRORING\nsource=\n", 3, BadSourceClusterId("".into())),
        (
            b"1\nMIRRORING\nsrc=A\n",
            3,
            ExpectedKey {
                expected: "source",
                found: "src=A".into(),
            },
        ),
        (
            b"1\nMIRRORING\nsource=A\nx\n",
            4,
            TrailingContent("x".into()),
        ),
        (b"1\nMIRRORING\nsource=A", 3, MissingLine("source")),
        (
            b"2\nMIRRORING\nsource=A\nleader_epoch=3\ntruncate_fully=done\n",
            5,
            UnknownTruncation("done".into()),
        ),
        (
            // Version 1 has no such line.
            b"1\nMIRRORING\nsource=A\ntruncate_fully=pending\n",
            4,
            TrailingContent("truncate_fully=pending".into()),
        ),
        (
            b"1\nSTOPPING\nstep=DONE\nsource=A\nlso=1\n",
            3,
            UnknownStep("DONE".into()),
        ),
        (
            b"1\nSTOPPING\nsource=A\nstep=FEED_STOPPED\nlso=1\n",
            3,
            ExpectedKey {
                expected: "step",
                found: "source=A".into(),
            },
        ),
        (
            b"1\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=-1\n",
            5,
            BadOffset {
                key: "lso",
                value: "-1".into(),
            },
        ),
        (
            b"1\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=99999999999999999999\n",
            5,
            BadOffset {
                key: "lso",
                value: "99999999999999999999".into(),
            },
        ),
        (
            b"1\nSTOPPING\nstep=TRUNCATED\nsource=A\nlso=1\n",
            6,
            MissingLine("last_mirrored_offset"),
        ),
        (
            b"1\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=1\nlast_mirrored_offset=1\n",
            6,
            TrailingContent("last_mirrored_offset=1".into()),
        ),
        (
            b"1\nSTOPPING\nstep=TRUNCATED\nsource=A\nlso=1\nlast_mirrored_offset=1\n",
            7,
            MissingLine("last_mirrored_epoch"),
        ),
        (
            b"1\nSTOPPING\nstep=TRUNCATED\nsource=A\nlso=1\nlast_mirrored_offset=1\n\
              last_mirrored_epoch=-2\n",
            7,
            BadEpoch {
                key: "last_mirrored_epoch",
                value: "-2".into(),
            },
        ),
        (
            b"1\nSTOPPING\nstep=EPOCH_BUMPED\nsource=A\nlso=1\nlast_mirrored_offset=1\n\
              last_mirrored_epoch=0\n",
            8,
            MissingLine("leader_epoch"),
        ),
        (
            b"1\nSTOPPING\nstep=EPOCH_BUMPED\nsource=A\nlso=1\nlast_mirrored_offset=1\n\
              last_mirrored_epoch=0\nleader_epoch=-1\n",
            8,
            BadEpoch {
                key: "leader_epoch",
                value: "-1".into(),
            },
        ),
        (
            b"1\nSTOPPED\nbarrier_offset= 5\n",
            3,
            BadOffset {
                key: "barrier_offset",
                value: " 5".into(),
            },
        ),
        (
            b"1\nSTOPPED\nbarrier_offset=5\n\n",
            4,
            TrailingContent("".into()),
        ),
        (b"1\r\nLOCAL\r\n", 1, UnsupportedVersion("1\r".into())),
        (b"1\nMIRRORING\nsource=\xc3\n", 3, NotUtf8),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MIRROR_STATE_FILE);
    for (bytes, line, reason) in cases {
        assert_eq!(
            decode_mirror_state(bytes),
            Err((line, reason.clone())),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
        std::fs::write(&path, bytes).unwrap();
        let err = MirrorStateFile::in_dir(dir.path()).load().unwrap_err();
        let MirrorStateError::Malformed {
            path: p,
            line: l,
            reason: r,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!((p.as_path(), *l, r), (path.as_path(), line, &reason));
    }
    std::fs::write(&path, b"1\nPAUSED\n").unwrap();
    let err = MirrorStateFile::in_dir(dir.path()).load().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "malformed mirror state {} line 2: unknown state \"PAUSED\"",
            path.display()
        )
    );
}

/// `StdIo` whose atomic writes fail before touching the file.
#[derive(Debug)]
struct FailingWrites;

impl SnapshotIo for FailingWrites {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        StdIo.read(path)
    }
    fn write_atomically(&self, _: &Path, _: &[u8]) -> io::Result<()> {
        Err(io::Error::other("disk full"))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdIo.list(dir)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdIo.rename(from, to)
    }
    fn exists(&self, path: &Path) -> bool {
        StdIo.exists(path)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdIo.remove(path)
    }
}

#[test]
fn a_failed_state_write_keeps_the_old_state_and_the_partition_read_only() {
    let dir = tempfile::tempdir().unwrap();
    MirrorStateFile::in_dir(dir.path())
        .store(&mirroring("A"))
        .unwrap();
    let w = world(mirrored_log(), MirrorPartitionState::Local);
    let mut p = MirrorPartition::open(
        FakeLog(w.clone()),
        MirrorStateFile::with_io(dir.path(), FailingWrites),
    )
    .unwrap();
    assert_eq!(*p.state(), mirroring("A"));
    let err = p.stop().unwrap_err();
    let MirrorError::State(MirrorStateError::Io { op, .. }) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*op, "writing mirror state");
    assert!(err.to_string().ends_with("disk full"), "{err}");
    assert_eq!(*p.state(), mirroring("A"));
    assert!(!p.accepts_client_appends());
    assert_eq!(w.borrow().live, mirrored_log(), "log untouched");
    assert_eq!(
        MirrorStateFile::in_dir(dir.path()).load().unwrap(),
        mirroring("A")
    );
}

#[test]
fn stop_through_the_real_file_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let w = world(mirrored_log(), MirrorPartitionState::Local);
    MirrorStateFile::in_dir(dir.path())
        .store(&stopped_earlier())
        .unwrap();
    let mut p =
        MirrorPartition::open(FakeLog(w.clone()), MirrorStateFile::in_dir(dir.path())).unwrap();
    p.start_mirroring("A", &same_history(&w)).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(MIRROR_STATE_FILE)).unwrap(),
        "2\nMIRRORING\nsource=A\nleader_epoch=11\n"
    );
    assert_eq!(p.stop().unwrap(), 6);
    let (log, _) = p.into_parts();
    let p = MirrorPartition::open(log, MirrorStateFile::in_dir(dir.path())).unwrap();
    assert_eq!(
        *p.state(),
        MirrorPartitionState::Stopped {
            barrier_offset: 6,
            last_mirror_epoch: 1,
        }
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(MIRROR_STATE_FILE)).unwrap(),
        "2\nSTOPPED\nbarrier_offset=6\nlast_mirror_epoch=1\n"
    );
}
