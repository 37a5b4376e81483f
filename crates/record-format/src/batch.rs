//! [`RecordBatch`]: a zero-copy view over one v2 record batch (Kafka `DefaultRecordBatch`).
//!
//! The view borrows exactly one batch's bytes (`12 + batchLength` bytes, see [`crate::wire`]) and
//! reads header fields on demand. [`RecordBatch::new`] checks only what every accessor relies on
//! (size, length field, magic); the CRC is checked by [`RecordBatch::validate`], as Kafka separates
//! `DefaultRecordBatch` construction from `ensureValid()`.

use crate::cursor::array_at;
use crate::error::{FormatError, FormatErrorKind, Result};
use crate::wire::CompressionType;
use crate::wire::{
    ATTRIBUTES_OFFSET, BASE_OFFSET_OFFSET, BATCH_MAGIC_OFFSET, COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK, CRC_OFFSET, DELETE_HORIZON_FLAG_MASK, HEADER_SIZE_UP_TO_MAGIC,
    LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_V2, MAX_TIMESTAMP_OFFSET, PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG_MASK,
};

/// Timestamp type of a v2 batch (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// The producer's timestamp of each record (bit 3 clear).
    CreateTime,
    /// The broker's append time, stored once as the batch's `maxTimestamp` (bit 3 set).
    LogAppendTime,
}

impl TimestampType {
    /// Kafka's `TimestampType.name`: `CreateTime` or `LogAppendTime`.
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
}

/// Kafka's `DefaultRecordBatch.incrementSequence`: `s + n`, wrapping past `i32::MAX` to 0.
#[inline]
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    if sequence > i32::MAX.wrapping_sub(increment) {
        increment
            .wrapping_sub(i32::MAX.wrapping_sub(sequence))
            .wrapping_sub(1)
    } else {
        sequence.wrapping_add(increment)
    }
}

/// Kafka's `DefaultRecordBatch.decrementSequence`: `s - n`, wrapping below 0 to `i32::MAX`.
pub fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    if sequence < decrement {
        i32::MAX
            .wrapping_sub(decrement.wrapping_sub(sequence))
            .wrapping_add(1)
    } else {
        sequence.wrapping_sub(decrement)
    }
}

fn write_at(buf: &mut [u8], off: usize, src: &[u8]) -> Result<()> {
    let have = buf.len();
    match off
        .checked_add(src.len())
        .and_then(|end| buf.get_mut(off..end))
    {
        Some(dst) => {
            dst.copy_from_slice(src);
            Ok(())
        }
        None => Err(FormatError::new(
            FormatErrorKind::Truncated {
                need: (off + src.len()) as u64,
                have: have as u64,
            },
            0,
        )),
    }
}

