//! Loading partition logs at startup (Kafka `LogLoader.load`, §6.2, and the loading half of
//! `LogManager`), with one deliberate difference: **recovery never destroys data**.
//!
//! Kafka truncates a segment at its first invalid batch and deletes every later segment. Here the
//! cut bytes are written to `<partition>/quarantine/<n>/<base>.log.cut-<position>` before the
//! `.log` is truncated, and every later segment is *moved* (all its files, as they are) into the
//! same `quarantine/<n>/` folder. The [`RecoveryReport`] says what was kept, cut and moved, and
//! why.
//!
//! [`LogLoader::load`] is [`LogLoader::plan`] (read-only: everything loading would do and find)
//! then [`LogLoader::apply`] (exactly those changes), under one directory lock: see
//! [`crate::plan`]. The steps it plans, for one partition directory:
//! 1. delete `*.deleted`; delete `*.cleaned` and any `*.swap` at or above the smallest cleaned
//!    base offset (an interrupted split); when the remaining `.log.swap` segments are a cleaner's
//!    completed output (CRC-valid throughout, covering the segments they replace) delete the
//!    originals in the swapped range and rename the swaps into place, otherwise move them into
//!    quarantine; delete orphan indexes;
//! 2. open the segments as they are (the active one's next offset from its last index entry);
//! 3. unless the shutdown was clean, recover every segment from the one containing the recovery
//!    point on (any segment whose indexes are missing, longer than `segment.index.bytes` or
//!    fail the sanity check too, or whose tail does not
//!    parse): CRC-validate every batch, rebuild the offset/time/transaction indexes, apply each
//!    batch to producer state (`Replication` origin, barriers included, snapshot at each segment
//!    boundary), and stop at the first invalid batch (quarantine as above); CRCs are checked on
//!    every core while one thread applies the batches in log order;
//! 4. log start offset = max(checkpoint, first segment base) — a checkpoint above the log end
//!    (Kafka deletes every segment then) moves every non-empty segment into quarantine and starts
//!    the log empty at the checkpoint; leader-epoch cache truncated to
//!    the log; producer state from the newest valid snapshot at or below the log end (corrupt
//!    ones renamed `*.corrupt` and reported) plus a replay of the rest, or — clean shutdown and no
//!    snapshot at all — Kafka's shortcut of starting empty at the log end.

use std::fmt;
use std::path::{Path, PathBuf};

use record_format::FormatError;
use segment_store::internals::index_storage;
use segment_store::internals::FileKind;
use segment_store::{LogEnv, Storage};

use crate::config::Config;
use crate::log::PartitionLogError;
use crate::producer_state::{ExpiredProducer, ProducerStateWarning};

/// Name of the quarantine folder inside a partition directory.
pub const QUARANTINE_DIR: &str = "quarantine";

/// How to load one partition: the settings ([`Config`], shared by every partition of a log
/// directory) and the partition's own checkpointed state (default: unclean shutdown, recovery
/// point 0, i.e. recover everything).
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The settings: [`Config::log`], [`Config::env`] and [`Config::full_recovery`] are the
    /// ones loading reads.
    pub config: Config,
    /// The log directory had a clean-shutdown marker: skip recovery.
    pub had_clean_shutdown: bool,
    /// The recovery point from the checkpoint (0: recover everything).
    pub recovery_point: i64,
    /// The log start offset from the checkpoint.
    pub log_start_offset: i64,
    /// The high watermark from the checkpoint (default: the log start offset).
    pub high_watermark: Option<i64>,
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
#[derive(Debug, Clone)]
pub struct RecoveryReport {
    /// The partition directory's name.
    pub partition: String,
    /// Whether the shutdown was clean (the log directory's marker; recovery is skipped unless
    /// `full`, or an index failed its check).
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
    /// Producers dropped at load because they had expired: id, last write, and the clock and
    /// `producer.id.expiration.ms` that expired them.
    pub expired_producers: Vec<ExpiredProducer>,
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
        )?;
        if !self.expired_producers.is_empty() {
            write!(f, ", {} expired at load", self.expired_producers.len())?;
        }
        Ok(())
    }
}

/// The storage files of `kind` are on: the offset and time indexes on the real file system where
/// the storage can map (see `segment_store::internals::index_storage`), everything else (and every file
/// of simulated storage) through the storage seam.
fn storage_of(env: &LogEnv, kind: FileKind) -> &dyn Storage {
    if matches!(kind, FileKind::Index | FileKind::TimeIndex) {
        index_storage(env.storage.as_ref())
    } else {
        env.storage.as_ref()
    }
}

/// Removes a segment file (a missing offset or time index is no error).
pub(crate) fn remove_segment_file(
    env: &LogEnv,
    path: &Path,
    kind: FileKind,
) -> Result<(), PartitionLogError> {
    if !matches!(kind, FileKind::Index | FileKind::TimeIndex) {
        return Ok(env.storage.remove_file(path)?);
    }
    let storage = storage_of(env, kind);
    if !storage.supports_mmap() && !storage.exists(path)? {
        return Ok(());
    }
    match storage.remove_file(path) {
        Err(e) if e.io_kind() != Some(std::io::ErrorKind::NotFound) => Err(e.into()),
        _ => Ok(()),
    }
}

pub(crate) fn rename_segment_file(
    env: &LogEnv,
    from: &Path,
    to: &Path,
    kind: FileKind,
) -> Result<(), PartitionLogError> {
    match storage_of(env, kind).rename(from, to) {
        // An offset or time index (derived data) a crash left only as a name is rebuilt, not
        // moved.
        Err(e)
            if matches!(kind, FileKind::Index | FileKind::TimeIndex)
                && e.io_kind() == Some(std::io::ErrorKind::NotFound) =>
        {
            Ok(())
        }
        r => Ok(r?),
    }
}

/// Removes, through the storage seam, a quarantine folder that received nothing (and
/// `quarantine/` if that is now empty). Best effort: a folder that cannot be removed is merely
/// left behind, empty. Not synced: an empty folder that comes back after a crash is harmless.
pub(crate) fn remove_empty_quarantine_dir(env: &LogEnv, qdir: &Path) {
    if env.storage.remove_dir(qdir).is_ok() {
        if let Some(parent) = qdir.parent() {
            env.storage.remove_dir(parent).ok();
        }
    }
}

/// Moves a file of `dir` (a snapshot describing quarantined data) to `to` in the quarantine
/// folder, durably (both directories synced).
pub(crate) fn move_into_quarantine(
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
