//! `seglog demo --scenario NAME [--no-barrier] [DIR]`: the KIP-1279 topologies and the seed's
//! three producer-id collision scenarios, on real partition directories.
//!
//! Each cluster is a log directory `DIR/<cluster>/` holding `<topic>-<partition>/` folders.
//! Producers append as a leader would (client and coordinator origin, the partition's leader
//! epoch); a mirror feed first aligns by leader epoch (`align_to_source`) and then copies the
//! source's batches byte for byte (`append_as_mirror`, replication rules); a failover is
//! `stop_mirroring` (truncate to the LSO, new leader epoch, barrier). With `--no-barrier` a
//! failover is what a system without KIP-1279's barrier does: the partition becomes writable,
//! is truncated to the LSO (not in `collision-transactions`), gets a new leader epoch, and
//! forgets its producer state by restarting cleanly without producer snapshots (which Kafka loads
//! as empty state) — so its leader accepts the reused producer ids, and nothing in the log says
//! why. Every partition is closed cleanly at the end; `seglog verify` and `seglog producers
//! --audit` then read them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::ValueEnum;
use record_format::{end_txn_marker_batch, ControlRecordType, RecordBatchBuilder};
use recovery::{
    AppendOrigin, IsolationLevel, LoadOptions, LogLoader, MirrorLog, MirrorPartitionState,
    MirroredLog, PartitionLog, StopPolicy,
};
use segment_store::internals::PRODUCER_SNAPSHOT_FILE_SUFFIX;
use segment_store::{Clock, LogEnv};
use testkit::ManualClock;

use super::{io, state_line, DemoResult, Recording};

/// The scenarios of `seglog demo --scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// A mirrors to B; B fails over and its producers reuse A's ids.
    ActivePassive,
    /// A to B, B fails over; A comes back as B's mirror; A fails back, B mirrors A.
    Failback,
    /// A mirrors to B and to C; each fails over on its own.
    FanOut,
    /// A's orders and B's payments mirror into C, which fails over each.
    FanIn,
    /// A to B to C; B fails over (C follows B's barrier), then C fails over.
    Chain,
    /// Seed scenario 1: same producer epoch, sequence restarts (B, and C mirroring B).
    CollisionSameEpoch,
    /// Seed scenario 2: the reused id at a lower producer epoch.
    CollisionEpochs,
    /// Seed scenario 3: a local transaction interleaved with the mirrored one.
    CollisionTransactions,
    /// A transaction open at the stop: B stops with TruncateToLastStable, C with
    /// AbortOpenTransactions; what consumers read on each.
    OpenTxnAtStop,
}

impl Scenario {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::ActivePassive => "active-passive",
            Self::Failback => "failback",
            Self::FanOut => "fan-out",
            Self::FanIn => "fan-in",
            Self::Chain => "chain",
            Self::CollisionSameEpoch => "collision-same-epoch",
            Self::CollisionEpochs => "collision-epochs",
            Self::CollisionTransactions => "collision-transactions",
            Self::OpenTxnAtStop => "open-txn-at-stop",
        }
    }
}

/// One partition: `(cluster, "<topic>-<partition>")`.
type Part = (&'static str, &'static str);

struct Sim<'a, W: Write> {
    out: &'a mut W,
    root: PathBuf,
    env: LogEnv,
    clock: Arc<ManualClock>,
    barrier: bool,
    logs: BTreeMap<Part, PartitionLog>,
    /// Next sequence per (partition, producer id, producer epoch); a failover starts the
    /// partition's producers afresh (new sessions from sequence 0: the reuse the barrier is for).
    seqs: BTreeMap<(Part, i64, i16), i32>,
    step: usize,
}

fn name(p: Part) -> String {
    format!("{}/{}", p.0, p.1)
}

fn range(first: i64, last: i64) -> String {
    if first == last {
        format!("offset {first}")
    } else {
        format!("offsets {first}..{last}")
    }
}

