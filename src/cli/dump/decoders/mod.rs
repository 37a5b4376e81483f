//! Record key/value decoders for `seglog dump`: Kafka's `DumpLogSegments` message parsers
//! (`--offsets-decoder`, `--transaction-log-decoder`, `--cluster-metadata-decoder`,
//! `--share-group-state-decoder`, `--remote-log-metadata-decoder`, the built-in
//! `--key-decoder-class`/`--value-decoder-class` classes) and seglog's own plain decoders.
//!
//! The record schemas are decoded by code generated from Kafka's message schema JSON files
//! ([`generated`], by `tools/schema-gen`); this module only frames them the way Kafka's parsers
//! do and renders Kafka's text:
//!
//! ```text
//! coordinator topics   key:   int16 record type | key struct (read at version = type)
//!                      value: int16 version | value struct        (null value = tombstone)
//!   text               key: {"type":"<t>","data":{..}} payload: {"version":"<v>","data":{..}}
//! __cluster_metadata   value: uvarint frame version (1) | uvarint type | uvarint version | struct
//!   text               payload: {"type":"TOPIC_RECORD","version":0,"data":{..}}
//! ```
//!
//! A record that does not decode is printed in Kafka's words (`Unknown record type 99 at offset
//! 7, skipping.`, `Error at offset 7, skipping. <why>`), and the dump goes on; `--json` adds the
//! raw bytes and the byte position where decoding stopped.

pub mod generated;
pub mod remote;
pub mod wire;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use self::generated::{clients, group, metadata, share, transaction};
use self::wire::{DecodeError, Json, Reader};
use super::json::hex;

/// How keys or values are shown when no internal-topic decoder is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PlainDecoder {
    /// UTF-8 text, invalid sequences replaced (Kafka's `StringDecoder`).
    #[default]
    String,
    /// Lower-case hex.
    Hex,
    /// Standard base64.
    Base64,
    /// The bytes parsed as JSON and printed compactly; text if they are not JSON.
    Json,
    /// A big-endian int32 (Kafka's `IntegerDecoder`).
    #[value(skip)]
    Int,
    /// A big-endian int64 (Kafka's `LongDecoder`).
    #[value(skip)]
    Long,
}

impl PlainDecoder {
    /// The decoder for a `--key-decoder-class`/`--value-decoder-class` class name, or why it
    /// cannot be used.
    pub fn from_class(class: &str) -> Result<PlainDecoder, String> {
        let simple = class.rsplit('.').next().unwrap_or(class);
        let builtin = class == simple
            || class.starts_with("org.apache.kafka.tools.api.")
            || class.starts_with("kafka.serializer.");
        match simple {
            "StringDecoder" if builtin => Ok(PlainDecoder::String),
            "DefaultDecoder" if builtin => Ok(PlainDecoder::Hex),
            "IntegerDecoder" if builtin => Ok(PlainDecoder::Int),
            "LongDecoder" if builtin => Ok(PlainDecoder::Long),
            _ => Err(format!(
                "error: decoder class {class} cannot be loaded: seglog runs no Java; use a built-in \
                 class (org.apache.kafka.tools.api.StringDecoder, DefaultDecoder, IntegerDecoder, \
                 LongDecoder) or --key-decoder/--value-decoder string|hex|base64|json"
            )),
        }
    }

    /// The text of `b`.
    pub fn show(self, b: &[u8]) -> String {
        match self {
            PlainDecoder::String => super::java_utf8::java_utf8_lossy(b).into_owned(),
            PlainDecoder::Hex => hex(b),
            PlainDecoder::Base64 => STANDARD.encode(b),
            PlainDecoder::Json => match serde_json::from_slice::<serde_json::Value>(b) {
                Ok(v) => v.to_string(),
                Err(_) => String::from_utf8_lossy(b).into_owned(),
            },
            PlainDecoder::Int => match <[u8; 4]>::try_from(b.get(..4).unwrap_or_default()) {
                Ok(a) => i32::from_be_bytes(a).to_string(),
                Err(_) => format!("<{} bytes, not an int32: {}>", b.len(), hex(b)),
            },
            PlainDecoder::Long => match <[u8; 8]>::try_from(b.get(..8).unwrap_or_default()) {
                Ok(a) => i64::from_be_bytes(a).to_string(),
                Err(_) => format!("<{} bytes, not an int64: {}>", b.len(), hex(b)),
            },
        }
    }
}

