//! Hostile log directories: a symlink planted at a name seglog reads or writes, a partition
//! directory symlinked out of the log directory, a FIFO among the checkpoints. Nothing outside
//! the log directory is written, the partition concerned is refused with its reason and left
//! byte for byte as it was, and the other partitions are recovered (exit 1).

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use seglog::cli::Status;

use super::common::tempdir;
use super::logs::{build_partition, files, recover, verify};

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
    for name in [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
    ] {
        std::fs::write(logs.join(name), "0\n2\norders 0 7\norders 1 0\n").unwrap();
    }
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
    // The offline partition keeps its checkpoint entries, and the directory gets no
    // clean-shutdown marker: the partition still needs the recovery it was refused.
    for name in [
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
    ] {
        let text = std::fs::read_to_string(logs.join(name)).unwrap();
        assert!(text.contains("orders 0 7\n"), "{name}: {text}");
    }
    assert!(!logs.join(".kafka_cleanshutdown").exists());

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

/// The bytes of every file under `dir` (its quarantine included), as a multiset.
fn contents_anywhere(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = image(dir).into_values().collect();
    v.sort();
    v
}

#[test]
fn a_log_start_checkpoint_past_the_end_is_found_and_nothing_is_deleted() {
    let (_root, logs, _) = setup();
    let p0 = logs.join("orders-0");
    let snapshots: Vec<Vec<u8>> = files(&p0, ".snapshot")
        .into_iter()
        .map(|(_, p)| std::fs::read(p).unwrap())
        .collect();
    let segments: Vec<Vec<u8>> = files(&p0, ".log")
        .into_iter()
        .map(|(_, p)| std::fs::read(p).unwrap())
        .collect();
    assert!(!snapshots.is_empty() && segments.len() > 1);
    std::fs::write(
        logs.join("log-start-offset-checkpoint"),
        "0\n1\norders 0 1000\n",
    )
    .unwrap();

    let v = verify(&[p0.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    assert!(
        v.stdout
            .contains("log start offset 1000 is past the end of the log")
            && v.stdout.contains("moves the whole log to quarantine"),
        "{}",
        v.stdout
    );

    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    // Every segment and every snapshot is still somewhere, byte for byte, and reported.
    let after = contents_anywhere(&p0);
    for bytes in snapshots.iter().chain(&segments) {
        assert!(after.contains(bytes), "a file was deleted: {}", out.stdout);
    }
    let moved = out
        .stdout
        .lines()
        .filter(|l| l.contains("moved to quarantine") && l.contains(".snapshot"))
        .count();
    assert_eq!(moved, snapshots.len(), "{}", out.stdout);
}

#[test]
fn corrupt_and_out_of_range_snapshots_go_to_quarantine_not_away() {
    let (_root, logs, _) = setup();
    let p0 = logs.join("orders-0");
    let snaps = files(&p0, ".snapshot");
    // The oldest snapshot corrupted; one copied far beyond the log end.
    let (_, oldest) = &snaps[0];
    let mut bytes = std::fs::read(oldest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(oldest, &bytes).unwrap();
    let beyond = p0.join(format!("{:020}.snapshot", 100_000));
    std::fs::copy(&snaps[snaps.len() - 1].1, &beyond).unwrap();
    let beyond_bytes = std::fs::read(&beyond).unwrap();

    let v = verify(&[p0.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    assert!(
        v.stdout.contains("recovery moves it to quarantine"),
        "{}",
        v.stdout
    );
    let out = recover(&["--full".as_ref(), logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    let after = contents_anywhere(&p0);
    assert!(
        after.contains(&bytes),
        "the corrupt snapshot was deleted: {}",
        out.stdout
    );
    assert!(
        after.contains(&beyond_bytes) && !beyond.exists(),
        "the snapshot beyond the end: {}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("{:020}.snapshot", 100_000)),
        "not reported: {}",
        out.stdout
    );
}

/// Runs the real binary; fails the test (killing the child) if it has not exited within 20 s.
fn seglog_bounded(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let out = super::common::run_bounded(
        std::process::Command::new(env!("CARGO_BIN_EXE_seglog")).args(args),
        std::time::Duration::from_secs(20),
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().expect("exit code"), text)
}

/// A FIFO renamed over a segment and back, again and again, while `verify` runs: whichever it
/// meets, a listing that says "file" and an open that finds a FIFO, or the other way round, it
/// never blocks (the open is non-blocking and the handle is checked after it).
#[test]
fn a_fifo_swapped_in_during_a_scan_never_blocks_verify() {
    let (_root, logs, outside) = setup();
    let p0 = logs.join("orders-0");
    let (_, seg) = files(&p0, ".log").into_iter().next().unwrap();
    let regular = outside.join("regular");
    let fifo = outside.join("fifo");
    std::fs::copy(&seg, &regular).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    // The swapping files must be on the same file system as the segment: link them in.
    let (fifo_in, regular_in) = (p0.join("fifo"), p0.join("regular"));
    std::fs::rename(&fifo, &fifo_in).unwrap();
    std::fs::rename(&regular, &regular_in).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, seg) = (stop.clone(), seg.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // FIFO in, then the regular file back in (each rename atomic).
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &fifo_in,
                    rustix::fs::CWD,
                    &seg,
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &fifo_in,
                    rustix::fs::CWD,
                    &seg,
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let mut statuses = BTreeMap::new();
    for _ in 0..40 {
        let (code, text) = seglog_bounded(&["verify".as_ref(), p0.as_os_str()]);
        assert!(code == 0 || code == 1, "{code}: {text}");
        *statuses.entry(code).or_insert(0) += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
    assert!(!statuses.is_empty());
}

/// A stray `.log.swap` (one CRC-valid batch, the segment's first, short of the segment's other
/// offsets): `verify` reports it as recover's action, `recover` moves it to quarantine (reported),
/// keeps the segment it would have replaced and the log end with it.
#[test]
fn a_stray_swap_is_quarantined_and_the_log_it_would_replace_stays() {
    let (_root, logs, _) = setup();
    let p0 = logs.join("orders-0");
    let segs = files(&p0, ".log");
    assert!(segs.len() > 1, "{segs:?}");
    let (_, seg) = &segs[0];
    let seg_bytes = std::fs::read(seg).unwrap();
    // The segment's first batch: its length is at bytes 8..12, after the 8-byte base offset.
    let len = u32::from_be_bytes(seg_bytes[8..12].try_into().unwrap()) as usize;
    assert!(
        12 + len < seg_bytes.len(),
        "the segment holds more than one batch"
    );
    let swap_bytes = seg_bytes[..12 + len].to_vec();
    let mut swap = seg.clone().into_os_string();
    swap.push(".swap");
    let swap = PathBuf::from(swap);
    let before = verify(&[p0.as_os_str()]);
    std::fs::write(&swap, &swap_bytes).unwrap();

    let v = verify(&[p0.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    assert!(
        v.stdout.contains("stray swap") && v.stdout.contains("recovery moves it to quarantine"),
        "{}",
        v.stdout
    );
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert_eq!(std::fs::read(seg).unwrap(), seg_bytes, "the segment stays");
    assert!(!swap.exists());
    assert!(
        contents_anywhere(&p0).contains(&swap_bytes),
        "the swap was deleted: {}",
        out.stdout
    );
    let swap_name = swap.file_name().unwrap().to_str().unwrap();
    assert!(
        out.stdout
            .lines()
            .any(|l| l.contains("moved to quarantine") && l.contains(swap_name)),
        "not reported: {}",
        out.stdout
    );
    // The log end is what it was before the swap was planted.
    let after = verify(&[p0.as_os_str()]);
    assert_eq!(after.status, Status::Success, "{after:?}");
    let end = |s: &str| {
        s.lines()
            .find_map(|l| l.split("log end offset ").nth(1).map(str::to_owned))
    };
    assert!(end(&after.stdout).is_some(), "{}", after.stdout);
    assert_eq!(end(&after.stdout), end(&before.stdout), "{}", before.stdout);
}

/// A 1 GiB sparse `.index` (more than `segment.index.bytes`) on the first and on the active
/// segment: `verify` reports each as a finding recovery acts on, `recover` rebuilds them
/// (exit 0) instead of failing to resize them, and the log end is what it was.
#[test]
fn an_oversized_index_is_a_finding_and_recover_rebuilds_it() {
    let (_root, logs, _) = setup();
    let p0 = logs.join("orders-0");
    let indexes = files(&p0, ".index");
    assert!(indexes.len() > 1, "{indexes:?}");
    let before = verify(&[p0.as_os_str()]);
    assert_eq!(before.status, Status::Success, "{before:?}");
    const GIB: u64 = 1 << 30;
    for (_, path) in [&indexes[0], &indexes[indexes.len() - 1]] {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(GIB).unwrap();
    }

    let v = verify(&[p0.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    let found = v
        .stdout
        .lines()
        .filter(|l| l.contains(&GIB.to_string()) && l.contains("recovery rebuilds"))
        .count();
    assert_eq!(found, 2, "{}", v.stdout);
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    for (_, path) in [&indexes[0], &indexes[indexes.len() - 1]] {
        let len = std::fs::metadata(path).unwrap().len();
        assert!(len <= 10 << 20, "{}: {len} bytes", path.display());
    }
    let after = verify(&[p0.as_os_str()]);
    assert_eq!(after.status, Status::Success, "{after:?}");
    let end = |s: &str| {
        s.lines()
            .find_map(|l| l.split("log end offset ").nth(1).map(str::to_owned))
    };
    assert_eq!(end(&after.stdout), end(&before.stdout), "{}", after.stdout);
}

/// A segment's `.index` and `.timeindex` deleted after a clean shutdown: `verify` reports both as
/// findings recovery acts on, and after `recover` both are back and `verify` says ok.
#[test]
fn missing_indexes_are_findings_and_recover_rebuilds_them() {
    let (_root, logs, _) = setup();
    let p0 = logs.join("orders-0");
    // A clean shutdown first: recovery is skipped unless an index fails its checks.
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    std::fs::write(logs.join(".kafka_cleanshutdown"), b"").unwrap();
    let (_, index) = &files(&p0, ".index")[0];
    let (_, time) = &files(&p0, ".timeindex")[0];
    let (index_bytes, time_bytes) = (std::fs::read(index).unwrap(), std::fs::read(time).unwrap());
    std::fs::remove_file(index).unwrap();
    std::fs::remove_file(time).unwrap();

    let v = verify(&[p0.as_os_str()]);
    assert_eq!(v.status, Status::Damaged, "{v:?}");
    let found = v
        .stdout
        .lines()
        .filter(|l| l.contains("missing") && l.contains("recovery rebuilds"))
        .count();
    assert_eq!(found, 2, "{}", v.stdout);
    let out = recover(&[logs.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{out:?}");
    assert_eq!(std::fs::read(index).unwrap(), index_bytes);
    assert_eq!(std::fs::read(time).unwrap(), time_bytes);
    let after = verify(&[p0.as_os_str()]);
    assert_eq!(after.status, Status::Success, "{after:?}");
}
