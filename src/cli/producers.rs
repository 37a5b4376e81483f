//! `seglog producers DIR [--json] [--audit]`: the producer state recovery would load for a
//! partition (read-only: the recovery plan, `recovery::LogLoader::plan_audited`), and the
//! producer-id collision audit.
//!
//! The partition is planned as `seglog recover` would load it: with the clean-shutdown marker
//! and checkpoints of its parent log directory if it has them (a clean partition: the newest
//! producer snapshot at or below the log end plus a replay of the rest), otherwise with recovery
//! of every segment from the recovery point (every batch CRC-checked and applied with Kafka's
//! replication rules, barriers included; expired producers dropped as loading drops them). The
//! high watermark is taken as the log end, so the LSO shown is the first unstable offset.
//! Producers dropped at load because they expired are listed (`expiredAtLoad`: id, epoch, last
//! timestamp, idle time, the clock and `producer.id.expiration.ms`); `--now-ms` sets the clock.
//!
//! `--audit` plans a full recovery (every segment from the first, whatever the marker says) and
//! prints every finding of the audit over the whole valid log with its severity: two producers under one id (KIP-1279's
//! collision scenarios) are errors, a transaction still open at a barrier is a warning, an id
//! reused after a barrier is informational.
//!
//! Exit status: 0 state printed (and no audit error); 1 an audit error, or the log has bytes
//! recovery would cut (the state shown covers the valid prefix); 2 usage or I/O error.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::Parser;
use recovery::{
    AuditFinding, LoadOptions, LogLoader, PartitionLogError, RecoveryPlan, Severity, SnapshotEntry,
};
use segment_store::internals::FileKind;
use serde_json::json;

use crate::cli::dump::json::emit;
use crate::cli::partition::{self, expired_json, expired_line, partition_name, producer_line};
use crate::cli::Status;

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
    /// The time producer expiry is judged against, in ms since the Unix epoch (default: now).
    /// Producers idle for `producer.id.expiration.ms` (1 day) are dropped at load, as Kafka
    /// drops them; they are listed as `expiredAtLoad`
    #[arg(long, value_name = "MS")]
    pub now_ms: Option<i64>,
}

/// The producer state of one partition, as recovery would load it (read-only).
#[derive(Debug)]
pub struct Rebuilt {
    /// Partition directory name.
    pub partition: String,
    /// The plan.
    pub plan: RecoveryPlan,
    /// Problems met (bytes recovery would cut, later segments it would quarantine, corrupt
    /// snapshots): one line each.
    pub problems: Vec<String>,
}

/// Plans loading the partition in `dir` without writing anything; with `audit`, a full recovery
/// (the audit sees every batch of the valid log).
pub fn rebuild(dir: &Path, audit: bool, now_ms: Option<i64>) -> Result<Rebuilt, PartitionLogError> {
    let mut opts = LoadOptions::for_partition_dir(dir, audit);
    opts.config.env.clock = partition::clock(now_ms);
    opts.high_watermark = Some(i64::MAX);
    let plan = LogLoader::plan_audited(dir, &opts)?;
    let mut problems = Vec::new();
    for c in plan.cuts() {
        problems.push(format!(
            "{}: {} bytes from byte {} are not valid ({}): the state covers the log before them",
            segment_store::internals::file_name(c.segment, FileKind::Log, None),
            c.bytes,
            c.position,
            c.reason.kind
        ));
    }
    let later = plan.quarantined_segments.len();
    if later > 0 {
        problems.push(format!(
            "{later} later segment(s) after the damaged one are not read (recovery would \
             quarantine them)"
        ));
    }
    for s in &plan.snapshot_findings {
        if let Some(e) = &s.error {
            let file = s
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            problems.push(format!("{file}: skipped: {e}"));
        }
    }
    Ok(Rebuilt {
        partition: partition_name(dir),
        plan,
        problems,
    })
}

