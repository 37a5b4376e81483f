//! Integration tests for segment-store on real files (temp dirs) and on `SimulatedFs`.
//!
//! One test binary with a module per concern. The byte-layout tests compare against entries
//! computed by hand from Kafka's formats (big-endian, 8-byte offset-index entries, 12-byte
//! time-index entries, 34-byte aborted-transaction entries, text checkpoints).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use segment_store::internals::{segment_file_path, FileKind};
use segment_store::{DirLock, SegmentError};

mod log;

fn temp_lock() -> (tempfile::TempDir, DirLock) {
    let dir = tempfile::tempdir().unwrap();
    let lock = DirLock::acquire(dir.path()).unwrap();
    (dir, lock)
}

fn be32(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

mod offset_index {
    use super::*;
    use proptest::prelude::*;
    use segment_store::internals::FilePosition;
    use segment_store::{IndexCorruption, OffsetIndex, OffsetPosition};

    fn path(dir: &Path, base: i64) -> PathBuf {
        segment_file_path(dir, base, FileKind::Index)
    }

    fn op(offset: i64, position: u32) -> OffsetPosition {
        OffsetPosition {
            offset,
            position: FilePosition(position),
        }
    }

    #[test]
    fn new_file_is_preallocated_and_close_trims_to_kafka_bytes() {
        let (dir, lock) = temp_lock();
        let p = path(dir.path(), 1000);
        let mut idx = OffsetIndex::open(&lock, &p, 1000, 100, true).unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            96,
            "round_down(100, 8)"
        );
        assert_eq!((idx.entries(), idx.max_entries()), (0, 12));
        assert_eq!(idx.last_entry(), op(1000, 0));
        idx.append(1001, FilePosition(0)).unwrap();
        idx.append(1005, FilePosition(4096)).unwrap();
        idx.append(1010, FilePosition(8200)).unwrap();
        idx.flush().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 96);
        idx.close().unwrap();
        let expected: Vec<u8> = [1, 0, 5, 4096, 10, 8200]
            .into_iter()
            .flat_map(be32)
            .collect();
        assert_eq!(std::fs::read(&p).unwrap(), expected);

        // Reopen: entries = len / 8, last offset from the last entry.
        let idx = OffsetIndex::open(&lock, &p, 1000, 100, true).unwrap();
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.last_offset(), 1010);
        assert_eq!(idx.entry(1), Some(op(1005, 4096)));
        assert_eq!(idx.entry(3), None);
        assert!(idx.is_full(), "a trimmed index has no free slot");
        idx.sanity_check().unwrap();
    }

    /// Recovery rebuilds an index with `append_in_bulk`: the file ends up with exactly the bytes
    /// of the same appends made one by one (large enough to be written through the file handle
    /// rather than the map, in several writes), entries appended in the run are readable inside
    /// it, and a failing append ends the run with the entries before it written.
    #[test]
    fn bulk_appends_write_what_single_appends_write() {
        let (dir, lock) = temp_lock();
        // More than one bulk write's worth (256 KiB): written in several writes.
        let n = 40_000u32;
        let size = 8 * 50_000;
        let one_by_one = path(dir.path(), 0);
        let mut a = OffsetIndex::open(&lock, &one_by_one, 0, size, true).unwrap();
        for i in 0..n {
            a.append(i64::from(i) * 3 + 1, FilePosition(i * 100))
                .unwrap();
        }
        let bulk_dir = tempfile::tempdir().unwrap();
        let bulk_lock = DirLock::acquire(bulk_dir.path()).unwrap();
        let bulk = path(bulk_dir.path(), 0);
        let mut b = OffsetIndex::open(&bulk_lock, &bulk, 0, size, true).unwrap();
        b.append(1, FilePosition(0)).unwrap();
        b.append_in_bulk(|idx| {
            for i in 1..n {
                idx.append(i64::from(i) * 3 + 1, FilePosition(i * 100))?;
            }
            // Entries of the run are visible before it is written.
            assert_eq!(idx.lookup(31), op(31, 1000));
            assert_eq!(
                idx.last_entry(),
                op(i64::from(n - 1) * 3 + 1, (n - 1) * 100)
            );
            Ok(())
        })
        .unwrap();
        assert_eq!(b.entries(), n as usize);
        a.close().unwrap();
        b.close().unwrap();
        let bytes = std::fs::read(&bulk).unwrap();
        assert_eq!(bytes.len(), 8 * n as usize);
        assert_eq!(bytes, std::fs::read(&one_by_one).unwrap());

        // An offset going backwards ends the run: what came before it is written and counted.
        let p = path(dir.path(), 7);
        let mut c = OffsetIndex::open(&lock, &p, 7, size, true).unwrap();
        let r = c.append_in_bulk(|idx| {
            for i in 0..10_000u32 {
                idx.append(8 + i64::from(i), FilePosition(i * 10))?;
            }
            idx.append(8, FilePosition(200_000))
        });
        assert!(matches!(
            r,
            Err(SegmentError::InvalidOffset { offset: 8, .. })
        ));
        assert_eq!(c.entries(), 10_000);
        c.close().unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(bytes.len(), 80_000);
        assert_eq!(
            bytes[79_992..],
            [be32(10_007 - 7), be32(99_990)].concat()[..]
        );
    }

    #[test]
    fn append_rules() {
        let (dir, lock) = temp_lock();
        let mut idx = OffsetIndex::open(&lock, &path(dir.path(), 50), 50, 16, true).unwrap();
        assert!(matches!(
            idx.append(49, FilePosition(0)),
            Err(SegmentError::OffsetOverflow {
                offset: 49,
                base_offset: 50,
                ..
            })
        ));
        assert!(matches!(
            idx.append(50 + i64::from(i32::MAX) + 1, FilePosition(0)),
            Err(SegmentError::OffsetOverflow { .. })
        ));
        assert!(matches!(
            idx.append(50, FilePosition(u32::MAX)),
            Err(SegmentError::PositionOverflow { .. })
        ));
        idx.append(50, FilePosition(0)).unwrap();
        for bad in [50, 49] {
            assert!(matches!(
                idx.append(bad, FilePosition(1)),
                Err(SegmentError::InvalidOffset {
                    last_offset: 50,
                    ..
                })
            ));
        }
        assert!(idx.can_append_offset(50 + i64::from(i32::MAX)));
        idx.append(50 + i64::from(i32::MAX), FilePosition(9))
            .unwrap();
        assert!(idx.is_full());
        assert!(matches!(
            idx.append(i64::MAX, FilePosition(10)),
            Err(SegmentError::IndexFull { entries: 2, .. })
        ));
        // reset: empty, back to max size.
        idx.trim_to_valid_size().unwrap();
        idx.reset().unwrap();
        assert_eq!((idx.entries(), idx.length()), (0, 16));
    }

    #[test]
    fn invalid_sizes() {
        let (dir, lock) = temp_lock();
        assert!(matches!(
            OffsetIndex::open(&lock, &path(dir.path(), 0), 0, 7, true),
            Err(SegmentError::InvalidIndexSize { .. })
        ));
        let r = OffsetIndex::open(&lock, &path(dir.path(), 0), 0, 80, false);
        assert_eq!(
            r.err().and_then(|e| e.io_kind()),
            Some(std::io::ErrorKind::NotFound)
        );
        let mut idx = OffsetIndex::open(&lock, &path(dir.path(), 0), 0, 80, true).unwrap();
        idx.append(3, FilePosition(0)).unwrap();
        idx.append(4, FilePosition(10)).unwrap();
        assert!(matches!(
            idx.resize(15),
            Err(SegmentError::InvalidIndexSize { minimum: 16, .. })
        ));
        assert!(idx.resize(16).unwrap());
        assert!(!idx.resize(23).unwrap(), "rounds down to the same size");
        assert!(idx.resize(40).unwrap());
        assert_eq!(idx.max_entries(), 5);
        assert_eq!(idx.entry(1), Some(op(4, 10)));
    }

    #[test]
    fn the_same_file_cannot_be_mapped_twice() {
        let (dir, lock) = temp_lock();
        let p = path(dir.path(), 0);
        let _a = OffsetIndex::open(&lock, &p, 0, 80, true).unwrap();
        assert!(matches!(
            OffsetIndex::open(&lock, &p, 0, 80, true),
            Err(SegmentError::Locked { .. })
        ));
    }

    fn build(lock: &DirLock, dir: &Path, base: i64, offsets: &[i64]) -> OffsetIndex {
        let p = path(dir, base);
        remove_if_exists(&p);
        let mut idx = OffsetIndex::open(lock, &p, base, 1 << 20, true).unwrap();
        for (i, &o) in offsets.iter().enumerate() {
            idx.append(o, FilePosition(i as u32 * 100)).unwrap();
        }
        idx
    }

    #[test]
    fn lookup_basics() {
        let (dir, lock) = temp_lock();
        let idx = build(&lock, dir.path(), 10, &[12, 15, 20]);
        assert_eq!(idx.lookup(9), op(10, 0));
        assert_eq!(idx.lookup(11), op(10, 0));
        assert_eq!(idx.lookup(12), op(12, 0));
        assert_eq!(idx.lookup(14), op(12, 0));
        assert_eq!(idx.lookup(15), op(15, 100));
        assert_eq!(idx.lookup(1000), op(20, 200));
        // fetch_upper_bound_offset: first entry with position >= 0 + 150.
        assert_eq!(
            idx.fetch_upper_bound_offset(op(12, 0), 150),
            Some(op(20, 200))
        );
        assert_eq!(
            idx.fetch_upper_bound_offset(op(12, 0), 50),
            Some(op(15, 100))
        );
        assert_eq!(idx.fetch_upper_bound_offset(op(12, 0), 250), None);
        // Kafka quirk kept on purpose: when the whole index is the warm section and the target
        // equals the first entry's key, the search range collapses to slot 0 without comparing it
        // and SMALLEST_UPPER_BOUND answers slot 1.
        assert_eq!(
            idx.fetch_upper_bound_offset(op(12, 0), 0),
            Some(op(15, 100))
        );
    }

    #[test]
    fn lookup_every_offset_in_an_index_larger_than_the_warm_section() {
        let (dir, lock) = temp_lock();
        let offsets: Vec<i64> = (0..3000).map(|i| 2 * i + 1).collect();
        let idx = build(&lock, dir.path(), 0, &offsets);
        for t in 0..6002 {
            let (offset, position) = reference_lookup(0, &offsets, t);
            assert_eq!(idx.lookup(t), op(offset, position), "target {t}");
        }
    }

    #[test]
    fn truncate_to_every_entry() {
        let (dir, lock) = temp_lock();
        let offsets: Vec<i64> = (0..20).map(|i| 100 + 3 * i + 1).collect();
        for (k, &o) in offsets.iter().enumerate() {
            // Exactly an entry's offset: that entry goes too.
            let mut idx = build(&lock, dir.path(), 100, &offsets);
            idx.truncate_to(o);
            assert_eq!(idx.entries(), k, "truncate_to({o})");
            assert_eq!(idx.last_offset(), if k == 0 { 100 } else { offsets[k - 1] });
            // Between entries: the entry below stays.
            let mut idx = build(&lock, dir.path(), 100, &offsets);
            idx.truncate_to(o + 1);
            assert_eq!(idx.entries(), k + 1, "truncate_to({})", o + 1);
            // Appends continue after truncation.
            idx.append(o + 2, FilePosition(1)).unwrap();
        }
        let mut idx = build(&lock, dir.path(), 100, &offsets);
        idx.truncate_to(0);
        assert_eq!(idx.entries(), 0);
        let mut idx = build(&lock, dir.path(), 100, &offsets);
        idx.truncate_to(i64::MAX);
        assert_eq!(idx.entries(), offsets.len());
        idx.truncate();
        assert_eq!((idx.entries(), idx.last_offset()), (0, 100));
    }

    #[test]
    fn corrupt_files_fail_sanity_check() {
        let (dir, lock) = temp_lock();
        // Length not a multiple of 8: entries = floor(len / 8), sanity check fails.
        let p = path(dir.path(), 0);
        let mut bytes: Vec<u8> = [1, 0, 2, 10].into_iter().flat_map(be32).collect();
        bytes.extend([0, 0, 0, 3]);
        std::fs::write(&p, &bytes).unwrap();
        let idx = OffsetIndex::open(&lock, &p, 0, 1024, true).unwrap();
        assert_eq!(idx.entries(), 2);
        let e = idx.sanity_check().unwrap_err();
        assert!(
            matches!(
                &e,
                SegmentError::CorruptIndex {
                    reason: IndexCorruption::LengthNotMultiple {
                        len: 20,
                        entry_size: 8
                    },
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("00000000000000000000.index"), "{e}");
        assert!(
            e.to_string().contains("not a multiple of the entry size 8"),
            "{e}"
        );
        drop(idx);

        // Last relative offset negative: last offset < base offset.
        let p = path(dir.path(), 500);
        let bytes: Vec<u8> = [1, 0, -1, 10].into_iter().flat_map(be32).collect();
        std::fs::write(&p, &bytes).unwrap();
        let idx = OffsetIndex::open(&lock, &p, 500, 1024, false).unwrap();
        assert!(matches!(
            idx.sanity_check(),
            Err(SegmentError::CorruptIndex {
                reason: IndexCorruption::LastOffsetBelowBase {
                    last_offset: 499,
                    base_offset: 500
                },
                ..
            })
        ));

        // An empty existing file is fine and holds no entries.
        let p = path(dir.path(), 900);
        std::fs::write(&p, []).unwrap();
        let idx = OffsetIndex::open(&lock, &p, 900, 1024, true).unwrap();
        assert_eq!((idx.entries(), idx.max_entries()), (0, 0));
        assert!(idx.is_full());
        idx.sanity_check().unwrap();
    }

    /// A plain binary search: the largest entry with offset <= target.
    fn reference_lookup(base: i64, entries: &[i64], target: i64) -> (i64, u32) {
        let n = entries.partition_point(|&o| o <= target);
        if n == 0 {
            (base, 0)
        } else {
            (entries[n - 1], (n as u32 - 1) * 100)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The warm-section search agrees with a plain binary search, including indexes larger
        /// than the warm section (1024 entries) and targets before, between, on and after
        /// entries.
        #[test]
        fn warm_section_lookup_matches_binary_search(
            gaps in proptest::collection::vec(1i64..50, 0..2600),
            targets in proptest::collection::vec(0i64..140_000, 1..64),
        ) {
            let (dir, lock) = temp_lock();
            let base = 7i64;
            let mut offsets = Vec::with_capacity(gaps.len());
            let mut o = base;
            for g in &gaps {
                o += g;
                offsets.push(o);
            }
            let idx = build(&lock, dir.path(), base, &offsets);
            let mut all_targets = targets.clone();
            all_targets.extend(offsets.iter().step_by(97).copied());
            all_targets.push(base - 1);
            for t in all_targets {
                let got = idx.lookup(t);
                let (offset, position) = reference_lookup(base, &offsets, t);
                prop_assert_eq!(got, op(offset, position), "target {}", t);
            }
        }
    }
}

mod time_index {
    use super::*;
    use proptest::prelude::*;
    use segment_store::{IndexCorruption, TimeIndex, TimestampOffset};

    fn path(dir: &Path, base: i64) -> PathBuf {
        segment_file_path(dir, base, FileKind::TimeIndex)
    }

    fn to(timestamp: i64, offset: i64) -> TimestampOffset {
        TimestampOffset { timestamp, offset }
    }

    fn entry_bytes(ts: i64, rel: i32) -> Vec<u8> {
        let mut v = ts.to_be_bytes().to_vec();
        v.extend(rel.to_be_bytes());
        v
    }

    #[test]
    fn append_rules_and_bytes() {
        let (dir, lock) = temp_lock();
        let p = path(dir.path(), 100);
        let mut idx = TimeIndex::open(&lock, &p, 100, 12 * 10 + 5, true).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 120);
        assert_eq!(idx.last_entry(), to(-1, 100));
        // NO_TIMESTAMP (-1) is never appended: it is not larger than the empty index's -1.
        assert!(!idx.maybe_append(-1, 100, false).unwrap());
        assert!(idx.maybe_append(1000, 100, false).unwrap());
        assert!(
            !idx.maybe_append(1000, 105, false).unwrap(),
            "equal timestamp skipped"
        );
        assert!(idx.maybe_append(2000, 110, false).unwrap());
        assert!(matches!(
            idx.maybe_append(1500, 120, false),
            Err(SegmentError::TimestampDecreasing {
                timestamp: 1500,
                last_timestamp: 2000,
                ..
            })
        ));
        assert!(matches!(
            idx.maybe_append(3000, 105, false),
            Err(SegmentError::InvalidOffset {
                offset: 105,
                last_offset: 110,
                ..
            })
        ));
        // Same offset as the last entry with a larger timestamp is allowed.
        assert!(idx.maybe_append(3000, 110, false).unwrap());
        assert!(matches!(
            idx.maybe_append(4000, 99, false),
            Err(SegmentError::InvalidOffset { .. })
        ));
        idx.close().unwrap();
        let mut expected = entry_bytes(1000, 0);
        expected.extend(entry_bytes(2000, 10));
        expected.extend(entry_bytes(3000, 10));
        assert_eq!(std::fs::read(&p).unwrap(), expected);

        let idx = TimeIndex::open(&lock, &p, 100, 120, true).unwrap();
        assert_eq!(idx.entries(), 3);
        assert_eq!(idx.last_entry(), to(3000, 110));
        idx.sanity_check().unwrap();
    }

    #[test]
    fn last_slot_is_reserved_for_roll() {
        let (dir, lock) = temp_lock();
        let mut idx = TimeIndex::open(&lock, &path(dir.path(), 0), 0, 36, true).unwrap();
        assert_eq!(idx.max_entries(), 3);
        idx.maybe_append(1, 1, false).unwrap();
        idx.maybe_append(2, 2, false).unwrap();
        assert!(idx.is_full());
        assert!(matches!(
            idx.maybe_append(3, 3, false),
            Err(SegmentError::IndexFull { entries: 2, .. })
        ));
        assert!(idx.maybe_append(3, 3, true).unwrap());
        assert!(matches!(
            idx.maybe_append(4, 4, true),
            Err(SegmentError::IndexFull { entries: 3, .. })
        ));
    }

    #[test]
    fn lookup_and_truncate_to_every_entry() {
        let (dir, lock) = temp_lock();
        let entries: Vec<(i64, i64)> = (0..30).map(|i| (1000 + 10 * i, 500 + 2 * i)).collect();
        let build = |lock: &DirLock| {
            let p = path(dir.path(), 500);
            remove_if_exists(&p);
            let mut idx = TimeIndex::open(lock, &p, 500, 4096, true).unwrap();
            for &(ts, o) in &entries {
                assert!(idx.maybe_append(ts, o, false).unwrap());
            }
            idx
        };
        let idx = build(&lock);
        assert_eq!(idx.lookup(999), to(-1, 500));
        assert_eq!(idx.lookup(1000), to(1000, 500));
        assert_eq!(idx.lookup(1015), to(1010, 502));
        assert_eq!(idx.lookup(i64::MAX), to(1290, 558));
        drop(idx);
        for (k, &(_, o)) in entries.iter().enumerate() {
            let mut idx = build(&lock);
            idx.truncate_to(o);
            assert_eq!(idx.entries(), k);
            let expect_last = if k == 0 {
                to(-1, 500)
            } else {
                to(entries[k - 1].0, entries[k - 1].1)
            };
            assert_eq!(idx.last_entry(), expect_last);
            drop(idx);
            let mut idx = build(&lock);
            idx.truncate_to(o + 1);
            assert_eq!(idx.entries(), k + 1);
        }
        let mut idx = build(&lock);
        idx.reset().unwrap();
        assert_eq!(
            (idx.entries(), idx.length(), idx.last_entry()),
            (0, 4092, to(-1, 500))
        );
    }

    #[test]
    fn corrupt_files_fail_sanity_check() {
        let (dir, lock) = temp_lock();
        let p = path(dir.path(), 0);
        let mut bytes = entry_bytes(2000, 1);
        bytes.extend(entry_bytes(1000, 2));
        std::fs::write(&p, &bytes).unwrap();
        let idx = TimeIndex::open(&lock, &p, 0, 1200, true).unwrap();
        assert!(matches!(
            idx.sanity_check(),
            Err(SegmentError::CorruptIndex {
                reason: IndexCorruption::LastTimestampBelowFirst {
                    first: 2000,
                    last: 1000
                },
                ..
            })
        ));
        drop(idx);

        let p = path(dir.path(), 10);
        let mut bytes = entry_bytes(1, 0);
        bytes.extend(entry_bytes(2, -3));
        std::fs::write(&p, &bytes).unwrap();
        let idx = TimeIndex::open(&lock, &p, 10, 1200, true).unwrap();
        assert!(matches!(
            idx.sanity_check(),
            Err(SegmentError::CorruptIndex {
                reason: IndexCorruption::LastOffsetBelowBase {
                    last_offset: 7,
                    base_offset: 10
                },
                ..
            })
        ));
        drop(idx);

        let p = path(dir.path(), 20);
        let mut bytes = entry_bytes(1, 0);
        bytes.extend([0u8; 5]);
        std::fs::write(&p, &bytes).unwrap();
        let idx = TimeIndex::open(&lock, &p, 20, 1200, true).unwrap();
        assert_eq!(idx.entries(), 1);
        assert!(matches!(
            idx.sanity_check(),
            Err(SegmentError::CorruptIndex {
                reason: IndexCorruption::LengthNotMultiple {
                    len: 17,
                    entry_size: 12
                },
                ..
            })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Warm-section timestamp lookups (warm section: 682 entries) agree with a plain
        /// binary search.
        #[test]
        fn lookup_matches_binary_search(
            gaps in proptest::collection::vec(1i64..40, 0..1800),
            targets in proptest::collection::vec(0i64..80_000, 1..64),
        ) {
            let (dir, lock) = temp_lock();
            let p = path(dir.path(), 0);
            let mut idx = TimeIndex::open(&lock, &p, 0, 12 * 4096, true).unwrap();
            let mut stamps = Vec::new();
            let mut ts = 0i64;
            for (i, g) in gaps.iter().enumerate() {
                ts += g;
                idx.maybe_append(ts, i as i64, false).unwrap();
                stamps.push(ts);
            }
            for t in targets {
                let n = stamps.partition_point(|&s| s <= t);
                let expected = if n == 0 { to(-1, 0) } else { to(stamps[n - 1], n as i64 - 1) };
                prop_assert_eq!(idx.lookup(t), expected);
            }
        }
    }
}

mod txn_index {
    use super::*;
    use segment_store::{AbortedTxn, IndexCorruption, TransactionIndex};
    use segment_store::{OpenMode, StdFs, Storage};
    use testkit::{SimulatedFs, TornWrite};

    fn std_storage() -> Arc<dyn Storage> {
        Arc::new(StdFs)
    }

    #[test]
    fn entry_bytes_and_lazy_creation() {
        let dir = tempfile::tempdir().unwrap();
        let p = segment_file_path(dir.path(), 0, FileKind::TxnIndex);
        let mut idx = TransactionIndex::open(std_storage(), &p, 0).unwrap();
        assert!(!p.exists(), "created lazily");
        assert!(idx.all_aborted_txns().unwrap().is_empty());
        assert!(idx.is_empty().unwrap());
        let txn = AbortedTxn::new(5, 10, 20, 15);
        idx.append(&txn).unwrap();
        idx.flush().unwrap();
        let mut expected = vec![0u8, 0];
        for v in [5i64, 10, 20, 15] {
            expected.extend(v.to_be_bytes());
        }
        assert_eq!(expected.len(), 34);
        assert_eq!(std::fs::read(&p).unwrap(), expected);
        assert_eq!(txn.to_bytes().to_vec(), expected);
        assert!(matches!(
            idx.append(&AbortedTxn::new(6, 11, 19, 20)),
            Err(SegmentError::InvalidOffset {
                offset: 19,
                last_offset: 20,
                ..
            })
        ));
        // Equal last offsets are accepted: one MIRROR_PID_RESET barrier aborts every open
        // transaction at its own offset.
        idx.append(&AbortedTxn::new(6, 11, 20, 15)).unwrap();
        drop(idx);
        // Reopen: the non-decreasing rule still holds.
        let mut idx = TransactionIndex::open(std_storage(), &p, 0).unwrap();
        assert!(matches!(
            idx.append(&AbortedTxn::new(6, 11, 19, 20)),
            Err(SegmentError::InvalidOffset { .. })
        ));
        idx.append(&AbortedTxn::new(6, 11, 21, 20)).unwrap();
        assert_eq!(idx.all_aborted_txns().unwrap().len(), 3);
    }

    /// Recovery writes a segment's aborted transactions with one `append_all`: the file holds
    /// exactly the bytes of the same entries appended one by one, and a run with an entry out of
    /// order writes nothing at all.
    #[test]
    fn append_all_writes_what_single_appends_write() {
        let dir = tempfile::tempdir().unwrap();
        let txns: Vec<AbortedTxn> = (0..50)
            .map(|i| AbortedTxn::new(i % 7, i * 10, i * 10 + 5 + i % 2, i * 10 + 3))
            .collect();
        let one = dir.path().join("one.txnindex");
        let mut idx = TransactionIndex::open(std_storage(), &one, 0).unwrap();
        for t in &txns {
            idx.append(t).unwrap();
        }
        let all = dir.path().join("all.txnindex");
        let mut batch = TransactionIndex::open(std_storage(), &all, 0).unwrap();
        batch.append_all(&txns[..20]).unwrap();
        batch.append_all(&[]).unwrap();
        batch.append_all(&txns[20..]).unwrap();
        assert_eq!(std::fs::read(&all).unwrap(), std::fs::read(&one).unwrap());
        assert_eq!(batch.all_aborted_txns().unwrap().len(), 50);

        // Behind the last entry written, or out of order inside the run: refused, nothing written.
        let before = std::fs::read(&all).unwrap();
        let late = AbortedTxn::new(1, 1000, 1000, 1000);
        for run in [
            vec![AbortedTxn::new(1, 0, 3, 1)],
            vec![late, AbortedTxn::new(1, 0, 999, 1)],
        ] {
            assert!(matches!(
                batch.append_all(&run),
                Err(SegmentError::InvalidOffset { .. })
            ));
            assert_eq!(std::fs::read(&all).unwrap(), before);
        }
        batch.append_all(&[late]).unwrap();
        assert_eq!(batch.all_aborted_txns().unwrap().len(), 51);
    }

    fn three(storage: Arc<dyn Storage>, p: &Path) -> TransactionIndex {
        let mut idx = TransactionIndex::open(storage, p, 0).unwrap();
        idx.append(&AbortedTxn::new(1, 0, 10, 11)).unwrap();
        idx.append(&AbortedTxn::new(2, 5, 20, 21)).unwrap();
        idx.append(&AbortedTxn::new(3, 25, 30, 40)).unwrap();
        idx
    }

    #[test]
    fn collect_rules() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.txnindex");
        let idx = three(std_storage(), &p);
        let pids = |r: &segment_store::TxnIndexSearchResult| {
            r.aborted_transactions
                .iter()
                .map(|t| t.producer_id)
                .collect::<Vec<_>>()
        };
        let r = idx.collect_aborted_txns(11, 26).unwrap();
        assert_eq!((pids(&r), r.is_complete), (vec![2, 3], true));
        let r = idx.collect_aborted_txns(0, 100).unwrap();
        assert_eq!((pids(&r), r.is_complete), (vec![1, 2, 3], false));
        // Stops at the first entry whose LSO reaches the upper bound.
        let r = idx.collect_aborted_txns(0, 5).unwrap();
        assert_eq!((pids(&r), r.is_complete), (vec![1], true));
        // first_offset < upper bound is strict; last_offset >= fetch offset is not.
        let r = idx.collect_aborted_txns(30, 25).unwrap();
        assert_eq!((pids(&r), r.is_complete), (vec![], true));
        let r = idx.collect_aborted_txns(30, 26).unwrap();
        assert_eq!((pids(&r), r.is_complete), (vec![3], true));
    }

    #[test]
    fn truncate_reset_partial_tail_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.txnindex");
        let mut idx = three(std_storage(), &p);
        idx.truncate_to(20).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 34);
        idx.append(&AbortedTxn::new(9, 12, 15, 15)).unwrap();
        idx.truncate_to(1000).unwrap();
        assert_eq!(idx.all_aborted_txns().unwrap().len(), 2);
        idx.reset().unwrap();
        assert!(idx.is_empty().unwrap());
        idx.append(&AbortedTxn::new(9, 0, 1, 1)).unwrap();
        drop(idx);

        // A trailing partial entry is ignored.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend(AbortedTxn::new(10, 2, 3, 3).to_bytes());
        bytes.extend([0u8; 10]);
        std::fs::write(&p, &bytes).unwrap();
        let idx = TransactionIndex::open(std_storage(), &p, 0).unwrap();
        assert_eq!(idx.all_aborted_txns().unwrap().len(), 2);
        idx.sanity_check().unwrap();
        // Entries below the segment's start offset are corruption.
        let idx = TransactionIndex::open(std_storage(), &p, 2).unwrap();
        assert!(matches!(
            idx.sanity_check(),
            Err(SegmentError::CorruptIndex {
                reason: IndexCorruption::TxnBelowStart {
                    last_offset: 1,
                    start_offset: 2
                },
                ..
            })
        ));
        // A version above 0 is corruption.
        bytes[34 + 1] = 1;
        std::fs::write(&p, &bytes).unwrap();
        let idx = TransactionIndex::open(std_storage(), &p, 0).unwrap();
        assert!(matches!(
            idx.all_aborted_txns(),
            Err(SegmentError::CorruptIndex {
                reason: IndexCorruption::UnsupportedTxnVersion {
                    version: 1,
                    position: 34
                },
                ..
            })
        ));
    }

    #[test]
    fn unflushed_entries_are_lost_in_a_crash() {
        let fs = SimulatedFs::new();
        let dir = PathBuf::from("/logs/t-0");
        fs.create_durable_dir_all(&dir);
        let storage: Arc<dyn Storage> = Arc::new(fs.clone());
        let p = dir.join("00000000000000000000.txnindex");
        let mut idx = TransactionIndex::open(storage.clone(), &p, 0).unwrap();
        idx.append(&AbortedTxn::new(1, 0, 10, 11)).unwrap();
        idx.flush().unwrap();
        storage.sync_dir(&dir).unwrap();
        idx.append(&AbortedTxn::new(2, 5, 20, 21)).unwrap();
        // Torn second entry: the partial tail is ignored on reopen.
        let img = fs.crash(TornWrite::Prefix(20));
        assert_eq!(img[&p].len(), 34 + 20);
        let idx = TransactionIndex::open(storage.clone(), &p, 0).unwrap();
        assert_eq!(
            idx.all_aborted_txns().unwrap(),
            vec![AbortedTxn::new(1, 0, 10, 11)]
        );
        assert!(storage.open(&p, OpenMode::Read).is_ok());
    }
}