/// Which parser turns record keys and values into text (Kafka's `MessageParser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    /// Plain key and value decoders.
    Plain {
        /// For keys.
        key: PlainDecoder,
        /// For values.
        value: PlainDecoder,
    },
    /// `__consumer_offsets` (`--offsets-decoder`).
    Offsets,
    /// `__transaction_state` (`--transaction-log-decoder`).
    TransactionLog,
    /// `__share_group_state` (`--share-group-state-decoder`).
    ShareGroupState,
    /// `__cluster_metadata` and its snapshots (`--cluster-metadata-decoder`).
    ClusterMetadata,
    /// `__remote_log_metadata` (`--remote-log-metadata-decoder`).
    RemoteLogMetadata,
}

/// One record's key and value as Kafka's parser shows them (`None` = not printed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// Text after ` key: `.
    pub key: Option<String>,
    /// Text after ` payload: `.
    pub value: Option<String>,
    /// The decoded key object (`--json`).
    pub key_json: Option<Json>,
    /// The decoded value object (`--json`).
    pub value_json: Option<Json>,
    /// Why the record did not decode (`--json`), with the byte position.
    pub error: Option<DecodeError>,
}

/// A key or value and the file position of its first byte.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    /// The bytes; `None` for null.
    pub bytes: Option<&'a [u8]>,
    /// File position of the first byte.
    pub position: u64,
}

impl Decoder {
    /// Whether this is one of the internal-topic decoders.
    pub fn is_internal(self) -> bool {
        !matches!(self, Decoder::Plain { .. })
    }

    /// Kafka's `parser.parse(record)` for the record at `offset`.
    pub fn parse(self, offset: i64, key: Field<'_>, value: Field<'_>) -> Parsed {
        match self {
            Decoder::Plain { key: k, value: v } => Parsed {
                key: key.bytes.map(|b| k.show(b)),
                value: value.bytes.map(|b| v.show(b)),
                ..Parsed::default()
            },
            Decoder::Offsets => coordinator(&GROUP, offset, key, value),
            Decoder::TransactionLog => coordinator(&TRANSACTION, offset, key, value),
            Decoder::ShareGroupState => coordinator(&SHARE, offset, key, value),
            Decoder::ClusterMetadata => cluster_metadata(offset, value),
            Decoder::RemoteLogMetadata => remote::parse(offset, value),
        }
    }
}

