//! A log directory's clean close, crashed at every I/O point, with both ways of making the
//! partitions durable ([`CloseSync`]): whenever the clean-shutdown marker survives a crash, every
//! acknowledged batch of every partition survives with it (the next load trusts the marker and
//! recovers nothing).

use std::path::Path;
use std::sync::Arc;

use recovery::{load_log_dir, AppendOrigin, CloseSync, Config, LoadedLogDir};
use segment_store::{LogEnv, TopicPartition};
use testkit::{ManualClock, SimulatedFs, TornWrite};

use super::log::batch;

const PARTITIONS: i32 = 3;
const BATCHES: i32 = 4;

fn options(sim: &SimulatedFs, close_sync: CloseSync) -> Config {
    Config {
        recovery_threads: 2,
        env: LogEnv {
            storage: Arc::new(sim.clone()),
            clock: Arc::new(ManualClock::new(1_700_000_000_000)),
        },
        close_sync,
        ..Config::default()
    }
}

/// A log directory of [`PARTITIONS`] partitions, each holding [`BATCHES`] batches of 2 records,
/// none flushed.
fn filled(root: &Path, sim: &SimulatedFs, close_sync: CloseSync) -> LoadedLogDir {
    sim.create_durable_dir_all(root);
    for p in 0..PARTITIONS {
        sim.create_durable_dir_all(&root.join(format!("t-{p}")));
    }
    let mut ld = load_log_dir(root, &options(sim, close_sync)).unwrap();
    for p in 0..PARTITIONS {
        let log = ld.partitions.get_mut(&TopicPartition::new("t", p)).unwrap();
        for seq in 0..BATCHES {
            log.append_as_leader(
                &batch(7 + i64::from(p), 0, seq * 2, 2, false),
                0,
                AppendOrigin::Client,
            )
            .unwrap();
        }
    }
    ld
}

#[test]
fn a_crash_during_close_never_leaves_a_clean_marker_over_lost_batches() {
    for close_sync in [CloseSync::FileSystem, CloseSync::PerFile] {
        let mut clean_after_crash = 0;
        for n in 0.. {
            let root = tempfile::tempdir().unwrap();
            let sim = SimulatedFs::new();
            let ld = filled(root.path(), &sim, close_sync);
            sim.fail_after(n);
            let closed = ld.close().is_ok();
            sim.crash(TornWrite::None);
            let ld = load_log_dir(root.path(), &options(&sim, close_sync)).unwrap();
            if ld.had_clean_shutdown {
                clean_after_crash += 1;
                for p in 0..PARTITIONS {
                    let log = &ld.partitions[&TopicPartition::new("t", p)];
                    assert_eq!(
                        log.log_end_offset(),
                        i64::from(2 * BATCHES),
                        "{close_sync:?}, crash after {n} I/O points: the marker survived, \
                         partition {p}'s batches did not"
                    );
                }
            }
            if closed {
                assert!(
                    ld.had_clean_shutdown,
                    "{close_sync:?}: a close that returned Ok"
                );
                break;
            }
            assert!(n < 1_000, "{close_sync:?}: close never succeeded");
        }
        assert!(clean_after_crash > 0);
    }
}

#[test]
fn closing_with_one_file_system_sync_syncs_once_instead_of_per_file() {
    let mut syncs = Vec::new();
    for close_sync in [CloseSync::FileSystem, CloseSync::PerFile] {
        let root = tempfile::tempdir().unwrap();
        let sim = SimulatedFs::new();
        let ld = filled(root.path(), &sim, close_sync);
        let before = sim.stats().syncs;
        ld.close().unwrap();
        syncs.push(sim.stats().syncs - before);
    }
    // The atomic writes (producer snapshots, checkpoints, marker) sync alike both ways; per
    // file, each partition's `.log`, `.index` and `.timeindex` (on simulated storage the
    // indexes go through the seam; the flush is their map's `msync`) are synced, instead of one
    // sync of the file system.
    assert_eq!(
        syncs[1] - syncs[0],
        3 * u64::try_from(PARTITIONS).unwrap() - 1,
        "FileSystem {} syncs, PerFile {}",
        syncs[0],
        syncs[1]
    );
}
