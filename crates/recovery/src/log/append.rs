//! Appends: leader, mirror and follower appends, each batch validated before anything is
//! written.

use record_format::internals::{
    set_base_offset_and_leader_epoch, set_max_timestamp_log_append_time,
};
use record_format::{Batches, IterEnd, LogEntry, RecordBatch};

use super::error::PartitionLogError;
use super::maintenance::txn_index_entries;
use super::PartitionLog;
use crate::mirror::{fenced_mirror_epoch, EpochEndOffsets, MirrorPartitionState, MirroredLog};
use crate::producer_state::BarrierOutcome;
use crate::producer_state::{AbortedTxnRecord, AppendOrigin, ProducerStateWarning};
use crate::summary::BatchSummary;

/// What an append did (Kafka `LogAppendInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogAppendInfo {
    /// Offset of the first record (for a duplicate: of the original batch).
    pub first_offset: i64,
    /// Offset of the last record (for a duplicate: of the original batch).
    pub last_offset: i64,
    /// Largest batch max timestamp (−1 for a duplicate).
    pub max_timestamp: i64,
    /// Number of batches written (0 for a duplicate).
    pub num_batches: usize,
    /// Bytes written (0 for a duplicate).
    pub bytes: usize,
    /// The append duplicated a cached batch of its producer: nothing was written, and the
    /// offsets are the original batch's.
    pub duplicate: bool,
    /// The active segment rolled first; the new base offset (a producer snapshot was written
    /// at it).
    pub rolled_to: Option<i64>,
    /// Producer-state warnings (replication origin).
    pub warnings: Vec<ProducerStateWarning>,
    /// Barriers met, in log order.
    pub barriers: Vec<BarrierOutcome>,
    /// Aborted transactions written into the transaction index.
    pub aborted_txns: Vec<AbortedTxnRecord>,
}

/// One validated batch of an append: where it is in the input and its leader epoch.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
    position: u64,
}

/// Splits `records` into whole, CRC-valid v2 batches. Control batches are refused unless
/// `allow_control`.
fn validate_batches(records: &[u8], allow_control: bool) -> Result<Vec<Span>, PartitionLogError> {
    let mut spans = Vec::new();
    let mut it = Batches::new(records, 0).validate_crc(true);
    for entry in &mut it {
        let entry = entry?;
        let position = entry.position();
        let batch = match entry {
            LogEntry::V2(b) => b,
            LogEntry::Legacy(l) => {
                return Err(PartitionLogError::UnsupportedMagic {
                    position,
                    magic: l.magic(),
                })
            }
        };
        if batch.is_control() && !allow_control {
            return Err(PartitionLogError::ControlBatchFromClient { position });
        }
        spans.push(Span {
            start: usize::try_from(position).unwrap_or(usize::MAX),
            len: batch.size_in_bytes(),
            position,
        });
    }
    if let Some(e) = it.incomplete_error() {
        return Err(PartitionLogError::InvalidRecords(e));
    }
    if let Some(IterEnd::Error(e)) = it.stopped_at() {
        return Err(PartitionLogError::InvalidRecords(e.clone()));
    }
    if spans.is_empty() {
        return Err(PartitionLogError::EmptyRecords);
    }
    Ok(spans)
}

fn batch_at(bytes: &[u8], span: Span) -> Result<RecordBatch<'_>, PartitionLogError> {
    let slice = bytes
        .get(span.start..span.start.saturating_add(span.len))
        .unwrap_or_default();
    Ok(RecordBatch::new(slice, span.position)?)
}

impl PartitionLog {
    /// Kafka `appendAsLeader`. See the module docs. `origin` is `Client` for produce requests
    /// (control batches refused, duplicates detected) or `Coordinator` (markers, barriers).
    /// Refused with [`PartitionLogError::ReadOnly`] while the partition is `Mirroring` or
    /// `Stopping` (KIP-1279): nothing local may enter a mirrored log; and with
    /// [`PartitionLogError::StaleLeaderEpoch`] in an epoch below the current one
    /// ([`leader_epoch`](Self::leader_epoch), after a mirror stop the epoch the stop chose).
    pub fn append_as_leader(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        if !self.mirror.accepts_client_appends() {
            return Err(PartitionLogError::ReadOnly {
                state: self.mirror.kind(),
            });
        }
        if let Some(current) = self.epochs.latest_epoch() {
            if leader_epoch < current {
                return Err(PartitionLogError::StaleLeaderEpoch {
                    requested: leader_epoch,
                    current,
                });
            }
        }
        self.append_as_leader_unchecked(records, leader_epoch, origin)
    }

