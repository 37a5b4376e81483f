//! Property tests: anything our builder writes (uncompressed) parses back to exactly the fields
//! and records that went in; and no byte string, random or a mutated valid batch, makes the batch
//! iterator, the record iterator or the control-record parsers panic, with batch positions
//! strictly increasing.

use proptest::prelude::*;
use record_format::internals::increment_sequence;
use record_format::{
    is_mirror_pid_reset_batch, Batches, ControlRecord, DecodeLimits, Header, IterEnd, LogEntry,
    RecordBatch, RecordBatchBuilder, TimestampType,
};

#[derive(Debug, Clone)]
struct RecordSpec {
    offset_gap: i64,
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

#[derive(Debug, Clone)]
struct BatchSpec {
    base_offset: i64,
    leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    log_append_time: Option<i64>,
    records: Vec<RecordSpec>,
}

fn bytes(max: usize) -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        3 => proptest::collection::vec(any::<u8>(), 1..max).prop_map(Some),
    ]
}

fn timestamp() -> impl Strategy<Value = i64> {
    prop_oneof![1 => Just(-1i64), 1 => Just(0i64), 8 => 0i64..(1 << 42)]
}

fn record_spec() -> impl Strategy<Value = RecordSpec> {
    (
        0i64..3,
        timestamp(),
        bytes(40),
        bytes(300),
        proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..12), bytes(20)),
            0..5,
        ),
    )
        .prop_map(|(offset_gap, timestamp, key, value, headers)| RecordSpec {
            offset_gap,
            timestamp,
            key,
            value,
            headers,
        })
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    (
        prop_oneof![Just(0i64), 0i64..(1 << 50)],
        any::<i32>(),
        prop_oneof![
            Just((-1i64, -1i16, -1i32)),
            (0i64..i64::MAX, any::<i16>(), 0i32..=i32::MAX)
        ],
        any::<bool>(),
        prop_oneof![Just(None), (0i64..(1 << 42)).prop_map(Some)],
        proptest::collection::vec(record_spec(), 0..8),
    )
        .prop_map(
            |(base_offset, leader_epoch, (pid, epoch, seq), transactional, lat, records)| {
                BatchSpec {
                    base_offset,
                    leader_epoch,
                    producer_id: pid,
                    producer_epoch: epoch,
                    base_sequence: seq,
                    transactional,
                    log_append_time: lat,
                    records,
                }
            },
        )
}

