//! The segment scanner: what recovery makes of each valid batch the scan
//! (`record_format::scan`) hands over.

use std::path::{Path, PathBuf};

use record_format::internals::NO_TIMESTAMP;
use record_format::internals::{self as scan, ChunkChecks, ScannedEntry, WindowEnd};

use super::scan::{headers_in, SegmentScan};
use super::{RecoveryVisitor, SegmentConfig};
use crate::error::{Result, SegmentError};
use crate::index::offset::ENTRY_SIZE as OFFSET_ENTRY_SIZE;
use crate::index::time::ENTRY_SIZE as TIME_ENTRY_SIZE;
use crate::index::{AbortedTxn, FilePosition, OffsetPosition, TimestampOffset};
use crate::io::{FileHandle, ReadBuf};

/// Recovery's scan of one `.log`, fed window by window (so that a reader without a map needs
/// memory for one window, not the segment) or read through a handle: `record_format::scan`
/// frames and checks the batches, and this thread applies the entries strictly in order: offset range checks, the max timestamp, the offset and time index
/// entries by Kafka's append rule (`index.interval.bytes` from the config), and the visitor with
/// each valid v2 batch (the aborted transactions it pushes are collected). Stops at the first
/// invalid batch, or at an incomplete one at the end of the file.
#[derive(Debug)]
pub struct SegmentScanner {
    path: PathBuf,
    size: u64,
    interval: u64,
    region_bytes: usize,
    max_offset_entries: usize,
    max_time_entries: usize,
    last_time_ts: i64,
    last_index_entry: u64,
    chunk_checks: ChunkChecks,
    scan: SegmentScan,
}

impl SegmentScanner {
    /// A scanner of the `.log` at `path` of `size` bytes, with base offset `base_offset`.
    pub fn new(path: &Path, base_offset: i64, size: u64, config: &SegmentConfig) -> Self {
        let interval = u64::from(config.index_interval_bytes);
        let max_offset_entries =
            usize::try_from(config.max_index_size / OFFSET_ENTRY_SIZE as u64).unwrap_or(usize::MAX);
        let max_time_entries =
            usize::try_from(config.max_index_size / TIME_ENTRY_SIZE as u64).unwrap_or(usize::MAX);
        // At most one entry per `interval` bytes: reserved once (address space only until the
        // entries are written) instead of grown, which copies them each time it doubles.
        let expected = usize::try_from(size / interval.max(1)).unwrap_or(usize::MAX);
        Self {
            path: path.to_path_buf(),
            size,
            interval,
            region_bytes: config.recovery_region_bytes,
            max_offset_entries,
            max_time_entries,
            last_time_ts: NO_TIMESTAMP,
            last_index_entry: 0,
            chunk_checks: ChunkChecks::default(),
            scan: SegmentScan {
                base_offset,
                size,
                valid_bytes: 0,
                batches: 0,
                last_offset: None,
                max_timestamp: TimestampOffset {
                    timestamp: NO_TIMESTAMP,
                    offset: base_offset,
                },
                offset_entries: Vec::with_capacity(expected.min(max_offset_entries)),
                time_entries: Vec::with_capacity(expected.min(max_time_entries)),
                truncated_at: None,
                aborted_txns: Vec::new(),
            },
        }
    }

    /// Which thread of [`Self::scan_file`] checks the CRCs of the batches whole in a chunk
    /// (default [`ChunkChecks::Balanced`]; the result is the same whichever does).
    #[must_use]
    pub fn chunk_checks(mut self, checks: ChunkChecks) -> Self {
        self.chunk_checks = checks;
        self
    }

