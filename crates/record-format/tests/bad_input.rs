//! Every error path of the read side, each asserting the exact [`FormatErrorKind`] and the exact
//! absolute byte position. Inputs are placed at a non-zero base position (`BASE`) so a position
//! computed relative to the wrong origin fails.
//!
//! Conventions checked here (documented in the modules): the batch iterator positions its errors
//! at the start of the offending batch; `RecordBatch` accessors position theirs at the field;
//! record errors are at the offending field (varint) for uncompressed batches and at the records
//! section start (batch + 61) for compressed ones.

mod common;

use record_format::internals::{
    compress, set_base_offset_and_leader_epoch, set_max_timestamp_log_append_time,
    write_unsigned_varint, write_varint,
};
use record_format::{
    is_mirror_pid_reset_batch, Batches, CompressionType, ControlRecord, ControlRecordKey,
    ControlRecordType, DecodeLimits, EndTransactionMarker, FormatError, FormatErrorKind, Header,
    IterEnd, LogEntry, MirrorPidResetRecord, RecordBatch, RecordBatchBuilder, TimestampType,
};

const BASE: u64 = 1000;

fn good_batch() -> Vec<u8> {
    let mut b = RecordBatchBuilder::new(5).partition_leader_epoch(2);
    b.append(1_700_000_000_000, Some(b"k"), Some(b"value"), &[])
        .unwrap();
    b.append(
        1_700_000_000_001,
        None,
        Some(b"v2"),
        &[Header {
            key: b"h",
            value: None,
        }],
    )
    .unwrap();
    b.build()
}

fn put(buf: &mut [u8], off: usize, src: &[u8]) {
    buf[off..off + src.len()].copy_from_slice(src);
}

fn fix_crc(buf: &mut [u8]) {
    let crc = RecordBatch::new(buf, 0).unwrap().compute_crc();
    put(buf, 17, &crc.to_be_bytes());
}

/// A v2 batch with hand-written records section, `count`, attributes; length and CRC correct.
fn raw_batch(attributes: i16, count: i32, records: &[u8]) -> Vec<u8> {
    let mut out = RecordBatchBuilder::new(100).build();
    out.extend_from_slice(records);
    let len = (out.len() - 12) as i32;
    put(&mut out, 8, &len.to_be_bytes());
    put(&mut out, 21, &attributes.to_be_bytes());
    put(&mut out, 27, &1_000i64.to_be_bytes());
    put(&mut out, 57, &count.to_be_bytes());
    fix_crc(&mut out);
    out
}

/// Record body: attrs 0, tsDelta 0, offsetDelta `delta`, then `rest` (key, value, headers).
fn record(delta: i32, rest: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8, 0u8];
    write_varint(&mut body, delta);
    body.extend_from_slice(rest);
    let mut out = Vec::new();
    write_varint(&mut out, body.len() as i32);
    out.extend_from_slice(&body);
    out
}

/// Null key, null value, no headers.
const EMPTY_KV: [u8; 3] = [0x01, 0x01, 0x00];

fn first_err(batch: &[u8]) -> FormatError {
    let b = RecordBatch::new(batch, BASE).unwrap();
    let records = match b.records(&DecodeLimits::default()) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut it = records.iter();
    let e = loop {
        match it.next() {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("no error"),
        }
    };
    assert!(
        it.next().is_none(),
        "record iterator must end after an error"
    );
    e
}

fn err(kind: FormatErrorKind, position: u64) -> FormatError {
    FormatError::new(kind, position)
}

// ---- batch framing --------------------------------------------------------------------------

#[test]
fn truncated_header_is_truncated_for_the_view_and_incomplete_for_the_iterator() {
    let b = good_batch();
    assert_eq!(
        RecordBatch::new(&b[..10], BASE).unwrap_err(),
        err(FormatErrorKind::Truncated { need: 61, have: 10 }, BASE)
    );
    let mut it = Batches::new(&b[..10], BASE);
    assert!(it.next().is_none());
    assert_eq!(
        it.stopped_at(),
        Some(&IterEnd::IncompleteTrailing {
            position: BASE,
            bytes: 10
        })
    );
    // 17 bytes is still "the end" for Kafka (position >= end - 17).
    let mut it = Batches::new(&b[..17], BASE);
    assert!(it.next().is_none());
    assert_eq!(
        it.stopped_at(),
        Some(&IterEnd::IncompleteTrailing {
            position: BASE,
            bytes: 17
        })
    );
}

