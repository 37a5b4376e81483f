//! Applying a plan: the snapshot operations, the quarantine directory, the file moves, the
//! rebuilt segments, and the report of what was done.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use segment_store::internals::segment_file_path;
use segment_store::{DirLock, LocalLog};

use super::leftovers::unused_quarantine_number;
use super::types::{
    replaced_path, sorted_unique, LeftoverAction, RecoveryPlan, SnapshotOp, SnapshotPhase,
};
use crate::error::SnapshotError;
use crate::leader_epoch::LeaderEpochFileCache;
use crate::loader::{
    move_into_quarantine, remove_empty_quarantine_dir, remove_segment_file, rename_segment_file,
    CutInfo, RecoveryReport, QUARANTINE_DIR,
};
use crate::log::{PartitionLog, PartitionLogError};
use crate::mirror::{MirrorStateFile, MirrorStateStore};
use crate::snapshot::{SnapshotIo, StorageIo};

fn apply_snapshot_op(
    plan: &RecoveryPlan,
    io: &StorageIo,
    op: &SnapshotOp,
) -> Result<(), PartitionLogError> {
    let env = &plan.options.config.env;
    let err = |path: &Path, op: &'static str| {
        let path = path.to_path_buf();
        move |source| PartitionLogError::Snapshot(SnapshotError::Io { path, op, source })
    };
    match op {
        SnapshotOp::Write { path, bytes } => io
            .write_atomically(path, bytes)
            .map_err(err(path, "writing producer snapshot")),
        SnapshotOp::SetAside { from, to } => io
            .rename(from, to)
            .map_err(err(from, "setting aside corrupt snapshot")),
        SnapshotOp::Quarantine { from, to } => move_into_quarantine(env, from, to, &plan.dir),
        SnapshotOp::Remove { path } => io.remove(path).map_err(err(path, "deleting snapshot")),
    }
}

/// Creates the plan's quarantine folder durably (both new directory entries synced), as a new
/// folder: if one of its name exists by now, the next unused number is taken instead (the plan's
/// folder and the snapshots it moves there follow), so nothing is ever written into a folder
/// that holds an earlier recovery's files.
fn create_quarantine_dir(plan: &mut RecoveryPlan) -> Result<(), PartitionLogError> {
    let storage = Arc::clone(&plan.options.config.env.storage);
    let root = plan.dir.join(QUARANTINE_DIR);
    storage.create_dir_all(&root)?;
    loop {
        match storage.create_dir(&plan.quarantine_dir) {
            Ok(()) => break,
            Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
                let n = unused_quarantine_number(&storage.list_dir(&root)?);
                let next = root.join(format!("{n:04}"));
                for (_, op) in &mut plan.snapshot_ops {
                    if let SnapshotOp::Quarantine { to, .. } = op {
                        if let Ok(name) = to.strip_prefix(&plan.quarantine_dir) {
                            *to = next.join(name);
                        }
                    }
                }
                plan.quarantine_dir = next;
            }
            Err(e) => return Err(e.into()),
        }
    }
    storage.sync_dir(&root)?;
    storage.sync_dir(&plan.dir)?;
    Ok(())
}

/// Steps 1 and 2 of applying: the quarantine folder created if the plan puts something aside,
/// leftovers handled (a live file a `.swap` replaces set aside into that folder first), the
/// segments after the first cut moved into it (before the segments are opened, which would create
/// or resize their indexes). Returns the files moved and whether the quarantine folder was
/// created.
fn apply_moves(plan: &mut RecoveryPlan) -> Result<(Vec<PathBuf>, bool), PartitionLogError> {
    // Only a plan that puts something aside creates a quarantine folder.
    let needs_qdir = plan.leftovers.iter().any(|a| !a.is_temp())
        || plan.scans.iter().any(|s| s.truncated_bytes() > 0)
        || !plan.quarantined_segments.is_empty()
        || plan
            .snapshot_ops
            .iter()
            .any(|(_, op)| matches!(op, SnapshotOp::Quarantine { .. }))
        || plan.start_at_checkpoint;
    if needs_qdir {
        create_quarantine_dir(plan)?;
    }
    let plan = &*plan;
    let env = &plan.options.config.env;
    let mut quarantined = Vec::new();
    for a in &plan.leftovers {
        match a {
            LeftoverAction::Remove { path, kind } => remove_segment_file(env, path, *kind)?,
            LeftoverAction::Rename { from, to, kind } => rename_segment_file(env, from, to, *kind)?,
            LeftoverAction::SetAside { path, kind } | LeftoverAction::Quarantine { path, kind } => {
                let to = a
                    .set_aside_to(&plan.quarantine_dir)
                    .unwrap_or_else(|| replaced_path(&plan.quarantine_dir, path));
                rename_segment_file(env, path, &to, *kind)?;
                quarantined.push(to);
            }
        }
    }
    if !quarantined.is_empty() {
        env.storage.sync_dir(&plan.quarantine_dir)?;
    }
    if !plan.leftovers.is_empty() {
        env.storage.sync_dir(&plan.dir)?;
    }
    for seg in plan
        .segments
        .iter()
        .filter(|s| plan.is_quarantined(s.base_offset))
    {
        for (kind, path) in seg.files(&plan.dir) {
            let to = segment_file_path(&plan.quarantine_dir, seg.base_offset, kind);
            rename_segment_file(env, &path, &to, kind)?;
            quarantined.push(to);
        }
    }
    if !plan.quarantined_segments.is_empty() {
        env.storage.sync_dir(&plan.quarantine_dir)?;
        env.storage.sync_dir(&plan.dir)?;
    }
    Ok((quarantined, needs_qdir))
}

