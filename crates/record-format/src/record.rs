//! Records inside a v2 batch (Kafka `DefaultRecord`, `DefaultRecordBatch.RecordIterator`).
//!
//! ```text
//! Record (varint = zig-zag)
//!   length            varint   bytes of the body that follows
//!   attributes        int8     unused
//!   timestampDelta    varlong  relative to the batch's baseTimestamp
//!   offsetDelta       varint   relative to the batch's baseOffset
//!   keyLength         varint   < 0: null key
//!   key               bytes
//!   valueLength       varint   < 0: null value
//!   value             bytes
//!   headersCount      varint   < 0 or > bytes left: invalid
//!   per header: keyLength varint (< 0: invalid), key, valueLength varint (< 0: null), value
//! ```
//!
//! [`Records`] holds the records section of one batch, borrowed for uncompressed batches and
//! decompressed once into an owned buffer otherwise; [`Records::iter`] parses it record by record
//! without allocating. A [`Record`] borrows its key, value and headers from that buffer; headers
//! are validated when the record is parsed and decoded again lazily by [`Record::headers`].
//!
//! **Error positions.** For uncompressed batches every error names the absolute byte (file
//! position) of the offending field. For compressed batches the decompressed bytes have no file
//! position, so every record error is positioned at the start of the batch's records section
//! (batch position + 61).

use std::borrow::Cow;

use crate::batch::{increment_sequence, RecordBatch, TimestampType};
use crate::compression::{decompress, CompressionType, DecodeLimits};
use crate::cursor::Cursor;
use crate::error::{FormatError, FormatErrorKind, Result};
use crate::wire::{RECORDS_COUNT_OFFSET, RECORD_BATCH_OVERHEAD};

/// The records section bytes: borrowed from the batch or owned after decompression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsBuf<'a> {
    /// Uncompressed: the batch's own bytes 61..end.
    Borrowed(&'a [u8]),
    /// Compressed: the decompressed records.
    Owned(Vec<u8>),
}

impl RecordsBuf<'_> {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            RecordsBuf::Borrowed(b) => b,
            RecordsBuf::Owned(v) => v,
        }
    }
}

/// Batch-level values every record needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordContext {
    base_offset: i64,
    base_timestamp: i64,
    base_sequence: i32,
    log_append_time: Option<i64>,
    pub(crate) count: i32,
    /// Absolute position of the records section's first byte.
    pub(crate) section_position: u64,
    /// Whether positions inside the buffer map to file positions (false when decompressed).
    positions_exact: bool,
}

impl RecordContext {
    /// The context of `batch`'s records; a negative declared count is an error (Kafka's
    /// `DefaultRecordBatch.iterator` refuses it before reading any record).
    pub(crate) fn of(batch: &RecordBatch<'_>, positions_exact: bool) -> Result<Self> {
        let count = batch.records_count();
        if count < 0 {
            return Err(FormatError::new(
                FormatErrorKind::NegativeRecordCount(count),
                batch.position() + RECORDS_COUNT_OFFSET as u64,
            ));
        }
        let log_append_time =
            (batch.timestamp_type() == TimestampType::LogAppendTime).then(|| batch.max_timestamp());
        Ok(RecordContext {
            base_offset: batch.base_offset(),
            base_timestamp: batch.base_timestamp(),
            base_sequence: batch.base_sequence(),
            log_append_time,
            count,
            section_position: batch.position() + RECORD_BATCH_OVERHEAD as u64,
            positions_exact,
        })
    }

    /// `baseOffset + offsetDelta`.
    pub(crate) fn offset(&self, offset_delta: i32) -> i64 {
        self.base_offset.wrapping_add(i64::from(offset_delta))
    }

    /// The batch's `maxTimestamp` for LogAppendTime batches, else `baseTimestamp +
    /// timestampDelta`.
    pub(crate) fn timestamp(&self, timestamp_delta: i64) -> i64 {
        self.log_append_time
            .unwrap_or_else(|| self.base_timestamp.wrapping_add(timestamp_delta))
    }

    /// `incrementSequence(baseSequence, offsetDelta)` with a base sequence ≥ 0, else −1.
    pub(crate) fn sequence(&self, offset_delta: i32) -> i32 {
        if self.base_sequence >= 0 {
            increment_sequence(self.base_sequence, offset_delta)
        } else {
            crate::wire::NO_SEQUENCE
        }
    }
}