#[test]
fn size_below_14_is_bad_length_at_the_batch_and_the_iterator_is_fused() {
    let good = good_batch();
    let mut file = good.clone();
    let mut bad = good.clone();
    put(&mut bad, 8, &13i32.to_be_bytes());
    file.extend_from_slice(&bad);
    file.extend_from_slice(&good);
    let at = BASE + good.len() as u64;
    let mut it = Batches::new(&file, BASE);
    assert!(matches!(it.next(), Some(Ok(LogEntry::V2(_)))));
    assert_eq!(
        it.next(),
        Some(Err(err(FormatErrorKind::BadLength(13), at)))
    );
    assert_eq!(it.next(), None);
    assert_eq!(it.next(), None);
    assert_eq!(it.valid_prefix_end(), at);
    assert_eq!(
        it.stopped_at(),
        Some(&IterEnd::Error(err(FormatErrorKind::BadLength(13), at)))
    );
    // Negative sizes too.
    put(&mut file, good.len() + 8, &(-1i32).to_be_bytes());
    let mut it = Batches::new(&file, BASE);
    assert!(it.next().unwrap().is_ok());
    assert_eq!(
        it.next(),
        Some(Err(err(FormatErrorKind::BadLength(-1), at)))
    );
}

#[test]
fn v2_batch_smaller_than_its_header_is_bad_length() {
    let mut b = good_batch();
    put(&mut b, 8, &40i32.to_be_bytes());
    let mut it = Batches::new(&b, BASE);
    assert_eq!(
        it.next(),
        Some(Err(err(FormatErrorKind::BadLength(40), BASE)))
    );
    assert_eq!(
        RecordBatch::new(&b[..52], BASE).unwrap_err(),
        err(FormatErrorKind::BadLength(40), BASE + 8)
    );
}

#[test]
fn bad_magic() {
    let mut b = good_batch();
    b[16] = 3;
    let mut it = Batches::new(&b, BASE);
    assert_eq!(
        it.next(),
        Some(Err(err(FormatErrorKind::BadMagic(3), BASE)))
    );
    assert_eq!(it.next(), None);
    b[16] = 0xff;
    assert_eq!(
        Batches::new(&b, BASE).next(),
        Some(Err(err(FormatErrorKind::BadMagic(-1), BASE)))
    );
    b[16] = 1;
    assert_eq!(
        RecordBatch::new(&b, BASE).unwrap_err(),
        err(FormatErrorKind::BadMagic(1), BASE + 16)
    );
}

#[test]
fn length_field_must_match_the_view() {
    let b = good_batch();
    let n = b.len();
    let mut longer = b.clone();
    longer.push(0);
    assert_eq!(
        RecordBatch::new(&longer, BASE).unwrap_err(),
        err(FormatErrorKind::BadLength((n - 12) as i64), BASE + 8)
    );
    assert_eq!(
        RecordBatch::new(&b[..n - 1], BASE).unwrap_err(),
        err(
            FormatErrorKind::Truncated {
                need: n as u64,
                have: (n - 1) as u64
            },
            BASE
        )
    );
}

#[test]
fn crc_mismatch_only_when_asked_for() {
    let good = good_batch();
    let mut file = good.clone();
    let mut bad = good.clone();
    let last = bad.len() - 3;
    bad[last] ^= 0xff;
    file.extend_from_slice(&bad);
    let at = BASE + good.len() as u64;
    let stored = RecordBatch::new(&bad, 0).unwrap().crc();
    let computed = RecordBatch::new(&bad, 0).unwrap().compute_crc();
    assert_ne!(stored, computed);

    let all: Vec<_> = Batches::new(&file, BASE).collect();
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|r| r.is_ok()));

    let mut it = Batches::new(&file, BASE).validate_crc(true);
    assert!(it.next().unwrap().is_ok());
    assert_eq!(
        it.next(),
        Some(Err(err(
            FormatErrorKind::CrcMismatch { stored, computed },
            at
        )))
    );
    assert_eq!(it.next(), None);
    assert_eq!(it.valid_prefix_end(), at);

    let view = RecordBatch::new(&bad, at).unwrap();
    assert!(!view.is_valid());
    assert_eq!(
        view.validate(),
        Err(err(
            FormatErrorKind::CrcMismatch { stored, computed },
            at + 17
        ))
    );
}

