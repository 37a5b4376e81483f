//! Running a workload's operations on a partition log: batches, appends, retention and
//! failover.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use record_format::{
    end_txn_marker_batch, Batches, ControlRecordType, LogEntry, RecordBatch, RecordBatchBuilder,
};
use recovery::EpochHistory;
use recovery::{
    AppendOrigin, EpochEndOffsets, LastMirrorEpoch, LoadOptions, LogLoader, PartitionLog,
    StopPolicy,
};
use segment_store::{Clock, LogEnv};

use super::workload::{Expectation, Op, Workload, READ_CHUNK, REPLICA_PID, SOURCE_PID, TIMESTAMP};
use crate::clock::ManualClock;
use crate::sim_fs::SimulatedFs;

/// The valid V2 batches at the start of `bytes`, with their positions.
pub fn valid_batches(bytes: &[u8]) -> Vec<(u64, RecordBatch<'_>)> {
    let mut out = Vec::new();
    for entry in Batches::new(bytes, 0) {
        match entry {
            Ok(LogEntry::V2(b)) if b.validate().is_ok() => out.push((b.position(), b)),
            _ => break,
        }
    }
    out
}

/// The whole log through the API (offset → batch bytes).
pub fn read_log(log: &PartitionLog) -> Result<BTreeMap<i64, Vec<u8>>, String> {
    Ok(
        read_batches(log, log.log_start_offset(), log.log_end_offset())?
            .into_iter()
            .collect(),
    )
}

/// The batches of `log` with base offsets in `[from, to)`, as stored, through the API.
pub fn read_batches(log: &PartitionLog, from: i64, to: i64) -> Result<Vec<(i64, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut offset = from.max(log.log_start_offset());
    while offset < to {
        let data = log
            .local_log()
            .read(offset, READ_CHUNK, true)
            .map_err(|e| e.to_string())?;
        let mut next = offset;
        for (_, b) in valid_batches(&data.records) {
            if b.base_offset() >= to {
                break;
            }
            if b.base_offset() >= from {
                out.push((b.base_offset(), b.as_bytes().to_vec()));
            }
            next = b.next_offset();
        }
        if next <= offset {
            return Err(format!("read of offset {offset} returned no batch"));
        }
        offset = next;
    }
    Ok(out)
}

/// A client batch of producer `pid` (epoch 0) from sequence `seq`: `records` records stamped
/// [`TIMESTAMP`], transactional if `txn`, base offset 0 (the leader assigns it).
pub fn client_batch(pid: i64, seq: i32, records: i32, txn: bool) -> Result<Vec<u8>, String> {
    client_batch_at(pid, seq, records, txn, TIMESTAMP)
}

/// [`client_batch`] with its records stamped `now`.
pub fn client_batch_at(
    pid: i64,
    seq: i32,
    records: i32,
    txn: bool,
    now: i64,
) -> Result<Vec<u8>, String> {
    let mut b = RecordBatchBuilder::new(0)
        .producer(pid, 0, seq)
        .transactional(txn);
    for i in 0..records {
        let v = format!("p{pid}-s{}", seq + i);
        b.append(now, Some(b"k"), Some(v.as_bytes()), &[])
            .map_err(|e| e.to_string())?;
    }
    Ok(b.build())
}

/// A replicated batch at offset `base` of producer `pid` (epoch 0) from sequence `seq`, with
/// `records` records stamped [`TIMESTAMP`] and partition leader epoch `epoch`, as a follower
/// receives it.
pub fn replica_batch(
    base: i64,
    pid: i64,
    seq: i32,
    records: i32,
    epoch: i32,
) -> Result<Vec<u8>, String> {
    replica_batch_at(base, pid, seq, records, epoch, TIMESTAMP)
}

/// [`replica_batch`] with its records stamped `now`.
pub fn replica_batch_at(
    base: i64,
    pid: i64,
    seq: i32,
    records: i32,
    epoch: i32,
    now: i64,
) -> Result<Vec<u8>, String> {
    let mut b = RecordBatchBuilder::new(base)
        .partition_leader_epoch(epoch)
        .producer(pid, 0, seq);
    for i in 0..records {
        let v = format!("r{pid}-s{}", seq + i);
        b.append(now, Some(b"k"), Some(v.as_bytes()), &[])
            .map_err(|e| e.to_string())?;
    }
    Ok(b.build())
}

/// The sequence number `pid`'s next batch must start at (0 for an unknown producer).
pub fn next_seq(log: &PartitionLog, pid: i64) -> i32 {
    log.producer_state()
        .last_entry(pid)
        .filter(|e| !e.is_empty())
        .map_or(0, |e| e.last_seq().wrapping_add(1))
}

/// Whether `pid` has a transaction open in `log`.
pub fn txn_open(log: &PartitionLog, pid: i64) -> bool {
    log.producer_state()
        .last_entry(pid)
        .is_some_and(|e| e.current_txn_first_offset().is_some())
}

