//! The write path: [`RecordBatchBuilder`] produces v2 batches byte-identical to Kafka's
//! `MemoryRecordsBuilder` (uncompressed; compressed batches are as identical as
//! [`compress`] makes them).
//!
//! Kafka's rules followed here: `offsetDelta = offset − baseOffset`; `timestampDelta = timestamp −
//! baseTimestamp` where `baseTimestamp` is the first record's timestamp (or the delete horizon when
//! one is set); `maxTimestamp` is the largest record timestamp (initially −1), or the log append
//! time for LogAppendTime batches; `lastOffsetDelta = lastOffset − baseOffset`. A batch with no
//! record is written as Kafka's `writeEmptyHeader` does: `baseTimestamp = −1`, 61 bytes.

use crate::batch::{compute_attributes, TimestampType};
use crate::compression::{compress, CompressionType};
use crate::control::{
    ControlRecordKey, ControlRecordType, EndTransactionMarker, MirrorPidResetRecord,
};
use crate::cursor::{size_of_varint, write_varint, write_varlong};
use crate::error::{FormatError, FormatErrorKind, Result};
use crate::record::Header;
use crate::wire::{
    ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};

/// Builds one v2 record batch.
///
/// Errors from `append*` are `InvalidField` with position 0 (there is no input position on the
/// write path); they mirror the `IllegalArgumentException`s of Kafka's builder.
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    compression: CompressionType,
    timestamp_type: TimestampType,
    log_append_time: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    delete_horizon_ms: Option<i64>,
    records: Vec<u8>,
    count: i32,
    last_offset: Option<i64>,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
}

fn invalid(what: &'static str) -> FormatError {
    FormatError::new(FormatErrorKind::InvalidField(what), 0)
}

impl RecordBatchBuilder {
    /// A builder for a batch starting at `base_offset`: uncompressed, CreateTime, no producer
    /// (id/epoch/sequence −1), partition leader epoch −1, not transactional, not control.
    pub fn new(base_offset: i64) -> Self {
        RecordBatchBuilder {
            base_offset,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            compression: CompressionType::None,
            timestamp_type: TimestampType::CreateTime,
            log_append_time: NO_TIMESTAMP,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            delete_horizon_ms: None,
            records: Vec::new(),
            count: 0,
            last_offset: None,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
        }
    }

    /// Sets `partitionLeaderEpoch`.
    #[must_use]
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets the codec.
    #[must_use]
    pub fn compression(mut self, codec: CompressionType) -> Self {
        self.compression = codec;
        self
    }

    /// Makes the batch CreateTime (the default).
    #[must_use]
    pub fn create_time(mut self) -> Self {
        self.timestamp_type = TimestampType::CreateTime;
        self
    }

    /// Makes the batch LogAppendTime with `maxTimestamp = log_append_time`.
    #[must_use]
    pub fn log_append_time(mut self, log_append_time: i64) -> Self {
        self.timestamp_type = TimestampType::LogAppendTime;
        self.log_append_time = log_append_time;
        self
    }

    /// Sets producer id, epoch and base sequence.
    #[must_use]
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the transactional flag.
    #[must_use]
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    /// Sets the control flag (then only control records may be appended).
    #[must_use]
    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    /// Sets the delete horizon (KIP-534): attribute bit 6, stored as `baseTimestamp`.
    #[must_use]
    pub fn delete_horizon_ms(mut self, delete_horizon_ms: Option<i64>) -> Self {
        self.delete_horizon_ms = delete_horizon_ms;
        self
    }

    /// Records appended so far.
    pub fn count(&self) -> i32 {
        self.count
    }

    /// The offset the next [`append`](Self::append) gets (`lastOffset + 1`, or `baseOffset`).
    pub fn next_offset(&self) -> i64 {
        self.last_offset
            .map_or(self.base_offset, |o| o.wrapping_add(1))
    }

