//! Recovery in two steps: [`LogLoader::plan`] reads a partition directory and decides everything
//! loading it would do and find, changing nothing; [`LogLoader::apply`] makes exactly those
//! changes and opens the partition. [`LogLoader::load`] is the two in a row, under one directory
//! lock; `seglog verify` and `seglog producers` print plans, `seglog recover` applies them.
//!
//! A plan holds, per partition:
//! * the leftovers of interrupted operations (`.deleted`, `.cleaned`, `.swap`, orphan indexes)
//!   and what happens to each (Kafka `removeTempFilesAndCollectSwapFiles` and swap completion);
//! * per segment its size, its index findings (Kafka's sanity checks over the bytes, through
//!   segment-store's index views), and — for each segment recovery scans — the scan itself
//!   ([`SegmentScan`]: valid prefix, cut position, bytes and typed reason, the rebuilt index
//!   entries and aborted transactions), so that applying does not read the `.log` again;
//! * the segments that would move to quarantine after a cut;
//! * every producer-snapshot operation, in order (set aside, written at each recovered segment
//!   boundary, moved to quarantine, deleted as out of range, written at the log end), recorded by
//!   running the producer-state rules against an overlay of the directory;
//! * the rebuilt producer state (snapshot loaded with expiry, batches replayed), the leader-epoch
//!   assignments, the log start and end offsets, the high watermark and the LSO.
//!
//! Planning takes no lock and writes nothing. [`LogLoader::load`] plans under the directory lock
//! it already holds, and maps the `.log` files under it; a plan made without the lock maps them
//! guarded (`segment_store::internals::GuardedMap`: a truncation under it reads as zeros and fails the
//! plan instead of raising `SIGBUS`), or reads them through the storage where it cannot map.

use std::path::Path;
use std::sync::Arc;

use segment_store::internals::SegmentScan;
use segment_store::DirLock;

use crate::audit::ProducerAudit;
use crate::leader_epoch::LeaderEpochFileCache;
use crate::loader::{LoadOptions, RecoveryReport};
use crate::log::{PartitionLog, PartitionLogError};
use crate::producer_state::{ExpiredProducer, ProducerStateManager, ProducerStateWarning};
use crate::snapshot::StorageIo;

mod apply;
mod indexes;
mod leftovers;
mod overlay;
mod producers;
mod segments;
mod types;

use apply::apply_with;
pub use indexes::MAX_ENTRY_FINDINGS;
use leftovers::{next_quarantine_dir, plan_leftovers};
use overlay::PlanIo;
use producers::{
    plan_producer_state, quarantine_instead_of_delete, snapshot_findings,
    without_identical_rewrites,
};
use segments::{plan_segments, recover_from, recovery_base, Sources};
pub use types::{
    IndexFinding, IndexProblem, LeftoverAction, RecoveryPlan, SegmentPlan, SnapshotFate,
    SnapshotFinding, SnapshotOp, SnapshotPhase,
};

/// The planner's lookup work, counted for the scaling test (`tests/recovery/scaling.rs`): every
/// element a lookup by base offset or path examines (each probe of a binary search, each element
/// a scan passes) and every map lookup (one each). Per thread: a plan runs its lookups on the
/// thread that plans. Not part of the API.
#[doc(hidden)]
pub mod work {
    use std::cell::Cell;

    thread_local! {
        static PROBES: Cell<u64> = const { Cell::new(0) };
    }

    /// Counts `n` elements examined.
    #[inline]
    pub(crate) fn probe(n: u64) {
        PROBES.with(|p| p.set(p.get().wrapping_add(n)));
    }

    /// The count on this thread so far; [`reset`] starts again from zero.
    pub fn probes() -> u64 {
        PROBES.with(Cell::get)
    }

    /// Sets this thread's count to zero.
    pub fn reset() {
        PROBES.with(|p| p.set(0));
    }
}

/// `items.binary_search_by(cmp)`, each probe counted in [`work`].
fn search_by<T>(
    items: &[T],
    mut cmp: impl FnMut(&T) -> std::cmp::Ordering,
) -> Result<usize, usize> {
    items.binary_search_by(|x| {
        work::probe(1);
        cmp(x)
    })
}