/// The environment of a run: the simulated storage and a clock starting at [`TIMESTAMP`].
pub(super) fn sim_env(sim: &SimulatedFs, clock: &Arc<ManualClock>) -> LogEnv {
    LogEnv {
        storage: Arc::new(sim.clone()),
        clock: Arc::clone(clock) as Arc<dyn Clock>,
    }
}

pub(super) fn load_opts(
    w: &Workload,
    env: LogEnv,
    clean: bool,
    recovery_point: i64,
) -> LoadOptions {
    LoadOptions {
        config: recovery::Config {
            log: w.config(),
            env,
            ..recovery::Config::default()
        },
        had_clean_shutdown: clean,
        recovery_point,
        ..Default::default()
    }
}

/// Runs the workload in `dir` over `env` until its end or the first error (the simulated
/// crash), recording what the API reported in `exp`. Returns the error that stopped it.
pub(super) fn run_ops(
    w: &Workload,
    dir: &Path,
    env: &LogEnv,
    clock: &ManualClock,
    sim: Option<&SimulatedFs>,
    exp: &mut Expectation,
) -> Result<(), String> {
    let s = |e: &dyn fmt::Display| e.to_string();
    let (mut log, _) =
        LogLoader::load(dir, &load_opts(w, env.clone(), false, 0)).map_err(|e| s(&e))?;
    let mut epoch = 0i32;
    let mut failed_over = false;
    for op in &w.ops {
        let now = clock.now_ms();
        match *op {
            Op::Produce { pid, records, txn } => {
                let txn = txn || txn_open(&log, pid);
                let b = client_batch_at(pid, next_seq(&log, pid), records, txn, now)?;
                log.append_as_leader(&b, epoch, AppendOrigin::Client)
                    .map_err(|e| s(&e))?;
            }
            Op::EndTxn { pid, commit } => {
                if txn_open(&log, pid) {
                    let t = if commit {
                        ControlRecordType::Commit
                    } else {
                        ControlRecordType::Abort
                    };
                    let b = end_txn_marker_batch(0, now, 0, pid, 0, t, 0);
                    log.append_as_leader(&b, epoch, AppendOrigin::Coordinator)
                        .map_err(|e| s(&e))?;
                }
            }
            Op::Replicate { records } => {
                let b = replica_batch_at(
                    log.log_end_offset(),
                    REPLICA_PID,
                    next_seq(&log, REPLICA_PID),
                    records,
                    epoch,
                    now,
                )?;
                log.append_as_follower(&b).map_err(|e| s(&e))?;
            }
            Op::Flush => {
                log.flush().map_err(|e| s(&e))?;
                exp.resync(&log)?;
                exp.mark_durable(&log);
            }
            Op::Truncate { batches } => {
                let target = exp
                    .current
                    .keys()
                    .rev()
                    .nth(batches.saturating_sub(1))
                    .copied();
                if let Some(t) = target {
                    // A requested truncation releases the durability of what it removes, from
                    // the moment it starts.
                    exp.truncating_to(t);
                    log.truncate_to(t).map_err(|e| s(&e))?;
                }
            }
            Op::Retention {
                advance_ms,
                delete_records,
            } => run_retention(&mut log, exp, clock, advance_ms, delete_records)?,
            Op::Snapshot => {
                log.take_producer_snapshot().map_err(|e| s(&e))?;
            }
            Op::Reopen => {
                exp.resync(&log)?;
                let closed = log.close().map_err(|e| s(&e))?;
                exp.durable = exp.current.clone();
                exp.recovery_point = closed.log_end_offset;
                let opts = load_opts(w, env.clone(), true, closed.log_end_offset);
                log = LogLoader::load(dir, &opts).map_err(|e| s(&e))?.0;
            }
            Op::Failover | Op::FailoverAbort if !failed_over => {
                failed_over = true;
                let policy = if *op == Op::FailoverAbort {
                    StopPolicy::AbortOpenTransactions
                } else {
                    StopPolicy::TruncateToLastStable
                };
                epoch = run_failover(&mut log, exp, sim, epoch, now, policy)?;
            }
            Op::Failover | Op::FailoverAbort => {}
        }
        exp.resync(&log)?;
        exp.note_recovery_point(&log);
        if let Some(sim) = sim {
            exp.harvest_files(&sim.live_image());
        }
        exp.steps_done += 1;
    }
    Ok(())
}

