//! The other direction: Kafka reading bytes *we* wrote.
//!
//! `fixtures()` builds a set of `.log` files with our builder (plain batches incl. an empty and a
//! delete-horizon batch, headers and nulls, idempotent with sequence wrap, transactional data with
//! COMMIT and ABORT markers, the KIP-1279 barrier, LogAppendTime). The test checks that they equal
//! the committed `testdata/seglog-built/<name>.log` (with `SEGLOG_UPDATE_FIXTURES=1` it rewrites
//! them instead), then that `testdata/seglog-built/<name>.json` — written by Apache Kafka 4.3.0's
//! own reader via `tools/fixtures/decode-with-kafka.sh` — has exactly the fields we intended. The
//! expected fields are computed from the test's own description of each batch, not by our
//! parser. Regenerate the JSON as described in tools/fixtures/README.md ("seglog-built").

mod common;

use std::fs;
use std::path::PathBuf;

use common::{hex, testdata};
use record_format::internals::{increment_sequence, set_max_timestamp_log_append_time};
use record_format::{
    end_txn_marker_batch, mirror_pid_reset_batch, CompressionType, ControlRecordType, Header,
    RecordBatchBuilder,
};
use serde_json::{json, Value};

type Hdr = (&'static str, Option<&'static [u8]>);

struct Rec {
    offset: i64,
    timestamp: i64,
    key: Option<&'static [u8]>,
    value: Option<&'static [u8]>,
    headers: Vec<Hdr>,
}

fn rec(
    offset: i64,
    timestamp: i64,
    key: Option<&'static [u8]>,
    value: Option<&'static [u8]>,
) -> Rec {
    Rec {
        offset,
        timestamp,
        key,
        value,
        headers: Vec::new(),
    }
}