/// Runs `seglog producers`.
pub fn run(args: &ProducersArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let target = match partition::detect_or_usage(&args.dir, err) {
        Ok(t) => t,
        Err(status) => return status,
    };
    let mut status = Status::Success;
    for dir in partition::partitions(&target) {
        let rebuilt = match rebuild(&dir, args.audit, args.now_ms) {
            Ok(r) => r,
            Err(e) => {
                // That partition's problem; the others are still shown.
                let _ = writeln!(err, "{}: cannot be read: {e}", partition_name(&dir));
                status = Status::Damaged;
                continue;
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
    let plan = &r.plan;
    let entries: Vec<SnapshotEntry> = plan.producers.snapshot_entries();
    let open: Vec<(i64, i64)> = plan
        .producers
        .ongoing_txns()
        .values()
        .map(|t| (t.producer_id, t.first_offset))
        .collect();
    if args.json {
        print_json(r, &entries, &open, out)?;
    } else {
        print_text(r, &entries, &open, out)?;
    }
    if args.audit {
        status = status.max(print_audit(args, r, out)?);
    }
    Ok(status)
}

/// The producer state as JSON lines: one per producer, one per producer expired at load, then
/// the partition's.
fn print_json(
    r: &Rebuilt,
    entries: &[SnapshotEntry],
    open: &[(i64, i64)],
    out: &mut impl Write,
) -> io::Result<()> {
    let plan = &r.plan;
    let lso = plan.last_stable_offset;
    for e in entries {
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
    for e in &plan.expired_producers {
        let mut v = expired_json(e);
        v["type"] = json!("expiredProducer");
        v["partition"] = json!(r.partition);
        emit(out, &v)?;
    }
    let (from, snapshot) = match plan.snapshot_loaded {
        None => ("logStart", serde_json::Value::Null),
        Some(o) => ("snapshot", json!(o)),
    };
    emit(
        out,
        &json!({
            "type": "partition",
            "partition": r.partition,
            "logStartOffset": plan.log_start_offset,
            "logEndOffset": plan.log_end_offset,
            "lastStableOffset": lso,
            "firstUnstableOffset": plan.producers.first_unstable_offset(),
            "openTransactions": open.iter().map(|(p, f)| json!({"producerId": p, "firstOffset": f})).collect::<Vec<_>>(),
            "producers": entries.len(),
            "expiredAtLoad": plan.expired_producers.len(),
            "rebuiltFrom": from,
            "snapshotOffset": snapshot,
            "batchesReplayed": plan.batches_applied,
        }),
    )?;
    Ok(())
}

/// The producer state as text, one line per producer, as `kafka-dump-log.sh` prints snapshots.
fn print_text(
    r: &Rebuilt,
    entries: &[SnapshotEntry],
    open: &[(i64, i64)],
    out: &mut impl Write,
) -> io::Result<()> {
    let plan = &r.plan;
    let lso = plan.last_stable_offset;
    let from = match plan.snapshot_loaded {
        None => format!(
            "rebuilt from the log start ({} batches)",
            plan.batches_applied
        ),
        Some(o) => format!(
            "from snapshot {} + {} batch(es) replayed",
            segment_store::internals::file_name(o, FileKind::Snapshot, None),
            plan.batches_applied
        ),
    };
    writeln!(
        out,
        "{}: log [{}, {}), {} producer(s), {from}",
        r.partition,
        plan.log_start_offset,
        plan.log_end_offset,
        entries.len()
    )?;
    for e in entries {
        writeln!(out, "{}", producer_line(e))?;
    }
    for e in &plan.expired_producers {
        writeln!(out, "{}", expired_line(e))?;
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
    Ok(())
}

fn print_audit(args: &ProducersArgs, r: &Rebuilt, out: &mut impl Write) -> io::Result<Status> {
    let findings: Vec<AuditFinding> = r.plan.audit.clone().unwrap_or_default();
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
                    "offset": f.offset,
                    "producerId": f.producer_id,
                    "message": f.to_string(),
                }),
            )?;
        }
        emit(
            out,
            &json!({
                "type": "audit",
                "partition": r.partition,
                "batches": r.plan.batches_applied,
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
            r.plan.batches_applied
        )?;
    }
    Ok(if errors > 0 {
        Status::Damaged
    } else {
        Status::Success
    })
}
