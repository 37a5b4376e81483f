//! The partition log's errors.

use std::fmt;
use std::path::PathBuf;

use record_format::FormatError;
use segment_store::{EntryType, SegmentError};

use crate::error::{ProducerStateError, SnapshotError};
use crate::mirror::{MirrorStateError, MirrorStateKind};

/// Errors of the partition log and its loader.
#[derive(Debug)]
#[non_exhaustive]
pub enum PartitionLogError {
    /// A segment-store operation failed.
    Segment(SegmentError),
    /// A producer snapshot could not be read or written.
    Snapshot(SnapshotError),
    /// Producer state refused the append (fenced epoch, out-of-order sequence, …); nothing was
    /// written.
    ProducerState(ProducerStateError),
    /// The records are not a sequence of valid v2 batches (framing, CRC, trailing bytes), or a
    /// control record could not be read. `error.position` is the byte position in the input.
    InvalidRecords(FormatError),
    /// A batch with magic 0 or 1 (only v2 is written).
    UnsupportedMagic {
        /// Byte position of the entry in the input.
        position: u64,
        /// Its magic.
        magic: i8,
    },
    /// A client tried to write a control batch.
    ControlBatchFromClient {
        /// Byte position of the batch in the input.
        position: u64,
    },
    /// An append with no batch.
    EmptyRecords,
    /// A follower append whose first offset is below the log end offset.
    OffsetBelowLogEnd {
        /// First offset of the append.
        first_offset: i64,
        /// The log end offset.
        log_end_offset: i64,
    },
    /// A truncation target inside a batch.
    NotBatchAligned {
        /// The target.
        target: i64,
        /// Base offset of the batch containing it.
        batch_base_offset: i64,
    },
    /// A negative truncation target.
    NegativeOffset(i64),
    /// A leader append in an epoch below the partition's current leader epoch (the latest of
    /// the leader-epoch cache: after a mirror stop, the epoch the library chose). Nothing was
    /// written.
    StaleLeaderEpoch {
        /// The epoch asked for.
        requested: i32,
        /// The current leader epoch.
        current: i32,
    },
    /// A mirrored batch's leader epoch leaves no destination epoch above it (`i32::MAX`
    /// reached). Nothing was written.
    MirrorEpochExhausted,
    /// A read outside `[log start, log end]`.
    OffsetOutOfRange {
        /// The offset.
        offset: i64,
        /// Log start offset.
        log_start_offset: i64,
        /// Log end offset.
        log_end_offset: i64,
    },
    /// A file operation of the loader failed.
    Io {
        /// The path.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A client or coordinator append while the partition is mirrored (`Mirroring` or
    /// `Stopping`, KIP-1279): during mirroring every byte and every producer comes from the
    /// source. Nothing was written.
    ReadOnly {
        /// The partition's mirror state.
        state: MirrorStateKind,
    },
    /// A mirror-feed append ([`PartitionLog::append_as_mirror`](crate::PartitionLog::append_as_mirror)) outside `Mirroring`: once
    /// `Stopping` began, the stop point is fixed. Nothing was written.
    NotMirroring {
        /// The partition's mirror state.
        state: MirrorStateKind,
    },
    /// A mirror-feed append or alignment while a first start's full truncation is not durable
    /// yet (`Mirroring{full_truncation_pending}`): call
    /// [`start_mirroring`](crate::mirror::MirroredLog::start_mirroring) again to finish it.
    /// Nothing was written.
    MirrorTruncationPending,
    /// The partition's `mirror-state` file could not be read or written.
    MirrorState(MirrorStateError),
    /// A partition directory holds a name seglog reads or writes that it must not go through:
    /// a symlink (seglog follows none inside a log directory), or something other than the
    /// regular file or directory the name stands for (a FIFO, a device). Recovery leaves the
    /// partition untouched; a log directory takes it offline.
    Refused {
        /// The name.
        path: PathBuf,
        /// What is there.
        found: EntryType,
    },
    /// Loading one partition of a log directory failed.
    Partition {
        /// The partition directory.
        dir: PathBuf,
        /// Why.
        source: Box<PartitionLogError>,
    },
}

impl fmt::Display for PartitionLogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Segment(e) => write!(f, "{e}"),
            Self::Snapshot(e) => write!(f, "{e}"),
            Self::ProducerState(e) => write!(f, "{e}"),
            Self::InvalidRecords(e) => write!(f, "invalid records: {e}"),
            Self::UnsupportedMagic { position, magic } => {
                write!(
                    f,
                    "batch at byte {position} has magic {magic}; only v2 is written"
                )
            }
            Self::ControlBatchFromClient { position } => {
                write!(
                    f,
                    "clients may not write control batches (batch at byte {position})"
                )
            }
            Self::EmptyRecords => write!(f, "append with no batch"),
            Self::OffsetBelowLogEnd {
                first_offset,
                log_end_offset,
            } => write!(
                f,
                "follower append at offset {first_offset} is below the log end offset \
                 {log_end_offset}"
            ),
            Self::NotBatchAligned {
                target,
                batch_base_offset,
            } => write!(
                f,
                "truncation target {target} is inside the batch starting at {batch_base_offset}"
            ),
            Self::NegativeOffset(o) => write!(f, "negative offset {o}"),
            Self::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]"
            ),
            Self::Io { path, op, source } => write!(f, "{op} {}: {source}", path.display()),
            Self::StaleLeaderEpoch { requested, current } => write!(
                f,
                "leader epoch {requested} is below the partition's leader epoch {current}"
            ),
            Self::ReadOnly { state } => write!(
                f,
                "partition is read-only for clients in mirror state {state}"
            ),
            Self::MirrorEpochExhausted => {
                f.write_str("no destination leader epoch left above the mirrored batch's")
            }
            Self::NotMirroring { state } => {
                write!(f, "mirrored batches are refused in mirror state {state}")
            }
            Self::MirrorTruncationPending => f.write_str(
                "the first start of mirroring has not truncated the log yet: call \
                 start_mirroring again",
            ),
            Self::MirrorState(e) => write!(f, "{e}"),
            Self::Partition { dir, source } => {
                write!(f, "loading partition {}: {source}", dir.display())
            }
            Self::Refused { path, found } => {
                let what = match found {
                    EntryType::Symlink => {
                        "is a symlink (seglog follows no symlink inside a log directory)"
                    }
                    EntryType::Dir => "is a directory, not a regular file",
                    EntryType::File => "is a regular file, not a directory",
                    EntryType::Other => "is not a regular file (a FIFO, socket or device)",
                };
                write!(
                    f,
                    "{} {what}: refused, and the directory it is in is left untouched",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for PartitionLogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Segment(e) => Some(e),
            Self::Snapshot(e) => Some(e),
            Self::ProducerState(e) => Some(e),
            Self::InvalidRecords(e) => Some(e),
            Self::Io { source, .. } => Some(source),
            Self::MirrorState(e) => Some(e),
            Self::Partition { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<SegmentError> for PartitionLogError {
    /// An offset out of range is one error whichever layer finds it (a read racing retention
    /// finds it in the segments).
    fn from(e: SegmentError) -> Self {
        match e {
            SegmentError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => Self::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            },
            e => Self::Segment(e),
        }
    }
}
impl From<SnapshotError> for PartitionLogError {
    fn from(e: SnapshotError) -> Self {
        Self::Snapshot(e)
    }
}
impl From<ProducerStateError> for PartitionLogError {
    fn from(e: ProducerStateError) -> Self {
        Self::ProducerState(e)
    }
}
impl From<MirrorStateError> for PartitionLogError {
    fn from(e: MirrorStateError) -> Self {
        Self::MirrorState(e)
    }
}
impl From<FormatError> for PartitionLogError {
    fn from(e: FormatError) -> Self {
        Self::InvalidRecords(e)
    }
}
