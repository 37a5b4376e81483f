//! Cleaning a group of segments into one: the retained batches rewritten into a `.cleaned`
//! segment.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::Result;
use super::newest::NewestOffsets;
use super::pass::log_delete_retention;
use super::reader::{first_control_type, format_err, head, BatchReader};
use super::segments::segment_path;
use super::survey::{removed_unread, BatchSurvey};
use super::{CleanedTransactionMetadata, OffsetMap};
use super::{CleanerConfig, GroupReport, LastRecord};
use record_format::internals::{LOG_OVERHEAD, NO_PRODUCER_ID, RECORD_BATCH_OVERHEAD};
use record_format::{DecodeLimits, Header, RecordBatch, RecordBatchBuilder, TimestampType};
use segment_store::internals::{FileKind, TempSuffix};
use segment_store::AbortedTxn;
use segment_store::{FileHandle, OpenMode, Storage};

/// A cleaned segment being written: the `.log` streamed to `<base>.log.cleaned`, the indexes
/// held until the end (bounded by `segment.index.bytes`). With no storage it only counts
/// (a dry run).
pub(super) struct CleanedSegment {
    base_offset: i64,
    log: Option<Box<dyn FileHandle>>,
    size: u64,
    /// Retained batches not yet written, at most `write_buffer_size` bytes (Kafka's cleaner
    /// writes its write buffer, not each batch).
    pending: Vec<u8>,
    write_buffer_size: usize,
    offset_index: Vec<u8>,
    time_index: Vec<u8>,
    last_time_entry: (i64, i64),
    max_timestamp_so_far: (i64, i64),
    bytes_since_last_index_entry: u64,
    index_interval_bytes: u64,
    pub(super) txn_index: Vec<AbortedTxn>,
}

impl CleanedSegment {
    pub(super) fn new(
        log: Option<Box<dyn FileHandle>>,
        base_offset: i64,
        index_interval_bytes: u32,
        write_buffer_size: usize,
    ) -> Self {
        CleanedSegment {
            base_offset,
            log,
            size: 0,
            pending: Vec::new(),
            write_buffer_size,
            offset_index: Vec::new(),
            time_index: Vec::new(),
            last_time_entry: (-1, base_offset),
            max_timestamp_so_far: (-1, base_offset),
            bytes_since_last_index_entry: 0,
            index_interval_bytes: u64::from(index_interval_bytes),
            txn_index: Vec::new(),
        }
    }

    fn time_index_maybe_append(&mut self, ts: i64, offset: i64) {
        if ts > self.last_time_entry.0 {
            self.time_index.extend_from_slice(&ts.to_be_bytes());
            let rel = (offset - self.base_offset) as i32;
            self.time_index.extend_from_slice(&rel.to_be_bytes());
            self.last_time_entry = (ts, offset);
        }
    }

    /// Kafka's `LogSegment.append` of one retained batch.
    fn append(&mut self, bytes: &[u8], last_offset: i64, max_timestamp: i64) -> Result<()> {
        if max_timestamp > self.max_timestamp_so_far.0 {
            self.max_timestamp_so_far = (max_timestamp, last_offset);
        }
        if self.bytes_since_last_index_entry > self.index_interval_bytes {
            let rel = (last_offset - self.base_offset) as i32;
            self.offset_index.extend_from_slice(&rel.to_be_bytes());
            self.offset_index
                .extend_from_slice(&(self.size as u32).to_be_bytes());
            let (ts, off) = self.max_timestamp_so_far;
            self.time_index_maybe_append(ts, off);
            self.bytes_since_last_index_entry = 0;
        }
        if self.log.is_some() {
            if self.pending.len() + bytes.len() > self.write_buffer_size {
                self.flush_pending()?;
            }
            match &self.log {
                Some(h) if bytes.len() > self.write_buffer_size => h.write_at(self.size, bytes)?,
                _ => self.pending.extend_from_slice(bytes),
            }
        }
        self.size += bytes.len() as u64;
        self.bytes_since_last_index_entry += bytes.len() as u64;
        Ok(())
    }

