//! The log a mirror drives ([`MirrorLog`]), its errors, and the state transitions
//! ([`MirroredLog`]).

use std::fmt;

use super::alignment::{EpochEndOffsets, StopOutcome};
use super::file::MirrorStateError;
use super::last_epoch::last_mirror_epoch_of;
use super::state::{
    is_valid_source_cluster_id, MirrorPartitionState, MirrorStateKind, StopPolicy, StoppingStep,
};
use super::stopping::{align, continue_stopping, fenced_stop_epoch, truncate_fully_for_mirroring};
use crate::leader_epoch::UNDEFINED_EPOCH;

/// What the mirror state driver needs from the partition log.
pub trait MirrorLog: EpochEndOffsets {
    /// The log's error type.
    type Error: std::error::Error + 'static;
    /// The last stable offset (no open or undecided transaction below it; `<=` the log end).
    fn last_stable_offset(&self) -> i64;
    /// The first offset of the log.
    fn log_start_offset(&self) -> i64;
    /// The offset the next append gets.
    fn log_end_offset(&self) -> i64;
    /// The latest leader epoch of the leader-epoch cache, if any.
    fn latest_epoch(&self) -> Option<i32>;
    /// Whether the high watermark (which bounds the last stable offset) is known. After an
    /// unclean restart a high watermark the caller owns comes from a checkpoint that may be
    /// stale or missing; a stop refuses to take its stop point until it is set again.
    fn high_watermark_known(&self) -> bool;
    /// Removes every batch at or above `offset` (a no-op when `offset >= log_end_offset`) and
    /// rebuilds producer state. Durable after the next [`flush`](MirrorLog::flush).
    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error>;
    /// Removes every batch and starts the log empty at `offset` (Kafka
    /// `truncateFullyAndStartAt`): alignment to a point below the log start offset. Durable
    /// after the next [`flush`](MirrorLog::flush).
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Self::Error>;
    /// Records in the leader-epoch cache, durably (the checkpoint is written atomically), that
    /// `epoch` starts at `start_offset` (Kafka `assign`, as a new leader does at its log end); a
    /// no-op when `epoch` is already the latest.
    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Self::Error>;
    /// Finds a `MIRROR_PID_RESET` batch at offset `>= from`; returns its offset.
    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error>;
    /// The largest partition leader epoch carried by any batch in the log, `None` when no batch
    /// carries one. Read from the batches, not from the leader-epoch cache, which can have lost
    /// entries (a lost checkpoint).
    fn max_batch_epoch(&self) -> Result<Option<i32>, Self::Error>;
    /// Appends the barrier in `leader_epoch` (COORDINATOR origin, past any read-only check) and
    /// returns its offset; must apply it to producer state. Durable after the next
    /// [`flush`](MirrorLog::flush).
    fn append_barrier(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
    ) -> Result<i64, Self::Error>;
    /// Makes every earlier append and truncation durable (fsync).
    fn flush(&mut self) -> Result<(), Self::Error>;
    /// Appends an ABORT marker for every open transaction, in `leader_epoch` (COORDINATOR
    /// origin, past any read-only check): its producer id and producer epoch as the log last
    /// shows them, the coordinator epoch from producer state (−1 when unknown). Returns how
    /// many it wrote. Durable after the next [`flush`](MirrorLog::flush).
    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, Self::Error>;
}

/// An operation the mirror state driver was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorOp {
    /// [`MirroredLog::start_mirroring`].
    StartMirroring,
    /// [`MirroredLog::stop_mirroring`].
    Stop,
}

/// Errors of the mirror state driver.
#[derive(Debug)]
#[non_exhaustive]
pub enum MirrorError<E> {
    /// A client append while the partition is mirrored (`Mirroring` or `Stopping`).
    ReadOnly {
        /// The partition's state.
        state: MirrorStateKind,
    },
    /// The operation is not allowed in the current state.
    InvalidTransition {
        /// The partition's state.
        from: MirrorStateKind,
        /// What was asked.
        op: MirrorOp,
    },
    /// `start_mirroring` from a different source while already mirroring.
    SourceMismatch {
        /// The source being mirrored.
        current: String,
        /// The source asked for.
        requested: String,
    },
    /// The source cluster id is empty or contains control characters.
    InvalidSourceClusterId(String),
    /// The log returned a barrier offset below the truncation point (a broken [`MirrorLog`]).
    BarrierBeforeTruncationPoint {
        /// Offset returned by `append_barrier` or `find_barrier_from`.
        barrier_offset: i64,
        /// The truncation point.
        last_mirrored_offset: i64,
    },
    /// No leader epoch above the log's: its latest epoch is `i32::MAX`.
    EpochExhausted,
    /// A stop was asked for while the high watermark is not known (an unclean restart with a
    /// high watermark the caller owns, not set since): the stop point, the last stable offset
    /// bounded by the high watermark, could cut committed data. Set the high watermark first.
    HighWatermarkUnknown,
    /// The partition log failed.
    Log(E),
    /// Persisting or loading the state failed.
    State(MirrorStateError),
}

