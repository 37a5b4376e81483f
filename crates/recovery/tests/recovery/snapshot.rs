//! Producer snapshot files (reference §4.5): exact bytes, round trip, every corruption as a typed
//! error with its byte position, and fallback to an older snapshot with the corrupt one set
//! aside (renamed, never deleted).

use std::fs;
use std::path::Path;

use recovery::internals::{
    decode_snapshot, encode_snapshot, latest_snapshot_at_or_below, list_snapshots,
    parse_snapshot_file_name, snapshot_file_name,
};
use recovery::AppendOrigin::Replication;
use recovery::{
    read_snapshot, write_snapshot, CorruptReason, ProducerStateManager, SnapshotEntry,
    SnapshotError,
};

use crate::common::*;

fn entry_a() -> SnapshotEntry {
    SnapshotEntry {
        producer_id: 0x0102_0304_0506_0708,
        producer_epoch: 3,
        last_sequence: 41,
        last_offset: 99,
        offset_delta: 4,
        timestamp: 1_700_000_000_000,
        coordinator_epoch: 7,
        current_txn_first_offset: 95,
    }
}

fn entry_b() -> SnapshotEntry {
    SnapshotEntry {
        producer_id: 5,
        producer_epoch: -1,
        last_sequence: -1,
        last_offset: -1,
        offset_delta: 0,
        timestamp: -1,
        coordinator_epoch: -1,
        current_txn_first_offset: -1,
    }
}

/// The bytes built by hand from the layout table, independently of the encoder.
fn expected_bytes() -> Vec<u8> {
    let mut body: Vec<u8> = vec![0, 0, 0, 2]; // count = 2
    body.extend([1, 2, 3, 4, 5, 6, 7, 8]); // producerId
    body.extend([0, 3]); // epoch
    body.extend([0, 0, 0, 41]); // lastSequence
    body.extend([0, 0, 0, 0, 0, 0, 0, 99]); // lastOffset
    body.extend([0, 0, 0, 4]); // offsetDelta
    body.extend([0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00]); // timestamp 1700000000000
    body.extend([0, 0, 0, 7]); // coordinatorEpoch
    body.extend([0, 0, 0, 0, 0, 0, 0, 95]); // currentTxnFirstOffset
    body.extend([0, 0, 0, 0, 0, 0, 0, 5]);
    body.extend([0xff, 0xff]);
    body.extend([0xff; 4]);
    body.extend([0xff; 8]);
    body.extend([0, 0, 0, 0]);
    body.extend([0xff; 8]);
    body.extend([0xff; 4]);
    body.extend([0xff; 8]);
    let crc = crc32c::crc32c(&body);
    let mut out = vec![0, 1];
    out.extend(crc.to_be_bytes());
    out.extend(body);
    out
}

#[test]
fn encodes_exactly_the_kafka_layout() {
    let bytes = encode_snapshot(&[entry_a(), entry_b()]);
    assert_eq!(bytes.len(), 10 + 2 * 46);
    assert_eq!(bytes, expected_bytes());
    assert_eq!(decode_snapshot(&bytes).unwrap(), vec![entry_a(), entry_b()]);
    let empty = encode_snapshot(&[]);
    assert_eq!(empty.len(), 10);
    assert_eq!(&empty[6..], &[0, 0, 0, 0]);
    assert_eq!(&empty[2..6], &crc32c::crc32c(&[0, 0, 0, 0]).to_be_bytes());
}

#[test]
fn file_names_are_twenty_digit_offsets() {
    assert_eq!(
        snapshot_file_name(42).unwrap(),
        "00000000000000000042.snapshot"
    );
    assert!(matches!(
        snapshot_file_name(-1),
        Err(SnapshotError::InvalidOffset(-1))
    ));
    assert_eq!(
        parse_snapshot_file_name("00000000000000000042.snapshot"),
        Some(42)
    );
    for bad in [
        "00000000000000000042.snapshot.corrupt",
        "42.snapshot.tmp",
        ".snapshot",
        "-1.snapshot",
        "x.snapshot",
        "00000000000000000042.index",
    ] {
        assert_eq!(parse_snapshot_file_name(bad), None, "{bad}");
    }
}

