//! `seglog verify DIR [--json]`: recovery's checks on a partition directory (or every partition of
//! a log directory), **read-only**: files are read into memory and parsed; nothing is locked,
//! mapped, created, renamed or written (a test compares every byte and the file list before and
//! after).
//!
//! Checks, per partition, in this order:
//! * segments: the first batch recovery would cut in each `.log` (framing, CRC-32C, incomplete
//!   tail; position, bytes and typed reason), a batch whose offset does not fit its segment (which
//!   recovery refuses), and how many later segments recovery would move to quarantine;
//! * indexes: Kafka's sanity checks of `.index`/`.timeindex`, `.index` entries past the end of the
//!   `.log`, not on a batch boundary, or naming another offset than the batch there, `.timeindex`
//!   entries past the last offset, `.txnindex` files with a partial entry;
//! * snapshots: producer snapshots that do not read back (recovery sets them aside) and snapshots
//!   beyond the log end (recovery moves them to quarantine);
//! * producer state: the collision audit's findings of severity error or warning.
//!
//! Exit status: 0 nothing found; 1 problems found (each printed); 2 usage or I/O error.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use recovery::snapshot::read_snapshot;
use recovery::{ProducerAudit, Severity};
use segment_store::file_name::FileKind;
use serde_json::json;

use crate::dump::index::{
    offset_entries, offset_index_sanity, time_entries, time_index_sanity, OFFSET_ENTRY_SIZE,
    TXN_ENTRY_SIZE,
};
use crate::dump::json::{emit, ErrorJson};
use crate::partition::{self, files_of_kind, partition_name, Segment};
use crate::Status;

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
}

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `cut`, `offsetOutOfRange`, `quarantine`, `indexSanity`, `indexBeyondLog`,
    /// `indexNotBatchBoundary`, `indexOffsetMismatch`, `timeIndexBeyondLog`, `txnIndexPartial`,
    /// `corruptSnapshot`, `snapshotBeyondLogEnd`, `producerState`, `unreadableBatch`.
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
    /// Log end offset recovery would leave.
    pub log_end_offset: i64,
    /// Problems, in check order.
    pub findings: Vec<Finding>,
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

