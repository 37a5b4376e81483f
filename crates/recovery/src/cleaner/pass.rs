//! One cleaning pass: the offset map built over the dirty range, each group cleaned, and the
//! cleaned segments swapped in.

use std::collections::BTreeMap;
use std::path::Path;

use super::clean::{clean_into, CleanedSegment, Mode};
use super::error::Result;
use super::newest::NewestOffsets;
use super::reader::{
    collect_aborted, first_control_type, format_err, head, read_txn_indexes, BatchReader,
};
use super::segments::{
    group_segments_by_size, list_segments, segment_path, segments_in, SegmentFiles,
};
use super::{CleanReport, CleanerConfig, GroupReport, LogToClean};
use super::{CleanedTransactionMetadata, OffsetMap};
use record_format::DecodeLimits;
use segment_store::internals::OffsetIndexView;
use segment_store::internals::{FileKind, TempSuffix};
use segment_store::AbortedTxn;
use segment_store::{OpenMode, Storage};

/// Kafka's `Cleaner.buildOffsetMap` over `[start, end)`: returns whether the map filled up.
/// `checked` gets, per segment base offset, the position below which every batch was
/// CRC-checked here (the cleaning that follows does not check them again).
#[allow(clippy::too_many_arguments)]
fn build_offset_map(
    storage: &dyn Storage,
    dir: &Path,
    segments: &[SegmentFiles],
    txns: &BTreeMap<i64, Vec<AbortedTxn>>,
    start: i64,
    end: i64,
    map: &mut OffsetMap,
    config: &CleanerConfig,
    checked: &mut BTreeMap<i64, u64>,
    newest: &mut NewestOffsets,
) -> Result<bool> {
    map.clear();
    let dirty: Vec<&SegmentFiles> = segments_in(segments, start, end);
    let mut meta = CleanedTransactionMetadata::default();
    meta.add_aborted_transactions(collect_aborted(txns, start, end));
    let max_desired = (map.slots() as f64 * config.io_buffer_load_factor) as usize;
    for (i, seg) in dirty.iter().enumerate() {
        let next_start = dirty.get(i + 1).map_or(end, |s| s.base_offset);
        let path = segment_path(dir, seg.base_offset, FileKind::Log, None);
        let mut reader = BatchReader::open(storage, &path, config)?;
        while let Some((at, b)) = reader.next_batch()? {
            let h = head(&b);
            if h.control {
                let t = first_control_type(&path, &b)?;
                meta.on_control_batch_read(h.last_offset, h.producer_id, t);
            } else if !meta.on_batch_read(h.last_offset, h.producer_id, h.transactional) {
                let records = b
                    .records(&DecodeLimits::default())
                    .map_err(|e| format_err(&path, e))?;
                for r in records.iter() {
                    let r = r.map_err(|e| format_err(&path, e))?;
                    if let Some(key) = r.key() {
                        if r.offset() >= start {
                            if map.size() < max_desired {
                                newest.record(r.offset(), map.put_replacing(key, r.offset()));
                            } else {
                                checked.insert(seg.base_offset, at + b.size_in_bytes() as u64);
                                return Ok(true);
                            }
                        }
                    }
                }
            }
            if h.last_offset >= start {
                map.update_latest_offset(h.last_offset);
            }
        }
        checked.insert(seg.base_offset, reader.position());
        map.update_latest_offset(next_start - 1);
    }
    Ok(false)
}

pub(super) fn log_delete_retention(config: &CleanerConfig) -> i64 {
    config.delete_retention_ms
}

/// The max timestamp of the first batch of the `.log` at `path` (Kafka's
/// `getFirstBatchTimestamp`, the segment's rolling-based timestamp), if it holds one.
pub(super) fn read_first_batch_timestamp(
    storage: &dyn Storage,
    path: &Path,
) -> Result<Option<i64>> {
    let config = CleanerConfig::default();
    let mut reader = BatchReader::open(storage, path, &config)?;
    Ok(reader.next_batch()?.map(|(_, b)| b.max_timestamp()))
}

/// The largest timestamp of a segment: its time index's last entry if any, else the max
/// timestamp of its batches (Kafka's `largestTimestamp` falls back to the file's mtime, which
/// the storage seam does not have).
pub(super) fn largest_timestamp(
    storage: &dyn Storage,
    dir: &Path,
    s: &SegmentFiles,
    config: &CleanerConfig,
) -> Result<i64> {
    let mut max = -1;
    let path = segment_path(dir, s.base_offset, FileKind::Log, None);
    let mut reader = BatchReader::open(storage, &path, config)?;
    while let Some((_, b)) = reader.next_batch()? {
        max = max.max(b.max_timestamp());
    }
    Ok(max)
}

