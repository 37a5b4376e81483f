//! Retention and the storage seam of the partition log.
//!
//! * `delete_old_segments` (Kafka `deleteOldSegments`) deletes by size and time, never past the
//!   high watermark, moves the log start to the first segment left, trims the leader-epoch cache,
//!   and keeps the producer snapshot at the new log start, so a reload still knows the producers
//!   of the deleted segments; when every segment goes, the new empty one gets its snapshot first.
//! * `delete_records_before` (Kafka `deleteRecords`) moves the log start inside a segment, never
//!   past the high watermark; the segments wholly below it go at the next retention.
//! * Every file of a partition log on a `SimulatedFs` (snapshots, `mirror-state`, quarantined
//!   bytes and their folders) exists only in the simulation, and survives a crash when the API
//!   said it was written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use recovery::internals::{list_snapshots, list_snapshots_with};
use recovery::{
    AppendOrigin, IsolationLevel, LoadOptions, LogLoader, MirrorPartitionState, MirrorStateStore,
    PartitionLog, PartitionLogConfig, PartitionLogError, StorageIo,
};
use segment_store::{LogConfig, LogEnv, OpenMode, StdFs, Storage};
use testkit::files_around_the_seam;
use testkit::{ManualClock, SimulatedFs, TornWrite};

use crate::log::{batch, small_segments, ts};

fn env(storage: Arc<dyn Storage>, clock: &Arc<ManualClock>) -> LogEnv {
    LogEnv {
        storage,
        clock: Arc::clone(clock) as Arc<dyn segment_store::Clock>,
    }
}

fn load(dir: &Path, log: LogConfig, env: LogEnv, clean: bool) -> PartitionLog {
    let opts = LoadOptions {
        config: recovery::Config {
            log: PartitionLogConfig {
                log,
                ..Default::default()
            },
            env,
            ..recovery::Config::default()
        },
        had_clean_shutdown: clean,
        ..Default::default()
    };
    LogLoader::load(dir, &opts).unwrap().0
}

/// Appends `n` one-record batches of producer 1 (sequences from 0), the `i`-th at leader epoch
/// `i / 2`. Returns the segment bases.
fn fill(log: &mut PartitionLog, n: i32) -> Vec<i64> {
    for seq in 0..n {
        log.append_as_leader(&batch(1, 0, seq, 1, false), seq / 2, AppendOrigin::Client)
            .unwrap();
    }
    log.local_log()
        .segments()
        .unwrap()
        .iter()
        .map(|s| s.base_offset)
        .collect()
}

fn snapshot_offsets(dir: &Path) -> Vec<i64> {
    list_snapshots(dir)
        .unwrap()
        .iter()
        .map(|s| s.offset)
        .collect()
}

fn last_seq(log: &PartitionLog, pid: i64) -> Option<i32> {
    log.producer_state().last_entry(pid).map(|e| e.last_seq())
}

#[test]
fn size_retention_stops_at_the_high_watermark_and_keeps_the_snapshot_at_the_new_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(ts()));
    let config = LogConfig {
        retention_bytes: 1,
        ..small_segments(150)
    };
    let e = env(Arc::new(StdFs), &clock);
    let mut log = load(dir.path(), config.clone(), e.clone(), false);
    let bases = fill(&mut log, 10);
    assert!(bases.len() >= 5, "{bases:?}");
    // Nothing is deleted above the high watermark (here the log start).
    assert_eq!(log.delete_old_segments().unwrap(), 0);
    log.set_high_watermark(bases[3]);
    assert_eq!(log.delete_old_segments().unwrap(), 3);
    assert_eq!(log.log_start_offset(), bases[3]);
    let snaps = snapshot_offsets(dir.path());
    assert_eq!(snaps.first(), Some(&bases[3]), "{snaps:?}");
    for b in &bases[..3] {
        assert!(!dir.path().join(format!("{b:020}.log")).exists());
    }
    let leftovers = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".deleted"))
            .collect()
    };
    // The deleted segments' files wait `file.delete.delay.ms` as `.deleted`, then the next
    // retention pass removes them.
    for b in &bases[..3] {
        assert!(dir.path().join(format!("{b:020}.log.deleted")).exists());
    }
    clock.advance(config.file_delete_delay_ms);
    assert_eq!(log.delete_old_segments().unwrap(), 0);
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    let first_epoch = log.leader_epoch_cache().earliest_entry().unwrap();
    assert_eq!(first_epoch.start_offset, bases[3]);
    assert!(matches!(
        log.read(0, 1 << 20, IsolationLevel::ReadUncommitted),
        Err(PartitionLogError::OffsetOutOfRange { .. })
    ));
    drop(log);
    // Recovering everything starts from the snapshot at the log start: producer 1 is known.
    let log = load(dir.path(), config, e, false);
    assert_eq!(log.log_start_offset(), bases[3]);
    assert_eq!(last_seq(&log, 1), Some(9));
}

