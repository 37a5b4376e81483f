//! Dumping a `.log` (or KRaft `.checkpoint`) file: Kafka's `DumpLogSegments.dumpLog`.
//!
//! Batches are walked without CRC validation, like Kafka's `FileRecords.batches()`, so a batch
//! with a bad CRC is printed with `isvalid: false` and the dump goes on. Anything damaged (bad CRC,
//! records that do not decode, a control record that does not decode, a hard framing error,
//! trailing bytes) is one stderr line `<path>: <error>`, ends the file's valid prefix, and makes
//! the exit status 1.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use record_format::internals::Cursor;
use record_format::ControlRecordKey;
use record_format::{
    Batches, CompressionType, ControlRecord, ControlRecordType, DecodeLimits, FormatError,
    FormatErrorKind, IterEnd, LegacyEntry, LogEntry, Record, RecordBatch,
};

use super::decoders::wire::Json;
use super::decoders::Field;
use super::java_utf8::java_utf8_lossy;
use super::json::{
    self, hex, BatchLine, DecodeErrorJson, ErrorJson, HeaderJson, LegacyBatchLine, LogSummary,
    MirrorPidResetJson, RecordLine,
};
use super::{absolute, kraft, stream, Dumper, FileType, KEPT_PROBLEMS};

/// Kafka's `RecordBatch.NO_TIMESTAMP`.
const NO_TIMESTAMP: i64 = -1;

/// Java's `OptionalLong.toString()`.
pub fn optional_long(v: Option<i64>) -> String {
    match v {
        Some(n) => format!("OptionalLong[{n}]"),
        None => "OptionalLong.empty".to_owned(),
    }
}

/// Kafka's codec `name` for a compression id (`unknown(<id>)` for 5..=7, where Kafka throws).
pub fn compression_name(id: u8) -> String {
    CompressionType::from_id(id).map_or_else(|| format!("unknown({id})"), |c| c.name().to_owned())
}

/// Progress of one log file: the valid prefix, the first error, offsets seen.
#[derive(Debug)]
pub(crate) struct LogState {
    pub(crate) first_error: Option<ErrorJson>,
    pub(crate) valid_end: Option<u64>,
    pub(crate) next_offset: i64,
    pub(crate) last_record_offset: i64,
    pub(crate) non_consecutive: BTreeMap<i64, i64>,
    /// Non-consecutive offsets past the first [`KEPT_PROBLEMS`]: counted only.
    pub(crate) omitted: u64,
    warned_legacy_compressed: bool,
}

/// Inserts `(k, v)` into `map` if it holds fewer than [`KEPT_PROBLEMS`] entries (or has `k`);
/// counts it in `omitted` otherwise.
pub(crate) fn keep_pair<K: Ord, V>(map: &mut BTreeMap<K, V>, k: K, v: V, omitted: &mut u64) {
    if map.len() < KEPT_PROBLEMS || map.contains_key(&k) {
        map.insert(k, v);
    } else {
        *omitted += 1;
    }
}

impl LogState {
    pub(crate) fn problem(&mut self, batch_position: u64, error: ErrorJson) {
        if self.first_error.is_none() {
            self.first_error = Some(error);
            self.valid_end = Some(batch_position);
        }
    }

    /// A problem inside a batch whose framing and CRC are valid (records or a control value that
    /// do not decode): reported, but the batch's bytes stay valid (`validBytes`/`nextOffset`
    /// describe framing and CRCs only, as Kafka's tool and recovery see the file).
    pub(crate) fn content_problem(&mut self, error: ErrorJson) {
        if self.first_error.is_none() {
            self.first_error = Some(error);
        }
    }
}

/// How a control record is shown: the text suffix Kafka's tool appends to the record line, the
/// JSON fields, and the decoding error if any.
#[derive(Debug, Default)]
pub struct ControlView {
    /// The key's type id, if the key decoded.
    pub type_id: Option<i16>,
    /// Text suffix, starting with a space.
    pub text: String,
    /// ABORT/COMMIT coordinator epoch.
    pub coordinator_epoch: Option<i32>,
    /// MIRROR_PID_RESET value.
    pub mirror_pid_reset: Option<MirrorPidResetJson>,
    /// KRaft values Kafka prints as JSON.
    pub data: Option<serde_json::Value>,
    /// Why the key or value did not decode.
    pub error: Option<FormatError>,
}

