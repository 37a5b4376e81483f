//! Loading partition logs at startup (Kafka `LogLoader.load`, §6.2, and the loading half of
//! `LogManager`), with one deliberate difference: **recovery never destroys data**.
//!
//! Kafka truncates a segment at its first invalid batch and deletes every later segment. Here the
//! cut bytes are written to `<partition>/quarantine/<n>/<base>.log.cut-<position>` before the
//! `.log` is truncated (segment-store's `LogSegment::recover`), and every later segment is
//! *moved* (all its files) into the same `quarantine/<n>/` folder. The [`RecoveryReport`] says
//! what was kept, cut and moved, and why.
//!
//! Steps of [`LogLoader::load`] for one partition directory:
//! 1. delete `*.deleted`; delete `*.cleaned` and any `*.swap` at or above the smallest cleaned
//!    base offset (an interrupted split); for the remaining `.log.swap` segments delete the
//!    originals in the swapped range, then rename the swaps into place; delete orphan indexes;
//! 2. open the segments as they are;
//! 3. unless the shutdown was clean, recover every segment from the one containing the recovery
//!    point on (any segment whose indexes fail the sanity check too): CRC-validate every batch,
//!    rebuild the offset/time/transaction indexes, apply each batch to producer state
//!    (`Replication` origin, barriers included, snapshot at each segment boundary), and stop at
//!    the first invalid batch (quarantine as above);
//!    CRCs are checked on every core while this thread applies the batches in log order (see
//!    segment-store's `LogSegment::recover`); producer state is updated in place per batch and
//!    the per-segment snapshots are written by a writer thread, joined before the result is used;
//! 4. log start offset = max(checkpoint, first segment base) — a checkpoint above the log end
//!    (Kafka deletes every segment then) moves every non-empty segment into quarantine and starts
//!    the log empty at the checkpoint; leader-epoch cache truncated to
//!    the log; producer state from the newest valid snapshot at or below the log end (corrupt
//!    ones renamed `*.corrupt` and reported) plus a replay of the rest, or — clean shutdown and no
//!    snapshot at all — Kafka's shortcut of starting empty at the log end.
//!
//! [`load_log_dir`] loads a whole log directory as `LogManager` does: the root
//! `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
//! `replication-offset-checkpoint`, the `.kafka_cleanshutdown` marker (deleted at once, so a crash
//! during loading counts as unclean; written again by [`LogDir::close`]), one `<topic>-<partition>`
//! folder per partition (`-delete`, `-future`, `-stray` folders skipped), partitions recovered in
//! parallel.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use record_format::{Batches, FormatError};
use segment_store::file_name::{
    file_name, parse_file_name, parse_partition_dir_name, segment_file_path, FileKind,
    PartitionDirKind, TempSuffix, CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_store::{
    AbortedTxn, DirLock, LocalLog, LogEnv, OffsetCheckpointFile, OpenMode, TopicPartition,
};

use crate::error::SnapshotError;
use crate::leader_epoch::LeaderEpochFileCache;
use crate::log::{replay, PartitionLog, PartitionLogConfig, PartitionLogError};
use crate::producer_state::{AppliedBatches, ProducerStateManager, ProducerStateWarning};
use crate::snapshot::{
    list_snapshots_with, write_snapshot_with, SnapshotEntry, SnapshotIo, StorageIo,
};
use crate::summary::BatchSummary;

/// Name of the quarantine folder inside a partition directory.
pub const QUARANTINE_DIR: &str = "quarantine";

/// How to load one partition (default: unclean shutdown, recovery point 0, i.e. recover
/// everything).
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Settings of the log.
    pub config: PartitionLogConfig,
    /// Storage and clock.
    pub env: LogEnv,
    /// The log directory had a clean-shutdown marker: skip recovery.
    pub had_clean_shutdown: bool,
    /// The recovery point from the checkpoint (0: recover everything).
    pub recovery_point: i64,
    /// The log start offset from the checkpoint.
    pub log_start_offset: i64,
    /// The high watermark from the checkpoint (default: the log start offset).
    pub high_watermark: Option<i64>,
    /// Ignore the marker and the recovery point: recover every segment from the first.
    pub full: bool,
}

