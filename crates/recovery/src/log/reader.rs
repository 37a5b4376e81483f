//! [`LogReader`]: the reads of one partition, beside its writer.
//!
//! The writer ([`PartitionLog`], behind whatever its owner serialises writes with) publishes
//! the bounds readers need (high watermark, last stable offset, leader epochs) as one immutable
//! [`ReadState`] after every change, through an atomic pointer swap; a reader loads the latest
//! one without any lock, then reads the segments through the shared [`LocalLog`]'s published
//! segment list, which takes no lock the writer takes either. So a reader never waits for the
//! writer's lock, an append, an fsync or producer-state work (docs/design.md, "Concurrency").

use std::path::Path;
use std::sync::{Arc, Weak};

use arc_swap::ArcSwap;
use segment_store::{AbortedTxn, LocalLog};

use super::consumer::RecordIter;
use super::error::PartitionLogError;
use super::fetch::{FetchIsolation, FetchResult, FetchSlices, IsolationLevel, View};
use super::PartitionLog;
use segment_store::EpochEntry;

/// How many times a reader loads the published bounds again while the log truncates under it.
const STALE_STATE_ATTEMPTS: usize = 16;

/// What readers see of a partition's bounds, published as one value by the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadState {
    /// The high watermark: the end of `ReadUncommitted` reads.
    pub high_watermark: i64,
    /// The last stable offset: the end of `ReadCommitted` reads.
    pub last_stable_offset: i64,
    /// The leader epochs, oldest first (for `ListOffsets` and `OffsetsForLeaderEpoch`).
    pub epochs: Arc<[EpochEntry]>,
    /// The partition's leader epoch ([`PartitionLog::leader_epoch`]).
    pub leader_epoch: i32,
    /// The log start offset.
    pub log_start_offset: i64,
    /// The log end offset.
    pub log_end_offset: i64,
    /// The recovery point: everything below it is on disk.
    pub recovery_point: i64,
    /// The segments' truncation count when it was published
    /// ([`LocalLog::truncations`]): a reader whose log has truncated since does not use these
    /// bounds.
    pub truncations: u64,
}

/// A handle for reading a partition from any thread while its writer goes on
/// ([`PartitionLog::reader`]); cheap to clone. See the module docs for what it waits for.
///
/// Each read takes the published [`ReadState`] once, so its bounds are consistent with each
/// other. A read racing a truncation may fail with
/// [`PartitionLogError::OffsetOutOfRange`] or return less; once the log is closed, reads fail
/// with a `Closed` error and the offsets are the last published.
///
/// A reader does not keep the log open: it refers to the segments weakly and holds them only
/// for the length of one read, so closing the log (and its directory lock) does not wait for
/// readers to be dropped.
#[derive(Debug, Clone)]
pub struct LogReader {
    pub(crate) local: Weak<LocalLog>,
    pub(crate) dir: Arc<Path>,
    pub(crate) state: Arc<ArcSwap<ReadState>>,
}

impl LogReader {
    /// The bounds as last published.
    pub fn state(&self) -> Arc<ReadState> {
        self.state.load_full()
    }

    /// The segments, for one read; a `Closed` error once the log was closed.
    fn local(&self) -> Result<Arc<LocalLog>, PartitionLogError> {
        self.local.upgrade().ok_or_else(|| {
            segment_store::SegmentError::Closed {
                dir: self.dir.to_path_buf(),
            }
            .into()
        })
    }

    /// Runs the read `f` at the published bounds, never at bounds older than the segments'
    /// last truncation: after a truncation and the appends that follow it, an old high
    /// watermark or last stable offset would reach into batches the bound no longer covers
    /// (an open transaction's, say). So the read is done again when the log truncated while it
    /// ran (whatever it answered: the active segment's bytes are read after the segment list's
    /// lock is released, and a truncation meanwhile can cut them short), and the state is loaded again when it predates the last truncation (the writer
    /// publishes right after truncating). When the log keeps truncating under it, the read
    /// answers at the bound of the log start offset: nothing readable, no error.
    fn with_view<R>(
        &self,
        f: impl Fn(&View<'_>) -> Result<R, PartitionLogError>,
    ) -> Result<R, PartitionLogError> {
        let local = self.local()?;
        for _ in 0..STALE_STATE_ATTEMPTS {
            let state = self.state.load();
            let truncations = local.truncations();
            if truncations != state.truncations {
                std::thread::yield_now();
                continue;
            }
            let r = f(&View {
                local: &local,
                high_watermark: state.high_watermark,
                last_stable_offset: state.last_stable_offset,
                epochs: &state.epochs,
            });
            // An answer or an error of a read the log did not truncate under; otherwise (bytes
            // from before and after, or a slice read short) the read is done again.
            if local.truncations() == truncations {
                return r;
            }
        }
        let state = self.state.load();
        let start = local.log_start_offset();
        f(&View {
            local: &local,
            high_watermark: start,
            last_stable_offset: start,
            epochs: &state.epochs,
        })
    }

    /// [`PartitionLog::read`] at the published bounds.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: IsolationLevel,
    ) -> Result<FetchResult, PartitionLogError> {
        self.with_view(|v| v.read(offset, max_bytes, isolation))
    }