/// The accessors of a v2 batch header's fields, over the bytes in field `$field` of `Self` (at
/// least the 61 header bytes): one definition for [`RecordBatch`] (its bytes) and the scan's
/// `ScannedBatch` (its copy of the header).
macro_rules! header_fields {
    ($field:ident) => {
        /// `baseOffset` (int64 at 0).
        #[inline]
        pub fn base_offset(&self) -> i64 {
            i64::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::BASE_OFFSET_OFFSET,
            ))
        }

        /// `batchLength` (int32 at 8): bytes after the length field.
        #[inline]
        pub fn batch_length(&self) -> i32 {
            i32::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::LENGTH_OFFSET,
            ))
        }

        /// `partitionLeaderEpoch` (int32 at 12; not CRC-covered).
        #[inline]
        pub fn partition_leader_epoch(&self) -> i32 {
            i32::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::PARTITION_LEADER_EPOCH_OFFSET,
            ))
        }

        /// `magic` (int8 at 16; always 2 for a constructed view).
        #[inline]
        pub fn magic(&self) -> i8 {
            i8::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::BATCH_MAGIC_OFFSET,
            ))
        }

        /// Stored `crc` (uint32 at 17).
        #[inline]
        pub fn crc(&self) -> u32 {
            u32::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::CRC_OFFSET,
            ))
        }

        /// Raw `attributes` int16 at 21. Flags are read from the low byte only, as Kafka does.
        #[inline]
        pub fn attributes(&self) -> i16 {
            i16::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::ATTRIBUTES_OFFSET,
            ))
        }

        #[inline]
        fn flags(&self) -> u8 {
            // Kafka: `(byte) buffer.getShort($crate::wire::ATTRIBUTES_OFFSET)`.
            self.attributes() as u8
        }

        /// `lastOffsetDelta` (int32 at 23).
        #[inline]
        pub fn last_offset_delta(&self) -> i32 {
            i32::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::LAST_OFFSET_DELTA_OFFSET,
            ))
        }

        /// `baseOffset + lastOffsetDelta` (Java wrap-around arithmetic).
        #[inline]
        pub fn last_offset(&self) -> i64 {
            self.base_offset()
                .wrapping_add(i64::from(self.last_offset_delta()))
        }

        /// `lastOffset + 1`.
        #[inline]
        pub fn next_offset(&self) -> i64 {
            self.last_offset().wrapping_add(1)
        }

        /// `baseTimestamp` (int64 at 27); holds the delete horizon when
        /// [`has_delete_horizon`](Self::has_delete_horizon).
        #[inline]
        pub fn base_timestamp(&self) -> i64 {
            i64::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::BASE_TIMESTAMP_OFFSET,
            ))
        }

        /// `maxTimestamp` (int64 at 35); the append time for LogAppendTime batches.
        #[inline]
        pub fn max_timestamp(&self) -> i64 {
            i64::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::MAX_TIMESTAMP_OFFSET,
            ))
        }

        /// `producerId` (int64 at 43); −1 = none.
        #[inline]
        pub fn producer_id(&self) -> i64 {
            i64::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::PRODUCER_ID_OFFSET,
            ))
        }

        /// `producerEpoch` (int16 at 51).
        #[inline]
        pub fn producer_epoch(&self) -> i16 {
            i16::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::PRODUCER_EPOCH_OFFSET,
            ))
        }

        /// `baseSequence` (int32 at 53); −1 = none.
        #[inline]
        pub fn base_sequence(&self) -> i32 {
            i32::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::BASE_SEQUENCE_OFFSET,
            ))
        }

        /// Kafka's `lastSequence()`: −1 without a base sequence, else
        /// `increment_sequence(baseSequence, lastOffsetDelta)`.
        #[inline]
        pub fn last_sequence(&self) -> i32 {
            let base = self.base_sequence();
            if base == $crate::wire::NO_SEQUENCE {
                $crate::wire::NO_SEQUENCE
            } else {
                $crate::batch::increment_sequence(base, self.last_offset_delta())
            }
        }

        /// `recordsCount` (int32 at 57) as stored (may be negative in corrupt input).
        #[inline]
        pub fn records_count(&self) -> i32 {
            i32::from_be_bytes($crate::cursor::array_at(
                &self.$field,
                $crate::wire::RECORDS_COUNT_OFFSET,
            ))
        }

        /// The timestamp type (attribute bit 3).
        #[inline]
        pub fn timestamp_type(&self) -> $crate::batch::TimestampType {
            if self.flags() & $crate::wire::TIMESTAMP_TYPE_MASK != 0 {
                $crate::batch::TimestampType::LogAppendTime
            } else {
                $crate::batch::TimestampType::CreateTime
            }
        }

        /// Attribute bit 4.
        #[inline]
        pub fn is_transactional(&self) -> bool {
            self.flags() & $crate::wire::TRANSACTIONAL_FLAG_MASK != 0
        }

        /// Attribute bit 5.
        #[inline]
        pub fn is_control(&self) -> bool {
            self.flags() & $crate::wire::CONTROL_FLAG_MASK != 0
        }

        /// Attribute bit 6 (KIP-534): `baseTimestamp` holds the delete horizon.
        #[inline]
        pub fn has_delete_horizon(&self) -> bool {
            self.flags() & $crate::wire::DELETE_HORIZON_FLAG_MASK != 0
        }

        /// `Some(baseTimestamp)` when [`has_delete_horizon`](Self::has_delete_horizon).
        pub fn delete_horizon_ms(&self) -> Option<i64> {
            self.has_delete_horizon().then(|| self.base_timestamp())
        }

        /// Kafka's `hasProducerId()`: `producerId > -1`.
        #[inline]
        pub fn has_producer_id(&self) -> bool {
            self.producer_id() > $crate::wire::NO_PRODUCER_ID
        }
    };
}
pub(crate) use header_fields;