impl<E: fmt::Display> fmt::Display for MirrorError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReadOnly { state } => {
                write!(
                    f,
                    "partition is read-only for clients in mirror state {state}"
                )
            }
            Self::InvalidTransition { from, op } => {
                let op = match op {
                    MirrorOp::StartMirroring => "start mirroring",
                    MirrorOp::Stop => "stop mirroring",
                };
                write!(f, "cannot {op} in mirror state {from}")
            }
            Self::SourceMismatch { current, requested } => write!(
                f,
                "already mirroring from {current:?}, cannot mirror from {requested:?}"
            ),
            Self::InvalidSourceClusterId(id) => write!(f, "invalid source cluster id {id:?}"),
            Self::BarrierBeforeTruncationPoint {
                barrier_offset,
                last_mirrored_offset,
            } => write!(
                f,
                "barrier at offset {barrier_offset} is below the truncation point \
                 {last_mirrored_offset}"
            ),
            Self::EpochExhausted => f.write_str("no leader epoch left above the log's"),
            Self::HighWatermarkUnknown => f.write_str(
                "the high watermark is not known since an unclean restart: set it before \
                 stopping mirroring",
            ),
            Self::Log(e) => write!(f, "partition log: {e}"),
            Self::State(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for MirrorError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Log(e) => Some(e),
            Self::State(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> From<MirrorStateError> for MirrorError<E> {
    fn from(e: MirrorStateError) -> Self {
        Self::State(e)
    }
}

/// A partition log that owns its mirror state: the KIP-1279 transition driver, as provided
/// methods over [`MirrorLog`] and two state accessors. [`crate::PartitionLog`] implements it (its
/// appends enforce the state); `testkit::MirrorPartition` pairs any [`MirrorLog`] with a separate
/// [`MirrorStateStore`](crate::MirrorStateStore).
///
/// Every transition persists its state before it is visible through
/// [`mirror_state`](Self::mirror_state), so the in-memory state never runs ahead of what a crash
/// would leave behind. On error the in-memory state is the last persisted one; call
/// [`resume_mirror_stop`](Self::resume_mirror_stop) (or reopen) to continue.
pub trait MirroredLog: MirrorLog {
    /// The current (persisted) state.
    fn mirror_state(&self) -> &MirrorPartitionState;

    /// Persists `next` durably and atomically, then makes it the current state.
    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError>;

    /// Whether clients (and transaction coordinators) may append: `Stopped` or `Local`.
    fn accepts_client_appends(&self) -> bool {
        self.mirror_state().accepts_client_appends()
    }

    /// `Ok` if clients may append, else [`MirrorError::ReadOnly`].
    fn check_client_append(&self) -> Result<(), MirrorError<Self::Error>> {
        if self.accepts_client_appends() {
            Ok(())
        } else {
            Err(MirrorError::ReadOnly {
                state: self.mirror_state().kind(),
            })
        }
    }

    /// Whether the mirror fetcher may append (only in `Mirroring`, once a first start's full
    /// truncation is durable).
    fn accepts_mirrored_appends(&self) -> bool {
        matches!(
            self.mirror_state(),
            MirrorPartitionState::Mirroring {
                full_truncation_pending: false,
                ..
            }
        )
    }

    /// Starts mirroring from `source_cluster_id`, from `Local` or `Stopped` (failback): persists
    /// `Mirroring` first (read-only for clients from then on), then the KIP's log alignment —
    /// truncates the log to [`alignment_point`](crate::alignment_point) against `source` (the source partition's
    /// `OffsetsForLeaderEpoch` answers; below the log start: truncates fully and starts there)
    /// and fsyncs. No client write can therefore be accepted between a truncation and the state
    /// that forbids it: a crash before the state is persisted leaves the log untouched and
    /// writable; one after it leaves it read-only, and calling again (already `Mirroring` from
    /// the same source) aligns again, a no-op when the log is aligned.
    fn start_mirroring(
        &mut self,
        source_cluster_id: &str,
        source: &dyn EpochEndOffsets,
    ) -> Result<(), MirrorError<Self::Error>> {
        if !is_valid_source_cluster_id(source_cluster_id) {
            return Err(MirrorError::InvalidSourceClusterId(
                source_cluster_id.to_owned(),
            ));
        }
        match self.mirror_state() {
            MirrorPartitionState::Local | MirrorPartitionState::Stopped { .. } => {}
            MirrorPartitionState::Mirroring {
                source_cluster_id: current,
                full_truncation_pending,
                ..
            } => {
                if current != source_cluster_id {
                    return Err(MirrorError::SourceMismatch {
                        current: current.clone(),
                        requested: source_cluster_id.to_owned(),
                    });
                }
                // A start interrupted after its state was persisted may not have truncated.
                if *full_truncation_pending {
                    return truncate_fully_for_mirroring(self);
                }
                return align(self, source);
            }
            MirrorPartitionState::Stopping { .. } => {
                return Err(MirrorError::InvalidTransition {
                    from: MirrorStateKind::Stopping,
                    op: MirrorOp::StartMirroring,
                })
            }
        }
        // The destination's own epoch, above everything the log holds (its local epochs too);
        // chosen before alignment removes any epoch.
        let leader_epoch = fenced_stop_epoch(self)?;
        // A partition that never mirrored holds only its own batches. Unless the source tells
        // a Last Mirror Epoch (it mirrored from this log: failback, whose rule finds what the
        // two share), nothing of it is in the source, whatever the two clusters' epoch numbers
        // say: the log is truncated fully, after the state that marks it pending is durable.
        let full_truncation_pending = matches!(self.mirror_state(), MirrorPartitionState::Local)
            && source.last_mirror_epoch().is_none()
            && self.log_end_offset() > 0;
        self.persist_mirror_state(MirrorPartitionState::Mirroring {
            source_cluster_id: source_cluster_id.to_owned(),
            leader_epoch,
            full_truncation_pending,
        })?;
        if full_truncation_pending {
            return truncate_fully_for_mirroring(self);
        }
        align(self, source)
    }

    /// Stops mirroring: runs the `Stopping` steps (module docs) and returns the barrier's
    /// offset. The caller has removed the fetcher. From `Stopping` this continues the stop
    /// ([`resume_mirror_stop`](Self::resume_mirror_stop)); from `Stopped` it returns the
    /// existing barrier's offset.
    fn stop_mirroring(&mut self) -> Result<i64, MirrorError<Self::Error>> {
        self.stop_mirroring_with(StopPolicy::default())
    }

    /// [`stop_mirroring`](Self::stop_mirroring) under `policy` (a stop already under way
    /// continues under the policy it started with).
    fn stop_mirroring_with(&mut self, policy: StopPolicy) -> Result<i64, MirrorError<Self::Error>> {
        match self.mirror_state().clone() {
            MirrorPartitionState::Mirroring {
                full_truncation_pending: true,
                ..
            } => {
                // A first start that did not finish: its log holds no mirrored batch to keep.
                truncate_fully_for_mirroring(self)?;
                self.stop_mirroring_with(policy)
            }
            MirrorPartitionState::Mirroring {
                source_cluster_id,
                leader_epoch: mirroring_epoch,
                full_truncation_pending: false,
            } => {
                // Step 1: the stop point, durable in the log before it is persisted, and the
                // new leader epoch, fenced from every epoch the log holds before truncation.
                let lso = match policy {
                    StopPolicy::TruncateToLastStable => {
                        // The LSO, bounded by the high watermark: never from one that an unclean
                        // restart left stale or missing (it would cut committed data).
                        if !self.high_watermark_known() {
                            return Err(MirrorError::HighWatermarkUnknown);
                        }
                        self.last_stable_offset()
                    }
                    // Nothing is truncated.
                    StopPolicy::AbortOpenTransactions => self.log_end_offset(),
                };
                // Never below the epoch the destination used while mirroring (the caller's
                // metadata holds it).
                let leader_epoch = fenced_stop_epoch(self)?.max(mirroring_epoch);
                self.flush().map_err(MirrorError::Log)?;
                self.persist_mirror_state(MirrorPartitionState::Stopping {
                    step: StoppingStep::FeedStopped,
                    source_cluster_id,
                    lso,
                    last_mirrored_offset: None,
                    last_mirrored_epoch: None,
                    leader_epoch: Some(leader_epoch),
                    policy,
                })?;
                continue_stopping(self)
            }
            MirrorPartitionState::Stopping { .. } => continue_stopping(self),
            MirrorPartitionState::Stopped { barrier_offset, .. } => Ok(barrier_offset),
            MirrorPartitionState::Local => Err(MirrorError::InvalidTransition {
                from: MirrorStateKind::Local,
                op: MirrorOp::Stop,
            }),
        }
    }

    /// [`stop_mirroring_with`](Self::stop_mirroring_with), returning the barrier's offset and
    /// the leader epoch the library chose for the stop (the barrier's; local appends continue
    /// in it, and a lower one is refused, so the caller's metadata follows it).
    fn stop_mirroring_outcome(
        &mut self,
        policy: StopPolicy,
    ) -> Result<StopOutcome, MirrorError<Self::Error>>
    where
        Self: Sized,
    {
        let barrier_offset = self.stop_mirroring_with(policy)?;
        let leader_epoch = last_mirror_epoch_of(self.mirror_state(), self, self.latest_epoch())
            .map_or(UNDEFINED_EPOCH, |lme| lme.stop_epoch);
        Ok(StopOutcome {
            barrier_offset,
            leader_epoch,
        })
    }

    /// Continues an interrupted stop from its persisted step (after reopening, or after an error
    /// from [`stop_mirroring`](Self::stop_mirroring)); does nothing in other states. Returns the
    /// state reached.
    ///
    /// A stop that failed before `Stopping{FeedStopped}` was persisted left `Mirroring`: nothing
    /// was changed, and the coordinator (whose desired state is still "stopped") calls
    /// [`stop_mirroring`](Self::stop_mirroring) again.
    fn resume_mirror_stop(&mut self) -> Result<&MirrorPartitionState, MirrorError<Self::Error>> {
        if matches!(self.mirror_state(), MirrorPartitionState::Stopping { .. }) {
            continue_stopping(self)?;
        }
        Ok(self.mirror_state())
    }
}