fn hex_or_null(b: Option<&[u8]>) -> String {
    b.map_or_else(|| "null".to_owned(), hex)
}

/// Decodes the control record `r` the way Kafka's `printControlRecord` does, never failing: a
/// key or value that does not decode gives ` controlType: NAME(id) value: <hex> error: <why>`.
pub fn control_view(r: &Record<'_>) -> ControlView {
    let key_pos = r.key_position();
    let parsed = r
        .key()
        .ok_or_else(|| FormatError::new(FormatErrorKind::BadControlKey, key_pos))
        .and_then(|k| ControlRecordKey::parse(k, key_pos));
    let t = match parsed {
        Ok((_, t)) => t,
        Err(e) => {
            return ControlView {
                text: format!(
                    " controlType: INVALID key: {} error: {e}",
                    hex_or_null(r.key())
                ),
                error: Some(e),
                ..ControlView::default()
            }
        }
    };
    let with_error = |e: FormatError| ControlView {
        type_id: Some(t.id()),
        text: format!(
            " controlType: {}({}) value: {} error: {e}",
            t.name(),
            t.id(),
            hex_or_null(r.value())
        ),
        error: Some(e),
        ..ControlView::default()
    };
    match t {
        ControlRecordType::Abort
        | ControlRecordType::Commit
        | ControlRecordType::MirrorPidReset => match ControlRecord::parse(r) {
            Ok(ControlRecord::EndTxn(t, m)) => ControlView {
                type_id: Some(t.id()),
                text: format!(
                    " endTxnMarker: {} coordinatorEpoch: {}",
                    t.name(),
                    m.coordinator_epoch
                ),
                coordinator_epoch: Some(m.coordinator_epoch),
                ..ControlView::default()
            },
            Ok(ControlRecord::MirrorPidReset(m)) => {
                let v = MirrorPidResetJson {
                    version: m.version,
                    source_cluster_id: m.source_cluster_id,
                };
                let text = serde_json::to_string(&v).unwrap_or_default();
                ControlView {
                    type_id: Some(t.id()),
                    text: format!(" MirrorPidReset {text}"),
                    mirror_pid_reset: Some(v),
                    ..ControlView::default()
                }
            }
            Ok(ControlRecord::Other(..)) => plain_control(t),
            Err(e) => with_error(e),
        },
        _ => {
            let vpos = r.value_position();
            let Some(value) = r.value() else {
                if kraft::decode(t, &[]).is_some() {
                    return with_error(bad_value(t, "null value", vpos));
                }
                return plain_control(t);
            };
            match kraft::decode(t, value) {
                None => plain_control(t),
                Some(Ok((label, j))) => ControlView {
                    type_id: Some(t.id()),
                    text: format!("{label}{j}"),
                    data: serde_json::from_str(&j).ok(),
                    ..ControlView::default()
                },
                Some(Err(why)) => {
                    let mut v = with_error(bad_value(t, "does not decode", vpos));
                    v.text = format!(
                        " controlType: {}({}) value: {} error: {why}",
                        t.name(),
                        t.id(),
                        hex(value)
                    );
                    v
                }
            }
        }
    }
}

fn bad_value(t: ControlRecordType, reason: &'static str, position: u64) -> FormatError {
    FormatError::new(
        FormatErrorKind::BadControlValue {
            control_type: t.id(),
            reason,
        },
        position,
    )
}

fn plain_control(t: ControlRecordType) -> ControlView {
    ControlView {
        type_id: Some(t.id()),
        text: format!(" controlType: {}({})", t.name(), t.id()),
        ..ControlView::default()
    }
}

/// Kafka's `DumpLogSegments.printBatchLevel` for a v2 batch (`position` = bytes before it).
pub fn batch_line(b: &RecordBatch<'_>) -> String {
    batch_line_with(b, b.size_in_bytes(), b.is_valid())
}

