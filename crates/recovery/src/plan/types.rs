//! The plan's types: what happens to each leftover, index and snapshot file, per segment, and
//! the plan itself with its report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use segment_store::internals::SegmentScan;
use segment_store::internals::{segment_file_path, FileKind};
use segment_store::IndexCorruption;

use super::search_by;
use crate::audit::AuditFinding;
use crate::error::SnapshotError;
use crate::loader::{CutInfo, LoadOptions, RecoveryReport};
use crate::producer_state::{ExpiredProducer, ProducerStateManager, ProducerStateWarning};

/// What happens to a leftover file of an interrupted operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftoverAction {
    /// Deleted (`.deleted`, `.cleaned`, a `.swap` of an interrupted split, a segment replaced by
    /// a cleaner's completed swap, an orphan index).
    Remove {
        /// The file.
        path: PathBuf,
        /// Its kind.
        kind: FileKind,
    },
    /// A `.swap` renamed into place.
    Rename {
        /// The `.swap` file.
        from: PathBuf,
        /// Its live name.
        to: PathBuf,
        /// Its kind.
        kind: FileKind,
    },
    /// A live segment file a completed `.swap` is renamed over although the swap's range does
    /// not cover its base offset (kept as a guard: a completed `.log.swap` covers its own base,
    /// and its index swaps go with it): moved into the quarantine folder first as
    /// `<its name>.replaced` (the segment the swap becomes may be quarantined under the plain
    /// name), never overwritten.
    SetAside {
        /// The live file.
        path: PathBuf,
        /// Its kind.
        kind: FileKind,
    },
    /// A stray `.swap` (not a cleaner's completed output: not CRC-valid throughout, or short of
    /// the offsets of the segments it would replace): moved into the quarantine folder under its
    /// own name, the log kept as it is.
    Quarantine {
        /// The `.swap` file.
        path: PathBuf,
        /// Its kind.
        kind: FileKind,
    },
}

/// Suffix of a live segment file set aside in quarantine because a `.swap` replaced it
/// ([`LeftoverAction::SetAside`]).
pub const REPLACED_SUFFIX: &str = ".replaced";

/// `<qdir>/<path's name>.replaced`.
pub(super) fn replaced_path(qdir: &Path, path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(REPLACED_SUFFIX);
    qdir.join(name)
}

impl LeftoverAction {
    /// The leftover file.
    pub fn path(&self) -> &Path {
        match self {
            LeftoverAction::Remove { path, .. }
            | LeftoverAction::SetAside { path, .. }
            | LeftoverAction::Quarantine { path, .. } => path,
            LeftoverAction::Rename { from, .. } => from,
        }
    }

    /// Where a [`LeftoverAction::SetAside`] or [`LeftoverAction::Quarantine`] moves its file, in the quarantine folder `qdir`.
    pub(super) fn set_aside_to(&self, qdir: &Path) -> Option<PathBuf> {
        match self {
            LeftoverAction::SetAside { path, .. } => Some(replaced_path(qdir, path)),
            LeftoverAction::Quarantine { path, .. } => {
                Some(qdir.join(path.file_name().unwrap_or_default()))
            }
            _ => None,
        }
    }

    /// Whether it handles a leftover of an interrupted operation (a file set aside is a live
    /// one, reported with the quarantined files instead).
    pub(super) fn is_temp(&self) -> bool {
        !matches!(
            self,
            LeftoverAction::SetAside { .. } | LeftoverAction::Quarantine { .. }
        )
    }
}

/// What is wrong with an index file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexProblem {
    /// Kafka's sanity check fails (recovery rebuilds the segment's indexes).
    Sanity(IndexCorruption),
    /// An offset-index entry points at or past the end of the `.log`.
    EntryBeyondLog {
        /// Entry number.
        entry: usize,
        /// Its offset.
        offset: i64,
        /// Its position.
        position: u32,
        /// Size of the `.log`.
        log_size: u64,
    },
    /// An offset-index entry in the valid prefix does not point at a batch's first byte.
    NotBatchBoundary {
        /// Entry number.
        entry: usize,
        /// Its offset.
        offset: i64,
        /// Its position.
        position: u32,
    },
    /// An offset-index entry points at a batch with another last offset.
    OffsetMismatch {
        /// Entry number.
        entry: usize,
        /// The entry's offset.
        index_offset: i64,
        /// The last offset of the batch at its position.
        log_offset: i64,
        /// Its position.
        position: u32,
    },
    /// A time-index entry names an offset past the segment's last offset.
    TimeEntryBeyondLog {
        /// Entry number.
        entry: usize,
        /// Its timestamp.
        timestamp: i64,
        /// Its offset.
        offset: i64,
        /// The segment's last offset.
        last_offset: i64,
    },
    /// A `.txnindex` whose length is not a whole number of entries.
    TxnPartialEntry {
        /// File length.
        len: u64,
    },
    /// An offset index of more than `MAX_SORTED_ENTRIES` entries whose positions are not in
    /// order: its entries are not checked one by one against the batches.
    OutOfOrderNotChecked {
        /// How many entries it has.
        entries: usize,
    },
    /// Entry problems of the segment's indexes past the first `MAX_ENTRY_FINDINGS` listed:
    /// counted, not listed (a damaged index of millions of entries would fill memory with them).
    MoreEntryProblems {
        /// How many.
        count: u64,
    },
}