#[test]
fn write_read_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_snapshot(dir.path(), 100, &[entry_a(), entry_b()]).unwrap();
    assert_eq!(path, dir.path().join("00000000000000000100.snapshot"));
    assert_eq!(fs::read(&path).unwrap(), expected_bytes());
    assert_eq!(read_snapshot(&path).unwrap(), vec![entry_a(), entry_b()]);
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary file left behind: {names:?}");
}

#[test]
fn psm_snapshot_round_trip_restores_last_batch_and_open_txns() {
    let dir = tempfile::tempdir().unwrap();
    let mut psm = ProducerStateManager::default();
    assert_eq!(
        psm.take_snapshot(dir.path()).unwrap(),
        None,
        "map end 0 is not past last snapshot 0"
    );
    apply_ok(
        &mut psm,
        &[
            data(1, 0, 0, 0, 3),
            data(1, 0, 3, 3, 2),
            txn(2, 1, 0, 5, 1),
            marker(3, 2, 6, true, 9),
        ],
        Replication,
    );
    let path = psm.take_snapshot(dir.path()).unwrap().unwrap();
    assert_eq!(psm.last_snapshot_offset(), 7);
    assert_eq!(
        psm.take_snapshot(dir.path()).unwrap(),
        None,
        "nothing new since"
    );
    let entries = read_snapshot(&path).unwrap();
    assert_eq!(
        entries,
        vec![
            SnapshotEntry {
                producer_id: 1,
                producer_epoch: 0,
                last_sequence: 4,
                last_offset: 4,
                offset_delta: 1,
                timestamp: 1_003,
                coordinator_epoch: -1,
                current_txn_first_offset: -1
            },
            SnapshotEntry {
                producer_id: 2,
                producer_epoch: 1,
                last_sequence: 0,
                last_offset: 5,
                offset_delta: 0,
                timestamp: 1_005,
                coordinator_epoch: -1,
                current_txn_first_offset: 5
            },
            SnapshotEntry {
                producer_id: 3,
                producer_epoch: 2,
                last_sequence: -1,
                last_offset: -1,
                offset_delta: 0,
                timestamp: 1_006,
                coordinator_epoch: 9,
                current_txn_first_offset: -1
            },
        ]
    );
    let mut loaded = ProducerStateManager::default();
    let load = loaded
        .load_from_snapshot(dir.path(), 0, i64::MAX, 0)
        .unwrap();
    assert_eq!(load.loaded.unwrap().offset, 7);
    assert!(load.set_aside.is_empty());
    assert_eq!(loaded.snapshot_entries(), entries);
    assert_eq!(
        (loaded.map_end_offset(), loaded.last_snapshot_offset()),
        (7, 7)
    );
    assert_eq!(
        loaded.last_entry(1).unwrap().batch_metadata().len(),
        1,
        "only the last batch survives"
    );
    assert!(
        loaded.last_entry(3).unwrap().is_empty(),
        "no batch metadata when last_offset < 0"
    );
    assert_eq!(loaded.first_undecided_offset(), Some(5));
}

#[test]
fn loading_skips_expired_producers() {
    let dir = tempfile::tempdir().unwrap();
    let mut psm = ProducerStateManager::default();
    apply_ok(
        &mut psm,
        &[
            data(1, 0, 0, 0, 1),
            txn(2, 0, 0, 1, 1),
            data(3, 0, 0, 5_000, 1),
        ],
        Replication,
    );
    psm.take_snapshot(dir.path()).unwrap();
    let mut loaded = ProducerStateManager::default();
    let load = loaded
        .load_from_snapshot(dir.path(), 0, i64::MAX, 1_000 + 86_400_000)
        .unwrap();
    let expired: Vec<i64> = load
        .expired_producers
        .iter()
        .map(|e| e.producer_id)
        .collect();
    assert_eq!(expired, vec![1]);
    assert_eq!(
        loaded
            .active_producers()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![2, 3]
    );
}

