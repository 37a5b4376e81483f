//! Crash-testing any code: [`crash_test_fn`] runs a closure of yours (your use of `seglog::Log`,
//! `seglog::LogDir`, several partitions, any sequence of calls) on a [`SimulatedFs`], crashes it
//! at every I/O point (or a seeded sample of them), and hands each state the crash may leave to
//! a check of yours together with what your closure recorded as acknowledged before the crash.
//!
//! The walk-through (`examples/crash_my_workload.rs` is a complete one, on three partitions):
//!
//! 1. **The workload** gets a [`CrashEnv`]: build your `seglog::Config` with
//!    [`CrashEnv::storage`] and [`CrashEnv::clock`] (`Config::default().with_storage(env.storage())
//!    .with_clock(env.clock())`), open your logs under [`CrashEnv::root`] (it exists only on the
//!    simulated storage: `Log::open`/`LogDir::open` create what is missing there, nothing is
//!    written to the real file system), and call [`CrashEnv::ack`] once the API has promised
//!    something (after a successful `flush`, say: `env.ack("events-0", offset)`). At the crash
//!    point every I/O fails: return the first error (`?`), as a process that dies there would
//!    stop. Keep the order of your I/O deterministic: seglog's recovery threads and the
//!    high-watermark timer do I/O of their own, so use `.with_recovery_threads(1)` and a clock
//!    that moves only when you move it ([`CrashEnv::clock`]). A run whose I/O order differs from
//!    the first run's (threads of your own racing through the seam) is refused with
//!    [`CrashFnError::Nondeterministic`], naming the first difference.
//! 2. **The check** gets a [`Recovered`]: the state after the crash on a fresh simulated storage
//!    (all of it durable), the clock, and [`Recovered::acked`]. Open your logs again on
//!    [`Recovered::storage`] as your application would after a restart, and return `Err` with a
//!    message if something acknowledged is missing.
//! 3. **seglog's own invariants** are checked on every state too, on a copy, with the recovery
//!    engine of the `recovery` crate (see [`check_partitions`]): nothing fsynced is lost, producer
//!    state equals a replay of the recovered batches, and whatever recovery cut is in the
//!    partition's quarantine.
//!
//! [`CrashModel::Today`] checks, per crash point, the durable image and the one keeping the whole
//! write in flight; [`CrashModel::Weak`] every state of [`SimulatedFs::crash_states`].

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use record_format::RecordBatch;
use recovery::{AppendOrigin, BatchSummary, LoadOptions, LogLoader, ProducerStateManager};
use segment_store::internals::{FileKind, TempSuffix};
use segment_store::{Clock, LogEnv, Storage};

use crate::clock::ManualClock;
use crate::crash_test::{producer_keys, read_log, valid_batches, TIMESTAMP};
use crate::sim_fs::{CrashImage, CrashModel, SimulatedFs, TornWrite};

/// What [`crash_test_fn`] is given for one run of the workload.
#[derive(Debug, Clone)]
pub struct CrashEnv {
    sim: SimulatedFs,
    clock: Arc<ManualClock>,
    root: PathBuf,
    acked: Arc<Mutex<Vec<Ack>>>,
}

/// One acknowledgement a workload recorded: a key of its choosing and a value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ack {
    /// What it is about (a partition, a key).
    pub key: String,
    /// What was promised (an offset, a record, ...).
    pub value: Vec<u8>,
}

impl CrashEnv {
    /// The simulated storage: give it to `seglog::Config::with_storage`.
    pub fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(self.sim.clone())
    }
    /// The simulated storage itself (to look at its trace or statistics).
    pub fn sim(&self) -> &SimulatedFs {
        &self.sim
    }
    /// A clock starting at [`TIMESTAMP`] that moves only when told to: give it to
    /// `seglog::Config::with_clock`.
    pub fn clock(&self) -> Arc<ManualClock> {
        Arc::clone(&self.clock)
    }
    /// The clock as a `dyn Clock`.
    pub fn dyn_clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock) as Arc<dyn Clock>
    }
    /// A directory for your log directories (durable and empty at the start of each run). It
    /// exists only on the simulated storage (`ROOT`): every file of a log, the offset and time
    /// indexes included, goes through the storage seam, and nothing is created on the real file
    /// system.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// Records that the API promised `value` about `key` (call it after the call that made the
    /// promise returned `Ok`).
    pub fn ack(&self, key: impl Into<String>, value: impl Into<Vec<u8>>) {
        let mut acked = self.acked.lock().unwrap_or_else(|p| p.into_inner());
        acked.push(Ack {
            key: key.into(),
            value: value.into(),
        });
    }
}

