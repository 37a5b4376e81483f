//! The scan's own entry: a batch's header copied, and its transaction marker packed, by the
//! thread that framed and checked it.
//!
//! The thread that walks a region has each batch's bytes in its cache; the thread that applies the
//! entries does not. So the walker copies the 61 header bytes into the entry, and for a
//! transaction marker also the marker (whose record lies past the header), and the applier reads
//! only the entry. [`RecordBatch`] itself stays a plain view over the bytes.
//!
//! ```text
//! head[0..61]   the batch header, bytes 0..61 of the batch (see `crate::wire`)
//! head[61..64]  the packed marker, big-endian: bit 23 set if there is one, bit 22 for COMMIT,
//!               bits 0-21 the coordinator epoch (0 when there is none)
//! ```

use crate::batch::RecordBatch;
use crate::batches::{LegacyEntry, LogEntry};
use crate::control::{end_txn_marker, ControlRecordType, EndTransactionMarker};
use crate::cursor::array_at;
use crate::wire::RECORD_BATCH_OVERHEAD;

/// Bytes of [`ScannedBatch`]'s header copy: the 61-byte header and the packed marker.
const HEAD_BYTES: usize = RECORD_BATCH_OVERHEAD + 3;

const END_TXN_PRESENT: u32 = 1 << 23;
const END_TXN_COMMIT: u32 = 1 << 22;
const END_TXN_EPOCH_MASK: u32 = (1 << 22) - 1;

/// One valid v2 batch as the scan hands it over: the batch's view, its header copied and its
/// transaction marker packed (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedBatch<'a> {
    batch: RecordBatch<'a>,
    head: [u8; HEAD_BYTES],
}

/// One valid entry as the scan hands it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScannedEntry<'a> {
    /// A v2 record batch.
    V2(ScannedBatch<'a>),
    /// A legacy v0/v1 entry.
    Legacy(LegacyEntry<'a>),
}

impl<'a> ScannedEntry<'a> {
    /// The entry of a valid `entry`: for a v2 batch, its header and marker copied.
    #[inline]
    pub(crate) fn new(entry: LogEntry<'a>) -> Self {
        match entry {
            LogEntry::V2(b) => ScannedEntry::V2(ScannedBatch::new(b)),
            LogEntry::Legacy(l) => ScannedEntry::Legacy(l),
        }
    }

    /// The entry as the iterator yields it.
    #[inline]
    pub fn entry(&self) -> LogEntry<'a> {
        match self {
            ScannedEntry::V2(b) => LogEntry::V2(b.batch),
            ScannedEntry::Legacy(l) => LogEntry::Legacy(*l),
        }
    }

    /// Absolute position of the entry.
    #[inline]
    pub fn position(&self) -> u64 {
        match self {
            ScannedEntry::V2(b) => b.position(),
            ScannedEntry::Legacy(l) => l.position(),
        }
    }

    /// Size in bytes.
    #[inline]
    pub fn size_in_bytes(&self) -> usize {
        match self {
            ScannedEntry::V2(b) => b.size_in_bytes(),
            ScannedEntry::Legacy(l) => l.size_in_bytes(),
        }
    }

    /// Last offset (v2: `baseOffset + lastOffsetDelta`; legacy: the entry's offset field).
    #[inline]
    pub fn last_offset(&self) -> i64 {
        match self {
            ScannedEntry::V2(b) => b.last_offset(),
            ScannedEntry::Legacy(l) => l.offset(),
        }
    }
}

impl<'a> ScannedBatch<'a> {
    /// `batch`'s header and marker copied. Built in one piece, its marker read first: an entry
    /// changed after it was made is copied out of the stack with loads that span the smaller
    /// stores that had just written it, which the CPU cannot forward.
    #[inline]
    pub fn new(batch: RecordBatch<'a>) -> Self {
        let end_txn = end_txn_packed(&batch);
        ScannedBatch {
            batch,
            head: head_copy(batch.as_bytes(), end_txn),
        }
    }

    /// The batch's view (for its records, CRC, bytes).
    #[inline]
    pub fn batch(&self) -> &RecordBatch<'a> {
        &self.batch
    }

    /// The batch's first control record if it is an ABORT or COMMIT marker of version 0 whose
    /// key and value decode (the batch uncompressed) and whose coordinator epoch is below 2^22;
    /// `None` otherwise ([`crate::control::end_txn_marker`] or the batch's records then say
    /// more).
    #[inline]
    pub fn end_txn_marker(&self) -> Option<(ControlRecordType, EndTransactionMarker)> {
        let [a, b, c] = array_at(&self.head, RECORD_BATCH_OVERHEAD);
        let packed = u32::from_be_bytes([0, a, b, c]);
        if packed & END_TXN_PRESENT == 0 {
            return None;
        }
        let record_type = if packed & END_TXN_COMMIT != 0 {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        };
        let coordinator_epoch = i32::try_from(packed & END_TXN_EPOCH_MASK).unwrap_or_default();
        Some((record_type, EndTransactionMarker::new(coordinator_epoch)))
    }

    crate::batch::header_fields!(head);

    /// Absolute position of the batch's first byte.
    #[inline]
    pub fn position(&self) -> u64 {
        self.batch.position()
    }

    /// Size of the whole batch in bytes.
    #[inline]
    pub fn size_in_bytes(&self) -> usize {
        self.batch.size_in_bytes()
    }
}

/// The packed marker of [`ScannedBatch::end_txn_marker`] for `batch`, 0 when there is none.
#[inline]
fn end_txn_packed(batch: &RecordBatch<'_>) -> u32 {
    if !batch.is_control() {
        return 0;
    }
    control_end_txn_packed(batch)
}

/// [`end_txn_packed`] of a control batch.
#[inline(never)]
fn control_end_txn_packed(batch: &RecordBatch<'_>) -> u32 {
    let Some((record_type, marker)) = end_txn_marker(batch) else {
        return 0;
    };
    let epoch = u32::try_from(marker.coordinator_epoch).unwrap_or(u32::MAX);
    if marker.version != 0 || epoch > END_TXN_EPOCH_MASK {
        return 0;
    }
    let commit = if record_type == ControlRecordType::Commit {
        END_TXN_COMMIT
    } else {
        0
    };
    END_TXN_PRESENT | commit | epoch
}

/// `bytes[..61]` (zeros past a shorter `bytes`) followed by the low 3 bytes of `end_txn`,
/// big-endian, assembled in four 16-byte words.
#[inline]
fn head_copy(bytes: &[u8], end_txn: u32) -> [u8; HEAD_BYTES] {
    let word = |at: usize| u128::from_be_bytes(array_at(bytes, at));
    // Bytes 48..61, then the marker in 61..64.
    let last = (word(45) << 24) | u128::from(end_txn & 0x00ff_ffff);
    let mut head = [0u8; HEAD_BYTES];
    for (chunk, w) in head
        .chunks_exact_mut(16)
        .zip([word(0), word(16), word(32), last])
    {
        chunk.copy_from_slice(&w.to_be_bytes());
    }
    head
}
