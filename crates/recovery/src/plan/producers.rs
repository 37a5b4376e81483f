//! Producer-state planning: the snapshot findings, the producer state rebuilt up to the log
//! end, and the snapshot operations made safe (quarantine instead of delete, no identical
//! rewrites).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::segments::Sources;
use super::types::{SnapshotFate, SnapshotFinding, SnapshotOp, SnapshotPhase};
use super::{work, PlanCtx, PlanState};
use crate::error::SnapshotError;
use crate::loader::LoadOptions;
use crate::log::PartitionLogError;
use crate::snapshot::{list_snapshots_with, read_snapshot_with, SnapshotIo, StorageIo};

/// The snapshot files of `dir` that do not read back, and those beyond `log_end`, each with what
/// recovery does with it (from the plan's operations).
pub(super) fn snapshot_findings(
    opts: &LoadOptions,
    dir: &Path,
    ops: &[(SnapshotPhase, SnapshotOp)],
    log_end: i64,
) -> Result<Vec<SnapshotFinding>, PartitionLogError> {
    let io = StorageIo::new(Arc::clone(&opts.config.env.storage));
    let mut out = Vec::new();
    let files = match list_snapshots_with(&io, dir) {
        Ok(f) => f,
        Err(SnapshotError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Vec::new()
        }
        Err(e) => return Err(e.into()),
    };
    // What the last operation on each snapshot does with it.
    let mut fates: FxHashMap<&Path, SnapshotFate> = FxHashMap::default();
    for (_, op) in ops {
        let (path, fate) = match op {
            SnapshotOp::Write { path, .. } => (path, SnapshotFate::Rewritten),
            SnapshotOp::SetAside { from, .. } => (from, SnapshotFate::SetAside),
            SnapshotOp::Quarantine { from, .. } => (from, SnapshotFate::Quarantined),
            SnapshotOp::Remove { path } => (path, SnapshotFate::Deleted),
        };
        // A snapshot moved to quarantine stays there, whatever is written at its name later.
        if fates.get(path.as_path()) != Some(&SnapshotFate::Quarantined) {
            fates.insert(path, fate);
        }
    }
    for f in files {
        let error = match read_snapshot_with(&io, &f.path) {
            Ok(_) => None,
            Err(e @ SnapshotError::Corrupt { .. }) => Some(e),
            Err(e) => return Err(e.into()),
        };
        if error.is_none() && f.offset <= log_end {
            continue;
        }
        work::probe(1);
        let fate = fates
            .get(f.path.as_path())
            .copied()
            .unwrap_or(SnapshotFate::Kept);
        out.push(SnapshotFinding {
            path: f.path,
            offset: f.offset,
            error,
            fate,
        });
    }
    Ok(out)
}

/// The offsets a plan ends with.
pub(super) struct PlannedOffsets {
    pub(super) log_start: i64,
    pub(super) start_at_checkpoint: bool,
    pub(super) high_watermark: i64,
    pub(super) last_stable_offset: i64,
}

/// After recovery: the log start offset (the whole log quarantined if the checkpointed one is
/// past the log end), the producer state rebuilt up to the log end with its snapshot there
/// (`clean_unrecovered`: Kafka's shortcut for a clean shutdown without snapshots), the high
/// watermark and the LSO.
pub(super) fn plan_producer_state(
    cx: &PlanCtx<'_>,
    st: &mut PlanState,
    sources: &mut Sources<'_>,
    clean_unrecovered: bool,
    log_start_before: i64,
) -> Result<PlannedOffsets, PartitionLogError> {
    let (dir, io, opts) = (cx.dir, cx.io, cx.opts);
    // Log start offset.
    let mut log_start = log_start_before;
    let start_at_checkpoint = opts.log_start_offset > st.log_end;
    if start_at_checkpoint {
        st.psm.truncate_fully_and_start_at(opts.log_start_offset);
        st.log_end = opts.log_start_offset;
        log_start = opts.log_start_offset;
        let all: Vec<i64> = sources.open.keys().copied().collect();
        for b in all {
            sources.forget(b);
        }
    } else if opts.log_start_offset > log_start {
        log_start = opts.log_start_offset;
    }

    // Listed only when it matters (a full recovery's plan has a snapshot per segment here).
    if clean_unrecovered && list_snapshots_with(io, dir)?.is_empty() {
        // Kafka's shortcut: a clean shutdown without any snapshot (an upgrade) starts empty.
        st.psm.truncate_fully_and_start_at(st.log_end);
        st.psm.take_snapshot_with(io, dir)?;
    } else {
        let load = st
            .psm
            .truncate_and_reload_with(io, dir, log_start, st.log_end, cx.now)?;
        if let Some(f) = load.loaded {
            st.snapshot_loaded = Some(f.offset);
        }
        st.expired_producers.extend(load.expired_producers);
        let from = st.psm.map_end_offset().max(log_start);
        if st.log_end > from {
            st.replay(sources, from, st.log_end)?;
        }
        st.psm.update_map_end_offset(st.log_end);
        st.psm.take_snapshot_with(io, dir)?;
    }
    let high_watermark = opts
        .high_watermark
        .unwrap_or(log_start)
        .min(st.log_end)
        .max(log_start);
    st.psm.on_high_watermark_updated(high_watermark);
    let last_stable_offset = st.psm.last_stable_offset_for(high_watermark, log_start);
    Ok(PlannedOffsets {
        log_start,
        start_at_checkpoint,
        high_watermark,
        last_stable_offset,
    })
}