#[test]
fn length_past_end_is_an_incomplete_trailing_batch_not_an_error() {
    let good = good_batch();
    let mut file = good.clone();
    file.extend_from_slice(&good[..good.len() - 1]);
    let mut it = Batches::new(&file, BASE).validate_crc(true);
    assert!(it.next().unwrap().is_ok());
    assert_eq!(it.next(), None);
    assert_eq!(
        it.stopped_at(),
        Some(&IterEnd::IncompleteTrailing {
            position: BASE + good.len() as u64,
            bytes: good.len() as u64 - 1
        })
    );
    assert_eq!(it.valid_prefix_end(), BASE + good.len() as u64);
}

#[test]
fn legacy_entries_are_recognised_and_crc32_checked() {
    // v1 message: crc, magic 1, attributes 0, timestamp, key -1, value "hi".
    let mut body = vec![1u8, 0];
    body.extend_from_slice(&1_000i64.to_be_bytes());
    body.extend_from_slice(&(-1i32).to_be_bytes());
    body.extend_from_slice(&2i32.to_be_bytes());
    body.extend_from_slice(b"hi");
    let crc = crc32fast::hash(&body);
    let mut entry = 77i64.to_be_bytes().to_vec();
    entry.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    entry.extend_from_slice(&crc.to_be_bytes());
    entry.extend_from_slice(&body);
    let mut it = Batches::new(&entry, BASE).validate_crc(true);
    let Some(Ok(LogEntry::Legacy(l))) = it.next() else {
        panic!("expected a legacy entry")
    };
    assert_eq!(
        (l.offset(), l.magic(), l.size_in_bytes()),
        (77, 1, entry.len())
    );
    assert!(l.is_valid());
    assert_eq!(it.stopped_at(), None);
    assert_eq!(it.next(), None);
    assert_eq!(it.stopped_at(), Some(&IterEnd::Complete));

    let last = entry.len() - 1;
    entry[last] ^= 1;
    let computed = crc32fast::hash(&entry[16..]);
    assert_eq!(
        Batches::new(&entry, BASE).validate_crc(true).next(),
        Some(Err(err(
            FormatErrorKind::CrcMismatch {
                stored: crc,
                computed
            },
            BASE
        )))
    );
}

#[test]
fn unknown_compression_id() {
    let b = raw_batch(5, 1, &record(0, &EMPTY_KV));
    let view = RecordBatch::new(&b, BASE).unwrap();
    assert_eq!(
        view.compression(),
        Err(err(FormatErrorKind::UnknownCompression(5), BASE + 21))
    );
    assert_eq!(
        view.records(&DecodeLimits::default()).unwrap_err(),
        err(FormatErrorKind::UnknownCompression(5), BASE + 21)
    );
    // Only the low byte of the attributes counts.
    let b = raw_batch(0x0700, 1, &record(0, &EMPTY_KV));
    assert_eq!(
        RecordBatch::new(&b, BASE).unwrap().compression(),
        Ok(CompressionType::None)
    );
}

// ---- records -------------------------------------------------------------------------------

#[test]
fn negative_record_count() {
    let b = raw_batch(0, -1, &record(0, &EMPTY_KV));
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::NegativeRecordCount(-1), BASE + 57)
    );
}

#[test]
fn premature_eof() {
    let recs = record(0, &EMPTY_KV);
    let b = raw_batch(0, 2, &recs);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::RecordCountMismatch {
                declared: 2,
                found: 1
            },
            BASE + b.len() as u64
        )
    );
}

#[test]
fn trailing_bytes_after_the_declared_records() {
    let mut recs = record(0, &EMPTY_KV);
    let second = BASE + 61 + recs.len() as u64;
    recs.extend_from_slice(&record(1, &EMPTY_KV));
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::TrailingBytes(7), second)
    );
}

#[test]
fn count_zero_reads_nothing_like_kafka() {
    let b = raw_batch(0, 0, &[0xff, 0xff]);
    let view = RecordBatch::new(&b, BASE).unwrap();
    assert_eq!(
        view.records(&DecodeLimits::default())
            .unwrap()
            .iter()
            .count(),
        0
    );
}

