//! The partition log (Kafka `UnifiedLog`, producer side): a segment-store [`LocalLog`], the
//! [`ProducerStateManager`], the [`LeaderEpochFileCache`], the high watermark and the log start
//! offset, kept consistent on every append, roll, read, truncation and close.
//!
//! * Leader appends ([`PartitionLog::append_as_leader`]) validate every batch (v2 only, CRC-32C,
//!   no control batch from a client), assign offsets by rewriting `baseOffset` and
//!   `partitionLeaderEpoch` in place (both outside the CRC, so the CRC is left as it is), check
//!   producer state *before* writing (a duplicate returns the original offsets and writes
//!   nothing; an epoch or sequence error writes nothing), append, then apply producer state,
//!   write aborted transactions into the `.txnindex` and record the leader epoch.
//! * Follower appends ([`PartitionLog::append_as_follower`]) keep offsets and bytes as they came
//!   and apply producer state with `Replication` rules (warnings, not errors).
//! * The KIP-1279 barrier is applied by [`ProducerStateManager::apply_batches`] on every origin,
//!   strictly in log order (see [`crate::barrier`]).
//! * The log owns its KIP-1279 mirror state ([`crate::mirror`], restored by the loader) and
//!   enforces it: leader appends (client and coordinator) are refused while `Mirroring` or
//!   `Stopping`, the mirror feed ([`PartitionLog::append_as_mirror`]) only appends while
//!   `Mirroring`, intra-cluster follower appends work in every state; the transitions
//!   (`start_mirroring` with log alignment by leader epoch, `stop_mirroring`,
//!   `resume_mirror_stop`) are [`MirroredLog`]'s.
//! * When the active segment rolls, a producer snapshot named after the new base is written
//!   before the batches that caused the roll are applied (Kafka §6.3/§7.7).
//! * Reads are bounded by the high watermark (`ReadUncommitted`) or the last stable offset
//!   (`ReadCommitted`, with the aborted transactions of the range); [`consume`] is the consumer
//!   side that hides control batches (markers and barriers) and aborted records.
//!
//! Producer-state checks run before the bytes are written, each producer's against a copy of its
//! one entry (Kafka's `ProducerAppendInfo`); once the bytes are in, the checked update is
//! committed ([`ProducerStateManager::analyze_and_validate`], then
//! [`ProducerStateManager::apply_update`], which cannot fail). All-or-nothing, and O(batches) per
//! append whatever the number of live producers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use segment_store::{Clock, LocalLog, LogConfig, Storage};

use crate::leader_epoch::LeaderEpochFileCache;
use crate::mirror::{MirrorPartitionState, MirrorStateFile, MirroredLog, MIRROR_EPOCH_FENCE};
use crate::producer_state::{ProducerStateManager, ProducerStateManagerConfig};
use crate::snapshot::StorageIo;

mod append;
mod consumer;
mod error;
mod fetch;
mod maintenance;
mod mirroring;
mod reader;

pub use append::LogAppendInfo;
pub use consumer::{consume, ConsumedRecord, ConsumerReader, RecordIter};
pub use error::PartitionLogError;
pub use fetch::{
    FetchIsolation, FetchResult, FetchSlices, IsolationLevel, EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP, MAX_TIMESTAMP,
};
pub use reader::{LogFlusher, LogReader, ReadState};

/// How much a replay or a barrier search reads at a time.
const READ_CHUNK: usize = 1 << 20;

/// Settings of a partition log.
#[derive(Debug, Clone, Default)]
pub struct PartitionLogConfig {
    /// Segment-level settings.
    pub log: LogConfig,
    /// Producer-state settings.
    pub producer_state: ProducerStateManagerConfig,
    /// `message.timestamp.type=LogAppendTime`: leader appends stamp every batch with the
    /// broker's time (this rewrites the attributes and max timestamp, so the CRC is recomputed,
    /// as Kafka does).
    pub log_append_time: bool,
}

