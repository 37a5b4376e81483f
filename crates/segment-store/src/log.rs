//! The multi-segment log of one partition (Kafka's `LocalLog` plus the segment-deletion part of
//! `UnifiedLog`).
//!
//! # Concurrency
//!
//! [`LocalLog`] is `Send + Sync`; every method takes `&self`. The segments live behind one
//! `RwLock`: appends, rolls, truncations and deletions take the write lock, reads take the read
//! lock. An append holds the write lock only for the write call and the index update of its
//! batches, and a segment's size advances only after the whole append was written, so a reader
//! can never observe part of a batch. Reads of sealed segments borrow from the segment's
//! read-only map inside [`LocalLog::read_with`]; [`LocalLog::read`] returns an owned copy.
//!
//! # Open segments
//!
//! A segment's files (the `.log`'s handle and, for an inactive segment, its read-only map; the
//! mapped `.index` and `.timeindex`) are opened when the log first needs the segment and closed
//! again once more than [`MAX_OPEN_INACTIVE_SEGMENTS`] inactive segments are open (those read
//! last stay open), at the end of the operation that opened them. Loading opens each inactive
//! segment for its sanity check only; recovery closes each segment once its scan is installed;
//! [`LocalLog::release_segments`] closes every one, the active one too (a log directory does it
//! after loading). So a log of any number of segments holds a bounded number of descriptors and
//! maps.
//!
//! # Loading
//!
//! [`LocalLog::open_unrecovered`] and [`LocalLog::open_planned`] open the segments as they are
//! (deleting `*.deleted` leftovers); the recovery crate's `LogLoader` plans recovery and installs
//! its scans with [`LocalLog::install_scans`]. [`LocalLog::open_with`] is the same opening
//! followed by [`LocalLog::recover_from`] (the segment containing the recovery point, and any
//! earlier one whose index fails its sanity check) for users of this crate alone: recovery never
//! deletes, the segments after a cut are moved to the quarantine directory. `.cleaned`/`.swap`
//! handling and producer state belong to the recovery crate's loader.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use record_format::{Batches, RecordBatch};

use crate::error::{Result, SegmentError};
use crate::file_name::{parse_file_name, FileKind, TempSuffix};
use crate::file_records::TimestampAndOffset;
use crate::index::AbortedTxn;
use crate::io::{StdFs, Storage};
use crate::lock::DirLock;
use crate::segment::{
    Clock, FetchDataInfo, LogOffsetMetadata, LogSegment, RecoveryOutcome, RecoveryVisitor,
    RollParams, RollReason, SegmentConfig, SegmentContext, SegmentScan, SystemClock,
};

/// Settings of one partition log (Kafka `LogConfig`; `-1` disables a retention limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes` (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms` (default 7 days).
    pub segment_ms: i64,
    /// `segment.jitter.ms` applied to every segment (Kafka draws one at random per segment; a
    /// fixed value keeps tests deterministic). Default 0.
    pub segment_jitter_ms: i64,
    /// `index.interval.bytes` (default 4096).
    pub index_interval_bytes: u32,
    /// `segment.index.bytes` (default 10 MiB).
    pub max_index_size: u64,
    /// `retention.bytes` (default -1: unlimited).
    pub retention_bytes: i64,
    /// `retention.ms` (default 7 days; -1: unlimited).
    pub retention_ms: i64,
    /// Where recovery writes the bytes it cuts (`None`: the partition directory).
    pub quarantine_dir: Option<PathBuf>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            segment_jitter_ms: 0,
            index_interval_bytes: 4096,
            max_index_size: crate::index::DEFAULT_MAX_INDEX_SIZE,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 3600 * 1000,
            quarantine_dir: None,
        }
    }
}

/// The environment of a log: storage seam and clock.
#[derive(Debug, Clone)]
pub struct LogEnv {
    /// Storage every write of the partition goes through (`.log`, `.txnindex`, deletions,
    /// checkpoints; the recovery crate adds producer snapshots, `mirror-state` and quarantine),
    /// all but the memory-mapped indexes.
    pub storage: Arc<dyn Storage>,
    /// Time source for rolls and retention.
    pub clock: Arc<dyn Clock>,
}

impl Default for LogEnv {
    fn default() -> Self {
        LogEnv {
            storage: Arc::new(StdFs),
            clock: Arc::new(SystemClock),
        }
    }
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Base offset of the first batch.
    pub first_offset: i64,
    /// Last offset of the last batch.
    pub last_offset: i64,
    /// Largest batch max timestamp.
    pub max_timestamp: i64,
    /// Where the records were written.
    pub position: LogOffsetMetadata,
    /// If the append rolled first: the new segment's base offset and why (the caller takes its
    /// producer-state snapshot named after that base).
    pub rolled: Option<(i64, RollReason)>,
}

/// An owned read result: whole batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchData {
    /// Where the fetch started.
    pub fetch_offset_metadata: LogOffsetMetadata,
    /// Whole batches.
    pub records: Vec<u8>,
    /// The first batch did not fit `max_bytes`.
    pub first_entry_incomplete: bool,
}

/// [`SegmentError::OffsetOutOfRange`] unless `offset` lies in `[log start, log end]`.
fn out_of_range(inner: &Inner, offset: i64) -> Result<()> {
    if offset > inner.log_end_offset || offset < inner.log_start_offset {
        return Err(SegmentError::OffsetOutOfRange {
            offset,
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
        });
    }
    Ok(())
}

/// The base offset of the segment holding `offset` (the last one at or below it).
fn floor_base(inner: &Inner, offset: i64) -> Result<i64> {
    inner
        .segments
        .range(..=offset)
        .next_back()
        .map(|(&b, _)| b)
        .ok_or(SegmentError::OffsetOutOfRange {
            offset,
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
        })
}

/// What [`LocalLog::read_exact`] returns: Kafka's bytes, and the upper bound of the aborted
/// transactions that go with them (Kafka's `addAbortedTransactions`: the offset of the first
/// offset-index entry past the bytes returned, else the next segment's base offset, else the log
/// end offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactFetch {
    /// The bytes (the last batch may be cut short) and where they start.
    pub data: FetchData,
    /// Aborted transactions that overlap `[fetch offset, upper_bound_offset)` go with them.
    pub upper_bound_offset: i64,
}

/// Summary of one segment, for iteration without holding the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Base offset.
    pub base_offset: i64,
    /// `.log` size in bytes.
    pub size: u64,
    /// Largest timestamp (max timestamp, or creation time if none).
    pub largest_timestamp: i64,
    /// Offset-index entries.
    pub index_entries: usize,
    /// Time-index entries.
    pub time_index_entries: usize,
}

/// Inactive segments a log keeps open at most once an operation is over (a fetch, an append):
/// those read last. Each holds up to four descriptors and three maps (the `.log`'s handle and
/// read-only map, the mapped `.index` and `.timeindex`).
pub const MAX_OPEN_INACTIVE_SEGMENTS: usize = 8;

/// One segment of the log, open or not: a segment's files are opened when the log first needs
/// them (as Kafka opens its indexes lazily) and closed again when more than
/// [`MAX_OPEN_INACTIVE_SEGMENTS`] inactive ones are open, so a log of any number of segments holds
/// a bounded number of descriptors and maps.
#[derive(Debug)]
struct Slot {
    /// Boxed: a closed slot is a few words, not a whole segment's struct (a partition holds one
    /// slot per segment, 100,000 or more).
    seg: OnceLock<Box<LogSegment>>,
    /// The `.log`'s size, for a segment that is not open (an open one answers itself).
    size: u64,
}