    /// Writes the pending batches, which end at `size`.
    fn flush_pending(&mut self) -> Result<()> {
        if let (Some(h), false) = (&self.log, self.pending.is_empty()) {
            h.write_at(self.size - self.pending.len() as u64, &self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }

    /// Kafka's `onBecomeInactiveSegment` and `flush`: the last time-index entry, the index files
    /// written at their valid size, everything synced.
    pub(super) fn finish(mut self, storage: &dyn Storage, dir: &Path) -> Result<u64> {
        let (ts, off) = self.max_timestamp_so_far;
        self.time_index_maybe_append(ts, off);
        self.flush_pending()?;
        let Some(log) = self.log.take() else {
            return Ok(self.size);
        };
        log.sync_all()?;
        let base = self.base_offset;
        let cleaned = Some(TempSuffix::Cleaned);
        let mut files = vec![
            (FileKind::Index, std::mem::take(&mut self.offset_index)),
            (FileKind::TimeIndex, std::mem::take(&mut self.time_index)),
        ];
        if !self.txn_index.is_empty() {
            let bytes = self.txn_index.iter().flat_map(|t| t.to_bytes()).collect();
            files.push((FileKind::TxnIndex, bytes));
        }
        for (kind, bytes) in files {
            let h = storage.open(
                &segment_path(dir, base, kind, cleaned),
                OpenMode::CreateTruncate,
            )?;
            h.write_at(0, &bytes)?;
            h.sync_all()?;
        }
        Ok(self.size)
    }
}

/// Writes Kafka's `writeEmptyHeader` batch for `b`: its offsets, producer, epoch, sequence and
/// max timestamp, no records, uncompressed, no delete horizon.
fn empty_batch(b: &RecordBatch<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_BATCH_OVERHEAD);
    let attributes = record_format::internals::compute_attributes(
        record_format::CompressionType::None,
        b.timestamp_type(),
        b.is_transactional(),
        b.is_control(),
        false,
    );
    out.extend_from_slice(&b.base_offset().to_be_bytes());
    out.extend_from_slice(&((RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32).to_be_bytes());
    out.extend_from_slice(&b.partition_leader_epoch().to_be_bytes());
    out.push(2);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&b.last_offset_delta().to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.extend_from_slice(&b.max_timestamp().to_be_bytes());
    out.extend_from_slice(&b.producer_id().to_be_bytes());
    out.extend_from_slice(&b.producer_epoch().to_be_bytes());
    out.extend_from_slice(&b.base_sequence().to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    let crc = record_format::internals::crc32c(out.get(21..).unwrap_or(&[]));
    if let Some(dst) = out.get_mut(17..21) {
        dst.copy_from_slice(&crc.to_be_bytes());
    }
    out
}

/// Whether the pass writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    DryRun,
    Apply,
}

/// What the cleaning of every batch of a pass reads: the offset map and what its read learned,
/// the log's producers, where the pass ends, and its clock.
pub(super) struct PassInputs<'a> {
    pub(super) map: &'a OffsetMap,
    pub(super) newest: &'a NewestOffsets,
    pub(super) survey: &'a BatchSurvey,
    pub(super) last_records: &'a BTreeMap<i64, LastRecord>,
    /// The first uncleanable offset: the batch ending below it is kept, emptied if need be.
    pub(super) upper_bound: i64,
    pub(super) now_ms: i64,
    pub(super) config: &'a CleanerConfig,
}

/// Kafka's `cleanInto` over one source segment (based at `segment_base`). Every batch it reads is
/// CRC-checked first, so nothing it writes, kept whole or rewritten with a new CRC, comes from a
/// corrupt batch; the batches the survey says are removed whole are passed over unread.
#[allow(clippy::too_many_arguments)]
pub(super) fn clean_into(
    storage: &dyn Storage,
    path: &Path,
    segment_base: i64,
    dest: &mut CleanedSegment,
    inputs: &PassInputs<'_>,
    meta: &mut CleanedTransactionMetadata,
    report: &mut GroupReport,
) -> Result<()> {
    let mut reader = BatchReader::open(storage, path, inputs.config)?;
    let surveyed = inputs.survey.segment(segment_base);
    // The surveyed batch the reader is at, if any, and its position.
    let (mut next, mut at) = (0usize, 0u64);
    loop {
        if let Some(s) = surveyed.get(next).filter(|_| reader.position() == at) {
            let removed =
                removed_unread(s, segment_base, inputs.newest, inputs.map.latest_offset())
                    .filter(|(_, last)| last.checked_add(1) != Some(inputs.upper_bound));
            next += 1;
            at += u64::from(s.size);
            if let Some((_, last)) = removed {
                // What `clean_batch` does with it: a data batch that is not transactional, not
                // kept for its producer, none of whose records is the newest of its key.
                meta.on_batch_read(last, NO_PRODUCER_ID, false);
                report.bytes_read += u64::from(s.size);
                report.records_read += u64::from(s.plain_records());
                report.batches_removed += 1;
                reader.skip_to(at);
                continue;
            }
        }
        let Some((position, b)) = reader.next_batch()? else {
            break;
        };
        if position + b.size_in_bytes() as u64 != at {
            // Not the batch surveyed here (or none was): the survey is not followed further.
            next = surveyed.len();
        }
        clean_batch(path, &b, dest, inputs, meta, report)?;
    }
    Ok(())
}

/// Kafka's `checkBatchRetention` and `filterBatch` of one batch, and the append of what it keeps.
fn clean_batch(
    path: &Path,
    b: &RecordBatch<'_>,
    dest: &mut CleanedSegment,
    inputs: &PassInputs<'_>,
    meta: &mut CleanedTransactionMetadata,
    report: &mut GroupReport,
) -> Result<()> {
    let (map, newest, now) = (inputs.map, inputs.newest, inputs.now_ms);
    let h = head(b);
    report.bytes_read += b.size_in_bytes() as u64;
    let first = if h.control {
        first_control_type(path, b)?
    } else {
        None
    };
    // checkBatchRetention
    let can_discard = if h.control {
        meta.on_control_batch_read(h.last_offset, h.producer_id, first)
    } else {
        meta.on_batch_read(h.last_offset, h.producer_id, h.transactional)
    };
    let horizon = b.delete_horizon_ms();
    let discard_records = if h.control {
        can_discard && horizon.is_some_and(|d| d <= now)
    } else {
        can_discard
    };
    let is_last_of_producer =
        inputs
            .last_records
            .get(&h.producer_id)
            .is_some_and(|l| match l.last_data_offset {
                Some(o) => h.last_offset == o,
                None => h.control && h.producer_epoch == l.producer_epoch,
            });
    #[derive(PartialEq)]
    enum Retention {
        RetainEmpty,
        Delete,
        DeleteEmpty,
    }
    // The last batch of a producer keeps its sequence and epoch; the last batch of the
    // round keeps the round's last offset.
    let retain_empty =
        (b.has_producer_id() && is_last_of_producer) || h.last_offset + 1 == inputs.upper_bound;
    let retention = if retain_empty {
        Retention::RetainEmpty
    } else if discard_records {
        Retention::Delete
    } else {
        Retention::DeleteEmpty
    };
    let contains_marker_for_empty_txn = can_discard && h.control;
    if retention == Retention::Delete {
        report.batches_removed += 1;
        report.records_read += b.records_count().max(0) as u64;
        return Ok(());
    }
    // filterBatch
    let records = b
        .records(&DecodeLimits::default())
        .map_err(|e| format_err(path, e))?;
    let mut retained = Vec::new();
    let mut all_retained = true;
    let mut contains_tombstones = false;
    for r in records.iter() {
        let r = r.map_err(|e| format_err(path, e))?;
        report.records_read += 1;
        let keep = if discard_records {
            false
        } else if h.control || r.offset() > map.latest_offset() {
            // Markers stay with their batch; records past the map were not looked at.
            true
        } else if let Some(key) = r.key() {
            let is_newest = newest
                .is_newest(r.offset())
                .unwrap_or_else(|| r.offset() >= map.get(key));
            let keep_deletes = horizon.is_none_or(|d| now < d);
            is_newest && (r.value().is_some() || keep_deletes)
        } else {
            false
        };
        if keep {
            if r.value().is_none() {
                contains_tombstones = true;
            }
            retained.push(r);
        } else {
            all_retained = false;
        }
    }
    if !retained.is_empty() {
        report.records_retained += retained.len() as u64;
        let set_horizon =
            (contains_tombstones || contains_marker_for_empty_txn) && horizon.is_none();
        if all_retained && !set_horizon {
            return dest.append(b.as_bytes(), h.last_offset, h.max_timestamp);
        }
        let new_horizon = if set_horizon {
            Some(now.saturating_add(log_delete_retention(inputs.config)))
        } else {
            horizon
        };
        let mut builder = RecordBatchBuilder::new(b.base_offset())
            .partition_leader_epoch(b.partition_leader_epoch())
            .compression(b.compression().map_err(|e| format_err(path, e))?)
            .producer(b.producer_id(), b.producer_epoch(), b.base_sequence())
            .transactional(b.is_transactional())
            .control(b.is_control())
            .delete_horizon_ms(new_horizon);
        if b.timestamp_type() == TimestampType::LogAppendTime {
            builder = builder.log_append_time(b.max_timestamp());
        }
        for r in &retained {
            let headers: Vec<Header<'_>> = r.headers().collect();
            builder
                .append_record_with_offset(r.offset(), r.timestamp(), r.key(), r.value(), &headers)
                .map_err(|e| format_err(path, e))?;
        }
        builder
            .override_last_offset(b.last_offset())
            .map_err(|e| format_err(path, e))?;
        let bytes = builder.build();
        let rebuilt = RecordBatch::new(&bytes, 0).map_err(|e| format_err(path, e))?;
        dest.append(&bytes, rebuilt.last_offset(), rebuilt.max_timestamp())?;
    } else if retention == Retention::RetainEmpty {
        let bytes = empty_batch(b);
        dest.append(&bytes, h.last_offset, h.max_timestamp)?;
    } else {
        report.batches_removed += 1;
    }
    Ok(())
}
