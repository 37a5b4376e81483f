//! `testkit::crash_test_fn` on workloads that use the storage seam directly: two deliberately
//! wrong ones that only the weak crash model catches, their correct counterparts, and a
//! workload whose I/O order changes between runs (refused).

use std::cell::Cell;
use std::error::Error;

use segment_store::internals::write_atomically;
use segment_store::OpenMode;
use testkit::{crash_test_fn, CrashEnv, CrashFnError, CrashModel, FnOptions, Recovered, WeakModel};

fn options(model: CrashModel) -> FnOptions {
    FnOptions {
        model,
        ..FnOptions::default()
    }
}

fn weak_model() -> CrashModel {
    CrashModel::Weak(WeakModel::default())
}

/// Replaces `state` ("old") with "new!" by writing `state.tmp` and renaming it over, with an
/// fsync of the temporary file first only if `fsync` (and never a sync of the directory).
fn replace(env: &CrashEnv, fsync: bool) -> Result<(), Box<dyn Error>> {
    let storage = env.storage();
    let state = env.root().join("state");
    write_atomically(storage.as_ref(), &state, b"old")?;
    env.ack("state", "old");
    let tmp = env.root().join("state.tmp");
    let f = storage.open(&tmp, OpenMode::CreateTruncate)?;
    f.write_at(0, b"new!")?;
    if fsync {
        f.sync_all()?;
    }
    storage.rename(&tmp, &state)?;
    Ok(())
}

/// Once "old" was acknowledged, `state` holds the old or the new content, never anything else.
fn old_or_new(r: &Recovered<'_>) -> Result<(), Box<dyn Error>> {
    if r.acked_for("state").is_empty() {
        return Ok(());
    }
    let got = r.storage().read(&r.root().join("state"))?;
    if got != b"old" && got != b"new!" {
        return Err(format!("state holds {got:?}, neither the old nor the new content").into());
    }
    Ok(())
}

#[test]
fn a_rename_over_a_file_whose_data_was_never_fsynced_is_caught_only_by_the_weak_model() {
    let today = crash_test_fn(
        &options(CrashModel::Today),
        |e| replace(e, false),
        old_or_new,
    )
    .expect("testable");
    assert!(today.crash_points >= 5, "{today}");
    assert!(today.violations.is_empty(), "{:?}", today.violations);

    let weak =
        crash_test_fn(&options(weak_model()), |e| replace(e, false), old_or_new).expect("testable");
    assert!(
        weak.states_explored > today.states_explored,
        "{weak} / {today}"
    );
    assert!(
        weak.violations
            .iter()
            .any(|v| v.contains("neither the old nor the new")),
        "{weak}: {:?}",
        weak.violations
    );

    // With the fsync before the rename, the weak model finds nothing either.
    let fixed =
        crash_test_fn(&options(weak_model()), |e| replace(e, true), old_or_new).expect("testable");
    assert!(fixed.violations.is_empty(), "{:?}", fixed.violations);
}

/// Writes and syncs "ABCD", then appends "EFGH" and acknowledges the new size (a reader is told
/// 8 bytes are there) without syncing it.
fn grow(env: &CrashEnv) -> Result<(), Box<dyn Error>> {
    let storage = env.storage();
    let path = env.root().join("data");
    let f = storage.open(&path, OpenMode::Create)?;
    f.write_at(0, b"ABCD")?;
    f.sync_all()?;
    storage.sync_dir(env.root())?;
    env.ack("len", "4");
    f.write_at(4, b"EFGH")?;
    env.ack("len", "8");
    Ok(())
}

/// A reader that trusts the size: the file holds a prefix of what was written.
fn trusts_the_size(r: &Recovered<'_>) -> Result<(), Box<dyn Error>> {
    check_data(r, false)
}

/// A reader that does not: a zero tail is where nothing was written (as seglog's CRC check
/// cuts a zero-filled tail).
fn cuts_a_zero_tail(r: &Recovered<'_>) -> Result<(), Box<dyn Error>> {
    check_data(r, true)
}

fn check_data(r: &Recovered<'_>, cut_zeros: bool) -> Result<(), Box<dyn Error>> {
    let path = r.root().join("data");
    if !r.storage().exists(&path)? {
        return Ok(());
    }
    let mut got = r.storage().read(&path)?;
    if cut_zeros {
        while got.last() == Some(&0) {
            got.pop();
        }
    }
    if !b"ABCDEFGH".starts_with(&got) {
        return Err(format!("data holds {got:?}: a size without its data").into());
    }
    if !r.acked_for("len").is_empty() && got.len() < 4 {
        return Err(format!("data holds {got:?}: synced bytes lost").into());
    }
    Ok(())
}