impl Slot {
    fn open(seg: LogSegment) -> Slot {
        Slot {
            size: seg.size(),
            seg: OnceLock::from(Box::new(seg)),
        }
    }

    fn closed(size: u64) -> Slot {
        Slot {
            seg: OnceLock::new(),
            size,
        }
    }

    fn size(&self) -> u64 {
        self.seg.get().map_or(self.size, |s| s.size())
    }

    /// Closes the segment's files if they are open ([`LogSegment::release`]).
    fn release(&mut self) -> Result<()> {
        match self.seg.take() {
            Some(seg) => {
                self.size = seg.size();
                seg.release()
            }
            None => Ok(()),
        }
    }

    /// The segment, opened or not: for deleting or moving it.
    fn into_segment(self, log: &LocalLog, base: i64) -> Result<LogSegment> {
        match self.seg.into_inner() {
            Some(seg) => Ok(*seg),
            None => LogSegment::open(&log.ctx, &log.dir, base),
        }
    }
}

#[derive(Debug)]
struct Inner {
    segments: BTreeMap<i64, Slot>,
    log_start_offset: i64,
    log_end_offset: i64,
    recovery_point: i64,
    dir_dirty: bool,
}

/// The segments of one partition directory.
#[derive(Debug)]
pub struct LocalLog {
    dir: PathBuf,
    config: LogConfig,
    ctx: SegmentContext,
    inner: RwLock<Inner>,
    /// The segments opened on demand since the last [`LocalLog::trim`], oldest first. Its lock
    /// also serialises opening under the read lock (a mapped index locks its file: two opens of
    /// one segment would collide).
    opened: Mutex<Vec<i64>>,
}

/// What recovery calls with each valid batch (see [`LogSegment::recover`]): the aborted
/// transactions it pushes go into the segment's transaction index.
pub type BatchVisitor<'v> = dyn FnMut(&RecordBatch<'_>, &mut Vec<AbortedTxn>) -> Result<()> + 'v;

fn no_producer_state(_: &RecordBatch<'_>, _: &mut Vec<AbortedTxn>) -> Result<()> {
    Ok(())
}

struct Summary {
    first_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
}

impl LocalLog {
    /// Opens (or initialises) the log in `dir` on the real file system with the system clock and
    /// no producer-state visitor (see [`Self::open_with`]).
    pub fn open(dir: &Path, config: LogConfig, recovery_point: i64) -> Result<LocalLog> {
        Self::open_with(
            dir,
            config,
            recovery_point,
            LogEnv::default(),
            &mut no_producer_state,
        )
    }

    /// Opens the log in `dir` ([`Self::open_unrecovered`]) and recovers, with `visitor`, every
    /// segment from the one containing the recovery point (or an earlier one whose index fails
    /// its sanity check, or whose tail does not parse) with [`Self::recover_from`]: cut bytes
    /// and the segments after a cut go to the configured quarantine directory (the partition
    /// directory by default). Takes the directory's [`DirLock`] (held for the life of the log).
    pub fn open_with(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        env: LogEnv,
        visitor: &mut BatchVisitor<'_>,
    ) -> Result<LocalLog> {
        let quarantine = config
            .quarantine_dir
            .clone()
            .unwrap_or_else(|| dir.to_path_buf());
        let (log, insane) = Self::open_unrecovered(dir, config, recovery_point, env)?;
        let from = {
            let inner = log.read_inner();
            let bases = inner.segments.keys().copied();
            let first = bases.clone().next().unwrap_or(0);
            bases
                .take_while(|&b| b <= recovery_point)
                .last()
                .unwrap_or(first)
        };
        let from = insane.first().map_or(from, |&i| from.min(i));
        log.recover_from(from, visitor, &quarantine)?;
        Ok(log)
    }

    /// Opens the segments of `dir` as they are: leftover `*.deleted` files are removed, but no
    /// segment is recovered, whatever the recovery point or the index sanity checks say. Returns
    /// the log and the base offsets of the segments whose indexes fail Kafka's sanity check; the
    /// caller (the recovery crate's loader) then runs [`Self::recover_from`] with its own
    /// producer-state visitor. An empty directory gets one empty segment at offset 0.
    pub fn open_unrecovered(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        env: LogEnv,
    ) -> Result<(LocalLog, Vec<i64>)> {
        Self::open_inner(dir, config, recovery_point, env, None, None)
    }

    /// [`Self::open_unrecovered`] for a loader that already holds `lock` (the directory's
    /// [`DirLock`]) and knows, from its recovery plan, the active segment's next offset: the
    /// active segment is not walked to find it (Kafka's `readNextOffset` reads from the last
    /// index entry; the plan did that, or scanned the segment).
    pub fn open_planned(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        env: LogEnv,
        lock: DirLock,
        log_end_offset: i64,
    ) -> Result<(LocalLog, Vec<i64>)> {
        Self::open_inner(
            dir,
            config,
            recovery_point,
            env,
            Some(lock),
            Some(log_end_offset),
        )
    }

    fn open_inner(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        env: LogEnv,
        lock: Option<DirLock>,
        known_log_end: Option<i64>,
    ) -> Result<(LocalLog, Vec<i64>)> {
        crate::io::create_dir_all_durably(env.storage.as_ref(), dir)?;
        let lock = match lock {
            Some(l) => l,
            None => DirLock::acquire_in(env.storage.as_ref(), dir)?,
        };
        let dir = dir.to_path_buf();
        let ctx = SegmentContext {
            storage: Arc::clone(&env.storage),
            lock,
            clock: Arc::clone(&env.clock),
            config: SegmentConfig {
                index_interval_bytes: config.index_interval_bytes,
                max_index_size: config.max_index_size,
                ..SegmentConfig::default()
            },
        };
        // Whether opening changes a directory entry (a leftover removed, a file created): then
        // the directory is synced before the log is used.
        let (mut names, bases, mut entries_changed) = Self::list_segments(&env, &dir)?;
        // Looked up once per index file of each segment: sorted, a binary search each.
        names.sort_unstable();

        let mut segments = BTreeMap::new();
        let mut insane = Vec::new();
        let last_base = bases.last().copied();
        let mut active = None;
        for base in bases {
            entries_changed |= [FileKind::Index, FileKind::TimeIndex].iter().any(|&kind| {
                let path = crate::file_name::segment_file_path(&dir, base, kind);
                path.file_name()
                    .is_none_or(|n| names.binary_search_by(|m| m.as_os_str().cmp(n)).is_err())
            });
            if Some(base) == last_base {
                let seg = LogSegment::open_active(&ctx, &dir, base)?;
                if seg.sanity_check().is_err() {
                    insane.push(base);
                }
                active = Some(seg);
            } else {
                // Opened for its sanity check only, then closed again: an inactive segment is
                // opened when it is read.
                let seg = LogSegment::open(&ctx, &dir, base)?;
                if seg.sanity_check().is_err() {
                    insane.push(base);
                }
                segments.insert(base, Slot::closed(seg.size()));
                seg.release()?;
            }
        }
        let mut active = match active {
            Some(seg) => seg,
            None => {
                entries_changed = true;
                LogSegment::create(&ctx, &dir, 0)?
            }
        };
        let log_end_offset =
            Self::activate_segment(&mut active, &config, known_log_end, &mut insane)?;
        segments.insert(active.base_offset(), Slot::open(active));
        let log_start_offset = segments.keys().next().copied().unwrap_or(0);
        if entries_changed {
            env.storage.sync_dir(&dir)?;
        }
        let log = LocalLog {
            dir,
            config,
            ctx,
            inner: RwLock::new(Inner {
                segments,
                log_start_offset,
                log_end_offset,
                recovery_point: recovery_point.min(log_end_offset),
                dir_dirty: false,
            }),
            opened: Mutex::new(Vec::new()),
        };
        Ok((log, insane))
    }

