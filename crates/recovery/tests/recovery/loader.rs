//! Loading partitions (Kafka `LogLoader`) and log directories (`LogManager`) from real files.
//!
//! Invariant under test: recovery never destroys data. An unclean load that meets a corrupt batch
//! keeps the valid prefix, and the bytes it cuts plus every later segment end up, byte for byte,
//! in `<partition>/quarantine/<n>/`; the report's numbers are exact; producer state equals a
//! live run over the kept prefix. Also: a clean reopen skips recovery, a corrupt newest snapshot
//! is set aside, `.swap`/`.cleaned`/`.deleted` leftovers are handled as Kafka does, and a log
//! directory of several partitions loads in parallel with one report each.

use std::path::{Path, PathBuf};

use record_format::{mirror_pid_reset_batch, Batches, FormatErrorKind};
use recovery::{
    consume, load_log_dir, AppendOrigin, Config, IsolationLevel, LoadOptions, LogLoader,
    PartitionLog, PartitionLogConfig, RecoveryReport,
};
use segment_store::{LogConfig, TopicPartition};

use super::common::logs_in;
use super::log::{all_batches, batch, open_with, reference_log, small_segments, ts};

pub(crate) const SEGMENT_BYTES: u64 = 400;

fn options(clean: bool) -> LoadOptions {
    LoadOptions {
        config: recovery::Config {
            log: PartitionLogConfig {
                log: small_segments(SEGMENT_BYTES),
                ..Default::default()
            },
            ..recovery::Config::default()
        },
        had_clean_shutdown: clean,
        ..Default::default()
    }
}

fn load(dir: &Path, clean: bool) -> (PartitionLog, RecoveryReport) {
    LogLoader::load(dir, &options(clean)).unwrap()
}

/// Twelve two-record appends from three producers, one transaction and a barrier, over segments
/// of at most 400 bytes.
pub(crate) fn build_log(dir: &Path) -> PartitionLog {
    let mut log = open_with(dir, small_segments(SEGMENT_BYTES));
    let mut seqs = [0i32; 4];
    for i in 0..12usize {
        if i == 6 {
            log.append_as_leader(
                &mirror_pid_reset_batch(0, ts(), 0, "src"),
                0,
                AppendOrigin::Coordinator,
            )
            .unwrap();
        }
        let pid = i % 3 + 1;
        let txn = pid == 3 && i == 11;
        log.append_as_leader(
            &batch(pid as i64, 0, seqs[pid], 2, txn),
            0,
            AppendOrigin::Client,
        )
        .unwrap();
        seqs[pid] += 2;
    }
    log
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn reopen_after_a_clean_close_skips_recovery_and_restores_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let entries = log.producer_state().snapshot_entries();
    let ongoing = log.producer_state().ongoing_txns().clone();
    let end = log.log_end_offset();
    log.close().unwrap();

    let (log, report) = load(dir.path(), true);
    assert!(report.had_clean_shutdown);
    assert_eq!(report.segments_scanned, 0);
    assert_eq!((report.batches_scanned, report.bytes_scanned), (0, 0));
    assert!(report.cut.is_empty() && report.quarantined_segments.is_empty());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.producer_state().snapshot_entries(), entries);
    assert_eq!(log.producer_state().ongoing_txns(), &ongoing);
    assert!(
        report.to_string().contains("clean shutdown, no recovery"),
        "{report}"
    );
    assert!(!dir.path().join("quarantine").exists());
}

