//! Typed errors for everything in this crate, each carrying the path it concerns.
//!
//! Callers match on the variant to choose between "rebuild this index", "treat the checkpoint as
//! empty" and "fail", so variants are data, not prose. `Display` says what went wrong and where.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::PathBuf;

use record_format::FormatError;

/// Result alias used throughout this crate.
pub type Result<T, E = SegmentError> = std::result::Result<T, E>;

/// Everything that can go wrong in `segment-store`.
#[derive(Debug)]
#[non_exhaustive]
pub enum SegmentError {
    /// An operating-system (or simulated) I/O call failed.
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// The operation, e.g. `"open"`, `"write_at"`, `"sync_dir"`.
        op: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// The log directory needs recovery before [`crate::LocalLog`] can open it: the segments
    /// whose index fails Kafka's sanity check, or whose tail does not parse (the recovery crate's
    /// `LogLoader` recovers them).
    NeedsRecovery {
        /// The partition directory.
        dir: PathBuf,
        /// Base offsets of the segments recovery has to look at.
        segments: Vec<i64>,
    },
    /// An index file fails Kafka's sanity checks (Kafka: `CorruptIndexException`).
    CorruptIndex {
        /// The index file.
        path: PathBuf,
        /// Which check failed.
        reason: IndexCorruption,
    },
    /// An offset was appended out of order (Kafka: `InvalidOffsetException`, or the
    /// transaction index's `IllegalArgumentException`).
    InvalidOffset {
        /// The index file.
        path: PathBuf,
        /// The offset that was rejected.
        offset: i64,
        /// The last offset already in the index.
        last_offset: i64,
    },
    /// The offset does not fit in the index's 32-bit relative offset:
    /// `0 <= offset - base_offset <= i32::MAX` is violated (Kafka: `IndexOffsetOverflowException`).
    OffsetOverflow {
        /// The index file.
        path: PathBuf,
        /// The offset that was rejected.
        offset: i64,
        /// The index's base offset.
        base_offset: i64,
    },
    /// A file position larger than `i32::MAX` (Kafka stores positions as `int`).
    PositionOverflow {
        /// The index file.
        path: PathBuf,
        /// The rejected position.
        position: u64,
    },
    /// A time-index append with a timestamp below the last one (Kafka: `IllegalStateException`).
    TimestampDecreasing {
        /// The index file.
        path: PathBuf,
        /// The rejected timestamp.
        timestamp: i64,
        /// The last timestamp in the index.
        last_timestamp: i64,
    },
    /// An append to an index with no free slot (Kafka: `IllegalArgumentException`).
    IndexFull {
        /// The index file.
        path: PathBuf,
        /// Entries in the index.
        entries: usize,
    },
    /// A resize that would cut off live entries, or a max index size below one entry.
    InvalidIndexSize {
        /// The index file.
        path: PathBuf,
        /// The requested size in bytes.
        requested: u64,
        /// The smallest size allowed.
        minimum: u64,
    },
    /// A write through a map or index opened read-only.
    ReadOnly {
        /// The file.
        path: PathBuf,
    },
    /// A file name that is not `<20 digits><suffix>[<temp suffix>]`.
    NotASegmentFile {
        /// The name as found in the directory.
        name: OsString,
    },
    /// A directory name that is not `<topic>-<partition>` (optionally with a
    /// `.<id>-delete`/`-future`/`-stray` suffix).
    NotAPartitionDir {
        /// The name as found in the log directory.
        name: OsString,
    },
    /// A checkpoint file Kafka would refuse to read.
    MalformedCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// 1-based line number of the problem.
        line: usize,
        /// What was wrong.
        reason: CheckpointProblem,
    },
    /// The directory (or file) is locked by another holder.
    Locked {
        /// The lock file (or the mapped file).
        path: PathBuf,
    },
    /// A file read through a map without the directory lock shrank while it was read: pages
    /// past its new end read as zeros, so what was read is not the file as it is (another
    /// process, such as a broker, is writing it). See `mmap::GuardedMap`.
    TruncatedWhileRead {
        /// The file.
        path: PathBuf,
    },
    /// The log was closed (by its owner, while a reader still held it): nothing more is read
    /// or written through it.
    Closed {
        /// The partition directory.
        dir: PathBuf,
    },
    /// [`LocalLog::replace_segments`](crate::LocalLog::replace_segments) refused: a segment to
    /// replace is the active one or not in the log, or no cleaned segment was swapped in.
    NotReplaceable {
        /// The partition directory.
        dir: PathBuf,
        /// The base offset in question.
        base: i64,
        /// Why.
        reason: &'static str,
    },
    /// A file was to be mapped outside the directory whose lock the caller holds.
    NotUnderLock {
        /// The file to be mapped.
        path: PathBuf,
        /// The directory that is locked.
        lock_dir: PathBuf,
    },
    /// A fetch or lookup below the log start offset or above the log end offset (Kafka:
    /// `OffsetOutOfRangeException`).
    OffsetOutOfRange {
        /// The requested offset.
        offset: i64,
        /// The log start offset.
        log_start_offset: i64,
        /// The log end offset.
        log_end_offset: i64,
    },
    /// Appended records start below the log end offset (Kafka: `UnexpectedAppendOffsetException`),
    /// or their offsets do not increase from batch to batch.
    UnexpectedAppendOffset {
        /// The segment's `.log` (or the partition directory).
        path: PathBuf,
        /// The offending batch's base offset.
        first_offset: i64,
        /// The smallest offset that would have been accepted.
        expected: i64,
    },
    /// Appended records larger than a whole segment (Kafka: `RecordBatchTooLargeException`).
    RecordsTooLarge {
        /// Size of the records in bytes.
        size: u64,
        /// `segment.bytes`.
        max: u64,
    },
    /// A `.log` truncation to a size larger than the file or a negative offset (Kafka:
    /// `KafkaException` in `FileRecords.truncateTo`, `IllegalArgumentException` in
    /// `UnifiedLog.truncateTo`).
    InvalidTruncation {
        /// The file or directory.
        path: PathBuf,
        /// The requested target (bytes for a file, an offset for a log).
        target: i64,
        /// The current size (bytes) or log end offset.
        current: i64,
    },
    /// A roll to a base offset where a non-empty segment (or a later segment) already exists
    /// (Kafka: `KafkaException` in `LocalLog.roll`).
    SegmentExists {
        /// The `.log` of the existing segment.
        path: PathBuf,
        /// The base offset the new segment would have had.
        base_offset: i64,
    },
    /// A record-format parse error in a file.
    Format {
        /// The file.
        path: PathBuf,
        /// The parse error (its position is the byte offset in the file).
        error: FormatError,
    },
    /// A file longer than its format allows, or than seglog reads into memory
    /// ([`crate::io::Storage::read_capped`]): refused, not read.
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its length in bytes.
        size: u64,
        /// The most this kind of file may hold.
        limit: u64,
    },
    /// A [`FileSlice`](crate::FileSlice) reaches past the end of its file: the file was
    /// truncated after the slice was taken, so only `read` of its `len` bytes are left.
    SliceTruncated {
        /// The file (the path it was opened at; it may have been renamed or deleted since).
        path: PathBuf,
        /// The slice's first byte in the file.
        position: u64,
        /// The slice's length.
        len: u64,
        /// The bytes of the slice the file still holds.
        read: u64,
    },
}