/// Checks the partition in `dir` (read-only).
pub fn check_partition(dir: &Path) -> io::Result<PartitionCheck> {
    let logs = files_of_kind(dir, FileKind::Log)?;
    let mut segments = Vec::with_capacity(logs.len());
    for (base, path) in &logs {
        segments.push(Segment::scan(*base, path)?);
    }
    let mut findings = Vec::new();
    // Where recovery would stop: the first segment with something to cut.
    let first_cut = segments
        .iter()
        .position(|s| s.error.is_some() || s.offset_overflow.is_some());

    for seg in &segments {
        let name = seg.file_name();
        if let Some(e) = &seg.error {
            findings.push(finding(
                "cut",
                &name,
                format!(
                    "recovery would cut {} bytes at byte {} (after offset {}): {}",
                    seg.cut_bytes(),
                    seg.valid_end,
                    seg.next_offset() - 1,
                    e.kind
                ),
                json!({
                    "segment": seg.base,
                    "position": seg.valid_end,
                    "bytes": seg.cut_bytes(),
                    "reason": ErrorJson::from_format(e),
                }),
            ));
        }
        if let Some((position, offset)) = seg.offset_overflow {
            findings.push(finding(
                "offsetOutOfRange",
                &name,
                format!(
                    "the batch at byte {position} ends at offset {offset}, which does not fit \
                     a segment with base offset {}: recovery would refuse the partition",
                    seg.base
                ),
                json!({"segment": seg.base, "position": position, "offset": offset}),
            ));
        }
        check_indexes(dir, seg, &mut findings)?;
    }
    if let Some(i) = first_cut {
        let later = segments.len() - i - 1;
        if later > 0 {
            let name = segments.get(i).map(Segment::file_name).unwrap_or_default();
            findings.push(finding(
                "quarantine",
                &name,
                format!(
                    "recovery stops here: the {later} later segment(s) would move to quarantine"
                ),
                json!({"laterSegments": later}),
            ));
        }
    }
    let kept: &[Segment] = match first_cut {
        Some(i) => segments.get(..=i).unwrap_or_default(),
        None => &segments,
    };
    let log_end_offset = kept.last().map_or(0, Segment::next_offset);

    // Snapshots.
    for (offset, path) in files_of_kind(dir, FileKind::Snapshot)? {
        let name = file_name(&path);
        match read_snapshot(&path) {
            Err(e) => findings.push(finding(
                "corruptSnapshot",
                &name,
                format!("corrupt snapshot (recovery sets it aside): {e}"),
                json!({"offset": offset}),
            )),
            Ok(_) if offset > log_end_offset => findings.push(finding(
                "snapshotBeyondLogEnd",
                &name,
                format!(
                    "snapshot at offset {offset} is beyond the log end offset {log_end_offset}"
                ),
                json!({"offset": offset, "logEndOffset": log_end_offset}),
            )),
            Ok(_) => {}
        }
    }

    // Producer state over the log recovery would keep.
    let mut audit = ProducerAudit::new();
    let mut batches = 0;
    'segments: for seg in kept {
        let (summaries, bad) = seg.summaries();
        for s in &summaries {
            audit.observe(s);
        }
        batches += summaries.len();
        if let Some((offset, e)) = bad {
            findings.push(finding(
                "unreadableBatch",
                &seg.file_name(),
                format!("the control batch at offset {offset} does not decode: {e}"),
                json!({"offset": offset, "reason": ErrorJson::from_format(&e)}),
            ));
            break 'segments;
        }
    }
    for f in audit.into_findings() {
        if f.severity() <= Severity::Warning {
            findings.push(finding(
                "producerState",
                "producer state",
                format!("{}: {f}", f.severity()),
                json!({"severity": f.severity().to_string(), "offset": f.offset(), "producerId": f.producer_id()}),
            ));
        }
    }
    Ok(PartitionCheck {
        partition: partition_name(dir),
        segments: segments.len(),
        batches,
        log_end_offset,
        findings,
    })
}

fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Index checks of one segment against its `.log` as it is on disk.
fn check_indexes(dir: &Path, seg: &Segment, findings: &mut Vec<Finding>) -> io::Result<()> {
    let base = seg.base;
    let log_len = seg.bytes.len() as u64;
    let index_name = segment_store::file_name::file_name(base, FileKind::Index, None);
    if let Some(bytes) = read_optional(&dir.join(&index_name))? {
        if let Err(msg) = offset_index_sanity(base, &bytes) {
            findings.push(finding(
                "indexSanity",
                &index_name,
                format!("{msg} (recovery rebuilds the index)"),
                json!({"segment": base}),
            ));
        }
        let whole = bytes.len() - bytes.len() % OFFSET_ENTRY_SIZE;
        let entries = offset_entries(base, bytes.get(..whole).unwrap_or_default());
        for (i, e) in entries.iter().enumerate() {
            // The zero-filled preallocated tail of an index that was not closed (no real entry
            // points at position 0: the first entry is written after `index.interval.bytes`).
            if e.offset == base && e.position == 0 {
                break;
            }
            let detail = json!({"entry": i, "offset": e.offset, "position": e.position});
            let position = u64::try_from(e.position).unwrap_or(u64::MAX);
            if position >= log_len {
                findings.push(finding(
                    "indexBeyondLog",
                    &index_name,
                    format!(
                        "entry {i} (offset {}, position {}) points past the end of the log \
                         ({log_len} bytes)",
                        e.offset, e.position
                    ),
                    detail,
                ));
                continue;
            }
            if seg.error.is_some() && position >= seg.valid_end {
                // In the part recovery cuts: the `cut` finding covers it (the index is rebuilt).
                continue;
            }
            let batch = seg.batches.iter().find(|b| b.position == position);
            match batch {
                None => findings.push(finding(
                    "indexNotBatchBoundary",
                    &index_name,
                    format!(
                        "entry {i} (offset {}, position {}) is not at a batch boundary",
                        e.offset, e.position
                    ),
                    detail,
                )),
                Some(b) if b.last_offset != e.offset => findings.push(finding(
                    "indexOffsetMismatch",
                    &index_name,
                    format!(
                        "entry {i}: index offset {}, log offset {} at position {}",
                        e.offset, b.last_offset, e.position
                    ),
                    detail,
                )),
                Some(_) => {}
            }
        }
    }
    let time_name = segment_store::file_name::file_name(base, FileKind::TimeIndex, None);
    if let Some(bytes) = read_optional(&dir.join(&time_name))? {
        if let Err(msg) = time_index_sanity(base, &bytes) {
            findings.push(finding(
                "indexSanity",
                &time_name,
                format!("{msg} (recovery rebuilds the index)"),
                json!({"segment": base}),
            ));
        }
        // With a cut, the time index is rebuilt by recovery: only a clean segment's entries count.
        let last = seg
            .error
            .is_none()
            .then(|| seg.batches.last().map(|b| b.last_offset))
            .flatten();
        for (i, e) in time_entries(base, &bytes).iter().enumerate() {
            if e.offset == base && e.timestamp == 0 {
                break;
            }
            if last.is_some_and(|l| e.offset > l) {
                findings.push(finding(
                    "timeIndexBeyondLog",
                    &time_name,
                    format!(
                        "entry {i} (timestamp {}, offset {}) is past the last offset {} of the log",
                        e.timestamp,
                        e.offset,
                        last.unwrap_or(base)
                    ),
                    json!({"entry": i, "offset": e.offset, "timestamp": e.timestamp}),
                ));
            }
        }
    }
    let txn_name = segment_store::file_name::file_name(base, FileKind::TxnIndex, None);
    if let Some(bytes) = read_optional(&dir.join(&txn_name))? {
        if bytes.len() % TXN_ENTRY_SIZE != 0 {
            findings.push(finding(
                "txnIndexPartial",
                &txn_name,
                format!(
                    "{} bytes is not a whole number of {TXN_ENTRY_SIZE}-byte entries",
                    bytes.len()
                ),
                json!({"segment": base, "bytes": bytes.len()}),
            ));
        }
    }
    Ok(())
}

/// Runs `seglog verify`.
pub fn run(args: &VerifyArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let target = match partition::detect(&args.dir) {
        Ok(t) => t,
        Err(msg) => {
            let _ = writeln!(err, "error: {msg}");
            return Status::Usage;
        }
    };
    let mut status = Status::Success;
    let mut total = 0;
    let dirs = partition::partitions(&target);
    for dir in &dirs {
        let check = match check_partition(dir) {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(
                    err,
                    "error: cannot read {}: {}",
                    dir.display(),
                    crate::dump::io_msg(&e)
                );
                return Status::Usage;
            }
        };
        if !check.findings.is_empty() {
            status = Status::Damaged;
        }
        total += check.findings.len();
        match print(args, &check, out) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return status,
            Err(e) => {
                let _ = writeln!(err, "error: cannot write output: {e}");
                return Status::Usage;
            }
        }
    }
    let summary = if args.json {
        emit(
            out,
            &json!({"type": "summary", "partitions": dirs.len(), "problems": total}),
        )
    } else if dirs.len() > 1 {
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
                "logEndOffset": c.log_end_offset,
                "problems": c.findings.len(),
            }),
        );
    }
    for f in &c.findings {
        writeln!(out, "{}: {}: {}", c.partition, f.file, f.message)?;
    }
    if c.findings.is_empty() {
        writeln!(
            out,
            "{}: ok ({} segment(s), {} batches, log end offset {})",
            c.partition, c.segments, c.batches, c.log_end_offset
        )
    } else {
        writeln!(
            out,
            "{}: {} problem(s) ({} segment(s), {} valid batches, log end offset after \
             recovery {})",
            c.partition,
            c.findings.len(),
            c.segments,
            c.batches,
            c.log_end_offset
        )
    }
}