#[test]
fn no_snapshot_means_empty_state_at_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 1)], Replication);
    let load = psm.load_from_snapshot(dir.path(), 30, i64::MAX, 0).unwrap();
    assert!(load.loaded.is_none());
    assert!(psm.is_empty());
    assert_eq!((psm.map_end_offset(), psm.last_snapshot_offset()), (30, 30));
}

fn corrupt_at(bytes: &[u8]) -> (CorruptReason, u64) {
    decode_snapshot(bytes).unwrap_err()
}

/// Re-stamps the CRC so that a structural problem is what gets reported.
fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&bytes[6..]);
    bytes[2..6].copy_from_slice(&crc.to_be_bytes());
    bytes
}

#[test]
fn each_corruption_is_a_typed_error_with_its_position() {
    let good = encode_snapshot(&[entry_a(), entry_b()]);
    assert_eq!(
        corrupt_at(&[]),
        (CorruptReason::Truncated { need: 2, have: 0 }, 0)
    );
    assert_eq!(
        corrupt_at(&[0, 1, 0]),
        (CorruptReason::Truncated { need: 4, have: 1 }, 2)
    );

    let mut v = good.clone();
    v[1] = 2;
    assert_eq!(corrupt_at(&v), (CorruptReason::BadVersion(2), 0));
    v[0] = 0xff;
    v[1] = 0xff;
    assert_eq!(corrupt_at(&v), (CorruptReason::BadVersion(-1), 0));

    let mut v = good.clone();
    v[10 + 46 + 3] ^= 0x10;
    let computed = crc32c::crc32c(&v[6..]);
    let stored = u32::from_be_bytes(good[2..6].try_into().unwrap());
    assert_eq!(
        corrupt_at(&v),
        (CorruptReason::CrcMismatch { stored, computed }, 2)
    );

    // Header cut inside the count (CRC over what is there still matches).
    assert_eq!(
        corrupt_at(&with_crc(good[..8].to_vec())),
        (CorruptReason::Truncated { need: 4, have: 2 }, 6)
    );
    // Second entry cut short.
    let cut = with_crc(good[..good.len() - 3].to_vec());
    assert_eq!(
        corrupt_at(&cut),
        (CorruptReason::Truncated { need: 46, have: 43 }, 56)
    );
    // Count says 3, two entries present.
    let mut more = good.clone();
    more[9] = 3;
    assert_eq!(
        corrupt_at(&with_crc(more)),
        (CorruptReason::Truncated { need: 46, have: 0 }, 102)
    );
    // Count says 1, two entries present.
    let mut fewer = good.clone();
    fewer[9] = 1;
    assert_eq!(
        corrupt_at(&with_crc(fewer)),
        (
            CorruptReason::TrailingBytes {
                count: 1,
                extra: 46
            },
            56
        )
    );
    // Null array.
    let mut null = good.clone();
    null[6..10].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        corrupt_at(&with_crc(null)),
        (CorruptReason::NegativeCount(-1), 6)
    );
}

