//! Which segments a pass cleans: the segment listing, the cleanable range, the size groups,
//! and the cleaner checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::Result;
use super::LogToClean;
use segment_store::internals::{
    file_name, parse_file_name, FileKind, TempSuffix, CLEANER_OFFSET_CHECKPOINT_FILE,
};
use segment_store::{OffsetCheckpointFile, TopicPartition};
use segment_store::{OpenMode, Storage};

/// A segment as the cleaner sees it: base offset, file sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFiles {
    /// Base offset.
    pub base_offset: i64,
    /// `.log` size.
    pub log_size: u64,
    /// `.index` size.
    pub index_size: u64,
    /// `.timeindex` size.
    pub time_index_size: u64,
}

/// The live segments of `dir`, by base offset.
pub fn list_segments(storage: &dyn Storage, dir: &Path) -> Result<Vec<SegmentFiles>> {
    let mut out = Vec::new();
    for name in storage.list_dir(dir)? {
        let Ok(p) = parse_file_name(&name) else {
            continue;
        };
        if p.kind != FileKind::Log || p.temp.is_some() {
            continue;
        }
        let size = |kind| -> Result<u64> {
            let path = dir.join(file_name(p.base_offset, kind, None));
            if storage.exists(&path)? {
                Ok(storage.open(&path, OpenMode::Read)?.len()?)
            } else {
                Ok(0)
            }
        };
        out.push(SegmentFiles {
            base_offset: p.base_offset,
            log_size: size(FileKind::Log)?,
            index_size: size(FileKind::Index)?,
            time_index_size: size(FileKind::TimeIndex)?,
        });
    }
    out.sort_by_key(|s| s.base_offset);
    Ok(out)
}

/// Kafka's `LogCleanerManager.cleanableOffsets`: `(first dirty offset, first uncleanable
/// offset)`. `checkpointed` is the partition's `cleaner-offset-checkpoint` entry; one below the
/// log start or past the log end is reset to the log start. `largest_timestamps` gives each
/// non-active segment's largest timestamp (for `min.compaction.lag.ms`).
pub fn cleanable_offsets(
    log: &LogToClean,
    segments: &[SegmentFiles],
    log_end_offset: i64,
    checkpointed: Option<i64>,
    min_compaction_lag_ms: i64,
    mut largest_timestamp: impl FnMut(&SegmentFiles) -> Result<i64>,
) -> Result<(i64, i64)> {
    let first_dirty = first_dirty_offset(checkpointed, log.log_start_offset, log_end_offset).0;
    let active = segments.last().map_or(log_end_offset, |s| s.base_offset);
    let mut uncleanable = log.last_stable_offset.min(active);
    if min_compaction_lag_ms > 0 {
        let n = segments.len().saturating_sub(1);
        // Kafka's nonActiveLogSegmentsFrom(firstDirty): from the segment holding it.
        let from = segments
            .iter()
            .take(n)
            .rposition(|s| s.base_offset <= first_dirty)
            .unwrap_or(0);
        for s in segments.iter().take(n).skip(from) {
            if largest_timestamp(s)? > log.now_ms.saturating_sub(min_compaction_lag_ms) {
                uncleanable = uncleanable.min(s.base_offset);
                break;
            }
        }
    }
    Ok((first_dirty, first_dirty.max(uncleanable)))
}

/// Where a pass starts (Kafka's `cleanableOffsets`): the checkpointed offset, or the log start
/// when there is none or the checkpointed one is below the log start or past the log end (Kafka
/// logs "Resetting first dirty offset"); the second value says whether a checkpointed offset was
/// reset so. `verify` reports such a reset.
pub fn first_dirty_offset(
    checkpointed: Option<i64>,
    log_start_offset: i64,
    log_end_offset: i64,
) -> (i64, bool) {
    match checkpointed {
        None => (log_start_offset, false),
        Some(c) if c < log_start_offset || c > log_end_offset => (log_start_offset, true),
        Some(c) => (c, false),
    }
}

