//! The parallel entry points against the reference: [`scan_window`] (regions on helper threads)
//! and [`scan_file`] (read ahead in chunks, each [`ChunkChecks`] policy) apply exactly the entries
//! [`scan_sequential`] applies, in the same order, with the same header copies and markers, and
//! end the same way, on valid, corrupted and truncated logs of data, compressed and control
//! batches.

use proptest::prelude::*;

use super::*;
use crate::builder::{end_txn_marker_batch, mirror_pid_reset_batch};
use crate::{CompressionType, ControlRecordType, RecordBatchBuilder};

/// The entries a scan applied (owned: bytes, position and the scan's copies), and its end.
type Applied = (
    Vec<(Vec<u8>, u64, Option<(i64, i32, i64, i16, i32)>, bool)>,
    WindowEnd,
);

fn record(entries: &mut Applied, e: &ScannedEntry<'_>) {
    let v2 = match e {
        ScannedEntry::V2(b) => {
            // The header copy says what the bytes say.
            let view = b.batch();
            assert_eq!(
                (
                    b.base_offset(),
                    b.last_offset(),
                    b.max_timestamp(),
                    b.producer_id()
                ),
                (
                    view.base_offset(),
                    view.last_offset(),
                    view.max_timestamp(),
                    view.producer_id()
                )
            );
            assert_eq!(
                (
                    b.producer_epoch(),
                    b.base_sequence(),
                    b.records_count(),
                    b.is_control()
                ),
                (
                    view.producer_epoch(),
                    view.base_sequence(),
                    view.records_count(),
                    view.is_control()
                )
            );
            assert_eq!(b.partition_leader_epoch(), view.partition_leader_epoch());
            assert_eq!(b.is_transactional(), view.is_transactional());
            // The packed marker is the parsed one, where it fits.
            let parsed = crate::control::end_txn_marker(view);
            match b.end_txn_marker() {
                Some(m) => assert_eq!(Some(m), parsed),
                None => assert!(parsed.is_none_or(
                    |(_, m)| m.version != 0 || !(0..1 << 22).contains(&m.coordinator_epoch)
                )),
            }
            let marker = b.end_txn_marker();
            Some((
                b.base_offset(),
                b.last_offset_delta(),
                b.max_timestamp(),
                b.producer_epoch(),
                marker.map_or(-1, |(t, m)| i32::from(t.id()) << 24 | m.coordinator_epoch),
            ))
        }
        ScannedEntry::Legacy(_) => None,
    };
    entries.0.push((
        e.entry().as_bytes().to_vec(),
        e.position(),
        v2,
        e.entry().as_v2().is_some(),
    ));
}

fn sequential(data: &[u8]) -> Applied {
    let mut out = (Vec::new(), WindowEnd::Done(None));
    let mut apply = |e: &ScannedEntry<'_>| {
        record(&mut out, e);
        Ok::<(), ()>(())
    };
    let end = scan_sequential(data, 0, data.len() as u64, &mut apply).unwrap();
    out.1 = end;
    out
}

fn windowed(data: &[u8], region: usize) -> Applied {
    let mut out = (Vec::new(), WindowEnd::Done(None));
    let mut apply = |e: &ScannedEntry<'_>| {
        record(&mut out, e);
        Ok::<(), ()>(())
    };
    let end = scan_window(data, 0, data.len() as u64, region, &mut apply).unwrap();
    out.1 = end;
    out
}

fn read_ahead(data: &[u8], checks: ChunkChecks, region: usize) -> Applied {
    let mut out = (Vec::new(), WindowEnd::Done(None));
    let mut apply = |e: &ScannedEntry<'_>| {
        record(&mut out, e);
        Ok::<(), ()>(())
    };
    let read = |at: u64, buf: &mut [u8]| -> Result<(), ()> {
        let at = usize::try_from(at).map_err(|_| ())?;
        buf.copy_from_slice(data.get(at..at + buf.len()).ok_or(())?);
        Ok(())
    };
    let cut = scan_file(
        data.len() as u64,
        &read,
        &|n| vec![0u8; n],
        checks,
        region,
        &mut apply,
    )
    .unwrap();
    out.1 = WindowEnd::Done(cut);
    out
}

/// Every parallel path agrees with the reference on `data`.
fn assert_agree(data: &[u8], region: usize) {
    let reference = sequential(data);
    assert_eq!(
        windowed(data, region),
        reference,
        "scan_window, {region}-byte regions"
    );
    for checks in [
        ChunkChecks::Balanced,
        ChunkChecks::Reader,
        ChunkChecks::Scanner,
    ] {
        assert_eq!(
            read_ahead(data, checks, region),
            reference,
            "scan_file, {checks:?}"
        );
    }
}

const CODECS: [CompressionType; 5] = [
    CompressionType::None,
    CompressionType::Gzip,
    CompressionType::Snappy,
    CompressionType::Lz4,
    CompressionType::Zstd,
];

