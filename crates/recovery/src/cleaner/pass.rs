//! One cleaning pass: the offset map built over the dirty range, each group cleaned, and the
//! cleaned segments swapped in.

use std::path::Path;

use super::build::{build_offset_map, MapRead};
use super::clean::{clean_into, CleanedSegment, Mode, PassInputs};
use super::error::Result;
use super::newest::NewestOffsets;
use super::reader::{collect_aborted, read_txn_indexes, BatchReader};
use super::segments::{group_segments_by_size, list_segments, segment_path, SegmentFiles};
use super::survey::BatchSurvey;
use super::{CleanReport, CleanerConfig, GroupReport, LogToClean};
use super::{CleanedTransactionMetadata, OffsetMap};
use segment_store::internals::OffsetIndexView;
use segment_store::internals::{FileKind, TempSuffix};
use segment_store::{OpenMode, Storage};

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
    let memory = OffsetMap::memory_for(config.dedupe_buffer_size, config.threads);
    let survey_budget = memory / BatchSurvey::BUDGET_SHARE;
    let range = (first_dirty, first_uncleanable);
    run_pass_surveying(storage, log, range, config, mode, replace, survey_budget)
}

/// [`run_pass`] with `survey_budget` bytes for the [`BatchSurvey`].
fn run_pass_surveying(
    storage: &dyn Storage,
    log: &LogToClean,
    (first_dirty, first_uncleanable): (i64, i64),
    config: &CleanerConfig,
    mode: Mode,
    replace: &Replace<'_>,
    survey_budget: usize,
) -> Result<CleanReport> {
    let dir = &log.dir;
    let segments = list_segments(storage, dir)?;
    let txns = read_txn_indexes(storage, dir, &segments)?;
    let memory = OffsetMap::memory_for(config.dedupe_buffer_size, config.threads);
    let mut map = OffsetMap::new(memory);
    let mut read = MapRead {
        newest: NewestOffsets::new(
            first_dirty,
            first_uncleanable,
            memory / NewestOffsets::BUDGET_SHARE,
        ),
        survey: BatchSurvey::new(survey_budget),
    };
    build_offset_map(
        storage,
        dir,
        &segments,
        &txns,
        (first_dirty, first_uncleanable),
        &log.last_records,
        &mut map,
        config,
        &mut read,
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
    let inputs = PassInputs {
        map: &map,
        newest: &read.newest,
        survey: &read.survey,
        last_records: &log.last_records,
        upper_bound: first_uncleanable,
        now_ms: log.now_ms,
        config,
    };
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
                seg.base_offset,
                &mut dest,
                &inputs,
                &mut meta,
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
        .checked_below(u64::MAX);
    reader.skip_to(position);
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

#[cfg(test)]
mod survey_tests {
    use super::*;
    use crate::cleaner::LastRecord;
    use record_format::{
        end_txn_marker_batch, CompressionType, ControlRecordType, RecordBatchBuilder,
    };
    use record_format::{DecodeLimits, RecordBatch};
    use segment_store::internals::file_name;
    use segment_store::AbortedTxn;
    use segment_store::StdFs;
    use std::collections::BTreeMap;
    use testkit::XorShift;

    /// Segments of assorted batches over 40 keys: one record or several, keyless records,
    /// tombstones, offsets with gaps, idempotent producers (the last batch of one of them is the
    /// last producer state holds), transactions committed and aborted, compressed batches; then
    /// an empty active segment. Returns the directory's log end offset and producer state.
    fn write_log(dir: &Path, rng: &mut XorShift) -> (i64, BTreeMap<i64, LastRecord>) {
        let mut segments: Vec<(i64, Vec<u8>, Vec<AbortedTxn>)> = vec![(0, Vec::new(), Vec::new())];
        let mut offset = 0i64;
        let mut last_records = BTreeMap::new();
        let key = |rng: &mut XorShift| format!("key-{}", rng.next_u64() % 40);
        for i in 0..3_000i64 {
            if segments.last().is_some_and(|s| s.1.len() > 60_000) {
                segments.push((offset, Vec::new(), Vec::new()));
            }
            let value = vec![b'v'; 100 + (rng.next_u64() % 200) as usize];
            let mut b = RecordBatchBuilder::new(offset);
            let mut txn = None;
            match rng.next_u64() % 10 {
                0..=4 => {
                    b.append(i, Some(key(rng).as_bytes()), Some(&value), &[])
                        .expect("append");
                }
                5 => {
                    for j in 0..2 + rng.next_u64() % 4 {
                        let k = key(rng);
                        let (k, v) = match (j, rng.next_u64() % 4) {
                            (1, 0) => (None, Some(&value[..])),
                            (_, 1) => (Some(k.as_bytes()), None),
                            _ => (Some(k.as_bytes()), Some(&value[..])),
                        };
                        b.append(i, k, v, &[]).expect("append");
                    }
                }
                6 => {
                    // Records at offset and offset + 2, the batch's last offset at offset + 3.
                    for d in [0, 2] {
                        b.append_record_with_offset(
                            offset + d,
                            i,
                            Some(key(rng).as_bytes()),
                            Some(&value),
                            &[],
                        )
                        .expect("append");
                    }
                    b.override_last_offset(offset + 3).expect("last offset");
                }
                7 => {
                    let pid = 1 + (rng.next_u64() % 3) as i64;
                    b = b.producer(pid, 0, i as i32);
                    b.append(i, Some(key(rng).as_bytes()), Some(&value), &[])
                        .expect("append");
                    last_records.insert(
                        pid,
                        LastRecord {
                            last_data_offset: Some(offset),
                            producer_epoch: 0,
                        },
                    );
                }
                8 => {
                    b = b.producer(100, 0, 0).transactional(true);
                    b.append(i, Some(key(rng).as_bytes()), Some(&value), &[])
                        .expect("append");
                    txn = Some(rng.next_u64().is_multiple_of(2));
                }
                _ => {
                    b = b.compression(CompressionType::Lz4);
                    for _ in 0..3 {
                        b.append(i, Some(key(rng).as_bytes()), Some(&value), &[])
                            .expect("append");
                    }
                }
            }
            let bytes = b.build();
            let batch = RecordBatch::new(&bytes, 0).expect("batch");
            let first = offset;
            offset = batch.last_offset() + 1;
            let seg = segments.last_mut().expect("a segment");
            seg.1.extend_from_slice(&bytes);
            if let Some(abort) = txn {
                let t = if abort {
                    ControlRecordType::Abort
                } else {
                    ControlRecordType::Commit
                };
                seg.1
                    .extend_from_slice(&end_txn_marker_batch(offset, i, 0, 100, 0, t, 0));
                if abort {
                    seg.2.push(AbortedTxn {
                        version: 0,
                        producer_id: 100,
                        first_offset: first,
                        last_offset: offset,
                        last_stable_offset: offset + 1,
                    });
                }
                offset += 1;
            }
        }
        segments.push((offset, Vec::new(), Vec::new()));
        for (base, log, txns) in segments {
            std::fs::write(dir.join(file_name(base, FileKind::Log, None)), log).expect("write");
            if !txns.is_empty() {
                let bytes: Vec<u8> = txns.iter().flat_map(|t| t.to_bytes()).collect();
                std::fs::write(dir.join(file_name(base, FileKind::TxnIndex, None)), bytes)
                    .expect("write");
            }
        }
        (offset, last_records)
    }

    fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
        std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .map(|p| {
                let name = p.file_name().expect("name").to_string_lossy().into_owned();
                (name, std::fs::read(&p).expect("read"))
            })
            .collect()
    }

    /// A pass that passes over the batches its survey says are removed whole writes what a pass
    /// reading every batch writes, byte for byte, and reports the same: with the survey covering
    /// every batch, some, or none; with an offset map that holds every key, and with one that
    /// fills up and ends the pass early.
    #[test]
    fn passing_over_surveyed_batches_changes_nothing_cleaned() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut rng = XorShift::new(0x5eed);
        let original = tmp.path().join("original");
        std::fs::create_dir_all(&original).expect("mkdir");
        let (end, last_records) = write_log(&original, &mut rng);
        let entry = std::mem::size_of::<super::super::survey::SurveyedBatch>();
        for dedupe in [1u64 << 20, 24 * 30] {
            let config = CleanerConfig {
                dedupe_buffer_size: dedupe,
                ..CleanerConfig::default()
            };
            let mut outputs = Vec::new();
            for (i, budget) in [usize::MAX, 300 * entry, 0].into_iter().enumerate() {
                let dir = tmp.path().join(format!("{dedupe}-{i}"));
                std::fs::create_dir_all(&dir).expect("mkdir");
                for (name, bytes) in files(&original) {
                    std::fs::write(dir.join(name), bytes).expect("copy");
                }
                let segments = list_segments(&StdFs, &dir).expect("segments");
                let active = segments.last().expect("active").base_offset;
                let log = LogToClean {
                    dir: dir.clone(),
                    log_start_offset: 0,
                    log_end_offset: end,
                    last_stable_offset: end,
                    last_records: last_records.clone(),
                    now_ms: 1_000_000,
                    segments: crate::cleaner::SegmentSettings::default(),
                };
                let report = run_pass_surveying(
                    &StdFs,
                    &log,
                    (0, active),
                    &config,
                    Mode::Apply,
                    &Replace::Files,
                    budget,
                )
                .expect("pass");
                outputs.push((report, files(&dir)));
            }
            let (reference_report, reference_files) = outputs.pop().expect("unsurveyed pass");
            let removed: u64 = reference_report
                .groups
                .iter()
                .map(|g| g.batches_removed)
                .sum();
            if dedupe == 1 << 20 {
                assert!(removed > 1_000, "{reference_report:?}");
            } else {
                assert!(
                    reference_report.end_offset < end / 10,
                    "the map fills up early"
                );
            }
            for (report, files) in outputs {
                assert_eq!(report, reference_report);
                assert!(
                    files == reference_files,
                    "dedupe {dedupe}: the files differ"
                );
            }
        }
    }

    /// The survey of the log above marks as removed whole only plain batches none of whose
    /// records is its key's newest, and most of them.
    #[test]
    fn the_survey_marks_plain_batches_none_of_whose_records_survive() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut rng = XorShift::new(0x5eed);
        let (_, last_records) = write_log(tmp.path(), &mut rng);
        let segments = list_segments(&StdFs, tmp.path()).expect("segments");
        let active = segments.last().expect("active").base_offset;
        let txns = read_txn_indexes(&StdFs, tmp.path(), &segments).expect("txns");
        let config = CleanerConfig::default();
        let mut map = OffsetMap::new(1 << 20);
        let mut read = MapRead {
            newest: NewestOffsets::new(0, active, 1 << 20),
            survey: BatchSurvey::new(1 << 20),
        };
        let full = build_offset_map(
            &StdFs,
            tmp.path(),
            &segments,
            &txns,
            (0, active),
            &last_records,
            &mut map,
            &config,
            &mut read,
        )
        .expect("map");
        assert!(!full);
        let (mut removed, mut batches) = (0, 0);
        for seg in &segments {
            let path = segment_path(tmp.path(), seg.base_offset, FileKind::Log, None);
            let mut reader = BatchReader::open(&StdFs, &path, &config).expect("open");
            let surveyed = read.survey.segment(seg.base_offset);
            let mut i = 0;
            while let Some((_, b)) = reader.next_batch().expect("batch") {
                let s = surveyed.get(i).expect("every batch surveyed");
                i += 1;
                batches += 1;
                assert_eq!(s.size as usize, b.size_in_bytes());
                let Some((first, last)) = super::super::survey::removed_unread(
                    s,
                    seg.base_offset,
                    &read.newest,
                    map.latest_offset(),
                ) else {
                    continue;
                };
                removed += 1;
                assert_eq!((first, last), (b.base_offset(), b.last_offset()));
                assert!(!b.is_control() && !b.is_transactional());
                let records = b.records(&DecodeLimits::default()).expect("records");
                for r in records.iter() {
                    let r = r.expect("record");
                    let key = r.key().expect("a key");
                    assert!(map.get(key) > r.offset(), "a newer offset of its key");
                }
            }
            assert_eq!(i, surveyed.len());
        }
        assert!(removed * 2 > batches, "{removed} of {batches} batches");
    }
}