enum Kind {
    Data(Vec<Rec>),
    /// (type, coordinator epoch, timestamp)
    Marker(ControlRecordType, i32, i64),
    /// (source cluster id, timestamp)
    Barrier(&'static str, i64),
}

struct Spec {
    base_offset: i64,
    leader_epoch: i32,
    pid: i64,
    epoch: i16,
    base_seq: i32,
    transactional: bool,
    log_append_time: Option<i64>,
    /// Build as CreateTime, then convert in place with `set_max_timestamp_log_append_time`.
    convert_to_log_append_time: Option<i64>,
    delete_horizon: Option<i64>,
    compression: CompressionType,
    kind: Kind,
}

fn data(base_offset: i64, leader_epoch: i32, records: Vec<Rec>) -> Spec {
    Spec {
        base_offset,
        leader_epoch,
        pid: -1,
        epoch: -1,
        base_seq: -1,
        transactional: false,
        log_append_time: None,
        convert_to_log_append_time: None,
        delete_horizon: None,
        compression: CompressionType::None,
        kind: Kind::Data(records),
    }
}

fn producer(mut s: Spec, pid: i64, epoch: i16, base_seq: i32, transactional: bool) -> Spec {
    s.pid = pid;
    s.epoch = epoch;
    s.base_seq = base_seq;
    s.transactional = transactional;
    s
}

fn marker(
    offset: i64,
    leader_epoch: i32,
    pid: i64,
    epoch: i16,
    t: ControlRecordType,
    coord: i32,
    ts: i64,
) -> Spec {
    Spec {
        base_offset: offset,
        leader_epoch,
        pid,
        epoch,
        base_seq: -1,
        transactional: true,
        log_append_time: None,
        convert_to_log_append_time: None,
        delete_horizon: None,
        compression: CompressionType::None,
        kind: Kind::Marker(t, coord, ts),
    }
}

fn barrier(offset: i64, leader_epoch: i32, cluster: &'static str, ts: i64) -> Spec {
    Spec {
        base_offset: offset,
        leader_epoch,
        pid: -1,
        epoch: -1,
        base_seq: -1,
        transactional: false,
        log_append_time: None,
        convert_to_log_append_time: None,
        delete_horizon: None,
        compression: CompressionType::None,
        kind: Kind::Barrier(cluster, ts),
    }
}

const T0: i64 = 1_700_000_000_000;

fn fixtures() -> Vec<(&'static str, Vec<Spec>)> {
    let big: &'static [u8] = Box::leak(vec![0x5a; 3000].into_boxed_slice());
    let empty = data(20, 5, vec![]);
    let mut horizon = data(21, 5, vec![rec(21, T0 + 50, Some(b"h"), None)]);
    horizon.delete_horizon = Some(T0 + 86_400_000);
    let plain = vec![
        data(
            0,
            -1,
            vec![
                rec(0, T0, Some(b"key-0"), Some(b"value-0")),
                rec(
                    1,
                    T0 + 7,
                    Some(b"key-1"),
                    Some("\u{43c}\u{438}\u{440}".as_bytes()),
                ),
                rec(2, T0 - 3, None, Some(b"\x00\x01\x02\xff")),
            ],
        ),
        data(
            3,
            0,
            vec![
                rec(3, T0 + 100, Some(b"k3"), Some(big)),
                rec(4, 0, None, None),
            ],
        ),
        // Offset gap inside the batch (as after compaction of a rebuilt batch).
        data(
            10,
            5,
            vec![
                rec(10, T0 + 1, Some(b"a"), Some(b"1")),
                rec(15, T0 + 2, Some(b"b"), Some(b"2")),
            ],
        ),
        // An empty batch (Kafka's writeEmptyHeader shape: baseTimestamp -1).
        empty,
        horizon,
    ];

    let mut many: Vec<Hdr> = Vec::new();
    for i in 0..70 {
        many.push((
            ["h0", "h1", "h2", "h3", "h4", "h5", "h6"][i % 7],
            Some(b"v"),
        ));
    }
    let mut hn = vec![
        rec(0, T0, None, None),
        rec(1, T0 + 1, Some(b""), Some(b"")),
        rec(2, T0 + 2, Some(b"k"), None),
        rec(3, T0 + 3, None, Some(b"v")),
    ];
    hn[0].headers = vec![("null-value", None), ("empty-value", Some(b""))];
    hn[1].headers = vec![
        ("dup", Some(b"1")),
        ("dup", Some(b"2")),
        ("", Some(b"empty key")),
    ];
    hn[2].headers = vec![("schl\u{fc}ssel-\u{2603}", Some(b"\xc3\xa4"))];
    hn[3].headers = many;
    let headers_nulls = vec![data(0, 1, hn)];

    let idempotent = vec![
        producer(
            data(
                0,
                2,
                (0..3)
                    .map(|i| rec(i, T0 + i, Some(b"p1"), Some(b"seq")))
                    .collect(),
            ),
            1000,
            3,
            0,
            false,
        ),
        producer(
            data(
                3,
                2,
                (3..7)
                    .map(|i| rec(i, T0 + i, Some(b"p2"), Some(b"wrap")))
                    .collect(),
            ),
            2000,
            0,
            i32::MAX - 1,
            false,
        ),
        producer(
            data(7, 2, vec![rec(7, T0 + 7, None, Some(b"bumped"))]),
            1000,
            4,
            0,
            false,
        ),
    ];

    let transactional = vec![
        producer(
            data(
                0,
                4,
                vec![
                    rec(0, T0, Some(b"c0"), Some(b"commit-me-0")),
                    rec(1, T0 + 1, Some(b"c1"), Some(b"commit-me-1")),
                ],
            ),
            3000,
            1,
            0,
            true,
        ),
        producer(
            data(2, 4, vec![rec(2, T0 + 2, Some(b"d0"), Some(b"abort-me-0"))]),
            4000,
            7,
            0,
            true,
        ),
        marker(3, 4, 3000, 1, ControlRecordType::Commit, 11, T0 + 10),
        marker(4, 4, 4000, 7, ControlRecordType::Abort, 12, T0 + 11),
        data(
            5,
            4,
            vec![rec(5, T0 + 12, Some(b"plain"), Some(b"after-markers"))],
        ),
    ];

    let barrier_log = vec![
        producer(
            data(0, 5, vec![rec(0, T0, Some(b"m"), Some(b"mirrored"))]),
            42,
            0,
            0,
            false,
        ),
        barrier(1, 5, "abc", T0),
        barrier(2, 6, "MkU3OEVBNTcwNTJENDM2Qk", T0 + 1),
        producer(
            data(
                3,
                6,
                vec![rec(3, T0 + 2, Some(b"m"), Some(b"after-barrier"))],
            ),
            42,
            0,
            0,
            false,
        ),
    ];

    let mut lat = data(
        0,
        1,
        (0..4)
            .map(|i| rec(i, T0 + i, Some(b"k"), Some(b"lat")))
            .collect(),
    );
    lat.log_append_time = Some(T0 + 999_000);
    let mut converted = data(4, 1, vec![rec(4, T0 + 10, Some(b"k"), Some(b"converted"))]);
    converted.convert_to_log_append_time = Some(T0 + 1_000_000);
    let log_append_time = vec![lat, converted];

    // Every codec, each batch large enough to span several lz4 (64 KiB) and xerial snappy
    // (32 KiB) blocks, with one idempotent producer across the codecs.
    let big_text: &'static [u8] = Box::leak(
        (0..90_000u32)
            .map(|i| b"seglog-compressed-"[(i % 18) as usize] ^ ((i / 1000) as u8 & 0x07))
            .collect::<Vec<u8>>()
            .into_boxed_slice(),
    );
    let mut compressed = Vec::new();
    for (i, codec) in [
        CompressionType::Gzip,
        CompressionType::Snappy,
        CompressionType::Lz4,
        CompressionType::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let base = (i as i64) * 3;
        let mut spec = producer(
            data(
                base,
                3,
                vec![
                    rec(base, T0 + base, Some(b"c"), Some(big_text)),
                    rec(base + 1, T0 + base + 1, None, Some(b"small")),
                    rec(base + 2, T0 + base + 2, Some(b"n"), None),
                ],
            ),
            77,
            0,
            base as i32,
            false,
        );
        spec.compression = codec;
        compressed.push(spec);
    }