#[test]
fn time_retention_of_every_segment_rolls_a_new_one_that_keeps_the_producers() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(ts()));
    let config = LogConfig {
        retention_ms: 1_000,
        ..small_segments(150)
    };
    let e = env(Arc::new(StdFs), &clock);
    let mut log = load(dir.path(), config.clone(), e.clone(), false);
    let bases = fill(&mut log, 4);
    log.set_high_watermark(i64::MAX);
    assert_eq!(log.delete_old_segments().unwrap(), 0, "nothing is old yet");
    clock.advance(1_001);
    assert_eq!(log.delete_old_segments().unwrap(), bases.len());
    let end = log.log_end_offset();
    assert_eq!((log.log_start_offset(), end), (4, 4));
    let segments = log.local_log().segments().unwrap();
    assert_eq!(segments.len(), 1);
    assert_eq!((segments[0].base_offset, segments[0].size), (end, 0));
    assert_eq!(snapshot_offsets(dir.path()), vec![end]);
    drop(log);
    let log = load(dir.path(), config, e, false);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (end, end));
    assert_eq!(
        last_seq(&log, 1),
        Some(3),
        "the roll's snapshot keeps producer 1"
    );
}

#[test]
fn delete_records_moves_the_log_start_up_to_the_high_watermark_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(ts()));
    let config = small_segments(150);
    let mut log = load(dir.path(), config, env(Arc::new(StdFs), &clock), false);
    let bases = fill(&mut log, 8);
    assert!(bases.len() >= 4 && bases[2] + 1 < bases[3], "{bases:?}");
    let inside = bases[2] + 1;
    log.set_high_watermark(inside - 1);
    assert!(matches!(
        log.delete_records_before(inside),
        Err(PartitionLogError::OffsetOutOfRange { offset, .. }) if offset == inside
    ));
    assert_eq!(log.log_start_offset(), 0);
    log.set_high_watermark(i64::MAX);
    assert!(log.delete_records_before(inside).unwrap());
    assert!(!log.delete_records_before(1).unwrap(), "never lowered");
    assert_eq!(log.log_start_offset(), inside);
    assert_eq!(
        log.local_log().segments().unwrap().len(),
        bases.len(),
        "not yet"
    );
    assert!(log
        .read(inside - 1, 1 << 20, IsolationLevel::ReadUncommitted)
        .is_err());
    assert_eq!(log.delete_old_segments().unwrap(), 2);
    assert_eq!(log.local_log().segments().unwrap()[0].base_offset, bases[2]);
    // The snapshot at the first segment left stays, though it is below the log start.
    assert_eq!(snapshot_offsets(dir.path()).first(), Some(&bases[2]));
    assert_eq!(log.log_start_offset(), inside);
}

#[test]
fn snapshots_mirror_state_and_quarantine_exist_only_behind_the_seam_and_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let sim = SimulatedFs::new();
    sim.create_durable_dir_all(&dir);
    let clock = Arc::new(ManualClock::new(ts()));
    let e = env(Arc::new(sim.clone()), &clock);
    let config = small_segments(150);
    let mut log = load(&dir, config.clone(), e.clone(), false);
    let bases = fill(&mut log, 3);
    assert!(bases.len() >= 2, "{bases:?}");
    let explicit = log.take_producer_snapshot().unwrap().unwrap();
    let mut state = log.mirror_state_file();
    state
        .store(&MirrorPartitionState::Stopped {
            barrier_offset: 1,
            last_mirror_epoch: 0,
        })
        .unwrap();
    let live = sim.live_image();
    assert!(live.contains_key(&explicit));
    assert!(live.contains_key(&dir.join("mirror-state")));
    assert_eq!(files_around_the_seam(&dir), Vec::<PathBuf>::new());
    drop(log);

    // Everything written atomically survives; the unflushed tail of the last segment does not.
    let image = sim.crash(TornWrite::None);
    let snaps = list_snapshots_with(&StorageIo::new(Arc::new(sim.clone())), &dir).unwrap();
    assert_eq!(snaps.last().map(|s| s.path.clone()), Some(explicit));
    assert!(image.contains_key(&dir.join("mirror-state")));
    assert_eq!(
        state.load().unwrap(),
        MirrorPartitionState::Stopped {
            barrier_offset: 1,
            last_mirror_epoch: 0,
        }
    );

    // Damage the first segment's tail: recovery quarantines it, durably, inside the simulation.
    let first = dir.join(format!("{:020}.log", bases[0]));
    let h = sim.open(&first, OpenMode::ReadWrite).unwrap();
    let len = h.len().unwrap();
    h.write_at(len - 3, b"xyz").unwrap();
    h.sync_all().unwrap();
    drop(h);
    let log = load(&dir, config, e, false);
    assert!(log.log_end_offset() < 3);
    drop(log);
    let image = sim.crash(TornWrite::None);
    let quarantined: Vec<&PathBuf> = image
        .keys()
        .filter(|p| p.starts_with(dir.join("quarantine")))
        .collect();
    assert!(
        quarantined
            .iter()
            .any(|p| p.to_string_lossy().contains(".log.cut-")),
        "{quarantined:?}"
    );
    assert_eq!(files_around_the_seam(&dir), Vec::<PathBuf>::new());
}