impl<'a> RecordBatch<'a> {
    /// The records of this batch, decompressing once (bounded by `limits`) when the batch is
    /// compressed. See [`Records`] for the read rules and error positions.
    ///
    /// Errors here: `UnknownCompression`, `NegativeRecordCount` (at the count field), and
    /// decompression failures (at the start of the records section, `position + 61`). As in Kafka,
    /// a batch with `recordsCount == 0` yields no records and its records section is not read.
    pub fn records(&self, limits: &DecodeLimits) -> Result<Records<'a>> {
        Records::new(self, limits)
    }
}

/// The records of one batch. Obtain with [`RecordBatch::records`]; iterate with [`Records::iter`]
/// (or `for r in &records`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records<'a> {
    buf: RecordsBuf<'a>,
    ctx: RecordContext,
    compression: CompressionType,
}

impl<'a> Records<'a> {
    pub(crate) fn new(batch: &RecordBatch<'a>, limits: &DecodeLimits) -> Result<Self> {
        let compression = batch.compression()?;
        let ctx = RecordContext::of(batch, compression == CompressionType::None)?;
        let raw = batch.records_bytes();
        let buf = if ctx.count == 0 {
            // Kafka returns an empty iterator for count 0 without looking at the records section.
            RecordsBuf::Borrowed(&[])
        } else if compression == CompressionType::None {
            RecordsBuf::Borrowed(raw)
        } else {
            RecordsBuf::Owned(
                decompress(compression, raw, limits)
                    .map_err(|kind| FormatError::new(kind, ctx.section_position))?,
            )
        };
        Ok(Records {
            buf,
            ctx,
            compression,
        })
    }

    /// Declared record count (`recordsCount`, ≥ 0).
    pub fn declared_count(&self) -> i32 {
        self.ctx.count
    }

    /// The batch's codec.
    pub fn compression(&self) -> CompressionType {
        self.compression
    }

    /// The (decompressed) records section bytes.
    pub fn data(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The buffer itself (borrowed or owned).
    pub fn buf(&self) -> &RecordsBuf<'a> {
        &self.buf
    }

    /// Iterates the records, borrowing from `self`. Yields at most one error, then ends.
    pub fn iter(&self) -> RecordIter<'_> {
        RecordIter::new(self.buf.as_slice(), self.ctx)
    }

    /// For uncompressed batches, an iterator whose records borrow from the batch bytes (`'a`)
    /// rather than from `self`; `None` for decompressed buffers.
    pub fn iter_borrowed(&self) -> Option<RecordIter<'a>> {
        match self.buf {
            RecordsBuf::Borrowed(b) => Some(RecordIter::new(b, self.ctx)),
            RecordsBuf::Owned(_) => None,
        }
    }

    /// Parses every record, returning them or the first error.
    pub fn collect_all(&self) -> Result<Vec<Record<'_>>> {
        self.iter().collect()
    }
}

impl<'r> IntoIterator for &'r Records<'_> {
    type Item = Result<Record<'r>>;
    type IntoIter = RecordIter<'r>;
    fn into_iter(self) -> RecordIter<'r> {
        self.iter()
    }
}

/// Iterator over the records of a [`Records`] buffer, applying every Kafka read rule: the
/// declared count must be reached (`RecordCountMismatch`, "premature EOF") and no byte may remain
/// after it (`TrailingBytes`). Fused after the first error.
#[derive(Debug, Clone)]
pub struct RecordIter<'r> {
    cursor: Cursor<'r>,
    ctx: RecordContext,
    read: i32,
    done: bool,
}

impl<'r> RecordIter<'r> {
    fn new(data: &'r [u8], ctx: RecordContext) -> Self {
        RecordIter {
            cursor: Cursor::new(data, ctx.section_position),
            ctx,
            read: 0,
            done: false,
        }
    }

    fn pos(&self, exact: u64) -> u64 {
        if self.ctx.positions_exact {
            exact
        } else {
            self.ctx.section_position
        }
    }

    fn fix(&self, e: FormatError) -> FormatError {
        FormatError::new(e.kind, self.pos(e.position))
    }