#[test]
fn bad_record_lengths() {
    // Declared 7, body 6, one spare byte: consumed != declared.
    let mut recs = vec![0x0e, 0, 0, 0];
    recs.extend_from_slice(&EMPTY_KV);
    recs.push(0);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::BadRecordLength {
                declared: 7,
                actual: 6
            },
            BASE + 61
        )
    );
    // Declared 5 (the body reads 6 bytes).
    let mut recs = vec![0x0a, 0, 0, 0];
    recs.extend_from_slice(&EMPTY_KV);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::BadRecordLength {
                declared: 5,
                actual: 6
            },
            BASE + 61
        )
    );
    // Negative.
    let b = raw_batch(0, 1, &[0x03, 0, 0, 0, 1, 1, 0]);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::BadRecordLength {
                declared: -2,
                actual: 0
            },
            BASE + 61
        )
    );
    // Beyond the remaining bytes.
    let b = raw_batch(0, 1, &[0x20, 0, 0, 0, 1, 1, 0]);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::LengthOutOfRange {
                declared: 16,
                remaining: 6
            },
            BASE + 61
        )
    );
}

#[test]
fn overlong_varint() {
    let b = raw_batch(0, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0]);
    assert_eq!(first_err(&b), err(FormatErrorKind::BadVarint, BASE + 61));
    // An overlong varlong timestamp delta (11 bytes) inside a record.
    let mut body = vec![0u8];
    body.extend_from_slice(&[0xff; 11]);
    let mut recs = Vec::new();
    write_varint(&mut recs, body.len() as i32);
    recs.extend_from_slice(&body);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::BadVarint, BASE + 61 + 2)
    );
}

#[test]
fn key_and_value_lengths_beyond_the_record() {
    // key length 100 with 3 bytes left in the batch.
    let recs = record(0, &[0xc8, 0x01, 0x01, 0x00]);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::LengthOutOfRange {
                declared: 100,
                remaining: 2
            },
            BASE + 61 + 4
        )
    );
}

#[test]
fn header_errors() {
    // headers count 1, header key length -1.
    let recs = record(0, &[0x01, 0x01, 0x02, 0x01, 0x01]);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::NegativeHeaderKeyLength(-1), BASE + 61 + 7)
    );
    // headers count -1.
    let recs = record(0, &[0x01, 0x01, 0x01]);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::BadHeaderCount(-1), BASE + 61 + 6)
    );
    // headers count 100 with 2 bytes left.
    let recs = record(0, &[0x01, 0x01, 0xc8, 0x01, 0x00, 0x01]);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::BadHeaderCount(100), BASE + 61 + 6)
    );
    // header key length 5 with 2 bytes left.
    let recs = record(0, &[0x01, 0x01, 0x02, 0x0a, 0x61, 0x01]);
    let b = raw_batch(0, 1, &recs);
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::LengthOutOfRange {
                declared: 5,
                remaining: 2
            },
            BASE + 61 + 7
        )
    );
}

