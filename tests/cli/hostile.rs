//! Hostile log directories: a symlink planted at a name seglog reads or writes, a partition
//! directory symlinked out of the log directory, a FIFO among the checkpoints. Nothing outside
//! the log directory is written, the partition concerned is refused with its reason and left
//! byte for byte as it was, and the other partitions are recovered (exit 1).

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use seglog::cli::Status;

use super::common::tempdir;
use super::logs::{build_partition, recover, verify};

/// Every file under `root` (not following symlinks) with its bytes; a symlink as its target.
fn image(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.insert(p, target.into_os_string().into_encoded_bytes());
            } else if t.is_dir() {
                stack.push(p);
            } else if t.is_file() {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A log directory `logs/` of two partitions after an unclean shutdown (no marker, no
/// checkpoints: recovery rewrites indexes, snapshots and the epoch checkpoint of both), and a
/// folder `outside/` beside it holding a file the symlinks point at.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let root = tempdir();
    let logs = root.path().join("logs");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    build_partition(&logs, "orders-0");
    build_partition(&logs, "orders-1");
    std::fs::write(
        outside.join("victim"),
        b"precious bytes outside the log dir",
    )
    .unwrap();
    (root, logs, outside)
}

/// Names recovery of `orders-0` writes, creates, renames or reads as files.
fn partition_names(p: &Path) -> Vec<String> {
    let mut names: Vec<String> = vec![
        ".lock".into(),
        "leader-epoch-checkpoint".into(),
        "leader-epoch-checkpoint.tmp".into(),
        "quarantine".into(),
    ];
    for e in std::fs::read_dir(p).unwrap().flatten() {
        let n = e.file_name().into_string().unwrap();
        if n.ends_with(".log") {
            let base = n.trim_end_matches(".log");
            names.push(format!("{base}.txnindex"));
            names.push(format!("{base}.index"));
            names.push(format!("{base}.timeindex"));
        }
        if n.ends_with(".snapshot") {
            names.push(format!("{n}.tmp"));
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn a_symlink_at_any_name_recovery_writes_refuses_that_partition_and_writes_nothing_outside() {
    let (_root, logs, _) = setup();
    let names = partition_names(&logs.join("orders-0"));
    assert!(names.len() >= 12, "{names:?}");
    for name in names {
        let (_root, logs, outside) = setup();
        let victim = outside.join("victim");
        let p0 = logs.join("orders-0");
        // Replace the file if it exists: a symlink in its place.
        let at = p0.join(&name);
        if at.is_dir() {
            std::fs::remove_dir_all(&at).unwrap();
        } else if at.exists() {
            std::fs::remove_file(&at).unwrap();
        }
        symlink(&victim, &at).unwrap();
        let outside_before = image(&outside);
        let p0_before = image(&p0);

        let v = verify(&[logs.as_os_str()]);
        assert_eq!(v.status, Status::Damaged, "{name}: {v:?}");
        assert!(
            v.stdout.contains(&format!("{name} is a symlink")),
            "{name}: {}",
            v.stdout
        );

        let out = recover(&[logs.as_os_str()]);
        assert_eq!(out.status, Status::Damaged, "{name}: {out:?}");
        assert!(
            out.stdout.contains("orders-0: refused, left untouched: ")
                && out.stdout.contains(&format!("{name} is a symlink")),
            "{name}: {}",
            out.stdout
        );
        // The other partition was recovered.
        assert!(
            out.stdout.contains("orders-1: unclean shutdown, recovered"),
            "{name}: {}",
            out.stdout
        );
        assert_eq!(image(&outside), outside_before, "{name}: written outside");
        assert_eq!(
            image(&p0),
            p0_before,
            "{name}: the refused partition changed"
        );
    }
}

#[test]
fn a_partition_dir_symlinked_out_of_the_log_dir_is_offline_and_untouched() {
    let (_root, logs, outside) = setup();
    // orders-0 moved outside, a symlink left in its place.
    let moved = outside.join("orders-0");
    std::fs::rename(logs.join("orders-0"), &moved).unwrap();
    symlink(&moved, logs.join("orders-0")).unwrap();
    let before = image(&outside);

    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    assert!(
        out.stdout.contains("orders-0: refused, left untouched: ")
            && out.stdout.contains("orders-0 is a symlink"),
        "{}",
        out.stdout
    );
    assert_eq!(image(&outside), before, "written outside (.lock, indexes)");

    // The library: the partition is offline with its reason, and is not created again.
    let mut dir = seglog::LogDir::open(&logs, seglog::Config::default()).unwrap();
    assert_eq!(dir.offline_partitions().len(), 1);
    let tp = seglog::TopicPartition::new("orders", 0);
    assert!(dir.partition(&tp).is_none());
    let Err(e) = dir.create_partition(tp) else {
        panic!("an offline partition is not recreated");
    };
    assert!(matches!(e, seglog::Error::PartitionOffline { .. }), "{e}");
    dir.close().unwrap();
    assert_eq!(image(&outside), before, "written outside by LogDir");
}

#[test]
fn a_symlinked_log_dir_file_refuses_the_directory_before_anything_changes() {
    for name in [
        ".lock",
        ".kafka_cleanshutdown",
        "recovery-point-offset-checkpoint.tmp",
        "log-start-offset-checkpoint.tmp",
        "replication-offset-checkpoint.tmp",
        "replication-offset-checkpoint",
    ] {
        let (_root, logs, outside) = setup();
        symlink(outside.join("victim"), logs.join(name)).unwrap();
        let before = image(&logs);
        let outside_before = image(&outside);
        let out = recover(&[logs.as_os_str()]);
        assert_ne!(out.status, Status::Success, "{name}: {out:?}");
        assert!(
            out.stderr.contains(&format!("{name} is a symlink")),
            "{name}: {}",
            out.stderr
        );
        assert_eq!(image(&outside), outside_before, "{name}: written outside");
        assert_eq!(image(&logs), before, "{name}: the log dir changed");
    }
}

#[test]
fn the_log_dir_named_may_itself_be_a_symlink() {
    let (root, logs, _) = setup();
    let link = root.path().join("link-to-logs");
    symlink(&logs, &link).unwrap();
    let out = recover(&[link.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert!(
        out.stdout.contains("recovered 2 partition(s)"),
        "{}",
        out.stdout
    );
    let dir = seglog::LogDir::open(&link, seglog::Config::default()).unwrap();
    assert_eq!(dir.partitions().count(), 2);
    dir.close().unwrap();
}
