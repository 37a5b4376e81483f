//! Reading a `.log` file a window of whole batches at a time, and streaming very large batches.
//!
//! `seglog dump` never reads a whole segment into memory: [`plan`] walks batch headers from a
//! position and returns the next window of whole batches (about [`WINDOW_BYTES`]), the bytes
//! the batch iterator needs to report a framing error, or a single batch of at least
//! [`STREAM_BATCH_BYTES`], which `Dumper::stream_batch` prints without holding it: the
//! CRC is computed over the file in chunks, and for an uncompressed batch each record is parsed
//! from a small buffered cursor, its metadata printed, then its key and value copied to the
//! output in chunks (as text decoded by `JavaUtf8Decoder`, exactly what `java_utf8_lossy` gives
//! for the whole value, or as hex; with `--json`, the record object is written field by field
//! with the hex streamed). A 300 MiB value costs a few MiB of memory, not several copies of the
//! value.
//!
//! ```text
//! record (DefaultRecord)   varint length | int8 attributes | varlong timestampDelta |
//!                          varint offsetDelta | varint keyLength | key | varint valueLength |
//!                          value | varint headerCount | (varint keyLen | key | varint valLen | val)*
//! ```

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use record_format::internals::increment_sequence;
use record_format::{CompressionType, FormatError, FormatErrorKind, RecordBatch, TimestampType};

use super::decoders::{Field, PlainDecoder};
use super::java_utf8::{java_utf8_lossy, JavaUtf8Decoder};
use super::json::{self, hex, ErrorJson};
use super::log::{batch_json, batch_line_with, LogState};
use super::Dumper;
use record_format::internals::be_i32_at as be_i32;

/// Batches at least this large are streamed in text mode.
pub const STREAM_BATCH_BYTES: u64 = 8 << 20;
/// Whole batches are read about this many bytes at a time.
pub const WINDOW_BYTES: u64 = 4 << 20;
/// Chunk size for CRC and key/value copies (a key or value is copied in chunks from its first
/// byte on).
pub const CHUNK: usize = 256 << 10;

/// Bytes up to and including the magic byte (Kafka's `HEADER_SIZE_UP_TO_MAGIC`).
const HEADER_UP_TO_MAGIC: u64 = 17;
/// The v2 batch header (Kafka's `RECORD_BATCH_OVERHEAD`).
const V2_HEADER: u64 = 61;
/// `batchLength` (int32 at 8) and the bytes it does not count (offset + length).
const LENGTH_OFFSET: usize = 8;
const LOG_OVERHEAD: u64 = 12;
/// The v2 CRC field and the first CRC-covered byte.
const CRC_OFFSET: u64 = 17;
const ATTRIBUTES_OFFSET: usize = 21;

/// What to do at a position of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The bytes from the position on to iterate: whole batches, or bytes that end in a
    /// framing error the batch iterator reports.
    Window(Vec<u8>),
    /// Stream the v2 batch of `size` bytes at the position.
    Stream {
        /// The batch's size (12 + batchLength).
        size: u64,
    },
    /// The bytes from the position on do not form a complete batch.
    Trailing,
}