/// A view over exactly one v2 record batch: its bytes and the absolute position of its first
/// byte. Every header field is read from the bytes when asked for, as Kafka's
/// `DefaultRecordBatch` reads its `ByteBuffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatch<'a> {
    bytes: &'a [u8],
    position: u64,
}

impl<'a> RecordBatch<'a> {
    /// Wraps `bytes`, which must be exactly one v2 batch whose first byte is at absolute
    /// `position` (used only for errors).
    ///
    /// Checks, in order: at least 17 bytes (`Truncated` at `position`), magic 2 (`BadMagic` at
    /// `position + 16`), length field ≥ 49 (`BadLength` at `position + 8`), and
    /// `12 + length == bytes.len()` (`Truncated` if the slice is short, `BadLength` if it is
    /// longer). The CRC is not checked; see [`RecordBatch::validate`].
    pub fn new(bytes: &'a [u8], position: u64) -> Result<Self> {
        if bytes.len() < HEADER_SIZE_UP_TO_MAGIC {
            return Err(FormatError::new(
                FormatErrorKind::Truncated {
                    need: RECORD_BATCH_OVERHEAD as u64,
                    have: bytes.len() as u64,
                },
                position,
            ));
        }
        let magic = i8::from_be_bytes(array_at(bytes, BATCH_MAGIC_OFFSET));
        if magic != MAGIC_V2 {
            return Err(FormatError::new(
                FormatErrorKind::BadMagic(magic),
                position + BATCH_MAGIC_OFFSET as u64,
            ));
        }
        let length = i32::from_be_bytes(array_at(bytes, LENGTH_OFFSET));
        let total = i64::from(length) + LOG_OVERHEAD as i64;
        if total < RECORD_BATCH_OVERHEAD as i64 {
            return Err(FormatError::new(
                FormatErrorKind::BadLength(i64::from(length)),
                position + LENGTH_OFFSET as u64,
            ));
        }
        if total > bytes.len() as i64 {
            return Err(FormatError::new(
                FormatErrorKind::Truncated {
                    need: total as u64,
                    have: bytes.len() as u64,
                },
                position,
            ));
        }
        if total < bytes.len() as i64 {
            return Err(FormatError::new(
                FormatErrorKind::BadLength(i64::from(length)),
                position + LENGTH_OFFSET as u64,
            ));
        }
        Ok(RecordBatch { bytes, position })
    }

    header_fields!(bytes);

    /// The codec (attribute bits 0–2). Ids 5–7 are `UnknownCompression` at the attributes
    /// position.
    pub fn compression(&self) -> Result<CompressionType> {
        let id = self.flags() & COMPRESSION_CODEC_MASK;
        CompressionType::from_id(id).ok_or_else(|| {
            FormatError::new(
                FormatErrorKind::UnknownCompression(id),
                self.position + ATTRIBUTES_OFFSET as u64,
            )
        })
    }

    /// Size of the whole batch in bytes (`12 + batchLength`).
    #[inline]
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The batch's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Absolute position of the batch's first byte, as given to [`RecordBatch::new`].
    #[inline]
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The compressed-or-plain records section (bytes 61..end).
    #[inline]
    pub fn records_bytes(&self) -> &'a [u8] {
        self.bytes.get(RECORD_BATCH_OVERHEAD..).unwrap_or(&[])
    }

    /// CRC-32C of bytes `[21, end)`.
    #[inline(always)]
    pub fn compute_crc(&self) -> u32 {
        crate::checksum::crc32c(self.bytes.get(ATTRIBUTES_OFFSET..).unwrap_or(&[]))
    }

    /// Kafka's `isValid()`: the stored CRC matches (size ≥ 61 holds by construction).
    #[inline]
    pub fn is_valid(&self) -> bool {
        self.crc() == self.compute_crc()
    }

    /// Kafka's `ensureValid()`: `CrcMismatch` positioned at the CRC field.
    #[inline(always)]
    pub fn validate(&self) -> Result<()> {
        let stored = self.crc();
        let computed = self.compute_crc();
        if stored == computed {
            Ok(())
        } else {
            Err(FormatError::new(
                FormatErrorKind::CrcMismatch { stored, computed },
                self.position + CRC_OFFSET as u64,
            ))
        }
    }
}