    /// Appends a data record at the next sequential offset; returns that offset.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<i64> {
        let offset = self.next_offset();
        self.append_with_offset(offset, timestamp, key, value, headers)?;
        Ok(offset)
    }

    /// Appends a data record at `offset` (must exceed the previous offset and be within
    /// `i32::MAX` of the base offset).
    pub fn append_with_offset(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<()> {
        if self.control {
            return Err(invalid("data record appended to a control batch"));
        }
        self.append_inner(offset, timestamp, key, value, headers)
    }

    /// Appends a control record (key = version-0 control key of `record_type`) at the next
    /// sequential offset; the builder must be a control batch.
    pub fn append_control_record(
        &mut self,
        timestamp: i64,
        record_type: ControlRecordType,
        value: Option<&[u8]>,
    ) -> Result<i64> {
        let offset = self.next_offset();
        self.append_control_record_with_offset(offset, timestamp, record_type, value)?;
        Ok(offset)
    }

    /// Appends a control record at `offset`.
    pub fn append_control_record_with_offset(
        &mut self,
        offset: i64,
        timestamp: i64,
        record_type: ControlRecordType,
        value: Option<&[u8]>,
    ) -> Result<()> {
        if !self.control {
            return Err(invalid("control record appended to a non-control batch"));
        }
        let key = ControlRecordKey::new(record_type).to_bytes();
        self.append_inner(offset, timestamp, Some(&key), value, &[])
    }

    /// Kafka's `MemoryRecordsBuilder.append(Record)`: appends a record as it was read (a data
    /// record to a data batch, a control record to a control batch), at `offset`. The cleaner
    /// rewrites the records it keeps this way.
    pub fn append_record_with_offset(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<()> {
        self.append_inner(offset, timestamp, key, value, headers)
    }

    /// Kafka's `overrideLastOffset`: the batch's last offset delta is written as `last_offset -
    /// base_offset` whatever was appended (a cleaned batch keeps its original last offset, so
    /// its producer's last sequence stays). Must not be below the last appended offset.
    pub fn override_last_offset(&mut self, last_offset: i64) -> Result<()> {
        if self.last_offset.is_some_and(|l| last_offset < l) || last_offset < self.base_offset {
            return Err(invalid("last offset below an appended offset"));
        }
        self.last_offset = Some(last_offset);
        Ok(())
    }

    fn append_inner(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<()> {
        if let Some(last) = self.last_offset {
            if offset <= last {
                return Err(invalid("offset not greater than the previous offset"));
            }
        }
        let offset_delta = offset
            .checked_sub(self.base_offset)
            .and_then(|d| i32::try_from(d).ok())
            .filter(|d| *d >= 0)
            .ok_or_else(|| invalid("offset delta outside 0..=i32::MAX"))?;
        if timestamp < 0 && timestamp != NO_TIMESTAMP {
            return Err(invalid("negative timestamp"));
        }
        let base_timestamp = match (self.delete_horizon_ms, self.base_timestamp) {
            (Some(h), _) => h,
            (None, Some(b)) => b,
            (None, None) => timestamp,
        };
        let timestamp_delta = timestamp.wrapping_sub(base_timestamp);
        let mut body = Vec::new();
        body.push(0u8); // attributes
        write_varlong(&mut body, timestamp_delta);
        write_varint(&mut body, offset_delta);
        write_nullable(&mut body, key)?;
        write_nullable(&mut body, value)?;
        write_varint(
            &mut body,
            i32::try_from(headers.len()).map_err(|_| invalid("too many headers"))?,
        );
        for h in headers {
            write_nullable(&mut body, Some(h.key))?;
            write_nullable(&mut body, h.value)?;
        }
        let body_len = i32::try_from(body.len()).map_err(|_| invalid("record too large"))?;
        let record_size = size_of_varint(body_len) + body.len();
        let max_records = i32::MAX as usize - (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD);
        if self.records.len() + record_size > max_records {
            return Err(invalid("batch too large"));
        }
        write_varint(&mut self.records, body_len);
        self.records.extend_from_slice(&body);
        self.count += 1;
        self.last_offset = Some(offset);
        if self.base_timestamp.is_none() {
            self.base_timestamp = Some(base_timestamp);
        }
        if timestamp > self.max_timestamp {
            self.max_timestamp = timestamp;
        }
        Ok(())
    }

    /// The batch bytes: header with length and CRC-32C, then the (compressed) records.
    pub fn build(&self) -> Vec<u8> {
        let records = if self.compression == CompressionType::None || self.count == 0 {
            self.records.clone()
        } else {
            compress(self.compression, &self.records)
        };
        let codec = if self.count == 0 {
            CompressionType::None
        } else {
            self.compression
        };
        let total = RECORD_BATCH_OVERHEAD + records.len();
        let length = i32::try_from(total - LOG_OVERHEAD).unwrap_or(i32::MAX);
        let last_offset_delta = self
            .last_offset
            .map_or(0, |l| l.wrapping_sub(self.base_offset) as i32);
        let base_timestamp = match (self.delete_horizon_ms, self.base_timestamp) {
            (Some(h), _) => h,
            (None, Some(b)) => b,
            (None, None) => NO_TIMESTAMP,
        };
        let max_timestamp = match self.timestamp_type {
            TimestampType::LogAppendTime => self.log_append_time,
            TimestampType::CreateTime => self.max_timestamp,
        };
        let attributes = compute_attributes(
            codec,
            self.timestamp_type,
            self.transactional,
            self.control,
            self.delete_horizon_ms.is_some(),
        );
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.extend_from_slice(&MAGIC_V2.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes()); // CRC, filled below
        out.extend_from_slice(&attributes.to_be_bytes());
        out.extend_from_slice(&last_offset_delta.to_be_bytes());
        out.extend_from_slice(&base_timestamp.to_be_bytes());
        out.extend_from_slice(&max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&records);
        let crc = crate::checksum::crc32c(out.get(ATTRIBUTES_OFFSET..).unwrap_or(&[]));
        if let Some(dst) = out.get_mut(CRC_OFFSET..ATTRIBUTES_OFFSET) {
            dst.copy_from_slice(&crc.to_be_bytes());
        }
        out
    }
}

fn write_nullable(out: &mut Vec<u8>, data: Option<&[u8]>) -> Result<()> {
    match data {
        None => write_varint(out, -1),
        Some(d) => {
            write_varint(
                out,
                i32::try_from(d.len()).map_err(|_| invalid("field too large"))?,
            );
            out.extend_from_slice(d);
        }
    }
    Ok(())
}

/// Kafka's `MemoryRecords.withEndTransactionMarker`: a transactional control batch with one
/// ABORT/COMMIT record (`baseSequence` −1, CreateTime, uncompressed; 78 bytes). `record_type`
/// should be `Abort` or `Commit`; it is written as given.
pub fn end_txn_marker_batch(
    offset: i64,
    timestamp: i64,
    leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    record_type: ControlRecordType,
    coordinator_epoch: i32,
) -> Vec<u8> {
    let value = EndTransactionMarker::new(coordinator_epoch).to_bytes();
    control_batch(
        RecordBatchBuilder::new(offset)
            .partition_leader_epoch(leader_epoch)
            .producer(producer_id, producer_epoch, NO_SEQUENCE)
            .transactional(true),
        timestamp,
        record_type,
        &value,
    )
}

/// The KIP-1279 barrier as the fork's `MemoryRecords.withMirrorPidResetRecord` builds it: a
/// control batch (not transactional, producer id/epoch/sequence −1, CreateTime, uncompressed)
/// with one MIRROR_PID_RESET record whose value is a version-0 [`MirrorPidResetRecord`].
pub fn mirror_pid_reset_batch(
    offset: i64,
    timestamp: i64,
    leader_epoch: i32,
    source_cluster_id: &str,
) -> Vec<u8> {
    let value = MirrorPidResetRecord::new(source_cluster_id).to_bytes();
    control_batch(
        RecordBatchBuilder::new(offset).partition_leader_epoch(leader_epoch),
        timestamp,
        ControlRecordType::MirrorPidReset,
        &value,
    )
}

fn control_batch(
    builder: RecordBatchBuilder,
    timestamp: i64,
    record_type: ControlRecordType,
    value: &[u8],
) -> Vec<u8> {
    let mut b = builder.control(true);
    // Cannot fail: first record of a control batch, offset == base offset. A negative timestamp
    // other than -1 is refused by Kafka; we then write the record with timestamp -1 rather than
    // panic.
    let ts = if timestamp < 0 {
        NO_TIMESTAMP
    } else {
        timestamp
    };
    // (An error would leave the batch empty; it cannot occur for the first record.)
    b.append_control_record(ts, record_type, Some(value)).ok();
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::RecordBatch;
    use crate::control::is_mirror_pid_reset_batch;

    #[test]
    fn cleaned_batch_keeps_its_last_offset_and_control_records() {
        // A batch 10..=14 of which the cleaner keeps offset 12: last offset delta stays 4.
        let mut b = RecordBatchBuilder::new(10).producer(7, 1, 100);
        b.append_record_with_offset(12, 5, Some(b"k"), Some(b"v"), &[])
            .unwrap();
        assert!(
            b.override_last_offset(11).is_err(),
            "below an appended offset"
        );
        b.override_last_offset(14).unwrap();
        let bytes = b.build();
        let batch = RecordBatch::new(&bytes, 0).unwrap();
        batch.validate().unwrap();
        assert_eq!((batch.base_offset(), batch.last_offset()), (10, 14));
        assert_eq!((batch.records_count(), batch.last_sequence()), (1, 104));
        // A control record goes to a control batch as read.
        let mut c = RecordBatchBuilder::new(3).control(true);
        let key = ControlRecordKey::new(ControlRecordType::Commit).to_bytes();
        c.append_record_with_offset(3, 5, Some(&key), Some(b"\0\0\0\0\0\0"), &[])
            .unwrap();
        let bytes = c.build();
        assert!(RecordBatch::new(&bytes, 0).unwrap().is_control());
    }

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Reference §3.5 test vector: the barrier batch, 79 bytes, CRC 0x8361CACA.
    #[test]
    fn barrier_matches_reference_vector() {
        let expected = hex("00 00 00 00 00 00 00 2a 00 00 00 43 00 00 00 05
             02 83 61 ca ca 00 20 00 00 00 00 00 00 01 8b cf
             e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff
             ff ff ff ff ff ff ff ff ff 00 00 00 01 22 00 00
             00 08 00 00 00 07 0e 00 00 04 61 62 63 00 00");
        let built = mirror_pid_reset_batch(42, 1_700_000_000_000, 5, "abc");
        assert_eq!(built, expected);
        let batch = RecordBatch::new(&built, 0).unwrap();
        assert_eq!(batch.crc(), 0x8361_CACA);
        assert!(batch.is_valid());
        assert!(is_mirror_pid_reset_batch(&batch).unwrap());
    }

    #[test]
    fn mirror_pid_reset_value_bytes() {
        assert_eq!(
            MirrorPidResetRecord::new("abc").to_bytes(),
            [0x00, 0x00, 0x04, 0x61, 0x62, 0x63, 0x00]
        );
    }

    #[test]
    fn empty_batch_is_61_bytes_with_base_timestamp_minus_one() {
        let b = RecordBatchBuilder::new(7).build();
        assert_eq!(b.len(), 61);
        let batch = RecordBatch::new(&b, 0).unwrap();
        assert_eq!(batch.base_timestamp(), -1);
        assert_eq!(batch.max_timestamp(), -1);
        assert_eq!(batch.records_count(), 0);
        assert!(batch.is_valid());
    }

    #[test]
    fn builder_refuses_what_kafka_refuses() {
        let mut b = RecordBatchBuilder::new(10);
        b.append_with_offset(12, 5, None, None, &[]).unwrap();
        assert_eq!(
            b.append_with_offset(12, 5, None, None, &[])
                .unwrap_err()
                .kind,
            FormatErrorKind::InvalidField("offset not greater than the previous offset")
        );
        assert!(b.append(-2, None, None, &[]).is_err());
        assert!(RecordBatchBuilder::new(10)
            .append_with_offset(9, 0, None, None, &[])
            .is_err());
        assert!(RecordBatchBuilder::new(0)
            .control(true)
            .append(0, None, None, &[])
            .is_err());
        assert!(RecordBatchBuilder::new(0)
            .append_control_record(0, ControlRecordType::Commit, None)
            .is_err());
    }
}
