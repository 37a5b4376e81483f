//! Typed errors of the producer state manager and of producer snapshot files.
//!
//! Each variant carries the producer id, the offset and the numbers that made the check fail, so a
//! caller can match on the kind (to choose between rejecting an append and failing recovery) and a
//! log line can say exactly what was seen. Names follow the Kafka exceptions they stand for.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why an append was refused by producer state (Kafka: the exceptions thrown by
/// `ProducerAppendInfo` and `ProducerStateManager`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProducerStateError {
    /// Kafka `InvalidProducerEpochException`: the batch's epoch is older than the producer's
    /// (for markers under transaction version 0/1: likewise `epoch < current`).
    InvalidProducerEpoch {
        /// Producer id.
        producer_id: i64,
        /// First offset of the batch.
        offset: i64,
        /// Epoch in the batch.
        epoch: i16,
        /// Epoch the producer state holds.
        current_epoch: i16,
        /// Whether the batch was a transaction marker.
        is_marker: bool,
    },
    /// Kafka `OutOfOrderSequenceException` (checked for `AppendOrigin::Client` only).
    OutOfOrderSequence {
        /// Producer id.
        producer_id: i64,
        /// First offset of the batch.
        offset: i64,
        /// Epoch in the batch.
        epoch: i16,
        /// Epoch the producer state holds.
        current_epoch: i16,
        /// The batch's first sequence.
        first_sequence: i32,
        /// The last sequence seen for the producer in this epoch (−1 if none); for
        /// [`SequenceViolation::NewEpochNotZero`] this is −1.
        current_last_sequence: i32,
        /// Which rule failed.
        violation: SequenceViolation,
    },
    /// Kafka `InvalidTxnStateException`: a non-transactional batch from a producer whose
    /// transaction is open.
    InvalidTxnState {
        /// Producer id.
        producer_id: i64,
        /// First offset of the offending batch.
        offset: i64,
        /// First offset of the producer's open transaction.
        txn_first_offset: i64,
    },
    /// Kafka `TransactionCoordinatorFencedException`: a marker with an older coordinator epoch.
    TransactionCoordinatorFenced {
        /// Producer id.
        producer_id: i64,
        /// Offset of the marker.
        offset: i64,
        /// Coordinator epoch in the marker.
        coordinator_epoch: i32,
        /// Coordinator epoch the producer state holds.
        current_coordinator_epoch: i32,
    },
    /// A control batch with a producer id whose first record is not ABORT/COMMIT (Kafka:
    /// `EndTransactionMarker.deserialize` throws), or whose record could not be summarised.
    InvalidControlBatch {
        /// Producer id.
        producer_id: i64,
        /// Offset of the batch.
        offset: i64,
        /// What was wrong.
        reason: InvalidControlReason,
    },
    /// The batch's offsets are impossible for a parsed v2 batch.
    InvalidBatch {
        /// `baseOffset`.
        base_offset: i64,
        /// `lastOffset`.
        last_offset: i64,
        /// What was wrong.
        reason: InvalidBatchReason,
    },
    /// `update` was called with producer id −1 (Kafka: IllegalArgumentException).
    NoProducerId,
    /// `complete_txn` for a transaction that is not ongoing (Kafka: IllegalArgumentException
    /// "Attempted to complete transaction … which was not started").
    TxnNotStarted {
        /// Producer id.
        producer_id: i64,
        /// First offset the completion named.
        first_offset: i64,
        /// Marker offset.
        last_offset: i64,
    },
}

/// Which sequence rule an [`ProducerStateError::OutOfOrderSequence`] broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceViolation {
    /// A bumped epoch must start at sequence 0 (unless the producer had no state).
    NewEpochNotZero,
    /// Same epoch, but `first_sequence` is not `current_last_sequence + 1` (with wraparound).
    Gap,
}

/// Details of an [`ProducerStateError::InvalidControlBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvalidControlReason {
    /// A producer-owned control batch of a type other than ABORT/COMMIT.
    NotAnEndTxnMarker(i16),
    /// `records_count > 0` but no control record was summarised.
    MissingControlRecord,
}

/// Details of an [`ProducerStateError::InvalidBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidBatchReason {
    /// `baseOffset < 0`.
    NegativeBaseOffset,
    /// `lastOffset < baseOffset`.
    LastOffsetBeforeBase,
    /// `lastOffset − baseOffset > i32::MAX`.
    OffsetDeltaTooLarge,
}