/// One cleaning pass from `first_dirty` (see the module docs). The checkpoint is not written:
/// [`clean`] does that.
pub(super) fn run_pass(
    storage: &dyn Storage,
    log: &LogToClean,
    first_dirty: i64,
    first_uncleanable: i64,
    config: &CleanerConfig,
    mode: Mode,
    replace: &Replace<'_>,
) -> Result<CleanReport> {
    let dir = &log.dir;
    let segments = list_segments(storage, dir)?;
    let txns = read_txn_indexes(storage, dir, &segments)?;
    let mut map = OffsetMap::new(OffsetMap::memory_for(
        config.dedupe_buffer_size,
        config.threads,
    ));
    let mut checked = BTreeMap::new();
    let mut newest = NewestOffsets::new(
        first_dirty,
        first_uncleanable,
        OffsetMap::memory_for(config.dedupe_buffer_size, config.threads)
            / NewestOffsets::BUDGET_SHARE,
    );
    build_offset_map(
        storage,
        dir,
        &segments,
        &txns,
        first_dirty,
        first_uncleanable,
        &mut map,
        config,
        &mut checked,
        &mut newest,
    )?;
    let end_offset = map.latest_offset() + 1;
    let mut report = CleanReport {
        first_dirty_offset: first_dirty,
        first_uncleanable_offset: first_uncleanable,
        end_offset,
        map_slots: map.slots(),
        map_keys: map.size(),
        groups: Vec::new(),
    };
    let to_clean: Vec<&SegmentFiles> = segments
        .iter()
        .filter(|s| s.base_offset < end_offset)
        .collect();
    let groups = group_segments_by_size(
        &to_clean,
        log.segments.segment_bytes,
        log.segments.max_index_size,
        first_uncleanable,
    );
    let mut meta = CleanedTransactionMetadata::default();
    for group in groups {
        let base = group.first().map_or(0, |s| s.base_offset);
        let handle = match mode {
            Mode::DryRun => None,
            Mode::Apply => Some(storage.open(
                &segment_path(dir, base, FileKind::Log, Some(TempSuffix::Cleaned)),
                OpenMode::CreateTruncate,
            )?),
        };
        let mut dest = CleanedSegment::new(
            handle,
            base,
            log.segments.index_interval_bytes,
            config.io_buffer_size / 2,
        );
        let mut g = GroupReport {
            segments: group.iter().map(|s| s.base_offset).collect(),
            ..GroupReport::default()
        };
        meta.retained_aborted.clear();
        for (i, seg) in group.iter().enumerate() {
            let path = segment_path(dir, seg.base_offset, FileKind::Log, None);
            let upper = match group.get(i + 1) {
                Some(n) => n.base_offset,
                None => read_next_offset(storage, &path, seg.base_offset, config)?,
            };
            meta.add_aborted_transactions(collect_aborted(&txns, seg.base_offset, upper));
            clean_into(
                storage,
                &path,
                checked.get(&seg.base_offset).copied().unwrap_or(0),
                &mut dest,
                (&map, &newest),
                &mut meta,
                &log.last_records,
                first_uncleanable,
                log,
                config,
                &mut g,
            )?;
        }
        dest.txn_index = std::mem::take(&mut meta.retained_aborted);
        g.bytes_written = dest.finish(storage, dir)?;
        if mode == Mode::Apply {
            commit_swap(storage, dir, base)?;
            match replace {
                Replace::Files => finish_swap(storage, dir, base, &g.segments)?,
                Replace::Live(replace) => {
                    replace(base, &g.segments)?;
                    storage.sync_dir(dir)?;
                }
            }
        }
        report.groups.push(g);
    }
    Ok(report)
}

/// The next offset of a segment (its base when empty), from its batches' headers: from the batch
/// its offset index's last entry points at, as Kafka's `readNextOffset` does, or from the start
/// of the `.log` when that entry is missing or points at no batch holding its offset.
pub(super) fn read_next_offset(
    storage: &dyn Storage,
    path: &Path,
    base: i64,
    config: &CleanerConfig,
) -> Result<i64> {
    if let Some(next) = last_indexed_position(storage, path, base)
        .and_then(|(offset, position)| next_offset_from(storage, path, config, offset, position))
    {
        return Ok(next);
    }
    let mut next = base;
    let mut reader = BatchReader::open(storage, path, config)?.checked_below(u64::MAX);
    while let Some((_, b)) = reader.next_batch()? {
        next = b.last_offset() + 1;
    }
    Ok(next)
}

/// The last entry of the offset index beside the `.log` at `path`: (offset, position), if it
/// has one that is not zero.
fn last_indexed_position(storage: &dyn Storage, path: &Path, base: i64) -> Option<(i64, u64)> {
    let index = path.with_extension("index");
    if !storage.exists(&index).ok()? {
        return None;
    }
    let handle = storage.open(&index, OpenMode::Read).ok()?;
    let len = handle.len().ok()?;
    if len < 8 || len % 8 != 0 {
        return None;
    }
    let mut entry = [0u8; 8];
    if handle.read_at(len - 8, &mut entry).ok()? != 8 {
        return None;
    }
    let last = OffsetIndexView::new(base, &entry).entry(0)?;
    // A relative offset and a position above zero (Kafka's fields are signed).
    let position = i32::try_from(last.position.0).ok().filter(|&p| p > 0)?;
    (last.offset > base).then_some((last.offset, position as u64))
}

