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
struct RecordContext {
    base_offset: i64,
    base_timestamp: i64,
    base_sequence: i32,
    log_append_time: Option<i64>,
    count: i32,
    /// Absolute position of the records section's first byte.
    section_position: u64,
    /// Whether positions inside the buffer map to file positions (false when decompressed).
    positions_exact: bool,
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
        let count = batch.records_count();
        if count < 0 {
            return Err(FormatError::new(
                FormatErrorKind::NegativeRecordCount(count),
                batch.position() + RECORDS_COUNT_OFFSET as u64,
            ));
        }
        let section_position = batch.position() + RECORD_BATCH_OVERHEAD as u64;
        let raw = batch.records_bytes();
        let buf = if count == 0 {
            // Kafka returns an empty iterator for count 0 without looking at the records section.
            RecordsBuf::Borrowed(&[])
        } else if compression == CompressionType::None {
            RecordsBuf::Borrowed(raw)
        } else {
            RecordsBuf::Owned(
                decompress(compression, raw, limits)
                    .map_err(|kind| FormatError::new(kind, section_position))?,
            )
        };
        let log_append_time =
            (batch.timestamp_type() == TimestampType::LogAppendTime).then(|| batch.max_timestamp());
        Ok(Records {
            buf,
            ctx: RecordContext {
                base_offset: batch.base_offset(),
                base_timestamp: batch.base_timestamp(),
                base_sequence: batch.base_sequence(),
                log_append_time,
                count,
                section_position,
                positions_exact: compression == CompressionType::None,
            },
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

    fn err(&self, kind: FormatErrorKind, exact: u64) -> FormatError {
        FormatError::new(kind, self.pos(exact))
    }

    fn fix(&self, e: FormatError) -> FormatError {
        FormatError::new(e.kind, self.pos(e.position))
    }

    fn next_inner(&mut self) -> Result<Record<'r>> {
        if self.cursor.is_empty() {
            return Err(self.err(
                FormatErrorKind::RecordCountMismatch {
                    declared: self.ctx.count,
                    found: self.read,
                },
                self.cursor.position(),
            ));
        }
        let record = parse_record(&mut self.cursor, &self.ctx).map_err(|e| self.fix(e))?;
        self.read += 1;
        if self.read == self.ctx.count && !self.cursor.is_empty() {
            return Err(self.err(
                FormatErrorKind::TrailingBytes(self.cursor.remaining() as u64),
                self.cursor.position(),
            ));
        }
        Ok(record)
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

/// Reads a length-prefixed byte field (`< 0` ⇒ `None`). A length beyond the remaining bytes is
/// `LengthOutOfRange` at the length varint.
fn read_nullable<'r>(c: &mut Cursor<'r>) -> Result<(Option<&'r [u8]>, u64)> {
    let at = c.position();
    let len = c.varint()?;
    let data_at = c.position();
    if len < 0 {
        return Ok((None, data_at));
    }
    let remaining = c.remaining();
    if len as usize > remaining {
        return Err(FormatError::new(
            FormatErrorKind::LengthOutOfRange {
                declared: i64::from(len),
                remaining: remaining as u64,
            },
            at,
        ));
    }
    Ok((Some(c.bytes(len as usize)?), data_at))
}

/// Parses one header; Kafka: negative key length is invalid, negative value length is null.
fn read_header<'r>(c: &mut Cursor<'r>) -> Result<Header<'r>> {
    let at = c.position();
    let key_len = c.varint()?;
    if key_len < 0 {
        return Err(FormatError::new(
            FormatErrorKind::NegativeHeaderKeyLength(key_len),
            at,
        ));
    }
    let remaining = c.remaining();
    if key_len as usize > remaining {
        return Err(FormatError::new(
            FormatErrorKind::LengthOutOfRange {
                declared: i64::from(key_len),
                remaining: remaining as u64,
            },
            at,
        ));
    }
    let key = c.bytes(key_len as usize)?;
    let (value, _) = read_nullable(c)?;
    Ok(Header { key, value })
}

/// Kafka `DefaultRecord.readFrom`: the body is parsed against all remaining bytes, then its
/// consumed size must equal the declared length exactly.
fn parse_record<'r>(c: &mut Cursor<'r>, ctx: &RecordContext) -> Result<Record<'r>> {
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
        ));
    }
    if length as usize > remaining {
        return Err(FormatError::new(
            FormatErrorKind::LengthOutOfRange {
                declared: i64::from(length),
                remaining: remaining as u64,
            },
            start,
        ));
    }
    let body_start = c.offset();
    let attributes = c.i8()?;
    let timestamp_delta = c.varlong()?;
    let offset_delta = c.varint()?;
    let (key, key_position) = read_nullable(c)?;
    let (value, value_position) = read_nullable(c)?;
    let count_at = c.position();
    let header_count = c.varint()?;
    if header_count < 0 || header_count as usize > c.remaining() {
        return Err(FormatError::new(
            FormatErrorKind::BadHeaderCount(header_count),
            count_at,
        ));
    }
    let headers_data = c.rest();
    let headers_start = c.offset();
    for _ in 0..header_count {
        read_header(c)?;
    }
    let headers_data = headers_data
        .get(..c.offset() - headers_start)
        .unwrap_or(&[]);
    let consumed = c.offset() - body_start;
    if consumed != length as usize {
        return Err(FormatError::new(
            FormatErrorKind::BadRecordLength {
                declared: i64::from(length),
                actual: consumed as i64,
            },
            start,
        ));
    }
    let offset = ctx.base_offset.wrapping_add(i64::from(offset_delta));
    let timestamp = ctx
        .log_append_time
        .unwrap_or_else(|| ctx.base_timestamp.wrapping_add(timestamp_delta));
    let sequence = if ctx.base_sequence >= 0 {
        increment_sequence(ctx.base_sequence, offset_delta)
    } else {
        crate::wire::NO_SEQUENCE
    };
    let (position, key_position, value_position) = if ctx.positions_exact {
        (start, key_position, value_position)
    } else {
        let p = ctx.section_position;
        (p, p, p)
    };
    Ok(Record {
        position,
        size_in_bytes: (c.position() - start) as usize,
        attributes,
        timestamp_delta,
        offset_delta,
        offset,
        timestamp,
        sequence,
        key,
        value,
        key_position,
        value_position,
        header_count: header_count as usize,
        headers_data,
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
            Ok(h) => Some(h),
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
