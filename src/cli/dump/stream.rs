//! Reading a `.log` file a window of whole batches at a time, and streaming very large batches.
//!
//! `seglog dump` never reads a whole segment into memory: [`plan`] walks batch headers from a
//! position and returns the next window of whole batches (about [`WINDOW_BYTES`]), the bytes
//! the batch iterator needs to report a framing error, or a single batch of at least
//! [`STREAM_BATCH_BYTES`], which `Dumper::stream_batch` prints without holding it: the
//! CRC is computed over the file in chunks, and for an uncompressed batch each record is read by
//! `record_format::RecordReader` (the format crate's framing rules, through a window of the file),
//! its metadata printed, then its key and value copied to the output in chunks (as text decoded by `JavaUtf8Decoder`, exactly what `java_utf8_lossy` gives
//! for the whole value, or as hex; with `--json`, the record object is written field by field
//! with the hex streamed). A 300 MiB value costs a few MiB of memory, not several copies of the
//! value.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use record_format::{
    CompressionType, FieldSpan, FormatError, FormatErrorKind, ReadError, RecordBatch, RecordReader,
    StreamedRecord,
};

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

/// Reads `file` from `pos` on, each read at its own position (so that copies of keys and values
/// from the same file in between do not move it).
struct ReadAt<'f> {
    file: &'f File,
    pos: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut f = self.file;
        f.seek(SeekFrom::Start(self.pos))?;
        let n = f.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Moves the position only (the next read seeks to it).
impl Seek for ReadAt<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(_) => None,
        };
        self.pos = pos.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// Copies of byte ranges of a file below `end` (the keys and values a record's spans name).
struct FileCursor<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
}

impl<'f> FileCursor<'f> {
    fn new(file: &'f File, start: u64, end: u64) -> Self {
        FileCursor {
            file,
            pos: start,
            end,
        }
    }

    fn truncated(&self, need: u64) -> ReadError {
        ReadError::Format(FormatError::new(
            FormatErrorKind::Truncated {
                need,
                have: self.end.saturating_sub(self.pos),
            },
            self.pos,
        ))
    }

    /// Reads `n` bytes at `at` (small: keys and values for decoders that need them whole).
    fn take_at(&mut self, at: u64, n: u64) -> Result<Vec<u8>, ReadError> {
        self.pos = at;
        if at + n > self.end {
            return Err(self.truncated(n));
        }
        let v = read_exact_at(self.file, at, n as usize)?;
        self.pos = at + n;
        Ok(v)
    }

    /// Calls `sink` with `[at, at + n)` in chunks.
    fn copy(
        &mut self,
        at: u64,
        n: u64,
        mut sink: impl FnMut(&[u8], bool) -> io::Result<()>,
    ) -> Result<(), ReadError> {
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
        if let Err(ReadError::Io(e)) = copied {
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
        let src = ReadAt {
            file,
            pos: pos + V2_HEADER,
        };
        let records = match RecordReader::new(b, size - V2_HEADER, src) {
            Ok(r) => r,
            Err(e) => return self.stream_problem(path, ReadError::Format(e), st),
        };
        for r in records {
            let printed = r.and_then(|r| self.print_streamed(file, b, &r, st));
            if let Err(e) = printed {
                return self.stream_problem(path, e, st);
            }
        }
        Ok(true)
    }

    fn stream_problem(&mut self, path: &Path, e: ReadError, st: &mut LogState) -> io::Result<bool> {
        match e {
            ReadError::Io(e) => Err(e),
            ReadError::Format(e) => {
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
        r: &StreamedRecord,
        st: &mut LogState,
    ) -> Result<(), ReadError> {
        if r.offset != st.last_record_offset.wrapping_add(1) {
            st.non_consecutive.insert(st.last_record_offset, r.offset);
        }
        st.last_record_offset = r.offset;
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
                r.key_size(),
                r.value_size(),
                r.sequence,
                r.headers
                    .iter()
                    .map(|h| java_utf8_lossy(&h.key))
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
                    if let Some(k) = r.key {
                        write!(self.out, "{prefix}key: ")?;
                        self.copy_field(&mut c, k, kd)?;
                        prefix = " ";
                    }
                    if let Some(v) = r.value {
                        write!(self.out, "{prefix}payload: ")?;
                        self.copy_field(&mut c, v, vd)?;
                    }
                }
                None => {
                    let key = r.key.map(|k| (k.position, c.take_at(k.position, k.len)));
                    let value = r.value.map(|v| (v.position, c.take_at(v.position, v.len)));
                    let field = |f: &Option<(u64, Result<Vec<u8>, ReadError>)>| match f {
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
    fn json_streamed(&mut self, file: &File, r: &StreamedRecord) -> Result<(), ReadError> {
        let skip = self.args.skip_record_metadata;
        write!(self.out, "{{\"type\":\"record\",\"offset\":{}", r.offset)?;
        if !skip {
            write!(
                self.out,
                ",\"timestamp\":{},\"keySize\":{},\"valueSize\":{}",
                r.timestamp,
                r.key_size(),
                r.value_size()
            )?;
        }
        let mut c = FileCursor::new(file, 0, u64::MAX);
        for (name, span) in [("key", r.key), ("value", r.value)] {
            write!(self.out, ",\"{name}\":")?;
            match span {
                None => write!(self.out, "null")?,
                Some(span) => {
                    write!(self.out, "\"")?;
                    self.copy_field(&mut c, span, PlainDecoder::Hex)?;
                    write!(self.out, "\"")?;
                }
            }
        }
        if !skip {
            let headers: Vec<json::HeaderJson> = r
                .headers
                .iter()
                .map(|h| json::HeaderJson {
                    key: java_utf8_lossy(&h.key).into_owned(),
                    value: h.value.as_deref().map(hex),
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
        FieldSpan {
            position: at,
            len: n,
        }: FieldSpan,
        decoder: PlainDecoder,
    ) -> Result<(), ReadError> {
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