/// Which index sanity check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexCorruption {
    /// The file length is not a multiple of the entry size.
    LengthNotMultiple {
        /// File length in bytes.
        len: u64,
        /// Entry size in bytes.
        entry_size: usize,
    },
    /// The last entry's offset is below the base offset (a negative relative offset).
    LastOffsetBelowBase {
        /// The last entry's offset.
        last_offset: i64,
        /// The index's base offset.
        base_offset: i64,
    },
    /// The last timestamp of a time index is below its first.
    LastTimestampBelowFirst {
        /// First entry's timestamp.
        first: i64,
        /// Last entry's timestamp.
        last: i64,
    },
    /// An aborted-transaction entry with a version newer than 0.
    UnsupportedTxnVersion {
        /// The version found.
        version: i16,
        /// Byte position of the entry.
        position: u64,
    },
    /// The index file of a segment that holds batches is missing (Kafka's `LogSegment.sanityCheck`
    /// throws `NoSuchFileException` for a missing offset index).
    Missing,
    /// The file is longer than an index may be (`segment.index.bytes`).
    LargerThanMax {
        /// File length in bytes.
        len: u64,
        /// The largest size an index may have (`segment.index.bytes`).
        max: u64,
    },
    /// An aborted-transaction entry whose last offset is below the segment's base offset.
    TxnBelowStart {
        /// The entry's last offset.
        last_offset: i64,
        /// The segment's base offset.
        start_offset: i64,
    },
}