    vec![
        ("compressed", compressed),
        ("plain", plain),
        ("headers-nulls", headers_nulls),
        ("idempotent", idempotent),
        ("transactional", transactional),
        ("barrier", barrier_log),
        ("log-append-time", log_append_time),
    ]
}

fn build(s: &Spec) -> Vec<u8> {
    match &s.kind {
        Kind::Marker(t, coord, ts) => end_txn_marker_batch(
            s.base_offset,
            *ts,
            s.leader_epoch,
            s.pid,
            s.epoch,
            *t,
            *coord,
        ),
        Kind::Barrier(id, ts) => mirror_pid_reset_batch(s.base_offset, *ts, s.leader_epoch, id),
        Kind::Data(records) => {
            let mut b = RecordBatchBuilder::new(s.base_offset)
                .partition_leader_epoch(s.leader_epoch)
                .producer(s.pid, s.epoch, s.base_seq)
                .transactional(s.transactional)
                .delete_horizon_ms(s.delete_horizon)
                .compression(s.compression);
            if let Some(t) = s.log_append_time {
                b = b.log_append_time(t);
            }
            for r in records {
                let headers: Vec<Header<'_>> =
                    r.headers.iter().map(|(k, v)| Header::new(k, *v)).collect();
                b.append_with_offset(r.offset, r.timestamp, r.key, r.value, &headers)
                    .expect("append");
            }
            let mut out = b.build();
            if let Some(t) = s.convert_to_log_append_time {
                set_max_timestamp_log_append_time(&mut out, t).expect("convert");
            }
            out
        }
    }
}

