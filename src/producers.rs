//! `seglog producers DIR [--json] [--audit]`: producer state rebuilt from a partition's log,
//! read-only, and the producer-id collision audit.
//!
//! State: the newest producer snapshot at or below the log end that reads back (corrupt ones are
//! skipped with a note), then every later batch of the valid log applied with Kafka's
//! replication rules (`ProducerStateManager::apply_batches(.., Replication)`, barriers included);
//! without a usable snapshot, from the first segment. "The valid log" is what recovery would
//! keep: segments are scanned like `LogSegment::recover` and the scan stops at the first invalid
//! batch. Producers are not expired (the tool shows what the log says, whatever the clock).
//!
//! `--audit` replays the whole valid log through [`ProducerAudit`] and prints every finding with
//! its severity: two producers under one id (KIP-1279's collision scenarios) are errors, a
//! transaction still open at a barrier is a warning, an id reused after a barrier is
//! informational.
//!
//! Exit status: 0 state printed (and no audit error); 1 an audit error, or the log has bytes
//! recovery would cut (the state shown covers the valid prefix); 2 usage or I/O error.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use recovery::snapshot::read_snapshot;
use recovery::{
    AppendOrigin, AuditFinding, BatchSummary, ProducerAudit, ProducerStateManager, Severity,
    SnapshotEntry,
};
use segment_store::file_name::FileKind;
use serde_json::json;

use crate::dump::json::emit;
use crate::partition::{self, files_of_kind, partition_name, producer_line, scan_partition};
use crate::Status;

/// Arguments of `seglog producers`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "producers",
    about = "Producer state rebuilt from a partition's log (read-only), with an optional PID collision audit",
    after_help = "Examples:\n  seglog producers /var/kafka-logs/orders-0\n  seglog producers --audit /var/kafka-logs/orders-0\n\n\
                  Exit status: 0 state printed, no audit error; 1 an audit finding of severity \
                  error, or bytes recovery would cut; 2 usage or I/O error."
)]
pub struct ProducersArgs {
    /// A partition directory, or a log directory (every partition in it)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
    /// Also audit the log for producer-id collisions (KIP-1279)
    #[arg(long)]
    pub audit: bool,
}

/// Where the rebuilt state started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// From the first segment.
    LogStart,
    /// From this snapshot (offset, file name).
    Snapshot(i64, String),
}

/// The producer state of one partition, rebuilt read-only.
#[derive(Debug)]
pub struct Rebuilt {
    /// Partition directory name.
    pub partition: String,
    /// Base offset of the first segment.
    pub log_start_offset: i64,
    /// One past the last valid offset.
    pub log_end_offset: i64,
    /// Where the state started.
    pub origin: Origin,
    /// Batches applied after the origin.
    pub replayed: usize,
    /// The state.
    pub psm: ProducerStateManager,
    /// Every valid batch from the log start, in order (for the audit).
    pub batches: Vec<BatchSummary>,
    /// Problems met (bytes recovery would cut, batches producer state refused, corrupt
    /// snapshots skipped): one line each.
    pub problems: Vec<String>,
}

impl Rebuilt {
    /// `min(first unstable offset, log end)`: the LSO with the high watermark at the log end.
    pub fn last_stable_offset(&self) -> i64 {
        self.psm
            .last_stable_offset_for(self.log_end_offset, self.log_start_offset)
    }
}

