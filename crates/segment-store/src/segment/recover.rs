//! Recovering a segment: its scan installed as the rebuilt indexes and valid length.

use std::path::Path;

use super::scan::{scan_segment, SegmentScan};
use super::{LogSegment, RecoveryOutcome, RecoveryVisitor};
use crate::error::{Result, SegmentError};
use crate::file_name::quarantine_file_name;
use crate::index::TimestampOffset;
use crate::io::partial_path;

impl LogSegment {
    pub(super) fn read_largest_timestamp(&self) -> Result<TimestampOffset> {
        let last = self.time_index.last_entry();
        let position = self.offset_index.lookup(last.offset).position;
        let after = self.log.largest_timestamp_after(u64::from(position.0))?;
        Ok(if after.timestamp > last.timestamp {
            after
        } else {
            last
        })
    }

    /// Kafka's `recover`: `scan_segment` over the `.log` (framing and CRC of every batch,
    /// `visitor` called with each valid v2 batch in order, the offset and time index entries an
    /// uninterrupted append would have written), then [`Self::install_scan`] (indexes rebuilt,
    /// cut bytes quarantined, `.log` truncated). Legacy (magic 0/1) entries are indexed but not
    /// visited. Scanning stops at the first invalid or incomplete batch.
    ///
    /// Errors: an offset that does not fit the segment ([`SegmentError::OffsetOverflow`]),
    /// offsets that go backwards ([`SegmentError::InvalidOffset`]), I/O, or the visitor's error.
    pub fn recover<E: From<SegmentError>>(
        &mut self,
        visitor: &mut RecoveryVisitor<'_, E>,
        quarantine_dir: &Path,
    ) -> std::result::Result<RecoveryOutcome, E> {
        let was_mapped = self.log.is_mapped();
        if self.ctx.storage.supports_mmap() {
            // Zero-copy scan; a failure to map just means reading into a buffer. (Not
            // MAP_POPULATE: the page faults are taken by whichever core walks a region, in
            // parallel, instead of on this thread before any walking starts.)
            let _ = self.log.map_read_only(&self.ctx.lock);
        }
        let scan = {
            let data = self.log.batches_from(0)?;
            scan_segment(
                self.log.path(),
                data.bytes(),
                self.base_offset,
                &self.ctx.config,
                visitor,
            )?
        };
        let outcome = self.install_scan(&scan, quarantine_dir)?;
        if was_mapped {
            self.log.map_read_only(&self.ctx.lock)?;
        }
        Ok(outcome)
    }

    /// The writing half of recovery, from a `SegmentScan` of this segment's `.log` as it is
    /// (taken by `scan_segment`, e.g. in a read-only recovery plan): resets the three indexes
    /// and writes the scan's entries into them, appends its aborted transactions to the
    /// transaction index, and — if the scan stopped before the end — first writes the bytes past
    /// the valid prefix to `<quarantine_dir>/<base>.log.cut-<position>` through the storage,
    /// synced (file and directory), and only then truncates the `.log`. Afterwards the indexes
    /// are trimmed (with the final time-index entry), as Kafka leaves them. The `.log` is left
    /// unmapped.
    ///
    /// A scan of other bytes than the file's (another size) is refused with
    /// [`SegmentError::Format`]-free [`SegmentError::Io`] (`InvalidInput`): recovery never cuts
    /// what it did not check.
    pub fn install_scan(
        &mut self,
        scan: &SegmentScan,
        quarantine_dir: &Path,
    ) -> Result<RecoveryOutcome> {
        self.install_scan_as(scan, quarantine_dir, false)
    }

    /// [`Self::install_scan`]; `active`: the segment stays the active one, so its indexes keep
    /// their maximum size instead of being trimmed and grown again (the bytes of every entry
    /// are the same; only the file length differs until the segment is closed or rolled).
    pub(crate) fn install_scan_as(
        &mut self,
        scan: &SegmentScan,
        quarantine_dir: &Path,
        active: bool,
    ) -> Result<RecoveryOutcome> {
        if scan.size != self.log.size() || scan.base_offset != self.base_offset {
            return Err(SegmentError::io(
                self.log.path(),
                "install recovery scan",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the file changed since it was scanned",
                ),
            ));
        }
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.txn_index.reset()?;
        self.offset_index.append_in_bulk(|index| {
            scan.offset_entries
                .iter()
                .try_for_each(|e| index.append(e.offset, e.position))
        })?;
        self.time_index.append_in_bulk(|index| {
            scan.time_entries
                .iter()
                .try_for_each(|e| index.maybe_append(e.timestamp, e.offset, false).map(|_| ()))
        })?;
        self.txn_index.append_all(&scan.aborted_txns)?;
        self.max_timestamp_so_far = scan.max_timestamp;
        let valid_bytes = scan.valid_bytes;
        let truncated_bytes = scan.truncated_bytes();
        let mut quarantine_file = None;
        if truncated_bytes > 0 {
            let path = quarantine_dir.join(quarantine_file_name(self.base_offset, valid_bytes));
            // Streamed, holes kept, under a name that does not read as a complete cut until the
            // copy is whole and durable (an `ENOSPC` or a crash leaves only `<name>.partial`).
            let partial = partial_path(&path);
            let storage = &self.ctx.storage;
            let copied =
                storage.copy_range(self.log.path(), valid_bytes, truncated_bytes, &partial)?;
            if copied != truncated_bytes {
                return Err(SegmentError::io(
                    self.log.path(),
                    "quarantine the cut bytes",
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the file changed since it was scanned",
                    ),
                ));
            }
            storage.rename(&partial, &path)?;
            storage.sync_dir(quarantine_dir)?;
            quarantine_file = Some(path);
        }
        self.log.unmap();
        self.log.truncate_to(valid_bytes)?;
        self.force_final_time_index_entry()?;
        if !active {
            self.offset_index.trim_to_valid_size()?;
            self.time_index.trim_to_valid_size()?;
        }
        self.republish_tail();
        Ok(RecoveryOutcome {
            valid_bytes,
            truncated_bytes,
            batches: scan.batches,
            last_offset: scan.last_offset,
            max_timestamp: scan.max_timestamp,
            truncated_at: scan.truncated_at.clone(),
            quarantine_file,
        })
    }
}