#[test]
fn unclean_reopen_with_a_corrupt_middle_segment_keeps_the_prefix_and_quarantines_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let batches = all_batches(&log);
    let segments = log.local_log().segments().unwrap();
    assert!(segments.len() >= 4, "{segments:?}");
    log.close().unwrap();

    let path = |base: i64| dir.path().join(format!("{base:020}.log"));
    let originals: Vec<(i64, Vec<u8>)> = segments
        .iter()
        .map(|s| (s.base_offset, std::fs::read(path(s.base_offset)).unwrap()))
        .collect();
    // Corrupt one byte of the second batch of the middle segment.
    let (mid_base, mid) = &originals[1];
    let positions: Vec<(u64, i64)> = Batches::new(mid, 0)
        .map(|e| {
            let e = e.unwrap();
            (e.position(), e.last_offset())
        })
        .collect();
    assert!(positions.len() >= 2);
    let (cut_at, kept_last) = (positions[1].0, positions[0].1);
    let mut corrupted = mid.clone();
    corrupted[cut_at as usize + 70] ^= 0x55;
    std::fs::write(path(*mid_base), &corrupted).unwrap();
    let first_batches = Batches::new(&originals[0].1, 0).count() as u64;

    let (mut log, report) = load(dir.path(), false);
    assert!(!report.had_clean_shutdown);
    assert_eq!(report.segments_scanned, 2);
    assert_eq!(report.batches_scanned, first_batches + 1);
    assert_eq!(
        report.bytes_scanned,
        (originals[0].1.len() + mid.len()) as u64
    );
    assert_eq!(report.kept_bytes, originals[0].1.len() as u64 + cut_at);
    assert_eq!(report.log_end_offset, kept_last + 1);
    assert_eq!(log.log_end_offset(), kept_last + 1);
    assert_eq!(report.cut.len(), 1);
    let cut = &report.cut[0];
    assert_eq!((cut.segment, cut.position), (*mid_base, cut_at));
    assert_eq!(cut.bytes, mid.len() as u64 - cut_at);
    assert!(
        matches!(cut.reason.kind, FormatErrorKind::CrcMismatch { .. }),
        "{:?}",
        cut.reason
    );
    // Nothing destroyed: the cut bytes and the later segments, byte for byte.
    let qdir = report.quarantine_dir.clone().unwrap();
    assert!(qdir.starts_with(dir.path().join("quarantine")));
    assert_eq!(
        std::fs::read(&cut.quarantined_to).unwrap(),
        &corrupted[cut_at as usize..]
    );
    for (base, bytes) in &originals[2..] {
        let moved = qdir.join(format!("{base:020}.log"));
        assert!(report.quarantined_segments.contains(&moved), "{moved:?}");
        assert_eq!(&std::fs::read(&moved).unwrap(), bytes);
        assert!(!path(*base).exists());
    }
    assert_eq!(
        std::fs::read(path(*mid_base)).unwrap(),
        &corrupted[..cut_at as usize]
    );
    // Producer state equals a live run over the kept prefix.
    let r = tempfile::tempdir().unwrap();
    let reference = reference_log(r.path(), &batches, log.log_end_offset());
    assert_eq!(
        log.producer_state().snapshot_entries(),
        reference.producer_state().snapshot_entries()
    );
    assert_eq!(
        log.producer_state().ongoing_txns(),
        reference.producer_state().ongoing_txns()
    );
    assert_eq!(
        report.producers,
        reference.producer_state().active_producers().len()
    );
    assert!(report.to_string().contains("cut"), "{report}");
    // The log is usable: appends continue at the new end.
    let info = log
        .append_as_leader(&batch(77, 0, 0, 1, false), 0, AppendOrigin::Client)
        .unwrap();
    assert_eq!(info.first_offset, kept_last + 1);
    drop(log);
    // A second unclean load finds nothing to cut and keeps the first quarantine.
    let (_, again) = load(dir.path(), false);
    assert!(again.cut.is_empty() && again.quarantine_dir.is_none());
    assert!(qdir.exists());
}

#[test]
fn a_corrupt_newest_snapshot_is_set_aside_and_an_older_one_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let entries = log.producer_state().snapshot_entries();
    let end = log.log_end_offset();
    log.close().unwrap();
    let newest = dir.path().join(format!("{end:020}.snapshot"));
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&newest, &bytes).unwrap();

    let (log, report) = load(dir.path(), true);
    assert_eq!(report.snapshots_set_aside.len(), 1);
    let aside: &PathBuf = &report.snapshots_set_aside[0];
    assert!(aside.to_string_lossy().ends_with(".snapshot.corrupt"));
    assert_eq!(std::fs::read(aside).unwrap(), bytes);
    assert_eq!(log.producer_state().snapshot_entries(), entries);
    assert!(
        newest.exists(),
        "a fresh snapshot is written at the log end"
    );
}

