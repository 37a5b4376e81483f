//! gzip (codec 1): RFC 1952, as Java's `GZIPOutputStream` / `GZIPInputStream` handle it.
//!
//! ```text
//! member = header(10) [FEXTRA] [FNAME] [FCOMMENT] [FHCRC] deflate-data CRC-32(4, LE) ISIZE(4, LE)
//! header  = 1f 8b | CM 08 | FLG | MTIME(4) | XFL | OS
//! ```
//!
//! Java writes FLG 0, MTIME 0, XFL 0 and OS 0xff ("unknown") whatever the level, and we write the
//! same ten bytes ([`GZIP_HEADER`]). The deflate data comes from flate2; it decodes everywhere but
//! is not byte-identical to the zlib Java uses (see the test `gzip_output_vs_java`).
//!
//! Reading follows `GZIPInputStream`: members may be concatenated, and bytes after a member that do
//! not form a complete gzip header are ignored (Java's `readTrailer` swallows the failed header
//! read). Empty input is an error (Java: `EOFException`).

use std::io::Write;

use flate2::write::DeflateEncoder;
use flate2::Compression;

use super::BoundedOutput;
use crate::error::FormatErrorKind;

/// The header Java's `GZIPOutputStream` writes: magic, CM = 8 (deflate), FLG = 0, MTIME = 0,
/// XFL = 0, OS = 0xff.
pub const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff];

/// Kafka's default gzip level (`Deflater.DEFAULT_COMPRESSION`, which zlib maps to 6).
pub const GZIP_DEFAULT_LEVEL: i32 = 6;

const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;

/// Largest payload of one stored (uncompressed) deflate block.
const STORED_BLOCK_MAX: usize = 0xffff;

pub(super) fn decompress(input: &[u8], out: &mut BoundedOutput) -> Result<(), FormatErrorKind> {
    if input.is_empty() {
        return Err(out.corrupt("empty input"));
    }
    let mut rest = input;
    loop {
        let mut decoder = flate2::bufread::GzDecoder::new(rest);
        out.read_to_end(&mut decoder, |e| {
            super::corrupt(super::CompressionType::Gzip, e.to_string())
        })?;
        rest = decoder.into_inner();
        if rest.is_empty() || member_header_len(rest).is_none() {
            // Java ignores whatever follows a member unless it is a readable gzip header.
            return Ok(());
        }
    }
}

/// The length of the gzip member header at the start of `b`, or `None` if `b` does not start with
/// a complete header that Java's `GZIPInputStream.readHeader` would accept.
fn member_header_len(b: &[u8]) -> Option<usize> {
    let flags = match b.get(..10)? {
        [0x1f, 0x8b, 0x08, flags, ..] => *flags,
        _ => return None,
    };
    let mut pos = 10usize;
    if flags & FEXTRA != 0 {
        let xlen = match b.get(pos..pos.checked_add(2)?)? {
            [lo, hi] => usize::from(*lo) | usize::from(*hi) << 8,
            _ => return None,
        };
        pos = pos.checked_add(2)?.checked_add(xlen)?;
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            let nul = b.get(pos..)?.iter().position(|&c| c == 0)?;
            pos = pos.checked_add(nul)?.checked_add(1)?;
        }
    }
    if flags & FHCRC != 0 {
        let stored = match b.get(pos..pos.checked_add(2)?)? {
            [lo, hi] => u32::from(*lo) | u32::from(*hi) << 8,
            _ => return None,
        };
        if crc32fast::hash(b.get(..pos)?) & 0xffff != stored {
            return None;
        }
        pos = pos.checked_add(2)?;
    }
    (pos <= b.len()).then_some(pos)
}