/// Bytes cut from a segment by recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutInfo {
    /// Base offset of the segment.
    pub segment: i64,
    /// Byte position of the cut (the end of the valid prefix).
    pub position: u64,
    /// Number of bytes cut.
    pub bytes: u64,
    /// Why the batch at `position` was not valid.
    pub reason: FormatError,
    /// The file holding the cut bytes.
    pub quarantined_to: PathBuf,
}

/// What loading one partition found and did.
#[derive(Debug)]
pub struct RecoveryReport {
    /// The partition directory's name.
    pub partition: String,
    /// Whether the shutdown was clean (recovery skipped unless an index failed its check).
    pub had_clean_shutdown: bool,
    /// The recovery point used (the log end after a clean shutdown; 0 with `full`).
    pub recovery_point: i64,
    /// Base offset of the first recovered segment (the one containing the recovery point, or an
    /// earlier one whose indexes failed the sanity check); `None` when nothing was recovered.
    pub recovered_from: Option<i64>,
    /// Segments recovered.
    pub segments_scanned: usize,
    /// Valid batches seen by recovery.
    pub batches_scanned: u64,
    /// Bytes of the recovered segments before recovery.
    pub bytes_scanned: u64,
    /// Bytes of the recovered segments after recovery.
    pub kept_bytes: u64,
    /// Bytes cut (at most one segment: recovery stops there).
    pub cut: Vec<CutInfo>,
    /// Files of later segments moved into quarantine (and stale snapshots above the new end).
    pub quarantined_segments: Vec<PathBuf>,
    /// Corrupt producer snapshots renamed to `*.corrupt` (their new paths).
    pub snapshots_set_aside: Vec<PathBuf>,
    /// The quarantine folder of this load, if anything was put there.
    pub quarantine_dir: Option<PathBuf>,
    /// Swap/cleaned/deleted files handled before opening (removed or renamed), by old path.
    pub temp_files_handled: Vec<PathBuf>,
    /// Producer-state warnings met while recovering (replication rules).
    pub warnings: Vec<ProducerStateWarning>,
    /// Log start offset after loading.
    pub log_start_offset: i64,
    /// Log end offset after loading.
    pub log_end_offset: i64,
    /// Number of producers in the loaded state.
    pub producers: usize,
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} shutdown, ",
            self.partition,
            if self.had_clean_shutdown {
                "clean"
            } else {
                "unclean"
            }
        )?;
        if self.segments_scanned == 0 {
            write!(f, "no recovery")?;
        } else {
            write!(
                f,
                "recovered {} segment(s) from base offset {}: {} batches, {} of {} bytes kept",
                self.segments_scanned,
                self.recovered_from.unwrap_or(self.recovery_point),
                self.batches_scanned,
                self.kept_bytes,
                self.bytes_scanned
            )?;
        }
        for c in &self.cut {
            write!(
                f,
                "; cut {} bytes of segment {} at byte {} ({}) -> {}",
                c.bytes,
                c.segment,
                c.position,
                c.reason,
                c.quarantined_to.display()
            )?;
        }
        if !self.quarantined_segments.is_empty() {
            write!(
                f,
                "; {} later file(s) moved to quarantine",
                self.quarantined_segments.len()
            )?;
        }
        if !self.snapshots_set_aside.is_empty() {
            write!(
                f,
                "; {} corrupt snapshot(s) set aside",
                self.snapshots_set_aside.len()
            )?;
        }
        write!(
            f,
            "; log [{}, {}), {} producer(s)",
            self.log_start_offset, self.log_end_offset, self.producers
        )
    }
}

fn io_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> PartitionLogError + 'a {
    move |source| PartitionLogError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// Whether files of `kind` live on the real file system rather than behind the storage seam: only
/// the memory-mapped offset and time indexes (see `segment_store::io`).
fn outside_the_seam(kind: FileKind) -> bool {
    matches!(kind, FileKind::Index | FileKind::TimeIndex)
}

/// Removes a segment file: `.log`, `.txnindex` and snapshots through the storage seam, the
/// mapped indexes on the real file system (where segment-store keeps them).
fn remove_segment_file(env: &LogEnv, path: &Path, kind: FileKind) -> Result<(), PartitionLogError> {
    if !outside_the_seam(kind) {
        return Ok(env.storage.remove_file(path)?);
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(path, "remove")(e)),
        _ => Ok(()),
    }
}