/// The value [`PartitionLog::high_watermark_cell`] holds while the high watermark is not known.
pub const UNKNOWN_HIGH_WATERMARK: i64 = -1;

/// The partition log. See the module docs.
#[derive(Debug)]
pub struct PartitionLog {
    pub(crate) dir: PathBuf,
    pub(crate) local: Arc<LocalLog>,
    pub(crate) psm: ProducerStateManager,
    pub(crate) epochs: LeaderEpochFileCache,
    pub(crate) high_watermark: i64,
    pub(crate) config: PartitionLogConfig,
    pub(crate) clock: Arc<dyn Clock>,
    /// The storage the segments are written through; producer snapshots go through it too.
    pub(crate) io: StorageIo,
    /// The KIP-1279 mirror state, as persisted in the `mirror-state` file.
    pub(crate) mirror: MirrorPartitionState,
    /// The high watermark as others may observe it, and whether it is known.
    pub(crate) hw_state: HighWatermarkState,
    /// The bounds [`LogReader`]s see, as last published ([`PartitionLog::publish`]).
    pub(crate) published: Arc<arc_swap::ArcSwap<ReadState>>,
}

/// Who moves the high watermark, the end of what readers may see, and what an open after an
/// unclean shutdown re-establishes ([`PartitionLog::reestablish_high_watermark`], which
/// [`load_log_dir`](crate::load_log_dir) applies to every partition it recovers).
///
/// Kafka's leader moves it as followers acknowledge; a storage engine embedded in a single
/// process has no followers, so it can let the high watermark follow the log end itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HighWatermark {
    /// Follows the flushed log end (the recovery point): after every flush, roll and at open,
    /// the high watermark is set to the offset below which everything is on disk. Readers see
    /// only data that survives a crash. After an unclean open: the recovered log end, once
    /// fsynced. The default.
    #[default]
    FlushedLogEnd,
    /// Follows the log end after every append: everything appended is readable at once, before
    /// it is durable (a crash can lose what a reader has seen). After an unclean open: the log
    /// end.
    LogEnd,
    /// Kafka's replication: nothing moves it but
    /// [`PartitionLog::set_high_watermark`] (and, at open, the
    /// `replication-offset-checkpoint`). Until then reads return nothing. After an unclean
    /// open the checkpoint's value may be stale or missing (and after a clean one an entry may
    /// be missing): it is marked unknown, a mirror stop refuses until the caller sets it
    /// ([`MirrorError::HighWatermarkUnknown`](crate::MirrorError::HighWatermarkUnknown)), and no checkpoint gets an entry for it.
    Manual,
}

/// The high watermark's published copy (read by a checkpoint timer on another thread) and
/// whether it is known: after an unclean restart a high watermark owned by the caller
/// (replication) comes from a checkpoint that may be stale or missing, and a mirror stop must
/// not take a stop point from it.
#[derive(Debug, Clone)]
pub(crate) struct HighWatermarkState {
    published: Arc<AtomicI64>,
    known: bool,
}

impl Default for HighWatermarkState {
    fn default() -> Self {
        Self {
            published: Arc::new(AtomicI64::new(0)),
            known: true,
        }
    }
}