/// Kafka `LogLoader`: [`LogLoader::plan`] (read only), [`LogLoader::apply`] and
/// [`LogLoader::load`] (both, under one directory lock).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogLoader;

impl LogLoader {
    /// Plans loading the partition in `dir` with `opts`, reading only. See the module docs.
    /// Errors are the ones loading would fail with (an offset that does not fit its segment,
    /// offsets going backwards, a batch producer state refuses, I/O).
    pub fn plan(dir: &Path, opts: &LoadOptions) -> Result<RecoveryPlan, PartitionLogError> {
        plan_with(dir, opts, None, false)
    }

    /// [`Self::plan`], and the producer-id collision audit ([`ProducerAudit`]) over every batch
    /// the plan applies to producer state (with a full recovery: the whole valid log).
    pub fn plan_audited(dir: &Path, opts: &LoadOptions) -> Result<RecoveryPlan, PartitionLogError> {
        plan_with(dir, opts, None, true)
    }

    /// Makes the changes of `plan` (quarantine first: cut bytes are written and synced before a
    /// `.log` is truncated) and opens the partition. Takes the directory lock; a `.log` whose
    /// size changed since it was planned is refused.
    pub fn apply(plan: RecoveryPlan) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
        segment_store::internals::create_dir_all_durably(
            plan.options.config.env.storage.as_ref(),
            &plan.dir,
        )?;
        let lock = DirLock::acquire_in(plan.options.config.env.storage.as_ref(), &plan.dir)?;
        apply_with(plan, lock)
    }

    /// Loads the partition in `dir`: [`Self::plan`] and [`Self::apply`] under one directory lock.
    pub fn load(
        dir: &Path,
        opts: &LoadOptions,
    ) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
        segment_store::internals::create_dir_all_durably(opts.config.env.storage.as_ref(), dir)?;
        // A `.lock` that is a symlink: refused before it is opened (nothing is created
        // through it).
        let lock_path = dir.join(segment_store::internals::LOCK_FILE_NAME);
        if let Some(
            found @ (segment_store::EntryType::Symlink
            | segment_store::EntryType::Dir
            | segment_store::EntryType::Other),
        ) = opts.config.env.storage.entry_type(&lock_path)?
        {
            return Err(PartitionLogError::Refused {
                path: lock_path,
                found,
            });
        }
        let lock = DirLock::acquire_in(opts.config.env.storage.as_ref(), dir)?;
        Self::load_with_lock(dir, opts, lock)
    }

    /// [`Self::load`] of a partition inside a log directory whose lock (`log_dir_lock`) the
    /// caller holds: no `.lock` of the partition's own is taken (Kafka locks once per log
    /// directory), and `dir` must be a directory in the locked one.
    pub fn load_with_lock(
        dir: &Path,
        opts: &LoadOptions,
        log_dir_lock: DirLock,
    ) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
        opts.config.env.storage.create_dir_all(dir)?;
        let plan = plan_with(dir, opts, Some(&log_dir_lock), false)?;
        apply_with(plan, log_dir_lock)
    }
}

/// What the steps of a plan read and record through.
struct PlanCtx<'a> {
    dir: &'a Path,
    opts: &'a LoadOptions,
    /// The overlay that records the snapshot operations.
    io: &'a PlanIo,
    /// The clock's time, for producer expiry.
    now: i64,
}

/// What a plan builds while it replays and scans the log.
struct PlanState {
    psm: ProducerStateManager,
    latest_epoch: Option<i32>,
    epoch_assignments: Vec<(i32, i64)>,
    warnings: Vec<ProducerStateWarning>,
    scans: Vec<SegmentScan>,
    quarantined_segments: Vec<i64>,
    snapshot_loaded: Option<i64>,
    expired_producers: Vec<ExpiredProducer>,
    batches_applied: u64,
    audit: Option<ProducerAudit>,
    log_end: i64,
}

impl PlanState {
    /// Nothing found yet: producer state `psm`, the leader-epoch cache's `latest_epoch`, the
    /// log end before recovery.
    fn new(
        psm: ProducerStateManager,
        latest_epoch: Option<i32>,
        audit: Option<ProducerAudit>,
        log_end: i64,
    ) -> Self {
        PlanState {
            psm,
            latest_epoch,
            epoch_assignments: Vec::new(),
            warnings: Vec::new(),
            scans: Vec::new(),
            quarantined_segments: Vec::new(),
            snapshot_loaded: None,
            expired_producers: Vec::new(),
            batches_applied: 0,
            audit,
            log_end,
        }
    }

