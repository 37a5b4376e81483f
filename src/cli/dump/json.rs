//! The `--json` output: one object per line, camelCase, each with a `type`.
//!
//! | `type` | when |
//! | --- | --- |
//! | `file` | first line of every dumped file: `path`, `fileType`, `baseOffset` (null if the name has none) |
//! | `batch` | every v2 batch header |
//! | `legacyBatch` | every magic 0/1 entry |
//! | `record` | with `--deep-iteration`, every record after its batch: `keySize`, `valueSize`, raw `key`/`value` hex, and with a decoder flag `decodedKey`/`decodedValue` (or `decodeError`) |
//! | `legacyRecord` | with `--deep-iteration`, the record of an uncompressed magic 0/1 entry |
//! | `indexEntry`, `timeIndexEntry`, `abortedTxn`, `producerSnapshotEntry` | index and snapshot entries |
//! | `summary` | last line of every file: how much was valid, and the first error |

use std::io::{self, Write};

use record_format::{FormatError, FormatErrorKind};
use serde::Serialize;

/// Writes `value` as one line of JSON.
pub fn emit<W: Write + ?Sized, T: Serialize>(out: &mut W, value: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value).map_err(io::Error::from)?;
    out.write_all(b"\n")
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// `{"type":"file", ...}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileLine {
    /// `"file"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The path as given.
    pub path: String,
    /// `log`, `kraftSnapshot`, `offsetIndex`, `timeIndex`, `txnIndex`, `producerSnapshot`.
    pub file_type: &'static str,
    /// The base offset from the file name.
    pub base_offset: Option<i64>,
}

/// `{"type":"batch", ...}`: a v2 batch header.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct BatchLine {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub base_offset: i64,
    pub last_offset: i64,
    pub last_offset_delta: i32,
    pub count: i32,
    pub position: u64,
    pub size: usize,
    pub batch_length: i32,
    pub magic: i8,
    pub crc: u32,
    pub crc_valid: bool,
    pub attributes: i16,
    pub compression: String,
    pub timestamp_type: &'static str,
    pub is_transactional: bool,
    pub is_control: bool,
    pub partition_leader_epoch: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub delete_horizon_ms: Option<i64>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub last_sequence: i32,
}

/// `{"type":"legacyBatch", ...}`: a magic 0/1 entry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct LegacyBatchLine {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub offset: i64,
    pub position: u64,
    pub size: usize,
    pub magic: i8,
    pub crc: u32,
    pub crc_valid: bool,
    pub attributes: i8,
    pub compression: String,
    pub timestamp_type: &'static str,
    pub max_timestamp: i64,
}

/// One record header: the key as (lossy) UTF-8, the value as hex.
#[derive(Debug, Serialize)]
#[allow(missing_docs)]
pub struct HeaderJson {
    pub key: String,
    pub value: Option<String>,
}

/// The decoded KIP-1279 barrier value.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct MirrorPidResetJson {
    pub version: i16,
    pub source_cluster_id: String,
}

/// `{"type":"record", ...}` (also `legacyRecord`, without headers and sequence).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct RecordLine {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub offset: i64,
    /// Left out with `--skip-record-metadata`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    /// Key length in bytes, -1 for null (left out with `--skip-record-metadata`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_size: Option<i64>,
    /// Value length in bytes, -1 for null (left out with `--skip-record-metadata`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_size: Option<i64>,
    pub key: Option<String>,
    pub value: Option<String>,
    /// With a decoder flag: the key as the decoder shows it (an object for internal topics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoded_key: Option<crate::cli::dump::decoders::wire::Json>,
    /// With a decoder flag: the value as the decoder shows it (an object for internal topics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decoded_value: Option<crate::cli::dump::decoders::wire::Json>,
    /// With a decoder flag: why the key or value did not decode (the raw bytes stay in
    /// `key`/`value`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_error: Option<DecodeErrorJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<Vec<HeaderJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<i32>,
    /// Control records only: the key's type id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_type: Option<i16>,
    /// ABORT/COMMIT markers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinator_epoch: Option<i32>,
    /// MIRROR_PID_RESET (type 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_pid_reset: Option<MirrorPidResetJson>,
    /// KRaft control records Kafka renders as JSON: that JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_data: Option<serde_json::Value>,
    /// Why the control key or value did not decode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_error: Option<String>,
    /// Legacy records: stored CRC-32 and whether it matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crc_valid: Option<bool>,
}

/// The `error` of a summary.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ErrorJson {
    /// A stable camelCase name ([`kind_name`]).
    pub kind: String,
    /// Absolute byte position in the file.
    pub position: u64,
    /// Human-readable.
    pub message: String,
}

impl ErrorJson {
    /// From a record-format error.
    pub fn from_format(e: &FormatError) -> Self {
        ErrorJson {
            kind: kind_name(&e.kind).to_owned(),
            position: e.position,
            message: e.kind.to_string(),
        }
    }

    /// Any other problem.
    pub fn other(kind: &str, position: u64, message: impl Into<String>) -> Self {
        ErrorJson {
            kind: kind.to_owned(),
            position,
            message: message.into(),
        }
    }
}

/// `{"type":"summary", ...}` of a `.log`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogSummary {
    /// `"summary"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Bytes from the start up to the first damaged batch (all of them if none).
    pub valid_bytes: u64,
    /// One past the last offset of the valid prefix, −1 if it holds no batch.
    pub next_offset: i64,
    /// Bytes read minus `validBytes`.
    pub invalid_bytes: u64,
    /// The first problem.
    pub error: Option<ErrorJson>,
}

/// `{"type":"summary", ...}` of an index or snapshot file.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntriesSummary {
    /// `"summary"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Entries printed.
    pub entries: usize,
    /// Bytes holding the printed entries (and, for indexes, the zero-filled tail after them).
    pub valid_bytes: u64,
    /// Bytes that do not form an entry.
    pub invalid_bytes: u64,
    /// The first problem.
    pub error: Option<ErrorJson>,
}

/// A stable camelCase name for every [`FormatErrorKind`].
pub fn kind_name(kind: &FormatErrorKind) -> &'static str {
    use FormatErrorKind::*;
    match kind {
        Truncated { .. } => "truncated",
        BadLength(_) => "badLength",
        BadMagic(_) => "badMagic",
        CrcMismatch { .. } => "crcMismatch",
        BadVarint => "badVarint",
        UnknownCompression(_) => "unknownCompression",
        NegativeRecordCount(_) => "negativeRecordCount",
        RecordCountMismatch { .. } => "recordCountMismatch",
        TrailingBytes(_) => "trailingBytes",
        BadRecordLength { .. } => "badRecordLength",
        BadHeaderCount(_) => "badHeaderCount",
        NegativeHeaderKeyLength(_) => "negativeHeaderKeyLength",
        LengthOutOfRange { .. } => "lengthOutOfRange",
        Decompression { .. } => "decompression",
        DecompressedTooLarge { .. } => "decompressedTooLarge",
        BadControlKey => "badControlKey",
        BadControlValue { .. } => "badControlValue",
        BadControlBatch(_) => "badControlBatch",
        LegacyBatch(_) => "legacyBatch",
        InvalidField(_) => "invalidField",
        _ => "other",
    }
}

/// A record key or value that its decoder could not read.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecodeErrorJson {
    /// Byte position in the file where decoding stopped.
    pub position: u64,
    /// Why.
    pub reason: String,
}
