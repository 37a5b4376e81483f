//! Raw layout of Kafka's log formats: offsets, lengths and attribute bits, named after the
//! constants of Kafka's `Records`, `DefaultRecordBatch`, `LegacyRecord` and `ControlRecordType`.
//!
//! These definitions are independent of parsing and building; `batch.rs` and `builder.rs` use them.
//!
//! ```text
//! v2 RecordBatch (all integers big-endian)
//!  off size field
//!    0   8  baseOffset
//!    8   4  batchLength            (bytes after this field)
//!   12   4  partitionLeaderEpoch   (not covered by the CRC)
//!   16   1  magic                  (2)
//!   17   4  crc                    (CRC-32C of [21, end))
//!   21   2  attributes
//!   23   4  lastOffsetDelta
//!   27   8  baseTimestamp
//!   35   8  maxTimestamp
//!   43   8  producerId
//!   51   2  producerEpoch
//!   53   4  baseSequence
//!   57   4  recordsCount
//!   61   …  records (compressed as a whole when attributes & 0x07 != 0)
//! ```

/// Size of the `offset` (or `baseOffset`) field.
pub const OFFSET_LENGTH: usize = 8;
/// Size of the `size` (or `batchLength`) field.
pub const SIZE_LENGTH: usize = 4;
/// Bytes before the data of every log entry: offset + size (Kafka `Records.LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = OFFSET_LENGTH + SIZE_LENGTH;
/// Position of the size field.
pub const SIZE_OFFSET: usize = OFFSET_LENGTH;
/// Position of the magic byte in every format (Kafka `Records.MAGIC_OFFSET`).
pub const MAGIC_OFFSET: usize = 16;
/// Size of the magic byte.
pub const MAGIC_LENGTH: usize = 1;
/// Bytes needed to know an entry's size and magic (Kafka `Records.HEADER_SIZE_UP_TO_MAGIC`).
pub const HEADER_SIZE_UP_TO_MAGIC: usize = MAGIC_OFFSET + MAGIC_LENGTH;

