//! Truncation, rolls, producer snapshots, retention, flush and close; the producer-state
//! replay they rebuild from.

use std::path::PathBuf;

use record_format::{is_mirror_pid_reset_batch, Batches, LogEntry};
use segment_store::{AbortedTxn, LocalLog};

use super::error::PartitionLogError;
use super::{ClosedLog, PartitionLog, READ_CHUNK};
use crate::producer_state::{
    AbortedTxnRecord, AppliedBatches, ExpiredProducer, ProducerStateManager,
};
use crate::snapshot::{
    delete_snapshots_above_with, delete_snapshots_before_with, latest_snapshot_offset_with,
    oldest_snapshot_offset_with, remove_stray_snapshots_with, SnapshotFile, SnapshotLoad,
};
use crate::summary::BatchSummary;

impl PartitionLog {
    /// Kafka `truncateTo(target)`: removes every batch at or above `target` (which must be a
    /// batch boundary), truncates the leader-epoch cache from the end, and rebuilds producer
    /// state from the newest snapshot at or below `target` by replaying the log (barriers
    /// included). A target at or past the log end is a no-op. Returns whether anything was
    /// removed.
    pub fn truncate_to(&mut self, target: i64) -> Result<bool, PartitionLogError> {
        if target < 0 {
            return Err(PartitionLogError::NegativeOffset(target));
        }
        let log_end_offset = self.log_end_offset();
        if target >= log_end_offset {
            self.epochs.truncate_from_end(log_end_offset)?;
            return Ok(false);
        }
        if target > self.log_start_offset() {
            let data = self.local.read(target, 1, true)?;
            if let Some(Ok(entry)) = Batches::new(&data.records, 0).next() {
                let base = match &entry {
                    LogEntry::V2(b) => b.base_offset(),
                    LogEntry::Legacy(l) => l.offset(),
                };
                if base < target {
                    return Err(PartitionLogError::NotBatchAligned {
                        target,
                        batch_base_offset: base,
                    });
                }
            }
        }
        self.local.truncate_to(target)?;
        self.epochs.truncate_from_end(target)?;
        self.store_high_watermark(self.high_watermark.min(target));
        let rebuilt = self.rebuild_producer_state(target);
        self.publish();
        rebuilt?;
        Ok(true)
    }

    /// Kafka `truncateFullyAndStartAt(newOffset)`: deletes every segment and snapshot, clears
    /// the leader-epoch cache and producer state, and starts empty at `new_offset`.
    pub fn truncate_fully_and_start_at(
        &mut self,
        new_offset: i64,
    ) -> Result<(), PartitionLogError> {
        if new_offset < 0 {
            return Err(PartitionLogError::NegativeOffset(new_offset));
        }
        self.local.truncate_fully_and_start_at(new_offset)?;
        self.epochs.clear()?;
        self.psm.truncate_fully_and_start_at(new_offset);
        delete_snapshots_above_with(&self.io, &self.dir, -1)?;
        // An empty log has only one possible high watermark.
        self.hw_state.known = true;
        self.store_high_watermark(new_offset);
        Ok(())
    }

    /// Kafka `rebuildProducerState(lastOffset)` (§7.8, without the clean-shutdown shortcut):
    /// reload the newest valid snapshot at or below `last_offset` (unless the state already ends
    /// there), replay the log from its offset to `last_offset` with `Replication` rules, then
    /// snapshot.
    pub(crate) fn rebuild_producer_state(
        &mut self,
        last_offset: i64,
    ) -> Result<SnapshotLoad, PartitionLogError> {
        let now = self.clock.now_ms();
        let log_start = self.log_start_offset();
        let load =
            self.psm
                .truncate_and_reload_with(&self.io, &self.dir, log_start, last_offset, now)?;
        let from = self.psm.map_end_offset().max(log_start);
        if last_offset > from {
            replay(&self.local, &mut self.psm, from, last_offset)?;
        }
        self.psm.update_map_end_offset(last_offset);
        self.psm.take_snapshot_with(&self.io, &self.dir)?;
        Ok(load)
    }

