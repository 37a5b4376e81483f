//! Crash-recovery testing: a seeded workload run on [`SimulatedFs`], crashed at every I/O point,
//! recovered by [`LogLoader`] on a real directory and checked against what the API promised.
//!
//! The loop, for one [`Workload`] (a list of [`Op`]s generated from a seed by a xorshift
//! generator):
//!
//! 1. run it once to count its I/O points (every mutating call of the
//!    [`segment_store::Storage`] seam);
//! 2. for each point `n`: run it again on a fresh [`SimulatedFs`] that fails the `n`-th call
//!    and every later one (the process "dies" at the first error), then take the durable image
//!    and, with [`TornMode::EveryByte`], the image with every byte-prefix of the write that was
//!    in flight (see [`torn_images`]);
//! 3. copy each image into a fresh real directory, load it as after a power loss
//!    (`had_clean_shutdown = false`, the last recovery point the API reported, the clock where
//!    the run left it) and run the checks of [`check_dir`].
//!
//! Every file the partition writes goes through the seam and is lost unless synced: `.log`,
//! `.txnindex`, the offset and time indexes (held in memory on the simulated storage and
//! written through it, durable at a flush as a map is at its `msync`), producer snapshots and
//! the `mirror-state` file (temporary file, fsync, rename, fsync of the directory, see
//! [`recovery::snapshot::StorageIo`]), `leader-epoch-checkpoint`, the loader's quarantine
//! folders and cut bytes, `*.deleted` renames, and every directory entry. A snapshot written at
//! an unflushed log end is durable while the tail it describes is not ("from the future"):
//! recovery must discard it. The offset and time indexes are in the images as the crash left
//! them (missing, short, zero-filled, stale past a truncation): recovery trusts those of a
//! segment below the recovery point, and check (c) verifies them against the log. The run directory exists on the real file
//! system only to be checked empty afterwards: a file there was written around the seam.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use record_format::{
    end_txn_marker_batch, Batches, ControlRecordType, LogEntry, RecordBatch, RecordBatchBuilder,
};
use recovery::leader_epoch::EpochHistory;
use recovery::{
    AppendOrigin, BatchSummary, EpochEndOffsets, LastMirrorEpoch, LoadOptions, LogLoader,
    PartitionLog, PartitionLogConfig, ProducerStateManager, StopPolicy,
};
use segment_store::{Clock, LogConfig, LogEnv, StdFs};

use crate::clock::ManualClock;
use crate::sim_fs::{CrashModel, CrashStates, SimulatedFs, TornWrite};

/// Where the clock of every run starts. Batches are stamped with the clock, which only
/// [`Op::Retention`] moves forward (by at most [`MAX_ADVANCE_MS`] a step): no producer ever
/// expires in a workload.
pub const TIMESTAMP: i64 = 1_700_000_000_000;
/// `retention.ms` of every workload.
pub const RETENTION_MS: i64 = 45_000;
/// `retention.bytes` of every workload (about a segment and a half).
pub const RETENTION_BYTES: i64 = 450;
/// The largest clock step of a generated [`Op::Retention`].
pub const MAX_ADVANCE_MS: i64 = 60_000;
/// The producer id replicated batches use (follower appends).
pub const REPLICA_PID: i64 = 50;
/// The source cluster's producer id in a mirror failover (reused locally after the barrier).
pub const SOURCE_PID: i64 = 5;
const READ_CHUNK: usize = 1 << 20;