    /// [`Sources::replay`] of `[from, to)` into the producer state, counted and audited.
    fn replay(
        &mut self,
        sources: &mut Sources<'_>,
        from: i64,
        to: i64,
    ) -> Result<(), PartitionLogError> {
        let (batches_applied, audit) = (&mut self.batches_applied, &mut self.audit);
        sources.replay(&mut self.psm, from, to, &mut |b| {
            *batches_applied += 1;
            if let Some(a) = audit.as_mut() {
                a.observe(b);
            }
        })
    }
}

fn plan_with(
    dir: &Path,
    opts: &LoadOptions,
    lock: Option<&DirLock>,
    audit: bool,
) -> Result<RecoveryPlan, PartitionLogError> {
    let env = &opts.config.env;
    let (leftovers, live, names) = plan_leftovers(opts, dir)?;
    let clean = opts.had_clean_shutdown && !opts.config.full_recovery;
    let recovery_point = if opts.config.full_recovery {
        0
    } else {
        opts.recovery_point
    };
    let mut found = plan_segments(dir, opts, lock, &live, audit)?;
    drop(live);
    let recover_base = recovery_base(opts, clean, recovery_point, &mut found)?;

    let now = env.clock.now_ms();
    let io = PlanIo::new(
        StorageIo::new(Arc::clone(&env.storage)),
        (dir.to_path_buf(), &names),
    );
    let psm = ProducerStateManager::new(opts.config.log.producer_state);
    let epochs = LeaderEpochFileCache::open(Arc::clone(&env.storage), dir)?;
    let latest_epoch = epochs.latest_epoch();
    let audit = audit.then(ProducerAudit::new);
    let quarantine_dir = next_quarantine_dir(opts, dir, &names)?;
    drop(names);
    let log_start_before = found.bases.first().copied().unwrap_or(0);
    let log_end = match found.segments.last() {
        Some(s) => s.next_offset.unwrap_or(s.base_offset),
        None => 0,
    };
    let mut st = PlanState::new(psm, latest_epoch, audit, log_end);
    let cx = PlanCtx {
        dir,
        opts,
        io: &io,
        now,
    };

    if let Some(base) = recover_base {
        recover_from(
            &cx,
            &mut st,
            &mut found,
            base,
            log_start_before,
            &quarantine_dir,
        )?;
    }
    io.set_phase(SnapshotPhase::AfterInstall);
    let offsets = plan_producer_state(
        &cx,
        &mut st,
        &mut found.sources,
        clean && recover_base.is_none(),
        log_start_before,
    )?;
    drop(found.sources);
    let snapshot_ops = quarantine_instead_of_delete(
        opts,
        without_identical_rewrites(opts, io.into_ops()),
        &quarantine_dir,
        (offsets.log_start, st.log_end),
    );
    let snapshot_findings = if st.audit.is_some() {
        snapshot_findings(opts, dir, &snapshot_ops, st.log_end)?
    } else {
        Vec::new()
    };

    Ok(RecoveryPlan {
        dir: dir.to_path_buf(),
        options: opts.clone(),
        had_clean_shutdown: opts.had_clean_shutdown,
        recovery_point,
        leftovers,
        segments: found.segments,
        recovered_from: recover_base,
        scans: st.scans,
        quarantined_segments: st.quarantined_segments,
        start_at_checkpoint: offsets.start_at_checkpoint,
        quarantine_dir,
        snapshot_ops,
        snapshot_findings,
        snapshot_loaded: st.snapshot_loaded,
        batches_applied: st.batches_applied,
        audit: st.audit.map(ProducerAudit::into_findings),
        epoch_assignments: st.epoch_assignments,
        warnings: st.warnings,
        expired_producers: st.expired_producers,
        producers: st.psm,
        log_start_offset: offsets.log_start,
        log_end_offset: st.log_end,
        high_watermark: offsets.high_watermark,
        last_stable_offset: offsets.last_stable_offset,
    })
}