#[test]
fn swap_cleaned_and_deleted_files_are_handled_as_kafka_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let segments = log.local_log().segments().unwrap();
    let batches = all_batches(&log);
    log.close().unwrap();
    let p = |name: String| dir.path().join(name);
    let (b0, b1) = (segments[0].base_offset, segments[1].base_offset);
    // Compaction output for segment 0: only its last batch survives.
    let seg0: Vec<&(i64, Vec<u8>)> = batches.iter().filter(|(l, _)| *l < b1).collect();
    let compacted = seg0.last().unwrap().1.clone();
    std::fs::write(p(format!("{b0:020}.log.swap")), &compacted).unwrap();
    // Leftovers: a deletion, an interrupted clean with a swap above it, an orphan index.
    std::fs::write(p(format!("{:020}.log.deleted", 5000)), b"junk").unwrap();
    std::fs::write(p(format!("{:020}.log.cleaned", 9000)), b"junk").unwrap();
    std::fs::write(p(format!("{:020}.log.swap", 9000)), b"junk").unwrap();
    std::fs::write(p(format!("{:020}.index", 7000)), [0u8; 8]).unwrap();

    let (log, report) = load(dir.path(), false);
    let names = files_in(dir.path());
    assert!(
        !names.iter().any(|n| n.ends_with(".deleted")
            || n.ends_with(".cleaned")
            || n.ends_with(".swap")
            || n.starts_with("00000000000000007000")),
        "{names:?}"
    );
    // 3 leftovers + the orphan index + segment 0's originals (.log, .index, .timeindex) in the
    // swapped range + the swap renamed into place.
    let handled: Vec<String> = report
        .temp_files_handled
        .iter()
        .map(|h| h.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(handled.len(), 8, "{handled:?}");
    for name in [
        format!("{b0:020}.log"),
        format!("{b0:020}.index"),
        format!("{b0:020}.log.swap"),
        format!("{:020}.index", 7000),
    ] {
        assert!(handled.contains(&name), "{name} in {handled:?}");
    }
    assert_eq!(
        std::fs::read(p(format!("{b0:020}.log"))).unwrap(),
        compacted
    );
    // The log reads the compacted segment, then the untouched rest.
    let mut log = log;
    log.set_high_watermark(i64::MAX);
    let fetch = log
        .read(0, 1 << 20, IsolationLevel::ReadUncommitted)
        .unwrap();
    let first = consume(&fetch).unwrap()[0].offset;
    assert_eq!(first, b1 - 2, "the last two records of segment 0");
    assert_eq!(log.log_end_offset(), batches.last().unwrap().0 + 1);
}

