//! `kill-child --dir D --seed S` (the testkit's `kill-child` binary): the child process of the
//! SIGKILL test (`crates/testkit/tests/kill9.rs`). It works on the log directory `D` as a broker would, until it is killed,
//! and says on stdout what the API reported, one line at a time, each flushed before the next
//! step starts.
//!
//! It loads `D` with [`load_log_dir`] (the clean-shutdown marker and the checkpoints decide how
//! much is recovered), resumes an interrupted mirror stop, then runs steps drawn from the seed
//! on the one partition `D/kill9-0`: idempotent and transactional leader appends from producers
//! 1, 2, 3 and [`SOURCE_PID`], COMMIT/ABORT markers from the coordinator, follower appends,
//! flushes, clean close + reopen, and KIP-1279 failovers (start mirroring, mirrored batches of
//! [`SOURCE_PID`], stop: Stopping → barrier → Stopped). Segments are small, so they roll and
//! producer snapshots are taken. The configuration and the fixed clock are those of
//! [`Workload::config`] and [`TIMESTAMP`], so the parent can check the directory with
//! [`crate::crash_test::check_dir`].
//!
//! The protocol (offsets in decimal, batches as lowercase hex of their exact bytes):
//!
//! ```text
//! L clean=<0|1> cut=<bytes> leo=<offset> state=<mirror state>   loaded (at start, after a reopen)
//! W <offset> <hex>     an append is about to write this batch at this offset
//! T <offset>           a truncation to this offset is about to start (durability above it ends)
//! D <offset> <hex>     this batch is durable (a flush, a clean close or a mirror stop returned)
//! F <offset>           the recovery point after that flush: every offset below it is durable
//! S <offset>           the library reported Stopped; the barrier is at this offset
//! C                    a clean close of the log directory returned
//! ```
//!
//! `W` comes before the write, `D`/`F`/`S`/`C` after the call returned, so a kill between the
//! two never makes a line lie. Exit status: 0 when `--max-ops` or `--max-seconds` ran out (the
//! log directory is then closed cleanly); 1 on any error (one line on stderr).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::crash_test::{
    client_batch, next_seq, read_batches, replica_batch, txn_open, Workload, REPLICA_PID,
    SOURCE_PID, TIMESTAMP,
};
use crate::rng::XorShift;
use clap::Parser;
use record_format::internals::set_base_offset_and_leader_epoch;
use record_format::{end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType};
use recovery::{
    load_log_dir, AppendOrigin, Config, LoadedLogDir, MirrorPartitionState, MirrorStateFile,
    MirrorStateStore, PartitionLog,
};
use segment_store::{LogEnv, StdFs, TopicPartition};

use crate::clock::ManualClock;

/// Topic of the child's one partition (`<dir>/kill9-0`).
pub const TOPIC: &str = "kill9";
/// The source cluster id of every failover.
pub const SOURCE_CLUSTER: &str = "source";
/// Producer ids of the local leader appends.
const LOCAL_PIDS: [i64; 4] = [1, 2, 3, SOURCE_PID];

/// Arguments of `seglog kill-child`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "kill-child",
    about = "Child process of the SIGKILL test: append, flush, fail over until killed"
)]
pub struct KillChildArgs {
    /// The log directory (created if missing; the partition is `<DIR>/kill9-0`)
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Seed of the steps
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// `segment.bytes`
    #[arg(long, default_value_t = 2048, value_name = "BYTES")]
    pub segment_bytes: u64,
    /// Steps before a clean close and exit 0
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub max_ops: u64,
    /// Seconds before a clean close and exit 0
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    pub max_seconds: u64,
}

/// The configuration the child and the test share: the crash-test configuration with
/// `segment_bytes`, `std::fs`, and a clock fixed at [`TIMESTAMP`] (no producer expires).
pub fn log_dir_config(segment_bytes: u64) -> Config {
    Config {
        log: workload(0, segment_bytes).config(),
        env: LogEnv {
            storage: Arc::new(StdFs),
            clock: Arc::new(ManualClock::new(TIMESTAMP)),
        },
        ..Config::default()
    }
    .with_recovery_threads(1)
}

/// The step-free [`Workload`] whose configuration the child uses (what `check_dir` needs).
pub fn workload(seed: u64, segment_bytes: u64) -> Workload {
    Workload {
        seed,
        ops: Vec::new(),
        segment_bytes,
    }
}

