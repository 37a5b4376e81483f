//! Crash-recovery testing: a seeded workload run on [`SimulatedFs`], crashed at every I/O point,
//! recovered by [`LogLoader`] on a real directory and checked against what the API promised.
//!
//! The loop, for one [`Workload`] (a list of [`Op`]s generated from a seed by a xorshift
//! generator):
//!
//! 1. run it once to count its I/O points (every mutating call of the [`Storage`] seam);
//! 2. for each point `n`: run it again on a fresh [`SimulatedFs`] that fails the `n`-th call
//!    and every later one (the process "dies" at the first error), then take the durable image
//!    and, with [`TornMode::EveryByte`], the image with every byte-prefix of the write that was
//!    in flight (see [`torn_images`]);
//! 3. copy each image into a fresh real directory, load it as after a power loss
//!    (`had_clean_shutdown = false`, the last recovery point the API reported) and run the
//!    checks of [`check_dir`].
//!
//! What goes around the seam, and how it is accounted for:
//!
//! * the offset and time indexes are memory-mapped real files: they are derived data (Kafka
//!   rebuilds them above the recovery point), so they are **not** copied into the recovered
//!   directory; recovery must work without them and the checks verify the rebuilt ones;
//! * producer snapshots and the `mirror-state` file are written through
//!   [`crate::snapshot::StdIo`] (temporary file, fsync, rename, fsync of the directory): each is
//!   durable once its write returns, so the harness copies the real files as they stand at the
//!   crash. A snapshot may thus describe offsets the durable log lost ("from the future"), which
//!   recovery must discard;
//! * the loader's quarantine directory is created with `std::fs` (recovery output, not state).
//!
//! Everything else (`.log`, `.txnindex`, `leader-epoch-checkpoint`, directory entries) goes
//! through the seam and is lost unless synced.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use record_format::{
    end_txn_marker_batch, Batches, ControlRecordType, LogEntry, RecordBatch, RecordBatchBuilder,
};
use segment_store::{LogConfig, LogEnv, ManualClock, SimulatedFs, StdFs, TornWrite};

use crate::loader::{LoadOptions, LogLoader};
use crate::log::{PartitionLog, PartitionLogConfig};
use crate::mirror::{MirrorPartition, MirrorStateFile};
use crate::producer_state::{AppendOrigin, ProducerStateManager};
use crate::summary::BatchSummary;

