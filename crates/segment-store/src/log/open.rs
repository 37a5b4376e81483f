//! Opening a log: its directory listed and its active segment set up; for the recovery crate's
//! loader, the scans of a recovery plan installed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use arc_swap::ArcSwap;

use super::list::{SegmentList, Segments};
use super::{Inner, LocalLog, LogConfig, LogEnv, PublishedBounds, Slot};
use crate::error::{Result, SegmentError};
use crate::file_name::{parse_file_name, FileKind, TempSuffix};
use crate::index::AbortedTxn;
use crate::lock::DirLock;
use crate::segment::{LogSegment, RecoveryOutcome, SegmentConfig, SegmentContext, SegmentScan};

impl LocalLog {
    /// Opens (or initialises) the recovered log in `dir` on the real file system with the
    /// system clock (see [`Self::open_with`]).
    pub fn open(dir: &Path, config: LogConfig, recovery_point: i64) -> Result<LocalLog> {
        Self::open_with(dir, config, recovery_point, LogEnv::default())
    }

    /// Opens the log in `dir` as it is, as Kafka's `LocalLog` takes the segments its
    /// `LogLoader` loaded: it recovers nothing. A directory that needs recovery first (a segment
    /// whose index fails Kafka's sanity check, an active segment whose tail does not parse) is
    /// refused with [`SegmentError::NeedsRecovery`]; recovery is the recovery crate's
    /// `LogLoader`. Leftover `*.deleted` files are removed; an empty directory gets one empty
    /// segment at offset 0. Takes the directory's [`DirLock`] (held for the life of the log).
    pub fn open_with(
        dir: &Path,
        config: LogConfig,
        recovery_point: i64,
        env: LogEnv,
    ) -> Result<LocalLog> {
        let (log, insane) = Self::open_inner(dir, config, recovery_point, env, None, None)?;
        if !insane.is_empty() {
            return Err(SegmentError::NeedsRecovery {
                dir: dir.to_path_buf(),
                segments: insane,
            });
        }
        Ok(log)
    }

    /// Opens the segments of `dir` as they are, for the recovery crate's loader, which already
    /// holds `lock` (the directory's [`DirLock`]) and knows, from its recovery plan, the active
    /// segment's next offset: the active segment is not walked to find it (Kafka's
    /// `readNextOffset` reads from the last index entry; the plan did that, or scanned the
    /// segment). No segment is recovered, whatever the recovery point or the index sanity checks
    /// say; leftover `*.deleted` files are removed. Returns the log and the base offsets of the
    /// segments whose indexes fail Kafka's sanity check (the loader installs its scans with
    /// [`Self::install_scans`]).
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
                segments.insert(base, Slot::sealed(base, seg.size(), None));
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
        active.publish_tail(0);
        segments.insert(active.base_offset(), Slot::active(active));
        let log_start_offset = segments.keys().next().copied().unwrap_or(0);
        if entries_changed {
            env.storage.sync_dir(&dir)?;
        }
        let log = LocalLog {
            dir,
            config,
            ctx,
            inner: RwLock::new(Inner {
                segments: Segments::new(segments),
                log_start_offset,
                log_end_offset,
                recovery_point: recovery_point.min(log_end_offset),
                dir_dirty: false,
                dir_changes: 0,
                removals: 0,
                closed: false,
            }),
            published: PublishedBounds::default(),
            list: ArcSwap::from_pointee(SegmentList::default()),
            opened: Mutex::new(Vec::new()),
            uses: AtomicU64::new(0),
            pending_deletes: Mutex::new(Vec::new()),
        };
        // Publishes the list and the bounds.
        drop(log.write_inner());
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
        self.begin_truncation();
        let created = inner.segments.is_empty();
        if created {
            let seg = LogSegment::create(&self.ctx, &self.dir, from_base.max(0))?;
            inner.segments.insert(seg.base_offset(), Slot::active(seg));
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
        inner.truncated_to(next);
        Ok(created)
    }

    /// Installs a recovery plan's scans (its `SegmentScan`s of the segments from `from_base` on,
    /// in order; the recovery crate's loader takes them): each scanned segment gets
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
            let Some(slot) = inner.segments.remove(&base) else {
                break;
            };
            let mut seg = slot.into_segment(self, base)?;
            let outcome = seg.install_scan_as(scan, quarantine_dir, active);
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    inner
                        .segments
                        .insert(base, Slot::sealed(base, seg.size(), None));
                    return Err(e);
                }
            };
            cut = outcome.truncated_bytes > 0;
            if active {
                active_next = Some(scan.next_offset());
                // The active one from here on: every later segment goes.
                inner.segments.insert(base, Slot::active(seg));
            } else {
                // Written and done with: closed at once, so that recovery holds a bounded
                // number of segments open whatever their count.
                let size = seg.size();
                inner.segments.insert(base, Slot::sealed(base, size, None));
                seg.release()?;
            }
            outcomes.push((base, outcome));
        }
        // The active segment's next offset is its scan's: no header is read again.
        let created = self.reactivate_last(&mut inner, from_base, active_next)?;
        // Installing a scan rewrites files in place; only moved or created files change entries.
        if !moved.is_empty() {
            inner.mark_segments_removed();
        } else if created {
            inner.mark_dir_dirty();
        }
        Ok((outcomes, moved))
    }

    /// Kafka's `LogSegment.updateTxnIndex` for each aborted transaction, on the segment holding
    /// its marker (`last_offset`), normally the active one.
    pub fn append_aborted_txns(&self, txns: &[AbortedTxn]) -> Result<()> {
        // Nothing to write opens nothing to trim: no lock for the appends that end no
        // transaction (nearly all of them).
        if txns.is_empty() {
            return Ok(());
        }
        let mut inner = self.write_inner();
        for txn in txns {
            let base = match inner.segments.range(..=txn.last_offset).next_back() {
                Some((&base, _)) => base,
                None => inner.segments.keys().next_back().copied().unwrap_or(0),
            };
            self.with_seg_mut(&mut inner, base, |seg| seg.update_txn_index(txn))?;
        }
        self.trim_cache();
        Ok(())
    }
}
