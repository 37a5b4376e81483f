//! `seglog demo [DIR]`: the KIP-1279 failover story on built-in data, on real files, in a second.
//!
//! 1. cluster A (`A/orders-0`) produces: idempotent pid 5, a committed transaction (pid 6) and an
//!    aborted one (pid 7);
//! 2. cluster B (`B/orders-0`) mirrors A byte for byte (follower appends, `Mirroring` state, client
//!    appends refused);
//! 3. B fails over: `stop_mirroring` runs the `STOPPING` steps (the last one bumps the leader
//!    epoch) and writes the barrier in the new epoch;
//! 4. a local producer on B is handed producer id 5 and starts at sequence 0: accepted, where a
//!    scratch copy of B taken before the stop (no barrier) answers it as a duplicate and writes
//!    nothing;
//! 5. B crashes in the middle of a write (half a batch at the end of its `.log`);
//! 6. recovery (`LogLoader::load`) quarantines the torn tail;
//! 7. B's segment, as `seglog dump --deep-iteration` prints it.
//!
//! Producer state is printed after every step. Timestamps come from a fixed clock, so apart from
//! the directory the output is the same on every run.
//!
//! `seglog demo --scenario NAME [--no-barrier] [DIR]` runs one of KIP-1279's topologies or the
//! three producer-id collision scenarios instead (`src/cli/demo/scenarios.rs`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use record_format::{end_txn_marker_batch, ControlRecordType, RecordBatchBuilder};
use recovery::internals::encode_mirror_state;
use recovery::{
    AppendOrigin, EpochEndOffsets, IsolationLevel, LoadOptions, LogLoader, MirrorLog,
    MirrorPartitionState, MirrorStateError, MirrorStateFile, MirrorStateStore, MirroredLog,
    PartitionLog, PartitionLogError, SnapshotEntry,
};
use segment_store::{LogEnv, StdFs};
use testkit::ManualClock;

mod scenarios;

pub use scenarios::Scenario;

use crate::cli::dump::{self, DumpArgs};
use crate::cli::partition::producer_line;
use crate::cli::Status;

/// Timestamp of the first record (and the demo's fixed clock).
const T0: i64 = 1_700_000_000_000;
/// The source cluster's id, written into the barrier.
const SOURCE: &str = "cluster-A";
/// Every segment file of the demo partitions has base offset 0.
const SEGMENT: &str = "00000000000000000000.log";

/// Arguments of `seglog demo`.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "demo",
    about = "Run the KIP-1279 failover demo on built-in sample data (a few seconds)",
    after_help = "Examples:\n  seglog demo\n  seglog demo /tmp/seglog-demo   # keep the files somewhere known\n  \
                  seglog demo --scenario failback /tmp/fb && seglog producers --audit /tmp/fb/A\n  \
                  seglog demo --scenario collision-same-epoch --no-barrier /tmp/c1\n\n\
                  Scenarios: active-passive, failback, fan-out, fan-in, chain (KIP-1279's topologies); \
                  collision-same-epoch, collision-epochs, collision-transactions (the three PID \
                  collision scenarios, with a downstream mirror C); open-txn-at-stop (a transaction open \
                  at the stop, under each stop policy). Each leaves DIR/<cluster>/<topic>-<partition>/.\n\n\
                  Exit status: 0 the demo ran; 2 DIR is unusable or a file operation failed."
)]
pub struct DemoArgs {
    /// Where to create the clusters' directories (absent or empty; default: a fresh directory
    /// under the system temporary directory, printed); the demo leaves it in place, delete it
    /// when done
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Run one KIP-1279 topology or collision scenario instead of the failover story
    #[arg(long, value_enum, value_name = "NAME")]
    pub scenario: Option<Scenario>,
    /// With --scenario: fail over without the MIRROR_PID_RESET barrier (what the barrier prevents)
    #[arg(long, requires = "scenario")]
    pub no_barrier: bool,
}

pub(crate) type DemoResult<T> = Result<T, String>;

