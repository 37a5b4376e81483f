//! KIP-1279 mirror partition states: the STOPPING steps are durable one by one, and a crash at
//! any of them, followed by a reopen and `resume`, ends in `Stopped` with **exactly one** barrier
//! at the truncation point; the partition never accepts client appends before that barrier is
//! durable. Also the `mirror-state` file format (golden bytes, malformed files with line numbers,
//! write faults) and `start_mirroring` for failback.
//!
//! The fake log is a vector of batches (one offset each) with a live and a durable image, like
//! redb's `CrashBackend`: `flush` copies live to durable, and a crash keeps either image (an
//! unlucky crash loses everything unflushed; a lucky one loses nothing). Every mutating operation
//! of the log and of the state store is numbered; `crash_at = n` makes operation `n` and all later
//! ones fail without effect.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::path::Path;
use std::rc::Rc;

use recovery::mirror::{
    decode_mirror_state, encode_mirror_state, MalformedReason, MirrorOp, MIRROR_STATE_FILE,
};
use recovery::{
    MirrorError, MirrorLog, MirrorPartition, MirrorPartitionState, MirrorStateError,
    MirrorStateFile, MirrorStateKind, MirrorStateStore, SnapshotIo, StdIo, StoppingStep,
};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Batch {
    /// A data batch; `stable == false` means part of an open transaction (LSO stops there).
    Data { stable: bool },
    /// A `MIRROR_PID_RESET` barrier with its source cluster id.
    Barrier(String),
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
    /// The persisted mirror state (the fake store writes atomically and durably).
    state: MirrorPartitionState,
    ops: usize,
    crash_at: Option<usize>,
    crashed: bool,
    /// Successful `append_barrier` calls.
    barrier_appends: usize,
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

    /// The machine crashes: keep one image, forget the injected fault.
    fn crash(&mut self, image: CrashImage) {
        match image {
            CrashImage::Durable => self.live = self.durable.clone(),
            CrashImage::Live => self.durable = self.live.clone(),
        }
        self.crashed = false;
        self.crash_at = None;
    }
}

type Shared = Rc<RefCell<World>>;