/// [`batch_line`] with the size and CRC validity given (for a batch streamed from the file,
/// whose view holds only the header).
pub(crate) fn batch_line_with(b: &RecordBatch<'_>, size: usize, valid: bool) -> String {
    format!(
        "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} \
         producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} \
         deleteHorizonMs: {} position: {} {}: {} size: {} magic: {} compresscodec: {} crc: {} isvalid: {}",
        b.base_offset(),
        b.last_offset(),
        b.records_count(),
        b.base_sequence(),
        b.last_sequence(),
        b.producer_id(),
        b.producer_epoch(),
        b.partition_leader_epoch(),
        b.is_transactional(),
        b.is_control(),
        optional_long(b.delete_horizon_ms()),
        b.position(),
        b.timestamp_type().name(),
        b.max_timestamp(),
        size,
        b.magic(),
        compression_name((b.attributes() & 0x07) as u8),
        b.crc(),
        valid,
    )
}

/// The `--json` batch object of `b` (`size` and `crc_valid` given, for a batch streamed from
/// the file whose view holds only the header).
pub(crate) fn batch_json(b: &RecordBatch<'_>, size: usize, crc_valid: bool) -> BatchLine {
    BatchLine {
        kind: "batch",
        base_offset: b.base_offset(),
        last_offset: b.last_offset(),
        last_offset_delta: b.last_offset_delta(),
        count: b.records_count(),
        position: b.position(),
        size,
        batch_length: i32::try_from(size.saturating_sub(12)).unwrap_or(i32::MAX),
        magic: b.magic(),
        crc: b.crc(),
        crc_valid,
        attributes: b.attributes(),
        compression: compression_name((b.attributes() & 0x07) as u8),
        timestamp_type: b.timestamp_type().name(),
        is_transactional: b.is_transactional(),
        is_control: b.is_control(),
        partition_leader_epoch: b.partition_leader_epoch(),
        base_timestamp: b.base_timestamp(),
        max_timestamp: b.max_timestamp(),
        delete_horizon_ms: b.delete_horizon_ms(),
        producer_id: b.producer_id(),
        producer_epoch: b.producer_epoch(),
        base_sequence: b.base_sequence(),
        last_sequence: b.last_sequence(),
    }
}

/// `NoTimestampType`, `CreateTime` or `LogAppendTime` of a legacy entry, and its max timestamp.
fn legacy_timestamp(l: &LegacyEntry<'_>) -> (&'static str, i64) {
    if l.magic() == 0 {
        return ("NoTimestampType", NO_TIMESTAMP);
    }
    let ts = l
        .as_bytes()
        .get(18..26)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(NO_TIMESTAMP, i64::from_be_bytes);
    let ty = if l.attributes() & 0x08 != 0 {
        "LogAppendTime"
    } else {
        "CreateTime"
    };
    (ty, ts)
}

/// A nullable byte field (key or value).
type Bytes<'a> = Option<&'a [u8]>;

/// Key and value of an uncompressed legacy entry (which is its own single record).
fn legacy_key_value<'a>(l: &LegacyEntry<'a>) -> Result<(Bytes<'a>, Bytes<'a>), FormatError> {
    let header = if l.magic() == 0 { 18 } else { 26 };
    let mut c = Cursor::new(l.as_bytes(), l.position());
    c.bytes(header)?;
    let field = |c: &mut Cursor<'a>| -> Result<Option<&'a [u8]>, FormatError> {
        let n = c.i32()?;
        if n < 0 {
            Ok(None)
        } else {
            c.bytes(n as usize).map(Some)
        }
    };
    let key = field(&mut c)?;
    let value = field(&mut c)?;
    Ok((key, value))
}

fn key_field<'a>(r: &Record<'a>) -> Field<'a> {
    Field {
        bytes: r.key(),
        position: r.key_position(),
    }
}

fn value_field<'a>(r: &Record<'a>) -> Field<'a> {
    Field {
        bytes: r.value(),
        position: r.value_position(),
    }
}