/// `DefaultRecordBatch.BASE_OFFSET_OFFSET`.
pub const BASE_OFFSET_OFFSET: usize = 0;
/// `DefaultRecordBatch.BASE_OFFSET_LENGTH`.
pub const BASE_OFFSET_LENGTH: usize = 8;
/// `DefaultRecordBatch.LENGTH_OFFSET`.
pub const LENGTH_OFFSET: usize = BASE_OFFSET_OFFSET + BASE_OFFSET_LENGTH;
/// `DefaultRecordBatch.LENGTH_LENGTH`.
pub const LENGTH_LENGTH: usize = 4;
/// `DefaultRecordBatch.PARTITION_LEADER_EPOCH_OFFSET`.
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = LENGTH_OFFSET + LENGTH_LENGTH;
/// `DefaultRecordBatch.PARTITION_LEADER_EPOCH_LENGTH`.
pub const PARTITION_LEADER_EPOCH_LENGTH: usize = 4;
/// `DefaultRecordBatch.MAGIC_OFFSET`.
pub const BATCH_MAGIC_OFFSET: usize = PARTITION_LEADER_EPOCH_OFFSET + PARTITION_LEADER_EPOCH_LENGTH;
/// `DefaultRecordBatch.MAGIC_LENGTH`.
pub const BATCH_MAGIC_LENGTH: usize = 1;
/// `DefaultRecordBatch.CRC_OFFSET`.
pub const CRC_OFFSET: usize = BATCH_MAGIC_OFFSET + BATCH_MAGIC_LENGTH;
/// `DefaultRecordBatch.CRC_LENGTH`.
pub const CRC_LENGTH: usize = 4;
/// `DefaultRecordBatch.ATTRIBUTES_OFFSET`: the CRC covers `[ATTRIBUTES_OFFSET, end)`.
pub const ATTRIBUTES_OFFSET: usize = CRC_OFFSET + CRC_LENGTH;
/// `DefaultRecordBatch.ATTRIBUTE_LENGTH`.
pub const ATTRIBUTE_LENGTH: usize = 2;
/// `DefaultRecordBatch.LAST_OFFSET_DELTA_OFFSET`.
pub const LAST_OFFSET_DELTA_OFFSET: usize = ATTRIBUTES_OFFSET + ATTRIBUTE_LENGTH;
/// `DefaultRecordBatch.LAST_OFFSET_DELTA_LENGTH`.
pub const LAST_OFFSET_DELTA_LENGTH: usize = 4;
/// `DefaultRecordBatch.BASE_TIMESTAMP_OFFSET`.
pub const BASE_TIMESTAMP_OFFSET: usize = LAST_OFFSET_DELTA_OFFSET + LAST_OFFSET_DELTA_LENGTH;
/// `DefaultRecordBatch.BASE_TIMESTAMP_LENGTH`.
pub const BASE_TIMESTAMP_LENGTH: usize = 8;
/// `DefaultRecordBatch.MAX_TIMESTAMP_OFFSET`.
pub const MAX_TIMESTAMP_OFFSET: usize = BASE_TIMESTAMP_OFFSET + BASE_TIMESTAMP_LENGTH;
/// `DefaultRecordBatch.MAX_TIMESTAMP_LENGTH`.
pub const MAX_TIMESTAMP_LENGTH: usize = 8;
/// `DefaultRecordBatch.PRODUCER_ID_OFFSET`.
pub const PRODUCER_ID_OFFSET: usize = MAX_TIMESTAMP_OFFSET + MAX_TIMESTAMP_LENGTH;
/// `DefaultRecordBatch.PRODUCER_ID_LENGTH`.
pub const PRODUCER_ID_LENGTH: usize = 8;
/// `DefaultRecordBatch.PRODUCER_EPOCH_OFFSET`.
pub const PRODUCER_EPOCH_OFFSET: usize = PRODUCER_ID_OFFSET + PRODUCER_ID_LENGTH;
/// `DefaultRecordBatch.PRODUCER_EPOCH_LENGTH`.
pub const PRODUCER_EPOCH_LENGTH: usize = 2;
/// `DefaultRecordBatch.BASE_SEQUENCE_OFFSET`.
pub const BASE_SEQUENCE_OFFSET: usize = PRODUCER_EPOCH_OFFSET + PRODUCER_EPOCH_LENGTH;
/// `DefaultRecordBatch.BASE_SEQUENCE_LENGTH`.
pub const BASE_SEQUENCE_LENGTH: usize = 4;
/// `DefaultRecordBatch.RECORDS_COUNT_OFFSET`.
pub const RECORDS_COUNT_OFFSET: usize = BASE_SEQUENCE_OFFSET + BASE_SEQUENCE_LENGTH;
/// `DefaultRecordBatch.RECORDS_COUNT_LENGTH`.
pub const RECORDS_COUNT_LENGTH: usize = 4;
/// `DefaultRecordBatch.RECORDS_OFFSET`.
pub const RECORDS_OFFSET: usize = RECORDS_COUNT_OFFSET + RECORDS_COUNT_LENGTH;
/// `DefaultRecordBatch.RECORD_BATCH_OVERHEAD`: the size of an empty v2 batch (61).
pub const RECORD_BATCH_OVERHEAD: usize = RECORDS_OFFSET;

/// Magic of the v2 format.
pub const MAGIC_V2: i8 = 2;
/// Magic of the legacy v1 format.
pub const MAGIC_V1: i8 = 1;
/// Magic of the legacy v0 format.
pub const MAGIC_V0: i8 = 0;

/// `LegacyRecord.RECORD_OVERHEAD_V0`: the smallest legal size field of any entry (14).
pub const RECORD_OVERHEAD_V0: usize = 14;
/// `LegacyRecord.RECORD_OVERHEAD_V1` (22).
pub const RECORD_OVERHEAD_V1: usize = 22;
/// Offset of the legacy CRC-32 field, from the start of the entry.
pub const LEGACY_CRC_OFFSET: usize = LOG_OVERHEAD;
/// Offset of the first byte covered by the legacy CRC-32 (the magic byte).
pub const LEGACY_MAGIC_OFFSET: usize = LEGACY_CRC_OFFSET + 4;
/// Offset of the legacy attributes byte.
pub const LEGACY_ATTRIBUTES_OFFSET: usize = LEGACY_MAGIC_OFFSET + 1;
/// Offset of the legacy v1 wrapper timestamp (after the attributes byte); v0 has none.
pub const LEGACY_V1_TIMESTAMP_OFFSET: usize = LEGACY_ATTRIBUTES_OFFSET + 1;