/// Why a checkpoint file was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointProblem {
    /// The version line holds a version this reader does not know.
    UnsupportedVersion {
        /// The version found.
        found: i32,
        /// The version expected.
        expected: i32,
    },
    /// The version or count line is not a 32-bit decimal integer.
    NotAnInteger,
    /// An entry line has the wrong number of fields or a field that does not parse.
    BadEntry,
    /// The number of entry lines differs from the count line.
    CountMismatch {
        /// Entries announced on line 2.
        expected: i32,
        /// Entry lines found.
        found: usize,
    },
    /// A line is not valid UTF-8.
    InvalidUtf8,
}

impl SegmentError {
    /// Builds an [`SegmentError::Io`].
    pub fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        SegmentError::Io {
            path: path.into(),
            op,
            source,
        }
    }

    /// The I/O error kind, if this is an I/O error (`FileTooLarge` for
    /// [`SegmentError::FileTooLarge`]).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            SegmentError::Io { source, .. } => Some(source.kind()),
            SegmentError::FileTooLarge { .. } => Some(io::ErrorKind::FileTooLarge),
            _ => None,
        }
    }
}

impl fmt::Display for IndexCorruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexCorruption::LengthNotMultiple { len, entry_size } => write!(
                f,
                "length {len} bytes is not a multiple of the entry size {entry_size}"
            ),
            IndexCorruption::LastOffsetBelowBase {
                last_offset,
                base_offset,
            } => write!(
                f,
                "last offset {last_offset} is less than the base offset {base_offset}"
            ),
            IndexCorruption::LastTimestampBelowFirst { first, last } => write!(
                f,
                "last timestamp {last} is less than the first timestamp {first}"
            ),
            IndexCorruption::UnsupportedTxnVersion { version, position } => write!(
                f,
                "aborted transaction entry at byte {position} has version {version}, expected 0"
            ),
            IndexCorruption::Missing => write!(f, "the file is missing"),
            IndexCorruption::LargerThanMax { len, max } => write!(
                f,
                "length {len} bytes is more than the largest an index may be, {max} bytes \
                 (segment.index.bytes)"
            ),
            IndexCorruption::TxnBelowStart {
                last_offset,
                start_offset,
            } => write!(
                f,
                "aborted transaction last offset {last_offset} is less than the start offset {start_offset}"
            ),
        }
    }
}

impl fmt::Display for CheckpointProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointProblem::UnsupportedVersion { found, expected } => {
                write!(f, "unrecognized version {found} (expected {expected})")
            }
            CheckpointProblem::NotAnInteger => write!(f, "not a 32-bit integer"),
            CheckpointProblem::BadEntry => write!(f, "malformed entry"),
            CheckpointProblem::CountMismatch { expected, found } => {
                write!(f, "expected {expected} entries, found {found}")
            }
            CheckpointProblem::InvalidUtf8 => write!(f, "invalid UTF-8"),
        }
    }
}

impl fmt::Display for SegmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentError::Io { .. }
            | SegmentError::CorruptIndex { .. }
            | SegmentError::InvalidOffset { .. }
            | SegmentError::OffsetOverflow { .. }
            | SegmentError::PositionOverflow { .. }
            | SegmentError::TimestampDecreasing { .. }
            | SegmentError::IndexFull { .. }
            | SegmentError::InvalidIndexSize { .. } => self.fmt_file_error(f),
            SegmentError::ReadOnly { .. }
            | SegmentError::NotASegmentFile { .. }
            | SegmentError::NotAPartitionDir { .. }
            | SegmentError::MalformedCheckpoint { .. }
            | SegmentError::Locked { .. }
            | SegmentError::TruncatedWhileRead { .. }
            | SegmentError::NotUnderLock { .. }
            | SegmentError::Closed { .. }
            | SegmentError::NotReplaceable { .. }
            | SegmentError::OffsetOutOfRange { .. }
            | SegmentError::UnexpectedAppendOffset { .. }
            | SegmentError::RecordsTooLarge { .. }
            | SegmentError::InvalidTruncation { .. }
            | SegmentError::SegmentExists { .. }
            | SegmentError::Format { .. } => self.fmt_log_error(f),
            SegmentError::NeedsRecovery { dir, segments } => write!(
                f,
                "{} needs recovery before it is opened (segments {segments:?}): load it with the \
                 recovery crate's LogLoader",
                dir.display()
            ),
            SegmentError::FileTooLarge { path, size, limit } => write!(
                f,
                "{} is {size} bytes, more than such a file may hold ({limit} bytes): not read",
                path.display()
            ),
            SegmentError::SliceTruncated {
                path,
                position,
                len,
                read,
            } => write!(
                f,
                "{} ends inside the slice of {len} bytes at byte {position}: only {read} of them \
                 are left (the file was truncated after the slice was taken)",
                path.display()
            ),
        }
    }
}