    fn next_inner(&mut self) -> Result<Record<'r>> {
        let parts = next_record(&mut self.cursor, self.ctx.count, &mut self.read)
            .map_err(|e| self.fix(e))?;
        let (position, key_position, value_position) = if self.ctx.positions_exact {
            (parts.position, parts.key_position, parts.value_position)
        } else {
            let p = self.ctx.section_position;
            (p, p, p)
        };
        Ok(Record {
            position,
            size_in_bytes: parts.size_in_bytes as usize,
            attributes: parts.attributes,
            timestamp_delta: parts.timestamp_delta,
            offset_delta: parts.offset_delta,
            offset: self.ctx.offset(parts.offset_delta),
            timestamp: self.ctx.timestamp(parts.timestamp_delta),
            sequence: self.ctx.sequence(parts.offset_delta),
            key: parts.key,
            value: parts.value,
            key_position,
            value_position,
            header_count: parts.header_count,
            headers_data: parts.headers,
        })
    }
}

impl<'r> Iterator for RecordIter<'r> {
    type Item = Result<Record<'r>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.read >= self.ctx.count {
            return None;
        }
        let r = self.next_inner();
        if r.is_err() {
            self.done = true;
        }
        Some(r)
    }
}

impl std::iter::FusedIterator for RecordIter<'_> {}

/// Where records are parsed from: the records section in memory (a [`Cursor`]) or read from a
/// stream ([`crate::RecordReader`]). The framing rules ([`next_record`],
/// [`parse_record`], [`read_header`]) are written once, over this.
pub(crate) trait RecordSource {
    /// A key or value: the borrowed bytes, or where they are.
    type Field;
    /// A header key or value: borrowed, or read.
    type Small;
    /// A record's headers: their validated bytes, or the headers read.
    type Headers;
    /// A format error, or also an I/O error.
    type Error: From<FormatError>;

    /// Absolute position of the next byte.
    fn position(&self) -> u64;
    /// Bytes left in the records section.
    fn remaining(&self) -> u64;
    /// An `int8`.
    fn i8(&mut self) -> std::result::Result<i8, Self::Error>;
    /// A zig-zag varint.
    fn varint(&mut self) -> std::result::Result<i32, Self::Error>;
    /// A zig-zag varlong.
    fn varlong(&mut self) -> std::result::Result<i64, Self::Error>;
    /// The next `n` bytes as a key or value (`n <= remaining`).
    fn field(&mut self, n: usize) -> std::result::Result<Self::Field, Self::Error>;
    /// The next `n` bytes of a header (`n <= remaining`).
    fn small(&mut self, n: usize) -> std::result::Result<Self::Small, Self::Error>;
    /// `count` headers, each read with [`read_header`].
    fn headers(&mut self, count: usize) -> std::result::Result<Self::Headers, Self::Error>;
}

impl<'r> RecordSource for Cursor<'r> {
    type Field = &'r [u8];
    type Small = &'r [u8];
    type Headers = &'r [u8];
    type Error = FormatError;

    fn position(&self) -> u64 {
        Cursor::position(self)
    }
    fn remaining(&self) -> u64 {
        Cursor::remaining(self) as u64
    }
    fn i8(&mut self) -> Result<i8> {
        Cursor::i8(self)
    }
    fn varint(&mut self) -> Result<i32> {
        Cursor::varint(self)
    }
    fn varlong(&mut self) -> Result<i64> {
        Cursor::varlong(self)
    }
    fn field(&mut self, n: usize) -> Result<&'r [u8]> {
        self.bytes(n)
    }
    fn small(&mut self, n: usize) -> Result<&'r [u8]> {
        self.bytes(n)
    }
    /// The headers' bytes, checked and then decoded again lazily by [`Record::headers`].
    fn headers(&mut self, count: usize) -> Result<&'r [u8]> {
        let data = self.rest();
        let start = self.offset();
        for _ in 0..count {
            read_header(self)?;
        }
        Ok(data.get(..self.offset() - start).unwrap_or(&[]))
    }
}

/// A record's fields as parsed, before the batch's context is applied.
pub(crate) struct RecordParts<S: RecordSource> {
    /// Absolute position of the length varint.
    pub(crate) position: u64,
    /// Bytes the record takes, length varint included.
    pub(crate) size_in_bytes: u64,
    pub(crate) attributes: i8,
    pub(crate) timestamp_delta: i64,
    pub(crate) offset_delta: i32,
    pub(crate) key: Option<S::Field>,
    pub(crate) key_position: u64,
    pub(crate) value: Option<S::Field>,
    pub(crate) value_position: u64,
    pub(crate) header_count: usize,
    pub(crate) headers: S::Headers,
}

