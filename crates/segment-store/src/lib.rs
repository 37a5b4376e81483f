//! Kafka's segment files: the `.log`, memory-mapped offset and time indexes, the transaction
//! index, the multi-segment log and the text checkpoint files. Knows files and offsets, nothing
//! of producers.
//!
//! Source map (modules are private; Kafka classes in brackets):
//! - `file_name`: every naming rule (`LogFileUtils`, `UnifiedLog.parseTopicPartitionName`).
//! - `error`: [`SegmentError`], typed and with the path it concerns.
//! - `io`: the [`Storage`] seam every write path goes through, with the real
//!   [`StdFs`] (the crate `testkit` has a crash-simulating one).
//! - `mmap`: the only module with `unsafe`; `mmap::MmapFile` and its invariants.
//! - `index`: [`OffsetIndex`], [`TimeIndex`] (`AbstractIndex` and subclasses) and
//!   [`TransactionIndex`].
//! - `file_records`: [`FileRecords`], the append-only `.log` (`FileRecords`).
//! - `file_slice`: [`FileSlice`], a range of a `.log` kept open for `sendfile`
//!   (`FileRecords.slice`).
//! - `segment`: [`LogSegment`], a `.log` with its three indexes (`LogSegment`).
//! - `log`: [`LocalLog`], the segments of a partition directory (`LocalLog`, retention from
//!   `UnifiedLog`).
//! - `checkpoint`: Kafka's text checkpoint files (`CheckpointFile`), written atomically.
//! - `lock`: [`DirLock`], the exclusive `.lock` of a log or partition directory.
//!
//! Most users want the `seglog` facade (`seglog::Log`), which adds producer state, leader
//! epochs and recovery on top. Used alone, a [`LocalLog`] is a directory of segments; like
//! Kafka's, it recovers nothing (a directory that needs recovery is refused with
//! [`SegmentError::NeedsRecovery`]; the recovery crate's `LogLoader` recovers it):
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
// Without `internals`, the plumbing only other seglog crates call is unused here; dead code is
// checked with the feature on, as the workspace builds it.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

mod checkpoint;
mod error;
mod file_name;
mod file_records;
mod file_slice;
mod index;
mod io;
mod limits;
mod lock;
mod log;
#[allow(unsafe_code)]
mod mmap;
mod nofollow;
mod segment;

pub use checkpoint::{
    EpochEntry, InvalidTopicPartition, LeaderEpochCheckpointFile, OffsetCheckpointFile,
    TopicPartition, MAX_TOPIC_NAME_LENGTH,
};
pub use error::{CheckpointProblem, IndexCorruption, Result, SegmentError};
pub use file_records::{FileRecords, TimestampAndOffset};
pub use file_slice::FileSlice;
pub use index::{
    AbortedTxn, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset, TransactionIndex,
    TxnIndexSearchResult,
};
pub use io::{EntryType, FileHandle, OpenMode, StdFs, Storage};
pub use lock::DirLock;
pub use log::{
    AppendOutcome, ExactFetch, ExactSlice, FetchData, LocalLog, LogBounds, LogConfig, LogEnv,
    SegmentInfo, SegmentRef,
};
pub use segment::{
    Clock, FetchDataInfo, LogSegment, RollParams, RollReason, SegmentConfig, SystemClock,
};

/// Plumbing that seglog's other crates share with this one (file names, atomic writes, index
/// views, the recovery scan, maps). Behind the `internals` feature; not part of the supported
/// API and free to change.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::checkpoint::{decode, validate_topic};
    pub use crate::file_name::{
        file_name, parse_file_name, parse_partition_dir_name, quarantine_file_name,
        segment_file_path, FileKind, ParsedName, PartitionDirKind, TempSuffix,
        CHECKPOINT_TMP_SUFFIX, CLEANER_OFFSET_CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE,
        DELETE_DIR_SUFFIX, LEADER_EPOCH_CHECKPOINT_FILE, LOCK_FILE_NAME,
        LOG_START_OFFSET_CHECKPOINT_FILE, PARTITION_METADATA_FILE, PRODUCER_SNAPSHOT_FILE_SUFFIX,
        RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
    };
    pub use crate::file_records::{HeaderIter, ReadOnlyBytes, MAP_MIN_BYTES};
    pub use crate::index::txn::ENTRY_SIZE as TXN_INDEX_ENTRY_SIZE;
    pub use crate::index::{FilePosition, OffsetIndexView, TimeIndexView, TxnIndexView};
    pub use crate::io::{
        copy_range_through_handles, create_dir_all_durably, index_storage, partial_path,
        write_atomically, ReadBuf,
    };
    pub use crate::limits::{open_files, DESCRIPTORS_PER_SEGMENT};
    pub use crate::log::MAX_OPEN_INACTIVE_SEGMENTS;
    pub use crate::mmap::{huge_pages, GuardedMap, HugePageAlloc, MmapFile};
    pub use crate::segment::{
        scan_segment, RecoveryVisitor, SegmentContext, SegmentScan, SegmentScanner,
    };
}