#[test]
fn a_log_directory_loads_partitions_in_parallel_and_round_trips_a_clean_shutdown() {
    let root = tempfile::tempdir().unwrap();
    let parts = [("t", 0), ("t", 1), ("u-v", 0)];
    let mut ends = Vec::new();
    for (topic, partition) in parts {
        let dir = root.path().join(format!("{topic}-{partition}"));
        let log = build_log(&dir);
        ends.push(log.log_end_offset());
        log.close().unwrap();
    }
    std::fs::create_dir(root.path().join("t-0.0123abc-delete")).unwrap();
    std::fs::create_dir(root.path().join("t-2.0123abc-future")).unwrap();
    // Corrupt the tail of u-v-0's last segment.
    let uv = root.path().join("u-v-0");
    let last_log = files_in(&uv)
        .into_iter()
        .rfind(|n| n.ends_with(".log"))
        .unwrap();
    let mut bytes = std::fs::read(uv.join(&last_log)).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0xff;
    std::fs::write(uv.join(&last_log), &bytes).unwrap();

    let opts = Config {
        recovery_threads: 2,
        log: PartitionLogConfig {
            log: LogConfig {
                segment_bytes: SEGMENT_BYTES,
                ..LogConfig::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    // No marker: unclean, no recovery points: every partition recovered from its start.
    let loaded = load_log_dir(root.path(), &opts).unwrap();
    assert!(!loaded.had_clean_shutdown);
    assert_eq!(loaded.skipped.len(), 2);
    let names: Vec<&str> = loaded
        .reports
        .iter()
        .map(|r| r.partition.as_str())
        .collect();
    assert_eq!(names, ["t-0", "t-1", "u-v-0"]);
    assert!(loaded.reports.iter().all(|r| r.segments_scanned >= 4));
    assert!(loaded.reports[0].cut.is_empty() && loaded.reports[1].cut.is_empty());
    assert_eq!(loaded.reports[2].cut.len(), 1);
    let tp = TopicPartition::new("u-v", 0);
    let uv_end = loaded.partitions[&tp].log_end_offset();
    assert!(uv_end < ends[2]);
    assert_eq!(
        loaded.partitions[&TopicPartition::new("t", 1)].log_end_offset(),
        ends[1]
    );
    loaded.close().unwrap();
    assert!(root.path().join(".kafka_cleanshutdown").exists());
    assert_eq!(
        std::fs::read_to_string(root.path().join("recovery-point-offset-checkpoint")).unwrap(),
        format!("0\n3\nt 0 {}\nt 1 {}\nu-v 0 {uv_end}\n", ends[0], ends[1])
    );

    // Clean: the marker is consumed at once and nothing is recovered.
    let loaded = load_log_dir(root.path(), &opts).unwrap();
    assert!(loaded.had_clean_shutdown);
    assert!(!root.path().join(".kafka_cleanshutdown").exists());
    assert!(loaded.reports.iter().all(|r| r.segments_scanned == 0));
    assert_eq!(loaded.partitions[&tp].log_end_offset(), uv_end);
    loaded.close().unwrap();

    // `full` ignores the marker and the recovery points.
    let full = Config {
        full_recovery: true,
        ..opts
    };
    let loaded = load_log_dir(root.path(), &full).unwrap();
    assert!(loaded.reports.iter().all(|r| r.segments_scanned >= 4));
    assert!(loaded.reports.iter().all(|r| r.cut.is_empty()));
}

/// Each file's name and bytes.
fn named_contents(paths: impl IntoIterator<Item = PathBuf>) -> Vec<(String, Vec<u8>)> {
    paths
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// A log start checkpoint above the log end (segment files lost or deleted behind the broker's
/// back): Kafka deletes every segment; we move them into the quarantine folder, byte for byte
/// (the active segment's indexes too, not with the room the opened log gave them), report them,
/// and start the log empty at the checkpointed offset.
#[test]
fn log_start_above_the_log_end_quarantines_every_segment_instead_of_deleting_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let end = log.log_end_offset();
    log.close().unwrap();
    let segment_files = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| {
                ["log", "index", "timeindex", "txnindex"].contains(&e.to_str().unwrap())
            })
        });
    let logs_before = named_contents(segment_files);
    assert!(logs_before.len() > 4, "{logs_before:?}");

    let start = end + 100;
    let opts = LoadOptions {
        log_start_offset: start,
        ..options(true)
    };
    let (log, report) = LogLoader::load(dir.path(), &opts).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (start, start)
    );
    assert_eq!(
        (report.log_start_offset, report.log_end_offset),
        (start, start)
    );
    assert!(log.producer_state().active_producers().is_empty());
    let qdir = report.quarantine_dir.clone().expect("a quarantine folder");
    for (name, bytes) in &logs_before {
        let moved = qdir.join(name);
        assert!(
            report.quarantined_segments.contains(&moved),
            "{name} not reported: {report:?}"
        );
        let got = std::fs::read(&moved).unwrap();
        assert!(
            &got == bytes,
            "{name}: {} bytes quarantined, {} found",
            got.len(),
            bytes.len()
        );
    }
    let left: Vec<PathBuf> = logs_in(dir.path());
    assert_eq!(left, [dir.path().join(format!("{start:020}.log"))]);
    log.close().unwrap();
}