    /// Removes the leftovers of interrupted deletions (`*.deleted`) from `dir` and lists its
    /// segments. Returns the directory's entries, the segments' base offsets in order, and
    /// whether an entry was removed.
    fn list_segments(env: &LogEnv, dir: &Path) -> Result<(Vec<OsString>, Vec<i64>, bool)> {
        let mut bases = Vec::new();
        let names = env.storage.list_dir(dir)?;
        let mut removed = false;
        for name in &names {
            let Ok(parsed) = parse_file_name(name) else {
                continue;
            };
            match (parsed.kind, parsed.temp) {
                (_, Some(TempSuffix::Deleted)) => {
                    env.storage.remove_file(&dir.join(name))?;
                    removed = true;
                }
                (FileKind::Log, None) => bases.push(parsed.base_offset),
                _ => {}
            }
        }
        bases.sort_unstable();
        Ok((names, bases, removed))
    }

    /// The last segment becomes the active one (indexes resized to their maximum). Returns the
    /// log end offset: `known_log_end`, or the segment's next offset.
    fn activate_segment(
        seg: &mut LogSegment,
        config: &LogConfig,
        known_log_end: Option<i64>,
        insane: &mut Vec<i64>,
    ) -> Result<i64> {
        let base = seg.base_offset();
        // Indexes longer than `segment.index.bytes` (garbage: the log never makes one) cannot be
        // resized to it with their entries: emptied here, the segment is insane and recovery
        // rebuilds them (the planner reports it so).
        if seg.indexes_oversized(config.max_index_size) {
            seg.reset_offset_and_time_indexes()?;
            if !insane.contains(&base) {
                insane.push(base);
            }
        }
        seg.resize_indexes(config.max_index_size)?;
        match known_log_end.map_or_else(|| seg.read_next_offset(), Ok) {
            Ok(next) => Ok(next),
            // An unrecovered tail that does not parse (e.g. the zeros a crash leaves in
            // preallocated or torn blocks): the offset after the last batch that does, and the
            // segment is reported insane so that recovery cuts the rest.
            Err(SegmentError::Format { .. }) => {
                if !insane.contains(&base) {
                    insane.push(base);
                }
                Ok(seg
                    .log()
                    .headers_from(0)
                    .map_while(|h| h.ok())
                    .last()
                    .map_or(base, |h| h.next_offset()))
            }
            Err(e) => Err(e),
        }
    }

    /// Recovers, in order, every segment with base offset `>= from_base` with `visitor` (see
    /// [`LogSegment::recover`]; cut bytes go to `quarantine_dir`). At the first segment that
    /// loses bytes, recovery stops and every later segment is **moved** (all its files) into
    /// `quarantine_dir` rather than deleted. The log end offset and recovery point are updated;
    /// the last remaining segment becomes the active one. Returns each recovered segment's
    /// outcome and the paths of the moved files.
    #[allow(clippy::type_complexity)]
    pub fn recover_from<E: From<SegmentError>>(
        &self,
        from_base: i64,
        visitor: &mut RecoveryVisitor<'_, E>,
        quarantine_dir: &Path,
    ) -> std::result::Result<(Vec<(i64, RecoveryOutcome)>, Vec<PathBuf>), E> {
        let mut inner = self.write_inner();
        let bases: Vec<i64> = inner.segments.range(from_base..).map(|(&b, _)| b).collect();
        let mut outcomes = Vec::new();
        let mut moved = Vec::new();
        let mut cut = false;
        for base in bases {
            if cut {
                if let Some(slot) = inner.segments.remove(&base) {
                    moved.extend(slot.into_segment(self, base)?.move_to(quarantine_dir)?);
                }
                continue;
            }
            let seg = self.seg_mut(&mut inner, base)?;
            let outcome = seg.recover(visitor, quarantine_dir)?;
            cut = outcome.truncated_bytes > 0;
            outcomes.push((base, outcome));
            // Only the last segment stays open.
            self.trim(&mut inner)?;
        }
        self.reactivate_last(&mut inner, from_base, None)?;
        inner.dir_dirty = true;
        Ok((outcomes, moved))
    }

    /// The end of a recovery: a new segment at `from_base` if none is left, then the last
    /// segment becomes the active one and sets the log end offset and recovery point.
    /// `scanned_next`: the last segment's next offset, when its recovery scan says it. Returns
    /// whether it created a segment.
    fn reactivate_last(
        &self,
        inner: &mut Inner,
        from_base: i64,
        scanned_next: Option<i64>,
    ) -> Result<bool> {
        let created = inner.segments.is_empty();
        if created {
            let seg = LogSegment::create(&self.ctx, &self.dir, from_base.max(0))?;
            inner.segments.insert(seg.base_offset(), Slot::open(seg));
        }
        let last = self.active_mut(inner)?;
        let next = match scanned_next {
            Some(next) if !created => {
                last.become_active()?;
                next
            }
            _ => {
                // Truncating at the next offset cuts nothing; it unmaps the `.log` and resizes
                // the indexes back to their maximum, which is what the active segment needs.
                let next = last.read_next_offset()?;
                last.truncate_to(next)?;
                next
            }
        };
        inner.log_end_offset = next;
        inner.recovery_point = inner.recovery_point.min(next);
        Ok(created)
    }

    /// The writing half of [`Self::recover_from`], from scans already taken (a recovery plan's
    /// [`SegmentScan`]s of the segments from `from_base` on, in order): each scanned segment gets
    /// [`LogSegment::install_scan`]; at the first that loses bytes, every later segment is
    /// **moved** (all its files) into `quarantine_dir`. The log end offset and recovery point are
    /// updated; the last remaining segment becomes the active one. Returns each recovered
    /// segment's outcome and the paths of the moved files.
    #[allow(clippy::type_complexity)]
    pub fn install_scans(
        &self,
        from_base: i64,
        scans: &[SegmentScan],
        quarantine_dir: &Path,
    ) -> Result<(Vec<(i64, RecoveryOutcome)>, Vec<PathBuf>)> {
        let mut inner = self.write_inner();
        let bases: Vec<i64> = inner.segments.range(from_base..).map(|(&b, _)| b).collect();
        let mut outcomes = Vec::new();
        let mut moved = Vec::new();
        let mut cut = false;
        let mut scans = scans.iter();
        let last_base = bases.last().copied();
        // The next offset of the segment that stays the active one, when its scan says it.
        let mut active_next = None;
        for base in bases {
            if cut {
                if let Some(slot) = inner.segments.remove(&base) {
                    moved.extend(slot.into_segment(self, base)?.move_to(quarantine_dir)?);
                }
                continue;
            }
            let Some(scan) = scans.next() else { break };
            // The last segment, or the one recovery cuts (every later one is moved out).
            let active = Some(base) == last_base || scan.truncated_bytes() > 0;
            let seg = self.seg_mut(&mut inner, base)?;
            let outcome = seg.install_scan_as(scan, quarantine_dir, active)?;
            cut = outcome.truncated_bytes > 0;
            if active {
                active_next = Some(scan.next_offset());
            }
            outcomes.push((base, outcome));
            if !active {
                // Written and done with: closed at once, so that recovery holds a bounded
                // number of segments open whatever their count.
                if let Some(slot) = inner.segments.get_mut(&base) {
                    slot.release()?;
                }
            }
        }
        // The active segment's next offset is its scan's: no header is read again.
        let created = self.reactivate_last(&mut inner, from_base, active_next)?;
        // Installing a scan rewrites files in place; only moved or created files change entries.
        inner.dir_dirty |= created || !moved.is_empty();
        Ok((outcomes, moved))
    }