impl SegmentError {
    /// Display of the I/O, index and append-order errors of one file.
    fn fmt_file_error(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentError::Io { path, op, source } => {
                write!(f, "{op} failed on {}: {source}", path.display())
            }
            SegmentError::CorruptIndex { path, reason } => {
                write!(f, "corrupt index {}: {reason}", path.display())
            }
            SegmentError::InvalidOffset {
                path,
                offset,
                last_offset,
            } => write!(
                f,
                "attempt to append offset {offset} to {}, which is not larger than the last offset {last_offset}",
                path.display()
            ),
            SegmentError::OffsetOverflow {
                path,
                offset,
                base_offset,
            } => write!(
                f,
                "offset {offset} does not fit a 32-bit offset relative to base offset {base_offset} in {}",
                path.display()
            ),
            SegmentError::PositionOverflow { path, position } => write!(
                f,
                "position {position} exceeds i32::MAX in {}",
                path.display()
            ),
            SegmentError::TimestampDecreasing {
                path,
                timestamp,
                last_timestamp,
            } => write!(
                f,
                "attempt to append timestamp {timestamp} to {}, which is less than the last timestamp {last_timestamp}",
                path.display()
            ),
            SegmentError::IndexFull { path, entries } => write!(
                f,
                "attempt to append to full index {} ({entries} entries)",
                path.display()
            ),
            SegmentError::InvalidIndexSize {
                path,
                requested,
                minimum,
            } => write!(
                f,
                "index {} cannot be sized to {requested} bytes: it needs at least {minimum} bytes",
                path.display()
            ),
            // `Display::fmt` sends only the variants above here.
            other => fmt::Debug::fmt(other, f),
        }
    }

    /// Display of the errors about names, locks, checkpoints, ranges and contents of a log.
    fn fmt_log_error(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SegmentError::ReadOnly { path } => {
                write!(f, "{} is open read-only", path.display())
            }
            SegmentError::NotASegmentFile { name } => {
                write!(f, "{name:?} is not a segment file name")
            }
            SegmentError::NotAPartitionDir { name } => write!(
                f,
                "{name:?} is not in the form topic-partition or topic-partition.uniqueId-delete/-future/-stray"
            ),
            SegmentError::MalformedCheckpoint { path, line, reason } => write!(
                f,
                "malformed checkpoint file {} at line {line}: {reason}",
                path.display()
            ),
            SegmentError::Locked { path } => {
                write!(f, "{} is locked by another holder", path.display())
            }
            SegmentError::TruncatedWhileRead { path } => write!(
                f,
                "{} was truncated while it was read (another process is writing it)",
                path.display()
            ),
            SegmentError::Closed { dir } => {
                write!(f, "the log in {} is closed", dir.display())
            }
            SegmentError::NotReplaceable { dir, base, reason } => write!(
                f,
                "{}: the segment at {base} cannot be replaced: {reason}",
                dir.display()
            ),
            SegmentError::NotUnderLock { path, lock_dir } => write!(
                f,
                "{} is not inside the locked directory {}",
                path.display(),
                lock_dir.display()
            ),
            SegmentError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "offset {offset} is out of range [{log_start_offset}, {log_end_offset}]"
            ),
            SegmentError::UnexpectedAppendOffset {
                path,
                first_offset,
                expected,
            } => write!(
                f,
                "unexpected append offset {first_offset} in {} (expected at least {expected})",
                path.display()
            ),
            SegmentError::RecordsTooLarge { size, max } => write!(
                f,
                "records of {size} bytes exceed the maximum segment size {max}"
            ),
            SegmentError::InvalidTruncation {
                path,
                target,
                current,
            } => write!(
                f,
                "cannot truncate {} to {target} (current {current})",
                path.display()
            ),
            SegmentError::SegmentExists { path, base_offset } => write!(
                f,
                "cannot roll a new segment at {base_offset}: {} already exists",
                path.display()
            ),
            SegmentError::Format { path, error } => write!(
                f,
                "invalid data in {} at byte {}: {}",
                path.display(),
                error.position,
                error.kind
            ),
            // `Display::fmt` sends only the variants above here.
            other => fmt::Debug::fmt(other, f),
        }
    }
}

impl std::error::Error for SegmentError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SegmentError::Io { source, .. } => Some(source),
            SegmentError::Format { error, .. } => Some(error),
            _ => None,
        }
    }
}