/// The next offset of the `.log` at `path` walking from `position`, if a batch holding `offset`
/// starts there and every header from it on reads; `None` otherwise.
fn next_offset_from(
    storage: &dyn Storage,
    path: &Path,
    config: &CleanerConfig,
    offset: i64,
    position: u64,
) -> Option<i64> {
    let mut reader = BatchReader::open(storage, path, config)
        .ok()?
        .checked_below(u64::MAX)
        .seek(position);
    let mut next = match reader.next_batch().ok()? {
        Some((_, b)) if b.base_offset() <= offset && offset <= b.last_offset() => {
            b.last_offset() + 1
        }
        _ => return None,
    };
    while let Some((_, b)) = reader.next_batch().ok()? {
        next = b.last_offset() + 1;
    }
    Some(next)
}

/// How a pass puts its cleaned segments in place once they are committed (`.swap`).
pub(super) enum Replace<'a> {
    /// The partition is closed: its files are replaced on disk ([`finish_swap`]).
    Files,
    /// The partition is open: its log replaces them
    /// ([`segment_store::LocalLog::replace_segments`]), under its writer's segment lock.
    Live(&'a dyn Fn(i64, &[i64]) -> segment_store::Result<()>),
}

/// The segment files of a group, the `.log` last.
const KINDS: [FileKind; 4] = [
    FileKind::TxnIndex,
    FileKind::TimeIndex,
    FileKind::Index,
    FileKind::Log,
];

/// The commit point of Kafka's `replaceSegments`: every `.cleaned` file of `base` renamed to
/// `.swap` (the `.log` last: a `.log.swap` present means its indexes are there too), then the
/// directory synced. From here on a crash has the loader complete the swap.
fn commit_swap(storage: &dyn Storage, dir: &Path, base: i64) -> Result<()> {
    for kind in KINDS {
        let cleaned = segment_path(dir, base, kind, Some(TempSuffix::Cleaned));
        if storage.exists(&cleaned)? {
            storage.rename(
                &cleaned,
                &segment_path(dir, base, kind, Some(TempSuffix::Swap)),
            )?;
        }
    }
    storage.sync_dir(dir)?;
    Ok(())
}

/// The rest of Kafka's `replaceSegments` on a closed partition: the replaced segments' files
/// removed (synced, so that no crash leaves them beside the new segment), the `.swap` files
/// renamed to their live names, synced.
fn finish_swap(storage: &dyn Storage, dir: &Path, base: i64, replaced: &[i64]) -> Result<()> {
    for &old in replaced {
        for kind in KINDS {
            let live = segment_path(dir, old, kind, None);
            if storage.exists(&live)? {
                storage.remove_file(&live)?;
            }
        }
    }
    storage.sync_dir(dir)?;
    for kind in KINDS.iter().rev() {
        let swap = segment_path(dir, base, *kind, Some(TempSuffix::Swap));
        if storage.exists(&swap)? {
            storage.rename(&swap, &segment_path(dir, base, *kind, None))?;
        }
    }
    storage.sync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use record_format::RecordBatchBuilder;
    use segment_store::internals::file_name;
    use segment_store::StdFs;

    /// The next offset is read from the batch the offset index's last entry points at, and from
    /// the start of the `.log` when that entry does not point at a batch holding its offset: a
    /// broken frame before the entry's batch is then found.
    #[test]
    fn next_offset_from_the_last_index_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = 1_000i64;
        let mut log = Vec::new();
        let mut starts = Vec::new();
        for i in 0..1_000i64 {
            let mut b = RecordBatchBuilder::new(base + 2 * i);
            b.append(i, Some(b"k"), Some(&[7u8; 1024]), &[])
                .expect("append");
            b.append(i, Some(b"l"), Some(&[7u8; 16]), &[])
                .expect("append");
            starts.push(log.len() as u64);
            log.extend_from_slice(&b.build());
        }
        // A broken frame (a negative length) in batch 500.
        log[starts[500] as usize + 8] = 0xff;
        let path = dir.path().join(file_name(base, FileKind::Log, None));
        std::fs::write(&path, &log).expect("write");
        let index = dir.path().join(file_name(base, FileKind::Index, None));
        let entry = |offset: i64, position: u64| {
            let mut e = ((offset - base) as i32).to_be_bytes().to_vec();
            e.extend_from_slice(&(position as i32).to_be_bytes());
            e
        };
        let config = CleanerConfig::default();
        let next = || read_next_offset(&StdFs, &path, base, &config);
        // Batch 900 holds offsets base + 1800 and base + 1801.
        for offset in [base + 1_800, base + 1_801] {
            std::fs::write(&index, [entry(10, 4), entry(offset, starts[900])].concat())
                .expect("write");
            assert_eq!(next().expect("from the entry"), base + 2_000, "{offset}");
        }
        for wrong in [
            entry(base + 1_802, starts[900]),
            entry(base + 1_800, starts[900] + 5),
            entry(base + 1_800, log.len() as u64 + 100),
            vec![0; 16],
            vec![1; 7],
        ] {
            std::fs::write(&index, &wrong).expect("write");
            assert!(next().is_err(), "{wrong:?}: read from the start");
        }
        std::fs::remove_file(&index).expect("remove");
        assert!(next().is_err(), "no index: read from the start");
    }
}
