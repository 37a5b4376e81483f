//! The producer state manager's view of one record batch.
//!
//! Kafka's `ProducerStateManager` reads only a handful of a batch's header fields plus, for control
//! batches, the type (and for ABORT/COMMIT the coordinator epoch) of the first control record. This
//! module holds exactly those fields so that the PSM does not depend on the record-format crate;
//! the log layer fills a [`BatchSummary`] from a parsed `RecordBatch`.

use crate::error::{InvalidBatchReason, ProducerStateError};

/// `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `RecordBatch.NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;

/// The fields of a v2 record batch that producer state needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSummary {
    /// Offset of the first record (`baseOffset`).
    pub base_offset: i64,
    /// `baseOffset + lastOffsetDelta`.
    pub last_offset: i64,
    /// `producerId`; −1 when the batch has none.
    pub producer_id: i64,
    /// `producerEpoch`.
    pub producer_epoch: i16,
    /// `baseSequence`.
    pub base_sequence: i32,
    /// `lastSequence` as Kafka derives it (`incrementSequence(baseSequence, lastOffsetDelta)`).
    pub last_sequence: i32,
    /// `maxTimestamp`; for a control batch this is also its one record's timestamp.
    pub max_timestamp: i64,
    /// Attribute bit 4.
    pub is_transactional: bool,
    /// Attribute bit 5.
    pub is_control: bool,
    /// `recordsCount`.
    pub records_count: i32,
    /// For a control batch with at least one record: its first control record. `None` for data
    /// batches and for empty control batches (which compaction can leave behind).
    pub control: Option<ControlInfo>,
    /// Whole batch size in bytes, including the 12-byte log overhead.
    pub size_in_bytes: u32,
}

/// The first control record of a control batch, as far as producer state cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlInfo {
    /// ABORT (type 0) or COMMIT (type 1) with the `EndTxnMarker` value's coordinator epoch.
    EndTxn {
        /// `true` for COMMIT, `false` for ABORT.
        commit: bool,
        /// `CoordinatorEpoch` from the marker value.
        coordinator_epoch: i32,
    },
    /// KIP-1279 `MIRROR_PID_RESET` (type 7): the producer-state barrier.
    MirrorPidReset {
        /// `SourceClusterId` from the record value (informational only).
        source_cluster_id: String,
    },
    /// Any other control type (KRaft types, unknown types).
    Other(i16),
}

impl BatchSummary {
    /// Kafka's `hasProducerId()`: `producerId > NO_PRODUCER_ID`.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id > NO_PRODUCER_ID
    }

    /// Whether this is a KIP-1279 `MIRROR_PID_RESET` barrier batch. Detected, like the forks'
    /// `isMirrorPidResetBatch`, by the first control record's type alone (see `producer_state/barrier.rs`).
    pub fn is_mirror_pid_reset(&self) -> bool {
        self.is_control && matches!(self.control, Some(ControlInfo::MirrorPidReset { .. }))
    }

    /// Checks the offsets a parsed v2 batch always satisfies (`0 <= baseOffset <= lastOffset`,
    /// `lastOffsetDelta` fits an int32) and returns `lastOffsetDelta`.
    pub fn offset_delta(&self) -> Result<i32, ProducerStateError> {
        let invalid = |reason| ProducerStateError::InvalidBatch {
            base_offset: self.base_offset,
            last_offset: self.last_offset,
            reason,
        };
        if self.base_offset < 0 {
            return Err(invalid(InvalidBatchReason::NegativeBaseOffset));
        }
        let delta = self
            .last_offset
            .checked_sub(self.base_offset)
            .ok_or(invalid(InvalidBatchReason::LastOffsetBeforeBase))?;
        if delta < 0 {
            return Err(invalid(InvalidBatchReason::LastOffsetBeforeBase));
        }
        i32::try_from(delta).map_err(|_| invalid(InvalidBatchReason::OffsetDeltaTooLarge))
    }
}

impl BatchSummary {
    /// The summary of a parsed v2 batch, as Kafka's `ProducerAppendInfo` reads it: header fields,
    /// and for a control batch with records its first control record (key type; the marker's
    /// coordinator epoch; the barrier's source cluster id).
    ///
    /// A control batch whose first key says `MIRROR_PID_RESET` is a barrier even when its value
    /// does not decode (the fork detects the barrier by key type alone); the source cluster id is
    /// then empty. An ABORT/COMMIT marker whose value does not decode is an error, as in Kafka.
    pub fn from_batch(
        batch: &record_format::RecordBatch<'_>,
    ) -> Result<Self, record_format::FormatError> {
        let control = if batch.is_control() && batch.records_count() > 0 {
            control_info(batch)?
        } else {
            None
        };
        Ok(summary_of!(batch, control))
    }

    /// [`Self::from_batch`] of a batch the scan handed over: the header fields from its copy,
    /// and a transaction marker as the scanning thread packed it, without reading the batch's
    /// bytes again.
    #[inline(always)]
    pub fn from_scanned(
        batch: &record_format::internals::ScannedBatch<'_>,
    ) -> Result<Self, record_format::FormatError> {
        let control = if let Some((record_type, marker)) = batch.end_txn_marker() {
            Some(ControlInfo::EndTxn {
                commit: record_type == record_format::ControlRecordType::Commit,
                coordinator_epoch: marker.coordinator_epoch,
            })
        } else if batch.is_control() && batch.records_count() > 0 {
            control_info(batch.batch())?
        } else {
            None
        };
        Ok(summary_of!(batch, control))
    }
}

