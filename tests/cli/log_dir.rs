//! Log directories as Kafka's `LogManager` sees them: a freshly formatted log directory is one of
//! 0 partitions (exit 0 for `verify`, `recover` and `producers`); a partition that cannot be read
//! is that partition's finding while the others are still checked and the summary comes last
//! (exit 1); a path that is not a regular file (a FIFO here) is refused at once with one line,
//! never opened or read, so nothing hangs on it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use seglog::cli::Status;

use super::common::tempdir;
use super::logs::{build_partition, producers, recover, verify};

/// What `kafka-storage format` and a broker's clean shutdown leave in a log directory that has
/// no partition yet.
fn formatted_log_dir(root: &Path) {
    std::fs::write(
        root.join("meta.properties"),
        "version=1\ncluster.id=kRdP0M4tTeq8Ykt3uM-R3w\nnode.id=1\ndirectory.id=7Q4nJ1bRQ0q-6hQy0n3o7g\n",
    )
    .unwrap();
    for name in [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
    ] {
        std::fs::write(root.join(name), "0\n0\n").unwrap();
    }
    std::fs::write(root.join(".kafka_cleanshutdown"), "{}").unwrap();
}

#[test]
fn a_freshly_formatted_log_dir_has_zero_partitions() {
    let root = tempdir();
    formatted_log_dir(root.path());
    let out = verify(&[root.path().as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert_eq!(out.stdout, "0 partition(s) checked, 0 problem(s)\n");
    let out = verify(&["--json".as_ref(), root.path().as_os_str()]);
    let lines = out.json_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["partitions"], 0);
    let out = producers(&[root.path().as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    let out = recover(&[root.path().as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert!(
        out.stdout.ends_with("recovered 0 partition(s): 0 byte(s) cut, 0 file(s) moved to quarantine, 0 corrupt snapshot(s) set aside; closed cleanly\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn an_unreadable_partition_is_its_own_finding_and_the_rest_is_checked() {
    let root = tempdir();
    let (_, written) = build_partition(root.path(), "orders-0");
    let end = written.last().unwrap().last_offset + 1;
    // A directory named like a segment.
    std::fs::create_dir_all(root.path().join("orders-1/00000000000000000000.log")).unwrap();
    build_partition(root.path(), "orders-2");
    let out = verify(&[root.path().as_os_str()]);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    let lines = out.stdout_lines();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines[0].starts_with("orders-0: ok ("), "{lines:?}");
    assert!(
        lines[0].ends_with(&format!("log end offset {end})")),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("orders-1: partition: recovery would refuse the partition: ")
            && lines[1].contains("00000000000000000000.log")
            && lines[1].contains("not a regular file"),
        "{lines:?}"
    );
    assert!(lines[2].starts_with("orders-1: 1 problem(s)"), "{lines:?}");
    assert!(lines[3].starts_with("orders-2: ok ("), "{lines:?}");
    assert_eq!(lines[4], "3 partition(s) checked, 1 problem(s)");

    let out = producers(&[root.path().as_os_str()]);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    assert_eq!(
        out.stdout_lines()
            .iter()
            .filter(|l| l.starts_with("orders-"))
            .count(),
        2,
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.starts_with("orders-1: cannot be read: "),
        "{}",
        out.stderr
    );
}

/// Runs the real binary; fails the test (killing the child) if it has not exited within 20 s.
fn seglog_bounded(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = super::common::run_bounded(
        Command::new(env!("CARGO_BIN_EXE_seglog")).args(args),
        Duration::from_secs(20),
    );
    (
        out.status.code().expect("exit code"),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_at_once_never_read() {
    let root = tempdir();
    let fifo = root.path().join("00000000000000000000.log");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let (code, stdout, stderr) = seglog_bounded(&["dump".as_ref(), fifo.as_os_str()]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");

    // In a partition directory: that partition's finding (exit 1), nothing read.
    let partition = root.path().join("orders-0");
    std::fs::create_dir(&partition).unwrap();
    std::fs::rename(&fifo, partition.join("00000000000000000000.log")).unwrap();
    let (code, stdout, stderr) = seglog_bounded(&["verify".as_ref(), partition.as_os_str()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("not a regular file"), "{stdout}");
    // Refused and left untouched: damage found (exit 1), said on one line.
    let (code, _, stderr) = seglog_bounded(&["recover".as_ref(), partition.as_os_str()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    assert!(stderr.contains("left untouched"), "{stderr}");
}

fn contents(root: &Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Every file whose bytes are new or different after `recover` is in its `written:` list (the
/// lock files, checkpoints and marker of a log directory; indexes, snapshots and epoch
/// checkpoints of its partitions).
#[test]
fn recover_lists_every_file_it_created_or_rewrote() {
    let root = tempdir();
    formatted_log_dir(root.path());
    build_partition(root.path(), "orders-0");
    for full in [false, true] {
        let before = contents(root.path());
        let mut argv: Vec<&std::ffi::OsStr> = vec![root.path().as_os_str()];
        if full {
            argv.insert(0, "--full".as_ref());
        }
        let out = recover(&argv);
        assert_eq!(out.status, Status::Success, "{out:?}");
        let listed: Vec<&str> = out
            .stdout_lines()
            .into_iter()
            .filter_map(|l| l.strip_prefix("written: "))
            .collect();
        let changed: Vec<String> = contents(root.path())
            .into_iter()
            .filter(|(p, b)| before.get(p) != Some(b))
            .map(|(p, _)| p.strip_prefix(root.path()).unwrap().display().to_string())
            .collect();
        assert!(!changed.is_empty());
        for c in &changed {
            assert!(listed.contains(&c.as_str()), "{c} not in {listed:?}");
        }
        for f in [
            ".lock",
            "recovery-point-offset-checkpoint",
            ".kafka_cleanshutdown",
        ] {
            assert!(
                listed.contains(&f) || !changed.iter().any(|c| c == f),
                "{f}: {listed:?}"
            );
        }
        assert!(listed.contains(&".kafka_cleanshutdown"), "{listed:?}");
    }
}

/// A broker truncating a segment while `verify` scans it (without a lock, through a guarded
/// map): the partition is reported as one that cannot be read, because the file changed under
/// the read, with exit 1 — never a crash, a usage error or a refusal of the loader. The cut
/// lands at growing delays after `verify` starts, so some rounds see it mid-scan.
#[test]
fn a_segment_truncated_while_verify_reads_it_is_reported_unreadable() {
    use record_format::RecordBatchBuilder;
    use recovery::{AppendOrigin, LogLoader};
    let pristine = tempdir();
    let dir = pristine.path().join("orders-0");
    let mut opts = super::logs::options();
    opts.config.log.log.segment_bytes = 64 << 20;
    opts.config.log.log.index_interval_bytes = 4096;
    let (mut log, _) = LogLoader::load(&dir, &opts).unwrap();
    while log.local_log().size() < 24 << 20 {
        let mut b = RecordBatchBuilder::new(0);
        for i in 0..10 {
            b.append(1_700_000_000_000 + i, None, Some(&[b'x'; 100]), &[])
                .unwrap();
        }
        log.append_as_leader(&b.build(), 0, AppendOrigin::Client)
            .unwrap();
    }
    log.close().unwrap();
    let mut unreadable = 0;
    for round in 0..30u64 {
        let root = tempdir();
        let copy = root.path().join("orders-0");
        std::fs::create_dir(&copy).unwrap();
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
        let segment = copy.join("00000000000000000000.log");
        let cut = testkit::truncate_after(segment, Duration::from_micros(300 * round), 4096);
        let out = verify(&[copy.as_os_str()]);
        cut.join().unwrap();
        assert_ne!(out.status, Status::Usage, "round {round}: {out:?}");
        if out.stdout.contains("was truncated while it was read") {
            unreadable += 1;
            assert_eq!(out.status, Status::Damaged, "round {round}: {out:?}");
            assert!(
                out.stdout
                    .lines()
                    .any(|l| l.starts_with("orders-0: partition: cannot be read: ")
                        && l.ends_with(
                            "was truncated while it was read (another process is writing it)"
                        )),
                "round {round}: {}",
                out.stdout
            );
        }
    }
    // How many rounds land mid-scan depends on the machine.
    eprintln!("rounds reported unreadable: {unreadable} of 30");
}

/// `--threads N` (Kafka's `num.recovery.threads.per.data.dir`) checks and recovers partitions in
/// parallel: the output is the one thread's, partition by partition in order, whatever finishes
/// first; 0 threads is a usage error.
#[test]
fn threads_check_partitions_in_parallel_and_print_them_in_order() {
    let root = tempdir();
    for p in 0..6 {
        build_partition(root.path(), &format!("orders-{p}"));
    }
    // One partition damaged (a flipped byte in its first segment): its findings stay with it.
    let first = root.path().join("orders-3/00000000000000000000.log");
    let mut bytes = std::fs::read(&first).unwrap();
    *bytes.last_mut().unwrap() ^= 0xff;
    std::fs::write(&first, &bytes).unwrap();
    let one = verify(&["--threads".as_ref(), "1".as_ref(), root.path().as_os_str()]);
    assert_eq!(one.status, Status::Damaged, "{one:?}");
    let names: Vec<String> = one
        .stdout_lines()
        .iter()
        .filter(|l| l.starts_with("orders-"))
        .filter_map(|l| l.split(':').next().map(str::to_owned))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "{one:?}");
    for threads in ["2", "5", "64"] {
        let many = verify(&[
            "--threads".as_ref(),
            threads.as_ref(),
            root.path().as_os_str(),
        ]);
        assert_eq!(many.status, one.status, "{many:?}");
        assert_eq!(many.stdout, one.stdout, "--threads {threads}");
    }
    let json = verify(&[
        "--json".as_ref(),
        "--threads".as_ref(),
        "3".as_ref(),
        root.path().as_os_str(),
    ]);
    let partitions: Vec<String> = json
        .json_lines()
        .iter()
        .filter(|l| l["type"] == "partition")
        .map(|l| l["partition"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        partitions,
        (0..6).map(|p| format!("orders-{p}")).collect::<Vec<_>>()
    );

    let (code, _, stderr) = seglog_bounded(&[
        "verify".as_ref(),
        "--threads".as_ref(),
        "0".as_ref(),
        root.path().as_os_str(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--threads"), "{stderr}");

    let out = recover(&["--threads".as_ref(), "3".as_ref(), root.path().as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert!(
        out.stdout.contains("recovered 6 partition(s)"),
        "{}",
        out.stdout
    );
}
