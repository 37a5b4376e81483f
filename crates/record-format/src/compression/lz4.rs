//! lz4 (codec 3): an LZ4 frame as Kafka's `Lz4BlockOutputStream` writes it and
//! `Lz4BlockInputStream` reads it.
//!
//! ```text
//! off  size
//!   0     4  magic 04 22 4D 18 (0x184D2204 little-endian)
//!   4     1  FLG: version 01 (bits 7-6), block independence (5), block checksum (4),
//!            content size (3), content checksum (2), reserved (1), dictionary id (0)
//!   5     1  BD: block max size in bits 6-4 (4 = 64 KiB, 5 = 256 KiB, 6 = 1 MiB, 7 = 4 MiB)
//!   6   0|8  content size, u64 LE, if FLG bit 3
//!   …     1  HC = (xxhash32(FLG .. end of content size, seed 0) >> 8) & 0xff
//!   …     …  blocks: [u32 LE size | 0x8000_0000 if stored uncompressed][data][u32 LE xxhash32 of
//!            data, if FLG bit 4]
//!   …     4  end mark 00 00 00 00
//!   …   0|4  xxhash32 of the whole content, if FLG bit 2
//! ```
//!
//! Kafka writes FLG 0x60 (version 1, independent blocks, nothing optional), BD 0x40 and HC 0x82:
//! `04 22 4D 18 60 40 82`. kafka-python (via `lz4.frame`) sets the content-size flag (FLG 0x68).
//!
//! Reading, compared with Kafka's `Lz4BlockInputStream`:
//! - HC: accepted if it is the correct checksum *or* Kafka's old "broken" one, computed over magic +
//!   descriptor (Kafka before 0.10 wrote it; Kafka itself ignores HC for magic-0 messages and
//!   checks the correct one for v1/v2, so we accept a little more than Kafka does for v2).
//! - Block checksums are verified (as Kafka). The content checksum and content size are verified
//!   too (Kafka skips both; every writer we know sets them correctly).
//! - Dependent blocks and dictionary ids are refused (Kafka refuses both). A size word of
//!   `0x8000_0000` (uncompressed, length 0) ends the frame, as in Kafka.
//! - Bytes after the end mark (and content checksum) are ignored, as in Kafka.

use lz4_flex::block::{compress_into, decompress_into, get_maximum_output_size, DecompressError};
use twox_hash::XxHash32;

use super::BoundedOutput;
use crate::error::FormatErrorKind;

/// The LZ4 frame magic number 0x184D2204, as stored (little-endian).
pub const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// The FLG byte Kafka writes: version 01, block independence, no checksums, no content size.
pub const LZ4_KAFKA_FLG: u8 = 0x60;

/// The BD byte Kafka writes: 64 KiB maximum block size.
pub const LZ4_KAFKA_BD: u8 = 0x40;

/// Kafka's block size (`BLOCKSIZE_64KB`).
pub const LZ4_KAFKA_BLOCK_SIZE: usize = 64 * 1024;

/// High bit of a block size word: the block is stored uncompressed.
pub const LZ4_UNCOMPRESSED_BLOCK_FLAG: u32 = 0x8000_0000;

const FLG_VERSION_MASK: u8 = 0xc0;
const FLG_VERSION_1: u8 = 0x40;
const FLG_BLOCK_INDEPENDENCE: u8 = 0x20;
const FLG_BLOCK_CHECKSUM: u8 = 0x10;
const FLG_CONTENT_SIZE: u8 = 0x08;
const FLG_CONTENT_CHECKSUM: u8 = 0x04;
const FLG_RESERVED: u8 = 0x02;
const FLG_DICT_ID: u8 = 0x01;
const BD_RESERVED: u8 = 0x8f;

/// FLG + BD.
const DESCRIPTOR_FIXED_LEN: usize = 2;
/// The optional content size field.
const CONTENT_SIZE_LEN: usize = 8;

/// The header checksum byte (HC) of an LZ4 frame descriptor: `(xxhash32(descriptor, 0) >> 8) &
/// 0xff`, where `descriptor` runs from FLG to the byte before HC. For Kafka's frame,
/// `lz4_header_checksum(&[0x60, 0x40]) == 0x82`.
pub fn lz4_header_checksum(descriptor: &[u8]) -> u8 {
    second_byte(XxHash32::oneshot(0, descriptor))
}