/// Rebuilds the producer state of the partition in `dir` without writing anything.
pub fn rebuild(dir: &Path) -> io::Result<Rebuilt> {
    let name = partition_name(dir);
    let (segments, later) = scan_partition(dir)?;
    let mut problems = Vec::new();
    let mut batches = Vec::new();
    for seg in &segments {
        let (summaries, bad) = seg.summaries();
        batches.extend(summaries);
        if let Some(e) = &seg.error {
            problems.push(format!(
                "{}: {} bytes from byte {} are not valid ({}): the state covers the log before them",
                seg.file_name(),
                seg.cut_bytes(),
                seg.valid_end,
                e.kind
            ));
        }
        if let Some((position, offset)) = seg.offset_overflow {
            problems.push(format!(
                "{}: the batch at byte {position} has offset {offset}, outside the segment \
                 (base offset {})",
                seg.file_name(),
                seg.base
            ));
        }
        if let Some((offset, e)) = bad {
            problems.push(format!(
                "{}: the control batch at offset {offset} does not decode ({e})",
                seg.file_name()
            ));
            break;
        }
    }
    if later > 0 {
        problems.push(format!(
            "{later} later segment(s) after the damaged one are not read (recovery would \
             quarantine them)"
        ));
    }
    let log_start_offset = segments.first().map_or(0, |s| s.base);
    let log_end_offset = segments.last().map_or(0, |s| s.next_offset());

    let mut psm = ProducerStateManager::default();
    let mut origin = Origin::LogStart;
    for (offset, path) in files_of_kind(dir, FileKind::Snapshot)?.into_iter().rev() {
        if offset > log_end_offset || offset < log_start_offset {
            continue;
        }
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match read_snapshot(&path) {
            Ok(entries) => {
                for e in &entries {
                    psm.load_producer_entry(e.to_entry());
                }
                psm.update_map_end_offset(offset);
                origin = Origin::Snapshot(offset, file);
                break;
            }
            Err(e) => problems.push(format!("{file}: skipped: {e}")),
        }
    }
    let from = match origin {
        Origin::Snapshot(o, _) => o,
        Origin::LogStart => log_start_offset,
    };
    let mut replayed = 0;
    for b in batches.iter().filter(|b| b.base_offset >= from) {
        match psm.apply_batches([b], AppendOrigin::Replication) {
            Ok(_) => replayed += 1,
            Err(e) => problems.push(format!(
                "offset {}: producer state refused the batch: {e}",
                b.base_offset
            )),
        }
    }
    psm.update_map_end_offset(log_end_offset.max(psm.map_end_offset()));
    // The high watermark is taken as the log end: completed transactions below it are no longer
    // unstable (without this the LSO would stop at the first transaction completed during the
    // replay, which the live partition had long forgotten).
    psm.on_high_watermark_updated(log_end_offset);
    Ok(Rebuilt {
        partition: name,
        log_start_offset,
        log_end_offset,
        origin,
        replayed,
        psm,
        batches,
        problems,
    })
}