/// A problem of one index file of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFinding {
    /// Which index.
    pub kind: FileKind,
    /// What is wrong.
    pub problem: IndexProblem,
}

/// What recovery does with a snapshot file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFate {
    /// Nothing (it is never read).
    Kept,
    /// Renamed to `*.corrupt`.
    SetAside,
    /// Replaced by a snapshot recovery writes.
    Rewritten,
    /// Deleted (outside the log's offsets).
    Deleted,
    /// Moved to quarantine with the data it describes.
    Quarantined,
}

/// A snapshot file that does not read back, or lies beyond the log end recovery leaves.
#[derive(Debug)]
pub struct SnapshotFinding {
    /// The file.
    pub path: PathBuf,
    /// Its offset.
    pub offset: i64,
    /// Why it does not read back (`None`: it does; it is beyond the log end).
    pub error: Option<SnapshotError>,
    /// What recovery does with it.
    pub fate: SnapshotFate,
}

/// One segment as the plan sees it. Its files are named by its base offset in the partition
/// directory ([`SegmentPlan::log_path`], [`SegmentPlan::files`]): a plan of 100,000 segments
/// keeps no path per segment.
#[derive(Debug, Clone)]
pub struct SegmentPlan {
    /// Base offset.
    pub base_offset: i64,
    /// Size of the `.log`.
    pub size: u64,
    /// Index files that fail Kafka's sanity checks.
    pub index_findings: Vec<IndexFinding>,
    /// The `.txnindex` exists.
    pub has_txn_index: bool,
    /// The `.index` exists (after leftovers).
    pub has_index: bool,
    /// The `.timeindex` exists (after leftovers).
    pub has_time_index: bool,
    /// The active segment's next offset as Kafka's `readNextOffset` finds it before recovery
    /// (from the last offset-index entry on); `None` for the other segments, when recovery scans
    /// the segment anyway, and when the walk met a batch that does not parse (the segment is then
    /// recovered).
    pub next_offset: Option<i64>,
}

impl SegmentPlan {
    /// The `.log` in the partition directory `dir` (its live name, after leftovers are handled).
    pub fn log_path(&self, dir: &Path) -> PathBuf {
        segment_file_path(dir, self.base_offset, FileKind::Log)
    }

    /// The segment's files in `dir` as they are (after leftovers): `.log`, then the
    /// `.txnindex`, `.index` and `.timeindex` that exist.
    pub fn files(&self, dir: &Path) -> Vec<(FileKind, PathBuf)> {
        self.kinds()
            .map(|k| (k, segment_file_path(dir, self.base_offset, k)))
            .collect()
    }

    /// The kinds of [`Self::files`], in that order.
    fn kinds(&self) -> impl Iterator<Item = FileKind> {
        [
            (FileKind::Log, true),
            (FileKind::TxnIndex, self.has_txn_index),
            (FileKind::Index, self.has_index),
            (FileKind::TimeIndex, self.has_time_index),
        ]
        .into_iter()
        .filter_map(|(k, has)| has.then_some(k))
    }
}

/// When a producer-snapshot operation happens relative to the segment changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotPhase {
    /// Before the recovered segments are written (loading, snapshots at segment boundaries).
    BeforeInstall,
    /// After (snapshots beyond the log end quarantined, out-of-range ones deleted, the snapshot
    /// at the log end).
    AfterInstall,
}

/// One producer-snapshot file operation of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotOp {
    /// Written atomically (temp file, fsync, rename, directory fsync).
    Write {
        /// The snapshot file.
        path: PathBuf,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// A corrupt snapshot renamed to `*.corrupt`.
    SetAside {
        /// The snapshot.
        from: PathBuf,
        /// Its new name.
        to: PathBuf,
    },
    /// A snapshot beyond the recovered log end moved into the quarantine folder.
    Quarantine {
        /// The snapshot.
        from: PathBuf,
        /// Where it goes.
        to: PathBuf,
    },
    /// A snapshot outside `(log start, log end]` deleted.
    Remove {
        /// The snapshot.
        path: PathBuf,
    },
}

