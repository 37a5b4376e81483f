//! The Last Mirror Epoch of a stopped mirror partition (`OffsetsForLeaderEpoch`'s answer).

use super::alignment::{EpochEndOffsets, LastMirrorEpoch};
use super::state::MirrorPartitionState;
use crate::leader_epoch::UNDEFINED_EPOCH;

/// The Last Mirror Epoch of a log in `state` whose latest leader epoch is `latest_epoch` (only
/// `Stopped` has one): the stop epoch is the epoch whose range holds the barrier.
pub fn last_mirror_epoch_of(
    state: &MirrorPartitionState,
    log: &dyn EpochEndOffsets,
    latest_epoch: Option<i32>,
) -> Option<LastMirrorEpoch> {
    let MirrorPartitionState::Stopped {
        barrier_offset,
        last_mirror_epoch,
    } = *state
    else {
        return None;
    };
    // The stop's epoch is the one whose range contains the barrier, found by walking down from
    // the latest.
    let mut epoch = latest_epoch?;
    for _ in 0..=u16::MAX {
        if epoch == UNDEFINED_EPOCH {
            return None;
        }
        let below = epoch.checked_sub(1)?;
        let (lower, start) = log.end_offset_for_epoch(below);
        // `start` is where `epoch` starts (the end of the largest epoch below it).
        if lower == UNDEFINED_EPOCH || start <= barrier_offset {
            let end_offset = if lower == UNDEFINED_EPOCH {
                barrier_offset
            } else {
                start.min(barrier_offset)
            };
            return Some(LastMirrorEpoch {
                epoch: last_mirror_epoch,
                end_offset,
                barrier_offset,
                stop_epoch: epoch,
            });
        }
        epoch = lower;
    }
    None
}