/// A log of `kinds.len()` batches: kind % 8 picks a data batch of a codec, a transactional one, a
/// COMMIT or ABORT marker (epochs inside and outside what the marker packs) or a barrier.
fn log_of(kinds: &[(u8, u16)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut next = 0i64;
    for &(kind, size) in kinds {
        let bytes = match kind % 8 {
            k @ 0..=4 => {
                let mut b = RecordBatchBuilder::new(next)
                    .compression(CODECS[usize::from(k)])
                    .producer(3, 1, i32::try_from(next).unwrap_or(0));
                for i in 0..1 + size % 4 {
                    let value = vec![(size % 251) as u8; usize::from(size)];
                    b.append(1_000 + i64::from(i), None, Some(&value), &[])
                        .unwrap();
                }
                b.build()
            }
            5 => {
                let mut b = RecordBatchBuilder::new(next)
                    .producer(9, 2, 0)
                    .transactional(true);
                b.append(2_000, Some(b"k"), Some(&vec![7u8; usize::from(size)]), &[])
                    .unwrap();
                b.build()
            }
            6 => {
                let t = if size % 2 == 0 {
                    ControlRecordType::Commit
                } else {
                    ControlRecordType::Abort
                };
                let epoch = if size % 3 == 0 {
                    (1 << 22) + i32::from(size)
                } else {
                    i32::from(size)
                };
                end_txn_marker_batch(next, 3_000, 0, 9, 2, t, epoch)
            }
            _ => mirror_pid_reset_batch(next, 4_000, 0, "source"),
        };
        next = RecordBatch::new(&bytes, 0).unwrap().next_offset();
        out.extend(bytes);
    }
    out
}

use crate::RecordBatch;

#[test]
fn valid_logs_of_every_kind_of_batch_scan_alike() {
    let kinds: Vec<(u8, u16)> = (0..200u16).map(|i| ((i % 8) as u8, i * 7 % 900)).collect();
    let log = log_of(&kinds);
    for region in [64, 300, 4096, DEFAULT_REGION_BYTES] {
        assert_agree(&log, region);
    }
    let reference = sequential(&log);
    assert_eq!(reference.0.len(), 200);
    assert_eq!(reference.1, WindowEnd::Done(None));
}

/// Longer than several read chunks, so that [`scan_file`] reads ahead on its thread, with batches
/// across chunk boundaries, and cut or corrupted at and around those boundaries.
#[test]
fn logs_longer_than_the_read_chunks_scan_alike_whole_cut_and_corrupted() {
    let kinds: Vec<(u8, u16)> = (0..12_000u16)
        .map(|i| ((i % 8) as u8, (200 + u32::from(i) * 13 % 1_700) as u16))
        .collect();
    let log = log_of(&kinds);
    assert!(log.len() > 3 * READ_CHUNK_BYTES);
    assert_agree(&log, DEFAULT_REGION_BYTES);
    for at in [
        READ_CHUNK_BYTES - 30,
        READ_CHUNK_BYTES + 5,
        2 * READ_CHUNK_BYTES + 61,
    ] {
        let mut bad = log.clone();
        bad[at] ^= 0x41;
        assert_agree(&bad, DEFAULT_REGION_BYTES);
        assert_agree(&log[..at], DEFAULT_REGION_BYTES);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random logs, one byte flipped somewhere (or not), cut somewhere (or not), scanned in
    /// regions of 16 bytes up to a few batches.
    #[test]
    fn random_logs_flipped_and_cut_scan_alike(
        kinds in prop::collection::vec((0u8..8, 0u16..600), 0..40),
        flip in prop::option::of((any::<prop::sample::Index>(), 1u8..=255)),
        cut in prop::option::of(any::<prop::sample::Index>()),
        region in 16usize..2_000,
    ) {
        let mut log = log_of(&kinds);
        if let (Some((at, mask)), false) = (flip, log.is_empty()) {
            let at = at.index(log.len());
            log[at] ^= mask;
        }
        if let (Some(cut), false) = (cut, log.is_empty()) {
            log.truncate(cut.index(log.len()));
        }
        assert_agree(&log, region);
    }
}

/// Every batch of Kafka's transactional.log, as the scan hands it over, carries the
/// end-transaction marker Kafka wrote into it (the COMMIT of coordinator epoch 11 at 346 and the
/// ABORT of epoch 12 at 424), and no other batch claims one.
#[test]
fn views_of_kafka_batches_carry_their_end_txn_markers() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/kafka-clients/transactional.log"
    );
    let bytes = std::fs::read(path).expect("read");
    let mut markers = Vec::new();
    let mut apply = |entry: &ScannedEntry<'_>| {
        let ScannedEntry::V2(batch) = entry else {
            panic!("v2 only");
        };
        if let Some((t, marker)) = batch.end_txn_marker() {
            markers.push((batch.position(), t, marker.coordinator_epoch));
        } else {
            assert!(!batch.is_control(), "control batch at {}", batch.position());
        }
        Ok::<(), ()>(())
    };
    let end = scan_window(&bytes, 0, bytes.len() as u64, 64, &mut apply).unwrap();
    assert_eq!(end, WindowEnd::Done(None), "Kafka's file is valid");
    assert_eq!(
        markers,
        vec![
            (346, ControlRecordType::Commit, 11),
            (424, ControlRecordType::Abort, 12),
        ]
    );
}