    /// Finds the first `MIRROR_PID_RESET` batch at offset `>= from`.
    pub fn find_barrier_from(&self, from: i64) -> Result<Option<i64>, PartitionLogError> {
        let end = self.log_end_offset();
        let mut offset = from.max(self.log_start_offset());
        while offset < end {
            let data = self.local.read(offset, READ_CHUNK, true)?;
            let mut next = None;
            for entry in Batches::new(&data.records, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                if batch.last_offset() >= from && is_mirror_pid_reset_batch(&batch)? {
                    return Ok(Some(batch.base_offset()));
                }
                next = Some(batch.next_offset());
            }
            match next {
                Some(n) if n > offset => offset = n,
                _ => break,
            }
        }
        Ok(None)
    }

    /// The largest partition leader epoch of any batch in the log (`None`: no batch carries
    /// one). Reads every batch header from the log start: the leader-epoch cache may have lost
    /// entries (a lost or stale `leader-epoch-checkpoint`; segments loaded without recovery are
    /// not scanned for epochs), so it cannot answer this alone.
    pub fn max_batch_epoch(&self) -> Result<Option<i32>, PartitionLogError> {
        let end = self.log_end_offset();
        let mut offset = self.log_start_offset();
        let mut max: Option<i32> = None;
        while offset < end {
            let data = self.local.read(offset, READ_CHUNK, true)?;
            let mut next = None;
            for entry in Batches::new(&data.records, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                let epoch = batch.partition_leader_epoch();
                if epoch >= 0 && max.is_none_or(|m| epoch > m) {
                    max = Some(epoch);
                }
                next = Some(batch.next_offset());
            }
            match next {
                Some(n) if n > offset => offset = n,
                _ => break,
            }
        }
        Ok(max)
    }

    /// Kafka `UnifiedLog.roll`: flushes the log up to its end, seals the active segment and
    /// starts a new one at the log end offset, with a producer snapshot named after its base
    /// (as at a roll caused by an append). Returns the new base offset.
    pub fn roll(&mut self) -> Result<i64, PartitionLogError> {
        let base = self.local.roll(None)?;
        self.psm.update_map_end_offset(base);
        self.psm.take_snapshot_with(&self.io, &self.dir)?;
        Ok(base)
    }

    /// Kafka `takeProducerSnapshot`: writes a producer snapshot at the log end offset now
    /// (atomically; Kafka otherwise snapshots only at rolls and at close). The log itself is not
    /// flushed: after a crash that loses the unflushed tail, the snapshot is "from the future"
    /// and loading discards it. Returns its path, or `None` if one exists at that offset.
    pub fn take_producer_snapshot(&mut self) -> Result<Option<PathBuf>, PartitionLogError> {
        let end = self.log_end_offset();
        self.psm.update_map_end_offset(end);
        Ok(self.psm.take_snapshot_with(&self.io, &self.dir)?)
    }

    /// Kafka `UnifiedLog.removeExpiredProducers`, what its `PeriodicProducerExpirationCheck`
    /// task runs every `producer.id.expiration.check.interval.ms`: drops the producers with no
    /// open transaction whose last write is at least `producer.id.expiration.ms` older than the
    /// log's clock now, and returns them (by producer id). A later batch of such a producer is
    /// not checked against its old sequence, as in Kafka. O(producers).
    pub fn remove_expired_producers(&mut self) -> Vec<ExpiredProducer> {
        let now = self.clock.now_ms();
        self.psm.remove_expired_producer_entries(now)
    }

    /// Kafka `ProducerStateManager.latestSnapshotOffset`: the offset of the newest producer
    /// snapshot file in the partition directory, if any.
    pub fn latest_snapshot_offset(&self) -> Result<Option<i64>, PartitionLogError> {
        Ok(latest_snapshot_offset_with(&self.io, &self.dir)?)
    }

