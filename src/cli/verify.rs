//! `seglog verify DIR [--json]`: the dry run of `seglog recover --full` on a partition directory
//! (or every partition of a log directory), **read-only**: it prints the recovery plan
//! (`recovery::LogLoader::plan_audited`) — nothing is locked, mapped, created, renamed or
//! written (a test compares every byte and the file list before and after). The checks are the
//! library's; this module only words them.
//!
//! Findings, per partition, in this order:
//! * segments: the cut recovery would make (position, bytes and typed reason), a batch whose
//!   offset does not fit its segment or a control batch that does not decode (recovery refuses
//!   the partition), and how many later segments recovery would move to quarantine;
//! * indexes: Kafka's sanity checks of `.index`/`.timeindex`/`.txnindex`, `.index` entries past
//!   the end of the `.log`, not on a batch boundary, or naming another offset than the batch
//!   there, `.timeindex` entries past the last offset, `.txnindex` files with a partial entry;
//! * snapshots: producer snapshots that do not read back and what recovery does with them, and
//!   snapshots beyond the log end (recovery moves them to quarantine or deletes them);
//! * producer state: the collision audit's findings of severity error or warning.
//!
//! `--json` prints one `finding` object per finding, then per partition the fields `recover
//! --json` prints (`logStartOffset`, `logEndOffset`, `producers`, each cut as `segment`,
//! `position`, `bytes`), then a summary.
//!
//! `--threads N` checks the partitions of a log directory on N threads (default: the cores, as
//! `Config::recovery_threads`); the output is in partition order whatever finishes first.
//!
//! Exit status: 0 nothing found; 1 problems found (each printed); 2 usage or I/O error.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use recovery::LeftoverAction;
use recovery::{
    IndexFinding, IndexProblem, LoadOptions, LogLoader, PartitionLogError, RecoveryPlan, Severity,
    SnapshotFate,
};
use segment_store::internals::TXN_INDEX_ENTRY_SIZE as TXN_ENTRY_SIZE;
use segment_store::internals::{
    FileKind, CLEANER_OFFSET_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
};
use segment_store::SegmentError;
use serde_json::json;

use crate::cli::dump::json::{emit, ErrorJson};
use crate::cli::partition::{self, partition_name};
use crate::cli::recover::is_io;
use crate::cli::Status;

/// Arguments of `seglog verify`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "verify",
    about = "Check a partition or log directory the way recovery would, without changing anything",
    after_help = "Examples:\n  seglog verify /var/kafka-logs/orders-0\n  seglog verify --json /var/kafka-logs\n\n\
                  Exit status: 0 clean; 1 problems found; 2 usage or I/O error."
)]
pub struct VerifyArgs {
    /// A partition directory (with *.log files) or a log directory (with `<topic>-<partition>`
    /// subdirectories)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
    /// Partitions of a log directory checked in parallel (printed in order) [default: the
    /// number of cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `cut`, `offsetOutOfRange`, `quarantine`, `indexSanity`, `indexBeyondLog`,
    /// `indexNotBatchBoundary`, `indexOffsetMismatch`, `timeIndexBeyondLog`, `txnIndexPartial`,
    /// `corruptSnapshot`, `snapshotBeyondLogEnd`, `producerState`, `unreadableBatch`,
    /// `swapCompleted`, `swapReplaced`, `straySwap`, `swapIndexRebuilt`, `cleanerLeftover`,
    /// `deletedLeftover`, `cleanerCheckpointOutOfRange`, ...
    pub kind: &'static str,
    /// The file concerned (name only), or `producer state`.
    pub file: String,
    /// What is wrong, in words.
    pub message: String,
    /// Extra JSON fields.
    pub detail: serde_json::Value,
}

