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
    /// `isMirrorPidResetBatch`, by the first control record's type alone (see `barrier.rs`).
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
