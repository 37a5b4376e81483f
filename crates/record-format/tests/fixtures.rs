//! Reading files written by other Kafka implementations: every `.log` in `testdata/kafka-clients`
//! (Apache Kafka 4.3.0) and `testdata/kafka-python` (kafka-python 2.3.3) is parsed with our
//! iterator and every field is compared with the writer's own decoding in the sibling `.json`.
//! Then each uncompressed kafka-clients batch is re-encoded with our builder from its decoded
//! fields and must come out byte-identical.
//! Compressed batches (all four codecs) are decompressed and their records compared too.

mod common;

use std::fs;

use common::{assert_fields_eq, batch_header_json, records_json, testdata};
use record_format::{
    Batches, CompressionType, ControlRecordKey, DecodeLimits, Header, IterEnd, LogEntry,
    RecordBatchBuilder, TimestampType,
};
use serde_json::Value;

fn fixture_files(dir: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = fs::read_dir(testdata().join(dir))
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {dir}");
    files
}

/// Compares one fixture; returns how many compressed batches had to skip their records.
fn check_fixture(log: &std::path::Path) {
    let name = log.display().to_string();
    let bytes = fs::read(log).expect("read log");
    let json: Value =
        serde_json::from_slice(&fs::read(log.with_extension("json")).expect("read json"))
            .expect("parse json");
    assert_eq!(json["sizeInBytes"], bytes.len(), "{name}: sizeInBytes");
    let expected = json["batches"].as_array().expect("batches");
    let mut iter = Batches::new(&bytes, 0);
    let mut n = 0;
    for entry in iter.by_ref() {
        let entry = entry.unwrap_or_else(|e| panic!("{name}: {e}"));
        let LogEntry::V2(batch) = entry else {
            panic!("{name}: unexpected legacy entry")
        };
        let theirs = expected
            .get(n)
            .unwrap_or_else(|| panic!("{name}: extra batch {n}"));
        let ctx = format!("{name} batch {n}");
        assert_fields_eq(&batch_header_json(&batch), theirs, &ctx);
        let ours = records_json(&batch);
        let theirs_records = theirs["records"].as_array().expect("records");
        assert_eq!(ours.len(), theirs_records.len(), "{ctx}: record count");
        for (i, (o, t)) in ours.iter().zip(theirs_records).enumerate() {
            assert_fields_eq(o, t, &format!("{ctx} record {i}"));
        }
        n += 1;
    }
    assert_eq!(n, expected.len(), "{name}: batch count");
    assert_eq!(iter.stopped_at(), Some(&IterEnd::Complete), "{name}");
    assert_eq!(iter.valid_prefix_end(), bytes.len() as u64);
}

#[test]
fn kafka_clients_fixtures_match_kafka_decoding() {
    let mut checked = 0;
    for f in fixture_files("kafka-clients") {
        check_fixture(&f);
        checked += 1;
    }
    assert_eq!(checked, 10);
}

#[test]
fn kafka_python_fixtures_match_kafka_python_decoding() {
    let mut checked = 0;
    for f in fixture_files("kafka-python") {
        check_fixture(&f);
        checked += 1;
    }
    assert_eq!(checked, 8);
}

/// Every compressed batch of the kafka-clients fixtures is decoded, rebuilt with our builder and
/// the same codec, and parsed back; header fields and every record must survive. (Byte equality
/// is not required: compressor output may legitimately differ.)
#[test]
fn compressed_kafka_batches_round_trip_through_builder() {
    let mut done = 0;
    for f in fixture_files("kafka-clients") {
        let bytes = fs::read(&f).expect("read");
        for entry in Batches::new(&bytes, 0) {
            let LogEntry::V2(batch) = entry.expect("entry") else {
                panic!("legacy")
            };
            let codec = batch.compression().expect("codec");
            if codec == CompressionType::None {
                continue;
            }
            let mut b = RecordBatchBuilder::new(batch.base_offset())
                .partition_leader_epoch(batch.partition_leader_epoch())
                .compression(codec)
                .producer(
                    batch.producer_id(),
                    batch.producer_epoch(),
                    batch.base_sequence(),
                )
                .transactional(batch.is_transactional());
            if batch.timestamp_type() == TimestampType::LogAppendTime {
                b = b.log_append_time(batch.max_timestamp());
            }
            let records = batch.records(&DecodeLimits::default()).expect("records");
            for r in records.iter() {
                let r = r.expect("record");
                let headers: Vec<Header<'_>> = r.headers().collect();
                b.append_with_offset(
                    r.offset(),
                    batch.base_timestamp() + r.timestamp_delta(),
                    r.key(),
                    r.value(),
                    &headers,
                )
                .expect("append");
            }
            let rebuilt = b.build();
            let ours = record_format::RecordBatch::new(&rebuilt, batch.position()).expect("view");
            assert!(ours.is_valid());
            let mut theirs_header = batch_header_json(&batch);
            let mut ours_header = batch_header_json(&ours);
            for k in ["crc", "batchLength", "sizeInBytes"] {
                theirs_header[k] = Value::Null;
                ours_header[k] = Value::Null;
            }
            assert_eq!(ours_header, theirs_header);
            assert_eq!(records_json(&ours), records_json(&batch));
            done += 1;
        }
    }
    eprintln!("{done} compressed batches round-tripped");
}