fn rename_segment_file(
    env: &LogEnv,
    from: &Path,
    to: &Path,
    kind: FileKind,
) -> Result<(), PartitionLogError> {
    if outside_the_seam(kind) {
        std::fs::rename(from, to).map_err(io_err(from, "rename"))
    } else {
        Ok(env.storage.rename(from, to)?)
    }
}

/// Kafka `LogLoader`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogLoader;

impl LogLoader {
    /// Loads the partition in `dir`. See the module docs.
    pub fn load(
        dir: &Path,
        opts: &LoadOptions,
    ) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
        let env = &opts.env;
        let io = StorageIo::new(Arc::clone(&env.storage));
        env.storage.create_dir_all(dir)?;
        let temp_files_handled = remove_temp_files_and_swaps(env, dir)?;
        let clean = opts.had_clean_shutdown && !opts.full;
        let recovery_point = if opts.full { 0 } else { opts.recovery_point };
        let (local, insane) =
            LocalLog::open_unrecovered(dir, opts.config.log.clone(), recovery_point, env.clone())?;
        let bases: Vec<i64> = local.segments().iter().map(|s| s.base_offset).collect();
        let first_base = bases.first().copied().unwrap_or(0);
        let mut recover_base = if clean {
            None
        } else if opts.full {
            Some(first_base)
        } else {
            Some(
                bases
                    .iter()
                    .copied()
                    .take_while(|&b| b <= recovery_point)
                    .last()
                    .unwrap_or(first_base),
            )
        };
        if let Some(&b) = insane.first() {
            recover_base = Some(recover_base.map_or(b, |r| r.min(b)));
        }

        let now = env.clock.now_ms();
        let mut psm = ProducerStateManager::new(opts.config.producer_state);
        let mut epochs = LeaderEpochFileCache::open(Arc::clone(&env.storage), dir)?;
        let mut snapshots_set_aside = Vec::new();
        let mut warnings = Vec::new();
        let mut segments_scanned = 0;
        let (mut batches_scanned, mut bytes_scanned, mut kept_bytes) = (0u64, 0u64, 0u64);
        let mut cut = Vec::new();
        let mut quarantined = Vec::new();
        let mut quarantine_dir = None;

