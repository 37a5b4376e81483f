//! Crash-testing your own sequence of operations against seglog: the workload below is run on
//! a simulated file system that fails at every I/O point in turn (the process "dies" there),
//! each image left on "disk" is recovered by the same plan/apply engine `Log::open` uses, and
//! what was recovered is checked against what the API promised before the crash (every flushed
//! batch kept byte for byte, producer state and the last stable offset consistent, nothing
//! destroyed that was not quarantined).
//!
//! ```text
//! cargo run --example crash_my_workload -- /tmp/crash   # scratch directories go under it
//! ```

use std::error::Error;
use std::path::PathBuf;

use testkit::crash_test::{crash_test, CrashOptions, Op, TornMode, Workload};

fn main() -> Result<(), Box<dyn Error>> {
    let scratch = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or("usage: crash_my_workload SCRATCH_DIR")?;

    // The operations of your application, in order: here an idempotent producer, a
    // transaction that commits, a follower append, flushes, a clean restart, a truncation
    // and a KIP-1279 failover.
    let produce = |pid, records, txn| Op::Produce { pid, records, txn };
    let workload = Workload {
        seed: 0,
        ops: vec![
            produce(1, 2, false),
            produce(2, 1, true),
            Op::Flush,
            produce(1, 1, false),
            Op::EndTxn {
                pid: 2,
                commit: true,
            },
            Op::Replicate { records: 2 },
            Op::Flush,
            Op::Reopen,
            produce(1, 3, false),
            Op::Truncate { batches: 1 },
            Op::Failover,
            produce(5, 1, false),
            Op::Flush,
        ],
        // Small segments, so that rolls and producer snapshots happen too.
        segment_bytes: 300,
    };
    let summary = crash_test(
        &workload,
        &CrashOptions {
            scratch,
            // Also every byte-prefix of the write in flight at the crash (torn writes).
            torn: TornMode::EveryByte,
            stride: 1,
            model: Default::default(),
        },
    );
    println!("{summary}");
    for v in &summary.violations {
        println!("violation: {v}");
    }
    if !summary.violations.is_empty() || summary.durable_batches_lost > 0 {
        return Err("recovery broke a promise".into());
    }
    Ok(())
}