#[test]
fn compressed_batch_decompression_errors_are_at_the_records_section() {
    let b = raw_batch(1, 1, b"definitely not gzip");
    let e = RecordBatch::new(&b, BASE)
        .unwrap()
        .records(&DecodeLimits::default())
        .unwrap_err();
    assert!(
        matches!(
            e.kind,
            FormatErrorKind::Decompression {
                codec: CompressionType::Gzip,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.position, BASE + 61);
}

/// Waits for the gzip codec: a record error inside decompressed data is positioned at the start
/// of the records section.
#[test]
fn compressed_record_errors_are_at_the_records_section() {
    let recs = record(0, &[0x01, 0x01, 0x01]); // header count -1
    let b = raw_batch(1, 1, &compress(CompressionType::Gzip, &recs));
    assert_eq!(
        first_err(&b),
        err(FormatErrorKind::BadHeaderCount(-1), BASE + 61)
    );
    let b = raw_batch(
        1,
        2,
        &compress(CompressionType::Gzip, &record(0, &EMPTY_KV)),
    );
    assert_eq!(
        first_err(&b),
        err(
            FormatErrorKind::RecordCountMismatch {
                declared: 2,
                found: 1
            },
            BASE + 61
        )
    );
}

// ---- control records -----------------------------------------------------------------------

fn control_batch_with(key: Option<&[u8]>, value: Option<&[u8]>) -> Vec<u8> {
    let mut rest = Vec::new();
    for f in [key, value] {
        match f {
            None => write_varint(&mut rest, -1),
            Some(d) => {
                write_varint(&mut rest, d.len() as i32);
                rest.extend_from_slice(d);
            }
        }
    }
    rest.push(0);
    raw_batch(0x20, 1, &record(0, &rest))
}

fn control_err(batch: &[u8]) -> FormatError {
    let b = RecordBatch::new(batch, BASE).unwrap();
    let records = b.records(&DecodeLimits::default()).unwrap();
    let r = records.iter().next().unwrap().unwrap();
    ControlRecord::parse(&r).unwrap_err()
}

#[test]
fn bad_control_keys() {
    // Key of 3 bytes: key bytes start at 61 + 1 (len) + 3 (attrs, ts, offset) + 1 (key len).
    let key_at = BASE + 61 + 5;
    let b = control_batch_with(Some(&[0, 0, 1]), Some(&[0, 0, 0, 0, 0, 1]));
    assert_eq!(control_err(&b), err(FormatErrorKind::BadControlKey, key_at));
    assert_eq!(
        is_mirror_pid_reset_batch(&RecordBatch::new(&b, BASE).unwrap()),
        Err(err(FormatErrorKind::BadControlKey, key_at))
    );
    let b = control_batch_with(
        Some(&[0xff, 0xff, 0, 7]),
        Some(&[0, 0, 4, 0x61, 0x62, 0x63, 0]),
    );
    assert_eq!(control_err(&b), err(FormatErrorKind::BadControlKey, key_at));
    let b = control_batch_with(None, Some(&[0, 0, 0, 0, 0, 1]));
    assert_eq!(control_err(&b), err(FormatErrorKind::BadControlKey, key_at));
    // Version > 0 is read as v0; extra key bytes ignored.
    assert_eq!(
        ControlRecordKey::parse(&[0, 3, 0, 7, 9], 0),
        Ok((3, ControlRecordType::MirrorPidReset))
    );
}

#[test]
fn bad_end_txn_marker_values() {
    let value_at = BASE + 61 + 5 + 4 + 1;
    let b = control_batch_with(Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 1]));
    assert_eq!(
        control_err(&b),
        err(
            FormatErrorKind::BadControlValue {
                control_type: 1,
                reason: "end transaction marker shorter than 6 bytes"
            },
            value_at
        )
    );
    let b = control_batch_with(Some(&[0, 0, 0, 0]), Some(&[0xff, 0xff, 0, 0, 0, 1]));
    assert_eq!(
        control_err(&b),
        err(
            FormatErrorKind::BadControlValue {
                control_type: 0,
                reason: "negative end transaction marker version"
            },
            value_at
        )
    );
    let b = control_batch_with(Some(&[0, 0, 0, 0]), None);
    assert!(matches!(
        control_err(&b).kind,
        FormatErrorKind::BadControlValue {
            control_type: 0,
            ..
        }
    ));
    // Version > 0 is read as v0, extra bytes ignored.
    assert_eq!(
        EndTransactionMarker::parse(ControlRecordType::Commit, &[0, 1, 0, 0, 0, 9, 7], 0),
        Ok(EndTransactionMarker {
            version: 1,
            coordinator_epoch: 9
        })
    );
    assert!(EndTransactionMarker::parse(ControlRecordType::LeaderChange, &[0; 6], 0).is_err());
}

fn mpr_err(value: &[u8]) -> FormatError {
    MirrorPidResetRecord::parse(value, BASE).unwrap_err()
}

fn mpr(reason: &'static str, at: u64) -> FormatError {
    err(
        FormatErrorKind::BadControlValue {
            control_type: 7,
            reason,
        },
        BASE + at,
    )
}