/// The HC byte Kafka wrote before 0.10 (KAFKA-3160): the same hash taken over magic + descriptor.
/// Accepted on read; never written.
pub fn lz4_header_checksum_broken(descriptor: &[u8]) -> u8 {
    let mut hasher = XxHash32::with_seed(0);
    std::hash::Hasher::write(&mut hasher, &LZ4_FRAME_MAGIC);
    std::hash::Hasher::write(&mut hasher, descriptor);
    second_byte(hasher.finish_32())
}

fn second_byte(hash: u32) -> u8 {
    ((hash >> 8) & 0xff) as u8
}

pub(super) fn decompress(input: &[u8], out: &mut BoundedOutput) -> Result<(), FormatErrorKind> {
    let Some(rest) = input.strip_prefix(&LZ4_FRAME_MAGIC) else {
        return Err(out.corrupt("bad lz4 frame magic"));
    };
    let (flg, bd) = match rest {
        [flg, bd, ..] => (*flg, *bd),
        _ => return Err(out.corrupt("truncated lz4 frame descriptor")),
    };
    if flg & FLG_VERSION_MASK != FLG_VERSION_1 {
        return Err(out.corrupt("unsupported lz4 frame version"));
    }
    if flg & FLG_BLOCK_INDEPENDENCE == 0 {
        return Err(out.corrupt("dependent lz4 blocks are not supported"));
    }
    if flg & FLG_DICT_ID != 0 {
        return Err(out.corrupt("lz4 dictionary ids are not supported"));
    }
    if flg & FLG_RESERVED != 0 || bd & BD_RESERVED != 0 {
        return Err(out.corrupt("reserved lz4 descriptor bits set"));
    }
    let max_block = match (bd >> 4) & 0x07 {
        4 => 64 * 1024,
        5 => 256 * 1024,
        6 => 1024 * 1024,
        7 => 4 * 1024 * 1024,
        _ => return Err(out.corrupt("invalid lz4 block maximum size")),
    };
    let descriptor_len = if flg & FLG_CONTENT_SIZE != 0 {
        DESCRIPTOR_FIXED_LEN + CONTENT_SIZE_LEN
    } else {
        DESCRIPTOR_FIXED_LEN
    };
    let (Some(descriptor), Some(&hc), Some(mut rest)) = (
        rest.get(..descriptor_len),
        rest.get(descriptor_len),
        rest.get(descriptor_len + 1..),
    ) else {
        return Err(out.corrupt("truncated lz4 frame descriptor"));
    };
    if hc != lz4_header_checksum(descriptor) && hc != lz4_header_checksum_broken(descriptor) {
        return Err(out.corrupt("lz4 frame header checksum mismatch"));
    }
    let declared_size = descriptor
        .get(DESCRIPTOR_FIXED_LEN..)
        .and_then(|b| b.first_chunk::<8>())
        .map(|b| u64_le(*b));

    // One block of scratch for compressed blocks, allocated (and zeroed) on first use.
    let mut scratch: Vec<u8> = Vec::new();
    loop {
        let Some((word, after)) = read_u32_le(rest) else {
            return Err(out.corrupt("truncated lz4 frame (no end mark)"));
        };
        let stored = word & LZ4_UNCOMPRESSED_BLOCK_FLAG != 0;
        let size = (word & !LZ4_UNCOMPRESSED_BLOCK_FLAG) as usize;
        rest = after;
        if size == 0 {
            break;
        }
        if size > max_block {
            return Err(out.corrupt("lz4 block larger than the frame's maximum block size"));
        }
        let (Some(data), Some(after)) = (rest.get(..size), rest.get(size..)) else {
            return Err(out.corrupt("lz4 block past the end of the input"));
        };
        rest = after;
        if flg & FLG_BLOCK_CHECKSUM != 0 {
            let Some((checksum, after)) = read_u32_le(rest) else {
                return Err(out.corrupt("truncated lz4 block checksum"));
            };
            if checksum != XxHash32::oneshot(0, data) {
                return Err(out.corrupt("lz4 block checksum mismatch"));
            }
            rest = after;
        }
        if stored {
            out.extend(data)?;
        } else {
            decompress_block(data, max_block, &mut scratch, out)?;
        }
    }

    if flg & FLG_CONTENT_CHECKSUM != 0 {
        let Some((checksum, _)) = read_u32_le(rest) else {
            return Err(out.corrupt("truncated lz4 content checksum"));
        };
        if checksum != XxHash32::oneshot(0, out.as_slice()) {
            return Err(out.corrupt("lz4 content checksum mismatch"));
        }
    }
    if let Some(declared) = declared_size {
        if u64::try_from(out.len()).ok() != Some(declared) {
            return Err(out.corrupt("lz4 content size does not match the frame descriptor"));
        }
    }
    // Anything after the end mark is ignored, as Kafka's Lz4BlockInputStream does.
    Ok(())
}