#[test]
fn a_size_extended_and_acknowledged_before_its_data_was_synced_is_caught_only_by_the_weak_model() {
    let today =
        crash_test_fn(&options(CrashModel::Today), grow, trusts_the_size).expect("testable");
    assert!(today.violations.is_empty(), "{:?}", today.violations);

    let weak = crash_test_fn(&options(weak_model()), grow, trusts_the_size).expect("testable");
    assert!(
        weak.violations
            .iter()
            .any(|v| v.contains("a size without its data")),
        "{weak}: {:?}",
        weak.violations
    );

    // A reader that does not trust the size finds nothing under the weak model either.
    let fixed = crash_test_fn(&options(weak_model()), grow, cuts_a_zero_tail).expect("testable");
    assert!(fixed.violations.is_empty(), "{:?}", fixed.violations);
}

#[test]
fn a_workload_whose_io_order_changes_between_runs_is_refused() {
    let runs = Cell::new(0u32);
    let racing = |env: &CrashEnv| -> Result<(), Box<dyn Error>> {
        // Stands for threads that reach the seam in a different order in each run.
        runs.set(runs.get() + 1);
        let name = if runs.get().is_multiple_of(2) {
            "a"
        } else {
            "b"
        };
        write_atomically(env.storage().as_ref(), &env.root().join(name), b"x")?;
        Ok(())
    };
    let err = crash_test_fn(&FnOptions::default(), racing, |_| Ok(())).unwrap_err();
    assert!(
        matches!(err, CrashFnError::Nondeterministic { point: 0, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("not in a deterministic order"),
        "{err}"
    );
}

#[test]
fn a_workload_that_fails_without_a_crash_is_refused() {
    let err = crash_test_fn(&FnOptions::default(), |_| Err("no".into()), |_| Ok(())).unwrap_err();
    assert_eq!(err, CrashFnError::Workload("no".to_owned()));
}

/// A partition created in a new folder, appended to and flushed: under the weak model the flushed
/// batch survives every crash after the flush returned (the folder's name is synced into its
/// parent when it is created, before anything inside can be reported durable).
#[test]
fn a_flushed_batch_of_a_new_partition_folder_survives_under_the_weak_model() {
    use recovery::{AppendOrigin, LoadOptions, LogLoader};
    use segment_store::{Clock, LogEnv};

    let workload = |env: &CrashEnv| -> Result<(), Box<dyn Error>> {
        let dir = env.root().join("logs").join("t-0");
        let opts = LoadOptions {
            config: recovery::Config {
                env: LogEnv {
                    storage: env.storage(),
                    clock: env.clock() as std::sync::Arc<dyn Clock>,
                },
                ..recovery::Config::default()
            },
            ..LoadOptions::default()
        };
        let (mut log, _) = LogLoader::load(&dir, &opts)?;
        let b = testkit::client_batch(1, 0, 2, false)?;
        log.append_as_leader(&b, 0, AppendOrigin::Client)?;
        log.flush()?;
        env.ack("t-0", b);
        Ok(())
    };
    let check = |r: &Recovered<'_>| -> Result<(), Box<dyn Error>> {
        if r.acked_for("t-0").is_empty() {
            return Ok(());
        }
        let log = r.root().join("logs/t-0/00000000000000000000.log");
        if !r.storage().exists(&log)? {
            return Err("the flushed partition's log is gone".into());
        }
        Ok(())
    };
    let sum = crash_test_fn(&options(weak_model()), workload, check).expect("testable");
    assert!(sum.crash_points > 3 && sum.partitions_checked > 0, "{sum}");
    assert!(sum.violations.is_empty(), "{:?}", sum.violations);
}

/// A partition on a fresh `SimulatedFs` under `root` (an index entry per batch, 4 KiB indexes)
/// with six one-record batches of producer 1 appended and flushed.
fn six_batches_flushed(
    root: &str,
) -> (
    testkit::SimulatedFs,
    std::path::PathBuf,
    recovery::PartitionLog,
) {
    use recovery::{AppendOrigin, LoadOptions, LogLoader, PartitionLogConfig};
    use segment_store::{Clock, LogConfig, LogEnv};
    use std::sync::Arc;

    let sim = testkit::SimulatedFs::new();
    let root = std::path::PathBuf::from(root);
    sim.create_durable_dir_all(&root);
    let dir = root.join("t-0");
    let opts = LoadOptions {
        config: recovery::Config {
            log: PartitionLogConfig {
                log: LogConfig {
                    index_interval_bytes: 1,
                    max_index_size: 4096,
                    ..LogConfig::default()
                },
                ..PartitionLogConfig::default()
            },
            env: LogEnv {
                storage: Arc::new(sim.clone()),
                clock: Arc::new(testkit::ManualClock::new(testkit::TIMESTAMP)) as Arc<dyn Clock>,
            },
            ..recovery::Config::default()
        },
        ..LoadOptions::default()
    };
    let (mut log, _) = LogLoader::load(&dir, &opts).expect("load");
    for seq in 0..6 {
        let b = testkit::client_batch(1, seq, 1, false).expect("batch");
        log.append_as_leader(&b, 0, AppendOrigin::Client)
            .expect("append");
    }
    log.flush().expect("flush");
    (sim, dir, log)
}

/// A segment that a roll makes inactive has its trimmed indexes durable at once: otherwise, once
/// the recovery point is past it (it is then trusted after a crash), its `.index` could come back
/// with its preallocated length, and with it the bytes of entries a truncation removed (the
/// weak crash model found such a stale entry surviving recovery).
#[test]
fn a_rolled_segment_s_trimmed_indexes_are_durable_at_the_roll() {
    let (sim, dir, mut log) = six_batches_flushed("/sim/trim");
    // A truncation leaves the removed entries' bytes in the preallocated file; two more
    // batches, flushed; then the roll trims the index to its three entries.
    log.truncate_to(3).expect("truncate");
    for seq in 3..5 {
        let b = testkit::client_batch(1, seq, 1, false).expect("batch");
        log.append_as_leader(&b, 0, recovery::AppendOrigin::Client)
            .expect("append");
    }
    log.flush().expect("flush");
    log.roll().expect("roll");
    let trimmed = log
        .local_log()
        .with_segments(|segs| {
            segs.next()
                .and_then(|s| s.ok())
                .map(|s| (s.offset_index().size_in_bytes(), s.offset_index().entries()))
        })
        .expect("segments")
        .expect("segment 0");
    assert!(trimmed.1 >= 3, "{trimmed:?}");
    let image = sim.durable_state();
    let index = image
        .files
        .get(&dir.join("00000000000000000000.index"))
        .expect("the rolled segment's index");
    assert_eq!(
        index.len(),
        trimmed.0,
        "the durable .index of the rolled segment is {} bytes, not its {} entries",
        index.len(),
        trimmed.1
    );
}

/// The same with no entry left: a truncation below the first index entry, then a roll. The trim
/// to an empty file is synced too (a sync of an empty index is still an `fdatasync` of its
/// length), so no entry of the truncated past comes back with the preallocated length.
#[test]
fn a_rolled_segment_s_index_trimmed_to_no_entry_is_durable_at_the_roll() {
    let (sim, dir, mut log) = six_batches_flushed("/sim/trim-empty");
    let durable = sim.durable_state();
    let before = &durable.files[&dir.join("00000000000000000000.index")];
    assert!(
        before.iter().any(|&b| b != 0),
        "the flushed .index holds entries"
    );
    // The first batch has no entry (Kafka indexes a batch once more than the interval was
    // written since the last entry): truncating to offset 1 leaves none.
    log.truncate_to(1).expect("truncate");
    log.roll().expect("roll");
    let entries = log
        .local_log()
        .with_segments(|segs| {
            segs.next()
                .and_then(|s| s.ok())
                .map(|s| s.offset_index().entries())
        })
        .expect("segments")
        .expect("segment 0");
    assert_eq!(entries, 0);
    let image = sim.durable_state();
    let index = &image.files[&dir.join("00000000000000000000.index")];
    assert!(
        index.is_empty(),
        "the durable .index of the rolled segment is {} bytes, {} of them not zero",
        index.len(),
        index.iter().filter(|&&b| b != 0).count()
    );
}

/// Deleted producer snapshots stay deleted across a crash before any later change: a crash
/// that kept the deletion of a newer snapshot (a truncation deletes the one at the log start)
/// but not those of older ones (retention deleted them just before) would load an older
/// snapshot whose producers the deleted segments had moved on from (the weak crash model found
/// it: `seglog crash-test --iterations 1 --seed 234 --model weak`).
#[test]
fn deleted_snapshots_are_durably_gone_before_the_next_change() {
    use recovery::internals::delete_snapshots_before_with;
    use recovery::StorageIo;
    use std::sync::Arc;

    let sim = testkit::SimulatedFs::new();
    let dir = std::path::PathBuf::from("/sim/snapshots/t-0");
    sim.create_durable_dir_all(&dir);
    let storage: Arc<dyn segment_store::Storage> = Arc::new(sim.clone());
    let name = |o: i64| dir.join(format!("{o:020}.snapshot"));
    for o in [5, 11, 17] {
        write_atomically(storage.as_ref(), &name(o), b"snapshot bytes").expect("write");
    }
    let deleted = delete_snapshots_before_with(&StorageIo::new(storage), &dir, 17).expect("delete");
    assert_eq!(deleted.len(), 2);
    let image = sim.durable_state();
    for o in [5, 11] {
        assert!(
            !image.files.contains_key(&name(o)),
            "snapshot {o} comes back after a crash"
        );
    }
    assert!(image.files.contains_key(&name(17)));
}
