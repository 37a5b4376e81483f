//! Read-only views of index files over bytes (a map, a copy, a dump's input): the entries and
//! Kafka's sanity checks, without a lock, a map or a file handle. A recovery plan and `dump` read
//! indexes through these; the mapped [`super::OffsetIndex`] and [`super::TimeIndex`] hold the same
//! layout (see their module docs).

use crate::error::IndexCorruption;
use crate::index::offset::{FilePosition, OffsetPosition, ENTRY_SIZE as OFFSET_ENTRY_SIZE};
use crate::index::time::{TimestampOffset, ENTRY_SIZE as TIME_ENTRY_SIZE, NO_TIMESTAMP};
use crate::index::txn::{AbortedTxn, CURRENT_VERSION, ENTRY_SIZE as TXN_ENTRY_SIZE};
use record_format::internals::{be_i32_at as be_i32, be_i64_at as be_i64};

/// A file of `len` bytes holds whole entries of `entry_size` bytes.
pub(crate) fn length_check(len: u64, entry_size: usize) -> Result<(), IndexCorruption> {
    if len.is_multiple_of(entry_size as u64) {
        Ok(())
    } else {
        Err(IndexCorruption::LengthNotMultiple { len, entry_size })
    }
}

/// An `.index` file's bytes: `len / 8` entries (a preallocated, zero-filled tail counts, as it
/// does for Kafka).
#[derive(Debug, Clone, Copy)]
pub struct OffsetIndexView<'a> {
    base_offset: i64,
    bytes: &'a [u8],
}

impl<'a> OffsetIndexView<'a> {
    /// A view of `bytes` as the offset index of the segment at `base_offset`.
    pub fn new(base_offset: i64, bytes: &'a [u8]) -> Self {
        Self { base_offset, bytes }
    }
    /// Whole entries.
    pub fn entries(&self) -> usize {
        self.bytes.len() / OFFSET_ENTRY_SIZE
    }
    /// Entry `n`.
    pub fn entry(&self, n: usize) -> Option<OffsetPosition> {
        let at = n.checked_mul(OFFSET_ENTRY_SIZE)?;
        let b = self.bytes.get(at..at + OFFSET_ENTRY_SIZE)?;
        Some(OffsetPosition {
            offset: self.base_offset.wrapping_add(i64::from(be_i32(b, 0))),
            position: FilePosition(be_i32(b, 4) as u32),
        })
    }
    /// The last entry, or `(base_offset, 0)` if there is none.
    pub fn last_entry(&self) -> OffsetPosition {
        self.entries()
            .checked_sub(1)
            .and_then(|n| self.entry(n))
            .unwrap_or(OffsetPosition {
                offset: self.base_offset,
                position: FilePosition(0),
            })
    }
    /// Kafka's `OffsetIndex.sanityCheck`.
    pub fn sanity_check(&self) -> Result<(), IndexCorruption> {
        let last = self.last_entry();
        if self.entries() != 0 && last.offset < self.base_offset {
            return Err(IndexCorruption::LastOffsetBelowBase {
                last_offset: last.offset,
                base_offset: self.base_offset,
            });
        }
        if !self.bytes.len().is_multiple_of(OFFSET_ENTRY_SIZE) {
            return Err(IndexCorruption::LengthNotMultiple {
                len: self.bytes.len() as u64,
                entry_size: OFFSET_ENTRY_SIZE,
            });
        }
        Ok(())
    }
}

/// A `.timeindex` file's bytes: `len / 12` entries.
#[derive(Debug, Clone, Copy)]
pub struct TimeIndexView<'a> {
    base_offset: i64,
    bytes: &'a [u8],
}

impl<'a> TimeIndexView<'a> {
    /// A view of `bytes` as the time index of the segment at `base_offset`.
    pub fn new(base_offset: i64, bytes: &'a [u8]) -> Self {
        Self { base_offset, bytes }
    }
    /// Whole entries.
    pub fn entries(&self) -> usize {
        self.bytes.len() / TIME_ENTRY_SIZE
    }
    /// Entry `n`.
    pub fn entry(&self, n: usize) -> Option<TimestampOffset> {
        let at = n.checked_mul(TIME_ENTRY_SIZE)?;
        let b = self.bytes.get(at..at + TIME_ENTRY_SIZE)?;
        Some(TimestampOffset {
            timestamp: be_i64(b, 0),
            offset: self.base_offset.wrapping_add(i64::from(be_i32(b, 8))),
        })
    }
    /// The last entry, or `(NO_TIMESTAMP, base_offset)` if there is none.
    pub fn last_entry(&self) -> TimestampOffset {
        self.entries()
            .checked_sub(1)
            .and_then(|n| self.entry(n))
            .unwrap_or(TimestampOffset {
                timestamp: NO_TIMESTAMP,
                offset: self.base_offset,
            })
    }
    /// Kafka's `TimeIndex.sanityCheck`.
    pub fn sanity_check(&self) -> Result<(), IndexCorruption> {
        let last = self.last_entry();
        if let Some(first) = self.entry(0) {
            if last.timestamp < first.timestamp {
                return Err(IndexCorruption::LastTimestampBelowFirst {
                    first: first.timestamp,
                    last: last.timestamp,
                });
            }
        }
        if self.entries() != 0 && last.offset < self.base_offset {
            return Err(IndexCorruption::LastOffsetBelowBase {
                last_offset: last.offset,
                base_offset: self.base_offset,
            });
        }
        if !self.bytes.len().is_multiple_of(TIME_ENTRY_SIZE) {
            return Err(IndexCorruption::LengthNotMultiple {
                len: self.bytes.len() as u64,
                entry_size: TIME_ENTRY_SIZE,
            });
        }
        Ok(())
    }
}

/// A `.txnindex` file's bytes: whole 34-byte entries (a partial tail is ignored, as Kafka's
/// reader does).
#[derive(Debug, Clone, Copy)]
pub struct TxnIndexView<'a> {
    start_offset: i64,
    bytes: &'a [u8],
}

impl<'a> TxnIndexView<'a> {
    /// A view of `bytes` as the transaction index of the segment at `start_offset`.
    pub fn new(start_offset: i64, bytes: &'a [u8]) -> Self {
        Self {
            start_offset,
            bytes,
        }
    }
    /// The whole entries with their byte positions.
    pub fn entries(&self) -> impl Iterator<Item = (u64, AbortedTxn)> + 'a {
        self.bytes
            .chunks_exact(TXN_ENTRY_SIZE)
            .enumerate()
            .filter_map(|(i, c)| {
                let b: &[u8; TXN_ENTRY_SIZE] = c.try_into().ok()?;
                Some(((i * TXN_ENTRY_SIZE) as u64, AbortedTxn::from_bytes(b)))
            })
    }
    /// Bytes after the last whole entry.
    pub fn partial_bytes(&self) -> usize {
        self.bytes.len() % TXN_ENTRY_SIZE
    }
    /// Kafka's `TransactionIndex.sanityCheck` (with the version check of its reader).
    pub fn sanity_check(&self) -> Result<(), IndexCorruption> {
        for (position, txn) in self.entries() {
            if txn.version > CURRENT_VERSION {
                return Err(IndexCorruption::UnsupportedTxnVersion {
                    version: txn.version,
                    position,
                });
            }
            if txn.last_offset < self.start_offset {
                return Err(IndexCorruption::TxnBelowStart {
                    last_offset: txn.last_offset,
                    start_offset: self.start_offset,
                });
            }
        }
        Ok(())
    }
}
