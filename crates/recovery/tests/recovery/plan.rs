//! Plan, then apply, over a corpus of broken partitions: every kind of damage recovery meets
//! (flipped bytes and torn tails in each segment, zero-filled preallocated tails, appended
//! garbage, broken indexes, corrupt snapshots, leftovers of interrupted deletions, cleanings and
//! swaps), each after a clean and an unclean shutdown. For each:
//!
//! * planning leaves every byte and name of the directory as it was;
//! * the plan's first cut is where record-format's CRC-checking iterator (not the scan under
//!   test) stops in the damaged file;
//! * applying the plan reports exactly what the plan predicted (cuts, quarantined files, set-aside
//!   snapshots, leftovers, offsets, producers), leaves the producer state and LSO the plan
//!   computed, the predicted quarantine files hold the cut bytes, and every file moved to
//!   quarantine (segments with their indexes, snapshots) keeps its original bytes;
//! * `LogLoader::load` (which plans under the directory lock, reading the `.log` and the offset
//!   and time indexes through maps instead of copies) reports the same and leaves the same state.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use record_format::Batches;
use recovery::{
    AppendOrigin, LoadOptions, LogLoader, PartitionLog, PartitionLogConfig, RecoveryPlan,
    SnapshotEntry,
};
use segment_store::LogConfig;
use testkit::tree_image;

use super::loader::{build_log, SEGMENT_BYTES};
use super::log::small_segments;

#[derive(Debug, Clone, Copy)]
enum Damage {
    None,
    FlipByte {
        segment: usize,
        at: usize,
    },
    Truncate {
        segment: usize,
        by: usize,
    },
    ZeroTail {
        bytes: usize,
    },
    Garbage {
        bytes: usize,
    },
    IndexOddLength {
        segment: usize,
    },
    IndexBelowBase {
        segment: usize,
    },
    TimeIndexGarbage {
        segment: usize,
    },
    /// The last segment's offset and time indexes preallocated with zeros, as a crashed broker
    /// leaves the active segment's.
    IndexesPreallocated {
        bytes: usize,
    },
    SnapshotFlip {
        which: usize,
    },
    Leftovers,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() && e.file_name() != ".lock" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

fn damage(dir: &Path, d: Damage) {
    let logs = with_ext(dir, "log");
    let indexes = with_ext(dir, "index");
    let edit = |p: &Path, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = std::fs::read(p).unwrap();
        f(&mut b);
        std::fs::write(p, b).unwrap();
    };
    match d {
        Damage::None => {}
        Damage::FlipByte { segment, at } => edit(&logs[segment % logs.len()], &|b| {
            let i = at % b.len();
            b[i] ^= 0x20;
        }),
        Damage::Truncate { segment, by } => edit(&logs[segment % logs.len()], &|b| {
            let n = b.len().saturating_sub(by);
            b.truncate(n);
        }),
        Damage::ZeroTail { bytes } => edit(logs.last().unwrap(), &|b| b.resize(b.len() + bytes, 0)),
        Damage::Garbage { bytes } => edit(logs.last().unwrap(), &|b| {
            b.extend((0..bytes).map(|i| (i * 37 + 11) as u8))
        }),
        Damage::IndexOddLength { segment } => {
            edit(&indexes[segment % indexes.len()], &|b| b.push(1))
        }
        Damage::IndexBelowBase { segment } => edit(&indexes[segment % indexes.len()], &|b| {
            b.extend_from_slice(&(-5i32).to_be_bytes());
            b.extend_from_slice(&0i32.to_be_bytes());
        }),
        Damage::TimeIndexGarbage { segment } => {
            let t = with_ext(dir, "timeindex");
            edit(&t[segment % t.len()], &|b| {
                b.extend_from_slice(&[0xff; 12]);
            })
        }
        Damage::IndexesPreallocated { bytes } => {
            for ext in ["index", "timeindex"] {
                edit(with_ext(dir, ext).last().unwrap(), &|b| {
                    let n = b.len() + bytes;
                    b.resize(n - n % 24, 0)
                });
            }
        }
        Damage::SnapshotFlip { which } => {
            let s = with_ext(dir, "snapshot");
            edit(&s[which % s.len()], &|b| b[3] ^= 1);
        }
        Damage::Leftovers => {
            let first = &logs[0];
            let name = first.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::copy(first, dir.join(format!("{name}.deleted"))).unwrap();
            let last = logs.last().unwrap();
            let name = last.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::write(dir.join(format!("{name}.cleaned")), b"x").unwrap();
            std::fs::write(dir.join("00000000000000009999.index"), [0u8; 8]).unwrap();
        }
    }
}

