//! Segment planning and scanning: the segments found, where recovery starts, and the scan of
//! each segment from there up to the first cut, over [`Sources`] (one segment's bytes at a time).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use record_format::internals::{ScannedBatch, READ_CHUNK_BYTES};
use record_format::{Batches, IterEnd, LogEntry};
use segment_store::internals::{file_name, segment_file_path, FileKind};
use segment_store::internals::{
    scan_segment, OffsetIndexView, ReadOnlyBytes, RecoveryVisitor, SegmentScan, SegmentScanner,
};
use segment_store::{AbortedTxn, DirLock, SegmentConfig, SegmentError};

use super::indexes::{check_indexes, IndexCheck, IndexesChecked};
use super::leftovers::{LiveFile, LiveIndex};
use super::types::{SegmentPlan, SnapshotPhase};
use super::{search_by, PlanCtx, PlanState};
use crate::error::SnapshotError;
use crate::loader::LoadOptions;
use crate::log::PartitionLogError;
use crate::producer_state::{AppliedBatches, ProducerStateManager};
use crate::snapshot::SnapshotIo;
use crate::summary::BatchSummary;

/// How far behind the batch being applied a guarded map's pages are let go of, and how many
/// bytes at a time ([`ReadOnlyBytes::release`]).
const RELEASE_STEP_BYTES: usize = 8 << 20;

/// The released ranges start and end at multiples of this (x86-64's PMD size).
const RELEASE_ALIGN_BYTES: usize = 2 << 20;

/// The bytes of the segments, opened when first needed.
pub(super) struct Sources<'a> {
    opts: &'a LoadOptions,
    lock: Option<&'a DirLock>,
    /// The partition directory.
    dir: &'a Path,
    /// base → (where its bytes are, valid length after recovery)
    pub(super) open: BTreeMap<i64, (Source, Option<u64>)>,
    /// The bytes of the one segment open (one segment in memory at a time, whatever their
    /// number).
    current: Option<(i64, ReadOnlyBytes)>,
}

/// Where the bytes of a segment of [`Sources`] are.
pub(super) enum Source {
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
            let bytes =
                ReadOnlyBytes::open(self.opts.config.env.storage.as_ref(), &path, self.lock)?;
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
    /// an [`segment_store::internals::MmapFile`]; without it (`verify`), a guarded map
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
            let storage = self.opts.config.env.storage.as_ref();
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
        let mut behind = |batch: &ScannedBatch<'_>, aborted: &mut Vec<AbortedTxn>| {
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

    pub(super) fn forget(&mut self, base: i64) {
        self.release(base);
        self.open.remove(&base);
    }

    /// Kafka's `loadProducersFromRecords` over the bytes: every v2 batch with base offset in
    /// `[from, to)` of the segments, applied with the replication rules, in place.
    pub(super) fn replay(
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

/// Kafka's `readNextOffset` over bytes: from the last offset-index entry's position, the offset
/// after the last batch whose header parses; `None` if a batch after that position does not
/// parse, or the bytes end inside a batch (a torn tail: Kafka's `readNextOffset` stops before
/// it, and appends would follow it; recovery cuts it instead).
fn read_next_offset(base: i64, log: &[u8], index: &[u8]) -> Option<i64> {
    let from = OffsetIndexView::new(base, index).last_entry().position.0;
    let Some(rest) = log.get(usize::try_from(from).unwrap_or(usize::MAX)..) else {
        return Some(base);
    };
    let mut next = base;
    let mut batches = Batches::new(rest, u64::from(from));
    for entry in batches.by_ref() {
        next = entry.ok()?.last_offset().saturating_add(1);
    }
    match batches.stopped_at() {
        Some(IterEnd::IncompleteTrailing { .. }) => None,
        _ => Some(next),
    }
}

/// The segments of a plan (after the leftovers are handled) and what reading them found.
pub(super) struct FoundSegments<'a> {
    /// The segments, by base offset.
    pub(super) segments: Vec<SegmentPlan>,
    /// Their bytes, opened when first needed (an empty directory: one empty segment at 0).
    pub(super) sources: Sources<'a>,
    /// The base offsets of `sources`, in order.
    pub(super) bases: Vec<i64>,
    /// The segments whose indexes fail Kafka's sanity checks, in order.
    insane: Vec<i64>,
    /// (audited plans) the index entries to check against each scanned segment's batches.
    index_checks: BTreeMap<i64, IndexCheck>,
    /// The last segment's offset index.
    last_index: ReadOnlyBytes,
}

/// The segments of the `live` files, with their sizes and index findings.
pub(super) fn plan_segments<'a>(
    dir: &'a Path,
    opts: &'a LoadOptions,
    lock: Option<&'a DirLock>,
    live: &[LiveFile],
    audit: bool,
) -> Result<FoundSegments<'a>, PartitionLogError> {
    let env = &opts.config.env;
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
pub(super) fn recovery_base(
    opts: &LoadOptions,
    clean: bool,
    recovery_point: i64,
    found: &mut FoundSegments<'_>,
) -> Result<Option<i64>, PartitionLogError> {
    let bases = &found.bases;
    let first_base = bases.first().copied().unwrap_or(0);
    let mut recover_base = if clean {
        None
    } else if opts.config.full_recovery {
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

/// Recovery from the segment at `base` (Kafka's `recoverLog`): producer state loaded and
/// replayed up to `base`, each segment from `base` scanned up to the first cut, then the
/// snapshots the scan left behind.
pub(super) fn recover_from(
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
        index_interval_bytes: opts.config.log.log.index_interval_bytes,
        max_index_size: opts.config.log.log.max_index_size,
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
        let mut visitor = |batch: &ScannedBatch<'_>, aborted: &mut Vec<AbortedTxn>| {
            if let Some(c) = check.as_mut() {
                c.batch(batch.position(), batch.last_offset());
            }
            let summary = BatchSummary::from_scanned(batch)?;
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
