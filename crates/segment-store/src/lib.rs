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
//! - [`segment`]: [`LogSegment`], a `.log` with its three indexes (`LogSegment`).
//! - [`log`]: [`LocalLog`], the segments of a partition directory (`LocalLog`, retention from
//!   `UnifiedLog`).
//! - [`checkpoint`]: Kafka's text checkpoint files (`CheckpointFile`), written atomically.
//! - [`lock`]: [`DirLock`], the exclusive `.lock` of a log or partition directory.
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
pub mod index;
pub mod io;
pub mod lock;
pub mod log;
#[allow(unsafe_code)]
pub mod mmap;
pub mod segment;

pub use checkpoint::{EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile, TopicPartition};
pub use error::{CheckpointProblem, IndexCorruption, Result, SegmentError};
pub use file_name::{FileKind, ParsedName, TempSuffix};
pub use file_records::{FileRecords, HeaderIter, ReadOnlyBytes};
pub use index::{
    AbortedTxn, FilePosition, OffsetIndex, OffsetIndexView, OffsetPosition, TimeIndex,
    TimeIndexView, TimestampOffset, TransactionIndex, TxnIndexSearchResult, TxnIndexView,
};
pub use io::{write_atomically, FileHandle, OpenMode, StdFs, Storage};
pub use lock::DirLock;
pub use log::{AppendOutcome, FetchData, LocalLog, LogConfig, LogEnv, SegmentInfo};
pub use mmap::MmapFile;
pub use segment::{
    scan_segment, Clock, FetchDataInfo, LogSegment, RecoveryVisitor, RollParams, RollReason,
    SegmentConfig, SegmentContext, SegmentScan, SegmentScanner, SystemClock,
};
