//! `seglog crash-test [--iterations N] [--seed S] [--dir D]`: the randomized
//! crash/recover/verify cycle of `mod@testkit::crash_test`.
//!
//! Iteration `i` generates a workload from seed `S + i` (leader, coordinator and follower
//! appends, flushes, rolls, truncations, retention, explicit snapshots, clean reopens, a KIP-1279
//! failover), runs it on a
//! simulated file system crashed at every I/O point (plus `--torn` torn-write variants per
//! point), recovers each crash image with the real loader in a real directory under `D`, and
//! checks it. One progress line per iteration, then the summary. Exit status: 0 no violation;
//! 1 a violation (each printed, with the seed to replay); 2 usage or I/O error.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use testkit::Workload;
use testkit::{crash_test, fresh_dir, CrashOptions, CrashTestSummary, TornMode};
use testkit::{CrashModel, WeakModel};

use crate::cli::Status;

/// Arguments of `seglog crash-test`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "crash-test",
    about = "Crash a generated workload at every I/O point, recover each image and verify it",
    after_help = "Examples:\n  seglog crash-test\n  seglog crash-test --iterations 100 --seed 42 --dir /tmp/ct\n  seglog crash-test --iterations 1 --seed 1234   (replay one failing seed)\n\n\
                  Exit status: 0 no violation; 1 violations found (the seed to replay is printed); 2 usage or I/O error."
)]
pub struct CrashTestArgs {
    /// Workloads to generate (seeds S, S+1, ...)
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub iterations: u64,
    /// First seed
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// Directory for the run and recovery directories (a fresh subdirectory, removed at the
    /// end); default: /dev/shm when it exists (every recovery fsyncs), else the system
    /// temporary directory
    #[arg(long, value_name = "D")]
    pub dir: Option<PathBuf>,
    /// Steps per workload
    #[arg(long, default_value_t = 16, value_name = "STEPS")]
    pub ops: usize,
    /// Torn-write variants checked per crash point (a prefix of the write in flight; the
    /// `today` model only)
    #[arg(long, default_value_t = 2, value_name = "K")]
    pub torn: usize,
    /// Crash model: `today` (what was synced, plus a prefix of the write in flight) or `weak`
    /// (as real file systems: any subset of the unsynced 4 KiB blocks, a size without its data,
    /// directory entry changes before their directory's sync)
    #[arg(long, default_value = "today", value_parser = ["today", "weak"], value_name = "MODEL")]
    pub model: String,
    /// Weak model: explore all 2^k states of a crash point with k <= this many choices
    #[arg(long, default_value_t = 12, value_name = "K")]
    pub exhaustive_up_to: u32,
    /// Weak model: seeded states drawn at a crash point with more choices
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub samples: usize,
}

/// `/dev/shm` when it exists (a memory file system: the thousands of recoveries' fsyncs cost
/// nothing), else the system temporary directory.
fn default_dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Runs `seglog crash-test`.
pub fn run(args: &CrashTestArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let root = args.dir.clone().unwrap_or_else(default_dir);
    let scratch = match fresh_dir(&root, "seglog-crash-test") {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(
                err,
                "error: cannot create a directory in {}: {e}",
                root.display()
            );
            return Status::Usage;
        }
    };
    let started = Instant::now();
    let mut total = CrashTestSummary::default();
    let mut failing = Vec::new();
    for i in 0..args.iterations {
        let seed = args.seed.wrapping_add(i);
        let w = Workload::generate(seed, args.ops);
        let model = if args.model == "weak" {
            CrashModel::Weak(WeakModel {
                exhaustive_up_to: args.exhaustive_up_to,
                samples: args.samples,
                seed,
            })
        } else {
            CrashModel::Today
        };
        let sum = crash_test(
            &w,
            &CrashOptions {
                scratch: scratch.clone(),
                torn: TornMode::Sample(args.torn),
                stride: 1,
                model,
            },
        );
        let _ = writeln!(
            out,
            "iteration {}/{} seed {seed}: {sum}",
            i + 1,
            args.iterations
        );
        let _ = out.flush();
        if !sum.violations.is_empty() {
            failing.push(seed);
            for v in sum.violations.iter().take(10) {
                let _ = writeln!(out, "  violation: {v}");
            }
            if sum.violations.len() > 10 {
                let _ = writeln!(out, "  ... {} more", sum.violations.len() - 10);
            }
        }
        total.merge(sum);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = writeln!(
        out,
        "crash-test: {} iterations from seed {}: {total} in {:.1}s",
        args.iterations,
        args.seed,
        started.elapsed().as_secs_f64()
    );
    if args.model == "weak" {
        let _ = writeln!(
            out,
            "weak model: {} states explored, {:.1} per crash point; {} of {} crash points exhaustive (k <= {}), at most {} choices at one",
            total.states_explored,
            total.states_explored as f64 / total.crash_points.max(1) as f64,
            total.exhaustive_points,
            total.crash_points,
            args.exhaustive_up_to,
            total.max_choices
        );
    }
    if failing.is_empty() {
        Status::Success
    } else {
        for seed in &failing {
            let _ = writeln!(
                out,
                "replay: seglog crash-test --iterations 1 --seed {seed} --ops {}",
                args.ops
            );
        }
        Status::Damaged
    }
}