/// `len` bytes of `file` at `at`.
fn read_exact_at(file: &File, at: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut f = file;
    f.seek(SeekFrom::Start(at))?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// Bytes `[from, to)` of `file`.
pub fn read_at(file: &File, from: u64, to: u64) -> io::Result<Vec<u8>> {
    read_exact_at(file, from, usize::try_from(to - from).unwrap_or(usize::MAX))
}

/// The next piece of work from `pos` (file length or `--max-bytes` limit: `end`), following
/// Kafka's `FileLogInputStream.nextBatch` framing (see `record_format::batches`). One read of up
/// to [`WINDOW_BYTES`] serves the headers and the batches of a window.
pub fn plan(file: &File, pos: u64, end: u64) -> io::Result<Plan> {
    let want = (end - pos).min(WINDOW_BYTES);
    let mut buf = read_exact_at(file, pos, want as usize)?;
    let window = |mut buf: Vec<u8>, len: usize| {
        buf.truncate(len);
        Ok(Plan::Window(buf))
    };
    let mut cur = 0usize;
    loop {
        let rem = end - pos - cur as u64;
        if rem <= HEADER_UP_TO_MAGIC {
            return if cur == 0 {
                Ok(Plan::Trailing)
            } else {
                window(buf, cur)
            };
        }
        if cur + HEADER_UP_TO_MAGIC as usize + 1 > buf.len() {
            // The next header is past this read (cur > 0 here: a read holds at least 18 bytes).
            return window(buf, cur);
        }
        let size = be_i32(&buf, cur + LENGTH_OFFSET);
        let magic = buf
            .get(cur + HEADER_UP_TO_MAGIC as usize - 1)
            .copied()
            .unwrap_or(0) as i8;
        if size < 14 {
            // BadLength: the iterator needs more than 17 bytes to report it.
            return window(buf, cur + HEADER_UP_TO_MAGIC as usize + 1);
        }
        let total = LOG_OVERHEAD + size as u64;
        if total > rem {
            return if cur == 0 {
                Ok(Plan::Trailing)
            } else {
                window(buf, cur)
            };
        }
        let framing_error = !(0..=2).contains(&magic) || (magic == 2 && total < V2_HEADER);
        let streamed = magic == 2 && total >= STREAM_BATCH_BYTES && !framing_error;
        if streamed {
            return if cur == 0 {
                Ok(Plan::Stream { size: total })
            } else {
                window(buf, cur)
            };
        }
        let batch_end = cur as u64 + total;
        if batch_end > buf.len() as u64 {
            if cur > 0 {
                return window(buf, cur);
            }
            // One batch larger than a window: read it whole.
            buf = read_at(file, pos, pos + total)?;
        }
        cur = batch_end as usize;
        if framing_error || cur >= buf.len() {
            return window(buf, cur);
        }
    }
}

/// An I/O error, or a record that does not decode.
#[derive(Debug)]
enum StreamError {
    Io(io::Error),
    Format(FormatError),
}

impl From<io::Error> for StreamError {
    fn from(e: io::Error) -> Self {
        StreamError::Io(e)
    }
}

/// A buffered, seekable cursor over `[.., end)` of a file, with Kafka's varints.
struct FileCursor<'f> {
    file: &'f File,
    buf: Vec<u8>,
    buf_pos: u64,
    i: usize,
    end: u64,
}

impl<'f> FileCursor<'f> {
    fn new(file: &'f File, start: u64, end: u64) -> Self {
        FileCursor {
            file,
            buf: Vec::new(),
            buf_pos: start,
            i: 0,
            end,
        }
    }

    fn pos(&self) -> u64 {
        self.buf_pos + self.i as u64
    }

    fn seek(&mut self, to: u64) {
        if to >= self.buf_pos && to <= self.buf_pos + self.buf.len() as u64 {
            self.i = (to - self.buf_pos) as usize;
        } else {
            self.buf.clear();
            self.buf_pos = to;
            self.i = 0;
        }
    }

    fn truncated(&self, need: u64) -> StreamError {
        StreamError::Format(FormatError::new(
            FormatErrorKind::Truncated {
                need,
                have: self.end.saturating_sub(self.pos()),
            },
            self.pos(),
        ))
    }

    fn u8(&mut self) -> Result<u8, StreamError> {
        if self.i >= self.buf.len() {
            let p = self.pos();
            let n = (self.end.saturating_sub(p)).min(CHUNK as u64) as usize;
            if n == 0 {
                return Err(self.truncated(1));
            }
            self.buf = read_exact_at(self.file, p, n)?;
            self.buf_pos = p;
            self.i = 0;
        }
        let b = self.buf.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        Ok(b)
    }

