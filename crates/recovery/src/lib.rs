//! Producer state, snapshots, log loading, and the KIP-1279 `MIRROR_PID_RESET` barrier.
//!
//! * `producer_state`: Kafka's `ProducerStateManager` rules (epochs, sequences, duplicates,
//!   transactions, LSO, expiry) over [`BatchSummary`] inputs;
//! * `audit`: the producer-id collision audit behind `seglog producers --audit`;
//! * `barrier`: what a `MIRROR_PID_RESET` batch does to producer state, and why;
//! * `snapshot`: version-1 `.snapshot` files, byte for byte, and loading with fallback;
//! * `log`: the partition log (Kafka `UnifiedLog`, producer side): leader/follower appends,
//!   reads bounded by HW/LSO, the consumer view, truncation, close;
//! * `loader`: Kafka `LogLoader`/`LogManager` loading, with recovery that quarantines instead
//!   of deleting;
//! * `leader_epoch`: the leader-epoch cache and its checkpoint;
//! * `mirror`: KIP-1279 mirror partition states, the `mirror-state` file, and the durable
//!   STOPPING steps that write the barrier;
//! * `error`: typed errors.
//!
//! Kafka counterparts: `ProducerStateManager`, `LogLoader`, `UnifiedLog` (producer side),
//! `LeaderEpochFileCache`, and KIP-1279's mirror partition states. Most users want the
//! `seglog` facade (`seglog::Log`, `seglog::LogDir`) built on this crate. The loader's main
//! path, on its own: decide (read only), then act.
//!
//! ```
//! use recovery::{AppendOrigin, LoadOptions, LogLoader};
//! use record_format::RecordBatchBuilder;
//!
//! let tmp = tempfile::tempdir()?;
//! let dir = tmp.path().join("orders-0");
//! let (mut log, _) = LogLoader::load(&dir, &LoadOptions::default())?;
//! let mut batch = RecordBatchBuilder::new(0).producer(7, 0, 0);
//! batch.append(1_700_000_000_000, None, Some(b"v"), &[])?;
//! log.append_as_leader(&batch.build(), 0, AppendOrigin::Client)?;
//! log.flush()?;
//! drop(log); // no close: as after a crash
//!
//! // What recovery would do, without changing a byte...
//! let plan = LogLoader::plan(&dir, &LoadOptions::default())?;
//! assert!(!plan.changes_data());
//! assert_eq!(plan.log_end_offset, 1);
//! // ...then doing it.
//! let (log, report) = LogLoader::apply(plan)?;
//! assert!(report.cut.is_empty());
//! assert_eq!(log.producer_state().last_entry(7).map(|e| e.last_seq()), Some(0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! No `unsafe`, no panics on any input.
#![forbid(unsafe_code)]
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic,
    clippy::expect_used
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::expect_used
    )
)]
#![warn(missing_docs)]
// Without `internals`, the plumbing only other seglog crates call is unused here; dead code is
// checked with the feature on, as the workspace builds it.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

mod audit;
mod cleaner;
mod config;
mod error;
mod leader_epoch;
mod loader;
mod log;
mod log_manager;
mod mirror;
mod plan;
mod producer_state;
mod snapshot;
mod summary;

pub use audit::{audit_batches, AuditFinding, AuditKind, ProducerAudit, Severity};
pub use cleaner::{CleanReport, CleanerConfig, CleanerError};
pub use config::{
    default_recovery_threads, CloseSync, Config, DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
};
pub use error::{
    CorruptReason, InvalidBatchReason, InvalidControlReason, ProducerStateError, SequenceViolation,
    SnapshotError,
};
pub use leader_epoch::{
    EpochHistory, LeaderEpochFileCache, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET,
};
pub use loader::{CutInfo, LoadOptions, RecoveryReport};
pub use log::{
    consume, ClosedLog, ConsumedRecord, ConsumerReader, FetchIsolation, FetchResult, FetchSlices,
    HighWatermark, IsolationLevel, LogAppendInfo, LogFlusher, LogReader, PartitionLog,
    PartitionLogConfig, PartitionLogError, ReadState, RecordIter, EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP, MAX_TIMESTAMP, UNKNOWN_HIGH_WATERMARK,
};
pub use log_manager::{
    load_log_dir, read_log_dir_checkpoints, scan_log_dir, CheckpointWarning, LoadedLogDir,
    LogDirCheckpoints, LogDirScan, NonCanonicalDir, OfflinePartition, RefusalKind, RefusedDir,
    REMOTE_LOG_INDEX_CACHE_DIR,
};
pub use mirror::{
    alignment_point, fenced_mirror_epoch, EpochEndOffsets, LastMirrorEpoch, MirrorError, MirrorLog,
    MirrorPartitionState, MirrorStateError, MirrorStateFile, MirrorStateKind, MirrorStateStore,
    MirroredLog, StopOutcome, StopPolicy, StoppingStep, MIRROR_EPOCH_FENCE, MIRROR_EPOCH_MARGIN,
};
pub use plan::{
    IndexFinding, IndexProblem, LeftoverAction, LogLoader, RecoveryPlan, SegmentPlan, SnapshotFate,
    SnapshotFinding, SnapshotOp, SnapshotPhase,
};
pub use producer_state::{
    AbortedTxnRecord, AppendOrigin, AppliedBatches, BarrierOutcome, BatchMetadata, CompletedTxn,
    DuplicateBatch, ExpiredProducer, ProducerAppendInfo, ProducerStateEntry, ProducerStateManager,
    ProducerStateManagerConfig, ProducerStateUpdate, ProducerStateWarning, TxnMetadata,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS, NUM_BATCHES_TO_RETAIN,
};
pub use snapshot::{
    read_snapshot, write_snapshot, SnapshotEntry, SnapshotFile, SnapshotIo, StdIo, StorageIo,
};
pub use summary::{BatchSummary, ControlInfo, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE};

/// Plumbing that seglog's other crates share with this one (the cleaner's passes and schedule,
/// snapshot and mirror-state codecs, sequence arithmetic, the plan's test hooks). Behind the
/// `internals` feature; not part of the supported API and free to change.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    /// The log cleaner's passes and schedule.
    pub mod cleaner {
        pub use crate::cleaner::*;
        /// When a log is due for cleaning, and the I/O throttle.
        pub mod schedule {
            pub use crate::cleaner::schedule::*;
        }
    }
    pub use crate::mirror::{
        decode_mirror_state, encode_mirror_state, last_mirror_epoch_of, MalformedReason, MirrorOp,
        MIRROR_STATE_FILE,
    };
    pub use crate::plan::{work, MAX_ENTRY_FINDINGS};
    pub use crate::producer_state::BatchRing;
    pub use crate::producer_state::{decrement_sequence, in_sequence, increment_sequence};
    pub use crate::snapshot::{
        decode_snapshot, delete_snapshots_before_with, encode_snapshot,
        latest_snapshot_at_or_below, list_snapshots, list_snapshots_with, parse_snapshot_file_name,
        snapshot_file_name, too_large_size, MAX_SNAPSHOT_BYTES,
    };
}