fn corpus() -> Vec<Damage> {
    let mut v = vec![
        Damage::None,
        Damage::ZeroTail { bytes: 4096 },
        Damage::Garbage { bytes: 100 },
        Damage::Leftovers,
        Damage::IndexesPreallocated { bytes: 4096 },
    ];
    for segment in 0..5 {
        for at in [0, 9, 17, 61, 150, 333] {
            v.push(Damage::FlipByte { segment, at });
        }
        for by in [1, 20, 70] {
            v.push(Damage::Truncate { segment, by });
        }
        v.push(Damage::IndexOddLength { segment });
        v.push(Damage::IndexBelowBase { segment });
        v.push(Damage::TimeIndexGarbage { segment });
    }
    for which in 0..4 {
        v.push(Damage::SnapshotFlip { which });
    }
    v
}

/// Where record-format's CRC-checking iterator stops in each `.log`: the first segment whose
/// valid prefix ends before its end, and that position.
fn first_invalid(dir: &Path) -> Option<(i64, u64)> {
    for p in with_ext(dir, "log") {
        let bytes = std::fs::read(&p).unwrap();
        let mut it = Batches::new(&bytes, 0).validate_crc(true);
        for e in &mut it {
            if e.is_err() {
                break;
            }
        }
        let end = it.valid_prefix_end();
        if end < bytes.len() as u64 {
            let base = p
                .file_stem()
                .unwrap()
                .to_str()
                .unwrap()
                .parse::<i64>()
                .unwrap();
            return Some((base, end));
        }
    }
    None
}

/// What a loaded partition's state is compared by: producers, LSO, log end.
type State = (Vec<SnapshotEntry>, i64, i64);

fn plan_state(plan: &RecoveryPlan) -> State {
    (
        plan.producers.snapshot_entries(),
        plan.last_stable_offset,
        plan.log_end_offset,
    )
}

fn log_state(log: &PartitionLog) -> State {
    (
        log.producer_state().snapshot_entries(),
        log.last_stable_offset(),
        log.log_end_offset(),
    )
}