        if let Some(base) = recover_base {
            // Producer state up to the first recovered segment: snapshot + replay.
            let log_start = local.log_start_offset();
            let load = psm.load_from_snapshot_with(&io, dir, log_start, base, now)?;
            snapshots_set_aside.extend(load.set_aside.into_iter().map(|s| s.moved_to));
            let from = psm.map_end_offset().max(log_start);
            if base > from {
                replay(&local, &mut psm, from, base)?;
            }
            psm.update_map_end_offset(psm.map_end_offset().max(base));

            let qdir = new_quarantine_dir(env, dir)?;
            let boundaries: Vec<i64> = bases.iter().copied().filter(|&b| b > base).collect();
            let mut next_boundary = 0usize;
            let mut applied = AppliedBatches::default();
            let mut rewritten = Vec::new();
            let (snapshot_tx, snapshot_rx) =
                std::sync::mpsc::channel::<Option<(i64, Vec<SnapshotEntry>)>>();
            let mut visitor = |batch: &record_format::RecordBatch<'_>,
                               aborted: &mut Vec<AbortedTxn>| {
                let summary = BatchSummary::from_batch(batch)?;
                while let Some(&b) = boundaries.get(next_boundary) {
                    if summary.base_offset < b {
                        break;
                    }
                    // Kafka takes a snapshot after each recovered segment. Written (and fsync'd)
                    // by the snapshot writer thread while the scan goes on.
                    psm.update_map_end_offset(psm.map_end_offset().max(b));
                    // A failed send means the writer stopped on an error, which joining it
                    // reports.
                    if psm.last_map_offset > psm.last_snap_offset
                        && snapshot_tx
                            .send(Some((psm.last_map_offset, psm.snapshot_entries())))
                            .is_ok()
                    {
                        psm.last_snap_offset = psm.last_map_offset;
                        rewritten.push(psm.last_map_offset);
                    }
                    next_boundary += 1;
                }
                let epoch = batch.partition_leader_epoch();
                if epoch >= 0 && epochs.latest_epoch().is_none_or(|l| epoch > l) {
                    epochs.assign(epoch, batch.base_offset())?;
                }
                // Kafka's LogSegment.updateProducerState: one batch at a time, in place.
                psm.apply_replicated_batch(&summary, &mut applied)?;
                warnings.append(&mut applied.warnings);
                aborted.extend(applied.aborted_txns.drain(..).map(|a| {
                    AbortedTxn::new(
                        a.producer_id,
                        a.first_offset,
                        a.last_offset,
                        a.last_stable_offset,
                    )
                }));
                applied.clear();
                Ok::<_, PartitionLogError>(())
            };
            let writer_io = io.clone();
            let recovered = std::thread::scope(|scope| {
                // Without a writer thread (none to be had) the sends fail and no snapshot is
                // taken during the scan; the one at the log end is still written below.
                let writer = std::thread::Builder::new()
                    .name("seglog-snapshots".into())
                    .spawn_scoped(scope, move || {
                        while let Ok(Some((offset, entries))) = snapshot_rx.recv() {
                            write_snapshot_with(&writer_io, dir, offset, &entries)?;
                        }
                        Ok::<_, SnapshotError>(())
                    })
                    .ok();
                let recovered = local.recover_from(base, &mut visitor, &qdir);
                // The writer has stopped if this fails; joining it tells why.
                snapshot_tx.send(None).ok();
                // Every snapshot is durable before the scan's result is used.
                let written = writer.map_or(Ok(()), |w| {
                    w.join().unwrap_or_else(|_| {
                        Err(SnapshotError::Io {
                            path: dir.to_path_buf(),
                            op: "writing producer snapshots",
                            source: std::io::Error::other("the snapshot writer thread panicked"),
                        })
                    })
                });
                let recovered = recovered?;
                written?;
                Ok::<_, PartitionLogError>(recovered)
            });
            let (outcomes, moved) = recovered?;
            for (segment, o) in &outcomes {
                segments_scanned += 1;
                batches_scanned += o.batches;
                bytes_scanned += o.valid_bytes + o.truncated_bytes;
                kept_bytes += o.valid_bytes;
                if let (Some((position, reason)), Some(file)) =
                    (&o.truncated_at, &o.quarantine_file)
                {
                    cut.push(CutInfo {
                        segment: *segment,
                        position: *position,
                        bytes: o.truncated_bytes,
                        reason: reason.clone(),
                        quarantined_to: file.clone(),
                    });
                }
            }
            quarantined = moved;
            let end = local.log_end_offset();
            // As Kafka's recoverSegment (truncateAndReload to `base` deletes every snapshot
            // above it): a snapshot in (base, end] that the scan did not write again describes
            // the bytes before recovery, and a stale or corrupt one at the new log end would
            // stand for the recovered state (close writes a fresh one there).
            for s in list_snapshots_with(&io, dir)?
                .into_iter()
                .filter(|s| s.offset > base && s.offset <= end && !rewritten.contains(&s.offset))
            {
                io.remove(&s.path).map_err(|source| SnapshotError::Io {
                    path: s.path.clone(),
                    op: "deleting a stale snapshot",
                    source,
                })?;
            }
            // Snapshots describing quarantined data go with it.
            if !cut.is_empty() {
                for s in list_snapshots_with(&io, dir)?
                    .into_iter()
                    .filter(|s| s.offset > end)
                {
                    let to = qdir.join(file_name(s.offset, FileKind::Snapshot, None));
                    move_into_quarantine(env, &s.path, &to, dir)?;
                    quarantined.push(to);
                }
            }
            if cut.is_empty() && quarantined.is_empty() {
                remove_empty_quarantine_dir(env, &qdir);
            } else {
                quarantine_dir = Some(qdir);
            }
        }

        // Log start offset.
        let mut log_end = local.log_end_offset();
        if opts.log_start_offset > log_end {
            // Kafka deletes every segment here (the checkpoint says all of them lie below the log
            // start: files were lost or deleted behind its back). We keep them aside instead.
            let qdir = match &quarantine_dir {
                Some(q) => q.clone(),
                None => new_quarantine_dir(env, dir)?,
            };
            let moved = local.quarantine_fully_and_start_at(opts.log_start_offset, &qdir)?;
            if moved.is_empty() && quarantine_dir.is_none() {
                remove_empty_quarantine_dir(env, &qdir);
            } else {
                quarantined.extend(moved);
                quarantine_dir = Some(qdir);
            }
            epochs.clear()?;
            psm.truncate_fully_and_start_at(opts.log_start_offset);
            log_end = opts.log_start_offset;
        } else if opts.log_start_offset > local.log_start_offset() {
            local.increment_log_start_offset(opts.log_start_offset)?;
        }
        let log_start = local.log_start_offset();
        epochs.truncate_from_end(log_end)?;
        epochs.truncate_from_start(log_start)?;

