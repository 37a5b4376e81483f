//! Planning scales with the number of segments: the planner's lookup work
//! (`recovery::internals::work`, every element a lookup by base offset or path examines) grows as
//! n log n from 1,000 to 10,000 tiny segments of one partition, in the three shapes whose
//! lookups were once linear per segment: a clean log (`verify` and `recover --full` plan every
//! segment), a cut in the middle (half the segments move to quarantine, the report names their
//! files) and a snapshot at every segment boundary (each is stale once recovery starts below it).
//! The time per segment is a benchmark's (`benches/recovery.rs`, `segments_scaling`), not a test's.

use std::path::{Path, PathBuf};

use recovery::internals::work;
use recovery::{LoadOptions, LogLoader, SnapshotEntry};
use segment_store::internals::{segment_file_path, FileKind};

/// A scratch directory on a tmpfs when there is one (tens of thousands of files).
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Clean,
    CutInTheMiddle,
    SnapshotPerSegment,
}

fn make(root: &Path, n: u32, shape: Shape) -> PathBuf {
    let dir = root.join("orders-0");
    testkit::write_tiny_segments(&dir, n).unwrap();
    match shape {
        Shape::Clean => {}
        Shape::CutInTheMiddle => {
            // The last byte of the middle segment's only batch: its CRC fails, recovery cuts it
            // and moves every later segment to quarantine.
            let path = segment_file_path(&dir, i64::from(n / 2), FileKind::Log);
            let mut bytes = std::fs::read(&path).unwrap();
            *bytes.last_mut().unwrap() ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
        }
        Shape::SnapshotPerSegment => {
            for i in 1..=i64::from(n) {
                recovery::write_snapshot(&dir, i, &[] as &[SnapshotEntry]).unwrap();
            }
        }
    }
    dir
}

/// The planner's work for `n` segments of `shape`: `verify`'s plan (audited) and `recover
/// --full`'s, each with its report.
fn planner_work(n: u32, shape: Shape) -> u64 {
    let tmp = scratch();
    let dir = make(tmp.path(), n, shape);
    let opts = LoadOptions::for_partition_dir(&dir, true);
    work::reset();
    for audited in [true, false] {
        let plan = if audited {
            LogLoader::plan_audited(&dir, &opts)
        } else {
            LogLoader::plan(&dir, &opts)
        }
        .unwrap();
        let report = plan.report();
        match shape {
            Shape::CutInTheMiddle => {
                assert_eq!(plan.log_end_offset, i64::from(n / 2), "{shape:?}");
                assert_eq!(plan.quarantined_segments.len(), (n - n / 2 - 1) as usize);
                assert_eq!(report.cut.len(), 1);
            }
            _ => assert_eq!(plan.log_end_offset, i64::from(n), "{shape:?}"),
        }
        assert_eq!(plan.segments.len(), n as usize);
    }
    work::probes()
}

fn assert_n_log_n(shape: Shape) {
    let small = planner_work(1_000, shape);
    let large = planner_work(10_000, shape);
    // Some work per segment is counted (the test is not vacuous), and it grows as n log n:
    // 10 × log(10,000)/log(1,000) = 13.3 for ten times the segments, with room for constant
    // terms. Linear lookups per segment (n²) make the ratio 100.
    assert!(
        small >= 1_000,
        "{shape:?}: {small} probes for 1,000 segments"
    );
    let ratio = large as f64 / small as f64;
    let n_log_n = 10.0 * (10_000f64).ln() / (1_000f64).ln();
    eprintln!("{shape:?}: planner work {small} at 1,000 segments, {large} at 10,000 (x{ratio:.1})");
    assert!(
        ratio <= 1.5 * n_log_n,
        "{shape:?}: planner work {small} at 1,000 segments, {large} at 10,000 (x{ratio:.1}, n log n \
         allows x{:.1})",
        1.5 * n_log_n
    );
}

#[test]
fn planning_work_grows_as_n_log_n_clean() {
    assert_n_log_n(Shape::Clean);
}

#[test]
fn planning_work_grows_as_n_log_n_with_a_cut() {
    assert_n_log_n(Shape::CutInTheMiddle);
}

#[test]
fn planning_work_grows_as_n_log_n_with_snapshots() {
    assert_n_log_n(Shape::SnapshotPerSegment);
}
