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
//! guarded (`segment_store::mmap::GuardedMap`: a truncation under it reads as zeros and fails the
//! plan instead of raising `SIGBUS`), or reads them through the storage where it cannot map.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use record_format::{Batches, LogEntry, RecordBatch};
use rustc_hash::{FxHashMap, FxHashSet};
use segment_store::file_name::{
    file_name, parse_file_name, segment_file_path, FileKind, TempSuffix,
};
use segment_store::{
    index_storage, scan_segment, AbortedTxn, DirLock, IndexCorruption, LocalLog, OffsetIndexView,
    OffsetPosition, ParsedName, ReadOnlyBytes, RecoveryVisitor, SegmentConfig, SegmentError,
    SegmentScan, SegmentScanner, TimeIndexView, TxnIndexView,
};

use crate::audit::{AuditFinding, ProducerAudit};
use crate::error::SnapshotError;
use crate::leader_epoch::LeaderEpochFileCache;
use crate::loader::{
    move_into_quarantine, remove_empty_quarantine_dir, remove_segment_file, rename_segment_file,
    CutInfo, LoadOptions, LogLoader, RecoveryReport, QUARANTINE_DIR,
};
use crate::log::{PartitionLog, PartitionLogError};
use crate::mirror::{MirrorStateFile, MirrorStateStore};
use crate::producer_state::{
    AppliedBatches, ExpiredProducer, ProducerStateManager, ProducerStateWarning,
};
use crate::snapshot::{list_snapshots_with, read_snapshot_with, SnapshotIo, StorageIo};
use crate::summary::BatchSummary;
use segment_store::index::txn::ENTRY_SIZE as TXN_ENTRY_SIZE;
use segment_store::segment::READ_CHUNK_BYTES;

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
fn replaced_path(qdir: &Path, path: &Path) -> PathBuf {
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
    fn set_aside_to(&self, qdir: &Path) -> Option<PathBuf> {
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
    fn is_temp(&self) -> bool {
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
    /// An offset index of more than [`MAX_SORTED_ENTRIES`] entries whose positions are not in
    /// order: its entries are not checked one by one against the batches.
    OutOfOrderNotChecked {
        /// How many entries it has.
        entries: usize,
    },
    /// Entry problems of the segment's indexes past the first [`MAX_ENTRY_FINDINGS`] listed:
    /// counted, not listed (a damaged index of millions of entries would fill memory with them).
    MoreEntryProblems {
        /// How many.
        count: u64,
    },
}

/// The most offset-index entries sorted by position to check an index whose positions are out of
/// order ([`IndexProblem::OutOfOrderNotChecked`] past it).
pub const MAX_SORTED_ENTRIES: usize = 1 << 20;

/// How many entry problems ([`IndexProblem::EntryBeyondLog`], `NotBatchBoundary`,
/// `OffsetMismatch`, `TimeEntryBeyondLog`) are listed per segment and kind of check.
pub const MAX_ENTRY_FINDINGS: usize = 1000;

/// Pushes `f` if `findings` holds fewer than [`MAX_ENTRY_FINDINGS`]; counts it otherwise.
fn push_capped(findings: &mut Vec<IndexFinding>, f: IndexFinding, omitted: &mut u64) {
    if findings.len() < MAX_ENTRY_FINDINGS {
        findings.push(f);
    } else {
        *omitted += 1;
    }
}

/// The [`IndexProblem::MoreEntryProblems`] finding for `omitted` problems, if any.
fn more_entry_problems(omitted: u64) -> Option<IndexFinding> {
    (omitted > 0).then_some(IndexFinding {
        kind: FileKind::Index,
        problem: IndexProblem::MoreEntryProblems { count: omitted },
    })
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
    /// The collision audit's findings ([`LogLoader::plan_audited`] only).
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
        self.had_clean_shutdown && !self.options.full
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
                        segment_store::file_name::quarantine_file_name(
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

    /// The report [`LogLoader::apply`] gives for this plan (the same fields, predicted).
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

// ------------------------------------------------------------------------------------------------
// Snapshot overlay: the producer-state rules run unchanged, their file operations recorded.
// ------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Overlay {
    /// Files the plan changes, as it leaves them. (Hashed: the plan of a full recovery writes a
    /// snapshot per segment, and ordering paths compares them component by component.)
    files: FxHashMap<PathBuf, FileState>,
    ops: Vec<(SnapshotPhase, SnapshotOp)>,
    phase: Option<SnapshotPhase>,
}

/// A file of the [`Overlay`].
struct FileState {
    content: Content,
    /// A `Write` among the overlay's operations wrote it.
    written: bool,
}

/// What a file of the [`Overlay`] holds.
enum Content {
    /// Removed (or moved away).
    Removed,
    /// Moved here with these bytes.
    Bytes(Vec<u8>),
    /// The bytes of the `Write` at this index of the operations (kept once, not twice).
    Written(usize),
}

impl Overlay {
    /// Sets what `path` holds, keeping whether it was written.
    fn set(&mut self, path: &Path, content: Content) {
        match self.files.get_mut(path) {
            Some(f) => f.content = content,
            None => {
                self.files.insert(
                    path.to_path_buf(),
                    FileState {
                        content,
                        written: false,
                    },
                );
            }
        }
    }

    /// The bytes of `path`: `None` if the plan did not change it, `Some(None)` if removed.
    fn bytes_of(&self, path: &Path) -> Option<Option<&[u8]>> {
        let f = self.files.get(path)?;
        Some(match &f.content {
            Content::Removed => None,
            Content::Bytes(b) => Some(b),
            Content::Written(i) => match self.ops.get(*i) {
                Some((_, SnapshotOp::Write { bytes, .. })) => Some(bytes),
                _ => None,
            },
        })
    }
}

/// A [`SnapshotIo`] that reads through the real one and records every change instead of making it.
struct PlanIo {
    base: StorageIo,
    overlay: Mutex<Overlay>,
    /// Each directory's names as listed once: a plan changes nothing, so they stay true.
    listed: Mutex<BTreeMap<PathBuf, BTreeSet<String>>>,
}

impl PlanIo {
    /// `listed`: a directory and its names, as the plan already listed them.
    fn new(base: StorageIo, listed: (PathBuf, &[OsString])) -> Self {
        let (dir, names) = listed;
        let names = names.iter().filter_map(|n| n.to_str()).map(str::to_owned);
        Self {
            base,
            overlay: Mutex::new(Overlay {
                phase: Some(SnapshotPhase::BeforeInstall),
                ..Overlay::default()
            }),
            listed: Mutex::new(BTreeMap::from([(dir, names.collect())])),
        }
    }

    /// The names of `dir` on the storage (listed at most once; a missing directory is empty)
    /// that `keep` keeps.
    fn base_list(
        &self,
        dir: &Path,
        mut keep: impl FnMut(&str) -> bool,
    ) -> io::Result<BTreeSet<String>> {
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        work::probe(1);
        if !listed.contains_key(dir) {
            let names: BTreeSet<String> = match self.base.list(dir) {
                Ok(n) => n.into_iter().collect(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
                Err(e) => return Err(e),
            };
            listed.insert(dir.to_path_buf(), names);
        }
        Ok(listed
            .get(dir)
            .into_iter()
            .flatten()
            .filter(|n| keep(n))
            .cloned()
            .collect())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Overlay> {
        self.overlay.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_phase(&self, phase: SnapshotPhase) {
        self.lock().phase = Some(phase);
    }

    fn record(&self, op: SnapshotOp) {
        let mut o = self.lock();
        let phase = o.phase.unwrap_or(SnapshotPhase::AfterInstall);
        o.ops.push((phase, op));
    }

    fn move_file(&self, from: &Path, to: &Path) -> io::Result<()> {
        // A file longer than a snapshot is read is not carried over (nothing in the plan reads
        // it at its new name): its move is recorded, its bytes are never in memory.
        let bytes = match self.read_capped(from, crate::snapshot::MAX_SNAPSHOT_BYTES) {
            Ok(bytes) => Some(bytes),
            Err(e) if crate::snapshot::too_large_size(&e).is_some() => None,
            Err(e) => return Err(e),
        };
        let mut o = self.lock();
        o.set(from, Content::Removed);
        if let Some(bytes) = bytes {
            o.set(to, Content::Bytes(bytes));
        }
        Ok(())
    }

    fn quarantine(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.move_file(from, to)?;
        self.record(SnapshotOp::Quarantine {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    /// Whether the plan writes `path` (a snapshot the scan takes).
    fn written(&self, path: &Path) -> bool {
        work::probe(1);
        self.lock().files.get(path).is_some_and(|f| f.written)
    }

    fn into_ops(self) -> Vec<(SnapshotPhase, SnapshotOp)> {
        self.overlay
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .ops
    }
}

impl SnapshotIo for PlanIo {
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.lock().bytes_of(path) {
            Some(Some(b)) => return Ok(b.to_vec()),
            Some(None) => return Err(io::Error::from(io::ErrorKind::NotFound)),
            None => {}
        }
        self.base.read(path)
    }

    fn read_capped(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        match self.lock().bytes_of(path) {
            Some(Some(b)) if b.len() as u64 > limit => {
                return Err(crate::snapshot::file_too_large(path, b.len() as u64, limit))
            }
            Some(Some(b)) => return Ok(b.to_vec()),
            Some(None) => return Err(io::Error::from(io::ErrorKind::NotFound)),
            None => {}
        }
        self.base.read_capped(path, limit)
    }

    fn write_atomically(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut o = self.lock();
        let phase = o.phase.unwrap_or(SnapshotPhase::AfterInstall);
        let at = o.ops.len();
        o.ops.push((
            phase,
            SnapshotOp::Write {
                path: path.to_path_buf(),
                bytes: bytes.to_vec(),
            },
        ));
        o.set(path, Content::Written(at));
        if let Some(f) = o.files.get_mut(path) {
            f.written = true;
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let o = self.lock();
        let mut names = self.base_list(dir, |n| {
            work::probe(1);
            !matches!(
                o.files.get(&dir.join(n)),
                Some(FileState {
                    content: Content::Removed,
                    ..
                })
            )
        })?;
        for (p, f) in &o.files {
            if !matches!(f.content, Content::Removed) && p.parent() == Some(dir) {
                if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
                    work::probe(1);
                    names.insert(n.to_owned());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        // The snapshot rules rename only to set a corrupt snapshot aside.
        self.move_file(from, to)?;
        self.record(SnapshotOp::SetAside {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
        });
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        if let Some(f) = self.lock().files.get(path) {
            return !matches!(f.content, Content::Removed);
        }
        let listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        match (path.parent().and_then(|d| listed.get(d)), path.file_name()) {
            (Some(names), Some(name)) => {
                work::probe(1);
                name.to_str().is_some_and(|n| names.contains(n))
            }
            _ => self.base.exists(path),
        }
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.lock().set(path, Content::Removed);
        self.record(SnapshotOp::Remove {
            path: path.to_path_buf(),
        });
        Ok(())
    }
}

// ------------------------------------------------------------------------------------------------
// Planning
// ------------------------------------------------------------------------------------------------

/// A live segment file and where its bytes are before the leftovers are handled. Its path is
/// `<dir>/<its name>` ([`LiveFile::path`]): a partition of 100,000 segments has 300,000 of them,
/// so no path is kept but a `.swap`'s.
#[derive(Debug, Clone)]
struct LiveFile {
    parsed: ParsedName,
    /// The `.swap` renamed into place as this file; `None`: the file itself.
    swap: Option<PathBuf>,
}

impl LiveFile {
    /// Its live name in `dir` (a parsed name without a temporary suffix is exactly
    /// [`file_name`]'s).
    fn path(&self, dir: &Path) -> PathBuf {
        segment_file_path(dir, self.parsed.base_offset, self.parsed.kind)
    }

    /// Where its bytes are before the leftovers are handled.
    fn source(&self, dir: &Path) -> PathBuf {
        self.swap.clone().unwrap_or_else(|| self.path(dir))
    }
}

/// The live files of a plan by (base offset, kind): one segment's files are found by a binary
/// search, not by a pass over every file of the partition.
struct LiveIndex<'a> {
    /// By (base offset, kind); files of the same key in their order among the live files.
    files: Vec<&'a LiveFile>,
}

impl<'a> LiveIndex<'a> {
    fn new(live: &'a [LiveFile]) -> Self {
        let mut files: Vec<&LiveFile> = live.iter().collect();
        // Stable: of two files with one key, the first among `live` is found, as a pass finds it.
        files.sort_by_key(|f| (f.parsed.base_offset, f.parsed.kind));
        LiveIndex { files }
    }

    /// The first live file of the segment at `base` of `kind`.
    fn get(&self, base: i64, kind: FileKind) -> Option<&'a LiveFile> {
        let key = (base, kind);
        let at = match search_by(&self.files, |f| {
            (f.parsed.base_offset, f.parsed.kind)
                .cmp(&key)
                // The first of equal keys: search on as if the key were greater.
                .then(std::cmp::Ordering::Greater)
        }) {
            Ok(i) | Err(i) => i,
        };
        self.files
            .get(at)
            .copied()
            .filter(|f| (f.parsed.base_offset, f.parsed.kind) == key)
    }
}

fn not_found_is_empty<T>(r: Result<Vec<T>, SegmentError>) -> Result<Vec<T>, SegmentError> {
    match r {
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => Ok(Vec::new()),
        r => r,
    }
}

/// Whether `name` is a live `.log`, `.index`, `.timeindex` or `.txnindex`: nothing but the
/// segment planning looks at those names (the snapshot rules never list nor ask for them).
fn is_live_segment_name(name: &OsString) -> bool {
    parse_file_name(name).is_ok_and(|p| p.temp.is_none() && p.kind != FileKind::Snapshot)
}

/// Kafka `removeTempFilesAndCollectSwapFiles` + swap completion and orphan index removal, decided
/// only: the actions, the live files they leave, and the names of `dir` as listed but the live
/// segment files' ([`is_live_segment_name`]).
#[allow(clippy::type_complexity)]
fn plan_leftovers(
    opts: &LoadOptions,
    dir: &Path,
) -> Result<(Vec<LeftoverAction>, Vec<LiveFile>, Vec<OsString>), PartitionLogError> {
    let storage = &opts.env.storage;
    let mut actions = Vec::new();
    let typed = not_found_is_empty(storage.list_dir_typed(dir))?;
    refuse_hostile_entries(dir, &typed)?;
    let mut names: Vec<OsString> = typed.into_iter().map(|(n, _)| n).collect();
    let mut parsed: Vec<(&OsString, ParsedName)> = names
        .iter()
        .filter_map(|name| parse_file_name(name).ok().map(|p| (name, p)))
        .collect();
    // In the order of their paths (all in `dir`): by name.
    parsed.sort_by(|a, b| a.0.cmp(b.0));
    let min_cleaned = parsed
        .iter()
        .filter(|(_, p)| p.temp == Some(TempSuffix::Cleaned))
        .map(|(_, p)| p.base_offset)
        .min()
        .unwrap_or(i64::MAX);
    let mut swaps = Vec::new();
    let mut live = Vec::with_capacity(parsed.len());
    for (name, p) in parsed {
        match p.temp {
            Some(TempSuffix::Deleted) | Some(TempSuffix::Cleaned) => {
                let path = dir.join(name);
                actions.push(LeftoverAction::Remove { path, kind: p.kind });
            }
            Some(TempSuffix::Swap) if p.base_offset >= min_cleaned => {
                let path = dir.join(name);
                actions.push(LeftoverAction::Remove { path, kind: p.kind });
            }
            Some(TempSuffix::Swap) => swaps.push((dir.join(name), p)),
            None => live.push(LiveFile {
                parsed: p,
                swap: None,
            }),
        }
    }
    names.retain(|n| !is_live_segment_name(n));
    // A cleaner's completed output is renamed into place and replaces the segments in its range
    // (Kafka's swap completion); any other `.swap` is stray and moves to quarantine.
    let (complete, stray) = classify_swaps(opts, dir, swaps, &live)?;
    for (path, p) in stray {
        actions.push(LeftoverAction::Quarantine { path, kind: p.kind });
    }
    if let Some((lo, hi)) = complete.range {
        for f in &live {
            let p = &f.parsed;
            if p.kind != FileKind::Snapshot && p.base_offset >= lo && p.base_offset < hi {
                actions.push(LeftoverAction::Remove {
                    path: f.path(dir),
                    kind: p.kind,
                });
            }
        }
        live.retain(|f| {
            let p = &f.parsed;
            p.kind == FileKind::Snapshot || p.base_offset < lo || p.base_offset >= hi
        });
    }
    // A live file is named by its (base offset, kind).
    let live_keys: FxHashSet<(i64, FileKind)> = if complete.swaps.is_empty() {
        FxHashSet::default()
    } else {
        live.iter()
            .map(|f| (f.parsed.base_offset, f.parsed.kind))
            .collect()
    };
    let mut replaced = FxHashSet::default();
    let mut renamed = Vec::with_capacity(complete.swaps.len());
    for (path, p) in &complete.swaps {
        if matches!(p.kind, FileKind::Index | FileKind::TimeIndex) {
            // Kafka deletes a swap's offset and time indexes and rebuilds them from the
            // CRC-valid `.log.swap` (`removeTempFilesAndCollectSwapFiles`): derived data whose
            // bytes a crash may have left anywhere between written and synced.
            actions.push(LeftoverAction::Remove {
                path: path.clone(),
                kind: p.kind,
            });
            continue;
        }
        let to = segment_file_path(dir, p.base_offset, p.kind);
        work::probe(1);
        if live_keys.contains(&(p.base_offset, p.kind)) {
            // Not covered by the swapped range, yet the rename would replace it.
            actions.push(LeftoverAction::SetAside {
                path: to.clone(),
                kind: p.kind,
            });
            replaced.insert((p.base_offset, p.kind));
        }
        actions.push(LeftoverAction::Rename {
            from: path.clone(),
            to: to.clone(),
            kind: p.kind,
        });
        renamed.push(LiveFile {
            parsed: ParsedName { temp: None, ..*p },
            swap: Some(path.clone()),
        });
    }
    if !replaced.is_empty() {
        live.retain(|f| !replaced.contains(&(f.parsed.base_offset, f.parsed.kind)));
    }
    live.extend(renamed);
    // Orphan indexes (no `.log`).
    let logs: std::collections::BTreeSet<i64> = live
        .iter()
        .filter(|f| f.parsed.kind == FileKind::Log)
        .map(|f| f.parsed.base_offset)
        .collect();
    live.retain(|f| {
        let orphan = matches!(
            f.parsed.kind,
            FileKind::Index | FileKind::TimeIndex | FileKind::TxnIndex
        ) && !logs.contains(&f.parsed.base_offset);
        if orphan {
            actions.push(LeftoverAction::Remove {
                path: f.path(dir),
                kind: f.parsed.kind,
            });
        }
        !orphan
    });
    Ok((actions, live, names))
}

/// Names of a partition directory that seglog reads or writes, besides those
/// [`parse_file_name`] knows (segment files, snapshots and their temporary forms).
const PARTITION_FILES: [&str; 4] = [
    segment_store::file_name::LOCK_FILE_NAME,
    segment_store::file_name::LEADER_EPOCH_CHECKPOINT_FILE,
    segment_store::file_name::PARTITION_METADATA_FILE,
    crate::mirror::MIRROR_STATE_FILE,
];

/// Refuses the partition if one of its names is a symlink, if a name seglog reads or writes as a
/// file is anything but a regular file, or if `quarantine` is not a directory: writing through
/// such a name could reach outside the log directory, reading it could block forever.
fn refuse_hostile_entries(
    dir: &Path,
    entries: &[(OsString, segment_store::EntryType)],
) -> Result<(), PartitionLogError> {
    use segment_store::EntryType;
    for (name, found) in entries {
        let refused = match found {
            EntryType::Symlink => true,
            _ if name == QUARANTINE_DIR => *found != EntryType::Dir,
            EntryType::File => false,
            _ => {
                let base = name.to_str().map(|n| {
                    n.strip_suffix(segment_store::file_name::CHECKPOINT_TMP_SUFFIX)
                        .unwrap_or(n)
                });
                parse_file_name(name).is_ok()
                    || base.is_some_and(|b| {
                        PARTITION_FILES.contains(&b)
                            || parse_file_name(std::ffi::OsStr::new(b)).is_ok()
                    })
            }
        };
        if refused {
            return Err(PartitionLogError::Refused {
                path: dir.join(name),
                found: *found,
            });
        }
    }
    Ok(())
}

/// The `.swap` files a cleaner completed, and the offset range their `.log.swap`s cover.
#[derive(Default)]
struct CompleteSwaps {
    swaps: Vec<(PathBuf, ParsedName)>,
    range: Option<(i64, i64)>,
}

/// The offset range `[base, next)` of a `.log.swap` that is CRC-valid throughout (every byte in a
/// batch whose CRC matches, at least one batch); `None` for any other.
fn valid_swap_range(
    opts: &LoadOptions,
    path: &Path,
    base: i64,
) -> Result<Option<(i64, i64)>, PartitionLogError> {
    // Mapped when large, never read whole into memory (a `.swap` is a segment's size).
    let bytes = open_index(opts.env.storage.as_ref(), path, None)?;
    let bytes = bytes.bytes();
    let mut batches = Batches::new(bytes, 0).validate_crc(true);
    let mut next = None;
    for entry in batches.by_ref() {
        match entry {
            Ok(e) if e.last_offset() >= base => {
                next = Some(next.unwrap_or(base).max(e.last_offset().saturating_add(1)))
            }
            _ => return Ok(None),
        }
    }
    Ok(next
        .filter(|_| batches.valid_prefix_end() == bytes.len() as u64)
        .map(|n| (base, n)))
}

/// The next offset of the live `.log` at `path` (its base when it holds no batch): the end of its
/// valid batches.
fn live_log_next_offset(
    opts: &LoadOptions,
    path: &Path,
    base: i64,
) -> Result<i64, PartitionLogError> {
    let bytes = open_index(opts.env.storage.as_ref(), path, None)?;
    let mut next = base;
    for entry in Batches::new(bytes.bytes(), 0).flatten() {
        next = next.max(entry.last_offset().saturating_add(1));
    }
    Ok(next)
}

/// Splits `swaps` into a cleaner's completed output and stray files. The `.log.swap`s are
/// complete when each is CRC-valid throughout and together they cover exactly the live segments
/// they replace (those whose base offset lies in their range): the range ends at or after the
/// last offset of the last segment replaced, so no offset the log holds is lost. A `.index`,
/// `.timeindex` or `.txnindex` swap is complete when its `.log.swap` is. Everything else is stray
/// (renaming it into place would replace a live file, or drop offsets the log holds).
fn classify_swaps(
    opts: &LoadOptions,
    dir: &Path,
    swaps: Vec<(PathBuf, ParsedName)>,
    live: &[LiveFile],
) -> Result<(CompleteSwaps, Vec<(PathBuf, ParsedName)>), PartitionLogError> {
    let mut valid_logs = BTreeMap::new();
    let mut any_invalid = false;
    for (path, p) in swaps.iter().filter(|(_, p)| p.kind == FileKind::Log) {
        match valid_swap_range(opts, path, p.base_offset)? {
            Some(r) => {
                valid_logs.insert(p.base_offset, r);
            }
            None => any_invalid = true,
        }
    }
    let mut range: Option<(i64, i64)> = None;
    for &(lo, hi) in valid_logs.values() {
        range = Some(match range {
            None => (lo, hi),
            Some((a, b)) => (a.min(lo), b.max(hi)),
        });
    }
    // The last live segment the range replaces must end inside it.
    let covers = match range {
        None => false,
        Some((lo, hi)) => {
            let last = live
                .iter()
                .filter(|f| {
                    f.parsed.kind == FileKind::Log
                        && f.parsed.base_offset >= lo
                        && f.parsed.base_offset < hi
                })
                .max_by_key(|f| f.parsed.base_offset);
            match last {
                None => true,
                Some(f) => live_log_next_offset(opts, &f.source(dir), f.parsed.base_offset)? <= hi,
            }
        }
    };
    // One stray `.log.swap` among them: the group is not a cleaner's output as found.
    let complete = covers && !any_invalid;
    let mut out = CompleteSwaps::default();
    let mut stray = Vec::new();
    for (path, p) in swaps {
        if complete && valid_logs.contains_key(&p.base_offset) {
            out.swaps.push((path, p));
        } else {
            stray.push((path, p));
        }
    }
    if complete {
        out.range = range;
    }
    Ok((out, stray))
}

/// Reads an index file that may be missing. Offset and time indexes live on the real file system
/// where the storage can map (`segment_store::index_storage`), and there, under the directory
/// lock, those of `file_records::MAP_MIN_BYTES` or more are mapped rather than read ([`ReadOnlyBytes::open`]): loading looks at their first and
/// last entries only, and a crashed broker's are preallocated to 10 MiB of zeros each (reading
/// them took a tenth of recovering a 1 GiB segment).
fn read_index(
    opts: &LoadOptions,
    lock: Option<&DirLock>,
    path: &Path,
    kind: FileKind,
) -> Result<ReadOnlyBytes, PartitionLogError> {
    let r = if matches!(kind, FileKind::Index | FileKind::TimeIndex) {
        open_index(index_storage(opts.env.storage.as_ref()), path, lock)
    } else {
        open_index(opts.env.storage.as_ref(), path, None)
    }
    .map_err(PartitionLogError::from);
    match r {
        Err(PartitionLogError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Ok(ReadOnlyBytes::Owned(Vec::new()))
        }
        Err(PartitionLogError::Segment(e)) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
            Ok(ReadOnlyBytes::Owned(Vec::new()))
        }
        r => r,
    }
}

/// The longest index read into memory where it cannot be mapped (storage that cannot map, or no
/// guarded map to be had): a longer one is [`SegmentError::FileTooLarge`].
const MAX_INDEX_READ_BYTES: u64 = 32 << 20;

/// [`ReadOnlyBytes::open`] of an index (or a `.swap`), never read whole into memory when large:
/// without the lock (`verify`) a file of [`segment_store::file_records::MAP_MIN_BYTES`] or more
/// is a guarded map (page cache, not the process's memory); where no map can be made, one longer
/// than [`MAX_INDEX_READ_BYTES`] is refused with its size.
fn open_index(
    storage: &dyn segment_store::Storage,
    path: &Path,
    lock: Option<&DirLock>,
) -> Result<ReadOnlyBytes, SegmentError> {
    let handle = storage.open(path, segment_store::OpenMode::Read)?;
    let size = handle.len()?;
    if lock.is_none() {
        if let Some(map) = ReadOnlyBytes::map_guarded(storage, path, size)? {
            return Ok(map);
        }
    }
    if ReadOnlyBytes::map_lock(storage, lock, size).is_none() && size > MAX_INDEX_READ_BYTES {
        return Err(SegmentError::FileTooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_INDEX_READ_BYTES,
        });
    }
    ReadOnlyBytes::from_handle(storage, path, handle, size, lock)
}

/// How far behind the batch being applied a guarded map's pages are let go of, and how many
/// bytes at a time ([`ReadOnlyBytes::release`]).
const RELEASE_STEP_BYTES: usize = 8 << 20;

/// The released ranges start and end at multiples of this (x86-64's PMD size).
const RELEASE_ALIGN_BYTES: usize = 2 << 20;

/// The bytes of the segments, opened when first needed.
struct Sources<'a> {
    opts: &'a LoadOptions,
    lock: Option<&'a DirLock>,
    /// The partition directory.
    dir: &'a Path,
    /// base → (where its bytes are, valid length after recovery)
    open: BTreeMap<i64, (Source, Option<u64>)>,
    /// The bytes of the one segment open (one segment in memory at a time, whatever their
    /// number).
    current: Option<(i64, ReadOnlyBytes)>,
}

/// Where the bytes of a segment of [`Sources`] are.
enum Source {
    /// Its own `.log` in the partition directory.
    Log,
    /// The `.swap` renamed into place as its `.log`.
    Swap(PathBuf),
    /// None: the empty segment at 0 of an empty directory.
    Empty,
}

impl<'a> Sources<'a> {
    /// Where the bytes of the segment at `base` are read from.
    fn path(dir: &Path, base: i64, source: &Source) -> PathBuf {
        match source {
            Source::Swap(p) => p.clone(),
            Source::Log | Source::Empty => segment_file_path(dir, base, FileKind::Log),
        }
    }

    /// The bytes of the segment at `base` open in [`Self::current`] (`false`: it has none).
    fn open_current(&mut self, base: i64) -> Result<bool, PartitionLogError> {
        let Some((source, _)) = self.open.get(&base) else {
            return Ok(false);
        };
        if matches!(source, Source::Empty) {
            return Ok(false);
        }
        if self.current.as_ref().is_none_or(|(b, _)| *b != base) {
            let path = Self::path(self.dir, base, source);
            // The other segment's bytes go first: one open at a time.
            self.current = None;
            let bytes = ReadOnlyBytes::open(self.opts.env.storage.as_ref(), &path, self.lock)?;
            self.current = Some((base, bytes));
        }
        Ok(true)
    }

    fn bytes(&mut self, base: i64) -> Result<&[u8], PartitionLogError> {
        if !self.open_current(base)? {
            return Ok(&[]);
        }
        let valid = self.open.get(&base).and_then(|(_, v)| *v);
        let all = self.current.as_ref().map_or(&[][..], |(_, b)| b.bytes());
        let len = valid.map_or(all.len(), |v| usize::try_from(v).unwrap_or(usize::MAX));
        Ok(all.get(..len).unwrap_or(all))
    }

    fn set_valid(&mut self, base: i64, valid: u64) {
        if let Some((_, v)) = self.open.get_mut(&base) {
            *v = Some(valid);
        }
    }

    /// Recovery's scan of the segment at `base`. A file of 1 MiB or more is mapped and scanned
    /// in place ([`scan_segment`]): the helper threads fault its pages in and check the CRCs
    /// where the bytes lie, and this thread applies the entries they hand over from the header
    /// fields they copied, without touching the map again. No byte is copied, which a map wins
    /// wherever the page cache holds the file in large folios, and it is on par with reading
    /// where a writer left small pages (docs/benchmarks.md). Under the directory lock the map is
    /// an [`segment_store::mmap::MmapFile`]; without it (`verify`), a guarded map
    /// ([`ReadOnlyBytes::map_guarded`]): a broker truncating the file meanwhile makes the pages
    /// past its new end read as zeros instead of raising `SIGBUS`, and the scan ends in
    /// [`SegmentError::TruncatedWhileRead`]; its pages are let go of behind the scan, so memory
    /// is bounded by the scan's window. On storage that cannot be mapped (or where no guarded map
    /// can be made), a file longer than one chunk ([`READ_CHUNK_BYTES`]) is read through a file
    /// handle, a chunk at a time, each checked while it is in the CPU's cache
    /// ([`SegmentScanner::scan_file`]); memory is bounded by a few chunks, not the segment. A
    /// smaller one is read whole, once, into a reused buffer ([`ReadOnlyBytes::read_from`]).
    fn scan(
        &mut self,
        base: i64,
        config: &SegmentConfig,
        visitor: &mut RecoveryVisitor<'_, PartitionLogError>,
    ) -> Result<SegmentScan, PartitionLogError> {
        let Some((source, _)) = self.open.get(&base) else {
            return Err(PartitionLogError::from(SegmentError::io(
                PathBuf::new(),
                "scan",
                io::Error::from(io::ErrorKind::NotFound),
            )));
        };
        let path = Self::path(self.dir, base, source);
        let has_file = !matches!(source, Source::Empty);
        if has_file && self.current.as_ref().is_none_or(|(b, _)| *b != base) {
            self.current = None;
            let storage = self.opts.env.storage.as_ref();
            let handle = storage.open(&path, segment_store::OpenMode::Read)?;
            let size = handle.len()?;
            let guarded = match self.lock {
                None => ReadOnlyBytes::map_guarded(storage, &path, size)?,
                Some(_) => None,
            };
            if let Some(bytes) = guarded {
                self.current = Some((base, bytes));
            } else {
                let mapped = ReadOnlyBytes::map_lock(storage, self.lock, size).is_some();
                if !mapped && size > READ_CHUNK_BYTES as u64 {
                    let mut scanner = SegmentScanner::new(&path, base, size, config);
                    scanner.scan_file(handle.as_ref(), visitor)?;
                    return Ok(scanner.finish());
                }
                let bytes = ReadOnlyBytes::from_handle(storage, &path, handle, size, self.lock)?;
                self.current = Some((base, bytes));
            }
        }
        let len = self.bytes(base)?.len();
        let source = self
            .current
            .as_ref()
            .filter(|(b, _)| has_file && *b == base)
            .map(|(_, s)| s);
        let Some(source) = source else {
            return scan_segment(&path, &[], base, config, visitor);
        };
        let bytes = source.bytes().get(..len).unwrap_or_default();
        // A guarded map lets go of the pages behind the batch being applied as the scan moves
        // on (the helpers walk at most a few regions ahead of it), so memory is bounded by the
        // scan's window, as with reading, not by the segment.
        let mut released = 0usize;
        let mut behind = |batch: &RecordBatch<'_>, aborted: &mut Vec<AbortedTxn>| {
            let at = usize::try_from(batch.position()).unwrap_or(usize::MAX);
            if at.saturating_sub(released) >= 2 * RELEASE_STEP_BYTES {
                // On a 2 MiB boundary: a range that ends inside a 2 MiB folio mapped whole makes
                // the kernel split that mapping first.
                let to = (at - RELEASE_STEP_BYTES) / RELEASE_ALIGN_BYTES * RELEASE_ALIGN_BYTES;
                source.release(released, to);
                released = to;
            }
            visitor(batch, aborted)
        };
        let scan = match source {
            ReadOnlyBytes::Guarded(_) => scan_segment(&path, bytes, base, config, &mut behind),
            _ => scan_segment(&path, bytes, base, config, visitor),
        };
        // Zeros read where the file was cut under a map without the lock are not the file's: no
        // plan is made of them.
        if source.was_truncated() {
            return Err(SegmentError::TruncatedWhileRead { path }.into());
        }
        scan
    }

    /// Drops the bytes of `base` (opened again if needed): one segment in memory at a time.
    fn release(&mut self, base: i64) {
        if self.current.as_ref().is_some_and(|(b, _)| *b == base) {
            self.current = None;
        }
    }

    fn forget(&mut self, base: i64) {
        self.release(base);
        self.open.remove(&base);
    }

    /// Kafka's `loadProducersFromRecords` over the bytes: every v2 batch with base offset in
    /// `[from, to)` of the segments, applied with the replication rules, in place.
    fn replay(
        &mut self,
        psm: &mut ProducerStateManager,
        from: i64,
        to: i64,
        seen: &mut dyn FnMut(&BatchSummary),
    ) -> Result<(), PartitionLogError> {
        let bases: Vec<i64> = self.open.keys().copied().collect();
        let mut applied = AppliedBatches::default();
        for (i, &base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied().unwrap_or(i64::MAX);
            if next_base <= from || base >= to {
                continue;
            }
            let bytes = self.bytes(base)?;
            for entry in Batches::new(bytes, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                if batch.last_offset() >= to {
                    return Ok(());
                }
                if batch.base_offset() >= from {
                    let summary = BatchSummary::from_batch(&batch)?;
                    seen(&summary);
                    psm.apply_replicated_batch(&summary, &mut applied)?;
                    applied.clear();
                }
            }
        }
        Ok(())
    }
}

/// The check of one scanned segment's offset and time index entries against its batches, over
/// the index files' bytes (no copy of the entries, unless the offset index is out of order).
struct IndexCheck {
    base: i64,
    /// The offset index's bytes.
    index: ReadOnlyBytes,
    /// The time index's bytes.
    time: ReadOnlyBytes,
    /// The `.log`'s size: entries at or past it were reported already and are skipped.
    log_size: u64,
    /// How many offset-index entries there are (up to a zero-filled preallocated tail).
    count: usize,
    /// The entries inside the `.log` as (entry number, entry) by position, when the index does
    /// not list them in that order itself.
    sorted: Option<Vec<(usize, OffsetPosition)>>,
    /// The next entry (of `sorted`, or of the index) not compared yet.
    next: usize,
    /// That entry's position (`u64::MAX` when there is none): most batches are before it, and
    /// one comparison passes them (the check runs for every batch on the planning thread).
    next_position: u64,
    findings: Vec<IndexFinding>,
    /// Findings past [`MAX_ENTRY_FINDINGS`]: counted only.
    omitted: u64,
}

impl IndexCheck {
    /// The check of the offset index `index` and time index `time` of the segment at `base` whose
    /// `.log` has `log_size` bytes, and the findings about entries past the `.log`'s end.
    fn new(
        base: i64,
        index: ReadOnlyBytes,
        time: ReadOnlyBytes,
        log_size: u64,
    ) -> (Self, Vec<IndexFinding>) {
        let view = OffsetIndexView::new(base, index.bytes());
        let mut beyond = Vec::new();
        let mut beyond_omitted = 0u64;
        let (mut count, mut in_order, mut last_position) = (0, true, 0u32);
        while let Some(e) = view.entry(count) {
            // No real entry points at position 0: the preallocated tail starts here.
            if e.offset == base && e.position.0 == 0 {
                break;
            }
            if u64::from(e.position.0) >= log_size {
                let f = IndexFinding {
                    kind: FileKind::Index,
                    problem: IndexProblem::EntryBeyondLog {
                        entry: count,
                        offset: e.offset,
                        position: e.position.0,
                        log_size,
                    },
                };
                push_capped(&mut beyond, f, &mut beyond_omitted);
            } else {
                in_order &= e.position.0 >= last_position;
                last_position = e.position.0;
            }
            count += 1;
        }
        // An index not in position order is checked through a sorted copy of its entries: past
        // MAX_SORTED_ENTRIES (a copy of 24 MiB) it is reported as such, not checked entry by entry.
        let too_many = !in_order && count > MAX_SORTED_ENTRIES;
        if too_many {
            beyond.push(IndexFinding {
                kind: FileKind::Index,
                problem: IndexProblem::OutOfOrderNotChecked { entries: count },
            });
        }
        let sorted = (!in_order).then(|| {
            if too_many {
                return Vec::new();
            }
            let mut entries: Vec<(usize, OffsetPosition)> = (0..count)
                .filter_map(|n| view.entry(n).map(|e| (n, e)))
                .filter(|(_, e)| u64::from(e.position.0) < log_size)
                .collect();
            entries.sort_by_key(|(n, e)| (e.position, *n));
            entries
        });
        let mut check = IndexCheck {
            base,
            index,
            time,
            log_size,
            count,
            sorted,
            next: 0,
            next_position: 0,
            findings: Vec::new(),
            omitted: 0,
        };
        check.next_position = check.peek_position();
        beyond.extend(more_entry_problems(beyond_omitted));
        (check, beyond)
    }

    /// Both indexes are empty: [`Self::finish`] finds nothing whatever the scan.
    fn is_empty(&self) -> bool {
        self.index.bytes().is_empty() && self.time.bytes().is_empty()
    }

    /// The next entry inside the `.log` in position order, not consumed.
    fn peek(&mut self) -> Option<(usize, OffsetPosition)> {
        match &self.sorted {
            Some(entries) => entries.get(self.next).copied(),
            None => {
                let view = OffsetIndexView::new(self.base, self.index.bytes());
                while self.next < self.count {
                    let e = view.entry(self.next)?;
                    if u64::from(e.position.0) < self.log_size {
                        return Some((self.next, e));
                    }
                    self.next += 1;
                }
                None
            }
        }
    }

    /// The position of [`Self::peek`]'s entry, `u64::MAX` when there is none.
    fn peek_position(&mut self) -> u64 {
        self.peek()
            .map_or(u64::MAX, |(_, e)| u64::from(e.position.0))
    }

    /// The batch at `position` with `last_offset`, in log order.
    fn batch(&mut self, position: u64, last_offset: i64) {
        if position < self.next_position {
            return;
        }
        while let Some((n, e)) = self.peek() {
            let p = u64::from(e.position.0);
            if p > position {
                self.next_position = p;
                return;
            }
            self.next += 1;
            let problem = if p < position {
                IndexProblem::NotBatchBoundary {
                    entry: n,
                    offset: e.offset,
                    position: e.position.0,
                }
            } else if e.offset != last_offset {
                IndexProblem::OffsetMismatch {
                    entry: n,
                    index_offset: e.offset,
                    log_offset: last_offset,
                    position: e.position.0,
                }
            } else {
                continue;
            };
            let f = IndexFinding {
                kind: FileKind::Index,
                problem,
            };
            push_capped(&mut self.findings, f, &mut self.omitted);
        }
        self.next_position = u64::MAX;
    }

    /// The findings, once the scan is done: entries left inside the valid prefix are not on a
    /// batch boundary (those in the cut part are covered by the cut); a clean segment's time
    /// index must not name offsets past its last one.
    fn finish(mut self, scan: &SegmentScan) -> Vec<IndexFinding> {
        self.batch(scan.valid_bytes, i64::MIN);
        // `batch(valid_bytes, ..)` compared an entry at exactly `valid_bytes` as a mismatch: at
        // the cut it belongs to the part recovery cuts.
        self.findings.retain(|f| {
            !matches!(
                f.problem,
                IndexProblem::OffsetMismatch {
                    log_offset: i64::MIN,
                    ..
                }
            )
        });
        if scan.truncated_bytes() == 0 {
            if let Some(last) = scan.last_offset {
                let view = TimeIndexView::new(self.base, self.time.bytes());
                let entries = (0..view.entries())
                    .map_while(|n| view.entry(n).map(|e| (n, e)))
                    .take_while(|(_, e)| !(e.offset == self.base && e.timestamp == 0));
                let mut time_findings = Vec::new();
                for (n, e) in entries {
                    if e.offset > last {
                        let f = IndexFinding {
                            kind: FileKind::TimeIndex,
                            problem: IndexProblem::TimeEntryBeyondLog {
                                entry: n,
                                timestamp: e.timestamp,
                                offset: e.offset,
                                last_offset: last,
                            },
                        };
                        push_capped(&mut time_findings, f, &mut self.omitted);
                    }
                }
                self.findings.extend(time_findings);
            }
        }
        self.findings.extend(more_entry_problems(self.omitted));
        self.findings
    }

    /// The offset index's bytes.
    fn index_bytes(&self) -> &[u8] {
        self.index.bytes()
    }
}

/// The snapshot files of `dir` that do not read back, and those beyond `log_end`, each with what
/// recovery does with it (from the plan's operations).
fn snapshot_findings(
    opts: &LoadOptions,
    dir: &Path,
    ops: &[(SnapshotPhase, SnapshotOp)],
    log_end: i64,
) -> Result<Vec<SnapshotFinding>, PartitionLogError> {
    let io = StorageIo::new(Arc::clone(&opts.env.storage));
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

/// Kafka's `readNextOffset` over bytes: from the last offset-index entry's position, the offset
/// after the last batch whose header parses; `None` if a batch after that position does not
/// parse.
fn read_next_offset(base: i64, log: &[u8], index: &[u8]) -> Option<i64> {
    let from = OffsetIndexView::new(base, index).last_entry().position.0;
    let Some(rest) = log.get(usize::try_from(from).unwrap_or(usize::MAX)..) else {
        return Some(base);
    };
    let mut next = base;
    for entry in Batches::new(rest, u64::from(from)) {
        next = entry.ok()?.last_offset().saturating_add(1);
    }
    Some(next)
}

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
        segment_store::io::create_dir_all_durably(plan.options.env.storage.as_ref(), &plan.dir)?;
        let lock = DirLock::acquire_in(plan.options.env.storage.as_ref(), &plan.dir)?;
        apply_with(plan, lock)
    }

    /// Loads the partition in `dir`: [`Self::plan`] and [`Self::apply`] under one directory lock.
    pub fn load(
        dir: &Path,
        opts: &LoadOptions,
    ) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
        segment_store::io::create_dir_all_durably(opts.env.storage.as_ref(), dir)?;
        // A `.lock` that is a symlink: refused before it is opened (nothing is created
        // through it).
        let lock_path = dir.join(segment_store::file_name::LOCK_FILE_NAME);
        if let Some(
            found @ (segment_store::EntryType::Symlink
            | segment_store::EntryType::Dir
            | segment_store::EntryType::Other),
        ) = opts.env.storage.entry_type(&lock_path)?
        {
            return Err(PartitionLogError::Refused {
                path: lock_path,
                found,
            });
        }
        let lock = DirLock::acquire_in(opts.env.storage.as_ref(), dir)?;
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
        opts.env.storage.create_dir_all(dir)?;
        let plan = plan_with(dir, opts, Some(&log_dir_lock), false)?;
        apply_with(plan, log_dir_lock)
    }
}

/// The quarantine folder a recovery of `dir` would create: `<dir>/quarantine/<n>`, `n` a number
/// no folder there has ([`unused_quarantine_number`]).
/// `names`: the names of `dir` (no `quarantine` among them: no folder to list).
fn next_quarantine_dir(
    opts: &LoadOptions,
    dir: &Path,
    names: &[OsString],
) -> Result<PathBuf, PartitionLogError> {
    let root = dir.join(QUARANTINE_DIR);
    let existing = if names.iter().any(|n| n == QUARANTINE_DIR) {
        not_found_is_empty(opts.env.storage.list_dir(&root))?
    } else {
        Vec::new()
    };
    Ok(root.join(format!("{:04}", unused_quarantine_number(&existing))))
}

/// One more than the largest number among `names` (1 if there is none), or, when that would
/// wrap (a folder numbered `u64::MAX`), the smallest number no name has: never one in use.
fn unused_quarantine_number(names: &[OsString]) -> u64 {
    let used: std::collections::BTreeSet<u64> = names
        .iter()
        .filter_map(|name| name.to_str().and_then(|s| s.parse::<u64>().ok()))
        .collect();
    match used.last() {
        None => 1,
        Some(&max) => max.checked_add(1).unwrap_or_else(|| {
            // At most `used.len()` numbers are taken, so one of the first `used.len() + 1` is
            // free.
            (1..=u64::MAX)
                .find(|k| !used.contains(k))
                .unwrap_or(u64::MAX)
        }),
    }
}

/// The sanity checks of one segment's three indexes (Kafka's, through the shared views), and
/// for audited plans every offset- and time-index entry to check against the batches. Returns
/// what [`IndexesChecked`] holds.
fn check_indexes(
    opts: &LoadOptions,
    lock: Option<&DirLock>,
    base: i64,
    size: u64,
    [index_path, time_path, txn_path]: [Option<PathBuf>; 3],
    audit: bool,
) -> Result<IndexesChecked, PartitionLogError> {
    // A file the segment does not have (after leftovers) reads as empty.
    let read = |path: &Option<PathBuf>, kind| match path {
        Some(path) => read_index(opts, lock, path, kind),
        None => Ok(ReadOnlyBytes::Owned(Vec::new())),
    };
    let mut index_findings = Vec::new();
    // Beyond Kafka's sanity checks: the offset and time index of a segment holding batches must
    // be there (Kafka throws `NoSuchFileException` for a missing offset index and recovers the
    // segment; a missing time index it recreates empty, seglog rebuilds it too), and no longer
    // than `segment.index.bytes` (opening the active segment's would fail to resize it).
    let max = opts.config.log.max_index_size;
    let presence = |path: &Option<PathBuf>, len: usize| {
        if path.is_none() && size > 0 {
            Err(IndexCorruption::Missing)
        } else if len as u64 > max {
            Err(IndexCorruption::LargerThanMax {
                len: len as u64,
                max,
            })
        } else {
            Ok(())
        }
    };
    let index = read(&index_path, FileKind::Index)?;
    if let Err(problem) = presence(&index_path, index.bytes().len())
        .and_then(|()| OffsetIndexView::new(base, index.bytes()).sanity_check())
    {
        index_findings.push(IndexFinding {
            kind: FileKind::Index,
            problem: IndexProblem::Sanity(problem),
        });
    }
    let time = read(&time_path, FileKind::TimeIndex)?;
    if let Err(problem) = presence(&time_path, time.bytes().len())
        .and_then(|()| TimeIndexView::new(base, time.bytes()).sanity_check())
    {
        index_findings.push(IndexFinding {
            kind: FileKind::TimeIndex,
            problem: IndexProblem::Sanity(problem),
        });
    }
    let txn = read(&txn_path, FileKind::TxnIndex)?;
    let txn = txn.bytes();
    if let Err(problem) = TxnIndexView::new(base, txn).sanity_check() {
        index_findings.push(IndexFinding {
            kind: FileKind::TxnIndex,
            problem: IndexProblem::Sanity(problem),
        });
    }
    let sane = index_findings.is_empty();
    if txn.len() % TXN_ENTRY_SIZE != 0 {
        index_findings.push(IndexFinding {
            kind: FileKind::TxnIndex,
            problem: IndexProblem::TxnPartialEntry {
                len: txn.len() as u64,
            },
        });
    }
    // Checking every index entry is for audited plans (`verify`); loading needs only the
    // sanity checks above. The offset-index entries past the end of the `.log` are reported at
    // once, the others checked against the batches if the segment is scanned.
    if audit {
        let (check, beyond) = IndexCheck::new(base, index, time, size);
        index_findings.extend(beyond);
        return Ok(IndexesChecked {
            index: ReadOnlyBytes::Owned(Vec::new()),
            findings: index_findings,
            sane,
            check: Some(check),
        });
    }
    Ok(IndexesChecked {
        index,
        findings: index_findings,
        sane,
        check: None,
    })
}

/// What [`check_indexes`] found for one segment.
struct IndexesChecked {
    /// The offset index's bytes (in `check` instead, when there is one).
    index: ReadOnlyBytes,
    /// Every finding.
    findings: Vec<IndexFinding>,
    /// Whether Kafka's sanity checks passed (a partial `.txnindex` entry is reported only).
    sane: bool,
    /// (audited plans) the index entries to check against the batches.
    check: Option<IndexCheck>,
}

/// The segments of a plan (after the leftovers are handled) and what reading them found.
struct FoundSegments<'a> {
    /// The segments, by base offset.
    segments: Vec<SegmentPlan>,
    /// Their bytes, opened when first needed (an empty directory: one empty segment at 0).
    sources: Sources<'a>,
    /// The base offsets of `sources`, in order.
    bases: Vec<i64>,
    /// The segments whose indexes fail Kafka's sanity checks, in order.
    insane: Vec<i64>,
    /// (audited plans) the index entries to check against each scanned segment's batches.
    index_checks: BTreeMap<i64, IndexCheck>,
    /// The last segment's offset index.
    last_index: ReadOnlyBytes,
}

/// The segments of the `live` files, with their sizes and index findings.
fn plan_segments<'a>(
    dir: &'a Path,
    opts: &'a LoadOptions,
    lock: Option<&'a DirLock>,
    live: &[LiveFile],
    audit: bool,
) -> Result<FoundSegments<'a>, PartitionLogError> {
    let env = &opts.env;
    let mut logs: Vec<&LiveFile> = live
        .iter()
        .filter(|f| f.parsed.kind == FileKind::Log)
        .collect();
    logs.sort_by_key(|f| f.parsed.base_offset);
    // Where the segment's file of `kind` is read from; `None` when there is none after the
    // leftovers are handled (missing, or a file a swap's completion removes: not read).
    let by_key = LiveIndex::new(live);
    let source_of = |base: i64, kind: FileKind| by_key.get(base, kind).map(|f| f.source(dir));
    let has = |base: i64, kind: FileKind| by_key.get(base, kind).is_some();
    let mut sources = Sources {
        opts,
        lock,
        dir,
        open: logs
            .iter()
            .map(|f| {
                let source = f.swap.clone().map_or(Source::Log, Source::Swap);
                (f.parsed.base_offset, (source, None))
            })
            .collect(),
        current: None,
    };
    let mut segments = Vec::with_capacity(logs.len());
    let mut insane = Vec::new();
    let mut index_checks: BTreeMap<i64, IndexCheck> = BTreeMap::new();
    let mut last_index = ReadOnlyBytes::Owned(Vec::new());
    let last_base = logs.last().map(|f| f.parsed.base_offset);
    for f in &logs {
        let base = f.parsed.base_offset;
        let size = env
            .storage
            .open(&f.source(dir), segment_store::OpenMode::Read)?
            .len()?;
        let IndexesChecked {
            index,
            findings: index_findings,
            sane,
            check,
        } = check_indexes(
            opts,
            lock,
            base,
            size,
            [
                source_of(base, FileKind::Index),
                source_of(base, FileKind::TimeIndex),
                source_of(base, FileKind::TxnIndex),
            ],
            audit,
        )?;
        if !sane {
            insane.push(base);
        }
        // A check of two empty indexes finds nothing: not kept (one per segment adds up).
        if let Some(check) = check.filter(|c| !c.is_empty()) {
            index_checks.insert(base, check);
        }
        if Some(base) == last_base {
            last_index = index;
        }
        segments.push(SegmentPlan {
            base_offset: base,
            size,
            index_findings,
            has_txn_index: has(base, FileKind::TxnIndex),
            has_index: has(base, FileKind::Index),
            has_time_index: has(base, FileKind::TimeIndex),
            next_offset: None,
        });
    }
    if segments.is_empty() {
        // An empty directory gets one empty segment at offset 0 (recovered, if at all, as such).
        sources.open.insert(0, (Source::Empty, None));
    }
    let bases = sources.open.keys().copied().collect();
    Ok(FoundSegments {
        segments,
        sources,
        bases,
        insane,
        index_checks,
        last_index,
    })
}

