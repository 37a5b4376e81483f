//! Crash-recovery testing: a seeded workload run on [`SimulatedFs`](crate::SimulatedFs), crashed at every I/O point,
//! recovered by [`LogLoader`](recovery::LogLoader) on a real directory and checked against what the API promised.
//!
//! The loop, for one [`Workload`] (a list of [`Op`]s generated from a seed by a xorshift
//! generator):
//!
//! 1. run it once to count its I/O points (every mutating call of the
//!    [`segment_store::Storage`] seam);
//! 2. for each point `n`: run it again on a fresh [`SimulatedFs`](crate::SimulatedFs) that fails the `n`-th call
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
//! [`recovery::StorageIo`]), `leader-epoch-checkpoint`, the loader's quarantine
//! folders and cut bytes, `*.deleted` renames, and every directory entry. A snapshot written at
//! an unflushed log end is durable while the tail it describes is not ("from the future"):
//! recovery must discard it. The offset and time indexes are in the images as the crash left
//! them (missing, short, zero-filled, stale past a truncation): recovery trusts those of a
//! segment below the recovery point, and check (c) verifies them against the log. The run
//! directory exists on the real file system only to be checked empty afterwards: a file there was
//! written around the seam.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::sim_fs::CrashModel;

mod check;
mod crash;
mod ops;
mod workload;

use crate::rng::XorShift;
pub(crate) use check::producer_keys;
pub use check::{check_dir, check_image, CheckOutcome};
pub use crash::{
    files_around_the_seam, fresh_dir, materialize, run_crashed, run_crashed_in, CrashRun,
};
pub(crate) use ops::FailbackSource;
pub use ops::{
    client_batch, next_seq, read_batches, read_log, replica_batch, txn_open, valid_batches,
};
pub use workload::{Expectation, Op, Workload, REPLICA_PID, SOURCE_PID, TIMESTAMP};

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
    /// or [`CrashModel::Weak`] (every state of [`SimulatedFs::crash_states`](crate::SimulatedFs::crash_states); `torn` is then
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
