//! `seglog recover DIR [--full] [--json]`: loads a partition directory (or a whole log directory)
//! with recovery's loader, prints what it did, and closes everything cleanly.
//!
//! * A log directory goes through `load_log_dir` exactly as a broker's `LogManager` would: its
//!   `.kafka_cleanshutdown` marker and checkpoints are honoured (and written again on close).
//!   The high watermarks are the caller's (`HighWatermark::Manual`): after an unclean shutdown
//!   `recover` cannot know them, so it leaves those partitions out of
//!   `replication-offset-checkpoint` (the next open re-establishes them) rather than write back
//!   a value that may be stale as if it were known.
//! * A single partition directory goes through `LogLoader::load`, with the clean-shutdown
//!   marker and the checkpoints of its parent directory if it has them (read, never changed), so
//!   a partition that was closed cleanly is not rescanned; otherwise everything is recovered.
//! * `--full` ignores marker and recovery points: every segment is recovered from the first.
//! * `--threads N`: partitions of a log directory recovered in parallel (default: the cores, as
//!   the library's `Config::recovery_threads`).
//!
//! Recovery never deletes: cut bytes and later segments move to `<partition>/quarantine/<n>/`.
//!
//! Exit status: **0 when every partition was loaded and closed, including when recovery cut
//! bytes** (the log is usable again, as after a Kafka broker restart; the cuts are reported and
//! the data kept in quarantine); 1 when the loader refused the data (e.g. an offset that does not
//! fit its segment) and nothing was closed; 2 usage or I/O error (missing directory, not a
//! partition or log directory, unreadable or locked files).
//!
//! The report lists every file the run created or rewrote (`written: <path>` lines before the
//! summary; `filesWritten` in the JSON summary): lock files, checkpoints, the clean-shutdown
//! marker, leader-epoch checkpoints, snapshots, rebuilt indexes, truncated segments.
//!
//! A progress spinner is drawn on stderr only when stderr is a terminal.

use std::collections::BTreeMap;

use segment_store::internals::{file_name, FileKind, TempSuffix};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use recovery::{
    LoadOptions, LogLoader, OfflinePartition, PartitionLogError, ProducerStateWarning,
    RecoveryReport,
};
use serde_json::json;

use crate::cli::dump::json::{emit, ErrorJson};
use crate::cli::partition::{self, Target};
use crate::cli::Status;

/// Arguments of `seglog recover`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "recover",
    about = "Recover a partition or log directory as a broker would at startup, and report what was cut",
    after_help = "Examples:\n  seglog recover /var/kafka-logs/orders-0\n  seglog recover --full --json /var/kafka-logs\n\n\
                  Exit status: 0 loaded and closed (also when bytes were cut: they are reported \
                  and kept in <partition>/quarantine/); 1 the loader refused the data; 2 usage \
                  or I/O error."
)]
pub struct RecoverArgs {
    /// A partition directory (with *.log files) or a log directory (with `<topic>-<partition>`
    /// subdirectories)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Recover every segment from the first, ignoring the clean-shutdown marker and recovery
    /// points
    #[arg(long)]
    pub full: bool,
    /// One JSON object per partition, then a summary
    #[arg(long)]
    pub json: bool,
    /// The time producer expiry is judged against, in ms since the Unix epoch (default: now).
    /// Producers idle for `producer.id.expiration.ms` (1 day) are dropped at load, as Kafka
    /// drops them, and listed
    #[arg(long, value_name = "MS")]
    pub now_ms: Option<i64>,
    /// Partitions of a log directory recovered in parallel (Kafka
    /// `num.recovery.threads.per.data.dir`) [default: the number of cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
}

/// The threads a subcommand's `--threads` asks for: the given number, else the library's default
/// ([`crate::Config::recovery_threads`]: the cores).
pub(crate) fn threads(arg: Option<std::num::NonZeroUsize>) -> usize {
    arg.map_or_else(crate::default_recovery_threads, std::num::NonZeroUsize::get)
}

