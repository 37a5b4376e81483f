//! The real executable: exit codes, one-line errors, no panic or backtrace.

use std::process::Command;

use super::common::{sample_log, tempdir, testdata, write};
use super::run::{assert_no_panic, seglog};

#[test]
fn dump_of_a_good_file_exits_0() {
    let log = testdata().join("seglog-built/barrier.log");
    let (code, stdout, stderr) = seglog(&[
        "dump".as_ref(),
        "--deep-iteration".as_ref(),
        log.as_os_str(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(r#"MirrorPidReset {"version":0,"sourceClusterId":"abc"}"#));
}

#[test]
fn dump_of_a_damaged_file_exits_1() {
    let dir = tempdir();
    let (log, _) = sample_log(0, 2);
    let path = write(
        dir.path(),
        "00000000000000000000.log",
        &log[..log.len() - 5],
    );
    let (code, stdout, stderr) = seglog(&["dump".as_ref(), path.as_os_str()]);
    assert_eq!(code, 1);
    assert!(
        stdout.ends_with("invalid bytes at the end of 00000000000000000000.log\n"),
        "{stdout}"
    );
    assert_no_panic(&stderr);
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let dir = tempdir();
    let missing = dir.path().join("00000000000000000000.log");
    let cases: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["dump".as_ref(), missing.as_os_str()],
        vec!["dump".as_ref(), dir.path().as_os_str()],
        vec!["dump".as_ref()],
        vec![
            "dump".as_ref(),
            "--json".as_ref(),
            "--verify-index-only".as_ref(),
            "a.index".as_ref(),
        ],
        vec!["dump".as_ref(), "--no-such-flag".as_ref()],
        vec![
            "dump".as_ref(),
            "--max-bytes".as_ref(),
            "lots".as_ref(),
            "a.log".as_ref(),
        ],
        vec!["no-such-command".as_ref()],
        vec![],
    ];
    for args in cases {
        let (code, stdout, stderr) = seglog(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert_no_panic(&stderr);
    }
}

/// A missing required argument is named on the one line, with the subcommand's help.
#[test]
fn a_missing_required_argument_is_named() {
    for (args, named, help) in [
        (
            &["demo", "--no-barrier"][..],
            "--scenario <NAME>",
            "seglog demo --help",
        ),
        (&["verify"][..], "<DIR>", "seglog verify --help"),
    ] {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let (code, stdout, stderr) = seglog(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains("required arguments were not provided: "),
            "{stderr}"
        );
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(stderr.contains(help), "{args:?}: {stderr}");
    }
}

#[test]
fn help_has_an_example_and_exits_0() {
    for args in [
        &["dump", "--help"][..],
        &["demo", "--help"],
        &["verify", "--help"],
        &["recover", "--help"],
        &["producers", "--help"],
        &["--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_seglog"))
            .args(args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        assert!(text.contains("Example"), "{args:?}: {text}");
    }
}

#[test]
fn directory_commands_user_errors_exit_2_with_one_line() {
    let dir = tempdir();
    let missing = dir.path().join("orders-9");
    let not_partition = dir.path().join("notes");
    std::fs::create_dir(&not_partition).expect("mkdir");
    write(&not_partition, "readme.txt", b"hello");
    let file = write(dir.path(), "00000000000000000000.log", b"");
    for cmd in ["verify", "recover", "producers"] {
        let cases: Vec<(Vec<&std::ffi::OsStr>, &str)> = vec![
            (
                vec![cmd.as_ref(), missing.as_os_str()],
                "No such file or directory",
            ),
            (
                vec![cmd.as_ref(), not_partition.as_os_str()],
                "is neither a partition directory",
            ),
            (vec![cmd.as_ref(), file.as_os_str()], "is not a directory"),
            (vec![cmd.as_ref()], "required"),
            (
                vec![cmd.as_ref(), dir.path().as_os_str(), missing.as_os_str()],
                "unexpected argument",
            ),
            (
                vec![
                    cmd.as_ref(),
                    "--json".as_ref(),
                    "--json".as_ref(),
                    dir.path().as_os_str(),
                ],
                "cannot be used multiple times",
            ),
            (
                vec![
                    cmd.as_ref(),
                    "--no-such-flag".as_ref(),
                    dir.path().as_os_str(),
                ],
                "unexpected argument",
            ),
        ];
        for (args, needle) in cases {
            let (code, stdout, stderr) = seglog(&args);
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.contains(needle), "{args:?}: {stderr}");
            assert_eq!(stdout, "", "{args:?}");
            assert_no_panic(&stderr);
        }
    }
}

#[test]
fn unreadable_segment_is_exit_2() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let part = dir.path().join("orders-0");
    std::fs::create_dir(&part).expect("mkdir");
    let (log, _) = sample_log(0, 2);
    let path = write(&part, "00000000000000000000.log", &log);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    if std::fs::File::open(&path).is_ok() {
        // Running as root: permissions are not enforced, nothing to test.
        return;
    }
    for cmd in ["verify", "producers", "recover"] {
        let (code, stdout, stderr) = seglog(&[cmd.as_ref(), part.as_os_str()]);
        assert_eq!(code, 2, "{cmd}: {stderr}");
        assert_eq!(stdout, "", "{cmd}");
        assert_eq!(stderr.lines().count(), 1, "{cmd}: {stderr}");
        assert!(stderr.contains("Permission denied"), "{cmd}: {stderr}");
        assert_no_panic(&stderr);
    }
}