/// [`Op::Retention`]: the clock advances, the high watermark moves up to the LSO, records
/// are deleted up to it and old segments go.
fn run_retention(
    log: &mut PartitionLog,
    exp: &mut Expectation,
    clock: &ManualClock,
    advance_ms: i64,
    delete_records: usize,
) -> Result<(), String> {
    let s = |e: &dyn fmt::Display| e.to_string();
    clock.advance(advance_ms);
    // The high watermark stops at the last stable offset, so retention never deletes
    // data of a transaction still open.
    let state = log.producer_state();
    let lso = state.last_stable_offset_for(log.log_end_offset(), log.log_start_offset());
    let hw = log.set_high_watermark(lso.max(log.high_watermark()));
    // Until the step completes, a crash may keep any of its deletions.
    let limit = exp.log_start_limit;
    exp.log_start_limit = limit.max(hw);
    for (o, b) in exp.current.range(..hw) {
        exp.retired.insert(*o, b.clone());
    }
    let target = exp.current.keys().nth(delete_records).copied();
    if let Some(t) = target.filter(|&t| delete_records > 0 && t <= hw) {
        log.delete_records_before(t).map_err(|e| s(&e))?;
    }
    log.delete_old_segments().map_err(|e| s(&e))?;
    let start = log.log_start_offset();
    exp.retired.retain(|o, _| *o < start);
    exp.log_start_limit = limit.max(start);
    Ok(())
}

/// [`Op::Failover`] (the first): mirroring from a source that holds this log's history, two
/// mirrored batches, the stop (the barrier), and a local producer reusing the source's pid.
/// Returns the epoch local appends go on in.
fn run_failover(
    log: &mut PartitionLog,
    exp: &mut Expectation,
    sim: Option<&SimulatedFs>,
    epoch: i32,
    now: i64,
    policy: StopPolicy,
) -> Result<i32, String> {
    let s = |e: &dyn fmt::Display| e.to_string();
    log.set_high_watermark(i64::MAX);
    // The workload drops open transactions before mirroring (truncation to the
    // LSO); the source then holds this log's history (a failback), so aligning to it keeps
    // all.
    let lso = log.last_stable_offset();
    exp.truncating_to(lso);
    log.truncate_to(lso).map_err(|e| s(&e))?;
    let source = FailbackSource::of(log);
    log.start_mirroring("source", &source).map_err(|e| s(&e))?;
    for seq in [0, 2] {
        let b = if seq == 2 && policy == StopPolicy::AbortOpenTransactions {
            // A transaction of the source, still open when the feed stops.
            let mut b = RecordBatchBuilder::new(log.log_end_offset())
                .partition_leader_epoch(epoch)
                .producer(SOURCE_PID, 0, seq)
                .transactional(true);
            b.append(now, Some(b"k"), Some(b"open"), &[])
                .map_err(|e| e.to_string())?;
            b.build()
        } else {
            replica_batch_at(log.log_end_offset(), SOURCE_PID, seq, 2, epoch, now)?
        };
        log.append_as_mirror(&b).map_err(|e| s(&e))?;
    }
    // The stop may truncate them away again within this step, after a roll made
    // them durable: they were written all the same.
    if let Some(sim) = sim {
        exp.harvest_files(&sim.live_image());
    }
    log.set_high_watermark(i64::MAX);
    // The stop truncates to the LSO again, and it can be lower now: truncating to
    // the first LSO may have removed the marker that closed an earlier transaction.
    // (Under AbortOpenTransactions nothing is truncated.)
    if policy == StopPolicy::TruncateToLastStable {
        let lso = log.last_stable_offset();
        exp.truncating_to(lso);
    }
    let barrier = log.stop_mirroring_with(policy).map_err(|e| s(&e))?;
    exp.resync(log)?;
    exp.mark_durable(log);
    exp.stopped_barrier = Some(barrier);
    // Local appends go on in the epoch the stop opened (the barrier's).
    let epoch = log.leader_epoch();
    // A local producer reuses the source's pid from sequence 0.
    let b = client_batch_at(SOURCE_PID, next_seq(log, SOURCE_PID), 1, false, now)?;
    log.append_as_leader(&b, epoch, AppendOrigin::Client)
        .map_err(|e| s(&e))?;
    Ok(epoch)
}

/// The source a workload's failover mirrors from: the partition that mirrored this log and
/// stopped (a failback), so it holds this log's history up to its end and tells its Last Mirror
/// Epoch (this log's latest epoch, ending at its end). A partition that never mirrored starts
/// mirroring a source that tells none by truncating fully: none of its batches can be there.
pub(crate) struct FailbackSource(EpochHistory);

impl FailbackSource {
    pub(crate) fn of(log: &PartitionLog) -> Self {
        Self(EpochHistory::of(log))
    }
}

impl EpochEndOffsets for FailbackSource {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        self.0.end_offset_for_epoch(requested)
    }

    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        let epoch = self.0.entries.last().map_or(-1, |e| e.epoch);
        let end = self.0.log_end_offset;
        Some(LastMirrorEpoch {
            epoch,
            end_offset: end,
            barrier_offset: end,
            stop_epoch: epoch.saturating_add(recovery::MIRROR_EPOCH_FENCE),
        })
    }
}