    /// Kafka `ProducerStateManager.oldestSnapshotOffset`: the offset of the oldest producer
    /// snapshot file in the partition directory, if any.
    pub fn oldest_snapshot_offset(&self) -> Result<Option<i64>, PartitionLogError> {
        Ok(oldest_snapshot_offset_with(&self.io, &self.dir)?)
    }

    /// Kafka `ProducerStateManager.deleteSnapshotsBefore`: deletes the producer snapshot files
    /// with offset `< offset` and returns them (the deletions are reported, not silent).
    ///
    /// A snapshot is derived state: one at or above the log start can be taken again from the
    /// log, one below it describes producers of segments already deleted. Kafka deletes those
    /// as the log start moves (retention does it here too, keeping the snapshot at the oldest
    /// segment's base); this is the same deletion on demand, as a live broker does it, not a
    /// recovery step, so nothing is quarantined. The in-memory producer state is unchanged.
    pub fn delete_snapshots_before(
        &mut self,
        offset: i64,
    ) -> Result<Vec<SnapshotFile>, PartitionLogError> {
        Ok(delete_snapshots_before_with(&self.io, &self.dir, offset)?)
    }

    /// Kafka `ProducerStateManager.removeStraySnapshots` with this log's segment bases: deletes
    /// every producer snapshot file not at a segment's base offset, except the newest of them
    /// when it is at or above the active segment's base (the snapshot a clean close writes at
    /// the log end), and returns the deleted files
    /// (`stray_snapshots` says which). As
    /// [`Self::delete_snapshots_before`], Kafka's own housekeeping of derived state: reported,
    /// not quarantined. The in-memory producer state is unchanged.
    pub fn remove_stray_snapshots(&mut self) -> Result<Vec<SnapshotFile>, PartitionLogError> {
        let bases = self.local.segment_bases();
        Ok(remove_stray_snapshots_with(&self.io, &self.dir, &bases)?)
    }

    /// Kafka `deleteRecords` (`maybeIncrementLogStartOffset`, reason `ClientRecordDeletion`):
    /// raises the log start offset to `new_start`, which must not pass the high watermark
    /// ([`PartitionLogError::OffsetOutOfRange`] otherwise; a lower value is a no-op) and trims
    /// the leader-epoch cache and producer state. The segments now wholly below the log start go
    /// at the next [`Self::delete_old_segments`]. Returns whether the log start moved.
    pub fn delete_records_before(&mut self, new_start: i64) -> Result<bool, PartitionLogError> {
        if new_start > self.high_watermark {
            return Err(PartitionLogError::OffsetOutOfRange {
                offset: new_start,
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.high_watermark,
            });
        }
        if !self.local.increment_log_start_offset(new_start)? {
            return Ok(false);
        }
        self.on_log_start_offset_incremented()?;
        Ok(true)
    }

    /// Kafka `deleteOldSegments`: deletes, oldest first, the segments that breach `retention.ms`
    /// (by their newest timestamp), `retention.bytes`, or lie wholly below the log start offset,
    /// never past the high watermark (see [`LocalLog::delete_old_segments`]; each segment's
    /// files are renamed to `*.deleted`, the directory synced, then removed). The log start
    /// offset moves up to the first remaining segment; the snapshots of the deleted segments
    /// are deleted, the one at the new log start is kept (when every segment goes, a new empty
    /// one is rolled first and gets its snapshot, as at any roll). Returns the number of
    /// segments deleted.
    pub fn delete_old_segments(&mut self) -> Result<usize, PartitionLogError> {
        let (psm, io, dir) = (&mut self.psm, &self.io, &self.dir);
        // If every segment goes, the new empty one gets its snapshot before any is deleted, as
        // at any roll: the producers of the deleted segments survive a crash.
        let deleted = self
            .local
            .delete_old_segments_with(self.high_watermark, &mut |base| {
                psm.update_map_end_offset(base);
                psm.take_snapshot_with(io, dir)?;
                Ok::<(), PartitionLogError>(())
            })?;
        if deleted > 0 {
            self.on_log_start_offset_incremented()?;
        }
        Ok(deleted)
    }

