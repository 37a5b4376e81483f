//! Reading the records of one uncompressed v2 batch from a byte stream, a record at a time,
//! without holding the batch: [`RecordReader`] (Kafka: `DefaultRecordBatch.streamingIterator`
//! over an `InputStream`).
//!
//! The reader applies the record framing rules of `record.rs` (the same functions parse both), so
//! a record read here is valid or invalid exactly as it is in [`crate::Records`], with the same
//! [`FormatError`] at the same byte. It holds a window of at most [`WINDOW_BYTES`] read ahead and
//! the headers of the current record; a key or value is not read but passed over with a seek, and
//! reported as a [`FieldSpan`] (where it is in the file), so the caller can copy it from there in
//! chunks. The only I/O is the [`Read`] and [`Seek`] source it is given.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};

use crate::batch::RecordBatch;
use crate::compression::CompressionType;
use crate::cursor::Cursor;
use crate::error::{FormatError, FormatErrorKind};
use crate::record::{next_record, read_header, Header, RecordContext, RecordSource};
use crate::wire::ATTRIBUTES_OFFSET;

/// Bytes read ahead at most (the window varints and headers are parsed from). A varint is read
/// with up to its maximum length (10 bytes) in the window, so a source that ends early fails up to
/// that many bytes before its end.
pub(crate) const WINDOW_BYTES: usize = 64 << 10;

/// An I/O error of the source, or a record that does not parse (positioned as in
/// [`crate::Records`]).
#[derive(Debug)]
pub enum ReadError {
    /// The source failed, or ended before the bytes it was said to hold.
    Io(io::Error),
    /// A framing rule was broken.
    Format(FormatError),
}

impl From<FormatError> for ReadError {
    fn from(e: FormatError) -> Self {
        ReadError::Format(e)
    }
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "read failed: {e}"),
            ReadError::Format(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            ReadError::Format(e) => Some(e),
        }
    }
}

/// Where a key or value is: its first byte's absolute position and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldSpan {
    /// Absolute position of the first byte.
    pub position: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A header read from the stream (keys and values are small; they are read whole).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderBuf {
    /// The key bytes.
    pub key: Vec<u8>,
    /// The value, `None` when null.
    pub value: Option<Vec<u8>>,
}

impl HeaderBuf {
    /// The header as a view.
    pub fn as_header(&self) -> Header<'_> {
        Header {
            key: &self.key,
            value: self.value.as_deref(),
        }
    }
}

/// One record read by a [`RecordReader`]: the values [`crate::Record`] gives, with the key and
/// value as spans of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedRecord {
    /// Absolute position of the record's length varint.
    pub position: u64,
    /// Bytes the record takes, length varint included.
    pub size_in_bytes: u64,
    /// The attributes byte (unused by Kafka).
    pub attributes: i8,
    /// The stored timestamp delta.
    pub timestamp_delta: i64,
    /// The stored offset delta.
    pub offset_delta: i32,
    /// `baseOffset + offsetDelta`.
    pub offset: i64,
    /// Kafka's `record.timestamp()` (see [`crate::Record::timestamp`]).
    pub timestamp: i64,
    /// Kafka's `record.sequence()` (see [`crate::Record::sequence`]).
    pub sequence: i32,
    /// The key, `None` when null.
    pub key: Option<FieldSpan>,
    /// The value, `None` when null.
    pub value: Option<FieldSpan>,
    /// The headers.
    pub headers: Vec<HeaderBuf>,
}

impl StreamedRecord {
    /// Key size as Kafka reports it (−1 for null).
    pub fn key_size(&self) -> i64 {
        self.key.map_or(-1, |k| k.len as i64)
    }

    /// Value size as Kafka reports it (−1 for null).
    pub fn value_size(&self) -> i64 {
        self.value.map_or(-1, |v| v.len as i64)
    }
}

/// The records section read through a window of [`WINDOW_BYTES`].
#[derive(Debug)]
struct Window<R> {
    src: R,
    buf: Vec<u8>,
    /// Index in `buf` of the next byte.
    at: usize,
    /// Absolute position of the next byte.
    position: u64,
    /// Absolute position of the section's end.
    end: u64,
}