    /// The leader append itself, past the mirror-state check (the barrier of a stop).
    pub(super) fn append_as_leader_unchecked(
        &mut self,
        records: &[u8],
        leader_epoch: i32,
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        self.prefetch_producer(records);
        let spans = validate_batches(records, origin != AppendOrigin::Client)?;
        let mut bytes = records.to_vec();
        let mut next = self.log_end_offset();
        // The clock is read only for LogAppendTime (the segment's roll check reads its own).
        let now = self.config.log_append_time.then(|| self.clock.now_ms());
        for span in &spans {
            let end = span.start.saturating_add(span.len);
            let Some(buf) = bytes.get_mut(span.start..end) else {
                return Err(PartitionLogError::EmptyRecords);
            };
            set_base_offset_and_leader_epoch(buf, next, leader_epoch)
                .map_err(|e| e.offset_by(span.position))?;
            if let Some(now) = now {
                set_max_timestamp_log_append_time(buf, now)
                    .map_err(|e| e.offset_by(span.position))?;
            }
            next = RecordBatch::new(buf, span.position)?.next_offset();
        }
        self.append_validated(bytes, &spans, origin)
    }

    /// The KIP-1279 mirror fetcher's append: as [`append_as_follower`](Self::append_as_follower)
    /// (the source's batches keep their offsets, leader epochs and bytes), but only while the
    /// partition is `Mirroring` ([`PartitionLogError::NotMirroring`] otherwise: once `Stopping`
    /// began, nothing may land above the stop point).
    ///
    /// Before the batches are appended, the destination's own leader epoch
    /// ([`leader_epoch`](Self::leader_epoch)) is bumped and persisted if their source epoch
    /// comes within [`MIRROR_EPOCH_MARGIN`](crate::mirror::MIRROR_EPOCH_MARGIN) of it
    /// ([`fenced_mirror_epoch`]): the destination's epoch stays above every source epoch it
    /// has mirrored, even across a crash right after the append.
    pub fn append_as_mirror(&mut self, records: &[u8]) -> Result<LogAppendInfo, PartitionLogError> {
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
        if *full_truncation_pending {
            return Err(PartitionLogError::MirrorTruncationPending);
        }
        // The batches' largest epoch, from their headers; a malformed input is refused below by
        // the append's own validation.
        let source_epoch = Batches::new(records, 0)
            .filter_map(|e| match e {
                Ok(LogEntry::V2(b)) => Some(b.partition_leader_epoch()),
                _ => None,
            })
            .max();
        if let Some(source_epoch) = source_epoch {
            let current = self.leader_epoch();
            let next = fenced_mirror_epoch(current, source_epoch)
                .ok_or(PartitionLogError::MirrorEpochExhausted)?;
            if next != current || !self.mirror_epoch_persisted() {
                let state = MirrorPartitionState::Mirroring {
                    source_cluster_id: source_cluster_id.clone(),
                    leader_epoch: next,
                    full_truncation_pending: false,
                };
                self.persist_mirror_state(state)?;
            }
        }
        self.append_as_follower(records)
    }

    /// Truncates a mirroring partition to where it diverges from `source` (the mirror fetcher's
    /// `OffsetsForLeaderEpoch` exchange, [`crate::mirror::alignment_point`]) and returns the new
    /// log end if anything was removed. Used when the source's log may have changed under the
    /// fetcher (the source failed over and truncated, as in a chain).
    pub fn align_to_source(
        &mut self,
        source: &dyn EpochEndOffsets,
    ) -> Result<Option<i64>, PartitionLogError> {
        match self.mirror {
            MirrorPartitionState::Mirroring {
                full_truncation_pending: false,
                ..
            } => {}
            MirrorPartitionState::Mirroring { .. } => {
                return Err(PartitionLogError::MirrorTruncationPending)
            }
            _ => {
                return Err(PartitionLogError::NotMirroring {
                    state: self.mirror.kind(),
                })
            }
        }
        let point = crate::mirror::alignment_point(self, source);
        if point < self.log_start_offset() {
            // Retention passed the point where the logs diverge: start over there.
            self.truncate_fully_and_start_at(point)?;
            self.flush()?;
            return Ok(Some(point));
        }
        if point < self.log_end_offset() && self.truncate_to(point)? {
            self.flush()?;
            return Ok(Some(point));
        }
        Ok(None)
    }