/// A xorshift64 generator: the workload is a pure function of the seed.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator; seed 0 is replaced by a fixed non-zero value.
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in `0..n` (`0` if `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// One step of a workload. Steps are intents resolved against the log's state when run (the
/// next sequence number, whether a transaction is open), so every generated step is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A leader append from a client (idempotent producer `pid`, epoch 0, the next sequence);
    /// transactional if `txn` or if the producer has a transaction open.
    Produce {
        /// Producer id (1..=3 in generated workloads).
        pid: i64,
        /// Records in the batch.
        records: i32,
        /// Start (or continue) a transaction.
        txn: bool,
    },
    /// A COMMIT or ABORT marker from the coordinator, if `pid` has a transaction open.
    EndTxn {
        /// Producer id.
        pid: i64,
        /// COMMIT (else ABORT).
        commit: bool,
    },
    /// A follower append of a replicated batch of [`REPLICA_PID`] at the log end.
    Replicate {
        /// Records in the batch.
        records: i32,
    },
    /// `PartitionLog::flush`: everything appended so far becomes durable.
    Flush,
    /// Truncation to the base offset of the `batches`-th batch from the end.
    Truncate {
        /// How many batches to remove.
        batches: usize,
    },
    /// A clean close and a reopen (`had_clean_shutdown = true`).
    Reopen,
    /// Retention, as Kafka's log-retention task runs it: the high watermark moves up to the last
    /// stable offset, the clock forward by `advance_ms`, the log start offset past the first
    /// `delete_records` batches (Kafka `deleteRecords`; only up to the high watermark), then
    /// `deleteOldSegments`: segments whose newest batch is older than [`RETENTION_MS`], those
    /// beyond [`RETENTION_BYTES`], and those wholly below the log start offset go (each renamed
    /// to `*.deleted`, the directory synced, then removed), never past the high watermark.
    Retention {
        /// Milliseconds the clock moves forward first.
        advance_ms: i64,
        /// Batches (from the log start) to delete with `deleteRecords`; 0 for none.
        delete_records: usize,
    },
    /// An explicit producer snapshot at the log end offset, without a flush first.
    Snapshot,
    /// A KIP-1279 failover: start mirroring, replicate two source batches of [`SOURCE_PID`],
    /// stop (Stopping → barrier → Stopped), then a local append reusing [`SOURCE_PID`].
    Failover,
    /// [`Op::Failover`] under `StopPolicy::AbortOpenTransactions`: the second source batch
    /// opens a transaction of [`SOURCE_PID`] that is still open at the stop, which truncates
    /// nothing and writes its ABORT marker, then the barrier. Not drawn by
    /// [`Workload::generate`] (whose seeds keep their workloads); see
    /// [`Workload::small_aborting`].
    FailoverAbort,
}

/// A workload: the steps and the log configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The seed it was generated from (0 for hand-written ones).
    pub seed: u64,
    /// The steps.
    pub ops: Vec<Op>,
    /// `segment.bytes` (small, so that segments roll and snapshots are taken).
    pub segment_bytes: u64,
}

impl Workload {
    /// `len` steps drawn from `seed`: produce 37%, end transaction 12%, replicate 10%,
    /// flush 14%, truncate 6%, reopen 6%, retention 7%, snapshot 3%, failover 5% (at most
    /// once).
    pub fn generate(seed: u64, len: usize) -> Workload {
        let mut rng = XorShift::new(seed);
        let mut ops = Vec::with_capacity(len);
        let mut failover = false;
        while ops.len() < len {
            let r = rng.below(100);
            let pid = 1 + rng.below(3) as i64;
            let op = match r {
                0..=36 => Op::Produce {
                    pid,
                    records: 1 + rng.below(3) as i32,
                    txn: rng.below(4) == 0,
                },
                37..=48 => Op::EndTxn {
                    pid,
                    commit: rng.below(2) == 0,
                },
                49..=58 => Op::Replicate {
                    records: 1 + rng.below(2) as i32,
                },
                59..=72 => Op::Flush,
                73..=78 => Op::Truncate {
                    batches: 1 + rng.below(3) as usize,
                },
                79..=84 => Op::Reopen,
                85..=91 => Op::Retention {
                    advance_ms: MAX_ADVANCE_MS / 2 * rng.below(3) as i64,
                    delete_records: rng.below(3) as usize,
                },
                92..=94 => Op::Snapshot,
                _ if !failover => {
                    failover = true;
                    Op::Failover
                }
                _ => Op::Flush,
            };
            ops.push(op);
        }
        Workload {
            seed,
            ops,
            segment_bytes: 300,
        }
    }

    /// [`Workload::small`] with its failover under `StopPolicy::AbortOpenTransactions`
    /// ([`Op::FailoverAbort`]).
    pub fn small_aborting() -> Workload {
        let mut w = Workload::small();
        for op in &mut w.ops {
            if *op == Op::Failover {
                *op = Op::FailoverAbort;
            }
        }
        w
    }

    /// A small fixed workload with every kind of step: idempotent and transactional appends,
    /// COMMIT and ABORT, a follower append, flushes, rolls, a truncation, an explicit snapshot,
    /// retention by log start offset, by time and by size, a clean reopen and a failover.
    pub fn small() -> Workload {
        use Op::*;
        let produce = |pid, records, txn| Produce { pid, records, txn };
        Workload {
            seed: 0,
            ops: vec![
                produce(1, 2, false),
                produce(2, 1, true),
                Flush,
                produce(1, 1, false),
                EndTxn {
                    pid: 2,
                    commit: false,
                },
                Replicate { records: 1 },
                Snapshot,
                produce(3, 1, true),
                Truncate { batches: 1 },
                produce(3, 2, true),
                EndTxn {
                    pid: 3,
                    commit: true,
                },
                Retention {
                    advance_ms: 0,
                    delete_records: 3,
                },
                Flush,
                Reopen,
                produce(2, 1, false),
                Retention {
                    advance_ms: MAX_ADVANCE_MS,
                    delete_records: 0,
                },
                Failover,
                produce(1, 3, false),
                produce(2, 3, false),
                produce(3, 3, false),
                produce(1, 2, false),
                Retention {
                    advance_ms: 0,
                    delete_records: 0,
                },
                Flush,
            ],
            segment_bytes: 300,
        }
    }

    /// The partition log configuration used for every run of this workload.
    pub fn config(&self) -> PartitionLogConfig {
        PartitionLogConfig {
            log: LogConfig {
                segment_bytes: self.segment_bytes,
                index_interval_bytes: 1,
                max_index_size: 1024,
                retention_ms: RETENTION_MS,
                retention_bytes: RETENTION_BYTES,
                ..LogConfig::default()
            },
            ..Default::default()
        }
    }
}

/// What the API reported while a workload ran: the basis of the checks.
#[derive(Debug, Clone, Default)]
pub struct Expectation {
    /// Every batch ever written (or in flight) at each offset, as bytes: several versions after
    /// truncations.
    pub written: BTreeMap<i64, BTreeSet<Vec<u8>>>,
    /// The log as the API last showed it (offset → batch bytes).
    pub current: BTreeMap<i64, Vec<u8>>,
    /// The batches the API reported durable (a successful flush, close or mirror stop) and that
    /// no later truncation removed.
    pub durable: BTreeMap<i64, Vec<u8>>,
    /// The last recovery point the API reported (what a broker would checkpoint).
    pub recovery_point: i64,
    /// The barrier offset once `stop` reported `Stopped`.
    pub stopped_barrier: Option<i64>,
    /// The batches a retention step may have deleted (those below the high watermark when it
    /// started; once it completed, those below the log start offset it reached), until a
    /// truncation removes their offsets. Producer state may remember their producers or not
    /// (Kafka keeps them only while a snapshot at or below the log start holds them).
    pub retired: BTreeMap<i64, Vec<u8>>,
    /// The highest log start offset a crash image may recover to: retention may delete whole
    /// segments below it, everything from it on that was reported durable must survive.
    pub log_start_limit: i64,
    /// The clock when the run stopped (recovery runs at this time).
    pub now_ms: i64,
    /// Steps that completed before the crash.
    pub steps_done: usize,
}

impl Expectation {
    fn harvest_files(&mut self, files: &BTreeMap<PathBuf, Vec<u8>>) {
        for (path, bytes) in files {
            if path.extension().is_some_and(|e| e == "log") {
                for (_, b) in valid_batches(bytes) {
                    self.add_written(b.base_offset(), b.as_bytes());
                }
            }
        }
    }

    fn add_written(&mut self, offset: i64, bytes: &[u8]) {
        let versions = self.written.entry(offset).or_default();
        if !versions.contains(bytes) {
            versions.insert(bytes.to_vec());
        }
    }

    fn resync(&mut self, log: &PartitionLog) -> Result<(), String> {
        self.current = read_log(log)?;
        let current = &self.current;
        self.durable.retain(|o, b| current.get(o) == Some(b));
        let cur: Vec<(i64, Vec<u8>)> = current.iter().map(|(o, b)| (*o, b.clone())).collect();
        for (o, b) in cur {
            self.add_written(o, &b);
        }
        Ok(())
    }

    fn mark_durable(&mut self, log: &PartitionLog) {
        self.durable = self.current.clone();
        self.recovery_point = log.recovery_point();
    }

    /// The log's recovery point moved up without a flush step (a roll flushes up to the new
    /// segment): everything below it is durable too.
    fn note_recovery_point(&mut self, log: &PartitionLog) {
        let rp = log.recovery_point();
        if rp > self.recovery_point {
            for (o, b) in self.current.range(..rp) {
                self.durable.insert(*o, b.clone());
            }
            self.recovery_point = rp;
        }
    }

    /// Batches at or above `offset` are about to be removed by a requested truncation: they are
    /// no longer durable, and no longer a retention candidate.
    fn truncating_to(&mut self, offset: i64) {
        self.durable.retain(|o, _| *o < offset);
        self.retired.retain(|o, _| *o < offset);
        self.stopped_barrier = self.stopped_barrier.filter(|b| *b < offset);
    }
}

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
fn sim_env(sim: &SimulatedFs, clock: &Arc<ManualClock>) -> LogEnv {
    LogEnv {
        storage: Arc::new(sim.clone()),
        clock: Arc::clone(clock) as Arc<dyn Clock>,
    }
}

fn load_opts(w: &Workload, env: LogEnv, clean: bool, recovery_point: i64) -> LoadOptions {
    LoadOptions {
        config: w.config(),
        env,
        had_clean_shutdown: clean,
        recovery_point,
        ..Default::default()
    }
}

/// Runs the workload in `dir` over `env` until its end or the first error (the simulated
/// crash), recording what the API reported in `exp`. Returns the error that stopped it.
fn run_ops(
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

/// How many torn variants of each crash point to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TornMode {
    /// Only the durable image (`TornWrite::None`).
    None,
    /// Also every byte-prefix of the in-flight write.
    EveryByte,
    /// Also `n` prefixes chosen by the seed.
    Sample(usize),
}

/// Options of [`crash_test`].
#[derive(Debug, Clone)]
pub struct CrashOptions {
    /// Where the run and recovery directories are created (and removed).
    pub scratch: PathBuf,
    /// Torn-write variants.
    pub torn: TornMode,
    /// Check only every `stride`-th crash point (1 = all).
    pub stride: u64,
    /// What a crash keeps: [`CrashModel::Today`] (the durable image, plus the `torn` variants)
    /// or [`CrashModel::Weak`] (every state of [`SimulatedFs::crash_states`]; `torn` is then
    /// unused: the write in flight is one of the weak model's choices).
    pub model: CrashModel,
}

/// The outcome of crash testing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrashTestSummary {
    /// Crash points (failed I/O calls) injected.
    pub crash_points: u64,
    /// Images recovered and checked (durable + torn variants).
    pub recoveries: u64,
    /// Recovered batches checked against what was written.
    pub batches_verified: u64,
    /// Batches reported durable but missing or different after recovery (must be 0).
    pub durable_batches_lost: u64,
    /// Crash states explored under [`CrashModel::Weak`] (before removing duplicate images);
    /// 0 under [`CrashModel::Today`].
    pub states_explored: u64,
    /// Crash points whose weak states were all explored (the others were sampled).
    pub exhaustive_points: u64,
    /// The most independent choices (unsynced blocks, sizes, entry changes) at one crash point.
    pub max_choices: u32,
    /// Everything that went wrong, each naming the seed, crash point and variant.
    pub violations: Vec<String>,
}

impl CrashTestSummary {
    /// Adds another summary's counts and violations.
    pub fn merge(&mut self, other: CrashTestSummary) {
        self.crash_points += other.crash_points;
        self.recoveries += other.recoveries;
        self.batches_verified += other.batches_verified;
        self.durable_batches_lost += other.durable_batches_lost;
        self.states_explored += other.states_explored;
        self.exhaustive_points += other.exhaustive_points;
        self.max_choices = self.max_choices.max(other.max_choices);
        self.violations.extend(other.violations);
    }
}

impl fmt::Display for CrashTestSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} crash points, {} recoveries, {} batches verified, {} durable batches lost, {} violations",
            self.crash_points,
            self.recoveries,
            self.batches_verified,
            self.durable_batches_lost,
            self.violations.len()
        )
    }
}

static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh, empty, canonical directory under `root` (removed by the caller).
pub fn fresh_dir(root: &Path, prefix: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let root = root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", root.display()))?;
    loop {
        let n = DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
        let d = root.join(format!("{prefix}-{}-{n}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", d.display())),
        }
    }
}

/// One run of a workload on a fresh [`SimulatedFs`], crashed at I/O point `fail_at` (never if
/// `None`).
#[derive(Debug)]
pub struct CrashRun {
    /// What the API reported.
    pub expectation: Expectation,
    /// The error that stopped the run (the injected crash), if any.
    pub stopped_by: Option<String>,
    /// I/O points the run made.
    pub io_points: u64,
    /// The durable image (`TornWrite::None`).
    pub durable: BTreeMap<PathBuf, Vec<u8>>,
    /// The images with every byte-prefix of the write in flight (empty if none).
    pub torn: Vec<(usize, BTreeMap<PathBuf, Vec<u8>>)>,
    /// The run directory (the paths of the images are in it).
    pub dir: PathBuf,
    /// The states the weak model allows at the crash point (with [`CrashModel::Weak`]).
    pub weak: Option<CrashStates>,
}

/// Runs `w` on a fresh [`SimulatedFs`] in a fresh directory under `scratch`, failing I/O point
/// `fail_at` and every later one, then crashes. The run directory is removed.
pub fn run_crashed(w: &Workload, scratch: &Path, fail_at: Option<u64>) -> Result<CrashRun, String> {
    run_crashed_in(w, scratch, fail_at, &CrashModel::Today)
}

/// [`run_crashed`] under `model`: with [`CrashModel::Weak`], also the states it allows at the
/// crash point ([`CrashRun::weak`]).
pub fn run_crashed_in(
    w: &Workload,
    scratch: &Path,
    fail_at: Option<u64>,
    model: &CrashModel,
) -> Result<CrashRun, String> {
    let dir = fresh_dir(scratch, "run")?;
    let sim = SimulatedFs::new();
    sim.create_durable_dir_all(&dir);
    if let Some(n) = fail_at {
        sim.fail_after(n);
    }
    let clock = Arc::new(ManualClock::new(TIMESTAMP));
    let env = sim_env(&sim, &clock);
    let mut exp = Expectation::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_ops(w, &dir, &env, &clock, Some(&sim), &mut exp)
    }));
    exp.now_ms = clock.now_ms();
    let stopped_by = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some("PANIC in the workload".to_owned()),
    };
    let io_points = sim.stats().io_points;
    exp.harvest_files(&sim.live_image());
    let durable = sim.durable_image();
    let weak = match model {
        CrashModel::Weak(m) => Some(sim.crash_states(m, w.seed ^ fail_at.unwrap_or(u64::MAX))),
        CrashModel::Today => None,
    };
    let full = sim.crash(TornWrite::Prefix(usize::MAX));
    exp.harvest_files(&full);
    // The write in flight, laid over the live bytes (the weak model may keep all of it).
    for img in weak.iter().flat_map(|s| &s.images) {
        exp.harvest_files(&img.files);
    }
    let torn = torn_images(&durable, &full);
    // Nothing of the run may be a real file: it was written around the seam.
    let around = files_around_the_seam(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(e) = stopped_by.as_deref().filter(|e| e.starts_with("PANIC")) {
        return Err(e.to_owned());
    }
    if !around.is_empty() {
        return Err(format!("written around the storage seam: {around:?}"));
    }
    Ok(CrashRun {
        expectation: exp,
        stopped_by,
        io_points,
        durable,
        torn,
        dir,
        weak,
    })
}

/// The real files and directories under `dir` (recursively): a run on [`SimulatedFs`] creates
/// none.
pub fn files_around_the_seam(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The torn variants between the durable image and the image keeping the whole in-flight write
/// (`TornWrite::Prefix(usize::MAX)`): if exactly one file differs and the durable bytes are a
/// prefix of the full ones (an append, the `.log` case), every length in between, i.e. every
/// byte-prefix of what the write added; otherwise only the full image.
pub fn torn_images(
    durable: &BTreeMap<PathBuf, Vec<u8>>,
    full: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<(usize, BTreeMap<PathBuf, Vec<u8>>)> {
    let diff: Vec<&PathBuf> = full
        .iter()
        .filter(|(p, b)| durable.get(*p) != Some(*b))
        .map(|(p, _)| p)
        .collect();
    let [path] = diff.as_slice() else {
        return if diff.is_empty() {
            Vec::new()
        } else {
            vec![(usize::MAX, full.clone())]
        };
    };
    let empty = Vec::new();
    let old = durable.get(*path).unwrap_or(&empty);
    let Some(new) = full.get(*path) else {
        return Vec::new();
    };
    if new.len() <= old.len() || new.get(..old.len()) != Some(old.as_slice()) {
        return vec![(usize::MAX, full.clone())];
    }
    (1..=new.len() - old.len())
        .map(|k| {
            let mut img = full.clone();
            if let Some(f) = img.get_mut(*path) {
                f.truncate(old.len() + k);
            }
            (k, img)
        })
        .collect()
}

/// Writes `image` (paths under `from`) into the empty directory `to`.
pub fn materialize(
    image: &BTreeMap<PathBuf, Vec<u8>>,
    from: &Path,
    to: &Path,
) -> Result<(), String> {
    for (path, bytes) in image {
        let rel = path
            .strip_prefix(from)
            .map_err(|_| format!("{} is outside {}", path.display(), from.display()))?;
        let dst = to.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&dst, bytes).map_err(|e| format!("{}: {e}", dst.display()))?;
    }
    Ok(())
}

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

struct Recovered {
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
    let before = recovery::plan::tree_image(dir).map_err(|e| e.to_string())?;
    let plan = LogLoader::plan(dir, &opts).map_err(|e| format!("(f) recovery failed: {e}"))?;
    if recovery::plan::tree_image(dir).map_err(|e| e.to_string())? != before {
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

/// Counts the workload's I/O points with a run that does not crash; an error there is a
/// workload bug, returned as such.
pub fn count_io_points(w: &Workload, scratch: &Path) -> Result<(u64, CrashRun), String> {
    let run = run_crashed(w, scratch, None)?;
    if let Some(e) = &run.stopped_by {
        return Err(format!(
            "seed {}: the workload failed without a crash: {e}",
            w.seed
        ));
    }
    Ok((run.io_points, run))
}

/// Crashes `w` at every `stride`-th I/O point and checks every image. See the module docs.
pub fn crash_test(w: &Workload, opts: &CrashOptions) -> CrashTestSummary {
    crash_test_with(w, opts, &mut |_, _| {})
}

/// [`crash_test`], calling `progress(point, total)` after each crash point.
pub fn crash_test_with(
    w: &Workload,
    opts: &CrashOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> CrashTestSummary {
    let mut sum = CrashTestSummary::default();
    let total = match count_io_points(w, &opts.scratch) {
        Ok((n, run)) => {
            // The uncrashed run must recover to exactly what it wrote.
            sum.note(
                w,
                "no crash",
                &check_image(w, &run, &run.durable, &opts.scratch),
            );
            n
        }
        Err(e) => {
            sum.violations.push(e);
            return sum;
        }
    };
    let mut rng = XorShift::new(w.seed ^ 0x5EED);
    let mut point = 0;
    while point < total {
        sum.crash_points += 1;
        match run_crashed_in(w, &opts.scratch, Some(point), &opts.model) {
            Err(e) => sum
                .violations
                .push(format!("seed {} crash point {point}: {e}", w.seed)),
            Ok(run) if run.weak.is_some() => {
                let states = run
                    .weak
                    .as_ref()
                    .map(|s| (s.explored, s.exhaustive, s.choices));
                let (explored, exhaustive, choices) = states.unwrap_or_default();
                sum.states_explored += explored;
                sum.exhaustive_points += u64::from(exhaustive);
                sum.max_choices = sum.max_choices.max(choices);
                let images = run.weak.as_ref().map(|s| s.images.as_slice());
                for (n, img) in images.unwrap_or_default().iter().enumerate() {
                    let what = format!("crash point {point} weak state {n}");
                    sum.note(w, &what, &check_image(w, &run, &img.files, &opts.scratch));
                }
            }
            Ok(run) => {
                let what = format!("crash point {point}");
                sum.note(w, &what, &check_image(w, &run, &run.durable, &opts.scratch));
                let torn: Vec<&(usize, BTreeMap<PathBuf, Vec<u8>>)> = match opts.torn {
                    TornMode::None => Vec::new(),
                    TornMode::EveryByte => run.torn.iter().collect(),
                    TornMode::Sample(n) => (0..n.min(run.torn.len()))
                        .filter_map(|_| run.torn.get(rng.below(run.torn.len() as u64) as usize))
                        .collect(),
                };
                for (k, img) in torn {
                    let what = format!("crash point {point} torn after {k} bytes");
                    sum.note(w, &what, &check_image(w, &run, img, &opts.scratch));
                }
            }
        }
        progress(point + 1, total);
        point += opts.stride.max(1);
    }
    sum
}

impl CrashTestSummary {
    fn note(&mut self, w: &Workload, what: &str, o: &CheckOutcome) {
        self.recoveries += 1;
        self.batches_verified += o.batches;
        self.durable_batches_lost += o.durable_lost;
        for v in &o.violations {
            self.violations.push(format!("seed {} {what}: {v}", w.seed));
        }
    }
}