    /// Kafka's `LogSegment.updateTxnIndex` for each aborted transaction, on the segment holding
    /// its marker (`last_offset`), normally the active one.
    pub fn append_aborted_txns(&self, txns: &[AbortedTxn]) -> Result<()> {
        let mut inner = self.write_inner();
        for txn in txns {
            let base = match inner.segments.range(..=txn.last_offset).next_back() {
                Some((&base, _)) => base,
                None => inner.segments.keys().next_back().copied().unwrap_or(0),
            };
            self.seg_mut(&mut inner, base)?.update_txn_index(txn)?;
        }
        self.trim(&mut inner)
    }

    fn read_inner(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_inner(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, Vec<i64>> {
        self.opened.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The segment's files, opened: the active (last) one writable at its maximum index size,
    /// any other with its `.log` mapped read-only for zero-copy reads.
    fn open_segment(&self, base: i64, active: bool) -> Result<LogSegment> {
        if active {
            let mut seg = LogSegment::open_active(&self.ctx, &self.dir, base)?;
            seg.resize_indexes(self.config.max_index_size)?;
            Ok(seg)
        } else {
            let mut seg = LogSegment::open(&self.ctx, &self.dir, base)?;
            seg.map_log()?;
            Ok(seg)
        }
    }

    /// The segment at `base` (which must be in `inner`), opened if it is not (under the read
    /// lock: opening is serialised by [`Self::opened`]).
    fn seg<'a>(&self, inner: &'a Inner, base: i64) -> Result<&'a LogSegment> {
        let slot = inner
            .segments
            .get(&base)
            .ok_or_else(|| self.no_segment(inner, base))?;
        if let Some(seg) = slot.seg.get() {
            return Ok(seg);
        }
        let mut opened = self.opened();
        if slot.seg.get().is_none() {
            let active = inner.segments.keys().next_back() == Some(&base);
            let seg = self.open_segment(base, active)?;
            // Cannot be set already: every opening holds `opened`.
            let _ = slot.seg.set(Box::new(seg));
            opened.push(base);
        }
        slot.seg
            .get()
            .map(|s| &**s)
            .ok_or_else(|| self.no_segment(inner, base))
    }

    /// [`Self::seg`] under the write lock.
    fn seg_mut<'a>(&self, inner: &'a mut Inner, base: i64) -> Result<&'a mut LogSegment> {
        let active = inner.segments.keys().next_back() == Some(&base);
        let missing = self.no_segment(inner, base);
        let slot = inner.segments.get_mut(&base).ok_or(missing)?;
        if slot.seg.get().is_none() {
            let seg = self.open_segment(base, active)?;
            let _ = slot.seg.set(Box::new(seg));
            self.opened().push(base);
        }
        let missing = SegmentError::OffsetOutOfRange {
            offset: base,
            log_start_offset: base,
            log_end_offset: base,
        };
        slot.seg.get_mut().map(|s| &mut **s).ok_or(missing)
    }

    fn no_segment(&self, inner: &Inner, base: i64) -> SegmentError {
        SegmentError::OffsetOutOfRange {
            offset: base,
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset,
        }
    }

    /// The active (last) segment, opened.
    fn active_mut<'a>(&self, inner: &'a mut Inner) -> Result<&'a mut LogSegment> {
        let Some(&base) = inner.segments.keys().next_back() else {
            let end = inner.log_end_offset;
            return Err(SegmentError::OffsetOutOfRange {
                offset: end,
                log_start_offset: inner.log_start_offset,
                log_end_offset: end,
            });
        };
        self.seg_mut(inner, base)
    }

    /// Closes the inactive segments opened on demand beyond the [`MAX_OPEN_INACTIVE_SEGMENTS`]
    /// read last.
    fn trim(&self, inner: &mut Inner) -> Result<()> {
        let mut opened = self.opened();
        if opened.len() <= MAX_OPEN_INACTIVE_SEGMENTS {
            return Ok(());
        }
        let active = inner.segments.keys().next_back().copied();
        // The most recently opened are kept (each base once).
        let mut keep = Vec::with_capacity(MAX_OPEN_INACTIVE_SEGMENTS);
        let mut close = Vec::new();
        for &base in opened.iter().rev() {
            if Some(base) == active || keep.contains(&base) || close.contains(&base) {
                continue;
            }
            if keep.len() < MAX_OPEN_INACTIVE_SEGMENTS / 2 {
                keep.push(base);
            } else {
                close.push(base);
            }
        }
        keep.reverse();
        *opened = keep;
        drop(opened);
        for base in close {
            if let Some(slot) = inner.segments.get_mut(&base) {
                slot.release()?;
            }
        }
        Ok(())
    }

    /// [`Self::trim`] after an operation under the read lock, if it opened too many segments.
    fn trim_after_read(&self) -> Result<()> {
        if self.opened().len() > MAX_OPEN_INACTIVE_SEGMENTS {
            let mut inner = self.write_inner();
            self.trim(&mut inner)?;
        }
        Ok(())
    }

    /// Closes every open segment's files, the active one's too (`LogSegment::release`: its
    /// indexes trimmed, nothing flushed): the log then holds no descriptor and no map until it is
    /// next read or appended to. For a log directory that keeps many partitions open.
    pub fn release_segments(&self) -> Result<()> {
        let mut inner = self.write_inner();
        for slot in inner.segments.values_mut() {
            slot.release()?;
        }
        self.opened().clear();
        Ok(())
    }

    /// The number of segments whose files are open now (the active one included).
    pub fn open_segments(&self) -> usize {
        self.read_inner()
            .segments
            .values()
            .filter(|s| s.seg.get().is_some())
            .count()
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The configuration.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// The offset after the last appended batch.
    pub fn log_end_offset(&self) -> i64 {
        self.read_inner().log_end_offset
    }
    /// The first offset readable.
    pub fn log_start_offset(&self) -> i64 {
        self.read_inner().log_start_offset
    }
    /// Everything below this offset is durable.
    pub fn recovery_point(&self) -> i64 {
        self.read_inner().recovery_point
    }
    /// Base offset of the active (last) segment.
    pub fn active_segment_base(&self) -> i64 {
        self.read_inner()
            .segments
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0)
    }
    /// Total size of all segments' `.log` files.
    pub fn size(&self) -> u64 {
        self.read_inner().segments.values().map(Slot::size).sum()
    }
    /// A summary of every segment, in base-offset order (each segment opened in turn, closed
    /// again but for the last ones read).
    pub fn segments(&self) -> Result<Vec<SegmentInfo>> {
        self.segments_from(Vec::new())
    }

    /// [`Self::segments`] after the bases already in `out`, a few segments at a time.
    fn segments_from(&self, mut out: Vec<SegmentInfo>) -> Result<Vec<SegmentInfo>> {
        loop {
            let after = out.last().map_or(i64::MIN, |s| s.base_offset);
            let inner = self.read_inner();
            let bases: Vec<i64> = inner
                .segments
                .range(after.saturating_add(1)..)
                .map(|(&b, _)| b)
                .take(MAX_OPEN_INACTIVE_SEGMENTS)
                .collect();
            if bases.is_empty() || after == i64::MAX {
                drop(inner);
                self.trim_after_read()?;
                return Ok(out);
            }
            for base in bases {
                let s = self.seg(&inner, base)?;
                out.push(SegmentInfo {
                    base_offset: s.base_offset(),
                    size: s.size(),
                    largest_timestamp: s.largest_timestamp(),
                    index_entries: s.offset_index().entries(),
                    time_index_entries: s.time_index().entries(),
                });
            }
            drop(inner);
            self.trim_after_read()?;
        }
    }

    /// Runs `f` over the segments (in base-offset order) under the read lock, each opened as the
    /// iterator reaches it (an error if it cannot be); those opened are closed again afterwards
    /// but for the last ones read.
    pub fn with_segments<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = Result<&LogSegment>>) -> R,
    ) -> Result<R> {
        self.with_segments_from(i64::MIN, f)
    }

    /// [`Self::with_segments`] from the segment holding `offset` (the last whose base offset is
    /// at most `offset`; the first segment if there is none).
    pub fn with_segments_from<R>(
        &self,
        offset: i64,
        f: impl FnOnce(&mut dyn Iterator<Item = Result<&LogSegment>>) -> R,
    ) -> Result<R> {
        let r = {
            let inner = self.read_inner();
            let inner = &*inner;
            let from = inner
                .segments
                .range(..=offset)
                .next_back()
                .map_or(i64::MIN, |(&b, _)| b);
            f(&mut inner
                .segments
                .range(from..)
                .map(|(&b, _)| self.seg(inner, b)))
        };
        self.trim_after_read()?;
        Ok(r)
    }

    /// The base offset of the first segment.
    pub fn first_segment_base(&self) -> Option<i64> {
        self.read_inner().segments.keys().next().copied()
    }

    /// The base offsets of every segment, ascending, without opening any.
    pub fn segment_bases(&self) -> Vec<i64> {
        self.read_inner().segments.keys().copied().collect()
    }

    fn summarize(&self, records: &[u8]) -> Result<Summary> {
        let mut s: Option<Summary> = None;
        let mut it = Batches::new(records, 0);
        for e in &mut it {
            let e = e.map_err(|error| SegmentError::Format {
                path: self.dir.clone(),
                error,
            })?;
            let (max_ts, base) = match &e {
                record_format::LogEntry::V2(b) => (b.max_timestamp(), b.base_offset()),
                record_format::LogEntry::Legacy(l) => (-1, l.offset()),
            };
            let last = e.last_offset();
            match &mut s {
                None => {
                    s = Some(Summary {
                        first_offset: base,
                        last_offset: last,
                        max_timestamp: max_ts,
                        offset_of_max_timestamp: last,
                    })
                }
                Some(s) => {
                    if base <= s.last_offset {
                        return Err(SegmentError::UnexpectedAppendOffset {
                            path: self.dir.clone(),
                            first_offset: base,
                            expected: s.last_offset + 1,
                        });
                    }
                    s.last_offset = last;
                    if max_ts > s.max_timestamp {
                        s.max_timestamp = max_ts;
                        s.offset_of_max_timestamp = last;
                    }
                }
            }
        }
        if let Some(error) = it.incomplete_error() {
            return Err(SegmentError::Format {
                path: self.dir.clone(),
                error,
            });
        }
        s.ok_or_else(|| SegmentError::Format {
            path: self.dir.clone(),
            error: record_format::FormatError::new(
                record_format::FormatErrorKind::Truncated {
                    need: record_format::wire::RECORD_BATCH_OVERHEAD as u64,
                    have: records.len() as u64,
                },
                0,
            ),
        })
    }

    /// Appends whole batches whose offsets are already assigned (the first at or above the log
    /// end offset, increasing). Rolls first if the active segment meets a roll condition.
    pub fn append(&self, records: &[u8]) -> Result<AppendOutcome> {
        let s = self.summarize(records)?;
        if records.len() as u64 > self.config.segment_bytes {
            return Err(SegmentError::RecordsTooLarge {
                size: records.len() as u64,
                max: self.config.segment_bytes,
            });
        }
        let mut inner = self.write_inner();
        if s.first_offset < inner.log_end_offset {
            return Err(SegmentError::UnexpectedAppendOffset {
                path: self.dir.clone(),
                first_offset: s.first_offset,
                expected: inner.log_end_offset,
            });
        }
        let params = RollParams {
            max_segment_bytes: self.config.segment_bytes,
            max_segment_ms: self.config.segment_ms,
            roll_jitter_ms: self.config.segment_jitter_ms,
            max_timestamp_in_messages: s.max_timestamp,
            max_offset_in_messages: s.last_offset,
            messages_size: records.len() as u64,
            now_ms: self.ctx.clock.now_ms(),
        };
        let reason = self.active_mut(&mut inner)?.should_roll(&params)?;
        let rolled = match reason {
            Some(r) => Some((self.roll_locked(&mut inner, Some(s.first_offset))?, r)),
            None => None,
        };
        let seg = self.active_mut(&mut inner)?;
        let position = seg.append(
            s.last_offset,
            s.max_timestamp,
            s.offset_of_max_timestamp,
            records,
        )?;
        let base = seg.base_offset();
        inner.log_end_offset = s.last_offset + 1;
        if rolled.is_some() {
            self.trim(&mut inner)?;
        }
        Ok(AppendOutcome {
            first_offset: s.first_offset,
            last_offset: s.last_offset,
            max_timestamp: s.max_timestamp,
            position: LogOffsetMetadata {
                message_offset: s.first_offset,
                segment_base_offset: base,
                relative_position_in_segment: position,
            },
            rolled,
        })
    }

    /// Kafka's `roll`: flushes the log up to its end (the recovery point moves there), seals the
    /// active segment and starts a new one at `max(expected_next_offset, log end offset)`.
    /// Returns the new base offset.
    pub fn roll(&self, expected_next_offset: Option<i64>) -> Result<i64> {
        let mut inner = self.write_inner();
        self.roll_locked(&mut inner, expected_next_offset)
    }

    fn roll_locked(&self, inner: &mut Inner, expected_next_offset: Option<i64>) -> Result<i64> {
        // Kafka flushes up to the new base at every roll (asynchronously). Here it is done
        // first: the next sync of the directory (a snapshot, a deletion, a flush) makes the new
        // segment's name durable, and an older segment whose tail a crash then lost would leave
        // a gap in the offsets below it. So only the active segment ever holds unflushed data
        // (a truncation is synced at once, see `truncate_to`).
        self.flush_locked(inner, inner.log_end_offset)?;
        let new_offset = expected_next_offset.unwrap_or(0).max(inner.log_end_offset);
        if let Some((&base, slot)) = inner.segments.iter().next_back() {
            if base == new_offset && slot.size() == 0 {
                // Kafka recreates the empty active segment.
                if let Some(old) = inner.segments.remove(&base) {
                    old.into_segment(self, base)?.delete()?;
                }
            } else if base >= new_offset {
                return Err(SegmentError::SegmentExists {
                    path: crate::file_name::segment_file_path(&self.dir, base, FileKind::Log),
                    base_offset: new_offset,
                });
            } else {
                self.seg_mut(inner, base)?.on_become_inactive_segment()?;
                // Now an inactive segment: closed when others were read since.
                self.opened().push(base);
            }
        }
        let seg = LogSegment::create(&self.ctx, &self.dir, new_offset)?;
        inner.segments.insert(new_offset, Slot::open(seg));
        inner.dir_dirty = true;
        Ok(new_offset)
    }

    /// Reads whole batches from the batch containing `start_offset`, at most `max_bytes` (at
    /// least one batch if `min_one_message`), crossing into later segments when the segment
    /// holding `start_offset` has nothing at or above it. `f` sees records borrowed from a sealed
    /// segment's map (zero-copy) or copied from the active segment, under the read lock.
    pub fn read_with<R>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        f: impl FnOnce(FetchDataInfo<'_>) -> R,
    ) -> Result<R> {
        let r = self.read_with_inner(start_offset, max_bytes, min_one_message, f);
        self.trim_after_read()?;
        r
    }

    fn read_with_inner<R>(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        f: impl FnOnce(FetchDataInfo<'_>) -> R,
    ) -> Result<R> {
        let inner = self.read_inner();
        let end = inner.log_end_offset;
        out_of_range(&inner, start_offset)?;
        let empty_at_end = |base: i64, size: u64| FetchDataInfo {
            fetch_offset_metadata: LogOffsetMetadata {
                message_offset: end,
                segment_base_offset: base,
                relative_position_in_segment: size,
            },
            records: std::borrow::Cow::Borrowed(&[][..]),
            first_entry_incomplete: false,
        };
        let (active_base, active_size) = inner
            .segments
            .iter()
            .next_back()
            .map_or((0, 0), |(&b, s)| (b, s.size()));
        if start_offset == end {
            return Ok(f(empty_at_end(active_base, active_size)));
        }
        let floor = floor_base(&inner, start_offset)?;
        for &base in inner.segments.range(floor..).map(|(b, _)| b) {
            let seg = self.seg(&inner, base)?;
            if let Some(info) = seg.read(start_offset, max_bytes, None, min_one_message)? {
                return Ok(f(info));
            }
        }
        Ok(f(empty_at_end(active_base, active_size)))
    }

    /// Kafka's `LocalLog.read` exactly, bounded by `max_offset` (the log end for a follower, the
    /// high watermark or the last stable offset for consumers): the bytes Kafka's
    /// `LogSegment.read` returns from the segment holding `start_offset` (or the next one holding
    /// a batch at or after it), stopping at the byte position of the batch holding `max_offset`,
    /// at most `max_bytes` (at least the first batch with `min_one_message`), the last batch
    /// possibly cut short. `None` when no segment holds a batch at or after `start_offset` (Kafka
    /// then answers with no records and no aborted-transaction list). See [`ExactFetch`].
    pub fn read_exact(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
    ) -> Result<Option<ExactFetch>> {
        let r = self.read_exact_inner(start_offset, max_bytes, min_one_message, max_offset);
        self.trim_after_read()?;
        r
    }

    fn read_exact_inner(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        max_offset: i64,
    ) -> Result<Option<ExactFetch>> {
        let inner = self.read_inner();
        let end = inner.log_end_offset;
        out_of_range(&inner, start_offset)?;
        let floor = floor_base(&inner, start_offset)?;
        let (bound_base, bound_position) = self.offset_position(&inner, max_offset.min(end))?;
        let empty = |base: i64, position: u64| ExactFetch {
            data: FetchData {
                fetch_offset_metadata: LogOffsetMetadata {
                    message_offset: start_offset,
                    segment_base_offset: base,
                    relative_position_in_segment: position,
                },
                records: Vec::new(),
                first_entry_incomplete: false,
            },
            upper_bound_offset: start_offset,
        };
        if start_offset >= max_offset {
            return Ok(Some(empty(bound_base, bound_position)));
        }
        let mut bases = inner.segments.range(floor..).map(|(&b, _)| b).peekable();
        while let Some(base) = bases.next() {
            let seg = self.seg(&inner, base)?;
            let max_position = match base.cmp(&bound_base) {
                std::cmp::Ordering::Less => seg.size(),
                std::cmp::Ordering::Equal => bound_position,
                // Past the bound's segment: Kafka reads nothing there (`maxPositionOpt` empty).
                std::cmp::Ordering::Greater => 0,
            };
            let Some(info) =
                seg.read_exact(start_offset, max_bytes, Some(max_position), min_one_message)?
            else {
                continue;
            };
            let meta = info.fetch_offset_metadata;
            let upper_bound_offset = seg
                .fetch_upper_bound_offset(
                    meta.message_offset,
                    meta.relative_position_in_segment,
                    info.records.len(),
                )
                .unwrap_or_else(|| bases.peek().copied().unwrap_or(end));
            return Ok(Some(ExactFetch {
                data: FetchData {
                    fetch_offset_metadata: meta,
                    records: info.records.into_owned(),
                    first_entry_incomplete: info.first_entry_incomplete,
                },
                upper_bound_offset,
            }));
        }
        Ok(None)
    }

    /// Kafka's `convertToOffsetMetadataOrThrow`: the segment holding `offset` and the byte
    /// position of its batch holding it; the active segment's end for the log end offset (or an
    /// offset no batch holds).
    fn offset_position(&self, inner: &Inner, offset: i64) -> Result<(i64, u64)> {
        let (active_base, active_size) = match inner.segments.keys().next_back() {
            Some(&b) => (b, self.seg(inner, b)?.size()),
            None => (0, 0),
        };
        if offset >= inner.log_end_offset {
            return Ok((active_base, active_size));
        }
        let floor = inner
            .segments
            .range(..=offset)
            .next_back()
            .map_or(active_base, |(&b, _)| b);
        for &base in inner.segments.range(floor..).map(|(b, _)| b) {
            if let Some(p) = self.seg(inner, base)?.translate_offset(offset, 0)? {
                return Ok((base, p.position));
            }
        }
        Ok((active_base, active_size))
    }

    /// [`Self::read_with`] returning an owned copy.
    pub fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        min_one_message: bool,
    ) -> Result<FetchData> {
        self.read_with(start_offset, max_bytes, min_one_message, |info| FetchData {
            fetch_offset_metadata: info.fetch_offset_metadata,
            records: info.records.into_owned(),
            first_entry_incomplete: info.first_entry_incomplete,
        })
    }

    /// Kafka's `fetchOffsetByTimestamp` for a real timestamp: the first record with timestamp
    /// `>= timestamp` at or after the log start offset, searching the first segment whose largest
    /// timestamp reaches it.
    pub fn fetch_offset_by_timestamp(&self, timestamp: i64) -> Result<Option<TimestampAndOffset>> {
        self.fetch_offset_by_timestamp_from(timestamp, i64::MIN)
    }

    /// Kafka's `MAX_TIMESTAMP` lookup (KIP-734): in the first segment with the largest
    /// max timestamp so far, the first record carrying it
    /// ([`LogSegment::offset_of_max_timestamp`]).
    pub fn offset_of_max_timestamp(&self) -> Result<Option<TimestampAndOffset>> {
        // In windows of segments, trimming between them: the lookup walks every segment and the
        // descriptors stay bounded.
        let mut best: Option<(i64, i64)> = None;
        let mut after = i64::MIN;
        loop {
            let inner = self.read_inner();
            let bases: Vec<i64> = inner
                .segments
                .range(after.saturating_add(1)..)
                .map(|(&b, _)| b)
                .take(MAX_OPEN_INACTIVE_SEGMENTS)
                .collect();
            if bases.is_empty() {
                let found = match best {
                    Some((base, _)) => self.seg(&inner, base)?.offset_of_max_timestamp(),
                    None => Ok(None),
                };
                drop(inner);
                self.trim_after_read()?;
                return found;
            }
            for &base in &bases {
                let max = self.seg(&inner, base)?.max_timestamp_so_far();
                // The first segment with the largest (Kafka keeps the first on ties).
                if best.is_none_or(|(_, m)| max > m) {
                    best = Some((base, max));
                }
                after = base;
            }
            drop(inner);
            self.trim_after_read()?;
        }
    }

    /// [`Self::fetch_offset_by_timestamp`] from the segment after `after`.
    fn fetch_offset_by_timestamp_from(
        &self,
        timestamp: i64,
        after: i64,
    ) -> Result<Option<TimestampAndOffset>> {
        let mut after = after;
        loop {
            let inner = self.read_inner();
            let bases: Vec<i64> = inner
                .segments
                .range(after.saturating_add(1)..)
                .map(|(&b, _)| b)
                .take(MAX_OPEN_INACTIVE_SEGMENTS)
                .collect();
            let Some(&last) = bases.last().filter(|_| after < i64::MAX) else {
                return Ok(None);
            };
            for base in bases {
                let seg = self.seg(&inner, base)?;
                if seg.largest_timestamp() >= timestamp {
                    let found = seg.find_offset_by_timestamp(timestamp, inner.log_start_offset);
                    drop(inner);
                    self.trim_after_read()?;
                    return found;
                }
            }
            drop(inner);
            self.trim_after_read()?;
            after = last;
        }
    }

    /// Kafka's `truncateTo`: removes every batch from the one containing `target` on (which must
    /// be a batch boundary). A negative target is [`SegmentError::InvalidTruncation`]; a target at
    /// or past the log end offset is a no-op. Unlike Kafka, the cut is synced at once (the later
    /// segments' deletions are durable too). Returns whether anything was removed.
    pub fn truncate_to(&self, target: i64) -> Result<bool> {
        if target < 0 {
            return Err(SegmentError::InvalidTruncation {
                path: self.dir.clone(),
                target,
                current: self.log_end_offset(),
            });
        }
        let mut inner = self.write_inner();
        if target >= inner.log_end_offset {
            return Ok(false);
        }
        let first_base = inner.segments.keys().next().copied().unwrap_or(0);
        if first_base > target {
            self.truncate_fully_locked(&mut inner, target)?;
            return Ok(true);
        }
        let later: Vec<i64> = inner
            .segments
            .range(target + 1..)
            .map(|(&b, _)| b)
            .collect();
        // Deleting syncs the directory, which makes the names of segments rolled since the last
        // flush durable too: flush the kept segments' data first, or a crash could keep an empty
        // later segment after an older one whose tail was lost (a gap in the offsets).
        if !later.is_empty() && inner.recovery_point < target {
            let from = inner
                .segments
                .range(..=inner.recovery_point)
                .next_back()
                .map_or(i64::MIN, |(&b, _)| b);
            let kept: Vec<i64> = inner
                .segments
                .range(from..=target)
                .map(|(&b, _)| b)
                .collect();
            for base in kept {
                self.seg(&inner, base)?.flush()?;
                self.trim(&mut inner)?;
            }
        }
        // Newest first: a crash part-way leaves a contiguous prefix of segments, never a gap
        // that a later segment's base offset would paper over.
        for b in later.into_iter().rev() {
            if let Some(slot) = inner.segments.remove(&b) {
                slot.into_segment(self, b)?.delete()?;
            }
        }
        let active = self.active_mut(&mut inner)?;
        if active.truncate_to(target)? > 0 {
            // The cut is made durable at once. Left to the page cache, a crash could keep the
            // cut bytes while a later write at their place survives (an unsynced truncation
            // undone under a new batch: two histories in one file, which producer state cannot
            // replay), or keep them under a segment rolled later, below the recovery point
            // (overlapping offsets).
            active.flush()?;
        }
        inner.log_end_offset = target;
        inner.log_start_offset = inner.log_start_offset.min(target);
        inner.recovery_point = inner.recovery_point.min(target);
        inner.dir_dirty = true;
        self.trim(&mut inner)?;
        Ok(true)
    }

    /// Kafka's `truncateFullyAndStartAt`: deletes every segment and starts an empty one at
    /// `new_offset`, which becomes the log start and end offset.
    pub fn truncate_fully_and_start_at(&self, new_offset: i64) -> Result<()> {
        let mut inner = self.write_inner();
        self.truncate_fully_locked(&mut inner, new_offset)
    }

    /// [`Self::truncate_fully_and_start_at`] that destroys nothing: every non-empty segment is
    /// moved into `quarantine_dir` (empty ones, holding no data, are deleted), then the log starts
    /// empty at `new_offset`. For a loader whose log start checkpoint lies above the log end (Kafka
    /// deletes every segment there). Returns the moved files.
    pub fn quarantine_fully_and_start_at(
        &self,
        new_offset: i64,
        quarantine_dir: &Path,
    ) -> Result<Vec<PathBuf>> {
        let mut inner = self.write_inner();
        let mut moved = Vec::new();
        for (base, slot) in std::mem::take(&mut inner.segments) {
            let empty = slot.size() == 0;
            let seg = slot.into_segment(self, base)?;
            if empty {
                seg.delete()?;
            } else {
                moved.extend(seg.move_to(quarantine_dir)?);
            }
        }
        self.opened().clear();
        self.start_empty_at(&mut inner, new_offset)?;
        Ok(moved)
    }

    fn truncate_fully_locked(&self, inner: &mut Inner, new_offset: i64) -> Result<()> {
        for (base, slot) in std::mem::take(&mut inner.segments) {
            slot.into_segment(self, base)?.delete()?;
        }
        self.opened().clear();
        self.start_empty_at(inner, new_offset)
    }

    /// One empty segment at `new_offset`, which becomes the log start, end and recovery point
    /// (the segments are gone already).
    fn start_empty_at(&self, inner: &mut Inner, new_offset: i64) -> Result<()> {
        let seg = LogSegment::create(&self.ctx, &self.dir, new_offset)?;
        inner.segments.insert(new_offset, Slot::open(seg));
        inner.log_start_offset = new_offset;
        inner.log_end_offset = new_offset;
        inner.recovery_point = new_offset;
        inner.dir_dirty = true;
        Ok(())
    }

    /// Kafka's `maybeIncrementLogStartOffset`: raises the log start offset (never lowers it).
    /// Above the log end offset is [`SegmentError::OffsetOutOfRange`]. Segments wholly below it
    /// are deleted by the next [`Self::delete_old_segments`].
    pub fn increment_log_start_offset(&self, new_start: i64) -> Result<bool> {
        let mut inner = self.write_inner();
        if new_start > inner.log_end_offset {
            return Err(SegmentError::OffsetOutOfRange {
                offset: new_start,
                log_start_offset: inner.log_start_offset,
                log_end_offset: inner.log_end_offset,
            });
        }
        if new_start > inner.log_start_offset {
            inner.log_start_offset = new_start;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Kafka's `deleteOldSegments`: deletes, oldest first, segments that breach retention by time
    /// (`now - largest timestamp > retention.ms`), by size (total size minus the segment still
    /// `>= retention.bytes`) or lie wholly below the log start offset (the next segment's base
    /// `<= log start offset`). Deletion stops at the first segment that breaches nothing, never
    /// passes `high_watermark` (a segment is deletable only if the next base, or the log end
    /// offset for the last, is `<= high_watermark`) and never deletes an empty active segment;
    /// if every segment goes, a new empty one is rolled first. Returns the number deleted.
    pub fn delete_old_segments(&self, high_watermark: i64) -> Result<usize> {
        self.delete_old_segments_with(high_watermark, &mut |_| Ok::<(), SegmentError>(()))
    }

    /// [`Self::delete_old_segments`], calling `on_roll(new_base)` after rolling the new empty
    /// segment that replaces them all and before deleting any (Kafka's `roll`, where the caller
    /// takes the producer snapshot named after the new base).
    pub fn delete_old_segments_with<E: From<SegmentError>>(
        &self,
        high_watermark: i64,
        on_roll: &mut dyn FnMut(i64) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E> {
        let now = self.ctx.clock.now_ms();
        let mut inner = self.write_inner();
        let mut total = 0usize;
        // Kafka runs the three predicates one after the other.
        for rule in [Rule::Time, Rule::Size, Rule::StartOffset] {
            total += self.delete_by_rule(&mut inner, rule, now, high_watermark, on_roll)?;
        }
        Ok(total)
    }

    fn delete_by_rule<E: From<SegmentError>>(
        &self,
        inner: &mut Inner,
        rule: Rule,
        now: i64,
        hw: i64,
        on_roll: &mut dyn FnMut(i64) -> std::result::Result<(), E>,
    ) -> std::result::Result<usize, E> {
        let total_size: u64 = inner.segments.values().map(Slot::size).sum();
        let mut size_diff = match rule {
            Rule::Size if self.config.retention_bytes >= 0 => {
                let r = self.config.retention_bytes as u64;
                if total_size < r {
                    return Ok(0);
                }
                total_size - r
            }
            Rule::Size => return Ok(0),
            Rule::Time if self.config.retention_ms < 0 => return Ok(0),
            _ => 0,
        };
        let bases: Vec<i64> = inner.segments.keys().copied().collect();
        let mut deletable = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let Some(slot) = inner.segments.get(&base) else {
                break;
            };
            let size = slot.size();
            let next = bases.get(i + 1).copied();
            let upper = next.unwrap_or(inner.log_end_offset);
            let last_and_empty = next.is_none() && size == 0;
            let breach = match rule {
                Rule::Time => {
                    let largest = self.seg(inner, base)?.largest_timestamp();
                    self.trim(inner)?;
                    now.saturating_sub(largest) > self.config.retention_ms
                }
                Rule::Size => {
                    if size_diff >= size {
                        size_diff -= size;
                        true
                    } else {
                        false
                    }
                }
                Rule::StartOffset => next.is_some_and(|n| n <= inner.log_start_offset),
            };
            if hw >= upper && breach && !last_and_empty {
                deletable.push(base);
            } else {
                break;
            }
        }
        if deletable.is_empty() {
            return Ok(0);
        }
        if deletable.len() == inner.segments.len() {
            let base = self.roll_locked(inner, None)?;
            on_roll(base)?;
            // The new segment's name durable before any old one is renamed away: a crash that
            // kept a rename but not the creation would leave no segment at all, and the log
            // would restart at offset 0 below offsets it had handed out.
            self.ctx.storage.sync_dir(&self.dir)?;
        }
        for &base in &deletable {
            if let Some(slot) = inner.segments.remove(&base) {
                slot.into_segment(self, base)?.delete()?;
            }
        }
        if let Some(&first) = inner.segments.keys().next() {
            inner.log_start_offset = inner.log_start_offset.max(first);
        }
        self.trim(inner)?;
        Ok(deletable.len())
    }

    /// Kafka's `flush(offset)`: flushes the segments holding offsets in
    /// `[recovery point, up_to_offset)` (and the directory, if segments were created or deleted
    /// since the last flush), then advances the recovery point to `up_to_offset` (capped at the
    /// log end offset).
    pub fn flush(&self, up_to_offset: i64) -> Result<()> {
        let mut inner = self.write_inner();
        self.flush_locked(&mut inner, up_to_offset)
    }

    fn flush_locked(&self, inner: &mut Inner, up_to_offset: i64) -> Result<()> {
        let up_to = up_to_offset.min(inner.log_end_offset);
        if up_to <= inner.recovery_point {
            return Ok(());
        }
        let from = inner
            .segments
            .range(..=inner.recovery_point)
            .next_back()
            .map_or(i64::MIN, |(&b, _)| b);
        let bases: Vec<i64> = inner.segments.range(from..up_to).map(|(&b, _)| b).collect();
        for base in bases {
            self.seg(inner, base)?.flush()?;
            // Segments opened only to be flushed are closed as the flush goes.
            self.trim(inner)?;
        }
        if inner.dir_dirty {
            self.ctx.storage.sync_dir(&self.dir)?;
            inner.dir_dirty = false;
        }
        inner.recovery_point = up_to;
        Ok(())
    }

    /// Flushes everything and closes every segment (trimming indexes).
    pub fn close(self) -> Result<()> {
        self.close_with(true)
    }

    /// [`Self::close`] without any flush: for a caller that makes the whole file system durable
    /// afterwards with one [`crate::io::Storage::sync_filesystem`] (a log directory closing
    /// many partitions). Until then nothing written since the last flush is durable.
    pub fn close_unsynced(self) -> Result<()> {
        self.close_with(false)
    }

    fn close_with(self, sync: bool) -> Result<()> {
        if sync {
            // Segments released since their last write are flushed through a handle opened for it.
            let mut inner = self.write_inner();
            let end = inner.log_end_offset;
            self.flush_locked(&mut inner, end)?;
        }
        let inner = self.inner.into_inner().unwrap_or_else(|p| p.into_inner());
        for (_, slot) in inner.segments {
            // A segment not open has nothing to close (its indexes were trimmed when it was
            // released) nor to flush (flushed when it was released or before: see `flush`).
            if let Some(seg) = slot.seg.into_inner() {
                seg.close_with(sync)?;
            }
        }
        // Closing changes no directory entry (the indexes are trimmed in place): the directory
        // is synced only when an entry changed since the last sync.
        if sync && inner.dir_dirty {
            self.ctx.storage.sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Time,
    Size,
    StartOffset,
}