/// One step of Kafka's record iteration (`DefaultRecordBatch.RecordIterator`) after `read` of
/// `declared` records: the declared count must be reached (`RecordCountMismatch`, "premature
/// EOF") and no byte may remain after it (`TrailingBytes`).
pub(crate) fn next_record<S: RecordSource>(
    s: &mut S,
    declared: i32,
    read: &mut i32,
) -> std::result::Result<RecordParts<S>, S::Error> {
    if s.remaining() == 0 {
        return Err(FormatError::new(
            FormatErrorKind::RecordCountMismatch {
                declared,
                found: *read,
            },
            s.position(),
        )
        .into());
    }
    let record = parse_record(s)?;
    *read += 1;
    if *read == declared && s.remaining() != 0 {
        return Err(
            FormatError::new(FormatErrorKind::TrailingBytes(s.remaining()), s.position()).into(),
        );
    }
    Ok(record)
}

/// Reads a length-prefixed field with `take` (`< 0` ⇒ `None`), and the position of its first
/// byte. A length beyond the remaining bytes is `LengthOutOfRange` at the length varint.
fn read_nullable<S: RecordSource, T>(
    c: &mut S,
    take: impl FnOnce(&mut S, usize) -> std::result::Result<T, S::Error>,
) -> std::result::Result<(Option<T>, u64), S::Error> {
    let at = c.position();
    let len = c.varint()?;
    let data_at = c.position();
    if len < 0 {
        return Ok((None, data_at));
    }
    let remaining = c.remaining();
    if len as u64 > remaining {
        return Err(FormatError::new(
            FormatErrorKind::LengthOutOfRange {
                declared: i64::from(len),
                remaining,
            },
            at,
        )
        .into());
    }
    Ok((Some(take(c, len as usize)?), data_at))
}

/// A header's key and nullable value, as a [`RecordSource`] gives them.
pub(crate) type HeaderParts<S> = (
    <S as RecordSource>::Small,
    Option<<S as RecordSource>::Small>,
);

/// Parses one header; Kafka: negative key length is invalid, negative value length is null.
pub(crate) fn read_header<S: RecordSource>(
    c: &mut S,
) -> std::result::Result<HeaderParts<S>, S::Error> {
    let at = c.position();
    let key_len = c.varint()?;
    if key_len < 0 {
        return Err(FormatError::new(FormatErrorKind::NegativeHeaderKeyLength(key_len), at).into());
    }
    let remaining = c.remaining();
    if key_len as u64 > remaining {
        return Err(FormatError::new(
            FormatErrorKind::LengthOutOfRange {
                declared: i64::from(key_len),
                remaining,
            },
            at,
        )
        .into());
    }
    let key = c.small(key_len as usize)?;
    let (value, _) = read_nullable(c, S::small)?;
    Ok((key, value))
}

/// Kafka `DefaultRecord.readFrom`: the body is parsed against all remaining bytes, then its
/// consumed size must equal the declared length exactly.
fn parse_record<S: RecordSource>(c: &mut S) -> std::result::Result<RecordParts<S>, S::Error> {
    let start = c.position();
    let length = c.varint()?;
    let remaining = c.remaining();
    if length < 0 {
        return Err(FormatError::new(
            FormatErrorKind::BadRecordLength {
                declared: i64::from(length),
                actual: 0,
            },
            start,
        )
        .into());
    }
    if length as u64 > remaining {
        return Err(FormatError::new(
            FormatErrorKind::LengthOutOfRange {
                declared: i64::from(length),
                remaining,
            },
            start,
        )
        .into());
    }
    let body_start = c.position();
    let attributes = c.i8()?;
    let timestamp_delta = c.varlong()?;
    let offset_delta = c.varint()?;
    let (key, key_position) = read_nullable(c, S::field)?;
    let (value, value_position) = read_nullable(c, S::field)?;
    let count_at = c.position();
    let header_count = c.varint()?;
    if header_count < 0 || header_count as u64 > c.remaining() {
        return Err(
            FormatError::new(FormatErrorKind::BadHeaderCount(header_count), count_at).into(),
        );
    }
    let headers = c.headers(header_count as usize)?;
    let consumed = c.position() - body_start;
    if consumed != length as u64 {
        return Err(FormatError::new(
            FormatErrorKind::BadRecordLength {
                declared: i64::from(length),
                actual: consumed as i64,
            },
            start,
        )
        .into());
    }
    Ok(RecordParts {
        position: start,
        size_in_bytes: c.position() - start,
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        key_position,
        value,
        value_position,
        header_count: header_count as usize,
        headers,
    })
}