impl<W: Write> Sim<'_, W> {
    fn say(&mut self, line: impl AsRef<str>) -> DemoResult<()> {
        writeln!(self.out, "{}", line.as_ref()).map_err(io("write output"))
    }

    fn step(&mut self, title: &str) -> DemoResult<()> {
        self.step += 1;
        let n = self.step;
        self.say(format!("== {n}. {title}"))
    }

    fn dir(&self, p: Part) -> PathBuf {
        self.root.join(p.0).join(p.1)
    }

    fn load(&self, p: Part, clean_end: Option<i64>) -> DemoResult<PartitionLog> {
        let dir = self.dir(p);
        std::fs::create_dir_all(&dir).map_err(io("create partition"))?;
        let opts = LoadOptions {
            config: recovery::Config {
                env: self.env.clone(),
                ..recovery::Config::default()
            },
            had_clean_shutdown: clean_end.is_some(),
            recovery_point: clean_end.unwrap_or(0),
            ..LoadOptions::default()
        };
        let (mut log, _) = LogLoader::load(&dir, &opts).map_err(io("open partition"))?;
        let end = log.log_end_offset();
        log.set_high_watermark(end);
        Ok(log)
    }

    fn log(&mut self, p: Part) -> DemoResult<&mut PartitionLog> {
        if !self.logs.contains_key(&p) {
            let log = self.load(p, None)?;
            self.logs.insert(p, log);
        }
        self.logs
            .get_mut(&p)
            .ok_or_else(|| format!("{} is not open", name(p)))
    }

    fn tick(&mut self) -> i64 {
        self.clock.advance(10);
        self.clock.now_ms()
    }

    fn append(
        &mut self,
        p: Part,
        bytes: &[u8],
        origin: AppendOrigin,
        what: &str,
    ) -> DemoResult<()> {
        let log = self.log(p)?;
        let epoch = log.leader_epoch();
        let info = log
            .append_as_leader(bytes, epoch, origin)
            .map_err(|e| format!("{}: {what}: {e}", name(p)))?;
        if info.duplicate {
            return Err(format!(
                "{}: {what} was answered as a duplicate of {}",
                name(p),
                range(info.first_offset, info.last_offset)
            ));
        }
        let end = log.log_end_offset();
        log.set_high_watermark(end);
        self.say(format!(
            "{}: {what} -> {} (leader epoch {epoch})",
            name(p),
            range(info.first_offset, info.last_offset)
        ))
    }

    /// A produce request of `n` records from producer `pid` at `epoch` (sequences continue per
    /// cluster, producer and epoch).
    fn produce(&mut self, p: Part, pid: i64, epoch: i16, n: i32, txn: bool) -> DemoResult<()> {
        let seq = *self.seqs.get(&(p, pid, epoch)).unwrap_or(&0);
        let ts = self.tick();
        let mut b = RecordBatchBuilder::new(0)
            .producer(pid, epoch, seq)
            .transactional(txn);
        for i in 0..n {
            let v = format!("{}-{pid}-{}", p.0, seq + i);
            b.append(ts, Some(b"k"), Some(v.as_bytes()), &[])
                .map_err(io("build batch"))?;
        }
        let what = format!(
            "pid {pid} epoch {epoch} {} seq {seq}..{}",
            if txn { "transactional" } else { "idempotent" },
            seq + n - 1
        );
        self.append(p, &b.build(), AppendOrigin::Client, &what)?;
        self.seqs.insert((p, pid, epoch), seq + n);
        Ok(())
    }

    fn end_txn(&mut self, p: Part, pid: i64, epoch: i16, commit: bool) -> DemoResult<()> {
        let ts = self.tick();
        let t = if commit {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        };
        let bytes = end_txn_marker_batch(0, ts, 0, pid, epoch, t, 0);
        let what = format!("pid {pid} {}", if commit { "COMMIT" } else { "ABORT" });
        self.append(p, &bytes, AppendOrigin::Coordinator, &what)
    }

    fn source_id(p: Part) -> String {
        format!("cluster-{}", p.0)
    }

    /// `dst` starts mirroring `src` (log alignment by leader epoch).
    fn start_mirroring(&mut self, dst: Part, src: Part) -> DemoResult<()> {
        self.log(src)?;
        self.log(dst)?;
        let (Some(mut d), Some(s)) = (self.logs.remove(&dst), self.logs.get(&src)) else {
            return Err("partition not open".into());
        };
        let before = d.log_end_offset();
        let r = d.start_mirroring(&Self::source_id(src), s);
        let after = d.log_end_offset();
        let state = state_line(d.mirror_state());
        self.logs.insert(dst, d);
        r.map_err(|e| format!("{}: start mirroring: {e}", name(dst)))?;
        let cut = if after < before {
            format!(", truncated {before} -> {after} (aligned by leader epoch)")
        } else {
            String::new()
        };
        self.say(format!(
            "{}: start mirroring {}{cut}; mirror-state -> {state}",
            name(dst),
            name(src)
        ))
    }

    /// The mirror feed: align by leader epoch, then copy every new batch of `src`.
    fn mirror(&mut self, dst: Part, src: Part) -> DemoResult<()> {
        self.log(src)?;
        self.log(dst)?;
        let (Some(mut d), Some(s)) = (self.logs.remove(&dst), self.logs.get(&src)) else {
            return Err("partition not open".into());
        };
        let r = copy_batches(&mut d, s);
        self.logs.insert(dst, d);
        let (aligned, copied, first, end, warnings) =
            r.map_err(|e| format!("{} <- {}: {e}", name(dst), name(src)))?;
        if let Some(at) = aligned {
            self.say(format!(
                "{}: {}'s log diverged: truncated to {at} (leader-epoch exchange)",
                name(dst),
                name(src)
            ))?;
        }
        let what = if copied == 0 {
            "nothing new".to_owned()
        } else {
            format!("{copied} batch(es), {}", range(first, end - 1))
        };
        self.say(format!(
            "{} <- {}: {what}, byte for byte{}",
            name(dst),
            name(src),
            if warnings.is_empty() {
                String::new()
            } else {
                format!("; replication warnings: {}", warnings.join("; "))
            }
        ))
    }

    /// A failover of the mirror `p`: `stop_mirroring`, or with `--no-barrier` the failover of
    /// a system without the barrier (module docs; `truncate` to the LSO or not).
    fn failover(&mut self, p: Part, truncate: bool) -> DemoResult<()> {
        self.failover_with(p, truncate, StopPolicy::default())
    }

    /// [`failover`](Self::failover) with the stop policy `policy` (with the barrier).
    fn failover_with(&mut self, p: Part, truncate: bool, policy: StopPolicy) -> DemoResult<()> {
        self.tick();
        self.seqs.retain(|(q, _, _), _| *q != p);
        if self.barrier {
            let log = self.log(p)?;
            let mut rec = Recording {
                log,
                persisted: Vec::new(),
            };
            let barrier = rec
                .stop_mirroring_with(policy)
                .map_err(|e| format!("{}: stop mirroring: {e}", name(p)))?;
            let steps: Vec<String> = rec.persisted.iter().map(state_line).collect();
            let epoch = rec.log.leader_epoch();
            let end = rec.log.log_end_offset();
            rec.log.set_high_watermark(end);
            for s in steps {
                self.say(format!("{}: mirror-state -> {s}", name(p)))?;
            }
            self.say(format!(
                "{}: MIRROR_PID_RESET barrier at offset {barrier} in leader epoch {epoch}; \
                 producer state cleared; writable",
                name(p)
            ))
        } else {
            let mut log = self
                .logs
                .remove(&p)
                .map_or_else(|| self.load(p, None), Ok)?;
            log.persist_mirror_state(MirrorPartitionState::Local)
                .map_err(io("write mirror state"))?;
            if truncate {
                let lso = log.last_stable_offset();
                MirrorLog::truncate_to(&mut log, lso).map_err(io("truncate"))?;
            }
            let closed = log.close().map_err(io("close"))?;
            let dir = self.dir(p);
            for e in std::fs::read_dir(&dir).map_err(io("list partition"))? {
                let path = e.map_err(io("list partition"))?.path();
                if path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(PRODUCER_SNAPSHOT_FILE_SUFFIX))
                {
                    std::fs::remove_file(&path).map_err(io("remove snapshot"))?;
                }
            }
            let mut log = self.load(p, Some(closed.log_end_offset))?;
            // A new leader, a new leader epoch (from the log end, as Kafka's makeLeader).
            let epoch = log.leader_epoch() + 1;
            let end = log.log_end_offset();
            log.assign_epoch(epoch, end)
                .map_err(io("new leader epoch"))?;
            self.logs.insert(p, log);
            self.say(format!(
                "{}: failover WITHOUT a barrier: writable, {}leader epoch {epoch} from offset \
                 {end}, producer state forgotten (clean restart without producer snapshots); \
                 nothing in the log records it",
                name(p),
                if truncate {
                    "truncated to the LSO, "
                } else {
                    ""
                }
            ))
        }
    }

    /// Closes every partition cleanly and lists the directories.
    fn finish(&mut self) -> DemoResult<()> {
        self.step("the partition directories")?;
        let logs = std::mem::take(&mut self.logs);
        let mut dirs = Vec::new();
        let mut first = None;
        for (p, log) in logs {
            let end = log.log_end_offset();
            let state = state_line(log.mirror_state());
            log.close().map_err(io("close"))?;
            first.get_or_insert(p);
            dirs.push(format!("{}: log end {end}, mirror-state {state}", name(p)));
        }
        for d in dirs {
            self.say(d)?;
        }
        self.say("")?;
        let exe = super::current_exe();
        let mut done = format!(
            "done. The demo leaves its files in {} (delete the folder when done).",
            self.root.display()
        );
        if let Some(p) = first {
            let dir = self.dir(p);
            done.push_str(&format!(
                " Check them:\n  {exe} verify {}\n  {exe} producers --audit {}",
                dir.display(),
                dir.display()
            ));
        }
        self.say(done)
    }
}