/// Kafka's `LogToClean.firstUncleanableOffset` (`calculateCleanableBytes`): the base offset of
/// the segment holding `uncleanable`, the active segment's if none before it does. A pass never
/// maps or cleans part of a segment the range ends in.
pub fn first_uncleanable_segment(segments: &[SegmentFiles], uncleanable: i64) -> i64 {
    let Some(active) = segments.last() else {
        return uncleanable;
    };
    if uncleanable >= active.base_offset {
        return active.base_offset;
    }
    segments
        .iter()
        .rev()
        .find(|s| s.base_offset <= uncleanable)
        .or(segments.first())
        .map_or(uncleanable, |s| s.base_offset)
}

pub(super) fn segment_path(
    dir: &Path,
    base: i64,
    kind: FileKind,
    temp: Option<TempSuffix>,
) -> PathBuf {
    dir.join(file_name(base, kind, temp))
}

/// Kafka's `logSegments(from, to)`: the segment holding `from` and those after it below `to`.
pub(super) fn segments_in(segments: &[SegmentFiles], from: i64, to: i64) -> Vec<&SegmentFiles> {
    let first = segments
        .iter()
        .rposition(|s| s.base_offset <= from)
        .unwrap_or(0);
    segments
        .iter()
        .skip(first)
        .filter(|s| s.base_offset < to)
        .collect()
}

/// Kafka's `groupSegmentsBySize`.
pub(super) fn group_segments_by_size<'s>(
    segments: &[&'s SegmentFiles],
    max_size: u64,
    max_index_size: u64,
    first_uncleanable: i64,
) -> Vec<Vec<&'s SegmentFiles>> {
    let mut groups = Vec::new();
    let mut i = 0;
    while let Some(&first) = segments.get(i) {
        let mut group = vec![first];
        let (mut log, mut index, mut time) =
            (first.log_size, first.index_size, first.time_index_size);
        i += 1;
        while let Some(&next) = segments.get(i) {
            let last_offset_of_next = match segments.get(i + 1) {
                Some(after) => after.base_offset - 1,
                None => first_uncleanable - 1,
            };
            let last_base = group.last().map_or(next.base_offset, |s| s.base_offset);
            let fits = log + next.log_size <= max_size
                && index + next.index_size <= max_index_size
                && time + next.time_index_size <= max_index_size
                && (next.log_size == 0 || last_offset_of_next - last_base <= i64::from(i32::MAX));
            if !fits {
                break;
            }
            group.push(next);
            log += next.log_size;
            index += next.index_size;
            time += next.time_index_size;
            i += 1;
        }
        groups.push(group);
    }
    groups
}

/// Reads the partition's entry of `cleaner-offset-checkpoint` in the log directory (the parent
/// of `dir`), if any.
pub fn read_cleaner_checkpoint(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    tp: &TopicPartition,
) -> Result<Option<i64>> {
    let Some(parent) = dir.parent() else {
        return Ok(None);
    };
    let path = parent.join(CLEANER_OFFSET_CHECKPOINT_FILE);
    if !storage.exists(&path)? {
        return Ok(None);
    }
    let entries = OffsetCheckpointFile::new(Arc::clone(storage), &path).read()?;
    Ok(entries.into_iter().find(|(t, _)| t == tp).map(|(_, o)| o))
}

/// Sets the partition's entry of `cleaner-offset-checkpoint` (written atomically, others kept).
pub fn write_cleaner_checkpoint(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    tp: &TopicPartition,
    offset: i64,
) -> Result<()> {
    let Some(parent) = dir.parent() else {
        return Ok(());
    };
    let path = parent.join(CLEANER_OFFSET_CHECKPOINT_FILE);
    // One read-modify-write at a time: the cleaner threads of one log directory share the file.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let file = OffsetCheckpointFile::new(Arc::clone(storage), &path);
    let mut entries: BTreeMap<TopicPartition, i64> = if storage.exists(&path)? {
        file.read()?.into_iter().collect()
    } else {
        BTreeMap::new()
    };
    entries.insert(tp.clone(), offset);
    let list: Vec<(TopicPartition, i64)> = entries.into_iter().collect();
    file.write(&list)?;
    Ok(())
}