/// One state after a crash, for the check.
#[derive(Debug)]
pub struct Recovered<'a> {
    sim: SimulatedFs,
    clock: Arc<ManualClock>,
    root: &'a Path,
    acked: &'a [Ack],
    /// The crash point (`None`: the run that did not crash).
    pub crash_point: Option<u64>,
    /// Which of the crash point's states this is (0: only what was synced).
    pub state: usize,
}

impl Recovered<'_> {
    /// The storage holding the state (a fresh [`SimulatedFs`]).
    pub fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(self.sim.clone())
    }
    /// The state's simulated storage itself.
    pub fn sim(&self) -> &SimulatedFs {
        &self.sim
    }
    /// The clock where the crashed run left it.
    pub fn clock(&self) -> Arc<ManualClock> {
        Arc::clone(&self.clock)
    }
    /// The clock as a `dyn Clock`.
    pub fn dyn_clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock) as Arc<dyn Clock>
    }
    /// The same directory as [`CrashEnv::root`].
    pub fn root(&self) -> &Path {
        self.root
    }
    /// What the workload acknowledged before the crash, in order.
    pub fn acked(&self) -> &[Ack] {
        self.acked
    }
    /// The values acknowledged under `key`, in order.
    pub fn acked_for(&self, key: &str) -> Vec<&[u8]> {
        self.acked
            .iter()
            .filter(|a| a.key == key)
            .map(|a| a.value.as_slice())
            .collect()
    }
}

/// Which crash points and states [`crash_test_fn`] explores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnOptions {
    /// What a crash keeps.
    pub model: CrashModel,
    /// `None`: every I/O point, and a power loss after the last; `Some((n, seed))`: `n` of
    /// these drawn from `seed`.
    pub sample_points: Option<(u64, u64)>,
    /// Also check seglog's own invariants (`check_partitions`) on every state.
    pub seglog_invariants: bool,
}

impl Default for FnOptions {
    /// Every I/O point, [`CrashModel::Today`], seglog's invariants checked.
    fn default() -> Self {
        FnOptions {
            model: CrashModel::Today,
            sample_points: None,
            seglog_invariants: true,
        }
    }
}

/// Why [`crash_test_fn`] could not test the workload at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashFnError {
    /// The workload failed without a crash.
    Workload(String),
    /// Two runs of the workload did not do the same I/O in the same order (threads racing
    /// through the seam, a real clock, randomness): its crash points cannot be replayed.
    Nondeterministic {
        /// The first I/O point that differed.
        point: u64,
        /// What the first run did there.
        first: String,
        /// What the later run did there.
        then: String,
    },
}

impl fmt::Display for CrashFnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CrashFnError::Workload(e) => write!(f, "the workload failed without a crash: {e}"),
            CrashFnError::Nondeterministic { point, first, then } => write!(
                f,
                "the workload's I/O is not in a deterministic order (I/O point {point}: {first} in one run, {then} in another): crash points cannot be replayed. Do the I/O from one thread, or serialize your threads in a fixed order; open logs with `.with_recovery_threads(1)` and the clock of the CrashEnv"
            ),
        }
    }
}

impl Error for CrashFnError {}

/// What [`crash_test_fn`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FnSummary {
    /// I/O points of the workload.
    pub io_points: u64,
    /// Crash points run.
    pub crash_points: u64,
    /// States checked (distinct images; the uncrashed run's included).
    pub states_checked: u64,
    /// States the crash model allowed at the crash points (before removing duplicates).
    pub states_explored: u64,
    /// Partitions whose seglog invariants were checked, summed over the states.
    pub partitions_checked: u64,
    /// What went wrong, each naming the crash point and state.
    pub violations: Vec<String>,
}

impl fmt::Display for FnSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} I/O points, {} crash points, {} states explored, {} states checked, {} partition recoveries, {} violations",
            self.io_points,
            self.crash_points,
            self.states_explored,
            self.states_checked,
            self.partitions_checked,
            self.violations.len()
        )
    }
}

/// The directory every run's [`CrashEnv::root`] is: a path on the simulated storage only.
pub const ROOT: &str = "/seglog-crash-test-fn";

struct Run {
    sim: SimulatedFs,
    clock: Arc<ManualClock>,
    acked: Vec<Ack>,
    outcome: Result<(), String>,
}