/// Rewrites `baseOffset` and `partitionLeaderEpoch` of the v2 batch in `buf` in place, without
/// touching the CRC (neither field is CRC-covered), as a Kafka leader does when it assigns
/// offsets. `buf` must hold at least the 61-byte header and have magic 2.
pub fn set_base_offset_and_leader_epoch(
    buf: &mut [u8],
    base_offset: i64,
    leader_epoch: i32,
) -> Result<()> {
    if buf.len() < RECORD_BATCH_OVERHEAD {
        return Err(FormatError::new(
            FormatErrorKind::Truncated {
                need: RECORD_BATCH_OVERHEAD as u64,
                have: buf.len() as u64,
            },
            0,
        ));
    }
    let magic = i8::from_be_bytes(array_at(buf, BATCH_MAGIC_OFFSET));
    if magic != MAGIC_V2 {
        return Err(FormatError::new(
            FormatErrorKind::BadMagic(magic),
            BATCH_MAGIC_OFFSET as u64,
        ));
    }
    write_at(buf, BASE_OFFSET_OFFSET, &base_offset.to_be_bytes())?;
    write_at(
        buf,
        PARTITION_LEADER_EPOCH_OFFSET,
        &leader_epoch.to_be_bytes(),
    )
}

/// Kafka's `setMaxTimestamp(LOG_APPEND_TIME, ts)` on the batch in `buf`: sets the timestamp-type
/// bit (attributes are recomputed from the flags, so unused bits 7–15 are cleared as Kafka's
/// `computeAttributes` does), writes `maxTimestamp = ts` and recomputes the CRC. Leaves the
/// batch untouched when it is already LogAppendTime with that max timestamp. `buf` must be exactly
/// one v2 batch (see [`RecordBatch::new`]); errors are positioned from the start of `buf`.
pub fn set_max_timestamp_log_append_time(buf: &mut [u8], ts: i64) -> Result<()> {
    let (attributes, unchanged) = {
        let batch = RecordBatch::new(buf, 0)?;
        let codec = batch.compression()?;
        let unchanged =
            batch.timestamp_type() == TimestampType::LogAppendTime && batch.max_timestamp() == ts;
        let attrs = compute_attributes(
            codec,
            TimestampType::LogAppendTime,
            batch.is_transactional(),
            batch.is_control(),
            batch.has_delete_horizon(),
        );
        (attrs, unchanged)
    };
    if unchanged {
        return Ok(());
    }
    write_at(buf, ATTRIBUTES_OFFSET, &attributes.to_be_bytes())?;
    write_at(buf, MAX_TIMESTAMP_OFFSET, &ts.to_be_bytes())?;
    let crc = crate::checksum::crc32c(buf.get(ATTRIBUTES_OFFSET..).unwrap_or(&[]));
    write_at(buf, CRC_OFFSET, &crc.to_be_bytes())
}

/// Kafka's `DefaultRecordBatch.computeAttributes`.
pub fn compute_attributes(
    codec: CompressionType,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
    has_delete_horizon: bool,
) -> i16 {
    let mut a = codec.id() & COMPRESSION_CODEC_MASK;
    if timestamp_type == TimestampType::LogAppendTime {
        a |= TIMESTAMP_TYPE_MASK;
    }
    if is_transactional {
        a |= TRANSACTIONAL_FLAG_MASK;
    }
    if is_control {
        a |= CONTROL_FLAG_MASK;
    }
    if has_delete_horizon {
        a |= DELETE_HORIZON_FLAG_MASK;
    }
    i16::from(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_wrap_like_kafka() {
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(decrement_sequence(0, 1), i32::MAX);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        assert_eq!(decrement_sequence(10, 3), 7);
    }
}