/// What was checked in one partition.
#[derive(Debug, Clone)]
pub struct PartitionCheck {
    /// Partition directory name.
    pub partition: String,
    /// Segments read.
    pub segments: usize,
    /// Valid batches.
    pub batches: usize,
    /// Log start offset recovery would leave.
    pub log_start_offset: i64,
    /// Log end offset recovery would leave (`None`: recovery refuses the partition).
    pub log_end_offset: Option<i64>,
    /// Last stable offset recovery would leave.
    pub last_stable_offset: Option<i64>,
    /// Producers recovery would keep.
    pub producers: usize,
    /// Each cut: `segment`, `position`, `bytes`.
    pub cuts: Vec<serde_json::Value>,
    /// Problems, in check order.
    pub findings: Vec<Finding>,
    /// The log directory holds a clean-shutdown marker: `seglog recover` (as Kafka's broker at
    /// startup) then leaves the sealed segments unread, so what is found in them stays; `seglog
    /// recover --full` recovers every segment, as the findings say.
    pub shut_down_cleanly: bool,
}

impl PartitionCheck {
    /// A partition that could not be checked: nothing read, `finding` says why.
    fn refused(partition: String, finding: Finding) -> Self {
        PartitionCheck {
            partition,
            segments: 0,
            batches: 0,
            log_start_offset: 0,
            log_end_offset: None,
            last_stable_offset: None,
            producers: 0,
            cuts: Vec::new(),
            findings: vec![finding],
            shut_down_cleanly: false,
        }
    }
}

