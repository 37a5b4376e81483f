//! Crash-testing your own code against seglog: the workload below is an application of its own
//! (a log directory with three partitions, an idempotent producer per partition, a retried
//! batch, flushes, a clean restart). `testkit::crash_test_fn` runs it on a simulated file system
//! that fails at every I/O point in turn (the process "dies" there), builds every state a crash
//! there may leave under the weak crash model (any subset of the unsynced 4 KiB blocks, sizes
//! without data, directory entries before their directory's sync), and runs the check below on
//! each: every record acknowledged after a successful flush must be there after a restart.
//! seglog's own invariants (nothing fsynced lost, producer state equal to a replay, whatever
//! recovery cut in quarantine) are checked on each state too.
//!
//! ```text
//! cargo run --example crash_my_workload
//! ```
//!
//! Nothing is written to the real file system (an argument, such as the output directory CI
//! passes every example, is ignored).

use std::error::Error;

use seglog::record_format::RecordBatchBuilder;
use seglog::{Config, IsolationLevel, LogDir, TopicPartition};
use testkit::{crash_test_fn, CrashEnv, CrashModel, FnOptions, Recovered, WeakModel};

const PARTITIONS: [(&str, i32); 3] = [("events", 0), ("events", 1), ("audit", 0)];

/// The configuration the application uses, on the test's storage and clock. One recovery
/// thread and no high-watermark timer thread: the I/O order must be the same in every run.
fn config(
    storage: std::sync::Arc<dyn seglog::segment_store::Storage>,
    clock: std::sync::Arc<dyn seglog::Clock>,
) -> Config {
    let mut config = Config::default()
        .with_storage(storage)
        .with_clock(clock)
        .with_segment_bytes(600)
        .with_recovery_threads(1);
    config = config.without_background_tasks();
    // Indexes of 4 KiB instead of 10 MiB: on the simulated storage they are held in memory, and
    // every crash state copies them.
    config.log.log.max_index_size = 4096;
    config
}

fn batch(pid: i64, seq: i32, value: &str) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut b = RecordBatchBuilder::new(0).producer(pid, 0, seq);
    b.append(testkit::TIMESTAMP, Some(b"k"), Some(value.as_bytes()), &[])?;
    Ok(b.build())
}

/// The application: appends to three partitions, retries one batch, flushes (and only then
/// acknowledges what it flushed), restarts cleanly, appends more.
fn workload(env: &CrashEnv) -> Result<(), Box<dyn Error>> {
    let dir = env.root().join("logs");
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut seqs = [0i32; 3];
    for round in 0..2 {
        let mut logs = LogDir::open(&dir, config(env.storage(), env.dyn_clock()))?;
        for (topic, partition) in PARTITIONS {
            let tp = TopicPartition::new(topic, partition);
            if logs.partition(&tp).is_none() {
                logs.create_partition(tp)?;
            }
        }
        for step in 0..3 {
            for (n, (topic, partition)) in PARTITIONS.iter().enumerate() {
                let tp = TopicPartition::new(*topic, *partition);
                let value = format!("{tp}/r{round}s{step}");
                let b = batch(n as i64 + 1, seqs[n], &value)?;
                let log = logs.partition(&tp).ok_or("partition")?;
                log.append_as_leader(&b, 0, seglog::AppendOrigin::Client)?;
                if step == 1 && n == 0 {
                    // A retried batch (the producer did not hear back): a duplicate, not
                    // appended twice.
                    log.append_as_leader(&b, 0, seglog::AppendOrigin::Client)?;
                }
                seqs[n] += 1;
                pending.push((tp.to_string(), value));
            }
            if step != 0 {
                logs.flush()?;
                for (key, value) in pending.drain(..) {
                    env.ack(key, value);
                }
            }
        }
        logs.close()?;
        for (key, value) in pending.drain(..) {
            env.ack(key, value);
        }
    }
    Ok(())
}

/// After the crash: open the directory as the application would, and find every acknowledged
/// record once, in order.
fn check(state: &Recovered<'_>) -> Result<(), Box<dyn Error>> {
    let dir = state.root().join("logs");
    let logs = LogDir::open(&dir, config(state.storage(), state.dyn_clock()))?;
    for (topic, partition) in PARTITIONS {
        let tp = TopicPartition::new(topic, partition);
        let key = tp.to_string();
        let acked = state.acked_for(&key);
        let Some(log) = logs.partition(&tp) else {
            if acked.is_empty() {
                continue;
            }
            return Err(format!("{key}: gone, {} records were acknowledged", acked.len()).into());
        };
        let fetch = log.read(
            log.log_start_offset(),
            1 << 20,
            IsolationLevel::ReadUncommitted,
        )?;
        let found: Vec<Vec<u8>> = seglog::recovery::consume(&fetch)?
            .into_iter()
            .filter_map(|r| r.value)
            .collect();
        let mut at = 0;
        for value in &acked {
            match found.iter().skip(at).position(|f| f == value) {
                Some(i) => at += i + 1,
                None => {
                    return Err(format!(
                        "{key}: acknowledged record {:?} missing (found {} records)",
                        String::from_utf8_lossy(value),
                        found.len()
                    )
                    .into())
                }
            }
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let options = FnOptions {
        // 2^k states at each crash point with up to 6 choices, else 16 seeded ones.
        model: CrashModel::Weak(WeakModel {
            exhaustive_up_to: 6,
            samples: 16,
            seed: 1,
        }),
        ..FnOptions::default()
    };
    let summary = crash_test_fn(&options, workload, check)?;
    println!("{summary}");
    for v in summary.violations.iter().take(20) {
        println!("violation: {v}");
    }
    if !summary.violations.is_empty() {
        return Err("recovery broke a promise".into());
    }
    Ok(())
}
