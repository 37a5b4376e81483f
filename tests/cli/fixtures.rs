//! Golden tests against every fixture: the expected `DumpLogSegments` output is computed here
//! from the fixture's JSON (what Kafka's — or kafka-python's — own reader decoded from the file)
//! with the format rules of reference §8.2, independently of `src/`, and compared line by line
//! with `seglog dump --deep-iteration --print-data-log`. The `--json` output is compared field
//! by field with the same JSON.

use serde_json::Value;

use super::common::{assert_lines_eq, dump, fixture_logs, unhex};

fn i(v: &Value, k: &str) -> i64 {
    v[k].as_i64().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn b(v: &Value, k: &str) -> bool {
    v[k].as_bool().unwrap_or_else(|| panic!("{k} in {v}"))
}

fn size(hex: &Value) -> i64 {
    hex.as_str().map_or(-1, |h| (h.len() / 2) as i64)
}

/// Keys and values as `DumpLogSegments` prints them: `new String(bytes, UTF_8)`, whose U+FFFD
/// rules for malformed input are the JDK's (checked against the JVM on random input by
/// `tests/kafka_interop.rs`, `java_utf8_decoding_matches_the_jdk`).
fn text(hex: &str) -> String {
    seglog::dump::java_utf8::java_utf8_lossy(&unhex(hex)).into_owned()
}

/// The JSON Kafka's generated `*JsonConverter` prints for the KRaft control values in
/// `kafka-clients/kraft-control.log` (decoded by hand from the schemas in
/// `clients/src/main/resources/common/message/`).
fn kraft_expected(control_type: i64, value: &str) -> String {
    match (control_type, value) {
        (3, "00000000018bcfe567ff00") => {
            // Version 0, LastContainedLogTimestamp 0x018bcfe567ff, no tagged fields.
            r#" SnapshotHeader {"version":0,"lastContainedLogTimestamp":1699999999999}"#.into()
        }
        (5, "0000000100") => r#" KRaftVersion {"version":0,"kRaftVersion":1}"#.into(),
        (4, "000000") => r#" SnapshotFooter {"version":0}"#.into(),
        (2, "00000000000104000000010000000002000000000300030000000100000000020000") => {
            // LeaderId 1, Voters [1,2,3] (compact array 4 = 3+1), GrantingVoters [1,2].
            concat!(
                r#" LeaderChange: {"version":0,"leaderId":1,"#,
                r#""voters":[{"voterId":1},{"voterId":2},{"voterId":3}],"#,
                r#""grantingVoters":[{"voterId":1},{"voterId":2}]}"#
            )
            .into()
        }
        other => panic!("no expectation for KRaft control record {other:?}"),
    }
}

/// ` MirrorPidReset {...}` from the raw value: int16 Version, compact string, tagged fields.
fn mirror_pid_reset_expected(value: &str) -> String {
    let v = unhex(value);
    let version = i16::from_be_bytes([v[0], v[1]]);
    assert!(v[2] < 0x80, "one-byte length in the fixtures");
    let len = usize::from(v[2]) - 1;
    let id = std::str::from_utf8(&v[3..3 + len]).expect("UTF-8 cluster id");
    format!(r#" MirrorPidReset {{"version":{version},"sourceClusterId":"{id}"}}"#)
}

fn expected_text(path: &str, fixture: &Value, deep: bool) -> String {
    let mut out = format!("Dumping {path}\nLog starting offset: 0\n");
    let mut end = 0;
    for bt in fixture["batches"].as_array().expect("batches") {
        let horizon = bt
            .get("deleteHorizonMs")
            .and_then(Value::as_i64)
            .map_or("OptionalLong.empty".to_owned(), |n| {
                format!("OptionalLong[{n}]")
            });
        let ts_type = s(bt, "timestampType");
        out += &format!(
            "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} deleteHorizonMs: {horizon} position: {} {ts_type}: {} size: {} magic: {} compresscodec: {} crc: {} isvalid: {}\n",
            i(bt, "baseOffset"), i(bt, "lastOffset"), i(bt, "recordsCount"), i(bt, "baseSequence"),
            i(bt, "lastSequence"), i(bt, "producerId"), i(bt, "producerEpoch"),
            i(bt, "partitionLeaderEpoch"), b(bt, "isTransactional"), b(bt, "isControl"),
            i(bt, "position"), i(bt, "maxTimestamp"), i(bt, "sizeInBytes"), i(bt, "magic"),
            s(bt, "compression"), i(bt, "crc"), b(bt, "crcValid"),
        );
        end = i(bt, "position") + i(bt, "sizeInBytes");
        let control = b(bt, "isControl");
        let records = bt["records"].as_array().expect("records");
        for r in records.iter().filter(|_| deep) {
            let keys: Vec<&str> = r["headers"]
                .as_array()
                .expect("headers")
                .iter()
                .map(|h| s(h, "key"))
                .collect();
            out += &format!(
                "| offset: {} {ts_type}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                i(r, "offset"),
                i(r, "timestamp"),
                size(&r["key"]),
                size(&r["value"]),
                i(r, "sequence"),
                keys.join(",")
            );
            if control {
                let t = i(r, "controlType");
                out += &match t {
                    0 | 1 => format!(
                        " endTxnMarker: {} coordinatorEpoch: {}",
                        if t == 0 { "ABORT" } else { "COMMIT" },
                        i(r, "coordinatorEpoch")
                    ),
                    7 => mirror_pid_reset_expected(s(r, "value")),
                    2..=5 => kraft_expected(t, s(r, "value")),
                    other => panic!("unexpected control type {other} in fixtures"),
                };
            } else {
                if let Some(k) = r["key"].as_str() {
                    out += &format!(" key: {}", text(k));
                }
                if let Some(v) = r["value"].as_str() {
                    out += &format!(" payload: {}", text(v));
                }
            }
            out.push('\n');
        }
    }
    let trailing = i(fixture, "sizeInBytes") - end;
    if trailing > 0 {
        let name = path.rsplit('/').next().expect("name");
        out += &format!("Found {trailing} invalid bytes at the end of {name}\n");
    }
    out
}

/// The note that `plain.log` has no base offset in its name, then Kafka's
/// `Non-consecutive offsets in <absolute path>` report (record offsets starting from −1).
fn expected_stderr(path: &str, fixture: &Value) -> String {
    let mut out =
        format!("warning: {path}: the file name does not start with a base offset; using 0\n");
    let mut pairs = std::collections::BTreeMap::new();
    let mut last = -1;
    for bt in fixture["batches"].as_array().expect("batches") {
        for r in bt["records"].as_array().expect("records") {
            let o = i(r, "offset");
            if o != last + 1 {
                pairs.insert(last, o);
            }
            last = o;
        }
    }
    if !pairs.is_empty() {
        out += &format!("Non-consecutive offsets in {path}\n");
        for (a, b) in pairs {
            out += &format!("  {a} is followed by {b}\n");
        }
    }
    out
}

fn load(path: &std::path::Path) -> Value {
    let json = path.with_extension("json");
    serde_json::from_slice(&std::fs::read(&json).expect("fixture json")).expect("fixture json")
}

#[test]
fn text_dump_of_every_fixture_matches_kafka_format() {
    for log in fixture_logs() {
        let fixture = load(&log);
        let shown = log.display().to_string();
        let out = dump(&[
            "--deep-iteration".as_ref(),
            "--print-data-log".as_ref(),
            log.as_os_str(),
        ]);
        assert_eq!(
            out.status,
            seglog::Status::Success,
            "{shown}: {}",
            out.stderr
        );
        assert_lines_eq(&out.stdout, &expected_text(&shown, &fixture, true), &shown);
        assert_eq!(out.stderr, expected_stderr(&shown, &fixture), "{shown}");
    }
}

#[test]
fn shallow_dump_prints_only_batch_lines() {
    for log in fixture_logs() {
        let fixture = load(&log);
        let out = dump(&[log.as_os_str()]);
        let shown = log.display().to_string();
        assert_lines_eq(&out.stdout, &expected_text(&shown, &fixture, false), &shown);
    }
}

#[test]
fn skip_record_metadata_prints_only_contents() {
    let log = super::common::testdata().join("kafka-clients/transactional.log");
    let fixture = load(&log);
    let out = dump(&[
        "--print-data-log".as_ref(),
        "--skip-record-metadata".as_ref(),
        log.as_os_str(),
    ]);
    let mut expected = Vec::new();
    for bt in fixture["batches"].as_array().expect("batches") {
        expected.push(None);
        for r in bt["records"].as_array().expect("records") {
            // Kafka prints an empty line for each control record in this mode.
            if b(bt, "isControl") {
                expected.push(Some(String::new()));
            } else {
                expected.push(Some(format!(
                    "| key: {} payload: {}",
                    text(s(r, "key")),
                    text(s(r, "value"))
                )));
            }
        }
    }
    let records: Vec<&str> = out
        .stdout_lines()
        .into_iter()
        .skip(2)
        .filter(|l| !l.starts_with("baseOffset: "))
        .collect();
    let want: Vec<String> = expected.into_iter().flatten().collect();
    assert_eq!(records, want);
}

/// Fixture keys that hold the same value in `--json` batch lines under another name.
const BATCH_RENAMES: [(&str, &str); 2] = [("count", "recordsCount"), ("size", "sizeInBytes")];

#[test]
fn json_dump_of_every_fixture_matches_the_fixture_json() {
    for log in fixture_logs() {
        let fixture = load(&log);
        let shown = log.display().to_string();
        let out = dump(&[
            "--json".as_ref(),
            "--deep-iteration".as_ref(),
            log.as_os_str(),
        ]);
        assert_eq!(
            out.status,
            seglog::Status::Success,
            "{shown}: {}",
            out.stderr
        );
        let lines = out.json_lines();
        let mut it = lines.iter();
        let file = it.next().expect("file line");
        assert_eq!(file["type"], "file");
        assert_eq!(file["path"], shown.as_str());
        assert_eq!(file["fileType"], "log");
        let mut next_offset = -1;
        for bt in fixture["batches"].as_array().expect("batches") {
            let line = it.next().expect("batch line");
            assert_eq!(line["type"], "batch", "{shown}");
            for (key, want) in bt.as_object().expect("batch object") {
                if key == "records" || key == "recordsCount" || key == "sizeInBytes" {
                    continue;
                }
                assert_eq!(&line[key.as_str()], want, "{shown}: batch field {key}");
            }
            for (ours, theirs) in BATCH_RENAMES {
                assert_eq!(line[ours], bt[theirs], "{shown}: {ours}");
            }
            if bt.get("deleteHorizonMs").is_none() {
                assert!(line["deleteHorizonMs"].is_null(), "{shown}");
            }
            for r in bt["records"].as_array().expect("records") {
                let line = it.next().expect("record line");
                assert_eq!(line["type"], "record", "{shown}");
                for key in ["offset", "timestamp", "sequence", "key", "value", "headers"] {
                    assert_eq!(line[key], r[key], "{shown}: record field {key}");
                }
                // The fixture has null for data records; seglog leaves these fields out.
                for key in ["controlType", "coordinatorEpoch"] {
                    assert_eq!(line[key], r[key], "{shown}: record field {key}");
                }
                if r["controlType"] == 7 {
                    assert_eq!(line["mirrorPidReset"]["version"], 0);
                    assert!(line["mirrorPidReset"]["sourceClusterId"].is_string());
                }
                assert!(line.get("controlError").is_none(), "{shown}: {line}");
            }
            next_offset = i(bt, "lastOffset") + 1;
        }
        let summary = it.next().expect("summary");
        assert_eq!(summary["type"], "summary");
        assert_eq!(summary["validBytes"], fixture["sizeInBytes"], "{shown}");
        assert_eq!(summary["nextOffset"], next_offset, "{shown}");
        assert_eq!(summary["invalidBytes"], 0, "{shown}");
        assert!(summary["error"].is_null(), "{shown}");
        assert!(it.next().is_none(), "{shown}: extra lines");
    }
}