#[test]
fn bad_mirror_pid_reset_records() {
    assert_eq!(mpr_err(&[0]), mpr("truncated Version", 0));
    assert_eq!(
        mpr_err(&[0, 0, 0, 0]),
        mpr("non-nullable SourceClusterId was serialized as null", 2)
    );
    assert_eq!(
        mpr_err(&[0, 0, 4, 0x61, 0x62]),
        mpr("truncated SourceClusterId", 2)
    );
    assert_eq!(mpr_err(&[0, 0]), mpr("bad SourceClusterId length", 2));
    let mut long = vec![0, 0];
    write_unsigned_varint(&mut long, 0x8001);
    long.extend_from_slice(&[0x61; 0x8000]);
    long.push(0);
    assert_eq!(mpr_err(&long), mpr("SourceClusterId longer than 0x7fff", 2));
    assert_eq!(
        mpr_err(&[0, 0, 3, 0xff, 0xfe, 0]),
        mpr("SourceClusterId is not UTF-8", 2)
    );
    // Tagged fields: missing count, missing size, truncated data, overlong varint.
    assert_eq!(
        mpr_err(&[0, 0, 4, 0x61, 0x62, 0x63]),
        mpr("bad tagged field count", 6)
    );
    assert_eq!(
        mpr_err(&[0, 0, 4, 0x61, 0x62, 0x63, 1, 5]),
        mpr("bad tagged field size", 7)
    );
    assert_eq!(
        mpr_err(&[0, 0, 4, 0x61, 0x62, 0x63, 1, 5, 3, 0xaa]),
        mpr("truncated tagged field", 7)
    );
    assert_eq!(
        mpr_err(&[0, 0, 4, 0x61, 0x62, 0x63, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        mpr("bad tagged field count", 6)
    );
    // Through a whole barrier batch: the position is absolute.
    let b = control_batch_with(Some(&[0, 0, 0, 7]), Some(&[0, 0, 0, 0]));
    assert_eq!(control_err(&b).position, BASE + 61 + 5 + 4 + 1 + 2);
}

#[test]
fn mirror_pid_reset_tagged_fields_are_kept() {
    let bytes = [0, 0, 4, 0x61, 0x62, 0x63, 2, 5, 2, 0xaa, 0xbb, 9, 0];
    let r = MirrorPidResetRecord::parse(&bytes, 0).unwrap();
    assert_eq!(r.version, 0);
    assert_eq!(r.source_cluster_id, "abc");
    assert_eq!(
        r.unknown_tagged_fields,
        vec![(5, vec![0xaa, 0xbb]), (9, vec![])]
    );
    assert_eq!(r.to_bytes(), bytes);
}

// ---- in-place rewrites -----------------------------------------------------------------------

#[test]
fn leader_rewrites_keep_or_recompute_the_crc() {
    let mut b = good_batch();
    let crc = RecordBatch::new(&b, 0).unwrap().crc();
    set_base_offset_and_leader_epoch(&mut b, 12345, 9).unwrap();
    let v = RecordBatch::new(&b, 0).unwrap();
    assert_eq!(
        (v.base_offset(), v.partition_leader_epoch(), v.crc()),
        (12345, 9, crc)
    );
    assert!(v.is_valid());

    set_max_timestamp_log_append_time(&mut b, 1_800_000_000_000).unwrap();
    let v = RecordBatch::new(&b, 0).unwrap();
    assert!(v.is_valid());
    assert_ne!(v.crc(), crc);
    assert_eq!(v.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(v.max_timestamp(), 1_800_000_000_000);
    let records = v.records(&DecodeLimits::default()).unwrap();
    for r in &records {
        assert_eq!(r.unwrap().timestamp(), 1_800_000_000_000);
    }
    // Same as a batch built as LogAppendTime directly.
    let mut direct = RecordBatchBuilder::new(12345)
        .partition_leader_epoch(9)
        .log_append_time(1_800_000_000_000);
    direct
        .append(1_700_000_000_000, Some(b"k"), Some(b"value"), &[])
        .unwrap();
    direct
        .append(
            1_700_000_000_001,
            None,
            Some(b"v2"),
            &[Header {
                key: b"h",
                value: None,
            }],
        )
        .unwrap();
    assert_eq!(direct.build(), b);

    assert_eq!(
        set_base_offset_and_leader_epoch(&mut b[..60], 1, 1)
            .unwrap_err()
            .kind,
        FormatErrorKind::Truncated { need: 61, have: 60 }
    );
}

#[test]
fn incomplete_trailing_batch_needs_its_whole_size_once_its_size_field_is_there() {
    let b = good_batch();
    // Before the 12-byte offset + size prefix is complete, the size is unknown: the v2 header.
    let mut it = Batches::new(&b[..10], BASE);
    assert!(it.next().is_none());
    assert_eq!(
        it.incomplete_error(),
        Some(err(FormatErrorKind::Truncated { need: 61, have: 10 }, BASE))
    );
    // After it, the batch's own length: the bytes the file would have to hold.
    let mut it = Batches::new(&b[..b.len() - 1], BASE);
    assert!(it.next().is_none());
    assert_eq!(
        it.incomplete_error(),
        Some(err(
            FormatErrorKind::Truncated {
                need: b.len() as u64,
                have: b.len() as u64 - 1
            },
            BASE
        ))
    );
    // A complete batch is no incomplete tail.
    let mut it = Batches::new(&b, BASE);
    assert!(it.next().is_some_and(|e| e.is_ok()) && it.next().is_none());
    assert_eq!(it.incomplete_error(), None);
}