    fn on_log_start_offset_incremented(&mut self) -> Result<(), PartitionLogError> {
        let start = self.log_start_offset();
        let oldest_base = self.local.first_segment_base().unwrap_or(start);
        self.epochs.truncate_from_start(start)?;
        self.psm
            .on_log_start_offset_incremented_with(&self.io, &self.dir, start, oldest_base)?;
        self.store_high_watermark(self.high_watermark.max(start));
        Ok(())
    }

    /// Flushes the segments up to the log end offset (the recovery point moves there).
    pub fn flush(&mut self) -> Result<(), PartitionLogError> {
        let end = self.log_end_offset();
        self.local.flush(end)?;
        Ok(())
    }

    /// Kafka `UnifiedLog.close()` on a clean shutdown: flush everything, take a producer
    /// snapshot at the log end offset, write the leader-epoch checkpoint, close the segments.
    pub fn close(self) -> Result<ClosedLog, PartitionLogError> {
        self.close_with(true)
    }

    /// [`Self::close`]; without `sync` the segments are not flushed: for a log directory that
    /// closes many partitions and then makes its whole file system durable with one
    /// [`segment_store::Storage::sync_filesystem`] before it writes its checkpoints. (The
    /// producer snapshot and the leader-epoch checkpoint are still written atomically.)
    pub(crate) fn close_with(mut self, sync: bool) -> Result<ClosedLog, PartitionLogError> {
        if sync {
            self.flush()?;
        }
        let end = self.log_end_offset();
        self.psm.update_map_end_offset(end);
        self.psm.take_snapshot_with(&self.io, &self.dir)?;
        self.epochs.flush()?;
        let closed = ClosedLog {
            dir: self.dir.clone(),
            log_start_offset: self.log_start_offset(),
            log_end_offset: end,
            high_watermark: self.checkpointable_high_watermark(),
        };
        // Readers on other threads may hold the segments: closed in place, their reads then fail.
        self.local.close_shared(sync)?;
        Ok(closed)
    }
}

/// Transaction-index entries for `aborted`, in order. Barrier aborts share the barrier's offset
/// as last offset (the index accepts equal last offsets for them; see `docs/barrier.md`).
pub(crate) fn txn_index_entries(aborted: &[AbortedTxnRecord]) -> Vec<AbortedTxn> {
    aborted
        .iter()
        .map(|a| {
            AbortedTxn::new(
                a.producer_id,
                a.first_offset,
                a.last_offset,
                a.last_stable_offset,
            )
        })
        .collect()
}

/// Replays the batches of `local` in `[from, to)` into `psm` with `Replication` rules (Kafka
/// `loadProducersFromRecords`; the transaction index is not rewritten).
pub(crate) fn replay(
    local: &LocalLog,
    psm: &mut ProducerStateManager,
    from: i64,
    to: i64,
) -> Result<(), PartitionLogError> {
    let mut offset = from;
    // Batch by batch, in place (the state equals applying each fetch in one call, as Kafka's
    // `loadProducersFromRecords` does: the property tests check both).
    let mut applied = AppliedBatches::default();
    while offset < to && offset < local.log_end_offset() {
        // Zero-copy from the sealed segments' maps (only the headers are read). The read walks
        // the window's headers once to cut it at a batch boundary; the window is small enough
        // (`READ_CHUNK`) to keep them in the CPU's cache for this walk.
        let next = local.read_with(offset, READ_CHUNK, true, |data| {
            let mut next = None;
            for entry in Batches::new(&data.records, 0) {
                let LogEntry::V2(batch) = entry? else {
                    continue;
                };
                if batch.last_offset() >= to {
                    next = Some(to);
                    break;
                }
                next = Some(batch.next_offset());
                if batch.base_offset() >= from {
                    psm.apply_replicated_batch(&BatchSummary::from_batch(&batch)?, &mut applied)?;
                    applied.clear();
                }
            }
            Ok::<_, PartitionLogError>(next)
        })??;
        match next {
            Some(n) if n > offset => offset = n,
            _ => break,
        }
    }
    Ok(())
}
