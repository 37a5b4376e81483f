//! The background tasks a [`LogDir`](crate::LogDir) runs on a thread of its own, Kafka's
//! periodic tasks for one log directory:
//!
//! * `highwatermark-checkpoint` (`ReplicaManager`): writes `replication-offset-checkpoint` every
//!   [`Config::high_watermark_checkpoint_interval_ms`](crate::Config) when a high watermark
//!   changed, so that an unclean restart finds recent high watermarks with no call needed;
//! * `kafka-log-flusher` (`LogManager.flushDirtyLogs`): flushes each partition whose last flush
//!   is [`Config::flush_interval_ms`](crate::Config) old (Kafka `log.flush.interval.ms`), which
//!   with [`HighWatermark::FlushedLogEnd`](crate::HighWatermark) also makes its appends readable;
//! * `kafka-recovery-point-checkpoint` and `kafka-log-start-offset-checkpoint`: write
//!   `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` every
//!   [`Config::recovery_point_checkpoint_interval_ms`](crate::Config) (Kafka
//!   `log.flush.offset.checkpoint.interval.ms`) when they changed, so that recovery after a
//!   crash starts from recent recovery points instead of rescanning what was flushed since the
//!   last [`LogDir::flush`](crate::LogDir::flush);
//! * `delete-file` (`LocalLog.asyncDeleteSegment`'s scheduled removal): at every wake, the
//!   `.deleted` files of segments removed at least `file.delete.delay.ms` ago go
//!   ([`Log::delete_expired_files`]). Without the thread (every interval `<= 0`) they go at the
//!   next retention pass or the close.
//!
//! The thread reads what it writes from each partition's published values (the high-watermark
//! cell, the [`Log`]'s reader), never its writer; it flushes through [`Log::flush`], which holds
//! the writer's lock only to take and publish offsets. It wakes at most every 100 ms of real
//! time and acts when an interval passed on the directory's clock (a manual clock moves it in
//! tests). Every writer of a checkpoint (this thread, and the directory's own flush, checkpoint
//! and close) holds one lock while writing, so the temporary file of one write is never that of
//! another. The entries of offline partitions are written back as they were read at load.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use segment_store::{OffsetCheckpointFile, TopicPartition};

use crate::log::Log;
use crate::Config;

/// The name of Kafka's high-watermark checkpoint file.
const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";
/// The name of Kafka's recovery-point checkpoint file.
const RECOVERY_POINT_CHECKPOINT: &str = "recovery-point-offset-checkpoint";
/// The name of Kafka's log-start-offset checkpoint file.
const LOG_START_OFFSET_CHECKPOINT: &str = "log-start-offset-checkpoint";

/// The longest real time the thread sleeps between two looks at the clock.
const MAX_POLL: Duration = Duration::from_millis(100);

/// The intervals of the three tasks, from `config`, in milliseconds on the clock; `0` or less:
/// the task does not run.
fn intervals(config: &Config) -> [i64; 3] {
    [
        config.high_watermark_checkpoint_interval_ms,
        config.flush_interval_ms,
        config.recovery_point_checkpoint_interval_ms,
    ]
}

