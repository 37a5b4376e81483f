//! Iterating the batches of a `.log` file's bytes, following Kafka's `FileLogInputStream.nextBatch`:
//!
//! 1. fewer than or exactly 17 bytes left → stop (end, or an incomplete trailing batch);
//! 2. `size` (int32 at 8) < 14 → `BadLength` (hard error);
//! 3. `12 + size` past the end → stop: incomplete trailing batch (not an error);
//! 4. magic (byte 16) 0/1 → [`LegacyEntry`], 2 → [`RecordBatch`], anything else → `BadMagic`;
//!    a v2 entry smaller than the 61-byte header → `BadLength`;
//! 5. optionally ([`BatchIterator::validate_crc`]) the CRC (CRC-32C for v2, CRC-32 for legacy) is
//!    checked: `CrcMismatch`.
//!
//! **Errors from the iterator are positioned at the start of the offending batch** (so
//! `error.position == valid_prefix_end()`, the truncation point). The iterator yields an error
//! once and then ends.

use crate::batch::RecordBatch;
use crate::cursor::array_at;
use crate::error::{FormatError, FormatErrorKind, Result};
use crate::wire::{
    HEADER_SIZE_UP_TO_MAGIC, LEGACY_ATTRIBUTES_OFFSET, LEGACY_CRC_OFFSET, LEGACY_MAGIC_OFFSET,
    LEGACY_V1_TIMESTAMP_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V1, MAGIC_V2, NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD, RECORD_OVERHEAD_V0, SIZE_OFFSET,
};

/// Where one batch (or legacy entry) of a `.log` is and the header fields of it that the log
/// needs: the one batch-position type (segment-store's `FileRecords::headers_from` and
/// `LogOffsetPosition`, the recovery scan's batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Byte position of the batch in the file.
    pub position: u64,
    /// Size of the batch in bytes, including the 12-byte log overhead.
    pub size: u32,
    /// Magic byte (0, 1 or 2).
    pub magic: i8,
    /// v2: `baseOffset`; legacy: the entry's offset field.
    pub base_offset: i64,
    /// v2: `baseOffset + lastOffsetDelta`; legacy: the entry's offset field.
    pub last_offset: i64,
    /// v2: `maxTimestamp`; v1: the wrapper timestamp; v0: [`NO_TIMESTAMP`].
    pub max_timestamp: i64,
    /// v2: `partitionLeaderEpoch`; legacy: -1.
    pub partition_leader_epoch: i32,
}

impl BatchHeader {
    /// Position just after the batch.
    pub fn end(&self) -> u64 {
        self.position + u64::from(self.size)
    }
    /// The offset after the batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset + 1
    }
}

/// The error for an incomplete batch at the end of the data (see
/// [`IterEnd::IncompleteTrailing`]): `rest` is the `have` bytes from `position` on. `need` is the
/// batch's whole size (`12 + size`) when its `size` field is there, else the 61-byte v2 header.
/// The one definition of a truncated tail's size.
pub fn incomplete_batch_error(rest: &[u8], position: u64, have: u64) -> FormatError {
    let need = if rest.len() >= LOG_OVERHEAD {
        LOG_OVERHEAD as u64
            + u64::from(u32::try_from(crate::cursor::be_i32_at(rest, SIZE_OFFSET)).unwrap_or(0))
    } else {
        RECORD_BATCH_OVERHEAD as u64
    };
    FormatError::new(FormatErrorKind::Truncated { need, have }, position)
}

/// Namespace for creating a [`BatchIterator`].
#[derive(Debug, Clone, Copy)]
pub struct Batches;

impl Batches {
    /// An iterator over the batches in `bytes`, whose first byte is at absolute `base_position`
    /// (e.g. 0 for a whole `.log` file). CRCs are not checked unless
    /// [`BatchIterator::validate_crc`] is set.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(bytes: &[u8], base_position: u64) -> BatchIterator<'_> {
        BatchIterator {
            data: bytes,
            base: base_position,
            pos: 0,
            validate_crc: false,
            max_entry_bytes: usize::MAX,
            end: None,
        }
    }
}

