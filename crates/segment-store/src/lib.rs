//! Kafka's segment files: the `.log`, memory-mapped offset and time indexes, the transaction
//! index, the multi-segment log and the text checkpoint files. Knows files and offsets, nothing
//! of producers.
//!
//! Module map (Kafka classes in brackets):
//! - [`file_name`]: every naming rule (`LogFileUtils`, `UnifiedLog.parseTopicPartitionName`).
//! - [`error`]: [`SegmentError`], typed and with the path it concerns.
//! - [`io`]: the [`io::Storage`] seam every write path goes through, with the real
//!   [`io::StdFs`] (the crate `testkit` has a crash-simulating one).
//! - [`mmap`]: the only module with `unsafe`; [`mmap::MmapFile`] and its invariants.
//! - [`index`]: [`OffsetIndex`], [`TimeIndex`] (`AbstractIndex` and subclasses) and
//!   [`TransactionIndex`].
//! - [`file_records`]: [`FileRecords`], the append-only `.log` (`FileRecords`).
//! - [`file_slice`]: [`FileSlice`], a range of a `.log` kept open for `sendfile`
//!   (`FileRecords.slice`).
//! - [`segment`]: [`LogSegment`], a `.log` with its three indexes (`LogSegment`).
//! - [`log`]: [`LocalLog`], the segments of a partition directory (`LocalLog`, retention from
//!   `UnifiedLog`).
//! - [`checkpoint`]: Kafka's text checkpoint files (`CheckpointFile`), written atomically.
//! - [`lock`]: [`DirLock`], the exclusive `.lock` of a log or partition directory.
//!
//! Most users want the `seglog` facade (`seglog::Log`), which adds producer state, leader
//! epochs and recovery on top. Used alone, a [`LocalLog`] is a directory of segments:
//!
//! ```
//! use record_format::RecordBatchBuilder;
//! use segment_store::{LocalLog, LogConfig};
//!
//! let dir = tempfile::tempdir()?;
//! let log = LocalLog::open(dir.path(), LogConfig::default(), 0)?;
//! let mut batch = RecordBatchBuilder::new(log.log_end_offset());
//! batch.append(1_700_000_000_000, None, Some(b"v"), &[])?;
//! let appended = log.append(&batch.build())?;
//! assert_eq!((appended.first_offset, appended.last_offset), (0, 0));
//! log.flush(log.log_end_offset())?; // fsync: everything below the recovery point is durable
//! assert_eq!(log.recovery_point(), 1);
//! let fetched = log.read(0, 1 << 20, true)?;
//! assert!(!fetched.records.is_empty());
//! log.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)
)]
#![warn(missing_docs)]

pub mod checkpoint;
pub mod error;
pub mod file_name;
pub mod file_records;
pub mod file_slice;
pub mod index;
pub mod io;
pub mod limits;
pub mod lock;
pub mod log;
#[allow(unsafe_code)]
pub mod mmap;
mod nofollow;
pub mod segment;

pub use checkpoint::{
    validate_topic, EpochEntry, InvalidTopicPartition, LeaderEpochCheckpointFile,
    OffsetCheckpointFile, TopicPartition,
};
pub use error::{CheckpointProblem, IndexCorruption, Result, SegmentError};
pub use file_name::{FileKind, ParsedName, TempSuffix};
pub use file_records::{FileRecords, HeaderIter, ReadOnlyBytes};
pub use file_slice::FileSlice;
pub use index::{
    AbortedTxn, FilePosition, OffsetIndex, OffsetIndexView, OffsetPosition, TimeIndex,
    TimeIndexView, TimestampOffset, TransactionIndex, TxnIndexSearchResult, TxnIndexView,
};
pub use io::{
    index_storage, write_atomically, EntryType, FileHandle, OpenMode, ReadBuf, StdFs, Storage,
};
pub use lock::DirLock;
pub use log::{
    AppendOutcome, ExactFetch, ExactSlice, FetchData, LocalLog, LogBounds, LogConfig, LogEnv,
    SegmentInfo,
};
pub use segment::{
    scan_segment, ChunkChecks, Clock, FetchDataInfo, LogSegment, RecoveryVisitor, RollParams,
    RollReason, SegmentConfig, SegmentContext, SegmentScan, SegmentScanner, SystemClock,
};