/// Attribute bits 0–2: compression codec id.
pub const COMPRESSION_CODEC_MASK: u8 = 0x07;
/// Attribute bit 3: timestamp type (0 CreateTime, 1 LogAppendTime).
pub const TIMESTAMP_TYPE_MASK: u8 = 0x08;
/// Attribute bit 4: transactional batch.
pub const TRANSACTIONAL_FLAG_MASK: u8 = 0x10;
/// Attribute bit 5: control batch.
pub const CONTROL_FLAG_MASK: u8 = 0x20;
/// Attribute bit 6: baseTimestamp holds the delete horizon (KIP-534).
pub const DELETE_HORIZON_FLAG_MASK: u8 = 0x40;

/// `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: i64 = -1;
/// `RecordBatch.NO_PRODUCER_EPOCH`.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `RecordBatch.NO_SEQUENCE`.
pub const NO_SEQUENCE: i32 = -1;
/// `RecordBatch.NO_PARTITION_LEADER_EPOCH`.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// `RecordBatch.NO_TIMESTAMP`.
pub const NO_TIMESTAMP: i64 = -1;

/// Size of a control record key: int16 version + int16 type.
pub const CONTROL_KEY_SIZE: usize = 4;
/// Current control record key version.
pub const CONTROL_KEY_VERSION: i16 = 0;
/// Size of an EndTransactionMarker value: int16 version + int32 coordinatorEpoch.
pub const END_TXN_MARKER_SIZE: usize = 6;
/// Current EndTransactionMarker version.
pub const END_TXN_MARKER_VERSION: i16 = 0;
/// Current MirrorPidResetRecord version (KIP-1279).
pub const MIRROR_PID_RESET_VERSION: i16 = 0;

/// Default upper bound, in bytes, on what one batch may decompress to (see
/// [`crate::DecodeLimits`]). Kafka's default `message.max.bytes` is about 1 MiB and the largest
/// configured values seen in practice are a few hundred MiB; 256 MiB keeps one hostile batch from
/// exhausting memory while leaving room for any real batch.
pub const DEFAULT_MAX_DECOMPRESSED_BYTES: usize = 256 * 1024 * 1024;

/// Compression codec id stored in attribute bits 0–2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompressionType {
    /// 0: no compression.
    None,
    /// 1: gzip (RFC 1952).
    Gzip,
    /// 2: snappy in snappy-java's xerial stream framing.
    Snappy,
    /// 3: lz4 frame as Kafka's `Lz4BlockOutputStream` writes it.
    Lz4,
    /// 4: zstd frame.
    Zstd,
}

impl CompressionType {
    /// The codec for an attribute id, or `None` for 5..=7.
    pub fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => CompressionType::None,
            1 => CompressionType::Gzip,
            2 => CompressionType::Snappy,
            3 => CompressionType::Lz4,
            4 => CompressionType::Zstd,
            _ => return None,
        })
    }

    /// The attribute id.
    pub fn id(self) -> u8 {
        match self {
            CompressionType::None => 0,
            CompressionType::Gzip => 1,
            CompressionType::Snappy => 2,
            CompressionType::Lz4 => 3,
            CompressionType::Zstd => 4,
        }
    }

    /// Kafka's lower-case name (`none`, `gzip`, `snappy`, `lz4`, `zstd`).
    pub fn name(self) -> &'static str {
        match self {
            CompressionType::None => "none",
            CompressionType::Gzip => "gzip",
            CompressionType::Snappy => "snappy",
            CompressionType::Lz4 => "lz4",
            CompressionType::Zstd => "zstd",
        }
    }
}
