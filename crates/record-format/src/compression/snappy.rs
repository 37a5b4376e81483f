//! snappy (codec 2) in snappy-java's xerial stream framing, which Kafka's `SnappyOutputStream`
//! writes. This is *not* the official Snappy framing format (`ff 06 00 00 sNaPpY`).
//!
//! ```text
//! off  size
//!   0     8  magic 82 53 4E 41 50 50 59 00 ("\x82SNAPPY\0")
//!   8     4  version, int32 BE (1)
//!  12     4  minimum compatible version, int32 BE (1)
//!  16     …  chunks: [int32 BE compressed length][raw snappy block], each block holding at most
//!            32 KiB of input when Kafka writes it (any size is read)
//! ```
//!
//! Reading follows `SnappyInputStream`: empty input is an empty stream; input that is shorter than
//! the 16-byte header or does not start with the magic is one raw snappy block
//! (`Snappy.uncompress`); a header in place of a chunk length starts a concatenated stream.
//! Unlike snappy-java, 1–3 stray bytes where a chunk length should be are an error, not EOF.

use snap::raw::{decompress_len, max_compress_len, Decoder, Encoder};

use super::{BoundedOutput, CompressionType, DecodeLimits};
use crate::error::FormatErrorKind;

/// snappy-java's stream magic, `"\x82SNAPPY\0"`.
pub const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];

/// The full 16-byte stream header snappy-java writes: magic, version 1, minimum compatible
/// version 1.
pub const XERIAL_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];

/// Uncompressed bytes per chunk in what Kafka writes (snappy-java's default block size).
pub const XERIAL_BLOCK_SIZE: usize = 32 * 1024;

/// No snappy block expands more than this (see `raw_block`).
const MAX_EXPANSION: usize = 32;

/// snappy-java's `MINIMUM_COMPATIBLE_VERSION`: streams declaring an older version are refused.
const MIN_VERSION: i32 = 1;

const VERSION_OFFSET: usize = XERIAL_MAGIC.len();
const COMPATIBLE_OFFSET: usize = VERSION_OFFSET + 4;
const CHUNKS_OFFSET: usize = COMPATIBLE_OFFSET + 4;

pub(super) fn decompress(input: &[u8], out: &mut BoundedOutput) -> Result<(), FormatErrorKind> {
    if input.is_empty() {
        return Ok(());
    }
    if input.len() >= CHUNKS_OFFSET && input.starts_with(&XERIAL_MAGIC) {
        xerial(input, out)
    } else {
        raw_block(input, out, &mut Decoder::new())
    }
}

/// Decodes snappy-java's xerial stream (header required), bounded by `limits`.
pub fn decompress_snappy_xerial(
    input: &[u8],
    limits: &DecodeLimits,
) -> Result<Vec<u8>, FormatErrorKind> {
    let mut out = BoundedOutput::new(CompressionType::Snappy, limits);
    xerial(input, &mut out)?;
    Ok(out.into_inner())
}

/// Decodes one raw snappy block (no framing), bounded by `limits`; the length preamble is checked
/// against the limit before anything is allocated.
pub fn decompress_snappy_raw(
    input: &[u8],
    limits: &DecodeLimits,
) -> Result<Vec<u8>, FormatErrorKind> {
    let mut out = BoundedOutput::new(CompressionType::Snappy, limits);
    raw_block(input, &mut out, &mut Decoder::new())?;
    Ok(out.into_inner())
}

fn xerial(input: &[u8], out: &mut BoundedOutput) -> Result<(), FormatErrorKind> {
    let mut rest = skip_header(input, out)?;
    let mut decoder = Decoder::new();
    while !rest.is_empty() {
        let Some((len, after)) = read_i32(rest) else {
            return Err(out.corrupt("truncated xerial chunk length"));
        };
        if rest.starts_with(&XERIAL_MAGIC) {
            // Concatenated stream: another header where a chunk length was expected.
            rest = skip_header(rest, out)?;
            continue;
        }
        let len = usize::try_from(len).map_err(|_| out.corrupt("negative xerial chunk length"))?;
        let Some(chunk) = after.get(..len) else {
            return Err(out.corrupt("xerial chunk length past the end of the input"));
        };
        raw_block(chunk, out, &mut decoder)?;
        rest = after.get(len..).unwrap_or_default();
    }
    Ok(())
}

