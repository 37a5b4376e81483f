//! seglog's test machinery, for seglog's own tests and for users who want to crash-test their
//! use of it:
//!
//! * [`SimulatedFs`]: a [`segment_store::Storage`] that keeps what a crash would keep (only what
//!   was synced, directory entries only after a directory sync) and can fail at any I/O point,
//!   optionally leaving part of the write in flight (a torn write);
//! * `crash_test`: the harness that runs a sequence of operations
//!   ([`Workload`] of [`Op`]s, hand-written or generated from a seed) on a [`SimulatedFs`],
//!   crashes it at every I/O point, recovers each image with the loader's plan/apply engine and
//!   checks it against what the API promised before the crash;
//! * [`crash_test_fn`]: the same for *any* code of yours using
//!   `seglog::Log`/`seglog::LogDir` (several partitions, any sequence): your closure runs on a
//!   [`SimulatedFs`], is crashed at every I/O point, and your check gets every state the crash
//!   may leave plus what the closure acknowledged; seglog's own invariants are checked too. The
//!   `crash_fn` module docs walk through `examples/crash_my_workload.rs`;
//! * [`CrashModel`]: what a crash keeps, per run: `Today` (only what was synced, plus a prefix
//!   of the write in flight) or `Weak` ([`WeakModel`]: as weak as real file systems);
//! * [`ManualClock`]: a clock that moves only when told to;
//! * [`kill_child`]: the child process of the SIGKILL test (binary `kill-child`);
//! * [`truncate_after`]: another process's truncation of a file, at a chosen moment;
//! * [`write_tiny_segments`]: a partition of many tiny segments, for the scaling tests.
//!
//! Kafka's counterpart is its test utilities (`MockTime`, the `LogLoader` and `UnifiedLog`
//! recovery tests); none of this is needed to use seglog, and nothing here is part of the
//! product crates.
//!
//! Crash-testing a sequence of the harness's own [`Op`]s (for your own code, see
//! `crash_fn` and `examples/crash_my_workload.rs`):
//!
//! ```
//! use testkit::{crash_test, CrashOptions, Op, TornMode, Workload};
//!
//! let scratch = tempfile::tempdir()?;
//! let workload = Workload {
//!     seed: 0,
//!     ops: vec![
//!         Op::Produce { pid: 1, records: 2, txn: false },
//!         Op::Flush,
//!         Op::Produce { pid: 1, records: 1, txn: true },
//!         Op::EndTxn { pid: 1, commit: true },
//!         Op::Flush,
//!     ],
//!     segment_bytes: 300,
//! };
//! let options = CrashOptions { scratch: scratch.path().to_path_buf(), torn: TornMode::None, stride: 1, model: Default::default() };
//! let summary = crash_test(&workload, &options);
//! assert!(summary.crash_points > 0);
//! assert!(summary.violations.is_empty(), "{:?}", summary.violations);
//! # Ok::<(), std::io::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod crash_fn;
mod crash_test;
pub mod kill_child;
mod mirror_partition;
mod rng;
mod segments;
mod sim_fs;
mod tree_image;

pub use clock::ManualClock;
pub use crash_fn::{crash_test_fn, Ack, CrashEnv, CrashFnError, FnOptions, FnSummary, Recovered};
pub use crash_test::{
    check_dir, check_image, client_batch, crash_test, files_around_the_seam, fresh_dir,
    materialize, run_crashed, CrashOptions, CrashTestSummary, Expectation, Op, TornMode, Workload,
    SOURCE_PID, TIMESTAMP,
};
pub use mirror_partition::MirrorPartition;
pub use rng::XorShift;
pub use segments::write_tiny_segments;
pub use sim_fs::{
    CrashImage, CrashModel, CrashStates, SimStats, SimulatedFs, TornWrite, WeakModel, BLOCK_SIZE,
};
pub use tree_image::tree_image;

/// Truncates the file `path` to `len` bytes after `delay`, on a thread of its own, as a broker
/// truncating a segment would while seglog reads it; join the handle to wait for the cut.
pub fn truncate_after(
    path: std::path::PathBuf,
    delay: std::time::Duration,
    len: u64,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(len))
            .expect("truncate");
    })
}