fn finding(kind: &'static str, file: &str, message: String, detail: serde_json::Value) -> Finding {
    Finding {
        kind,
        file: file.to_owned(),
        message,
        detail,
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn index_name(base: i64, kind: FileKind) -> String {
    segment_store::internals::file_name(base, kind, None)
}

/// The words for one index finding.
fn index_finding(base: i64, f: &IndexFinding) -> Finding {
    let name = index_name(base, f.kind);
    match &f.problem {
        IndexProblem::Sanity(problem) => finding(
            "indexSanity",
            &name,
            format!("corrupt index: {problem} (recovery rebuilds the index)"),
            json!({"segment": base}),
        ),
        IndexProblem::EntryBeyondLog {
            entry,
            offset,
            position,
            log_size,
        } => finding(
            "indexBeyondLog",
            &name,
            format!(
                "entry {entry} (offset {offset}, position {position}) points past the end of the \
                 log ({log_size} bytes)"
            ),
            json!({"entry": entry, "offset": offset, "position": position}),
        ),
        IndexProblem::NotBatchBoundary {
            entry,
            offset,
            position,
        } => finding(
            "indexNotBatchBoundary",
            &name,
            format!(
                "entry {entry} (offset {offset}, position {position}) is not at a batch boundary"
            ),
            json!({"entry": entry, "offset": offset, "position": position}),
        ),
        IndexProblem::OffsetMismatch {
            entry,
            index_offset,
            log_offset,
            position,
        } => finding(
            "indexOffsetMismatch",
            &name,
            format!(
                "entry {entry}: index offset {index_offset}, log offset {log_offset} at position \
                 {position}"
            ),
            json!({"entry": entry, "offset": index_offset, "position": position}),
        ),
        IndexProblem::TimeEntryBeyondLog {
            entry,
            timestamp,
            offset,
            last_offset,
        } => finding(
            "timeIndexBeyondLog",
            &name,
            format!(
                "entry {entry} (timestamp {timestamp}, offset {offset}) is past the last offset \
                 {last_offset} of the log"
            ),
            json!({"entry": entry, "offset": offset, "timestamp": timestamp}),
        ),
        IndexProblem::OutOfOrderNotChecked { entries } => finding(
            "indexOutOfOrder",
            &name,
            format!(
                "the positions of its {entries} entries are not in order; entries not checked one \
                 by one against the log"
            ),
            json!({"segment": base, "entries": entries}),
        ),
        IndexProblem::MoreEntryProblems { count } => finding(
            "indexMoreEntryProblems",
            &name,
            format!(
                "{count} more entry problems in this segment's indexes, not listed (the first {} \
                 of each check are)",
                recovery::internals::MAX_ENTRY_FINDINGS
            ),
            json!({"segment": base, "count": count}),
        ),
        IndexProblem::TxnPartialEntry { len } => finding(
            "txnIndexPartial",
            &name,
            format!("{len} bytes is not a whole number of {TXN_ENTRY_SIZE}-byte entries"),
            json!({"segment": base, "bytes": len}),
        ),
    }
}

fn fate_words(fate: SnapshotFate) -> &'static str {
    match fate {
        SnapshotFate::Kept => "recovery does not read it",
        SnapshotFate::SetAside => "recovery sets it aside",
        SnapshotFate::Rewritten => "recovery replaces it",
        SnapshotFate::Deleted => "recovery deletes it",
        SnapshotFate::Quarantined => "recovery moves it to quarantine",
    }
}

/// The findings about `.swap` files: a cleaner's completed output, the segment files it replaces,
/// a stray one.
fn swap_findings(plan: &RecoveryPlan, findings: &mut Vec<Finding>) {
    let completed = plan
        .leftovers
        .iter()
        .any(|a| matches!(a, LeftoverAction::Rename { .. }));
    for a in &plan.leftovers {
        let name = file_name(a.path());
        match a {
            LeftoverAction::Rename { to, .. } => findings.push(finding(
                "swapCompleted",
                &name,
                format!(
                    "a cleaner's completed output: recovery renames it into place as {}",
                    file_name(to)
                ),
                json!({"to": file_name(to)}),
            )),
            // A live segment file (no temporary suffix) removed: replaced by the completed swap.
            LeftoverAction::Remove { path, .. } if completed && is_live_segment_file(path) => {
                findings.push(finding(
                    "swapReplaced",
                    &name,
                    "replaced by a cleaner's completed output: recovery removes it".to_owned(),
                    json!({}),
                ))
            }
            LeftoverAction::Remove { path, kind } => {
                if let Some(f) = interrupted_leftover(path, *kind) {
                    findings.push(f);
                }
            }
            LeftoverAction::Quarantine { .. } => findings.push(finding(
                "straySwap",
                &name,
                "stray swap (not CRC-valid throughout, or short of the offsets of the segments it \
                 would replace): recovery moves it to quarantine and keeps the log"
                    .to_owned(),
                json!({}),
            )),
            LeftoverAction::SetAside { .. } => findings.push(finding(
                "swapReplaced",
                &name,
                "a swap is renamed over it: recovery moves it to quarantine first".to_owned(),
                json!({}),
            )),
        }
    }
}

/// The finding about a leftover of an interrupted operation that recovery deletes: a cleaning
/// pass's output before its commit point (`.cleaned`, or a `.swap` from the same pass as a
/// `.cleaned`), a segment deletion (`.deleted`), an offset or time index of a cleaner's completed
/// output (rebuilt from its `.log`, as Kafka does).
fn interrupted_leftover(path: &Path, kind: FileKind) -> Option<Finding> {
    use segment_store::internals::TempSuffix;
    let name = file_name(path);
    let parsed = segment_store::internals::parse_file_name(path.file_name()?).ok()?;
    let (what, detail) = match parsed.temp? {
        TempSuffix::Cleaned => (
            "cleanerLeftover",
            "an interrupted cleaning pass's output (before its commit point, the rename to \
             `.swap`): recovery deletes it; the segments it was made from are intact",
        ),
        TempSuffix::Swap if matches!(kind, FileKind::Index | FileKind::TimeIndex) => (
            "swapIndexRebuilt",
            "the index of a cleaner's completed output: recovery deletes it and rebuilds the \
             index from the segment, as Kafka does",
        ),
        TempSuffix::Swap => (
            "cleanerLeftover",
            "a cleaning pass's output from the same pass as a `.cleaned` file, so before its \
             commit point: recovery deletes it; the segments it was made from are intact",
        ),
        TempSuffix::Deleted => (
            "deletedLeftover",
            "a segment file whose deletion was interrupted: recovery deletes it",
        ),
    };
    Some(finding(what, &name, detail.to_owned(), json!({})))
}

/// The finding about the partition's `cleaner-offset-checkpoint` entry when it is below the log
/// start or past the log end: the cleaner starts from the log start instead
/// ([`recovery::internals::cleaner::first_dirty_offset`], Kafka's reset of the first dirty offset).
fn cleaner_checkpoint_finding(dir: &Path, plan: &RecoveryPlan) -> Option<Finding> {
    let parsed = segment_store::internals::parse_partition_dir_name(dir.file_name()?).ok()?;
    let tp = segment_store::TopicPartition::new(parsed.topic, parsed.partition);
    let storage = &plan.options.config.env.storage;
    let checkpointed =
        recovery::internals::cleaner::read_cleaner_checkpoint(storage, dir, &tp).ok()??;
    let (start, reset) = recovery::internals::cleaner::first_dirty_offset(
        Some(checkpointed),
        plan.log_start_offset,
        plan.log_end_offset,
    );
    reset.then(|| {
        finding(
            "cleanerCheckpointOutOfRange",
            CLEANER_OFFSET_CHECKPOINT_FILE,
            format!(
                "the cleaner's checkpointed offset {checkpointed} is outside the log [{}, {}]:                  the next cleaning pass starts from the log start, {start}, as Kafka's does",
                plan.log_start_offset, plan.log_end_offset
            ),
            json!({"offset": checkpointed, "logStartOffset": plan.log_start_offset,
                   "logEndOffset": plan.log_end_offset}),
        )
    })
}

/// Whether `path` is named as a live segment file (a `.log` or an index, no temporary suffix).
fn is_live_segment_file(path: &Path) -> bool {
    segment_store::internals::parse_file_name(path.file_name().unwrap_or_default())
        .is_ok_and(|p| p.temp.is_none() && p.kind != FileKind::Snapshot)
}

/// The findings of a plan, in check order.
fn plan_findings(plan: &RecoveryPlan) -> Vec<Finding> {
    let mut findings = Vec::new();
    swap_findings(plan, &mut findings);
    let cuts = plan.cuts();
    for seg in &plan.segments {
        if let Some(c) = cuts.iter().find(|c| c.segment == seg.base_offset) {
            let name = index_name(seg.base_offset, FileKind::Log);
            let next = plan
                .scans
                .iter()
                .find(|s| s.base_offset == seg.base_offset)
                .map_or(seg.base_offset, |s| s.next_offset());
            findings.push(finding(
                "cut",
                &name,
                format!(
                    "recovery would cut {} bytes at byte {} (after offset {}): {}",
                    c.bytes,
                    c.position,
                    next - 1,
                    c.reason.kind
                ),
                json!({
                    "segment": c.segment,
                    "position": c.position,
                    "bytes": c.bytes,
                    "reason": ErrorJson::from_format(&c.reason),
                }),
            ));
        }
        for f in &seg.index_findings {
            findings.push(index_finding(seg.base_offset, f));
        }
    }
    let later = plan.quarantined_segments.len();
    if let Some(c) = cuts.last().filter(|_| later > 0) {
        findings.push(finding(
            "quarantine",
            &index_name(c.segment, FileKind::Log),
            format!("recovery stops here: the {later} later segment(s) would move to quarantine"),
            json!({"laterSegments": later}),
        ));
    }
    if plan.start_at_checkpoint {
        let start = plan.options.log_start_offset;
        findings.push(finding(
            "logStartPastEnd",
            LOG_START_OFFSET_CHECKPOINT_FILE,
            format!(
                "the checkpointed log start offset {start} is past the end of the log: recovery \
                 moves the whole log to quarantine and starts the partition empty at {start}"
            ),
            json!({"logStartOffset": start}),
        ));
    }
    for s in &plan.snapshot_findings {
        let name = file_name(&s.path);
        match &s.error {
            Some(e) => findings.push(finding(
                "corruptSnapshot",
                &name,
                format!("corrupt snapshot ({}): {e}", fate_words(s.fate)),
                json!({"offset": s.offset}),
            )),
            None => findings.push(finding(
                "snapshotBeyondLogEnd",
                &name,
                format!(
                    "snapshot at offset {} is beyond the log end offset {} ({})",
                    s.offset,
                    plan.log_end_offset,
                    fate_words(s.fate)
                ),
                json!({"offset": s.offset, "logEndOffset": plan.log_end_offset}),
            )),
        }
    }
    for f in plan.audit.iter().flatten() {
        if f.severity() <= Severity::Warning {
            findings.push(finding(
                "producerState",
                "producer state",
                format!("{}: {f}", f.severity()),
                json!({"severity": f.severity().to_string(), "offset": f.offset, "producerId": f.producer_id}),
            ));
        }
    }
    findings
}

/// The finding for a partition recovery refuses (the plan fails as loading would).
fn refusal(e: &PartitionLogError) -> Finding {
    match e {
        PartitionLogError::Segment(SegmentError::OffsetOverflow {
            path,
            offset,
            base_offset,
        }) => finding(
            "offsetOutOfRange",
            &file_name(path),
            format!(
                "a batch ends at offset {offset}, which does not fit a segment with base offset \
                 {base_offset}: recovery would refuse the partition"
            ),
            json!({"segment": base_offset, "offset": offset}),
        ),
        PartitionLogError::Segment(SegmentError::Format { path, error }) => finding(
            "unreadableBatch",
            &file_name(path),
            format!("recovery would refuse the partition: {e}"),
            json!({"reason": ErrorJson::from_format(error)}),
        ),
        PartitionLogError::InvalidRecords(error) => finding(
            "unreadableBatch",
            "log",
            format!("a batch does not decode, recovery would refuse the partition: {error}"),
            json!({"reason": ErrorJson::from_format(error)}),
        ),
        _ => finding(
            "refused",
            "partition",
            format!("recovery would refuse the partition: {e}"),
            json!({}),
        ),
    }
}

/// Checks the partition in `dir` (read-only): the plan of a full recovery.
pub fn check_partition(dir: &Path) -> Result<PartitionCheck, PartitionLogError> {
    let opts = LoadOptions::for_partition_dir(dir, true);
    let partition = partition_name(dir);
    match LogLoader::plan_audited(dir, &opts) {
        Ok(plan) => Ok(PartitionCheck {
            partition,
            segments: plan.segments.len(),
            batches: plan.scans.iter().map(|s| s.batches).sum::<u64>() as usize,
            log_start_offset: plan.log_start_offset,
            log_end_offset: Some(plan.log_end_offset),
            last_stable_offset: Some(plan.last_stable_offset),
            producers: plan.producers.producer_count(),
            cuts: plan
                .cuts()
                .iter()
                .map(|c| json!({"segment": c.segment, "position": c.position, "bytes": c.bytes}))
                .collect(),
            findings: plan_findings(&plan)
                .into_iter()
                .chain(cleaner_checkpoint_finding(dir, &plan))
                .collect(),
            shut_down_cleanly: plan.had_clean_shutdown,
        }),
        Err(e) if is_io(&e) => Err(e),
        Err(e) => Ok(PartitionCheck::refused(partition, refusal(&e))),
    }
}

/// [`check_partition`]; a partition that cannot be read is that partition's finding (the others
/// are still checked).
fn check_or_refuse(dir: &Path) -> PartitionCheck {
    match check_partition(dir) {
        Ok(c) => c,
        Err(e) => PartitionCheck::refused(
            partition_name(dir),
            finding(
                "unreadable",
                "partition",
                format!("cannot be read: {e}"),
                json!({}),
            ),
        ),
    }
}

/// `work` of each of `dirs` on `threads` threads, each result given to `emit` in the order of
/// `dirs` as soon as it and those before it are done (at most `threads` partitions are checked
/// at a time; results that are ahead wait in memory). The first error of `emit` stops the run:
/// no new partition is started.
fn in_order<R: Send>(
    dirs: &[PathBuf],
    threads: usize,
    work: impl Fn(&Path) -> R + Sync,
    mut emit: impl FnMut(R) -> io::Result<()>,
) -> io::Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..threads.clamp(1, dirs.len().max(1)) {
            let tx = tx.clone();
            let (next, stop, work) = (&next, &stop, &work);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(dir) = dirs.get(i) else { break };
                    if tx.send((i, work(dir))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut ahead = std::collections::BTreeMap::new();
        let mut want = 0;
        for (i, r) in rx {
            ahead.insert(i, r);
            while let Some(r) = ahead.remove(&want) {
                want += 1;
                if let Err(e) = emit(r) {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    })
}

/// Runs `seglog verify`.
pub fn run(args: &VerifyArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let target = match partition::detect_or_usage(&args.dir, err) {
        Ok(t) => t,
        Err(status) => return status,
    };
    let mut status = Status::Success;
    let mut total = 0;
    let dirs = partition::partitions(&target);
    let threads = crate::cli::recover::threads(args.threads);
    let log_dir = partition::log_dir_findings(&target);
    if !log_dir.is_empty() {
        status = Status::Damaged;
        total += log_dir.len();
    }
    let printed = print_log_dir(args, &log_dir, out).and_then(|()| {
        in_order(&dirs, threads, check_or_refuse, |check| {
            if !check.findings.is_empty() {
                status = Status::Damaged;
            }
            total += check.findings.len();
            print(args, &check, out)
        })
    });
    match printed {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return status,
        Err(e) => {
            let _ = writeln!(err, "error: cannot write output: {e}");
            return Status::Usage;
        }
    }
    let summary = if args.json {
        emit(
            out,
            &json!({"type": "summary", "partitions": dirs.len(), "problems": total}),
        )
    } else if !matches!(target, partition::Target::Partition(_)) {
        writeln!(
            out,
            "{} partition(s) checked, {total} problem(s)",
            dirs.len()
        )
    } else {
        Ok(())
    };
    if let Err(e) = summary {
        if e.kind() != io::ErrorKind::BrokenPipe {
            let _ = writeln!(err, "error: cannot write output: {e}");
            return Status::Usage;
        }
    }
    status
}

/// The findings about the log directory itself, before the partitions': text `<name>:
/// <message>`, JSON `finding` objects with `partition: null`.
fn print_log_dir(
    args: &VerifyArgs,
    findings: &[partition::LogDirFinding],
    out: &mut impl Write,
) -> io::Result<()> {
    for f in findings {
        if args.json {
            emit(
                out,
                &json!({
                    "type": "finding",
                    "partition": null,
                    "kind": f.kind,
                    "file": f.file,
                    "message": f.message,
                    "detail": {"line": f.line},
                }),
            )?;
        } else {
            writeln!(out, "{}: {}", f.file, f.message)?;
        }
    }
    Ok(())
}

fn print(args: &VerifyArgs, c: &PartitionCheck, out: &mut impl Write) -> io::Result<()> {
    if args.json {
        for f in &c.findings {
            emit(
                out,
                &json!({
                    "type": "finding",
                    "partition": c.partition,
                    "kind": f.kind,
                    "file": f.file,
                    "message": f.message,
                    "detail": f.detail,
                }),
            )?;
        }
        return emit(
            out,
            &json!({
                "type": "partition",
                "partition": c.partition,
                "segments": c.segments,
                "batches": c.batches,
                "logStartOffset": c.log_start_offset,
                "logEndOffset": c.log_end_offset,
                "lastStableOffset": c.last_stable_offset,
                "producers": c.producers,
                "cut": c.cuts,
                "problems": c.findings.len(),
                "shutDownCleanly": c.shut_down_cleanly,
            }),
        );
    }
    for f in &c.findings {
        writeln!(out, "{}: {}: {}", c.partition, f.file, f.message)?;
    }
    let end = c
        .log_end_offset
        .map_or_else(|| "unknown".to_owned(), |e| e.to_string());
    if c.findings.is_empty() {
        writeln!(
            out,
            "{}: ok ({} segment(s), {} batches, log end offset {end})",
            c.partition, c.segments, c.batches
        )
    } else {
        writeln!(
            out,
            "{}: {} problem(s) ({} segment(s), {} valid batches, log end offset after \
             recovery {end})",
            c.partition,
            c.findings.len(),
            c.segments,
            c.batches,
        )?;
        if c.shut_down_cleanly {
            writeln!(
                out,
                "{}: its log directory was shut down cleanly: `seglog recover` trusts that, as \
                 Kafka's broker does, and leaves sealed segments unread; `seglog recover --full` \
                 recovers every segment",
                c.partition
            )?;
        }
        Ok(())
    }
}