/// One record, borrowing key, value and headers from its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    position: u64,
    size_in_bytes: usize,
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    offset: i64,
    timestamp: i64,
    sequence: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    key_position: u64,
    value_position: u64,
    header_count: usize,
    headers_data: &'a [u8],
}

impl<'a> Record<'a> {
    /// Absolute position of the record's length varint (for compressed batches: of the records
    /// section).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Position of the key's first byte, just after its length varint (same caveat as
    /// [`position`](Self::position)).
    pub fn key_position(&self) -> u64 {
        self.key_position
    }

    /// Position of the value's first byte, just after its length varint (same caveat as
    /// [`position`](Self::position)).
    pub fn value_position(&self) -> u64 {
        self.value_position
    }

    /// Bytes the record takes, length varint included.
    pub fn size_in_bytes(&self) -> usize {
        self.size_in_bytes
    }

    /// The record's attributes byte (unused by Kafka).
    pub fn attributes(&self) -> i8 {
        self.attributes
    }

    /// `baseOffset + offsetDelta`.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The stored offset delta.
    pub fn offset_delta(&self) -> i32 {
        self.offset_delta
    }

    /// Kafka's `record.timestamp()`: the batch's `maxTimestamp` for LogAppendTime batches, else
    /// `baseTimestamp + timestampDelta`.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The stored timestamp delta (kept even for LogAppendTime batches).
    pub fn timestamp_delta(&self) -> i64 {
        self.timestamp_delta
    }

    /// `incrementSequence(baseSequence, offsetDelta)` when the batch has a base sequence ≥ 0,
    /// else −1.
    pub fn sequence(&self) -> i32 {
        self.sequence
    }

    /// The key, `None` when null.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The value, `None` when null.
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }

    /// Key size as Kafka reports it (−1 for null).
    pub fn key_size(&self) -> i32 {
        self.key.map_or(-1, |k| k.len() as i32)
    }

    /// Value size as Kafka reports it (−1 for null).
    pub fn value_size(&self) -> i32 {
        self.value.map_or(-1, |v| v.len() as i32)
    }

    /// Number of headers.
    pub fn header_count(&self) -> usize {
        self.header_count
    }

    /// The headers, decoded lazily from the record's bytes (validated when the record was read).
    pub fn headers(&self) -> HeaderIter<'a> {
        HeaderIter {
            cursor: Cursor::new(self.headers_data, 0),
            left: self.header_count,
        }
    }
}

/// Iterator over a record's headers; allocation-free.
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    cursor: Cursor<'a>,
    left: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Already validated when the record was parsed; a failure here cannot happen, and if it
        // did the iterator would just end.
        match read_header(&mut self.cursor) {
            Ok((key, value)) => Some(Header { key, value }),
            Err(_) => {
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// A record header: raw key bytes (Kafka decodes them as UTF-8) and a nullable value. Also the
/// input type for [`crate::RecordBatchBuilder::append`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header<'a> {
    /// The key bytes.
    pub key: &'a [u8],
    /// The value, `None` when null.
    pub value: Option<&'a [u8]>,
}

impl<'a> Header<'a> {
    /// A header from a string key.
    pub fn new(key: &'a str, value: Option<&'a [u8]>) -> Self {
        Header {
            key: key.as_bytes(),
            value,
        }
    }

    /// The key as UTF-8, `None` if it is not valid UTF-8.
    pub fn key_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.key).ok()
    }

    /// The key as text, invalid sequences replaced with U+FFFD by Rust's rules
    /// ([`String::from_utf8_lossy`]). Kafka's `Utils.utf8` uses the JDK's rules, which differ on
    /// encoded surrogates (`ED A0 80` is one U+FFFD there, three here).
    pub fn key_lossy(&self) -> Cow<'a, str> {
        String::from_utf8_lossy(self.key)
    }
}