/// Why and where iteration stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IterEnd {
    /// Every byte belonged to a complete batch.
    Complete,
    /// `bytes` trailing bytes starting at `position` do not form a complete batch (Kafka stops
    /// silently there; recovery truncates them).
    IncompleteTrailing {
        /// Absolute position of the first trailing byte.
        position: u64,
        /// Number of trailing bytes.
        bytes: u64,
    },
    /// A hard error at the start of a batch.
    Error(FormatError),
}

/// A legacy (magic 0 or 1) message-set entry, recognised but not interpreted further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyEntry<'a> {
    bytes: &'a [u8],
    position: u64,
}

impl<'a> LegacyEntry<'a> {
    /// The log `offset` field (for a compressed wrapper: the last inner offset).
    #[inline]
    pub fn offset(&self) -> i64 {
        i64::from_be_bytes(array_at(self.bytes, 0))
    }

    /// The `size` field (bytes after it).
    pub fn size(&self) -> i32 {
        i32::from_be_bytes(array_at(self.bytes, SIZE_OFFSET))
    }

    /// The magic byte (0 or 1).
    #[inline]
    pub fn magic(&self) -> i8 {
        i8::from_be_bytes(array_at(self.bytes, LEGACY_MAGIC_OFFSET))
    }

    /// The attributes byte.
    pub fn attributes(&self) -> i8 {
        i8::from_be_bytes(array_at(self.bytes, LEGACY_ATTRIBUTES_OFFSET))
    }

    /// The stored CRC-32.
    pub fn crc(&self) -> u32 {
        u32::from_be_bytes(array_at(self.bytes, LEGACY_CRC_OFFSET))
    }

    /// CRC-32 (not -32C) of the bytes from the magic byte to the end.
    pub fn compute_crc(&self) -> u32 {
        crc32fast::hash(self.bytes.get(LEGACY_MAGIC_OFFSET..).unwrap_or(&[]))
    }

    /// Whether the stored CRC matches.
    pub fn is_valid(&self) -> bool {
        self.crc() == self.compute_crc()
    }

    /// `CrcMismatch` at the CRC field when the CRC does not match.
    pub fn validate(&self) -> Result<()> {
        let stored = self.crc();
        let computed = self.compute_crc();
        if stored == computed {
            Ok(())
        } else {
            Err(FormatError::new(
                FormatErrorKind::CrcMismatch { stored, computed },
                self.position + LEGACY_CRC_OFFSET as u64,
            ))
        }
    }

    /// Entry size (`12 + size`).
    #[inline]
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The entry's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Absolute position of the entry.
    #[inline]
    pub fn position(&self) -> u64 {
        self.position
    }
}

