//! Record-format benchmarks, each with its baseline measured in the same run.
//!
//! (a) `walk_validate`: walk every batch of a ≥100 MB `.log` buffer of 10-record batches and
//!     CRC-32C-validate each one, against one `crc32c` call over the whole buffer (the physical
//!     floor: validation must read every byte once).
//!     Also `scan_log` with 2 threads (regions walked and CRC-checked on both cores, the engine
//!     recovery uses).
//! (b) `iterate_records`: validate and iterate every record (offset, timestamp, key, value,
//!     headers) of the same buffer, against `kafka-protocol` 0.18's
//!     `RecordBatchDecoder::decode_all` over the same bytes.
//!
//! Ratios are computed from criterion's estimates by `benches/report.sh`.
use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use record_format::{Batches, DecodeLimits, Header, LogEntry, RecordBatchBuilder};

/// Builds a `.log` buffer of at least `min_bytes`: 10-record batches, 100-byte values, short keys,
/// one header on every other record, consecutive offsets.
pub fn sample_log(min_bytes: usize) -> Vec<u8> {
    let mut log = Vec::with_capacity(min_bytes + 4096);
    let mut offset = 0i64;
    let value = [0x5au8; 100];
    while log.len() < min_bytes {
        let mut b = RecordBatchBuilder::new(offset)
            .partition_leader_epoch(1)
            .producer(1000, 0, offset as i32);
        for i in 0..10 {
            let key = format!("key-{}", offset + i);
            let headers: &[Header<'_>] = if i % 2 == 0 {
                &[Header {
                    key: b"trace",
                    value: Some(b"abc"),
                }]
            } else {
                &[]
            };
            b.append(
                1_700_000_000_000 + offset + i,
                Some(key.as_bytes()),
                Some(&value),
                headers,
            )
            .expect("append");
        }
        log.extend_from_slice(&b.build());
        offset += 10;
    }
    log
}

fn walk_validate(log: &[u8]) -> u64 {
    let mut n = 0u64;
    let mut it = Batches::new(log, 0).validate_crc(true);
    for e in &mut it {
        match e {
            Ok(e) => n += e.last_offset() as u64,
            Err(e) => panic!("{e}"),
        }
    }
    n
}

fn iterate_records(log: &[u8], limits: &DecodeLimits) -> u64 {
    let mut n = 0u64;
    for e in Batches::new(log, 0).validate_crc(true) {
        let Ok(LogEntry::V2(batch)) = e else {
            panic!("bad batch")
        };
        let records = batch.records(limits).expect("records");
        for r in records.iter() {
            let r = r.expect("record");
            n = n
                .wrapping_add(r.offset() as u64)
                .wrapping_add(r.timestamp() as u64)
                .wrapping_add(r.key().map_or(0, <[u8]>::len) as u64)
                .wrapping_add(r.value().map_or(0, <[u8]>::len) as u64);
            for h in r.headers() {
                n = n.wrapping_add(h.key.len() as u64);
            }
        }
    }
    n
}

fn benches(c: &mut Criterion) {
    let log = sample_log(100 * 1000 * 1000);
    let limits = DecodeLimits::default();
    assert!(iterate_records(&log, &limits) > 0);

    let mut g = c.benchmark_group("walk_validate");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(log.len() as u64));
    g.bench_function("baseline_crc32c_one_call", |b| {
        b.iter(|| crc32c::crc32c(black_box(&log)))
    });
    g.bench_function("seglog_walk_validate", |b| {
        b.iter(|| walk_validate(black_box(&log)))
    });
    g.bench_function("seglog_scan_log_2_threads", |b| {
        b.iter(|| {
            let s = record_format::internals::scan_log(black_box(&log), 0, 2);
            assert!(s.error().is_none());
            s.valid_prefix_end
        })
    });
    g.finish();

    let mut g = c.benchmark_group("iterate_records");
    g.sample_size(10);
    let count = {
        let mut n = 0u64;
        for e in Batches::new(&log, 0).flatten() {
            if let LogEntry::V2(b) = e {
                n += b.records_count() as u64;
            }
        }
        n
    };
    g.throughput(Throughput::Elements(count));
    let shared = Bytes::from(log.clone());
    g.bench_function("baseline_kafka_protocol_decode_all", |b| {
        b.iter(|| {
            let mut buf = shared.clone();
            let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut buf)
                .expect("kafka-protocol decodes");
            black_box(sets.len())
        })
    });
    g.bench_function("seglog_iterate_records", |b| {
        b.iter(|| iterate_records(black_box(&log), &limits))
    });
    g.finish();
}

criterion_group!(record_format_benches, benches);
criterion_main!(record_format_benches);
