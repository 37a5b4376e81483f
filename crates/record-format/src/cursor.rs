//! A panic-free cursor over borrowed bytes: big-endian integers and Kafka's zig-zag varints.
//!
//! `Cursor` has no method that can panic: every read checks the remaining length and returns a
//! [`FormatError`] positioned at the absolute byte where the short or malformed read started.

use crate::error::{FormatError, FormatErrorKind, Result};

/// Reads from `&'a [u8]`, tracking the absolute position of the first byte (`base`) so errors can
/// name file positions.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor over `data` whose first byte is at absolute position `base`.
    pub fn new(data: &'a [u8], base: u64) -> Self {
        Cursor { data, pos: 0, base }
    }

    /// Absolute position of the next byte to read.
    pub fn position(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Index (within the slice) of the next byte to read.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// Whether no byte is left.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The bytes not yet read.
    pub fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// An error of `kind` at the cursor's current position.
    pub fn error(&self, kind: FormatErrorKind) -> FormatError {
        FormatError::new(kind, self.position())
    }

    /// Takes the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n);
        match end.and_then(|end| self.data.get(self.pos..end)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.error(FormatErrorKind::Truncated {
                need: n as u64,
                have: self.remaining() as u64,
            })),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// Reads an `i8`.
    pub fn i8(&mut self) -> Result<i8> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `i16`.
    pub fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `i32`.
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `i64`.
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// Reads an unsigned varint (at most 5 bytes), as Kafka's `ByteUtils.readUnsignedVarint`.
    pub fn unsigned_varint(&mut self) -> Result<u32> {
        let start = self.position();
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.array::<1>()?[0];
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(FormatError::new(FormatErrorKind::BadVarint, start))
    }

    /// Reads an unsigned varlong (at most 10 bytes).
    pub fn unsigned_varlong(&mut self) -> Result<u64> {
        let start = self.position();
        let mut value: u64 = 0;
        for i in 0..10 {
            let b = self.array::<1>()?[0];
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(FormatError::new(FormatErrorKind::BadVarint, start))
    }

    /// Reads a zig-zag signed varint (Kafka `ByteUtils.readVarint`).
    pub fn varint(&mut self) -> Result<i32> {
        let u = self.unsigned_varint()?;
        Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
    }

    /// Reads a zig-zag signed varlong (Kafka `ByteUtils.readVarlong`).
    pub fn varlong(&mut self) -> Result<i64> {
        let u = self.unsigned_varlong()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
}

/// Appends an unsigned varint.
pub fn write_unsigned_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends an unsigned varlong.
pub fn write_unsigned_varlong(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a zig-zag varint.
pub fn write_varint(out: &mut Vec<u8>, v: i32) {
    write_unsigned_varint(out, ((v << 1) ^ (v >> 31)) as u32);
}

/// Appends a zig-zag varlong.
pub fn write_varlong(out: &mut Vec<u8>, v: i64) {
    write_unsigned_varlong(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Bytes a zig-zag varint of `v` takes.
pub fn size_of_varint(v: i32) -> usize {
    let mut u = ((v << 1) ^ (v >> 31)) as u32;
    let mut n = 1;
    while u >= 0x80 {
        u >>= 7;
        n += 1;
    }
    n
}

/// Bytes a zig-zag varlong of `v` takes.
pub fn size_of_varlong(v: i64) -> usize {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while u >= 0x80 {
        u >>= 7;
        n += 1;
    }
    n
}

/// The `N` bytes at byte `at` of `b`, or `N` zero bytes if `b` ends before `at + N`: for
/// callers that checked the length first (whole index entries, batch headers). The one
/// definition of these fixed-position reads; [`Cursor`] is the checked, sequential reader.
#[inline]
pub fn array_at<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = at.checked_add(N).and_then(|end| b.get(at..end)) {
        out.copy_from_slice(s);
    }
    out
}

/// Big-endian `i32` at byte `at` of `b`, or 0 if `b` ends before `at + 4` (see [`array_at`]).
#[inline]
pub fn be_i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(array_at(b, at))
}

/// Big-endian `u32` at byte `at` of `b`, or 0 if out of range (see [`array_at`]).
#[inline]
pub fn be_u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array_at(b, at))
}

/// Big-endian `i64` at byte `at` of `b`, or 0 if out of range (see [`array_at`]).
#[inline]
pub fn be_i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(array_at(b, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_matches_kafka_examples() {
        for (v, enc) in [(-1i32, 0x01u8), (0, 0x00), (1, 0x02), (4, 0x08), (17, 0x22)] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out, vec![enc], "encoding {v}");
            assert_eq!(Cursor::new(&out, 0).varint().unwrap(), v);
        }
    }

    #[test]
    fn varint_round_trips_extremes() {
        for v in [i32::MIN, i32::MAX, -64, 63, 64, -65, 300] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out.len(), size_of_varint(v));
            assert_eq!(Cursor::new(&out, 0).varint().unwrap(), v);
        }
        for v in [i64::MIN, i64::MAX, -1, 0, 1 << 40] {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            assert_eq!(out.len(), size_of_varlong(v));
            assert_eq!(Cursor::new(&out, 0).varlong().unwrap(), v);
        }
    }

    #[test]
    fn overlong_varint_is_bad_varint_at_its_start() {
        let data = [0xffu8; 6];
        let err = Cursor::new(&data, 100).varint().unwrap_err();
        assert_eq!(err.kind, FormatErrorKind::BadVarint);
        assert_eq!(err.position, 100);
    }

    #[test]
    fn short_read_is_truncated_with_position() {
        let data = [0u8; 3];
        let mut c = Cursor::new(&data, 10);
        c.i8().unwrap();
        let err = c.i32().unwrap_err();
        assert_eq!(err.kind, FormatErrorKind::Truncated { need: 4, have: 2 });
        assert_eq!(err.position, 11);
    }
}
