//! The scan of a segment's bytes: the valid prefix, the cut and its reason, the rebuilt index
//! entries and aborted transactions.

use std::path::Path;

use record_format::internals::NO_TIMESTAMP;
use record_format::{Batches, FormatError, LogEntry};

use super::scanner::SegmentScanner;
use super::{RecoveryVisitor, SegmentConfig};
use crate::error::{Result, SegmentError};
use crate::index::{AbortedTxn, OffsetPosition, TimestampOffset};

/// What the recovery scan of one `.log` found, without changing anything: the valid prefix,
/// where and why it ends, and everything [`LogSegment::install_scan`](crate::LogSegment::install_scan) writes (index entries by
/// the append rule, aborted transactions from the visitor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Size of the `.log` scanned.
    pub size: u64,
    /// Bytes of valid batches (the prefix recovery keeps).
    pub valid_bytes: u64,
    /// Number of valid batches.
    pub batches: u64,
    /// Last offset of the last valid batch, if any.
    pub last_offset: Option<i64>,
    /// Largest batch max timestamp and the last offset of its batch (`(-1, base)` if none).
    pub max_timestamp: TimestampOffset,
    /// The offset-index entries of the valid prefix.
    pub offset_entries: Vec<OffsetPosition>,
    /// The time-index entries of the valid prefix (without the final one a close adds).
    pub time_entries: Vec<TimestampOffset>,
    /// Where the valid prefix ends and why (`None`: every byte is valid).
    pub truncated_at: Option<(u64, FormatError)>,
    /// The aborted transactions the visitor returned, in order.
    pub aborted_txns: Vec<AbortedTxn>,
}

impl SegmentScan {
    /// Bytes recovery cuts (`size - valid_bytes`).
    pub fn truncated_bytes(&self) -> u64 {
        self.size.saturating_sub(self.valid_bytes)
    }
    /// The offset after the last valid batch (the base offset if there is none).
    pub fn next_offset(&self) -> i64 {
        self.last_offset
            .map_or(self.base_offset, |l| l.saturating_add(1))
    }
}

/// Recovery's scan of the bytes of one `.log` (`path` only names it in errors), read-only:
/// [`SegmentScanner`] over all of `bytes` at once.
///
/// Errors: an offset that does not fit the segment ([`SegmentError::OffsetOverflow`]), indexed
/// offsets that go backwards ([`SegmentError::InvalidOffset`]), more entries than the
/// configured index size holds ([`SegmentError::IndexFull`]), or the visitor's error.
pub fn scan_segment<E: From<SegmentError>>(
    path: &Path,
    bytes: &[u8],
    base_offset: i64,
    config: &SegmentConfig,
    visitor: &mut RecoveryVisitor<'_, E>,
) -> std::result::Result<SegmentScan, E> {
    let mut scanner = SegmentScanner::new(path, base_offset, bytes.len() as u64, config);
    scanner.scan(bytes, 0, visitor)?;
    Ok(scanner.finish())
}

/// Checks that `records` is a sequence of whole batches with readable headers.
pub(super) fn check_framing(path: &Path, records: &[u8], position: u64) -> Result<()> {
    let mut it = Batches::new(records, position);
    for e in &mut it {
        if let Err(error) = e {
            return Err(SegmentError::Format {
                path: path.to_path_buf(),
                error,
            });
        }
    }
    match it.incomplete_error() {
        Some(error) => Err(SegmentError::Format {
            path: path.to_path_buf(),
            error,
        }),
        None => Ok(()),
    }
}

/// Headers of the (already checked) batches in `records`, positions starting at `start`.
pub(crate) fn headers_in(
    records: &[u8],
    start: u64,
) -> impl Iterator<Item = crate::file_records::BatchHeader> + '_ {
    Batches::new(records, start).map_while(|e| {
        let e = e.ok()?;
        let (max_timestamp, partition_leader_epoch, base_offset) = match &e {
            LogEntry::V2(b) => (
                b.max_timestamp(),
                b.partition_leader_epoch(),
                b.base_offset(),
            ),
            LogEntry::Legacy(l) => {
                let ts = if l.magic() == 1 {
                    l.as_bytes()
                        .get(18..26)
                        .and_then(|s| <[u8; 8]>::try_from(s).ok())
                        .map_or(NO_TIMESTAMP, i64::from_be_bytes)
                } else {
                    NO_TIMESTAMP
                };
                (ts, -1, l.offset())
            }
        };
        Some(crate::file_records::BatchHeader {
            position: e.position(),
            size: e.size_in_bytes() as u32,
            magic: e.magic(),
            base_offset,
            last_offset: e.last_offset(),
            max_timestamp,
            partition_leader_epoch,
        })
    })
}