#[test]
fn apply_does_exactly_what_the_plan_predicts_over_the_broken_partition_corpus() {
    let pristine = tempfile::tempdir().unwrap();
    let log = build_log(pristine.path());
    log.close().unwrap();
    let mut checked = 0;
    let mut with_cuts = 0;
    let mut refused = 0;
    for (i, d) in corpus().into_iter().enumerate() {
        for clean in [false, true] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("orders-0");
            copy_dir(pristine.path(), &dir);
            damage(&dir, d);
            let expected_cut = first_invalid(&dir);
            let opts = LoadOptions {
                config: recovery::Config {
                    log: PartitionLogConfig {
                        log: small_segments(SEGMENT_BYTES),
                        ..Default::default()
                    },
                    ..recovery::Config::default()
                },
                had_clean_shutdown: clean,
                ..Default::default()
            };
            let loaded_dir = root.path().join("loaded-0");
            copy_dir(&dir, &loaded_dir);
            let before = tree_image(&dir).unwrap();
            let plan = LogLoader::plan(&dir, &opts);
            assert_eq!(
                tree_image(&dir).unwrap(),
                before,
                "case {i} {d:?}: planning changed the directory"
            );
            let plan = match plan {
                Ok(p) => p,
                Err(e) => {
                    // A refusal (e.g. an offset that does not fit its segment) is the loader's.
                    let loaded = LogLoader::load(&dir, &opts).map(|_| ());
                    assert_eq!(
                        loaded.map_err(|e| e.to_string()),
                        Err(e.to_string()),
                        "case {i} {d:?}"
                    );
                    refused += 1;
                    continue;
                }
            };
            let predicted = plan.report();
            if plan.recovered_from == plan.segments.first().map(|s| s.base_offset) {
                // Recovery scans from the first segment: it cuts where the iterator stops.
                let got = predicted.cut.first().map(|c| (c.segment, c.position));
                assert_eq!(got, expected_cut, "case {i} {d:?} clean {clean}");
            }
            let state = plan_state(&plan);
            let cut_tails: Vec<(PathBuf, Vec<u8>)> = predicted
                .cut
                .iter()
                .map(|c| {
                    let log = plan
                        .segments
                        .iter()
                        .find(|s| s.base_offset == c.segment)
                        .unwrap();
                    let bytes = std::fs::read(log.log_path(&plan.dir)).unwrap();
                    (
                        c.quarantined_to.clone(),
                        bytes[c.position as usize..].to_vec(),
                    )
                })
                .collect();
            let (log, report) = LogLoader::apply(plan)
                .unwrap_or_else(|e| panic!("case {i} {d:?} clean {clean}: apply failed: {e}"));
            assert_eq!(
                format!("{report:?}"),
                format!("{predicted:?}"),
                "case {i} {d:?} clean {clean}"
            );
            assert_eq!(log_state(&log), state, "case {i} {d:?} clean {clean}");
            for (path, tail) in &cut_tails {
                assert_eq!(&std::fs::read(path).unwrap(), tail, "case {i} {d:?}");
            }
            for p in &report.quarantined_segments {
                // Moved as they were: the same bytes (indexes included) under the same name.
                let original = dir.join(p.file_name().unwrap());
                assert_eq!(
                    std::fs::read(p).ok(),
                    before.get(&original).cloned().flatten(),
                    "case {i} {d:?}: {}",
                    p.display()
                );
            }
            let (loaded, loaded_report) = LogLoader::load(&loaded_dir, &opts)
                .unwrap_or_else(|e| panic!("case {i} {d:?} clean {clean}: load failed: {e}"));
            assert_eq!(
                format!("{loaded_report:?}").replace("loaded-0", "orders-0"),
                format!("{predicted:?}"),
                "case {i} {d:?} clean {clean}: load and plan + apply differ"
            );
            assert_eq!(log_state(&loaded), state, "case {i} {d:?} clean {clean}");
            loaded.close().unwrap();
            with_cuts += usize::from(!report.cut.is_empty());
            // The segment left active (the last, or the one recovery cut) keeps its offset and
            // time indexes at their maximum size, and the next append lands at the log end.
            let mut log = log;
            let active = super::common::logs_in(&dir).pop().unwrap();
            for ext in ["index", "timeindex"] {
                let len = std::fs::metadata(active.with_extension(ext)).unwrap().len();
                assert!(
                    len >= LogConfig::default().max_index_size - 12,
                    "case {i} {d:?} clean {clean}: active .{ext} of {len} bytes"
                );
            }
            let end = log.log_end_offset();
            let info = log
                .append_as_leader(
                    &super::log::batch(-1, 0, 0, 1, false),
                    0,
                    AppendOrigin::Client,
                )
                .unwrap_or_else(|e| panic!("case {i} {d:?} clean {clean}: append: {e}"));
            assert_eq!(info.first_offset, end, "case {i} {d:?} clean {clean}");
            log.close().unwrap();
            checked += 1;
        }
    }
    assert_eq!(checked + refused, corpus().len() * 2);
    assert!(refused < 10, "{refused}");
    assert!(with_cuts > 30, "{with_cuts}");
}