mod checkpoint {
    use super::*;
    use segment_store::{
        CheckpointProblem, EpochEntry, LeaderEpochCheckpointFile, OffsetCheckpointFile,
        TopicPartition,
    };
    use segment_store::{StdFs, Storage};
    use testkit::{SimulatedFs, TornWrite};

    fn decode_offsets(bytes: &[u8]) -> Result<Vec<(TopicPartition, i64)>, SegmentError> {
        segment_store::internals::decode(Path::new("cp"), 0, bytes)
    }

    #[test]
    fn exact_bytes_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> = Arc::new(StdFs);
        let p = dir.path().join("recovery-point-offset-checkpoint");
        let cp = OffsetCheckpointFile::open(storage.clone(), &p).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"", "created empty");
        assert!(cp.read().unwrap().is_empty());
        let entries = vec![
            (TopicPartition::new("foo", 0), 42),
            (TopicPartition::new("foo", 1), 7),
        ];
        cp.write(&entries).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"0\n2\nfoo 0 42\nfoo 1 7\n");
        assert!(!dir
            .path()
            .join("recovery-point-offset-checkpoint.tmp")
            .exists());
        assert_eq!(cp.read().unwrap(), entries);

        let p = dir.path().join("leader-epoch-checkpoint");
        let cp = LeaderEpochCheckpointFile::new(storage, &p);
        let epochs = vec![
            EpochEntry {
                epoch: 0,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 3,
                start_offset: 100,
            },
        ];
        cp.write(&epochs).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"0\n2\n0 0\n3 100\n");
        assert_eq!(cp.read().unwrap(), epochs);
        cp.write(&[]).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"0\n0\n");
    }

    #[test]
    fn lenient_cases_kafka_accepts() {
        assert!(decode_offsets(b"").unwrap().is_empty());
        assert!(decode_offsets(b"0\n").unwrap().is_empty());
        assert!(decode_offsets(b"0").unwrap().is_empty());
        let one = vec![(TopicPartition::new("my-topic", 3), 9)];
        assert_eq!(
            decode_offsets(b"0\r\n1\r\nmy-topic\t3   9  \r\n").unwrap(),
            one
        );
        assert_eq!(decode_offsets(b"0\n1\nmy-topic 3 9").unwrap(), one);
        assert_eq!(decode_offsets(b"+0\n+1\nmy-topic +3 +9\n").unwrap(), one);
    }

    #[test]
    fn malformed_cases_name_the_line() {
        let cases: &[(&[u8], usize, CheckpointProblem)] = &[
            (
                b"1\n0\n",
                1,
                CheckpointProblem::UnsupportedVersion {
                    found: 1,
                    expected: 0,
                },
            ),
            (b"x\n", 1, CheckpointProblem::NotAnInteger),
            (b"\n", 1, CheckpointProblem::NotAnInteger),
            (b"0\n\n", 2, CheckpointProblem::NotAnInteger),
            (b"0\n99999999999\n", 2, CheckpointProblem::NotAnInteger),
            (
                b"0\n2\nfoo 0 42\n",
                2,
                CheckpointProblem::CountMismatch {
                    expected: 2,
                    found: 1,
                },
            ),
            (
                b"0\n0\nfoo 0 42\n",
                2,
                CheckpointProblem::CountMismatch {
                    expected: 0,
                    found: 1,
                },
            ),
            (b"0\n1\nfoo 0\n", 3, CheckpointProblem::BadEntry),
            (b"0\n1\nfoo 0 1 2\n", 3, CheckpointProblem::BadEntry),
            (b"0\n1\n foo 0 1\n", 3, CheckpointProblem::BadEntry),
            (b"0\n2\nfoo 0 1\nfoo x 2\n", 4, CheckpointProblem::BadEntry),
            (b"0\n2\nfoo 0 1\n\n", 4, CheckpointProblem::BadEntry),
            (
                b"0\n1\nfoo 0 99999999999999999999\n",
                3,
                CheckpointProblem::BadEntry,
            ),
            (b"0\n1\nf\xffo 0 1\n", 3, CheckpointProblem::InvalidUtf8),
        ];
        for (bytes, line, reason) in cases {
            match decode_offsets(bytes) {
                Err(SegmentError::MalformedCheckpoint {
                    line: l, reason: r, ..
                }) => {
                    assert_eq!(
                        (l, &r),
                        (*line, reason),
                        "{:?}",
                        String::from_utf8_lossy(bytes)
                    );
                }
                other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
            }
        }
        let e = segment_store::internals::decode::<EpochEntry>(Path::new("lec"), 0, b"0\n1\n0\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed checkpoint file lec at line 3: malformed entry"
        );
    }

    /// Crash after every possible number of I/O points during a checkpoint write, keeping
    /// nothing or a torn part of the last write: the file must read back as the old or the new
    /// content, never anything else.
    #[test]
    fn atomic_under_simulated_crashes() {
        let dir = PathBuf::from("/kafka-logs");
        let p = dir.join("replication-offset-checkpoint");
        let old = vec![(TopicPartition::new("a", 0), 1)];
        let new = vec![
            (TopicPartition::new("a", 0), 2),
            (TopicPartition::new("b", 5), 3),
        ];
        let mut saw_old = false;
        let mut saw_new = false;
        for torn in [
            TornWrite::None,
            TornWrite::Prefix(5),
            TornWrite::Prefix(usize::MAX),
        ] {
            for n in 0..20 {
                let fs = SimulatedFs::new();
                fs.create_durable_dir_all(&dir);
                let storage: Arc<dyn Storage> = Arc::new(fs.clone());
                let cp = OffsetCheckpointFile::new(storage.clone(), &p);
                cp.write(&old).unwrap();
                fs.fail_after(n);
                let finished = cp.write(&new).is_ok();
                fs.crash(torn);
                let got = OffsetCheckpointFile::new(storage, &p).read().unwrap();
                if got == old {
                    saw_old = true;
                    assert!(!finished, "a completed write must survive (n = {n})");
                } else {
                    assert_eq!(got, new, "n = {n}, {torn:?}");
                    saw_new = true;
                }
            }
        }
        assert!(saw_old && saw_new);
    }
}

