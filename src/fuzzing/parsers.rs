//! Fuzz harnesses, shared by the cargo-fuzz targets (through `seglog::fuzzing`) and by the plain
//! `cargo test` that replays seeds and every committed finding on stable
//! (`crates/record-format/tests/fuzz_replay.rs`). Each harness asserts more than "no panic".
#![allow(
    dead_code,
    clippy::panic,
    clippy::unwrap_used,
    clippy::indexing_slicing
)]

use record_format::internals::{self as scan, ChunkChain, ScannedBatch, ScannedEntry};
use record_format::{
    Batches, CompressionType, ControlRecord, ControlRecordKey, ControlRecordType, DecodeLimits,
    EndTransactionMarker, Header, IterEnd, LogEntry, MirrorPidResetRecord, RecordBatch,
    RecordBatchBuilder, TimestampType,
};

/// Small decompression budget so a fuzzer cannot exhaust memory.
fn limits() -> DecodeLimits {
    DecodeLimits {
        max_decompressed_bytes: 1 << 20,
    }
}

/// One record, owned, for comparisons.
#[derive(Debug, PartialEq, Eq)]
struct OwnedRecord {
    offset: i64,
    timestamp: i64,
    sequence: i32,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn owned_records(batch: &RecordBatch<'_>) -> Option<Vec<OwnedRecord>> {
    let records = batch.records(&limits()).ok()?;
    let mut out = Vec::new();
    for r in records.iter() {
        let r = r.ok()?;
        out.push(OwnedRecord {
            offset: r.offset(),
            timestamp: r.timestamp(),
            sequence: r.sequence(),
            key: r.key().map(<[u8]>::to_vec),
            value: r.value().map(<[u8]>::to_vec),
            headers: r
                .headers()
                .map(|h| (h.key.to_vec(), h.value.map(<[u8]>::to_vec)))
                .collect(),
        });
    }
    Some(out)
}

/// Re-encodes an uncompressed data batch from its parsed fields with our builder.
fn re_encode(batch: &RecordBatch<'_>, records: &[OwnedRecord]) -> Option<Vec<u8>> {
    let mut b = RecordBatchBuilder::new(batch.base_offset())
        .partition_leader_epoch(batch.partition_leader_epoch())
        .producer(
            batch.producer_id(),
            batch.producer_epoch(),
            batch.base_sequence(),
        )
        .transactional(batch.is_transactional());
    if batch.timestamp_type() == TimestampType::LogAppendTime {
        b = b.log_append_time(batch.max_timestamp());
    }
    for r in records {
        let headers: Vec<Header<'_>> = r
            .headers
            .iter()
            .map(|(k, v)| Header {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        b.append_with_offset(
            r.offset,
            r.timestamp,
            r.key.as_deref(),
            r.value.as_deref(),
            &headers,
        )
        .ok()?;
    }
    Some(b.build())
}

/// The v2 batch parser: view, validate, iterate records with every codec. A batch that parses,
/// validates and decodes re-encodes (uncompressed) to a batch with the same records, and
/// re-encoding is a fixed point: encode(parse(encode(parse(x)))) == encode(parse(x)).
pub fn batch_parse(data: &[u8]) {
    let Ok(batch) = RecordBatch::new(data, 0) else {
        return;
    };
    // Every accessor must be total.
    let totals = (
        batch.last_offset(),
        batch.next_offset(),
        batch.last_sequence(),
        batch.delete_horizon_ms(),
    );
    std::hint::black_box(totals);
    // The marker the scan's entry packed when it was made is the one the records give, and it
    // has one for every version-0 marker of an epoch below 2^22.
    let parsed = parsed_end_txn_marker(&batch);
    assert_eq!(record_format::internals::end_txn_marker(&batch), parsed);
    if let Some(marker) = ScannedBatch::new(batch).end_txn_marker() {
        assert_eq!(Some(marker), parsed);
    } else if let Some((_, m)) = parsed {
        assert!(m.version != 0 || !(0..1 << 22).contains(&m.coordinator_epoch));
    }
    let codec_ok = batch.compression().is_ok();
    assert_eq!(codec_ok, (batch.attributes() & 0x07) <= 4);
    let valid = batch.validate().is_ok();
    assert_eq!(valid, batch.is_valid());
    let Some(records) = owned_records(&batch) else {
        return;
    };
    assert_eq!(records.len(), batch.records_count().max(0) as usize);
    if !valid || batch.is_control() || records.is_empty() {
        return;
    }
    let Some(first) = re_encode(&batch, &records) else {
        return;
    };
    let rebuilt = RecordBatch::new(&first, 0).expect("our builder's batch parses");
    rebuilt.validate().expect("our builder's batch validates");
    let again = owned_records(&rebuilt).expect("our builder's records decode");
    if batch.timestamp_type() == TimestampType::CreateTime {
        assert_eq!(again, records, "re-encoded records differ");
    }
    let second = re_encode(&rebuilt, &again).expect("re-encoding our own batch");
    assert_eq!(first, second, "re-encoding is not a fixed point");
}

/// The first record of an uncompressed control batch, parsed from its records, when it is an
/// ABORT or COMMIT marker that decodes.
fn parsed_end_txn_marker(
    batch: &RecordBatch<'_>,
) -> Option<(ControlRecordType, EndTransactionMarker)> {
    if !batch.is_control() || batch.compression().ok()? != CompressionType::None {
        return None;
    }
    let records = batch.records(&DecodeLimits::default()).ok()?;
    let record = records.iter().next()?.ok()?;
    let control = ControlRecord::parse(&record).ok()?;
    match control {
        ControlRecord::EndTxn(record_type, marker) => Some((record_type, marker)),
        _ => None,
    }
}

/// The iterator over a `.log` file's bytes: positions strictly increase, each batch lies inside
/// the valid prefix, and re-iterating just the valid prefix yields the same batches and ends
/// `Complete`. The region scan (recovery's parallel one, here on one thread with 16-526-byte
/// regions) hands out exactly the same batches and ends the same way.
pub fn batch_iter(data: &[u8]) {
    let mut it = Batches::new(data, 0).validate_crc(true);
    let mut seen = Vec::new();
    let mut last_end = 0u64;
    for e in &mut it {
        match e {
            Ok(entry) => {
                assert_eq!(entry.position(), last_end, "batches are contiguous");
                last_end = entry.position() + entry.size_in_bytes() as u64;
                seen.push((entry.position(), entry.size_in_bytes(), entry.last_offset()));
                if let LogEntry::V2(b) = entry {
                    std::hint::black_box(owned_records(&b));
                }
            }
            Err(err) => {
                assert_eq!(
                    err.position, last_end,
                    "error at the end of the valid prefix"
                );
            }
        }
    }
    let end = it.valid_prefix_end();
    assert_eq!(end, last_end);
    assert!(end as usize <= data.len());
    let prefix = &data[..end as usize];
    let mut again = Batches::new(prefix, 0).validate_crc(true);
    let mut seen2 = Vec::new();
    for e in &mut again {
        let entry = e.expect("the valid prefix re-parses without error");
        seen2.push((entry.position(), entry.size_in_bytes(), entry.last_offset()));
    }
    assert_eq!(seen, seen2);
    assert_eq!(again.stopped_at(), Some(&IterEnd::Complete));

    let region = 16 + usize::from(data.first().copied().unwrap_or(0)) * 2;
    let size = data.len() as u64;
    let mut chained = Vec::new();
    let mut collect = |e: &ScannedEntry<'_>| {
        chained.push((e.position(), e.size_in_bytes(), e.last_offset()));
        Ok::<(), ()>(())
    };
    let end = scan::scan_window(data, 0, size, region, &mut collect).unwrap();
    assert_eq!(chained, seen, "region scan with {region}-byte regions");
    let mut reference = Vec::new();
    let mut collect = |e: &ScannedEntry<'_>| {
        reference.push((e.position(), e.size_in_bytes(), e.last_offset()));
        Ok::<(), ()>(())
    };
    let reference_end = scan::scan_sequential(data, 0, size, &mut collect).unwrap();
    assert_eq!(reference, seen, "sequential scan");
    assert_eq!(end, reference_end, "region scan end");

    // The same bytes read in chunks (sizes from 1 to 256 bytes, taken from the data), every third
    // one only followed: every range a `ChunkChain` checked is a run of whole valid entries of
    // those bytes, and every valid entry that lies whole in one checked chunk was checked.
    let mut chain = ChunkChain::new();
    let (mut at, mut k, mut bounds, mut checked) = (0usize, 0usize, Vec::new(), Vec::new());
    while at < data.len() {
        let n =
            (1 + usize::from(data.get(k % data.len()).copied().unwrap_or(0))).min(data.len() - at);
        let chunk = &data[at..at + n];
        // Every third chunk only followed (what the reading thread does when the scan waits).
        if k % 3 == 2 {
            chain.follow(at as u64, chunk);
            at += n;
            k += 1;
            continue;
        }
        if let Some(r) = chain.check(at as u64, chunk) {
            assert!(
                r.start >= at as u64 && r.end <= (at + n) as u64,
                "range inside its chunk"
            );
            let bytes = &chunk[(r.start - at as u64) as usize..(r.end - at as u64) as usize];
            let mut run = Batches::new(bytes, r.start).validate_crc(true);
            for e in &mut run {
                checked.push(e.expect("a checked entry is valid").position());
            }
            assert_eq!(run.stopped_at(), Some(&IterEnd::Complete), "whole entries");
        }
        bounds.push((at as u64, (at + n) as u64));
        at += n;
        k += 1;
    }
    for &(p, size, _) in &seen {
        let end = p + size as u64;
        if bounds.iter().any(|&(a, b)| a <= p && end <= b) {
            assert!(
                checked.contains(&p),
                "valid entry at {p} lies in one chunk, not checked"
            );
        }
    }
}

/// Control records: key, end-transaction marker and MirrorPidResetRecord parsers. Whatever parses
/// serialises back to bytes that parse to the same value.
pub fn control_record(data: &[u8]) {
    let split = data
        .first()
        .map_or(0, |b| (*b as usize) % 8)
        .min(data.len());
    let (key, value) = data.split_at(split);
    if let Ok((_, t)) = ControlRecordKey::parse(key, 0) {
        let bytes = ControlRecordKey::new(t).to_bytes();
        assert_eq!(ControlRecordKey::parse(&bytes, 0).map(|k| k.1), Ok(t));
    }
    for t in [ControlRecordType::Abort, ControlRecordType::Commit] {
        if let Ok(m) = EndTransactionMarker::parse(t, value, 0) {
            let bytes = m.to_bytes();
            let back = EndTransactionMarker::parse(t, &bytes, 0).expect("re-parse marker");
            assert_eq!(back.coordinator_epoch, m.coordinator_epoch);
        }
    }
    if let Ok(r) = MirrorPidResetRecord::parse(data, 0) {
        let bytes = r.to_bytes();
        let back = MirrorPidResetRecord::parse(&bytes, 0).expect("re-parse MirrorPidResetRecord");
        assert_eq!(back, r);
    }
}
