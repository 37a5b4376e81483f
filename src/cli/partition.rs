//! What a directory given to `verify`, `producers` or `recover` is (a partition directory or a
//! log directory), and the producer-state line every subcommand prints. Scanning, CRCs, indexes
//! and producer state are the recovery plan's (`recovery::LogLoader::plan`).

use std::io::Write;
use std::path::{Path, PathBuf};

use recovery::SnapshotEntry;
use segment_store::file_name::{
    parse_file_name, parse_partition_dir_name, FileKind, PartitionDirKind, CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
};

use crate::cli::dump::io_msg;
use crate::cli::Status;

/// Files only a Kafka log directory holds.
const LOG_DIR_FILES: [&str; 5] = [
    "meta.properties",
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
];

/// What a directory given on the command line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A partition directory (it holds `*.log` segments).
    Partition(PathBuf),
    /// A log directory: its `<topic>-<partition>` subdirectories, sorted.
    LogDir {
        /// The log directory.
        dir: PathBuf,
        /// Its live partition directories.
        partitions: Vec<PathBuf>,
    },
}

/// [`detect`] for a subcommand: on error the message goes to `err` as `error: …` and the
/// subcommand ends with [`Status::Usage`].
pub fn detect_or_usage(dir: &Path, err: &mut impl Write) -> Result<Target, Status> {
    detect(dir).map_err(|msg| {
        let _ = writeln!(err, "error: {msg}");
        Status::Usage
    })
}

/// Decides whether `dir` is a partition directory (any `*.log`) or a log directory (any
/// `<topic>-<partition>` subdirectory). A partition directory without segments counts when its
/// own name is `<topic>-<partition>`. Errors are one line, for the user.
pub fn detect(dir: &Path) -> Result<Target, String> {
    let shown = dir.display();
    // The directory named on the command line may be a symlink: resolved here, once; nothing
    // below it is followed (see `segment_store::io`).
    let dir =
        &std::fs::canonicalize(dir).map_err(|e| format!("cannot open {shown}: {}", io_msg(&e)))?;
    let meta =
        std::fs::metadata(dir).map_err(|e| format!("cannot open {shown}: {}", io_msg(&e)))?;
    if !meta.is_dir() {
        return Err(format!(
            "{shown} is not a directory: give a partition directory or a log directory"
        ));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {shown}: {}", io_msg(&e)))?;
    let mut has_log = false;
    let mut partitions = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot read {shown}: {}", io_msg(&e)))?;
        let name = e.file_name();
        let path = e.path();
        if path.is_dir() {
            if parse_partition_dir_name(&name).is_ok_and(|p| p.kind == PartitionDirKind::Live) {
                partitions.push(path);
            }
        } else if parse_file_name(&name).is_ok_and(|p| p.kind == FileKind::Log && p.temp.is_none())
        {
            has_log = true;
        }
    }
    if has_log {
        return Ok(Target::Partition(dir.to_path_buf()));
    }
    if !partitions.is_empty() {
        partitions.sort();
        return Ok(Target::LogDir {
            dir: dir.to_path_buf(),
            partitions,
        });
    }
    let own = dir.file_name().unwrap_or_default();
    if parse_partition_dir_name(own).is_ok_and(|p| p.kind == PartitionDirKind::Live) {
        return Ok(Target::Partition(dir.to_path_buf()));
    }
    // A formatted log directory without any partition yet (Kafka's `meta.properties`, its
    // checkpoints or its clean-shutdown marker): a log directory of 0 partitions.
    if LOG_DIR_FILES.iter().any(|f| dir.join(f).is_file()) {
        return Ok(Target::LogDir {
            dir: dir.to_path_buf(),
            partitions,
        });
    }
    Err(format!(
        "{shown} is neither a partition directory (no *.log files) nor a log directory \
         (no <topic>-<partition> subdirectories)"
    ))
}

/// The partitions of a target, in order.
pub fn partitions(target: &Target) -> Vec<PathBuf> {
    match target {
        Target::Partition(p) => vec![p.clone()],
        Target::LogDir { partitions, .. } => partitions.clone(),
    }
}

/// The name shown for a partition directory (its last component).
pub fn partition_name(dir: &Path) -> String {
    dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// One producer as every subcommand prints it: `producerId: 5 producerEpoch: 0 lastSequence: 3
/// lastOffset: 3 offsetDelta: 1 lastTimestamp: … coordinatorEpoch: -1 currentTxnFirstOffset:
/// none`.
/// The clock producer expiry is judged against: `now_ms` if given (`--now-ms`), else the system
/// clock.
pub fn clock(now_ms: Option<i64>) -> std::sync::Arc<dyn segment_store::Clock> {
    match now_ms {
        Some(ms) => std::sync::Arc::new(testkit::ManualClock::new(ms)),
        None => std::sync::Arc::new(segment_store::SystemClock),
    }
}

/// One line for a producer expired at load.
pub fn expired_line(e: &recovery::ExpiredProducer) -> String {
    format!(
        "expiredAtLoad: producerId: {} producerEpoch: {} lastTimestamp: {} idleMs: {} \
         (clock {} ms, producer.id.expiration.ms {})",
        e.producer_id,
        e.producer_epoch,
        e.last_timestamp,
        e.idle_ms(),
        e.now_ms,
        e.expiration_ms
    )
}

/// A producer expired at load as JSON fields.
pub fn expired_json(e: &recovery::ExpiredProducer) -> serde_json::Value {
    serde_json::json!({
        "producerId": e.producer_id,
        "producerEpoch": e.producer_epoch,
        "lastTimestamp": e.last_timestamp,
        "idleMs": e.idle_ms(),
        "nowMs": e.now_ms,
        "expirationMs": e.expiration_ms,
    })
}

/// One line per producer, as `kafka-dump-log.sh` prints a snapshot entry.
pub fn producer_line(e: &SnapshotEntry) -> String {
    let txn = if e.current_txn_first_offset >= 0 {
        e.current_txn_first_offset.to_string()
    } else {
        "none".to_owned()
    };
    format!(
        "producerId: {} producerEpoch: {} lastSequence: {} lastOffset: {} offsetDelta: {} \
         lastTimestamp: {} coordinatorEpoch: {} currentTxnFirstOffset: {txn}",
        e.producer_id,
        e.producer_epoch,
        e.last_sequence,
        e.last_offset,
        e.offset_delta,
        e.timestamp,
        e.coordinator_epoch,
    )
}