pub(crate) fn io<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Runs the demo, writing the story to `out`.
pub fn run(args: &DemoArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let root = match prepare_root(args.dir.as_deref()) {
        Ok(r) => r,
        Err(msg) => {
            let _ = writeln!(err, "error: {msg}");
            return Status::Usage;
        }
    };
    let clock = Arc::new(ManualClock::new(T0));
    if let Some(scenario) = args.scenario {
        let env = LogEnv {
            storage: Arc::new(StdFs),
            clock: clock.clone(),
        };
        return match scenarios::run(scenario, !args.no_barrier, &root, env, clock, out) {
            Ok(()) => Status::Success,
            Err(msg) => {
                let _ = writeln!(err, "error: demo: {msg}");
                Status::Usage
            }
        };
    }
    let mut demo = Demo {
        out,
        root,
        env: LogEnv {
            storage: Arc::new(StdFs),
            clock: clock.clone(),
        },
        clock,
    };
    match demo.run() {
        Ok(()) => Status::Success,
        Err(msg) => {
            let _ = writeln!(err, "error: demo: {msg}");
            Status::Usage
        }
    }
}

/// The path of the binary this process runs, for the closing `verify` suggestion (`seglog`
/// is not on the `PATH` after `cargo run`); `seglog` if the system cannot say.
pub(crate) fn current_exe() -> String {
    std::env::current_exe().map_or_else(|_| "seglog".to_owned(), |p| p.display().to_string())
}

/// The demo's root: `dir` if it is absent or an empty directory, else a fresh temp dir.
fn prepare_root(dir: Option<&Path>) -> DemoResult<PathBuf> {
    match dir {
        Some(d) => {
            if d.exists() {
                let mut entries = std::fs::read_dir(d).map_err(|e| {
                    format!(
                        "cannot use {}: {}",
                        d.display(),
                        crate::cli::dump::io_msg(&e)
                    )
                })?;
                if entries.next().is_some() {
                    return Err(format!(
                        "{} is not empty: give a new or empty directory",
                        d.display()
                    ));
                }
            } else {
                std::fs::create_dir_all(d).map_err(|e| {
                    format!(
                        "cannot create {}: {}",
                        d.display(),
                        crate::cli::dump::io_msg(&e)
                    )
                })?;
            }
            Ok(d.to_path_buf())
        }
        None => {
            let base = std::env::temp_dir();
            let stamp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let d = base.join(format!("seglog-demo-{}-{stamp}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| {
                format!(
                    "cannot create {}: {}",
                    d.display(),
                    crate::cli::dump::io_msg(&e)
                )
            })?;
            Ok(d)
        }
    }
}

/// A partition log that remembers every mirror state it persisted, to show the STOPPING steps
/// (the transitions run on it exactly as on the log itself).
#[derive(Debug)]
pub(crate) struct Recording<'a> {
    pub(crate) log: &'a mut PartitionLog,
    pub(crate) persisted: Vec<MirrorPartitionState>,
}

impl EpochEndOffsets for Recording<'_> {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        self.log.end_offset_for_epoch(requested)
    }
    fn last_mirror_epoch(&self) -> Option<recovery::LastMirrorEpoch> {
        self.log.last_mirror_epoch()
    }
}

impl MirrorLog for Recording<'_> {
    type Error = PartitionLogError;
    fn last_stable_offset(&self) -> i64 {
        self.log.last_stable_offset()
    }
    fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }
    fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }
    fn latest_epoch(&self) -> Option<i32> {
        MirrorLog::latest_epoch(&*self.log)
    }
    fn high_watermark_known(&self) -> bool {
        self.log.high_watermark_known()
    }
    fn truncate_to(&mut self, offset: i64) -> Result<(), PartitionLogError> {
        MirrorLog::truncate_to(&mut *self.log, offset)
    }
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), PartitionLogError> {
        MirrorLog::truncate_fully_and_start_at(&mut *self.log, offset)
    }
    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), PartitionLogError> {
        self.log.assign_epoch(epoch, start_offset)
    }
    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, PartitionLogError> {
        self.log.find_barrier_from(from)
    }
    fn max_batch_epoch(&self) -> Result<Option<i32>, PartitionLogError> {
        self.log.max_batch_epoch()
    }
    fn append_barrier(&mut self, source: &str, epoch: i32) -> Result<i64, PartitionLogError> {
        self.log.append_barrier(source, epoch)
    }
    fn flush(&mut self) -> Result<(), PartitionLogError> {
        self.log.flush()
    }
    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, PartitionLogError> {
        self.log.abort_open_transactions(leader_epoch)
    }
}