/// A partition of one segment of ~3.3 MiB of ~1.1 KB batches (three idempotent producers,
/// transactions with their markers, a barrier), damaged at places around the 1 MiB regions and
/// chunks recovery scans in, planned three ways: `LogLoader::plan` without the lock maps it
/// guarded (no lock), or, on storage that cannot map, reads it a chunk at a time;
/// `LogLoader::load` under the lock maps it and scans it in place. All must cut where
/// record-format's sequential CRC-checking iterator stops and agree on everything else.
#[test]
fn a_segment_of_several_mib_is_cut_in_the_same_place_read_or_mapped() {
    use record_format::internals::READ_CHUNK_BYTES;
    use record_format::RecordBatchBuilder;
    let pristine = tempfile::tempdir().unwrap();
    let (mut log, config) = open_for_one_big_segment(pristine.path());
    let value = [b'x'; 100];
    let mut seqs = [0i32; 4];
    let mut i = 0usize;
    // Past three chunks (and regions), so that both paths cross several boundaries.
    while log.local_log().size() < 3 * READ_CHUNK_BYTES as u64 + 300_000 {
        let pid = (i % 3 + 1) as i64;
        let txn = pid == 3;
        let mut b = RecordBatchBuilder::new(0)
            .producer(pid, 0, seqs[pid as usize])
            .transactional(txn);
        for _ in 0..10 {
            b.append(super::log::ts(), Some(b"k"), Some(&value), &[])
                .unwrap();
        }
        log.append_as_leader(&b.build(), 0, AppendOrigin::Client)
            .unwrap();
        seqs[pid as usize] += 10;
        if txn && i % 7 == 2 {
            let m = super::log::marker(3, 0, i.is_multiple_of(2));
            log.append_as_leader(&m, 0, AppendOrigin::Coordinator)
                .unwrap();
        }
        if i == 1500 {
            let barrier = record_format::mirror_pid_reset_batch(0, super::log::ts(), 0, "src");
            log.append_as_leader(&barrier, 0, AppendOrigin::Coordinator)
                .unwrap();
            seqs = [0; 4];
        }
        i += 1;
    }
    log.close().unwrap();
    let size = std::fs::metadata(&with_ext(pristine.path(), "log")[0])
        .unwrap()
        .len() as usize;
    let chunk = READ_CHUNK_BYTES;
    let mut cases = vec![Damage::None, Damage::ZeroTail { bytes: 64 << 10 }];
    for at in [
        100,
        chunk - 5,
        chunk + (64 << 10) + 3,
        2 * chunk + 500,
        size - 30,
    ] {
        cases.push(Damage::FlipByte { segment: 0, at });
    }
    cases.push(Damage::Truncate { segment: 0, by: 7 });
    let mut cut = 0;
    for d in cases {
        for clean in [false, true] {
            let root = tempfile::tempdir().unwrap();
            let (dir, mapped) = (root.path().join("orders-0"), root.path().join("mapped-0"));
            copy_dir(pristine.path(), &dir);
            damage(&dir, d);
            copy_dir(&dir, &mapped);
            let opts = LoadOptions {
                config: recovery::Config {
                    log: PartitionLogConfig {
                        log: config.clone(),
                        ..Default::default()
                    },
                    full_recovery: true,
                    ..recovery::Config::default()
                },
                had_clean_shutdown: clean,
                ..Default::default()
            };
            let expected_cut = first_invalid(&dir);
            let plan = LogLoader::plan(&dir, &opts).unwrap();
            let predicted = plan.report();
            let got = predicted.cut.first().map(|c| (c.segment, c.position));
            assert_eq!(got, expected_cut, "{d:?} clean {clean}");
            let mut read_opts = opts.clone();
            read_opts.config.env.storage = Arc::new(NoMmap);
            let read = LogLoader::plan(&dir, &read_opts).unwrap();
            assert_eq!(
                format!("{:?}", read.report()),
                format!("{predicted:?}"),
                "{d:?} clean {clean}: read plan and guarded map plan differ"
            );
            assert_eq!(plan_state(&read), plan_state(&plan), "{d:?} clean {clean}");
            let (loaded, report) = LogLoader::load(&mapped, &opts).unwrap();
            assert_eq!(
                format!("{report:?}").replace("mapped-0", "orders-0"),
                format!("{predicted:?}"),
                "{d:?} clean {clean}: mapped load and read plan differ"
            );
            assert_eq!(log_state(&loaded), plan_state(&plan), "{d:?} clean {clean}");
            loaded.close().unwrap();
            cut += usize::from(got.is_some());
        }
    }
    // Every damage but `None` cuts (the zero-filled tail too).
    assert_eq!(cut, 2 * 7);
}