/// A partition the tasks follow.
#[derive(Debug)]
struct Watched {
    high_watermark: Arc<AtomicI64>,
    log: Log,
    /// When the flusher last flushed it (or found nothing to flush), on the clock.
    last_flush_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    partitions: BTreeMap<TopicPartition, Watched>,
    stop: bool,
    /// What each checkpoint task wrote last, by file name.
    written: BTreeMap<&'static str, Vec<(TopicPartition, i64)>>,
    /// The last error of a task, if it failed.
    error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Held by every writer of the directory's checkpoints.
    write: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where and what the tasks write.
struct Target {
    dir: PathBuf,
    /// The storage, the clock and the intervals.
    config: Config,
    /// The offline partitions' entries, `(file name, partition, offset)`.
    offline: Vec<(&'static str, TopicPartition, i64)>,
}

/// The running tasks; stopped (and their thread joined) on drop.
pub(crate) struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl Scheduler {
    /// Starts the tasks for the log directory `dir`; with every interval `<= 0` no thread
    /// starts (the checkpoints are then written only by flushes, closes and explicit calls, and
    /// nothing is flushed but on request).
    pub(crate) fn start(
        dir: PathBuf,
        config: &Config,
        offline: Vec<(&'static str, TopicPartition, i64)>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let shortest = intervals(config).into_iter().filter(|&i| i > 0).min();
        let Some(shortest) = shortest else {
            return Ok(Self {
                shared,
                thread: None,
            });
        };
        let poll = Duration::from_millis(u64::try_from(shortest).unwrap_or(1)).min(MAX_POLL);
        // The intervals count from now, not from when the thread first runs (a busy machine
        // may schedule it after the clock moved).
        let started_ms = config.env.clock.now_ms();
        let thread_shared = Arc::clone(&shared);
        let target = Target {
            dir,
            config: config.clone(),
            offline,
        };
        let thread = std::thread::Builder::new()
            .name("log-dir-scheduler".into())
            .spawn(move || run(&thread_shared, &target, started_ms, poll))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Follows the partition `tp` from now on: its high watermark (the cell its log publishes
    /// it in) and its log (for flushes and recovery points).
    pub(crate) fn watch(&self, tp: TopicPartition, high_watermark: Arc<AtomicI64>, log: Log) {
        let mut state = lock(&self.shared.state);
        let last_flush_ms = log.config().env.clock.now_ms();
        state.partitions.insert(
            tp,
            Watched {
                high_watermark,
                log,
                last_flush_ms,
            },
        );
    }

    /// Stops following `tp`.
    pub(crate) fn unwatch(&self, tp: &TopicPartition) {
        lock(&self.shared.state).partitions.remove(tp);
    }

    /// Runs `f` while no task writes a checkpoint (for the directory's own checkpoint writes).
    pub(crate) fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        let _write = lock(&self.shared.write);
        f()
    }

    /// The error of a task's last run, if it failed (it tries again at its next interval).
    pub(crate) fn last_error(&self) -> Option<String> {
        lock(&self.shared.state).error.clone()
    }

    /// Stops the thread and waits for it (a flush or write under way completes first).
    pub(crate) fn stop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread never panics on its own; if it did, there is nothing left to stop.
            let _ = thread.join();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What one wake-up does: the partitions to flush and the checkpoints to write.
#[derive(Default)]
struct Due {
    flush: Vec<Log>,
    /// Every partition: their `.deleted` files past `file.delete.delay.ms` go (a look at a
    /// queue when none is due).
    deleted_files: Vec<Log>,
    checkpoints: Vec<(&'static str, Vec<(TopicPartition, i64)>)>,
}

fn run(shared: &Shared, target: &Target, started_ms: i64, poll: Duration) {
    let [hw_interval_ms, flush_interval_ms, rp_interval_ms] = intervals(&target.config);
    let (mut last_hw_ms, mut last_rp_ms) = (started_ms, started_ms);
    loop {
        let due = {
            let state = lock(&shared.state);
            if state.stop {
                return;
            }
            let (mut state, _) = shared
                .wake
                .wait_timeout(state, poll)
                .unwrap_or_else(PoisonError::into_inner);
            if state.stop {
                return;
            }
            let now = target.config.env.clock.now_ms();
            let mut due = Due {
                deleted_files: state.partitions.values().map(|w| w.log.clone()).collect(),
                ..Due::default()
            };
            if flush_interval_ms > 0 {
                for w in state.partitions.values_mut() {
                    if now.saturating_sub(w.last_flush_ms) >= flush_interval_ms {
                        w.last_flush_ms = now;
                        if w.log.recovery_point() < w.log.log_end_offset() {
                            due.flush.push(w.log.clone());
                        }
                    }
                }
            }
            if hw_interval_ms > 0 && now.saturating_sub(last_hw_ms) >= hw_interval_ms {
                last_hw_ms = now;
                let entries = state
                    .partitions
                    .iter()
                    .map(|(tp, w)| (tp.clone(), w.high_watermark.load(Ordering::Acquire)))
                    // A high watermark that is not known gets no entry (see
                    // `PartitionLog::checkpointable_high_watermark`).
                    .filter(|&(_, hw)| hw != recovery::UNKNOWN_HIGH_WATERMARK)
                    .collect();
                due.checkpoints
                    .push((REPLICATION_OFFSET_CHECKPOINT, entries));
            }
            if rp_interval_ms > 0 && now.saturating_sub(last_rp_ms) >= rp_interval_ms {
                last_rp_ms = now;
                let (mut points, mut starts) = (Vec::new(), Vec::new());
                for (tp, w) in &state.partitions {
                    points.push((tp.clone(), w.log.recovery_point()));
                    starts.push((tp.clone(), w.log.log_start_offset()));
                }
                due.checkpoints.push((RECOVERY_POINT_CHECKPOINT, points));
                due.checkpoints.push((LOG_START_OFFSET_CHECKPOINT, starts));
            }
            due.checkpoints
                .retain(|(name, entries)| state.written.get(name) != Some(entries));
            due
        };
        let mut errors = Vec::new();
        for log in &due.flush {
            if let Err(e) = log.flush() {
                errors.push(format!("flush of {}: {e}", log.topic_partition()));
            }
        }
        for log in &due.deleted_files {
            if let Err(e) = log.delete_expired_files() {
                errors.push(format!("deleted files of {}: {e}", log.topic_partition()));
            }
        }
        let mut written = Vec::new();
        for (name, entries) in due.checkpoints {
            match write_checkpoint(shared, target, name, &entries) {
                Ok(()) => written.push((name, entries)),
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        let mut state = lock(&shared.state);
        state.written.extend(written);
        state.error = (!errors.is_empty()).then(|| errors.join("; "));
    }
}

fn write_checkpoint(
    shared: &Shared,
    target: &Target,
    name: &'static str,
    entries: &[(TopicPartition, i64)],
) -> Result<(), segment_store::SegmentError> {
    let mut all = entries.to_vec();
    all.extend(
        target
            .offline
            .iter()
            .filter(|(n, _, _)| *n == name)
            .map(|(_, tp, v)| (tp.clone(), *v)),
    );
    let path: &Path = &target.dir.join(name);
    let file = OffsetCheckpointFile::new(Arc::clone(&target.config.env.storage), path);
    let _write = lock(&shared.write);
    file.write(&all)
}
