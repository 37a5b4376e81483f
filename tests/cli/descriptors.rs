//! File descriptors under a low `RLIMIT_NOFILE` (a child `seglog` started by `sh -c 'ulimit -n
//! N; exec …'`, each run with its own timeout), on tiny segments (`testkit::write_tiny_segments`)
//! in a tmpfs when there is one:
//!
//! * `verify` holds descriptors bounded by its threads, not by the segments: 2,000 segments check
//!   under `ulimit -n 64`;
//! * `recover` keeps up to four descriptors per segment and one per partition open; where that does not
//!   fit the limit, it fails before changing anything (no index created, no snapshot written, the
//!   clean-shutdown marker left in place) with one line that names `RLIMIT_NOFILE`, exit 2 — for a
//!   partition and for a log directory — and a recovery that fits runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use recovery::plan::tree_image;

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

#[test]
fn recover_that_would_run_out_of_descriptors_changes_nothing_and_names_the_limit() {
    let root = scratch();
    let dir = partition(root.path(), "orders-0", 1_000);
    let before = tree_image(&dir).unwrap();
    let (code, stdout, stderr) = seglog_limited(256, &["recover", "--full"], &dir);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("RLIMIT_NOFILE") && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert!(tree_image(&dir).unwrap() == before, "recover changed files");

    // A log directory: the limit is checked for all its partitions before the first is loaded.
    let log_dir = root.path().join("logs");
    for p in 0..3 {
        partition(&log_dir, &format!("orders-{p}"), 150);
    }
    std::fs::write(log_dir.join(".kafka_cleanshutdown"), "").unwrap();
    let before = tree_image(&log_dir).unwrap();
    let (code, stdout, stderr) = seglog_limited(256, &["recover", "--threads", "2"], &log_dir);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("RLIMIT_NOFILE"), "{stderr}");
    assert!(
        tree_image(&log_dir).unwrap() == before,
        "recover changed files"
    );

    // What fits is recovered.
    let small = partition(root.path(), "small-0", 40);
    let (code, stdout, stderr) = seglog_limited(256, &["recover", "--full"], &small);
    assert_eq!(code, 0, "{stdout}{stderr}");
}