/// Everything loading one partition would do and find. See the module docs.
#[derive(Debug)]
pub struct RecoveryPlan {
    /// The partition directory.
    pub dir: PathBuf,
    /// The options it was planned with.
    pub options: LoadOptions,
    /// Whether the log directory had a clean-shutdown marker (recovery is skipped unless
    /// `full`).
    pub had_clean_shutdown: bool,
    /// The recovery point used (0 with `full`).
    pub recovery_point: i64,
    /// Leftovers of interrupted operations, in the order they are handled.
    pub leftovers: Vec<LeftoverAction>,
    /// The segments (after leftovers are handled), by base offset.
    pub segments: Vec<SegmentPlan>,
    /// Base offset of the first segment recovered (`None`: nothing is recovered).
    pub recovered_from: Option<i64>,
    /// The recovery scans of the recovered segments, in order, up to the first one with a cut.
    pub scans: Vec<SegmentScan>,
    /// Base offsets of the segments after the first cut: they move to quarantine.
    pub quarantined_segments: Vec<i64>,
    /// The checkpointed log start offset is above the log end: every non-empty segment moves to
    /// quarantine and the log starts empty at the checkpoint.
    pub start_at_checkpoint: bool,
    /// The quarantine folder cut bytes and moved files go to.
    pub quarantine_dir: PathBuf,
    /// Producer-snapshot operations, in order, with their phase.
    pub snapshot_ops: Vec<(SnapshotPhase, SnapshotOp)>,
    /// Snapshot files that do not read back or lie beyond the log end, with their fate.
    pub snapshot_findings: Vec<SnapshotFinding>,
    /// The snapshot producer state was loaded from (offset), if any.
    pub snapshot_loaded: Option<i64>,
    /// Batches applied to producer state after the snapshot loaded (or from the log start).
    pub batches_applied: u64,
    /// The collision audit's findings ([`LogLoader::plan_audited`](crate::LogLoader::plan_audited) only).
    pub audit: Option<Vec<AuditFinding>>,
    /// Leader epochs first seen in the recovered batches: (epoch, start offset).
    pub epoch_assignments: Vec<(i32, i64)>,
    /// Producer-state warnings of the recovered batches.
    pub warnings: Vec<ProducerStateWarning>,
    /// Producers dropped at load because they had expired (`producer.id.expiration.ms` against
    /// the clock of the options' environment).
    pub expired_producers: Vec<ExpiredProducer>,
    /// The producer state after loading.
    pub producers: ProducerStateManager,
    /// Log start offset after loading.
    pub log_start_offset: i64,
    /// Log end offset after loading.
    pub log_end_offset: i64,
    /// High watermark after loading.
    pub high_watermark: i64,
    /// Last stable offset after loading.
    pub last_stable_offset: i64,
}

