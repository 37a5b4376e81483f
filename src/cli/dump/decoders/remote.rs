//! `--remote-log-metadata-decoder`: Kafka's `RemoteMetadataLogMessageParser`, which prints
//! `RemoteLogMetadataSerde.deserialize(value).toString()` — the Java `toString` of
//! `RemoteLogSegmentMetadata`, `RemoteLogSegmentMetadataUpdate`, `RemotePartitionDeleteMetadata`
//! or `RemoteLogSegmentMetadataSnapshot`. The records themselves are decoded by the generated
//! [`super::generated::remote`] code (frame: uvarint frame version 1 | uvarint type | uvarint
//! version | struct); this module only renders the `toString` forms.

use std::collections::BTreeMap;

use super::generated::remote;
use super::wire::{DecodeError, Json, Reader};
use super::{frame_header, Field, Parsed};

/// Kafka's `RemoteLogSegmentState` names by id.
fn segment_state(id: i64) -> String {
    match id {
        0 => "COPY_SEGMENT_STARTED".to_owned(),
        1 => "COPY_SEGMENT_FINISHED".to_owned(),
        2 => "DELETE_SEGMENT_STARTED".to_owned(),
        3 => "DELETE_SEGMENT_FINISHED".to_owned(),
        other => format!("<unknown state {other}>"),
    }
}

/// Kafka's `RemotePartitionDeleteState` names by id.
fn partition_delete_state(id: i64) -> String {
    match id {
        0 => "DELETE_PARTITION_MARKED".to_owned(),
        1 => "DELETE_PARTITION_STARTED".to_owned(),
        2 => "DELETE_PARTITION_FINISHED".to_owned(),
        other => format!("<unknown state {other}>"),
    }
}

fn text(j: Option<&Json>) -> String {
    match j {
        Some(Json::Int(n)) => n.to_string(),
        Some(Json::Str(s)) => s.clone(),
        Some(Json::Bool(b)) => b.to_string(),
        Some(Json::Null) | None => "null".to_owned(),
        Some(other) => other.to_jackson(),
    }
}

fn int(j: Option<&Json>) -> i64 {
    match j {
        Some(Json::Int(n)) => *n,
        _ => 0,
    }
}

/// `TopicIdPartition.toString()`: `<id>:<topic>-<partition>`.
fn topic_id_partition(j: Option<&Json>) -> String {
    let j = j.unwrap_or(&Json::Null);
    format!(
        "{}:{}-{}",
        text(j.get("id")),
        text(j.get("name")),
        text(j.get("partition"))
    )
}

/// `RemoteLogSegmentId.toString()`.
fn segment_id(j: Option<&Json>) -> String {
    let j = j.unwrap_or(&Json::Null);
    format!(
        "RemoteLogSegmentId{{topicIdPartition={}, id={}}}",
        topic_id_partition(j.get("topicIdPartition")),
        text(j.get("id"))
    )
}

/// `Optional<CustomMetadata>.toString()`.
fn custom_metadata(j: Option<&Json>) -> String {
    match j {
        Some(Json::Bytes(b)) => format!("Optional[CustomMetadata{{{} bytes}}]", b.len()),
        _ => "Optional.empty".to_owned(),
    }
}

/// The leader epochs as Java's `TreeMap.toString()`: `{0=0, 3=120}`.
fn leader_epochs(j: Option<&Json>) -> String {
    let mut m = BTreeMap::new();
    if let Some(Json::Array(a)) = j {
        for e in a {
            m.insert(int(e.get("leaderEpoch")), int(e.get("offset")));
        }
    }
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

fn txn_index_empty(j: &Json) -> String {
    text(Some(j.get("txnIndexEmpty").unwrap_or(&Json::Bool(false))))
}

/// The Java `toString` of the decoded record of type `api_key`.
fn to_java_string(api_key: i16, j: &Json) -> String {
    match api_key {
        0 => format!(
            "RemoteLogSegmentMetadata{{remoteLogSegmentId={}, startOffset={}, endOffset={}, \
             brokerId={}, maxTimestampMs={}, eventTimestampMs={}, segmentLeaderEpochs={}, \
             segmentSizeInBytes={}, customMetadata={}, state={}, txnIdxEmpty={}}}",
            segment_id(j.get("remoteLogSegmentId")),
            text(j.get("startOffset")),
            text(j.get("endOffset")),
            text(j.get("brokerId")),
            text(j.get("maxTimestampMs")),
            text(j.get("eventTimestampMs")),
            leader_epochs(j.get("segmentLeaderEpochs")),
            text(j.get("segmentSizeInBytes")),
            custom_metadata(j.get("customMetadata")),
            segment_state(int(j.get("remoteLogSegmentState"))),
            txn_index_empty(j),
        ),
        1 => format!(
            "RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={}, customMetadata={}, state={}, \
             eventTimestampMs={}, brokerId={}}}",
            segment_id(j.get("remoteLogSegmentId")),
            custom_metadata(j.get("customMetadata")),
            segment_state(int(j.get("remoteLogSegmentState"))),
            text(j.get("eventTimestampMs")),
            text(j.get("brokerId")),
        ),
        2 => format!(
            "RemotePartitionDeleteMetadata{{topicPartition={}, state={}, eventTimestampMs={}, \
             brokerId={}}}",
            topic_id_partition(j.get("topicIdPartition")),
            partition_delete_state(int(j.get("remotePartitionDeleteState"))),
            text(j.get("eventTimestampMs")),
            text(j.get("brokerId")),
        ),
        _ => format!(
            "RemoteLogSegmentMetadataSnapshot{{segmentId={}, startOffset={}, endOffset={}, \
             maxTimestampMs={}, segmentLeaderEpochs={}, segmentSizeInBytes={}, \
             customMetadata={}, state={}, txnIdxEmpty={}}}",
            text(j.get("segmentId")),
            text(j.get("startOffset")),
            text(j.get("endOffset")),
            text(j.get("maxTimestampMs")),
            leader_epochs(j.get("segmentLeaderEpochs")),
            text(j.get("segmentSizeInBytes")),
            custom_metadata(j.get("customMetadata")),
            segment_state(int(j.get("remoteLogSegmentState"))),
            txn_index_empty(j),
        ),
    }
}

/// Kafka's `RemoteMetadataLogMessageParser.parse`.
pub fn parse(offset: i64, value: Field<'_>) -> Parsed {
    let fail = |e: DecodeError| Parsed {
        value: Some(format!("Error at offset {offset}, skipping. {}", e.reason)),
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
    let (type_at, api_key, version) = match frame_header(&mut r) {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    let json = match remote::read_metadata(api_key, &mut r, version) {
        Some(Ok(j)) => j,
        Some(Err(e)) => {
            return fail(DecodeError::new(e.position, format!("Failed to deserialize record with type {api_key} ({})", e.reason)))
        }
        None => {
            return fail(DecodeError::new(type_at, format!(
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
    let name = remote::metadata_name(api_key).map_or("", |(n, _)| n);
    Parsed {
        value: Some(to_java_string(api_key, &json)),
        value_json: Some(Json::Object(vec![
            ("type", Json::Str(name.to_owned())),
            ("version", Json::Int(i64::from(version))),
            ("data", json),
        ])),
        ..Parsed::default()
    }
}