/// A broker truncating a segment while `verify` (a plan without the lock) scans it through its
/// guarded map: the process never dies of `SIGBUS`, and a plan either describes the file (read
/// before or after the cut) or fails with `TruncatedWhileRead`, never with anything else. The
/// cut lands at growing delays after the plan starts, so some land mid-scan; were the guard
/// missing, the first of those would end the test process.
#[test]
fn a_segment_truncated_under_a_plan_fails_it_cleanly() {
    use record_format::RecordBatchBuilder;
    let pristine = tempfile::tempdir().unwrap();
    let (mut log, config) = open_for_one_big_segment(pristine.path());
    let value = [b'x'; 100];
    while log.local_log().size() < 24 << 20 {
        let mut b = RecordBatchBuilder::new(0);
        for _ in 0..10 {
            b.append(super::log::ts(), None, Some(&value), &[]).unwrap();
        }
        log.append_as_leader(&b.build(), 0, AppendOrigin::Client)
            .unwrap();
    }
    log.close().unwrap();
    let opts = LoadOptions {
        config: recovery::Config {
            log: PartitionLogConfig {
                log: config,
                ..Default::default()
            },
            full_recovery: true,
            ..recovery::Config::default()
        },
        ..Default::default()
    };
    let (mut whole, mut failed) = (0, 0);
    for round in 0..40u64 {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("orders-0");
        copy_dir(pristine.path(), &dir);
        let segment = with_ext(&dir, "log")[0].clone();
        let delay = std::time::Duration::from_micros(250 * round);
        let cut = testkit::truncate_after(segment, delay, 4096);
        match LogLoader::plan_audited(&dir, &opts) {
            Ok(_) => whole += 1,
            Err(recovery::PartitionLogError::Segment(
                segment_store::SegmentError::TruncatedWhileRead { .. },
            )) => failed += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        cut.join().unwrap();
    }
    // Which rounds the cut lands in mid-scan depends on the machine (19 of 40 here).
    eprintln!("plans of the file: {whole}, failed as truncated: {failed}");
}

/// A new partition in `dir` whose segments roll at 64 MiB (one segment for these tests), and its
/// log config.
fn open_for_one_big_segment(dir: &Path) -> (PartitionLog, LogConfig) {
    let config = LogConfig {
        segment_bytes: 64 << 20,
        ..LogConfig::default()
    };
    (super::log::open_with(dir, config.clone()), config)
}

/// The real file system, but one that says it cannot map files: recovery then reads a `.log`.
#[derive(Debug)]
struct NoMmap;

impl segment_store::Storage for NoMmap {
    fn open(
        &self,
        path: &Path,
        mode: segment_store::OpenMode,
    ) -> segment_store::Result<Box<dyn segment_store::FileHandle>> {
        segment_store::StdFs.open(path, mode)
    }
    fn exists(&self, path: &Path) -> segment_store::Result<bool> {
        segment_store::StdFs.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> segment_store::Result<()> {
        segment_store::StdFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> segment_store::Result<()> {
        segment_store::StdFs.remove_file(path)
    }
    fn list_dir(&self, dir: &Path) -> segment_store::Result<Vec<std::ffi::OsString>> {
        segment_store::StdFs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> segment_store::Result<()> {
        segment_store::StdFs.create_dir_all(dir)
    }
    fn remove_dir(&self, dir: &Path) -> segment_store::Result<()> {
        segment_store::StdFs.remove_dir(dir)
    }
    fn sync_dir(&self, dir: &Path) -> segment_store::Result<()> {
        segment_store::StdFs.sync_dir(dir)
    }
    fn supports_mmap(&self) -> bool {
        false
    }
}