impl RecoveryPlan {
    /// The partition directory's name.
    pub fn partition(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Recovery is skipped (a clean shutdown, and not `full`): only segments whose indexes fail
    /// their checks are scanned.
    pub fn recovery_skipped(&self) -> bool {
        self.had_clean_shutdown && !self.options.config.full_recovery
    }

    /// Whether the segment at `base` moves to quarantine ([`Self::quarantined_segments`] is in
    /// ascending order: a binary search).
    pub fn is_quarantined(&self, base: i64) -> bool {
        search_by(&self.quarantined_segments, |b| b.cmp(&base)).is_ok()
    }

    /// The cuts recovery makes: one per scan that stops before its segment's end.
    pub fn cuts(&self) -> Vec<CutInfo> {
        self.scans
            .iter()
            .filter_map(|s| {
                let (position, reason) = s.truncated_at.clone()?;
                (s.truncated_bytes() > 0).then(|| CutInfo {
                    segment: s.base_offset,
                    position,
                    bytes: s.truncated_bytes(),
                    reason,
                    quarantined_to: self.quarantine_dir.join(
                        segment_store::internals::quarantine_file_name(
                            s.base_offset,
                            s.valid_bytes,
                        ),
                    ),
                })
            })
            .collect()
    }

    /// Corrupt snapshots set aside: (snapshot, new name).
    pub fn snapshots_set_aside(&self) -> Vec<(PathBuf, PathBuf)> {
        self.snapshot_ops
            .iter()
            .filter_map(|(_, op)| match op {
                SnapshotOp::SetAside { from, to } => Some((from.clone(), to.clone())),
                _ => None,
            })
            .collect()
    }

    /// The report [`LogLoader::apply`](crate::LogLoader::apply) gives for this plan (the same fields, predicted).
    pub fn report(&self) -> RecoveryReport {
        let cut = self.cuts();
        let scanned: BTreeMap<i64, &SegmentScan> =
            self.scans.iter().map(|s| (s.base_offset, s)).collect();
        let files_of = |seg: &SegmentPlan, has_txn: bool| {
            let q = &self.quarantine_dir;
            let b = seg.base_offset;
            let mut out = vec![segment_file_path(q, b, FileKind::Log)];
            if has_txn {
                out.push(segment_file_path(q, b, FileKind::TxnIndex));
            }
            out.push(segment_file_path(q, b, FileKind::Index));
            out.push(segment_file_path(q, b, FileKind::TimeIndex));
            out
        };
        let mut quarantined: Vec<PathBuf> = self
            .leftovers
            .iter()
            .filter_map(|a| a.set_aside_to(&self.quarantine_dir))
            .collect();
        for seg in &self.segments {
            if self.is_quarantined(seg.base_offset) {
                quarantined.extend(
                    seg.kinds()
                        .map(|k| segment_file_path(&self.quarantine_dir, seg.base_offset, k)),
                );
            }
        }
        for (_, op) in &self.snapshot_ops {
            if let SnapshotOp::Quarantine { to, .. } = op {
                quarantined.push(to.clone());
            }
        }
        if self.start_at_checkpoint {
            for seg in &self.segments {
                if self.is_quarantined(seg.base_offset) {
                    continue;
                }
                let (size, has_txn) = match scanned.get(&seg.base_offset) {
                    Some(s) => (
                        s.valid_bytes,
                        seg.has_txn_index || !s.aborted_txns.is_empty(),
                    ),
                    None => (seg.size, seg.has_txn_index),
                };
                if size > 0 {
                    quarantined.extend(files_of(seg, has_txn));
                }
            }
        }
        let quarantine_dir =
            (!cut.is_empty() || !quarantined.is_empty()).then(|| self.quarantine_dir.clone());
        RecoveryReport {
            partition: self.partition(),
            had_clean_shutdown: self.had_clean_shutdown,
            recovery_point: if self.recovery_skipped() {
                self.log_end_offset
            } else {
                self.recovery_point
            },
            recovered_from: self.recovered_from,
            segments_scanned: self.scans.len(),
            batches_scanned: self.scans.iter().map(|s| s.batches).sum(),
            bytes_scanned: self.scans.iter().map(|s| s.size).sum(),
            kept_bytes: self.scans.iter().map(|s| s.valid_bytes).sum(),
            cut,
            quarantined_segments: sorted_unique(quarantined),
            snapshots_set_aside: self
                .snapshots_set_aside()
                .into_iter()
                .map(|(_, to)| to)
                .collect(),
            quarantine_dir,
            temp_files_handled: self
                .leftovers
                .iter()
                .filter(|a| a.is_temp())
                .map(|a| a.path().to_path_buf())
                .collect(),
            warnings: self.warnings.clone(),
            expired_producers: self.expired_producers.clone(),
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
            producers: self.producers.producer_count(),
        }
    }

    /// Whether applying the plan changes any byte or name of the partition's data: a leftover,
    /// a cut, a quarantined segment or snapshot, a set-aside snapshot. (Recovering a clean
    /// segment rewrites its indexes with the same entries; writing producer snapshots and
    /// checkpoints is not counted.)
    pub fn changes_data(&self) -> bool {
        !self.leftovers.is_empty()
            || self.scans.iter().any(|s| s.truncated_bytes() > 0)
            || !self.quarantined_segments.is_empty()
            || self.start_at_checkpoint
            || self.snapshot_ops.iter().any(|(_, op)| {
                matches!(
                    op,
                    SnapshotOp::SetAside { .. } | SnapshotOp::Quarantine { .. }
                )
            })
    }
}

/// The report of an applied plan (the offsets, recovery point and quarantine folder filled in
/// by the caller).
/// The files moved into quarantine, by path (the order they were moved in depends on the
/// phase of each move).
pub(super) fn sorted_unique(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
    v.sort();
    v.dedup();
    v
}

impl crate::cleaner::LogToClean {
    /// What a recovery plan says of the partition (read only: a dry run plans from it).
    pub fn from_plan(plan: &RecoveryPlan, now_ms: i64) -> Self {
        crate::cleaner::LogToClean {
            dir: plan.dir.clone(),
            log_start_offset: plan.log_start_offset,
            log_end_offset: plan.log_end_offset,
            last_stable_offset: plan.last_stable_offset,
            last_records: crate::cleaner::last_records(&plan.producers),
            now_ms,
            segments: crate::cleaner::SegmentSettings::of(&plan.options.config.log.log),
        }
    }
}