/// Whether a loader error is about the files' accessibility (exit 2) rather than their content.
pub(crate) fn is_io(e: &PartitionLogError) -> bool {
    match e {
        PartitionLogError::Io { .. } => true,
        PartitionLogError::Segment(s) => {
            s.io_kind().is_some()
                || matches!(
                    s,
                    segment_store::SegmentError::Locked { .. }
                        | segment_store::SegmentError::TruncatedWhileRead { .. }
                )
        }
        PartitionLogError::Snapshot(recovery::SnapshotError::Io { .. }) => true,
        PartitionLogError::Partition { source, .. } => is_io(source),
        _ => false,
    }
}

fn spinner(what: String) -> Option<ProgressBar> {
    if !io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(what);
    pb.enable_steady_tick(Duration::from_millis(100));
    Some(pb)
}

/// The reports, the partitions refused, and the warnings about the log directory itself.
type Recovered = (
    Vec<RecoveryReport>,
    Vec<OfflinePartition>,
    Vec<partition::LogDirFinding>,
);

/// Loads and closes the target; returns the reports.
fn recover(
    target: &Target,
    full: bool,
    now_ms: Option<i64>,
    threads: usize,
) -> Result<Recovered, crate::Error> {
    let clock = partition::clock(now_ms);
    match target {
        Target::Partition(dir) => {
            // A partition of a log directory: recovered alone, as the engine does it, leaving
            // its log directory's marker and checkpoints as they are.
            let mut opts = LoadOptions::for_partition_dir(dir, full);
            opts.config.env.clock = clock;
            let warnings = partition::partition_checkpoint_warnings(dir)
                .iter()
                .map(partition::checkpoint_finding)
                .collect();
            let (log, report) = LogLoader::load(dir, &opts)?;
            log.close()?;
            Ok((vec![report], Vec::new(), warnings))
        }
        Target::LogDir { dir, .. } => {
            let mut config = crate::Config::default()
                .with_clock(clock)
                .with_high_watermark(crate::HighWatermark::Manual)
                .with_recovery_threads(threads);
            config.full_recovery = full;
            let loaded = crate::LogDir::open(dir, config)?;
            let reports = loaded.recovery_reports().to_vec();
            let offline = loaded.offline_partitions().to_vec();
            let warnings = loaded
                .non_canonical_partitions()
                .iter()
                .map(partition::non_canonical_finding)
                .chain(
                    loaded
                        .checkpoint_warnings()
                        .iter()
                        .map(partition::checkpoint_finding),
                )
                .collect();
            loaded.close()?;
            Ok((reports, offline, warnings))
        }
    }
}

/// Runs `seglog recover`.
pub fn run(args: &RecoverArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let target = match partition::detect_or_usage(&args.dir, err) {
        Ok(t) => t,
        Err(status) => return status,
    };
    let count = partition::partitions(&target).len();
    let bar = spinner(format!(
        "recovering {count} partition(s) in {}",
        args.dir.display()
    ));
    let root = std::fs::canonicalize(&args.dir).unwrap_or_else(|_| args.dir.clone());
    let threads = threads(args.threads);
    let before = file_stamps(&root, threads);
    let result = recover(&target, args.full, args.now_ms, threads);
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let (reports, offline, warnings) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: cannot recover {}: {e}", args.dir.display());
            let io = match &e {
                crate::Error::Log(e) => is_io(e),
                _ => true,
            };
            return if io { Status::Usage } else { Status::Damaged };
        }
    };
    let written = changed_files(&before, &file_stamps(&root, threads));
    drop(before);
    let written: Vec<&PathBuf> = written.iter().collect();
    match print(args, &reports, &offline, &warnings, &written, out) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            let _ = writeln!(err, "error: cannot write output: {e}");
            Status::Usage
        }
        // A partition refused and left untouched is damage the operator has to look at.
        _ if !offline.is_empty() => Status::Damaged,
        _ => Status::Success,
    }
}