    /// [`PartitionLog::fetch`] at the published bounds.
    pub fn fetch(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchResult, PartitionLogError> {
        self.with_view(|v| v.fetch(offset, max_bytes, isolation, min_one_message))
    }

    /// [`PartitionLog::fetch_slices`] at the published bounds.
    pub fn fetch_slices(
        &self,
        offset: i64,
        max_bytes: usize,
        isolation: FetchIsolation,
        min_one_message: bool,
    ) -> Result<FetchSlices, PartitionLogError> {
        self.with_view(|v| v.fetch_slices(offset, max_bytes, isolation, min_one_message))
    }

    /// [`PartitionLog::iter_from`]: the records from `offset` on, across segments, up to the
    /// bound of `isolation` published when it is called. It holds its own reader: appends,
    /// rolls and retention go on while it lives.
    pub fn iter_from(
        &self,
        offset: i64,
        isolation: IsolationLevel,
    ) -> Result<RecordIter, PartitionLogError> {
        let bound = self.with_view(|v| {
            v.check_in_range(offset)?;
            Ok::<_, PartitionLogError>(v.bound(isolation.into()))
        })?;
        Ok(RecordIter::new(self.clone(), offset, isolation, bound))
    }

    /// [`PartitionLog::fetch_offset_by_timestamp`] (`ListOffsets`).
    pub fn fetch_offset_by_timestamp(
        &self,
        target: i64,
    ) -> Result<Option<segment_store::TimestampAndOffset>, PartitionLogError> {
        self.with_view(|v| v.fetch_offset_by_timestamp(target))
    }

    /// [`PartitionLog::end_offset_for_leader_epoch`] (`OffsetsForLeaderEpoch`).
    pub fn end_offset_for_leader_epoch(&self, leader_epoch: i32) -> Option<(i32, i64)> {
        let state = self.state.load();
        let (epoch, offset) =
            crate::leader_epoch::end_offset_for(&state.epochs, leader_epoch, self.log_end_offset());
        (offset != crate::leader_epoch::UNDEFINED_EPOCH_OFFSET).then_some((epoch, offset))
    }

    /// [`PartitionLog::collect_aborted_transactions`].
    pub fn collect_aborted_transactions(
        &self,
        start_offset: i64,
        upper_bound_offset: i64,
    ) -> Result<Vec<AbortedTxn>, PartitionLogError> {
        self.with_view(|v| v.collect_aborted_transactions(start_offset, upper_bound_offset))
    }

    /// The offset the next batch gets, as the segments say now (as last published once the
    /// log is closed).
    pub fn log_end_offset(&self) -> i64 {
        match self.local.upgrade() {
            Some(l) => l.log_end_offset(),
            None => self.state.load().log_end_offset,
        }
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        match self.local.upgrade() {
            Some(l) => l.log_start_offset(),
            None => self.state.load().log_start_offset,
        }
    }

    /// Everything below it is on disk.
    pub fn recovery_point(&self) -> i64 {
        match self.local.upgrade() {
            Some(l) => l.recovery_point(),
            None => self.state.load().recovery_point,
        }
    }

    /// Removes the `.deleted` files of segments removed at least `file.delete.delay.ms` ago
    /// ([`LocalLog::delete_expired_files`]): housekeeping that needs no writer (a log
    /// directory's own thread runs it). Returns the number of segments whose files went; `0`
    /// once the log is closed (closing removed them).
    pub fn delete_expired_files(&self) -> Result<usize, PartitionLogError> {
        match self.local.upgrade() {
            Some(l) => Ok(l.delete_expired_files()?),
            None => Ok(0),
        }
    }
}

/// A flush of a partition's segments that runs without its writer ([`PartitionLog::flusher`]):
/// the fsyncs hold the segments' writer lock for reading only (an append waits for the fsync of
/// the segment in progress; a roll or truncation for the whole flush), and readers read. A truncation beside it keeps the recovery point where it was.
#[derive(Debug)]
pub struct LogFlusher {
    local: Arc<LocalLog>,
    up_to: i64,
}

impl LogFlusher {
    /// Makes the segments durable up to the log end offset taken by
    /// [`PartitionLog::flusher`] and moves the recovery point there. The high watermark is the
    /// writer's to move afterwards
    /// ([`PartitionLog::follow_high_watermark_policy`], then [`PartitionLog::publish`]).
    pub fn flush(self) -> Result<(), PartitionLogError> {
        self.local.flush(self.up_to)?;
        Ok(())
    }
}

impl PartitionLog {
    /// A flush of everything appended so far, to run after the writer's lock is released
    /// ([`LogFlusher`]).
    pub fn flusher(&self) -> LogFlusher {
        LogFlusher {
            local: Arc::clone(&self.local),
            up_to: self.log_end_offset(),
        }
    }

    /// A reader of this partition for other threads ([`LogReader`]): it sees what this log
    /// last published (every append, high-watermark move, truncation and log-start move
    /// publishes).
    pub fn reader(&self) -> LogReader {
        LogReader {
            local: Arc::downgrade(&self.local),
            dir: Arc::from(self.dir.as_path()),
            state: Arc::clone(&self.published),
        }
    }

    /// The bounds readers see now.
    pub(crate) fn read_state(&self, previous: &ReadState) -> ReadState {
        let entries = self.epochs.entries();
        // One read of the segment list's bounds (its lock taken once per publish).
        let bounds = self.local.bounds();
        ReadState {
            high_watermark: self.high_watermark,
            last_stable_offset: self
                .psm
                .last_stable_offset_for(self.high_watermark, bounds.log_start_offset),
            leader_epoch: self.leader_epoch(),
            log_start_offset: bounds.log_start_offset,
            log_end_offset: bounds.log_end_offset,
            recovery_point: bounds.recovery_point,
            truncations: bounds.truncations,
            epochs: if &previous.epochs[..] == entries {
                Arc::clone(&previous.epochs)
            } else {
                Arc::from(entries)
            },
        }
    }

    /// Publishes the bounds to the [`LogReader`]s if they changed. Every change of them inside
    /// the log calls it; an owner that changes the log through other paths calls it too.
    pub fn publish(&self) {
        let current = self.published.load();
        let next = self.read_state(&current);
        if next != **current {
            self.published.store(Arc::new(next));
        }
    }
}