#[test]
fn read_snapshot_reports_path_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_snapshot(dir.path(), 5, &[entry_a()]).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[20] ^= 1;
    fs::write(&path, &bytes).unwrap();
    match read_snapshot(&path) {
        Err(SnapshotError::Corrupt {
            path: p,
            reason: CorruptReason::CrcMismatch { .. },
            position: 2,
        }) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        read_snapshot(&dir.path().join("missing.snapshot")),
        Err(SnapshotError::Io { .. })
    ));
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn corrupt_newest_snapshot_is_set_aside_and_the_older_one_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 10)], Replication);
    psm.take_snapshot(dir.path()).unwrap();
    apply_ok(&mut psm, &[data(2, 0, 0, 10, 10)], Replication);
    let newest = psm.take_snapshot(dir.path()).unwrap().unwrap();
    fs::write(&newest, [0u8, 1, 0, 0]).unwrap(); // truncated
                                                 // A previously set-aside file of the same name is not overwritten.
    fs::write(
        dir.path().join("00000000000000000020.snapshot.corrupt"),
        b"older",
    )
    .unwrap();

    let mut loaded = ProducerStateManager::default();
    let load = loaded
        .load_from_snapshot(dir.path(), 0, i64::MAX, 0)
        .unwrap();
    assert_eq!(load.loaded.as_ref().unwrap().offset, 10);
    assert_eq!(
        loaded
            .active_producers()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![1]
    );
    assert_eq!(loaded.map_end_offset(), 10);
    assert_eq!(load.set_aside.len(), 1);
    let s = &load.set_aside[0];
    assert_eq!(s.file.offset, 20);
    assert!(matches!(
        s.error,
        SnapshotError::Corrupt {
            reason: CorruptReason::Truncated { .. },
            position: 2,
            ..
        }
    ));
    assert_eq!(
        s.moved_to,
        dir.path().join("00000000000000000020.snapshot.corrupt.1")
    );
    assert_eq!(
        fs::read(&s.moved_to).unwrap(),
        vec![0u8, 1, 0, 0],
        "kept, not deleted"
    );
    assert_eq!(
        names(dir.path()),
        vec![
            "00000000000000000010.snapshot",
            "00000000000000000020.snapshot.corrupt",
            "00000000000000000020.snapshot.corrupt.1"
        ]
    );
    assert_eq!(list_snapshots(dir.path()).unwrap().len(), 1);
}

#[test]
fn latest_at_or_below_and_truncate_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    for o in [5, 10, 20] {
        write_snapshot(dir.path(), o, &[]).unwrap();
    }
    assert_eq!(
        latest_snapshot_at_or_below(dir.path(), 19)
            .unwrap()
            .unwrap()
            .offset,
        10
    );
    assert_eq!(
        latest_snapshot_at_or_below(dir.path(), 20)
            .unwrap()
            .unwrap()
            .offset,
        20
    );
    assert!(latest_snapshot_at_or_below(dir.path(), 4)
        .unwrap()
        .is_none());
    let mut psm = ProducerStateManager::default();
    // Kafka: delete snapshots outside (log start, log end], reload the newest remaining.
    let load = psm.truncate_and_reload(dir.path(), 5, 15, 0).unwrap();
    assert_eq!(
        load.deleted.iter().map(|f| f.offset).collect::<Vec<_>>(),
        vec![5, 20]
    );
    assert_eq!(load.loaded.unwrap().offset, 10);
    assert_eq!(psm.map_end_offset(), 10);
    assert_eq!(names(dir.path()), vec!["00000000000000000010.snapshot"]);
}

/// A storage seam that fails every write: taking a snapshot reports the I/O error and does not
/// pretend the snapshot exists.
#[test]
fn failed_snapshot_write_is_reported_and_not_recorded() {
    struct FailingWrites;
    impl recovery::SnapshotIo for FailingWrites {
        fn read(&self, p: &Path) -> std::io::Result<Vec<u8>> {
            fs::read(p)
        }
        fn write_atomically(&self, _: &Path, _: &[u8]) -> std::io::Result<()> {
            Err(std::io::Error::other("disk full"))
        }
        fn list(&self, _: &Path) -> std::io::Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn rename(&self, a: &Path, b: &Path) -> std::io::Result<()> {
            fs::rename(a, b)
        }
        fn exists(&self, p: &Path) -> bool {
            p.exists()
        }
        fn remove(&self, p: &Path) -> std::io::Result<()> {
            fs::remove_file(p)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut psm = ProducerStateManager::default();
    apply_ok(&mut psm, &[data(1, 0, 0, 0, 1)], Replication);
    let err = psm
        .take_snapshot_with(&FailingWrites, dir.path())
        .unwrap_err();
    assert!(matches!(err, SnapshotError::Io { .. }), "{err}");
    assert_eq!(psm.last_snapshot_offset(), 0);
    assert!(psm.take_snapshot(dir.path()).unwrap().is_some());
}