impl PartitionLog {
    /// The partition directory (also where producer snapshots live).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The segments.
    pub fn local_log(&self) -> &LocalLog {
        &self.local
    }
    /// Producer state.
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.psm
    }
    /// The leader-epoch cache.
    pub fn leader_epoch_cache(&self) -> &LeaderEpochFileCache {
        &self.epochs
    }
    /// Settings.
    pub fn config(&self) -> &PartitionLogConfig {
        &self.config
    }
    /// The storage the segments, producer snapshots and checkpoints are written through.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.io.0
    }
    /// The partition's `mirror-state` file, through the same storage as the log.
    pub fn mirror_state_file(&self) -> MirrorStateFile<StorageIo> {
        MirrorStateFile::with_io(&self.dir, self.io.clone())
    }
    /// The KIP-1279 mirror state (restored by the loader; changed only by the
    /// [`MirroredLog`] transitions, which persist it first).
    pub fn mirror_state(&self) -> &MirrorPartitionState {
        &self.mirror
    }
    /// The current leader epoch. While `Mirroring`: the destination's own epoch, which the
    /// library keeps above every source epoch it mirrors (persisted in the `mirror-state`
    /// file; the mirrored batches, and the leader-epoch cache, keep the source's epochs).
    /// Otherwise the latest of the leader-epoch cache (after a mirror stop, the epoch the stop
    /// chose), or 0 for a log that has none. The caller's metadata follows it.
    pub fn leader_epoch(&self) -> i32 {
        let cached = self.epochs.latest_epoch().unwrap_or(0).max(0);
        match self.mirror {
            MirrorPartitionState::Mirroring { leader_epoch, .. } if leader_epoch >= 0 => {
                leader_epoch
            }
            // A mirror-state file from before the destination's epoch was kept: fenced from
            // the cache until the next mirrored append persists one.
            MirrorPartitionState::Mirroring { .. } => cached.saturating_add(MIRROR_EPOCH_FENCE),
            _ => cached,
        }
    }

    /// The caller's leader epoch for a `Mirroring` partition (its metadata changed, e.g. a
    /// leader election on the destination cluster): one below [`leader_epoch`](Self::leader_epoch)
    /// is refused ([`PartitionLogError::StaleLeaderEpoch`]); a higher one is persisted in the
    /// `mirror-state` file and used from then on (the library still bumps it when a source
    /// epoch comes near). Returns the epoch in use. [`PartitionLogError::NotMirroring`] in
    /// other states (there, [`append_as_leader`](Self::append_as_leader) refuses a lower
    /// epoch).
    pub fn set_mirror_leader_epoch(&mut self, requested: i32) -> Result<i32, PartitionLogError> {
        let MirrorPartitionState::Mirroring {
            source_cluster_id,
            full_truncation_pending,
            ..
        } = &self.mirror
        else {
            return Err(PartitionLogError::NotMirroring {
                state: self.mirror.kind(),
            });
        };
        let current = self.leader_epoch();
        if requested < current {
            return Err(PartitionLogError::StaleLeaderEpoch { requested, current });
        }
        if requested > current || !self.mirror_epoch_persisted() {
            let next = MirrorPartitionState::Mirroring {
                source_cluster_id: source_cluster_id.clone(),
                leader_epoch: requested,
                full_truncation_pending: *full_truncation_pending,
            };
            self.persist_mirror_state(next)?;
        }
        Ok(requested)
    }

    fn mirror_epoch_persisted(&self) -> bool {
        matches!(self.mirror, MirrorPartitionState::Mirroring { leader_epoch, .. } if leader_epoch >= 0)
    }
    /// The offset the next batch gets.
    pub fn log_end_offset(&self) -> i64 {
        self.local.log_end_offset()
    }
    /// The first readable offset.
    pub fn log_start_offset(&self) -> i64 {
        self.local.log_start_offset()
    }
    /// Everything below it is durable.
    pub fn recovery_point(&self) -> i64 {
        self.local.recovery_point()
    }
    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Sets the high watermark, clamped to `[log start, log end]`, and lets producer state
    /// forget transactions completed below it. Returns the value set.
    pub fn set_high_watermark(&mut self, high_watermark: i64) -> i64 {
        let hw = high_watermark
            .min(self.log_end_offset())
            .max(self.log_start_offset());
        self.hw_state.known = true;
        self.store_high_watermark(hw);
        self.psm.on_high_watermark_updated(hw);
        hw
    }

    fn store_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw;
        let published = if self.hw_state.known {
            hw
        } else {
            UNKNOWN_HIGH_WATERMARK
        };
        self.hw_state.published.store(published, Ordering::Release);
        self.publish();
    }

    /// The high watermark as another thread sees it: a shared cell the log updates whenever
    /// its high watermark changes (what a periodic `replication-offset-checkpoint` writer
    /// reads without holding the log). It holds [`UNKNOWN_HIGH_WATERMARK`] (−1) while the
    /// high watermark is not known: such a value must not be checkpointed.
    pub fn high_watermark_cell(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.hw_state.published)
    }

    /// The high watermark to write in `replication-offset-checkpoint`: `None` while it is not
    /// known (see [`mark_high_watermark_unknown`](Self::mark_high_watermark_unknown)), so that
    /// a stale or missing value is never written as if it were re-established (the entry is
    /// left out, and a load that finds no entry re-establishes it, see
    /// [`load_log_dir`](crate::load_log_dir)).
    pub fn checkpointable_high_watermark(&self) -> Option<i64> {
        self.hw_state.known.then_some(self.high_watermark)
    }

    /// Marks the high watermark as not known: after an unclean restart, a high watermark the
    /// caller owns (replication) comes from a checkpoint that may be stale or missing. Until
    /// [`set_high_watermark`](Self::set_high_watermark) is called, a mirror stop refuses to
    /// take its stop point ([`MirrorError::HighWatermarkUnknown`](crate::MirrorError::HighWatermarkUnknown)), and no checkpoint of the
    /// log directory holds an entry for it.
    pub fn mark_high_watermark_unknown(&mut self) {
        self.hw_state.known = false;
        self.store_high_watermark(self.high_watermark);
    }

    /// After an unclean shutdown, the high watermark as `policy` re-establishes it (see
    /// [`HighWatermark`]): the recovered log end once fsynced, the log end, or (`Manual`)
    /// nothing: the loaded value is marked unknown until the caller sets it. The one place
    /// this rule lives; [`load_log_dir`](crate::load_log_dir) applies it to every partition
    /// after an unclean shutdown.
    pub fn reestablish_high_watermark(
        &mut self,
        policy: HighWatermark,
    ) -> Result<(), PartitionLogError> {
        match policy {
            HighWatermark::FlushedLogEnd => {
                // The recovered log end, once it is durable.
                self.flush()?;
                let end = self.log_end_offset();
                self.set_high_watermark(end);
            }
            HighWatermark::LogEnd => {
                let end = self.log_end_offset();
                self.set_high_watermark(end);
            }
            HighWatermark::Manual => self.mark_high_watermark_unknown(),
        }
        Ok(())
    }

    /// Moves the high watermark as `policy` says, after a load, flush or append: up to the
    /// recovery point (`FlushedLogEnd`), to the log end (`LogEnd`), or not at all (`Manual`).
    pub fn follow_high_watermark_policy(&mut self, policy: HighWatermark) {
        match policy {
            HighWatermark::FlushedLogEnd => {
                let flushed = self.recovery_point();
                if flushed > self.high_watermark() {
                    self.set_high_watermark(flushed);
                }
            }
            HighWatermark::LogEnd => {
                let end = self.log_end_offset();
                self.set_high_watermark(end);
            }
            HighWatermark::Manual => {}
        }
    }

    /// Whether the high watermark is known (see
    /// [`mark_high_watermark_unknown`](Self::mark_high_watermark_unknown)).
    pub fn high_watermark_known(&self) -> bool {
        self.hw_state.known
    }

    /// The partition's last stable offset: `min(first unstable offset, high watermark)`.
    pub fn last_stable_offset(&self) -> i64 {
        self.psm
            .last_stable_offset_for(self.high_watermark, self.log_start_offset())
    }
}

/// What a clean close leaves behind, for the log directory's checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedLog {
    /// The partition directory.
    pub dir: PathBuf,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Log end offset (also the recovery point: everything was flushed).
    pub log_end_offset: i64,
    /// High watermark; `None` when it is not known (a caller-owned high watermark after an
    /// unclean restart that the caller has not set): it gets no checkpoint entry.
    pub high_watermark: Option<i64>,
}
