//! The checks of a recovered directory against the workload's promises: plan then apply,
//! files, indexes, producer state and the barrier.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use record_format::RecordBatch;
use recovery::{AppendOrigin, BatchSummary, LogLoader, PartitionLog, ProducerStateManager};
use segment_store::{LogEnv, StdFs};

use super::crash::{fresh_dir, materialize, CrashRun};
use super::ops::{load_opts, valid_batches};
use super::workload::{Expectation, Workload, TIMESTAMP};
use crate::clock::ManualClock;

/// What [`check_dir`] found.
#[derive(Debug, Clone, Default)]
pub struct CheckOutcome {
    /// Batches in the recovered log.
    pub batches: u64,
    /// Durable batches missing or different.
    pub durable_lost: u64,
    /// The log end offset after recovery.
    pub log_end_offset: i64,
    /// Violations found.
    pub violations: Vec<String>,
}

/// Loads `dir` as after a power loss (unclean, recovery point `exp.recovery_point`) and checks:
/// (a) every durable batch is present, byte for byte, at its offset; (b) the `.log` files hold
/// CRC-valid batches with contiguous offsets, each one that was written at that offset; (c) every
/// offset-index entry points at a batch boundary whose last offset is at least the entry's, and
/// looking up every batch finds it; (d) producer state and LSO equal those of a fresh
/// [`ProducerStateManager`] fed the recovered batches (`Replication` rules); (e) the barrier is
/// at the offset `stop` reported; (f) no error, no panic.
pub fn check_dir(w: &Workload, dir: &Path, exp: &Expectation) -> CheckOutcome {
    let mut out = CheckOutcome::default();
    match catch_unwind(AssertUnwindSafe(|| check_dir_inner(w, dir, exp, &mut out))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => out.violations.push(e),
        Err(_) => out
            .violations
            .push("PANIC during recovery or checks".to_owned()),
    }
    out
}

pub(super) struct Recovered {
    segment: i64,
    position: u64,
    last_offset: i64,
    bytes: Vec<u8>,
}

fn check_dir_inner(
    w: &Workload,
    dir: &Path,
    exp: &Expectation,
    out: &mut CheckOutcome,
) -> Result<(), String> {
    let mut log = check_plan_then_apply(w, dir, exp, out)?;
    let v = &mut out.violations;
    let (recovered, next) = check_files(dir, exp, log.log_start_offset(), v)?;
    let leo = log.log_end_offset();
    if next != leo {
        v.push(format!(
            "(b) files end at offset {next}, the log end offset is {leo}"
        ));
    }
    out.batches = recovered.len() as u64;
    out.log_end_offset = leo;

    // (a) durable batches survive byte for byte, except below a log start offset that retention
    // may have reached.
    let start = log.log_start_offset();
    if start > exp.log_start_limit {
        v.push(format!(
            "(a) the log starts at offset {start}, retention could delete only below {}",
            exp.log_start_limit
        ));
    }
    for (offset, bytes) in exp.durable.range(start.min(exp.log_start_limit)..) {
        if recovered.get(offset).map(|r| &r.bytes) != Some(bytes) {
            out.durable_lost += 1;
            v.push(format!(
                "(a) durable batch at offset {offset} lost (log end {leo})"
            ));
        }
    }

    check_indexes(&log, &recovered, v);
    check_producer_state(w, exp, &mut log, &recovered, v)?;
    check_barrier(exp, start, &recovered, v);
    drop(log);
    Ok(())
}

/// (g) plan, then apply: planning changes nothing, and applying does what was planned.
fn check_plan_then_apply(
    w: &Workload,
    dir: &Path,
    exp: &Expectation,
    out: &mut CheckOutcome,
) -> Result<PartitionLog, String> {
    let env = LogEnv {
        storage: Arc::new(StdFs),
        clock: Arc::new(ManualClock::new(exp.now_ms.max(TIMESTAMP))),
    };
    let opts = load_opts(w, env, false, exp.recovery_point);
    let before = crate::tree_image(dir).map_err(|e| e.to_string())?;
    let plan = LogLoader::plan(dir, &opts).map_err(|e| format!("(f) recovery failed: {e}"))?;
    if crate::tree_image(dir).map_err(|e| e.to_string())? != before {
        out.violations
            .push("(g) planning recovery changed the directory".to_owned());
    }
    let predicted = plan.report();
    let predicted_state = (plan.producers.snapshot_entries(), plan.last_stable_offset);
    let (log, report) = LogLoader::apply(plan).map_err(|e| format!("(f) recovery failed: {e}"))?;
    if format!("{predicted:?}") != format!("{report:?}") {
        out.violations.push(format!(
            "(g) the plan predicted {predicted:?}, applying it did {report:?}"
        ));
    }
    if predicted_state
        != (
            log.producer_state().snapshot_entries(),
            log.last_stable_offset(),
        )
    {
        out.violations
            .push("(g) the planned producer state differs from the loaded one".to_owned());
    }
    Ok(log)
}