/// Decompresses one block through `scratch` (at most `max_block` bytes, and never more than the
/// output may still take) into the output.
fn decompress_block(
    data: &[u8],
    max_block: usize,
    scratch: &mut Vec<u8>,
    out: &mut BoundedOutput,
) -> Result<(), FormatErrorKind> {
    let cap = max_block.min(out.remaining());
    if scratch.len() < cap {
        // Only the first compressed block allocates: `remaining` shrinks from here on.
        *scratch = vec![0u8; cap];
    }
    let Some(window) = scratch.get_mut(..cap) else {
        return Err(out.corrupt("internal: lz4 scratch"));
    };
    match decompress_into(data, window) {
        Ok(n) => out.extend(window.get(..n).unwrap_or(window)),
        Err(DecompressError::OutputTooSmall { .. }) if cap < max_block => Err(out.too_large()),
        Err(DecompressError::OutputTooSmall { .. }) => {
            Err(out.corrupt("lz4 block decompresses past the frame's maximum block size"))
        }
        Err(DecompressError::OffsetOutOfBounds) => {
            Err(out.corrupt("lz4 match offset out of bounds"))
        }
        Err(DecompressError::LiteralOutOfBounds) => {
            Err(out.corrupt("lz4 literal past the end of the block"))
        }
        Err(DecompressError::ExpectedAnotherByte) => Err(out.corrupt("truncated lz4 block")),
        Err(_) => Err(out.corrupt("corrupt lz4 block")),
    }
}

/// Kafka's frame: header `04 22 4D 18 60 40 82`, one block per 64 KiB of input (stored
/// uncompressed when compression does not shrink it, as Kafka does), end mark, no checksums.
pub(super) fn compress(input: &[u8]) -> Vec<u8> {
    let blocks = input.len() / LZ4_KAFKA_BLOCK_SIZE + 1;
    let mut out = Vec::with_capacity(7 + input.len() + 4 * blocks + 4);
    out.extend_from_slice(&LZ4_FRAME_MAGIC);
    out.push(LZ4_KAFKA_FLG);
    out.push(LZ4_KAFKA_BD);
    out.push(lz4_header_checksum(&[LZ4_KAFKA_FLG, LZ4_KAFKA_BD]));
    let mut scratch = vec![0u8; get_maximum_output_size(LZ4_KAFKA_BLOCK_SIZE)];
    for chunk in input.chunks(LZ4_KAFKA_BLOCK_SIZE) {
        // chunk.len() <= 64 KiB, so the casts to u32 below are exact.
        let compressed = match compress_into(chunk, &mut scratch) {
            Ok(n) if n < chunk.len() => scratch.get(..n),
            _ => None,
        };
        match compressed {
            Some(block) => {
                out.extend_from_slice(&u32_le(block.len() as u32));
                out.extend_from_slice(block);
            }
            None => {
                out.extend_from_slice(&u32_le(chunk.len() as u32 | LZ4_UNCOMPRESSED_BLOCK_FLAG));
                out.extend_from_slice(chunk);
            }
        }
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

fn read_u32_le(b: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((u32_from_le(*head), rest))
}

#[expect(
    clippy::little_endian_bytes,
    reason = "the LZ4 frame format is little-endian"
)]
fn u32_from_le(b: [u8; 4]) -> u32 {
    u32::from_le_bytes(b)
}

#[expect(
    clippy::little_endian_bytes,
    reason = "the LZ4 frame format is little-endian"
)]
fn u64_le(b: [u8; 8]) -> u64 {
    u64::from_le_bytes(b)
}

#[expect(
    clippy::little_endian_bytes,
    reason = "the LZ4 frame format is little-endian"
)]
fn u32_le(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}