impl MirroredLog for Recording<'_> {
    fn mirror_state(&self) -> &MirrorPartitionState {
        self.log.mirror_state()
    }
    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError> {
        self.log.persist_mirror_state(next.clone())?;
        self.persisted.push(next);
        Ok(())
    }
}

/// The `mirror-state` file's content on one line (without the version line).
pub(crate) fn state_line(state: &MirrorPartitionState) -> String {
    encode_mirror_state(state).map_or_else(
        |e| e.to_string(),
        |text| text.lines().skip(1).collect::<Vec<_>>().join(" "),
    )
}

/// A client batch: `values.len()` records from `(pid, epoch, seq)`, timestamps from `ts`.
fn batch(
    base: i64,
    pid: i64,
    seq: i32,
    txn: bool,
    values: &[&str],
    ts: i64,
) -> DemoResult<Vec<u8>> {
    let mut b = RecordBatchBuilder::new(base)
        .producer(pid, 0, seq)
        .transactional(txn);
    for (i, v) in values.iter().enumerate() {
        b.append(ts + i as i64, Some(b"order"), Some(v.as_bytes()), &[])
            .map_err(io("build batch"))?;
    }
    Ok(b.build())
}

struct Demo<'a, W: Write> {
    out: &'a mut W,
    root: PathBuf,
    env: LogEnv,
    /// The clock behind `env` (the barrier's timestamp).
    clock: Arc<ManualClock>,
}

/// `offsets a..b`, or `offset a` for one.
fn offsets(first: i64, last: i64) -> String {
    if first == last {
        format!("offset {first}")
    } else {
        format!("offsets {first}..{last}")
    }
}