/// The child's partition.
pub fn topic_partition() -> TopicPartition {
    TopicPartition::new(TOPIC, 0)
}

/// Runs the child; returns the process exit status (0 done, 1 an error, reported on `err`).
pub fn run(args: &KillChildArgs, out: &mut impl Write, err: &mut impl Write) -> u8 {
    match Child::run(args, out) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "error: kill-child seed {}: {e}", args.seed);
            1
        }
    }
}

type R<T> = Result<T, String>;

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .map(|d| char::from_digit(u32::from(d), 16).unwrap_or('0'))
        .collect()
}

/// The child's state between steps.
struct Child<'a, W: Write> {
    out: &'a mut W,
    root: PathBuf,
    partition_dir: PathBuf,
    tp: TopicPartition,
    config: Config,
    rng: XorShift,
    /// The leader epoch of local appends and mirrored batches.
    epoch: i32,
    /// Every batch below it was reported durable by this process (`D`).
    reported: i64,
}

impl<W: Write> Child<'_, W> {
    fn run(args: &KillChildArgs, out: &mut W) -> R<()> {
        let dir = partition_dir(&args.dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut child = Child {
            out,
            root: args.dir.clone(),
            partition_dir: dir,
            tp: topic_partition(),
            config: log_dir_config(args.segment_bytes),
            rng: XorShift::new(args.seed),
            epoch: 0,
            reported: 0,
        };
        let mut ld = child.open()?;
        let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
        for _ in 0..args.max_ops {
            if Instant::now() >= deadline {
                break;
            }
            ld = child.step(ld)?;
        }
        child.close(ld)
    }

    fn line(&mut self, mut line: String) -> R<()> {
        line.push('\n');
        self.out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.flush())
            .map_err(|e| format!("stdout: {e}"))
    }

    fn log<'l>(&self, ld: &'l mut LoadedLogDir) -> R<&'l mut PartitionLog> {
        ld.partitions
            .get_mut(&self.tp)
            .ok_or_else(|| format!("partition {}-0 not loaded", self.tp.topic))
    }

    /// The persisted mirror state, read from the file (not from the loaded log).
    fn mirror_state(&self) -> R<MirrorPartitionState> {
        MirrorStateFile::in_dir(&self.partition_dir)
            .load()
            .map_err(|e| e.to_string())
    }

    /// Loads the log directory, reports it (`L`), and finishes an interrupted stop.
    fn open(&mut self) -> R<LoadedLogDir> {
        let mut ld = load_log_dir(&self.root, &self.config).map_err(|e| e.to_string())?;
        let cut: u64 = ld
            .reports
            .iter()
            .flat_map(|r| r.cut.iter())
            .map(|c| c.bytes)
            .sum();
        let clean = u8::from(ld.had_clean_shutdown);
        let state = self.mirror_state()?;
        let log = self.log(&mut ld)?;
        log.set_high_watermark(i64::MAX);
        let leo = log.log_end_offset();
        self.epoch = log.leader_epoch_cache().latest_epoch().unwrap_or(0);
        self.reported = log.log_start_offset();
        self.line(format!(
            "L clean={clean} cut={cut} leo={leo} state={}",
            state.kind()
        ))?;
        if log.mirror_state() != &state {
            return Err(format!(
                "loaded mirror state {:?}, file {state:?}",
                log.mirror_state()
            ));
        }
        if let MirrorPartitionState::Stopping {
            lso,
            last_mirrored_offset,
            leader_epoch,
            ..
        } = state
        {
            let log = self.log(&mut ld)?;
            // The persisted stop point, never a recomputed LSO (the high watermark is lost).
            let point = last_mirrored_offset.unwrap_or_else(|| lso.min(log.log_end_offset()));
            self.stop(&mut ld, point, leader_epoch, true)?;
        }
        Ok(ld)
    }

    /// Closes the log directory cleanly and reports everything durable (`D`, `F`, `C`).
    fn close(&mut self, mut ld: LoadedLogDir) -> R<()> {
        let log = self.log(&mut ld)?;
        let end = log.log_end_offset();
        let batches = read_batches(log, self.reported, end)?;
        ld.close().map_err(|e| e.to_string())?;
        self.report_durable(batches, end, end)?;
        self.line("C".to_owned())
    }

    fn report_durable(&mut self, batches: Vec<(i64, Vec<u8>)>, end: i64, rp: i64) -> R<()> {
        for (offset, bytes) in batches {
            self.line(format!("D {offset} {}", hex(&bytes)))?;
        }
        self.reported = end;
        self.line(format!("F {rp}"))
    }

    fn flush(&mut self, ld: &mut LoadedLogDir) -> R<()> {
        let log = self.log(ld)?;
        log.flush().map_err(|e| e.to_string())?;
        let (end, rp) = (log.log_end_offset(), log.recovery_point());
        let batches = read_batches(log, self.reported, end)?;
        self.report_durable(batches, end, rp)
    }

    fn truncating(&mut self, offset: i64) -> R<()> {
        self.reported = self.reported.min(offset);
        self.line(format!("T {offset}"))
    }

    /// Leader append of `bytes` (`W` first), checked to land at the log end.
    fn append_as_leader(
        &mut self,
        ld: &mut LoadedLogDir,
        bytes: &[u8],
        origin: AppendOrigin,
    ) -> R<()> {
        let epoch = self.epoch;
        let log = self.log(ld)?;
        let at = log.log_end_offset();
        let mut stored = bytes.to_vec();
        set_base_offset_and_leader_epoch(&mut stored, at, epoch).map_err(|e| e.to_string())?;
        self.line(format!("W {at} {}", hex(&stored)))?;
        let log = self.log(ld)?;
        let info = log
            .append_as_leader(bytes, epoch, origin)
            .map_err(|e| e.to_string())?;
        if info.duplicate || info.first_offset != at {
            return Err(format!(
                "leader append expected at offset {at}, got {info:?}"
            ));
        }
        Ok(())
    }

    /// Follower append of a batch of `pid` at the log end (`W` first).
    fn append_as_follower(&mut self, ld: &mut LoadedLogDir, pid: i64) -> R<()> {
        let records = 1 + self.rng.below(2) as i32;
        let epoch = self.epoch;
        let log = self.log(ld)?;
        let at = log.log_end_offset();
        let bytes = replica_batch(at, pid, next_seq(log, pid), records, epoch)?;
        self.line(format!("W {at} {}", hex(&bytes)))?;
        let log = self.log(ld)?;
        // While mirroring, these are the mirror feed's batches; otherwise intra-cluster replication.
        if matches!(log.mirror_state(), MirrorPartitionState::Mirroring { .. }) {
            log.append_as_mirror(&bytes).map_err(|e| e.to_string())?;
        } else {
            log.append_as_follower(&bytes).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Runs (or, with `resume`, finishes) a mirror stop that truncates to `point`: `T`, the
    /// barrier's `W`, then `S` and the durable batches once the library reports `Stopped`.
    fn stop(
        &mut self,
        ld: &mut LoadedLogDir,
        point: i64,
        chosen_epoch: Option<i32>,
        resume: bool,
    ) -> R<()> {
        self.truncating(point)?;
        let log = self.log(ld)?;
        // The barrier opens a new epoch: MIRROR_EPOCH_FENCE above every epoch of the log's
        // batches and leader-epoch cache before truncation, and not below the destination's
        // epoch while mirroring (unless a resumed stop already chose it).
        let epoch = match chosen_epoch {
            Some(e) => e,
            None => {
                let in_batches = log.max_batch_epoch().map_err(|e| e.to_string())?;
                let seen = log
                    .leader_epoch_cache()
                    .latest_epoch()
                    .unwrap_or(-1)
                    .max(in_batches.unwrap_or(-1))
                    .max(0);
                // Never below the destination's own epoch while it was mirroring.
                let mirroring = match log.mirror_state() {
                    MirrorPartitionState::Mirroring { leader_epoch, .. } => *leader_epoch,
                    _ => -1,
                };
                (seen + recovery::MIRROR_EPOCH_FENCE).max(mirroring)
            }
        };
        let mut barrier = mirror_pid_reset_batch(0, TIMESTAMP, epoch, SOURCE_CLUSTER);
        set_base_offset_and_leader_epoch(&mut barrier, point, epoch).map_err(|e| e.to_string())?;
        self.line(format!("W {point} {}", hex(&barrier)))?;
        let log = self.log(ld)?;
        let at = if resume {
            match log.resume_mirror_stop().map_err(|e| e.to_string())? {
                MirrorPartitionState::Stopped { barrier_offset, .. } => *barrier_offset,
                other => return Err(format!("resume ended in {:?}", other.kind())),
            }
        } else {
            log.stop_mirroring().map_err(|e| e.to_string())?
        };
        // Step 4 of the stop flushed the log, barrier included.
        let log = self.log(ld)?;
        let (end, rp) = (log.log_end_offset(), log.recovery_point());
        let batches = read_batches(log, self.reported, end)?;
        self.line(format!("S {at}"))?;
        self.report_durable(batches, end, rp)?;
        // Local appends go on in the barrier's epoch.
        self.epoch = self.epoch.max(epoch);
        Ok(())
    }

    fn step(&mut self, mut ld: LoadedLogDir) -> R<LoadedLogDir> {
        let r = self.rng.below(100);
        match self.mirror_state()? {
            MirrorPartitionState::Mirroring { .. } => match r {
                0..=69 => {
                    // Truncating to the LSO may have removed the marker of a local transaction
                    // of SOURCE_PID; the source's batches then come from another producer.
                    let pid = if txn_open(self.log(&mut ld)?, SOURCE_PID) {
                        SOURCE_PID + 1
                    } else {
                        SOURCE_PID
                    };
                    self.append_as_follower(&mut ld, pid)?;
                }
                70..=79 => self.flush(&mut ld)?,
                80..=84 => return self.reopen(ld),
                _ => {
                    let log = self.log(&mut ld)?;
                    log.set_high_watermark(i64::MAX);
                    let point = log.last_stable_offset().min(log.log_end_offset());
                    self.stop(&mut ld, point, None, false)?;
                }
            },
            MirrorPartitionState::Stopping { .. } => {
                return Err("still Stopping after open".to_owned())
            }
            MirrorPartitionState::Local | MirrorPartitionState::Stopped { .. } => match r {
                0..=11 => {
                    let pid = self.pid();
                    if txn_open(self.log(&mut ld)?, pid) {
                        let t = if self.rng.below(2) == 0 {
                            ControlRecordType::Commit
                        } else {
                            ControlRecordType::Abort
                        };
                        let marker = end_txn_marker_batch(0, TIMESTAMP, 0, pid, 0, t, 0);
                        self.append_as_leader(&mut ld, &marker, AppendOrigin::Coordinator)?;
                    }
                }
                12..=19 => self.append_as_follower(&mut ld, REPLICA_PID)?,
                20..=37 => self.flush(&mut ld)?,
                38..=40 => return self.reopen(ld),
                41..=43 => {
                    let log = self.log(&mut ld)?;
                    log.set_high_watermark(i64::MAX);
                    // The workload drops open transactions first; the source then holds this
                    // log's history (a failback), so aligning to it keeps everything.
                    let lso = log.last_stable_offset();
                    self.truncating(lso)?;
                    let log = self.log(&mut ld)?;
                    log.truncate_to(lso).map_err(|e| e.to_string())?;
                    let source = crate::crash_test::FailbackSource::of(log);
                    log.start_mirroring(SOURCE_CLUSTER, &source)
                        .map_err(|e| e.to_string())?;
                    // start_mirroring flushed after truncating.
                    let log = self.log(&mut ld)?;
                    let (end, rp) = (log.log_end_offset(), log.recovery_point());
                    let batches = read_batches(log, self.reported, end)?;
                    self.report_durable(batches, end, rp)?;
                }
                _ => {
                    let pid = self.pid();
                    let records = 1 + self.rng.below(3) as i32;
                    let txn = self.rng.below(4) == 0;
                    let log = self.log(&mut ld)?;
                    let txn = txn || txn_open(log, pid);
                    let bytes = client_batch(pid, next_seq(log, pid), records, txn)?;
                    self.append_as_leader(&mut ld, &bytes, AppendOrigin::Client)?;
                }
            },
        }
        Ok(ld)
    }

    fn pid(&mut self) -> i64 {
        let i = self.rng.below(LOCAL_PIDS.len() as u64) as usize;
        LOCAL_PIDS.get(i).copied().unwrap_or(1)
    }

    fn reopen(&mut self, ld: LoadedLogDir) -> R<LoadedLogDir> {
        self.close(ld)?;
        self.open()
    }
}

/// `<root>/kill9-0`.
pub fn partition_dir(root: &Path) -> PathBuf {
    let tp = topic_partition();
    root.join(format!("{}-{}", tp.topic, tp.partition))
}
