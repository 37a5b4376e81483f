//! Names as Kafka parses them, and the log directory's own checkpoints: a topic-partition Kafka
//! could not have created is refused at create; a folder whose name cannot be a partition, or
//! two folders naming one partition, are findings, never loaded and left byte for byte; a lone
//! non-canonical folder (`orders-00`) loads as Kafka loads it, with a warning; what Kafka keeps
//! in a log directory is not a finding; an unreadable log-directory checkpoint is a `verify`
//! finding (with its line) and a `recover` warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use seglog::cli::Status;

use super::common::tempdir;
use super::logs::{build_partition, recover, tree, verify};

/// A log directory `logs/` holding `orders-0` and `orders-1`, recovered and closed once (its
/// checkpoints and clean-shutdown marker written), inside a temp dir.
fn clean_log_dir() -> (tempfile::TempDir, PathBuf) {
    let root = tempdir();
    let logs = root.path().join("logs");
    build_partition(&logs, "orders-0");
    build_partition(&logs, "orders-1");
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    (root, logs)
}

/// Copies the files of `from` into a new folder `to` (a second folder with the same data).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn topic_partitions_kafka_could_not_create_are_refused_at_create() {
    let root = tempdir();
    let logs = root.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut dir = seglog::LogDir::open(&logs, seglog::Config::default()).unwrap();
    for (topic, partition) in [
        ("../escape", 0),
        ("neg", -1),
        ("", 0),
        ("..", 0),
        ("a b", 0),
        ("x/y", 1),
    ] {
        let tp = seglog::TopicPartition::new(topic, partition);
        match dir.create_partition(tp.clone()) {
            Err(seglog::Error::InvalidPartition { partition, .. }) => assert_eq!(partition, tp),
            Err(e) => panic!("{tp}: {e}"),
            Ok(_) => panic!("{tp:?} was created"),
        }
    }
    dir.close().unwrap();
    assert!(
        !root.path().join("escape-0").exists(),
        "a folder was created outside the log directory"
    );
    let folders: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert!(folders.is_empty(), "{folders:?}");
    // `Log::open` refuses a folder whose name is not a valid topic-partition.
    let Err(e) = seglog::Log::open(logs.join("a%b-0"), seglog::Config::default()) else {
        panic!("a%b-0 opened");
    };
    assert!(matches!(e, seglog::Error::InvalidPartition { .. }), "{e}");
    assert!(!logs.join("a%b-0").exists());
}