/// Checks the 16-byte header at the start of `input` and returns what follows it.
fn skip_header<'a>(input: &'a [u8], out: &BoundedOutput) -> Result<&'a [u8], FormatErrorKind> {
    if !input.starts_with(&XERIAL_MAGIC) {
        return Err(out.corrupt("missing xerial stream header"));
    }
    let version = input
        .get(VERSION_OFFSET..)
        .and_then(read_i32)
        .map(|(v, _)| v);
    match (version, input.get(CHUNKS_OFFSET..)) {
        (Some(v), Some(rest)) if v >= MIN_VERSION => Ok(rest),
        (Some(_), Some(_)) => Err(out.corrupt("incompatible xerial stream version")),
        _ => Err(out.corrupt("truncated xerial stream header")),
    }
}

fn read_i32(b: &[u8]) -> Option<(i32, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((i32::from_be_bytes(*head), rest))
}

/// Decodes one raw snappy block, checking its claimed length against the remaining budget before
/// allocating.
fn raw_block(
    block: &[u8],
    out: &mut BoundedOutput,
    decoder: &mut Decoder,
) -> Result<(), FormatErrorKind> {
    let len = decompress_len(block).map_err(|_| out.corrupt("invalid snappy length preamble"))?;
    if len > out.remaining() {
        return Err(out.too_large());
    }
    // A preamble within the budget can still lie: the output is allocated (and zeroed) before
    // decoding, so refuse lengths the block cannot possibly expand to. The densest snappy op is a
    // 3-byte copy of 64 bytes (21.3x); 32x leaves room to spare.
    if len > block.len().saturating_mul(MAX_EXPANSION) {
        return Err(out.corrupt("snappy length preamble exceeds what the block can hold"));
    }
    let written = out
        .fill(len, |tail| decoder.decompress(block, tail))
        .map_err(|e| out.corrupt(snap_reason(&e)))?;
    if written != len {
        return Err(out.corrupt("snappy block shorter than its length preamble"));
    }
    Ok(())
}

fn snap_reason(e: &snap::Error) -> &'static str {
    match e {
        snap::Error::Header => "invalid snappy length preamble",
        snap::Error::HeaderMismatch { .. } => "snappy block length does not match its preamble",
        snap::Error::Literal { .. } => "snappy literal past the end of the block",
        snap::Error::CopyRead { .. } => "truncated snappy copy operation",
        snap::Error::Offset { .. } => "snappy copy offset out of range",
        snap::Error::TooBig { .. } => "snappy block too large",
        _ => "corrupt snappy block",
    }
}

/// The xerial stream snappy-java writes: header, then one chunk per 32 KiB of input.
pub(super) fn compress(input: &[u8]) -> Vec<u8> {
    let chunks = input.len() / XERIAL_BLOCK_SIZE + 1;
    let mut out =
        Vec::with_capacity(XERIAL_HEADER.len() + max_compress_len(input.len()) + 4 * chunks);
    out.extend_from_slice(&XERIAL_HEADER);
    let mut encoder = Encoder::new();
    let mut scratch = vec![0u8; max_compress_len(XERIAL_BLOCK_SIZE)];
    for chunk in input.chunks(XERIAL_BLOCK_SIZE) {
        let compressed = match encoder.compress(chunk, &mut scratch) {
            Ok(n) => scratch.get(..n),
            Err(_) => None,
        };
        match compressed {
            Some(block) => push_chunk(&mut out, block),
            // Cannot happen for a 32 KiB chunk and a max_compress_len buffer; a literal-only block
            // is still valid snappy.
            None => push_chunk(&mut out, &literal_block(chunk)),
        }
    }
    out
}

fn push_chunk(out: &mut Vec<u8>, block: &[u8]) {
    // Blocks are at most max_compress_len(32 KiB) bytes, far below i32::MAX.
    let len = i32::try_from(block.len()).unwrap_or(i32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(block);
}

/// A raw snappy block holding `data` as one literal (no compression).
fn literal_block(data: &[u8]) -> Vec<u8> {
    let mut block = Vec::with_capacity(data.len() + 10);
    let mut len = data.len();
    // Preamble: the uncompressed length as a little-endian base-128 varint.
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            block.push(byte);
            break;
        }
        block.push(byte | 0x80);
    }
    if let Some(n_minus_1) = data.len().checked_sub(1) {
        // Literal tag 63 << 2: length - 1 follows as 4 little-endian bytes.
        let n_minus_1 = u32::try_from(n_minus_1).unwrap_or(u32::MAX);
        block.push(0xfc);
        block.extend_from_slice(&le32(n_minus_1));
        block.extend_from_slice(data);
    }
    block
}

#[expect(
    clippy::little_endian_bytes,
    reason = "snappy's literal length is little-endian"
)]
fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_block_decodes() {
        for len in [0usize, 1, 60, 61, 1000, XERIAL_BLOCK_SIZE] {
            let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let block = literal_block(&data);
            assert_eq!(
                snap::raw::Decoder::new().decompress_vec(&block).unwrap(),
                data
            );
        }
    }
}