        let no_snapshot = list_snapshots_with(&io, dir)?.is_empty();
        let mut log = PartitionLog {
            dir: dir.to_path_buf(),
            local,
            psm,
            epochs,
            high_watermark: log_start,
            config: opts.config.clone(),
            clock: Arc::clone(&env.clock),
            io: io.clone(),
        };
        if clean && recover_base.is_none() && no_snapshot {
            // Kafka's shortcut: a clean shutdown without any snapshot (an upgrade) starts empty.
            log.psm.truncate_fully_and_start_at(log_end);
            log.psm.take_snapshot_with(&io, dir)?;
        } else {
            let load = log.rebuild_producer_state(log_end)?;
            snapshots_set_aside.extend(load.set_aside.into_iter().map(|s| s.moved_to));
        }
        log.set_high_watermark(opts.high_watermark.unwrap_or(log_start));

        let report = RecoveryReport {
            partition: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            had_clean_shutdown: clean,
            recovery_point: if clean { log_end } else { recovery_point },
            recovered_from: recover_base,
            segments_scanned,
            batches_scanned,
            bytes_scanned,
            kept_bytes,
            cut,
            quarantined_segments: quarantined,
            snapshots_set_aside,
            quarantine_dir,
            temp_files_handled,
            warnings,
            log_start_offset: log_start,
            log_end_offset: log_end,
            producers: log.psm.active_producers().len(),
        };
        Ok((log, report))
    }
}

/// Removes, through the storage seam, a quarantine folder that received nothing (and
/// `quarantine/` if that is now empty). Best effort: a folder that cannot be removed is merely
/// left behind, empty. Not synced: an empty folder that comes back after a crash is harmless.
fn remove_empty_quarantine_dir(env: &LogEnv, qdir: &Path) {
    if env.storage.remove_dir(qdir).is_ok() {
        if let Some(parent) = qdir.parent() {
            env.storage.remove_dir(parent).ok();
        }
    }
}