/// What Kafka must decode from the batch built from `s` at `position`.
fn expected_json(s: &Spec, position: usize, bytes: &[u8]) -> Value {
    let stored_crc = u32::from_be_bytes(bytes[17..21].try_into().unwrap());
    let (records, control): (Vec<Value>, bool) = match &s.kind {
        Kind::Data(rs) => (
            rs.iter()
                .map(|r| {
                    let lat = s.log_append_time.or(s.convert_to_log_append_time);
                    json!({
                        "offset": r.offset,
                        "timestamp": lat.unwrap_or(r.timestamp),
                        "sequence": if s.base_seq >= 0 { increment_sequence(s.base_seq, (r.offset - s.base_offset) as i32) } else { -1 },
                        "key": r.key.map(hex),
                        "value": r.value.map(hex),
                        "headers": r.headers.iter().map(|(k, v)| json!({"key": k, "value": v.map(hex)})).collect::<Vec<_>>(),
                        "controlType": null,
                        "coordinatorEpoch": null,
                    })
                })
                .collect(),
            false,
        ),
        Kind::Marker(t, coord, ts) => {
            let mut value = vec![0u8, 0];
            value.extend_from_slice(&coord.to_be_bytes());
            (
                vec![json!({
                    "offset": s.base_offset, "timestamp": ts, "sequence": -1,
                    "key": hex(&[0, 0, 0, t.id() as u8]), "value": hex(&value), "headers": [],
                    "controlType": t.id(), "coordinatorEpoch": coord,
                })],
                true,
            )
        }
        Kind::Barrier(id, ts) => {
            // Flexible v0: int16 Version 0, compact string (len + 1), no tagged fields.
            let mut value = vec![0u8, 0, id.len() as u8 + 1];
            value.extend_from_slice(id.as_bytes());
            value.push(0);
            (
                vec![json!({
                    "offset": s.base_offset, "timestamp": ts, "sequence": -1,
                    "key": "00000007", "value": hex(&value), "headers": [],
                    "controlType": 7, "coordinatorEpoch": null,
                })],
                true,
            )
        }
    };
    let offsets: Vec<i64> = records
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    let last = offsets.last().copied().unwrap_or(s.base_offset);
    let delta = (last - s.base_offset) as i32;
    let timestamps: Vec<i64> = match &s.kind {
        Kind::Data(rs) => rs.iter().map(|r| r.timestamp).collect(),
        Kind::Marker(_, _, ts) | Kind::Barrier(_, ts) => vec![*ts],
    };
    let lat = s.log_append_time.or(s.convert_to_log_append_time);
    let mut attributes = 0i16;
    if lat.is_some() {
        attributes |= 0x08;
    }
    if s.transactional {
        attributes |= 0x10;
    }
    if control {
        attributes |= 0x20;
    }
    if s.delete_horizon.is_some() {
        attributes |= 0x40;
    }
    attributes |= i16::from(s.compression.id());
    let mut v = json!({
        "position": position,
        "baseOffset": s.base_offset,
        "lastOffset": last,
        "lastOffsetDelta": delta,
        "batchLength": bytes.len() - 12,
        "sizeInBytes": bytes.len(),
        "partitionLeaderEpoch": s.leader_epoch,
        "magic": 2,
        "crc": stored_crc,
        "crcValid": true,
        "attributes": attributes,
        "compression": s.compression.name(),
        "timestampType": if lat.is_some() { "LogAppendTime" } else { "CreateTime" },
        "isTransactional": s.transactional,
        "isControl": control,
        "baseTimestamp": s.delete_horizon.unwrap_or(timestamps.first().copied().unwrap_or(-1)),
        "maxTimestamp": lat.unwrap_or(timestamps.iter().copied().fold(-1, i64::max)),
        "producerId": s.pid,
        "producerEpoch": s.epoch,
        "baseSequence": s.base_seq,
        "lastSequence": if s.base_seq == -1 { -1 } else { increment_sequence(s.base_seq, delta) },
        "recordsCount": records.len(),
        "records": records,
    });
    if let Some(h) = s.delete_horizon {
        v["deleteHorizonMs"] = json!(h);
    }
    v
}

fn dir() -> PathBuf {
    testdata().join("seglog-built")
}

#[test]
fn kafka_reads_what_we_write() {
    let update = std::env::var("SEGLOG_UPDATE_FIXTURES").is_ok_and(|v| v == "1");
    let mut checked = 0;
    for (name, specs) in fixtures() {
        let mut file = Vec::new();
        let mut expected = Vec::new();
        for s in &specs {
            let bytes = build(s);
            expected.push(expected_json(s, file.len(), &bytes));
            file.extend_from_slice(&bytes);
        }
        let log = dir().join(format!("{name}.log"));
        if update {
            fs::create_dir_all(dir()).expect("mkdir");
            fs::write(&log, &file).expect("write fixture");
            eprintln!(
                "rewrote {}; now run tools/fixtures/decode-with-kafka.sh on it",
                log.display()
            );
            continue;
        }
        let committed = fs::read(&log).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with SEGLOG_UPDATE_FIXTURES=1, see tools/fixtures/README.md)",
                log.display()
            )
        });
        assert!(committed == file, "{}: our builder's output changed (SEGLOG_UPDATE_FIXTURES=1 to accept, then re-run Kafka's decoder)", log.display());

        let json_path = log.with_extension("json");
        let kafka: Value = serde_json::from_slice(&fs::read(&json_path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (tools/fixtures/decode-with-kafka.sh {} > {})",
                json_path.display(),
                log.display(),
                json_path.display()
            )
        }))
        .expect("json");
        assert!(
            kafka.get("error").is_none(),
            "{name}: Kafka error {:?}",
            kafka["error"]
        );
        assert!(
            kafka.get("trailingBytes").is_none(),
            "{name}: trailing bytes"
        );
        assert!(kafka["decoder"]
            .as_str()
            .unwrap_or("")
            .starts_with("kafka-clients 4.3.0"));
        assert_eq!(kafka["sizeInBytes"], file.len(), "{name}");
        let batches = kafka["batches"].as_array().expect("batches");
        assert_eq!(batches.len(), expected.len(), "{name}: batch count");
        for (i, (theirs, ours)) in batches.iter().zip(&expected).enumerate() {
            // Exact equality of the whole object: no field missing, none extra.
            assert_eq!(theirs, ours, "{name} batch {i}");
        }
        checked += 1;
    }
    if !update {
        assert_eq!(checked, 7);
    }
}