fn build(spec: &BatchSpec) -> (Vec<u8>, Vec<i64>) {
    let mut b = RecordBatchBuilder::new(spec.base_offset)
        .partition_leader_epoch(spec.leader_epoch)
        .producer(spec.producer_id, spec.producer_epoch, spec.base_sequence)
        .transactional(spec.transactional);
    if let Some(t) = spec.log_append_time {
        b = b.log_append_time(t);
    }
    let mut offsets = Vec::new();
    let mut next = spec.base_offset;
    for r in &spec.records {
        let offset = next + r.offset_gap;
        let headers: Vec<Header<'_>> = r
            .headers
            .iter()
            .map(|(k, v)| Header {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        b.append_with_offset(
            offset,
            r.timestamp,
            r.key.as_deref(),
            r.value.as_deref(),
            &headers,
        )
        .expect("append");
        offsets.push(offset);
        next = offset + 1;
    }
    (b.build(), offsets)
}

fn check(spec: &BatchSpec, offsets: &[i64], batch: &RecordBatch<'_>) {
    assert!(batch.is_valid());
    batch.validate().expect("crc");
    let last = offsets.last().copied().unwrap_or(spec.base_offset);
    let delta = (last - spec.base_offset) as i32;
    assert_eq!(batch.base_offset(), spec.base_offset);
    assert_eq!(batch.last_offset(), last);
    assert_eq!(batch.next_offset(), last + 1);
    assert_eq!(batch.last_offset_delta(), delta);
    assert_eq!(batch.batch_length() as usize + 12, batch.size_in_bytes());
    assert_eq!(batch.partition_leader_epoch(), spec.leader_epoch);
    assert_eq!(batch.magic(), 2);
    assert_eq!(batch.producer_id(), spec.producer_id);
    assert_eq!(batch.has_producer_id(), spec.producer_id >= 0);
    assert_eq!(batch.producer_epoch(), spec.producer_epoch);
    assert_eq!(batch.base_sequence(), spec.base_sequence);
    let last_seq = if spec.base_sequence == -1 {
        -1
    } else {
        increment_sequence(spec.base_sequence, delta)
    };
    assert_eq!(batch.last_sequence(), last_seq);
    assert_eq!(batch.is_transactional(), spec.transactional);
    assert!(!batch.is_control());
    assert!(!batch.has_delete_horizon());
    assert_eq!(batch.delete_horizon_ms(), None);
    assert_eq!(batch.records_count() as usize, spec.records.len());
    let base_ts = spec.records.first().map_or(-1, |r| r.timestamp);
    assert_eq!(batch.base_timestamp(), base_ts);
    let max_ts = match spec.log_append_time {
        Some(t) => t,
        None => spec.records.iter().map(|r| r.timestamp).fold(-1, i64::max),
    };
    assert_eq!(batch.max_timestamp(), max_ts);
    assert_eq!(
        batch.timestamp_type(),
        if spec.log_append_time.is_some() {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    );
    assert_eq!(is_mirror_pid_reset_batch(batch), Ok(false));

    let records = batch.records(&DecodeLimits::default()).expect("records");
    let parsed: Vec<_> = records
        .iter_borrowed()
        .expect("uncompressed borrows")
        .collect::<Result<_, _>>()
        .expect("parse");
    assert_eq!(parsed.len(), spec.records.len());
    for ((r, s), off) in parsed.iter().zip(&spec.records).zip(offsets) {
        assert_eq!(r.offset(), *off);
        assert_eq!(r.timestamp(), spec.log_append_time.unwrap_or(s.timestamp));
        assert_eq!(batch.base_timestamp() + r.timestamp_delta(), s.timestamp);
        let seq = if spec.base_sequence >= 0 {
            increment_sequence(spec.base_sequence, (off - spec.base_offset) as i32)
        } else {
            -1
        };
        assert_eq!(r.sequence(), seq);
        assert_eq!(r.key(), s.key.as_deref());
        assert_eq!(r.value(), s.value.as_deref());
        assert_eq!(r.header_count(), s.headers.len());
        let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = r
            .headers()
            .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(headers, s.headers);
    }
}

/// Drives every parser over `data`; must not panic; batch positions strictly increase and stay in
/// range; the end state is consistent.
fn exercise(data: &[u8], base: u64) {
    let mut last: Option<u64> = None;
    let mut it = Batches::new(data, base).validate_crc(false);
    for entry in it.by_ref() {
        let Ok(entry) = entry else { break };
        let p = entry.position();
        assert!(last.is_none_or(|l| p > l));
        assert!(p + entry.size_in_bytes() as u64 <= base + data.len() as u64);
        last = Some(p);
        std::hint::black_box(entry.validate().is_ok());
        if let LogEntry::V2(b) = entry {
            assert_eq!(b.compression().is_ok(), (b.attributes() as u8 & 7) < 5);
            assert_eq!(b.delete_horizon_ms().is_some(), b.attributes() & 0x40 != 0);
            std::hint::black_box(b.last_sequence());
            if let Ok(records) = b.records(&DecodeLimits::default()) {
                for r in records.iter() {
                    let Ok(r) = r else { break };
                    std::hint::black_box(r.headers().count());
                    if b.is_control() {
                        std::hint::black_box(ControlRecord::parse(&r).is_ok());
                    }
                }
            }
            std::hint::black_box(is_mirror_pid_reset_batch(&b).is_ok());
        }
    }
    let end = it.valid_prefix_end();
    assert!(end <= base + data.len() as u64);
    match it.stopped_at().expect("finished") {
        IterEnd::Complete => assert_eq!(end, base + data.len() as u64),
        IterEnd::IncompleteTrailing { position, bytes } => {
            assert_eq!(*position, end);
            assert_eq!(position + bytes, base + data.len() as u64);
        }
        IterEnd::Error(e) => assert_eq!(e.position, end),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn build_then_parse_gives_back_every_field(specs in proptest::collection::vec(batch_spec(), 1..4)) {
        let mut file = Vec::new();
        let mut expected = Vec::new();
        for s in &specs {
            let (bytes, offsets) = build(s);
            expected.push((file.len() as u64, bytes.len(), offsets));
            file.extend_from_slice(&bytes);
        }
        let mut it = Batches::new(&file, 7).validate_crc(true);
        let mut n = 0;
        for entry in it.by_ref() {
            let LogEntry::V2(batch) = entry.expect("entry") else { panic!("legacy") };
            let (pos, size, offsets) = &expected[n];
            prop_assert_eq!(batch.position(), 7 + pos);
            prop_assert_eq!(batch.size_in_bytes(), *size);
            check(&specs[n], offsets, &batch);
            n += 1;
        }
        prop_assert_eq!(n, specs.len());
        prop_assert_eq!(it.stopped_at(), Some(&IterEnd::Complete));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600), base in 0u64..1_000_000) {
        exercise(&data, base);
    }

    #[test]
    fn mutated_batches_never_panic(
        spec in batch_spec(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let (mut bytes, _) = build(&spec);
        let mut marker = record_format::end_txn_marker_batch(1, 2, 3, 4, 5, record_format::ControlRecordType::Commit, 6);
        let barrier = record_format::mirror_pid_reset_batch(9, 10, 11, "cluster");
        marker.extend_from_slice(&barrier);
        bytes.extend_from_slice(&marker);
        let n = bytes.len();
        for (i, x) in flips {
            bytes[i % n] ^= x;
        }
        exercise(&bytes, 0);
        exercise(&bytes[..cut % (n + 1)], 3);
    }
}
