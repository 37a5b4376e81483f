//! [`MirrorPartition`]: a KIP-1279 mirror log paired with a separate mirror-state store, the
//! driver tests use to run the mirror state machine over a fake log.

use recovery::internals::last_mirror_epoch_of;
use recovery::{
    EpochEndOffsets, LastMirrorEpoch, MirrorError, MirrorLog, MirrorPartitionState,
    MirrorStateError, MirrorStateStore, MirroredLog,
};

/// A [`MirrorLog`] paired with a separate [`MirrorStateStore`]: the driver for logs that do not
/// own their mirror state (tests drive a fake log through it).
#[derive(Debug)]
pub struct MirrorPartition<L, S> {
    log: L,
    store: S,
    state: MirrorPartitionState,
}

impl<L: MirrorLog, S: MirrorStateStore> MirrorPartition<L, S> {
    /// Loads the persisted state. Does not resume an interrupted stop: call
    /// [`resume`](Self::resume) before serving (until then a `Stopping` partition stays
    /// read-only).
    pub fn open(log: L, store: S) -> Result<Self, MirrorError<L::Error>> {
        let state = store.load()?;
        Ok(Self { log, store, state })
    }

    /// The current (persisted) state.
    pub fn state(&self) -> &MirrorPartitionState {
        &self.state
    }

    /// The partition log.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The state store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Gives back the log and the store.
    pub fn into_parts(self) -> (L, S) {
        (self.log, self.store)
    }

    /// [`MirroredLog::stop_mirroring`].
    pub fn stop(&mut self) -> Result<i64, MirrorError<L::Error>> {
        self.stop_mirroring()
    }

    /// [`MirroredLog::resume_mirror_stop`].
    pub fn resume(&mut self) -> Result<&MirrorPartitionState, MirrorError<L::Error>> {
        self.resume_mirror_stop()
    }
}

impl<L: MirrorLog, S> EpochEndOffsets for MirrorPartition<L, S> {
    fn end_offset_for_epoch(&self, requested: i32) -> (i32, i64) {
        self.log.end_offset_for_epoch(requested)
    }
    fn last_mirror_epoch(&self) -> Option<LastMirrorEpoch> {
        last_mirror_epoch_of(&self.state, &self.log, self.log.latest_epoch())
    }
}

impl<L: MirrorLog, S> MirrorLog for MirrorPartition<L, S> {
    type Error = L::Error;
    fn last_stable_offset(&self) -> i64 {
        self.log.last_stable_offset()
    }
    fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }
    fn log_end_offset(&self) -> i64 {
        self.log.log_end_offset()
    }
    fn latest_epoch(&self) -> Option<i32> {
        self.log.latest_epoch()
    }
    fn high_watermark_known(&self) -> bool {
        self.log.high_watermark_known()
    }
    fn truncate_to(&mut self, offset: i64) -> Result<(), Self::Error> {
        self.log.truncate_to(offset)
    }
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Self::Error> {
        self.log.truncate_fully_and_start_at(offset)
    }
    fn assign_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<(), Self::Error> {
        self.log.assign_epoch(epoch, start_offset)
    }
    fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, Self::Error> {
        self.log.find_barrier_from(from)
    }
    fn max_batch_epoch(&self) -> Result<Option<i32>, Self::Error> {
        self.log.max_batch_epoch()
    }
    fn append_barrier(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
    ) -> Result<i64, Self::Error> {
        self.log.append_barrier(source_cluster_id, leader_epoch)
    }
    fn flush(&mut self) -> Result<(), Self::Error> {
        self.log.flush()
    }
    fn abort_open_transactions(&mut self, leader_epoch: i32) -> Result<usize, Self::Error> {
        self.log.abort_open_transactions(leader_epoch)
    }
}

impl<L: MirrorLog, S: MirrorStateStore> MirroredLog for MirrorPartition<L, S> {
    fn mirror_state(&self) -> &MirrorPartitionState {
        &self.state
    }

    fn persist_mirror_state(&mut self, next: MirrorPartitionState) -> Result<(), MirrorStateError> {
        self.store.store(&next)?;
        self.state = next;
        Ok(())
    }
}