impl fmt::Display for ProducerStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidProducerEpoch {
                producer_id,
                offset,
                epoch,
                current_epoch,
                is_marker,
            } => {
                let what = if *is_marker { "marker" } else { "batch" };
                write!(
                    f,
                    "epoch {epoch} of producer {producer_id} ({what} at offset {offset}) is smaller \
                     than the last seen epoch {current_epoch}"
                )
            }
            Self::OutOfOrderSequence {
                producer_id,
                offset,
                epoch,
                current_epoch,
                first_sequence,
                current_last_sequence,
                violation,
            } => match violation {
                SequenceViolation::NewEpochNotZero => write!(
                    f,
                    "invalid sequence number for new epoch of producer {producer_id} at offset \
                     {offset}: epoch {epoch} (current {current_epoch}), first sequence \
                     {first_sequence} (must be 0)"
                ),
                SequenceViolation::Gap => write!(
                    f,
                    "out of order sequence number for producer {producer_id} at offset {offset}: \
                     epoch {epoch}, first sequence {first_sequence}, last sequence \
                     {current_last_sequence}"
                ),
            },
            Self::InvalidTxnState {
                producer_id,
                offset,
                txn_first_offset,
            } => write!(
                f,
                "expected transactional write from producer {producer_id} at offset {offset} \
                 (transaction open since offset {txn_first_offset})"
            ),
            Self::TransactionCoordinatorFenced {
                producer_id,
                offset,
                coordinator_epoch,
                current_coordinator_epoch,
            } => write!(
                f,
                "invalid coordinator epoch for producer {producer_id} at offset {offset}: \
                 {coordinator_epoch} is older than previously known coordinator epoch \
                 {current_coordinator_epoch}"
            ),
            Self::InvalidControlBatch {
                producer_id,
                offset,
                reason,
            } => match reason {
                InvalidControlReason::NotAnEndTxnMarker(t) => write!(
                    f,
                    "control batch of producer {producer_id} at offset {offset} has control type \
                     {t}, not ABORT/COMMIT"
                ),
                InvalidControlReason::MissingControlRecord => write!(
                    f,
                    "control batch of producer {producer_id} at offset {offset} has records but \
                     no control record"
                ),
            },
            Self::InvalidBatch {
                base_offset,
                last_offset,
                reason,
            } => write!(
                f,
                "invalid batch offsets {base_offset}..={last_offset}: {}",
                match reason {
                    InvalidBatchReason::NegativeBaseOffset => "negative base offset",
                    InvalidBatchReason::LastOffsetBeforeBase => "last offset before base offset",
                    InvalidBatchReason::OffsetDeltaTooLarge => "offset delta exceeds int32",
                }
            ),
            Self::NoProducerId => write!(f, "producer state update for producer id -1"),
            Self::TxnNotStarted {
                producer_id,
                first_offset,
                last_offset,
            } => write!(
                f,
                "attempted to complete transaction of producer {producer_id} \
                 ({first_offset}..={last_offset}) which was not started"
            ),
        }
    }
}

impl std::error::Error for ProducerStateError {}

/// Errors reading or writing producer snapshot files.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The file's bytes are not a valid version-1 snapshot (Kafka `CorruptSnapshotException`).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: CorruptReason,
        /// Byte position in the file where the problem was found.
        position: u64,
    },
    /// An I/O operation failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// A snapshot offset that cannot be a file name (negative).
    InvalidOffset(i64),
}

/// Why a snapshot file is corrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CorruptReason {
    /// The file ends before a field or entry does.
    Truncated {
        /// Bytes needed from `position`.
        need: u64,
        /// Bytes present from `position`.
        have: u64,
    },
    /// Version field is not 1.
    BadVersion(i16),
    /// Stored CRC-32C differs from the one computed over bytes `[6, EOF)`.
    CrcMismatch {
        /// CRC in the header.
        stored: u32,
        /// CRC of the file's bytes.
        computed: u32,
    },
    /// Negative entry count (−1 would be a null array, which the schema forbids).
    NegativeCount(i32),
    /// Bytes left after the `count` entries.
    TrailingBytes {
        /// Entry count in the header.
        count: i32,
        /// Extra bytes.
        extra: u64,
    },
    /// The file is longer than a snapshot is read
    /// (`crate::snapshot::MAX_SNAPSHOT_BYTES`); not read.
    TooLarge {
        /// Its length in bytes.
        size: u64,
        /// The longest snapshot read.
        limit: u64,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Corrupt {
                path,
                reason,
                position,
            } => {
                write!(
                    f,
                    "corrupt producer snapshot {} at byte {position}: ",
                    path.display()
                )?;
                match reason {
                    CorruptReason::Truncated { need, have } => {
                        write!(f, "truncated (need {need} bytes, have {have})")
                    }
                    CorruptReason::BadVersion(v) => write!(f, "unknown file version {v}"),
                    CorruptReason::CrcMismatch { stored, computed } => {
                        write!(f, "stored crc {stored}, computed crc {computed}")
                    }
                    CorruptReason::NegativeCount(n) => write!(f, "negative entry count {n}"),
                    CorruptReason::TrailingBytes { count, extra } => {
                        write!(f, "{extra} bytes after {count} entries")
                    }
                    CorruptReason::TooLarge { size, limit } => write!(
                        f,
                        "{size} bytes, more than a snapshot is read ({limit} bytes)"
                    ),
                }
            }
            Self::Io { path, op, source } => write!(f, "{op} {}: {source}", path.display()),
            Self::InvalidOffset(o) => write!(f, "invalid snapshot offset {o}"),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