impl<O: Write, E: Write> Dumper<'_, O, E> {
    /// Dumps one `.log` / `.checkpoint` file.
    pub(crate) fn dump_log(&mut self, path: &Path, ty: FileType) -> io::Result<()> {
        if !self.args.json {
            if ty == FileType::Log {
                let base = self.base_offset(path)?;
                writeln!(self.out, "Log starting offset: {base}")?;
            } else {
                self.kraft_snapshot_header(path)?;
            }
        }
        let limit = u64::try_from(self.args.max_bytes).unwrap_or(0);
        let file = match segment_store::StdFs::open_named(path) {
            Ok(f) => f,
            Err(e) => return self.read_failed(path, &e),
        };
        let file_len = file.metadata().map_or(0, |m| m.len());
        let end = file_len.min(limit);
        let cut = file_len > end;
        let mut st = LogState {
            first_error: None,
            valid_end: None,
            next_offset: -1,
            last_record_offset: -1,
            non_consecutive: BTreeMap::new(),
            omitted: 0,
            warned_legacy_compressed: false,
        };
        let Some((valid_prefix_end, trailing_at)) = self.walk_log(path, &file, end, &mut st)?
        else {
            return Ok(());
        };
        self.finish_log(path, end, cut, valid_prefix_end, trailing_at, st)
    }

    /// Dumps the batches of `file` up to `end`; returns where the valid prefix ends and where
    /// bytes that do not form a batch start, or `None` if reading failed (already reported).
    ///
    /// The file is read a window of whole batches at a time (memory stays bounded by the
    /// window and the largest batch); a batch of STREAM_BATCH_BYTES or more is streamed from
    /// the file instead of read whole.
    fn walk_log(
        &mut self,
        path: &Path,
        file: &File,
        end: u64,
        st: &mut LogState,
    ) -> io::Result<Option<(u64, Option<u64>)>> {
        let mut valid_prefix_end = 0u64;
        let mut trailing_at = None;
        while valid_prefix_end < end {
            let plan = match stream::plan(file, valid_prefix_end, end) {
                Ok(p) => p,
                Err(e) => {
                    self.read_failed(path, &e)?;
                    return Ok(None);
                }
            };
            match plan {
                stream::Plan::Window(bytes) => {
                    let (stopped, stop) = self.dump_window(path, &bytes, valid_prefix_end, st)?;
                    valid_prefix_end = stopped;
                    if stop {
                        break;
                    }
                }
                stream::Plan::Stream { size } => {
                    self.stream_batch(path, file, valid_prefix_end, size, st)?;
                    valid_prefix_end += size;
                }
                stream::Plan::Trailing => {
                    trailing_at = Some(valid_prefix_end);
                    break;
                }
            }
        }
        Ok(Some((valid_prefix_end, trailing_at)))
    }

    /// Dumps the batches of one window read at `start`; returns where its valid prefix ends and
    /// whether the walk stops there (a hard error, or no whole batch in the window).
    fn dump_window(
        &mut self,
        path: &Path,
        bytes: &[u8],
        start: u64,
        st: &mut LogState,
    ) -> io::Result<(u64, bool)> {
        let mut iter = Batches::new(bytes, start);
        for entry in iter.by_ref() {
            match entry {
                Ok(LogEntry::V2(b)) => self.v2_batch(path, &b, st)?,
                Ok(LogEntry::Legacy(l)) => self.legacy_batch(path, &l, st)?,
                Err(e) => {
                    writeln!(self.err, "{}: {e}", path.display())?;
                    st.problem(e.position, ErrorJson::from_format(&e));
                }
            }
        }
        let stopped = iter.valid_prefix_end();
        let hard_error = matches!(iter.stopped_at(), Some(IterEnd::Error(_)));
        Ok((stopped, hard_error || stopped == start))
    }

    /// Reports the incomplete tail, the summary (JSON) or the invalid-bytes line, and keeps the
    /// non-consecutive offsets for the final report.
    fn finish_log(
        &mut self,
        path: &Path,
        end: u64,
        cut: bool,
        valid_prefix_end: u64,
        trailing_at: Option<u64>,
        mut st: LogState,
    ) -> io::Result<()> {
        if let Some(position) = trailing_at {
            if !cut {
                let n = end - position;
                let msg = format!("{n} bytes at the end do not form a complete batch");
                writeln!(
                    self.err,
                    "{}: {msg} at byte position {position}",
                    path.display()
                )?;
                st.problem(position, ErrorJson::other("incompleteBatch", position, msg));
            }
        }
        if st.first_error.is_some() {
            self.damaged();
        }
        let valid_bytes = st.valid_end.unwrap_or(valid_prefix_end);
        let trailing = end - valid_prefix_end;
        if self.args.json {
            json::emit(
                self.out,
                &LogSummary {
                    kind: "summary",
                    valid_bytes,
                    next_offset: st.next_offset,
                    invalid_bytes: end - valid_bytes,
                    error: st.first_error.clone(),
                },
            )?;
        } else if trailing > 0 && self.args.max_bytes == i32::MAX {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            writeln!(
                self.out,
                "Found {trailing} invalid bytes at the end of {name}"
            )?;
        }
        self.omitted_problems += std::mem::take(&mut st.omitted);
        if !st.non_consecutive.is_empty() {
            self.non_consecutive
                .push((absolute(path), std::mem::take(&mut st.non_consecutive)));
        }
        Ok(())
    }

    /// `Snapshot end offset: <o>, epoch: <e>` or `KRaft bootstrap snapshot`.
    fn kraft_snapshot_header(&mut self, path: &Path) -> io::Result<()> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == "bootstrap.checkpoint" {
            return writeln!(self.out, "KRaft bootstrap snapshot");
        }
        let parsed = name
            .strip_suffix(".checkpoint")
            .and_then(|s| s.split_once('-'))
            .and_then(|(o, e)| Some((o.parse::<i64>().ok()?, e.parse::<i32>().ok()?)));
        match parsed {
            Some((offset, epoch)) => {
                writeln!(self.out, "Snapshot end offset: {offset}, epoch: {epoch}")
            }
            None => writeln!(
                self.err,
                "warning: {}: not a KRaft snapshot name (<offset>-<epoch>.checkpoint)",
                path.display()
            ),
        }
    }

    fn v2_batch(&mut self, path: &Path, b: &RecordBatch<'_>, st: &mut LogState) -> io::Result<()> {
        let crc_valid = b.is_valid();
        if self.args.json {
            json::emit(self.out, &batch_json(b, b.size_in_bytes(), crc_valid))?;
        } else {
            writeln!(self.out, "{}", batch_line(b))?;
        }
        let mut ok = true;
        if let Err(e) = b.validate() {
            writeln!(self.err, "{}: {e}", path.display())?;
            st.problem(b.position(), ErrorJson::from_format(&e));
            ok = false;
        }
        if self.args.is_deep() {
            // Records that do not decode are content problems: the batch's bytes stay valid.
            self.v2_records(path, b, st)?;
        }
        if ok && st.valid_end.is_none() {
            st.next_offset = b.next_offset();
        }
        Ok(())
    }

    /// Prints the records of `b`; `false` if any did not decode.
    pub(crate) fn v2_records(
        &mut self,
        path: &Path,
        b: &RecordBatch<'_>,
        st: &mut LogState,
    ) -> io::Result<bool> {
        let mut ok = true;
        match b.records(&DecodeLimits::default()) {
            Err(e) => {
                writeln!(self.err, "{}: {e}", path.display())?;
                st.content_problem(ErrorJson::from_format(&e));
                ok = false;
            }
            Ok(records) => {
                for r in records.iter() {
                    match r {
                        Ok(r) => {
                            if !self.record(path, b, &r, st)? {
                                ok = false;
                            }
                        }
                        Err(e) => {
                            writeln!(self.err, "{}: {e}", path.display())?;
                            st.content_problem(ErrorJson::from_format(&e));
                            ok = false;
                        }
                    }
                }
            }
        }
        Ok(ok)
    }

    /// Prints one record; `false` if its control key/value did not decode.
    fn record(
        &mut self,
        path: &Path,
        b: &RecordBatch<'_>,
        r: &Record<'_>,
        st: &mut LogState,
    ) -> io::Result<bool> {
        if r.offset() != st.last_record_offset.wrapping_add(1) {
            keep_pair(
                &mut st.non_consecutive,
                st.last_record_offset,
                r.offset(),
                &mut st.omitted,
            );
        }
        st.last_record_offset = r.offset();
        let control = b.is_control().then(|| control_view(r));
        let mut ok = true;
        if let Some(e) = control.as_ref().and_then(|c| c.error.clone()) {
            writeln!(self.err, "{}: offset {}: {e}", path.display(), r.offset())?;
            st.content_problem(ErrorJson::from_format(&e));
            ok = false;
        }
        if self.args.json {
            let skip = self.args.skip_record_metadata;
            if skip && control.is_some() {
                // Kafka: --skip-record-metadata "also skips control records".
                return Ok(ok);
            }
            let headers = r
                .headers()
                .map(|h| HeaderJson {
                    key: java_utf8_lossy(h.key).into_owned(),
                    value: h.value.map(hex),
                })
                .collect();
            let mut line = RecordLine {
                kind: "record",
                offset: r.offset(),
                timestamp: (!skip).then(|| r.timestamp()),
                key_size: (!skip).then(|| i64::from(r.key_size())),
                value_size: (!skip).then(|| i64::from(r.value_size())),
                key: r.key().map(hex),
                value: r.value().map(hex),
                decoded_key: None,
                decoded_value: None,
                decode_error: None,
                headers: (!skip).then_some(headers),
                sequence: (!skip).then(|| r.sequence()),
                control_type: None,
                coordinator_epoch: None,
                mirror_pid_reset: None,
                control_data: None,
                control_error: None,
                crc: None,
                crc_valid: None,
            };
            if let Some(c) = control {
                line.control_type = c.type_id;
                line.coordinator_epoch = c.coordinator_epoch;
                line.mirror_pid_reset = c.mirror_pid_reset;
                line.control_data = c.data;
                line.control_error = c.error.map(|e| e.to_string());
            } else if self.args.json_decodes() {
                self.decode_into(&mut line, r.offset(), key_field(r), value_field(r));
            }
            json::emit(self.out, &line)?;
            return Ok(ok);
        }
        let mut line = String::new();
        if !self.args.skip_record_metadata {
            let keys: Vec<String> = r
                .headers()
                .map(|h| java_utf8_lossy(h.key).into_owned())
                .collect();
            line = format!(
                "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                r.offset(),
                b.timestamp_type().name(),
                r.timestamp(),
                r.key_size(),
                r.value_size(),
                r.sequence(),
                keys.join(",")
            );
            if let Some(c) = &control {
                line.push_str(&c.text);
            }
        }
        if self.args.prints_data() && control.is_none() {
            self.push_contents(&mut line, r.offset(), key_field(r), value_field(r));
        }
        writeln!(self.out, "{line}")?;
        Ok(ok)
    }

    /// Kafka's `printRecordContents`: ` key: <k>` and ` payload: <v>` as the chosen decoder
    /// shows them, the first one prefixed with `| ` instead of a space when record metadata is
    /// skipped.
    fn push_contents(&self, line: &mut String, offset: i64, key: Field<'_>, value: Field<'_>) {
        let parsed = self.decoder.parse(offset, key, value);
        let mut prefix = if self.args.skip_record_metadata {
            "| "
        } else {
            " "
        };
        if let Some(k) = parsed.key {
            line.push_str(prefix);
            line.push_str("key: ");
            line.push_str(&k);
            prefix = " ";
        }
        if let Some(v) = parsed.value {
            line.push_str(prefix);
            line.push_str("payload: ");
            line.push_str(&v);
        }
    }

    /// `--json` with a decoder: the decoded key and value (objects for internal topics, the
    /// decoder's text otherwise) and any decoding error.
    fn decode_into(&self, line: &mut RecordLine, offset: i64, key: Field<'_>, value: Field<'_>) {
        let parsed = self.decoder.parse(offset, key, value);
        if self.decoder.is_internal() {
            line.decoded_key = parsed.key_json;
            line.decoded_value = parsed.value_json;
            line.decode_error = parsed.error.map(|e| DecodeErrorJson {
                position: e.position,
                reason: e.reason,
            });
        } else {
            line.decoded_key = parsed.key.map(Json::Str);
            line.decoded_value = parsed.value.map(Json::Str);
        }
    }

    fn legacy_batch(
        &mut self,
        path: &Path,
        l: &LegacyEntry<'_>,
        st: &mut LogState,
    ) -> io::Result<()> {
        let (ts_type, max_ts) = legacy_timestamp(l);
        let codec = (l.attributes() & 0x07) as u8;
        let valid = l.is_valid();
        if self.args.json {
            json::emit(
                self.out,
                &LegacyBatchLine {
                    kind: "legacyBatch",
                    offset: l.offset(),
                    position: l.position(),
                    size: l.size_in_bytes(),
                    magic: l.magic(),
                    crc: l.crc(),
                    crc_valid: valid,
                    attributes: l.attributes(),
                    compression: compression_name(codec),
                    timestamp_type: ts_type,
                    max_timestamp: max_ts,
                },
            )?;
        } else {
            writeln!(
                self.out,
                "offset: {} position: {} {ts_type}: {max_ts} size: {} magic: {} compresscodec: {} crc: {} isvalid: {valid}",
                l.offset(),
                l.position(),
                l.size_in_bytes(),
                l.magic(),
                compression_name(codec),
                l.crc(),
            )?;
        }
        let mut ok = valid;
        if let Err(e) = l.validate() {
            writeln!(self.err, "{}: {e}", path.display())?;
            st.problem(l.position(), ErrorJson::from_format(&e));
        }
        if self.args.is_deep() {
            if codec != 0 {
                if !st.warned_legacy_compressed {
                    st.warned_legacy_compressed = true;
                    writeln!(
                        self.err,
                        "warning: {}: records of compressed magic {} entries are not printed",
                        path.display(),
                        l.magic()
                    )?;
                }
            } else {
                match legacy_key_value(l) {
                    Err(e) => {
                        writeln!(self.err, "{}: {e}", path.display())?;
                        st.problem(l.position(), ErrorJson::from_format(&e));
                        ok = false;
                    }
                    Ok((key, value)) => {
                        self.legacy_record(l, ts_type, max_ts, key, value, st)?;
                    }
                }
            }
        }
        if ok && st.valid_end.is_none() {
            st.next_offset = l.offset().wrapping_add(1);
        }
        Ok(())
    }

    fn legacy_record(
        &mut self,
        l: &LegacyEntry<'_>,
        ts_type: &str,
        ts: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        st: &mut LogState,
    ) -> io::Result<()> {
        let offset = l.offset();
        if offset != st.last_record_offset.wrapping_add(1) {
            keep_pair(
                &mut st.non_consecutive,
                st.last_record_offset,
                offset,
                &mut st.omitted,
            );
        }
        st.last_record_offset = offset;
        if self.args.json {
            let skip = self.args.skip_record_metadata;
            let size = |b: Option<&[u8]>| (!skip).then(|| b.map_or(-1, |b| b.len() as i64));
            let mut line = RecordLine {
                kind: "legacyRecord",
                offset,
                timestamp: (!skip).then_some(ts),
                key_size: size(key),
                value_size: size(value),
                key: key.map(hex),
                value: value.map(hex),
                decoded_key: None,
                decoded_value: None,
                decode_error: None,
                headers: None,
                sequence: None,
                control_type: None,
                coordinator_epoch: None,
                mirror_pid_reset: None,
                control_data: None,
                control_error: None,
                crc: (!skip).then(|| l.crc()),
                crc_valid: (!skip).then(|| l.is_valid()),
            };
            if self.args.json_decodes() {
                let at = l.position();
                let f = |bytes| Field {
                    bytes,
                    position: at,
                };
                self.decode_into(&mut line, offset, f(key), f(value));
            }
            return json::emit(self.out, &line);
        }
        let mut line = String::new();
        if !self.args.skip_record_metadata {
            line = format!(
                "| offset: {offset} {ts_type}: {ts} keySize: {} valueSize: {} isValid: {} crc: {}",
                key.map_or(-1, |k| k.len() as i64),
                value.map_or(-1, |v| v.len() as i64),
                l.is_valid(),
                l.crc()
            );
        }
        if self.args.prints_data() {
            let at = l.position();
            self.push_contents(
                &mut line,
                offset,
                Field {
                    bytes: key,
                    position: at,
                },
                Field {
                    bytes: value,
                    position: at,
                },
            );
        }
        writeln!(self.out, "{line}")
    }
}