/// One gzip member holding `input` deflated at `level` (Kafka's range 1..=9; −1 and anything
/// outside the range map as documented on [`super::compress_with_level`]).
pub(super) fn compress(input: &[u8], level: i32) -> Vec<u8> {
    let level = match level {
        -1 => GZIP_DEFAULT_LEVEL,
        l => l.clamp(1, 9),
    };
    let level = Compression::new(u32::try_from(level).unwrap_or(6));
    let mut out = Vec::with_capacity(input.len() / 2 + 64);
    out.extend_from_slice(&GZIP_HEADER);
    let mut encoder = DeflateEncoder::new(out, level);
    let deflated = encoder.write_all(input).and_then(|()| encoder.finish());
    let mut out = match deflated {
        Ok(out) => out,
        // Writing into a Vec cannot fail; should the deflater report misuse anyway, fall back to
        // stored blocks rather than panic.
        Err(_) => stored_deflate(input),
    };
    push_trailer(&mut out, input);
    out
}

/// The header followed by `input` in stored (uncompressed) deflate blocks.
fn stored_deflate(input: &[u8]) -> Vec<u8> {
    let blocks = input.len() / STORED_BLOCK_MAX + 1;
    let mut out = Vec::with_capacity(GZIP_HEADER.len() + input.len() + 5 * blocks + 8);
    out.extend_from_slice(&GZIP_HEADER);
    let mut chunks = input.chunks(STORED_BLOCK_MAX).peekable();
    if chunks.peek().is_none() {
        // BFINAL = 1, BTYPE = 00, LEN = 0, NLEN = 0xffff.
        out.extend_from_slice(&[0x01, 0x00, 0x00, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let len = u16::try_from(chunk.len()).unwrap_or(u16::MAX);
        out.push(u8::from(last));
        out.extend_from_slice(&le16(len));
        out.extend_from_slice(&le16(!len));
        out.extend_from_slice(chunk);
    }
    out
}

/// CRC-32 and ISIZE (length mod 2^32), both little-endian.
fn push_trailer(out: &mut Vec<u8>, input: &[u8]) {
    out.extend_from_slice(&le32(crc32fast::hash(input)));
    // ISIZE is the length modulo 2^32 by definition, so truncating is the intent.
    out.extend_from_slice(&le32(input.len() as u32));
}

#[expect(
    clippy::little_endian_bytes,
    reason = "gzip and deflate store integers little-endian (RFC 1951/1952)"
)]
fn le16(v: u16) -> [u8; 2] {
    v.to_le_bytes()
}

#[expect(
    clippy::little_endian_bytes,
    reason = "gzip stores integers little-endian (RFC 1952)"
)]
fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// Decodes one member with flate2's `MultiGzDecoder`, as a cross-check of our member loop.
#[cfg(test)]
fn reference_decode(input: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    flate2::read::MultiGzDecoder::new(input).read_to_end(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_fallback_decodes() {
        for len in [
            0usize,
            1,
            1000,
            STORED_BLOCK_MAX,
            STORED_BLOCK_MAX + 1,
            200_000,
        ] {
            let input: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut gz = stored_deflate(&input);
            push_trailer(&mut gz, &input);
            assert_eq!(gz[..10], GZIP_HEADER);
            assert_eq!(reference_decode(&gz).unwrap(), input, "len {len}");
        }
    }

    #[test]
    fn header_parser() {
        assert_eq!(member_header_len(&GZIP_HEADER), Some(10));
        assert_eq!(member_header_len(&GZIP_HEADER[..9]), None);
        let mut named = GZIP_HEADER.to_vec();
        named[3] = FNAME | FEXTRA;
        named.extend_from_slice(&[2, 0, 0xaa, 0xbb]);
        named.extend_from_slice(b"name\0rest");
        assert_eq!(member_header_len(&named), Some(19));
        named.truncate(18);
        assert_eq!(member_header_len(&named), None);
        let mut hcrc = GZIP_HEADER.to_vec();
        hcrc[3] = FHCRC;
        let crc = crc32fast::hash(&hcrc) & 0xffff;
        hcrc.extend_from_slice(&[crc as u8, (crc >> 8) as u8]);
        assert_eq!(member_header_len(&hcrc), Some(12));
        hcrc[10] ^= 1;
        assert_eq!(member_header_len(&hcrc), None);
        assert_eq!(member_header_len(b"\x1f\x8b\x07\0\0\0\0\0\0\xff"), None);
    }
}