/// Every batch timestamp and the clock of every run: no producer ever expires.
pub const TIMESTAMP: i64 = 1_700_000_000_000;
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
    /// A KIP-1279 failover: start mirroring, replicate two source batches of [`SOURCE_PID`],
    /// stop (Stopping → barrier → Stopped), then a local append reusing [`SOURCE_PID`].
    Failover,
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
    /// `len` steps drawn from `seed`: produce 40%, end transaction 12%, replicate 10%,
    /// flush 18%, truncate 7%, reopen 8%, failover 5% (at most once).
    pub fn generate(seed: u64, len: usize) -> Workload {
        let mut rng = XorShift::new(seed);
        let mut ops = Vec::with_capacity(len);
        let mut failover = false;
        while ops.len() < len {
            let r = rng.below(100);
            let pid = 1 + rng.below(3) as i64;
            let op = match r {
                0..=39 => Op::Produce {
                    pid,
                    records: 1 + rng.below(3) as i32,
                    txn: rng.below(4) == 0,
                },
                40..=51 => Op::EndTxn {
                    pid,
                    commit: rng.below(2) == 0,
                },
                52..=61 => Op::Replicate {
                    records: 1 + rng.below(2) as i32,
                },
                62..=79 => Op::Flush,
                80..=86 => Op::Truncate {
                    batches: 1 + rng.below(3) as usize,
                },
                87..=94 => Op::Reopen,
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

    /// A small fixed workload with every kind of step: idempotent and transactional appends,
    /// COMMIT and ABORT, a follower append, flushes, a roll, a truncation, a clean reopen and a
    /// failover.
    pub fn small() -> Workload {
        use Op::*;
        Workload {
            seed: 0,
            ops: vec![
                Produce {
                    pid: 1,
                    records: 2,
                    txn: false,
                },
                Produce {
                    pid: 2,
                    records: 1,
                    txn: true,
                },
                Flush,
                Produce {
                    pid: 1,
                    records: 1,
                    txn: false,
                },
                EndTxn {
                    pid: 2,
                    commit: false,
                },
                Replicate { records: 1 },
                Produce {
                    pid: 3,
                    records: 1,
                    txn: true,
                },
                Truncate { batches: 1 },
                Produce {
                    pid: 3,
                    records: 2,
                    txn: true,
                },
                EndTxn {
                    pid: 3,
                    commit: true,
                },
                Flush,
                Reopen,
                Produce {
                    pid: 2,
                    records: 1,
                    txn: false,
                },
                Failover,
                Produce {
                    pid: 1,
                    records: 1,
                    txn: false,
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
    let mut out = BTreeMap::new();
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    while offset < end {
        let data = log
            .local_log()
            .read(offset, READ_CHUNK, true)
            .map_err(|e| e.to_string())?;
        let mut next = offset;
        for (_, b) in valid_batches(&data.records) {
            out.insert(b.base_offset(), b.as_bytes().to_vec());
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
    let mut b = RecordBatchBuilder::new(0)
        .producer(pid, 0, seq)
        .transactional(txn);
    for i in 0..records {
        let v = format!("p{pid}-s{}", seq + i);
        b.append(TIMESTAMP, Some(b"k"), Some(v.as_bytes()), &[])
            .map_err(|e| e.to_string())?;
    }
    Ok(b.build())
}

/// A replicated batch at offset `base` of producer `pid` (epoch 0) from sequence `seq`, with
/// `records` records and partition leader epoch `epoch`, as a follower receives it.
pub fn replica_batch(
    base: i64,
    pid: i64,
    seq: i32,
    records: i32,
    epoch: i32,
) -> Result<Vec<u8>, String> {
    let mut b = RecordBatchBuilder::new(base)
        .partition_leader_epoch(epoch)
        .producer(pid, 0, seq);
    for i in 0..records {
        let v = format!("r{pid}-s{}", seq + i);
        b.append(TIMESTAMP, Some(b"k"), Some(v.as_bytes()), &[])
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

/// The environment of a run: the simulated storage and a fixed clock.
fn sim_env(sim: &SimulatedFs) -> LogEnv {
    LogEnv {
        storage: Arc::new(sim.clone()),
        clock: Arc::new(ManualClock::new(TIMESTAMP)),
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
    sim: Option<&SimulatedFs>,
    exp: &mut Expectation,
) -> Result<(), String> {
    let s = |e: &dyn fmt::Display| e.to_string();
    let (mut log, _) =
        LogLoader::load(dir, &load_opts(w, env.clone(), false, 0)).map_err(|e| s(&e))?;
    let mut epoch = 0i32;
    let mut failed_over = false;
    for op in &w.ops {
        match *op {
            Op::Produce { pid, records, txn } => {
                let txn = txn || txn_open(&log, pid);
                let b = client_batch(pid, next_seq(&log, pid), records, txn)?;
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
                    let b = end_txn_marker_batch(0, TIMESTAMP, 0, pid, 0, t, 0);
                    log.append_as_leader(&b, epoch, AppendOrigin::Coordinator)
                        .map_err(|e| s(&e))?;
                }
            }
            Op::Replicate { records } => {
                let b = replica_batch(
                    log.log_end_offset(),
                    REPLICA_PID,
                    next_seq(&log, REPLICA_PID),
                    records,
                    epoch,
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
                    exp.durable.retain(|o, _| *o < t);
                    exp.stopped_barrier = exp.stopped_barrier.filter(|b| *b < t);
                    log.truncate_to(t).map_err(|e| s(&e))?;
                }
            }
            Op::Reopen => {
                exp.resync(&log)?;
                let closed = log.close().map_err(|e| s(&e))?;
                exp.durable = exp.current.clone();
                exp.recovery_point = closed.log_end_offset;
                let opts = load_opts(w, env.clone(), true, closed.log_end_offset);
                log = LogLoader::load(dir, &opts).map_err(|e| s(&e))?.0;
            }
            Op::Failover if !failed_over => {
                failed_over = true;
                log.set_high_watermark(i64::MAX);
                // start_mirroring and stop truncate to the LSO (open transactions are dropped).
                let lso = log.last_stable_offset();
                exp.durable.retain(|o, _| *o < lso);
                let mut part =
                    MirrorPartition::open(log, MirrorStateFile::in_dir(dir)).map_err(|e| s(&e))?;
                part.start_mirroring("source").map_err(|e| s(&e))?;
                let (mut l, store) = part.into_parts();
                for seq in [0, 2] {
                    let b = replica_batch(l.log_end_offset(), SOURCE_PID, seq, 2, epoch)?;
                    l.append_as_follower(&b).map_err(|e| s(&e))?;
                }
                l.set_high_watermark(i64::MAX);
                let mut part = MirrorPartition::open(l, store).map_err(|e| s(&e))?;
                // stop truncates to the LSO again, and it can be lower now: truncating to the
                // first LSO may have removed the marker that closed an earlier transaction.
                let lso = part.log().last_stable_offset();
                exp.durable.retain(|o, _| *o < lso);
                let barrier = part.stop().map_err(|e| s(&e))?;
                let (l, _) = part.into_parts();
                log = l;
                exp.resync(&log)?;
                exp.mark_durable(&log);
                exp.stopped_barrier = Some(barrier);
                epoch += 1;
                // A local producer reuses the source's pid from sequence 0.
                let b = client_batch(SOURCE_PID, next_seq(&log, SOURCE_PID), 1, false)?;
                log.append_as_leader(&b, epoch, AppendOrigin::Client)
                    .map_err(|e| s(&e))?;
            }
            Op::Failover => {}
        }
        exp.resync(&log)?;
        if let Some(sim) = sim {
            exp.harvest_files(&sim.live_image());
        }
        exp.steps_done += 1;
    }
    Ok(())
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
    /// Snapshots and `mirror-state` as the real directory held them (outside the seam).
    pub outside: BTreeMap<PathBuf, Vec<u8>>,
    /// The run directory (the paths of the images are in it).
    pub dir: PathBuf,
}

/// Runs `w` on a fresh [`SimulatedFs`] in a fresh directory under `scratch`, failing I/O point
/// `fail_at` and every later one, then crashes. The run directory is removed.
pub fn run_crashed(w: &Workload, scratch: &Path, fail_at: Option<u64>) -> Result<CrashRun, String> {
    let dir = fresh_dir(scratch, "run")?;
    let sim = SimulatedFs::new();
    sim.create_durable_dir_all(&dir);
    if let Some(n) = fail_at {
        sim.fail_after(n);
    }
    let env = sim_env(&sim);
    let mut exp = Expectation::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_ops(w, &dir, &env, Some(&sim), &mut exp)
    }));
    let stopped_by = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(_) => Some("PANIC in the workload".to_owned()),
    };
    let io_points = sim.stats().io_points;
    exp.harvest_files(&sim.live_image());
    let durable = sim.durable_image();
    let full = sim.crash(TornWrite::Prefix(usize::MAX));
    exp.harvest_files(&full);
    let torn = torn_images(&durable, &full);
    let mut outside = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".snapshot") || name == "mirror-state" {
                if let Ok(bytes) = std::fs::read(e.path()) {
                    outside.insert(e.path(), bytes);
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(e) = stopped_by.as_deref().filter(|e| e.starts_with("PANIC")) {
        return Err(e.to_owned());
    }
    Ok(CrashRun {
        expectation: exp,
        stopped_by,
        io_points,
        durable,
        torn,
        outside,
        dir,
    })
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

/// Writes `image` (paths under `from`) and `outside` into the empty directory `to`.
pub fn materialize(
    image: &BTreeMap<PathBuf, Vec<u8>>,
    outside: &BTreeMap<PathBuf, Vec<u8>>,
    from: &Path,
    to: &Path,
) -> Result<(), String> {
    for (path, bytes) in image.iter().chain(outside) {
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
    let env = LogEnv {
        storage: Arc::new(StdFs),
        clock: Arc::new(ManualClock::new(TIMESTAMP)),
    };
    let opts = load_opts(w, env, false, exp.recovery_point);
    let (mut log, _report) =
        LogLoader::load(dir, &opts).map_err(|e| format!("(f) recovery failed: {e}"))?;
    let v = &mut out.violations;

    // (b) the files: a valid prefix of what was written.
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
    let mut next = log.log_start_offset();
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
    let leo = log.log_end_offset();
    if next != leo {
        v.push(format!(
            "(b) files end at offset {next}, the log end offset is {leo}"
        ));
    }
    out.batches = recovered.len() as u64;
    out.log_end_offset = leo;

    // (a) durable batches survive byte for byte.
    for (offset, bytes) in &exp.durable {
        if recovered.get(offset).map(|r| &r.bytes) != Some(bytes) {
            out.durable_lost += 1;
            v.push(format!(
                "(a) durable batch at offset {offset} lost (log end {leo})"
            ));
        }
    }

    // (c) indexes agree with the log.
    log.local_log().with_segments(|segs| {
        for seg in segs {
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

    // (d) producer state and LSO equal a reference replay of the recovered batches.
    log.set_high_watermark(i64::MAX);
    let mut psm = ProducerStateManager::new(w.config().producer_state);
    for (offset, r) in &recovered {
        let batch = RecordBatch::new(&r.bytes, 0).map_err(|e| e.to_string())?;
        let summary = BatchSummary::from_batch(&batch).map_err(|e| e.to_string())?;
        if let Err(e) = psm.apply_batches([&summary], AppendOrigin::Replication) {
            v.push(format!("(d) reference replay refused offset {offset}: {e}"));
        }
    }
    psm.update_map_end_offset(leo);
    psm.on_high_watermark_updated(leo);
    let key = |m: &ProducerStateManager| {
        m.active_producers()
            .iter()
            .filter(|(_, e)| !e.is_empty() || e.current_txn_first_offset().is_some())
            .map(|(pid, e)| {
                (
                    *pid,
                    e.producer_epoch(),
                    e.last_seq(),
                    e.last_data_offset(),
                    e.coordinator_epoch(),
                    e.current_txn_first_offset(),
                )
            })
            .collect::<Vec<_>>()
    };
    let (got, want) = (key(log.producer_state()), key(&psm));
    if got != want {
        v.push(format!("(d) producer state {got:?}, reference {want:?}"));
    }
    let want_lso = psm.last_stable_offset_for(leo, log.log_start_offset());
    if log.last_stable_offset() != want_lso {
        v.push(format!(
            "(d) LSO {}, reference {want_lso}",
            log.last_stable_offset()
        ));
    }

    // (e) the barrier once Stopped was reported.
    if let Some(b) = exp.stopped_barrier {
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
    drop(log);
    Ok(())
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
    let out = match materialize(image, &run.outside, &run.dir, &dir) {
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
        match run_crashed(w, &opts.scratch, Some(point)) {
            Err(e) => sum
                .violations
                .push(format!("seed {} crash point {point}: {e}", w.seed)),
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