/// One entry of a log file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEntry<'a> {
    /// A v2 record batch.
    V2(RecordBatch<'a>),
    /// A legacy v0/v1 entry.
    Legacy(LegacyEntry<'a>),
}

impl<'a> LogEntry<'a> {
    /// Absolute position of the entry.
    #[inline]
    pub fn position(&self) -> u64 {
        match self {
            LogEntry::V2(b) => b.position(),
            LogEntry::Legacy(l) => l.position(),
        }
    }

    /// Size in bytes (`12 + size`).
    #[inline]
    pub fn size_in_bytes(&self) -> usize {
        match self {
            LogEntry::V2(b) => b.size_in_bytes(),
            LogEntry::Legacy(l) => l.size_in_bytes(),
        }
    }

    /// The magic byte.
    #[inline]
    pub fn magic(&self) -> i8 {
        match self {
            LogEntry::V2(b) => b.magic(),
            LogEntry::Legacy(l) => l.magic(),
        }
    }

    /// Last offset (v2: `baseOffset + lastOffsetDelta`; legacy: the entry's offset field).
    #[inline]
    pub fn last_offset(&self) -> i64 {
        match self {
            LogEntry::V2(b) => b.last_offset(),
            LogEntry::Legacy(l) => l.offset(),
        }
    }

    /// The entry's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            LogEntry::V2(b) => b.as_bytes(),
            LogEntry::Legacy(l) => l.as_bytes(),
        }
    }

    /// The entry's [`BatchHeader`].
    pub fn header(&self) -> BatchHeader {
        let (base_offset, max_timestamp, partition_leader_epoch) = match self {
            LogEntry::V2(b) => (
                b.base_offset(),
                b.max_timestamp(),
                b.partition_leader_epoch(),
            ),
            LogEntry::Legacy(l) => {
                let ts = if l.magic() == MAGIC_V1 {
                    l.as_bytes()
                        .get(LEGACY_V1_TIMESTAMP_OFFSET..LEGACY_V1_TIMESTAMP_OFFSET + 8)
                        .and_then(|s| <[u8; 8]>::try_from(s).ok())
                        .map_or(NO_TIMESTAMP, i64::from_be_bytes)
                } else {
                    NO_TIMESTAMP
                };
                (l.offset(), ts, -1)
            }
        };
        BatchHeader {
            position: self.position(),
            size: u32::try_from(self.size_in_bytes()).unwrap_or(u32::MAX),
            magic: self.magic(),
            base_offset,
            last_offset: self.last_offset(),
            max_timestamp,
            partition_leader_epoch,
        }
    }

    /// The v2 batch, if this is one.
    pub fn as_v2(&self) -> Option<&RecordBatch<'a>> {
        match self {
            LogEntry::V2(b) => Some(b),
            LogEntry::Legacy(_) => None,
        }
    }

    /// Checks the CRC (CRC-32C for v2, CRC-32 for legacy); the error is at the CRC field.
    #[inline(always)]
    pub fn validate(&self) -> Result<()> {
        match self {
            LogEntry::V2(b) => b.validate(),
            LogEntry::Legacy(l) => l.validate(),
        }
    }
}

/// Iterator over the entries of a log file; see the module docs for the rules.
#[derive(Debug, Clone)]
pub struct BatchIterator<'a> {
    data: &'a [u8],
    base: u64,
    pos: usize,
    validate_crc: bool,
    max_entry_bytes: usize,
    end: Option<IterEnd>,
}

impl<'a> BatchIterator<'a> {
    /// Whether to check every entry's CRC while iterating (default `false`). A mismatch is a
    /// `CrcMismatch` error at the entry's start.
    #[must_use]
    pub fn validate_crc(mut self, validate: bool) -> Self {
        self.validate_crc = validate;
        self
    }

    /// [`Self::validate_crc`] from the next entry on.
    pub fn set_validate_crc(&mut self, validate: bool) {
        self.validate_crc = validate;
    }

    /// Stops (returns `None`, with [`Self::stopped_at`] still `None`) before an entry of more than
    /// `max` bytes, without reading or checking it: a bounded walk leaves long entries to another.
    #[must_use]
    pub fn max_entry_bytes(mut self, max: usize) -> Self {
        self.max_entry_bytes = max;
        self
    }

    /// Absolute position just after the last entry returned successfully (the end of the valid
    /// prefix; the truncation point for recovery).
    pub fn valid_prefix_end(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Why iteration stopped, or `None` while it has not.
    pub fn stopped_at(&self) -> Option<&IterEnd> {
        self.end.as_ref()
    }

    /// If iteration stopped at an incomplete batch at the end of the data, the error that
    /// describes it (`incomplete_batch_error`).
    pub fn incomplete_error(&self) -> Option<FormatError> {
        match self.end {
            Some(IterEnd::IncompleteTrailing { position, bytes }) => Some(incomplete_batch_error(
                self.data.get(self.pos..).unwrap_or(&[]),
                position,
                bytes,
            )),
            _ => None,
        }
    }

    fn fail(&mut self, kind: FormatErrorKind) -> Option<Result<LogEntry<'a>>> {
        let e = FormatError::new(kind, self.valid_prefix_end());
        self.end = Some(IterEnd::Error(e.clone()));
        Some(Err(e))
    }