fn world(log: Vec<Batch>, state: MirrorPartitionState) -> Shared {
    Rc::new(RefCell::new(World {
        durable: log.clone(),
        live: log,
        state,
        ops: 0,
        crash_at: None,
        crashed: false,
        barrier_appends: 0,
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

impl MirrorLog for FakeLog {
    type Error = Crash;

    fn last_stable_offset(&self) -> i64 {
        let w = self.0.borrow();
        offset(
            w.live
                .iter()
                .position(|b| *b == OPEN)
                .unwrap_or(w.live.len()),
        )
    }

    fn log_end_offset(&self) -> i64 {
        offset(self.0.borrow().live.len())
    }

    fn truncate_to(&mut self, to: i64) -> Result<(), Crash> {
        let mut w = self.0.borrow_mut();
        w.op("truncate")?;
        w.live.truncate(usize::try_from(to).unwrap());
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

    fn append_barrier(&mut self, source_cluster_id: &str) -> Result<i64, Crash> {
        let mut w = self.0.borrow_mut();
        w.op("append barrier")?;
        w.live.push(Barrier(source_cluster_id.to_owned()));
        w.barrier_appends += 1;
        Ok(offset(w.live.len() - 1))
    }

    fn flush(&mut self) -> Result<(), Crash> {
        let mut w = self.0.borrow_mut();
        w.op("flush")?;
        w.durable = w.live.clone();
        Ok(())
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
            MirrorPartitionState::Stopped { barrier_offset } => {
                let at = usize::try_from(*barrier_offset).unwrap();
                assert!(
                    matches!(w.durable.get(at), Some(Barrier(_))),
                    "Stopped persisted before the barrier at {at} is durable: {:?}",
                    w.durable
                );
            }
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                last_mirrored_offset: Some(point),
                ..
            } => assert_eq!(
                offset(w.durable.len()),
                *point,
                "Truncated persisted before the truncation is durable"
            ),
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

/// A mirrored log: stable data, a barrier propagated from upstream (chain A→B→here) at offset 2,
/// more stable data up to offset 5, then an open transaction at 6..=7. LSO = 6.
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

fn mirroring(source: &str) -> MirrorPartitionState {
    MirrorPartitionState::Mirroring {
        source_cluster_id: source.into(),
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
        MirrorPartitionState::Stopped { barrier_offset: 6 },
        "{ctx}"
    );
    assert!(p.accepts_client_appends(), "{ctx}");
    let w = w.borrow();
    assert_eq!(w.live, expected_after_stop(), "{ctx}");
    assert_eq!(w.durable, w.live, "{ctx}: not durable");
    assert_eq!(barriers(&w.durable, "A"), 1, "{ctx}");
    assert_eq!(w.state, MirrorPartitionState::Stopped { barrier_offset: 6 });
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
    // store FeedStopped, truncate, flush, store Truncated, truncate (no-op), append, flush,
    // store Stopped.
    assert_eq!(clean_stop_ops(), 8);
}

/// The state after a crash must never be writable without a durable barrier, and the in-memory
/// state must match what was persisted.
fn assert_read_only_unless_stopped(w: &Shared, p: &MirrorPartition<FakeLog, FakeStore>) {
    let persisted = w.borrow().state.clone();
    assert_eq!(*p.state(), persisted);
    match persisted {
        MirrorPartitionState::Stopped { barrier_offset } => {
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

/// Reopen after a crash as the coordinator does: `resume` finishes a persisted `Stopping`; a stop
/// that never persisted its first step left `Mirroring`, and the coordinator issues `stop` again.
fn reopen_and_finish(w: &Shared, ctx: &str) -> MirrorPartition<FakeLog, FakeStore> {
    let mut p = open(w);
    assert_read_only_unless_stopped(w, &p);
    let survived = barriers(&w.borrow().live, "A") == 1;
    let appends = w.borrow().barrier_appends;
    let before = p.state().kind();
    let after = p.resume().unwrap().kind();
    match before {
        MirrorStateKind::Mirroring => {
            assert_eq!(after, MirrorStateKind::Mirroring, "{ctx}");
            assert_eq!(p.stop().unwrap(), 6, "{ctx}");
        }
        _ => assert_eq!(after, MirrorStateKind::Stopped, "{ctx}"),
    }
    if survived {
        assert_eq!(
            w.borrow().barrier_appends,
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
                let second_crashed = p.resume().is_err() || p.stop().is_err();
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
    w.borrow_mut().crash_at = Some(7);
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
        w.borrow().barrier_appends,
        1,
        "the live barrier was not rewritten"
    );
}

#[test]
fn resume_truncates_to_the_lower_lso_when_the_unflushed_tail_was_lost() {
    // Ten stable batches, only five of them durable. The feed stops with LSO 10; the machine
    // crashes before the truncation; after reopen the log ends at 5.
    let live = vec![STABLE; 10];
    let w = world(live, mirroring("A"));
    w.borrow_mut().durable.truncate(5);
    w.borrow_mut().crash_at = Some(2);
    open(&w).stop().unwrap_err();
    assert_eq!(
        w.borrow().state,
        MirrorPartitionState::Stopping {
            step: StoppingStep::FeedStopped,
            source_cluster_id: "A".into(),
            lso: 10,
            last_mirrored_offset: None,
        }
    );
    w.borrow_mut().crash(CrashImage::Durable);
    let mut p = open(&w);
    p.resume().unwrap();
    assert_eq!(
        *p.state(),
        MirrorPartitionState::Stopped { barrier_offset: 5 }
    );
    let mut expected = vec![STABLE; 5];
    expected.push(Barrier("A".into()));
    assert_eq!(w.borrow().durable, expected);
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
        &MirrorPartitionState::Stopped { barrier_offset: 6 }
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
    w.borrow_mut().crash_at = Some(2);
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

#[test]
fn start_mirroring_truncates_to_the_lso_first() {
    let w = world(
        vec![STABLE, STABLE, OPEN, STABLE],
        MirrorPartitionState::Local,
    );
    let mut p = open(&w);
    p.start_mirroring("A").unwrap();
    assert_eq!(*p.state(), mirroring("A"));
    assert!(!p.accepts_client_appends());
    assert!(p.accepts_mirrored_appends());
    let w = w.borrow();
    assert_eq!(w.durable, vec![STABLE, STABLE]);
    assert_eq!(w.state, mirroring("A"));
}

#[test]
fn start_mirroring_crash_before_the_state_is_persisted_stays_writable() {
    for crash_at in 1..=2 {
        let w = world(vec![STABLE, OPEN], MirrorPartitionState::Local);
        w.borrow_mut().crash_at = Some(crash_at);
        let mut p = open(&w);
        p.start_mirroring("A").unwrap_err();
        assert_eq!(*p.state(), MirrorPartitionState::Local);
        w.borrow_mut().crash(CrashImage::Durable);
        let mut p = open(&w);
        assert!(p.accepts_client_appends());
        p.start_mirroring("A").unwrap();
        assert_eq!(w.borrow().durable, vec![STABLE]);
    }
}

#[test]
fn start_mirroring_transitions() {
    let w = world(vec![], mirroring("A"));
    let mut p = open(&w);
    p.start_mirroring("A").unwrap();
    assert_eq!(w.borrow().ops, 0, "same source: nothing to do");
    let err = p.start_mirroring("B").unwrap_err();
    assert!(
        matches!(&err, MirrorError::SourceMismatch { current, requested }
            if current == "A" && requested == "B"),
        "{err:?}"
    );
    for bad in ["", "a\nb", "\t"] {
        assert!(matches!(
            p.start_mirroring(bad),
            Err(MirrorError::InvalidSourceClusterId(ref id)) if id == bad
        ));
    }

    let w = world(mirrored_log(), mirroring("A"));
    w.borrow_mut().crash_at = Some(2);
    let mut p = open(&w);
    p.stop().unwrap_err();
    {
        let mut w = w.borrow_mut();
        w.crashed = false;
        w.crash_at = None;
    }
    assert!(matches!(
        p.start_mirroring("A"),
        Err(MirrorError::InvalidTransition {
            from: MirrorStateKind::Stopping,
            op: MirrorOp::StartMirroring
        })
    ));
}

#[test]
fn failback_cycle_writes_one_barrier_per_stop() {
    // B mirrors A, fails over (barrier "A"), takes local writes; later B mirrors again (from the
    // old source, now a follower of the promoted side) and stops again (barrier "A" again).
    let w = world(vec![], MirrorPartitionState::Local);
    let mut p = open(&w);
    p.start_mirroring("A").unwrap();
    w.borrow_mut().live.extend([STABLE, STABLE, OPEN]);
    assert_eq!(p.stop().unwrap(), 2);
    assert!(p.accepts_client_appends());
    w.borrow_mut().live.extend([STABLE, OPEN]); // local writes after failover
    p.start_mirroring("A").unwrap();
    assert_eq!(w.borrow().durable.len(), 4, "truncated to the LSO");
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
}

// ------------------------------------------------------------------------------------------------
// The mirror-state file
// ------------------------------------------------------------------------------------------------

#[test]
fn file_golden_bytes() {
    let cases = [
        (MirrorPartitionState::Local, "0\nLOCAL\n"),
        (mirroring("lkc-9x8Q"), "0\nMIRRORING\nsource=lkc-9x8Q\n"),
        (
            MirrorPartitionState::Stopping {
                step: StoppingStep::FeedStopped,
                source_cluster_id: "A".into(),
                lso: 120,
                last_mirrored_offset: None,
            },
            "0\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=120\n",
        ),
        (
            MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: "A".into(),
                lso: 120,
                last_mirrored_offset: Some(118),
            },
            "0\nSTOPPING\nstep=TRUNCATED\nsource=A\nlso=120\nlast_mirrored_offset=118\n",
        ),
        (
            MirrorPartitionState::Stopped {
                barrier_offset: 118,
            },
            "0\nSTOPPED\nbarrier_offset=118\n",
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
        (b"0", 1, MissingLine("version")),
        (b"1\nLOCAL\n", 1, UnsupportedVersion("1".into())),
        (b"00\nLOCAL\n", 1, UnsupportedVersion("00".into())),
        (b"0\n", 2, MissingLine("state")),
        (b"0\nPAUSED\n", 2, UnknownState("PAUSED".into())),
        (b"0\nlocal\n", 2, UnknownState("local".into())),
        (b"0\nMIRRORING\n", 3, MissingLine("source")),
        (b"0\nMIRRORING\nsource=\n", 3, BadSourceClusterId("".into())),
        (
            b"0\nMIRRORING\nsrc=A\n",
            3,
            ExpectedKey {
                expected: "source",
                found: "src=A".into(),
            },
        ),
        (
            b"0\nMIRRORING\nsource=A\nx\n",
            4,
            TrailingContent("x".into()),
        ),
        (b"0\nMIRRORING\nsource=A", 3, MissingLine("source")),
        (
            b"0\nSTOPPING\nstep=DONE\nsource=A\nlso=1\n",
            3,
            UnknownStep("DONE".into()),
        ),
        (
            b"0\nSTOPPING\nsource=A\nstep=FEED_STOPPED\nlso=1\n",
            3,
            ExpectedKey {
                expected: "step",
                found: "source=A".into(),
            },
        ),
        (
            b"0\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=-1\n",
            5,
            BadOffset {
                key: "lso",
                value: "-1".into(),
            },
        ),
        (
            b"0\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=99999999999999999999\n",
            5,
            BadOffset {
                key: "lso",
                value: "99999999999999999999".into(),
            },
        ),
        (
            b"0\nSTOPPING\nstep=TRUNCATED\nsource=A\nlso=1\n",
            6,
            MissingLine("last_mirrored_offset"),
        ),
        (
            b"0\nSTOPPING\nstep=FEED_STOPPED\nsource=A\nlso=1\nlast_mirrored_offset=1\n",
            6,
            TrailingContent("last_mirrored_offset=1".into()),
        ),
        (
            b"0\nSTOPPED\nbarrier_offset= 5\n",
            3,
            BadOffset {
                key: "barrier_offset",
                value: " 5".into(),
            },
        ),
        (
            b"0\nSTOPPED\nbarrier_offset=5\n\n",
            4,
            TrailingContent("".into()),
        ),
        (b"0\r\nLOCAL\r\n", 1, UnsupportedVersion("0\r".into())),
        (b"0\nMIRRORING\nsource=\xc3\n", 3, NotUtf8),
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
    std::fs::write(&path, b"0\nPAUSED\n").unwrap();
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
    let mut p =
        MirrorPartition::open(FakeLog(w.clone()), MirrorStateFile::in_dir(dir.path())).unwrap();
    p.start_mirroring("A").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join(MIRROR_STATE_FILE)).unwrap(),
        "0\nMIRRORING\nsource=A\n"
    );
    assert_eq!(p.stop().unwrap(), 6);
    let (log, _) = p.into_parts();
    let p = MirrorPartition::open(log, MirrorStateFile::in_dir(dir.path())).unwrap();
    assert_eq!(
        *p.state(),
        MirrorPartitionState::Stopped { barrier_offset: 6 }
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(MIRROR_STATE_FILE)).unwrap(),
        "0\nSTOPPED\nbarrier_offset=6\n"
    );
}
