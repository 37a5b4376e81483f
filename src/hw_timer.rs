//! The high-watermark checkpoint timer a [`LogDir`](crate::LogDir) runs itself: Kafka's
//! `ReplicaManager` task `highwatermark-checkpoint`, which writes `replication-offset-checkpoint`
//! every `replica.high.watermark.checkpoint.interval.ms`
//! ([`Config::high_watermark_checkpoint_interval_ms`](crate::Config)), so that an unclean
//! restart finds recent high watermarks even when the caller never asks for a checkpoint.
//!
//! A thread of its own reads each partition's high watermark from the cell the partition log
//! publishes it in ([`recovery::PartitionLog::high_watermark_cell`]), never the log itself, so it
//! needs no access to the directory while the caller holds it. It wakes at most every 100 ms
//! of real time and writes when the interval has passed on the directory's clock (a manual
//! clock moves it in tests) and the high watermarks differ from what it wrote last. Every writer of the file (this thread, and the directory's own flush,
//! checkpoint and close) holds one lock while writing, so the temporary file of one write is
//! never that of another.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use segment_store::{Clock, OffsetCheckpointFile, Storage, TopicPartition};

/// The name of Kafka's high-watermark checkpoint file.
const REPLICATION_OFFSET_CHECKPOINT: &str = "replication-offset-checkpoint";

/// The longest real time the thread sleeps between two looks at the clock.
const MAX_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct State {
    cells: BTreeMap<TopicPartition, Arc<AtomicI64>>,
    stop: bool,
    /// What the timer wrote last.
    written: Option<Vec<(TopicPartition, i64)>>,
    /// The last write's error, if it failed.
    error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Held by every writer of `replication-offset-checkpoint`.
    write: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running timer; stopped (and its thread joined) on drop.
pub(crate) struct HwCheckpointTimer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for HwCheckpointTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HwCheckpointTimer")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl HwCheckpointTimer {
    /// Starts the timer for the log directory `dir`; `interval_ms <= 0` starts no thread (the
    /// checkpoint is then written only by flushes, closes and explicit calls).
    pub(crate) fn start(
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        interval_ms: i64,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        if interval_ms <= 0 {
            return Ok(Self {
                shared,
                thread: None,
            });
        }
        let poll = Duration::from_millis(u64::try_from(interval_ms).unwrap_or(1)).min(MAX_POLL);
        // The interval counts from now, not from when the thread first runs (a busy machine
        // may schedule it after the clock moved).
        let started_ms = clock.now_ms();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("highwatermark-checkpoint".into())
            .spawn(move || {
                run(
                    &thread_shared,
                    &dir.join(REPLICATION_OFFSET_CHECKPOINT),
                    storage,
                    clock.as_ref(),
                    interval_ms,
                    started_ms,
                    poll,
                )
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Follows the high watermark of `tp` from now on (its published cell).
    pub(crate) fn watch(&self, tp: TopicPartition, cell: Arc<AtomicI64>) {
        lock(&self.shared.state).cells.insert(tp, cell);
    }

    /// Stops following `tp`.
    pub(crate) fn unwatch(&self, tp: &TopicPartition) {
        lock(&self.shared.state).cells.remove(tp);
    }

    /// Runs `f` while no timer write is under way (for the directory's own checkpoint writes).
    pub(crate) fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        let _write = lock(&self.shared.write);
        f()
    }

    /// The error of the timer's last write, if it failed (it retries at the next interval).
    pub(crate) fn last_error(&self) -> Option<String> {
        lock(&self.shared.state).error.clone()
    }

    /// Stops the thread and waits for it (a write under way completes first).
    pub(crate) fn stop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            // The thread never panics on its own; if it did, there is nothing left to stop.
            let _ = thread.join();
        }
    }
}

impl Drop for HwCheckpointTimer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(
    shared: &Shared,
    path: &std::path::Path,
    storage: Arc<dyn Storage>,
    clock: &dyn Clock,
    interval_ms: i64,
    started_ms: i64,
    poll: Duration,
) {
    let file = OffsetCheckpointFile::new(storage, path);
    let mut last_ms = started_ms;
    loop {
        let entries = {
            let state = lock(&shared.state);
            if state.stop {
                return;
            }
            let (state, _) = shared
                .wake
                .wait_timeout(state, poll)
                .unwrap_or_else(PoisonError::into_inner);
            if state.stop {
                return;
            }
            let now = clock.now_ms();
            if now.saturating_sub(last_ms) < interval_ms {
                continue;
            }
            last_ms = now;
            let entries: Vec<(TopicPartition, i64)> = state
                .cells
                .iter()
                .map(|(tp, cell)| (tp.clone(), cell.load(Ordering::Acquire)))
                // A high watermark that is not known gets no entry (see
                // `PartitionLog::checkpointable_high_watermark`).
                .filter(|&(_, hw)| hw != recovery::UNKNOWN_HIGH_WATERMARK)
                .collect();
            if state.written.as_ref() == Some(&entries) {
                continue;
            }
            entries
        };
        let result = {
            let _write = lock(&shared.write);
            file.write(&entries)
        };
        let mut state = lock(&shared.state);
        match result {
            Ok(()) => {
                state.written = Some(entries);
                state.error = None;
            }
            Err(e) => state.error = Some(e.to_string()),
        }
    }
}
