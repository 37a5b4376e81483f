//! The steps of the transitions: alignment, truncation for mirroring, and the `Stopping` steps.

use super::alignment::{alignment_point, EpochEndOffsets};
use super::state::{MirrorPartitionState, StopPolicy, StoppingStep, MIRROR_EPOCH_FENCE};
use super::transitions::{MirrorError, MirrorOp, MirroredLog};
use crate::leader_epoch::UNDEFINED_EPOCH;

/// Truncates `p` to [`alignment_point`] against `source` (fully, starting there, when it is
/// below the log start) and fsyncs; nothing when the log is aligned already.
pub(super) fn align<P: MirroredLog + ?Sized>(
    p: &mut P,
    source: &dyn EpochEndOffsets,
) -> Result<(), MirrorError<P::Error>> {
    let point = alignment_point(p, source);
    if point < p.log_start_offset() {
        p.truncate_fully_and_start_at(point)
            .map_err(MirrorError::Log)?;
    } else if point < p.log_end_offset() {
        p.truncate_to(point).map_err(MirrorError::Log)?;
    } else {
        return Ok(());
    }
    p.flush().map_err(MirrorError::Log)
}

/// The full truncation of a first start (`Mirroring{full_truncation_pending}` is persisted):
/// truncates fully, starting at 0, fsyncs, then persists `Mirroring` without the mark. Repeated
/// as a whole after a crash anywhere in it (truncating an empty log at 0 changes nothing).
pub(super) fn truncate_fully_for_mirroring<P: MirroredLog + ?Sized>(
    p: &mut P,
) -> Result<(), MirrorError<P::Error>> {
    let MirrorPartitionState::Mirroring {
        source_cluster_id,
        leader_epoch,
        full_truncation_pending: true,
    } = p.mirror_state().clone()
    else {
        return Ok(());
    };
    p.truncate_fully_and_start_at(0).map_err(MirrorError::Log)?;
    p.flush().map_err(MirrorError::Log)?;
    p.persist_mirror_state(MirrorPartitionState::Mirroring {
        source_cluster_id,
        leader_epoch,
        full_truncation_pending: false,
    })?;
    Ok(())
}

/// The new leader epoch of a stop: [`MIRROR_EPOCH_FENCE`] above every epoch in the log's
/// batches and its leader-epoch cache.
pub(super) fn fenced_stop_epoch<P: MirroredLog + ?Sized>(
    p: &P,
) -> Result<i32, MirrorError<P::Error>> {
    let in_batches = p.max_batch_epoch().map_err(MirrorError::Log)?;
    let seen = p
        .latest_epoch()
        .unwrap_or(UNDEFINED_EPOCH)
        .max(in_batches.unwrap_or(UNDEFINED_EPOCH))
        .max(0);
    seen.checked_add(MIRROR_EPOCH_FENCE)
        .ok_or(MirrorError::EpochExhausted)
}