/// `(aligned to, batches copied, first offset, new end, warnings)` of one mirror round.
type Copied = (Option<i64>, usize, i64, i64, Vec<String>);

fn copy_batches(dst: &mut PartitionLog, src: &PartitionLog) -> Result<Copied, String> {
    let aligned = dst.align_to_source(src).map_err(|e| e.to_string())?;
    let first = dst.log_end_offset();
    let mut copied = 0;
    let mut warnings = Vec::new();
    loop {
        let from = dst.log_end_offset();
        let fetch = src
            .read(from, 1 << 20, IsolationLevel::ReadUncommitted)
            .map_err(|e| e.to_string())?;
        if fetch.records.is_empty() {
            break;
        }
        let info = dst
            .append_as_mirror(&fetch.records)
            .map_err(|e| e.to_string())?;
        copied += info.num_batches;
        warnings.extend(info.warnings.iter().map(|w| format!("{w:?}")));
        let end = dst.log_end_offset();
        dst.set_high_watermark(end);
    }
    Ok((aligned, copied, first, dst.log_end_offset(), warnings))
}

const A: Part = ("A", "orders-0");
const B: Part = ("B", "orders-0");
const C: Part = ("C", "orders-0");
const B_PAYMENTS: Part = ("B", "payments-0");
const C_PAYMENTS: Part = ("C", "payments-0");

