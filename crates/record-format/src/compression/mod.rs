//! The four codecs Kafka uses for v2 batches: gzip, snappy (xerial framing), lz4 (Kafka's frame),
//! zstd. Kafka: `o.a.k.common.compress.*`.
//!
//! Decompression takes untrusted input and is bounded by [`DecodeLimits`]: output beyond
//! `max_decompressed_bytes` is [`FormatErrorKind::DecompressedTooLarge`], corrupt input is
//! [`FormatErrorKind::Decompression`], and no size field in the input (snappy's length preamble,
//! an lz4 content size, a zstd frame content size) is trusted for an allocation: the output
//! buffer's capacity never passes the limit (it grows by doubling, so a moving reallocation briefly
//! holds the previous buffer too: at most 1.5 × limit), and each codec holds at most one block of
//! scratch or decoder state beside it (zstd: a window of at most 2^[`zstd::zstd_window_log_max`] bytes
//! inside libzstd).
//!
//! Compression writes the framings Kafka writes (see `kafka-storage-format.md` §2.3) and never
//! fails: should a codec library report an error (they can only do so on misuse), the input is
//! stored uncompressed inside the same framing, which every Kafka reader still decodes.
//!
//! | codec  | written                                                       | read |
//! |--------|---------------------------------------------------------------|------|
//! | gzip   | one RFC 1952 member, header `1f 8b 08 00 00000000 00 ff` as Java's `GZIPOutputStream` | concatenated members; bytes after a member that do not start a gzip header are ignored, as Java does |
//! | snappy | snappy-java xerial framing, 32 KiB blocks                     | xerial (incl. concatenated streams) or one raw snappy block |
//! | lz4    | Kafka's `Lz4BlockOutputStream` frame, 64 KiB blocks           | any LZ4 frame with independent blocks, optional block/content checksums and content size |
//! | zstd   | one streaming frame, level 3, no content size, no checksum    | any sequence of zstd frames (skippable frames too) |

mod gzip;
mod lz4;
mod snappy;
mod zstd;

use std::io::{self, Read};

use crate::error::FormatErrorKind;
use crate::wire::DEFAULT_MAX_DECOMPRESSED_BYTES;

pub use self::gzip::{GZIP_DEFAULT_LEVEL, GZIP_HEADER};
pub use self::lz4::{
    lz4_header_checksum, lz4_header_checksum_broken, LZ4_FRAME_MAGIC, LZ4_KAFKA_BD, LZ4_KAFKA_FLG,
};
pub use self::snappy::{
    decompress_snappy_raw, decompress_snappy_xerial, XERIAL_HEADER, XERIAL_MAGIC,
};
pub use self::zstd::ZSTD_DEFAULT_LEVEL;

pub use crate::wire::CompressionType;

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
///
/// Output longer than `limits.max_decompressed_bytes` is
/// [`FormatErrorKind::DecompressedTooLarge`]; input the codec rejects is
/// [`FormatErrorKind::Decompression`]. Never panics, and never allocates for more output than the
/// limit, whatever sizes the input claims (see the module docs for the exact memory bound).
pub fn decompress(
    codec: CompressionType,
    input: &[u8],
    limits: &DecodeLimits,
) -> Result<Vec<u8>, FormatErrorKind> {
    let mut out = BoundedOutput::new(codec, limits);
    match codec {
        CompressionType::None => out.extend(input)?,
        CompressionType::Gzip => gzip::decompress(input, &mut out)?,
        CompressionType::Snappy => snappy::decompress(input, &mut out)?,
        CompressionType::Lz4 => lz4::decompress(input, &mut out)?,
        CompressionType::Zstd => zstd::decompress(input, &mut out, limits)?,
    }
    Ok(out.into_inner())
}

/// Compresses `input` the way Kafka's producer does for `codec`, at Kafka's default level
/// (gzip 6, zstd 3; snappy and lz4 have no level here).
pub fn compress(codec: CompressionType, input: &[u8]) -> Vec<u8> {
    match codec {
        CompressionType::None => input.to_vec(),
        CompressionType::Gzip => gzip::compress(input, GZIP_DEFAULT_LEVEL),
        CompressionType::Snappy => snappy::compress(input),
        CompressionType::Lz4 => lz4::compress(input),
        CompressionType::Zstd => zstd::compress(input, ZSTD_DEFAULT_LEVEL),
    }
}

/// Like [`compress`], with a codec level as Kafka's `compression.<codec>.level` takes it:
/// gzip 1..=9 (Kafka's default −1 means 6; out-of-range values are clamped), zstd any level libzstd
/// accepts (clamped to its range; 0 means libzstd's default, 3). Snappy and lz4 ignore the level
/// (lz4_flex has only the fast compressor; Kafka's lz4 levels select lz4-java's HC compressor,
/// whose output any lz4 reader decodes the same).
pub fn compress_with_level(codec: CompressionType, input: &[u8], level: i32) -> Vec<u8> {
    match codec {
        CompressionType::Gzip => gzip::compress(input, level),
        CompressionType::Zstd => zstd::compress(input, level),
        CompressionType::None | CompressionType::Snappy | CompressionType::Lz4 => {
            compress(codec, input)
        }
    }
}

/// Bytes read from a decoder per call when a codec is streamed.
const READ_CHUNK: usize = 64 * 1024;

/// The output of one decompression: a `Vec` that refuses to grow past the limit and whose capacity
/// never exceeds it.
#[derive(Debug)]
pub(crate) struct BoundedOutput {
    buf: Vec<u8>,
    limit: usize,
    codec: CompressionType,
}

impl BoundedOutput {
    fn new(codec: CompressionType, limits: &DecodeLimits) -> Self {
        BoundedOutput {
            buf: Vec::new(),
            limit: limits.max_decompressed_bytes,
            codec,
        }
    }

    fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    /// Bytes written so far.
    fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes that may still be written.
    fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.buf.len())
    }

    /// Everything written so far.
    fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The error for output past the limit.
    fn too_large(&self) -> FormatErrorKind {
        FormatErrorKind::DecompressedTooLarge {
            codec: self.codec,
            limit: self.limit,
        }
    }

    /// A [`FormatErrorKind::Decompression`] for this codec.
    fn corrupt(&self, reason: impl Into<String>) -> FormatErrorKind {
        corrupt(self.codec, reason)
    }

    /// Grows the capacity to hold `additional` more bytes: doubling, but never past the limit.
    /// The caller has checked `additional <= self.remaining()`.
    fn reserve(&mut self, additional: usize) {
        let needed = self.buf.len().saturating_add(additional);
        if needed <= self.buf.capacity() {
            return;
        }
        let target = self
            .buf
            .capacity()
            .saturating_mul(2)
            .max(needed)
            .min(self.limit.max(needed));
        self.buf
            .reserve_exact(target.saturating_sub(self.buf.len()));
    }

    /// Appends `data`, or fails with `DecompressedTooLarge` (appending nothing).
    fn extend(&mut self, data: &[u8]) -> Result<(), FormatErrorKind> {
        if data.len() > self.remaining() {
            return Err(self.too_large());
        }
        self.reserve(data.len());
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// Lets `fill` write at most `max` bytes (`max <= remaining()`, checked by the caller) directly
    /// into the output; `fill` returns how many it wrote, or an error. On error nothing is added.
    fn fill<E>(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let start = self.buf.len();
        let max = max.min(self.remaining());
        self.reserve(max);
        self.buf.resize(start.saturating_add(max), 0);
        let result = match self.buf.get_mut(start..) {
            Some(tail) => fill(tail),
            None => fill(&mut []),
        };
        match result {
            Ok(written) => {
                self.buf.truncate(start.saturating_add(written.min(max)));
                Ok(written.min(max))
            }
            Err(e) => {
                self.buf.truncate(start);
                Err(e)
            }
        }
    }

    /// Reads `reader` to its end through one scratch buffer of at most [`READ_CHUNK`] bytes
    /// (allocated and zeroed once, so a reader that returns a few bytes per call costs no more than
    /// the bytes it returns). Once the limit is reached, one more byte is asked for: if the reader
    /// has it, the output is too large (the `Read::take(limit + 1)` idea, without ever holding the
    /// extra byte in the output).
    fn read_to_end<R: Read>(
        &mut self,
        mut reader: R,
        map_err: impl Fn(io::Error) -> FormatErrorKind,
    ) -> Result<(), FormatErrorKind> {
        let mut scratch = vec![0u8; self.remaining().saturating_add(1).min(READ_CHUNK)];
        loop {
            let want = self.remaining().clamp(1, READ_CHUNK);
            let Some(window) = scratch.get_mut(..want) else {
                return Err(self.corrupt("internal: read window"));
            };
            match reader.read(window) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    // A conforming reader returns n <= want; never trust more.
                    let got = window.get(..n).unwrap_or(window);
                    self.extend(got)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(map_err(e)),
            }
        }
    }
}

/// A [`FormatErrorKind::Decompression`] for `codec`.
fn corrupt(codec: CompressionType, reason: impl Into<String>) -> FormatErrorKind {
    FormatErrorKind::Decompression {
        codec,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(limit: usize) -> BoundedOutput {
        BoundedOutput::new(
            CompressionType::Gzip,
            &DecodeLimits {
                max_decompressed_bytes: limit,
            },
        )
    }

    #[test]
    fn bounded_output_capacity_never_exceeds_limit() {
        let mut o = out(1000);
        for _ in 0..10 {
            o.extend(&[7u8; 100]).unwrap();
            assert!(o.buf.capacity() <= 1000, "{}", o.buf.capacity());
        }
        assert_eq!(o.remaining(), 0);
        assert!(matches!(
            o.extend(&[1]),
            Err(FormatErrorKind::DecompressedTooLarge { limit: 1000, .. })
        ));
        assert_eq!(o.len(), 1000);
    }

    #[test]
    fn read_to_end_probes_one_byte_past_the_limit() {
        let mut o = out(10);
        o.read_to_end(&[1u8; 10][..], |_| corrupt(CompressionType::Gzip, "io"))
            .unwrap();
        assert_eq!(o.into_inner(), vec![1u8; 10]);

        let mut o = out(10);
        let r = o.read_to_end(&[1u8; 11][..], |_| corrupt(CompressionType::Gzip, "io"));
        assert!(matches!(
            r,
            Err(FormatErrorKind::DecompressedTooLarge { limit: 10, .. })
        ));
        assert!(o.buf.capacity() <= 10);

        let mut o = out(0);
        o.read_to_end(&[][..], |_| corrupt(CompressionType::Gzip, "io"))
            .unwrap();
        let r = o.read_to_end(&[1u8][..], |_| corrupt(CompressionType::Gzip, "io"));
        assert!(matches!(
            r,
            Err(FormatErrorKind::DecompressedTooLarge { limit: 0, .. })
        ));
    }

    #[test]
    fn fill_discards_on_error() {
        let mut o = out(100);
        o.extend(b"abc").unwrap();
        let r: Result<usize, ()> = o.fill(50, |tail| {
            tail[0] = 9;
            Err(())
        });
        assert!(r.is_err());
        assert_eq!(o.as_slice(), b"abc");
        let n: Result<usize, ()> = o.fill(50, |tail| {
            tail[..2].copy_from_slice(b"de");
            Ok(2)
        });
        assert_eq!(n, Ok(2));
        assert_eq!(o.as_slice(), b"abcde");
    }
}