mod lock {
    use super::*;

    const CHILD_ENV: &str = "SEGLOG_TEST_LOCK_CHILD_DIR";
    const EXIT_LOCKED: i32 = 10;
    const EXIT_ACQUIRED: i32 = 11;

    /// Serialises the tests of this module: a child being spawned holds a copy of every open
    /// file (and so every flock) of this process until its `exec`, which would make a lock
    /// dropped at that moment look still held to a test running alongside.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn second_lock_in_process_fails_at_once() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let a = DirLock::acquire(dir.path()).unwrap();
        assert!(a.lock_path().ends_with(".lock"));
        let e = DirLock::acquire(dir.path()).unwrap_err();
        assert!(
            matches!(&e, SegmentError::Locked { path } if path.ends_with(".lock")),
            "{e}"
        );
        let clone = a.clone();
        drop(a);
        assert!(
            DirLock::acquire(dir.path()).is_err(),
            "a clone keeps the lock"
        );
        drop(clone);
        DirLock::acquire(dir.path()).unwrap();
    }

    /// Helper run in a child process by `lock_from_another_process`; does nothing otherwise.
    #[test]
    fn child_helper() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        match DirLock::acquire(Path::new(&dir)) {
            Err(SegmentError::Locked { .. }) => std::process::exit(EXIT_LOCKED),
            Ok(_) => std::process::exit(EXIT_ACQUIRED),
            Err(e) => panic!("{e}"),
        }
    }

    fn run_child(dir: &Path) -> Option<i32> {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "lock::child_helper", "--test-threads", "1"])
            .env(CHILD_ENV, dir)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap()
            .code()
    }

    #[test]
    fn lock_from_another_process() {
        let _serial = serial();
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::acquire(dir.path()).unwrap();
        assert_eq!(run_child(dir.path()), Some(EXIT_LOCKED));
        drop(held);
        assert_eq!(run_child(dir.path()), Some(EXIT_ACQUIRED));
    }
}