/// Runs `scenario` in `root`, printing the steps.
pub fn run(
    scenario: Scenario,
    barrier: bool,
    root: &Path,
    env: LogEnv,
    clock: Arc<ManualClock>,
    out: &mut impl Write,
) -> DemoResult<()> {
    let mut sim = Sim {
        out,
        root: root.to_path_buf(),
        env,
        clock,
        barrier,
        logs: BTreeMap::new(),
        seqs: BTreeMap::new(),
        step: 0,
    };
    sim.say(format!(
        "seglog demo --scenario {}{}: in {}",
        scenario.name(),
        if barrier {
            ""
        } else {
            " --no-barrier (failovers without the MIRROR_PID_RESET barrier)"
        },
        root.display()
    ))?;
    match scenario {
        Scenario::ActivePassive => active_passive(&mut sim)?,
        Scenario::Failback => failback(&mut sim)?,
        Scenario::FanOut => fan_out(&mut sim)?,
        Scenario::FanIn => fan_in(&mut sim)?,
        Scenario::Chain => chain(&mut sim)?,
        Scenario::CollisionSameEpoch => collision_same_epoch(&mut sim)?,
        Scenario::CollisionEpochs => collision_epochs(&mut sim)?,
        Scenario::CollisionTransactions => collision_transactions(&mut sim)?,
        Scenario::OpenTxnAtStop => open_txn_at_stop(&mut sim)?,
    }
    sim.finish()
}

