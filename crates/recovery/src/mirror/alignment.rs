//! Log alignment by leader epoch against the source partition.

use super::transitions::MirrorLog;
use crate::leader_epoch::{end_offset_for, EpochHistory, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};

/// The answer of a log to Kafka's `OffsetsForLeaderEpoch` request: `(epoch, end offset)` where
/// `epoch` is the largest leader epoch `<= requested` the log knows and `end offset` the start of
/// the next higher epoch (the log end offset for the latest epoch); `(UNDEFINED_EPOCH,
/// UNDEFINED_EPOCH_OFFSET)` when `requested` is above every epoch it knows (Kafka
/// `LeaderEpochFileCache.endOffsetFor`).
pub trait EpochEndOffsets {
    /// See the trait docs.
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64);

    /// The Last Mirror Epoch this log persisted when it stopped mirroring, while it is
    /// `Stopped` (what the promoted side tells the old source at failback); `None` otherwise.
    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        None
    }
}

/// A copy of a log's leader epochs answers as the log would.
impl EpochEndOffsets for EpochHistory {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        end_offset_for(&self.entries, requested, self.log_end_offset)
    }
}

impl<T: EpochEndOffsets + ?Sized> EpochEndOffsets for &T {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        (**self).end_offset_for_epoch(requested)
    }
    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        (**self).last_mirror_epoch()
    }
}

/// What a completed mirror stop did: [`MirroredLog::stop_mirroring_outcome`](crate::MirroredLog::stop_mirroring_outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StopOutcome {
    /// The barrier's offset.
    pub barrier_offset: i64,
    /// The leader epoch the stop chose (the barrier's).
    pub leader_epoch: i32,
}

/// The Last Mirror Epoch of a stopped destination (KIP-1279 LOG_ALIGNMENT): the leader epoch
/// of the last mirrored batch its stop kept, that epoch's end offset in its log (where the
/// stop's epoch starts: the barrier, or the first ABORT marker of an
/// [`StopPolicy::AbortOpenTransactions`](crate::StopPolicy::AbortOpenTransactions) stop), the barrier's offset, and the stop's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LastMirrorEpoch {
    /// The last source epoch kept (−1: none).
    pub epoch: i32,
    /// Its end offset in the stopped log.
    pub end_offset: i64,
    /// The barrier's offset.
    pub barrier_offset: i64,
    /// The leader epoch of the barrier (the stop's new epoch).
    pub stop_epoch: i32,
}

/// Where a log must be truncated so that everything it keeps is what `source` holds at the same
/// offsets: Kafka's follower truncation after `OffsetsForLeaderEpoch`
/// (`AbstractFetcherThread.getOffsetTruncationState`), iterated until it completes.
///
/// Ask the source for the end offset of our latest epoch. If it answers with that epoch, the
/// logs agree up to `min(its end offset, our end offset for that epoch)`. If it answers with an
/// older epoch we also know, they agree up to `min` of both ends for that epoch. If we do not
/// know the epoch it answers with, cut to our end offset for the largest epoch below it and ask
/// again with that epoch. The result never exceeds `local`'s log end offset.
///
/// Two cases Kafka settles with the follower's high watermark are settled here without it (a
/// mirror's high watermark says nothing about the source): a log with data but no leader epoch
/// aligns to its log start offset (nothing kept); when the source has no epoch as high as ours
/// (Kafka's `UNDEFINED_EPOCH_OFFSET` answer), our data from that epoch on cannot be in it, so we
/// cut where that epoch starts and ask about the epoch below. An empty log is already aligned.
///
/// When the source is a stopped destination that tells its Last Mirror Epoch
/// ([`EpochEndOffsets::last_mirror_epoch`]) and this log does not hold its barrier yet
/// (failback, or a chain node that has not received it), the result is also at most
/// `min(our end offset for the LME, the LME's end offset)`, the prototype's rule, which does
/// not depend on the two clusters' epoch numbers (it holds when a source election reached the
/// stop's epoch number, which [`MIRROR_EPOCH_FENCE`](crate::MIRROR_EPOCH_FENCE) makes unlikely, not impossible).
///
/// The result can be below `local`'s log start offset (retention passed the point where the
/// logs diverge): the caller then truncates fully and starts the log there, as Kafka does.
pub fn alignment_point<L: MirrorLog + ?Sized>(local: &L, source: &dyn EpochEndOffsets) -> i64 {
    let by_epoch = alignment_by_epoch(local, source);
    let Some(lme) = source.last_mirror_epoch() else {
        return by_epoch;
    };
    let end = local.log_end_offset();
    if end <= local.log_start_offset() {
        return by_epoch;
    }
    // A log that holds the barrier at the LME's end offset received it already (a chain node
    // past it): the epochs say where it stands. A read error counts as "not held" (the cut is
    // then deeper than needed, never shallower).
    if matches!(local.find_barrier_from(lme.barrier_offset), Ok(Some(at)) if at == lme.barrier_offset)
    {
        return by_epoch;
    }
    let ours = if lme.epoch == UNDEFINED_EPOCH {
        UNDEFINED_EPOCH_OFFSET
    } else {
        local.end_offset_for_epoch(lme.epoch).1
    };
    let by_lme = if ours == UNDEFINED_EPOCH_OFFSET {
        lme.end_offset
    } else {
        ours.min(lme.end_offset)
    };
    by_epoch.min(by_lme).min(end)
}

fn alignment_by_epoch<L: MirrorLog + ?Sized>(local: &L, source: &dyn EpochEndOffsets) -> i64 {
    let log_start = local.log_start_offset();
    let mut end = local.log_end_offset();
    if end <= log_start {
        return end;
    }
    let Some(mut epoch) = local.latest_epoch() else {
        return log_start;
    };
    // Each round moves to a strictly smaller epoch, so this ends; the bound is a guard.
    for _ in 0..=u16::MAX {
        let (leader_epoch, leader_end) = source.end_offset_for_epoch(epoch);
        if leader_end == UNDEFINED_EPOCH_OFFSET {
            // The source has no epoch as high as ours: none of our data from this epoch on is
            // in it. Cut where this epoch starts and ask about the one below.
            let Some(below) = epoch.checked_sub(1) else {
                return log_start;
            };
            let (lower, start) = local.end_offset_for_epoch(below);
            end = start.min(end);
            if end <= log_start || lower >= epoch || lower == UNDEFINED_EPOCH {
                return end.max(log_start);
            }
            epoch = lower;
            continue;
        }
        if leader_epoch == UNDEFINED_EPOCH {
            return leader_end.min(end);
        }
        let (follower_epoch, follower_end) = local.end_offset_for_epoch(leader_epoch);
        if follower_epoch == UNDEFINED_EPOCH || follower_end == UNDEFINED_EPOCH_OFFSET {
            // Below our log start the source's end can be: retention passed it.
            return leader_end.min(end);
        }
        if follower_epoch == leader_epoch {
            return follower_end.min(leader_end).min(end);
        }
        // We do not know the source's epoch: keep what we have up to our end of the largest
        // epoch below it, then ask again about that one.
        end = follower_end.min(end);
        if follower_epoch >= epoch {
            break;
        }
        epoch = follower_epoch;
    }
    end.max(log_start)
}