fn run_once<W>(workload: &mut W, root: &Path, fail_at: Option<u64>) -> Run
where
    W: FnMut(&CrashEnv) -> Result<(), Box<dyn Error>>,
{
    let sim = SimulatedFs::new();
    let root = root.to_path_buf();
    sim.create_durable_dir_all(&root);
    if let Some(n) = fail_at {
        sim.fail_after(n);
    }
    let env = CrashEnv {
        sim: sim.clone(),
        clock: Arc::new(ManualClock::new(TIMESTAMP)),
        root,
        acked: Arc::default(),
    };
    let outcome = match catch_unwind(AssertUnwindSafe(|| workload(&env))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("PANIC in the workload".to_owned()),
    };
    let acked = env.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Run {
        sim,
        clock: env.clock,
        acked,
        outcome,
    }
}

fn describe(t: Option<&(&'static str, PathBuf)>) -> String {
    t.map_or("nothing".to_owned(), |(op, p)| {
        format!("{op} {}", p.display())
    })
}

/// Runs `workload` once to count its I/O points (and once more to see that its I/O order is
/// the same), then crashes it at each point (see [`FnOptions`]: point `n` fails the `n`-th I/O
/// and every later one; point `io_points` is a power loss after the last one), and for every state the crash
/// model allows there runs `check` (and seglog's invariants) on it. The run that does not crash
/// is checked too. See the module docs.
pub fn crash_test_fn<W, C>(
    options: &FnOptions,
    mut workload: W,
    mut check: C,
) -> Result<FnSummary, CrashFnError>
where
    W: FnMut(&CrashEnv) -> Result<(), Box<dyn Error>>,
    C: FnMut(&Recovered<'_>) -> Result<(), Box<dyn Error>>,
{
    crash_test_fn_in(options, Path::new(ROOT), &mut workload, &mut check)
}

fn crash_test_fn_in<W, C>(
    options: &FnOptions,
    root: &Path,
    mut workload: W,
    mut check: C,
) -> Result<FnSummary, CrashFnError>
where
    W: FnMut(&CrashEnv) -> Result<(), Box<dyn Error>>,
    C: FnMut(&Recovered<'_>) -> Result<(), Box<dyn Error>>,
{
    let first = run_once(&mut workload, root, None);
    first.outcome.clone().map_err(CrashFnError::Workload)?;
    let reference = first.sim.io_trace();
    let again = run_once(&mut workload, root, None);
    compare_traces(&reference, &again.sim.io_trace(), u64::MAX)?;
    let mut sum = FnSummary {
        io_points: reference.len() as u64,
        ..FnSummary::default()
    };
    let image = first.sim.durable_state();
    check_state(
        options, root, &first, &image, &image, None, 0, &mut check, &mut sum,
    );
    let points: Vec<u64> = match options.sample_points {
        // Point `io_points`: the power fails after the workload's last I/O.
        None => (0..=sum.io_points).collect(),
        Some((n, seed)) => {
            let mut rng = crate::rng::XorShift::new(seed);
            let mut set = BTreeSet::new();
            while (set.len() as u64) < n.min(sum.io_points + 1) {
                set.insert(rng.below(sum.io_points + 1));
            }
            set.into_iter().collect()
        }
    };
    for point in points {
        let run = run_once(&mut workload, root, Some(point));
        compare_traces(&reference, &run.sim.io_trace(), point)?;
        sum.crash_points += 1;
        // What was synced before the crash (`crash` below makes the write in flight durable).
        let synced = run.sim.durable_state();
        let images = match &options.model {
            CrashModel::Weak(m) => {
                let states = run.sim.crash_states(m, point);
                sum.states_explored += states.explored;
                states.images
            }
            CrashModel::Today => {
                let durable = synced.clone();
                run.sim.crash(TornWrite::Prefix(usize::MAX));
                let full = run.sim.durable_state();
                sum.states_explored += 2;
                if full == durable {
                    vec![durable]
                } else {
                    vec![durable, full]
                }
            }
        };
        for (n, image) in images.iter().enumerate() {
            check_state(
                options,
                root,
                &run,
                image,
                &synced,
                Some(point),
                n,
                &mut check,
                &mut sum,
            );
        }
    }
    Ok(sum)
}

/// The first `upto` I/O points of `run` must be those of `reference`.
fn compare_traces(
    reference: &[(&'static str, PathBuf)],
    run: &[(&'static str, PathBuf)],
    upto: u64,
) -> Result<(), CrashFnError> {
    let n = usize::try_from(upto).unwrap_or(usize::MAX);
    let (a, b) = (
        reference.get(..n.min(reference.len())).unwrap_or_default(),
        run.get(..n.min(run.len())).unwrap_or_default(),
    );
    if upto == u64::MAX && a.len() != b.len() || a.iter().zip(b).any(|(x, y)| x != y) {
        let i = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        return Err(CrashFnError::Nondeterministic {
            point: i as u64,
            first: describe(a.get(i)),
            then: describe(b.get(i)),
        });
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn check_state<C>(
    options: &FnOptions,
    root: &Path,
    run: &Run,
    image: &CrashImage,
    synced: &CrashImage,
    point: Option<u64>,
    state: usize,
    check: &mut C,
    sum: &mut FnSummary,
) where
    C: FnMut(&Recovered<'_>) -> Result<(), Box<dyn Error>>,
{
    sum.states_checked += 1;
    let at = match point {
        Some(p) => format!("crash point {p} state {state}"),
        None => "no crash".to_owned(),
    };
    let clock = Arc::new(ManualClock::new(run.clock.now_ms()));
    if options.seglog_invariants {
        let sim = SimulatedFs::from_image(image);
        match check_partitions(&sim, &clock, root, image, synced) {
            Ok((n, violations)) => {
                sum.partitions_checked += n;
                sum.violations
                    .extend(violations.into_iter().map(|v| format!("{at}: seglog: {v}")));
            }
            Err(e) => sum.violations.push(format!("{at}: seglog: {e}")),
        }
    }
    let recovered = Recovered {
        sim: SimulatedFs::from_image(image),
        clock,
        root,
        acked: &run.acked,
        crash_point: point,
        state,
    };
    match catch_unwind(AssertUnwindSafe(|| check(&recovered))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => sum.violations.push(format!("{at}: {e}")),
        Err(_) => sum.violations.push(format!("{at}: PANIC in the check")),
    }
}

/// Whether `path` names a segment's `.log` file.
fn is_log(path: &Path) -> bool {
    FileKind::of_path(path) == Some(FileKind::Log)
}

/// The partition directories of `image`: the folders under `root` holding a `.log` file,
/// quarantine and deleted folders left out.
pub fn partition_dirs(image: &CrashImage, root: &Path) -> BTreeSet<PathBuf> {
    image
        .files
        .keys()
        .filter(|p| p.starts_with(root) && is_log(p))
        .filter(|p| {
            !p.components().any(|c| {
                let c = c.as_os_str().to_string_lossy();
                c == "quarantine" || c.ends_with("-delete")
            })
        })
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect()
}

/// seglog's own invariants on the state `image` (loaded into `sim`) of every partition under
/// `root`, recovered by [`LogLoader::load`] as after a power loss (from offset 0): (1) every
/// batch of a `.log` file whose bytes and name were synced before the crash (`synced`, the
/// image of [`CrashModel::Today`]) is in the recovered log byte for byte, unless below its log
/// start offset; (2) producer state equals a replay of the recovered batches; (3) every batch
/// of the state that recovery did not keep is in a file of the partition's `quarantine`
/// folder. Returns the partitions checked and the violations.
pub fn check_partitions(
    sim: &SimulatedFs,
    clock: &Arc<ManualClock>,
    root: &Path,
    image: &CrashImage,
    synced: &CrashImage,
) -> Result<(u64, Vec<String>), String> {
    let mut v = Vec::new();
    let dirs = partition_dirs(image, root);
    // Small indexes: on simulated storage they are held in memory, and a 10 MiB preallocation
    // per recovery would be most of the check's time (an index found longer is reset and
    // rebuilt, as the loader does).
    let mut config = recovery::PartitionLogConfig::default();
    config.log.max_index_size = 4096;
    for dir in &dirs {
        let opts = LoadOptions {
            config: recovery::Config {
                log: config.clone(),
                env: LogEnv {
                    storage: Arc::new(sim.clone()),
                    clock: Arc::clone(clock) as Arc<dyn Clock>,
                },
                ..recovery::Config::default()
            },
            had_clean_shutdown: false,
            ..Default::default()
        };
        let loaded = catch_unwind(AssertUnwindSafe(|| LogLoader::load(dir, &opts)));
        let log = match loaded {
            Ok(Ok((log, _))) => log,
            Ok(Err(e)) => {
                v.push(format!("{}: recovery failed: {e}", dir.display()));
                continue;
            }
            Err(_) => {
                v.push(format!("{}: PANIC in recovery", dir.display()));
                continue;
            }
        };
        let recovered = read_log(&log)?;
        let start = log.log_start_offset();
        // A cleaner's `.log.swap` CRC-valid throughout in this state replaces the segments in its
        // range when recovery completes it: what the cleaner removed there is gone by design. A
        // `.swap` itself is derived data (its records are in the segments it replaces until the
        // swap completes): the check of what the log holds there is the workload's own.
        let swapped = swapped_ranges(image, dir);
        let in_swap = |o: i64| swapped.iter().any(|&(lo, hi)| o >= lo && o < hi);
        let batches_of = |img: &CrashImage| -> BTreeMap<(i64, Vec<u8>), PathBuf> {
            img.files
                .iter()
                .filter(|(p, _)| p.parent() == Some(dir) && is_log(p))
                .flat_map(|(p, bytes)| {
                    valid_batches(bytes)
                        .into_iter()
                        .filter(|(_, b)| !in_swap(b.base_offset()))
                        .map(|(_, b)| ((b.base_offset(), b.as_bytes().to_vec()), p.clone()))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        // (1) nothing synced lost.
        for ((offset, bytes), file) in batches_of(synced) {
            if offset >= start && recovered.get(&offset) != Some(&bytes) {
                v.push(format!(
                    "{}: the batch at offset {offset}, synced in {}, was lost",
                    dir.display(),
                    file.display()
                ));
            }
        }
        // (3) quarantine complete.
        let after = sim.live_image();
        let quarantine = dir.join("quarantine");
        let kept: Vec<&Vec<u8>> = after
            .iter()
            .filter(|(p, _)| p.starts_with(&quarantine))
            .map(|(_, b)| b)
            .collect();
        for ((offset, bytes), file) in batches_of(image) {
            let in_log = recovered.get(&offset) == Some(&bytes);
            let below = offset < start;
            if !in_log && !below && !kept.iter().any(|k| contains(k, &bytes)) {
                v.push(format!(
                    "{}: recovery dropped the batch at offset {offset} of {} without quarantining it",
                    dir.display(),
                    file.display()
                ));
            }
        }
        // (2) producer state equals a replay.
        let mut psm = ProducerStateManager::new(log.config().producer_state);
        for (offset, bytes) in recovered.range(start..) {
            let summary = RecordBatch::new(bytes, 0)
                .map_err(|e| e.to_string())
                .and_then(|b| BatchSummary::from_batch(&b).map_err(|e| e.to_string()));
            match summary {
                Ok(s) => {
                    if let Err(e) = psm.apply_batches([&s], AppendOrigin::Replication) {
                        v.push(format!(
                            "{}: replay refused offset {offset}: {e}",
                            dir.display()
                        ));
                    }
                }
                Err(e) => v.push(format!("{}: offset {offset}: {e}", dir.display())),
            }
        }
        let want = producer_keys(&psm);
        let got = producer_keys(log.producer_state());
        // A producer expired at load (the clock moved past producer.id.expiration.ms) may be
        // missing; every producer the replay knows that is there must equal it.
        for (pid, state) in &got {
            // A producer known only from below the log start may be remembered (a snapshot).
            if want.get(pid).is_some_and(|w| w != state) {
                v.push(format!(
                    "{}: producer {pid} recovered as {state:?}, a replay says {:?}",
                    dir.display(),
                    want.get(pid)
                ));
            }
        }
    }
    Ok((dirs.len() as u64, v))
}

/// The offset ranges `[base, next)` of the `.log.swap` files of `dir` in `img` that are CRC-valid
/// throughout (a cleaner's completed output, which recovery swaps in for the segments whose base
/// offsets lie in that range).
fn swapped_ranges(img: &CrashImage, dir: &Path) -> Vec<(i64, i64)> {
    img.files
        .iter()
        .filter(|(p, _)| {
            p.parent() == Some(dir)
                && p.to_string_lossy()
                    .strip_suffix(TempSuffix::Swap.suffix())
                    .is_some_and(|p| p.ends_with(FileKind::Log.suffix()))
        })
        .filter_map(|(p, bytes)| {
            let base: i64 = p.file_name()?.to_str()?.split('.').next()?.parse().ok()?;
            let batches = valid_batches(bytes);
            let len: usize = batches.iter().map(|(_, b)| b.as_bytes().len()).sum();
            let next = batches.iter().map(|(_, b)| b.last_offset() + 1).max()?;
            (len == bytes.len()).then_some((base, next))
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}
