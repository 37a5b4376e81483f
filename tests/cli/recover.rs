//! `seglog recover` on the damaged partitions of `verify`'s tests: the report's numbers, the
//! quarantine holding exactly the bytes (and files) that were cut, exit 0 once the log is usable
//! again, and a clean `verify` afterwards; a log directory's clean-shutdown marker honoured
//! unless `--full`; `--json` parses; no escape codes when stderr is not a terminal.

use std::path::Path;

use seglog::cli::Status;

use super::common::tempdir;
use super::logs::{batches, build_partition, damage, files, recover, verify, Damage};

fn json_report(dir: &Path) -> (super::common::Output, Vec<serde_json::Value>) {
    let out = recover(&["--json".as_ref(), dir.as_os_str()]);
    let lines = out.json_lines();
    (out, lines)
}

fn verify_is_clean(dir: &Path) {
    let out = verify(&[dir.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stdout);
}

#[test]
fn flipped_byte_cuts_the_segment_and_quarantines_later_segments() {
    let root = tempdir();
    let (dir, _) = build_partition(root.path(), "orders-0");
    let logs = files(&dir, ".log");
    let originals: Vec<Vec<u8>> = logs
        .iter()
        .map(|(_, p)| std::fs::read(p).unwrap())
        .collect();
    let d = damage(&dir, Damage::FlippedByte);
    let p = batches(&d.original)[1].0;
    let cut = d.original.len() as u64 - p;

    let (out, lines) = json_report(&dir);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    let r = &lines[0];
    assert_eq!(r["partition"], "orders-0");
    assert_eq!(r["cleanShutdown"], false);
    assert_eq!(r["cut"].as_array().unwrap().len(), 1);
    let c = &r["cut"][0];
    assert_eq!(c["segment"], logs[1].0);
    assert_eq!(c["position"], p);
    assert_eq!(c["bytes"], cut);
    assert_eq!(c["reason"]["kind"], "crcMismatch");
    assert_eq!(r["segmentsScanned"], 2);
    assert_eq!(r["keptBytes"], originals[0].len() as u64 + p);
    assert_eq!(r["logEndOffset"], batches(&d.original)[0].2 + 1);

    // The quarantine holds the cut bytes (with the flipped byte) and the later segments as they were.
    let q = dir.join("quarantine/0001");
    let mut damaged = d.original.clone();
    damaged[(p + batches(&d.original)[1].1 - 2) as usize] ^= 0x40;
    let cut_file = q.join(format!("{:020}.log.cut-{p}", logs[1].0));
    assert_eq!(c["quarantinedTo"], cut_file.display().to_string());
    assert_eq!(std::fs::read(&cut_file).unwrap(), &damaged[p as usize..]);
    for ((base, _), bytes) in logs.iter().zip(&originals).skip(2) {
        assert_eq!(
            &std::fs::read(q.join(format!("{base:020}.log"))).unwrap(),
            bytes
        );
    }
    let moved: Vec<&str> = r["quarantinedFiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for (base, _) in logs.iter().skip(2) {
        assert!(
            moved
                .iter()
                .any(|m| m.ends_with(&format!("{base:020}.log"))),
            "{moved:?}"
        );
    }
    assert_eq!(
        std::fs::read(&logs[1].1).unwrap(),
        &d.original[..p as usize]
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["bytesCut"], cut);
    assert_eq!(summary["closed"], true);
    verify_is_clean(&dir);
}

#[test]
fn torn_tail_text_report() {
    let root = tempdir();
    let (dir, written) = build_partition(root.path(), "orders-0");
    let d = damage(&dir, Damage::TornTail);
    let b = batches(&d.original);
    let &(p, size, _) = b.last().unwrap();
    let base = files(&dir, ".log").last().unwrap().0;
    let out = recover(&[dir.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    let lines = out.stdout_lines();
    let cut_file = dir.join(format!("quarantine/0001/{base:020}.log.cut-{p}"));
    let new_end = written.last().unwrap().first_offset;
    assert!(
        lines[0].starts_with("orders-0: unclean shutdown, recovered "),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains(&format!(
            "; cut 20 bytes of segment {base} at byte {p} (truncated: need {size} bytes, have 20 \
             at byte position {p}) -> {}",
            cut_file.display()
        )),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains(&format!("; log [0, {new_end})")),
        "{}",
        lines[0]
    );
    assert!(lines.contains(&"recovered 1 partition(s): 20 byte(s) cut, 1 file(s) moved to quarantine, 0 corrupt snapshot(s) set aside; closed cleanly"), "{lines:?}");
    // The one file moved is the snapshot at the old log end.
    let old_end = written.last().unwrap().last_offset + 1;
    assert!(
        lines.contains(
            &format!("  moved to quarantine: quarantine/0001/{old_end:020}.snapshot").as_str()
        ),
        "{lines:?}"
    );
    assert_eq!(
        std::fs::read(&cut_file).unwrap(),
        &d.original[p as usize..p as usize + 20]
    );
    verify_is_clean(&dir);
}

#[test]
fn index_past_the_log_is_rebuilt_without_cuts() {
    let root = tempdir();
    let (dir, _) = build_partition(root.path(), "orders-0");
    damage(&dir, Damage::IndexPastLog);
    let (out, lines) = json_report(&dir);
    assert_eq!(out.status, Status::Success);
    assert_eq!(lines[0]["cut"].as_array().unwrap().len(), 0);
    assert_eq!(lines[0]["segmentsScanned"], files(&dir, ".log").len());
    assert!(!dir.join("quarantine").exists());
    verify_is_clean(&dir);
}

#[test]
fn corrupt_snapshot_is_set_aside_after_a_clean_shutdown() {
    // After a clean shutdown the loader reads the newest snapshot: a corrupt one is renamed
    // `*.corrupt` and an older one plus a replay is used. (Without the marker every segment is
    // recovered and the snapshot at the log end is simply written again.)
    let root = tempdir();
    let (dir, written) = build_partition(root.path(), "orders-0");
    let loaded = recovery::load_log_dir(root.path(), &recovery::Config::default()).unwrap();
    loaded.close().unwrap();
    let d = damage(&dir, Damage::CorruptSnapshot);
    let end = written.last().unwrap().last_offset + 1;
    assert!(
        d.file.ends_with(format!("{end:020}.snapshot")),
        "{}",
        d.file.display()
    );
    let (out, lines) = json_report(root.path());
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    assert_eq!(lines[0]["cleanShutdown"], true);
    let aside = lines[0]["snapshotsSetAside"].as_array().unwrap();
    assert_eq!(aside.len(), 1, "{}", lines[0]);
    let aside = Path::new(aside[0].as_str().unwrap());
    assert!(
        aside.to_string_lossy().ends_with(".corrupt"),
        "{}",
        aside.display()
    );
    let mut corrupt = d.original.clone();
    corrupt[d.position as usize] ^= 0x01;
    assert_eq!(
        std::fs::read(aside).unwrap(),
        corrupt,
        "set aside byte for byte"
    );
    assert_eq!(lines.last().unwrap()["snapshotsSetAside"], 1);
    verify_is_clean(&dir);
}

#[test]
fn log_dir_clean_shutdown_is_honoured_unless_full() {
    let root = tempdir();
    build_partition(root.path(), "orders-0");
    build_partition(root.path(), "orders-1");
    // A broker's clean shutdown of the whole log directory: checkpoints and the marker.
    let loaded = recovery::load_log_dir(root.path(), &recovery::Config::default()).unwrap();
    loaded.close().unwrap();
    assert!(root.path().join(".kafka_cleanshutdown").exists());

    let out = recover(&[root.path().as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    let all = out.stdout_lines();
    // The batches were written with timestamps of 2023 and `producer.id.expiration.ms` is a
    // day: loading expires the three producers without an open transaction, and says so.
    let expired: Vec<&&str> = all
        .iter()
        .filter(|l| l.starts_with("  expiredAtLoad: "))
        .collect();
    assert_eq!(expired.len(), 6, "{all:?}");
    for pid in [5, 6, 8] {
        let prefix = format!("  expiredAtLoad: producerId: {pid} ");
        assert_eq!(expired.iter().filter(|l| l.starts_with(&prefix)).count(), 2);
    }
    let lines: Vec<&str> = all
        .iter()
        .filter(|l| !l.starts_with("  expiredAtLoad: "))
        .copied()
        .collect();
    assert!(
        lines[0].starts_with("orders-0: clean shutdown, no recovery;"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("orders-1: clean shutdown, no recovery;"),
        "{lines:?}"
    );
    assert!(
        root.path().join(".kafka_cleanshutdown").exists(),
        "closed cleanly again"
    );

    let segments = files(&root.path().join("orders-0"), ".log").len();
    let out = recover(&["--full".as_ref(), root.path().as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    let lines = out.stdout_lines();
    assert!(
        lines[0].starts_with(&format!(
            "orders-0: clean shutdown, recovered {segments} segment(s) from base offset 0: 10 batches"
        )),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().unwrap(),
        &"recovered 2 partition(s): 0 byte(s) cut, 0 file(s) moved to quarantine, 0 corrupt snapshot(s) set aside; closed cleanly"
    );
}

#[test]
fn piped_stderr_gets_no_progress_bar_or_escape_codes() {
    let root = tempdir();
    let (dir, _) = build_partition(root.path(), "orders-0");
    damage(&dir, Damage::TornTail);
    let (code, stdout, stderr) = super::run::seglog(&["recover".as_ref(), dir.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr, "");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\r'),
        "{stdout:?}"
    );
    assert!(stdout.contains("20 bytes"), "{stdout}");
}

/// `verify --json` is the dry run of `recover --full --json`: for each damage, the partition
/// lines agree on the log start and end offsets, the producers and every cut (segment, position,
/// bytes), and verify changed nothing that recover then found.
#[test]
fn verify_predicts_what_recover_full_does() {
    for d in [
        None,
        Some(Damage::FlippedByte),
        Some(Damage::TornTail),
        Some(Damage::IndexPastLog),
        Some(Damage::CorruptSnapshot),
    ] {
        let root = tempdir();
        let (dir, _) = build_partition(root.path(), "orders-0");
        if let Some(d) = d {
            damage(&dir, d);
        }
        let v = verify(&["--json".as_ref(), dir.as_os_str()]);
        let v = v
            .json_lines()
            .into_iter()
            .find(|l| l["type"] == "partition")
            .expect("verify's partition line");
        let out = recover(&["--full".as_ref(), "--json".as_ref(), dir.as_os_str()]);
        assert_eq!(out.status, Status::Success, "{d:?}: {}", out.stderr);
        let r = out.json_lines().remove(0);
        for field in ["partition", "logStartOffset", "logEndOffset", "producers"] {
            assert_eq!(v[field], r[field], "{d:?}: {field}");
        }
        let cuts = |l: &serde_json::Value| -> Vec<(i64, i64, i64)> {
            l["cut"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["segment"].as_i64().unwrap(),
                        c["position"].as_i64().unwrap(),
                        c["bytes"].as_i64().unwrap(),
                    )
                })
                .collect()
        };
        assert_eq!(cuts(&v), cuts(&r), "{d:?}");
        assert_eq!(
            cuts(&r).is_empty(),
            !matches!(d, Some(Damage::FlippedByte | Damage::TornTail)),
            "{d:?}"
        );
    }
}

/// `dump`, `verify` and `recover` give the same position for the same damaged batch: dump's
/// valid prefix ends where verify says recovery would cut and where recover cuts.
#[test]
fn dump_verify_and_recover_agree_on_the_damaged_batch() {
    for d in [Damage::FlippedByte, Damage::TornTail] {
        let root = tempdir();
        let (dir, _) = build_partition(root.path(), "orders-0");
        let damaged = damage(&dir, d);
        let base: i64 = damaged
            .file
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let dumped = super::common::dump(&["--json".as_ref(), damaged.file.as_os_str()]);
        let summary = dumped.json_lines().pop().expect("dump summary");
        let dump_at = summary["validBytes"].as_i64().expect("validBytes");
        let v = verify(&["--json".as_ref(), dir.as_os_str()]);
        let cut = v
            .json_lines()
            .into_iter()
            .find(|l| l["kind"] == "cut")
            .expect("verify's cut");
        let out = recover(&["--json".as_ref(), dir.as_os_str()]);
        let r = &out.json_lines()[0]["cut"][0];
        assert_eq!(cut["detail"]["segment"], base, "{d:?}");
        assert_eq!(r["segment"], base, "{d:?}");
        assert_eq!(cut["detail"]["position"], dump_at, "{d:?}");
        assert_eq!(r["position"], dump_at, "{d:?}");
        if d == Damage::FlippedByte {
            assert_eq!(cut["detail"]["reason"]["kind"], summary["error"]["kind"]);
        }
    }
}

/// Twelve committed records mirrored into `<data>/mirror-0` (the log directory owned by the
/// caller's replication: `HighWatermark::Manual`), durable, then an unclean shutdown with a
/// stale `replication-offset-checkpoint` (4).
fn mirrored_with_a_stale_high_watermark(data: &Path) -> seglog::Config {
    use seglog::record_format::RecordBatchBuilder;
    let clock = std::sync::Arc::new(testkit::ManualClock::new(super::logs::T));
    let config = seglog::Config::default()
        .with_clock(clock)
        .with_high_watermark(seglog::HighWatermark::Manual);
    let log = seglog::Log::open(data.join("mirror-0"), config.clone()).unwrap();
    let source = log
        .with_partition(|p| seglog::recovery::EpochHistory::of(p))
        .unwrap();
    log.start_mirroring("cluster-A", &source).unwrap();
    for i in 0..6_i64 {
        let mut b = RecordBatchBuilder::new(i * 2)
            .partition_leader_epoch(2)
            .producer(11, 0, i32::try_from(i * 2).unwrap());
        b.append(super::logs::T, None, Some(b"m1"), &[]).unwrap();
        b.append(super::logs::T, None, Some(b"m2"), &[]).unwrap();
        log.append_as_mirror(&b.build()).unwrap();
    }
    log.set_high_watermark(12).unwrap();
    log.flush().unwrap();
    drop(log); // an unclean shutdown
    std::fs::write(
        data.join("replication-offset-checkpoint"),
        "0\n1\nmirror 0 4\n",
    )
    .unwrap();
    config
}

/// `seglog recover` of a log directory re-establishes no caller-owned high watermark (it
/// cannot know the caller's), so it must not write the stale one it loaded as if it were known:
/// it leaves the partition out of `replication-offset-checkpoint` while writing the
/// clean-shutdown marker, and the next open still does not know it, so a mirror stop refuses
/// instead of cutting the committed mirrored records 4..12. Before: `recover` wrote `mirror 0 4`
/// and the marker, the next open trusted 4 and the stop cut eight committed records.
#[test]
fn recover_does_not_launder_a_stale_caller_owned_high_watermark() {
    let root = tempdir();
    let data = root.path().join("data");
    let config = mirrored_with_a_stale_high_watermark(&data);

    let out = recover(&[data.as_os_str()]);
    assert_eq!(out.status, Status::Success, "{}", out.stderr);
    assert!(data.join(".kafka_cleanshutdown").exists());
    assert_eq!(
        std::fs::read_to_string(data.join("replication-offset-checkpoint")).unwrap(),
        "0\n0\n",
        "no entry for a high watermark nobody re-established"
    );

    let dir = seglog::LogDir::open(&data, config).unwrap();
    assert!(dir.had_clean_shutdown());
    let partition = dir
        .partition(&seglog::TopicPartition::new("mirror", 0))
        .unwrap();
    partition
        .with_partition(|log| {
            assert!(!log.high_watermark_known());
            let refused = log.stop_mirroring();
            assert!(
                matches!(
                    refused,
                    Err(seglog::recovery::MirrorError::HighWatermarkUnknown)
                ),
                "{refused:?}"
            );
            assert_eq!(log.log_end_offset(), 12, "nothing cut");
            log.set_high_watermark(12);
            assert_eq!(log.stop_mirroring().unwrap(), 12);
        })
        .unwrap();
}