/// `path` relative to `base` when it is inside it.
fn rel(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn warning_line(w: &ProducerStateWarning) -> String {
    match w {
        ProducerStateWarning::EpochRegression {
            producer_id,
            offset,
            epoch,
            current_epoch,
            is_marker,
        } => format!(
            "offset {offset}: producerId {producer_id} {} with epoch {epoch} below {current_epoch}, \
             accepted under replication",
            if *is_marker { "marker" } else { "batch" }
        ),
        ProducerStateWarning::CoordinatorEpochRegression {
            producer_id,
            offset,
            coordinator_epoch,
            current_coordinator_epoch,
        } => format!(
            "offset {offset}: producerId {producer_id} marker with coordinator epoch \
             {coordinator_epoch} below {current_coordinator_epoch}, accepted under replication"
        ),
    }
}

/// Every file under `dir` with its length and modification time: what recovery created or
/// rewrote is what differs afterwards (metadata only; no file is read). The partition folders
/// of a log directory are walked on `threads` threads.
fn file_stamps(dir: &Path, threads: usize) -> Stamps {
    let mut out = Stamps::new();
    let mut subdirs = Vec::new();
    stamp_dir(dir, &mut out, &mut subdirs);
    let threads = threads.max(1);
    let parts: Vec<Stamps> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<PathBuf> = subdirs.iter().skip(t).step_by(threads).cloned().collect();
                s.spawn(move || {
                    let mut out = Stamps::new();
                    let mut stack = mine;
                    while let Some(d) = stack.pop() {
                        stamp_dir(&d, &mut out, &mut stack);
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    for part in parts {
        out.extend(part);
    }
    out
}

/// A file's length and modification time.
type Stamp = (u64, Option<std::time::SystemTime>);

/// Per folder, its files by name with their stamps (sorted by name): a partition of 100,000
/// segments has 400,000 files, so no path is kept per file, and a segment file's name is kept
/// as what it parses to.
type Stamps = BTreeMap<PathBuf, Vec<(Name, Stamp)>>;

/// A file name, exactly.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Name {
    /// A segment file's name ([`file_name`]: a parsed name formats back to the same name).
    Segment(i64, FileKind, Option<TempSuffix>),
    /// Any other.
    Other(Box<std::ffi::OsStr>),
}

impl Name {
    fn new(name: std::ffi::OsString) -> Name {
        match segment_store::internals::parse_file_name(&name) {
            Ok(p) => Name::Segment(p.base_offset, p.kind, p.temp),
            Err(_) => Name::Other(name.into_boxed_os_str()),
        }
    }

    fn path_in(&self, dir: &Path) -> PathBuf {
        match self {
            Name::Segment(base, kind, temp) => dir.join(file_name(*base, *kind, *temp)),
            Name::Other(name) => dir.join(&**name),
        }
    }
}

/// The files of `dir` into `out`, its folders onto `subdirs`.
fn stamp_dir(dir: &Path, out: &mut Stamps, subdirs: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files = Vec::new();
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            subdirs.push(e.path());
        } else {
            files.push((Name::new(e.file_name()), (meta.len(), meta.modified().ok())));
        }
    }
    files.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    files.shrink_to_fit();
    out.insert(dir.to_path_buf(), files);
}

/// The files of `after` that are not in `before` with the same stamp, in path order.
fn changed_files(before: &Stamps, after: &Stamps) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (dir, files) in after {
        let was = before.get(dir).map_or(&[][..], Vec::as_slice);
        for (name, stamp) in files {
            let same = was
                .binary_search_by(|(n, _)| n.cmp(name))
                .is_ok_and(|i| was[i].1 == *stamp);
            if !same {
                out.push(name.path_in(dir));
            }
        }
    }
    out.sort();
    out
}

