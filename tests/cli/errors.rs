//! User errors: exit 2 and exactly one stderr line, nothing half-printed, never a panic.

use seglog::cli::dump::DumpArgs;
use seglog::cli::Status;

use super::common::{dump, dump_args, sample_log, tempdir, testdata, write};

fn assert_usage(out: &super::common::Output, needle: &str) {
    assert_eq!(out.status, Status::Usage, "{out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains(needle), "{}", out.stderr);
}

#[test]
fn missing_file() {
    let dir = tempdir();
    let good = testdata().join("seglog-built/barrier.log");
    let missing = dir.path().join("00000000000000000000.log");
    let out = dump(&[good.as_os_str(), missing.as_os_str()]);
    assert_usage(&out, "No such file or directory");
    assert!(
        out.stderr.starts_with("error: cannot open "),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, "", "nothing is dumped when a path is wrong");
}

#[test]
fn directory_given() {
    let dir = tempdir();
    let sub = dir.path().join("00000000000000000000.log");
    std::fs::create_dir(&sub).expect("mkdir");
    assert_usage(&dump(&[sub.as_os_str()]), "is a directory");
}

#[test]
fn unreadable_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let (log, _) = sample_log(0, 1);
    let path = write(dir.path(), "00000000000000000000.log", &log);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    if std::fs::File::open(&path).is_ok() {
        // Running as root: permissions are not enforced, nothing to test.
        return;
    }
    assert_usage(&dump(&[path.as_os_str()]), "Permission denied");
}

#[test]
fn unknown_suffix_alone_is_a_usage_error() {
    let dir = tempdir();
    let path = write(dir.path(), "notes.txt", b"hello");
    let out = dump(&[path.as_os_str()]);
    assert_usage(&out, &format!("Ignoring unknown file {}", path.display()));
    assert_eq!(out.stdout, format!("Dumping {}\n", path.display()));
}

#[test]
fn unknown_suffix_next_to_a_real_file_is_ignored() {
    let dir = tempdir();
    let (log, _) = sample_log(0, 1);
    let log = write(dir.path(), "00000000000000000000.log", &log);
    let other = write(dir.path(), "00000000000000000000.log.deleted", b"x");
    let files = format!("{},{}", other.display(), log.display());
    let out = dump(&["--files", files.as_str()]);
    assert_eq!(out.status, Status::Success);
    assert_eq!(
        out.stderr,
        format!("Ignoring unknown file {}\n", other.display())
    );
    assert!(out.stdout.contains("Log starting offset: 0"));
}

#[test]
fn no_files() {
    assert_usage(&dump_args(&DumpArgs::default()), "no files to dump");
}

#[test]
fn conflicting_flags_are_rejected_by_the_parser() {
    use clap::Parser;
    for (a, b) in [
        ("--json", "--verify-index-only"),
        ("--json", "--index-sanity-check"),
        ("--offsets-decoder", "--cluster-metadata-decoder"),
        ("--offsets-decoder", "--value-decoder-class"),
    ] {
        let e = DumpArgs::try_parse_from(["dump", a, b, "x.log"]).expect_err("conflict");
        assert_eq!(
            e.kind(),
            clap::error::ErrorKind::ArgumentConflict,
            "{a} {b}"
        );
    }
    let e = DumpArgs::try_parse_from(["dump", "--max-bytes=-1", "x.log"]).expect_err("range");
    assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
}

#[test]
fn files_and_positional_paths_combine_in_order() {
    use clap::Parser;
    let args = DumpArgs::try_parse_from(["dump", "--files", "a.log,b.index", "c.snapshot"])
        .expect("parse");
    let all: Vec<String> = args.all_files().map(|p| p.display().to_string()).collect();
    assert_eq!(all, ["a.log", "b.index", "c.snapshot"]);
}