/// Turns each deletion of a snapshot the directory held before recovery into a move to
/// quarantine when the snapshot is out of the recovered log's range `[log start, log end]` or does
/// not read back: recovery deletes nothing it cannot rebuild (Kafka deletes them). A snapshot
/// inside the range that recovery deletes is one it takes again from the scanned batches; one
/// the plan wrote itself is removed as planned.
pub(super) fn quarantine_instead_of_delete(
    opts: &LoadOptions,
    ops: Vec<(SnapshotPhase, SnapshotOp)>,
    quarantine_dir: &Path,
    (log_start, log_end): (i64, i64),
) -> Vec<(SnapshotPhase, SnapshotOp)> {
    let io = StorageIo::new(Arc::clone(&opts.config.env.storage));
    let mut out: Vec<(SnapshotPhase, SnapshotOp)> = Vec::with_capacity(ops.len());
    // The paths the operations so far write, rename or remove.
    let mut touched: FxHashSet<PathBuf> = FxHashSet::default();
    for (phase, op) in ops {
        if let SnapshotOp::Write { path, .. } = &op {
            // A corrupt snapshot the write would replace goes to quarantine first.
            let untouched = !touched.contains(path);
            if untouched && io.exists(path) && read_snapshot_with(&io, path).is_err() {
                if let Some(name) = path.file_name() {
                    out.push((
                        phase,
                        SnapshotOp::Quarantine {
                            from: path.clone(),
                            to: quarantine_dir.join(name),
                        },
                    ));
                }
            }
        }
        let (a, b) = op_paths(&op);
        let (a, b) = (a.to_path_buf(), b.map(Path::to_path_buf));
        let SnapshotOp::Remove { path } = &op else {
            out.push((phase, op));
            touched.insert(a);
            touched.extend(b);
            continue;
        };
        // Touched before (written by this plan, moved or removed already): as planned.
        let written = touched.contains(path) || !io.exists(path);
        let offset = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(crate::snapshot::SNAPSHOT_SUFFIX))
            .and_then(|n| n.parse::<i64>().ok());
        let out_of_range = offset.is_none_or(|o| o < log_start || o > log_end);
        let keep = !written && (out_of_range || read_snapshot_with(&io, path).is_err());
        match (keep, path.file_name()) {
            (true, Some(name)) => {
                let to = quarantine_dir.join(name);
                out.push((
                    phase,
                    SnapshotOp::Quarantine {
                        from: path.clone(),
                        to,
                    },
                ));
            }
            _ => out.push((phase, op)),
        }
        touched.insert(a);
    }
    out
}

/// The paths an operation writes, renames or removes (both ends of a rename).
fn op_paths(op: &SnapshotOp) -> (&Path, Option<&Path>) {
    match op {
        SnapshotOp::Write { path, .. } | SnapshotOp::Remove { path } => (path, None),
        SnapshotOp::SetAside { from, to } | SnapshotOp::Quarantine { from, to } => (from, Some(to)),
    }
}

/// Drops each write of a snapshot the directory already holds byte for byte, with the removal
/// before it if there is one (what a full recovery does with the snapshot at the log end of a log
/// it does not cut): the file stays as it is, durable from the atomic write that made it, and no
/// fsync is spent rewriting it. Only when no other operation touches the path before the write.
pub(super) fn without_identical_rewrites(
    opts: &LoadOptions,
    ops: Vec<(SnapshotPhase, SnapshotOp)>,
) -> Vec<(SnapshotPhase, SnapshotOp)> {
    let io = StorageIo::new(Arc::clone(&opts.config.env.storage));
    // The operations touching each path, in order: a write looks at those of its own path only.
    let mut touching: FxHashMap<&Path, Vec<usize>> = FxHashMap::default();
    for (i, (_, op)) in ops.iter().enumerate() {
        let (a, b) = op_paths(op);
        touching.entry(a).or_default().push(i);
        if let Some(b) = b.filter(|b| *b != a) {
            touching.entry(b).or_default().push(i);
        }
    }
    let mut dropped = BTreeSet::new();
    for (j, (_, op)) in ops.iter().enumerate() {
        let SnapshotOp::Write { path, bytes } = op else {
            continue;
        };
        work::probe(1);
        let earlier: Vec<(usize, &SnapshotOp)> = touching
            .get(path.as_path())
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .copied()
            .take_while(|&i| i < j)
            .inspect(|_| work::probe(1))
            .filter(|i| !dropped.contains(i))
            .filter_map(|i| ops.get(i).map(|(_, o)| (i, o)))
            .collect();
        let removal = match earlier.as_slice() {
            [] => None,
            [(i, SnapshotOp::Remove { .. })] => Some(*i),
            _ => continue,
        };
        // Capped: a file longer than the one to write is not it, and is not read.
        if io
            .read_capped(path, bytes.len() as u64)
            .is_ok_and(|on_disk| on_disk == *bytes)
        {
            dropped.insert(j);
            dropped.extend(removal);
        }
    }
    ops.into_iter()
        .enumerate()
        .filter(|(i, _)| !dropped.contains(i))
        .map(|(_, op)| op)
        .collect()
}