type ReadFn = fn(i16, &mut Reader<'_>, i16) -> Option<Result<Json, DecodeError>>;
type VersionsFn = fn(i16) -> Option<(i16, i16)>;

/// A coordinator's record tables (Kafka's `CoordinatorRecordSerde` subclasses).
struct Coordinator {
    read_key: ReadFn,
    read_value: ReadFn,
    value_versions: VersionsFn,
    /// `GroupMetadataValue`'s consumer-protocol members are shown decoded.
    group_metadata: bool,
}

const GROUP: Coordinator = Coordinator {
    read_key: group::read_coordinator_key,
    read_value: group::read_coordinator_value,
    value_versions: group::coordinator_value_versions,
    group_metadata: true,
};
const TRANSACTION: Coordinator = Coordinator {
    read_key: transaction::read_coordinator_key,
    read_value: transaction::read_coordinator_value,
    value_versions: transaction::coordinator_value_versions,
    group_metadata: false,
};
const SHARE: Coordinator = Coordinator {
    read_key: share::read_coordinator_key,
    read_value: share::read_coordinator_value,
    value_versions: share::coordinator_value_versions,
    group_metadata: false,
};

/// `GroupMetadataValue`'s record type.
const GROUP_METADATA_TYPE: i16 = 2;

fn failed(offset: i64, e: DecodeError) -> Parsed {
    Parsed {
        key: Some(format!("Error at offset {offset}, skipping. {}", e.reason)),
        error: Some(e),
        ..Parsed::default()
    }
}

/// Kafka's `CoordinatorRecordMessageParser.parse`.
fn coordinator(c: &Coordinator, offset: i64, key: Field<'_>, value: Field<'_>) -> Parsed {
    let Some(kb) = key.bytes else {
        // Kafka throws here and the whole dump stops; seglog reports it and goes on.
        let reason = format!(
            "Failed to decode message at offset {offset} using the specified decoder (message had a missing key)"
        );
        return Parsed {
            key: Some(reason.clone()),
            error: Some(DecodeError::new(key.position, reason)),
            ..Parsed::default()
        };
    };
    let mut r = Reader::new(kb, key.position);
    let Ok(record_type) = r.i16() else {
        return failed(offset, r.error("Could not read version from key's buffer."));
    };
    let key_json = match (c.read_key)(record_type, &mut r, record_type) {
        None => {
            return Parsed {
                key: Some(format!(
                    "Unknown record type {record_type} at offset {offset}, skipping."
                )),
                error: Some(DecodeError::new(
                    key.position,
                    format!("unknown record type {record_type}"),
                )),
                ..Parsed::default()
            }
        }
        Some(Err(e)) => return could_not_read(offset, e, record_type, "key"),
        Some(Ok(j)) => j,
    };
    let key_json = Json::Object(vec![
        ("type", Json::Str(record_type.to_string())),
        ("data", key_json),
    ]);
    let key_text = key_json.to_jackson();
    let Some(vb) = value.bytes else {
        return Parsed {
            key: Some(key_text),
            value: Some("<DELETE>".to_owned()),
            key_json: Some(key_json),
            ..Parsed::default()
        };
    };
    let mut r = Reader::new(vb, value.position);
    let Ok(version) = r.i16() else {
        return failed(
            offset,
            r.error("Could not read version from value's buffer."),
        );
    };
    match (c.value_versions)(record_type) {
        Some((lo, hi)) if (lo..=hi).contains(&version) => {}
        _ => {
            return failed(
                offset,
                DecodeError::new(
                    value.position,
                    format!("Found an unknown record version {version} for {record_type} type"),
                ),
            )
        }
    }
    let mut value_json = match (c.read_value)(record_type, &mut r, version) {
        None => {
            return failed(
                offset,
                r.error(format!("no value schema for record type {record_type}")),
            )
        }
        Some(Err(e)) => return could_not_read(offset, e, version, "value"),
        Some(Ok(j)) => j,
    };
    if c.group_metadata && record_type == GROUP_METADATA_TYPE {
        decode_consumer_protocol(&mut value_json);
    }
    let value_json = Json::Object(vec![
        ("version", Json::Str(version.to_string())),
        ("data", value_json),
    ]);
    let value_text = value_json.to_jackson();
    Parsed {
        key: Some(key_text),
        value: Some(value_text),
        key_json: Some(key_json),
        value_json: Some(value_json),
        error: None,
    }
}

/// Kafka's `CoordinatorRecordSerde.readMessage` wrapping of a read failure.
/// The text shows Java's exception message (`null` for a buffer underflow), the `--json` error
/// the byte-level reason.
fn could_not_read(offset: i64, e: DecodeError, version: i16, name: &str) -> Parsed {
    let prefix =
        format!("Could not read record with version {version} from {name}'s buffer due to: ");
    Parsed {
        key: Some(format!(
            "Error at offset {offset}, skipping. {prefix}{}.",
            e.java_message()
        )),
        error: Some(DecodeError::new(
            e.position,
            format!("{prefix}{}", e.reason),
        )),
        ..Parsed::default()
    }
}

/// Kafka's `OffsetsMessageParser.prepareGroupMetadataValue`: for `"protocolType":"consumer"`,
/// each member's `subscription` and `assignment` bytes are replaced by the decoded
/// `ConsumerProtocolSubscription`/`ConsumerProtocolAssignment` (int16 version, then the struct);
/// bytes that do not decode are kept.
fn decode_consumer_protocol(value: &mut Json) {
    if value.get("protocolType") != Some(&Json::Str("consumer".to_owned())) {
        return;
    }
    let Json::Object(fields) = value else { return };
    for (name, members) in fields.iter_mut() {
        if *name != "members" {
            continue;
        }
        let Json::Array(members) = members else {
            continue;
        };
        for m in members.iter_mut() {
            let Json::Object(mf) = m else { continue };
            for (fname, fv) in mf.iter_mut() {
                let read: fn(&mut Reader<'_>, i16) -> Result<Json, DecodeError> = match *fname {
                    "subscription" => clients::read_consumer_protocol_subscription,
                    "assignment" => clients::read_consumer_protocol_assignment,
                    _ => continue,
                };
                let Json::Bytes(b) = fv else { continue };
                let mut r = Reader::new(b, 0);
                let decoded = r.i16().and_then(|v| read(&mut r, v));
                if let Ok(j) = decoded {
                    *fv = j;
                }
            }
        }
    }
}

/// Kafka's `ClusterMetadataLogMessageParser.parse` (`MetadataRecordSerde.read`).
fn cluster_metadata(offset: i64, value: Field<'_>) -> Parsed {
    let fail = |e: DecodeError| Parsed {
        value: Some(format!("Error at {offset}, skipping. {}", e.reason)),
        error: Some(e),
        ..Parsed::default()
    };
    let Some(vb) = value.bytes else {
        return fail(DecodeError::new(
            value.position,
            "the record has a null value".to_owned(),
        ));
    };
    let mut r = Reader::new(vb, value.position);
    let header = frame_header(&mut r);
    let (type_at, api_key, version) = match header {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    let Some((_, type_name)) = metadata::metadata_name(api_key) else {
        return fail(DecodeError::new(type_at, format!(
                "org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}"
            )));
    };
    let data = match metadata::read_metadata(api_key, &mut r, version) {
        Some(Ok(j)) => j,
        Some(Err(e)) => {
            // Kafka's message names only the type; the cause goes to --json's error.
            return Parsed {
                value: Some(format!(
                    "Error at {offset}, skipping. Failed to deserialize record with type {api_key}"
                )),
                error: Some(DecodeError::new(e.position, format!(
                        "Failed to deserialize record with type {api_key}: {}",
                        e.reason
                    ))),
                ..Parsed::default()
            };
        }
        None => {
            return fail(r.error(format!(
                "org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}"
            )))
        }
    };
    if r.remaining() > 0 {
        return fail(r.error(format!(
            "Found {} byte(s) of garbage after {api_key}",
            r.remaining()
        )));
    }
    let out = Json::Object(vec![
        ("type", Json::Str(type_name.to_owned())),
        ("version", Json::Int(i64::from(version))),
        ("data", data),
    ]);
    Parsed {
        value: Some(out.to_jackson()),
        value_json: Some(out),
        ..Parsed::default()
    }
}

/// Kafka's `AbstractApiMessageSerde.unsignedIntToShort`.
fn unsigned_short(r: &mut Reader<'_>, entity: &str) -> Result<i16, DecodeError> {
    let at = r.position();
    let v = r
        .uvarint()
        .map_err(|e| DecodeError::new(e.position, format!("Error while reading {entity}")))?;
    i16::try_from(v).map_err(|_| DecodeError::new(at, format!("Value for {entity} was too large.")))
}

/// The frame of `AbstractApiMessageSerde.read`: frame version (must be 1), type, version.
/// Returns the position of the type, the type and the version.
pub(crate) fn frame_header(r: &mut Reader<'_>) -> Result<(u64, i16, i16), DecodeError> {
    let frame_at = r.position();
    let frame = unsigned_short(r, "frame version")?;
    if frame == 0 {
        return Err(DecodeError::new(
            frame_at,
            "Could not deserialize metadata record with frame version 0. Note that \
                     upgrades from the preview release of KRaft in 2.8 to newer versions are \
                     not supported."
                .to_owned(),
        ));
    }
    if frame != 1 {
        return Err(DecodeError::new(
            frame_at,
            format!(
                "Could not deserialize metadata record due to unknown frame version \
                 {frame}(only frame version 1 is supported)"
            ),
        ));
    }
    let type_at = r.position();
    let api_key = unsigned_short(r, "type")?;
    let version = unsigned_short(r, "version")?;
    Ok((type_at, api_key, version))
}