/// Re-encodes every uncompressed batch of every kafka-clients fixture with our builder, from the
/// decoded fields, and expects Kafka's exact bytes.
#[test]
fn builder_reproduces_kafka_clients_batches_byte_for_byte() {
    let mut rebuilt = 0;
    for f in fixture_files("kafka-clients") {
        let bytes = fs::read(&f).expect("read");
        for entry in Batches::new(&bytes, 0) {
            let LogEntry::V2(batch) = entry.expect("entry") else {
                panic!("legacy")
            };
            if batch.compression().expect("codec") != CompressionType::None {
                continue;
            }
            let mut b = RecordBatchBuilder::new(batch.base_offset())
                .partition_leader_epoch(batch.partition_leader_epoch())
                .producer(
                    batch.producer_id(),
                    batch.producer_epoch(),
                    batch.base_sequence(),
                )
                .transactional(batch.is_transactional())
                .control(batch.is_control())
                .delete_horizon_ms(batch.delete_horizon_ms());
            if batch.timestamp_type() == TimestampType::LogAppendTime {
                b = b.log_append_time(batch.max_timestamp());
            }
            let records = batch.records(&DecodeLimits::default()).expect("records");
            for r in records.iter() {
                let r = r.expect("record");
                // The producer's timestamp (LogAppendTime batches report maxTimestamp instead).
                let ts = batch.base_timestamp() + r.timestamp_delta();
                if batch.is_control() {
                    let (_, t) =
                        ControlRecordKey::parse(r.key().expect("key"), 0).expect("control key");
                    b.append_control_record_with_offset(r.offset(), ts, t, r.value())
                        .expect("append control");
                } else {
                    let headers: Vec<Header<'_>> = r.headers().collect();
                    b.append_with_offset(r.offset(), ts, r.key(), r.value(), &headers)
                        .expect("append");
                }
            }
            assert_eq!(
                common::hex(&b.build()),
                common::hex(batch.as_bytes()),
                "{} batch at {}",
                f.display(),
                batch.position()
            );
            rebuilt += 1;
        }
    }
    assert!(rebuilt >= 15, "only {rebuilt} batches rebuilt");
}

/// The 78-byte COMMIT marker from Kafka's transactional.log, rebuilt with
/// `end_txn_marker_batch`.
#[test]
fn commit_and_abort_markers_match_kafka() {
    let bytes = fs::read(testdata().join("kafka-clients/transactional.log")).expect("read");
    let commit = bytes.get(346..424).expect("commit marker");
    let abort = bytes.get(424..502).expect("abort marker");
    let ours = record_format::end_txn_marker_batch(
        i64::from_be_bytes(commit[..8].try_into().unwrap()),
        i64::from_be_bytes(commit[27..35].try_into().unwrap()),
        4,
        3000,
        1,
        record_format::ControlRecordType::Commit,
        11,
    );
    assert_eq!(ours.len(), 78);
    assert_eq!(common::hex(&ours), common::hex(commit));
    let ours = record_format::end_txn_marker_batch(
        i64::from_be_bytes(abort[..8].try_into().unwrap()),
        i64::from_be_bytes(abort[27..35].try_into().unwrap()),
        4,
        4000,
        7,
        record_format::ControlRecordType::Abort,
        12,
    );
    assert_eq!(common::hex(&ours), common::hex(abort));
}
