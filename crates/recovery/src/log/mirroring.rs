//! The KIP-1279 mirror traits implemented by the partition log.

use record_format::{mirror_pid_reset_batch, ControlRecordType};

use super::error::PartitionLogError;
use super::PartitionLog;
use crate::mirror::{
    EpochEndOffsets, MirrorError, MirrorLog, MirrorPartitionState, MirrorStateError,
    MirrorStateStore, MirroredLog,
};
use crate::producer_state::AppendOrigin;

impl EpochEndOffsets for PartitionLog {
    /// Kafka `UnifiedLog.endOffsetForEpoch` (what the leader answers to `OffsetsForLeaderEpoch`).
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        self.epochs.end_offset_for(requested, self.log_end_offset())
    }

    /// The LME persisted by this log's stop, while it is `Stopped`.
    fn last_mirror_epoch(&self) -> Option<crate::mirror::LastMirrorEpoch> {
        crate::mirror::last_mirror_epoch_of(&self.mirror, self, self.epochs.latest_epoch())
    }
}

impl MirrorLog for PartitionLog {
    type Error = PartitionLogError;

    fn last_stable_offset(&self) -> i64 {
        PartitionLog::last_stable_offset(self)
    }

    fn log_start_offset(&self) -> i64 {
        PartitionLog::log_start_offset(self)
    }

    fn log_end_offset(&self) -> i64 {
        PartitionLog::log_end_offset(self)
    }

    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    fn high_watermark_known(&self) -> bool {
        PartitionLog::high_watermark_known(self)
    }

    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Self::Error> {
        if self.epochs.latest_epoch() != Some(epoch) {
            self.epochs.assign(epoch, start_offset)?;
        }
        Ok(())
    }

    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error> {
        PartitionLog::truncate_to(self, offset).map(|_| ())
    }

    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Self::Error> {
        PartitionLog::truncate_fully_and_start_at(self, offset)
    }

    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error> {
        PartitionLog::find_barrier_from(self, from)
    }

    fn max_batch_epoch(&self) -> Result<Option<i32>, Self::Error> {
        PartitionLog::max_batch_epoch(self)
    }

    fn append_barrier(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
    ) -> Result<i64, Self::Error> {
        let bytes = mirror_pid_reset_batch(0, self.clock.now_ms(), leader_epoch, source_cluster_id);
        let info =
            self.append_as_leader_unchecked(&bytes, leader_epoch, AppendOrigin::Coordinator)?;
        Ok(info.first_offset)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        PartitionLog::flush(self)
    }

    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, Self::Error> {
        // In first-offset order; each producer id has at most one open transaction.
        let open: Vec<(i64, i16, i32)> = self
            .psm
            .ongoing_txns()
            .values()
            .map(|txn| {
                let entry = self.psm.last_entry(txn.producer_id);
                (
                    txn.producer_id,
                    entry.map_or(0, |e| e.producer_epoch()),
                    entry.map_or(-1, |e| e.coordinator_epoch()),
                )
            })
            .collect();
        for &(producer_id, producer_epoch, coordinator_epoch) in &open {
            let bytes = record_format::end_txn_marker_batch(
                0,
                self.clock.now_ms(),
                leader_epoch,
                producer_id,
                producer_epoch,
                ControlRecordType::Abort,
                coordinator_epoch,
            );
            self.append_as_leader_unchecked(&bytes, leader_epoch, AppendOrigin::Coordinator)?;
        }
        Ok(open.len())
    }
}

impl MirroredLog for PartitionLog {
    fn mirror_state(&self) -> &MirrorPartitionState {
        &self.mirror
    }

    /// Writes the `mirror-state` file atomically through the log's storage seam, then takes the
    /// state.
    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError> {
        self.mirror_state_file().store(&next)?;
        self.mirror = next;
        Ok(())
    }
}

impl PartitionLog {
    /// [`MirroredLog::start_mirroring`]: aligns this log to `source` by leader epoch, then
    /// `Mirroring`.
    pub fn start_mirroring(
        &mut self,
        source_cluster_id: &str,
        source: &dyn EpochEndOffsets,
    ) -> Result<(), MirrorError<PartitionLogError>> {
        MirroredLog::start_mirroring(self, source_cluster_id, source)
    }

    /// [`MirroredLog::stop_mirroring`]: the `Stopping` steps; returns the barrier's offset.
    pub fn stop_mirroring(&mut self) -> Result<i64, MirrorError<PartitionLogError>> {
        MirroredLog::stop_mirroring(self)
    }

    /// [`MirroredLog::stop_mirroring_with`]: the `Stopping` steps under `policy`; returns the
    /// barrier's offset.
    pub fn stop_mirroring_with(
        &mut self,
        policy: crate::mirror::StopPolicy,
    ) -> Result<i64, MirrorError<PartitionLogError>> {
        MirroredLog::stop_mirroring_with(self, policy)
    }

    /// [`MirroredLog::resume_mirror_stop`]: finishes an interrupted stop.
    pub fn resume_mirror_stop(
        &mut self,
    ) -> Result<&MirrorPartitionState, MirrorError<PartitionLogError>> {
        MirroredLog::resume_mirror_stop(self)
    }
}