    fn read_entry(&mut self) -> Option<Result<LogEntry<'a>>> {
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        if rest.len() <= HEADER_SIZE_UP_TO_MAGIC {
            self.end = Some(if rest.is_empty() {
                IterEnd::Complete
            } else {
                IterEnd::IncompleteTrailing {
                    position: self.valid_prefix_end(),
                    bytes: rest.len() as u64,
                }
            });
            return None;
        }
        let size = i32::from_be_bytes(array_at(rest, SIZE_OFFSET));
        if size < RECORD_OVERHEAD_V0 as i32 {
            return self.fail(FormatErrorKind::BadLength(i64::from(size)));
        }
        let total = LOG_OVERHEAD + size as usize;
        if total > self.max_entry_bytes && rest.len() >= total {
            return None;
        }
        let Some(bytes) = rest.get(..total) else {
            self.end = Some(IterEnd::IncompleteTrailing {
                position: self.valid_prefix_end(),
                bytes: rest.len() as u64,
            });
            return None;
        };
        let position = self.valid_prefix_end();
        let magic = i8::from_be_bytes(array_at(rest, MAGIC_OFFSET));
        let entry = match magic {
            MAGIC_V2 => {
                if total < RECORD_BATCH_OVERHEAD {
                    return self.fail(FormatErrorKind::BadLength(i64::from(size)));
                }
                match RecordBatch::new(bytes, position) {
                    Ok(b) => LogEntry::V2(b),
                    Err(e) => return self.fail(e.kind),
                }
            }
            0..=MAGIC_V1 => LogEntry::Legacy(LegacyEntry { bytes, position }),
            _ => return self.fail(FormatErrorKind::BadMagic(magic)),
        };
        if self.validate_crc {
            if let Err(e) = entry.validate() {
                return self.fail(e.kind);
            }
        }
        self.pos += total;
        Some(Ok(entry))
    }
}

impl<'a> Iterator for BatchIterator<'a> {
    type Item = Result<LogEntry<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.end.is_some() {
            return None;
        }
        self.read_entry()
    }
}

impl std::iter::FusedIterator for BatchIterator<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordBatchBuilder;

    fn batch(base: i64, value_len: usize) -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(base);
        b.append(1_000, None, Some(&vec![7u8; value_len]), &[])
            .unwrap();
        b.build()
    }

    /// An entry longer than `max_entry_bytes` ends the iteration before it, unread: no error,
    /// no reason, and the valid prefix ends at its start; shorter ones are checked as usual.
    #[test]
    fn max_entry_bytes_stops_before_a_longer_entry_without_checking_it() {
        let (small, mut long) = (batch(0, 10), batch(1, 5_000));
        // A CRC error in the long entry: never seen, as the entry is never checked.
        let n = long.len();
        long[n - 1] ^= 1;
        let log = [small.clone(), long.clone(), small.clone()].concat();
        let mut it = Batches::new(&log, 100)
            .validate_crc(true)
            .max_entry_bytes(1_000);
        assert!(matches!(it.next(), Some(Ok(LogEntry::V2(_)))));
        assert!(it.next().is_none());
        assert!(it.next().is_none());
        assert_eq!(it.stopped_at(), None);
        assert_eq!(it.valid_prefix_end(), 100 + small.len() as u64);
        // Without the bound the same bytes end at the CRC error, at the long entry's start.
        let mut it = Batches::new(&log, 100).validate_crc(true);
        assert!(matches!(it.next(), Some(Ok(_))));
        let Some(Err(e)) = it.next() else {
            panic!("expected the CRC error")
        };
        assert!(matches!(e.kind, FormatErrorKind::CrcMismatch { .. }));
        assert_eq!(e.position, 100 + small.len() as u64);
        // An incomplete entry at the end is reported as before, whatever the bound.
        let torn = &log[..small.len() + 100];
        let mut it = Batches::new(torn, 0).max_entry_bytes(1_000);
        assert!(matches!(it.next(), Some(Ok(_))));
        assert!(it.next().is_none());
        assert!(matches!(
            it.stopped_at(),
            Some(IterEnd::IncompleteTrailing { .. })
        ));
    }
}