/// A's traffic: idempotent 5, a committed transaction of 7, idempotent 9.
fn round<W: Write>(sim: &mut Sim<'_, W>, p: Part, epoch: i16) -> DemoResult<()> {
    sim.produce(p, 5, epoch, 3, false)?;
    sim.produce(p, 7, epoch, 2, true)?;
    sim.end_txn(p, 7, epoch, true)?;
    sim.produce(p, 9, epoch, 2, false)
}

fn active_passive<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("cluster A produces")?;
    round(sim, A, 0)?;
    sim.produce(A, 7, 0, 1, true)?;
    sim.step("B mirrors A")?;
    sim.start_mirroring(B, A)?;
    sim.mirror(B, A)?;
    sim.step("A is lost (pid 7's transaction open); B fails over")?;
    sim.failover(B, true)?;
    sim.step("B's local producers are given producer ids 5, 7 and 9")?;
    round(sim, B, 0)
}

fn failback<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("cluster A produces (pid 11 at epoch 3 is A's only)")?;
    round(sim, A, 0)?;
    sim.produce(A, 11, 3, 2, false)?;
    sim.step("B mirrors A")?;
    sim.start_mirroring(B, A)?;
    sim.mirror(B, A)?;
    sim.step("A writes a tail B never receives; B fails over")?;
    sim.produce(A, 7, 0, 1, true)?;
    sim.failover(B, true)?;
    round(sim, B, 0)?;
    sim.step("A comes back as B's mirror")?;
    sim.start_mirroring(A, B)?;
    sim.mirror(A, B)?;
    sim.step("failback: A fails over, B mirrors A")?;
    sim.failover(A, true)?;
    round(sim, A, 0)?;
    sim.start_mirroring(B, A)?;
    sim.mirror(B, A)
}

fn fan_out<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("cluster A produces; B and C mirror A")?;
    round(sim, A, 0)?;
    sim.start_mirroring(B, A)?;
    sim.start_mirroring(C, A)?;
    sim.mirror(B, A)?;
    sim.mirror(C, A)?;
    sim.step("B fails over on its own")?;
    sim.failover(B, true)?;
    round(sim, B, 0)?;
    sim.step("A goes on; C keeps mirroring A, then fails over too")?;
    round(sim, A, 0)?;
    sim.mirror(C, A)?;
    sim.failover(C, true)?;
    round(sim, C, 0)
}

fn fan_in<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("A produces orders, B produces payments (both use pid 5, 7, 9)")?;
    round(sim, A, 0)?;
    round(sim, B_PAYMENTS, 2)?;
    sim.step("C mirrors A's orders and B's payments")?;
    sim.start_mirroring(C, A)?;
    sim.start_mirroring(C_PAYMENTS, B_PAYMENTS)?;
    sim.mirror(C, A)?;
    sim.mirror(C_PAYMENTS, B_PAYMENTS)?;
    sim.step("C fails over orders; payments keeps mirroring B")?;
    sim.failover(C, true)?;
    round(sim, C, 0)?;
    round(sim, B_PAYMENTS, 2)?;
    sim.mirror(C_PAYMENTS, B_PAYMENTS)?;
    sim.step("C fails over payments")?;
    sim.failover(C_PAYMENTS, true)?;
    round(sim, C_PAYMENTS, 0)
}