/// A stray `.log.swap` (not a cleaner's completed output) is moved into the quarantine folder
/// under its own name, byte for byte, and reported; the live `.log` it would replace stays, and
/// the log end with it. Two strays: one without a single valid batch, and one CRC-valid batch
/// (the segment's first) that falls short of the segment's offsets, which Kafka's rule would
/// rename over the segment, dropping its later records.
#[test]
fn a_stray_swap_moves_to_quarantine_and_the_log_it_would_replace_stays() {
    for valid_batch in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = build_log(dir.path());
        let end = log.log_end_offset();
        let segments = log.local_log().segments().unwrap();
        let batches = all_batches(&log);
        log.close().unwrap();
        let logs = logs_in(dir.path());
        assert!(logs.len() > 2, "{logs:?}");
        let live = logs[1].clone();
        let original = std::fs::read(&live).unwrap();
        let (b1, b2) = (segments[1].base_offset, segments[2].base_offset);
        let mut swap = live.clone().into_os_string();
        swap.push(".swap");
        let swap_bytes = if valid_batch {
            let first = batches.iter().find(|(l, _)| *l >= b1).unwrap();
            assert!(
                first.0 + 1 < b2,
                "the segment holds more than its first batch"
            );
            first.1.clone()
        } else {
            vec![0u8, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 7]
        };
        std::fs::write(&swap, &swap_bytes).unwrap();

        let (log, report) = load(dir.path(), false);
        let qdir = report.quarantine_dir.clone().expect("a quarantine folder");
        let moved = qdir.join(std::path::Path::new(&swap).file_name().unwrap());
        assert_eq!(
            report.quarantined_segments,
            std::slice::from_ref(&moved),
            "{report:?}"
        );
        assert_eq!(std::fs::read(&moved).unwrap(), swap_bytes);
        assert!(report.temp_files_handled.is_empty(), "{report:?}");
        assert!(!std::path::Path::new(&swap).exists());
        assert_eq!(
            std::fs::read(&live).unwrap(),
            original,
            "the live log stays"
        );
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(report.log_end_offset, end);
        log.close().unwrap();
    }
}

/// A full recovery writes the snapshot Kafka takes after each recovered segment (named after the
/// next segment's base), byte for byte what the live log wrote when it rolled there.
#[test]
fn full_recovery_rewrites_the_per_segment_snapshots_the_live_log_took() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let end = log.log_end_offset();
    log.close().unwrap();
    let snapshots = |dir: &Path| {
        let mut v = named_contents(
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "snapshot")),
        );
        v.sort();
        v
    };
    let live = snapshots(dir.path());
    let bases: Vec<String> = logs_in(dir.path())
        .iter()
        .skip(1)
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned() + ".snapshot")
        .collect();
    assert!(bases.len() > 2, "{bases:?}");
    for (name, _) in &live {
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    let mut opts = options(false);
    opts.config.full_recovery = true;
    let (log, report) = LogLoader::load(dir.path(), &opts).unwrap();
    assert!(report.cut.is_empty(), "{report}");
    let recovered = snapshots(dir.path());
    for base in &bases {
        let want = live.iter().find(|(n, _)| n == base).expect("live snapshot");
        let got = recovered.iter().find(|(n, _)| n == base);
        assert_eq!(got, Some(want), "{base}");
    }
    // And the one at the log end.
    let at_end = format!("{end:020}.snapshot");
    assert!(recovered.iter().any(|(n, _)| *n == at_end), "{recovered:?}");
    log.close().unwrap();
}

/// A partition whose middle segment is cut at its second batch: the directory, the cut's
/// position and the corrupted `.log`.
fn cut_partition(dir: &Path) -> (i64, u64, Vec<u8>) {
    let log = build_log(dir);
    let mid_base = log.local_log().segments().unwrap()[1].base_offset;
    log.close().unwrap();
    let path = dir.join(format!("{mid_base:020}.log"));
    let mut bytes = std::fs::read(&path).unwrap();
    let cut_at = Batches::new(&bytes, 0).nth(1).unwrap().unwrap().position();
    bytes[cut_at as usize + 70] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    (mid_base, cut_at, bytes)
}