/// What installing the plan's scans did, for the report.
#[derive(Default)]
struct Installed {
    segments_scanned: usize,
    batches_scanned: u64,
    bytes_scanned: u64,
    kept_bytes: u64,
    cut: Vec<CutInfo>,
}

/// Step 3 of applying: the leader epochs the scans found, then each scanned segment's scan
/// installed (cut bytes quarantined first, later segments moved to quarantine: added to
/// `quarantined`).
fn apply_scans(
    plan: &RecoveryPlan,
    local: &LocalLog,
    epochs: &mut LeaderEpochFileCache,
    quarantined: &mut Vec<PathBuf>,
) -> Result<Installed, PartitionLogError> {
    let mut done = Installed::default();
    let Some(base) = plan.recovered_from.filter(|_| !plan.scans.is_empty()) else {
        return Ok(done);
    };
    for &(epoch, offset) in &plan.epoch_assignments {
        epochs.assign(epoch, offset)?;
    }
    let (outcomes, moved) = local.install_scans(base, &plan.scans, &plan.quarantine_dir)?;
    for (segment, o) in &outcomes {
        done.segments_scanned += 1;
        done.batches_scanned += o.batches;
        done.bytes_scanned += o.valid_bytes + o.truncated_bytes;
        done.kept_bytes += o.valid_bytes;
        if let (Some((position, reason)), Some(file)) = (&o.truncated_at, &o.quarantine_file) {
            done.cut.push(CutInfo {
                segment: *segment,
                position: *position,
                bytes: o.truncated_bytes,
                reason: reason.clone(),
                quarantined_to: file.clone(),
            });
        }
    }
    quarantined.extend(moved);
    Ok(done)
}

