//! Helpers shared by the integration tests: fixture paths, hex, codec availability, and the
//! conversion of a parsed batch into the fixture JSON schema (tools/fixtures/README.md).
#![allow(dead_code)]

use std::path::PathBuf;

use record_format::{ControlRecord, ControlRecordKey, DecodeLimits, RecordBatch};
use serde_json::{json, Value};

/// `<repo>/testdata`.
pub fn testdata() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata"))
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses hex, ignoring whitespace.
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The fixture JSON of one batch header (everything but `records`), from our parser.
pub fn batch_header_json(b: &RecordBatch<'_>) -> Value {
    json!({
        "position": b.position(),
        "baseOffset": b.base_offset(),
        "lastOffset": b.last_offset(),
        "lastOffsetDelta": b.last_offset_delta(),
        "batchLength": b.batch_length(),
        "sizeInBytes": b.size_in_bytes(),
        "partitionLeaderEpoch": b.partition_leader_epoch(),
        "magic": b.magic(),
        "crc": b.crc(),
        "crcValid": b.is_valid(),
        "attributes": b.attributes(),
        "compression": b.compression().expect("known codec").name(),
        "timestampType": b.timestamp_type().name(),
        "isTransactional": b.is_transactional(),
        "isControl": b.is_control(),
        "baseTimestamp": b.base_timestamp(),
        "maxTimestamp": b.max_timestamp(),
        "producerId": b.producer_id(),
        "producerEpoch": b.producer_epoch(),
        "baseSequence": b.base_sequence(),
        "lastSequence": b.last_sequence(),
        "recordsCount": b.records_count(),
    })
}

/// The fixture JSON of every record of `b`, from our parser.
pub fn records_json(b: &RecordBatch<'_>) -> Vec<Value> {
    let records = b.records(&DecodeLimits::default()).expect("records");
    let mut out = Vec::new();
    for r in records.iter() {
        let r = r.expect("record");
        let (control_type, coordinator_epoch) = if b.is_control() {
            let (_, t) = ControlRecordKey::parse(r.key().expect("control key"), r.key_position())
                .expect("control key");
            let epoch = match ControlRecord::parse(&r) {
                Ok(ControlRecord::EndTxn(_, m)) => Some(m.coordinator_epoch),
                _ => None,
            };
            (Some(t.id()), epoch)
        } else {
            (None, None)
        };
        out.push(json!({
            "offset": r.offset(),
            "timestamp": r.timestamp(),
            "sequence": r.sequence(),
            "key": r.key().map(hex),
            "value": r.value().map(hex),
            "headers": r.headers().map(|h| json!({
                "key": h.key_lossy(),
                "value": h.value.map(hex),
            })).collect::<Vec<_>>(),
            "controlType": control_type,
            "coordinatorEpoch": coordinator_epoch,
        }));
    }
    out
}

/// Asserts that every field of `ours` equals the same field of `theirs` (fields only in `theirs`
/// are ignored, e.g. "records" when `ours` is a header-only object).
pub fn assert_fields_eq(ours: &Value, theirs: &Value, context: &str) {
    let ours = ours.as_object().expect("object");
    for (k, v) in ours {
        assert_eq!(
            Some(v),
            theirs.get(k),
            "{context}: field {k:?} differs (ours {v}, theirs {:?})",
            theirs.get(k)
        );
    }
}