impl<R: Read + Seek> Window<R> {
    fn buffered(&self) -> usize {
        self.buf.len().saturating_sub(self.at)
    }

    /// Makes at least `min(n, remaining)` bytes available from `at` on.
    fn fill(&mut self, n: usize) -> io::Result<()> {
        let want = u64::try_from(n)
            .unwrap_or(u64::MAX)
            .min(self.end - self.position) as usize;
        if self.buffered() >= want {
            return Ok(());
        }
        self.buf.drain(..self.at);
        self.at = 0;
        let unbuffered = self.end - self.position - self.buf.len() as u64;
        let room = (WINDOW_BYTES.max(want) - self.buf.len()) as u64;
        let target = self.buf.len() + unbuffered.min(room) as usize;
        while self.buf.len() < want {
            let old = self.buf.len();
            self.buf.resize(target, 0);
            let got = self.src.read(self.buf.get_mut(old..).unwrap_or_default());
            let n = match got {
                Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
                Err(e) => Err(e),
            };
            self.buf.truncate(old + *n.as_ref().unwrap_or(&0));
            n?;
        }
        Ok(())
    }

    /// Parses with `f` from a cursor over the window holding at least `min(n, remaining)` bytes.
    fn parse<T>(
        &mut self,
        n: usize,
        f: impl FnOnce(&mut Cursor<'_>) -> crate::error::Result<T>,
    ) -> Result<T, ReadError> {
        self.fill(n)?;
        let mut c = Cursor::new(self.buf.get(self.at..).unwrap_or_default(), self.position);
        let v = f(&mut c)?;
        self.at += c.offset();
        self.position += c.offset() as u64;
        Ok(v)
    }

    /// Passes over `n` bytes (`n <= remaining`): those in the window, then a seek past the rest
    /// (the source's position is always `position` plus the bytes the window holds).
    fn skip(&mut self, n: usize) -> io::Result<()> {
        let from_window = n.min(self.buffered());
        self.at += from_window;
        let rest = (n - from_window) as i64;
        if rest > 0 {
            self.src.seek(SeekFrom::Current(rest))?;
        }
        self.position += n as u64;
        Ok(())
    }

    /// The next `n` bytes (`n <= remaining`).
    fn take(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let from_window = n.min(self.buffered());
        let mut out = Vec::with_capacity(n);
        out.extend_from_slice(
            self.buf
                .get(self.at..self.at + from_window)
                .unwrap_or_default(),
        );
        self.at += from_window;
        if out.len() < n {
            out.resize(n, 0);
            self.src
                .read_exact(out.get_mut(from_window..).unwrap_or_default())?;
        }
        self.position += n as u64;
        Ok(out)
    }
}

impl<R: Read + Seek> RecordSource for Window<R> {
    type Field = FieldSpan;
    type Small = Vec<u8>;
    type Headers = Vec<HeaderBuf>;
    type Error = ReadError;