/// Steps 2–6 from whatever step is persisted.
pub(super) fn continue_stopping<P: MirroredLog + ?Sized>(
    p: &mut P,
) -> Result<i64, MirrorError<P::Error>> {
    let MirrorPartitionState::Stopping {
        step,
        source_cluster_id,
        lso,
        last_mirrored_offset,
        last_mirrored_epoch,
        leader_epoch,
        policy,
    } = p.mirror_state().clone()
    else {
        return Err(MirrorError::InvalidTransition {
            from: p.mirror_state().kind(),
            op: MirrorOp::Stop,
        });
    };
    // Step 2: truncate to the persisted stop point. Step 1 made it durable, so the log reaches
    // it unless storage lost fsynced data; then the log end is the most that is left.
    let (point, last_epoch) = match (step, last_mirrored_offset, last_mirrored_epoch) {
        (StoppingStep::Truncated | StoppingStep::EpochBumped, Some(point), Some(epoch)) => {
            // Repeated: nothing may have landed past the stop point but our own barrier (every
            // append is refused while stopping; a log written by an older version accepted
            // follower appends here). Keep the barrier if it is there, cut anything else.
            // Under AbortOpenTransactions the stop's own ABORT markers lie between the stop
            // point and the barrier: nothing else can, so there is nothing to cut.
            let keep = match p.find_barrier_from(point).map_err(MirrorError::Log)? {
                Some(at) if at == point => point.saturating_add(1),
                _ => point,
            };
            if policy == StopPolicy::TruncateToLastStable && p.log_end_offset() > keep {
                p.truncate_to(keep).map_err(MirrorError::Log)?;
                p.flush().map_err(MirrorError::Log)?;
            }
            (point, epoch)
        }
        _ => {
            let point = lso.min(p.log_end_offset());
            p.truncate_to(point).map_err(MirrorError::Log)?;
            p.flush().map_err(MirrorError::Log)?;
            // The Last Mirror Epoch: the epoch of the last batch kept, from the batches as well
            // as the cache (a lost or stale `leader-epoch-checkpoint` leaves the cache short).
            let in_batches = p.max_batch_epoch().map_err(MirrorError::Log)?;
            let epoch = p.latest_epoch().max(in_batches).unwrap_or(UNDEFINED_EPOCH);
            p.persist_mirror_state(MirrorPartitionState::Stopping {
                step: StoppingStep::Truncated,
                source_cluster_id: source_cluster_id.clone(),
                lso,
                last_mirrored_offset: Some(point),
                last_mirrored_epoch: Some(epoch),
                leader_epoch,
                policy,
            })?;
            (point, epoch)
        }
    };
    // Step 3: the new epoch, chosen at step 1 (before truncation removed any epoch) and
    // persisted before it is used, so a resume uses the same. A state written by version 1
    // has none before this step: then it is fenced from what the truncated log holds.
    let epoch = match (step, leader_epoch) {
        (StoppingStep::EpochBumped, Some(epoch)) => epoch,
        _ => {
            let epoch = match leader_epoch {
                Some(epoch) => epoch,
                None => fenced_stop_epoch(p)?.max(last_epoch.saturating_add(MIRROR_EPOCH_FENCE)),
            };
            p.persist_mirror_state(MirrorPartitionState::Stopping {
                step: StoppingStep::EpochBumped,
                source_cluster_id: source_cluster_id.clone(),
                lso,
                last_mirrored_offset: Some(point),
                last_mirrored_epoch: Some(last_epoch),
                leader_epoch: Some(epoch),
                policy,
            })?;
            epoch
        }
    };
    p.assign_epoch(epoch, point).map_err(MirrorError::Log)?;
    // Step 4: a barrier at or after the stop point can only be ours (truncation removed
    // everything there and nothing else may append while stopping); one from an earlier attempt
    // may have survived a crash.
    let barrier_offset = match p.find_barrier_from(point).map_err(MirrorError::Log)? {
        Some(offset) => offset,
        None => {
            // Step 3b (AbortOpenTransactions): an ABORT marker for every transaction still
            // open, in the new epoch. Recomputed from producer state on a resume, so markers
            // that survived a crash are not written twice.
            if policy == StopPolicy::AbortOpenTransactions {
                p.abort_open_transactions(epoch).map_err(MirrorError::Log)?;
            }
            p.append_barrier(&source_cluster_id, epoch)
                .map_err(MirrorError::Log)?
        }
    };
    if barrier_offset < point {
        return Err(MirrorError::BarrierBeforeTruncationPoint {
            barrier_offset,
            last_mirrored_offset: point,
        });
    }
    // Step 5, also when the barrier was found: it may be in the log but not yet durable.
    p.flush().map_err(MirrorError::Log)?;
    // Step 6.
    p.persist_mirror_state(MirrorPartitionState::Stopped {
        barrier_offset,
        last_mirror_epoch: last_epoch,
    })?;
    Ok(barrier_offset)
}