/// (b) the files: a valid prefix of what was written. Returns the recovered batches by base
/// offset and the offset after the last one.
fn check_files(
    dir: &Path,
    exp: &Expectation,
    log_start_offset: i64,
    v: &mut Vec<String>,
) -> Result<(BTreeMap<i64, Recovered>, i64), String> {
    let mut logs: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let base = p
                .file_name()?
                .to_str()?
                .strip_suffix(".log")?
                .parse::<i64>()
                .ok()?;
            Some((base, p))
        })
        .collect();
    logs.sort();
    let mut recovered: BTreeMap<i64, Recovered> = BTreeMap::new();
    let mut next = log_start_offset;
    for (segment, path) in &logs {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let batches = valid_batches(&bytes);
        let valid_len = batches
            .last()
            .map_or(0, |(p, b)| *p as usize + b.size_in_bytes());
        if valid_len != bytes.len() {
            v.push(format!(
                "(b) {} keeps {} bytes after its last valid batch",
                path.display(),
                bytes.len() - valid_len
            ));
        }
        for (position, b) in batches {
            if b.base_offset() != next {
                v.push(format!(
                    "(b) batch at offset {} in segment {segment}, expected offset {next}",
                    b.base_offset()
                ));
            }
            if !exp
                .written
                .get(&b.base_offset())
                .is_some_and(|s| s.contains(b.as_bytes()))
            {
                v.push(format!(
                    "(b) batch at offset {} was never written",
                    b.base_offset()
                ));
            }
            next = b.next_offset();
            recovered.insert(
                b.base_offset(),
                Recovered {
                    segment: *segment,
                    position,
                    last_offset: b.last_offset(),
                    bytes: b.as_bytes().to_vec(),
                },
            );
        }
    }
    Ok((recovered, next))
}

/// (c) indexes agree with the log.
fn check_indexes(log: &PartitionLog, recovered: &BTreeMap<i64, Recovered>, v: &mut Vec<String>) {
    let listed = log.local_log().with_segments(|segs| {
        for seg in segs {
            let seg = match seg {
                Ok(seg) => seg,
                Err(e) => {
                    v.push(format!("(c) a segment does not open: {e}"));
                    continue;
                }
            };
            let base = seg.base_offset();
            let in_seg: BTreeMap<u64, &Recovered> = recovered
                .values()
                .filter(|r| r.segment == base)
                .map(|r| (r.position, r))
                .collect();
            let idx = seg.offset_index();
            for n in 0..idx.entries() {
                let Some(e) = idx.entry(n) else { continue };
                match in_seg.get(&u64::from(e.position.0)) {
                    Some(r) if r.last_offset >= e.offset => {}
                    _ => v.push(format!(
                        "(c) segment {base}: index entry {n} (offset {}, position {}) is not a batch boundary reaching it",
                        e.offset, e.position.0
                    )),
                }
            }
            for r in in_seg.values() {
                let first = r.last_offset - i64::from(batch_delta(&r.bytes));
                match seg.translate_offset(first, 0) {
                    Ok(Some(p)) if p.position == r.position && p.base_offset == first => {}
                    other => v.push(format!(
                        "(c) segment {base}: lookup of offset {first} gave {other:?}, batch is at {}",
                        r.position
                    )),
                }
            }
        }
    });
    if let Err(e) = listed {
        v.push(format!("(c) the segments could not be listed: {e}"));
    }
}