    fn position(&self) -> u64 {
        self.position
    }
    fn remaining(&self) -> u64 {
        self.end - self.position
    }
    fn i8(&mut self) -> Result<i8, ReadError> {
        self.parse(1, |c| c.i8())
    }
    fn varint(&mut self) -> Result<i32, ReadError> {
        self.parse(5, |c| c.varint())
    }
    fn varlong(&mut self) -> Result<i64, ReadError> {
        self.parse(10, |c| c.varlong())
    }
    fn field(&mut self, n: usize) -> Result<FieldSpan, ReadError> {
        let span = FieldSpan {
            position: self.position,
            len: n as u64,
        };
        self.skip(n)?;
        Ok(span)
    }
    fn small(&mut self, n: usize) -> Result<Vec<u8>, ReadError> {
        Ok(self.take(n)?)
    }
    fn headers(&mut self, count: usize) -> Result<Vec<HeaderBuf>, ReadError> {
        (0..count)
            .map(|_| read_header(self).map(|(key, value)| HeaderBuf { key, value }))
            .collect()
    }
}

/// The records of one uncompressed v2 batch, read from `R` (positioned at the batch's records
/// section, the bytes after its 61-byte header). Iterates as [`crate::Records::iter`] does: at most
/// one error, then it ends.
#[derive(Debug)]
pub struct RecordReader<R> {
    window: Window<R>,
    ctx: RecordContext,
    read: i32,
    done: bool,
}

impl<R: Read + Seek> RecordReader<R> {
    /// A reader of the records of `batch`, a view of the batch's header (its records section
    /// need not be in it), whose records section of `records_len` bytes `src` yields. A
    /// compressed batch is refused (its records are decompressed whole, see
    /// [`RecordBatch::records`]), and so is a negative record count.
    pub fn new(batch: &RecordBatch<'_>, records_len: u64, src: R) -> Result<Self, FormatError> {
        let compression = batch.compression()?;
        if compression != CompressionType::None {
            return Err(FormatError::new(
                FormatErrorKind::InvalidField("a compressed batch's records are not streamed"),
                batch.position() + ATTRIBUTES_OFFSET as u64,
            ));
        }
        let ctx = RecordContext::of(batch, true)?;
        Ok(RecordReader {
            window: Window {
                src,
                buf: Vec::new(),
                at: 0,
                position: ctx.section_position,
                end: ctx.section_position + records_len,
            },
            ctx,
            read: 0,
            done: false,
        })
    }

    /// Absolute position of the next byte of the records section.
    pub fn position(&self) -> u64 {
        self.window.position
    }

    fn next_inner(&mut self) -> Result<StreamedRecord, ReadError> {
        let parts = next_record(&mut self.window, self.ctx.count, &mut self.read)?;
        Ok(StreamedRecord {
            position: parts.position,
            size_in_bytes: parts.size_in_bytes,
            attributes: parts.attributes,
            timestamp_delta: parts.timestamp_delta,
            offset_delta: parts.offset_delta,
            offset: self.ctx.offset(parts.offset_delta),
            timestamp: self.ctx.timestamp(parts.timestamp_delta),
            sequence: self.ctx.sequence(parts.offset_delta),
            key: parts.key,
            value: parts.value,
            headers: parts.headers,
        })
    }
}

impl<R: Read + Seek> Iterator for RecordReader<R> {
    type Item = Result<StreamedRecord, ReadError>;

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

impl<R: Read + Seek> std::iter::FusedIterator for RecordReader<R> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DecodeLimits, RecordBatchBuilder};