/// `<dir>/quarantine/<n>`, `n` one more than the largest existing number, created through the
/// storage seam and made durable (both new directory entries synced), so that the cut bytes
/// recovery writes into it survive a crash once their own directory is synced.
fn new_quarantine_dir(env: &LogEnv, dir: &Path) -> Result<PathBuf, PartitionLogError> {
    let root = dir.join(QUARANTINE_DIR);
    let existing = match env.storage.list_dir(&root) {
        Ok(names) => names,
        Err(e) if e.io_kind() == Some(std::io::ErrorKind::NotFound) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let n = existing
        .iter()
        .filter_map(|name| name.to_str().and_then(|s| s.parse::<u64>().ok()))
        .map(|k| k.saturating_add(1))
        .fold(1u64, u64::max);
    let q = root.join(format!("{n:04}"));
    env.storage.create_dir_all(&q)?;
    env.storage.sync_dir(&root)?;
    env.storage.sync_dir(dir)?;
    Ok(q)
}

/// Moves a file of `dir` (a snapshot describing quarantined data) to `to` in the quarantine
/// folder, durably (both directories synced).
fn move_into_quarantine(
    env: &LogEnv,
    from: &Path,
    to: &Path,
    dir: &Path,
) -> Result<(), PartitionLogError> {
    env.storage.rename(from, to)?;
    if let Some(qdir) = to.parent() {
        env.storage.sync_dir(qdir)?;
    }
    env.storage.sync_dir(dir)?;
    Ok(())
}

/// Kafka `removeTempFilesAndCollectSwapFiles` + swap completion (§6.2 steps 1–4) and orphan
/// index removal. Returns the paths handled.
fn remove_temp_files_and_swaps(
    env: &LogEnv,
    dir: &Path,
) -> Result<Vec<PathBuf>, PartitionLogError> {
    let mut handled = Vec::new();
    let mut parsed = Vec::new();
    for name in env.storage.list_dir(dir)? {
        if let Ok(p) = parse_file_name(&name) {
            parsed.push((dir.join(&name), p));
        }
    }
    let min_cleaned = parsed
        .iter()
        .filter(|(_, p)| p.temp == Some(TempSuffix::Cleaned))
        .map(|(_, p)| p.base_offset)
        .min()
        .unwrap_or(i64::MAX);
    let mut swaps = Vec::new();
    let mut live = Vec::new();
    for (path, p) in parsed {
        match p.temp {
            Some(TempSuffix::Deleted) | Some(TempSuffix::Cleaned) => {
                remove_segment_file(env, &path, p.kind)?;
                handled.push(path);
            }
            Some(TempSuffix::Swap) if p.base_offset >= min_cleaned => {
                remove_segment_file(env, &path, p.kind)?;
                handled.push(path);
            }
            Some(TempSuffix::Swap) => swaps.push((path, p)),
            None => live.push((path, p)),
        }
    }
    // The offset range the valid `.log.swap` segments cover.
    let mut range: Option<(i64, i64)> = None;
    for (path, p) in swaps.iter().filter(|(_, p)| p.kind == FileKind::Log) {
        let bytes = env.storage.read(path)?;
        let mut next = p.base_offset;
        for entry in Batches::new(&bytes, 0).flatten() {
            next = next.max(entry.last_offset().saturating_add(1));
        }
        range = Some(match range {
            None => (p.base_offset, next),
            Some((lo, hi)) => (lo.min(p.base_offset), hi.max(next)),
        });
    }
    if let Some((lo, hi)) = range {
        for (path, p) in &live {
            if p.kind != FileKind::Snapshot && p.base_offset >= lo && p.base_offset < hi {
                remove_segment_file(env, path, p.kind)?;
                handled.push(path.clone());
            }
        }
        live.retain(|(_, p)| {
            p.kind == FileKind::Snapshot || p.base_offset < lo || p.base_offset >= hi
        });
    }
    for (path, p) in &swaps {
        let to = segment_file_path(dir, p.base_offset, p.kind);
        rename_segment_file(env, path, &to, p.kind)?;
        handled.push(path.clone());
        live.push((to, segment_store::ParsedName { temp: None, ..*p }));
    }
    // Orphan indexes (no `.log`).
    let logs: std::collections::BTreeSet<i64> = live
        .iter()
        .filter(|(_, p)| p.kind == FileKind::Log)
        .map(|(_, p)| p.base_offset)
        .collect();
    for (path, p) in &live {
        if matches!(
            p.kind,
            FileKind::Index | FileKind::TimeIndex | FileKind::TxnIndex
        ) && !logs.contains(&p.base_offset)
        {
            remove_segment_file(env, path, p.kind)?;
            handled.push(path.clone());
        }
    }
    if !handled.is_empty() {
        env.storage.sync_dir(dir)?;
    }
    Ok(handled)
}

// ------------------------------------------------------------------------------------------------
// Log directories
// ------------------------------------------------------------------------------------------------

/// How to load a log directory.
#[derive(Debug, Clone)]
pub struct LogDirOptions {
    /// Threads recovering partitions in parallel (at least 1).
    pub threads: usize,
    /// Ignore the clean-shutdown marker and the recovery points: recover everything.
    pub full: bool,
    /// Settings of every partition log.
    pub config: PartitionLogConfig,
    /// Storage and clock.
    pub env: LogEnv,
}

impl Default for LogDirOptions {
    fn default() -> Self {
        Self {
            threads: 1,
            full: false,
            config: PartitionLogConfig::default(),
            env: LogEnv::default(),
        }
    }
}

/// A loaded log directory (the part of Kafka's `LogManager` that owns one).
#[derive(Debug)]
pub struct LogDir {
    /// The directory.
    pub dir: PathBuf,
    /// Whether it had a clean-shutdown marker.
    pub had_clean_shutdown: bool,
    /// The partitions.
    pub partitions: BTreeMap<TopicPartition, PartitionLog>,
    /// One report per partition, in partition order.
    pub reports: Vec<RecoveryReport>,
    /// `-delete`, `-future` and `-stray` folders that were not loaded.
    pub skipped: Vec<PathBuf>,
    env: LogEnv,
    _lock: DirLock,
}

fn checkpoint_map(env: &LogEnv, path: &Path) -> BTreeMap<TopicPartition, i64> {
    // Kafka logs read errors of these checkpoints and treats them as empty.
    let file = OffsetCheckpointFile::new(Arc::clone(&env.storage), path);
    file.read().unwrap_or_default().into_iter().collect()
}

/// Loads every partition of the log directory `dir` on `opts.threads` threads. See the module
/// docs. The first partition that fails to load fails the whole directory (Kafka takes the
/// directory offline).
pub fn load_log_dir(dir: &Path, opts: &LogDirOptions) -> Result<LogDir, PartitionLogError> {
    let env = &opts.env;
    env.storage.create_dir_all(dir)?;
    let lock = DirLock::acquire(dir)?;
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    let had_clean_shutdown = env.storage.exists(&marker)?;
    if had_clean_shutdown {
        env.storage.remove_file(&marker)?;
        env.storage.sync_dir(dir)?;
    }
    let recovery_points = checkpoint_map(env, &dir.join(RECOVERY_POINT_CHECKPOINT_FILE));
    let log_starts = checkpoint_map(env, &dir.join(LOG_START_OFFSET_CHECKPOINT_FILE));
    let hws = checkpoint_map(env, &dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE));

    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    for name in env.storage.list_dir(dir)? {
        let path = dir.join(&name);
        if !path.is_dir() {
            continue;
        }
        let Ok(parsed) = parse_partition_dir_name(OsStr::new(&name)) else {
            continue;
        };
        if parsed.kind != PartitionDirKind::Live {
            skipped.push(path);
            continue;
        }
        let tp = TopicPartition::new(parsed.topic, parsed.partition);
        let load = LoadOptions {
            config: opts.config.clone(),
            env: env.clone(),
            had_clean_shutdown,
            recovery_point: recovery_points.get(&tp).copied().unwrap_or(0),
            log_start_offset: log_starts.get(&tp).copied().unwrap_or(0),
            high_watermark: hws.get(&tp).copied(),
            full: opts.full,
        };
        jobs.push((tp, path, load));
    }

    type Loaded = (
        TopicPartition,
        Result<(PartitionLog, RecoveryReport), PartitionLogError>,
        PathBuf,
    );
    let queue = Mutex::new(jobs);
    let results: Mutex<Vec<Loaded>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.threads.max(1) {
            s.spawn(|| loop {
                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let Some((tp, path, load)) = job else {
                    break;
                };
                let r = LogLoader::load(&path, &load);
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((tp, r, path));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut partitions = BTreeMap::new();
    let mut reports = Vec::new();
    for (tp, r, path) in results {
        match r {
            Ok((log, report)) => {
                partitions.insert(tp, log);
                reports.push(report);
            }
            Err(e) => {
                return Err(PartitionLogError::Partition {
                    dir: path,
                    source: Box::new(e),
                })
            }
        }
    }
    Ok(LogDir {
        dir: dir.to_path_buf(),
        had_clean_shutdown,
        partitions,
        reports,
        skipped,
        env: env.clone(),
        _lock: lock,
    })
}

impl LogDir {
    /// Clean shutdown (Kafka `LogManager.shutdown`): close every partition (flush, producer
    /// snapshot, leader-epoch checkpoint), write the recovery-point, log-start-offset and
    /// high-watermark checkpoints, then the `.kafka_cleanshutdown` marker.
    pub fn close(self) -> Result<(), PartitionLogError> {
        let env = self.env;
        let mut recovery = Vec::new();
        let mut starts = Vec::new();
        let mut hws = Vec::new();
        for (tp, log) in self.partitions {
            let closed = log.close()?;
            recovery.push((tp.clone(), closed.log_end_offset));
            starts.push((tp.clone(), closed.log_start_offset));
            hws.push((tp, closed.high_watermark));
        }
        for (name, entries) in [
            (RECOVERY_POINT_CHECKPOINT_FILE, recovery),
            (LOG_START_OFFSET_CHECKPOINT_FILE, starts),
            (REPLICATION_OFFSET_CHECKPOINT_FILE, hws),
        ] {
            OffsetCheckpointFile::new(Arc::clone(&env.storage), &self.dir.join(name))
                .write(&entries)?;
        }
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        let h = env.storage.open(&marker, OpenMode::CreateTruncate)?;
        h.write_at(0, br#"{"version":0,"brokerEpoch":-1}"#)?;
        h.sync_all()?;
        env.storage.sync_dir(&self.dir)?;
        Ok(())
    }
}