fn chain<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("A produces (pid 11 at epoch 3 is A's only); B mirrors A, C mirrors B")?;
    round(sim, A, 0)?;
    sim.produce(A, 11, 3, 2, false)?;
    sim.start_mirroring(B, A)?;
    sim.start_mirroring(C, B)?;
    sim.mirror(B, A)?;
    sim.mirror(C, B)?;
    sim.step("A leaves a transaction open and is lost; B fails over; C follows B")?;
    sim.produce(A, 7, 0, 1, true)?;
    sim.mirror(B, A)?;
    sim.mirror(C, B)?;
    sim.failover(B, true)?;
    round(sim, B, 0)?;
    sim.mirror(C, B)?;
    sim.step("B is lost; C fails over")?;
    sim.failover(C, true)?;
    round(sim, C, 0)
}

/// Seed scenario 1 on B and on C, B's mirror (replication origin).
fn collision_same_epoch<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("A: pid 5 epoch 0 writes sequences 0..19, pid 9 in between")?;
    sim.produce(A, 5, 0, 10, false)?;
    sim.produce(A, 9, 0, 10, false)?;
    sim.produce(A, 5, 0, 10, false)?;
    sim.step("B mirrors A; A is lost; B fails over")?;
    sim.start_mirroring(B, A)?;
    sim.mirror(B, A)?;
    sim.failover(B, true)?;
    sim.step("B's local producer is given pid 5 at epoch 0: sequences 0..14")?;
    sim.produce(B, 5, 0, 10, false)?;
    sim.produce(B, 5, 0, 5, false)?;
    sim.step("C mirrors B (replication origin: no sequence check)")?;
    sim.start_mirroring(C, B)?;
    sim.mirror(C, B)
}

/// Seed scenario 2.
fn collision_epochs<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("A: pid 5 at epoch 3, pid 9 at epoch 0")?;
    sim.produce(A, 5, 3, 10, false)?;
    sim.produce(A, 9, 0, 10, false)?;
    sim.produce(A, 5, 3, 10, false)?;
    sim.step("B mirrors A; A is lost; B fails over")?;
    sim.start_mirroring(B, A)?;
    sim.mirror(B, A)?;
    sim.failover(B, true)?;
    sim.step("B's local producer is given pid 5 at epoch 0")?;
    sim.produce(B, 5, 0, 10, false)?;
    sim.step("C mirrors B (replication origin: a lower epoch is only a warning)")?;
    sim.start_mirroring(C, B)?;
    sim.mirror(C, B)
}

/// Seed scenario 3.
fn collision_transactions<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("A: pid 5 commits a transaction, opens another, and is lost; pid 9 writes")?;
    sim.produce(A, 5, 0, 10, true)?;
    sim.end_txn(A, 5, 0, true)?;
    sim.produce(A, 5, 0, 10, true)?;
    sim.produce(A, 9, 0, 10, false)?;
    sim.step("B mirrors A; B fails over")?;
    sim.start_mirroring(B, A)?;
    sim.mirror(B, A)?;
    // Without the barrier, the failover does not truncate either: A's transaction stays open.
    let truncate = sim.barrier;
    sim.failover(B, truncate)?;
    sim.step("B's local transactional producer is given pid 5 at epoch 0 and commits")?;
    sim.produce(B, 5, 0, 10, true)?;
    sim.end_txn(B, 5, 0, true)?;
    sim.step("C mirrors B (replication origin)")?;
    sim.start_mirroring(C, B)?;
    sim.mirror(C, B)?;
    // A's unfinished transaction wrote sequences 10..19 of pid 5 ("A-5-10".."A-5-19").
    let c = sim.log(C)?;
    let mut unfinished = 0;
    let mut offset = c.log_start_offset();
    while offset < c.last_stable_offset() {
        let fetch = c
            .read(offset, 1 << 20, IsolationLevel::ReadCommitted)
            .map_err(io("read C"))?;
        let Some(next) = record_format::Batches::new(&fetch.records, 0)
            .filter_map(Result::ok)
            .map(|b| b.last_offset() + 1)
            .last()
        else {
            break;
        };
        for r in recovery::consume(&fetch).map_err(io("consume C"))? {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            let seq = v.strip_prefix("A-5-").and_then(|s| s.parse::<i32>().ok());
            unfinished += usize::from(seq.is_some_and(|s| s >= 10));
        }
        offset = next;
    }
    sim.say(format!(
        "C: a read_committed consumer sees {unfinished} record(s) of A's unfinished transaction"
    ))
}

