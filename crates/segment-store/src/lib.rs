//! Kafka's segment files: the `.log`, memory-mapped offset and time indexes, the transaction
//! index, the multi-segment log and the text checkpoint files. Knows files and offsets, nothing
//! of producers.
//!
//! Module map (Kafka classes in brackets):
//! - [`file_name`]: every naming rule (`LogFileUtils`, `UnifiedLog.parseTopicPartitionName`).
//! - [`error`]: [`SegmentError`], typed and with the path it concerns.
//! - [`io`]: the [`io::Storage`] seam every write path goes through, with the real
//!   [`io::StdFs`] and the crash-simulating [`io::SimulatedFs`].
//! - [`mmap`]: the only module with `unsafe`; [`mmap::MmapFile`] and its invariants.
//! - [`index`]: [`OffsetIndex`], [`TimeIndex`] (`AbstractIndex` and subclasses) and
//!   [`TransactionIndex`].
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
pub mod index;
pub mod io;
pub mod lock;
#[allow(unsafe_code)]
pub mod mmap;

pub use checkpoint::{
    CheckpointFile, EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile, TopicPartition,
};
pub use error::{CheckpointProblem, IndexCorruption, Result, SegmentError};
pub use file_name::{FileKind, ParsedName, TempSuffix};
pub use index::{
    AbortedTxn, FilePosition, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset,
    TransactionIndex, TxnIndexSearchResult,
};
pub use io::{FileHandle, OpenMode, SimulatedFs, StdFs, Storage, TornWrite};
pub use lock::DirLock;
pub use mmap::MmapFile;
