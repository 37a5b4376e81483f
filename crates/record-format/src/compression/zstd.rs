//! zstd (codec 4): standard zstd frames (RFC 8878), as zstd-jni's `ZstdOutputStreamNoFinalizer`
//! writes them for Kafka: one streaming frame, default level 3, no content size, no checksum
//! (header `28 b5 2f fd 00 58` for a 2 MiB window).
//!
//! Reading streams the frames through libzstd in 64 KiB steps into the bounded output, so a frame
//! content size is never used to allocate. libzstd's own window buffer is capped by
//! [`zstd_window_log_max`].

use std::io::Write;

use super::{BoundedOutput, CompressionType, DecodeLimits};
use crate::error::FormatErrorKind;

/// Kafka's default `compression.zstd.level` (zstd's default).
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// The smallest window we always accept: 8 MiB, the window libzstd uses for levels up to 19 when
/// the input size is unknown (as in Kafka's streaming writer); level 3 uses 2 MiB.
const WINDOW_LOG_FLOOR: u32 = 23;

/// `ZSTD_WINDOWLOG_LIMIT_DEFAULT` (128 MiB), which is also what zstd-jni (Kafka's reader) allows.
const WINDOW_LOG_CAP: u32 = 27;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Raw blocks hold at most 128 KiB (`Block_Maximum_Size`).
const RAW_BLOCK_MAX: usize = 128 * 1024;

/// The largest window (as a power of two) the decoder will allocate for `limits`: enough for the
/// whole permitted output, but at least 2^23 (8 MiB, so any frame written at levels up to 19 is
/// read whatever the limit) and at most 2^27 (libzstd's and zstd-jni's default cap, so at the
/// default 256 MiB limit we accept exactly the frames Kafka accepts). Frames that need a larger
/// window are rejected as corrupt before the window is allocated.
pub fn zstd_window_log_max(limits: &DecodeLimits) -> u32 {
    let limit = limits.max_decompressed_bytes;
    let ceil_log2 = usize::BITS - limit.saturating_sub(1).leading_zeros();
    ceil_log2.clamp(WINDOW_LOG_FLOOR, WINDOW_LOG_CAP)
}

pub(super) fn decompress(
    input: &[u8],
    out: &mut BoundedOutput,
    limits: &DecodeLimits,
) -> Result<(), FormatErrorKind> {
    let io_err = |e: std::io::Error| super::corrupt(CompressionType::Zstd, e.to_string());
    let mut decoder = ::zstd::stream::read::Decoder::with_buffer(input).map_err(io_err)?;
    decoder
        .window_log_max(zstd_window_log_max(limits))
        .map_err(io_err)?;
    out.read_to_end(decoder, io_err)
}

/// One streaming frame at `level` (clamped to libzstd's range).
pub(super) fn compress(input: &[u8], level: i32) -> Vec<u8> {
    let range = ::zstd::compression_level_range();
    let level = level.clamp(*range.start(), *range.end());
    let encoded =
        ::zstd::stream::write::Encoder::new(Vec::with_capacity(input.len() / 2 + 64), level)
            .and_then(|mut encoder| {
                encoder.write_all(input)?;
                encoder.finish()
            });
    match encoded {
        Ok(frame) => frame,
        // Writing into a Vec cannot fail; libzstd fails only on allocation failure. Store the
        // input in raw blocks rather than panic.
        Err(_) => raw_frame(input),
    }
}

/// A zstd frame holding `input` in raw (uncompressed) blocks: single segment, 8-byte content size.
fn raw_frame(input: &[u8]) -> Vec<u8> {
    let blocks = input.len() / RAW_BLOCK_MAX + 1;
    let mut out = Vec::with_capacity(4 + 1 + 8 + 3 * blocks + input.len());
    out.extend_from_slice(&ZSTD_MAGIC);
    // Frame header descriptor: content size field 8 bytes (0b11 << 6), single segment (1 << 5).
    out.push(0xe0);
    out.extend_from_slice(&le_bytes(input.len() as u64));
    let mut chunks = input.chunks(RAW_BLOCK_MAX).peekable();
    if chunks.peek().is_none() {
        // Last block, raw, size 0.
        out.extend_from_slice(&[0x01, 0x00, 0x00]);
    }
    while let Some(chunk) = chunks.next() {
        let last = u64::from(chunks.peek().is_none());
        // Block header: bit 0 last, bits 1-2 type (0 = raw), bits 3-23 size (<= 128 KiB).
        let header = le_bytes(last | (chunk.len() as u64) << 3);
        out.extend_from_slice(header.get(..3).unwrap_or_default());
        out.extend_from_slice(chunk);
    }
    out
}

#[expect(
    clippy::little_endian_bytes,
    reason = "zstd frame and block headers are little-endian"
)]
fn le_bytes(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_frame_decodes() {
        for len in [0usize, 1, 1000, RAW_BLOCK_MAX, RAW_BLOCK_MAX + 1, 300_000] {
            let input: Vec<u8> = (0..len).map(|i| (i * 7 % 255) as u8).collect();
            let frame = raw_frame(&input);
            assert_eq!(
                ::zstd::stream::decode_all(&frame[..]).unwrap(),
                input,
                "len {len}"
            );
        }
    }

    #[test]
    fn window_log_max_bounds() {
        let wl = |max_decompressed_bytes| {
            zstd_window_log_max(&DecodeLimits {
                max_decompressed_bytes,
            })
        };
        assert_eq!(wl(0), WINDOW_LOG_FLOOR);
        assert_eq!(wl(1 << 20), WINDOW_LOG_FLOOR);
        assert_eq!(wl((1 << 24) + 1), 25);
        assert_eq!(wl(256 << 20), WINDOW_LOG_CAP);
        assert_eq!(wl(usize::MAX), WINDOW_LOG_CAP);
    }
}
