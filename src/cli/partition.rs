//! What a directory given to `verify`, `producers` or `recover` is (a partition directory or a
//! log directory), and the producer-state line every subcommand prints. Scanning, CRCs, indexes
//! and producer state are the recovery plan's (`recovery::LogLoader::plan`).

use std::io::Write;
use std::path::{Path, PathBuf};

use recovery::{CheckpointWarning, NonCanonicalDir, RefusalKind, RefusedDir, SnapshotEntry};
use segment_store::internals::{
    parse_file_name, parse_partition_dir_name, FileKind, PartitionDirKind, CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_store::EntryType;

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
        /// Folders refused for their names (not a partition's, or two for one partition):
        /// findings, never loaded.
        refused: Vec<RefusedDir>,
        /// Partitions whose folder name is not the canonical one: loaded, with a warning.
        non_canonical: Vec<NonCanonicalDir>,
    },
}

/// A finding about a log directory itself (not one partition's): a folder refused for its
/// name, a non-canonical partition folder name, an unreadable checkpoint. `verify` prints each
/// as a finding; `recover` prints the same from the loaded `LogDir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirFinding {
    /// `badPartitionDir`, `duplicatePartitionDir`, `symlinkedPartitionDir`,
    /// `nonCanonicalPartitionDir`, `unreadableCheckpoint`.
    pub kind: &'static str,
    /// The folder or file concerned (name only).
    pub file: String,
    /// What is wrong and what recovery does, in words.
    pub message: String,
    /// The 1-based line of an unreadable checkpoint's problem.
    pub line: Option<usize>,
}

fn name_of(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The finding for a refused folder.
pub fn refused_finding(r: &RefusedDir) -> LogDirFinding {
    let kind = match r.kind {
        RefusalKind::Symlink => "symlinkedPartitionDir",
        RefusalKind::BadName => "badPartitionDir",
        RefusalKind::Duplicate => "duplicatePartitionDir",
    };
    LogDirFinding {
        kind,
        file: name_of(&r.offline.dir),
        message: format!("refused, left untouched: {}", r.offline.reason),
        line: None,
    }
}

/// The finding for a partition loaded from a non-canonical folder name.
pub fn non_canonical_finding(n: &NonCanonicalDir) -> LogDirFinding {
    LogDirFinding {
        kind: "nonCanonicalPartitionDir",
        file: name_of(&n.dir),
        message: n.to_string(),
        line: None,
    }
}

/// The finding for an unreadable log-directory checkpoint.
pub fn checkpoint_finding(w: &CheckpointWarning) -> LogDirFinding {
    LogDirFinding {
        kind: "unreadableCheckpoint",
        file: name_of(&w.path),
        message: w.to_string(),
        line: w.line,
    }
}

/// The log-directory findings of a target, read-only (what `recover` would warn about or
/// refuse): for a log directory its refused and non-canonical folders and its unreadable
/// checkpoints; for a partition directory the unreadable checkpoints of its parent that
/// recovery reads for it (see `recovery::LoadOptions::for_partition_dir`).
pub fn log_dir_findings(target: &Target) -> Vec<LogDirFinding> {
    let env = segment_store::LogEnv::default();
    match target {
        Target::LogDir {
            dir,
            refused,
            non_canonical,
            ..
        } => refused
            .iter()
            .map(refused_finding)
            .chain(non_canonical.iter().map(non_canonical_finding))
            .chain(
                recovery::read_log_dir_checkpoints(&env, dir)
                    .warnings
                    .iter()
                    .map(checkpoint_finding),
            )
            .collect(),
        Target::Partition(dir) => partition_checkpoint_warnings(dir)
            .iter()
            .map(checkpoint_finding)
            .collect(),
    }
}

/// The unreadable checkpoints of the log directory holding the partition directory `dir`, when
/// recovery reads them for it (its name is a partition's).
pub fn partition_checkpoint_warnings(dir: &Path) -> Vec<CheckpointWarning> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Vec::new();
    };
    if parse_partition_dir_name(name).is_err() {
        return Vec::new();
    }
    recovery::read_log_dir_checkpoints(&segment_store::LogEnv::default(), parent).warnings
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
    let mut typed = Vec::new();
    for e in entries {
        let e = e.map_err(|e| format!("cannot read {shown}: {}", io_msg(&e)))?;
        let name = e.file_name();
        // The entry itself, not followed.
        let found = match e.file_type() {
            Ok(t) if t.is_symlink() => EntryType::Symlink,
            Ok(t) if t.is_dir() => EntryType::Dir,
            Ok(t) if t.is_file() => EntryType::File,
            _ => EntryType::Other,
        };
        if !e.path().is_dir()
            && parse_file_name(&name).is_ok_and(|p| p.kind == FileKind::Log && p.temp.is_none())
        {
            has_log = true;
        }
        typed.push((name, found));
    }
    if has_log {
        return Ok(Target::Partition(dir.to_path_buf()));
    }
    // The names as loading reads them (`recovery::scan_log_dir`); a partition directory that
    // is a symlink is still checked (its own check refuses it).
    let scan = recovery::scan_log_dir(dir, &typed);
    let mut partitions: Vec<PathBuf> = scan.partitions.into_iter().map(|(_, p)| p).collect();
    let mut refused = Vec::new();
    for r in scan.refused {
        if r.kind == RefusalKind::Symlink && r.offline.dir.is_dir() {
            partitions.push(r.offline.dir);
        } else {
            refused.push(r);
        }
    }
    if !partitions.is_empty() || refused.iter().any(|r| r.kind == RefusalKind::Duplicate) {
        partitions.sort();
        return Ok(Target::LogDir {
            dir: dir.to_path_buf(),
            partitions,
            refused,
            non_canonical: scan.non_canonical,
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
            refused,
            non_canonical: scan.non_canonical,
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