pub(super) fn apply_with(
    mut plan: RecoveryPlan,
    lock: DirLock,
) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
    let opts = plan.options.clone();
    let env = &opts.config.env;
    let dir = plan.dir.clone();
    let io = StorageIo::new(Arc::clone(&env.storage));

    // 1. and 2. Leftovers; the segments after the first cut to quarantine.
    let (mut quarantined, needs_qdir) = apply_moves(&mut plan)?;

    // 3. The segments, as they are (the active one's next offset from the plan).
    let open_end = plan
        .segments
        .last()
        .map_or(0, |s| s.next_offset.unwrap_or(s.base_offset));
    let (local, _) = LocalLog::open_planned(
        &dir,
        opts.config.log.log.clone(),
        plan.recovery_point,
        env.clone(),
        lock,
        open_end,
    )?;
    let mut epochs = LeaderEpochFileCache::open(Arc::clone(&env.storage), &dir)?;

    // 3. Recovery: snapshots of the scan, the scans written (cut bytes quarantined first),
    // later segments moved to quarantine.
    let mut ops = plan.snapshot_ops.iter().peekable();
    let mut quarantine_dir = None;
    // The snapshots taken at the recovered segments' boundaries first (each durable), then the
    // segments. One thread: the order of the writes is the plan's, the same in every run (the
    // crash tests count on it).
    while let Some((SnapshotPhase::BeforeInstall, op)) = ops.peek() {
        apply_snapshot_op(&plan, &io, op)?;
        if let SnapshotOp::Quarantine { to, .. } = op {
            quarantined.push(to.clone());
        }
        ops.next();
    }
    let installed = apply_scans(&plan, &local, &mut epochs, &mut quarantined)?;
    // Snapshots beyond the log end go with the quarantined data.
    while let Some((_, op @ SnapshotOp::Quarantine { to, .. })) = ops.peek() {
        apply_snapshot_op(&plan, &io, op)?;
        quarantined.push(to.clone());
        ops.next();
    }

    // 4. Log start offset.
    let mut log_end = local.log_end_offset();
    if plan.start_at_checkpoint {
        let moved =
            local.quarantine_fully_and_start_at(opts.log_start_offset, &plan.quarantine_dir)?;
        quarantined.extend(moved);
        epochs.clear()?;
        log_end = opts.log_start_offset;
    } else if opts.log_start_offset > local.log_start_offset() {
        local.increment_log_start_offset(opts.log_start_offset)?;
    }
    // Snapshot operations still to come may move files into the quarantine folder too.
    let later_moves = ops
        .clone()
        .any(|(_, op)| matches!(op, SnapshotOp::Quarantine { .. }));
    if needs_qdir {
        if installed.cut.is_empty() && quarantined.is_empty() && !later_moves {
            remove_empty_quarantine_dir(env, &plan.quarantine_dir);
        } else {
            quarantine_dir = Some(plan.quarantine_dir.clone());
        }
    }
    let log_start = local.log_start_offset();
    epochs.truncate_from_end(log_end)?;
    epochs.truncate_from_start(log_start)?;

    // 5. Producer state: the plan's, with its remaining snapshot operations.
    for (_, op) in ops {
        apply_snapshot_op(&plan, &io, op)?;
        if let SnapshotOp::Quarantine { to, .. } = op {
            quarantined.push(to.clone());
        }
    }
    let report = RecoveryReport {
        recovery_point: if plan.recovery_skipped() {
            log_end
        } else {
            plan.recovery_point
        },
        quarantine_dir,
        log_start_offset: log_start,
        log_end_offset: log_end,
        ..applied_report(&plan, installed, quarantined)
    };
    let mut log = PartitionLog {
        dir: dir.clone(),
        local: Arc::new(local),
        psm: plan.producers,
        epochs,
        high_watermark: log_start,
        config: opts.config.log.clone(),
        clock: Arc::clone(&env.clock),
        io: io.clone(),
        mirror: MirrorStateFile::with_io(&dir, io.clone()).load()?,
        hw_state: Default::default(),
        published: Arc::new(arc_swap::ArcSwap::from_pointee(crate::ReadState {
            high_watermark: log_start,
            last_stable_offset: log_start,
            epochs: Arc::from(Vec::new()),
            leader_epoch: 0,
            log_start_offset: log_start,
            log_end_offset: log_start,
            recovery_point: log_start,
            truncations: 0,
        })),
    };
    log.set_high_watermark(opts.high_watermark.unwrap_or(log_start));
    // Only a checkpoint written before a clean shutdown is the high watermark; after an unclean
    // one it may be stale, and a missing entry says nothing. Until it is re-established
    // (`load_log_dir`: `PartitionLog::reestablish_high_watermark`) or set by the caller, it is
    // not known: a mirror stop refuses instead of cutting committed data below the log end.
    if (!opts.had_clean_shutdown || opts.high_watermark.is_none())
        && log.log_end_offset() > log.high_watermark()
    {
        log.mark_high_watermark_unknown();
    }
    log.publish();
    Ok((log, report))
}

fn applied_report(
    plan: &RecoveryPlan,
    installed: Installed,
    quarantined: Vec<PathBuf>,
) -> RecoveryReport {
    RecoveryReport {
        partition: plan
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        had_clean_shutdown: plan.had_clean_shutdown,
        recovery_point: plan.recovery_point,
        recovered_from: plan.recovered_from,
        segments_scanned: installed.segments_scanned,
        batches_scanned: installed.batches_scanned,
        bytes_scanned: installed.bytes_scanned,
        kept_bytes: installed.kept_bytes,
        cut: installed.cut,
        quarantined_segments: sorted_unique(quarantined),
        snapshots_set_aside: plan
            .snapshot_ops
            .iter()
            .filter_map(|(_, op)| match op {
                SnapshotOp::SetAside { to, .. } => Some(to.clone()),
                _ => None,
            })
            .collect(),
        quarantine_dir: None,
        temp_files_handled: plan
            .leftovers
            .iter()
            .filter(|a| a.is_temp())
            .map(|a| a.path().to_path_buf())
            .collect(),
        warnings: plan.warnings.clone(),
        expired_producers: plan.expired_producers.clone(),
        log_start_offset: plan.log_start_offset,
        log_end_offset: plan.log_end_offset,
        producers: plan.producers.producer_count(),
    }
}