/// What a consumer reads at `isolation` from the log start, fetch after fetch, with Kafka's
/// fetch algorithm (`recovery::consume`): `(offset, value)`.
fn read_all(log: &PartitionLog, isolation: IsolationLevel) -> DemoResult<Vec<(i64, String)>> {
    let bound = match isolation {
        IsolationLevel::ReadUncommitted => log.high_watermark(),
        IsolationLevel::ReadCommitted => log.last_stable_offset(),
    };
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < bound {
        let fetch = log.read(offset, 1 << 20, isolation).map_err(io("read"))?;
        let Some(next) = record_format::Batches::new(&fetch.records, 0)
            .filter_map(Result::ok)
            .map(|b| b.last_offset() + 1)
            .last()
        else {
            break;
        };
        for r in recovery::consume(&fetch).map_err(io("consume"))? {
            let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
            out.push((r.offset, v));
        }
        offset = next;
    }
    Ok(out)
}

fn show(records: &[(i64, String)]) -> String {
    records
        .iter()
        .map(|(o, v)| format!("{o}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A transaction open at the stop, under each stop policy (`docs/barrier.md`, "Open
/// transactions at stop").
fn open_txn_at_stop<W: Write>(sim: &mut Sim<'_, W>) -> DemoResult<()> {
    sim.step("A: pid 5 writes, pid 7 opens a transaction, pid 9 writes after it; A is lost")?;
    sim.produce(A, 5, 0, 2, false)?;
    sim.produce(A, 7, 0, 2, true)?;
    sim.produce(A, 9, 0, 3, false)?;
    sim.step("B and C mirror A")?;
    for p in [B, C] {
        sim.start_mirroring(p, A)?;
        sim.mirror(p, A)?;
    }
    let before = read_all(sim.log(B)?, IsolationLevel::ReadUncommitted)?;
    sim.say(format!(
        "B, C: a read_uncommitted consumer has read {}",
        show(&before)
    ))?;
    sim.step("B fails over with TruncateToLastStable, C with AbortOpenTransactions")?;
    sim.failover_with(B, true, StopPolicy::TruncateToLastStable)?;
    sim.failover_with(C, true, StopPolicy::AbortOpenTransactions)?;
    sim.step("local producers write on B and C; what consumers read")?;
    for (p, policy) in [
        (B, StopPolicy::TruncateToLastStable),
        (C, StopPolicy::AbortOpenTransactions),
    ] {
        sim.produce(p, 20, 0, 2, false)?;
        let log = sim.log(p)?;
        let committed = read_all(log, IsolationLevel::ReadCommitted)?;
        let uncommitted = read_all(log, IsolationLevel::ReadUncommitted)?;
        let reused: Vec<String> = before
            .iter()
            .filter_map(|(o, v)| {
                let now = uncommitted.iter().find(|(q, _)| q == o).map(|(_, w)| w);
                (now != Some(v)).then(|| {
                    format!(
                        "{o} held {v}, now {}",
                        now.map_or("nothing (a control batch or cut)", String::as_str)
                    )
                })
            })
            .collect();
        sim.say(format!("{} ({}):", name(p), policy.as_str()))?;
        sim.say(format!("  read_committed:   {}", show(&committed)))?;
        sim.say(format!("  read_uncommitted: {}", show(&uncommitted)))?;
        sim.say(format!(
            "  offsets read before the stop that changed: {}",
            if reused.is_empty() {
                "none".to_owned()
            } else {
                reused.join("; ")
            }
        ))?;
    }
    Ok(())
}