    /// Kafka `appendAsFollower` (intra-cluster replication): the batches keep their offsets,
    /// leader epochs and bytes; their first offset must be at or above the log end offset and
    /// offsets must increase. Producer state applies `Replication` rules. Allowed in every
    /// mirror state but `Stopping` ([`PartitionLogError::ReadOnly`]): from the persisted stop
    /// point until the barrier is written, nothing but the barrier may land in the log.
    pub fn append_as_follower(
        &mut self,
        records: &[u8],
    ) -> Result<LogAppendInfo, PartitionLogError> {
        if matches!(self.mirror, MirrorPartitionState::Stopping { .. }) {
            return Err(PartitionLogError::ReadOnly {
                state: self.mirror.kind(),
            });
        }
        let spans = validate_batches(records, true)?;
        if let Some(first) = spans.first() {
            let first_offset = batch_at(records, *first)?.base_offset();
            let log_end_offset = self.log_end_offset();
            if first_offset < log_end_offset {
                return Err(PartitionLogError::OffsetBelowLogEnd {
                    first_offset,
                    log_end_offset,
                });
            }
        }
        self.append_validated(records.to_vec(), &spans, AppendOrigin::Replication)
    }

    /// Asks for the producer entry of the first batch of `records` to be loaded into the CPU's
    /// cache while the batches are validated (read from the unchecked header: a hint only; the
    /// check reads the validated batches).
    fn prefetch_producer(&self, records: &[u8]) {
        if let Some(Ok(LogEntry::V2(batch))) = Batches::new(records, 0).next() {
            if batch.has_producer_id() {
                self.psm.prefetch(batch.producer_id());
            }
        }
    }

    fn append_validated(
        &mut self,
        bytes: Vec<u8>,
        spans: &[Span],
        origin: AppendOrigin,
    ) -> Result<LogAppendInfo, PartitionLogError> {
        let mut summaries = Vec::with_capacity(spans.len());
        let mut epochs = Vec::with_capacity(spans.len());
        for span in spans {
            let batch = batch_at(&bytes, *span)?;
            summaries.push(BatchSummary::from_batch(&batch)?);
            epochs.push((batch.partition_leader_epoch(), batch.base_offset()));
        }
        // Producer state first, checked against copies of the entries of the batches'
        // producers only: nothing is written if it refuses.
        let update = self.psm.analyze_and_validate(summaries.iter(), origin)?;
        if let Some(dup) = update.duplicates().first() {
            return Ok(LogAppendInfo {
                first_offset: dup.original.first_offset(),
                last_offset: dup.original.last_offset,
                max_timestamp: -1,
                num_batches: 0,
                bytes: 0,
                duplicate: true,
                rolled_to: None,
                warnings: Vec::new(),
                barriers: Vec::new(),
                aborted_txns: Vec::new(),
            });
        }
        let outcome = self.local.append(&bytes)?;
        let mut snapshot_result = Ok(());
        if let Some((base, _)) = outcome.rolled {
            // Kafka's roll: snapshot of the state before this append, named after the new base.
            let map_end = self.psm.map_end_offset();
            self.psm.update_map_end_offset(base);
            snapshot_result = self.psm.take_snapshot_with(&self.io, &self.dir).map(|_| ());
            self.psm.update_map_end_offset(map_end);
        }
        let applied = self.psm.apply_update(update);
        let txns = txn_index_entries(&applied.aborted_txns);
        self.local.append_aborted_txns(&txns)?;
        for (epoch, base) in epochs {
            self.maybe_assign_epoch(epoch, base)?;
        }
        // Readers see the new bounds (a transaction's end moves the last stable offset; with
        // the high watermark following the log end, the owner moves it and publishes again).
        self.publish();
        snapshot_result?;
        Ok(LogAppendInfo {
            first_offset: outcome.first_offset,
            last_offset: outcome.last_offset,
            max_timestamp: outcome.max_timestamp,
            num_batches: spans.len(),
            bytes: bytes.len(),
            duplicate: false,
            rolled_to: outcome.rolled.map(|(b, _)| b),
            warnings: applied.warnings,
            barriers: applied.barriers,
            aborted_txns: applied.aborted_txns,
        })
    }

    fn maybe_assign_epoch(&mut self, epoch: i32, base: i64) -> Result<(), PartitionLogError> {
        if epoch >= 0 && self.epochs.latest_epoch().is_none_or(|l| epoch > l) {
            self.epochs.assign(epoch, base)?;
        }
        Ok(())
    }
}