/// A [`BatchSummary`] of the header fields of `$batch` (a `RecordBatch` or a `ScannedBatch`,
/// which name them alike) and `$control`.
macro_rules! summary_of {
    ($batch:expr, $control:expr) => {
        BatchSummary {
            base_offset: $batch.base_offset(),
            last_offset: $batch.last_offset(),
            producer_id: $batch.producer_id(),
            producer_epoch: $batch.producer_epoch(),
            base_sequence: $batch.base_sequence(),
            last_sequence: $batch.last_sequence(),
            max_timestamp: $batch.max_timestamp(),
            is_transactional: $batch.is_transactional(),
            is_control: $batch.is_control(),
            records_count: $batch.records_count(),
            control: $control,
            size_in_bytes: u32::try_from($batch.size_in_bytes()).unwrap_or(u32::MAX),
        }
    };
}
use summary_of;

/// The first control record of a control batch with records, parsed from its bytes (the rare
/// path of [`BatchSummary::from_scanned`], kept out of line so that the common one builds the
/// summary in place in its caller).
#[inline(never)]
fn control_info(
    batch: &record_format::RecordBatch<'_>,
) -> Result<Option<ControlInfo>, record_format::FormatError> {
    use record_format::{
        ControlRecordKey, ControlRecordType, DecodeLimits, EndTransactionMarker,
        MirrorPidResetRecord,
    };
    let records = batch.records(&DecodeLimits::default())?;
    let Some(record) = records.iter().next() else {
        return Ok(None);
    };
    let record = record?;
    let key = record.key().unwrap_or(&[]);
    let (_, record_type) = ControlRecordKey::parse(key, record.key_position())?;
    let value = record.value().unwrap_or(&[]);
    Ok(Some(match record_type {
        ControlRecordType::Abort | ControlRecordType::Commit => {
            let marker = EndTransactionMarker::parse(record_type, value, record.value_position())?;
            ControlInfo::EndTxn {
                commit: record_type == ControlRecordType::Commit,
                coordinator_epoch: marker.coordinator_epoch,
            }
        }
        ControlRecordType::MirrorPidReset => ControlInfo::MirrorPidReset {
            source_cluster_id: MirrorPidResetRecord::parse(value, record.value_position())
                .map(|r| r.source_cluster_id)
                .unwrap_or_default(),
        },
        other => ControlInfo::Other(other.id()),
    }))
}

#[cfg(test)]
mod from_batch_tests {
    use super::*;
    use record_format::internals::ScannedBatch;
    use record_format::{
        end_txn_marker_batch, mirror_pid_reset_batch, ControlRecordType, RecordBatch,
        RecordBatchBuilder,
    };

    #[test]
    fn barrier_batch_summarises_as_mirror_pid_reset() {
        let bytes = mirror_pid_reset_batch(42, 1_700_000_000_000, 5, "abc");
        let s = BatchSummary::from_batch(&RecordBatch::new(&bytes, 0).unwrap()).unwrap();
        assert!(s.is_mirror_pid_reset());
        assert_eq!(
            s.control,
            Some(ControlInfo::MirrorPidReset {
                source_cluster_id: "abc".into()
            })
        );
        assert_eq!((s.base_offset, s.last_offset, s.producer_id), (42, 42, -1));
        assert_eq!(s.size_in_bytes, 79);
    }

    /// A marker's coordinator epoch comes out the same whether the view carried the marker
    /// (version 0, epoch in 0..2^22) or the records had to be parsed (any other epoch).
    #[test]
    fn markers_summarise_alike_carried_by_the_view_or_parsed() {
        for epoch in [0, 5, (1 << 22) - 1, 1 << 22, i32::MAX, -1, i32::MIN] {
            for t in [ControlRecordType::Commit, ControlRecordType::Abort] {
                let bytes = end_txn_marker_batch(7, 1_000, 0, 55, 3, t, epoch);
                let batch = RecordBatch::new(&bytes, 0).unwrap();
                let scanned = ScannedBatch::new(batch);
                assert_eq!(
                    scanned.end_txn_marker().is_some(),
                    (0..1 << 22).contains(&epoch),
                    "{epoch}"
                );
                let s = BatchSummary::from_batch(&batch).unwrap();
                assert_eq!(BatchSummary::from_scanned(&scanned).unwrap(), s);
                assert_eq!(
                    s.control,
                    Some(ControlInfo::EndTxn {
                        commit: t == ControlRecordType::Commit,
                        coordinator_epoch: epoch
                    }),
                    "{t:?} {epoch}"
                );
            }
        }
    }

    #[test]
    fn marker_and_data_batches_summarise_their_fields() {
        let m = end_txn_marker_batch(7, 1_000, 0, 55, 3, ControlRecordType::Abort, 9);
        let s = BatchSummary::from_batch(&RecordBatch::new(&m, 0).unwrap()).unwrap();
        assert_eq!(
            s.control,
            Some(ControlInfo::EndTxn {
                commit: false,
                coordinator_epoch: 9
            })
        );
        assert_eq!((s.producer_id, s.producer_epoch), (55, 3));

        let mut b = RecordBatchBuilder::new(100)
            .producer(5, 1, i32::MAX - 1)
            .transactional(true);
        for i in 0..3 {
            b.append(2_000 + i, None, Some(b"v"), &[]).unwrap();
        }
        let bytes = b.build();
        let s = BatchSummary::from_batch(&RecordBatch::new(&bytes, 0).unwrap()).unwrap();
        assert_eq!((s.base_offset, s.last_offset), (100, 102));
        assert_eq!((s.base_sequence, s.last_sequence), (i32::MAX - 1, 0));
        assert!(s.is_transactional && !s.is_control && s.control.is_none());
        assert_eq!(s.max_timestamp, 2_002);
    }
}