/// Removes `p` if it exists; any error other than "not found" fails the test.
fn remove_if_exists(p: &std::path::Path) {
    match std::fs::remove_file(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("removing {}: {e}", p.display()),
    }
}

mod windowed_scan {
    use record_format::internals::ScannedBatch;
    use record_format::RecordBatchBuilder;
    use segment_store::internals::{scan_segment, SegmentScan, SegmentScanner};
    use segment_store::{AbortedTxn, SegmentConfig, SegmentError};

    fn log_bytes(batches: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut next = 100;
        for i in 0..batches {
            let mut b = RecordBatchBuilder::new(next).producer(7, 0, (i * 3) as i32);
            for r in 0..3 {
                let v = vec![b'x'; (17 * i as usize + r) % 90];
                b.append(1_000 + i * 10 + r as i64, None, Some(&v), &[])
                    .unwrap();
            }
            out.extend(b.build());
            next += 3;
        }
        out
    }

    fn windowed(bytes: &[u8], window: usize, config: &SegmentConfig) -> (SegmentScan, Vec<u64>) {
        let path = std::path::Path::new("00000000000000000100.log");
        let mut seen = Vec::new();
        let mut visit = |b: &ScannedBatch<'_>, _: &mut Vec<AbortedTxn>| {
            seen.push(b.position());
            Ok::<_, SegmentError>(())
        };
        let mut s = SegmentScanner::new(path, 100, bytes.len() as u64, config);
        let (mut pos, mut w) = (0usize, window);
        while let Some(next) = {
            let end = (pos + w).min(bytes.len());
            s.scan(&bytes[pos..end], pos as u64, &mut visit).unwrap()
        } {
            let next = next as usize;
            if next == pos {
                w *= 2;
            } else {
                pos = next;
                w = window;
            }
        }
        (s.finish(), seen)
    }

    /// Fed in windows of any size, the scan finds exactly what one pass over all the bytes
    /// finds: valid prefix, cut and reason, index entries, visited batches.
    #[test]
    fn any_window_size_gives_the_one_pass_scan() {
        let config = SegmentConfig {
            index_interval_bytes: 100,
            recovery_region_bytes: 64,
            ..SegmentConfig::default()
        };
        let clean = log_bytes(12);
        let mut flipped = clean.clone();
        let n = flipped.len();
        flipped[n / 2] ^= 0x10;
        let mut torn = clean.clone();
        torn.truncate(n - 7);
        let mut zeros = clean.clone();
        zeros.extend([0u8; 300]);
        for bytes in [&clean, &flipped, &torn, &zeros] {
            let mut seen_whole = Vec::new();
            let mut visit = |b: &ScannedBatch<'_>, _: &mut Vec<AbortedTxn>| {
                seen_whole.push(b.position());
                Ok::<_, SegmentError>(())
            };
            let path = std::path::Path::new("00000000000000000100.log");
            let whole = scan_segment(path, bytes, 100, &config, &mut visit).unwrap();
            assert!(whole.batches > 0);
            for window in [1, 7, 61, 100, 333, 1000, bytes.len()] {
                let (scan, seen) = windowed(bytes, window, &config);
                assert_eq!(scan, whole, "window {window}");
                assert_eq!(seen, seen_whole, "window {window}");
            }
        }
    }
}