/// Quarantine folders are numbered one above the largest; at `u64::MAX` the numbering does not
/// wrap or stop there (writing into the folder an earlier recovery filled), it takes a number no
/// folder has.
#[test]
fn quarantine_numbering_at_u64_max_takes_an_unused_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (mid_base, cut_at, bytes) = cut_partition(dir.path());
    let root = dir.path().join("quarantine");
    let last = root.join(u64::MAX.to_string());
    std::fs::create_dir_all(&last).unwrap();
    std::fs::create_dir_all(root.join("0001")).unwrap();
    // An earlier cut of the same segment at the same position, in the last folder.
    let older = last.join(segment_store::internals::quarantine_file_name(
        mid_base, cut_at,
    ));
    std::fs::write(&older, b"an older cut").unwrap();

    let (_log, report) = load(dir.path(), false);
    let qdir = report.quarantine_dir.clone().expect("a quarantine folder");
    assert_eq!(qdir, root.join("0002"));
    assert_eq!(report.cut.len(), 1);
    assert!(report.cut[0].quarantined_to.starts_with(&qdir));
    assert_eq!(
        std::fs::read(&report.cut[0].quarantined_to).unwrap(),
        &bytes[cut_at as usize..]
    );
    assert_eq!(std::fs::read(&older).unwrap(), b"an older cut");
    assert_eq!(
        files_in(&last),
        vec![older.file_name().unwrap().to_str().unwrap().to_owned()]
    );
}

/// A plan names a new quarantine folder; if one of that name appears before the plan is applied,
/// recovery takes another number (the report says which) and leaves that folder as it was.
#[test]
fn a_quarantine_folder_that_appeared_since_the_plan_is_not_written_into() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cut_at, bytes) = cut_partition(dir.path());
    let plan = LogLoader::plan(dir.path(), &options(false)).unwrap();
    let planned = plan.quarantine_dir.clone();
    std::fs::create_dir_all(&planned).unwrap();
    std::fs::write(planned.join("someone else's"), b"x").unwrap();

    let (_log, report) = LogLoader::apply(plan).unwrap();
    let qdir = report.quarantine_dir.clone().expect("a quarantine folder");
    assert_ne!(qdir, planned);
    assert!(qdir.starts_with(dir.path().join("quarantine")));
    assert_eq!(files_in(&planned), vec!["someone else's".to_owned()]);
    let cut = &report.cut[0];
    assert!(cut.quarantined_to.starts_with(&qdir), "{cut:?}");
    assert_eq!(
        std::fs::read(&cut.quarantined_to).unwrap(),
        &bytes[cut_at as usize..]
    );
    for moved in &report.quarantined_segments {
        assert!(moved.starts_with(&qdir) && moved.exists(), "{moved:?}");
    }
}

/// A segment's `.index` and `.timeindex` deleted after a clean shutdown: the planner finds both
/// missing (Kafka's `LogSegment.sanityCheck` throws `NoSuchFileException` for the offset index
/// and the segment is recovered) and recovery rebuilds them, byte for byte what the live log
/// wrote, although the segment is below the recovery point; offset-for-timestamp then answers as
/// it did before the files went.
#[test]
fn missing_indexes_of_a_segment_are_rebuilt_after_a_clean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let log = build_log(dir.path());
    let segments = log.local_log().segments().unwrap();
    assert!(segments.len() > 2);
    let want = log
        .local_log()
        .fetch_offset_by_timestamp(ts())
        .unwrap()
        .map(|t| t.offset);
    assert_eq!(want, Some(0));
    log.close().unwrap();
    let p = |name: String| dir.path().join(name);
    let index = p(format!("{:020}.index", 0));
    let time = p(format!("{:020}.timeindex", 0));
    let (index_bytes, time_bytes) = (
        std::fs::read(&index).unwrap(),
        std::fs::read(&time).unwrap(),
    );
    assert!(!index_bytes.is_empty() && !time_bytes.is_empty());
    std::fs::remove_file(&index).unwrap();
    std::fs::remove_file(&time).unwrap();

    let plan = LogLoader::plan(dir.path(), &options(true)).unwrap();
    let findings: Vec<String> = plan.segments[0]
        .index_findings
        .iter()
        .map(|f| format!("{:?} {:?}", f.kind, f.problem))
        .collect();
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert!(
        findings.iter().all(|f| f.contains("Missing")),
        "{findings:?}"
    );

    let (log, report) = load(dir.path(), true);
    assert_eq!(report.recovered_from, Some(0), "{report:?}");
    assert_eq!(std::fs::read(&index).unwrap(), index_bytes);
    assert_eq!(std::fs::read(&time).unwrap(), time_bytes);
    let got = log
        .local_log()
        .fetch_offset_by_timestamp(ts())
        .unwrap()
        .map(|t| t.offset);
    assert_eq!(got, want);
    log.close().unwrap();
}