    /// Scans `bytes`, the file's bytes from `position` (where the previous window asked to
    /// continue, 0 for the first), on the helper threads ((`record_format::internals::scan_window`)).
    /// Returns where the next window must start — the first byte of a batch the window ends
    /// inside (the same position again: the window must grow), or the window's end — or `None`
    /// when the scan is over (an invalid batch, or the end of the file).
    pub fn scan<E: From<SegmentError>>(
        &mut self,
        bytes: &[u8],
        position: u64,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<Option<u64>, E> {
        let (size, region_bytes) = (self.size, self.region_bytes);
        let mut aborted = Vec::new();
        let end = scan::scan_window(bytes, position, size, region_bytes, &mut |entry| {
            self.apply_entry(entry, visitor, &mut aborted)
        })?;
        Ok(match end {
            WindowEnd::Next(next) => Some(next),
            WindowEnd::Done(cut) => {
                self.scan.truncated_at = cut.map(|e| (e.position, e));
                None
            }
        })
    }

    /// The whole scan of the file behind `handle` (of the size given to [`Self::new`]), read
    /// through the file handle instead of a map (`record_format::internals::scan_file`: read in
    /// chunks ahead of this thread, which applies them; memory: a few chunks and the longest
    /// batch). Safe without the directory lock: no map, so a broker truncating the file makes a
    /// read fail, not a signal (docs/design.md, "Reading segment files").
    pub fn scan_file<E: From<SegmentError>>(
        &mut self,
        handle: &dyn FileHandle,
        visitor: &mut RecoveryVisitor<'_, E>,
    ) -> std::result::Result<(), E> {
        let (size, region_bytes, checks) = (self.size, self.region_bytes, self.chunk_checks);
        let read = |at: u64, buf: &mut [u8]| handle.read_exact_at(at, buf);
        let mut aborted = Vec::new();
        let cut = scan::scan_file(
            size,
            &read,
            &ReadBuf::zeroed,
            checks,
            region_bytes,
            &mut |entry| self.apply_entry(entry, visitor, &mut aborted),
        )?;
        self.scan.truncated_at = cut.map(|e| (e.position, e));
        Ok(())
    }

    /// Applies one valid entry, in order: its offset range, the max timestamp, the index
    /// entries by the append rule, the counts, and the visitor (v2 batches).
    fn apply_entry<E: From<SegmentError>>(
        &mut self,
        entry: &ScannedEntry<'_>,
        visitor: &mut RecoveryVisitor<'_, E>,
        aborted: &mut Vec<AbortedTxn>,
    ) -> std::result::Result<(), E> {
        let base_offset = self.scan.base_offset;
        let last = entry.last_offset();
        let fits = last
            .checked_sub(base_offset)
            .is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r));
        if !fits {
            return Err(SegmentError::OffsetOverflow {
                path: self.path.clone(),
                offset: last,
                base_offset,
            }
            .into());
        }
        let batch_max_ts = match entry {
            ScannedEntry::V2(b) => b.max_timestamp(),
            ScannedEntry::Legacy(l) => headers_in(l.as_bytes(), l.position())
                .next()
                .map_or(NO_TIMESTAMP, |h| h.max_timestamp),
        };
        let s = &mut self.scan;
        if batch_max_ts > s.max_timestamp.timestamp {
            s.max_timestamp = TimestampOffset {
                timestamp: batch_max_ts,
                offset: last,
            };
        }
        if s.valid_bytes - self.last_index_entry > self.interval {
            self.index_entries(last)?;
        }
        let s = &mut self.scan;
        s.valid_bytes += entry.size_in_bytes() as u64;
        s.batches += 1;
        s.last_offset = Some(last);
        if let ScannedEntry::V2(batch) = entry {
            aborted.clear();
            visitor(batch, aborted)?;
            s.aborted_txns.append(aborted);
        }
        Ok(())
    }

    /// Adds the offset-index entry (and the time-index entry if the max timestamp grew) at the
    /// current valid end for a batch ending at `last`, with `OffsetIndex::append`'s and
    /// `TimeIndex::maybe_append`'s checks, so that the plan fails where the install would.
    fn index_entries(&mut self, last: i64) -> Result<()> {
        let s = &mut self.scan;
        if s.offset_entries.len() >= self.max_offset_entries {
            return Err(SegmentError::IndexFull {
                path: self.path.with_extension("index"),
                entries: s.offset_entries.len(),
            });
        }
        if let Some(prev) = s.offset_entries.last() {
            if last <= prev.offset {
                return Err(SegmentError::InvalidOffset {
                    path: self.path.with_extension("index"),
                    offset: last,
                    last_offset: prev.offset,
                });
            }
        }
        s.offset_entries.push(OffsetPosition {
            offset: last,
            position: FilePosition(s.valid_bytes as u32),
        });
        // TimeIndex::maybe_append: only a larger timestamp is written.
        if s.max_timestamp.timestamp > self.last_time_ts {
            if s.time_entries.len() + 1 >= self.max_time_entries {
                return Err(SegmentError::IndexFull {
                    path: self.path.with_extension("timeindex"),
                    entries: s.time_entries.len(),
                });
            }
            s.time_entries.push(s.max_timestamp);
            self.last_time_ts = s.max_timestamp.timestamp;
        }
        self.last_index_entry = s.valid_bytes;
        Ok(())
    }

    /// The scan so far (the whole scan once [`Self::scan`] returned `None`).
    pub fn finish(self) -> SegmentScan {
        self.scan
    }
}