/// `SegmentScanner::scan_file` (read in chunks on a helper thread, batches carried across chunk
/// boundaries) against one scan of the whole file's bytes.
mod chunked_file_scan {
    use record_format::internals::{ChunkChecks, ScannedBatch, READ_CHUNK_BYTES};
    use record_format::RecordBatchBuilder;
    use segment_store::internals::{scan_segment, SegmentScan, SegmentScanner};
    use segment_store::{AbortedTxn, OpenMode, SegmentConfig, SegmentError, StdFs, Storage};

    /// ~1 KB batches, with a 100 KB one (longer than a chunk's headroom) and a 1.5 MiB one
    /// (longer than a chunk) among them, to past `len` bytes.
    fn log_bytes(len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut next, mut i) = (0i64, 0usize);
        while out.len() < len {
            let value_len = match i {
                700 => 100_000,
                2_500 => 1_500_000,
                _ => 90 + (i * 37) % 1_000,
            };
            let mut b = RecordBatchBuilder::new(next).producer(7, 0, i as i32);
            b.append(
                1_000 + i as i64,
                None,
                Some(&vec![(i % 251) as u8; value_len]),
                &[],
            )
            .unwrap();
            out.extend(b.build());
            next += 1;
            i += 1;
        }
        out
    }

    fn scan_whole(bytes: &[u8], config: &SegmentConfig) -> (SegmentScan, Vec<u64>) {
        let mut seen = Vec::new();
        let mut visit = |b: &ScannedBatch<'_>, _: &mut Vec<AbortedTxn>| {
            seen.push(b.position());
            Ok::<_, SegmentError>(())
        };
        let path = std::path::Path::new("00000000000000000000.log");
        let scan = scan_segment(path, bytes, 0, config, &mut visit).unwrap();
        (scan, seen)
    }

    fn scan_file(
        path: &std::path::Path,
        config: &SegmentConfig,
        checks: ChunkChecks,
    ) -> (SegmentScan, Vec<u64>) {
        let mut seen = Vec::new();
        let mut visit = |b: &ScannedBatch<'_>, _: &mut Vec<AbortedTxn>| {
            seen.push(b.position());
            Ok::<_, SegmentError>(())
        };
        let handle = StdFs.open(path, OpenMode::Read).unwrap();
        let mut s = SegmentScanner::new(
            std::path::Path::new("00000000000000000000.log"),
            0,
            handle.len().unwrap(),
            config,
        )
        .chunk_checks(checks);
        s.scan_file(handle.as_ref(), &mut visit).unwrap();
        (s.finish(), seen)
    }

    /// The position of the first batch that contains byte `at`.
    fn batch_around(bytes: &[u8], at: usize) -> (usize, usize) {
        let mut p = 0;
        loop {
            let len = u32::from_be_bytes(bytes[p + 8..p + 12].try_into().unwrap()) as usize + 12;
            if p + len > at {
                return (p, len);
            }
            p += len;
        }
    }

    #[test]
    fn reading_in_chunks_finds_what_one_scan_of_the_bytes_finds() {
        let config = SegmentConfig::default();
        let clean = log_bytes(5 * READ_CHUNK_BYTES + 12_345);
        let chunk = READ_CHUNK_BYTES;
        let mut cases: Vec<(String, Vec<u8>)> = vec![("clean".into(), clean.clone())];
        // A CRC error in the batch that straddles each of the first chunk boundaries, after it.
        for k in 1..=3 {
            let (p, len) = batch_around(&clean, k * chunk);
            assert!(p < k * chunk && p + len > k * chunk);
            let mut v = clean.clone();
            v[(k * chunk + p + len) / 2] ^= 0x40;
            cases.push((format!("flip in the batch across boundary {k}"), v));
        }
        // A CRC error inside the batch longer than a chunk, and one in the last chunk.
        let mut big = (0, 0);
        while big.1 <= chunk {
            big = batch_around(&clean, big.0 + big.1);
        }
        let mut v = clean.clone();
        v[big.0 + big.1 - 10] ^= 1;
        cases.push(("flip at the end of the 1.5 MiB batch".into(), v));
        let mut v = clean.clone();
        let n = v.len();
        v[n - 100] ^= 1;
        cases.push(("flip in the last chunk".into(), v));
        let mut v = clean.clone();
        v[2 * chunk + chunk / 2] ^= 4;
        cases.push(("flip in the middle of the third chunk".into(), v));
        // Torn in the middle of a batch; zeros after the last batch; cut exactly at a boundary.
        let mut v = clean.clone();
        v.truncate(n - 7);
        cases.push(("torn tail".into(), v));
        let mut v = clean.clone();
        v.extend(vec![0u8; 70_000]);
        cases.push(("zero-filled tail".into(), v));
        let (p, _) = batch_around(&clean, 4 * chunk);
        let mut v = clean[..p].to_vec();
        v.resize(4 * chunk, 0);
        cases.push(("zeros up to a chunk boundary".into(), v));
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in &cases {
            let path = dir.path().join("00000000000000000000.log");
            std::fs::write(&path, bytes).unwrap();
            let (whole, seen_whole) = scan_whole(bytes, &config);
            assert!(whole.batches > 700, "{name}");
            // Whichever thread checks the CRCs of the batches whole in a chunk.
            for checks in [
                ChunkChecks::Reader,
                ChunkChecks::Scanner,
                ChunkChecks::Balanced,
            ] {
                let (chunked, seen) = scan_file(&path, &config, checks);
                assert_eq!(chunked, whole, "{name}, {checks:?}");
                assert_eq!(seen, seen_whole, "{name}, {checks:?}");
            }
            if name != "clean" {
                assert!(whole.truncated_bytes() > 0, "{name}");
            }
        }
    }
}