/// Runs `seglog producers`.
pub fn run(args: &ProducersArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let target = match partition::detect(&args.dir) {
        Ok(t) => t,
        Err(msg) => {
            let _ = writeln!(err, "error: {msg}");
            return Status::Usage;
        }
    };
    let mut status = Status::Success;
    for dir in partition::partitions(&target) {
        let rebuilt = match rebuild(&dir) {
            Ok(r) => r,
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
        match print(args, &rebuilt, out, err) {
            Ok(s) => status = status.max(s),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return status,
            Err(e) => {
                let _ = writeln!(err, "error: cannot write output: {e}");
                return Status::Usage;
            }
        }
    }
    status
}

fn opt(v: i64) -> serde_json::Value {
    if v >= 0 {
        json!(v)
    } else {
        serde_json::Value::Null
    }
}

fn print(
    args: &ProducersArgs,
    r: &Rebuilt,
    out: &mut impl Write,
    err: &mut impl Write,
) -> io::Result<Status> {
    let mut status = Status::Success;
    for p in &r.problems {
        writeln!(err, "{}: {p}", r.partition)?;
        status = Status::Damaged;
    }
    let entries: Vec<SnapshotEntry> = r
        .psm
        .active_producers()
        .values()
        .map(SnapshotEntry::from_entry)
        .collect();
    let open: Vec<(i64, i64)> = r
        .psm
        .ongoing_txns()
        .values()
        .map(|t| (t.producer_id, t.first_offset))
        .collect();
    let lso = r.last_stable_offset();
    if args.json {
        for e in &entries {
            emit(
                out,
                &json!({
                    "type": "producer",
                    "partition": r.partition,
                    "producerId": e.producer_id,
                    "producerEpoch": e.producer_epoch,
                    "lastSequence": e.last_sequence,
                    "lastOffset": e.last_offset,
                    "offsetDelta": e.offset_delta,
                    "lastTimestamp": e.timestamp,
                    "coordinatorEpoch": e.coordinator_epoch,
                    "currentTxnFirstOffset": opt(e.current_txn_first_offset),
                }),
            )?;
        }
        let (from, snapshot) = match &r.origin {
            Origin::LogStart => ("logStart", serde_json::Value::Null),
            Origin::Snapshot(o, _) => ("snapshot", json!(o)),
        };
        emit(
            out,
            &json!({
                "type": "partition",
                "partition": r.partition,
                "logStartOffset": r.log_start_offset,
                "logEndOffset": r.log_end_offset,
                "lastStableOffset": lso,
                "firstUnstableOffset": r.psm.first_unstable_offset(),
                "openTransactions": open.iter().map(|(p, f)| json!({"producerId": p, "firstOffset": f})).collect::<Vec<_>>(),
                "producers": entries.len(),
                "rebuiltFrom": from,
                "snapshotOffset": snapshot,
                "batchesReplayed": r.replayed,
            }),
        )?;
    } else {
        let from = match &r.origin {
            Origin::LogStart => format!("rebuilt from the log start ({} batches)", r.replayed),
            Origin::Snapshot(_, f) => {
                format!("from snapshot {f} + {} batch(es) replayed", r.replayed)
            }
        };
        writeln!(
            out,
            "{}: log [{}, {}), {} producer(s), {from}",
            r.partition,
            r.log_start_offset,
            r.log_end_offset,
            entries.len()
        )?;
        for e in &entries {
            writeln!(out, "{}", producer_line(e))?;
        }
        writeln!(out, "lastStableOffset: {lso}")?;
        if open.is_empty() {
            writeln!(out, "openTransactions: none")?;
        } else {
            let list: Vec<String> = open
                .iter()
                .map(|(p, f)| format!("producerId {p} firstOffset {f}"))
                .collect();
            writeln!(out, "openTransactions: {}", list.join(", "))?;
        }
    }
    if args.audit {
        status = status.max(print_audit(args, r, out)?);
    }
    Ok(status)
}

fn print_audit(args: &ProducersArgs, r: &Rebuilt, out: &mut impl Write) -> io::Result<Status> {
    let mut audit = ProducerAudit::new();
    for b in &r.batches {
        audit.observe(b);
    }
    let findings: Vec<AuditFinding> = audit.into_findings();
    let count = |s: Severity| findings.iter().filter(|f| f.severity() == s).count();
    let (errors, warnings, infos) = (
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Info),
    );
    if args.json {
        for f in &findings {
            emit(
                out,
                &json!({
                    "type": "finding",
                    "partition": r.partition,
                    "severity": f.severity().to_string(),
                    "offset": f.offset(),
                    "producerId": f.producer_id(),
                    "message": f.to_string(),
                }),
            )?;
        }
        emit(
            out,
            &json!({
                "type": "audit",
                "partition": r.partition,
                "batches": r.batches.len(),
                "errors": errors,
                "warnings": warnings,
                "infos": infos,
            }),
        )?;
    } else {
        for f in &findings {
            writeln!(out, "{}: {f}", f.severity())?;
        }
        writeln!(
            out,
            "audit: {} batches, {errors} error(s), {warnings} warning(s), {infos} info",
            r.batches.len()
        )?;
    }
    Ok(if errors > 0 {
        Status::Damaged
    } else {
        Status::Success
    })
}