/// The base offset recovery starts from (`None`: nothing is recovered): Kafka's choice from the
/// clean shutdown and the recovery point, moved back to the first segment whose indexes fail the
/// sanity checks, and to the active segment if its next offset cannot be read. Sets the active
/// segment's next offset when recovery would not scan it.
fn recovery_base(
    opts: &LoadOptions,
    clean: bool,
    recovery_point: i64,
    found: &mut FoundSegments<'_>,
) -> Result<Option<i64>, PartitionLogError> {
    let bases = &found.bases;
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
    if let Some(&b) = found.insane.first() {
        recover_base = Some(recover_base.map_or(b, |r| r.min(b)));
    }
    // The active segment's next offset, unless recovery scans it anyway (Kafka's
    // `readNextOffset`: from the last offset-index entry on). A batch there that does not parse
    // (the zeros a crash leaves in preallocated or torn blocks) makes recovery scan it.
    if let Some(last) = found.segments.last_mut() {
        let base = last.base_offset;
        if recover_base.is_none_or(|r| r > base) {
            let index = found
                .index_checks
                .get(&base)
                .map_or(found.last_index.bytes(), IndexCheck::index_bytes);
            last.next_offset = read_next_offset(base, found.sources.bytes(base)?, index);
            found.sources.release(base);
            if last.next_offset.is_none() {
                recover_base = Some(recover_base.map_or(base, |r| r.min(base)));
            }
        }
    }
    Ok(recover_base)
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

/// Recovery from the segment at `base` (Kafka's `recoverLog`): producer state loaded and
/// replayed up to `base`, each segment from `base` scanned up to the first cut, then the
/// snapshots the scan left behind.
fn recover_from(
    cx: &PlanCtx<'_>,
    st: &mut PlanState,
    found: &mut FoundSegments<'_>,
    base: i64,
    log_start_before: i64,
    quarantine_dir: &Path,
) -> Result<(), PartitionLogError> {
    let (dir, io) = (cx.dir, cx.io);
    let load = st
        .psm
        .load_from_snapshot_with(io, dir, log_start_before, base, cx.now)?;
    st.snapshot_loaded = load.loaded.map(|f| f.offset);
    // As Kafka's recoverSegment (truncateAndReload to `base`): the snapshots above `base`
    // describe bytes about to be validated again, so they go once the scan is done (the scan
    // writes one at each segment boundary, close one at the log end). Kept, a stale or
    // corrupt snapshot at the new log end would stand for the recovered state.
    // (offset, name): a path each only when it is used (there may be one per segment).
    let mut stale = crate::snapshot::snapshot_names(io, dir)?;
    stale.retain(|(offset, _)| *offset > base);
    st.expired_producers.extend(load.expired_producers);
    let from = st.psm.map_end_offset().max(log_start_before);
    if base > from {
        st.replay(&mut found.sources, from, base)?;
    }
    st.psm
        .update_map_end_offset(st.psm.map_end_offset().max(base));
    let cut = scan_segments(cx, st, found, base)?;
    for b in &st.quarantined_segments {
        found.sources.forget(*b);
    }
    io.set_phase(SnapshotPhase::AfterInstall);
    if cut {
        // The snapshots past the new log end are among `stale` (the scan writes none there).
        for (offset, name) in stale.iter().filter(|(o, _)| *o > st.log_end) {
            let path = dir.join(name);
            let to = quarantine_dir.join(file_name(*offset, FileKind::Snapshot, None));
            io.quarantine(&path, &to)
                .map_err(|source| SnapshotError::Io {
                    path: path.clone(),
                    op: "moving snapshot to quarantine",
                    source,
                })?;
        }
    }
    // The stale snapshots neither rewritten by the scan nor quarantined with a cut go, as
    // Kafka deletes them (derived state; each deletion is in the plan's snapshot operations).
    for (_, name) in &stale {
        let path = dir.join(name);
        if io.exists(&path) && !io.written(&path) {
            io.remove(&path).map_err(|source| SnapshotError::Io {
                path: path.clone(),
                op: "deleting snapshot",
                source,
            })?;
        }
    }
    Ok(())
}

/// The recovery scan of each segment from `base` on, into the producer state (a snapshot at each
/// segment boundary), up to the first cut; the segments after it go to quarantine. Returns
/// whether there was a cut.
fn scan_segments(
    cx: &PlanCtx<'_>,
    st: &mut PlanState,
    found: &mut FoundSegments<'_>,
    base: i64,
) -> Result<bool, PartitionLogError> {
    let (dir, io, opts) = (cx.dir, cx.io, cx.opts);
    let seg_config = SegmentConfig {
        index_interval_bytes: opts.config.log.index_interval_bytes,
        max_index_size: opts.config.log.max_index_size,
        ..SegmentConfig::default()
    };
    let boundaries: Vec<i64> = found.bases.iter().copied().filter(|&b| b > base).collect();
    let mut next_boundary = 0usize;
    let mut applied = AppliedBatches::default();
    // One scan per segment from `base` at most: allocated once (no doubling of 100,000 of them).
    st.scans
        .reserve_exact(found.bases.iter().filter(|&&b| b >= base).count());
    let mut cut = false;
    for &seg_base in found.bases.iter().filter(|&&b| b >= base) {
        if cut {
            st.quarantined_segments.push(seg_base);
            continue;
        }
        let mut check = found.index_checks.remove(&seg_base);
        let mut visitor = |batch: &RecordBatch<'_>, aborted: &mut Vec<AbortedTxn>| {
            if let Some(c) = check.as_mut() {
                c.batch(batch.position(), batch.last_offset());
            }
            let summary = BatchSummary::from_batch(batch)?;
            if let Some(a) = st.audit.as_mut() {
                a.observe(&summary);
            }
            st.batches_applied += 1;
            while let Some(&b) = boundaries.get(next_boundary) {
                if summary.base_offset < b {
                    break;
                }
                // Kafka takes a snapshot after each recovered segment.
                st.psm.update_map_end_offset(st.psm.map_end_offset().max(b));
                st.psm.take_snapshot_with(io, dir)?;
                next_boundary += 1;
            }
            let epoch = batch.partition_leader_epoch();
            if epoch >= 0 && st.latest_epoch.is_none_or(|l| epoch > l) {
                st.epoch_assignments.push((epoch, batch.base_offset()));
                st.latest_epoch = Some(epoch);
            }
            st.psm.apply_replicated_batch(&summary, &mut applied)?;
            st.warnings.append(&mut applied.warnings);
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
        let scan = found.sources.scan(seg_base, &seg_config, &mut visitor)?;
        found.sources.release(seg_base);
        // The segments are in base-offset order.
        let seg = search_by(&found.segments, |s| s.base_offset.cmp(&seg_base))
            .ok()
            .and_then(|i| found.segments.get_mut(i));
        if let (Some(c), Some(seg)) = (check, seg) {
            seg.index_findings.extend(c.finish(&scan));
        }
        cut = scan.truncated_bytes() > 0;
        found.sources.set_valid(seg_base, scan.valid_bytes);
        st.log_end = scan.next_offset();
        st.scans.push(scan);
    }
    Ok(cut)
}

/// The offsets a plan ends with.
struct PlannedOffsets {
    log_start: i64,
    start_at_checkpoint: bool,
    high_watermark: i64,
    last_stable_offset: i64,
}

/// After recovery: the log start offset (the whole log quarantined if the checkpointed one is
/// past the log end), the producer state rebuilt up to the log end with its snapshot there
/// (`clean_unrecovered`: Kafka's shortcut for a clean shutdown without snapshots), the high
/// watermark and the LSO.
fn plan_producer_state(
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

fn plan_with(
    dir: &Path,
    opts: &LoadOptions,
    lock: Option<&DirLock>,
    audit: bool,
) -> Result<RecoveryPlan, PartitionLogError> {
    let env = &opts.env;
    let (leftovers, live, names) = plan_leftovers(opts, dir)?;
    let clean = opts.had_clean_shutdown && !opts.full;
    let recovery_point = if opts.full { 0 } else { opts.recovery_point };
    let mut found = plan_segments(dir, opts, lock, &live, audit)?;
    drop(live);
    let recover_base = recovery_base(opts, clean, recovery_point, &mut found)?;

    let now = env.clock.now_ms();
    let io = PlanIo::new(
        StorageIo::new(Arc::clone(&env.storage)),
        (dir.to_path_buf(), &names),
    );
    let psm = ProducerStateManager::new(opts.config.producer_state);
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

/// Turns each deletion of a snapshot the directory held before recovery into a move to
/// quarantine when the snapshot is out of the recovered log's range `[log start, log end]` or does
/// not read back: recovery deletes nothing it cannot rebuild (Kafka deletes them). A snapshot
/// inside the range that recovery deletes is one it takes again from the scanned batches; one
/// the plan wrote itself is removed as planned.
fn quarantine_instead_of_delete(
    opts: &LoadOptions,
    ops: Vec<(SnapshotPhase, SnapshotOp)>,
    quarantine_dir: &Path,
    (log_start, log_end): (i64, i64),
) -> Vec<(SnapshotPhase, SnapshotOp)> {
    let io = StorageIo::new(Arc::clone(&opts.env.storage));
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
fn without_identical_rewrites(
    opts: &LoadOptions,
    ops: Vec<(SnapshotPhase, SnapshotOp)>,
) -> Vec<(SnapshotPhase, SnapshotOp)> {
    let io = StorageIo::new(Arc::clone(&opts.env.storage));
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

// ------------------------------------------------------------------------------------------------
// Applying
// ------------------------------------------------------------------------------------------------

fn apply_snapshot_op(
    plan: &RecoveryPlan,
    io: &StorageIo,
    op: &SnapshotOp,
) -> Result<(), PartitionLogError> {
    let env = &plan.options.env;
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
    let storage = Arc::clone(&plan.options.env.storage);
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
    let env = &plan.options.env;
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

fn apply_with(
    mut plan: RecoveryPlan,
    lock: DirLock,
) -> Result<(PartitionLog, RecoveryReport), PartitionLogError> {
    let opts = plan.options.clone();
    let env = &opts.env;
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
        opts.config.log.clone(),
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
        local,
        psm: plan.producers,
        epochs,
        high_watermark: log_start,
        config: opts.config.clone(),
        clock: Arc::clone(&env.clock),
        io: io.clone(),
        mirror: MirrorStateFile::with_io(&dir, io.clone()).load()?,
        hw_state: Default::default(),
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
    Ok((log, report))
}

/// The report of an applied plan (the offsets, recovery point and quarantine folder filled in
/// by the caller).
/// The files moved into quarantine, by path (the order they were moved in depends on the
/// phase of each move).
fn sorted_unique(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
    v.sort();
    v.dedup();
    v
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

/// Every file under `dir` (recursively) with its bytes, and every directory: a picture of a
/// directory to check that planning changed nothing (the directory lock file excluded).
pub fn tree_image(dir: &Path) -> io::Result<BTreeMap<PathBuf, Option<Vec<u8>>>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let p = e.path();
            if e.file_type()?.is_dir() {
                out.insert(p.clone(), None);
                stack.push(p);
            } else if e.file_name() != segment_store::file_name::LOCK_FILE_NAME {
                out.insert(p.clone(), Some(std::fs::read(&p)?));
            }
        }
    }
    Ok(out)
}