/// `ReadOnlyBytes::read_from`: a small file's bytes, in a page-aligned buffer the thread reuses.
mod small_reads {
    use segment_store::internals::{ReadBuf, ReadOnlyBytes};
    use segment_store::{OpenMode, StdFs, Storage};

    fn read(dir: &std::path::Path, name: &str, bytes: &[u8]) -> ReadOnlyBytes {
        let p = dir.join(name);
        std::fs::write(&p, bytes).expect("write");
        let h = StdFs.open(&p, OpenMode::Read).expect("open");
        ReadOnlyBytes::read_from(h.as_ref(), bytes.len() as u64).expect("read")
    }

    #[test]
    fn reads_whole_small_files_and_reuses_the_largest_buffer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (first, ptr) = {
            let r = read(dir.path(), "a.log", &big);
            assert_eq!(r.bytes(), &big[..]);
            let ptr = r.bytes().as_ptr();
            assert!((ptr as usize).is_multiple_of(ReadBuf::ALIGN));
            (r, ptr)
        };
        // A tiny read while the large buffer is in use gets a buffer of its own; dropped after
        // the large one, it does not replace it as the thread's spare.
        let tiny = read(dir.path(), "a.index", &[1, 2, 3]);
        assert_eq!(tiny.bytes(), &[1, 2, 3]);
        drop(first);
        drop(tiny);
        // A shorter file than the buffer holds: only its bytes, none of the previous file's.
        let short: Vec<u8> = (0..200_000u32).map(|i| (i % 13) as u8).collect();
        let again = read(dir.path(), "b.log", &short);
        assert_eq!(again.bytes(), &short[..]);
        assert_eq!(again.bytes().as_ptr(), ptr, "the spare buffer is reused");
        // A file that shrank after its length was taken: what was read, no stale bytes.
        let p = dir.path().join("c.log");
        std::fs::write(&p, &big[..1000]).expect("write");
        let h = StdFs.open(&p, OpenMode::Read).expect("open");
        drop(again);
        let r = ReadOnlyBytes::read_from(h.as_ref(), 5000).expect("read");
        assert_eq!(r.bytes(), &big[..1000]);
    }
}
