//! File descriptors under a low `RLIMIT_NOFILE` (a child `seglog` started by `sh -c 'ulimit -n
//! N; exec …'`, each run with its own timeout), on tiny segments (`testkit::write_tiny_segments`)
//! in a tmpfs when there is one:
//!
//! * `verify` holds descriptors bounded by its threads, not by the segments: 2,000 segments check
//!   under `ulimit -n 64`;
//! * `recover` holds descriptors bounded by its threads too: segments are opened when recovery
//!   needs them and closed when it is done with them, and a log directory takes one lock, not one
//!   per partition, so 100,000 segments of one partition and a log directory of 20,000 partitions
//!   recover under `ulimit -n 1024`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(t) = tempfile::tempdir_in(shm) {
            return t;
        }
    }
    tempfile::tempdir().unwrap()
}

/// `seglog <args>` with `ulimit -n <nofile>`; fails the test (killing the child) after 120 s.
fn seglog_limited(nofile: u32, args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = super::common::run_bounded(
        Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_seglog"))
            .args(args)
            .arg(dir),
        Duration::from_secs(120),
    );
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}

fn partition(root: &Path, name: &str, segments: u32) -> PathBuf {
    let dir = root.join(name);
    testkit::write_tiny_segments(&dir, segments).unwrap();
    dir
}

#[test]
fn verify_checks_thousands_of_segments_under_a_low_descriptor_limit() {
    let root = scratch();
    let dir = partition(root.path(), "orders-0", 2_000);
    let (code, stdout, stderr) = seglog_limited(64, &["verify", "--threads", "2"], &dir);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("orders-0: ok (2000 segment(s), 2000 batches"),
        "{stdout}"
    );
}

/// 100,000 segments of one partition recover (`recover --full`: every segment scanned, its
/// indexes rebuilt) under `ulimit -n 1024`: inactive segments are opened when recovery writes
/// them and closed at once. (Failed before with the limit named: four descriptors per segment.)
#[test]
fn recover_full_of_100_000_segments_fits_1024_descriptors() {
    let root = scratch();
    let dir = partition(root.path(), "orders-0", 100_000);
    let (code, stdout, stderr) = seglog_limited(1024, &["recover", "--full"], &dir);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    // Every segment is there, its indexes rebuilt (a tiny segment's are empty: one batch below
    // `index.interval.bytes`), and the partition checks clean under the same limit.
    let logs = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count();
    assert_eq!(logs, 100_000);
    let (code, stdout, stderr) = seglog_limited(1024, &["verify"], &dir);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.starts_with("orders-0: ok (100000 segment(s)"),
        "{stdout}"
    );
}

/// A log directory of 20,000 partitions recovers (`LogDir` loading: one lock for the log
/// directory, no `.lock` per partition, no segment left open) under `ulimit -n 1024`. (Failed
/// before: a `.lock` and the active segment's descriptors per partition.)
#[test]
fn recover_of_a_log_dir_of_20_000_partitions_fits_1024_descriptors() {
    let root = scratch();
    let log_dir = root.path().join("logs");
    for p in 0..20_000 {
        partition(&log_dir, &format!("orders-{p}"), 1);
    }
    let (code, stdout, stderr) = seglog_limited(1024, &["recover", "--threads", "2"], &log_dir);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(log_dir.join(".lock").is_file());
    assert!(
        !log_dir.join("orders-0").join(".lock").exists(),
        "a partition of a log directory takes no lock of its own"
    );
    // Each partition recovered: the checkpoint lists all of them.
    let checkpoint =
        std::fs::read_to_string(log_dir.join("recovery-point-offset-checkpoint")).unwrap();
    assert_eq!(
        checkpoint.lines().count(),
        2 + 20_000,
        "{}",
        &checkpoint[..200.min(checkpoint.len())]
    );
}