impl<W: Write> Demo<'_, W> {
    fn say(&mut self, line: impl AsRef<str>) -> DemoResult<()> {
        writeln!(self.out, "{}", line.as_ref()).map_err(io("write output"))
    }

    fn step(&mut self, title: &str) -> DemoResult<()> {
        self.say("")?;
        self.say(format!("== {title}"))
    }

    fn open(&self, dir: &Path) -> DemoResult<PartitionLog> {
        let opts = LoadOptions {
            config: recovery::Config {
                env: self.env.clone(),
                ..recovery::Config::default()
            },
            ..LoadOptions::default()
        };
        LogLoader::load(dir, &opts)
            .map(|(log, _)| log)
            .map_err(io("open partition"))
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    fn producers(&mut self, who: &str, log: &PartitionLog) -> DemoResult<()> {
        let psm = log.producer_state();
        let entries: Vec<SnapshotEntry> = psm.snapshot_entries();
        let open: Vec<String> = psm
            .ongoing_txns()
            .values()
            .map(|t| format!("pid {} from offset {}", t.producer_id, t.first_offset))
            .collect();
        self.say(format!(
            "{who} producer state (log end {}, last stable offset {}, open transactions: {}):",
            log.log_end_offset(),
            log.last_stable_offset(),
            if open.is_empty() {
                "none".to_owned()
            } else {
                open.join(", ")
            }
        ))?;
        if entries.is_empty() {
            self.say("  (no producers)")?;
        }
        for e in &entries {
            self.say(format!("  {}", producer_line(e)))?;
        }
        Ok(())
    }

    /// `seglog dump --deep-iteration` of `log`, as lines.
    fn dump_lines(&self, log: &Path) -> DemoResult<Vec<String>> {
        let mut args = DumpArgs::new([log]);
        args.deep_iteration = true;
        let mut out = Vec::new();
        let mut err = Vec::new();
        let status = dump::run(&args, &mut out, &mut err);
        if status != Status::Success {
            return Err(format!(
                "dump of {} failed: {}",
                log.display(),
                String::from_utf8_lossy(&err).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_owned)
            .collect())
    }

    fn run(&mut self) -> DemoResult<()> {
        let a_dir = self.root.join("A").join("orders-0");
        let b_dir = self.root.join("B").join("orders-0");
        let scratch_dir = self.root.join("B-without-barrier").join("orders-0");
        self.say("seglog demo: the problem KIP-1279 solves, then crash recovery.")?;
        for line in [
            "Cluster B mirrors cluster A's partition byte for byte, producer ids included. After a",
            "failover, B's own producers may be handed ids A already used: judged against A's",
            "sequence numbers, their first batches are dropped as duplicates or refused. The",
            "MIRROR_PID_RESET barrier (control batch type 7) B writes at the failover clears all",
            "producer state there. Then B dies mid-write; recovery cuts and keeps the torn tail.",
        ] {
            self.say(line)?;
        }
        self.say(format!("Files: {} (left in place)", self.root.display()))?;
        let a = self.produce_on_a(&a_dir)?;
        let mut b = self.mirror_a_to_b(&a, &a_dir, &b_dir)?;
        let barrier = self.fail_over(&mut b, &b_dir, &scratch_dir)?;
        self.reuse_pid_5(&mut b, barrier, &scratch_dir)?;
        let half = self.crash_with_torn_tail(b, &b_dir)?;
        let b = self.recover_b(&b_dir, &half)?;
        self.show_segment(&b_dir)?;
        b.close().map_err(io("close B"))?;
        a.close().map_err(io("close A"))?;

        self.say("")?;
        let exe = current_exe();
        self.say(format!(
            "done. The demo leaves its files in {} (delete the folder when done). Check them:\n  \
             {exe} verify {}",
            self.root.display(),
            b_dir.display()
        ))
    }

    /// Step 1: cluster A's producers write.
    fn produce_on_a(&mut self, a_dir: &Path) -> DemoResult<PartitionLog> {
        // 1. Cluster A produces.
        self.step("1. cluster A produces (A/orders-0)")?;
        let mut a = self.open(a_dir)?;
        let appends: [(&str, Vec<u8>, AppendOrigin); 6] = [
            (
                "pid 5 idempotent, seq 0..1",
                batch(0, 5, 0, false, &["o-1", "o-2"], T0)?,
                AppendOrigin::Client,
            ),
            (
                "pid 5 idempotent, seq 2..3",
                batch(0, 5, 2, false, &["o-3", "o-4"], T0 + 10)?,
                AppendOrigin::Client,
            ),
            (
                "pid 6 transaction, seq 0..1",
                batch(0, 6, 0, true, &["t-1", "t-2"], T0 + 20)?,
                AppendOrigin::Client,
            ),
            (
                "pid 6 COMMIT",
                end_txn_marker_batch(0, T0 + 30, 0, 6, 0, ControlRecordType::Commit, 3),
                AppendOrigin::Coordinator,
            ),
            (
                "pid 7 transaction, seq 0",
                batch(0, 7, 0, true, &["x-1"], T0 + 40)?,
                AppendOrigin::Client,
            ),
            (
                "pid 7 ABORT",
                end_txn_marker_batch(0, T0 + 50, 0, 7, 0, ControlRecordType::Abort, 3),
                AppendOrigin::Coordinator,
            ),
        ];
        for (what, bytes, origin) in &appends {
            let info = a
                .append_as_leader(bytes, 0, *origin)
                .map_err(io("append to A"))?;
            self.say(format!(
                "A: {what:<28} -> {}",
                offsets(info.first_offset, info.last_offset)
            ))?;
        }
        let a_end = a.log_end_offset();
        a.set_high_watermark(a_end);
        self.producers("A", &a)?;
        Ok(a)
    }

    /// Step 2: B mirrors A byte for byte and refuses a client.
    fn mirror_a_to_b(
        &mut self,
        a: &PartitionLog,
        a_dir: &Path,
        b_dir: &Path,
    ) -> DemoResult<PartitionLog> {
        // 2. Cluster B mirrors A.
        self.step("2. cluster B mirrors A byte for byte (B/orders-0)")?;
        let mut b = self.open(b_dir)?;
        b.start_mirroring(SOURCE, &a)
            .map_err(io("start mirroring"))?;
        self.say(format!(
            "B: mirror-state -> {}",
            state_line(b.mirror_state())
        ))?;
        let fetch = a
            .read(0, usize::MAX / 2, IsolationLevel::ReadUncommitted)
            .map_err(io("fetch from A"))?;
        let info = b
            .append_as_mirror(&fetch.records)
            .map_err(io("mirror append to B"))?;
        let b_end = b.log_end_offset();
        b.set_high_watermark(b_end);
        self.say(format!(
            "B: mirror append of A's batches -> offsets {}..{} ({} bytes, offsets and bytes kept)",
            info.first_offset, info.last_offset, info.bytes
        ))?;
        let a_bytes = std::fs::read(a_dir.join(SEGMENT)).map_err(io("read A"))?;
        let b_bytes = std::fs::read(b_dir.join(SEGMENT)).map_err(io("read B"))?;
        if a_bytes != b_bytes {
            return Err("B's segment differs from A's".into());
        }
        self.say(format!(
            "B/orders-0/{SEGMENT} is byte-identical to A/orders-0/{SEGMENT} ({} bytes)",
            b_bytes.len()
        ))?;
        let client = batch(0, 9, 0, false, &["c-1"], T0 + 60)?;
        match b.append_as_leader(&client, 0, AppendOrigin::Client) {
            Err(e) => self.say(format!("B: a client append (pid 9) is rejected: {e}"))?,
            Ok(_) => return Err("B accepted a client append while mirroring".into()),
        }
        self.producers("B", &b)?;
        Ok(b)
    }

    /// Step 3: B stops mirroring (STOPPING steps, the barrier); returns the barrier's offset.
    fn fail_over(
        &mut self,
        b: &mut PartitionLog,
        b_dir: &Path,
        scratch_dir: &Path,
    ) -> DemoResult<i64> {
        // 3. Failover.
        self.step("3. B fails over: stop mirroring (STOPPING steps, then the barrier)")?;
        copy_partition(b_dir, scratch_dir)?;
        self.say(format!(
            "scratch copy of B before the stop (for comparison): {}",
            self.rel(scratch_dir)
        ))?;
        self.clock.set(T0 + 500);
        let mut rec = Recording {
            log: b,
            persisted: Vec::new(),
        };
        let barrier = rec.stop_mirroring().map_err(io("stop mirroring"))?;
        let persisted: Vec<String> = rec.persisted.iter().map(state_line).collect();
        for s in persisted {
            self.say(format!("B: mirror-state -> {s}"))?;
        }
        self.say(format!(
            "B: leader epoch {} from offset {barrier} (leader-epoch-checkpoint), above every \
             epoch of the mirrored data",
            b.leader_epoch()
        ))?;
        self.say(format!(
            "B: the barrier at offset {barrier} (seglog dump --deep-iteration):"
        ))?;
        let lines = self.dump_lines(&b_dir.join(SEGMENT))?;
        let batch_prefix = format!("baseOffset: {barrier} ");
        let record_prefix = format!("| offset: {barrier} ");
        for l in lines
            .iter()
            .filter(|l| l.starts_with(&batch_prefix) || l.starts_with(&record_prefix))
        {
            self.say(format!("  {l}"))?;
        }
        self.producers("B", b)?;
        Ok(barrier)
    }

    /// Step 4: a local producer reuses pid 5 on B (and, without the barrier, on the scratch copy).
    fn reuse_pid_5(
        &mut self,
        b: &mut PartitionLog,
        barrier: i64,
        scratch_dir: &Path,
    ) -> DemoResult<()> {
        // 4. A local producer reuses pid 5.
        self.step("4. a local producer on B is given producer id 5 and starts at sequence 0")?;
        let local = batch(0, 5, 0, false, &["b-1", "b-2"], T0 + 1_000)?;
        let epoch = b.leader_epoch();
        let info = b
            .append_as_leader(&local, epoch, AppendOrigin::Client)
            .map_err(io("client append to B"))?;
        if info.duplicate {
            return Err("B answered the local producer as a duplicate despite the barrier".into());
        }
        self.say(format!(
            "B: pid 5 epoch 0 seq 0..1 -> written at offsets {}..{} (the barrier at offset \
             {barrier} cleared the mirrored pid 5)",
            info.first_offset, info.last_offset
        ))?;
        let b_end = b.log_end_offset();
        b.set_high_watermark(b_end);
        {
            let mut scratch = self.open(scratch_dir)?;
            let dup = scratch
                .append_as_leader(&local, 0, AppendOrigin::Client)
                .map_err(io("client append to the scratch copy"))?;
            if !dup.duplicate {
                return Err("the scratch copy accepted the batch: no collision to show".into());
            }
            self.say(format!(
                "without the barrier: the same batch is answered with offsets {}..{} and not \
                 written: silently dropped as a duplicate of offset {}",
                dup.first_offset, dup.last_offset, dup.first_offset
            ))?;
            scratch.close().map_err(io("close the scratch copy"))?;
        }
        self.producers("B", b)?;
        Ok(())
    }

    /// Step 5: B dies in the middle of a write; returns the bytes that reached the segment.
    fn crash_with_torn_tail(&mut self, mut b: PartitionLog, b_dir: &Path) -> DemoResult<Vec<u8>> {
        // 5. Crash with a torn tail.
        self.step("5. B crashes in the middle of a write (a torn tail)")?;
        b.flush().map_err(io("flush B"))?;
        let next = b.log_end_offset();
        drop(b); // no close: no clean shutdown
        let torn = batch(next, 5, 2, false, &["b-3", "b-4"], T0 + 2_000)?;
        let half = torn.get(..torn.len() / 2).unwrap_or_default();
        OpenOptions::new()
            .append(true)
            .open(b_dir.join(SEGMENT))
            .and_then(|mut f| f.write_all(half))
            .map_err(io("append the torn tail"))?;
        self.say(format!(
            "B: pid 5 seq 2..3 (offsets {next}..{}, {} bytes): only {} bytes reached {SEGMENT} \
             before the process died",
            next + 1,
            torn.len(),
            half.len()
        ))?;
        Ok(half.to_vec())
    }

    /// Step 6: B restarts; recovery quarantines the torn tail.
    fn recover_b(&mut self, b_dir: &Path, half: &[u8]) -> DemoResult<PartitionLog> {
        // 6. Recovery.
        self.step("6. B restarts: recovery (LogLoader::load) quarantines the torn tail")?;
        let opts = LoadOptions {
            config: recovery::Config {
                env: self.env.clone(),
                ..recovery::Config::default()
            },
            ..LoadOptions::default()
        };
        let (mut b, report) = LogLoader::load(b_dir, &opts).map_err(io("recover B"))?;
        self.say(report.to_string())?;
        // A single-replica partition: the high watermark is the log end once it is loaded.
        let b_end = b.log_end_offset();
        b.set_high_watermark(b_end);
        for c in &report.cut {
            let q = std::fs::read(&c.quarantined_to).map_err(io("read quarantine"))?;
            self.say(format!(
                "{}: {} bytes, {} the torn write",
                self.rel(&c.quarantined_to),
                q.len(),
                if q == half {
                    "identical to"
                } else {
                    "DIFFERENT from"
                }
            ))?;
        }
        let state = MirrorStateFile::in_dir(b_dir)
            .load()
            .map_err(io("read mirror state"))?;
        self.say(format!("B: mirror-state is {}", state_line(&state)))?;
        self.producers("B", &b)?;
        Ok(b)
    }

    /// Step 7: B's segment as `seglog dump` prints it.
    fn show_segment(&mut self, b_dir: &Path) -> DemoResult<()> {
        // 7. The segment.
        self.step("7. B's segment (seglog dump --deep-iteration)")?;
        for l in self.dump_lines(&b_dir.join(SEGMENT))? {
            let l = l.replace(&format!("{}/", self.root.display()), "");
            self.say(l)?;
        }
        Ok(())
    }
}

/// Copies the segment, index, snapshot and checkpoint files of `from` into `to` (not the lock
/// or the mirror state: the copy is a plain partition that never saw a barrier).
fn copy_partition(from: &Path, to: &Path) -> DemoResult<()> {
    std::fs::create_dir_all(to).map_err(io("create the scratch copy"))?;
    for e in std::fs::read_dir(from).map_err(io("list B"))? {
        let e = e.map_err(io("list B"))?;
        let name = e.file_name();
        let skip = name == ".lock" || name == recovery::internals::MIRROR_STATE_FILE;
        if !skip && e.path().is_file() {
            std::fs::copy(e.path(), to.join(&name)).map_err(io("copy B"))?;
        }
    }
    Ok(())
}