#[test]
fn two_folders_for_one_partition_are_refused_and_left_untouched() {
    let (_root, logs) = clean_log_dir();
    copy_dir(&logs.join("orders-0"), &logs.join("orders-00"));
    // An unclean shutdown: recovery would rewrite indexes and snapshots of what it loads.
    std::fs::remove_file(logs.join(".kafka_cleanshutdown")).unwrap();
    let before: Vec<BTreeMap<PathBuf, Vec<u8>>> = ["orders-0", "orders-00"]
        .iter()
        .map(|n| tree(&logs.join(n)))
        .collect();

    let v = verify(&[logs.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    for name in ["orders-0", "orders-00"] {
        assert!(
            v.stdout.contains(&format!(
                "{name}: refused, left untouched: 2 folders name partition orders-0 \
                 (orders-0, orders-00)"
            )),
            "{}",
            v.stdout
        );
    }
    for round in 0..4 {
        let out = recover(&[logs.as_os_str()]);
        assert_eq!(out.status, Status::Damaged, "round {round}: {out:?}");
        assert!(
            out.stdout
                .contains("orders-00: refused, left untouched: 2 folders")
                && out
                    .stdout
                    .contains("orders-0: refused, left untouched: 2 folders")
                && out.stdout.contains("recovered 1 partition(s)"),
            "round {round}: {}",
            out.stdout
        );
        let after: Vec<_> = ["orders-0", "orders-00"]
            .iter()
            .map(|n| tree(&logs.join(n)))
            .collect();
        assert!(after == before, "round {round}: a duplicate folder changed");
    }
    let mut dir = seglog::LogDir::open(&logs, seglog::Config::default()).unwrap();
    let tp = seglog::TopicPartition::new("orders", 0);
    assert!(dir.partition(&tp).is_none());
    assert_eq!(dir.offline_partitions().len(), 2);
    assert!(matches!(
        dir.create_partition(tp),
        Err(seglog::Error::PartitionOffline { .. })
    ));
    dir.close().unwrap();
}

#[test]
fn a_lone_non_canonical_folder_loads_as_kafka_parses_it_with_a_warning() {
    let (_root, logs) = clean_log_dir();
    std::fs::rename(logs.join("orders-0"), logs.join("orders-00")).unwrap();
    std::fs::remove_file(logs.join(".kafka_cleanshutdown")).unwrap();
    let v = verify(&[logs.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    assert!(
        v.stdout.contains(
            "orders-00: the folder name is not the one Kafka gives partition orders-0 \
             (orders-0): loaded as orders-0"
        ),
        "{}",
        v.stdout
    );
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert!(
        out.stdout
            .contains("warning: orders-00: the folder name is not")
            && out.stdout.contains("recovered 2 partition(s)"),
        "{}",
        out.stdout
    );
    let dir = seglog::LogDir::open(&logs, seglog::Config::default()).unwrap();
    let log = dir
        .partition(&seglog::TopicPartition::new("orders", 0))
        .expect("orders-00 loaded as orders-0");
    assert!(log.log_end_offset() > 0);
    assert_eq!(dir.non_canonical_partitions().len(), 1);
    dir.close().unwrap();
}

#[test]
fn folders_whose_names_cannot_be_partitions_are_findings_and_never_loaded() {
    let (_root, logs) = clean_log_dir();
    let bad = ["-1", "-0", "a b-0", "a%b-0", "..-0", "orders-x"];
    for name in bad {
        copy_dir(&logs.join("orders-1"), &logs.join(name));
    }
    std::fs::remove_file(logs.join(".kafka_cleanshutdown")).unwrap();
    let before: Vec<_> = bad.iter().map(|n| tree(&logs.join(n))).collect();

    let v = verify(&[logs.as_os_str(), "--json".as_ref()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    for name in bad {
        let found = v.stdout.lines().any(|l| {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            j["kind"] == "badPartitionDir" && j["file"] == name
        });
        assert!(found, "{name}: {}", v.stdout);
    }
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Damaged, "{out:?}");
    for name in bad {
        assert!(
            out.stdout
                .contains(&format!("{name}: refused, left untouched: ")),
            "{name}: {}",
            out.stdout
        );
    }
    let after: Vec<_> = bad.iter().map(|n| tree(&logs.join(n))).collect();
    assert!(after == before, "a refused folder was loaded");
    let dir = seglog::LogDir::open(&logs, seglog::Config::default()).unwrap();
    assert_eq!(dir.partitions().count(), 2);
    assert_eq!(dir.offline_partitions().len(), bad.len());
    assert!(dir
        .offline_partitions()
        .iter()
        .all(|o| o.partition.is_none()));
    dir.close().unwrap();
}

#[test]
fn what_kafka_keeps_in_a_log_dir_is_not_a_finding() {
    let (_root, logs) = clean_log_dir();
    for name in [
        "orders-2.0123456789abcdef-delete",
        "orders-0.0123456789abcdef-future",
        "orders-3.0123456789abcdef-stray",
        "remote-log-index-cache",
    ] {
        copy_dir(&logs.join("orders-1"), &logs.join(name));
    }
    std::fs::write(logs.join("meta.properties"), "version=1\nnode.id=1\n").unwrap();
    std::fs::write(logs.join("bootstrap.checkpoint"), [0u8, 1, 2, 3]).unwrap();
    std::fs::write(logs.join("cleaner-offset-checkpoint"), "0\n1\norders 1 0\n").unwrap();

    let v = verify(&[logs.as_os_str()]);
    assert_eq!(v.status, Status::Success, "{v:?}");
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert!(
        !out.stdout.contains("warning") && !out.stdout.contains("refused"),
        "{}",
        out.stdout
    );
}

#[test]
fn each_unreadable_log_dir_checkpoint_is_a_verify_finding_and_a_recover_warning() {
    let cases = [
        (
            "recovery-point-offset-checkpoint",
            "0\n2\norders 0 3\norders x 4\n",
            4,
            "recovers every partition from offset 0",
        ),
        (
            "log-start-offset-checkpoint",
            "1\n0\n",
            1,
            "starts each log at its first segment's base offset",
        ),
        (
            "replication-offset-checkpoint",
            "0\n3\norders 0 3\n",
            2,
            "starts each partition's high watermark at its log start offset",
        ),
        (
            "cleaner-offset-checkpoint",
            "0\nmany\n",
            2,
            "cleans each compacted log from its start",
        ),
    ];
    for (file, garbage, line, consequence) in cases {
        let (_root, logs) = clean_log_dir();
        std::fs::write(logs.join(file), garbage).unwrap();
        let want = format!("{file}: unreadable (line {line}: ");
        for target in [logs.clone(), logs.join("orders-0")] {
            let v = verify(&[target.as_os_str()]);
            assert_eq!(v.status, Status::Damaged, "{file}: {v:?}");
            assert!(
                v.stdout.contains(&want) && v.stdout.contains(consequence),
                "{file}: {}",
                v.stdout
            );
        }
        let out = recover(&[logs.as_os_str()]);
        assert_eq!(out.status, Status::Success, "{file}: {out:?}");
        assert!(
            out.stdout.contains(&format!("warning: {want}")) && out.stdout.contains(consequence),
            "{file}: {}",
            out.stdout
        );
    }
}

#[test]
fn an_oversized_log_dir_checkpoint_is_a_finding_that_names_its_size() {
    let (_root, logs) = clean_log_dir();
    let f = std::fs::File::create(logs.join("recovery-point-offset-checkpoint")).unwrap();
    f.set_len(9 << 20).unwrap();
    let v = verify(&[logs.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    assert!(
        v.stdout
            .contains("recovery-point-offset-checkpoint: unreadable (")
            && v.stdout.contains(&(9u64 << 20).to_string()),
        "{}",
        v.stdout
    );
}