    /// Yields at most `step` bytes per read.
    struct Trickle<'a> {
        bytes: io::Cursor<&'a [u8]>,
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step);
            self.bytes.read(&mut buf[..n])
        }
    }

    impl Seek for Trickle<'_> {
        fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
            self.bytes.seek(to)
        }
    }

    /// What a record iteration gives, keys and values as bytes, in a form both sides share.
    type Outcome = Vec<
        Result<
            (
                i64,
                i64,
                i32,
                Option<Vec<u8>>,
                Option<Vec<u8>>,
                Vec<HeaderBuf>,
            ),
            String,
        >,
    >;

    fn in_memory(batch: &[u8], position: u64) -> Outcome {
        let b = RecordBatch::new(batch, position).unwrap();
        let records = match b.records(&DecodeLimits::default()) {
            Ok(r) => r,
            Err(e) => return vec![Err(format!("{e:?}"))],
        };
        let out = records
            .iter()
            .map(|r| {
                r.map(|r| {
                    let headers = r
                        .headers()
                        .map(|h| HeaderBuf {
                            key: h.key.to_vec(),
                            value: h.value.map(<[u8]>::to_vec),
                        })
                        .collect();
                    (
                        r.offset(),
                        r.timestamp(),
                        r.sequence(),
                        r.key().map(<[u8]>::to_vec),
                        r.value().map(<[u8]>::to_vec),
                        headers,
                    )
                })
                .map_err(|e| format!("{e:?}"))
            })
            .collect();
        out
    }

    fn streamed(batch: &[u8], position: u64, step: usize) -> Outcome {
        // The reader sees the header alone, as `seglog dump` gives it.
        let mut header = batch[..61].to_vec();
        header[8..12].copy_from_slice(&49i32.to_be_bytes());
        let b = RecordBatch::new(&header, position).unwrap();
        let src = Trickle {
            bytes: io::Cursor::new(&batch[61..]),
            step,
        };
        let reader = match RecordReader::new(&b, (batch.len() - 61) as u64, src) {
            Ok(r) => r,
            Err(e) => return vec![Err(format!("{e:?}"))],
        };
        let field = |s: Option<FieldSpan>| {
            s.map(|s| {
                let at = (s.position - position) as usize;
                batch[at..at + s.len as usize].to_vec()
            })
        };
        reader
            .map(|r| match r {
                Ok(r) => Ok((
                    r.offset,
                    r.timestamp,
                    r.sequence,
                    field(r.key),
                    field(r.value),
                    r.headers,
                )),
                Err(ReadError::Format(e)) => Err(format!("{e:?}")),
                Err(ReadError::Io(e)) => panic!("{e}"),
            })
            .collect()
    }

    fn sample() -> Vec<u8> {
        let mut b = RecordBatchBuilder::new(40).producer(7, 1, 5);
        b.append(1_000, Some(b"key"), Some(b"value one"), &[])
            .unwrap();
        b.append(
            1_003,
            None,
            Some(&[9u8; 300]),
            &[
                crate::Header::new("h1", Some(b"v")),
                crate::Header::new("h2", None),
            ],
        )
        .unwrap();
        b.append(990, Some(b""), None, &[]).unwrap();
        b.build()
    }

    #[test]
    fn streamed_records_equal_the_in_memory_ones() {
        let batch = sample();
        let want = in_memory(&batch, 1_000);
        assert_eq!(want.len(), 3);
        assert!(want.iter().all(Result::is_ok), "{want:?}");
        for step in [1, 2, 7, 100, WINDOW_BYTES] {
            assert_eq!(streamed(&batch, 1_000, step), want, "step {step}");
        }
    }

    /// Every byte of the record count and the records, changed: the same records and the same
    /// first error at the same position, whatever the reads' sizes.
    #[test]
    fn a_damaged_record_fails_as_it_does_in_memory() {
        let batch = sample();
        let mut errors = 0;
        for at in 57..batch.len() {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut damaged = batch.clone();
                damaged[at] = value;
                let want = in_memory(&damaged, 0);
                errors += usize::from(want.iter().any(Result::is_err));
                for step in [1, 3, WINDOW_BYTES] {
                    assert_eq!(
                        streamed(&damaged, 0, step),
                        want,
                        "byte {at} = {value:#x}, step {step}"
                    );
                }
            }
        }
        assert!(errors > 100, "only {errors} damaged batches fail");
    }

    #[test]
    fn a_source_shorter_than_the_section_is_an_io_error() {
        let batch = sample();
        let mut header = batch[..61].to_vec();
        header[8..12].copy_from_slice(&49i32.to_be_bytes());
        let b = RecordBatch::new(&header, 0).unwrap();
        let src = io::Cursor::new(&batch[61..batch.len() - 5]);
        let reader = RecordReader::new(&b, (batch.len() - 61) as u64, src).unwrap();
        // The window reads up to a varint's maximum length ahead: the last record, and perhaps
        // the one before it, meet the short source.
        let got: Vec<_> = reader.collect();
        assert!(
            matches!(got.first(), Some(Ok(r)) if r.offset == 40),
            "{got:?}"
        );
        assert!(got.len() <= 3);
        let last = got.last();
        assert!(
            matches!(last, Some(Err(ReadError::Io(e))) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{last:?}"
        );
    }

    #[test]
    fn a_compressed_batch_is_refused() {
        let mut b = RecordBatchBuilder::new(0).compression(CompressionType::Gzip);
        b.append(0, None, Some(b"v"), &[]).unwrap();
        let batch = b.build();
        let view = RecordBatch::new(&batch, 0).unwrap();
        let err = RecordReader::new(&view, 0, io::Cursor::new(&[][..])).unwrap_err();
        assert_eq!(err.position, ATTRIBUTES_OFFSET as u64);
    }
}