    fn unsigned_varlong(&mut self, max_bytes: u32) -> Result<u64, StreamError> {
        let start = self.pos();
        let mut v: u64 = 0;
        for i in 0..max_bytes {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(StreamError::Format(FormatError::new(
            FormatErrorKind::BadVarint,
            start,
        )))
    }

    fn varint(&mut self) -> Result<i32, StreamError> {
        let u = self.unsigned_varlong(5)? as u32;
        Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
    }

    fn varlong(&mut self) -> Result<i64, StreamError> {
        let u = self.unsigned_varlong(10)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// Skips `n` bytes (a key or value), checking they exist.
    fn skip(&mut self, n: u64) -> Result<(), StreamError> {
        if self.pos() + n > self.end {
            return Err(self.truncated(n));
        }
        self.seek(self.pos() + n);
        Ok(())
    }

    /// Reads `n` bytes (small: header keys, keys and values for decoders that need them whole).
    fn take(&mut self, n: u64) -> Result<Vec<u8>, StreamError> {
        if self.pos() + n > self.end {
            return Err(self.truncated(n));
        }
        let p = self.pos();
        let v = read_exact_at(self.file, p, n as usize)?;
        self.seek(p + n);
        Ok(v)
    }

    /// Calls `sink` with `[at, at + n)` in chunks.
    fn copy(
        &mut self,
        at: u64,
        n: u64,
        mut sink: impl FnMut(&[u8], bool) -> io::Result<()>,
    ) -> Result<(), StreamError> {
        let mut done = 0u64;
        let mut f = self.file;
        f.seek(SeekFrom::Start(at))?;
        let mut chunk = vec![0u8; CHUNK.min(n as usize)];
        while done < n {
            let len = (n - done).min(CHUNK as u64) as usize;
            let part = chunk.get_mut(..len).unwrap_or_default();
            f.read_exact(part)?;
            done += len as u64;
            sink(part, done == n)?;
        }
        if n == 0 {
            sink(&[], true)?;
        }
        Ok(())
    }
}

/// Where a record's key, value and header keys are.
struct RecordSpan {
    offset: i64,
    timestamp: i64,
    sequence: i32,
    key: Option<(u64, u64)>,
    value: Option<(u64, u64)>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    end: u64,
}

fn span_len(v: i32) -> Option<u64> {
    u64::try_from(v).ok()
}

/// Parses one record at the cursor, skipping over (not reading) its key and value.
fn scan_record(
    c: &mut FileCursor<'_>,
    b: &RecordBatch<'_>,
    batch_end: u64,
) -> Result<RecordSpan, StreamError> {
    let start = c.pos();
    let len = c.varint()?;
    let body = c.pos();
    let declared = i64::from(len);
    let end = u64::try_from(len)
        .ok()
        .map(|l| body + l)
        .filter(|&e| e <= batch_end)
        .ok_or_else(|| {
            StreamError::Format(FormatError::new(
                FormatErrorKind::BadRecordLength {
                    declared,
                    actual: batch_end.saturating_sub(body) as i64,
                },
                start,
            ))
        })?;
    let mut rc = FileCursor::new(c.file, body, end);
    let _attributes = rc.u8()?;
    let ts_delta = rc.varlong()?;
    let offset_delta = rc.varint()?;
    let key_len = rc.varint()?;
    let key = span_len(key_len).map(|n| (rc.pos(), n));
    if let Some((_, n)) = key {
        rc.skip(n)?;
    }
    let value_len = rc.varint()?;
    let value = span_len(value_len).map(|n| (rc.pos(), n));
    if let Some((_, n)) = value {
        rc.skip(n)?;
    }
    let headers = rc.varint()?;
    if headers < 0 {
        return Err(StreamError::Format(FormatError::new(
            FormatErrorKind::BadHeaderCount(headers),
            rc.pos(),
        )));
    }
    let mut header_list = Vec::new();
    for _ in 0..headers {
        let kl = rc.varint()?;
        let Some(kl) = span_len(kl) else {
            return Err(StreamError::Format(FormatError::new(
                FormatErrorKind::NegativeHeaderKeyLength(kl),
                rc.pos(),
            )));
        };
        let key = java_utf8_lossy(&rc.take(kl)?).into_owned();
        let value = match span_len(rc.varint()?) {
            Some(vl) => Some(rc.take(vl)?),
            None => None,
        };
        header_list.push((key, value));
    }
    if rc.pos() != end {
        return Err(StreamError::Format(FormatError::new(
            FormatErrorKind::BadRecordLength {
                declared,
                actual: (rc.pos() - body) as i64,
            },
            start,
        )));
    }
    c.seek(end);
    let timestamp = if b.timestamp_type() == TimestampType::LogAppendTime {
        b.max_timestamp()
    } else {
        b.base_timestamp().wrapping_add(ts_delta)
    };
    let sequence = if b.base_sequence() == -1 {
        -1
    } else {
        increment_sequence(b.base_sequence(), offset_delta)
    };
    Ok(RecordSpan {
        offset: b.base_offset().wrapping_add(i64::from(offset_delta)),
        timestamp,
        sequence,
        key,
        value,
        headers: header_list,
        end,
    })
}

impl<O: Write, E: Write> Dumper<'_, O, E> {
    /// Prints the v2 batch of `size` bytes at `pos` (text mode) without holding it in memory.
    pub(crate) fn stream_batch(
        &mut self,
        path: &Path,
        file: &File,
        pos: u64,
        size: u64,
        st: &mut LogState,
    ) -> io::Result<()> {
        let mut header = match read_exact_at(file, pos, V2_HEADER as usize) {
            Ok(h) => h,
            Err(e) => return self.read_failed(path, &e),
        };
        // CRC-32C over [21, size): the header's part, then the rest in chunks.
        let mut crc =
            record_format::internals::crc32c(header.get(ATTRIBUTES_OFFSET..).unwrap_or_default());
        let mut c = FileCursor::new(file, pos + V2_HEADER, pos + size);
        let copied = c.copy(pos + V2_HEADER, size - V2_HEADER, |chunk, _| {
            crc = record_format::internals::crc32c_append(crc, chunk);
            Ok(())
        });
        if let Err(StreamError::Io(e)) = copied {
            return self.read_failed(path, &e);
        }
        // A view over the header alone: its length field says 49 (a batch with no records).
        if let Some(len) = header.get_mut(LENGTH_OFFSET..LENGTH_OFFSET + 4) {
            len.copy_from_slice(&((V2_HEADER - LOG_OVERHEAD) as i32).to_be_bytes());
        }
        let b = match RecordBatch::new(&header, pos) {
            Ok(b) => b,
            Err(e) => {
                writeln!(self.err, "{}: {e}", path.display())?;
                st.problem(pos, ErrorJson::from_format(&e));
                return Ok(());
            }
        };
        let valid = crc == b.crc();
        if self.args.json {
            json::emit(self.out, &batch_json(&b, size as usize, valid))?;
        } else {
            writeln!(self.out, "{}", batch_line_with(&b, size as usize, valid))?;
        }
        let mut ok = true;
        if !valid {
            let e = FormatError::new(
                FormatErrorKind::CrcMismatch {
                    stored: b.crc(),
                    computed: crc,
                },
                pos + CRC_OFFSET,
            );
            writeln!(self.err, "{}: {e}", path.display())?;
            st.problem(pos, ErrorJson::from_format(&e));
            ok = false;
        }
        if self.args.is_deep() {
            // With --json and a decoder, records are decoded whole (internal-topic records
            // are small).
            let plain = matches!(b.compression(), Ok(CompressionType::None))
                && !b.is_control()
                && !(self.args.json && self.args.json_decodes());
            if plain {
                self.stream_records(path, file, &b, pos, size, st)?;
            } else {
                // Control batches are small, and a compressed batch is decompressed whole.
                let bytes = match read_at(file, pos, pos + size) {
                    Ok(v) => v,
                    Err(e) => return self.read_failed(path, &e),
                };
                match RecordBatch::new(&bytes, pos) {
                    Ok(whole) => {
                        self.v2_records(path, &whole, st)?;
                    }
                    Err(e) => {
                        writeln!(self.err, "{}: {e}", path.display())?;
                        st.problem(pos, ErrorJson::from_format(&e));
                        ok = false;
                    }
                }
            }
        }
        if ok && st.valid_end.is_none() {
            st.next_offset = b.next_offset();
        }
        Ok(())
    }

    /// Prints the records of the uncompressed batch `b` (header view) streamed from `file`;
    /// `false` if a record does not decode.
    fn stream_records(
        &mut self,
        path: &Path,
        file: &File,
        b: &RecordBatch<'_>,
        pos: u64,
        size: u64,
        st: &mut LogState,
    ) -> io::Result<bool> {
        let batch_end = pos + size;
        let mut c = FileCursor::new(file, pos + V2_HEADER, batch_end);
        let count = b.records_count();
        for found in 0..count.max(0) {
            if c.pos() >= batch_end {
                let e = FormatError::new(
                    FormatErrorKind::RecordCountMismatch {
                        declared: count,
                        found,
                    },
                    pos,
                );
                return self.stream_problem(path, StreamError::Format(e), st);
            }
            let r = match scan_record(&mut c, b, batch_end) {
                Ok(r) => r,
                Err(e) => return self.stream_problem(path, e, st),
            };
            if let Err(e) = self.print_streamed(file, b, &r, st) {
                return self.stream_problem(path, e, st);
            }
            c.seek(r.end);
        }
        if c.pos() < batch_end {
            let e = FormatError::new(FormatErrorKind::TrailingBytes(batch_end - c.pos()), c.pos());
            return self.stream_problem(path, StreamError::Format(e), st);
        }
        Ok(true)
    }

    fn stream_problem(
        &mut self,
        path: &Path,
        e: StreamError,
        st: &mut LogState,
    ) -> io::Result<bool> {
        match e {
            StreamError::Io(e) => Err(e),
            StreamError::Format(e) => {
                // Inside a batch whose framing is valid: a content problem, as in `v2_records`.
                writeln!(self.err, "{}: {e}", path.display())?;
                st.content_problem(ErrorJson::from_format(&e));
                Ok(false)
            }
        }
    }

    /// One record line: metadata, then the key and value copied from the file.
    fn print_streamed(
        &mut self,
        file: &File,
        b: &RecordBatch<'_>,
        r: &RecordSpan,
        st: &mut LogState,
    ) -> Result<(), StreamError> {
        if r.offset != st.last_record_offset.wrapping_add(1) {
            st.non_consecutive.insert(st.last_record_offset, r.offset);
        }
        st.last_record_offset = r.offset;
        let size = |s: Option<(u64, u64)>| s.map_or(-1, |(_, n)| n as i64);
        if self.args.json {
            return self.json_streamed(file, r);
        }
        if !self.args.skip_record_metadata {
            write!(
                self.out,
                "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                r.offset,
                b.timestamp_type().name(),
                r.timestamp,
                size(r.key),
                size(r.value),
                r.sequence,
                r.headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            )?;
        }
        if self.args.prints_data() {
            let mut c = FileCursor::new(file, 0, u64::MAX);
            let plain = match self.decoder {
                super::decoders::Decoder::Plain { key, value } => Some((key, value)),
                _ => None,
            };
            let mut prefix = if self.args.skip_record_metadata {
                "| "
            } else {
                " "
            };
            match plain {
                Some((kd, vd)) => {
                    if let Some((at, n)) = r.key {
                        write!(self.out, "{prefix}key: ")?;
                        self.copy_field(&mut c, at, n, kd)?;
                        prefix = " ";
                    }
                    if let Some((at, n)) = r.value {
                        write!(self.out, "{prefix}payload: ")?;
                        self.copy_field(&mut c, at, n, vd)?;
                    }
                }
                None => {
                    let key = r.key.map(|(at, n)| (at, c.take_at(at, n)));
                    let value = r.value.map(|(at, n)| (at, c.take_at(at, n)));
                    let field = |f: &Option<(u64, Result<Vec<u8>, StreamError>)>| match f {
                        Some((at, Ok(v))) => Ok(Some((*at, v.clone()))),
                        Some((_, Err(_))) => Err(()),
                        None => Ok(None),
                    };
                    let (Ok(k), Ok(v)) = (field(&key), field(&value)) else {
                        return Err(c.truncated(0));
                    };
                    let parsed = self.decoder.parse(
                        r.offset,
                        Field {
                            bytes: k.as_ref().map(|(_, v)| v.as_slice()),
                            position: k.as_ref().map_or(0, |(at, _)| *at),
                        },
                        Field {
                            bytes: v.as_ref().map(|(_, v)| v.as_slice()),
                            position: v.as_ref().map_or(0, |(at, _)| *at),
                        },
                    );
                    if let Some(k) = parsed.key {
                        write!(self.out, "{prefix}key: {k}")?;
                        prefix = " ";
                    }
                    if let Some(v) = parsed.value {
                        write!(self.out, "{prefix}payload: {v}")?;
                    }
                }
            }
        }
        writeln!(self.out)?;
        Ok(())
    }

    /// The `--json` record object, written field by field in `RecordLine`'s order, the key and
    /// value hex copied from the file in chunks.
    fn json_streamed(&mut self, file: &File, r: &RecordSpan) -> Result<(), StreamError> {
        let skip = self.args.skip_record_metadata;
        let size = |s: Option<(u64, u64)>| s.map_or(-1, |(_, n)| n as i64);
        write!(self.out, "{{\"type\":\"record\",\"offset\":{}", r.offset)?;
        if !skip {
            write!(
                self.out,
                ",\"timestamp\":{},\"keySize\":{},\"valueSize\":{}",
                r.timestamp,
                size(r.key),
                size(r.value)
            )?;
        }
        let mut c = FileCursor::new(file, 0, u64::MAX);
        for (name, span) in [("key", r.key), ("value", r.value)] {
            write!(self.out, ",\"{name}\":")?;
            match span {
                None => write!(self.out, "null")?,
                Some((at, n)) => {
                    write!(self.out, "\"")?;
                    self.copy_field(&mut c, at, n, PlainDecoder::Hex)?;
                    write!(self.out, "\"")?;
                }
            }
        }
        if !skip {
            let headers: Vec<json::HeaderJson> = r
                .headers
                .iter()
                .map(|(k, v)| json::HeaderJson {
                    key: k.clone(),
                    value: v.as_deref().map(hex),
                })
                .collect();
            let headers = serde_json::to_string(&headers).map_err(io::Error::from)?;
            write!(
                self.out,
                ",\"headers\":{headers},\"sequence\":{}",
                r.sequence
            )?;
        }
        writeln!(self.out, "}}")?;
        Ok(())
    }

    /// Copies `n` bytes at `at` to the output as `decoder` shows them: text and hex stream in
    /// chunks; base64 and JSON need the whole field.
    fn copy_field(
        &mut self,
        c: &mut FileCursor<'_>,
        at: u64,
        n: u64,
        decoder: PlainDecoder,
    ) -> Result<(), StreamError> {
        match decoder {
            PlainDecoder::String => {
                // The JDK's replacement rules, as `java_utf8_lossy` applies them to a whole value.
                let mut utf8 = JavaUtf8Decoder::default();
                let mut text = Vec::new();
                let out = &mut *self.out;
                c.copy(at, n, |chunk, last| {
                    text.clear();
                    utf8.feed(chunk, &mut text);
                    if last {
                        utf8.finish(&mut text);
                    }
                    out.write_all(&text)
                })
            }
            PlainDecoder::Hex => {
                let out = &mut *self.out;
                c.copy(at, n, |chunk, _| out.write_all(hex(chunk).as_bytes()))
            }
            other => {
                let v = c.take_at(at, n)?;
                self.out.write_all(other.show(&v).as_bytes())?;
                Ok(())
            }
        }
    }
}

impl FileCursor<'_> {
    fn take_at(&mut self, at: u64, n: u64) -> Result<Vec<u8>, StreamError> {
        self.seek(at);
        self.take(n)
    }
}