fn print(
    args: &RecoverArgs,
    reports: &[RecoveryReport],
    offline: &[OfflinePartition],
    warnings: &[partition::LogDirFinding],
    written: &[&PathBuf],
    out: &mut impl Write,
) -> io::Result<()> {
    let base = &std::fs::canonicalize(&args.dir).unwrap_or_else(|_| args.dir.clone());
    for w in warnings {
        if args.json {
            emit(
                out,
                &json!({"type": "warning", "kind": w.kind, "file": w.file, "message": w.message, "line": w.line}),
            )?;
        } else {
            writeln!(out, "warning: {}: {}", w.file, w.message)?;
        }
    }
    for o in offline {
        let name = o
            .dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if args.json {
            emit(
                out,
                &json!({"type": "offline", "partition": name, "reason": o.reason}),
            )?;
        } else {
            writeln!(out, "{name}: refused, left untouched: {}", o.reason)?;
        }
    }
    let mut bytes_cut = 0;
    let mut moved = 0;
    let mut set_aside = 0;
    for r in reports {
        bytes_cut += r.cut.iter().map(|c| c.bytes).sum::<u64>();
        moved += r.quarantined_segments.len();
        set_aside += r.snapshots_set_aside.len();
        if args.json {
            emit(
                out,
                &json!({
                    "type": "partition",
                    "partition": r.partition,
                    "cleanShutdown": r.had_clean_shutdown,
                    "recoveryPoint": r.recovery_point,
                    "recoveredFrom": r.recovered_from,
                    "segmentsScanned": r.segments_scanned,
                    "batchesScanned": r.batches_scanned,
                    "bytesScanned": r.bytes_scanned,
                    "keptBytes": r.kept_bytes,
                    "cut": r.cut.iter().map(|c| json!({
                        "segment": c.segment,
                        "position": c.position,
                        "bytes": c.bytes,
                        "reason": ErrorJson::from_format(&c.reason),
                        "quarantinedTo": c.quarantined_to.display().to_string(),
                    })).collect::<Vec<_>>(),
                    "quarantinedFiles": r.quarantined_segments.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "snapshotsSetAside": r.snapshots_set_aside.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "quarantineDir": r.quarantine_dir.as_ref().map(|p| p.display().to_string()),
                    "tempFilesHandled": r.temp_files_handled.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "warnings": r.warnings.iter().map(warning_line).collect::<Vec<_>>(),
                    "logStartOffset": r.log_start_offset,
                    "logEndOffset": r.log_end_offset,
                    "producers": r.producers,
                    "expiredProducers": r.expired_producers.iter().map(partition::expired_json).collect::<Vec<_>>(),
                }),
            )?;
            continue;
        }
        writeln!(out, "{r}")?;
        for p in &r.quarantined_segments {
            writeln!(out, "  moved to quarantine: {}", rel(p, base))?;
        }
        for p in &r.snapshots_set_aside {
            writeln!(out, "  corrupt snapshot set aside: {}", rel(p, base))?;
        }
        for p in &r.temp_files_handled {
            writeln!(out, "  leftover handled: {}", rel(p, base))?;
        }
        for w in &r.warnings {
            writeln!(out, "  warning: {}", warning_line(w))?;
        }
        for e in &r.expired_producers {
            writeln!(out, "  {}", partition::expired_line(e))?;
        }
    }
    if args.json {
        return emit(
            out,
            &json!({
                "type": "summary",
                "partitions": reports.len(),
                "partitionsOffline": offline.len(),
                "partitionsWithCuts": reports.iter().filter(|r| !r.cut.is_empty()).count(),
                "bytesCut": bytes_cut,
                "filesQuarantined": moved,
                "snapshotsSetAside": set_aside,
                "filesWritten": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "closed": true,
            }),
        );
    }
    for p in written {
        writeln!(out, "written: {}", rel(p, base))?;
    }
    writeln!(
        out,
        "recovered {} partition(s): {bytes_cut} byte(s) cut, {moved} file(s) moved to quarantine, \
         {set_aside} corrupt snapshot(s) set aside; {}",
        reports.len(),
        if offline.is_empty() {
            "closed cleanly"
        } else {
            "closed (the refused partitions keep their checkpoint entries; the directory is marked \
             cleanly shut down only if it was before)"
        }
    )
}