/// (d) producer state and LSO equal a reference replay of the recovered batches (see below).
fn check_producer_state(
    w: &Workload,
    exp: &Expectation,
    log: &mut PartitionLog,
    recovered: &BTreeMap<i64, Recovered>,
    v: &mut Vec<String>,
) -> Result<(), String> {
    let start = log.log_start_offset();
    let leo = log.log_end_offset();
    // (d) producer state and LSO equal a reference replay of the recovered batches. Batches
    // below a log start offset that retention or deleteRecords reached (deleted, or only hidden
    // inside a segment that a reload shows again, since nothing here checkpoints the log start)
    // may be reflected in producer state or not, as in Kafka: each producer must equal either the
    // replay of every batch ever retained (the deleted ones, then the recovered ones) or the
    // replay of the recovered batches from that log start on.
    log.set_high_watermark(i64::MAX);
    let forget_below = exp.log_start_limit.max(start);
    let recovered_bytes = recovered.iter().map(|(o, r)| (*o, r.bytes.as_slice()));
    let all: Vec<(i64, &[u8])> = exp
        .retired
        .range(..start)
        .map(|(o, b)| (*o, b.as_slice()))
        .chain(recovered_bytes.clone())
        .collect();
    let kept: Vec<(i64, &[u8])> = recovered_bytes
        .filter(|(o, _)| *o >= forget_below)
        .collect();
    let refs = [
        reference_state(w, &kept, leo, start, v)?,
        reference_state(w, &all, leo, start, v)?,
    ];
    let got = producer_keys(log.producer_state());
    let pids: BTreeSet<i64> = got
        .keys()
        .chain(refs.iter().flat_map(|(k, _)| k.keys()))
        .copied()
        .collect();
    for pid in pids {
        let g = got.get(&pid);
        let [(kept, _), (all, _)] = &refs;
        let (want, or_all) = (kept.get(&pid), all.get(&pid));
        if g != want && g != or_all {
            let also = if want == or_all {
                String::new()
            } else {
                format!(" (or {or_all:?} with the batches below the log start)")
            };
            v.push(format!(
                "(d) producer {pid}: state {g:?}, reference {want:?}{also}"
            ));
        }
    }
    let lso = log.last_stable_offset();
    if refs.iter().all(|(_, want)| *want != lso) {
        v.push(format!("(d) LSO {lso}, reference {}", refs[0].1));
    }

    Ok(())
}

/// (e) the barrier once Stopped was reported (unless retention deleted it).
fn check_barrier(
    exp: &Expectation,
    start: i64,
    recovered: &BTreeMap<i64, Recovered>,
    v: &mut Vec<String>,
) {
    if let Some(b) = exp.stopped_barrier.filter(|b| *b >= start) {
        let is_barrier = recovered
            .get(&b)
            .and_then(|r| RecordBatch::new(&r.bytes, 0).ok())
            .and_then(|batch| BatchSummary::from_batch(&batch).ok())
            .is_some_and(|s| s.is_mirror_pid_reset());
        if !is_barrier {
            v.push(format!(
                "(e) Stopped was reported but no barrier at offset {b}"
            ));
        }
    }
}

/// What check (d) compares of a producer: epoch, last sequence, last data offset, coordinator
/// epoch and open transaction, for every producer with a cached batch or an open transaction.
pub(crate) type ProducerKey = (i16, i32, i64, i32, Option<i64>);

pub(crate) fn producer_keys(m: &ProducerStateManager) -> BTreeMap<i64, ProducerKey> {
    m.active_producers()
        .iter()
        .filter(|(_, e)| !e.is_empty() || e.current_txn_first_offset().is_some())
        .map(|(pid, e)| {
            let key = (
                e.producer_epoch(),
                e.last_seq(),
                e.last_data_offset(),
                e.coordinator_epoch(),
                e.current_txn_first_offset(),
            );
            (*pid, key)
        })
        .collect()
}

/// A fresh manager fed `batches` with `Replication` rules, as of log end `leo` with the high
/// watermark there: its producers and its last stable offset. A refused batch is a violation.
fn reference_state(
    w: &Workload,
    batches: &[(i64, &[u8])],
    leo: i64,
    log_start: i64,
    v: &mut Vec<String>,
) -> Result<(BTreeMap<i64, ProducerKey>, i64), String> {
    let mut psm = ProducerStateManager::new(w.config().producer_state);
    for (offset, bytes) in batches {
        let batch = RecordBatch::new(bytes, 0).map_err(|e| e.to_string())?;
        let summary = BatchSummary::from_batch(&batch).map_err(|e| e.to_string())?;
        if let Err(e) = psm.apply_batches([&summary], AppendOrigin::Replication) {
            v.push(format!("(d) reference replay refused offset {offset}: {e}"));
        }
    }
    psm.update_map_end_offset(leo);
    psm.on_high_watermark_updated(leo);
    let lso = psm.last_stable_offset_for(leo, log_start);
    Ok((producer_keys(&psm), lso))
}

fn batch_delta(bytes: &[u8]) -> i32 {
    RecordBatch::new(bytes, 0).map_or(0, |b| b.last_offset_delta())
}

/// Materializes `image` into a fresh directory, checks it and removes it.
pub fn check_image(
    w: &Workload,
    run: &CrashRun,
    image: &BTreeMap<PathBuf, Vec<u8>>,
    scratch: &Path,
) -> CheckOutcome {
    let dir = match fresh_dir(scratch, "recovered") {
        Ok(d) => d,
        Err(e) => {
            return CheckOutcome {
                violations: vec![format!("scratch: {e}")],
                ..Default::default()
            }
        }
    };
    let out = match materialize(image, &run.dir, &dir) {
        Ok(()) => check_dir(w, &dir, &run.expectation),
        Err(e) => CheckOutcome {
            violations: vec![format!("materialize: {e}")],
            ..Default::default()
        },
    };
    let _ = std::fs::remove_dir_all(&dir);
    out
}
